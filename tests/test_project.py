"""Project analysis: facts joined across modules (ddplint/project.py).

The multi-module fixtures (fixtures/project_bad/, fixtures/project_good/) are
checked by tests/test_fixtures.py; here: each module of the bad project linted
alone stays silent where the needed fact lives in another module, import
resolution, the worker-process path, and the summaries' size.
"""

import pickle
from pathlib import Path

import pytest

from ddplint.config import Settings
from ddplint.engine import Linter, lint_files
from ddplint.screen.facts import summarize
from ddplint.screen.project import Project

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PROJECT_RULES = ("DDP008", "DDP010", "DDP011", "DDP012", "DDP015", "DDP020")


def _codes(results):
    return sorted((r.path, d.line, d.code) for r in results for d in r.diagnostics)


@pytest.mark.parametrize("name", ["main.py", "engine.py", "data.py", "utils.py", "model.py"])
def test_one_module_alone_is_silent_where_the_fact_lives_elsewhere(name):
    path = FIXTURES / "project_bad" / name
    linter = Linter(Settings(select=("ALL",), root=path.parent))
    result = linter.lint_source(path.read_text(encoding="utf-8"), name)
    assert [d.code for d in result.diagnostics if d.code in PROJECT_RULES] == []


def test_the_project_sees_what_single_files_cannot():
    folder = FIXTURES / "project_bad"
    files = sorted(folder.glob("*.py"))
    settings = Settings(select=PROJECT_RULES, root=folder)
    shown = {p: p.name for p in files}
    found = {(path, code) for path, _, code in _codes(lint_files(files, settings, jobs=1, display=shown))}
    assert found == {("data.py", "DDP008"), ("engine.py", "DDP012"), ("main.py", "DDP015"),
                     ("main.py", "DDP020"), ("main.py", "DDP010"), ("utils.py", "DDP011")}


def test_worker_processes_give_the_same_answers(tmp_path):
    folder = FIXTURES / "project_bad"
    files = sorted(folder.glob("*.py")) * 3  # enough files for the process pool
    settings = Settings(select=("ALL",), root=folder)
    shown = {p: p.name for p in files}
    assert _codes(lint_files(files, settings, jobs=2, display=shown)) == \
        _codes(lint_files(files, settings, jobs=1, display=shown))


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
