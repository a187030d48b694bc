"""GitHub Actions workflow commands: annotations on the pull request's diff."""

from __future__ import annotations

from typing import TextIO

from ddplint.engine import RunResult
from ddplint.source import printable

LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def _escape_data(text: str) -> str:
    # then other control characters shown literally: the log viewer would interpret them
    return printable(text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def report(result: RunResult, stream: TextIO, **_: object) -> None:
    for file in result.files:
        for d in file.diagnostics:
            properties = ",".join([
                f"file={_escape_property(file.path)}",
                f"line={d.line}", f"col={d.column}",
                f"endLine={d.end_line}", f"endColumn={d.end_column}",
                f"title={_escape_property(f'ddplint {d.code} ({d.name})')}",
            ])
            stream.write(f"::{LEVEL[d.severity]} {properties}::{_escape_data(d.code + ' ' + d.message)}\n")
