"""StepProfiler: step latency breakdown, achieved TFLOP/s, and scaling efficiency.

    prof = StepProfiler(model)             # model: DDP-wrapped or plain
    prof.count_flops(lambda: loss_fn(model(x), y).backward())   # once, FlopCounterMode
    for x, y in batches:
        with prof.phase("data"): x, y = x.to(dev), y.to(dev)
        with prof.phase("forward"): loss = loss_fn(model(x), y)
        with prof.phase("backward"): loss.backward()        # DDP all-reduce timed apart
        with prof.phase("optimizer"): opt.step(); opt.zero_grad()
        prof.step()
    print(prof.report())

On CUDA phases are timed with CUDA events; on CPU with ``perf_counter``.  With a DDP model
the all-reduce of each bucket is timed by a comm hook (issue to completion) and reported as
"communication"; it overlaps backward, so it is shown beside the phases, not added to them.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

PHASES = ("data", "forward", "backward", "communication", "optimizer")
EFFICIENCY_THRESHOLD = 0.85


class StepProfiler:
    def __init__(self, model: torch.nn.Module | None = None, device: str | torch.device | None = None):
        self.device = torch.device(device) if device else (
            next(model.parameters()).device if model is not None else torch.device("cpu"))
        self.cuda = self.device.type == "cuda"
        self.steps: list[dict[str, float]] = []
        self._current: dict[str, float] = {}
        self._pending: list[tuple[str, Any, Any]] = []  # CUDA events resolved at step()
        self._comm = 0.0
        self.flops_per_step: int | None = None
        if model is not None and hasattr(model, "register_comm_hook"):
            self._attach(model)

    def _attach(self, ddp_model) -> None:
        group = ddp_model.process_group

        def timed_allreduce(state, bucket):  # no annotations: DDP rejects string ones
            t0 = time.perf_counter()

            def done(fut):
                self._comm += time.perf_counter() - t0
                return fut.value()

            return default_hooks.allreduce_hook(group, bucket).then(done)

        ddp_model.register_comm_hook(None, timed_allreduce)

    @contextlib.contextmanager
    def phase(self, name: str):
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self._pending.append((name, start, end))
        else:
            t0 = time.perf_counter()
            yield
            self._current[name] = self._current.get(name, 0.0) + time.perf_counter() - t0

    def step(self) -> dict[str, float]:
        if self._pending:
            torch.cuda.synchronize(self.device)
            for name, start, end in self._pending:
                self._current[name] = self._current.get(name, 0.0) + start.elapsed_time(end) / 1e3
            self._pending.clear()
        if self._comm:
            self._current["communication"] = self._comm
        done, self._current, self._comm = self._current, {}, 0.0
        self.steps.append(done)
        return done

    def count_flops(self, fn: Callable[[], Any]) -> int:
        """FLOPs of one training step (run ``fn`` once under ``FlopCounterMode``)."""
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter:
            fn()
        self.flops_per_step = int(counter.get_total_flops())
        return self.flops_per_step

    def summary(self, skip: int = 1) -> dict[str, Any]:
        """Median seconds per phase over the steps (the first ``skip`` are warm-up)."""
        steps = self.steps[skip:] or self.steps
        if not steps:
            raise ValueError("no steps recorded: call step() once per training step")
        phases = {p: statistics.median(s.get(p, 0.0) for s in steps) for p in PHASES
                  if any(p in s for s in steps)}
        step_s = statistics.median(sum(v for k, v in s.items() if k != "communication") for s in steps)
        out: dict[str, Any] = {"steps": len(steps), "step_s": step_s, "phases_s": phases}
        if self.flops_per_step:
            out["flops_per_step"] = self.flops_per_step
            out["tflops_per_device"] = self.flops_per_step / step_s / 1e12
        compute = sum(phases.get(p, 0.0) for p in ("forward", "backward"))
        comm = phases.get("communication", 0.0)
        out["comm_fraction"] = comm / (compute + comm) if compute + comm else 0.0
        return out

    def report(self) -> str:
        s = self.summary()
        parts = [f"{p} {v * 1e3:.2f} ms" for p, v in s["phases_s"].items()]
        text = f"step {s['step_s'] * 1e3:.2f} ms: " + ", ".join(parts)
        if "tflops_per_device" in s:
            text += f"; {s['tflops_per_device']:.4g} TFLOP/s per device"
        return text


@dataclass
class ScalingEfficiency:
    value: float
    below_threshold: bool
    message: str


def scaling_efficiency(throughput_n: float, n: int, throughput_1: float,
                       profile: dict[str, Any] | None = None,
                       threshold: float = EFFICIENCY_THRESHOLD) -> ScalingEfficiency:
    """throughput_N / (N x throughput_1); flagged below ``threshold`` (85%), explained with the
    compute/communication split of ``profile`` (a ``StepProfiler.summary()``) when given."""
    if n < 1 or throughput_1 <= 0:
        raise ValueError("n must be >= 1 and throughput_1 > 0")
    value = throughput_n / (n * throughput_1)
    low = value < threshold
    msg = f"scaling efficiency {value:.0%} on {n} devices ({throughput_n:.4g} vs {n} x {throughput_1:.4g})"
    if low:
        msg += f": below {threshold:.0%}"
        if profile:
            phases = profile["phases_s"]
            compute = sum(phases.get(p, 0.0) for p in ("forward", "backward"))
            comm, data = phases.get("communication", 0.0), phases.get("data", 0.0)
            msg += (f"; per step: compute {compute * 1e3:.2f} ms, communication {comm * 1e3:.2f} ms "
                    f"({profile['comm_fraction']:.0%} of compute+communication), data {data * 1e3:.2f} ms")
            if profile["comm_fraction"] > 0.3:
                msg += " -> communication-bound: larger batches per device, gradient accumulation with no_sync, or bigger buckets"
    return ScalingEfficiency(value, low, msg)
