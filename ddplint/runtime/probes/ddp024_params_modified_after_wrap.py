"""DDP024 params-modified-after-wrap: freezing a parameter after ``DDP(model)``.

DDP registers its reducer (buckets, one autograd hook per parameter) at construction.
``requires_grad_(False)`` afterwards means a registered parameter never produces a
gradient: its bucket never becomes ready, and the next iteration raises "Expected to have
finished reduction in the prior iteration".  Counts the training steps that complete,
freeze after the wrap (pattern) vs freeze before (fix), and records the error.
"""

from __future__ import annotations

import torch

from ddplint.runtime.harness import Measurement, ProbeContext, batch, ddp, mlp, mse, result

RULE, NAME = "DDP024", "params-modified-after-wrap"
STEPS = 3


def steps_completed(ctx: ProbeContext, freeze_after_wrap: bool) -> tuple[int, str]:
    model = mlp()
    if not freeze_after_wrap:
        model[0].requires_grad_(False)  # the fix: before wrapping
    model = ddp(ctx, model)
    if freeze_after_wrap:
        model.module[0].requires_grad_(False)  # the line under test
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.01)
    steps = ctx.steps_or(STEPS)
    for step in range(steps):
        try:
            opt.zero_grad()
            mse(model, batch(step, ctx.rank, device=ctx.device)).backward()
            opt.step()
        except RuntimeError as exc:
            return step, str(exc).splitlines()[0]
    return steps, ""


def run(ctx: ProbeContext):
    pat, error = steps_completed(ctx, True)
    fix, fix_error = steps_completed(ctx, False)
    m = Measurement("training steps completed", "steps", pat, fix)
    confirmed = pat < fix and "reduction" in error and not fix_error
    detail = f"freezing layer 0 after DDP(model): step {pat} raised: {error[:200]}"
    return result(RULE, NAME, confirmed, [m], detail)
