"""DDP005 find-unused-parameters: step time with ``find_unused_parameters=True`` vs without.

With the flag, DDP walks the autograd graph from the outputs after every forward to find
parameters that will get no gradient.  The cost grows with the number of graph nodes, so
the probe uses a deep, narrow model (many small layers, little arithmetic) where the
traversal is visible next to compute and communication.  Every parameter is used, so both
runs compute the same gradients; only the bookkeeping differs.  Time is per training step
(forward, backward with all-reduce, optimizer), median of repeats of blocks of steps.
"""

from __future__ import annotations

import torch

from ddplint.runtime.harness import Measurement, ProbeContext, batch, ddp, mlp, mse, result, timed

RULE, NAME = "DDP005", "find-unused-parameters"
WIDTH, DEPTH, STEPS_PER_REPEAT = 16, 96, 10


def step_time(ctx: ProbeContext, find_unused: bool):
    model = ddp(ctx, mlp(width=WIDTH, depth=DEPTH), find_unused_parameters=find_unused)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    xy = batch(0, ctx.rank, size=8, width=WIDTH, device=ctx.device)

    def block() -> None:
        for _ in range(STEPS_PER_REPEAT):
            opt.zero_grad(set_to_none=True)
            mse(model, xy).backward()
            opt.step()

    stats = timed(block, ctx.repeats, warmup=1)
    stats.median, stats.low, stats.high = (v / STEPS_PER_REPEAT for v in (stats.median, stats.low, stats.high))
    return stats


def run(ctx: ProbeContext):
    # Interleave pattern and fix so drift in machine load hits both alike.
    pat, fix = step_time(ctx, True), step_time(ctx, False)
    pat2, fix2 = step_time(ctx, True), step_time(ctx, False)
    pat = min(pat, pat2, key=lambda s: s.median)
    fix = min(fix, fix2, key=lambda s: s.median)
    m = Measurement.timed("time per training step", "s", pat, fix)
    confirmed = m.ratio is not None and m.ratio > 1.03
    detail = (f"{DEPTH} Linear layers of width {WIDTH} (every parameter used): the graph traversal adds "
              f"{(m.pattern - m.fixed) * 1e6:,.0f} µs per step ({(m.ratio - 1) * 100:+.0f}%); "
              "confirmed when the pattern is more than 3% slower.")
    return result(RULE, NAME, confirmed, [m], detail)
