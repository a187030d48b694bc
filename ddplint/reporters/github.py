"""GitHub Actions workflow commands: annotations on the pull request's diff.

``::error file=F,line=L,col=C,endLine=L,endColumn=C,title=DDP010::message``;
severities map error -> error, warning -> warning, info -> notice. Values are
escaped as the runner expects: ``%``, CR and LF in the message, and also ``:``
and ``,`` in properties. A notebook's finding is annotated on the line of the
.ipynb file that holds the code, and its message names the cell and line.
"""

from __future__ import annotations

from typing import TextIO

from ddplint.engine import RunResult

LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def report(result: RunResult, stream: TextIO, **_: object) -> None:
    for file in result.files:
        for d in file.diagnostics:
            properties = [f"file={escape_property(file.path)}"]
            where = file.cells.get(d.line)
            if where is None:
                properties += [f"line={d.line}", f"col={d.column}",
                               f"endLine={d.end_line}", f"endColumn={d.end_column}"]
                message = f"{d.message} ({d.name})"
            else:  # the line of the .ipynb file that holds the code; columns would not match
                properties.append(f"line={where.file_line}")
                message = f"cell {where.cell}, line {where.line}, column {d.column}: {d.message} ({d.name})"
            properties.append(f"title={escape_property(d.code)}")
            stream.write(f"::{LEVEL[d.severity]} {','.join(properties)}::{escape_data(message)}\n")
