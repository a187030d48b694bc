"""Which files to lint: walk folders, honour excludes and .gitignore files."""

from __future__ import annotations

import functools
import os
import re
import stat
import subprocess
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Optional

from ddplint.config import DEFAULT_EXCLUDE, Settings, normalised_path, path_matches, prepared_path_matches


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


def _tracked(path: Path, is_dir: bool) -> bool:
    """Does git track the file (or a file below the folder)?"""
    repository = _repository_of(path.parent)
    if repository is None:
        return False
    files, folders = _git_index(repository)
    relative = _relative_part(path, repository) if files else ""
    return bool(relative) and (relative in folders if is_dir else relative in files)


@functools.lru_cache(maxsize=64)
def _repository_of(folder: Path) -> Optional[Path]:
    return next((candidate for candidate in (folder, *folder.parents) if (candidate / ".git").exists()), None)


@functools.lru_cache(maxsize=8)
def _git_index(repository: Path) -> tuple[frozenset[str], frozenset[str]]:
    """The files the repository at ``repository`` tracks and the folders holding
    them, relative to it (empty when git is unavailable or it is no repository)."""
    if not (repository / ".git").exists():
        return frozenset(), frozenset()
    try:
        listing = subprocess.run(["git", "-C", str(repository), "ls-files", "-z", "--cached"],
                                 capture_output=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return frozenset(), frozenset()
    files = frozenset(name for name in listing.decode("utf-8", "surrogateescape").split("\0") if name)
    folders = frozenset(parent for name in files for parent in _parents(name))
    return files, folders


def _parents(name: str) -> Iterable[str]:
    parts = name.split("/")[:-1]
    return ("/".join(parts[:i]) for i in range(1, len(parts) + 1))


def relative_display(path: Path, root: Path, cwd: Optional[Path] = None, resolved: Optional[Path] = None) -> str:
    """A path as shown to the user: relative to the working directory if inside it.
    ``cwd``: the resolved working directory and ``resolved`` the path resolved,
    when the caller knows them (discovery shows thousands of paths)."""
    try:
        return (resolved or path.resolve()).relative_to(cwd or Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


@dataclass
class Discovery:
    files: list[Path]
    errors: list[str]
    # why paths were left out: "extend-exclude in pyproject.toml" -> how many files and folders
    skipped: Counter = field(default_factory=Counter)
    included: tuple[str, ...] = ()  # the include patterns, for the message
    # file -> its resolved path, as the walk knew it (no realpath per file to display it)
    resolved: dict = field(default_factory=dict)

    def why_no_files(self, paths: Iterable[str]) -> str:
        """One line saying why a run found nothing to lint."""
        if len(self.skipped) == 1:
            (reason, _), = self.skipped.items()
            return f"0 files: every path was excluded by {reason}"
        if self.skipped:
            parts = ", ".join(f"{count} by {reason}" for reason, count in sorted(self.skipped.items()))
            return f"0 files: every path was excluded ({parts})"
        named = ", ".join(paths)
        return f"0 files: no file matching include ({', '.join(self.included)}) in {named}"


DEFAULT_EXCLUDE_ORIGIN = "the default excludes"
# Default excludes that name build outputs: not excluded when they are a package git tracks.
_ARTIFACT_FOLDERS = ("build", "dist")


class _Excludes:
    """The exclude patterns, each with the setting it came from (for messages)."""

    def __init__(self, patterns: list[tuple[str, str]]) -> None:
        self.patterns = patterns  # (pattern, origin)

    @classmethod
    def of(cls, settings: Settings) -> "_Excludes":
        where = f" in {settings.config_path.name}" if settings.config_path else ""
        origin = DEFAULT_EXCLUDE_ORIGIN if settings.exclude == DEFAULT_EXCLUDE else f"exclude{where}"
        return cls([(pattern, origin) for pattern in settings.exclude]
                   + [(pattern, f"extend-exclude{where}") for pattern in settings.extend_exclude])

    def without_those_matching(self, relative: str) -> "_Excludes":
        """Drop the patterns that match ``relative``: naming a folder on the command
        line overrides the excludes that would leave the folder itself out."""
        return _Excludes([(pattern, origin) for pattern, origin in self.patterns
                          if not (relative and path_matches(relative, pattern))])

    def origin_of_match(self, relative: str) -> Optional[str]:
        """The setting of the first pattern that matches ``relative`` (as
        ``path_matches`` does; the path is prepared once for every pattern)."""
        if not relative:
            return None
        path = normalised_path(relative)
        parts = path.split("/")
        for pattern, origin in self.patterns:
            if prepared_path_matches(path, parts, pattern):
                return origin
        return None


def discover(paths: Iterable[str], settings: Settings, force_exclude: bool = False) -> Discovery:
    """Expand CLI paths into the sorted list of files to lint (``include``: .py and .ipynb).

    Paths named on the command line, files and folders alike, are linted even
    when an exclude pattern or a .gitignore matches them; excludes apply to what
    the walk finds below a named folder. ``force_exclude`` (the pre-commit hook
    sets it) applies excludes to the named paths too.
    """
    paths = list(paths)
    all_excludes = _Excludes.of(settings)
    result = Discovery([], [], included=settings.include + settings.extend_include)
    found: set[Path] = set()
    root = settings.root.resolve()

    for raw in paths:
        path = Path(raw)
        _check_named_path(path, raw)
        top = path if path.is_dir() else path.parent
        resolved = path.resolve()

        # Paths are resolved once each (the walk builds its entries' resolved
        # paths from their folder's), then matched as text: a large tree costs
        # no realpath per pattern.
        def relative(candidate: Path, top: Path = top.resolve()) -> str:
            # Relative to the project root, or to the folder given when it lies
            # outside the root, so that folders above it never match a pattern.
            # ``candidate`` is resolved.
            return _relative_part(candidate, root) or _relative_part(candidate, top)

        def included(candidate: Path, relative=relative) -> bool:  # *.py and *.ipynb by default
            return settings.includes(relative(candidate))

        if force_exclude:
            reason = all_excludes.origin_of_match(relative(resolved))
            if reason is None and _ignored(resolved, path.is_dir(), _gitignores_above(resolved.parent)) \
                    and not _tracked(resolved, path.is_dir()):
                reason = ".gitignore"
            if reason is not None:
                result.skipped[f"{reason} (--force-exclude)"] += 1
                continue
        if not path.is_dir():
            found.add(path)
            result.resolved[path] = resolved
            continue
        excludes = all_excludes if force_exclude else all_excludes.without_those_matching(relative(resolved))

        def excluded(candidate: Path, excludes: _Excludes = excludes, relative=relative) -> Optional[str]:
            return excludes.origin_of_match(relative(candidate))

        _walk(path, resolved, excluded, included, _gitignores_above(resolved), found, result)
    result.files = sorted(found, key=lambda p: p.as_posix())
    return result


def _check_named_path(path: Path, raw: str) -> None:
    """A named path must be a file or a folder we can look at; else a one-line error."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if path.is_symlink():
            raise PathError(f"broken symbolic link: {raw}") from None
        raise PathError(f"path not found: {raw}") from None
    except OSError as error:
        raise PathError(f"cannot read {raw}: {error.strerror or error}") from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise PathError(f"not a file or folder: {raw}")


def _walk(folder: Path, resolved_folder: Path, excluded, included, ignores: list[_GitIgnore], found: set[Path],
          result: Discovery, tracked_only: bool = False) -> None:
    """``excluded`` and ``included`` are asked about resolved paths; ``tracked_only``
    below an ignored folder that git tracks files in."""
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError as error:
        result.errors.append(f"cannot read folder {folder}: {error.strerror or error}")
        return
    local = _load_gitignore(resolved_folder)
    if local is not None and (not ignores or ignores[-1].base != local.base):
        ignores = [*ignores, local]
    for entry in entries:
        path = Path(entry.path)
        try:
            # Symbolic links to folders are not followed (no loops); links to files are.
            is_dir = entry.is_dir(follow_symlinks=False)
            is_file = not is_dir and entry.is_file()
            resolved = path.resolve() if entry.is_symlink() else resolved_folder / entry.name
        except OSError:
            continue
        if not (is_dir or (is_file and included(resolved))):
            continue
        reason = excluded(resolved)
        inner = excluded
        if reason == DEFAULT_EXCLUDE_ORIGIN and is_dir and entry.name in _ARTIFACT_FOLDERS \
                and _tracked(resolved / "__init__.py", False):
            # a committed package named ``dist`` (or ``build``) is source, not a build output
            # (a committed ``build/lib/pkg`` copy is no package itself and stays out)
            reason = None
            inner = _source_folder_excludes(excluded, resolved)
        # Git ignores untracked files only: a committed file under an ignored pattern is linted,
        # and so is a folder holding one (its untracked files stay ignored).
        ignored_folder = tracked_only
        if reason is None and (tracked_only or _ignored(resolved, is_dir, ignores)):
            if _tracked(resolved, is_dir):
                ignored_folder = is_dir
            else:
                reason = ".gitignore"
        if reason is not None:
            result.skipped[reason] += 1
        elif is_dir:
            _walk(path, resolved, inner, included, ignores, found, result, ignored_folder)
        else:
            found.add(path)
            result.resolved[path] = resolved


def _source_folder_excludes(excluded, folder: Path):
    """Below a committed ``dist``/``build`` folder, the default excludes apply to
    the path inside it only (its ``__pycache__`` stays out, its files do not)."""
    def inner(candidate: Path) -> Optional[str]:
        reason = excluded(candidate)
        inside = _relative_part(candidate, folder)
        if reason == DEFAULT_EXCLUDE_ORIGIN and inside and not any(
                path_matches(inside, pattern) for pattern in DEFAULT_EXCLUDE):
            return None
        return reason
    return inner


def _relative_part(resolved: Path, resolved_base: Path) -> str:
    """``resolved`` relative to ``resolved_base`` ("" when outside it); both resolved."""
    try:
        return resolved.relative_to(resolved_base).as_posix()
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


def launcher_files(root: Path, settings: Settings, walked: Iterable[Path] = ()) -> list[Path]:
    """The shell launchers of the project (``*.sh``, excludes and .gitignore applied
    as for Python files), and of the folders named on the command line (as their
    Python files are): the project's facts read which scripts they run with one
    GPU visible per process."""
    folders = [str(folder) for folder in (root, *walked) if Path(folder).is_dir()]
    if not folders:
        return []
    launchers = replace(settings, include=("*.sh",), extend_include=())
    found = {os.path.abspath(path): path for path in discover(folders, launchers).files}
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
