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

## References
- https://pytorch.org/docs/stable/generated/torch.load.html
- https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#save-and-load-checkpoints
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ddplint import names
from ddplint.facts import in_single_process_branch
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.semantic import SemanticIndex

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
    ]
    invalid = [
        Invalid(DIST + "model.cuda()\nstate = torch.load('checkpoint.pt')\n", line=4, column=9),
        Invalid(DIST + "device = torch.device('cuda', rank)\nmodel.load_state_dict(torch.load(args.resume))\n",
                line=4, column=23),
        Invalid(DIST + "model.cuda()\nsd = torch.hub.load_state_dict_from_url(url)\n", line=4, column=6),
        Invalid("from torch import load\nimport torch.distributed as dist\nnet.cuda()\nckpt = load(path)\n",
                line=4, column=8),
        Invalid(DIST + "def resume(model, path):\n    ckpt = torch.load(path, weights_only=True)\n"
                       "    model.load_state_dict(ckpt['model'])\nmodel.cuda()\n", line=4, column=12),
        Invalid(DIST + "model.to('cuda')\nstate = torch.load(path, map_location=None)\n", line=4, column=9),
        Invalid(DIST + "class Trainer:\n    def load(self, path):\n        self.model.cuda()\n"
                       "        return torch.load(path)\n", line=6, column=16),
        Invalid(DIST + "torch.cuda.set_device(local_rank)\nif rank == 0:\n"
                       "    pretrained = torch.load(args.pretrained)\n", line=5, column=18),
    ]

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        if "cuda" not in index.source:
            return  # a CPU-only worker: tensors were saved on, and come back to, the CPU
        for site in index.calls_to(names.TORCH_LOAD, HUB_LOAD):
            if site.has_star_kwargs or site.has_star_args:
                continue
            arg = site.argument("map_location")
            if arg is not None and not (isinstance(arg.value, cst.Name) and arg.value.value == "None"):
                continue
            if in_single_process_branch(index, site.node):
                continue
            yield self.report(site.node)
