"""DDP023 fsdp1-nn-utils-clip: per-rank clip coefficient with ``nn.utils.clip_grad_norm_``.

On an FSDP1 model each rank holds a shard of the (flat) gradients.
``torch.nn.utils.clip_grad_norm_(fsdp_model.parameters(), max_norm)`` computes the norm of
the local shard only, so every rank clips with a different coefficient and the replicas'
updates disagree; ``fsdp_model.clip_grad_norm_`` all-reduces the norm first.  All-gathers
each rank's norm and compares the spread max/min, pattern vs fix (1.0 = all ranks agree).
"""

from __future__ import annotations

import torch

from ddplint.runtime.harness import Measurement, ProbeContext, batch, mlp, mse, result
from ddplint.runtime.probes.ddp021_optimizer_before_fsdp import fsdp

RULE, NAME = "DDP023", "fsdp1-nn-utils-clip"
MAX_NORM = 0.01


def norms(ctx: ProbeContext, use_fsdp_method: bool) -> list[float]:
    model = fsdp(ctx, mlp())
    mse(model, batch(0, ctx.rank, device=ctx.device)).backward()
    if use_fsdp_method:
        total = model.clip_grad_norm_(MAX_NORM)
    else:
        total = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)  # the line under test
    return ctx.gather(float(total))


def run(ctx: ProbeContext):
    pat, fix = norms(ctx, False), norms(ctx, True)
    m = Measurement("gradient norm used for clipping, max/min across ranks", "", max(pat) / min(pat), max(fix) / min(fix))
    confirmed = m.pattern > 1.01 and abs(m.fixed - 1.0) < 1e-6
    detail = (f"per-rank norms with nn.utils.clip_grad_norm_: {', '.join(f'{v:.4g}' for v in pat)}; "
              f"with fsdp_model.clip_grad_norm_: {', '.join(f'{v:.4g}' for v in fix)} (max_norm {MAX_NORM}: "
              "every rank clips, each by a different coefficient).")
    return result(RULE, NAME, confirmed, [m], detail)


def not_applicable(ctx: ProbeContext) -> str | None:
    return "needs at least 2 ranks (one shard is the whole model)" if ctx.world_size < 2 else None
