"""Shared by the hang probes: diagnose a bounded hang after it timed out.

Every rank publishes how many collectives it issued on the hanging group (the flight
recorder's sequence id where available, else the probe's own count) through the store,
which keeps working when the group is wedged.  Rank 0, the rank left waiting, also runs
``monitored_barrier`` on a side gloo group that the other ranks do not enter (they are past
this point, as in the real program): it names the ranks that did not arrive.
"""

from __future__ import annotations

import datetime
import itertools

import torch.distributed as dist

from ddplint.runtime.harness import ProbeContext
from ddplint.runtime.watchdog import collective_count

_ids = itertools.count()
WAIT = datetime.timedelta(seconds=30)


def diagnose(ctx: ProbeContext, hang_group, own_count: int, monitor_group, waiting: bool) -> dict:
    store = dist.distributed_c10d._get_default_store()
    key = f"ddplint/hang/{next(_ids)}"
    fr = collective_count(hang_group)
    store.set(f"{key}/{ctx.rank}", f"{own_count},{fr}")
    diag: dict = {}
    if ctx.rank == 0:
        monitored = ""
        if waiting:
            try:
                dist.monitored_barrier(group=monitor_group, timeout=datetime.timedelta(seconds=1), wait_all_ranks=True)  # noqa: DDP010 (rank 0 alone, on purpose: it names the missing ranks)
            except RuntimeError as exc:
                monitored = str(exc).splitlines()[0]
        store.wait([f"{key}/{r}" for r in range(ctx.world_size)], WAIT)
        pairs = [store.get(f"{key}/{r}").decode().split(",") for r in range(ctx.world_size)]
        use_fr = all(int(p[1]) > 0 for p in pairs)
        counts = [int(p[1] if use_fr else p[0]) for p in pairs]
        most = max(counts)
        diag = {
            "counts": counts,
            "source": "flight recorder" if use_fr else "probe counter",
            "missing": [r for r, c in enumerate(counts) if c < most],
            "diverged_at": min(counts) + 1,
            "monitored_barrier": monitored,
        }
        store.set(f"{key}/done", "1")
    else:
        store.wait([f"{key}/done"], WAIT)  # stay out of the monitored barrier until it is over
    return diag


def describe(diag: dict) -> str:
    counts = ", ".join(f"rank {r}: {c}" for r, c in enumerate(diag["counts"]))
    text = (f"rank(s) {diag['missing']} never arrived at collective #{diag['diverged_at']} "
            f"(collectives issued per {diag['source']}: {counts})")
    if diag["monitored_barrier"]:
        text += f"; monitored_barrier: {diag['monitored_barrier']}"
    return text
