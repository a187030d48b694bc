"""## What it does
Flags a literal device index used as a DDP worker's device: `"cuda:0"`,
`torch.device("cuda", 0)`, `.cuda(0)`, `.to(0)`, `torch.cuda.set_device(0)`,
`device_ids=[0]`, `output_device=0`, `device=0`, `map_location="cuda:0"`, and
`os.environ["CUDA_VISIBLE_DEVICES"] = "0"`.

## Why is this bad?
Every rank runs the same script. A hard-coded index puts every rank's model,
batches and optimizer state on the same GPU: the other GPUs idle, GPU 0 runs out
of memory, and NCCL may fail or deadlock because several ranks share one device.

## Example
    model = model.to("cuda:0")
    model = DDP(model, device_ids=[0])

## Use instead
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = model.to(f"cuda:{local_rank}")
    model = DDP(model, device_ids=[local_rank])

Not flagged: `"cuda"` without an index (after `set_device(local_rank)` it means
the rank's own GPU); `map_location={"cuda:0": ...}` remaps; scripts that give
each process one visible GPU (`CUDA_VISIBLE_DEVICES` set from the rank) so that
`cuda:0` is the right device; multi-GPU lists such as `"0,1,2,3"`; the
single-process branch of a script (`if args.local_rank == -1:`, the `else` of
`if args.distributed:`); lists of several devices (`[torch.device("cuda", 0),
torch.device("cuda", 1)]` enumerates GPUs); unit tests (`test_*.py`, `tests/`),
which pin devices on purpose; modules outside DDP context.

## References
- https://pytorch.org/tutorials/intermediate/ddp_tutorial.html
- https://pytorch.org/docs/stable/elastic/run.html#launcher-api
"""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from ddplint import names
from ddplint.analysis.values import (CUDA_INDEX, device_arguments, in_device_list,
                           is_test_module, literal_int, literal_str, module_masks_visible_devices)
from ddplint.analysis.roles import is_worker_code
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import CallSite, SemanticIndex

DIST = "import torch\nimport torch.distributed as dist\n"
SINGLE_GPU_VISIBLE = re.compile(r"^\s*\d+\s*$")
DEVICE_KEYWORDS = ("device", "map_location", "output_device")


class HardcodedDevice(Rule):
    code, name, severity = "DDP007", "hardcoded-device", "warning"
    message = "hard-coded device index: every rank lands on the same GPU; derive it from LOCAL_RANK"
    triggers = ("cuda", "CUDA_VISIBLE_DEVICES", "device", ".to(")
    needs_ddp_context = True

    valid = [
        Valid(DIST + "torch.cuda.set_device(local_rank)\nmodel = model.to('cuda')\n"),
        Valid(DIST + "device = torch.device(f'cuda:{local_rank}')\nmodel.to(device)\n"),
        Valid(DIST + "state = torch.load(path, map_location={'cuda:0': f'cuda:{local_rank}'})\n"),
        Valid(DIST + "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = str(local_rank)\n"
              "model = model.to('cuda:0')\n"),
        Valid(DIST + "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = '0,1,2,3'\n"),
        Valid("import torch\nmodel = model.to('cuda:0')\n"),  # not DDP code
        Valid(DIST + "if args.local_rank == -1:\n    device = torch.device('cuda:0')\n"
              "else:\n    device = torch.device('cuda', args.local_rank)\n"),
        Valid(DIST + "if args.distributed:\n    torch.cuda.set_device(args.gpu)\n"
              "else:\n    model = model.cuda(0)\n"),
        Valid(DIST + "print(torch.cuda.get_device_name(0))\nif str(device) == 'cuda:0':\n    pass\n"),
        Valid(DIST + "parser.add_argument('--device', default='cuda:0')\n"
              "def evaluate(model, device='cuda:0'):\n    return model\n"),
        Valid(DIST + "devices = [torch.device('cuda', 0), torch.device('cuda', 1)]\n"),
        Valid(DIST + "model = model.to('cuda:0')\n", filename="tests/test_ddp_wrap.py"),
    ]
    invalid = [
        Invalid(DIST + "model = model.to('cuda:0')\n", line=3, column=18),
        Invalid(DIST + "device = torch.device('cuda', 0)\n", line=3, column=31),
        Invalid(DIST + "model = model.cuda(0)\n", line=3, column=20),
        Invalid(DIST + "batch = batch.to(0, non_blocking=True)\n", line=3, column=18),
        Invalid(DIST + "torch.cuda.set_device(0)\n", line=3, column=23),
        Invalid(DIST + "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                "model = DDP(model, device_ids=[0])\n", line=4, column=32),
        Invalid(DIST + "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = '0'\n", line=4, column=38),
        Invalid(DIST + "device = 'cuda:0' if torch.cuda.is_available() else 'cpu'\n", line=3, column=10),
        Invalid(DIST + "ckpt = torch.load(path, map_location='cuda:0')\n", line=3, column=38),
        Invalid(DIST + "x = torch.zeros(4, device='cuda:1')\n", line=3, column=27),
    ]

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        if module_masks_visible_devices(index) or is_test_module(index.path):
            return
        for node in _hardcoded_device_literals(index):
            if is_worker_code(index, node) and not in_device_list(index, node):
                yield self.report(node)


def _hardcoded_device_literals(index: SemanticIndex) -> Iterator[cst.CSTNode]:
    for node, value in index.strings:
        if isinstance(value, str) and CUDA_INDEX.match(value) and _used_as_device(index, node):
            yield node
    for site in index.calls:
        yield from _literal_index_arguments(site)
    for target, value in index.subscript_assignments:
        if _is_visible_devices_key(index, target):
            text = literal_str(value)
            if text is not None and SINGLE_GPU_VISIBLE.match(text):
                yield value


def _used_as_device(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """Is this "cuda:N" literal where a device goes (not a dict key of a remap,
    a comparison, a log message or a parameter/argparse default)?"""
    child, parent = node, index.parent(node)
    while isinstance(parent, (cst.IfExp, cst.BooleanOperation)):  # 'cuda:0' if ok else 'cpu'
        child, parent = parent, index.parent(parent)
    if isinstance(parent, (cst.Assign, cst.AnnAssign)):
        return parent.value is child
    if not isinstance(parent, cst.Arg):
        return False
    call = index.parent(parent)
    site = index.call_site(call) if isinstance(call, cst.Call) else None
    if site is None:
        return False
    if parent.keyword is not None:
        return parent.keyword.value in DEVICE_KEYWORDS
    if site.method == "to" or site.qualified_name in (names.TORCH_DEVICE, names.SET_DEVICE):
        return True
    return site.argument("map_location") is parent


def _literal_index_arguments(site: CallSite) -> Iterator[cst.CSTNode]:
    """Integer literals passed where a CUDA device index goes (a single-entry
    ``device_ids`` list included; ``torch.device`` only for type "cuda")."""
    if site.qualified_name == names.TORCH_DEVICE:
        kind = site.argument("type")
        if kind is None or literal_str(kind.value) != "cuda":
            return
    for expr, list_length in device_arguments(site):
        if list_length == 1 and literal_int(expr) is not None:
            yield expr


def _is_visible_devices_key(index: SemanticIndex, target: cst.Subscript) -> bool:
    if index.qualified_name(target.value) != "os.environ" or len(target.slice) != 1:
        return False
    element = target.slice[0].slice
    return isinstance(element, cst.Index) and literal_str(element.value) == "CUDA_VISIBLE_DEVICES"
