"""DDP002 missing-no-sync-accumulation: all-reduce calls and bytes per optimizer step.

k-step gradient accumulation on a DDP model, three ways, same seed, model and data:

* ``none``      backward on every micro-step, no ``no_sync``: DDP all-reduces every time;
* ``fwd_bwd``   ``with model.no_sync():`` around forward and backward of the first k-1
                micro-steps (the fix): one all-reduce round per optimizer step;
* ``bwd_only``  ``no_sync`` around backward only (DDP013): the forward outside the context
                already armed the reducer, so it still all-reduces every micro-step.

Calls and bytes are counted by a DDP comm hook (``CommCounter``); the model fits one bucket,
so calls = all-reduce rounds.  Time per accumulation cycle is the median of repeats.
"""

from __future__ import annotations

import contextlib

import torch

from ddplint.runtime.comm import CommCounter
from ddplint.runtime.harness import (
    Measurement, ProbeContext, Stats, batch, ddp, flat_params, mlp, mse, result, timed,
)

RULE, NAME = "DDP002", "missing-no-sync-accumulation"
WIDTH, DEPTH, K = 256, 3, 4  # ~200k parameters: one DDP bucket


def accumulate(ctx: ProbeContext, variant: str, k: int) -> tuple[float, float, Stats, torch.Tensor]:
    """(calls per optimizer step, bytes per optimizer step, time per cycle, final params)."""
    model = ddp(ctx, mlp(width=WIDTH, depth=DEPTH))
    counter = CommCounter().register(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cycle = [0]

    def one_cycle() -> None:
        for micro in range(k):
            xy = batch(cycle[0] * k + micro, ctx.rank, size=32, width=WIDTH, device=ctx.device)
            skip_sync = micro < k - 1
            if variant == "fwd_bwd":
                with (model.no_sync() if skip_sync else contextlib.nullcontext()):
                    (mse(model, xy) / k).backward()
            elif variant == "bwd_only":
                loss = mse(model, xy) / k  # forward outside no_sync: the reducer is armed
                with (model.no_sync() if skip_sync else contextlib.nullcontext()):
                    loss.backward()
            else:
                (mse(model, xy) / k).backward()
        opt.step()
        opt.zero_grad()
        counter.step()
        cycle[0] += 1

    times = timed(one_cycle, ctx.repeats, warmup=1)
    calls = [s.calls for s in counter.per_step]
    nbytes = [s.bytes for s in counter.per_step]
    return max(calls), max(nbytes), times, flat_params(model.module)


def compare(ctx: ProbeContext, pattern: str, fixed: str, rule: str, name: str, expect_equal: bool):
    k = ctx.steps_or(K)
    p_calls, p_bytes, p_time, p_params = accumulate(ctx, pattern, k)
    f_calls, f_bytes, f_time, f_params = accumulate(ctx, fixed, k)
    same_update = torch.allclose(p_params, f_params, rtol=1e-4, atol=1e-6)
    ms = [
        Measurement("all-reduce calls per optimizer step", "calls", p_calls, f_calls),
        Measurement("all-reduce bytes per optimizer step", "bytes", p_bytes, f_bytes),
        Measurement.timed(f"time per accumulation cycle (k={k})", "s", p_time, f_time),
    ]
    if expect_equal:  # DDP013: no_sync around backward only changes nothing
        confirmed = p_calls == f_calls == k
    else:
        confirmed = p_calls == k * f_calls and f_calls >= 1 and same_update
    detail = (f"k={k} micro-steps per optimizer step, {sum(p.numel() for p in mlp(WIDTH, DEPTH).parameters()):,} "
              f"parameters, comm hook count: {pattern} {p_calls} vs {fixed} {f_calls} all-reduce calls; "
              f"final parameters {'identical' if same_update else 'DIFFERENT'} (accumulated gradients agree).")
    return result(rule, name, confirmed, ms, detail)


def run(ctx: ProbeContext):
    return compare(ctx, "none", "fwd_bwd", RULE, NAME, expect_equal=False)
