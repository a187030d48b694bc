"""DDP008 sampler-set-epoch-missing: sample order epoch to epoch, without and with set_epoch.

``DistributedSampler`` seeds its shuffle with ``seed + epoch``; without ``set_epoch`` the
epoch stays 0 and every epoch replays the same order.  Measures, over several epochs on
every rank, the fraction of positions that hold the same sample as in the previous epoch
(1.0 = identical order; about 1/len for a fresh shuffle).
"""

from __future__ import annotations

from torch.utils.data import DistributedSampler

from ddplint.runtime.harness import Measurement, ProbeContext, result

RULE, NAME = "DDP008", "sampler-set-epoch-missing"
N, EPOCHS = 512, 4


def repeat_fraction(ctx: ProbeContext, set_epoch: bool) -> float:
    sampler = DistributedSampler(range(N), num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=0)
    orders = []
    for epoch in range(EPOCHS):
        if set_epoch:
            sampler.set_epoch(epoch)
        orders.append(list(sampler))
    same = sum(a == b for prev, cur in zip(orders, orders[1:]) for a, b in zip(prev, cur))
    return same / (len(orders[0]) * (EPOCHS - 1))


def run(ctx: ProbeContext):
    # Every rank measures its own shard; report the mean over ranks.
    pat = ctx.gather(repeat_fraction(ctx, False))
    fix = ctx.gather(repeat_fraction(ctx, True))
    m = Measurement("positions with the same sample as the previous epoch", "fraction",
                    sum(pat) / len(pat), sum(fix) / len(fix))
    confirmed = m.pattern == 1.0 and m.fixed < 0.1
    detail = (f"{N} samples, {EPOCHS} epochs, {ctx.world_size} ranks: without set_epoch every epoch "
              f"repeats epoch 0's order ({m.pattern:.0%} of positions); with it {m.fixed:.1%}.")
    return result(RULE, NAME, confirmed, [m], detail)
