"""## What it does
Flags the global rank used as a CUDA device index: `torch.device(f"cuda:{rank}")`
(also `"cuda:%d" % rank`, `"cuda:{}".format(rank)`, `"cuda:" + str(rank)`),
`torch.device("cuda", rank)`, `torch.cuda.set_device(rank)`,
`torch.accelerator.set_device_index(rank)`, `.to(rank)`, `.cuda(rank)`,
`torch.device(rank)`, `device_ids=[rank]`, `device=rank`, FSDP's or `init_process_group`'s
`device_id=rank`, `os.environ["CUDA_VISIBLE_DEVICES"] = str(rank)`,
where `rank` holds `dist.get_rank()` or the
`RANK` environment variable (also `SLURM_PROCID`, `OMPI_COMM_WORLD_RANK`, ...),
the global rank of a multi-node launch (`node_rank * ngpus_per_node + gpu`), or a
framework's global process index (`accelerator.process_index`, `fabric.global_rank`).
The value is followed through every binding that may reach the use (a name
rebound from `SLURM_PROCID` on one branch), copies of the environment
(`env = {k: os.environ[k] for k in keys}`), the arguments of the project's
calls (`fit(int(os.environ["RANK"]))` then `set_device(proc)` inside `fit`,
also in another module), the attributes of objects passed in (`CFG.rank =
int(os.environ["RANK"]); train(CFG)` then `device_ids=[config.rank]` inside
`train(config)`), the attributes a setup helper of the project writes into an object
handed to it (`dist_setup_launch(args)` doing `args.rank = int(os.environ["RANK"])`,
then `device_ids=[args.rank]`, also from another module; the helper's value outranks the
attribute's name: `args.local_rank = int(os.environ["RANK"])` is the global rank, and so is
`args.local_rank` read in `Model(args)` or through `self.args` of a class that stores it)
and the tuples a setup helper returns (`rank, world = setup_ddp()`).

## Why is this bad?
The global rank counts processes across all nodes; the device index counts GPUs
on one node. On one node they coincide, so the bug passes every local test. On
the second node rank 8 asks for `cuda:8` on an 8-GPU machine and the job dies
with "invalid device ordinal" (or, with fewer ranks per node than GPUs, silently
doubles up ranks on some GPUs).

## Example
    rank = dist.get_rank()
    torch.cuda.set_device(rank)

## Use instead
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)

The binding decides, not the name: `local_rank = dist.get_rank()` is flagged,
and a value read from `LOCAL_RANK` is fine whatever it is called. Not flagged:
`rank % torch.cuda.device_count()`; the process index that `mp.spawn` passes to
its target (a local index on every node), only when the function really is the
target of a spawn call (a function named `worker(gpu, ...)` that is called with
`dist.get_rank()` is flagged); a parameter whose callers disagree (one passes
the local rank); an attribute read before the same function rebinds it to the
global rank (`set_device(args.local_rank)`, then `args.local_rank = dist.get_rank()`:
only later uses are flagged), or one another function binds on its own object
(`args.rank` of `setup_mp(args)`, whose callers pass the spawn index, is not
`setup_launch`'s `args.rank = int(os.environ["RANK"])`); `get_rank(group)` (a subgroup rank); code that is not a DDP
worker (launcher-parent code, single-process branches); a use only global rank 0
runs (`if rank == 0:`, `if self.device == 0:` where `self.device` holds the global rank:
device 0 is rank 0's own on any node); unit tests (`test_*.py`,
`tests/`), which run on one node; values ddplint cannot trace.

Fix (unsafe): when a variable holding the local rank (read from `LOCAL_RANK`,
`SLURM_LOCALID` or `OMPI_COMM_WORLD_LOCAL_RANK`) is bound earlier in scope, the
global rank is replaced by it. Unsafe: on a launch whose local rank is not the
intended device (a custom `CUDA_VISIBLE_DEVICES` scheme) the device changes.

## References
- https://pytorch.org/docs/stable/elastic/run.html#environment-variables
- https://pytorch.org/docs/stable/distributed.html#torch.distributed.get_rank
"""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from ddplint.analysis.values import (cuda_index_strings, device_arguments, environ_key, global_rank_origin,
                                     is_global_rank, is_test_module, literal_int, literal_str)
from ddplint.analysis.roles import is_worker_code, runs_on_rank_zero_only
from ddplint.fixes import UNSAFE, NodeFix, node_fix, replace
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import SemanticIndex

DIST = "import os\nimport torch\nimport torch.distributed as dist\n"


class GlobalRankAsDevice(Rule):
    code, name, severity = "DDP017", "global-rank-as-device", "error"
    message = ("the global rank is used as a CUDA device index: it exceeds the GPU count on the "
               "second node; use LOCAL_RANK")
    # Device sinks too: a global rank may arrive as a parameter named anything (``warm_up(gpu)``).
    triggers = ("rank", "RANK", "SLURM_PROCID", "cuda", "device", ".to(")
    needs_ddp_context = True

    valid = [
        # The object carries the local rank into the function.
        Valid("from src import *\n\ndef train(config):\n"
              "    model = DDP(build(config).cuda(), device_ids=[config.rank])\n\n"
              "if __name__ == '__main__':\n    CFG = get_config()\n"
              "    CFG.rank = int(os.environ['LOCAL_RANK'])\n"
              "    dist.init_process_group('nccl')\n    train(CFG)\n"),
        # A leftover assignment whose value nothing reads chooses no device.
        Valid(DIST + "def restore(path):\n    rank = dist.get_rank()\n"
                     "    state = torch.load(path, map_location='cpu')\n    target = 'cuda:%d' % rank\n"
                     "    return state\n"),
        Valid(DIST + "local_rank = int(os.environ['LOCAL_RANK'])\ntorch.cuda.set_device(local_rank)\n"),
        Valid(DIST + "rank = int(os.environ['LOCAL_RANK'])\nmodel.to(rank)\n"),
        Valid(DIST + "rank = dist.get_rank()\ndevice = rank % torch.cuda.device_count()\n"
              "torch.cuda.set_device(device)\n"),
        Valid(DIST + "def worker(rank, world_size):\n    dist.init_process_group('nccl', rank=rank, "
              "world_size=world_size)\n    torch.cuda.set_device(rank)\n"),
        Valid(DIST + "rank = dist.get_rank()\nif rank == 0:\n    print('main')\nmodel.to(local_rank)\n"),
        Valid(DIST + "rank = dist.get_rank()\nsampler = DistributedSampler(ds, rank=rank)\n"),
        Valid("import os\nimport torch\nrank = int(os.environ['RANK'])\ntorch.cuda.set_device(rank)\n"),
        Valid(DIST + "gpu = args.gpu\nrank = dist.get_rank()\ndevice = torch.device(f'cuda:{gpu}')\n"),
        Valid(DIST + "torch.cuda.set_device(dist.get_rank())\n", filename="tests/unit/test_comm.py"),
        # the spawn index of a real mp.spawn target (single-node launch)
        Valid(DIST + "import torch.multiprocessing as mp\ndef worker(rank, world_size):\n"
              "    dist.init_process_group('nccl', rank=rank, world_size=world_size)\n"
              "    torch.cuda.set_device(rank)\nif __name__ == '__main__':\n"
              "    mp.spawn(worker, nprocs=4, args=(4,))\n"),
        # a helper whose callers pass the local rank
        Valid(DIST + "def fit(proc):\n    torch.cuda.set_device(proc)\nfit(int(os.environ['LOCAL_RANK']))\n"),
        # callers that disagree: not a global rank
        Valid(DIST + "def fit(proc):\n    torch.cuda.set_device(proc)\n"
              "fit(int(os.environ['LOCAL_RANK']))\nfit(dist.get_rank())\n"),
        # the setup helper returns the local rank
        Valid(DIST + "def setup_ddp():\n    return int(os.environ['LOCAL_RANK']), dist.get_world_size()\n"
              "lrank, world = setup_ddp()\ntorch.cuda.set_device(lrank)\n"),
        # several devices listed (a GPU inventory), and a subgroup rank
        Valid(DIST + "torch.cuda.set_device(dist.get_rank(group=tp_group))\n"),
        # device strings built around a local rank, and per-process visibility from the local rank
        Valid(DIST + "lrank = int(os.environ['LOCAL_RANK'])\ndevice = torch.device('cuda:%d' % lrank)\n"
              "other = 'cuda:{}'.format(dist.get_rank() % torch.cuda.device_count())\n"),
        Valid(DIST + "os.environ['CUDA_VISIBLE_DEVICES'] = str(int(os.environ['LOCAL_RANK']))\n"
              "print('rank %d of %d' % (dist.get_rank(), dist.get_world_size()))\n"),
        # torch.device of a device string, and FSDP bound to the local rank
        Valid(DIST + "rank = dist.get_rank()\ndevice = torch.device(args.device)\n"
              "model = FSDP(model, device_id=int(os.environ['LOCAL_RANK']))\n"),
        # framework objects' local indices
        Valid(DIST + "from accelerate import Accelerator\nacc = Accelerator()\n"
              "device = torch.device(f'cuda:{acc.local_process_index}')\n"
              "torch.cuda.set_device(fabric.local_rank)\n"),
        # process roles: a single-process branch, and launcher-parent code before mp.spawn
        Valid(DIST + "rank = int(os.environ.get('RANK', 0))\nif world_size == 1:\n    torch.cuda.set_device(rank)\n"
              "else:\n    dist.init_process_group('nccl')\n    torch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n"),
        Valid(DIST + "import torch.multiprocessing as mp\ndef worker(gpu, cfg):\n    torch.cuda.set_device(gpu)\n"
              "def launch(cfg):\n    first = int(os.environ.get('RANK', 0))\n"
              "    torch.cuda.set_device(first)\n    mp.spawn(worker, nprocs=2, args=(cfg,))\n"),
        # The same global rank computed, but the device is the spawn index.
        Valid(DIST + "def main_worker(gpu, ngpus_per_node, args):\n"
              "    args.rank = args.rank * ngpus_per_node + gpu\n"
              "    dist.init_process_group('nccl', rank=args.rank, world_size=args.world_size)\n"
              "    torch.cuda.set_device(gpu)\n"),
        # A product with a count that is not the per-node GPU count.
        Valid(DIST + "def worker(gpu, args):\n    offset = args.rank * args.chunks + gpu\n"
              "    x = x.to(offset)\n"),
    ]
    invalid = [
        # The trainer is handed the global rank as its device: reported where it is handed (the
        # trainer's use under ``if self.device == 0:`` runs on global rank 0 alone, whose device 0
        # is its own on any node; a102 E-Zero).
        Invalid("""\
import os
import torch
import torch.distributed as dist


class Trainer:
    def __init__(self, model, device):
        self.model, self.device = model, device

    def fit(self, loader, local_rank):
        for x in loader:
            self.model(x.to(local_rank)).mean().backward()
        if self.device == 0:
            zeroshot_eval(model=self.model, device=self.device)


def main(model, loader):
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    Trainer(model.to(local_rank), device=dist.get_rank()).fit(loader, local_rank)
""", line=20, column=42,
                fixed="""\
import os
import torch
import torch.distributed as dist


class Trainer:
    def __init__(self, model, device):
        self.model, self.device = model, device

    def fit(self, loader, local_rank):
        for x in loader:
            self.model(x.to(local_rank)).mean().backward()
        if self.device == 0:
            zeroshot_eval(model=self.model, device=self.device)


def main(model, loader):
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    Trainer(model.to(local_rank), device=local_rank).fit(loader, local_rank)
"""),
        # Both arms of the apex switch wrap in DDP: the else is no single-process run (a62 HyCTAS).
        Invalid(DIST + "try:\n    from apex.parallel import DistributedDataParallel as DDP\n    has_apex = True\n"
                       "except ImportError:\n    from torch.nn.parallel import DistributedDataParallel as DDP\n"
                       "    has_apex = False\n"
                       "def main(args, model):\n    dist.init_process_group(backend='nccl', init_method='env://')\n"
                       "    args.local_rank = dist.get_rank()\n    if has_apex:\n"
                       "        model = DDP(model, delay_allreduce=True)\n    else:\n"
                       "        model = DDP(model, device_ids=[args.local_rank])\n", line=16, column=40),
        # The rank an object carries into a function (``CFG.rank = RANK`` then ``train(CFG)``,
        # a56 nia23soc), also with ``os`` from a star import.
        Invalid("from src import *\n\ndef train(config):\n"
                "    model = DDP(build(config).cuda(), device_ids=[config.rank])\n\n"
                "if __name__ == '__main__':\n    CFG = get_config()\n"
                "    CFG.rank = int(os.environ['RANK'])\n"
                "    dist.init_process_group('nccl', rank=CFG.rank)\n    train(CFG)\n", line=4, column=51),
        # ... read later, it does.
        Invalid(DIST + "def restore(path):\n    rank = dist.get_rank()\n    target = 'cuda:%d' % rank\n"
                       "    return net.to(target)\n", line=6, column=14),
        Invalid(DIST + "rank = dist.get_rank()\ntorch.cuda.set_device(rank)\n", line=5, column=23),
        Invalid(DIST + "local_rank = dist.get_rank()\nmodel = model.to(local_rank)\n", line=5, column=18),
        Invalid(DIST + "rank = int(os.environ['RANK'])\ndevice = torch.device(f'cuda:{rank}')\n",
                line=5, column=23),
        Invalid(DIST + "rank = int(os.environ.get('RANK', 0))\n"
                "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                "model = DDP(model, device_ids=[rank])\n", line=6, column=32),
        Invalid(DIST + "torch.cuda.set_device(dist.get_rank())\n", line=4, column=23),
        # The parsed local rank is the device until the attribute is rebound to the global rank (a81
        # HyCTAS): only the later use is reported.
        Invalid(DIST + "def main():\n    args = parse()\n    dist.init_process_group('nccl')\n"
                "    torch.cuda.set_device(args.local_rank)\n    args.local_rank = dist.get_rank()\n"
                "    model = torch.nn.parallel.DistributedDataParallel(net, device_ids=[args.local_rank])\n",
                line=9, column=72),
        Invalid(DIST + "args.rank = int(os.environ['SLURM_PROCID'])\nmodel.cuda(args.rank)\n",
                line=5, column=12),
        Invalid(DIST + "def setup():\n    rank = dist.get_rank()\n    device = torch.device('cuda', rank)\n"
                "    return device\n", line=6, column=35),
        Invalid(DIST + "rank = int(os.getenv('RANK', '0'))\nx = torch.zeros(3, device=rank)\n",
                line=5, column=27),
        Invalid(DIST + "rank = dist.get_rank()\nbatch = batch.to(f'cuda:{rank}')\n", line=5, column=18),
        # a global rank passed as an argument: ``fit(int(os.environ["RANK"]))``, then set_device(proc) inside
        Invalid(DIST + "def fit(proc):\n    torch.cuda.set_device(proc)\nif __name__ == '__main__':\n"
                "    fit(int(os.environ['RANK']))\n", line=5, column=27),
        # RANK read through a dict built from os.environ
        Invalid(DIST + "env = {k: os.environ[k] for k in ('RANK', 'WORLD_SIZE', 'MASTER_ADDR')}\n"
                "rank = int(env['RANK'])\ntorch.cuda.set_device(rank)\n", line=6, column=23),
        # a parameter rebound from SLURM_PROCID on a branch
        Invalid(DIST + "def setup(rank, world_size):\n    if 'SLURM_PROCID' in os.environ:\n"
                "        rank = int(os.environ['SLURM_PROCID'])\n"
                "    dist.init_process_group('nccl', rank=rank, world_size=world_size)\n"
                "    torch.cuda.set_device(rank)\n", line=8, column=27),
        # the torch >= 2.6 device-agnostic API
        Invalid(DIST + "rank = dist.get_rank()\ntorch.accelerator.set_device_index(rank)\n", line=5, column=36),
        # multi-node arithmetic in a spawn target: node_rank * ngpus + gpu is a global rank
        Invalid(DIST + "import torch.multiprocessing as mp\ndef worker(gpu, args):\n"
                "    rank = args.node_rank * args.ngpus + gpu\n"
                "    dist.init_process_group('nccl', rank=rank, world_size=args.world_size)\n"
                "    torch.cuda.set_device(rank)\nmp.spawn(worker, nprocs=8, args=(args,))\n",
                line=8, column=27),
        # The ImageNet-example spelling: the node's rank option times the per-node GPU count
        # plus the spawn index becomes the global rank, then picks the device.
        Invalid(DIST + "def main_worker(gpu, ngpus_per_node, args):\n"
                "    args.rank = args.rank * ngpus_per_node + gpu\n"
                "    dist.init_process_group('nccl', rank=args.rank, world_size=args.world_size)\n"
                "    state = torch.load(args.resume, map_location=torch.device(args.rank))\n",
                line=7, column=63),
        Invalid(DIST + "def worker(gpu, cfg):\n    n = torch.cuda.device_count()\n"
                "    rank = cfg.rank * n + gpu\n"
                "    dist.init_process_group('nccl', rank=rank, world_size=cfg.world_size)\n"
                "    model = Net().cuda(rank)\n", line=8, column=24),
        # a function that is not a spawn target, whatever its parameter is called
        Invalid(DIST + "def worker(gpu, args):\n    torch.cuda.set_device(gpu)\n"
                "worker(dist.get_rank(), args)\n", line=5, column=27),
        # a rank returned by a setup helper (values out of calls), in a device choice
        Invalid(DIST + "def setup_ddp():\n    if 'RANK' in os.environ:\n        dist.init_process_group('nccl')\n"
                "        return dist.get_rank(), dist.get_world_size(), True\n    return 0, 1, False\n"
                "rank, world, use_ddp = setup_ddp() if args.ddp else (0, 1, False)\n"
                "device = torch.device(f'cuda:{rank}' if torch.cuda.is_available() else 'cpu')\n",
                line=10, column=23),
        # device strings built with %, str.format and +, and the visible GPU chosen by the global rank
        Invalid(DIST + "rank = dist.get_rank()\ndevice = torch.device('cuda:%d' % rank)\n", line=5, column=23),
        Invalid(DIST + "model = model.to('cuda:{}'.format(int(os.environ['RANK'])))\n", line=4, column=18),
        Invalid(DIST + "rank = int(os.environ['SLURM_PROCID'])\nx = x.to('cuda:' + str(rank))\n", line=5, column=10),
        Invalid(DIST + "rank = int(os.environ['RANK'])\nos.environ['CUDA_VISIBLE_DEVICES'] = str(rank)\n"
                "dist.init_process_group('nccl')\n", line=5, column=38),
        Invalid(DIST + "local_rank = int(os.environ['LOCAL_RANK'])\nrank = dist.get_rank()\n"
                "device = 'cuda:%d' % (rank,)\n", line=6, column=10,
                fixed=DIST + "local_rank = int(os.environ['LOCAL_RANK'])\nrank = dist.get_rank()\n"
                "device = 'cuda:%d' % (local_rank,)\n"),
        # torch.device(rank) (an integer is a CUDA index), a map_location built from it, FSDP's device_id
        Invalid(DIST + "rank = int(os.environ['RANK'])\nstate = torch.load(path, map_location=torch.device(rank))\n",
                line=5, column=52),
        Invalid(DIST + "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
                "rank = dist.get_rank()\nmodel = FSDP(model, auto_wrap_policy=policy, device_id=rank)\n",
                line=6, column=56),
        Invalid(DIST + "rank = int(os.environ['RANK'])\n"
                "dist.init_process_group('nccl', device_id=torch.device('cuda', rank))\n", line=5, column=64),
        # framework objects' global ranks (Accelerate's process_index, Lightning's global_rank)
        Invalid(DIST + "from accelerate import Accelerator\naccelerator = Accelerator()\n"
                "device = torch.device(f'cuda:{accelerator.process_index}')\n", line=6, column=23),
        Invalid(DIST + "def setup(fabric):\n    torch.cuda.set_device(fabric.global_rank)\n", line=5, column=27),
        # A local-rank variable is in scope: the fix uses it.
        Invalid(DIST + "local_rank = int(os.environ['LOCAL_RANK'])\nrank = dist.get_rank()\n"
                "torch.cuda.set_device(rank)\n", line=6, column=23,
                fixed=DIST + "local_rank = int(os.environ['LOCAL_RANK'])\nrank = dist.get_rank()\n"
                "torch.cuda.set_device(local_rank)\n"),
        Invalid(DIST + "lrank = int(os.environ['LOCAL_RANK'])\nrank = int(os.environ['RANK'])\n"
                "device = torch.device(f'cuda:{rank}')\n", line=6, column=23,
                fixed=DIST + "lrank = int(os.environ['LOCAL_RANK'])\nrank = int(os.environ['RANK'])\n"
                "device = torch.device(f'cuda:{lrank}')\n"),
        Invalid(DIST + "def setup(model):\n    gpu = int(os.getenv('SLURM_LOCALID'))\n"
                "    model.cuda(dist.get_rank())\n", line=6, column=16,
                fixed=DIST + "def setup(model):\n    gpu = int(os.getenv('SLURM_LOCALID'))\n"
                "    model.cuda(gpu)\n"),
        # Bound only after the use: no fix.
        Invalid(DIST + "rank = dist.get_rank()\ntorch.cuda.set_device(rank)\n"
                "local_rank = int(os.environ['LOCAL_RANK'])\n", line=5, column=23),
    ]

    def screen(self, sketch):
        """The screen (necessary for check() to report): True, False, or the project facts that must hold."""
        if sketch.in_test_module():
            return False  # unit tests run on one node
        return sketch.fstring_cuda or sketch.calls_any("cuda", "to", "set_device", "device") or bool(
            sketch.keywords & {"device", "device_ids", "output_device", "index", "device_id"}) or (
            "CUDA_VISIBLE_DEVICES" in sketch.strings) or sketch.may_call(
            "torch.nn.parallel.DistributedDataParallel", "torch.cuda.set_device", "torch.device", "torch.cuda.device")

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        if is_test_module(index.path):  # unit tests run on one node
            return
        seen: set[int] = set()  # `.to(f"cuda:{rank}")` is reached twice
        masks = {id(value) for _, value in _visible_device_assignments(index)}
        for node, rank in _device_index_expressions(index):
            if id(node) not in seen and is_global_rank(index, rank) and is_worker_code(index, node) \
                    and not _dead_store(index, node) and not runs_on_rank_zero_only(index, node) \
                    and not _under_global_rank_zero(index, node):
                seen.add(id(node))
                message = _message(index, rank, VISIBLE_MESSAGE if id(node) in masks else self.message)
                yield self.report(node, message, fix=_fix(index, rank))


def _device_index_expressions(index: SemanticIndex) -> Iterator[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """Every expression used as a CUDA device (or device index) in the module,
    with the expression that gives the index: a device argument is its own
    index; ``f"cuda:{i}"``, ``"cuda:%d" % i``, ``"cuda:{}".format(i)`` and
    ``"cuda:" + str(i)`` give ``i``; ``os.environ["CUDA_VISIBLE_DEVICES"] = str(i)``
    makes ``i`` the one visible GPU."""
    for site in index.calls:
        for expr, _ in device_arguments(site):
            yield expr, expr
    yield from cuda_index_strings(index)
    for value, inner in _visible_device_assignments(index):
        yield value, inner


def _under_global_rank_zero(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """In the body of ``if self.device == 0:`` where ``self.device`` holds the global rank:
    only global rank 0 runs it, and device 0 is its own on any node (a102 E-Zero)."""
    child = node
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, cst.If) and child is ancestor.body:
            test = ancestor.test
            if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 \
                    and isinstance(test.comparisons[0].operator, cst.Equal) \
                    and literal_int(test.comparisons[0].comparator) == 0 and is_global_rank(index, test.left):
                return True
        child = ancestor
    return False


def _dead_store(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """``map_location = "cuda:%d" % rank`` whose value nothing reads (a leftover
    line; the load above used an earlier binding): no device is chosen by it."""
    statement = index.parent(node)
    if not isinstance(statement, cst.Assign) or statement.value is not node or len(statement.targets) != 1 \
            or not isinstance(statement.targets[0].target, cst.Name):
        return False
    target = statement.targets[0].target
    scope = index.enclosing_scope(node)
    if not isinstance(scope, cst.FunctionDef):
        return False  # a module-level name may be read elsewhere
    binding = next((b for b in index.bindings.get((id(scope), target.value), ()) if b.node is statement), None)
    if binding is None:
        return False
    stack: list[cst.CSTNode] = [scope.body]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name) and current.value == target.value and current is not target \
                and any(b is binding for b in index.reaching(target.value, current)):
            return False
        stack.extend(current.children)
    return True


def _message(index: SemanticIndex, rank: cst.BaseExpression, message: str) -> str:
    """The message, naming where the global rank comes from when that is known."""
    origin = global_rank_origin(index, rank)
    if not origin or len(origin) > 60 or "\n" in origin:
        return message
    return message.replace("the global rank", f"the global rank ({origin})", 1)


VISIBLE_MESSAGE = ("the global rank selects the visible GPU (CUDA_VISIBLE_DEVICES): on the second node it "
                   "names a GPU that does not exist; use LOCAL_RANK")


def _visible_device_assignments(index: SemanticIndex) -> Iterator[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """``os.environ["CUDA_VISIBLE_DEVICES"] = str(i)`` (or ``f"{i}"``): (the value, ``i``)."""
    for target, value in index.subscript_assignments:
        if index.qualified_name(target.value) != "os.environ" or len(target.slice) != 1 \
                or not isinstance(target.slice[0].slice, cst.Index) \
                or literal_str(target.slice[0].slice.value) != "CUDA_VISIBLE_DEVICES":
            continue
        inner = value
        if isinstance(value, cst.FormattedString) and len(value.parts) == 1 \
                and isinstance(value.parts[0], cst.FormattedStringExpression):
            inner = value.parts[0].expression
        yield value, inner


LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK")


def _fix(index: SemanticIndex, target: cst.BaseExpression) -> Optional[NodeFix]:
    """Replace the global rank (the device string's index) by a local-rank variable in scope."""
    name = _local_rank_variable(index, target)
    if name is None:
        return None
    return node_fix(f"Use {name} (the local rank) as the device index", UNSAFE, replace(target, name))


def _local_rank_variable(index: SemanticIndex, at: cst.CSTNode) -> Optional[str]:
    """A plain name that holds the local rank where ``at`` runs: every binding
    of it that reaches ``at`` reads a local-rank variable (and one does)."""
    scopes = set()
    scope = index.enclosing_scope(at)
    while True:
        scopes.add(id(scope))
        if scope is index.module:
            break
        scope = index.enclosing_scope(scope)
    candidates = sorted({name for scope_id, name in index.bindings if scope_id in scopes and "." not in name},
                        key=lambda name: (name != "local_rank", name))
    for name in candidates:
        reaching = index.reaching(name, at)
        if reaching and all(binding.kind in ("assign", "annassign") and binding.value is not None
                            and environ_key(index, binding.value) in LOCAL_RANK_VARIABLES for binding in reaching):
            return name
    return None
