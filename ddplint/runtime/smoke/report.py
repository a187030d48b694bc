"""The smoke report: a table for people (rich on a terminal, plain text otherwise) or JSON.

JSON (schema 1): ``{"schema", "verdict", "ranks", "steps", "device", "backend", "checks":
[{"name", "verdict", "value", "unit", "message", "rules", "locations"}], "findings",
"per_rank"}``.  ``steps`` is the number of optimizer steps every rank completed;
``per_rank`` carries each rank's outcome, step-latency breakdown, throughput, memory and
communication series and, for a rank that raised, its traceback.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ddplint.runtime.smoke.gates import FAIL, PASS, SKIP, Check, fmt_bytes
from ddplint.runtime.smoke.join import Finding, check_locations
from ddplint.runtime.smoke.telemetry import RankRun

SCHEMA = 1
_BARS = "▁▂▃▄▅▆▇█"
_STYLE = {PASS: "green", FAIL: "bold red", SKIP: "yellow"}
PHASES = ("data", "forward", "backward", "optimizer")


@dataclass
class Header:
    """What the report says about the run itself."""

    target: str
    launcher: str
    device: str
    backend: str
    backend_note: str
    wall_s: float


def verdict_of(checks: list[Check]) -> str:
    return FAIL if any(c.verdict == FAIL for c in checks) else PASS


def document(checks: list[Check], findings: list[Finding], ranks: list[RankRun], header: Header,
             cwd: Path) -> dict:
    return _finite({
        "schema": SCHEMA,
        "verdict": verdict_of(checks),
        "ranks": len(ranks),
        "steps": min((len(r.steps) for r in ranks), default=0),
        "device": header.device,
        "backend": header.backend,
        "checks": [{"name": c.name, "verdict": c.verdict, "value": c.value, "unit": c.unit,
                    "message": c.message, "rules": list(c.rules),
                    "locations": check_locations(c, findings, cwd)} for c in checks],
        "findings": [f.to_dict() for f in findings],
        "per_rank": [rank_summary(r) for r in ranks],
    })


def _finite(obj):
    """JSON has no inf/nan."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


# ------------------------------------------------------------------ per rank


def rank_summary(r: RankRun) -> dict:
    timed = r.steps[1:] or r.steps  # step 1 carries the warm-up
    step_s = statistics.median(s["wall_s"] for s in timed) if timed else None
    breakdown = None
    if timed:
        breakdown = {p: statistics.median(s.get(f"{p}_s", 0.0) for s in timed) for p in PHASES}
        breakdown["other"] = max(0.0, step_s - sum(breakdown.values()))
        breakdown["communication"] = statistics.median(s["comm_s"] for s in timed)
    samples = statistics.median(s["samples"] for s in timed) if timed else 0
    flops = (r.flops or {}).get("flops")
    error = r.error or {}
    return {
        "rank": r.rank, "pid": r.pid, "outcome": r.outcome, "steps": len(r.steps),
        "backend": r.init.get("backend"), "backend_requested": r.init.get("backend_requested"),
        "timeout_s": r.init.get("timeout_s"),
        "step_s": step_s, "breakdown_s": breakdown,
        "samples_per_s": samples / step_s if step_s and samples else None,
        "flops_per_step": flops,
        "tflops": flops / step_s / 1e12 if flops and step_s else None,
        "flops_problem": (r.flops or {}).get("problem") or None,
        "allreduce": {"rounds": r.series("rounds"), "calls": r.series("buckets"), "bytes": r.series("bucket_bytes")},
        "collectives": _collective_totals(r),
        "memory": {"kind": r.init.get("memory_kind"), "bytes": r.series("mem"), "rss": r.series("rss"),
                   "peak": r.series("peak") if any(v is not None for v in r.series("peak")) else None},
        "loaders": {label: {"length": ev["length"],
                            "batches": sum(s["batches"].get(label, 0) for s in r.steps)}
                    for label, ev in sorted(r.loaders.items())},
        "exception": {k: error.get(k) for k in ("type", "message", "site", "failure", "traceback", "in_flight")}
        if r.error else None,
    }


def _collective_totals(r: RankRun) -> dict:
    totals: dict[str, int] = {}
    for s in r.steps:
        for op, n in s["collectives"].items():
            totals[op] = totals.get(op, 0) + n
    return totals


# ------------------------------------------------------------------ text


def render_text(doc: dict, header: Header, findings: list[Finding], stream: IO[str]) -> None:
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(file=stream, width=max(100, _width(stream)), soft_wrap=False, highlight=False)
    plain = not console.is_terminal
    console.print(f"[bold]ddplint smoke[/] — {escape(header.target)}: {doc['ranks']} ranks ({header.launcher}), "
                  f"{doc['device']}/{doc['backend'] or '?'}, {doc['steps']} optimizer steps on every rank, "
                  f"{header.wall_s:.1f} s")
    if header.backend_note:
        console.print(escape(header.backend_note))
    table = Table(box=None if plain else box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in ("check", "verdict", "value", "message"):
        table.add_column(column, overflow="fold", no_wrap=column != "message")
    for c in doc["checks"]:
        verdict = c["verdict"] if plain else f"[{_STYLE[c['verdict']]}]{c['verdict']}[/]"
        table.add_row(c["name"], verdict, _value(c["value"], c["unit"]), escape(c["message"]))
    console.print(table)
    _print_findings(console, findings, escape)
    _print_memory(console, doc["per_rank"])
    _print_timing(console, doc["per_rank"])
    _print_exceptions(console, doc["per_rank"], escape)
    failed = [c["name"] for c in doc["checks"] if c["verdict"] == FAIL]
    style = _STYLE[doc["verdict"]]
    console.print(f"verdict: [{style}]{doc['verdict'].upper()}[/]" + (f" ({', '.join(failed)})" if failed else ""))


def _width(stream) -> int:
    import shutil

    return shutil.get_terminal_size((120, 24)).columns if getattr(stream, "isatty", lambda: False)() else 120


def _print_findings(console, findings: list[Finding], escape) -> None:
    if not findings:
        console.print("static findings: none in this script")
        return
    console.print("static findings joined to this run:")
    for f in findings:
        if f.status:
            console.print(f"  {escape(f.joined_line())}")
        else:
            console.print(f"  {f.code} {escape(f.path)}:{f.line}: not measured by this run — {escape(f.message)}")


def _print_memory(console, per_rank: list[dict]) -> None:
    kinds = {r["memory"]["kind"] for r in per_rank if r["memory"]["bytes"]}
    if not kinds:
        return
    what = "CUDA allocated" if kinds == {"cuda-allocated"} else "autograd saved tensors"
    values = [v for r in per_rank for v in r["memory"]["bytes"] if v is not None]
    lo, hi = min(values), max(values)
    console.print(f"memory per step ({what}; one scale, {fmt_bytes(lo)}–{fmt_bytes(hi)}):")
    for r in per_rank:
        series = [v for v in r["memory"]["bytes"] if v is not None]
        if series:
            rss = [v for v in r["memory"]["rss"] if v is not None]
            rss_text = f"; RSS {fmt_bytes(rss[0])} → {fmt_bytes(rss[-1])}" if rss else ""
            console.print(f"  rank {r['rank']}  {sparkline(series, lo, hi)}  "
                          f"{fmt_bytes(series[0])} → {fmt_bytes(series[-1])}{rss_text}")


def _print_timing(console, per_rank: list[dict]) -> None:
    timed = [r for r in per_rank if r["breakdown_s"]]
    if not timed:
        return
    r = timed[0]
    b = r["breakdown_s"]
    parts = " + ".join(f"{p} {_ms(b[p])}" for p in (*PHASES, "other"))
    console.print(f"step (rank {r['rank']}, median of {max(r['steps'] - 1, 1)}): {_ms(r['step_s'])} = {parts}; "
                  f"communication {_ms(b['communication'])} (overlaps backward)")
    rates = [x["samples_per_s"] for x in timed if x["samples_per_s"]]
    line = f"throughput: {sum(rates):,.0f} samples/s over {len(timed)} ranks" if rates else "throughput: -"
    tflops = [x["tflops"] for x in timed if x["tflops"]]
    if tflops:
        line += (f"; {statistics.median(tflops):.4g} TFLOP/s per device "
                 f"({timed[0]['flops_per_step'] / 1e6:,.0f} MFLOP per step, counted on step 1)")
    elif r.get("flops_problem"):
        line += f"; TFLOP/s not measured ({r['flops_problem']})"
    console.print(line)


def _print_exceptions(console, per_rank: list[dict], escape) -> None:
    for r in per_rank:
        e = r["exception"]
        if e and not e["failure"]:
            console.print(f"rank {r['rank']} raised:")
            console.print(escape(e["traceback"].rstrip()))


def sparkline(values: list[float], lo: float, hi: float) -> str:
    span = hi - lo
    return "".join(_BARS[0 if span == 0 else min(7, int((v - lo) / span * 7.999))] for v in values)


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.3g} ms"


def _value(value, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "bytes/step":
        return f"{fmt_bytes(value)}/step"
    if unit == "fraction":
        return f"{value:.0%}"
    if unit == "s":
        return f"{value:.2f} s"
    return f"{value:g} {unit}"


def render(checks: list[Check], findings: list[Finding], ranks: list[RankRun], header: Header, fmt: str,
           stream: IO[str], cwd: Path) -> None:
    doc = document(checks, findings, ranks, header, cwd)
    if fmt == "json":
        stream.write(json.dumps(doc, indent=2) + "\n")
    else:
        render_text(doc, header, findings, stream)
    stream.flush()
