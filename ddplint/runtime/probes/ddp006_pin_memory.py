"""DDP006 dataloader-without-pin-memory: host-to-device copy throughput, pageable vs pinned.

``pin_memory=True`` makes the DataLoader hand out page-locked batches; only those can be
copied to the GPU by DMA, asynchronously with ``non_blocking=True``.  A pageable tensor is
first staged through a pinned bounce buffer by the driver.  Measures GB/s of
``tensor.to("cuda", non_blocking=True)`` for a 64 MiB batch, timed with CUDA events.
CPU-only: not applicable (there is no device to copy to).
"""

from __future__ import annotations

import torch

from ddplint.runtime.harness import Measurement, ProbeContext, Stats, result

RULE, NAME = "DDP006", "dataloader-without-pin-memory"
NBYTES = 64 * 2**20


def not_applicable(ctx: ProbeContext) -> str | None:
    if not ctx.is_cuda:
        return "needs CUDA: pinned memory only speeds up host-to-device copies"
    return None


def throughput(ctx: ProbeContext, pinned: bool) -> Stats:
    host = torch.empty(NBYTES // 4, dtype=torch.float32, pin_memory=pinned).uniform_()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    host.to(ctx.device, non_blocking=True)  # warm-up: allocator, context
    torch.cuda.synchronize()
    rates = []
    for _ in range(ctx.repeats):
        start.record()
        host.to(ctx.device, non_blocking=True)
        end.record()
        end.synchronize()
        rates.append(NBYTES / (start.elapsed_time(end) / 1e3) / 1e9)
    return Stats.of(rates)


def run(ctx: ProbeContext):
    pageable, pinned = throughput(ctx, False), throughput(ctx, True)
    m = Measurement.timed("host-to-device copy throughput (64 MiB)", "GB/s", pageable, pinned)
    confirmed = m.ratio is not None and m.ratio < 0.9
    detail = f"pageable {m.pattern:.1f} GB/s vs pinned {m.fixed:.1f} GB/s with non_blocking=True (CUDA events)."
    return result(RULE, NAME, confirmed, [m], detail)
