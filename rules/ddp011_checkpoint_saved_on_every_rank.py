"""## What it does
Flags `torch.save` of model or optimizer state that every rank reaches: no rank-0
guard (`if rank == 0:`, `if is_main_process():`, `if rank != 0: return`,
`@rank_zero_only`) on the way to it, neither in its own function nor in all of the
project's calls of that function (`save_on_master` helpers called unguarded,
`main()` run by every process).

## Why is this bad?
All N ranks write the same file at the same time. On a shared filesystem the
writes interleave or race with a reader, producing truncated or corrupt
checkpoints, and every rank pays the serialisation time and I/O bandwidth of a
save that only one process needs.

## Example
    for epoch in range(epochs):
        train_one_epoch(model, loader)
        torch.save(model.module.state_dict(), "checkpoint.pt")

## Use instead
    for epoch in range(epochs):
        train_one_epoch(model, loader)
        if dist.get_rank() == 0:
            torch.save(model.module.state_dict(), "checkpoint.pt")

## References
- https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#save-and-load-checkpoints
- https://pytorch.org/docs/stable/distributed.checkpoint.html
"""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from ddplint import names
from ddplint.analysis.models import function_key, project_of
from ddplint.analysis.ranks import enclosing_function, runs_on_rank_subset
from ddplint.analysis.roles import is_worker_code
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import SemanticIndex, dotted_name

DIST = "import torch\nimport torch.distributed as dist\n"
_STATE_NAME = re.compile(r"model|net|ckpt|checkpoint|state|optim|weights|snapshot", re.IGNORECASE)
_PER_RANK = re.compile(r"rank|gpu|device|proc|worker|shard", re.IGNORECASE)
_BUFFER_NAME = re.compile(r"buf|bio|stream|bytes|memory", re.IGNORECASE)


class CheckpointSavedOnEveryRank(Rule):
    code, name, severity = "DDP011", "checkpoint-saved-on-every-rank", "warning"
    message = "checkpoint saved on every rank: N processes write the same file"
    triggers = ("save",)
    needs_ddp_context = True
    uses_project = True

    valid = [
        Valid(DIST + "if dist.get_rank() == 0:\n    torch.save(model.state_dict(), 'm.pt')\n"),
        Valid(DIST + "if args.local_rank == 0:\n    torch.save(model.state_dict(), 'm.pt')\n"),
        Valid(DIST + "def save(model):\n    if not is_main_process():\n        return\n"
                     "    torch.save(model.state_dict(), 'm.pt')\n"),
        Valid(DIST + "torch.save(model.state_dict(), f'ckpt_rank{dist.get_rank()}.pt')\n"),
        Valid(DIST + "import io\nbuffer = io.BytesIO()\ntorch.save(model.state_dict(), buffer)\n"),
        Valid(DIST + "import torch.distributed.checkpoint as dcp\ndcp.save({'model': model.state_dict()}, "
                     "checkpoint_id='ckpt')\n"),
        # The guard is in the only caller.
        Valid(DIST + "def save_on_master(state, path):\n    torch.save(state, path)\n"
                     "def main():\n    if dist.get_rank() == 0:\n        save_on_master(model.state_dict(), 'm.pt')\n"
                     "main()\n"),
        # A library helper with no known caller: unknown, silent.
        Valid(DIST + "def save_checkpoint(model, path):\n    torch.save(model.state_dict(), path)\n"),
        Valid("import torch\ntorch.save(model.state_dict(), 'm.pt')\n"),  # not DDP code
        Valid(DIST + "master_process = dist.get_rank() == 0\nif master_process:\n"
                     "    torch.save(model.state_dict(), 'm.pt')\n"),
        Valid(DIST + "if not args.multiprocessing_distributed or args.rank % ngpus == 0:\n"
                     "    torch.save({'model': model.state_dict()}, 'm.pt')\n"),
        Valid(DIST + "torch.save(losses, 'losses.pt')\n"),
        Valid(DIST + "def main(args):\n    args.save_logs = args.logs and is_master(args)\n"
                     "    if args.save_logs:\n        torch.save({'state_dict': model.state_dict()}, path)\n"
                     "main(args)\n"),
    ]
    invalid = [
        Invalid(DIST + "torch.save(model.state_dict(), 'm.pt')\n", line=3, column=1),
        Invalid(DIST + "def main():\n    for epoch in range(3):\n        train(model)\n"
                       "        torch.save({'model': model.module.state_dict()}, 'ckpt.pt')\n"
                       "if __name__ == '__main__':\n    main()\n", line=6, column=9),
        Invalid(DIST + "def save_on_master(state, path):\n    torch.save(state, path)\n"
                       "def main():\n    save_on_master(model.state_dict(), 'm.pt')\nmain()\n",
                line=4, column=5),
        Invalid(DIST + "import torch.multiprocessing as mp\ndef worker(gpu, args):\n"
                       "    dist.init_process_group('nccl')\n    torch.save(model, 'model.pt')\n"
                       "mp.spawn(worker, nprocs=4, args=(args,))\n", line=6, column=5),
        Invalid(DIST + "checkpoint = {'model': model.state_dict(), 'epoch': epoch}\n"
                       "torch.save(checkpoint, os.path.join(out_dir, 'ckpt.pt'))\n", line=4, column=1),
        Invalid("from torch import save\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
                "model = DDP(net)\nif epoch % 10 == 0:\n    save(model.state_dict(), 'm.pt')\n",
                line=5, column=5),
        Invalid(DIST + "def save(model):\n    if rank == 0:\n        print('saving')\n"
                       "    torch.save(model.state_dict(), 'm.pt')\nsave(net)\n", line=6, column=5),
        Invalid(DIST + "if world_size > 1:\n    torch.save(optimizer.state_dict(), 'opt.pt')\n",
                line=4, column=5),
        Invalid(DIST + "if __name__ == '__main__':\n    dist.init_process_group('nccl')\n"
                       "    for epoch in range(3):\n        torch.save(net.state_dict(), f'ep{epoch}.pt')\n",
                line=6, column=9),
    ]

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        for site in index.calls_to(names.TORCH_SAVE):
            obj, target = site.argument("obj"), site.argument("f")
            if obj is None or target is None or not _is_model_state(index, obj.value):
                continue
            if _per_rank_or_in_memory(index, target.value):
                continue
            if runs_on_rank_subset(index, site.node, lenient=True) or not is_worker_code(index, site.node):
                continue
            function = enclosing_function(index, site.node)
            if function is not None and _class_level_unknown(index, function):
                continue
            if function is None or \
                    project_of(index).callers_guarded(index.path, function_key(index, function)) is False:
                yield self.report(site.node)


def _is_model_state(index: SemanticIndex, expr: cst.BaseExpression, depth: int = 0) -> bool:
    """Model/optimizer state: a ``.state_dict()`` inside, a model object, or a name
    that says so (``checkpoint``, ``state``, ``model``)."""
    if _contains_state_dict(expr):
        return True
    name = dotted_name(expr)
    if name is None:
        return False
    if depth < 2 and isinstance(expr, cst.Name):
        values = index.reaching_values(expr) or []
        if any(_is_model_state(index, v, depth + 1) for v in values):
            return True
    return bool(_STATE_NAME.search(name.split(".")[-1]))


def _contains_state_dict(expr: cst.CSTNode) -> bool:
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
                and node.func.attr.value in ("state_dict", "optim_state_dict"):
            return True
        stack.extend(node.children)
    return False


def _per_rank_or_in_memory(index: SemanticIndex, expr: cst.BaseExpression) -> bool:
    """A file name built from the rank, or an in-memory buffer."""
    text = index.module.code_for_node(expr)
    if _PER_RANK.search(text):
        return True
    values = index.reaching_values(expr) if isinstance(expr, cst.Name) else None
    for value in values or []:
        text += " " + index.module.code_for_node(value)
    if _PER_RANK.search(text) or "BytesIO" in text:
        return True
    name = dotted_name(expr)
    return name is not None and bool(_BUFFER_NAME.search(name.split(".")[-1]))


def _class_level_unknown(index: SemanticIndex, function: cst.FunctionDef) -> bool:
    """Functions nested in other functions: their calls are not tracked by name."""
    scope = index.enclosing_scope(function)
    return scope is not index.module
