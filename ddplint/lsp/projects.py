"""Project facts for the editor: the project root of a document and the joined
facts of every file under it, with the editor's unsaved text for open documents.

The command line builds facts once per run (``ddplint.engine.build_project``);
a server lints the same project again on every pause in typing, so it keeps each
file's facts and rebuilds only those of files whose text changed (open
documents by content, the others by size and modification time), and joins them
again only when some facts changed.

File names are absolute paths: the same names the server gives ``lint_source``,
so that the project's answers about "this module" find it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ddplint.config import Settings
from ddplint.discovery import PathError, discover
from ddplint.notebooks import is_notebook, python_source
from ddplint.source import decode_source

ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".ddplint.yaml", ".git")


def project_root(path: Path) -> Path:
    """The nearest folder above ``path`` holding a project marker (DESIGN.md,
    "Project root"); the file's own folder when there is none."""
    folder = path.parent
    for candidate in (folder, *folder.parents):
        if any((candidate / marker).exists() for marker in ROOT_MARKERS):
            return candidate
    return folder


@dataclass
class _FileFacts:
    stamp: tuple  # ("disk", mtime_ns, size) or ("text", digest of the editor's text)
    facts: object  # ModuleFacts or None (the file does not parse)


@dataclass
class ProjectFacts:
    """The facts of one project root, kept between lints."""

    root: Path
    files: Optional[list[Path]] = None  # discovered files; None: walk again
    by_path: dict[str, _FileFacts] = field(default_factory=dict)
    project: object = None
    stamps: Optional[tuple] = None  # the stamps the current project was joined from

    def forget_files(self) -> None:
        """Files were created, deleted or excluded: walk the root again next time."""
        self.files = None

    def project_for(self, settings: Settings, open_texts: dict[str, str]):
        """The joined project; ``open_texts`` maps absolute paths to editor text."""
        from ddplint.screen.facts import summarize
        from ddplint.screen.project import Project

        if self.files is None:
            try:
                self.files = [path.resolve() for path in discover([str(self.root)], settings).files]
            except PathError:
                self.files = []
        names = {path.as_posix() for path in self.files} | {
            name for name in open_texts if Path(name).parent.is_relative_to(self.root)}
        stamps = []
        for name in sorted(names):
            stamp, source = self._stamp(name, open_texts.get(name))
            known = self.by_path.get(name)
            if known is None or known.stamp != stamp:
                if source is None:
                    source = self._read(name)
                known = _FileFacts(stamp, summarize(source, name) if source is not None else None)
                self.by_path[name] = known
            stamps.append((name, stamp))
        for gone in set(self.by_path) - names:
            del self.by_path[gone]
        if tuple(stamps) != self.stamps:
            self.project = Project([entry.facts for entry in self.by_path.values() if entry.facts is not None])
            self.stamps = tuple(stamps)
        return self.project

    @staticmethod
    def _stamp(name: str, text: Optional[str]) -> tuple[tuple, Optional[str]]:
        if text is not None:
            return ("text", hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()), (
                python_source(text.encode("utf-8")) if is_notebook(name) else text)
        try:
            status = Path(name).stat()
        except OSError:
            return ("missing",), None
        return ("disk", status.st_mtime_ns, status.st_size), None

    @staticmethod
    def _read(name: str) -> Optional[str]:
        try:
            data = Path(name).read_bytes()
        except OSError:
            return None
        return python_source(data) if is_notebook(name) else decode_source(data)[0]
