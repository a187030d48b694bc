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

## References
- https://pytorch.org/docs/stable/generated/torch.cuda.set_device.html
- https://pytorch.org/docs/stable/notes/ddp.html
"""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from ddplint import names
from ddplint.analysis.roles import is_worker_code
from ddplint.analysis.values import literal_str, module_masks_visible_devices
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
    ]
    invalid = [
        Invalid(DIST + "dist.init_process_group('nccl')\nmodel = net.cuda()\n", line=4, column=9),
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
    ]

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        if not index.calls_to(names.INIT_PROCESS_GROUP, names.DDP):
            return  # not a worker (or the worker is set up elsewhere)
        if index.calls_to(names.SET_DEVICE) or index.method_calls("set_device") \
                or project_of(index).in_scope(index.path, lambda m: m.calls_set_device):
            return
        if any(index.imports_module(f) for f in _FRAMEWORKS) or module_masks_visible_devices(index):
            return
        if _has_device_ids(index) or _has_per_rank_device(index):
            return
        first = _first_bare_cuda_use(index)
        if first is not None:
            yield self.report(first)


def _is_bare_cuda_device(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Call) and dotted_name(expr.func) in ("torch.device",) \
        and len(expr.args) == 1 and literal_str(expr.args[0].value) == "cuda"


def _has_device_ids(index: SemanticIndex) -> bool:
    for site in index.calls_to(names.DDP):
        arg = site.argument("device_ids")
        if site.has_star_kwargs or (arg is not None and not _only_bare_devices(arg.value)):
            return True
    return False


def _only_bare_devices(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.Name) and expr.value == "None":
        return True
    return isinstance(expr, (cst.List, cst.Tuple)) and bool(expr.elements) and all(
        _is_bare_cuda_device(e.value) for e in expr.elements)


def _has_per_rank_device(index: SemanticIndex) -> bool:
    """Any device chosen per process: ``.cuda(x)``, ``.to(x)`` with a name,
    ``torch.device("cuda", x)``, ``f"cuda:{x}"``, ``"cuda:%d" % x``."""
    for site in index.method_calls("cuda"):
        if site.node.args and site.receiver is not None:
            return True
    for site in index.calls_to(names.TORCH_DEVICE):
        if len(site.node.args) >= 2 or (site.node.args and not literal_str(site.node.args[0].value)):
            return True
    for site in index.method_calls("to"):
        if site.node.args and isinstance(site.node.args[0].value, (cst.Name, cst.Attribute)) \
                and "device" not in (dotted_name(site.node.args[0].value) or "") \
                and index.reaching_values(site.node.args[0].value) is None:
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
    """Order of the call or assignment that uses the string ``"cuda"`` as a device."""
    parent = index.parent(node)
    if isinstance(parent, cst.Arg):
        call = index.parent(parent)
        site = index.call_site(call) if isinstance(call, cst.Call) else None
        if site is None:
            return None
        keyword = parent.keyword.value if parent.keyword is not None else None
        if keyword == "device" or site.method == "to" or site.qualified_name == names.TORCH_DEVICE:
            return site.order
        return None
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
        target = dotted_name(parent.targets[0].target) or ""
        if "device" in target.lower():
            bindings = index.visible_bindings(target, parent) or []
            return next((b.order for b in bindings if b.node is parent), None)
    return None
