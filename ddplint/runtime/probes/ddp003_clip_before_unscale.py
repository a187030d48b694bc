"""DDP003 clip-before-unscale: the parameter update after clipping scaled gradients.

With a ``GradScaler`` the gradients hold ``loss * scale``.  Clipping them to ``max_norm``
before ``scaler.unscale_`` clips the *scaled* norm; ``scaler.step`` then divides by the scale,
so the update is ``scale`` times too small (65536x with the default initial scale).  The fix
unscales first.  Measures the norm of the parameter update of one DDP step, pattern vs fix
(GradScaler works on CPU in current torch).
"""

from __future__ import annotations

import torch

from ddplint.runtime.harness import Measurement, ProbeContext, batch, ddp, flat_params, mlp, mse, result

RULE, NAME = "DDP003", "clip-before-unscale"
MAX_NORM, LR, SCALE = 0.1, 0.1, 2.0**16


def update_norm(ctx: ProbeContext, unscale_first: bool) -> tuple[float, float]:
    """(norm of the parameter update, unclipped gradient norm) for one step."""
    model = ddp(ctx, mlp())
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    scaler = torch.amp.GradScaler(ctx.device_type, init_scale=SCALE)
    before = flat_params(model)
    scaler.scale(mse(model, batch(0, ctx.rank, device=ctx.device))).backward()
    if unscale_first:
        scaler.unscale_(opt)
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
    scaler.step(opt)
    scaler.update()
    grad_norm = float(total) / (1.0 if unscale_first else SCALE)
    return float((flat_params(model) - before).norm()), grad_norm


def run(ctx: ProbeContext):
    pattern, grad_norm = update_norm(ctx, unscale_first=False)
    fixed, _ = update_norm(ctx, unscale_first=True)
    m = Measurement("parameter update norm after clipping", "", pattern, fixed)
    # Expected: fixed = lr * max_norm (the true gradient norm exceeds max_norm), pattern = fixed / scale.
    confirmed = grad_norm > MAX_NORM and m.ratio is not None and m.ratio < 1e-2
    detail = (f"true gradient norm {grad_norm:.3g} > max_norm {MAX_NORM}; clipping the scaled gradients "
              f"(scale {SCALE:g}) gives an update {1 / m.ratio if m.ratio else float('inf'):,.0f}x smaller "
              f"than unscale_ then clip (expected ~{SCALE:g}x).")
    return result(RULE, NAME, confirmed, [m], detail)
