"""Project analysis: facts joined across modules (ddplint/screen/project.py), the
project root (ddplint/discovery.py: find_project_root) and the engine's entry
points (ddplint/engine.py: lint_paths, lint_document).

The multi-module fixtures (fixtures/project_bad/, fixtures/project_good/) are
checked by tests/test_fixtures.py; here: named files and folders agree, one-file
projects, import resolution, the worker-process path, and the summaries' size.
"""

import json
import pickle
from pathlib import Path

import pytest

from ddplint.config import Settings
from ddplint.discovery import find_project_root, module_key
from ddplint.engine import Linter, lint_document, lint_files, lint_paths
from ddplint.screen.facts import GLOBAL_RANK, LOCAL_RANK, summarize
from ddplint.screen.project import Project
from tests.helpers import run_cli, write

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PROJECT_RULES = ("DDP008", "DDP010", "DDP011", "DDP012", "DDP015", "DDP020")


def _codes(results):
    return sorted((r.path, d.line, d.code) for r in results for d in r.diagnostics)


def test_the_project_sees_what_single_files_cannot():
    folder = FIXTURES / "project_bad"
    files = sorted(folder.glob("*.py"))
    settings = Settings(select=PROJECT_RULES, root=folder)
    shown = {p: p.name for p in files}
    found = {(path, code) for path, _, code in _codes(lint_files(files, settings, jobs=1, display=shown,
                                                                 root=folder))}
    assert found == {("data.py", "DDP008"), ("engine.py", "DDP012"), ("main.py", "DDP015"),
                     ("main.py", "DDP020"), ("main.py", "DDP010"), ("main.py", "DDP011")}


# ---------------------------------------------------------------------- the project root
def test_the_root_is_the_nearest_folder_with_a_project_marker(tmp_path):
    for marker in ("pyproject.toml", "setup.py", "setup.cfg", ".ddplint.yaml", ".git"):
        project = tmp_path / marker.strip(".")
        write(project / marker, "")
        script = write(project / "src" / "pkg" / "train.py", "")
        assert find_project_root([script]) == project
        assert find_project_root([script.parent, project / "src"]) == project
    inner = write(tmp_path / "outer" / "pyproject.toml", "").parent / "inner"
    write(inner / "setup.cfg", "")
    assert find_project_root([write(inner / "a.py", "")]) == inner


def test_without_a_marker_the_root_is_the_working_folder_or_the_common_folder(tmp_path):
    a = write(tmp_path / "work" / "jobs" / "a.py", "")
    b = write(tmp_path / "work" / "other" / "b.py", "")
    assert find_project_root([a], cwd=tmp_path / "work") == tmp_path / "work"
    assert find_project_root([a, b], cwd=tmp_path / "elsewhere") == tmp_path / "work"
    assert find_project_root([a], cwd=tmp_path / "elsewhere") == a.parent
    assert module_key(a, tmp_path / "work") == "jobs/a.py"


def _fixture_runs(folder: Path, named: list[Path]):
    settings = Settings(root=folder)
    return {(r.path, d.line, d.column, d.code) for r in lint_paths(named, settings, root=folder,
                                                                   display={p: p.name for p in named})
            for d in r.diagnostics}


@pytest.mark.parametrize("name", ["project_bad", "project_good", "lifecycle_project"])
def test_each_file_named_alone_gets_the_diagnostics_of_the_whole_folder(name):
    folder = FIXTURES / name
    files = sorted(folder.glob("*.py"))
    whole = _fixture_runs(folder, files)
    for path in files:
        assert _fixture_runs(folder, [path]) == {found for found in whole if found[0] == path.name}
    assert _fixture_runs(folder, files[1:3]) == {found for found in whole
                                                 if found[0] in (files[1].name, files[2].name)}


MAIN = """\
import torch.distributed as dist
from torch.utils.data import DataLoader
from data import build_loader
from utils import finish_job

def main():
    dist.init_process_group("nccl")
    loader = build_loader()
    for epoch in range(10):
        for batch in loader:
            step(batch)
    finish_job()
"""
DATA = """\
from torch.utils.data import DataLoader, DistributedSampler

def build_loader():
    return DataLoader(ds, sampler=DistributedSampler(ds))
"""
UTILS = "import torch.distributed as dist\n\ndef finish_job():\n    dist.destroy_process_group()\n"


@pytest.fixture
def split_project(tmp_path):
    """A fact lives in a file that is not named: utils.py destroys the group
    (silences DDP015 in main.py), main.py has the epoch loop (DDP008 in data.py)."""
    root = tmp_path / "proj"
    write(root / "pyproject.toml", "")
    write(root / "main.py", MAIN)
    write(root / "data.py", DATA)
    write(root / "utils.py", UTILS)
    return root


def _cli_diagnostics(cwd: Path, *paths: str) -> dict:
    output = run_cli("--format", "json", "--isolated", "--no-cache", "-j", "1", *paths, cwd=cwd).stdout
    return {entry["path"]: [(d["code"], d["range"]["start"]["line"]) for d in entry["diagnostics"]]
            for entry in json.loads(output)["files"]}


def test_named_files_and_the_folder_agree_on_the_cli(split_project):
    whole = _cli_diagnostics(split_project, ".")
    assert whole == {"data.py": [("DDP008", 3)]}
    for named in (["main.py"], ["data.py"], ["data.py", "utils.py"], ["main.py", "data.py", "utils.py"]):
        assert _cli_diagnostics(split_project, *named) == {k: v for k, v in whole.items() if k in named}
    # From another folder, with paths that name the files differently.
    assert _cli_diagnostics(split_project.parent, "proj/data.py") == {"proj/data.py": [("DDP008", 3)]}


def test_a_file_alone_in_its_folder_is_a_complete_project(tmp_path):
    """Third-party imports (and calls into them) do not make a project incomplete."""
    script = write(tmp_path / "solo" / "train.py", "import torch.distributed as dist\nimport wandb\n"
                                                    "from mylib.trainer import fit\n"
                                                    "dist.init_process_group('nccl')\nfit(wandb.init())\n")
    results = lint_paths([script], Settings(select=("DDP015",), root=script.parent))
    assert [(d.code, d.line) for r in results for d in r.diagnostics] == [("DDP015", 4)]


def test_a_text_alone_is_a_complete_project():
    source = "import torch.distributed as dist\nimport helpers\ndist.init_process_group('nccl')\nhelpers.run()\n"
    result = Linter(Settings(select=("DDP015",))).lint_source(source, "job.py")
    assert [d.code for d in result.diagnostics] == ["DDP015"]


def test_an_editor_buffer_replaces_the_file_in_its_project(split_project):
    settings = Settings(select=("DDP008", "DDP015"), root=split_project)
    on_disk = lint_document((split_project / "data.py").read_text(), split_project / "data.py", settings)
    assert [(d.code, d.line) for d in on_disk.diagnostics] == [("DDP008", 4)]
    # The buffer calls set_epoch, which the saved file does not: the buffer's facts count.
    edited = DATA + "\ndef every_epoch(sampler, epoch):\n    sampler.set_epoch(epoch)\n"
    assert lint_document(edited, split_project / "data.py", settings).diagnostics == []
    # A buffer of main.py that no longer calls the cleanup helper: utils.py is out of its reach.
    main = lint_document(MAIN.replace("    finish_job()\n", "").replace("from utils import finish_job\n", ""),
                         split_project / "main.py", settings)
    assert [(d.code, d.line) for d in main.diagnostics] == [("DDP015", 6)]


def test_worker_processes_give_the_same_answers(tmp_path):
    folder = FIXTURES / "project_bad"
    files = sorted(folder.glob("*.py")) * 3  # enough files for the process pool
    settings = Settings(select=("ALL",), root=folder)
    shown = {p: p.name for p in files}
    assert _codes(lint_files(files, settings, jobs=2, display=shown, root=folder)) == \
        _codes(lint_files(files, settings, jobs=1, display=shown, root=folder))


def test_summaries_are_small_and_picklable():
    for path in (FIXTURES / "project_bad").glob("*.py"):
        source = path.read_text(encoding="utf-8")
        facts = summarize(source, path.name)
        data = pickle.dumps(facts)
        assert len(data) < 4 * len(source) + 2048, path.name
        assert pickle.loads(data) == facts


def _project(files: dict) -> Project:
    return Project([summarize(source, path) for path, source in files.items()])


def test_imports_resolve_relative_absolute_and_module_imports():
    project = _project({
        "pkg/__init__.py": "",
        "pkg/utils.py": "import torch.distributed as dist\ndef is_leader():\n    return dist.get_rank() == 0\n",
        "pkg/engine.py": "def evaluate(model):\n    model(1)\n",
        "pkg/main.py": "from .utils import is_leader\nfrom . import engine\nimport pkg.engine as eng\n"
                       "from pkg.utils import is_leader as leader\n",
    })
    imports = project.modules["pkg/main.py"].imports
    assert project.resolve_function("pkg/main.py", "is_leader", imports) == ("pkg/utils.py", "is_leader")
    assert project.resolve_function("pkg/main.py", "engine.evaluate", imports) == ("pkg/engine.py", "evaluate")
    assert project.resolve_function("pkg/main.py", "eng.evaluate", imports) == ("pkg/engine.py", "evaluate")
    assert project.resolve_function("pkg/main.py", "leader", imports) == ("pkg/utils.py", "is_leader")
    assert project.is_rank_predicate("pkg/main.py", imports, "leader")
    assert project.resolve_function("pkg/main.py", "os.path.join", imports) is None


def test_wrapped_models_flow_through_call_chains():
    project = _project({
        "main.py": "from torch.nn.parallel import DistributedDataParallel as DDP\nimport engine\n"
                   "model = DDP(net)\nengine.fit(model, data)\n",
        "engine.py": "def fit(model, data):\n    step(model, data)\ndef step(net, data):\n    net(data)\n",
    })
    assert project.wrapped_param("engine.py", "fit", "model") == "ddp"
    assert project.wrapped_param("engine.py", "step", "net") == "ddp"
    assert project.module_in_ddp_context("engine.py")
    imports = project.modules["main.py"].imports
    assert project.call_reaches("main.py", "engine.fit", imports, {"0": "ddp"}) == "forward"


def test_unknown_callers_leave_guards_unknown():
    project = _project({"utils.py": "import torch\ndef save(state):\n    torch.save(state, 'x.pt')\n"})
    assert project.callers_guarded("utils.py", "save") is None


def test_guard_in_all_callers():
    project = _project({
        "utils.py": "import torch\ndef save(state):\n    torch.save(state, 'x.pt')\n",
        "a.py": "from utils import save\nif rank == 0:\n    save(1)\n",
        "b.py": "from utils import save\ndef f():\n    save(2)\n",
    })
    assert project.callers_guarded("utils.py", "save") is None  # f's callers are unknown
    project = _project({
        "utils.py": "import torch\ndef save(state):\n    torch.save(state, 'x.pt')\n",
        "a.py": "from utils import save\nif rank == 0:\n    save(1)\n",
        "b.py": "from utils import save\ndef f():\n    save(2)\nf()\n",
    })
    assert project.callers_guarded("utils.py", "save") is False


def test_the_root_walk_gives_the_same_answers_in_worker_processes(split_project):
    for number in range(8):  # enough project files for the process pool
        write(split_project / "extra" / f"m{number}.py", f"def helper{number}():\n    return {number}\n")
    named = [split_project / "data.py", split_project / "main.py"]
    settings = Settings(select=("ALL",), root=split_project)
    assert _codes(lint_paths(named, settings, jobs=2)) == _codes(lint_paths(named, settings, jobs=1))
    assert _codes(lint_paths(named, settings, jobs=1)) != []


# ---------------------------------------------------------------------- reachability scope
SCRIPT = """\
import os
import argparse
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler
from utils import build_model
{extra_imports}
def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=0)
    args = parser.parse_args()
    dist.init_process_group("nccl")
    torch.cuda.set_device(args.local_rank)
    model = build_model().cuda()
    sampler = DistributedSampler(ds)
    loader = DataLoader(ds, sampler=sampler)
    for epoch in range(3):
{loop}        for batch in loader:
            model(batch)
{tail}
"""


def _script(extra_imports="", loop="", tail=""):
    return SCRIPT.format(extra_imports=extra_imports, loop=loop, tail=tail)


@pytest.fixture
def examples_repo(tmp_path):
    """Two independent scripts sharing utils.py; b_demo.py does everything right,
    a_train.py nothing (set_epoch, destroy_process_group, LOCAL_RANK)."""
    root = tmp_path / "examples"
    write(root / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(root / "utils.py", "import torch\n\ndef build_model():\n    return torch.nn.Linear(2, 2)\n")
    write(root / "a_train.py", _script())
    write(root / "b_demo.py", _script(
        loop="        sampler.set_epoch(epoch)\n",
        tail="    local = int(os.environ['LOCAL_RANK'])\n    dist.destroy_process_group()\n"))
    return root


def test_independent_scripts_do_not_satisfy_each_other(examples_repo):
    settings = Settings(select=("DDP008", "DDP015", "DDP022"), root=examples_repo)
    for named in ([examples_repo / "a_train.py"], sorted(examples_repo.glob("*.py"))):
        results = lint_paths(named, settings, display={p: p.name for p in named})
        assert {(r.path, d.code) for r in results for d in r.diagnostics} == {
            ("a_train.py", "DDP008"), ("a_train.py", "DDP015"), ("a_train.py", "DDP022")}


def test_what_an_entry_script_reaches_counts(examples_repo):
    """a_train.py calls a helper of another module (reached through a spawn
    target, a star import, a plain call) that does what b_demo.py does inline."""
    write(examples_repo / "lifecycle.py", "import os\nimport torch.distributed as dist\n\n"
                                          "def finish():\n    dist.destroy_process_group()\n")
    write(examples_repo / "epochs.py", "def every_epoch(sampler, epoch):\n    sampler.set_epoch(epoch)\n")
    write(examples_repo / "envs.py", "import os\nLOCAL = int(os.environ.get('LOCAL_RANK', 0))\n")
    write(examples_repo / "a_train.py", _script(
        extra_imports="from lifecycle import finish\nfrom epochs import *\nimport envs\n",
        loop="        every_epoch(sampler, epoch)\n", tail="    finish()\n"))
    settings = Settings(select=("DDP008", "DDP015", "DDP022"), root=examples_repo)
    results = lint_paths([examples_repo / "a_train.py"], settings)
    assert [d.code for r in results for d in r.diagnostics] == []


def test_a_helper_module_used_by_two_scripts_sees_both():
    project = _project({
        "utils.py": "def build():\n    pass\n",
        "a_train.py": "from utils import build\nbuild()\n",
        "b_demo.py": "import utils\nimport torch.multiprocessing as mp\nfrom worker import run\n"
                     "mp.spawn(run, nprocs=2)\n",
        "worker.py": "def run(rank):\n    pass\n",
        "lonely.py": "x = 1\n",
    })
    assert project.scope("a_train.py") == {"a_train.py", "utils.py"}
    assert project.scope("b_demo.py") == {"b_demo.py", "utils.py", "worker.py"}
    assert project.scope("utils.py") == {"a_train.py", "b_demo.py", "utils.py", "worker.py"}
    assert project.scope("worker.py") == {"b_demo.py", "utils.py", "worker.py"}
    assert project.scope("lonely.py") == {"lonely.py"}
    assert project.in_scope("worker.py", lambda m: m.path == "utils.py")
    assert not project.in_scope("a_train.py", lambda m: m.path == "worker.py")
    assert project.scope("not/in/the/project.py") == set(project.modules)  # unknown: everything


# ---------------------------------------------------------------------- values across calls
def test_parameters_receive_what_every_call_site_passes():
    project = _project({
        "launch.py": "import os\nimport argparse\nimport torch\nimport torch.distributed as dist\n"
                     "import torch.multiprocessing as mp\nfrom engine import fit, place, worker\n"
                     "env = {k: os.environ[k] for k in ('RANK', 'WORLD_SIZE')}\n"
                     "parser = argparse.ArgumentParser()\nparser.add_argument('--local_rank', type=int)\n"
                     "opts = parser.parse_args()\n"
                     "def main():\n"
                     "    rank = int(os.environ['SLURM_PROCID'])\n"
                     "    fit(rank, lrank=opts.local_rank)\n"
                     "    fit(int(env['RANK']), lrank=int(os.environ['LOCAL_RANK']))\n"
                     "    place(torch.device('cuda'), dist.get_rank() % torch.cuda.device_count())\n"
                     "    mp.spawn(worker, args=(opts,), nprocs=2)\n",
        "engine.py": "def fit(proc, lrank):\n    step(proc)\n"
                     "def step(index):\n    pass\n"
                     "def place(device, local):\n    pass\n"
                     "def worker(gpu, opts):\n    step(gpu)\n"
                     "def unused(x):\n    pass\n",
    })
    values = project.param_values
    assert values("engine.py", "fit", "proc") == {"global_rank"}
    assert values("engine.py", "fit", "lrank") == {"argv_local_rank", "local_rank"}
    assert values("engine.py", "place", "device") == {"cuda_device"}
    assert values("engine.py", "place", "local") == {"local_rank"}
    assert values("engine.py", "worker", "gpu") == {"spawn_index"}
    assert values("engine.py", "worker", "opts") == {"unknown"}
    # Transitively, and callers that disagree say so.
    assert values("engine.py", "step", "index") == {"global_rank", "spawn_index"}
    assert values("engine.py", "unused", "x") is None  # no call is known


def test_unknown_arguments_and_recursion_stay_unknown():
    project = _project({
        "a.py": "import torch.distributed as dist\n"
                "def walk(rank, depth):\n    walk(rank, depth - 1)\n"
                "def entry(r):\n    walk(r, 3)\n"
                "walk(dist.get_rank(), 3)\nwalk(compute_rank(), 3)\nentry()\n",
    })
    assert project.param_values("a.py", "walk", "rank") == {"global_rank", "unknown"}
    assert project.param_values("a.py", "walk", "depth") == {"literal", "unknown"}
    assert project.param_values("a.py", "entry", "r") == {"unknown"}  # called without it


def test_a_parsed_local_rank_needs_the_flag_in_reach():
    project = _project({
        "a.py": "from helpers import use\nuse(args.local_rank)\n",  # no --local_rank flag in reach
        "helpers.py": "def use(device):\n    pass\n",
    })
    assert project.param_values("helpers.py", "use", "device") == {"unknown"}


def test_a_helper_that_all_reduces_its_argument_returns_an_agreed_value():
    project = _project({
        "util.py": "import torch.distributed as dist\n"
                   "def sync(x):\n    t = x.clone()\n    dist.all_reduce(t)\n    return t\n"
                   "def mean(x, n):\n    t = x.clone()\n    dist.all_reduce(t)\n    return t.item() / n\n"
                   "def gathered(x):\n    out = [None, None]\n    dist.all_gather_object(out, x)\n"
                   "    return out\n"
                   "def local(x):\n    t = x.clone()\n    dist.all_reduce(t)\n    return x\n"
                   "def reduced(x):\n    dist.reduce(x, dst=0)\n    return x\n",
        "train.py": "from util import sync, mean\nimport util\n",
    })
    imports = project.modules["train.py"].imports
    assert project.returns_agreed("train.py", "sync", imports)
    assert project.returns_agreed("train.py", "mean", imports)
    assert project.returns_agreed("train.py", "util.gathered", imports)
    assert not project.returns_agreed("train.py", "util.local", imports)
    assert not project.returns_agreed("train.py", "util.reduced", imports)  # only dst holds it
    assert not project.returns_agreed("train.py", "missing", imports)


# ---------------------------------------------------------------------- calls through instances
LOOP = """\
import torch

class Loop:
    def run(self):
        for epoch in range(3):
            self.on_epoch_end(epoch)

    def on_epoch_end(self, epoch):
        torch.save(self.state, f"ckpt{epoch}.pt")

class Other:
    def on_epoch_end(self, epoch):
        pass
"""


def test_methods_are_keyed_by_class_and_bases_are_recorded():
    facts = summarize(LOOP + "class Sub(Loop, pkg.Mixin):\n    def run(self):\n        pass\n", "loop.py")
    assert {"Loop.run", "Loop.on_epoch_end", "Other.on_epoch_end", "Sub.run"} <= set(facts.functions)
    assert facts.classes == {"Loop": (), "Other": (), "Sub": ("Loop", "pkg.Mixin")}
    assert facts.functions["Loop.on_epoch_end"].params == ("self", "epoch")


def test_self_calls_and_constructed_instances_reach_methods():
    unguarded = _project({"loop.py": LOOP, "main.py": "from loop import Loop\nLoop().run()\n"})
    assert unguarded.callers_guarded("loop.py", "Loop.on_epoch_end") is False
    assert unguarded.callers_guarded("loop.py", "Other.on_epoch_end") is None
    guarded = _project({"loop.py": LOOP, "main.py": "import torch.distributed as dist\nimport loop\n"
                                                    "runner = loop.Loop()\n"
                                                    "if dist.get_rank() == 0:\n    runner.run()\n"})
    assert guarded.callers_guarded("loop.py", "Loop.on_epoch_end") is True


def test_wrapped_models_reach_methods_of_instances():
    project = _project({
        "store.py": "class Store:\n    def restore(self, path, model):\n        model.load_state_dict(path)\n"
                    "    def __call__(self, net):\n        net(1)\n",
        "trainer.py": "from store import Store\n"
                      "class Trainer:\n    def __init__(self, model):\n        self.store = Store()\n"
                      "        self.model = model\n"
                      "    def resume(self, model):\n        self.store.restore('x.pt', model)\n",
        "main.py": "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                   "from store import Store\nfrom trainer import Trainer\n"
                   "model = DDP(net)\nstore = Store()\nstore.restore('x.pt', model)\nstore(model)\n"
                   "Trainer(model).resume(model)\n",
    })
    assert project.wrapped_param("store.py", "Store.restore", "model") == "ddp"
    assert project.wrapped_param("store.py", "Store.__call__", "net") == "ddp"
    assert project.wrapped_param("trainer.py", "Trainer.__init__", "model") == "ddp"
    assert project.wrapped_param("trainer.py", "Trainer.resume", "model") == "ddp"
    imports = project.modules["main.py"].imports
    assert project.loading_function("main.py", "Store.restore", imports) == ("store.py", "Store.restore")
    assert project.call_loads_into(("store.py", "Store.restore"), "store.restore", "1")


def test_methods_resolve_through_project_bases_and_re_exports():
    project = _project({
        "pkg/__init__.py": "from .base import BaseTrainer\n",
        "pkg/base.py": "import torch.distributed as dist\n"
                       "class BaseTrainer:\n    def __init__(self, model):\n        self.model = model\n"
                       "    def evaluate(self):\n        dist.all_reduce(self.total)\n",
        "main.py": "from pkg import BaseTrainer\n"
                   "class Trainer(BaseTrainer):\n"
                   "    def __init__(self, model):\n        BaseTrainer.__init__(self, model)\n"
                   "    def fit(self):\n        self.evaluate()\n"
                   "def run(model):\n    Trainer(model).fit()\n",
    })
    imports = project.modules["main.py"].imports
    assert project.resolve_function("main.py", "BaseTrainer", imports) == ("pkg/base.py", "BaseTrainer.__init__")
    assert project.resolve_function("main.py", "Trainer.evaluate", imports) == ("pkg/base.py", "BaseTrainer.evaluate")
    assert project.reaches_collective(("main.py", "Trainer.fit"))
    assert project.reaches_collective(("main.py", "run"))
    # The unbound call passes ``self`` itself: ``model`` fills the second slot.
    call = next(c for c in project.modules["main.py"].calls if c.callee == "BaseTrainer.__init__")
    assert project._param_for_slot(("pkg/base.py", "BaseTrainer.__init__"), call, "1") == "model"


def test_a_bare_method_name_is_the_one_method_of_that_name():
    project = _project({"loop.py": LOOP, "main.py": "from loop import Loop\nLoop().run()\n"})
    assert project.callers_guarded("loop.py", "run") is False  # Loop.run, called at module level
    assert project.function_key("loop.py", "run") == ("loop.py", "Loop.run")
    assert project.function_key("loop.py", "on_epoch_end") == ("loop.py", "on_epoch_end")  # two classes


def _lint_tree(root: Path, files: dict, select) -> set:
    write(root / "pyproject.toml", "")
    for name, source in files.items():
        write(root / name, source)
    named = [root / name for name in files]
    results = lint_paths(named, Settings(select=tuple(select), root=root), display={p: p.name for p in named})
    return {(r.path, d.line, d.code) for r in results for d in r.diagnostics}


def test_rules_follow_calls_through_instances(tmp_path):
    store = ("class Store:\n    def restore(self, path, model):\n        model.load_state_dict(path)\n")
    evaluator = ("import torch.distributed as dist\n"
                 "class Evaluator:\n    def run(self, total):\n        dist.all_reduce(total)\n")
    main = ("import torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
            "from store import Store\nfrom evaluator import Evaluator\n"
            "class App:\n    def __init__(self):\n        self.store = Store()\n"
            "    def resume(self, model):\n        if dist.get_rank() == 0:\n"
            "            self.store.restore('x.pt', model)\n"
            "def main():\n    dist.init_process_group('nccl')\n    model = DDP(net)\n"
            "    store, ev = Store(), Evaluator()\n    checker = Evaluator()\n"
            "    if dist.get_rank() == 0:\n        Store().restore('x.pt', model)\n"
            "        checker.run(total)\n"
            "    App().resume(model)\n    dist.destroy_process_group()\n")
    found = _lint_tree(tmp_path / "proj", {"store.py": store, "evaluator.py": evaluator, "main.py": main},
                       ("DDP010", "DDP020"))
    assert found == {("main.py", 10, "DDP020"), ("main.py", 17, "DDP020"), ("main.py", 18, "DDP010")}


def test_a_save_reached_through_self_calls_needs_a_guard_above(tmp_path):
    loop = ("import torch\nimport torch.distributed as dist\n"
            "class Loop:\n    def __init__(self, model):\n        self.model = model\n"
            "    def run(self):\n        for epoch in range(3):\n            self.on_epoch_end(epoch)\n"
            "    def on_epoch_end(self, epoch):\n        torch.save(self.model.state_dict(), 'ckpt.pt')\n")
    main = ("import torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
            "from loop import Loop\n"
            "def main():\n    dist.init_process_group('nccl')\n    model = DDP(net)\n"
            "    {call}\n    dist.destroy_process_group()\n"
            "if __name__ == '__main__':\n    main()\n")
    unguarded = _lint_tree(tmp_path / "a", {"loop.py": loop, "main.py": main.format(call="Loop(model).run()")},
                           ("DDP011",))
    assert unguarded == {("loop.py", 10, "DDP011")}
    guarded = main.format(call="if dist.get_rank() == 0:\n        Loop(model).run()")
    assert _lint_tree(tmp_path / "b", {"loop.py": loop, "main.py": guarded}, ("DDP011",)) == set()


# ---------------------------------------------------------------------- run-time imports
def test_run_time_imports_link_the_modules_their_pattern_names():
    source = ("import importlib\nfrom importlib import import_module\n"
              "def pick(cfg, name):\n"
              "    a = import_module(f'pkg.trainers.{cfg.trainer}_trainer')\n"
              "    b = importlib.import_module('pkg.hooks')\n"
              "    c = import_module(name)\n"
              "    d = import_module(f'{name}')\n"
              "    e = import_module(f'pkg.{name}')\n"
              "    return a, b, c, d, e\n")
    facts = summarize(source, "pkg/builder.py")
    assert list(facts.dynamic_imports) == ["pkg.trainers.*_trainer", "pkg.hooks"]
    modules = [facts] + [summarize("x = 1\n", path) for path in (
        "pkg/trainers/depth_trainer.py", "pkg/trainers/base.py", "pkg/hooks.py", "other/depth_trainer.py")]
    project = Project(modules)
    assert project.modules_matching("pkg.trainers.*_trainer") == ["pkg/trainers/depth_trainer.py"]
    assert project.imported["pkg/builder.py"] == {"pkg/trainers/depth_trainer.py", "pkg/hooks.py"}


SETUP_HELPER = "import torch\ndef seed(s):\n    torch.manual_seed(s)\ndef setup(gpu):\n    torch.cuda.set_device(gpu)\n"


@pytest.mark.parametrize("helpers, train, runs", [
    # imported for another helper only: the set_device of setup() never runs
    (SETUP_HELPER, "from helpers import seed\nseed(1)\n", False),
    # called from the script, or by any module of the project (precision first)
    (SETUP_HELPER, "from helpers import seed, setup\nsetup(0)\n", True),
    (SETUP_HELPER + "def main():\n    setup(0)\n", "from helpers import seed\n", True),
    # imported by name (may be handed on), handed on as a value, decorated, at module level, a method
    (SETUP_HELPER, "import helpers\nfrom helpers import setup as s\n", True),
    (SETUP_HELPER + "import multiprocessing as mp\np = mp.Process(target=setup, args=(0,))\n",
     "from helpers import seed\n", True),
    ("import torch, functools\n@functools.lru_cache\ndef setup(gpu):\n    torch.cuda.set_device(gpu)\n",
     "import helpers\n", True),
    ("import torch\ntorch.cuda.set_device(0)\n", "import helpers\n", True),
    ("import torch\nclass Env:\n    def setup(self, gpu):\n        torch.cuda.set_device(gpu)\n",
     "import helpers\n", True),
])
def test_a_set_device_counts_only_where_it_may_run(helpers, train, runs):
    project = _project({"helpers.py": helpers, "train.py": train})
    assert "helpers.py" in project.scope("train.py")
    assert project.sets_device_in_scope("train.py") is runs


MASKING = "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = str(local_rank)\nimport helpers\n"


@pytest.mark.parametrize("scripts, masked", [
    ({"train.py": MASKING}, True),
    ({"train.py": MASKING, "eval.py": MASKING.replace("helpers", "glue"), "glue.py": "import helpers\n"}, True),
    # another script imports the helpers without masking, or masks with a literal list
    ({"train.py": MASKING, "plot.py": "import helpers\n"}, False),
    ({"train.py": "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = '0,1'\nimport helpers\n"}, False),
    ({}, False),  # nothing imports the module: it is a script of its own
])
def test_a_helper_module_sees_one_gpu_only_when_every_importer_masks(scripts, masked):
    project = _project({"helpers.py": "import torch\nx = torch.zeros(1, device='cuda:0')\n", **scripts})
    assert project.only_masked_processes_reach("helpers.py") is masked


@pytest.mark.parametrize("other,flagged", [
    ("import mlflow\ndef export(m):\n    mlflow.pyfunc.save_model(m, 'out')\n", False),
    ("from trainer import Trainer\ndef export():\n    t = Trainer()\n    t.save_model(1)\nexport()\n", True),
])
def test_a_method_only_single_process_arms_call_stays_single_process_beside_a_library_namesake(
        tmp_path, other, flagged):
    """``save_model`` runs only in the else of ``if is_distributed:``: single-process code,
    even when another module calls a library's ``save_model``; not when another module may
    call the method itself (a47 mattersim)."""
    trainer = write(tmp_path / "trainer.py", (
        "import torch\nimport torch.distributed as dist\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "class Trainer:\n"
        "    def fit(self, loader, is_distributed=False):\n"
        "        for epoch in range(3):\n"
        "            self.step(loader)\n"
        "            if is_distributed:\n"
        "                self.save_model_ddp(epoch)\n"
        "            else:\n"
        "                self.save_model(epoch)\n"
        "    def save_model(self, epoch):\n"
        "        torch.save(self.model.state_dict(), 'model.pt')\n"
        "    def save_model_ddp(self, epoch):\n"
        "        if dist.get_rank() == 0:\n"
        "            torch.save(self.model.module.state_dict(), 'model.pt')\n"
        "def main():\n    dist.init_process_group('nccl')\n    t = Trainer()\n    t.model = DDP(net())\n"
        "    t.fit(loader(), is_distributed=True)\n"
        "main()\n"))
    write(tmp_path / "export.py", other)
    results = lint_paths([trainer, tmp_path / "export.py"], Settings(select=("DDP011",), root=tmp_path), jobs=1)
    assert bool(_codes(results)) == flagged, _codes(results)


def test_a_method_of_what_a_factory_builds_is_every_built_class_s_method():
    engines = ("import torch\nfrom ext import RemoteTrainer\n"
               "class Base:\n    def fit(self, net):\n        pass\n    def close(self):\n        pass\n"
               "class Seg(Base):\n    def fit(self, net):\n        pass\n"
               "class Depth(Base):\n    pass\n"
               "def make(cfg):\n    if cfg.seg:\n        return Seg(cfg)\n    trainer = Depth(cfg)\n    return trainer\n"
               "def make_any(cfg):\n    return Seg(cfg) if cfg.seg else RemoteTrainer(cfg)\n"
               "def make_remote(cfg):\n    return RemoteTrainer(cfg)\n")
    train = ("from engines import make, make_any, make_remote\n"
             "def main(cfg, net):\n    trainer = make(cfg)\n    trainer.fit(net)\n    trainer.close()\n"
             "    remote = make_remote(cfg)\n    remote.fit(net)\n    make(cfg).close()\n")
    project = Project([summarize(engines, "engines.py"), summarize(train, "train.py")])
    assert project.function(("engines.py", "make")).returns_classes == ("Depth", "Seg")
    assert project.function(("engines.py", "make_any")).returns_classes == ()  # a conditional value: not read
    assert project.resolve_functions("train.py", "make().fit") == [("engines.py", "Base.fit"),
                                                                    ("engines.py", "Seg.fit")]
    assert project.resolve_function("train.py", "make().close") == ("engines.py", "Base.close")
    assert project.resolve_function("train.py", "make().fit") is None  # two methods: no single answer
    assert project.resolve_functions("train.py", "make_remote().fit") == []  # a class the project does not hold
    assert [path for path, _ in project.callers[("engines.py", "Seg.fit")]] == ["train.py"]
    # one call of close() through the name; ``make(cfg).close()`` is not read (a call's own
    # result is nearly always a library's: ``AutoModel.from_pretrained(p).to(d)``)
    assert [path for path, _ in project.callers[("engines.py", "Base.close")]] == ["train.py"]


def test_set_up_helpers_annotations_and_switches_are_project_facts():
    """The facts behind three cross-module answers: a helper that writes the global rank
    into the object it is handed, a parameter annotated with the wrapper class, and a
    boolean switched off on every rank but the main one."""
    project = _project({
        "utils.py": "import os\nimport torch.distributed as dist\n"
                    "def setup(args):\n    args.rank = int(os.environ['RANK'])\n"
                    "    args.local_rank = int(os.environ['LOCAL_RANK'])\n    args.name = 'run'\n",
        "trainer.py": "import torch.distributed as dist\n"
                      "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
                      "class Trainer:\n    def __init__(self, model: FSDP, main_gpu=0):\n"
                      "        self.model = model\n        self.save_models = True\n"
                      "        if dist.get_rank() != main_gpu:\n            self.save_models = False\n",
    })
    setup = project.function(("utils.py", "setup"))
    assert setup.sets_param_ranks == {"args.rank": GLOBAL_RANK, "args.local_rank": LOCAL_RANK}
    assert project.wrapped_param("trainer.py", "Trainer.__init__", "model") == "fsdp"
    assert project.is_switched_off_main("save_models")
    assert not project.is_switched_off_main("model")


def test_data_classes_that_shard_themselves_and_single_process_calls_are_project_facts():
    """The facts behind DDP009's cross-module answers: a data class that asks for the rank
    and the world size (it keeps its rank's slice), a factory returning that class itself
    through a star import, a call made only in a single-process arm, and a home-grown
    ``no_sync`` (DDP013)."""
    project = _project({
        "data/__init__.py": "from .dataset import *\n"
                            "def create_dataset(name):\n    if name:\n        return Sharded\n    return Sharded\n"
                            "def create_plain(name):\n    return Plain\n",
        "data/dataset.py": "import torch.distributed as dist\n"
                           "class Sharded:\n    def __init__(self, files):\n        self.rank = dist.get_rank()\n"
                           "        self.world = dist.get_world_size()\n"
                           "class Plain:\n    def __init__(self, files):\n        self.rank = dist.get_rank()\n",
        "train.py": "from data import create_dataset, create_plain\n"
                    "def build(f):\n    pass\ndef build_distributed(f):\n    pass\ndef single(f):\n    pass\n"
                    "def main(args, files):\n    if args.local_rank == -1:\n        build(files)\n"
                    "    else:\n        build_distributed(files)\n    if not args.distributed:\n        single(files)\n"
                    "    build(files)\n",
        "wrapper.py": "import torch\nclass MyDDP(torch.nn.Module):\n    def no_sync(self):\n        pass\n",
    })
    assert project.modules["data/dataset.py"].rank_sharding_classes == {"Sharded"}
    assert project.function(("data/__init__.py", "create_dataset")).returns_class_objects == ("Sharded",)
    assert project.builds_rank_sharded("train.py", "create_dataset", None)
    assert not project.builds_rank_sharded("train.py", "create_plain", None)  # the rank alone shards nothing
    calls = {(c.callee, c.single_process) for c in project.modules["train.py"].calls}
    assert calls == {("build", True), ("build_distributed", False), ("single", True), ("build", False)}
    assert project.defines_own_method("no_sync")
    assert not project.defines_own_method("forward")


def test_a_class_saving_its_own_plain_state_saves_no_model_state():
    """DDP011's facts: ``torch.save(self.state_dict(), ...)`` of a class whose own
    ``state_dict`` returns plain values (a grad clipper's moving averages) writes no
    model state; one whose ``state_dict`` gathers a module's does."""
    project = _project({
        "clip.py": "import os\nimport torch\n"
                   "class Clipper:\n    def state_dict(self):\n"
                   "        return {'max_norm': self.max_norm, 'avg': self.avg}\n"
                   "    def save(self, output_dir):\n"
                   "        torch.save(self.state_dict(), os.path.join(output_dir, 'clip.pt'))\n"
                   "class Keeper:\n    def state_dict(self):\n"
                   "        return {'step': self.step, 'weights': self.net.state_dict()}\n"
                   "    def save(self, output_dir):\n"
                   "        torch.save(self.state_dict(), os.path.join(output_dir, 'keep.pt'))\n",
    })
    assert not project.function(("clip.py", "Clipper.save")).saves_state
    assert project.function(("clip.py", "Keeper.save")).saves_state
    assert project.function(("clip.py", "Clipper.save")).saves_unguarded == {"output_dir"}  # still a save helper


def test_a_model_passed_on_through_a_dict_display_keeps_its_wrap():
    """``state = {"model": model}`` then ``self.train_loop(state["model"])``: the
    loop's parameter receives what ``fit`` was handed (an FSDP model)."""
    project = _project({
        "trainer.py": "class Trainer:\n    def fit(self, model, opt):\n"
                      "        state = {'model': model, 'optimizer': opt}\n"
                      "        self.train_loop(state['model'], state['optimizer'])\n"
                      "    def train_loop(self, model, opt):\n        pass\n",
        "train.py": "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
                    "from trainer import Trainer\n"
                    "def main(net, opt):\n    Trainer().fit(model=FSDP(net), opt=opt)\n",
    })
    assert project.wrapped_param("trainer.py", "Trainer.train_loop", "model") == "fsdp"
    assert project.wrapped_param("trainer.py", "Trainer.train_loop", "opt") == ""


def test_a_checkpoint_helper_that_writes_through_a_collective_client_is_called_on_every_rank():
    """DDP011: ``self._client.save_checkpoint(...)`` reaches a collective (a barrier while
    rank 0 writes, a DCP save): the recipe's helper must run on every rank. A helper
    with its own ``torch.save`` followed by a barrier still writes on every rank."""
    from rules.ddp011_checkpoint_saved_on_every_rank import _collective_checkpoint_helper

    project = _project({
        "client.py": "import os\nimport torch\nimport torch.distributed as dist\n"
                     "class Client:\n    def save_checkpoint(self, model, epoch):\n"
                     "        torch.save(model.state_dict(), os.path.join(self.out, f'epoch_{epoch}.pt'))\n"
                     "        dist.barrier()\n",
        "recipe.py": "import torch\nimport torch.distributed as dist\nfrom client import Client\n"
                     "class Recipe:\n    def __init__(self):\n        self._client = Client()\n"
                     "    def save_checkpoint(self, epoch):\n        self._client.save_checkpoint(self._model, epoch)\n"
                     "    def save_and_wait(self, epoch):\n"
                     "        torch.save(self._model.state_dict(), f'last_{epoch}.pt')\n        dist.barrier()\n",
    })
    assert _collective_checkpoint_helper(project, ("recipe.py", "Recipe.save_checkpoint"))
    assert not _collective_checkpoint_helper(project, ("recipe.py", "Recipe.save_and_wait"))
    assert not _collective_checkpoint_helper(project, ("client.py", "Client.save_checkpoint"))


def test_shell_launchers_that_mask_one_gpu_per_process_are_project_facts():
    """A launcher that exports one device (``$1``, or numbers that differ from start to
    start) before ``python x.py`` masks each process to one GPU; a list of devices,
    ``python -m``/torchrun, or a mask set after the command do not."""
    from ddplint.screen.facts import summarize_launcher

    run = summarize_launcher("#!/bin/bash\nexport CUDA_VISIBLE_DEVICES=$1\nsource ~/.bashrc\n"
                             "python3 /scratch1/me/blox/models/imagenet_ddp.py \\\n    --rank=$4\n"
                             "CUDA_VISIBLE_DEVICES=$i python -u tools/eval.py &\n", "scripts/run.sh")
    assert run.launches_masked == ("/scratch1/me/blox/models/imagenet_ddp.py", "tools/eval.py")
    other = summarize_launcher("CUDA_VISIBLE_DEVICES=0,1,2,3 python train.py\n"
                               "export CUDA_VISIBLE_DEVICES=$1\npython -m torch.distributed.run bert.py\n"
                               "torchrun --nproc-per-node 4 gpt.py\n", "scripts/other.sh")
    assert other.launches_masked == ()
    # One literal device for every start of the script: a one-GPU run of its single-process
    # path (a54 OpenLTM), not one GPU per DDP process. Two devices for two starts are.
    single = summarize_launcher("export CUDA_VISIBLE_DEVICES=0\nmodel_name=timer\npython -u run.py \\\n"
                                "  --task_name forecast\n", "scripts/forecast.sh")
    assert single.launches_masked == ()
    pair = summarize_launcher("CUDA_VISIBLE_DEVICES=0 python worker.py --rank 0 &\n"
                              "CUDA_VISIBLE_DEVICES=1 python worker.py --rank 1 &\nwait\n", "scripts/pair.sh")
    assert pair.launches_masked == ("worker.py",)
    project = Project([run, other, summarize("x = 1\n", "models/imagenet_ddp.py"),
                       summarize("x = 1\n", "tools/eval.py"), summarize("x = 1\n", "train.py")])
    assert project.masked_by_launcher("models/imagenet_ddp.py")  # the folder and name of a cluster path
    assert project.masked_by_launcher("tools/eval.py")
    assert not project.masked_by_launcher("train.py")


def test_a_collective_under_a_flag_parameter_follows_what_callers_pass():
    # ``sync`` all-reduces only when ``reduce`` is true; its callers pass False, leave out the
    # default (False), pass True, or hand on a value only the run knows.
    project = _project({
        "metrics.py": "import torch.distributed as dist\n"
                      "def _average(t):\n    dist.all_reduce(t)\n    return t\n"
                      "def sync(t, reduce=False):\n    return _average(t) if reduce else t\n"
                      "def sync_block(t, reduce=True):\n    if reduce and t is not None:\n        _average(t)\n",
        "main.py": "from metrics import sync, sync_block\n"
                   "def off(t):\n    sync(t, reduce=False)\n"
                   "def default(t):\n    sync(t)\n"
                   "def block_off(t):\n    sync_block(t, False)\n"
                   "def on(t):\n    sync(t, True)\n"
                   "def block_default(t):\n    sync_block(t)\n"
                   "def handed_on(t, flag):\n    sync(t, reduce=flag)\n"
                   "def outer(t):\n    handed_on(t, False)\n",
    })
    assert project.reaches_collective(("metrics.py", "sync"))
    assert project.reaches_collective(("metrics.py", "sync_block"))
    for silent in ("off", "default", "block_off", "outer"):
        assert not project.reaches_collective(("main.py", silent)), silent
    for reaching in ("on", "block_default", "handed_on"):
        assert project.reaches_collective(("main.py", reaching)), reaching


def test_a_collective_under_a_constructor_flag_follows_what_constructors_pass():
    # The base class all-reduces only ``if self.dist:``, stored from its constructor's ``dist``
    # (default False); a subclass hands its own ``dist`` on through ``super().__init__``.
    project = _project({
        "base.py": "import torch.distributed as dist\n"
                   "class RawDataset:\n    def __init__(self, config, dist=False):\n"
                   "        self.dist = dist\n        self._load()\n"
                   "    def _load(self):\n        if self.dist:\n            dist.all_reduce(self.count)\n",
        "lsms.py": "from base import RawDataset\n"
                   "class LSMSDataset(RawDataset):\n    def __init__(self, config, dist=False):\n"
                   "        super().__init__(config, dist)\n",
        "main.py": "from lsms import LSMSDataset\n"
                   "def serial(config):\n    LSMSDataset(config)\n"
                   "def sharded(config):\n    LSMSDataset(config, dist=True)\n"
                   "def chosen(config, shard):\n    LSMSDataset(config, shard)\n",
    })
    assert project.reaches_collective(("base.py", "RawDataset.__init__"))
    assert project.reaches_collective(("lsms.py", "LSMSDataset.__init__"))
    assert not project.reaches_collective(("main.py", "serial"))
    assert project.reaches_collective(("main.py", "sharded"))
    assert project.reaches_collective(("main.py", "chosen"))


def test_a_wrap_in_one_arm_of_a_conditional_expression_is_handed_on():
    # ``FSDP(model) if is_distributed else model.to(rank)`` may be the FSDP model: the
    # function it is handed to receives one (a97 U-EGformer's dsttrain).
    project = _project({
        "fsdp_train.py": "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
                         "from trainer import dsttrain\n"
                         "def main(model, rank, is_distributed):\n"
                         "    model = FSDP(model) if is_distributed else model.to(rank)\n"
                         "    dsttrain(model, rank)\n",
        "trainer.py": "def dsttrain(model, rank):\n    model.train()\n",
    })
    assert project.ddp_params[("trainer.py", "dsttrain")] == {"model": "fsdp"}


def test_a_method_run_only_from_a_single_process_arm_of_another_module_is_single_process():
    # ``else: single_main()`` of ``if args.distributed and ngpus_per_node > 1:`` runs
    # ``SingleRunner.train`` in one process only; the distributed main runs the subclass's
    # override (a118 OpenP5).
    project = _project({
        "runner.py": "class SingleRunner:\n    def train(self):\n        save(self.model)\n"
                     "class DistributedRunner(SingleRunner):\n    def train(self):\n        pass\n",
        "main.py": "import torch.multiprocessing as mp\nfrom runner import SingleRunner, DistributedRunner\n"
                   "def single_main(args):\n    runner = SingleRunner()\n    runner.train()\n"
                   "def distributed_main(rank, args):\n    runner = DistributedRunner()\n    runner.train()\n"
                   "def either(args):\n    SingleRunner().train()\n"
                   "if __name__ == '__main__':\n    ngpus_per_node = torch.cuda.device_count()\n"
                   "    if args.distributed and ngpus_per_node > 1:\n"
                   "        mp.spawn(distributed_main, args=(args,), nprocs=ngpus_per_node)\n"
                   "    else:\n        single_main(args)\n    either(args)\n",
    })
    assert project.runs_single_process_only(("main.py", "single_main"))
    assert not project.runs_single_process_only(("main.py", "either"))
    assert not project.runs_single_process_only(("runner.py", "SingleRunner.train"))  # either() runs it too
    assert not project.runs_single_process_only(("runner.py", "DistributedRunner.train"))
