"""DDP011 checkpoint-saved-on-every-rank: writers per checkpoint path.

``torch.save`` on every rank makes N processes truncate and rewrite the same file at once
(N times the I/O at best, a torn checkpoint at worst).  Each rank reads its own write
counter from the kernel (``/proc/self/io`` ``wchar``: bytes this process passed to write
calls) around the save section; a rank whose counter grew by at least the checkpoint's size
wrote it.  Saving on every rank (pattern) vs under ``if rank == 0`` (fix).
(inotify cannot count this: the kernel merges identical consecutive events.)
"""

from __future__ import annotations

import os
import sys
import tempfile

import torch

from ddplint.runtime.harness import Measurement, ProbeContext, ddp, mlp, result

RULE, NAME = "DDP011", "checkpoint-saved-on-every-rank"


def not_applicable(ctx: ProbeContext) -> str | None:
    if not sys.platform.startswith("linux"):
        return "needs Linux /proc/self/io to attribute file writes to processes"
    return None


def _written() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))


def bytes_written(ctx: ProbeContext, guarded: bool, path: str) -> int:
    state = ddp(ctx, mlp()).module.state_dict()
    ctx.barrier()
    before = _written()
    if not guarded or ctx.rank == 0:
        torch.save(state, path)  # the line under test
    written = _written() - before
    ctx.barrier()  # every write is done before anyone looks at the file
    return written


def run(ctx: ProbeContext):
    with tempfile.TemporaryDirectory(prefix="ddplint-ddp011-") as mine:
        folder = ctx.gather(mine)[0]  # one shared path: rank 0's folder
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "checkpoint.pt")
        per_rank = {k: ctx.gather(bytes_written(ctx, k == "fix", path)) for k in ("pattern", "fix")}
        size = os.path.getsize(path)
        ctx.barrier()  # nobody touches the folder while rank 0 removes it
    pat, fix = (sum(b >= size for b in per_rank[k]) for k in ("pattern", "fix"))
    ms = [Measurement("processes that wrote the checkpoint path", "writers", pat, fix),
          Measurement("bytes written by all ranks while saving", "bytes", sum(per_rank["pattern"]), sum(per_rank["fix"]))]
    confirmed = pat == ctx.world_size and fix == 1
    detail = (f"checkpoint {size:,} bytes; write counters per rank (/proc/self/io wchar): every rank saves "
              f"{per_rank['pattern']}, rank-0 guard {per_rank['fix']}. Counts this host's ranks.")
    return result(RULE, NAME, confirmed, ms, detail)
