"""Suppression comments.

- per line: ``# noqa: DDP007`` (bare ``# noqa`` silences all), and
  ``# ddplint: ignore[DDP007] reason text`` (the reason is free text; bare
  ``# ddplint: ignore`` silences all);
- per file: ``# ddplint: noqa: DDP007`` on a line of its own.

Each comment is parsed into ``Directive``s that remember where they are, so that
DDP100 (unused-suppression) can report one that silences nothing and remove it
(or one code of its list), and ``--add-noqa`` can extend one.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from ddplint.fixes import Edit


_CODES = r"(?P<codes>[A-Za-z0-9_-]+(?:\s*,\s*[A-Za-z0-9_-]+)*)"
_CODE = re.compile(r"[A-Za-z0-9_-]+")
LINE_NOQA = re.compile(r"#\s*noqa(?:\s*:\s*" + _CODES + r")?", re.IGNORECASE)
FILE_NOQA = re.compile(r"^#\s*ddplint\s*:\s*noqa(?:\s*:\s*" + _CODES + r")?\s*$", re.IGNORECASE)
LINE_IGNORE = re.compile(r"#\s*ddplint\s*:\s*ignore(?:\[\s*" + _CODES + r"\s*\]|(?![\w\[-]))", re.IGNORECASE)
ALL = "*"


@dataclass(frozen=True)
class Directive:
    """One suppression in one comment. Columns are 0-based offsets in the line."""

    line: int  # 1-based
    comment_column: int  # where the comment token starts
    comment: str  # the whole comment token (possibly several directives and other text)
    start: int  # the directive's '#', relative to the comment
    end: int  # where the directive's segment ends (the next '#'-comment in the comment, or its end)
    codes: frozenset[str]  # upper-case codes, or {ALL}
    codes_span: Optional[tuple[int, int]]  # the code list, relative to the comment
    alone: bool  # the comment is alone on its line
    whole_file: bool = False

    @property
    def silences_all(self) -> bool:
        return ALL in self.codes

    @property
    def text(self) -> str:
        return self.comment[self.start:self.end].rstrip()

    @property
    def column(self) -> int:
        """1-based column of the directive (for its diagnostic)."""
        return self.comment_column + self.start + 1

    @property
    def end_column(self) -> int:
        return self.column + len(self.text)

    def listed_codes(self) -> list[str]:
        """The codes as written, in order."""
        if self.codes_span is None:
            return []
        return [code.upper() for code in _CODE.findall(self.comment[self.codes_span[0]:self.codes_span[1]])]

    def removal(self, line_text: str, line_count: int) -> Edit:
        """The edit that removes this directive and nothing else: the whole line
        for a comment alone on it, else the comment (with the spaces before it),
        or only this directive's part of a longer comment."""
        from ddplint.fixes import Edit  # only for --fix and the editor's quick fixes

        base, comment = self.comment_column, self.comment
        if self.start == 0 and self.end >= len(comment):
            if self.alone:
                if self.line < line_count:
                    return Edit(self.line, 1, self.line + 1, 1, "")
                return Edit(self.line, 1, self.line, len(line_text) + 1, "")
            code_end = len(line_text[:base].rstrip())
            return Edit(self.line, code_end + 1, self.line, base + len(comment) + 1, "")
        if self.start == 0 or self.end < len(comment):
            return Edit(self.line, base + self.start + 1, self.line, base + self.end + 1, "")
        kept_end = len(comment[: self.start].rstrip())
        return Edit(self.line, base + kept_end + 1, self.line, base + len(comment) + 1, "")

    def with_codes(self, codes: list[str]) -> Edit:
        """The edit that rewrites this directive's code list as ``codes``."""
        from ddplint.fixes import Edit

        assert self.codes_span is not None
        first, last = self.codes_span
        return Edit(self.line, self.comment_column + first + 1, self.line, self.comment_column + last + 1,
                    ", ".join(codes))


@dataclass
class Suppressions:
    by_line: dict[int, frozenset[str]] = field(default_factory=dict)  # 1-based line -> codes or {ALL}
    whole_file: frozenset[str] = frozenset()
    directives: list[Directive] = field(default_factory=list)

    def suppresses(self, code: str, line: int) -> bool:
        if ALL in self.whole_file or code in self.whole_file:
            return True
        codes = self.by_line.get(line)
        return codes is not None and (ALL in codes or code in codes)

    def silencers(self, code: str, line: int) -> list[Directive]:
        """The directives that silence ``code`` reported on ``line``."""
        return [d for d in self.directives
                if (d.whole_file or d.line == line) and (d.silences_all or code in d.codes)]

    def on_line(self, line: int) -> list[Directive]:
        return [d for d in self.directives if d.line == line and not d.whole_file]


def _codes(match: re.Match) -> frozenset[str]:
    codes = match.group("codes")
    if not codes:
        return frozenset({ALL})
    return frozenset(code.strip().upper() for code in codes.split(","))


def _comments(source: str) -> list[tuple[int, int, str, bool]]:
    """(line, column, comment text, comment is alone on its line). Tokenizing
    keeps a '# noqa' inside a string from counting; on code tokenize cannot read
    (the file failed to parse) fall back to scanning lines."""
    comments = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                alone = not token.line[: token.start[1]].strip()
                comments.append((token.start[0], token.start[1], token.string, alone))
        return comments
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    comments = []
    for number, line in enumerate(source.splitlines(), start=1):
        position = line.find("#")
        if position != -1:
            comments.append((number, position, line[position:], not line[:position].strip()))
    return comments


def _segment_starts(comment: str) -> list[int]:
    """Where each '#'-comment inside one comment token begins (``# a  # noqa``)."""
    return [0] + [i for i in range(1, len(comment)) if comment[i] == "#" and comment[i - 1] in " \t"]


def _directive(line: int, column: int, comment: str, alone: bool, match: re.Match,
               whole_file: bool) -> Directive:
    starts = sorted(set(_segment_starts(comment)) | {match.start()})
    end = next((start for start in starts if start > match.start()), len(comment))
    span = match.span("codes") if match.group("codes") else None
    return Directive(line, column, comment, match.start(), end, _codes(match), span, alone, whole_file)


def parse_suppressions(source: str) -> Suppressions:
    lowered = source.lower()
    if "noqa" not in lowered and "ddplint" not in lowered:
        return Suppressions()
    result = Suppressions()
    whole: set[str] = set()
    for line, column, text, alone in _comments(source):
        file_match = FILE_NOQA.match(text.strip()) if alone else None
        if file_match:
            whole |= _codes(file_match)
            result.directives.append(_directive(line, column, text, alone, file_match, whole_file=True))
            continue
        for pattern in (LINE_NOQA, LINE_IGNORE):
            for match in pattern.finditer(text):
                result.by_line[line] = result.by_line.get(line, frozenset()) | _codes(match)
                result.directives.append(_directive(line, column, text, alone, match, whole_file=False))
    result.whole_file = frozenset(whole)
    result.directives.sort(key=lambda d: (d.line, d.start))
    return result
