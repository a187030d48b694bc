"""## What it does
Flags `torch.save(ddp_model.state_dict(), ...)` where `ddp_model` is the
`DistributedDataParallel` wrapper (also inside a checkpoint dict:
`torch.save({"model": ddp_model.state_dict(), ...}, path)`).

## Why is this bad?
The wrapper's state dict prefixes every key with `module.`. Loading the
checkpoint into a plain model (for evaluation, export, fine-tuning on one GPU)
then fails with "Missing key(s) ... Unexpected key(s) module.", or worse, with
`strict=False`, silently loads nothing.

## Example
    model = DDP(model, device_ids=[local_rank])
    torch.save(model.state_dict(), "ckpt.pt")

## Use instead
    torch.save(model.module.state_dict(), "ckpt.pt")

Fix (unsafe): `ddp_model.state_dict()` becomes `ddp_model.module.state_dict()`.
Unsafe: the checkpoint's keys change, and code that loads it back into the DDP
wrapper must then load into `ddp_model.module`.

Not flagged: `ddp_model.module.state_dict()`; `torch.save(ddp_model)` (the whole
object); modules that strip the `module.` prefix when loading
(`consume_prefix_in_state_dict_if_present`, `k.replace("module.", "")`, `k[7:]`).

## References
- https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#save-and-load-checkpoints
- https://pytorch.org/docs/stable/generated/torch.nn.modules.utils.consume_prefix_in_state_dict_if_present.html
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ddplint import names
from ddplint.analysis.values import is_ddp_model
from ddplint.fixes import UNSAFE, insert_after, node_fix
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import CallSite, SemanticIndex

DDP_SCRIPT = ("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
              "model = DDP(model, device_ids=[local_rank])\n")


class DDPWrapperStateDict(Rule):
    code, name, severity = "DDP025", "ddp-wrapper-state-dict", "info"
    message = ("state_dict() of the DDP wrapper: every key gets a 'module.' prefix and will not load "
               "into a plain model; save model.module.state_dict()")
    triggers = ("state_dict",)
    needs_ddp_context = True

    valid = [
        Valid(DDP_SCRIPT + "torch.save(model.module.state_dict(), 'ckpt.pt')\n"),
        Valid(DDP_SCRIPT + "torch.save(model, 'whole.pt')\n"),
        Valid(DDP_SCRIPT + "raw = model.module\ntorch.save({'model': raw.state_dict()}, path)\n"),
        Valid(DDP_SCRIPT + "torch.save(model.state_dict(), path)\n"
              "def load(net, path):\n    sd = torch.load(path, map_location='cpu')\n"
              "    net.load_state_dict({k.replace('module.', ''): v for k, v in sd.items()})\n"),
        Valid(DDP_SCRIPT + "from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present\n"
              "torch.save(model.state_dict(), path)\n"),
        Valid("import torch\nnet = Net()\ntorch.save(net.state_dict(), 'net.pt')\n"),
        Valid(DDP_SCRIPT + "torch.save(optimizer.state_dict(), 'opt.pt')\n"),
        Valid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
              "def save(model, path):\n    torch.save(model.state_dict(), path)\n"),
    ]
    invalid = [
        Invalid(DDP_SCRIPT + "torch.save(model.state_dict(), 'ckpt.pt')\n", line=4, column=12,
                fixed=DDP_SCRIPT + "torch.save(model.module.state_dict(), 'ckpt.pt')\n"),
        Invalid(DDP_SCRIPT + "torch.save({'epoch': epoch, 'model': model.state_dict(),\n"
                "            'optimizer': optimizer.state_dict()}, path)\n", line=4, column=38,
                fixed=DDP_SCRIPT + "torch.save({'epoch': epoch, 'model': model.module.state_dict(),\n"
                "            'optimizer': optimizer.state_dict()}, path)\n"),
        Invalid(DDP_SCRIPT + "checkpoint = {'model': model.state_dict(), 'step': step}\n"
                "torch.save(checkpoint, path)\n", line=4, column=24,
                fixed=DDP_SCRIPT + "checkpoint = {'model': model.module.state_dict(), 'step': step}\n"
                "torch.save(checkpoint, path)\n"),
        Invalid("import torch\nimport torch.nn as nn\nnet = nn.parallel.DistributedDataParallel(net)\n"
                "if rank == 0:\n    torch.save(net.state_dict(), f'{out}/net.pt')\n", line=5, column=16,
                fixed="import torch\nimport torch.nn as nn\nnet = nn.parallel.DistributedDataParallel(net)\n"
                "if rank == 0:\n    torch.save(net.module.state_dict(), f'{out}/net.pt')\n"),
        Invalid("import torch\nfrom torch.nn.parallel import DistributedDataParallel\n"
                "class Trainer:\n    def __init__(self, model):\n"
                "        self.model = DistributedDataParallel(model)\n"
                "    def save(self, path):\n        torch.save(self.model.state_dict(), path)\n",
                line=7, column=20,
                fixed="import torch\nfrom torch.nn.parallel import DistributedDataParallel\n"
                "class Trainer:\n    def __init__(self, model):\n"
                "        self.model = DistributedDataParallel(model)\n"
                "    def save(self, path):\n        torch.save(self.model.module.state_dict(), path)\n"),
        Invalid(DDP_SCRIPT + "for epoch in range(10):\n    train(model)\n"
                "    torch.save(model.state_dict(), f'epoch{epoch}.pt')\n", line=6, column=16,
                fixed=DDP_SCRIPT + "for epoch in range(10):\n    train(model)\n"
                "    torch.save(model.module.state_dict(), f'epoch{epoch}.pt')\n"),
        Invalid("from torch import save\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
                "ddp = DDP(net)\nsave(ddp.state_dict(), 'x.pt')\n", line=4, column=6,
                fixed="from torch import save\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
                "ddp = DDP(net)\nsave(ddp.module.state_dict(), 'x.pt')\n"),
    ]

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        if _strips_module_prefix(index):
            return
        for save in index.calls_to(names.TORCH_SAVE):
            obj = save.argument("obj")
            if obj is None:
                continue
            for call in _state_dict_calls(index, obj.value, save.order):
                if call.receiver is not None and is_ddp_model(index, call.receiver, save.order):
                    yield self.report(call.node, fix=node_fix(
                        "Save the wrapped module's state_dict (.module.state_dict())", UNSAFE,
                        insert_after(call.receiver, ".module")))


def _state_dict_calls(index: SemanticIndex, expr: cst.BaseExpression, order: int,
                      depth: int = 0) -> Iterator[CallSite]:
    """``x.state_dict()`` calls that end up in the saved object: directly, as
    dict values (nested), or through a name bound to such a dict."""
    if depth > 3:
        return
    if isinstance(expr, cst.Call):
        site = index.call_site(expr)
        if site is not None and site.method == "state_dict":
            yield site
    elif isinstance(expr, cst.Dict):
        for element in expr.elements:
            if isinstance(element, cst.DictElement):
                yield from _state_dict_calls(index, element.value, order, depth + 1)
    elif isinstance(expr, cst.Name):
        for binding in index.reaching(expr.value, expr):
            if binding.kind == "assign" and binding.value is not None:
                yield from _state_dict_calls(index, binding.value, order, depth + 1)


def _strips_module_prefix(index: SemanticIndex) -> bool:
    """Does this module load checkpoints in a way that drops the 'module.' prefix?"""
    if index.method_calls("consume_prefix_in_state_dict_if_present"):
        return True
    if "consume_prefix_in_state_dict_if_present" in index.imports:
        return True
    if any(value == "module." for _, value in index.strings):  # k.replace("module.", "")
        return True
    return "[7:]" in index.source  # {k[7:]: v ...}: len("module.") == 7
