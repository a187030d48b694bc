"""Output formats. Each reporter turns a RunResult into text on a stream."""

from __future__ import annotations

from typing import Callable

from ddplint.engine import RunResult

FORMATS = ("text", "json", "sarif", "github")


def get_reporter(name: str) -> Callable[..., None]:
    if name == "text":
        from ddplint.reporters.text import report
    elif name == "json":
        from ddplint.reporters.json_lsp import report
    elif name == "sarif":
        from ddplint.reporters.sarif import report
    elif name == "github":
        from ddplint.reporters.github import report
    else:  # pragma: no cover - click restricts the choice
        raise ValueError(f"unknown format {name}")
    return report


def summary(result: RunResult) -> dict:
    by_severity = {"error": 0, "warning": 0, "info": 0}
    by_code: dict[str, int] = {}
    for file in result.files:
        for diagnostic in file.diagnostics:
            by_severity[diagnostic.severity] = by_severity.get(diagnostic.severity, 0) + 1
            by_code[diagnostic.code] = by_code.get(diagnostic.code, 0) + 1
    return {
        "files_checked": len(result.files),
        "files_parsed": result.parsed_count,
        "files_skipped_by_prefilter": sum(1 for f in result.files if not f.parsed and not f.screened),
        "files_screened_out": sum(1 for f in result.files if f.screened and not f.parsed),
        "files_with_diagnostics": sum(1 for f in result.files if f.diagnostics),
        "diagnostics": result.diagnostics_count,
        "by_severity": by_severity,
        "by_code": dict(sorted(by_code.items())),
    }
