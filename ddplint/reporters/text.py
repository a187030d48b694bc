"""Human output: ``path:line:col: CODE message`` and a code frame with a caret.

Colour only on a terminal, never when NO_COLOR is set; rich is imported only then,
so piping ddplint (CI, pre-commit) does not pay for it.
"""

from __future__ import annotations

import os
from typing import TextIO

from ddplint.diagnostics import Diagnostic, FileResult
from ddplint.engine import RunResult
from ddplint.reporters import summary
from ddplint.source import printable  # control characters in names and code shown literally

STYLE = {"error": "bold red", "warning": "bold yellow", "info": "bold cyan"}


def use_colour(stream: TextIO, force: bool | None = None) -> bool:
    if force is not None:
        return force
    if os.environ.get("NO_COLOR"):
        return False
    return hasattr(stream, "isatty") and stream.isatty()


def position(file: FileResult, d: Diagnostic) -> str:
    """``line:col``, or in a notebook ``cell 3:line 2:col 5``."""
    where = file.cells.get(d.line)
    if where is None:
        return f"{d.line}:{d.column}"
    return f"cell {where.cell}:line {where.line}:col {d.column}"


def code_frame(file: FileResult, d: Diagnostic) -> list[str]:
    """Plain-text frame: gutter, the source line, and carets under the range."""
    source = file.source_lines.get(d.line)
    if source is None:
        return []
    shown_line = file.cells[d.line].line if d.line in file.cells else d.line
    width = len(str(shown_line))
    end = d.end_column if d.end_line == d.line else len(source.rstrip()) + 1
    carets = "^" * max(1, end - d.column)
    gutter = " " * width
    # Keep tabs in the padding so the carets line up under tabbed code.
    padding = "".join("\t" if char == "\t" else " " for char in source[: d.column - 1])
    return [f"{gutter} |", f"{shown_line} | {printable(source.rstrip())}", f"{gutter} | {padding}{carets}"]


def _headline(file: FileResult, d: Diagnostic) -> str:
    return f"{printable(file.path)}:{position(file, d)}: {d.code} {printable(d.message)}"


def fix_line(d: Diagnostic) -> str:
    assert d.fix is not None
    return f"  = fix ({d.fix.applicability}): {d.fix.description}"


def fixable_line(result: RunResult) -> str:
    """How many findings ``--fix`` (and ``--unsafe-fixes``) would fix; "" when none."""
    fixes = [d.fix for f in result.files for d in f.diagnostics if d.fix is not None]
    safe = sum(1 for fix in fixes if fix.is_safe)
    unsafe = len(fixes) - safe
    if not fixes:
        return ""
    if not safe:
        return f"{unsafe} fixable with --fix --unsafe-fixes (review them first: `--diff --unsafe-fixes`)."
    more = f" ({unsafe} more with --unsafe-fixes)" if unsafe else ""
    return f"{safe} fixable with --fix{more}."


def _totals_line(result: RunResult) -> str:
    facts = summary(result)
    counts = facts["by_severity"]
    total = facts["diagnostics"]
    if total == 0:
        found = "No diagnostics"
    else:
        parts = [f"{counts[level]} {level}" for level in ("error", "warning", "info") if counts[level]]
        found = f"Found {total} diagnostic{'s' if total != 1 else ''} ({', '.join(parts)})"
    return (f"{found} in {facts['files_checked']} file{'s' if facts['files_checked'] != 1 else ''} "
            f"({facts['files_parsed']} parsed, {facts['files_screened_out'] + facts['files_skipped_by_prefilter']} "
            "skipped by the prefilter or the screen).")


def statistics_lines(result: RunResult) -> list[str]:
    from ddplint.screen.manifest import infos_by_code  # names without importing the rules

    facts = summary(result)
    rules = infos_by_code()
    lines = []
    for code, count in facts["by_code"].items():
        name = rules[code].name if code in rules else code
        lines.append(f"{count:>6}  {code}  {name}")
    lines.append(f"files: {facts['files_checked']} checked, {facts['files_parsed']} parsed, "
                 f"{facts['files_screened_out']} ruled out by the ast screen, "
                 f"{facts['files_skipped_by_prefilter']} skipped by the text prefilter")
    stages = getattr(result, "stages", None)
    if stages:
        order = ("read", "ast-screened", "facts cache hits", "libcst-parsed (judged)", "result cache hits")
        lines.append("stages: " + ", ".join(f"{stages[key]} {key}" for key in order if key in stages))
        if stages.get("judged per rule"):
            lines.append("judged per rule: " + ", ".join(f"{code} {count}"
                                                         for code, count in stages["judged per rule"].items()))
    return lines


def report(result: RunResult, stream: TextIO, show_source: bool = True,
           statistics: bool = False, colour: bool | None = None, show_fixes: bool = False,
           **_: object) -> None:
    if use_colour(stream, colour):
        _report_rich(result, stream, show_source, statistics, show_fixes)
        return
    for file in result.files:
        for d in file.diagnostics:
            stream.write(_headline(file, d) + "\n")
            if show_source:
                for line in code_frame(file, d):
                    stream.write(line + "\n")
            if show_fixes and d.fix is not None:
                stream.write(fix_line(d) + "\n")
    if statistics:
        for line in statistics_lines(result):
            stream.write(line + "\n")
    stream.write(_totals_line(result) + "\n")
    if fixable_line(result):
        stream.write(fixable_line(result) + "\n")


def _report_rich(result: RunResult, stream: TextIO, show_source: bool, statistics: bool,
                 show_fixes: bool = False) -> None:
    from rich.console import Console
    from rich.text import Text

    # Only called when colour is wanted (a terminal, or --color always), so force it:
    # rich would otherwise re-detect the stream and honour NO_COLOR over the flag.
    console = Console(file=stream, highlight=False, soft_wrap=True, force_terminal=True, no_color=False)
    for file in result.files:
        for d in file.diagnostics:
            line = Text()
            line.append(f"{printable(file.path)}:{position(file, d)}:", style="bold")
            line.append(" ")
            line.append(d.code, style=STYLE[d.severity])
            line.append(f" {printable(d.message)}")
            console.print(line)
            if show_source:
                frame = code_frame(file, d)
                if frame:
                    console.print(Text(frame[0], style="blue"))
                    console.print(Text(frame[1]))
                    console.print(Text(frame[2], style=STYLE[d.severity]))
            if show_fixes and d.fix is not None:
                console.print(Text(fix_line(d), style="green"))
    if statistics:
        for text in statistics_lines(result):
            console.print(text)
    console.print(Text(_totals_line(result), style="bold"))
    if fixable_line(result):
        console.print(Text(fixable_line(result), style="green"))
