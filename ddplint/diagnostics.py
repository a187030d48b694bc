"""Finished findings, with positions, ready for the reporters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from ddplint.fixes import Fix

INTERNAL_ERROR = "internal-error"


@dataclass(frozen=True, order=True)
class Diagnostic:
    """One finding. ``line``/``column`` are 1-based (text output); the JSON
    reporter converts to LSP's 0-based positions."""

    line: int
    column: int
    end_line: int
    end_column: int
    code: str
    name: str
    severity: str  # error | warning | info
    message: str
    fix: Optional["Fix"] = None  # ddplint.fixes.Fix


@dataclass(frozen=True)
class CellLine:
    """Where a line of a notebook's joined code cells lies (ddplint.notebooks):
    the cell's number and the line in it (1-based, cells counted as the notebook
    shows them, markdown included), and the line of the .ipynb file holding it."""

    cell: int
    line: int
    file_line: int


@dataclass
class FileResult:
    """Everything the linter learned about one file."""

    path: str  # as displayed: relative to the working directory when possible
    diagnostics: list[Diagnostic] = field(default_factory=list)
    parsed: bool = False  # parsed by libcst and judged (False: the prefilter or the screen ruled it out)
    screened: bool = False  # read by the ast screen
    cached: bool = False  # served by the result cache (not stored either)
    judged: tuple[str, ...] = ()  # the rules the judge ran here (statistics; not cached)
    source_lines: dict[int, str] = field(default_factory=dict)  # reported lines only
    internal_errors: int = 0
    # Notebooks only: reported lines of the joined code -> their cell and line.
    cells: dict[int, CellLine] = field(default_factory=dict)
    # Findings silenced by a suppression comment (shown by ``--ignore-noqa``).
    suppressed: list[Diagnostic] = field(default_factory=list)

    def sort(self) -> None:
        self.diagnostics.sort()
