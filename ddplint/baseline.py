"""Baselines: record today's findings, then report only new ones.

``--write-baseline FILE`` stores every current finding by fingerprint
(``ddplint.fingerprints``); ``--baseline FILE`` hides the findings it holds and
lists its entries that no longer occur, so the file can only shrink (writing a
baseline while reading one keeps only the entries that still occur). Paths in
the file are relative to the file's own folder, so the baseline does not depend
on the folder ddplint runs from.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from ddplint.diagnostics import INTERNAL_ERROR, FileResult
from ddplint.fingerprints import file_fingerprints, normalise_line

FORMAT = 1


class BaselineError(Exception):
    """A baseline file that cannot be read or written (the CLI exits 2)."""


@dataclass(frozen=True)
class Entry:
    fingerprint: str
    code: str
    path: str  # relative to the baseline file's folder, with '/'
    line_text: str  # normalised (for people reading the file)
    line: int  # where it was when recorded (for people; not used for matching)
    message: str

    def to_json(self) -> dict:
        return {"fingerprint": self.fingerprint, "code": self.code, "path": self.path,
                "line": self.line, "line_text": self.line_text, "message": self.message}


@dataclass
class Baseline:
    path: Path
    entries: list[Entry]

    @property
    def folder(self) -> Path:
        return self.path.resolve().parent


def relative_to(folder: Path, shown_path: str) -> str:
    """A linted file's path relative to ``folder`` (``shown_path`` is relative to
    the working directory or absolute)."""
    return Path(os.path.relpath(Path(shown_path).resolve(), folder)).as_posix()


def current_entries(files: Iterable[FileResult], folder: Path) -> list[tuple[FileResult, int, Entry]]:
    """(file, index of the diagnostic in file.diagnostics, entry) for every finding."""
    found = []
    for file in files:
        if file.path.startswith("<"):
            continue  # stdin without a file name
        path = relative_to(folder, file.path)
        prints = file_fingerprints(path, file.diagnostics, file.source_lines)
        for number, (diagnostic, print_) in enumerate(zip(file.diagnostics, prints)):
            if diagnostic.code == INTERNAL_ERROR:
                continue
            text = normalise_line(file.source_lines.get(diagnostic.line, ""))
            found.append((file, number, Entry(print_, diagnostic.code, path, text, diagnostic.line,
                                              diagnostic.message)))
    return found


def load(path: Path) -> Baseline:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BaselineError(f"baseline file not found: {path} (create it with --write-baseline {path})") from None
    except OSError as error:
        raise BaselineError(f"cannot read baseline {path}: {error.strerror or error}") from None
    except (UnicodeDecodeError, ValueError) as error:
        raise BaselineError(f"{path} is not a ddplint baseline (invalid JSON: {error})") from None
    try:
        if data.get("format") != FORMAT or data.get("tool") != "ddplint":
            raise BaselineError(f"{path} is not a ddplint baseline of format {FORMAT}")
        entries = [Entry(str(e["fingerprint"]), str(e["code"]), str(e["path"]), str(e.get("line_text", "")),
                         int(e.get("line", 0)), str(e.get("message", ""))) for e in data["findings"]]
    except (AttributeError, KeyError, TypeError, ValueError):
        raise BaselineError(f"{path} is not a ddplint baseline (unexpected content)") from None
    return Baseline(path, entries)


def write(path: Path, entries: Iterable[Entry]) -> int:
    """Write the baseline atomically; returns the number of entries."""
    from ddplint.autofix import write_atomically

    ordered = sorted(set(entries), key=lambda e: (e.path, e.line, e.code, e.fingerprint))
    document = {"tool": "ddplint", "format": FORMAT,
                "comment": "Findings recorded by `ddplint --write-baseline`; `ddplint --baseline` hides them.",
                "findings": [entry.to_json() for entry in ordered]}
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    try:
        write_atomically(path, text.encode("utf-8"))
    except OSError as error:
        raise BaselineError(f"cannot write baseline {path}: {error.strerror or error}") from None
    return len(ordered)


def apply(baseline: Baseline, files: list[FileResult]) -> list[Entry]:
    """Remove the findings the baseline holds from ``files``; return its entries
    that no longer occur: entries of the files linted now that matched nothing,
    and entries of files that no longer exist."""
    known = {entry.fingerprint for entry in baseline.entries}
    matched: set[str] = set()
    drop: dict[int, set[int]] = {}
    for file, number, entry in current_entries(files, baseline.folder):
        if entry.fingerprint in known:
            matched.add(entry.fingerprint)
            drop.setdefault(id(file), set()).add(number)
    for file in files:
        gone = drop.get(id(file))
        if gone:
            file.diagnostics = [d for n, d in enumerate(file.diagnostics) if n not in gone]
    linted = {relative_to(baseline.folder, file.path) for file in files if not file.path.startswith("<")}
    return [entry for entry in baseline.entries if entry.fingerprint not in matched
            and (entry.path in linted or not (baseline.folder / entry.path).exists())]


def entries_to_write(files: list[FileResult], folder: Path, baseline: Optional[Baseline] = None) -> list[Entry]:
    """What ``--write-baseline`` writes (paths relative to ``folder``): every
    current finding, or, when a baseline was read too, only the findings it
    holds (so updating a baseline never adds to it)."""
    new = current_entries(files, folder)
    if baseline is None:
        return [entry for _, _, entry in new]
    known = {entry.fingerprint for entry in baseline.entries}
    old = {(id(file), number): entry.fingerprint for file, number, entry in current_entries(files, baseline.folder)}
    return [entry for file, number, entry in new if old[(id(file), number)] in known]
