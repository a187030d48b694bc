"""DDP010 rank-conditional-collective: the hang, bounded and diagnosed.

Pattern: every rank issues two all-reduces, then ``if rank == 0: dist.all_reduce(t)``.
Rank 0 waits for peers that never come; with the probe's short group timeout the wait ends
in an error instead of the default 30 minutes.  The diagnosis names the rank(s) that did not
arrive and the collective sequence number where the ranks diverged (flight recorder on the
hanging group; ``monitored_barrier`` on a side gloo group).  Fix: the collective on every
branch.  Always on gloo groups with CPU tensors: an NCCL timeout aborts the process.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from ddplint.runtime.harness import Measurement, ProbeContext, result, short_error
from ddplint.runtime.probes._hang import describe, diagnose

RULE, NAME = "DDP010", "rank-conditional-collective"
HANG_TIMEOUT_S = 2.0


def not_applicable(ctx: ProbeContext) -> str | None:
    return "needs at least 2 ranks" if ctx.world_size < 2 else None


def run_collectives(ctx: ProbeContext, group, conditional: bool) -> tuple[float, int, str]:
    """(seconds the last collective took, collectives issued, error text)."""
    t = torch.ones(4)
    for _ in range(2):
        dist.all_reduce(t, group=group)
    issued, error = 2, ""
    t0 = time.monotonic()
    if not conditional or ctx.rank == 0:  # the pattern's rank condition
        issued += 1
        try:
            dist.all_reduce(t, group=group)
        except RuntimeError as exc:
            error = short_error(exc)
    return time.monotonic() - t0, issued, error


def run(ctx: ProbeContext):
    monitor = ctx.new_group(ctx.timeout_s, backend="gloo")
    fixed_s, _, fixed_err = run_collectives(ctx, ctx.new_group(HANG_TIMEOUT_S, backend="gloo"), False)
    hang_group = ctx.new_group(HANG_TIMEOUT_S, backend="gloo")
    pattern_s, issued, error = run_collectives(ctx, hang_group, True)
    diag = diagnose(ctx, hang_group, issued, monitor, waiting=bool(error))
    if ctx.rank != 0:
        return result(RULE, NAME, True, [], "")  # rank 0 reports
    ms = [Measurement("seconds until rank 0's collective returned", "s", pattern_s, fixed_s),
          Measurement("collectives issued, max - min across ranks", "collectives",
                      max(diag["counts"]) - min(diag["counts"]), 0)]
    expected_missing = list(range(1, ctx.world_size))
    confirmed = (bool(error) and not fixed_err and diag["missing"] == expected_missing
                 and pattern_s >= HANG_TIMEOUT_S * 0.9)
    detail = (f"pattern: rank 0 timed out after {pattern_s:.1f} s (group timeout {HANG_TIMEOUT_S:g} s): {error[:120]}. "
              f"Diagnosis: {describe(diag)}. Fix: all ranks finished in {fixed_s * 1e3:.1f} ms.")
    return result(RULE, NAME, confirmed, ms, detail)
