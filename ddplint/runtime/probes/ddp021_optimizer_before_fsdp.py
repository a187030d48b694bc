"""DDP021 optimizer-before-fsdp-wrap: parameters unchanged after steps.

FSDP1 (``use_orig_params=False``) replaces the module's parameters with flat, sharded ones.
An optimizer built from ``model.parameters()`` before the wrap holds the old tensors, which
get no gradients: ``optimizer.step()`` does nothing and the model never trains.  Runs FSDP1
on this device (it runs on CPU with ``device_id=torch.device("cpu")``) and measures how far
the wrapped model's parameters moved after a few steps.
"""

from __future__ import annotations

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from ddplint.runtime.harness import Measurement, ProbeContext, batch, flat_params, mlp, mse, result

RULE, NAME = "DDP021", "optimizer-before-fsdp-wrap"
STEPS = 3


def fsdp(ctx: ProbeContext, model: torch.nn.Module) -> FSDP:
    return FSDP(model.to(ctx.device), process_group=ctx.group, device_id=ctx.device, use_orig_params=False)


def moved(ctx: ProbeContext, optimizer_first: bool) -> float:
    model = mlp()
    if optimizer_first:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)  # the line under test
        model = fsdp(ctx, model)
    else:
        model = fsdp(ctx, model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = flat_params(model)
    for step in range(ctx.steps_or(STEPS)):
        opt.zero_grad()
        mse(model, batch(step, ctx.rank, device=ctx.device)).backward()
        opt.step()
    return float((flat_params(model) - before).norm())


def run(ctx: ProbeContext):
    m = Measurement("norm of the parameter change after training (this rank's shard)", "",
                    moved(ctx, True), moved(ctx, False))
    confirmed = m.pattern == 0.0 and m.fixed > 0.0
    detail = (f"FSDP1 use_orig_params=False, {ctx.steps_or(STEPS)} SGD steps: optimizer built before the wrap "
              f"moved the parameters by {m.pattern:g}; built after, by {m.fixed:.3g}.")
    return result(RULE, NAME, confirmed, [m], detail)
