"""## What it does
Flags `parser.add_argument("--local_rank")` (or `--local-rank`) when the parsed
value is used as the device (`set_device`, `device_ids`, `torch.device`,
`.cuda(...)`, `.to(...)`, `CUDA_VISIBLE_DEVICES`), also after being passed on
into a parameter that becomes the device (`setup(lrank=args.local_rank)` with
`torch.cuda.set_device(lrank)` inside, or `args.gpu = gpu` then `set_device(args.gpu)`, or copied into another attribute
(`args.gpu = args.local_rank`, then `set_device(args.gpu)`),
in this module or another), and nothing
reads `os.environ["LOCAL_RANK"]` in this module or anywhere the entry script
reaches (its imports and calls: an independent script of the same folder does
not count).

Also flagged: a flag added through an alias of the method (`arg =
parser.add_argument; arg("--local_rank", ...)`). When several parsers take the
flag (a pre-parser that reads it, a full parser that only accepts it), only the
flags whose parsed value is read (`ns.local_rank` with `ns, _ =
pre.parse_known_args()`) are reported, when that can be told.

Also flagged: the flag copied into a config attribute (`config.LOCAL_RANK =
args.local_rank`, then `set_device(config.LOCAL_RANK)`): an attribute named
LOCAL_RANK is no read of the environment variable.

Not flagged: scripts that read `LOCAL_RANK` from the environment (as a fallback,
a default, or behind a version check; a read only compared with an integer, as in a
`print0` helper's `int(os.environ["LOCAL_RANK"]) == 0`, chooses no device and does not count); a parsed `--local_rank` that is never
used as a device (a variable merely called `local_rank` that the script binds from
something else, `local_rank = dist.get_rank()`, is not the flag, nor is an imported module's
value, `idr_torch.local_rank`; a parameter called
so, filled by its callers, is);  scripts that are their own launcher (the parent sets
`args.local_rank = i` before `Process(target=...)` / `mp.spawn`, or the spawned
worker stores the index it was given: `def main(gpu, args): args.local_rank = gpu`). A longer
variable that ends in LOCAL_RANK (`OMPI_COMM_WORLD_LOCAL_RANK`) is not the one
torchrun sets.

## Why is this bad?
`torch.distributed.launch` passed `--local_rank=N` on the command line;
`torchrun` (its replacement) passes nothing and sets the `LOCAL_RANK`
environment variable instead. Under `torchrun` every rank gets the argument's
default, so all processes pick the same GPU.

## Example
    parser.add_argument("--local_rank", type=int, default=0)
    args = parser.parse_args()
    torch.cuda.set_device(args.local_rank)

## Use instead
    parser.add_argument("--local_rank", type=int,
                        default=int(os.environ.get("LOCAL_RANK", 0)))
    args = parser.parse_args()
    torch.cuda.set_device(args.local_rank)

## References
- https://pytorch.org/docs/stable/elastic/run.html
- https://pytorch.org/docs/stable/distributed.html#launch-utility
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ddplint import names
from ddplint.analysis.values import environ_key, literal_str
from ddplint.analysis.models import project_of
from ddplint.analysis.roles import LAUNCHER, process_role
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.screen.facts import ARGV_LOCAL_RANK
from ddplint.analysis.semantic import SemanticIndex, dotted_name

HEAD = ("import argparse\nimport torch\nimport torch.distributed as dist\n"
        "parser = argparse.ArgumentParser()\n")
_DEVICE_SINKS = (names.SET_DEVICE, names.TORCH_DEVICE, names.DDP)
_DEVICE_METHODS = ("cuda", "to")


class LocalRankFromArgv(Rule):
    code, name, severity = "DDP022", "local-rank-from-argv", "warning"
    message = "--local_rank is used as the device but LOCAL_RANK is never read: under torchrun every rank gets the default"
    triggers = ("local_rank", "local-rank")
    # A script without torch.distributed of its own that hands --local_rank to a
    # DDP module's setup (``init_distributed_mode(params)``) is still a DDP
    # launcher script: the check asks the project for context itself.
    needs_ddp_context = False
    uses_project = True

    valid = [
        # The device comes from a cluster helper module's value, not from the parsed flag (a104 kiwano).
        Valid(HEAD + "import idr_torch\nparser.add_argument('--local_rank', type=int, default=None)\n"
                     "args = parser.parse_args()\n"
                     "dist.init_process_group('nccl', rank=idr_torch.rank, world_size=idr_torch.size)\n"
                     "torch.cuda.set_device(idr_torch.local_rank)\n"),
        # a variable that is merely called local_rank, bound from the global rank: the flag is never read
        # (that variable is DDP017's finding, not this rule's)
        Valid(HEAD + "parser.add_argument('--local_rank', type=int, default=0, help='no use')\n"
                     "args = parser.parse_args()\ndist.init_process_group('nccl')\n"
                     "local_rank = dist.get_rank()\ntorch.cuda.set_device(local_rank)\n"
                     "model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])\n"),
        # copied into another attribute that is only logged, not a device
        Valid(HEAD + "parser.add_argument('--local_rank', type=int, default=0)\nargs = parser.parse_args()\n"
                     "args.tag = args.local_rank\nprint('worker', args.tag)\ntorch.cuda.set_device(args.gpu)\n"),
        # Its own launcher: the parent gives each worker its index before starting it.
        Valid(HEAD + "from multiprocessing import Process\ndef run(args):\n    torch.cuda.set_device(args.local_rank)\n"
                     "    dist.init_process_group('nccl')\nparser.add_argument('--local_rank', type=int, default=0)\n"
                     "if __name__ == '__main__':\n    args = parser.parse_args()\n    workers = []\n"
                     "    for i in range(args.gpus):\n        args.local_rank = i\n"
                     "        w = Process(target=run, args=(args,))\n        w.start()\n        workers.append(w)\n"),
        # The config's LOCAL_RANK comes from the environment variable.
        Valid(HEAD + "import os\nparser.add_argument('--local_rank', type=int, default=0)\nargs = parser.parse_args()\n"
                     "cfg.LOCAL_RANK = int(os.environ.get('LOCAL_RANK', args.local_rank))\n"
                     "torch.cuda.set_device(cfg.LOCAL_RANK)\n"),
        Valid(HEAD + "parser.add_argument('--local_rank', type=int, default=int(os.environ.get('LOCAL_RANK', 0)))\n"
                     "args = parser.parse_args()\ntorch.cuda.set_device(args.local_rank)\n"),
        Valid(HEAD + "parser.add_argument('--local_rank', type=int, default=-1)\nargs = parser.parse_args()\n"
                     "if 'LOCAL_RANK' in os.environ:\n    args.local_rank = int(os.environ['LOCAL_RANK'])\n"
                     "torch.cuda.set_device(args.local_rank)\n"),
        Valid(HEAD + "parser.add_argument('--local_rank', type=int, default=0)\nargs = parser.parse_args()\n"
                     "print(args.local_rank)\n"),
        Valid(HEAD + "parser.add_argument('--local-rank', type=int)\nargs = parser.parse_args()\n"
                     "local_rank = int(os.getenv('LOCAL_RANK', args.local_rank))\ntorch.cuda.set_device(local_rank)\n"),
        Valid(HEAD + "parser.add_argument('--rank', type=int, default=0)\nargs = parser.parse_args()\n"
                     "torch.cuda.set_device(args.rank)\n"),
        Valid(HEAD + "parser.add_argument('--rank', '--local_rank', type=int, default=0)\n"
                     "args = parser.parse_args()\nprint(args.rank)\ntorch.cuda.set_device(args.gpu)\n"),
        Valid("import argparse\nimport torch\nparser = argparse.ArgumentParser()\n"
              "parser.add_argument('--local_rank', type=int)\nargs = parser.parse_args()\n"
              "torch.cuda.set_device(args.local_rank)\n"),  # not DDP code
        Valid(HEAD + "parser.add_argument('--local_rank', type=int)\nargs = parser.parse_args()\n"
                     "if version.parse(torch.__version__) >= version.parse('2.0'):\n"
                     "    args.local_rank = int(os.environ['LOCAL_RANK'])\n"
                     "model.cuda(args.local_rank)\n"),
        Valid(HEAD + "parser.add_argument('--local_rank', type=int)\nargs = parser.parse_args()\n"
                     "init_distributed(args)\n"),  # the device use lives elsewhere
        # passed on, but the parameter is not a device
        Valid(HEAD + "def log_rank(lrank):\n    print('rank', lrank)\n"
                     "parser.add_argument('--local_rank', type=int, default=0)\nargs = parser.parse_args()\n"
                     "log_rank(args.local_rank)\n"),
        # passed on, but another caller fills it from LOCAL_RANK: the script reads the environment
        Valid(HEAD + "import os\ndef setup(lrank):\n    torch.cuda.set_device(lrank)\n"
                     "parser.add_argument('--local_rank', type=int, default=0)\nargs = parser.parse_args()\n"
                     "setup(args.local_rank if args.local_rank >= 0 else int(os.environ['LOCAL_RANK']))\n"),
        # The spawned worker stores the index mp.spawn gave it in the flag's attribute.
        Valid("import argparse\nimport torch\nimport torch.distributed as dist\nimport torch.multiprocessing as mp\n"
              "def work(idx, cfg):\n    cfg.local_rank = idx\n    torch.cuda.set_device(cfg.local_rank)\n"
              "    dist.init_process_group('nccl', rank=idx, world_size=2)\n"
              "if __name__ == '__main__':\n    ap = argparse.ArgumentParser()\n"
              "    ap.add_argument('--local_rank', type=int, default=-1)\n"
              "    mp.spawn(work, nprocs=2, args=(ap.parse_args(),))\n"),
    ]
    invalid = [
        # The flag handed to a parameter named local_rank, which picks the device (a59 imagenette-ddp).
        Invalid(HEAD + "def train(local_rank):\n    dist.init_process_group('nccl')\n"
                       "    device_ids = list(range(local_rank * 2, local_rank * 2 + 2))\n"
                       "    model.cuda(device_ids[0])\n"
                       "parser.add_argument('--local_rank', type=int, default=0)\nargs = parser.parse_args()\n"
                       "train(args.local_rank)\n", line=9, column=1),
        # The flag added through an alias of the parser's method.
        Invalid("import argparse\nimport torch\nimport torch.distributed as dist\n"
                "cli = argparse.ArgumentParser()\nopt = cli.add_argument\nopt('--epochs', type=int, default=5)\n"
                "opt('--local_rank', type=int, default=0)\nflags = cli.parse_args()\n"
                "torch.cuda.set_device(flags.local_rank)\ndist.init_process_group('nccl')\n", line=7, column=1),
        # A pre-parser reads the flag and uses it; the full parser only accepts it: one report,
        # at the flag whose value is used.
        Invalid("import argparse\nimport torch\nimport torch.distributed as dist\n"
                "boot = argparse.ArgumentParser()\nboot.add_argument('--local_rank', type=int, default=0)\n"
                "known, _ = boot.parse_known_args()\ntorch.cuda.set_device(known.local_rank)\n"
                "def full_options():\n    p = argparse.ArgumentParser()\n"
                "    p.add_argument('--local_rank', type=int)\n    p.add_argument('--lr', type=float)\n"
                "    return p.parse_args()\n", line=5, column=1),
        # LOCAL_RANK read only to be compared with 0 (a print-on-main helper): no device comes from it.
        Invalid(HEAD + "import os\ndef print0(*a):\n    if 'LOCAL_RANK' not in os.environ or int(os.environ['LOCAL_RANK']) == 0:\n"
                       "        print(*a)\nparser.add_argument('--local_rank', type=int, default=-1)\n"
                       "opt = parser.parse_args()\ntorch.cuda.set_device(opt.local_rank)\n", line=9, column=1),
        Invalid(HEAD + "import os\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
                       "quiet = 0 != int(os.getenv('LOCAL_RANK', '0'))\n"
                       "parser.add_argument('--local-rank', type=int, default=0)\n"
                       "args = parser.parse_args()\nmodel = DDP(net, device_ids=[args.local_rank])\n", line=8, column=1),
        # The flag copied into another attribute that becomes the device (``args.gpu = args.local_rank``).
        Invalid(HEAD + "parser.add_argument('--local_rank', type=int, default=0)\nargs = parser.parse_args()\n"
                       "args.gpu = 0\nif args.distributed:\n    args.gpu = args.local_rank\n"
                       "    torch.cuda.set_device(args.gpu)\n", line=5, column=1),
        Invalid(HEAD + "def main(opt):\n    opt.device_index = opt.local_rank\n"
                       "    net = Net().cuda(opt.device_index)\n"
                       "parser.add_argument('--local-rank', dest='local_rank', type=int, default=-1)\n"
                       "main(parser.parse_args())\n", line=8, column=1),
        # The flag is copied into a config node whose LOCAL_RANK attribute becomes the device.
        Invalid(HEAD + "from yacs.config import CfgNode\nparser.add_argument('--local_rank', type=int, required=True)\n"
                       "args = parser.parse_args()\ncfg = CfgNode()\ncfg.LOCAL_RANK = args.local_rank\n"
                       "torch.cuda.set_device(cfg.LOCAL_RANK)\n", line=6, column=1),
        Invalid(HEAD + "parser.add_argument('--local_rank', type=int, default=0)\nargs = parser.parse_args()\n"
                       "torch.cuda.set_device(args.local_rank)\n", line=5, column=1),
        Invalid(HEAD + "parser.add_argument('--local-rank', type=int, default=-1)\nargs = parser.parse_args()\n"
                       "model = model.cuda(args.local_rank)\n", line=5, column=1),
        Invalid(HEAD + "parser.add_argument(\"--local_rank\", default=0, type=int)\nargs = parser.parse_args()\n"
                       "device = torch.device('cuda', args.local_rank)\n", line=5, column=1),
        Invalid(HEAD + "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                       "parser.add_argument('--local_rank', type=int)\nopt = parser.parse_args()\n"
                       "model = DDP(model, device_ids=[opt.local_rank], output_device=opt.local_rank)\n",
                line=6, column=1),
        Invalid(HEAD + "parser.add_argument('--local_rank', type=int, default=0)\nargs = parser.parse_args()\n"
                       "local_rank = args.local_rank\ntorch.cuda.set_device(local_rank)\n", line=5, column=1),
        Invalid(HEAD + "parser.add_argument('--local_rank', type=int, default=0)\nargs = parser.parse_args()\n"
                       "device = f'cuda:{args.local_rank}'\nmodel.to(device)\n", line=5, column=1),
        Invalid(HEAD + "def get_args():\n    parser.add_argument('--local_rank', type=int, default=0)\n"
                       "    return parser.parse_args()\nargs = get_args()\n"
                       "model.to(args.local_rank)\n", line=6, column=5),
        Invalid(HEAD + "import os\nparser.add_argument('--local_rank', type=int, default=0)\n"
                       "args = parser.parse_args()\nos.environ['CUDA_VISIBLE_DEVICES'] = str(args.local_rank)\n",
                line=6, column=1),
        # an alias option: argparse stores --local_rank in args.rank
        Invalid(HEAD + "parser.add_argument(\n    '--rank',\n    '--local_rank',\n    default=0,\n    type=int,\n)\n"
                       "args = parser.parse_args()\ntorch.cuda.set_device(args.rank)\n", line=5, column=1),
        # the parsed flag passed on into a parameter that becomes the device
        Invalid(HEAD + "def setup(lrank):\n    torch.cuda.set_device(lrank)\n    dist.init_process_group('nccl')\n"
                       "parser.add_argument('--local_rank', type=int, default=0)\nargs = parser.parse_args()\n"
                       "setup(lrank=args.local_rank)\n", line=8, column=1),
        Invalid(HEAD + "def place(model, lrank):\n    return model.to('cuda:%d' % lrank)\n"
                       "parser.add_argument('--local_rank', type=int, default=0)\nargs = parser.parse_args()\n"
                       "model = place(Net(), args.local_rank)\n", line=7, column=1),
        Invalid(HEAD + "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                       "def build(cfg, gpu):\n    return DDP(Net().cuda(gpu), device_ids=[gpu])\n"
                       "parser.add_argument('--local-rank', type=int, default=0)\nopts = parser.parse_args()\n"
                       "model = build(opts, opts.local_rank)\n", line=8, column=1),
        # Testing for LOCAL_RANK and writing it from the flag reads nothing torchrun set.
        Invalid(HEAD + "import os\nparser.add_argument('--local_rank', type=int, default=0)\nargs = parser.parse_args()\n"
                       "if 'LOCAL_RANK' not in os.environ:\n    os.environ['LOCAL_RANK'] = str(args.local_rank)\n"
                       "torch.cuda.set_device(args.local_rank)\n", line=6, column=1),
        # An MPI launcher's variable that ends in LOCAL_RANK is not the one torchrun sets.
        Invalid(HEAD + "import os\nparser.add_argument('--local_rank', type=int, default=0)\nargs = parser.parse_args()\n"
                       "if args.launcher == 'mpi':\n    args.local_rank = int(os.environ['OMPI_COMM_WORLD_LOCAL_RANK'])\n"
                       "torch.cuda.set_device(args.local_rank)\n", line=6, column=1),
        # The flag handed to a worker that stores it on an options object and uses that as the device.
        Invalid(HEAD + "def worker(gpu, args):\n    args.gpu = gpu\n    torch.cuda.set_device(args.gpu)\n"
                       "    dist.init_process_group('nccl')\ndef main():\n"
                       "    parser.add_argument('--local_rank', type=int, default=-1)\n    args = parser.parse_args()\n"
                       "    worker(args.local_rank, args)\n", line=10, column=5),
        Invalid(HEAD + "class Setup:\n    def __init__(self, index, cfg):\n        cfg.device_index = index\n"
                       "        torch.cuda.set_device(cfg.device_index)\n"
                       "parser.add_argument('--local_rank', type=int, default=0)\nopts = parser.parse_args()\n"
                       "Setup(opts.local_rank, opts)\n", line=9, column=1),
    ]

    def screen(self, sketch):
        """The screen (necessary for check() to report): True, False, or the project facts that must hold."""
        return "add_argument" in sketch.words and bool(sketch.strings & {"--local_rank", "--local-rank"})

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        project = project_of(index)
        if not index.in_ddp_context and not project.in_scope(index.path, lambda m: m.own_ddp_context):
            return
        if _names_the_variable(index) or any(project.modules[other].reads_local_rank_env
                                             for other in project.scope(index.path) if other != index.path):
            return
        flags = [site for site in index.method_calls("add_argument") + _alias_calls(index)
                 if any(literal_str(a.value) in ("--local_rank", "--local-rank") for a in site.node.args)]
        if not flags:
            return
        attributes = {"local_rank"} | {_destination(site) for site in flags}
        if _filled_by_own_launcher(index, attributes):
            return  # the script starts its workers itself and hands each its index
        if _used_as_device(index, attributes) or (project.complete and _device_use_of_this_flag(project, index.path)) \
                or _passed_into_a_device_parameter(project, index.path):
            read = [site for site in flags if _parsed_flag_read(index, site, attributes)] if len(flags) > 1 else []
            for site in read or flags:
                yield self.report(site.node, _message(site))


def _device_use_of_this_flag(project, path: str) -> bool:
    """A module in the project's reach of ``path`` uses a parsed ``local_rank`` as a device,
    where that can be this module's flag: not another entry script that imports this one and
    parses its own ``--local_rank`` (main_seg.py imports main_group_vit.py for a helper and sets
    its device from its own flag: a115 GroupViT)."""
    run = project.run_scope(path)
    for other in project.scope(path):
        module = project.modules[other]
        if module.local_rank_attr_as_device and (other == path or other in run or not module.adds_local_rank_flag):
            return True
    return False


def _alias_calls(index: SemanticIndex) -> list:
    """Calls through a name bound to a parser's method: ``arg = parser.add_argument``
    then ``arg("--local_rank", type=int)``."""
    found = []
    for site in index.calls:
        func = site.node.func
        if isinstance(func, cst.Name):
            values = index.reaching_values(func) or []
            if values and all(isinstance(v, cst.Attribute) and v.attr.value == "add_argument" for v in values):
                found.append(site)
    return found


def _parsed_flag_read(index: SemanticIndex, flag, attributes: set[str]) -> bool:
    """Several parsers take ``--local_rank`` (a pre-parser that picks the launch
    mode, the full parser that only accepts the flag): is this flag's value read,
    ``ns.local_rank`` where ``ns = parser.parse_args()`` (or ``ns, rest =
    parser.parse_known_args()``) of this flag's parser?"""
    parser = dotted_name(flag.receiver) if flag.receiver is not None else None
    if parser is None:
        return False
    namespaces: set[int] = set()
    for site in index.method_calls("parse_args", "parse_known_args"):
        if dotted_name(site.receiver) != parser:
            continue
        assign = index.parent(site.node)
        if isinstance(assign, cst.Assign) and len(assign.targets) == 1:
            target = assign.targets[0].target
            if isinstance(target, (cst.Tuple, cst.List)) and target.elements:
                target = target.elements[0].value
            if isinstance(target, cst.Name):
                namespaces.add(id(site.node))
    if not namespaces:
        return False
    found = []

    class Reads(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> None:
            if node.attr.value.lower() in attributes and isinstance(node.value, cst.Name):
                found.append(node.value)

    index.module.visit(Reads())
    for name in found:
        for binding in index.reaching(name.value, name):
            assign = binding.node if isinstance(binding.node, cst.Assign) else index.enclosing(binding.node, cst.Assign)
            value = binding.value if binding.value is not None else getattr(assign, "value", None)
            if value is not None and id(value) in namespaces:
                return True
    return False


def _filled_by_own_launcher(index: SemanticIndex, attributes: set[str]) -> bool:
    """``args.local_rank = i`` in launcher-parent code (``for i in range(n):
    args.local_rank = i; Process(target=init_processes, args=(..., args)).start()``):
    the script is its own launcher, not run under torchrun, and every worker
    gets its own index."""
    for (_, name), bindings in index.bindings.items():
        if "." not in name or name.split(".")[-1].lower() not in attributes:
            continue
        if any(b.kind == "assign" and process_role(index, b.node) == LAUNCHER for b in bindings):
            return True
        if any(b.kind == "assign" and _spawn_index(index, b) for b in bindings):
            return True
    return False


def _spawn_index(index: SemanticIndex, binding) -> bool:
    """``args.local_rank = gpu`` in ``def main(gpu, ...)`` that this module starts
    with ``mp.spawn(main, ...)``: the worker stores the index the spawn gave it."""
    value = binding.value
    function = index.enclosing(binding.node, cst.FunctionDef)
    if not isinstance(value, cst.Name) or not isinstance(function, cst.FunctionDef):
        return False
    params = function.params.params
    if not params or params[0].name.value != value.value:
        return False
    for site in index.calls:
        if (site.qualified_name or "").split(".")[-1] == "spawn" and site.node.args \
                and dotted_name(site.node.args[0].value) == function.name.value:
            return True
    return False


def _names_the_variable(index: SemanticIndex) -> bool:
    """A string of the module names the LOCAL_RANK variable (``os.environ["LOCAL_RANK"]``,
    ``getenv("LOCAL_RANK")``, a version check that mentions it); an attribute
    ``config.LOCAL_RANK`` filled from the flag does not."""
    return any(isinstance(value, str) and names.LOCAL_RANK_VARIABLE.search(value) is not None
               and not _tested_or_written(index, node) for node, value in index.strings)


def _tested_or_written(index: SemanticIndex, string: cst.CSTNode) -> bool:
    """``"LOCAL_RANK" in os.environ`` (a test) or ``os.environ["LOCAL_RANK"] = ...``
    (a write): neither reads the value torchrun set."""
    parent = index.parent(string)
    if isinstance(parent, cst.Comparison) and parent.left is string \
            and all(isinstance(c.operator, (cst.In, cst.NotIn)) for c in parent.comparisons):
        return True
    if isinstance(parent, cst.Index):
        subscript = index.parent(index.parent(parent))
        holder = index.parent(subscript) if isinstance(subscript, cst.Subscript) else None
        if isinstance(holder, cst.AssignTarget):
            return True
        read = subscript if isinstance(subscript, cst.Subscript) else None
    else:  # ``os.environ.get("LOCAL_RANK", 0)``, ``os.getenv("LOCAL_RANK")``
        call = index.parent(parent) if isinstance(parent, cst.Arg) else None
        read = call if isinstance(call, cst.Call) and call.args and call.args[0] is parent else None
    return read is not None and environ_key(index, read) is not None and _compared_with_integer(index, read)


def _compared_with_integer(index: SemanticIndex, read: cst.BaseExpression) -> bool:
    """``int(os.environ["LOCAL_RANK"]) == 0`` (a main-process test, as in a
    ``print0`` helper): the value is compared with an integer and picks no device."""
    node = read
    holder = index.parent(node)
    if isinstance(holder, cst.Arg):
        call = index.parent(holder)
        if isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value == "int":
            node, holder = call, index.parent(call)
    if isinstance(holder, cst.ComparisonTarget):
        comparison, other = index.parent(holder), holder.comparator
        if not isinstance(comparison, cst.Comparison) or len(comparison.comparisons) != 1:
            return False
        other = comparison.left if holder.comparator is node else holder.comparator
        operator = holder.operator
    elif isinstance(holder, cst.Comparison) and holder.left is node and len(holder.comparisons) == 1:
        other, operator = holder.comparisons[0].comparator, holder.comparisons[0].operator
    else:
        return False
    return isinstance(operator, (cst.Equal, cst.NotEqual)) and isinstance(other, cst.Integer)


def _message(site) -> str:
    required = site.keyword("required")
    if required is not None and isinstance(required.value, cst.Name) and required.value.value == "True":
        return ("--local_rank is required and used as the device but LOCAL_RANK is never read: torchrun passes "
                "no --local_rank, so the script stops at argument parsing")
    default = site.keyword("default")
    value = default.value if default is not None else None
    if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus) \
            and isinstance(value.expression, cst.Integer):
        shown = "-" + value.expression.value
    elif isinstance(value, cst.Integer):
        shown = value.value
    else:
        shown = "None" if value is None else None
    if shown is None:
        return LocalRankFromArgv.message
    return ("--local_rank is used as the device but LOCAL_RANK is never read: torchrun passes no --local_rank, "
            f"so every rank gets the default {shown} and they share one device")


def _passed_into_a_device_parameter(project, path: str) -> bool:
    """``setup(lrank=args.local_rank)`` where ``setup`` uses ``lrank`` as the
    device (values across calls: the parameter receives the parsed flag), in
    any module the entry script reaches."""
    for other in project.scope(path):
        module = project.modules[other]
        for name, function in module.functions.items():
            for param in function.device_params:
                tags = project.param_values(other, name, param)
                if tags and ARGV_LOCAL_RANK in tags:
                    return True
    return False


def _destination(site) -> str:
    """The attribute argparse stores the flag in: ``dest=``, else the first long
    option (``add_argument("--rank", "--local_rank")`` stores ``args.rank``)."""
    dest = site.keyword("dest")
    if dest is not None and literal_str(dest.value):
        return literal_str(dest.value)
    for arg in site.node.args:
        text = literal_str(arg.value) if arg.keyword is None else None
        if text and text.startswith("--"):
            return text[2:].replace("-", "_")
    return "local_rank"


def _mentions_local_rank(index: SemanticIndex, expr: cst.CSTNode, attributes: set[str], depth: int = 0) -> bool:
    """Does the expression read ``X.local_rank`` (or the flag's other
    destination, or a name bound from it)?"""
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Attribute) and node.attr.value.lower() in attributes \
                and not (isinstance(node.value, cst.Name) and "." not in index.imports.get(node.value.value, ".")):
            # (``import idr_torch`` ... ``idr_torch.local_rank``: a module's value, not the flag, a104
            # kiwano; ``from option import opt`` is the parsed options themselves)
            return True
        if isinstance(node, (cst.Name, cst.Attribute)) and depth < 2:
            # a name or attribute copied from the flag: ``args.gpu = args.local_rank``
            values = index.reaching_values(node) or []
            if any(_mentions_local_rank(index, v, attributes, depth + 1) for v in values):
                return True
        stack.extend(node.children)
    return False


def _used_as_device(index: SemanticIndex, attributes: set[str]) -> bool:
    sinks = index.calls_to(*_DEVICE_SINKS) + index.method_calls(*_DEVICE_METHODS, "set_device")
    for site in sinks:
        args = site.node.args
        if site.qualified_name == names.DDP:
            args = [a for a in args if a.keyword is not None and a.keyword.value in ("device_ids", "output_device")]
        if any(_mentions_local_rank(index, a.value, attributes) for a in args):
            return True
    for target, value in index.subscript_assignments:
        if index.qualified_name(target.value) == "os.environ" and _mentions_local_rank(index, value, attributes):
            return True
    return False
