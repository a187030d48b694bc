"""DDP020 rank0-only-load-after-wrap: parameter divergence across ranks.

DDP broadcasts rank 0's parameters once, at construction.  Loading a checkpoint on rank 0
only, after the wrap, leaves the other ranks on their old weights; gradients are averaged
from then on, so every rank applies the same update and the difference never closes.
Trains a few steps each way and all-gathers the parameters: max |rank r - rank 0|.
"""

from __future__ import annotations

import torch

from ddplint.runtime.harness import (
    SEED, Measurement, ProbeContext, batch, ddp, flat_params, mlp, mse, result,
)

RULE, NAME = "DDP020", "rank0-only-load-after-wrap"
STEPS = 3


def divergence(ctx: ProbeContext, load_before_wrap: bool) -> float:
    checkpoint = mlp(seed=SEED + 1).state_dict()
    model = mlp()
    if load_before_wrap:
        model.load_state_dict(checkpoint)  # the fix: every rank, before DDP
        model = ddp(ctx, model)
    else:
        model = ddp(ctx, model)
        if ctx.rank == 0:
            model.module.load_state_dict(checkpoint)  # noqa: DDP020 (the line under test)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(ctx.steps_or(STEPS)):
        opt.zero_grad()
        mse(model, batch(step, ctx.rank, device=ctx.device)).backward()
        opt.step()
    params = ctx.gather(flat_params(model))
    return max(float((p - params[0]).abs().max()) for p in params)


def run(ctx: ProbeContext):
    m = Measurement("max parameter difference across ranks after training", "",
                    divergence(ctx, False), divergence(ctx, True))
    confirmed = m.pattern > 1e-3 and m.fixed == 0.0
    detail = (f"after {ctx.steps_or(STEPS)} DDP steps the ranks' weights differ by up to {m.pattern:.3g} "
              f"(rank-0-only load after the wrap) vs {m.fixed:g} (load on every rank before the wrap).")
    return result(RULE, NAME, confirmed, [m], detail)


def not_applicable(ctx: ProbeContext) -> str | None:
    return "needs at least 2 ranks" if ctx.world_size < 2 else None
