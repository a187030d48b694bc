"""The fix model: one description of a fix serves the CLI (``--fix``, ``--diff``),
JSON (``data.fix``), SARIF (``fixes``) and the language server's code actions.

A fix is a list of text edits on the file as it was linted, and an
applicability: ``safe`` fixes keep behaviour (``--fix`` applies them), ``unsafe``
fixes change behaviour in a way the user must review (``--unsafe-fixes``).

Positions follow ``Diagnostic``: 1-based lines and 1-based columns counted in
characters (code points) of the line; ``end`` is exclusive. An insertion has
``start == end``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

SAFE = "safe"
UNSAFE = "unsafe"
APPLICABILITIES = (SAFE, UNSAFE)


@dataclass(frozen=True, order=True)
class Edit:
    """Replace the text from (line, column) up to (end_line, end_column) by ``new_text``."""

    line: int
    column: int
    end_line: int
    end_column: int
    new_text: str


@dataclass(frozen=True, order=True)
class Fix:
    """What a finding's fix does, as edits of its file."""

    description: str  # imperative, shown to users: "Add map_location=\"cpu\""
    applicability: str  # SAFE or UNSAFE
    edits: tuple[Edit, ...]

    def to_json(self) -> dict:
        return {
            "description": self.description,
            "applicability": self.applicability,
            "edits": [{"range": {"start": {"line": e.line - 1, "character": e.column - 1},
                                 "end": {"line": e.end_line - 1, "character": e.end_column - 1}},
                       "newText": e.new_text} for e in self.edits],
        }


def apply_edits(source: str, edits: Iterable[Edit]) -> str:
    """``source`` with ``edits`` applied. Edits must not overlap; they are applied
    from the last to the first so earlier positions stay valid."""
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(line: int, column: int) -> int:
        if line > len(lines):
            return len(source)
        return starts[line - 1] + column - 1

    text = source
    previous_start = None
    for edit in sorted(edits, reverse=True):
        start, end = offset(edit.line, edit.column), offset(edit.end_line, edit.end_column)
        if previous_start is not None and end > previous_start:
            raise ValueError("overlapping edits")
        text = text[:start] + edit.new_text + text[end:]
        previous_start = start
    return text
