"""Stable fingerprints of findings: the same finding keeps its fingerprint when
code moves around (lines inserted above it, the function moved to another place
in the file), and two identical findings in one file stay distinct.

A fingerprint digests the rule code, the file's path, the reported line's text
normalised (whitespace collapsed, a trailing comment dropped) and the finding's
occurrence index among the file's findings with the same code and normalised
line. Line numbers are not part of it.

Used by the baseline (``--baseline``/``--write-baseline``) and meant for SARIF
``partialFingerprints`` too: ``fingerprint(code, path, line_text, occurrence)``
for one finding, ``file_fingerprints(path, diagnostics, source_lines)`` for all
the findings of one file at once (it computes the occurrence indices).
"""

from __future__ import annotations

import hashlib
from typing import Mapping, Sequence

from ddplint.diagnostics import Diagnostic

VERSION = "1"  # part of every fingerprint: change it when the recipe changes


def normalise_line(text: str) -> str:
    """The line without its trailing comment, with runs of whitespace collapsed."""
    return " ".join(_without_comment(text).split())


def fingerprint(code: str, path: str, line_text: str, occurrence: int = 0) -> str:
    """A 32-hex-digit fingerprint of one finding. ``path`` is used as given
    (slashes normalised): pass it relative to a fixed folder (the project root,
    the baseline's folder) so that it does not depend on the working directory."""
    parts = (VERSION, code.upper(), path.replace("\\", "/"), normalise_line(line_text), str(occurrence))
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()[:32]


def file_fingerprints(path: str, diagnostics: Sequence[Diagnostic], source_lines: Mapping[int, str]) -> list[str]:
    """One fingerprint per diagnostic (same order). The occurrence index counts,
    in position order, the earlier findings of the same code on lines with the
    same normalised text. ``source_lines`` maps 1-based line numbers to their
    text (``FileResult.source_lines`` holds every reported line)."""
    order = sorted(range(len(diagnostics)), key=lambda i: (diagnostics[i].line, diagnostics[i].column, i))
    seen: dict[tuple[str, str], int] = {}
    result = [""] * len(diagnostics)
    for i in order:
        diagnostic = diagnostics[i]
        text = normalise_line(source_lines.get(diagnostic.line, ""))
        occurrence = seen.get((diagnostic.code, text), 0)
        seen[(diagnostic.code, text)] = occurrence + 1
        result[i] = fingerprint(diagnostic.code, path, text, occurrence)
    return result


def _without_comment(line: str) -> str:
    """``line`` up to a '#' that is outside string quotes (a single-line scan: the
    same line always gives the same answer, which is what a fingerprint needs)."""
    quote = ""
    i = 0
    while i < len(line):
        char = line[i]
        if quote:
            if char == "\\":
                i += 2
                continue
            if line.startswith(quote, i):
                i += len(quote)
                quote = ""
                continue
        elif char in "'\"":
            quote = char * 3 if line.startswith(char * 3, i) else char
            i += len(quote)
            continue
        elif char == "#":
            return line[:i]
        i += 1
    return line
