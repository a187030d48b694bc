"""## What it does
Flags `torch.load(...)` (and `torch.hub.load_state_dict_from_url(...)`) without
`map_location` in a DDP worker that uses CUDA.

## Why is this bad?
`torch.load` restores each tensor onto the device it was saved from. A
checkpoint written by rank 0 holds `cuda:0` tensors, so every rank materialises
a full copy of the checkpoint on GPU 0: rank 0 runs out of memory, or the other
ranks silently keep a second CUDA context there.

## Example
    state = torch.load("checkpoint.pt")
    model.load_state_dict(state["model"])

## Use instead
    state = torch.load("checkpoint.pt", map_location="cpu")
    # or map_location=f"cuda:{local_rank}"
    model.load_state_dict(state["model"])

Fix (unsafe): adds `map_location="cpu"` (or replaces `map_location=None`).
Unsafe: tensors that the code uses directly after loading (rather than copying
them into a model that is already on its GPU) now start on the CPU.

## References
- https://pytorch.org/docs/stable/generated/torch.load.html
- https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#save-and-load-checkpoints
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ddplint import names
from ddplint.analysis.roles import is_worker_code
from ddplint.fixes import UNSAFE, add_keyword, node_fix, replace, string_literal
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import CallSite, SemanticIndex, iter_literal_strings

DIST = "import torch\nimport torch.distributed as dist\n"
HUB_LOAD = "torch.hub.load_state_dict_from_url"


class LoadWithoutMapLocation(Rule):
    code, name, severity = "DDP019", "load-without-map-location", "warning"
    message = "torch.load without map_location in a DDP worker: every rank loads onto the saving GPU"
    triggers = ("load",)
    needs_ddp_context = True

    valid = [
        Valid(DIST + "model.cuda()\nstate = torch.load(path, map_location='cpu')\n"),
        Valid(DIST + "model.cuda()\nstate = torch.load(path, map_location=f'cuda:{local_rank}')\n"),
        Valid(DIST + "model.cuda()\nstate = torch.load(path, {'cuda:0': f'cuda:{rank}'})\n"),
        Valid(DIST + "model.cuda()\nstate = torch.load(path, **load_kwargs)\n"),
        Valid(DIST + "dist.init_process_group('gloo')\nstate = torch.load(path)\n"),  # CPU-only worker
        Valid("import torch\nmodel.cuda()\nstate = torch.load(path)\n"),  # not DDP code
        Valid(DIST + "model.cuda()\nsd = torch.hub.load_state_dict_from_url(url, map_location='cpu')\n"),
        Valid(DIST + "model.cuda()\nif args.local_rank == -1:\n    state = torch.load(path)\n"),
        Valid(DIST + "model.cuda()\nstate = torch.jit.load(path)\nnp.load(path)\n"),
        Valid(DIST + "model.cuda()\nif args.gpu is None:\n    ckpt = torch.load(args.resume)\nelse:\n"
                     "    ckpt = torch.load(args.resume, map_location=f'cuda:{args.gpu}')\n"),
        Valid(DIST + "model.cuda()\ntorch.save(feats.cpu(), os.path.join(out, 'feats.pth'))\n"
                     "feats = torch.load(os.path.join(out, 'feats.pth'))\n"),
        Valid(DIST + "from unittest import mock\n@mock.patch('torch.cuda.Stream')\ndef test(s):\n"
                     "    state = torch.load(path)\n"),
    ]
    invalid = [
        Invalid(DIST + "model.cuda()\nstate = torch.load('checkpoint.pt')\n", line=4, column=9,
                fixed=DIST + "model.cuda()\nstate = torch.load('checkpoint.pt', map_location='cpu')\n"),
        Invalid(DIST + "device = torch.device('cuda', rank)\nmodel.load_state_dict(torch.load(args.resume))\n",
                line=4, column=23,
                fixed=DIST + "device = torch.device('cuda', rank)\n"
                "model.load_state_dict(torch.load(args.resume, map_location='cpu'))\n"),
        Invalid(DIST + "model.cuda()\nsd = torch.hub.load_state_dict_from_url(url)\n", line=4, column=6,
                fixed=DIST + "model.cuda()\nsd = torch.hub.load_state_dict_from_url(url, map_location=\"cpu\")\n"),
        Invalid("from torch import load\nimport torch.distributed as dist\nnet.cuda()\nckpt = load(path)\n",
                line=4, column=8,
                fixed="from torch import load\nimport torch.distributed as dist\nnet.cuda()\n"
                "ckpt = load(path, map_location=\"cpu\")\n"),
        Invalid(DIST + "def resume(model, path):\n    ckpt = torch.load(path, weights_only=True)\n"
                       "    model.load_state_dict(ckpt['model'])\nmodel.cuda()\n", line=4, column=12,
                fixed=DIST + "def resume(model, path):\n    ckpt = torch.load(path, weights_only=True, "
                "map_location='cpu')\n    model.load_state_dict(ckpt['model'])\nmodel.cuda()\n"),
        Invalid(DIST + "model.to('cuda')\nstate = torch.load(path, map_location=None)\n", line=4, column=9,
                fixed=DIST + "model.to('cuda')\nstate = torch.load(path, map_location='cpu')\n"),
        Invalid(DIST + "class Trainer:\n    def load(self, path):\n        self.model.cuda()\n"
                       "        return torch.load(path)\n", line=6, column=16,
                fixed=DIST + "class Trainer:\n    def load(self, path):\n        self.model.cuda()\n"
                       "        return torch.load(path, map_location=\"cpu\")\n"),
        Invalid(DIST + "torch.cuda.set_device(local_rank)\nif rank == 0:\n"
                       "    pretrained = torch.load(args.pretrained)\n", line=5, column=18,
                fixed=DIST + "torch.cuda.set_device(local_rank)\nif rank == 0:\n"
                       "    pretrained = torch.load(args.pretrained, map_location=\"cpu\")\n"),
        # Arguments one per line: the new one follows their layout.
        Invalid(DIST + "torch.cuda.set_device(local_rank)\nstate = torch.load(\n    os.path.join(run_dir, 'last.pt'),\n"
                       "    weights_only=False,\n)\n", line=4, column=9,
                fixed=DIST + "torch.cuda.set_device(local_rank)\nstate = torch.load(\n    os.path.join(run_dir, 'last.pt'),\n"
                       "    weights_only=False,\n    map_location='cpu',\n)\n"),
    ]

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        if not _uses_cuda(index):
            return  # a CPU-only worker: tensors were saved on, and come back to, the CPU
        loads = index.calls_to(names.TORCH_LOAD, HUB_LOAD)
        cpu_files = _files_saved_from_cpu(index)
        for site in loads:
            if site.has_star_kwargs or site.has_star_args or _maps(site):
                continue
            if not is_worker_code(index, site.node) or _other_branch_maps(index, site, loads):
                continue
            path = site.argument("f", 0)
            if path is not None and any(name in index.module.code_for_node(path.value) for name in cpu_files):
                continue  # written by this module after .cpu()
            yield self.report(site.node, fix=_fix(index, site))


def _fix(index: SemanticIndex, site: CallSite):
    """``map_location="cpu"``, in the quote style of the call's (else the module's) strings."""
    strings = [node for node in _strings_in(site.node)] + [node for node, _ in index.strings]
    cpu = string_literal("cpu", strings)
    given = site.argument("map_location")
    if given is not None:  # map_location=None
        return node_fix(f"Replace map_location=None by map_location={cpu}", UNSAFE, replace(given.value, cpu))
    return node_fix(f"Add map_location={cpu}", UNSAFE, add_keyword(site.node, "map_location", cpu))


def _strings_in(call: cst.Call) -> list:
    found = []
    for arg in call.args:
        value = arg.value
        if isinstance(value, cst.SimpleString):
            found.append(value)
        elif isinstance(value, cst.Call):
            found.extend(_strings_in(value))
    return found


def _maps(site: CallSite) -> bool:
    arg = site.argument("map_location")
    return arg is not None and not (isinstance(arg.value, cst.Name) and arg.value.value == "None")


def _uses_cuda(index: SemanticIndex) -> bool:
    """Does the module put anything on a GPU (not merely mention torch.cuda)?"""
    if index.method_calls("cuda") or index.calls_to(names.SET_DEVICE):
        return True
    if any(value == "nccl" or value.startswith("cuda") for _, value in iter_literal_strings(index)):
        return True
    return any(isinstance(part, cst.FormattedStringText) and "cuda" in part.value
               for fstring in index.fstrings for part in fstring.parts)


def _other_branch_maps(index: SemanticIndex, site: CallSite, loads: list[CallSite]) -> bool:
    """``if args.gpu is None: torch.load(p) else: torch.load(p, map_location=...)``:
    the script chose where each configuration loads."""
    branch = index.enclosing(site.node, cst.If)
    if branch is None:
        return False
    return any(other is not site and _maps(other) and any(a is branch for a in index.ancestors(other.node))
               for other in loads)


def _files_saved_from_cpu(index: SemanticIndex) -> list[str]:
    """String literals in the paths of ``torch.save(x.cpu(), path)`` calls."""
    found = []
    for site in index.calls_to(names.TORCH_SAVE):
        obj, path = site.argument("obj"), site.argument("f")
        if obj is None or path is None or not (isinstance(obj.value, cst.Call)
                                               and isinstance(obj.value.func, cst.Attribute)
                                               and obj.value.func.attr.value == "cpu"):
            continue
        found.extend(value for node, value in iter_literal_strings(index)
                     if len(value) > 3 and value in index.module.code_for_node(path.value))
    return found
