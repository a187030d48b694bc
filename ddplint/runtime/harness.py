"""Shared probe harness: result records, timing statistics, seeding, probe context.

Every probe module exposes ``RULE``, ``NAME``, ``METRIC`` (for listings),
``not_applicable(ctx) -> str | None`` (optional) and ``run(ctx) -> ProbeResult``, which runs
on every rank inside the session's process group.  Rank 0's result is the one reported.
"""

from __future__ import annotations

import datetime
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch
import torch.distributed as dist

CONFIRMED = "confirmed"
NOT_CONFIRMED = "not confirmed"
NOT_APPLICABLE = "not applicable here"
ERROR = "error"

SEED = 1234


@dataclass
class Stats:
    """A repeated measurement: median with its min-max spread and the number of repeats."""

    median: float
    low: float
    high: float
    repeats: int

    @classmethod
    def of(cls, values: list[float]) -> "Stats":
        return cls(statistics.median(values), min(values), max(values), len(values))


@dataclass
class Measurement:
    metric: str
    unit: str
    pattern: float
    fixed: float
    repeats: int = 1
    pattern_spread: tuple[float, float] | None = None
    fixed_spread: tuple[float, float] | None = None
    # values over steps, for a sparkline where the curve tells more than one number
    pattern_series: list[float] | None = None
    fixed_series: list[float] | None = None

    @property
    def ratio(self) -> float | None:
        if self.fixed == 0:
            return None if self.pattern == 0 else float("inf")
        return self.pattern / self.fixed

    @classmethod
    def timed(cls, metric: str, unit: str, pattern: Stats, fixed: Stats) -> "Measurement":
        return cls(metric, unit, pattern.median, fixed.median, pattern.repeats,
                   (pattern.low, pattern.high), (fixed.low, fixed.high))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ratio"] = self.ratio
        return d


@dataclass
class ProbeResult:
    rule: str
    name: str
    verdict: str
    measurements: list[Measurement] = field(default_factory=list)
    detail: str = ""  # what was compared and why the verdict
    reason: str = ""  # for "not applicable here" and errors
    seconds: float = 0.0

    @property
    def primary(self) -> Measurement | None:
        return self.measurements[0] if self.measurements else None

    def to_dict(self) -> dict[str, Any]:
        m = self.primary
        return {
            "rule": self.rule,
            "name": self.name,
            "metric": m.metric if m else None,
            "unit": m.unit if m else None,
            "pattern": m.pattern if m else None,
            "fixed": m.fixed if m else None,
            "ratio": m.ratio if m else None,
            "repeats": m.repeats if m else None,
            "verdict": self.verdict,
            "reason": self.reason,
            "detail": self.detail,
            "seconds": round(self.seconds, 3),
            "measurements": [x.to_dict() for x in self.measurements],
        }


def result(rule: str, name: str, confirmed: bool, measurements: list[Measurement], detail: str) -> ProbeResult:
    return ProbeResult(rule, name, CONFIRMED if confirmed else NOT_CONFIRMED, measurements, detail)


def not_applicable(rule: str, name: str, reason: str) -> ProbeResult:
    return ProbeResult(rule, name, NOT_APPLICABLE, reason=reason)


@dataclass
class ProbeContext:
    """What a probe knows about where it runs."""

    rank: int
    world_size: int
    device_type: str  # "cpu" or "cuda"
    backend: str
    steps: int | None = None  # --steps override
    repeats: int = 5
    group: Any = None  # a fresh process group with a short timeout, one per probe
    timeout_s: float = 30.0

    @property
    def device(self) -> torch.device:
        if self.device_type == "cuda":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    @property
    def is_cuda(self) -> bool:
        return self.device_type == "cuda"

    def steps_or(self, default: int) -> int:
        return self.steps if self.steps else default

    def new_group(self, timeout_s: float, backend: str | None = None):
        """A new group over all ranks; every rank must call this in the same order."""
        return dist.new_group(backend=backend or self.backend,
                              timeout=datetime.timedelta(seconds=timeout_s))

    def gather(self, obj: Any, group=None) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=group or self.side_group)
        return out

    @property
    def side_group(self):
        """A gloo group for small object exchanges (works beside NCCL too)."""
        if getattr(self, "_side", None) is None:
            self._side = self.new_group(self.timeout_s, backend="gloo")
        return self._side

    def barrier(self) -> None:
        dist.barrier(group=self.side_group)


def seed_all(seed: int = SEED) -> torch.Generator:
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def mlp(width: int = 64, depth: int = 3, out: int = 8, seed: int = SEED) -> torch.nn.Module:
    """The small model most probes share; identical on every rank for a given seed."""
    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(width, out))
    return torch.nn.Sequential(*layers)


def batch(step: int, rank: int, size: int = 16, width: int = 64, out: int = 8,
          device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic synthetic batch for (step, rank): any rank can rebuild any other's."""
    g = torch.Generator().manual_seed(SEED + 1000 * step + rank)
    x = torch.randn(size, width, generator=g)
    y = torch.randn(size, out, generator=g)
    return x.to(device), y.to(device)


def timed(fn: Callable[[], Any], repeats: int, warmup: int = 1, sync: Callable[[], None] | None = None) -> Stats:
    """Wall time of ``fn`` over ``repeats`` runs after ``warmup`` untimed runs."""
    for _ in range(warmup):
        fn()
    values = []
    for _ in range(repeats):
        if sync:
            sync()
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        values.append(time.perf_counter() - t0)
    return Stats.of(values)


def cuda_sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def ddp(ctx: ProbeContext, model: torch.nn.Module, group=None, **kwargs):
    """Wrap ``model`` in DDP on the probe's group (and this rank's GPU on CUDA)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = model.to(ctx.device)
    device_ids = [ctx.device.index] if ctx.is_cuda else None
    return DDP(model, device_ids=device_ids, process_group=group or ctx.group, **kwargs)


def flat_params(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).cpu() for p in module.parameters()])


def mse(model: torch.nn.Module, xy: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = xy
    return torch.nn.functional.mse_loss(model(x), y)


def short_error(exc: BaseException, limit: int = 160) -> str:
    """The gist of a backend error: gloo prefixes messages with its source path."""
    import re

    text = " ".join(str(exc).split())
    text = re.sub(r"\[/[^\]]*\]\s*", "", text)
    return text[:limit]
