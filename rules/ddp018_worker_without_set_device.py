"""## What it does
Flags a DDP worker (a module that calls `init_process_group` or wraps a model in
DDP) that moves data or the model to `"cuda"` / `.cuda()` without a device index,
never calls `torch.cuda.set_device(...)` (here or anywhere in the project), passes
no `device_ids` and uses no per-rank device anywhere. Reported at the first such
use in file order.

## Why is this bad?
`"cuda"` means the *current* device, which is GPU 0 until `set_device` changes
it. Every rank then allocates on GPU 0: it runs out of memory or crawls, while
the other GPUs idle; NCCL may even refuse two ranks on one device.

## Example
    dist.init_process_group("nccl")
    model = DDP(Net().cuda())

## Use instead
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = DDP(Net().cuda(), device_ids=[local_rank])

A device chosen as `torch.device("cuda" if ok else "cpu")` (or `"cuda" if ok
else "cpu"`) has no index either, and `device_ids=[device]` with such a device
(through assignments and the arguments of the project's calls) is no device id:
both are flagged.

Not flagged: `set_device` called on the path (here or anywhere the entry script
reaches; a `set_device` inside a helper function that no module of the project
calls, spawns or imports by name never runs and does not count); explicit per-rank devices (`.cuda(local_rank)`, `torch.device("cuda",
local_rank)`, `f"cuda:{local_rank}"`, `device_ids=[local_rank]`); per-process
`CUDA_VISIBLE_DEVICES` masking to one GPU (in the script, or by a shell launcher of
the project: `export CUDA_VISIBLE_DEVICES=$1` then `python .../train.py`); frameworks that place each rank
themselves (Accelerate, Lightning, DeepSpeed, ...); launcher-parent code and
single-process branches.

## References
- https://pytorch.org/docs/stable/generated/torch.cuda.set_device.html
- https://pytorch.org/docs/stable/notes/ddp.html
"""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from ddplint import names
from ddplint.analysis.roles import is_worker_code
from ddplint.analysis.values import (BARE_CUDA, device_kind, literal_str, module_masks_visible_devices,
                                     uses_imported_module)
from ddplint.analysis.models import project_of
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import SemanticIndex, dotted_name

DIST = "import torch\nimport torch.distributed as dist\n"
_FRAMEWORKS = ("accelerate", "lightning", "pytorch_lightning", "deepspeed", "horovod", "ray", "colossalai")


class WorkerWithoutSetDevice(Rule):
    code, name, severity = "DDP018", "worker-without-set-device", "warning"
    message = "\"cuda\" without an index in a DDP worker that never calls torch.cuda.set_device: every rank uses GPU 0"
    triggers = ("cuda",)
    needs_ddp_context = True
    uses_project = True

    valid = [
        Valid(DIST + "torch.cuda.set_device(local_rank)\ndist.init_process_group('nccl')\nmodel = net.cuda()\n"),
        Valid(DIST + "dist.init_process_group('nccl')\nmodel = net.to(f'cuda:{local_rank}')\n"),
        Valid(DIST + "dist.init_process_group('nccl')\ndevice = torch.device('cuda', local_rank)\n"
                     "x = x.to('cuda')\n"),
        Valid(DIST + "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                     "dist.init_process_group('nccl')\nmodel = DDP(net.cuda(), device_ids=[args.gpu])\n"),
        Valid(DIST + "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = str(local_rank)\n"
                     "dist.init_process_group('nccl')\nmodel = net.cuda()\n"),
        Valid(DIST + "from utils import init_distributed\ninit_distributed(args)\nmodel = net.cuda()\n"),
        Valid(DIST + "dist.init_process_group('gloo')\nmodel = net.to('cpu')\n"),
        Valid(DIST + "dist.init_process_group('nccl')\nif x.device.type == 'cuda':\n    pass\n"
                     "with torch.autocast('cuda'):\n    y = net(x)\n"),
        Valid(DIST + "dist.init_process_group('nccl')\nmodel = net.cuda(args.gpu)\nx = x.cuda()\n"),
        # a per-rank device chosen on a branch, and a wrap helper whose callers pass per-rank devices
        Valid(DIST + "dist.init_process_group('nccl')\n"
                     "device = torch.device(f'cuda:{local_rank}' if torch.cuda.is_available() else 'cpu')\n"
                     "model = net.to(device)\nx = x.to('cuda')\n"),
        Valid(DIST + "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                     "def wrap(model, dev):\n    return DDP(model.to(dev), device_ids=[dev])\n"
                     "def main():\n    dist.init_process_group('nccl')\n"
                     "    model = wrap(Net(), torch.device('cuda', local_rank))\n    x = x.to('cuda')\n"),
        Valid(DIST + "dist.init_process_group('nccl')\ntorch.cuda.set_device(local_rank)\n"
                     "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\nmodel = net.to(device)\n"),
        # a single-process branch: the one process may use the default GPU
        Valid(DIST + "from torch.nn.parallel import DistributedDataParallel as DDP\nif world_size > 1:\n"
                     "    dist.init_process_group('nccl')\n    model = DDP(net.cuda(args.gpu), device_ids=[args.gpu])\n"
                     "else:\n    model = net.cuda()\n"),
        Valid(DIST + "if not args.distributed:\n    model = net.cuda()\nelse:\n"
                     "    dist.init_process_group('nccl')\n    model = net.to(args.device)\n"),
        # accelerate places each process on its own device
        Valid(DIST + "from accelerate import Accelerator\naccelerator = Accelerator()\n"
                     "dist.init_process_group('nccl')\nmodel = net.cuda()\n"),
    ]
    invalid = [
        Invalid(DIST + "dist.init_process_group('nccl')\nmodel = net.cuda()\n", line=4, column=9),
        # ... an accelerate import nothing reads places nothing
        Invalid(DIST + "from accelerate import Accelerator\ndist.init_process_group('nccl')\nmodel = net.cuda()\n",
                line=5, column=9),
        Invalid(DIST + "dist.init_process_group('nccl')\ndevice = torch.device('cuda')\nmodel = net.to(device)\n",
                line=4, column=23),
        Invalid(DIST + "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                       "model = DDP(net.to('cuda'))\n", line=4, column=20),
        Invalid(DIST + "def main():\n    dist.init_process_group('nccl')\n    for x, y in loader:\n"
                       "        x, y = x.cuda(), y.cuda()\n", line=6, column=16),
        Invalid(DIST + "dist.init_process_group('nccl')\ndevice = 'cuda'\nmodel.to(device)\n",
                line=4, column=10),
        Invalid(DIST + "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                       "dist.init_process_group('nccl')\n"
                       "model = DDP(net.cuda(), device_ids=[torch.device('cuda')])\n", line=5, column=13),
        Invalid(DIST + "dist.init_process_group('nccl')\nbuf = torch.zeros(10, device='cuda')\n",
                line=4, column=30),
        Invalid(DIST + "def worker(rank, ws):\n    dist.init_process_group('nccl', rank=rank, world_size=ws)\n"
                       "    net = Net().cuda()\n    run(net)\n", line=5, column=11),
        # ``torch.device("cuda" if ok else "cpu")`` is not a per-rank device, nor is device_ids=[that device]
        Invalid(DIST + "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                       "dist.init_process_group('nccl')\n"
                       "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
                       "model = DDP(Net().to(device), device_ids=[device])\n", line=5, column=23),
        Invalid(DIST + "dist.init_process_group('nccl')\n"
                       "device = 'cuda' if torch.cuda.is_available() else 'cpu'\nmodel = Net().to(device)\n",
                line=4, column=10),
        # ... also when the device reaches the wrap as a call argument
        Invalid(DIST + "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                       "def wrap(model, dev):\n    return DDP(model.to(dev), device_ids=[dev])\n"
                       "def main():\n    dist.init_process_group('nccl')\n    dev = torch.device('cuda')\n"
                       "    model = wrap(Net(), dev)\n", line=8, column=24),
    ]

    def screen(self, sketch):
        """The screen (necessary for check() to report): True, False, or the project facts that must hold."""
        return sketch.may_call(names.INIT_PROCESS_GROUP, names.DDP)

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        if not index.calls_to(names.INIT_PROCESS_GROUP, names.DDP):
            return  # not a worker (or the worker is set up elsewhere)
        if index.calls_to(names.SET_DEVICE) or index.method_calls("set_device") \
                or project_of(index).sets_device_in_scope(index.path):
            return
        if any(uses_imported_module(index, f) for f in _FRAMEWORKS) or module_masks_visible_devices(index):
            return
        if _has_device_ids(index) or _has_per_rank_device(index):
            return
        first = _first_bare_cuda_use(index)
        if first is not None:
            yield self.report(first)


def _is_bare(index: SemanticIndex, expr: cst.BaseExpression) -> bool:
    """A CUDA device without an index, through names, branches and call
    arguments (``values.device_kind``)."""
    return device_kind(index, expr) == BARE_CUDA


def _has_device_ids(index: SemanticIndex) -> bool:
    for site in index.calls_to(names.DDP):
        arg = site.argument("device_ids")
        if site.has_star_kwargs or (arg is not None and not _only_bare_devices(index, arg.value)):
            return True
    return False


def _only_bare_devices(index: SemanticIndex, expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.Name) and expr.value == "None":
        return True
    return isinstance(expr, (cst.List, cst.Tuple)) and bool(expr.elements) and all(
        _is_bare(index, e.value) for e in expr.elements)


def _has_per_rank_device(index: SemanticIndex) -> bool:
    """Any device chosen per process: ``.cuda(x)``, ``.to(x)`` with a name,
    ``torch.device("cuda", x)``, ``f"cuda:{x}"``, ``"cuda:%d" % x``."""
    for site in index.method_calls("cuda"):
        if site.node.args and site.receiver is not None and not _is_bare(index, site.node.args[0].value):
            return True
    for site in index.calls_to(names.TORCH_DEVICE):
        if len(site.node.args) >= 2 or (site.node.args and not literal_str(site.node.args[0].value)
                                        and not _is_bare(index, site.node)):
            return True  # ``torch.device("cuda", rank)``, ``torch.device(args.device)``
    for site in index.method_calls("to"):
        if site.node.args and isinstance(site.node.args[0].value, (cst.Name, cst.Attribute)) \
                and "device" not in (dotted_name(site.node.args[0].value) or "") \
                and index.reaching_values(site.node.args[0].value) is None \
                and not _is_bare(index, site.node.args[0].value):
            return True  # ``.to(local_rank)``, ``.to(args.gpu)``
    for fstring in index.fstrings:
        if any(isinstance(part, cst.FormattedStringText) and "cuda:" in part.value for part in fstring.parts):
            return True
    return any(isinstance(v, str) and v.startswith("cuda:") and "%" in v or v == "cuda:{}"
               for _, v in index.strings)


def _first_bare_cuda_use(index: SemanticIndex) -> Optional[cst.CSTNode]:
    candidates: list[tuple[int, cst.CSTNode]] = []
    for site in index.method_calls("cuda"):
        if not site.node.args and site.receiver is not None and site.qualified_name is None \
                and is_worker_code(index, site.node):
            candidates.append((site.order, site.node))
    for node, value in index.strings:
        if value != "cuda" or not is_worker_code(index, node):
            continue
        order = _device_use_order(index, node)
        if order is not None:
            candidates.append((order, node))
    return min(candidates, key=lambda c: c[0])[1] if candidates else None


def _device_use_order(index: SemanticIndex, node: cst.SimpleString) -> Optional[int]:
    """Order of the call or assignment that uses the string ``"cuda"`` as a device
    (also as the GPU arm of ``"cuda" if ok else "cpu"``)."""
    child, parent = node, index.parent(node)
    while isinstance(parent, cst.IfExp) and child is not parent.test:
        child, parent = parent, index.parent(parent)
    if isinstance(parent, cst.Arg):
        call = index.parent(parent)
        site = index.call_site(call) if isinstance(call, cst.Call) else None
        if site is None:
            return None
        keyword = parent.keyword.value if parent.keyword is not None else None
        if keyword == "device" or site.method == "to" or site.qualified_name == names.TORCH_DEVICE:
            return site.order
        return None
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and parent.value is child:
        target = dotted_name(parent.targets[0].target) or ""
        if "device" in target.lower():
            bindings = index.visible_bindings(target, parent) or []
            return next((b.order for b in bindings if b.node is parent), None)
    return None
