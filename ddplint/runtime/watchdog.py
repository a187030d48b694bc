"""collective_watchdog: turn a hang inside a block into an error that names the missing ranks.

On entry every rank records its arrival in the process group's store and the group's
timeout is lowered to ``timeout``; a collective that some rank never joins then fails after
``timeout`` seconds instead of the default 30 minutes.  The rank that timed out reads the
store to see which peers never entered the block or already left it (they skipped the
collective this rank is waiting in) and raises ``CollectiveHangError`` naming them, with the
flight recorder's view of the collective it was stuck in where that is available.

After a timeout the process group is unusable (the mismatched collective is still pending on
the peers); tear it down or let the process exit.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import pickle
import re
import time
from typing import Iterator

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

_blocks = itertools.count()
_HANG_RE = re.compile(r"time[d ]?\s*out|timeout|closed by peer|connection reset|abort", re.I)


class CollectiveHangError(RuntimeError):
    def __init__(self, message: str, missing_ranks: list[int]):
        super().__init__(message)
        self.missing_ranks = missing_ranks

    def __reduce__(self):  # picklable, so run_ranks can re-raise it in the caller
        return (type(self), (str(self), self.missing_ranks))


@contextlib.contextmanager
def collective_watchdog(timeout: float, group=None, name: str = "watched block") -> Iterator[None]:
    """Context manager: a collective that hangs inside it raises ``CollectiveHangError``.

    Every rank of ``group`` (default: the world) must enter the block.
    """
    group = group or c10d._get_default_group()
    rank = dist.get_rank()
    store = c10d._get_default_store()
    key = f"ddplint/watchdog/{group.group_name}/{next(_blocks)}"
    store.set(f"{key}/enter/{rank}", "1")
    old = _group_timeout(group)
    c10d._set_pg_timeout(datetime.timedelta(seconds=timeout), group)
    t0 = time.monotonic()
    try:
        yield
    except Exception as exc:
        if not _HANG_RE.search(str(exc)):
            raise
        waited = time.monotonic() - t0
        missing, states = _missing_ranks(store, key, group, rank)
        where = last_collective(group)
        msg = (f"collective_watchdog({name!r}): rank {rank} waited {waited:.1f} s "
               f"(timeout {timeout:g} s) in a collective"
               + (f" ({where})" if where else "")
               + f"; rank(s) {missing} did not arrive ({'; '.join(states)})")
        raise CollectiveHangError(msg, missing) from exc
    else:
        store.set(f"{key}/exit/{rank}", "1")
    finally:
        if old is not None:
            try:
                c10d._set_pg_timeout(old, group)
            except Exception:
                pass  # an aborted group has no timeout left to restore


def _group_timeout(group) -> datetime.timedelta | None:
    for dev in (torch.device("cpu"), torch.device("cuda")):
        try:
            return group._get_backend(dev).options._timeout
        except Exception:
            continue
    return None


def _missing_ranks(store, key, group, me) -> tuple[list[int], list[str]]:
    missing, states = [], []
    for r in dist.get_process_group_ranks(group):
        if r == me:
            continue
        entered = store.check([f"{key}/enter/{r}"])
        left = store.check([f"{key}/exit/{r}"])
        if not entered:
            missing.append(r)
            states.append(f"rank {r} never entered the block")
        elif left:
            missing.append(r)
            states.append(f"rank {r} left the block without joining this collective")
    if not missing:
        states.append("every rank is inside the block: they wait in different collectives")
    return missing, states


def flight_records(group=None) -> list[dict]:
    """This rank's flight-recorder entries for ``group`` (empty when it is unavailable)."""
    try:
        trace = pickle.loads(torch._C._distributed_c10d._dump_fr_trace())
    except Exception:
        return []
    name = (group or c10d._get_default_group()).group_name
    return [e for e in trace.get("entries", []) if str(e.get("process_group", ("",))[0]) == str(name)]


def last_collective(group=None) -> str:
    entries = flight_records(group)
    if not entries:
        return ""
    e = entries[-1]
    return f"{e.get('profiling_name')} #{e.get('collective_seq_id')} on group {group.group_name if group else '0'}"


def collective_count(group=None) -> int:
    """How many collectives this rank issued on ``group``, per the flight recorder."""
    entries = flight_records(group)
    return max((int(e.get("collective_seq_id") or 0) for e in entries), default=0)
