"""Which files to lint: walk folders, honour excludes and .gitignore files."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from ddplint.config import Settings, path_matches


class PathError(Exception):
    """A path given on the command line that cannot be linted."""


@dataclass
class _IgnoreRule:
    regex: re.Pattern
    negate: bool
    directory_only: bool


def _translate(pattern: str) -> str:
    """A gitignore glob to a regex over a slash-separated relative path."""
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("/**", i) and i + 3 == len(pattern):
            out.append("/.*")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape(char))
            else:
                out.append(pattern[i:end + 1].replace("[!", "[^"))
                i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def parse_gitignore(text: str) -> list[_IgnoreRule]:
    rules = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        if negate:
            line = line[1:]
        if line.startswith("\\"):
            line = line[1:]
        directory_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        line = line.lstrip("/")
        body = _translate(line)
        prefix = "" if anchored else "(?:.*/)?"
        rules.append(_IgnoreRule(re.compile(f"^{prefix}{body}$"), negate, directory_only))
    return rules


@dataclass
class _GitIgnore:
    base: Path
    rules: list[_IgnoreRule] = field(default_factory=list)

    def verdict(self, path: Path, is_dir: bool) -> Optional[bool]:
        """True ignored, False re-included, None no opinion."""
        try:
            relative = path.relative_to(self.base).as_posix()
        except ValueError:
            return None
        result = None
        for rule in self.rules:
            if rule.directory_only and not is_dir:
                continue
            if rule.regex.match(relative):
                result = not rule.negate
        return result


def _load_gitignore(folder: Path) -> Optional[_GitIgnore]:
    try:
        text = (folder / ".gitignore").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return _GitIgnore(folder, parse_gitignore(text))


def _gitignores_above(folder: Path) -> list[_GitIgnore]:
    """.gitignore files from the enclosing git repository's root down to ``folder``."""
    chain = []
    for candidate in (folder, *folder.parents):
        ignore = _load_gitignore(candidate)
        if ignore is not None:
            chain.append(ignore)
        if (candidate / ".git").exists():
            return list(reversed(chain))
    return []  # not inside a git repository: .gitignore files above do not apply


def _ignored(path: Path, is_dir: bool, ignores: list[_GitIgnore]) -> bool:
    verdict = False
    for ignore in ignores:
        result = ignore.verdict(path, is_dir)
        if result is not None:
            verdict = result
    return verdict


def relative_display(path: Path, root: Path) -> str:
    """A path as shown to the user: relative to the working directory if inside it."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


@dataclass
class Discovery:
    files: list[Path]
    errors: list[str]


def discover(paths: Iterable[str], settings: Settings, force_exclude: bool = False) -> Discovery:
    """Expand CLI paths into the sorted list of files to lint (``include``: .py and .ipynb).

    Files named explicitly are linted even when excluded, unless ``force_exclude``
    (the pre-commit hook sets it, so excluded files stay excluded there too).
    """
    excludes = settings.all_excludes()
    found: set[Path] = set()
    errors: list[str] = []

    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise PathError(f"path not found: {raw}")
        top = path if path.is_dir() else path.parent

        def excluded(candidate: Path, top: Path = top) -> bool:
            # Relative to the project root, or to the folder given when it lies
            # outside the root, so that folders above it never match a pattern.
            relative = _relative_to(candidate, settings.root) or _relative_to(candidate, top)
            return any(path_matches(relative, pattern) for pattern in excludes)

        def included(candidate: Path, top: Path = top) -> bool:  # *.py and *.ipynb by default
            return settings.includes(_relative_to(candidate, settings.root) or _relative_to(candidate, top))

        if path.is_file():
            if force_exclude and (excluded(path) or _ignored(
                    path.resolve(), False, _gitignores_above(path.resolve().parent))):
                continue
            found.add(path)
            continue
        if not path.is_dir():
            raise PathError(f"not a file or folder: {raw}")
        _walk(path, excluded, included, _gitignores_above(path.resolve()), found, errors)
    return Discovery(sorted(found, key=lambda p: p.as_posix()), errors)


def _walk(folder: Path, excluded, included, ignores: list[_GitIgnore], found: set[Path],
          errors: list[str]) -> None:
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError as error:
        errors.append(f"cannot read folder {folder}: {error.strerror or error}")
        return
    local = _load_gitignore(folder.resolve())
    if local is not None and (not ignores or ignores[-1].base != local.base):
        ignores = [*ignores, local]
    for entry in entries:
        path = Path(entry.path)
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
            is_file = entry.is_file()
        except OSError:
            continue
        if is_dir:
            if excluded(path) or _ignored(path.resolve(), True, ignores):
                continue
            _walk(path, excluded, included, ignores, found, errors)
        elif is_file and included(path):
            if excluded(path) or _ignored(path.resolve(), False, ignores):
                continue
            found.add(path)


def _relative_to(path: Path, base: Path) -> str:
    """``path`` relative to ``base`` ("" when outside it)."""
    try:
        return path.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return ""


# ---------------------------------------------------------------------- the project root
# Files that mark the top of a project (DESIGN.md, "Project root").
PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".ddplint.yaml", ".ddplint.yml", ".git")


def find_project_root(paths: Iterable[os.PathLike | str], cwd: Optional[Path] = None) -> Path:
    """The folder whose Python files make the project of ``paths``: the nearest
    folder at or above their common folder holding a project marker; else the
    working directory when every path lies under it; else the common folder."""
    absolute = [Path(os.path.abspath(path)) for path in paths]
    if not absolute:
        return Path(os.path.abspath(cwd or Path.cwd()))
    common = Path(os.path.commonpath([p if p.is_dir() else p.parent for p in absolute]))
    for candidate in (common, *common.parents):
        if any((candidate / marker).exists() for marker in PROJECT_MARKERS):
            return candidate
    working = Path(os.path.abspath(cwd or Path.cwd()))
    if common == working or working in common.parents:
        return working
    return common


def project_files(root: Path, settings: Settings, named: Iterable[Path] = ()) -> list[Path]:
    """Every Python file of the project at ``root`` (excludes and .gitignore
    applied as discovery applies them below a named folder), plus the named
    files, which always belong to it. Sorted, without duplicates."""
    walked = discover([str(root)], settings).files if Path(root).is_dir() else []
    found: dict[str, Path] = {}
    for path in [*walked, *named]:
        found.setdefault(os.path.abspath(path), Path(path))
    return [found[key] for key in sorted(found)]


def module_key(path: os.PathLike | str, root: Path) -> str:
    """A file's name in the project: its path relative to the root, with slashes
    (the absolute path for a file outside the root)."""
    absolute = os.path.abspath(path)
    try:
        relative = os.path.relpath(absolute, os.path.abspath(root))
    except ValueError:  # another drive
        relative = ".."
    if relative == ".." or relative.startswith(".." + os.sep):
        return Path(absolute).as_posix()
    return Path(relative).as_posix()
