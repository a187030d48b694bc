"""## What it does
Flags a collective (`all_reduce`, `all_gather(_object)`, `broadcast(_object_list)`,
`reduce`, `reduce_scatter`, `barrier`, `scatter`, `gather`, `all_to_all`), a
collective state-dict call (`fsdp_model.state_dict()`, `FSDP.full_optim_state_dict`,
`get_model_state_dict`, `torch.distributed.checkpoint.save/load`) or a forward pass of
a DDP/FSDP-wrapped model that runs only under a rank condition (`if rank == 0:`,
`if is_main_process():`, after `if rank != 0: return`), directly or through a
function of the project that reaches one (`if rank == 0: evaluate(ddp_model)`).

## Why is this bad?
Every rank must enter a collective for it to complete. When only rank 0 calls
`barrier()` (or runs a DDP forward, which broadcasts buffers, or an FSDP forward,
which all-gathers parameters), rank 0 waits forever for peers that never arrive:
the job hangs until the NCCL timeout kills it, usually with no hint of where.

## Example
    if dist.get_rank() == 0:
        metrics = evaluate(ddp_model, val_loader)   # DDP forward on rank 0 only
        dist.all_reduce(metrics)                    # peers never join

## Use instead
    metrics = evaluate(ddp_model.module, val_loader)  # or evaluate on every rank
    dist.all_reduce(metrics)                          # every rank joins
    if dist.get_rank() == 0:
        print(metrics)

## References
- https://pytorch.org/docs/stable/distributed.html#collective-functions
- https://pytorch.org/docs/stable/notes/ddp.html
"""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from ddplint.analysis.models import project_callee, project_of, wrapped_kind, wrapped_slots
from ddplint.screen.facts import COLLECTIVE_STATE_DICT, COLLECTIVES
from ddplint.analysis.ranks import Guard, guard_restricts, rank_guards
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import CallSite, SemanticIndex, dotted_name

DIST = "import torch\nimport torch.distributed as dist\n"
DDP_IMPORT = DIST + "from torch.nn.parallel import DistributedDataParallel as DDP\n"
FSDP_IMPORT = DIST + "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"


class RankConditionalCollective(Rule):
    code, name, severity = "DDP010", "rank-conditional-collective", "error"
    message = "collective under a rank condition: the other ranks never join it and the job hangs"
    # Every report sits in a branch of a rank test (``if`` statement or expression).
    triggers = ("if",)
    needs_ddp_context = True
    uses_project = True

    valid = [
        Valid(DIST + "dist.all_reduce(t)\nif dist.get_rank() == 0:\n    print(t)\n"),
        Valid(DIST + "if rank == 0:\n    dist.send(t, dst=1)\nelse:\n    dist.recv(t, src=0)\n"),
        Valid(DIST + "if rank == 0:\n    dist.broadcast(t, src=0)\nelse:\n    dist.broadcast(t, src=0)\n"),
        Valid(DDP_IMPORT + "model = DDP(net)\nif rank == 0:\n    out = model.module(x)\n"),
        Valid(DIST + "if world_size > 1:\n    dist.barrier()\n"),
        Valid(DIST + "objs = [cfg] if rank == 0 else [None]\ndist.broadcast_object_list(objs, src=0)\n"),
        Valid(DIST + "group = dist.new_group([0, 1])\nif rank in ranks:\n    dist.all_reduce(t, group=group)\n"),
        # The download idiom: non-zero ranks wait, rank 0 works, then releases them.
        Valid(DIST + "if local_rank not in [-1, 0]:\n    dist.barrier()\ndownload()\n"
                     "if local_rank == 0:\n    dist.barrier()\n"),
        Valid(DIST + "for epoch in range(10):\n    if epoch % 5 == 0:\n        dist.barrier()\n"),
        Valid(DDP_IMPORT + "def evaluate(net, loader):\n    for x in loader:\n        net(x)\n"
                           "model = DDP(net)\nif rank == 0:\n    evaluate(net, loader)\n"),
        Valid(DIST + "if args.local_rank != -1:\n    dist.barrier()\n"),
        Valid(DIST + "if local_rank >= 0:\n    for t in tensors:\n        dist.broadcast(t, 0)\n"),
        # With the flag set every rank goes on: the collective path is shared.
        Valid(DIST + "def evaluate(shared, rank):\n    if not shared and rank != 0:\n        return\n"
                     "    dist.all_reduce(t)\n"),
        # Work sharded by rank: every rank runs the forward, on its own items.
        Valid(DDP_IMPORT + "model = DDP(net)\nfor i, x in enumerate(items):\n    if i % world_size != rank:\n"
                           "        continue\n    model(x)\n"),
        # The helper's collective runs only behind a flag the caller controls.
        Valid(DIST + "def run_eval(model, use_fsdp):\n    if use_fsdp:\n        dist.broadcast(sig, src=0)\n"
                     "    return model(x)\nif rank == 0:\n    run_eval(m, False)\n"),
        Valid(DIST + "n_tokens = cfg.num_tokens_per_dp_rank\nif n_tokens % 8 != 0:\n    raise ValueError(n_tokens)\n"
                     "dist.barrier()\n"),
        # The helper's collectives are themselves rank-balanced.
        Valid(DIST + "def zero_first(rank):\n    if rank not in [-1, 0]:\n        dist.barrier()\n"
                     "    if rank == 0:\n        dist.barrier()\ndef build(rank):\n    zero_first(rank)\n"
                     "if rank in {-1, 0}:\n    build(-1)\n"),
        Valid("import torch\nif rank == 0:\n    torch.save(model.state_dict(), 'm.pt')\n"),
    ]
    invalid = [
        Invalid(DIST + "if dist.get_rank() == 0:\n    dist.barrier()\n", line=4, column=5),
        Invalid(DIST + "def is_main_process():\n    return dist.get_rank() == 0\n"
                       "if is_main_process():\n    dist.all_reduce(loss)\n", line=6, column=5),
        Invalid(DIST + "def log(t, rank):\n    if rank != 0:\n        return\n"
                       "    dist.all_gather_object(out, t)\n", line=6, column=5),
        Invalid(DDP_IMPORT + "model = DDP(net)\nif args.rank % ngpus == 0:\n    out = model(x)\n",
                line=6, column=11),
        Invalid(DDP_IMPORT + "def evaluate(net, loader):\n    for x in loader:\n        net(x)\n"
                             "model = DDP(net)\nif rank == 0:\n    evaluate(model, loader)\n", line=9, column=5),
        Invalid(DIST + "import os\ndef sync(t):\n    dist.all_reduce(t)\n    return t\n"
                       "master_process = int(os.environ['RANK']) == 0\n"
                       "if master_process:\n    sync(loss)\n", line=9, column=5),
        Invalid(FSDP_IMPORT + "model = FSDP(net)\nif rank == 0:\n    sd = model.state_dict()\n",
                line=6, column=10),
        Invalid(FSDP_IMPORT + "model = FSDP(net)\nif local_rank in [-1, 0]:\n"
                              "    osd = FSDP.full_optim_state_dict(model, optim)\n", line=6, column=11),
        Invalid(DIST + "import torch.distributed.checkpoint as dcp\nif is_main_process():\n"
                       "    dcp.save(state, checkpoint_id=path)\n", line=5, column=5),
        Invalid(DIST + "value = dist.all_reduce(t) if rank == 0 else None\n", line=3, column=9),
        Invalid(DDP_IMPORT + "model = DDP(net)\nif ddp:\n    master_process = ddp_rank == 0\nelse:\n"
                             "    master_process = True\nif master_process:\n    with torch.no_grad():\n"
                             "        loss = model(x)\n", line=11, column=16),
        Invalid(DDP_IMPORT + "@torch.no_grad()\ndef estimate_loss():\n    return model(x).mean()\n"
                             "model = DDP(net)\nmaster_process = ddp_rank == 0\n"
                             "for it in range(100):\n    if it % 10 == 0 and master_process:\n"
                             "        losses = estimate_loss()\n", line=11, column=18),
        Invalid(DIST + "def log_metrics(distributed, rank):\n    if distributed and rank != 0:\n        return\n"
                       "    dist.barrier()\n", line=6, column=5),
    ]

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        for site in index.calls:
            what = self._reaches(index, site)
            if what is None:
                continue
            guards = [g for g in rank_guards(index, site.node) if guard_restricts(index, g)]
            if not guards or self._issued_on_every_branch(index, site, guards):
                continue
            if site.keyword("group") is not None and any(_membership_test(g) for g in guards):
                continue  # subgroup collective guarded by group membership
            yield self.report(site.node, f"{what} under a rank condition: the other ranks never "
                                         "join it and the job hangs")

    def _reaches(self, index: SemanticIndex, site: CallSite) -> Optional[str]:
        """What the call is, when it is collective: a description, else None."""
        qualified = site.qualified_name or ""
        if qualified in COLLECTIVES:
            return f"collective {qualified.rsplit('.', 1)[-1]}()"
        if qualified in COLLECTIVE_STATE_DICT:
            return f"collective {qualified.rsplit('.', 1)[-1]}()"
        if site.method == "state_dict" and site.receiver is not None \
                and wrapped_kind(index, site.receiver, site.order) == "fsdp":
            return "FSDP state_dict() (all-gathers parameters)"
        if isinstance(site.node.func, (cst.Name, cst.Attribute)) and qualified == "":
            kind = wrapped_kind(index, site.node.func, site.order)
            if kind:
                return f"forward of a {kind.upper()} model (a collective)"
        callee = dotted_name(site.node.func)
        if callee is None:
            return None
        reached = project_of(index).call_reaches(index.path, project_callee(index, site.node) or callee,
                                                 index.imports, wrapped_slots(index, site))
        if reached == "collective":
            return f"call of {callee}(), which issues a collective,"
        if reached == "forward":
            return f"call of {callee}(), which runs a forward of a wrapped model,"
        return None

    def _issued_on_every_branch(self, index: SemanticIndex, site: CallSite, guards: list[Guard]) -> bool:
        """The same collective also issued on the other side of a rank test in
        this function (``else`` branch, or the ``if rank != 0: barrier()`` ...
        ``if rank == 0: barrier()`` idiom)."""
        if not site.qualified_name:
            return False
        own = {id(g.node) for g in guards}
        for other in index.calls_to(site.qualified_name):
            if other is site or other.scope is not site.scope:
                continue
            other_guards = rank_guards(index, other.node)
            if not other_guards:
                continue
            if {id(g.node) for g in other_guards} != own:
                return True
            if [g.branch for g in other_guards] != [g.branch for g in guards]:
                return True
        return False


def _membership_test(guard: Guard) -> bool:
    test = getattr(guard.node, "test", None)
    return isinstance(test, cst.Comparison) and any(
        isinstance(t.operator, (cst.In, cst.NotIn)) for t in test.comparisons)
