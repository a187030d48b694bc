"""The memory-growth criterion, without torch (the smoke parent applies it to rank data).

Memory leaks in a training loop grow by the same amount every step: the criterion is a
value that rises on every one of the last ``window`` steps, on a straight line.
"""

from __future__ import annotations

from typing import Sequence


def linear_growth(values: Sequence[float], window: int, min_slope: float = 1.0,
                  min_r2: float = 0.95) -> tuple[float, float] | None:
    """(slope per step, R^2) of the last ``window`` values when each is above the one
    before and a line fits them; None otherwise (also when there are too few)."""
    tail = list(values[-window:])
    if len(tail) < window or any(b <= a for a, b in zip(tail, tail[1:])):
        return None
    slope, r2 = linear_fit(tail)
    return (slope, r2) if slope >= min_slope and r2 >= min_r2 else None


def linear_fit(ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares slope over x = 0..n-1 and the fit's R^2 (1.0 for a flat series)."""
    n = len(ys)
    xs = range(n)
    mx, my = (n - 1) / 2, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    slope = sxy / sxx if sxx else 0.0
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (my + slope * (x - mx))) ** 2 for x, y in zip(xs, ys))
    r2 = 1.0 - ss_res / ss_tot if ss_tot else 1.0
    return slope, r2
