"""validate_dataloader_sync: every rank must run the same number of steps per epoch."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist


class DataLoaderSyncError(RuntimeError):
    pass


def validate_dataloader_sync(loader: Any, group=None) -> int:
    """All-gather ``len(loader)`` across the ranks of ``group``; return it when all agree.

    Raises ``DataLoaderSyncError`` with the per-rank distribution when they differ: the rank
    with more batches would wait forever in its extra steps' collectives.  Call it on every rank.
    """
    n = len(loader)
    counts: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(counts, n, group=group)
    if len(set(counts)) > 1:
        ranks = dist.get_process_group_ranks(group) if group is not None else range(len(counts))
        per_rank = ", ".join(f"rank {r}: {c}" for r, c in zip(ranks, counts))
        raise DataLoaderSyncError(
            f"ranks disagree on len(loader) ({per_rank}); the ranks with more batches will hang in "
            "the extra steps' collectives. Use a DistributedSampler (drop_last=True) or equal shards.")
    return n
