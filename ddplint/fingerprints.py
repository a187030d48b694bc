"""Stable identities of findings, for baselines and SARIF ``partialFingerprints``.

A finding keeps its fingerprint when lines are inserted or removed above it, when
its line is re-indented, and across machines: it hashes the rule, the file's path,
the reported source line with its whitespace normalised, and the occurrence index
(the n-th finding of the same rule on an identical line in the same file). It
changes when the reported line itself changes, which is when a reviewer should
look again.
"""

from __future__ import annotations

import hashlib
from typing import Iterable

VERSION = "v1"


def normalise_line(line_text: str) -> str:
    """The line with leading/trailing whitespace dropped and inner runs collapsed."""
    return " ".join(line_text.split())


def fingerprint(code: str, path: str, line_text: str, occurrence: int) -> str:
    """A hex digest naming one finding: rule ``code`` reported on ``line_text`` of
    ``path`` (slash-separated, as reported), the ``occurrence``-th (0-based) such
    finding in the file."""
    key = "\0".join((VERSION, code, path.replace("\\", "/"), normalise_line(line_text), str(occurrence)))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def fingerprints(path: str, findings: Iterable[tuple[str, str]]) -> list[str]:
    """Fingerprints of a file's findings, given as (code, line_text) in report
    order; occurrence indexes are counted here."""
    seen: dict[tuple[str, str], int] = {}
    result = []
    for code, line_text in findings:
        key = (code, normalise_line(line_text))
        occurrence = seen.get(key, 0)
        seen[key] = occurrence + 1
        result.append(fingerprint(code, path, line_text, occurrence))
    return result
