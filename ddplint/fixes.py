"""The fix model: one description of a fix serves the CLI (``--fix``, ``--diff``),
JSON (``data.fix``), SARIF (``fixes``), the cache and the language server's code
actions.

A fix is a list of text edits on the file as it was linted, and an
applicability: ``safe`` fixes keep behaviour (``--fix`` applies them), ``unsafe``
fixes change behaviour in a way the user must review (``--unsafe-fixes``).

Positions follow ``Diagnostic``: 1-based lines and 1-based columns counted in
characters (code points) of the line; ``end`` is exclusive. An insertion has
``start == end``. Lines end at ``\\n``, ``\\r\\n`` or ``\\r`` only, as Python's
tokenizer counts them (``str.splitlines`` also splits at form feeds and other
separators, which would shift every later line).

Rules do not compute positions. A rule attaches a ``NodeFix`` to its report:
edits in CST terms (replace this node, insert text before or after it, add a
keyword argument to this call, insert a line before this statement, delete this
statement's line). The engine locates the nodes with the positions it computes
for the report anyway (``ddplint.analysis.positions``) and turns the ``NodeFix``
into a ``Fix`` with ``resolve``. An edit that cannot be placed cleanly (a
statement that shares its line, a call whose closing parenthesis is not where
expected) drops the whole fix: the finding is still reported, without a fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence

from ddplint.source import split_lines

if TYPE_CHECKING:
    import libcst as cst
    from libcst.metadata import CodeRange

SAFE = "safe"
UNSAFE = "unsafe"
APPLICABILITIES = (SAFE, UNSAFE)

_NEWLINE = re.compile(r"\r\n|\r|\n")


def line_ending(line: str) -> str:
    """The ending of one line from ``split_lines`` ("" for a last line without one)."""
    match = _NEWLINE.search(line)
    return match.group() if match else ""


def newline_of(source: str) -> str:
    """The file's newline: its first line ending, or ``\\n`` for a one-line file."""
    match = _NEWLINE.search(source)
    return match.group() if match else "\n"


@dataclass(frozen=True, order=True)
class Edit:
    """Replace the text from (line, column) up to (end_line, end_column) by ``new_text``."""

    line: int
    column: int
    end_line: int
    end_column: int
    new_text: str

    @property
    def is_insertion(self) -> bool:
        return (self.line, self.column) == (self.end_line, self.end_column)


@dataclass(frozen=True, order=True)
class Fix:
    """What a finding's fix does, as edits of its file."""

    description: str  # imperative, shown to users: "Add map_location=\"cpu\""
    applicability: str  # SAFE or UNSAFE
    edits: tuple[Edit, ...]

    @property
    def is_safe(self) -> bool:
        return self.applicability == SAFE

    def to_json(self) -> dict:
        """LSP-shaped: 0-based ranges of code points, each edit an LSP ``TextEdit``.
        (``data.fix`` in the JSON output and the cache's format.)"""
        return {
            "description": self.description,
            "applicability": self.applicability,
            "edits": [{"range": {"start": {"line": e.line - 1, "character": e.column - 1},
                                 "end": {"line": e.end_line - 1, "character": e.end_column - 1}},
                       "newText": e.new_text} for e in self.edits],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Fix":
        """The inverse of ``to_json``; raises KeyError/TypeError/ValueError on a bad shape."""
        applicability = data["applicability"]
        if applicability not in APPLICABILITIES:
            raise ValueError(f"unknown applicability {applicability!r}")
        edits = []
        for item in data["edits"]:
            start, end = item["range"]["start"], item["range"]["end"]
            edits.append(Edit(int(start["line"]) + 1, int(start["character"]) + 1,
                              int(end["line"]) + 1, int(end["character"]) + 1, str(item["newText"])))
        return cls(str(data["description"]), applicability, tuple(edits))


def _offsets(source: str) -> tuple[list[str], list[int]]:
    lines = split_lines(source)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    return lines, starts


def _offset(lines: Sequence[str], starts: Sequence[int], line: int, column: int) -> int:
    if line > len(lines):
        return starts[-1]
    return min(starts[line - 1] + column - 1, starts[line])


def apply_edits(source: str, edits: Iterable[Edit]) -> str:
    """``source`` with ``edits`` applied. Edits must not overlap; they are applied
    from the last to the first so earlier positions stay valid."""
    lines, starts = _offsets(source)
    text = source
    previous_start = None
    for edit in sorted(edits, reverse=True):
        start = _offset(lines, starts, edit.line, edit.column)
        end = _offset(lines, starts, edit.end_line, edit.end_column)
        if previous_start is not None and end > previous_start:
            raise ValueError("overlapping edits")
        text = text[:start] + edit.new_text + text[end:]
        previous_start = start
    return text


def edits_overlap(a: Sequence[Edit], b: Sequence[Edit]) -> bool:
    """Do two fixes touch the same text? Two insertions at one point count as
    overlapping (their order would be arbitrary), and so does an insertion at
    either end of a replaced range."""
    for x in a:
        for y in b:
            x0, x1 = (x.line, x.column), (x.end_line, x.end_column)
            y0, y1 = (y.line, y.column), (y.end_line, y.end_column)
            if x0 <= y1 and y0 <= x1:
                return True
    return False


class PositionMap:
    """Maps positions of a source through edits applied to it (for finding a
    fixed diagnostic in the re-linted file)."""

    def __init__(self, source: str, edits: Iterable[Edit], fixed: str) -> None:
        self._lines, self._starts = _offsets(source)
        self._new_lines, self._new_starts = _offsets(fixed)
        self._shifts = []  # (old start, old end, length change)
        for edit in sorted(edits):
            start = _offset(self._lines, self._starts, edit.line, edit.column)
            end = _offset(self._lines, self._starts, edit.end_line, edit.end_column)
            self._shifts.append((start, end, len(edit.new_text) - (end - start)))

    def position(self, line: int, column: int) -> tuple[int, int]:
        offset = _offset(self._lines, self._starts, line, column)
        moved = offset
        for start, end, change in self._shifts:
            if end <= offset and not (start == end == offset):
                moved += change
            elif start < offset < end:
                moved = moved - (offset - start)  # inside a replaced range: its start
        return self._line_column(moved)

    def _line_column(self, offset: int) -> tuple[int, int]:
        import bisect

        line = min(max(1, bisect.bisect_right(self._new_starts, offset)), max(1, len(self._new_lines)))
        return line, offset - self._new_starts[line - 1] + 1


# ---------------------------------------------------------------------- fixes in CST terms
REPLACE, BEFORE, AFTER, ADD_KEYWORD, LINE_BEFORE, DELETE_LINE, DELETE_UNTIL = (
    "replace", "before", "after", "add-keyword", "line-before", "delete-line", "delete-until")


@dataclass(frozen=True, eq=False)
class NodeEdit:
    """An edit anchored to CST nodes; ``resolve`` positions it."""

    kind: str
    node: Any  # a libcst node
    text: str = ""
    # ADD_KEYWORD: the value of the call's last argument (None: no arguments);
    # DELETE_UNTIL: the node where the deleted text stops.
    anchor: Any = None

    def nodes(self) -> list:
        return [self.node] if self.anchor is None else [self.node, self.anchor]


@dataclass(frozen=True, eq=False)
class NodeFix:
    """A rule's fix before positions are known."""

    description: str
    applicability: str
    edits: tuple[NodeEdit, ...]

    def nodes(self) -> list:
        return [node for edit in self.edits for node in edit.nodes()]


def node_fix(description: str, applicability: str, *edits: Optional[NodeEdit]) -> Optional[NodeFix]:
    """A ``NodeFix``, or None when some edit could not be built."""
    if applicability not in APPLICABILITIES:
        raise ValueError(f"unknown applicability {applicability!r}")
    if not edits or any(edit is None for edit in edits):
        return None
    return NodeFix(description, applicability, tuple(edits))  # type: ignore[arg-type]


def replace(node: "cst.CSTNode", text: str) -> NodeEdit:
    """Replace the node's text (without parentheses around an expression)."""
    return NodeEdit(REPLACE, node, text)


def insert_before(node: "cst.CSTNode", text: str) -> NodeEdit:
    return NodeEdit(BEFORE, node, text)


def insert_after(node: "cst.CSTNode", text: str) -> NodeEdit:
    return NodeEdit(AFTER, node, text)


def insert_line_before(statement: "cst.CSTNode", text: str) -> NodeEdit:
    """A new line holding ``text`` before the line where ``statement`` starts, with
    that line's indentation and line ending. The statement must start its line."""
    return NodeEdit(LINE_BEFORE, statement, text)


def delete_line(statement: "cst.CSTNode") -> NodeEdit:
    """Delete the lines of a statement that is alone on them (a trailing comment goes too)."""
    return NodeEdit(DELETE_LINE, statement)


def delete_until(node: "cst.CSTNode", following: "cst.CSTNode") -> NodeEdit:
    """Delete from the start of ``node`` to the start of ``following`` (an
    argument and the separator after it: ``f(a, b)`` -> ``f(b)``)."""
    return NodeEdit(DELETE_UNTIL, node, "", following)


def add_keyword(call: "cst.Call", name: str, value: str) -> Optional[NodeEdit]:
    """Add ``name=value`` as the call's last argument, keeping its layout: after
    the last argument on one line, or on a line of its own (with the trailing
    comma style) when the arguments are laid out one per line."""
    import libcst as cst

    args = call.args
    if len(args) == 1 and isinstance(args[0].value, cst.GeneratorExp) and not args[0].value.lpar:
        return None  # f(x for x in y): a second argument needs parentheses around the generator
    anchor = args[-1].value if args else None
    return NodeEdit(ADD_KEYWORD, call, f"{name}={value}", anchor)


def string_literal(text: str, examples: Iterable[Any] = ()) -> str:
    """``text`` as a Python string literal in the quote style of the first
    single-quoted or double-quoted ``cst.SimpleString`` among ``examples``
    (the user's style), else in double quotes."""
    quote = '"'
    for example in examples:
        raw = getattr(example, "value", "")
        body = raw.lstrip("rRbBuU")
        if body[:1] in ("'", '"') and body[:3] not in ("'''", '"""'):
            quote = body[0]
            break
    if quote in text or "\\" in text or "\n" in text:
        return repr(text)
    return quote + text + quote


def resolve(fix: NodeFix, ranges: Mapping[Any, "CodeRange"], source: str) -> Optional[Fix]:
    """Position a ``NodeFix``: ``ranges`` maps nodes to libcst ``CodeRange``s (1-based
    lines, 0-based columns). None when some edit cannot be placed."""
    lines = split_lines(source)
    edits: list[Edit] = []
    for node_edit in fix.edits:
        placed = _place(node_edit, ranges, lines, source)
        if placed is None:
            return None
        edits.extend(placed)
    if any(edits_overlap([edit], [other]) for i, edit in enumerate(edits) for other in edits[i + 1:]):
        return None  # the fix's own edits collide: their order would be a guess
    return Fix(fix.description, fix.applicability, tuple(sorted(edits)))


def _place(edit: NodeEdit, ranges: Mapping[Any, "CodeRange"], lines: list[str],
           source: str) -> Optional[list[Edit]]:
    where = ranges.get(edit.node)
    if where is None:
        return None
    start = (where.start.line, where.start.column + 1)
    end = (where.end.line, where.end.column + 1)
    if edit.kind == REPLACE:
        return [Edit(*start, *end, edit.text)]
    if edit.kind == BEFORE:
        return [Edit(*start, *start, edit.text)]
    if edit.kind == AFTER:
        return [Edit(*end, *end, edit.text)]
    if edit.kind == LINE_BEFORE:
        line = _line(lines, start[0])
        indent = line[: start[1] - 1] if line is not None else "x"
        if indent.strip():
            return None  # the statement does not start its line (``a; b`` or ``if x: b``)
        ending = line_ending(line) or newline_of(source)
        return [Edit(start[0], 1, start[0], 1, indent + edit.text + ending)]
    if edit.kind == DELETE_LINE:
        first, last = _line(lines, start[0]), _line(lines, end[0])
        if first is None or last is None or first[: start[1] - 1].strip():
            return None
        rest = last[end[1] - 1:].strip()
        if rest and not rest.startswith("#"):
            return None  # another statement follows on the line
        if end[0] < len(lines):
            return [Edit(start[0], 1, end[0] + 1, 1, "")]
        return [Edit(start[0], 1, end[0], len(last) + 1, "")]
    if edit.kind == ADD_KEYWORD:
        return _place_keyword(edit, ranges, lines, source, end)
    if edit.kind == DELETE_UNTIL:
        until = ranges.get(edit.anchor)
        if until is None or (until.start.line, until.start.column + 1) < start:
            return None
        return [Edit(*start, until.start.line, until.start.column + 1, "")]
    raise ValueError(f"unknown edit kind {edit.kind!r}")


def _line(lines: list[str], number: int) -> Optional[str]:
    return lines[number - 1] if 0 < number <= len(lines) else None


def _place_keyword(edit: NodeEdit, ranges: Mapping[Any, "CodeRange"], lines: list[str], source: str,
                   call_end: tuple[int, int]) -> Optional[list[Edit]]:
    close = (call_end[0], call_end[1] - 1)  # the call's own ')'
    close_line = _line(lines, close[0])
    if close_line is None or close[1] < 1 or close_line[close[1] - 1: close[1]] != ")":
        return None
    if edit.anchor is None:
        return [Edit(*close, *close, edit.text)]
    anchor = ranges.get(edit.anchor)
    if anchor is None:
        return None
    after = (anchor.end.line, anchor.end.column + 1)
    _, starts = _offsets(source)
    between = source[_offset(lines, starts, *after): _offset(lines, starts, *close)]
    if not _NEWLINE.search(between):
        return [Edit(*after, *after, ", " + edit.text)]
    # One argument per line: the new one gets a line of its own before the ')' line.
    closing_indent = close_line[: close[1] - 1]
    if closing_indent.strip():
        return [Edit(*after, *after, ", " + edit.text)]
    trailing_comma = between.lstrip(" \t").startswith(",")
    first_line = _line(lines, anchor.start.line) or ""
    indent = first_line[: len(first_line) - len(first_line.lstrip(" \t"))]
    ending = line_ending(_line(lines, close[0] - 1) or "") or newline_of(source)
    edits = [] if trailing_comma else [Edit(*after, *after, ",")]
    edits.append(Edit(close[0], 1, close[0], 1,
                      indent + edit.text + ("," if trailing_comma else "") + ending))
    return edits
