"""``--diff-base REV``: the lines of each file added or changed since REV.

Compares REV with the working tree (``git diff --unified=0 REV``, rename
detection on, so a moved file is not all new). A file git does not track is
new in every line. A file outside the repository, a folder that is not in a
repository, an unknown revision or a missing ``git`` are errors.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Iterable, Optional, Union

ALL_LINES = "all"
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


class GitError(Exception):
    """Why a diff-aware run cannot be made (the CLI prints it and exits 2)."""


def _git(arguments: list[str], cwd: Path) -> str:
    try:
        completed = subprocess.run(["git", *arguments], cwd=cwd, capture_output=True, timeout=120)
    except FileNotFoundError:
        raise GitError("--diff-base needs git, which is not installed or not on PATH") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {' '.join(arguments[:2])} did not finish within 120 s") from None
    if completed.returncode != 0:
        detail = completed.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GitError(detail[-1] if detail else f"git {arguments[0]} failed")
    return completed.stdout.decode("utf-8", "surrogateescape")


def repository_root(folder: Path) -> Path:
    try:
        return Path(_git(["rev-parse", "--show-toplevel"], folder).strip()).resolve()
    except GitError:
        raise GitError(f"--diff-base needs a git repository: {folder} is not inside one") from None


def changed_lines(files: Iterable[Path], revision: str,
                  folder: Optional[Path] = None) -> dict[Path, Union[set[int], str]]:
    """For each file (resolved path): the 1-based lines added or changed since
    ``revision``, or ``ALL_LINES`` for a file git does not track."""
    files = [Path(file).resolve() for file in files]
    try:  # the repository ddplint runs in, else the one holding the first file
        root = repository_root(folder or Path.cwd())
    except GitError:
        if not files:
            raise
        root = repository_root(files[0].parent)
    for file in files:
        if root != file and root not in file.parents:
            raise GitError(f"--diff-base: {file} is outside the git repository at {root}")
    try:
        _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{revision}^{{commit}}"], root)
    except GitError:
        raise GitError(f"--diff-base: unknown git revision '{revision}'") from None
    diff = _git(["-c", "core.quotepath=off", "diff", "--no-color", "--no-ext-diff", "--unified=0",
                 "--find-renames", "--src-prefix=a/", "--dst-prefix=b/", revision, "--"], root)
    changed = _parse_diff(diff, root)
    tracked = {(root / name).resolve() for name in _git(["ls-files", "-z"], root).split("\0") if name}
    result: dict[Path, Union[set[int], str]] = {}
    for file in files:
        if file in changed:
            result[file] = changed[file]
        elif file in tracked:
            result[file] = set()
        else:
            result[file] = ALL_LINES
    return result


def _parse_diff(diff: str, root: Path) -> dict[Path, set[int]]:
    changed: dict[Path, set[int]] = {}
    current: Optional[set[int]] = None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            name = line[4:]
            if name == "/dev/null":
                current = None
                continue
            name = _unquote(name)
            current = changed.setdefault((root / name[2:]).resolve(), set()) if name.startswith("b/") else None
        elif line.startswith("@@") and current is not None:
            match = _HUNK.match(line)
            if match:
                first, count = int(match.group(1)), int(match.group(2) if match.group(2) is not None else 1)
                current.update(range(first, first + count))
    return changed


_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def _unquote(name: str) -> str:
    """git's C-style quoting of unusual file names (``"b/a\\tb.py"``, octal bytes)."""
    if not (len(name) >= 2 and name.startswith('"') and name.endswith('"')):
        return name
    body, data, i = name[1:-1], bytearray(), 0
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body):
            following = body[i + 1]
            if following in "01234567":
                data.append(int(body[i + 1:i + 4], 8) & 0xFF)
                i += 4
                continue
            data.append(_ESCAPES.get(following, ord(following) & 0xFF))
            i += 2
            continue
        data.extend(char.encode("utf-8", "surrogateescape"))
        i += 1
    return data.decode("utf-8", "surrogateescape")


def on_changed_lines(changed: Union[set[int], str], line: int, end_line: int) -> bool:
    if changed == ALL_LINES:
        return True
    return any(number in changed for number in range(line, max(line, end_line) + 1))
