"""DDP015 process-group-not-destroyed: how long peers wait after one rank fails.

The last rank raises while the others enter a collective.  Pattern: the exception is
handled by code that keeps the process alive (logging, a retry loop, a stuck non-daemon
thread) and the process group is never torn down, so the peers wait until the group's
timeout.  Fix: ``try/finally: dist.destroy_process_group()`` closes the connections and the
peers fail at once.  Measures the seconds until rank 0's collective returns (group timeout
2 s here; 30 minutes by default).  Gloo: NCCL peers do not notice a destroyed communicator.
"""

from __future__ import annotations

import datetime
import gc
import itertools
import time

import torch
import torch.distributed as dist

from ddplint.runtime.harness import Measurement, ProbeContext, result, short_error

RULE, NAME = "DDP015", "process-group-not-destroyed"
HANG_TIMEOUT_S = 2.0
_ids = itertools.count()


def not_applicable(ctx: ProbeContext) -> str | None:
    return "needs at least 2 ranks" if ctx.world_size < 2 else None


def peer_wait(ctx: ProbeContext, destroy: bool) -> tuple[float, str]:
    group = ctx.new_group(HANG_TIMEOUT_S, backend="gloo")
    store = dist.distributed_c10d._get_default_store()
    done = f"ddplint/ddp015/{next(_ids)}/done"
    if ctx.rank == ctx.world_size - 1:
        try:
            raise ValueError("bad batch")  # this rank's failure
        except ValueError:
            if destroy:
                dist.destroy_process_group(group)  # what a try/finally would do
                del group  # drop our reference too: the gloo pairs close when the object dies
                gc.collect()
        store.wait([done], datetime.timedelta(seconds=30))  # alive, as the handler keeps it
        return 0.0, ""
    t0 = time.monotonic()
    error = ""
    try:
        dist.all_reduce(torch.ones(1), group=group)  # noqa: DDP010 (the probe's deliberate hang)
    except RuntimeError as exc:
        error = short_error(exc)
    waited = time.monotonic() - t0
    if ctx.rank == 0:
        store.set(done, "1")
    return waited, error


def run(ctx: ProbeContext):
    pattern, p_err = peer_wait(ctx, destroy=False)
    fixed, f_err = peer_wait(ctx, destroy=True)
    m = Measurement("seconds until rank 0 learns a peer failed", "s", pattern, fixed)
    confirmed = bool(p_err) and bool(f_err) and pattern >= 0.9 * HANG_TIMEOUT_S and fixed < 0.5 * HANG_TIMEOUT_S
    detail = (f"no teardown: rank 0 waited {pattern:.2f} s, the whole group timeout ({p_err[:80]}); "
              f"destroy_process_group in the failing rank: {fixed:.2f} s ({f_err[:80]}).")
    return result(RULE, NAME, confirmed, [m], detail)
