"""LSP-shaped JSON (DESIGN.md): every diagnostic is an LSP ``Diagnostic``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TextIO

from ddplint import __version__
from ddplint.diagnostics import Diagnostic
from ddplint.engine import RunResult
from ddplint.registry import rules_by_code
from ddplint.reporters import summary

LSP_SEVERITY = {"error": 1, "warning": 2, "info": 3, "hint": 4}


def lsp_diagnostic(diagnostic: Diagnostic) -> dict:
    """0-based LSP range; ``data`` carries the rule name and the fix (if any)."""
    item = {
        "range": {
            "start": {"line": diagnostic.line - 1, "character": diagnostic.column - 1},
            "end": {"line": diagnostic.end_line - 1, "character": diagnostic.end_column - 1},
        },
        "severity": LSP_SEVERITY[diagnostic.severity],
        "code": diagnostic.code,
        "source": "ddplint",
        "message": diagnostic.message,
        "data": {"name": diagnostic.name, "fix": diagnostic.fix.to_json() if diagnostic.fix else None},
    }
    rule = rules_by_code().get(diagnostic.code)
    if rule is not None:
        item["codeDescription"] = {"href": rule.url()}
    return item


def file_uri(path: str) -> str:
    if path.startswith("<"):  # stdin without --stdin-filename
        return "untitled:" + path.strip("<>")
    return Path(path).resolve().as_uri()


def document(result: RunResult) -> dict:
    files = [
        {
            "uri": file_uri(file.path),
            "path": file.path,
            "diagnostics": [lsp_diagnostic(d) for d in file.diagnostics],
        }
        for file in result.files
        if file.diagnostics
    ]
    return {
        "tool": {"name": "ddplint", "version": __version__},
        "files": files,
        "summary": summary(result),
    }


def report(result: RunResult, stream: TextIO, **_: object) -> None:
    json.dump(document(result), stream, indent=2, sort_keys=False)
    stream.write("\n")
