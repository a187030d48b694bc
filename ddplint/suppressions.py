"""``# noqa`` comments: per line (``# noqa: DDP007``, bare ``# noqa``) and per file
(``# ddplint: noqa: DDP007`` on a line of its own)."""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

_CODES = r"(?P<codes>[A-Za-z0-9_-]+(?:\s*,\s*[A-Za-z0-9_-]+)*)"
LINE_NOQA = re.compile(r"#\s*noqa(?:\s*:\s*" + _CODES + r")?", re.IGNORECASE)
FILE_NOQA = re.compile(r"^#\s*ddplint\s*:\s*noqa(?:\s*:\s*" + _CODES + r")?\s*$", re.IGNORECASE)
ALL = "*"


@dataclass
class Suppressions:
    by_line: dict[int, frozenset[str]] = field(default_factory=dict)  # 1-based line -> codes or {ALL}
    whole_file: frozenset[str] = frozenset()

    def suppresses(self, code: str, line: int) -> bool:
        if ALL in self.whole_file or code in self.whole_file:
            return True
        codes = self.by_line.get(line)
        return codes is not None and (ALL in codes or code in codes)


def _codes(match: re.Match) -> frozenset[str]:
    codes = match.group("codes")
    if not codes:
        return frozenset({ALL})
    return frozenset(code.strip().upper() for code in codes.split(","))


def _comments(source: str) -> list[tuple[int, str, bool]]:
    """(line, comment text, comment is alone on its line). Tokenizing keeps a
    '# noqa' inside a string from counting; on code tokenize cannot read (the file
    failed to parse) fall back to scanning lines."""
    comments = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                alone = not token.line[: token.start[1]].strip()
                comments.append((token.start[0], token.string, alone))
        return comments
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    comments = []
    for number, line in enumerate(source.splitlines(), start=1):
        position = line.find("#")
        if position != -1:
            comments.append((number, line[position:], not line[:position].strip()))
    return comments


def parse_suppressions(source: str) -> Suppressions:
    if "noqa" not in source and "NOQA" not in source:
        return Suppressions()
    result = Suppressions()
    whole: set[str] = set()
    for line, text, alone in _comments(source):
        file_match = FILE_NOQA.match(text.strip()) if alone else None
        if file_match:
            whole |= _codes(file_match)
            continue
        match = LINE_NOQA.search(text)
        if match and "ddplint" not in text[: match.start()].lower():
            result.by_line[line] = result.by_line.get(line, frozenset()) | _codes(match)
    result.whole_file = frozenset(whole)
    return result
