"""assert_ddp_matches_single_process: DDP on shards == one process on the whole batch."""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from ddplint.runtime.ranks import run_ranks

Batch = tuple[torch.Tensor, torch.Tensor]


def _mse(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(out, y)


def _train(model: torch.nn.Module, batches, loss_fn, lr, shard: tuple[int, int] | None):
    """Per step: ({name: grad}, {name: param after the step})."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    named = list((model.module if hasattr(model, "module") else model).named_parameters())
    trace = []
    for x, y in batches:
        if shard is not None:
            rank, ws = shard
            x, y = x.chunk(ws)[rank], y.chunk(ws)[rank]
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        grads = {n: p.grad.detach().clone() for n, p in named if p.grad is not None}
        opt.step()
        trace.append((grads, {n: p.detach().clone() for n, p in named}))
    return trace


def _ddp_rank(rank, world_size, model_fn, batches, loss_fn, lr):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    return _train(DDP(model_fn()), batches, loss_fn, lr, (rank, world_size))


def assert_ddp_matches_single_process(
    model_fn: Callable[[], torch.nn.Module],
    batches: Sequence[Batch],
    world_size: int = 2,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = _mse,
    lr: float = 0.1,
    rtol: float = 1e-4,
    atol: float = 1e-6,
    timeout: float = 60.0,
) -> None:
    """Train with DDP over ``world_size`` spawned ranks (each gets an equal shard of every
    batch) and in this process on whole batches; assert gradients and updated parameters agree.

    ``model_fn`` and ``loss_fn`` must be picklable (module-level functions).  Raises
    AssertionError naming the step, the first differing parameter and the max difference.
    """
    for i, (x, _) in enumerate(batches):
        if len(x) % world_size:
            raise ValueError(f"batch {i} has {len(x)} samples, not divisible by world_size={world_size}")
    torch.manual_seed(0)
    single = _train(model_fn(), batches, loss_fn, lr, None)
    per_rank = run_ranks(_ddp_rank, world_size, timeout=timeout, args=(model_fn, list(batches), loss_fn, lr))
    for rank, trace in enumerate(per_rank):
        for step, ((g_ddp, p_ddp), (g_one, p_one)) in enumerate(zip(trace, single)):
            for what, ddp_vals, one_vals in (("gradient", g_ddp, g_one), ("updated value", p_ddp, p_one)):
                _compare(what, step, rank, world_size, ddp_vals, one_vals, rtol, atol)


def _compare(what, step, rank, world_size, ddp_vals, one_vals, rtol, atol) -> None:
    if ddp_vals.keys() != one_vals.keys():
        raise AssertionError(f"step {step}: parameters with a {what} differ: DDP rank {rank} has "
                             f"{sorted(ddp_vals)}, single process {sorted(one_vals)}")
    for name, a in ddp_vals.items():
        b = one_vals[name]
        if not torch.allclose(a, b, rtol=rtol, atol=atol):
            diff = float((a - b).abs().max())
            raise AssertionError(
                f"step {step}: {what} of parameter '{name}' differs between DDP (rank {rank} of {world_size}) "
                f"and a single process: max abs difference {diff:.3g} (rtol={rtol:g}, atol={atol:g})")
