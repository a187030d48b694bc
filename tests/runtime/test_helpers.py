"""ddplint.runtime test helpers: a passing and a failing case each, on real gloo ranks."""

import os
import time

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.runtime

import torch.distributed as dist  # noqa: E402

from ddplint.runtime import (  # noqa: E402
    CollectiveHangError, CommCounter, DataLoaderSyncError, MemoryGrowthError, MemoryGrowthMonitor,
    StepProfiler, assert_ddp_matches_single_process, collective_watchdog, run_ranks,
    scaling_efficiency, validate_dataloader_sync,
)


# ------------------------------------------------------------------ module-level workers (picklable)

def small_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


def bn_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 2))


def sum_mse(out, y):
    return torch.nn.functional.mse_loss(out, y, reduction="sum")


def batches(n=3, size=8):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(size, 8, generator=g), torch.randn(size, 2, generator=g)) for _ in range(n)]


def returns_rank_squared(rank, world_size):
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    return rank * rank, float(t)


def rank1_raises_while_rank0_waits(rank, world_size):
    if rank == 1:
        time.sleep(0.5)
        raise ValueError("rank 1 found a bad batch")
    dist.all_reduce(torch.ones(1))  # noqa: DDP010 (deliberate: without fail-fast this waits for the timeout)
    return "rank 0 finished"


def loader_sync(rank, world_size, equal):
    n = 8 if equal or rank == 0 else 12
    loader = torch.utils.data.DataLoader(torch.arange(n), batch_size=4)
    return validate_dataloader_sync(loader)


def watched(rank, world_size, conditional):
    t = torch.ones(1)
    with collective_watchdog(timeout=2.0):
        dist.all_reduce(t)
        if not conditional or rank == 0:
            dist.all_reduce(t)
    return float(t)


def count_comm(rank, world_size, user_hook):
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    model = DDP(small_model())
    calls = []

    def my_hook(state, bucket):  # a user's own hook, composed under the counter
        calls.append(1)
        return default_hooks.allreduce_hook(None, bucket)

    counter = CommCounter(hook=my_hook if user_hook else None).register(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for micro in range(3):  # accumulation without no_sync: 3 all-reduces per step
        x, y = batches(1)[0]
        torch.nn.functional.mse_loss(model(x), y).backward()  # noqa: DDP002 (the accumulation the counter measures)
    opt.step()
    counter.step()
    with model.no_sync():
        torch.nn.functional.mse_loss(model(x), y).backward()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    counter.step()
    return [(s.calls, s.bytes) for s in counter.per_step], len(calls)


def profile_ddp(rank, world_size):
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(4)]))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    prof = StepProfiler(model)
    x, y = torch.randn(32, 64), torch.randn(32, 64)
    prof.count_flops(lambda: torch.nn.functional.mse_loss(model(x), y).backward())
    opt.zero_grad()
    for _ in range(4):
        with prof.phase("data"):
            xb, yb = x.clone(), y.clone()
        with prof.phase("forward"):
            loss = torch.nn.functional.mse_loss(model(xb), yb)
        with prof.phase("backward"):
            loss.backward()
        with prof.phase("optimizer"):
            opt.step()
            opt.zero_grad()
        prof.step()
    return prof.summary(), prof.report()


# ------------------------------------------------------------------ run_ranks

def test_run_ranks_returns_per_rank_results():
    assert run_ranks(returns_rank_squared, world_size=2, timeout=30) == [(0, 1.0), (1, 1.0)]


def test_run_ranks_fails_fast_with_the_original_traceback():
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="rank 1 found a bad batch") as info:
        run_ranks(rank1_raises_while_rank0_waits, world_size=2, timeout=60)
    assert time.monotonic() - t0 < 20  # not the 60 s collective timeout
    assert info.value.rank == 1
    assert "rank1_raises_while_rank0_waits" in str(info.value.__cause__)  # the remote traceback
    assert any("raised on rank 1 of 2" in n for n in getattr(info.value, "__notes__", []))


# ------------------------------------------------------------------ assert_ddp_matches_single_process

def test_ddp_matches_single_process_passes():
    assert_ddp_matches_single_process(small_model, batches(), world_size=2)


def test_ddp_matches_single_process_names_the_parameter():
    # Sum-reduced loss: DDP averages the per-rank gradients, so they are 1/world_size too small.
    with pytest.raises(AssertionError, match=r"step 0: gradient of parameter '0.weight' differs .* max abs difference"):
        assert_ddp_matches_single_process(small_model, batches(), world_size=2, loss_fn=sum_mse)


def test_ddp_matches_single_process_catches_batchnorm_statistics():
    with pytest.raises(AssertionError, match=r"parameter '0\.(weight|bias)'"):
        assert_ddp_matches_single_process(bn_model, batches(), world_size=2)


# ------------------------------------------------------------------ validate_dataloader_sync

def test_dataloader_sync_passes_when_lengths_agree():
    assert run_ranks(loader_sync, 2, timeout=30, args=(True,)) == [2, 2]


def test_dataloader_sync_reports_the_distribution():
    with pytest.raises(DataLoaderSyncError, match=r"rank 0: 2, rank 1: 3"):
        run_ranks(loader_sync, 2, timeout=30, args=(False,))


# ------------------------------------------------------------------ collective_watchdog

def test_watchdog_passes_through_matched_collectives():
    assert run_ranks(watched, 2, timeout=30, args=(False,)) == [4.0, 4.0]


def test_watchdog_names_the_missing_rank():
    t0 = time.monotonic()
    with pytest.raises(CollectiveHangError, match=r"rank\(s\) \[1\] did not arrive .*rank 1 left the block"):
        run_ranks(watched, 2, timeout=60, args=(True,))
    # The watchdog (2 s), not run_ranks' 60-s timeout, ended the hang: the error type
    # says so; the clock only rules out the outer timeout. Spawning two ranks alone takes
    # 20 s and more on a loaded 2-core CI machine, so no tighter bound.
    assert time.monotonic() - t0 < 60


# ------------------------------------------------------------------ MemoryGrowthMonitor

def test_memory_monitor_passes_a_flat_loop():
    model = small_model()
    with MemoryGrowthMonitor(steps=6, device="cpu", ignore=model.parameters()) as mon:
        for x, y in batches(8):
            total = torch.nn.functional.mse_loss(model(x), y).item()
            mon.step()
    assert len(mon.values) == 8 and total > 0


def test_memory_monitor_fails_on_linear_growth_with_slope():
    model = small_model()
    kept = []
    with pytest.raises(MemoryGrowthError, match=r"grew on every one of the last 6 steps.*\+[\d,]+ bytes/step"):
        with MemoryGrowthMonitor(steps=6, device="cpu", ignore=model.parameters()) as mon:
            for x, y in batches(8):
                kept.append(torch.nn.functional.mse_loss(model(x), y))  # keeps the graph
                mon.step()
    slope, r2 = mon.growth()
    assert slope > 0 and r2 > 0.99


# ------------------------------------------------------------------ CommCounter

def test_comm_counter_counts_per_optimizer_step():
    (steps, user_calls) = run_ranks(count_comm, 2, timeout=30, args=(False,))[0]
    assert [c for c, _ in steps] == [3, 1]  # no no_sync: 3 rounds; with no_sync: 1
    assert steps[0][1] == 3 * steps[1][1] > 0
    assert user_calls == 0


def test_comm_counter_composes_with_a_user_hook():
    steps, user_calls = run_ranks(count_comm, 2, timeout=30, args=(True,))[0]
    assert [c for c, _ in steps] == [3, 1] and user_calls == 4


# ------------------------------------------------------------------ StepProfiler and scaling_efficiency

def test_step_profiler_breakdown_and_tflops():
    summary, text = run_ranks(profile_ddp, 2, timeout=30)[0]
    assert set(summary["phases_s"]) == {"data", "forward", "backward", "communication", "optimizer"}
    assert all(v > 0 for v in summary["phases_s"].values())
    # 4 forward matmuls + 4 weight-grad + 3 input-grad (the first input needs no grad), 2*32*64*64 each
    assert summary["flops_per_step"] == 11 * 2 * 32 * 64 * 64
    assert summary["tflops_per_device"] > 0 and "TFLOP/s per device" in text


def test_scaling_efficiency_ok():
    eff = scaling_efficiency(throughput_n=3.8, n=4, throughput_1=1.0)
    assert eff.value == pytest.approx(0.95) and not eff.below_threshold


def test_scaling_efficiency_flags_and_explains():
    profile = {"phases_s": {"forward": 0.010, "backward": 0.020, "communication": 0.030, "data": 0.001},
               "comm_fraction": 0.5}
    eff = scaling_efficiency(throughput_n=2.0, n=4, throughput_1=1.0, profile=profile)
    assert eff.below_threshold and eff.value == pytest.approx(0.5)
    assert "50% on 4 devices" in eff.message and "below 85%" in eff.message
    assert "communication 30.00 ms (50% of compute+communication)" in eff.message
    assert "communication-bound" in eff.message


def test_runtime_package_imports_lazily():
    import subprocess
    import sys

    code = "import sys, ddplint.runtime; assert 'torch' not in sys.modules; print('lazy')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.dirname(__file__)))})
    assert out.stdout.strip() == "lazy", out.stderr
