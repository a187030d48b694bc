"""DDP014 rank-divergent-skip-before-backward: silent mis-pairing, then a bounded hang.

Pattern: ``if torch.isnan(loss): continue`` in a DDP loop, and only the last rank gets a
NaN batch (at step 1).  That rank skips one backward, so from then on rank 0's gradient
all-reduce of step s is matched with the last rank's all-reduce of step s+1: gradients of
different steps are averaged, silently.  At the end rank 0 runs one backward more than the
last rank and waits for it; the short group timeout turns that into an error, and the
diagnosis names the missing rank and the collective where the counts diverged.

Rank 0 checks every synced gradient: from ``world_size * mean - own`` it recovers the peer's
contribution and tests it against the last rank's gradient of the same step and of the next.
Fix: all-reduce the skip decision so every rank skips together.  Runs on gloo/CPU (an NCCL
timeout aborts the process).
"""

from __future__ import annotations

import copy
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ddplint.runtime.comm import CommCounter
from ddplint.runtime.harness import Measurement, ProbeContext, batch, mlp, mse, result, short_error
from ddplint.runtime.probes._hang import describe, diagnose

RULE, NAME = "DDP014", "rank-divergent-skip-before-backward"
HANG_TIMEOUT_S, STEPS, NAN_STEP = 2.0, 4, 1


def not_applicable(ctx: ProbeContext) -> str | None:
    return "needs at least 2 ranks" if ctx.world_size < 2 else None


def _data(step: int, rank: int, world_size: int):
    x, y = batch(step, rank)
    if rank == world_size - 1 and step == NAN_STEP:
        x[0, 0] = float("nan")  # a bad sample on one rank only
    return x, y


def _grad(module: torch.nn.Module, xy) -> torch.Tensor:
    local = copy.deepcopy(module)
    mse(local, xy).backward()
    return torch.cat([p.grad.reshape(-1) for p in local.parameters()])


def _paired_with(ctx: ProbeContext, module, step: int, synced: torch.Tensor, own: torch.Tensor) -> int | None:
    """Which step's batch the last rank contributed to this all-reduce (ranks between are same-step)."""
    ws = ctx.world_size
    peer = synced * ws - own - sum((_grad(module, _data(step, r, ws)) for r in range(1, ws - 1)), torch.zeros_like(own))
    for candidate in (step, step + 1):
        if torch.allclose(peer, _grad(module, _data(candidate, ws - 1, ws)), rtol=1e-3, atol=1e-5):
            return candidate
    return None


def train(ctx: ProbeContext, agree_on_skip: bool):
    group = ctx.new_group(HANG_TIMEOUT_S, backend="gloo")
    model = DDP(mlp(), process_group=group)
    counter = CommCounter().register(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    mispaired, error, waited = 0, "", 0.0
    for step in range(STEPS):
        xy = _data(step, ctx.rank, ctx.world_size)
        loss = mse(model, xy)
        skip = torch.isnan(loss).float().reshape(1)
        if agree_on_skip:  # the fix: every rank takes the same branch
            dist.all_reduce(skip, op=dist.ReduceOp.MAX, group=ctx.group)
        if skip.item():
            continue  # the line under test
        opt.zero_grad()
        own = _grad(model.module, xy) if ctx.rank == 0 else None
        t0 = time.monotonic()
        try:
            loss.backward()
        except RuntimeError as exc:
            error, waited = short_error(exc), time.monotonic() - t0
            break
        waited = max(waited, time.monotonic() - t0)
        if own is not None:
            synced = torch.cat([p.grad.reshape(-1) for p in model.module.parameters()])
            mispaired += _paired_with(ctx, model.module, step, synced, own) != step
        opt.step()
    return group, counter.total_calls, mispaired, error, waited


def run(ctx: ProbeContext):
    monitor = ctx.new_group(ctx.timeout_s, backend="gloo")
    _, _, fix_mispaired, fix_error, fix_wait = train(ctx, True)
    group, calls, mispaired, error, waited = train(ctx, False)
    diag = diagnose(ctx, group, calls, monitor, waiting=bool(error))
    if ctx.rank != 0:
        return result(RULE, NAME, True, [], "")  # rank 0 reports
    ms = [Measurement("steps whose gradients were averaged with another step's", "steps", mispaired, fix_mispaired),
          Measurement("longest wait in backward (rank 0)", "s", waited, fix_wait)]
    confirmed = (mispaired >= 1 and fix_mispaired == 0 and bool(error) and not fix_error
                 and diag["missing"] == [ctx.world_size - 1])
    detail = (f"rank {ctx.world_size - 1} skipped step {NAN_STEP} (NaN loss): rank 0's steps {NAN_STEP}.. were "
              f"all-reduced with its next step's gradients ({mispaired} steps, no error raised); then rank 0 "
              f"timed out after {waited:.1f} s: {error[:100]}. Diagnosis: {describe(diag)}. "
              "Fix (all-reduced skip flag): every step paired, no hang.")
    return result(RULE, NAME, confirmed, ms, detail)
