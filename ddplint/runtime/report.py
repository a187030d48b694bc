"""Render confirm results: a rich table (text) or a stable JSON document."""

from __future__ import annotations

import json
import math
from typing import IO

from ddplint.runtime.harness import CONFIRMED, ERROR, NOT_APPLICABLE, NOT_CONFIRMED

SCHEMA_VERSION = 1
_BARS = "▁▂▃▄▅▆▇█"
_STYLE = {CONFIRMED: "green", NOT_CONFIRMED: "red", NOT_APPLICABLE: "yellow", ERROR: "bold red"}


def render(results: list[dict], meta: dict, fmt: str, stream: IO[str], code: int) -> None:
    if fmt == "json":
        stream.write(json.dumps(document(results, meta, code), indent=2, sort_keys=False) + "\n")
    else:
        _text(results, meta, stream)
    stream.flush()


def document(results: list[dict], meta: dict, code: int) -> dict:
    summary = {v: sum(r["verdict"] == v for r in results) for v in (CONFIRMED, NOT_CONFIRMED, NOT_APPLICABLE, ERROR)}
    return {"schema": SCHEMA_VERSION, **meta, "exit_code": code, "summary": summary,
            "results": [_jsonable(r) for r in results]}


def _jsonable(obj):
    """JSON has no inf/nan: write them as strings so the document stays standard JSON."""
    if isinstance(obj, float) and (math.isinf(obj) or math.isnan(obj)):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def fmt_value(v: float | None, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return str(v)
    if unit == "s":
        return f"{v * 1e3:.3g} ms" if abs(v) < 1 else f"{v:.3g} s"
    if unit == "bytes":
        for scale, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
            if abs(v) >= scale:
                return f"{v / scale:.3g} {name}"
        return f"{v:.0f} B"
    if float(v).is_integer():
        return f"{int(v):,}" + (f" {unit}" if unit else "")
    return f"{v:.4g}" + (f" {unit}" if unit else "")


def fmt_ratio(r: float | None) -> str:
    if r is None:
        return "-"
    if math.isinf(r):
        return "∞"
    return f"{r:.3g}×"


def _cell(m: dict, which: str) -> str:
    text = fmt_value(m[which], m["unit"])
    spread = m.get(f"{which}_spread")
    if spread and m.get("repeats", 1) > 1:
        lo, hi = spread
        text += f"\n({fmt_value(lo, m['unit'])}–{fmt_value(hi, m['unit'])}, n={m['repeats']})"
    return text


def sparkline(values: list[float], lo: float | None = None, hi: float | None = None) -> str:
    """Unicode bars; pass lo/hi to draw two curves on one scale."""
    if not values:
        return ""
    lo = min(values) if lo is None else lo
    hi = max(values) if hi is None else hi
    span = hi - lo
    return "".join(_BARS[0 if span == 0 else min(7, int((v - lo) / span * 7.999))] for v in values)


def _text(results: list[dict], meta: dict, stream: IO[str]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    # A fixed width keeps piped output (CI logs, tests) readable and stable.
    console = Console(file=stream, width=140, soft_wrap=False, highlight=False)
    table = Table(title=f"ddplint confirm — torch {meta['torch']}, {meta['device']}/{meta['backend']}, "
                        f"world size {meta['world_size']} ({meta['launcher']})", show_lines=True)
    for col in ("rule", "metric", "pattern", "fixed", "ratio", "verdict"):
        table.add_column(col, overflow="fold")
    for r in results:
        ms = r["measurements"] or [None]
        for i, m in enumerate(ms):
            verdict = ""
            if i == 0:
                verdict = f"[{_STYLE[r['verdict']]}]{r['verdict']}[/]"
                if r["reason"]:
                    verdict += f": {escape(r['reason'])}"
            if m is None:
                table.add_row(r["rule"], "-", "-", "-", "-", verdict)
                continue
            table.add_row(r["rule"] if i == 0 else "", escape(m["metric"]),
                          _cell(m, "pattern"), _cell(m, "fixed"), fmt_ratio(m["ratio"]), verdict)
    console.print(table)
    for r in results:
        for m in r["measurements"]:
            if m.get("pattern_series"):
                both = m["pattern_series"] + (m["fixed_series"] or [])
                lo, hi = min(both), max(both)
                console.print(f"{r['rule']} {m['metric']} over steps: "
                              f"pattern {sparkline(m['pattern_series'], lo, hi)}  "
                              f"fixed {sparkline(m['fixed_series'] or [], lo, hi)} "
                              f"(scale {fmt_value(lo, m['unit'])}–{fmt_value(hi, m['unit'])})")
    for r in results:
        if r["detail"] and r["verdict"] != ERROR:
            console.print(f"[bold]{r['rule']}[/] {r['name']}: {escape(r['detail'])}")
        elif r["verdict"] == ERROR:
            console.print(f"[bold red]{r['rule']} error[/]: {escape(r['reason'])}\n{escape(r['detail'])}")
    counts = document(results, meta, 0)["summary"]
    console.print(", ".join(f"{n} {v}" for v, n in counts.items() if n) + f" — {meta['wall_seconds']} s")
