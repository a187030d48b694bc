"""DDP009 missing-distributed-sampler: fraction of samples seen by more than one rank.

A ``DataLoader(dataset, shuffle=True)`` without a sampler gives every rank the whole
dataset, so an "epoch" of N ranks trains N times on each sample (and takes N times
longer than needed).  Each rank iterates one epoch and records the sample indices; the
ranks all-gather them and count samples that more than one rank saw.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.utils.data import DataLoader, DistributedSampler

from ddplint.runtime.harness import Measurement, ProbeContext, result

RULE, NAME = "DDP009", "missing-distributed-sampler"
N = 256


def seen(ctx: ProbeContext, with_sampler: bool) -> list[int]:
    data = torch.arange(N)
    if with_sampler:
        loader = DataLoader(data, batch_size=16, sampler=DistributedSampler(data, shuffle=True, seed=0))
    else:
        # the line under test (DDP009 reads this arm as the single-process mode: its sibling
        # builds the DistributedSampler)
        loader = DataLoader(data, batch_size=16, shuffle=True)
    return [int(i) for b in loader for i in b]


def overlap(per_rank: list[list[int]]) -> tuple[float, float]:
    counts = Counter(i for idx in per_rank for i in set(idx))
    return sum(c > 1 for c in counts.values()) / N, sum(len(idx) for idx in per_rank) / len(per_rank)


def run(ctx: ProbeContext):
    pat_overlap, pat_len = overlap(ctx.gather(seen(ctx, False)))
    fix_overlap, fix_len = overlap(ctx.gather(seen(ctx, True)))
    ms = [Measurement("samples seen by more than one rank", "fraction", pat_overlap, fix_overlap),
          Measurement("samples per rank per epoch", "samples", pat_len, fix_len)]
    confirmed = pat_overlap == 1.0 and fix_overlap == 0.0 and ctx.world_size > 1
    detail = (f"{N} samples, {ctx.world_size} ranks: without a DistributedSampler every rank iterates all "
              f"{pat_len:.0f} samples ({pat_overlap:.0%} seen by several ranks); with one each rank gets {fix_len:.0f}.")
    return result(RULE, NAME, confirmed, ms, detail)


def not_applicable(ctx: ProbeContext) -> str | None:
    return "needs at least 2 ranks" if ctx.world_size < 2 else None
