"""LSP-shaped JSON (DESIGN.md): every diagnostic is an LSP ``Diagnostic``.

For a notebook, ``range`` is relative to the cell named by ``data.cell``
(1-based, counted as the notebook shows its cells)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, TextIO

from ddplint import __version__
from ddplint.diagnostics import CellLine, Diagnostic, FileResult
from ddplint.engine import RunResult
from ddplint.reporters import summary
from ddplint.screen.manifest import infos_by_code

LSP_SEVERITY = {"error": 1, "warning": 2, "info": 3, "hint": 4}


def lsp_range(line: int, column: int, end_line: int, end_column: int) -> dict:
    """1-based, end-exclusive positions to an LSP (0-based) range."""
    return {"start": {"line": line - 1, "character": column - 1},
            "end": {"line": end_line - 1, "character": end_column - 1}}


def lsp_diagnostic(diagnostic: Diagnostic, cell: Optional[tuple[CellLine, CellLine]] = None) -> dict:
    """0-based LSP range; ``data`` carries the rule name, the fix (if any) and,
    in a notebook, the cell (``cell``: where the start and end lines lie)."""
    data: dict = {"name": diagnostic.name,
                  "fix": diagnostic.fix.to_json() if diagnostic.fix is not None and cell is None else None}
    if cell is None:
        where = lsp_range(diagnostic.line, diagnostic.column, diagnostic.end_line, diagnostic.end_column)
    else:
        start, end = cell
        end_line = end.line if end.cell == start.cell else start.line
        where = lsp_range(start.line, diagnostic.column, end_line, diagnostic.end_column)
        data["cell"] = start.cell
    item = {
        "range": where,
        "severity": LSP_SEVERITY[diagnostic.severity],
        "code": diagnostic.code,
        "source": "ddplint",
        "message": diagnostic.message,
        "data": data,
    }
    rule = infos_by_code().get(diagnostic.code)  # the rule's file, without importing it (and libcst)
    if rule is not None:
        item["codeDescription"] = {"href": rule.url()}
    return item


def cell_of(file: FileResult, diagnostic: Diagnostic) -> Optional[tuple[CellLine, CellLine]]:
    """Where a notebook finding starts and ends; None outside notebooks."""
    start = file.cells.get(diagnostic.line)
    if start is None:
        return None
    return start, file.cells.get(diagnostic.end_line, start)


def file_uri(path: str) -> str:
    if path.startswith("<"):  # stdin without --stdin-filename
        return "untitled:" + path.strip("<>")
    return Path(path).resolve().as_uri()


def document(result: RunResult) -> dict:
    files = [
        {
            "uri": file_uri(file.path),
            "path": file.path,
            "diagnostics": [lsp_diagnostic(d, cell_of(file, d)) for d in file.diagnostics],
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
