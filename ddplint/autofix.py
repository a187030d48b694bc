"""Applying fixes (``--fix``, ``--unsafe-fixes``, ``--diff``) and adding
suppressions (``--add-noqa``) to files.

Fixes are applied in memory, round by round: every fix that does not overlap
an earlier-chosen one, then a re-lint of the result (fixes of overlapping or
newly exposed findings come in the next round), until no applicable fix is
left or ``MAX_ROUNDS`` is reached. A file is written only when every round's
result parses and the re-lint no longer reports the findings that were fixed;
otherwise the file is left as it was and the reason is returned. Files are
written atomically (a temporary file in the same folder, then ``os.replace``)
with their mode, encoding (a BOM or PEP 263 cookie) and line endings kept.
"""

from __future__ import annotations

import ast
import io
import os
import stat
import tempfile
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from ddplint.diagnostics import INTERNAL_ERROR, Diagnostic, FileResult
from ddplint.fixes import Edit, Fix, PositionMap, apply_edits, edits_overlap, split_lines
from ddplint.suppressions import parse_suppressions

MAX_ROUNDS = 10
SYNTAX_ERROR = "DDP000"
UNUSED_SUPPRESSION = "DDP100"
NOT_SUPPRESSIBLE = (SYNTAX_ERROR, UNUSED_SUPPRESSION, INTERNAL_ERROR)

Relint = Callable[[str], FileResult]  # lints a source text as the file


@dataclass
class Outcome:
    """What fixing (or adding suppressions to) one file came to."""

    result: FileResult  # the findings now: of the fixed text, or the original ones
    source: str  # the text as read
    fixed: str  # the new text (== source when nothing changed or it was refused)
    applied: list[tuple[Diagnostic, Fix]] = field(default_factory=list)  # positions as in their round's text
    problem: Optional[str] = None  # why the file was left untouched
    note: Optional[str] = None  # what was not done although the file changed
    path: str = ""  # as displayed

    @property
    def changed(self) -> bool:
        return self.fixed != self.source and self.problem is None


def applicable(diagnostic: Diagnostic, unsafe: bool) -> bool:
    return diagnostic.fix is not None and (unsafe or diagnostic.fix.is_safe)


def fix_source(source: str, first: FileResult, relint: Relint, unsafe: bool = False) -> Outcome:
    """Apply the applicable fixes of ``first`` (the findings of ``source``) and
    of the findings they leave or expose, verifying each round."""
    current_source, current = source, first
    applied: list[tuple[Diagnostic, Fix]] = []
    for _ in range(MAX_ROUNDS):
        chosen: list[Diagnostic] = []
        for diagnostic in sorted((d for d in current.diagnostics if applicable(d, unsafe)),
                                 key=lambda d: (d.fix.edits[0] if d.fix.edits else (d.line, d.column), d)):
            if all(not edits_overlap(diagnostic.fix.edits, other.fix.edits) for other in chosen):
                chosen.append(diagnostic)
        if not chosen:
            break
        edits = [edit for diagnostic in chosen for edit in diagnostic.fix.edits]
        candidate = apply_edits(current_source, edits)
        problem = _refusal(current_source, candidate, edits, chosen, relint)
        if isinstance(problem, str):
            return Outcome(first, source, source, [], problem)
        applied.extend((diagnostic, diagnostic.fix) for diagnostic in chosen)
        current_source, current = candidate, problem
    return Outcome(current, source, current_source, applied)


def _refusal(before: str, after: str, edits: list[Edit], fixed: list[Diagnostic], relint: Relint):
    """The re-lint of ``after``, or a sentence saying why ``after`` is refused."""
    names = ", ".join(sorted({f"{d.code} at {d.line}:{d.column}" for d in fixed}))
    try:
        ast.parse(after)
    except (SyntaxError, ValueError) as error:
        detail = getattr(error, "msg", str(error))
        return f"fixing {names} would leave a syntax error ({detail}); the file was left unchanged"
    result = relint(after)
    if any(d.code == SYNTAX_ERROR for d in result.diagnostics):
        return f"fixing {names} would leave code ddplint cannot parse; the file was left unchanged"
    where = PositionMap(before, edits, after)
    remaining = {(d.code, d.line, d.column) for d in [*result.diagnostics, *result.suppressed]}
    for diagnostic in fixed:
        line, column = where.position(diagnostic.line, diagnostic.column)
        if (diagnostic.code, line, column) in remaining:
            return (f"the fix of {diagnostic.code} at {diagnostic.line}:{diagnostic.column} did not remove "
                    "the finding; the file was left unchanged")
    return result


# ---------------------------------------------------------------------- suppressions
def add_suppressions(source: str, first: FileResult, relint: Relint, reason: Optional[str] = None) -> Outcome:
    """Suppress every finding of ``first`` on its line: extend a suppression
    comment already there, else append ``# noqa: CODES`` (with ``reason``:
    ``# ddplint: ignore[CODES] reason``). Lines that end inside a string or with
    a backslash cannot take a comment; they are named in ``problem`` and the
    other lines are still done."""
    wanted: dict[int, list[str]] = {}
    for diagnostic in first.diagnostics:
        if diagnostic.code not in NOT_SUPPRESSIBLE:
            codes = wanted.setdefault(diagnostic.line, [])
            if diagnostic.code not in codes:
                codes.append(diagnostic.code)
    if not wanted:
        return Outcome(first, source, source)
    lines = split_lines(source)
    blocked = _lines_that_cannot_take_a_comment(source, lines)
    suppressions = parse_suppressions(source)
    edits, skipped, added = [], [], []
    for number in sorted(wanted):
        codes = sorted(wanted[number])
        if number in blocked or number > len(lines):
            skipped.append(number)
            continue
        existing = [d for d in suppressions.on_line(number) if d.codes_span is not None]
        if existing:
            directive = existing[0]
            edits.append(directive.with_codes(directive.listed_codes() + [c for c in codes
                                                                          if c not in directive.listed_codes()]))
        else:
            text = lines[number - 1]
            body = text.rstrip("\r\n")
            comment = f"# ddplint: ignore[{', '.join(codes)}] {reason}" if reason else f"# noqa: {', '.join(codes)}"
            end = len(body.rstrip()) + 1
            edits.append(Edit(number, end, number, len(body) + 1, "  " + comment))
        added.extend((number, code) for code in codes)
    note = None
    if skipped:
        note = ("cannot add a suppression on line" + ("s " if len(skipped) > 1 else " ")
                + ", ".join(map(str, skipped)) + " (it ends inside a string or with a backslash)")
    if not edits:
        return Outcome(first, source, source, [], note)
    fixed = apply_edits(source, edits)
    try:
        ast.parse(fixed)
    except (SyntaxError, ValueError):
        return Outcome(first, source, source, [], "adding suppressions would break the file; it was left unchanged")
    result = relint(fixed)
    if any((d.line, d.code) in set(added) for d in result.diagnostics):
        return Outcome(first, source, source, [], "the added suppressions did not silence the findings; "
                                                   "the file was left unchanged")
    done = set(added)
    applied = [(d, Fix("Add a suppression", "safe", ())) for d in first.diagnostics if (d.line, d.code) in done]
    return Outcome(result, source, fixed, applied, None, note)


def _lines_that_cannot_take_a_comment(source: str, lines: list[str]) -> set[int]:
    """Lines whose end lies inside a token (a multi-line string) or after a
    backslash continuation: a comment appended there would change the code."""
    blocked = {number for number, line in enumerate(lines, start=1) if line.rstrip("\r\n").endswith("\\")}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.start[0] < token.end[0] and token.type not in (tokenize.NEWLINE, tokenize.NL):
                blocked.update(range(token.start[0], token.end[0]))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        blocked.update(range(1, len(lines) + 1))
    return blocked


# ---------------------------------------------------------------------- files
def read_source(path: Path) -> tuple[bytes, str, str]:
    """(bytes, text, encoding) of a Python file, decoded as Python does."""
    data = path.read_bytes()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    text = data.decode(encoding)
    if text.startswith("\ufeff"):
        text = text[1:]
    return data, text, encoding


def encode_source(text: str, encoding: str) -> bytes:
    return text.encode(encoding)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path``'s content by ``data``: a temporary file in the same
    folder (same file system), flushed to disk, given the file's mode, then
    renamed over it. On any failure the original file is untouched and the
    temporary file removed. A symbolic link is followed (its target is replaced)."""
    target = Path(os.path.realpath(path))
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        mode = None
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".ddplint-tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
