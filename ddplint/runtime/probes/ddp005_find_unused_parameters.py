"""DDP005 find-unused-parameters: step time with ``find_unused_parameters=True`` vs without.

With the flag, DDP walks the autograd graph from the outputs after every forward to find
parameters that will get no gradient.  The cost grows with the number of graph nodes, so
the probe uses a deep, narrow model (many small layers, little arithmetic) where the
traversal is visible next to compute and communication.  Every parameter is used, so both
runs compute the same gradients; only the bookkeeping differs.  Time is per training step
(forward, backward with all-reduce, optimizer), over alternating blocks of steps.
"""

from __future__ import annotations

import time

import torch

from ddplint.runtime.harness import Measurement, ProbeContext, Stats, batch, ddp, mlp, mse, result

RULE, NAME = "DDP005", "find-unused-parameters"
WIDTH, DEPTH, STEPS_PER_REPEAT = 16, 128, 8


def _trainer(ctx: ProbeContext, find_unused: bool):
    model = ddp(ctx, mlp(width=WIDTH, depth=DEPTH), find_unused_parameters=find_unused)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    xy = batch(0, ctx.rank, size=8, width=WIDTH, device=ctx.device)

    def block() -> float:
        t0 = time.perf_counter()
        for _ in range(STEPS_PER_REPEAT):
            opt.zero_grad(set_to_none=True)
            mse(model, xy).backward()
            opt.step()
        return (time.perf_counter() - t0) / STEPS_PER_REPEAT

    return block


def run(ctx: ProbeContext):
    pattern, fixed = _trainer(ctx, True), _trainer(ctx, False)
    pattern(), fixed()  # warm-up (bucket rebuild, allocator)
    # Alternate blocks so load from other processes hits both alike.
    rounds = max(ctx.repeats, 7)
    p_times, f_times = [], []
    for _ in range(rounds):
        p_times.append(pattern())
        f_times.append(fixed())
    m = Measurement.timed("time per training step", "s", Stats.of(p_times), Stats.of(f_times))
    # The traversal is deterministic extra work: compare the fastest blocks, the estimate
    # least disturbed by other load on the machine.
    fastest = min(p_times) / min(f_times)
    confirmed = fastest > 1.03
    detail = (f"{DEPTH} Linear layers of width {WIDTH} (every parameter used), {rounds} alternating blocks of "
              f"{STEPS_PER_REPEAT} steps: fastest block {fastest:.2f}x, median {m.ratio:.2f}x with the graph "
              "traversal; confirmed when the fastest blocks differ by more than 3%.")
    return result(RULE, NAME, confirmed, [m], detail)
