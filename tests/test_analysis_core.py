"""The shared analysis the rules query: reaching bindings, what a value holds
(wrapped models, ranks), process roles and name resolution.

Each test builds a real semantic index from source and asks it about one use.
"""

import textwrap

import libcst as cst
import pytest

from ddplint import names
from ddplint.analysis.roles import LAUNCHER, SINGLE_PROCESS, WORKER, process_role
from ddplint.analysis.semantic import SemanticIndex
from ddplint.analysis.values import GLOBAL, LOCAL, is_ddp_model, is_global_rank, rank_sources


def index_of(source: str) -> SemanticIndex:
    source = textwrap.dedent(source).lstrip("\n")
    return SemanticIndex.build(cst.parse_module(source), source, "train.py")


def use(index: SemanticIndex, name: str, occurrence: int = -1) -> cst.Name:
    """The ``occurrence``-th read of ``name`` inside a call, in source order."""
    found: list[cst.Name] = []
    for site in index.calls:  # calls are in source order, outer before inner
        for node in _names(site.node):
            if node.value == name and not any(node is seen for seen in found):
                found.append(node)
    return found[occurrence]


def _names(node):
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name):
            yield current
        stack.extend(current.children)


def reaching_values(index, name, occurrence=-1):
    return sorted(cst.Module([]).code_for_node(b.value) if b.value is not None else b.kind
                  for b in index.reaching(name, use(index, name, occurrence)))


# ---------------------------------------------------------------------- reaching bindings
def test_branches_merge_and_later_bindings_kill_earlier_ones():
    index = index_of("""
        net = Net()
        if distributed:
            net = DDP(net)
        else:
            net = net.cuda()
        run(net)
        net = None
        other(net)
    """)
    assert reaching_values(index, "net", -2) == ["DDP(net)", "net.cuda()"]
    assert reaching_values(index, "net", -1) == ["None"]


def test_an_if_without_else_keeps_the_earlier_binding():
    index = index_of("""
        rank = args.gpu
        if "SLURM_PROCID" in os.environ:
            rank = int(os.environ["SLURM_PROCID"])
        use(rank)
    """)
    assert reaching_values(index, "rank") == ["args.gpu", 'int(os.environ["SLURM_PROCID"])']


def test_loops_carry_bindings_around_and_out():
    index = index_of("""
        total = 0
        for x in loader:
            show(total)
            total = total + x
        final(total)
    """)
    assert reaching_values(index, "total", 0) == ["0", "total + x"]
    assert reaching_values(index, "total", -1) == ["0", "total + x"]


def test_continue_skips_the_rest_of_the_iteration_and_break_leaves():
    index = index_of("""
        acc = 0.0
        for i, xb in enumerate(loader):
            acc = acc + xb
            if i % k:
                continue
            acc = 0.0
        report(acc)
    """)
    assert reaching_values(index, "acc") == ["0.0", "0.0", "acc + xb"]  # the start and the reset


def test_while_true_leaves_only_through_break():
    index = index_of("""
        state = "start"
        while True:
            state = step()
            if state is None:
                break
        done(state)
    """)
    assert reaching_values(index, "state") == ["step()"]


def test_return_ends_a_path():
    index = index_of("""
        def f(flag):
            device = "cuda:0"
            if flag:
                device = "cpu"
                return device
            return use(device)
    """)
    assert reaching_values(index, "device") == ['"cuda:0"']


def test_handlers_see_every_state_of_the_try_body():
    index = index_of("""
        ckpt = None
        try:
            ckpt = load(path)
            ckpt = fix(ckpt)
        except OSError:
            warn(ckpt)
    """)
    assert reaching_values(index, "ckpt") == ["None", "fix(ckpt)", "load(path)"]


def test_parameters_reach_the_function_body_until_rebound():
    index = index_of("""
        def fit(rank, args):
            probe(rank)
            if args.slurm:
                rank = int(os.environ["SLURM_PROCID"])
            torch.cuda.set_device(rank)
    """)
    assert reaching_values(index, "rank", 0) == ["param"]
    assert reaching_values(index, "rank", -1) == ['int(os.environ["SLURM_PROCID"])', "param"]


def test_a_function_reads_the_module_bindings_that_reach_the_end_of_the_module():
    index = index_of("""
        model = Net()
        model = DDP(model)
        def evaluate():
            return model(x)
    """)
    assert reaching_values(index, "model") == ["DDP(model)"]


def test_comprehension_variables_stay_in_their_comprehension():
    index = index_of("""
        x = torch.zeros(3)
        ys = [f(x) for x in items]
        g(x)
    """)
    assert reaching_values(index, "x", -1) == ["torch.zeros(3)"]
    assert [b.kind for b in index.reaching("x", use(index, "x", 0))] == ["loop"]


def test_tuple_assignment_binds_each_element_to_its_value():
    index = index_of("""
        net, cfg = self.net, self.cfg
        run(net)
    """)
    assert reaching_values(index, "net") == ["self.net"]


# ---------------------------------------------------------------------- wrapped models
DDP_IMPORT = "from torch.nn.parallel import DistributedDataParallel as DDP\n"


@pytest.mark.parametrize("source", [
    DDP_IMPORT + "if ddp:\n    net = DDP(net)\nelse:\n    net = net.cuda()\nnet(x)\n",
    DDP_IMPORT + "net = DDP(net) if cuda else net\nnet(x)\n",
    DDP_IMPORT + "model = DDP(model)\nmodel = model.to(device)\nmodel(x)\n",
    DDP_IMPORT + "class T:\n    def __init__(self, m):\n        self.net = DDP(m)\n"
                 "    def step(self, x):\n        net, cfg = self.net, self.cfg\n        net(x)\n",
    "import torch\nWrapper = torch.nn.parallel.DistributedDataParallel\nmodel = Wrapper(model)\nmodel(x)\n",
    "from mmcv.parallel import MMDistributedDataParallel\nmodel = MMDistributedDataParallel(model)\nmodel(x)\n",
])
def test_wrapped_models_are_seen_through_branches_aliases_and_pass_throughs(source):
    index = index_of(source)
    site = index.calls[-1]
    assert is_ddp_model(index, site.node.func)


@pytest.mark.parametrize("source", [
    DDP_IMPORT + "model = DDP(model)\nraw = model.module if hasattr(model, 'module') else model\nraw(x)\n",
    DDP_IMPORT + "model = DDP(model)\nmodel = Net()\nmodel(x)\n",
    DDP_IMPORT + "def f(model):\n    model(x)\n",
])
def test_unwrapped_and_rebound_models_are_not_wrapped(source):
    index = index_of(source)
    assert not is_ddp_model(index, index.calls[-1].node.func)


# ---------------------------------------------------------------------- ranks
@pytest.mark.parametrize("source,expected", [
    ("rank = dist.get_rank()\ndev(rank)\n", True),
    ("local_rank = dist.get_rank()\ndev(local_rank)\n", True),
    ("rank = int(os.environ['LOCAL_RANK'])\ndev(rank)\n", False),
    ("rank = dist.get_rank() % torch.cuda.device_count()\ndev(rank)\n", False),
    ("env = {k: os.environ[k] for k in ('RANK', 'WORLD_SIZE')}\nrank = int(env['RANK'])\ndev(rank)\n", True),
    ("env = dict(os.environ)\ndev(int(env.get('RANK', 0)))\n", True),
    ("rank = args.gpu\nif slurm:\n    rank = int(os.environ['SLURM_PROCID'])\ndev(rank)\n", True),
    ("rank = int(os.environ['LOCAL_RANK'])\nif slurm:\n    rank = int(os.environ['SLURM_PROCID'])\ndev(rank)\n",
     False),
    ("rank = args.rank\ndev(rank)\n", False),
])
def test_the_global_rank_is_decided_by_the_reaching_bindings(source, expected):
    index = index_of("import os\nimport torch\nimport torch.distributed as dist\n" + source)
    argument = index.calls_by_method["dev"][0].node.args[0].value
    assert is_global_rank(index, argument) is expected


def test_rank_sources_name_every_origin():
    index = index_of("""
        import os
        import torch.distributed as dist
        r = dist.get_rank() if dist.is_initialized() else int(os.environ["LOCAL_RANK"])
        dev(r)
    """)
    assert {GLOBAL, LOCAL} <= rank_sources(index, index.calls[-1].node.args[0].value)


# ---------------------------------------------------------------------- process roles
def test_launcher_parent_worker_and_single_process_code():
    index = index_of("""
        import torch
        import torch.multiprocessing as mp

        def worker(gpu, args):
            a = torch.device("cuda:0")

        def main():
            b = torch.device("cuda:0")
            if args.distributed:
                mp.spawn(worker, nprocs=4, args=(args,))
            else:
                c = torch.device("cuda:0")
                worker(0, args)
    """)
    devices = index.calls_to(names.TORCH_DEVICE)
    assert [process_role(index, site.node) for site in devices] == [WORKER, LAUNCHER, SINGLE_PROCESS]


def test_functions_only_the_launcher_calls_run_in_the_parent():
    """An argument check called from the ``__main__`` block before the spawn, a test
    pass the launcher runs after the join (transitively), are launcher-parent code;
    a helper the worker calls too, and the torchrun arm of the ``__main__`` block,
    are worker code."""
    index = index_of("""
        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp

        def check(args):
            return torch.device("cuda:0")

        def evaluate(args):
            return report(args)

        def report(args):
            return torch.device("cuda:1")

        def shared(args):
            return torch.device("cuda:2")

        def worker(gpu, args):
            shared(args)

        def main(args):
            mp.spawn(worker, nprocs=4, args=(args,))
            evaluate(args)
            shared(args)

        if __name__ == "__main__":
            if torchrun:
                t = torch.device("cuda:3")
            else:
                p = torch.device("cuda:4")
                main(check(args))
    """)
    devices = index.calls_to(names.TORCH_DEVICE)
    assert [process_role(index, site.node) for site in devices] == [LAUNCHER, LAUNCHER, WORKER, WORKER, LAUNCHER]


@pytest.mark.parametrize("test,arm,role", [
    ("world > 1", "else", SINGLE_PROCESS),
    ("args.nprocs == 1", "body", SINGLE_PROCESS),
    ("1 < num_processes", "else", SINGLE_PROCESS),
    ("not use_ddp", "body", SINGLE_PROCESS),
    ("args.local_rank == -1", "body", SINGLE_PROCESS),
    ("args.local_rank == -1", "else", WORKER),
    ("epoch > 1", "else", WORKER),
    # a ``dist: bool`` parameter / flag, not ``import torch.distributed as dist`` (a34 pachyderm)
    ("dist", "else", SINGLE_PROCESS),
    ("self.dist", "else", SINGLE_PROCESS),
    # predicates named for a distributed run (a34 coldhottrain ``is_dist()``, DETR's helper)
    ("is_dist()", "else", SINGLE_PROCESS),
    ("utils.is_dist_avail_and_initialized()", "else", SINGLE_PROCESS),
    ("not is_distributed()", "body", SINGLE_PROCESS),
    ("is_main_process()", "else", WORKER),
    ("dist.get_world_size() > 1", "else", SINGLE_PROCESS),
    ("get_world_size() == 1", "body", SINGLE_PROCESS),
    # an FSDP switch in a module without a DDP wrap (llama-recipes' ``enable_fsdp``, a35 MoE-RBench)
    ("train_config.enable_fsdp", "else", SINGLE_PROCESS),
    ("train_config.enable_fsdp or distil_config.enable_fsdp", "else", SINGLE_PROCESS),
    ("args.distributed or args.debug", "else", WORKER),
    ("mode == 'train_single'", "body", SINGLE_PROCESS),
    ("args.mode == 'train_multi'", "else", SINGLE_PROCESS),
    ("args.launcher == 'none'", "body", SINGLE_PROCESS),
    ("args.launcher != 'none'", "else", SINGLE_PROCESS),
    ("args.mode == 'multi_scale'", "else", WORKER),
])
def test_single_process_branches(test, arm, role):
    body, orelse = ("x = f()", "y = 1") if arm == "body" else ("y = 1", "x = f()")
    index = index_of(f"if {test}:\n    {body}\nelse:\n    {orelse}\n")
    call = next(site.node for site in index.calls if isinstance(site.node.func, cst.Name) and site.node.func.value == "f")
    assert process_role(index, call) == role


def test_torch_distributed_itself_is_no_switch():
    index = index_of("import torch.distributed as dist\nif dist:\n    y = 1\nelse:\n    x = f()\n")
    call = next(site.node for site in index.calls if isinstance(site.node.func, cst.Name) and site.node.func.value == "f")
    assert process_role(index, call) == WORKER


def test_an_fsdp_switch_beside_a_ddp_wrap_leaves_the_other_arm_a_worker():
    index = index_of("from torch.nn.parallel import DistributedDataParallel as DDP\n"
                     "if args.fsdp:\n    m = FSDP(m)\nelse:\n    m = DDP(m)\n    x = f()\n")
    call = next(site.node for site in index.calls if isinstance(site.node.func, cst.Name) and site.node.func.value == "f")
    assert process_role(index, call) == WORKER


def test_a_function_only_single_process_arms_call_is_single_process():
    source = textwrap.dedent("""
        class Trainer:
            def train(self, use_ddp=False):
                if use_ddp:
                    self.loop_ddp()
                else:
                    self.loop_single()

            def loop_single(self):
                f()

            def loop_ddp(self):
                f()

        def helper():
            f()

        def main(args):
            if not args.distributed:
                helper()
            return helper
    """)
    index = index_of(source)
    single, ddp, helper = (process_role(index, site.node) for site in index.calls
                           if isinstance(site.node.func, cst.Name) and site.node.func.value == "f")
    # ``helper`` is also handed on (returned): it may run anywhere
    assert (single, ddp, helper) == (SINGLE_PROCESS, WORKER, WORKER)


# ---------------------------------------------------------------------- names
def test_star_imports_and_submodule_imports_resolve_conventional_names():
    index = index_of("from utils import *\ndist.barrier()\ntorch.save(m, p)\n")
    assert {s.qualified_name for s in index.calls} == {"torch.distributed.barrier", "torch.save"}
    index = index_of("import torch.distributed as dist\ntorch.save(m, p)\n")
    assert index.calls[0].qualified_name == "torch.save"


def test_a_local_name_is_never_mistaken_for_a_star_imported_one():
    index = index_of("from utils import *\ndef dist():\n    pass\ndist.barrier()\n")
    assert index.calls[-1].qualified_name is None


def test_accelerator_api_is_set_device():
    index = index_of("import torch\ntorch.accelerator.set_device_index(rank)\n")
    assert index.calls[0].qualified_name == names.SET_DEVICE


# ---------------------------------------------------------------------- values across calls
def test_a_global_rank_passed_as_an_argument_is_a_global_rank_inside(tmp_path):
    from ddplint.engine import Linter
    from ddplint.config import Settings
    from ddplint.screen.facts import summarize
    from ddplint.screen.project import Project

    source = textwrap.dedent("""
        import os
        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp

        def fit(proc):
            torch.cuda.set_device(proc)

        def worker(gpu, args):
            torch.cuda.set_device(gpu)

        if __name__ == "__main__":
            if "RANK" in os.environ:
                fit(int(os.environ["RANK"]))
            else:
                mp.spawn(worker, nprocs=4, args=(None,))
    """).lstrip()
    linter = Linter(Settings(select=("DDP017",), root=tmp_path))
    linter.project = Project([summarize(source, "train.py")])
    found = [(d.code, d.line) for d in linter.lint_source(source, "train.py").diagnostics]
    # ``fit(RANK)`` on the torchrun arm; the spawn index in worker() stays exempt. (fit called on the
    # path of the spawn would be launcher-parent code: RULES.md, Clarifications, process roles.)
    assert found == [("DDP017", 7)]


def test_node_rank_arithmetic_is_a_global_rank():
    index = index_of("rank = args.node_rank * ngpus_per_node + gpu\ndev(rank)\n")
    assert is_global_rank(index, index.calls_by_method["dev"][0].node.args[0].value)


# ---------------------------------------------------------------------- devices and roles per function
def _index_at(source: str, path: str) -> SemanticIndex:
    source = textwrap.dedent(source).lstrip("\n")
    return SemanticIndex.build(cst.parse_module(source), source, path)


def test_unit_test_roles_are_decided_per_test_function():
    index = _index_at("""
        import torch
        import torch.multiprocessing as mp

        @RunIf(min_cuda_gpus=2)
        def test_marked():
            a = torch.load(p)

        def test_two_devices():
            fabric = Fabric(accelerator="cuda", devices=2)
            b = torch.load(p)

        def test_one_device():
            trainer = Trainer(max_steps=1)
            c = torch.load(p)

        def test_spawns():
            d = torch.load(p)
            mp.spawn(worker, nprocs=2)

        def helper():
            e = torch.load(p)
    """, "tests/test_resume.py")
    loads = index.calls_to(names.TORCH_LOAD)
    assert [process_role(index, site.node) for site in loads] == [WORKER, WORKER, SINGLE_PROCESS, LAUNCHER, WORKER]


@pytest.mark.parametrize("test,arm,zero_only", [
    ("rank == 0", "body", True),
    ("fabric.global_rank != 0", "orelse", True),
    ("rank in [-1, 0]", "body", True),
    ("is_main_process()", "body", True),
    ("rank != 0", "body", False),
    ("args.local_rank == -1", "body", False),
    ("rank == 0 or force", "body", False),
])
def test_code_that_runs_on_rank_zero_only(test, arm, zero_only):
    from ddplint.analysis.roles import runs_on_rank_zero_only

    body, orelse = ("x = f()", "y = 1") if arm == "body" else ("y = 1", "x = f()")
    index = index_of(f"if {test}:\n    {body}\nelse:\n    {orelse}\n")
    assert runs_on_rank_zero_only(index, index.calls_to("f")[0].node if index.calls_to("f") else
                                  index.method_calls("f")[0].node) is zero_only


@pytest.mark.parametrize("source,kind", [
    ("d = torch.device('cuda' if ok else 'cpu')\nuse(d)\n", "bare-cuda"),
    ("d = 'cuda' if ok else 'cpu'\nuse(d)\n", "bare-cuda"),
    ("d = torch.device('cpu')\nuse(d)\n", "cpu"),
    ("d = torch.device('cuda', local_rank)\nuse(d)\n", None),
    ("d = torch.device(f'cuda:{local_rank}' if ok else 'cpu')\nuse(d)\n", None),
    ("def wrap(m, d):\n    use(d)\nwrap(net, torch.device('cuda'))\n", "bare-cuda"),
    ("def wrap(m, d):\n    use(d)\nwrap(net, torch.device('cuda', 1))\n", None),
])
def test_device_kind_follows_branches_names_and_call_arguments(source, kind):
    from ddplint.analysis.values import device_kind

    index = index_of("import torch\n" + source)
    assert device_kind(index, index.calls_by_method["use"][0].node.args[0].value) == kind


def test_a_binding_nothing_reads():
    from ddplint.analysis.values import binding_is_read

    index = index_of("A = 'cuda:0'\nB = 'cuda:0'\nB = other\nC = 'cuda:0'\ndef f():\n    return B, C\n")
    first = {name: index.bindings[(id(index.module), name)][0] for name in "ABC"}
    assert [binding_is_read(index, first[name]) for name in "ABC"] == [False, False, True]


def test_a_rank_returned_by_a_setup_helper_is_followed_into_the_unpacking():
    index = index_of("""
        import os
        import torch.distributed as dist

        def setup():
            if "RANK" in os.environ:
                return dist.get_rank(), int(os.environ["LOCAL_RANK"])
            return 0, 0

        rank, local = setup()
        dev(rank)
        dev(local)
    """)
    uses = index.calls_by_method["dev"]
    assert [is_global_rank(index, site.node.args[0].value) for site in uses] == [True, False]


def test_forward_sites_follow_each_binding_once_in_names_rebound_from_each_other(monkeypatch):
    # A recurrence that rebinds names from each other in a loop (real metric code does
    # this): every read reaches two bindings of three names, so following bindings
    # without remembering them fans out exponentially with the depth (a real repository
    # took hours in DDP014). The answer must stay the model call, found in few steps.
    from ddplint.analysis import flow

    index = index_of("""
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(net)
        for x in loader:
            a = model(x)
            b = a * 2
            c = b + a
            for _ in range(4):
                a = a + b + c
                b = b * a - c
                c = c - a * b + a
            loss = a + b + c
            loss.backward()
    """)
    calls = []
    real = flow.forward_sites

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(flow, "forward_sites", counting)
    backward = next(site for site in index.calls if site.method == "backward")
    found = real(index, backward.node.func.value, backward.order)
    assert {cst.Module([]).code_for_node(call) for call in found} == {"model(x)"}
    assert len(calls) < 100
