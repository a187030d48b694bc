"""Jupyter notebooks (``.ipynb``): lint the code cells as one Python source.

The code cells are joined in order, each starting on a line of its own, and a
table maps every line of the joined source back to its cell and its line there.
IPython syntax that is not Python is masked in place, so that every other
position on the line stays right: line magics (``%time f()``), shell escapes
(``!pip install x``, ``files = !ls``), help (``obj?``), and cell magics
(``%%time`` keeps its body; a cell under another cell magic such as ``%%bash``
is not Python and is blanked). The masking works line by line: a line of a
multi-line string that starts with ``%`` or ``!`` is masked too.

Cells are numbered as the notebook shows them: 1-based, markdown and raw cells
counted. Each line also remembers the line of the ``.ipynb`` file that holds it
(for SARIF, whose regions point into the file as it is on disk).

A notebook that cannot be read (invalid JSON, not nbformat 4) is one DDP000
diagnostic; a notebook whose kernel is not Python is skipped.
"""

from __future__ import annotations

import bisect
import json
import json.decoder
import json.scanner
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Union

from ddplint.diagnostics import CellLine, Diagnostic, FileResult

if TYPE_CHECKING:
    from ddplint.engine import Linter

SUFFIX = ".ipynb"
SYNTAX_ERROR = "DDP000"

# Cell magics whose body is Python run as is.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "python", "python3"})
_MAGIC = re.compile(r"^(?P<indent>\s*)(?P<target>[A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*\s*=\s*)?"
                    r"(?P<magic>(?:%|!).*)$")
_HELP = re.compile(r"^(?P<indent>\s*)(?P<magic>(?:\?\??[\w.]+|[\w.]+\?\??))\s*$")


class NotebookError(Exception):
    """The file is not a notebook ddplint can read."""


def is_notebook(path: str) -> bool:
    return path.lower().endswith(SUFFIX)


@dataclass
class Notebook:
    """The code cells of a notebook as one source, and where each line came from."""

    source: str
    lines: list[CellLine]  # lines[i]: where line i + 1 of ``source`` lies

    def where(self, line: int) -> Optional[CellLine]:
        """The cell and line of ``line`` (1-based) of the joined source."""
        if 1 <= line <= len(self.lines):
            return self.lines[line - 1]
        return self.lines[-1] if self.lines and line > len(self.lines) else None


def read_notebook(data: Union[bytes, str]) -> Optional[Notebook]:
    """The notebook's code as one Python source; None when its kernel is not
    Python. Raises NotebookError when ``data`` is not an nbformat 4 notebook."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise NotebookError(f"not UTF-8: {error.reason}") from None
    else:
        text = data
    try:
        document = _located_decoder().decode(text)
    except (ValueError, RecursionError) as error:
        raise NotebookError(f"invalid JSON: {error}") from None
    if not isinstance(document, dict) or not isinstance(document.get("cells"), list):
        raise NotebookError("no list of cells (nbformat 4 is supported)")
    if not isinstance(document.get("nbformat"), int) or document["nbformat"] < 4:
        raise NotebookError(f"nbformat {document.get('nbformat')!r} is not supported (nbformat 4 is)")
    if not _is_python(document.get("metadata")):
        return None

    line_starts = _line_starts(text)
    sources: list[str] = []
    lines: list[CellLine] = []
    for number, cell in enumerate(document["cells"], start=1):
        if not isinstance(cell, dict) or not isinstance(cell.get("cell_type"), str):
            raise NotebookError(f"cell {number} has no cell_type")
        if cell["cell_type"] != "code":
            continue
        pieces = cell.get("source")
        if isinstance(pieces, str):
            pieces = [pieces]
        if not isinstance(pieces, list) or not all(isinstance(piece, str) for piece in pieces):
            raise NotebookError(f"cell {number}: source must be a string or a list of strings")
        cell_lines: list[str] = []
        file_lines: list[int] = []
        for piece in pieces:  # one piece may hold several lines, or part of one
            file_line = _file_line(piece, line_starts)
            parts = piece.split("\n")
            if cell_lines and not cell_lines[-1].endswith("\n"):
                cell_lines[-1] += parts.pop(0)
                if parts:
                    cell_lines[-1] += "\n"
            for index, part in enumerate(parts):
                if index == len(parts) - 1 and part == "":
                    break  # the piece ended with a newline
                ending = "\n" if index < len(parts) - 1 else ""
                cell_lines.append(part + ending)
                file_lines.append(file_line)
        masked = mask_magics([line.rstrip("\n") for line in cell_lines])
        for line_number, (code, file_line) in enumerate(zip(masked, file_lines), start=1):
            sources.append(code + "\n")
            lines.append(CellLine(number, line_number, file_line))
    return Notebook("".join(sources), lines)


def mask_magics(lines: list[str]) -> list[str]:
    """The cell's lines with IPython-only syntax masked in place."""
    if lines and lines[0].lstrip().startswith("%%"):
        name = lines[0].lstrip()[2:].split(maxsplit=1)
        if not name or name[0] not in PYTHON_CELL_MAGICS:
            return [_blank(line) for line in lines]  # %%bash, %%writefile ...: not Python
        lines = [_blank(lines[0]), *lines[1:]]
    masked = []
    continued = False
    for line in lines:
        if continued:  # the continuation of a masked magic ending in a backslash
            masked.append(_blank(line))
            continued = line.rstrip().endswith("\\")
            continue
        match = _MAGIC.match(line) or _HELP.match(line)
        if match is None:
            masked.append(line)
            continue
        target = match.groupdict().get("target")
        replacement = "None" if target else "pass"
        masked.append(line[: match.start("magic")] + replacement)
        continued = line.rstrip().endswith("\\")
    return masked


def _blank(line: str) -> str:
    """A line that holds no code (a comment keeps the column count meaningless but harmless)."""
    return "#" + " " * max(0, len(line) - 1) if line else ""


def _is_python(metadata) -> bool:
    if not isinstance(metadata, dict):
        return True
    for key, field_name in (("language_info", "name"), ("kernelspec", "language")):
        value = metadata.get(key)
        if isinstance(value, dict) and isinstance(value.get(field_name), str):
            return value[field_name].lower() in ("python", "python3", "ipython", "ipython3")
    return True


# ---------------------------------------------------------------------- file lines
class _Located(str):
    """A JSON string value that remembers where its opening quote was."""

    offset: int


def _located_decoder() -> json.JSONDecoder:
    """A decoder whose string values carry their offset in the text (the pure
    Python scanner calls ``parse_string`` for every value; keys stay plain)."""
    decoder = json.JSONDecoder()

    def parse_string(text: str, end: int, strict: bool):
        value, after = json.decoder.scanstring(text, end, strict)
        located = _Located(value)
        located.offset = end - 1
        return located, after

    decoder.parse_string = parse_string
    decoder.scan_once = json.scanner.py_make_scanner(decoder)
    return decoder


def _line_starts(text: str) -> list[int]:
    starts = [0]
    position = text.find("\n")
    while position != -1:
        starts.append(position + 1)
        position = text.find("\n", position + 1)
    return starts


def _file_line(piece: str, line_starts: list[int]) -> int:
    offset = getattr(piece, "offset", 0)
    return bisect.bisect_right(line_starts, offset)


# ---------------------------------------------------------------------- linting
def lint_notebook(linter: "Linter", data: Union[bytes, str], display: str,
                  module: Optional[str] = None) -> FileResult:
    """Lint a notebook's code cells; diagnostics keep the joined source's lines
    and ``FileResult.cells`` says where each reported line lies."""
    try:
        notebook = read_notebook(data)
    except NotebookError as error:
        result = FileResult(display)
        if linter.report_syntax_errors:
            result.diagnostics.append(Diagnostic(1, 1, 1, 1, SYNTAX_ERROR, "syntax-error", "error",
                                                 f"cannot read notebook: {error}"))
        return result
    if notebook is None:
        return FileResult(display)
    result = linter.lint_python(notebook.source, display, module)
    for diagnostic in result.diagnostics:
        for line in (diagnostic.line, diagnostic.end_line):
            where = notebook.where(line)
            if where is not None:
                result.cells[line] = where
    return result


def python_source(data: bytes) -> Optional[str]:
    """The joined code of a notebook (for project facts); None when unreadable."""
    try:
        notebook = read_notebook(data)
    except NotebookError:
        return None
    return notebook.source if notebook is not None else None
