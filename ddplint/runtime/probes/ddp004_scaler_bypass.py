"""DDP004 grad-scaler-misuse: ``optimizer.step()`` that bypasses the GradScaler.

``scaler.step(optimizer)`` unscales the gradients and skips the step when they contain
inf/NaN (an fp16 overflow); ``optimizer.step()`` applies scaled gradients, and on an overflow
step writes inf/NaN into the weights.  Measured on a DDP model:

* an overflow step (loss times 3e38, scaled past float max): non-finite parameter
  elements afterwards, pattern vs fix;
* a normal step: the norm of the parameter update (bypassing the scaler applies the
  gradients ``scale`` times too large).
"""

from __future__ import annotations

import torch

from ddplint.runtime.harness import Measurement, ProbeContext, batch, ddp, flat_params, mlp, mse, result

RULE, NAME = "DDP004", "grad-scaler-misuse"
LR, SCALE = 1e-3, 2.0**16


def one_step(ctx: ProbeContext, through_scaler: bool, overflow: bool) -> torch.Tensor:
    """Parameter update of one step (before -> after)."""
    model = ddp(ctx, mlp())
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    scaler = torch.amp.GradScaler(ctx.device_type, init_scale=SCALE)
    before = flat_params(model)
    loss = mse(model, batch(0, ctx.rank, device=ctx.device))
    if overflow:
        loss = loss * 3e38  # finite in fp32; scaled by 65536 it overflows, as fp16 activations do
    scaler.scale(loss).backward()
    if through_scaler:
        scaler.step(opt)  # unscales; skips the step on inf/NaN
        scaler.update()
    else:
        # The line under test. (scaler.update() after it would raise "No inf checks were
        # recorded", so code that bypasses scaler.step never calls update either.)
        opt.step()
    return flat_params(model) - before


def run(ctx: ProbeContext):
    bad_pat = one_step(ctx, through_scaler=False, overflow=True)
    bad_fix = one_step(ctx, through_scaler=True, overflow=True)
    ok_pat = one_step(ctx, through_scaler=False, overflow=False)
    ok_fix = one_step(ctx, through_scaler=True, overflow=False)
    nonfinite = Measurement("non-finite parameter elements after an overflow step", "elements",
                            int((~torch.isfinite(bad_pat)).sum()), int((~torch.isfinite(bad_fix)).sum()))
    norm = Measurement("parameter update norm on a normal step", "", float(ok_pat.norm()), float(ok_fix.norm()))
    confirmed = (nonfinite.pattern > 0 and nonfinite.fixed == 0
                 and norm.ratio is not None and 0.5 * SCALE < norm.ratio < 2 * SCALE)
    detail = (f"overflow step: optimizer.step() wrote inf/NaN into {nonfinite.pattern:,.0f} of "
              f"{bad_pat.numel():,} parameter elements, scaler.step skipped it; normal step: the update is "
              f"{norm.ratio:,.0f}x too large (the scale, {SCALE:g}).")
    return result(RULE, NAME, confirmed, [nonfinite, norm], detail)
