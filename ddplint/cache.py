"""A content-hash cache of lint results and project facts (``.ddplint_cache/``).

Keys:
- a file's **facts** (project analysis summary): its bytes, its displayed path
  and ddplint's version;
- a file's **result**: its bytes, its displayed path, ddplint's version, the
  effective configuration (selected rules, per-file ignores, severities) and a
  digest of the whole project's facts (so a change elsewhere that changes what
  the project knows re-lints every file, and an edit that changes no fact does
  not).

Each entry is one file written to a temporary name and renamed into place, so
two runs can share the cache; an unreadable or corrupt entry counts as a miss
and is rewritten. Results with internal errors are never stored.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from dataclasses import fields
from pathlib import Path
from typing import Any, Optional

from ddplint import __version__
from ddplint.diagnostics import CellLine, Diagnostic, FileResult

CACHE_DIR_NAME = ".ddplint_cache"
# The layout of a stored result; part of its key, so entries written before a
# change of layout (fixes, suppressed findings) are never read as the new one.
RESULT_FORMAT = "3"


def digest(*parts: bytes | str) -> str:
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(part.encode("utf-8") if isinstance(part, str) else part)
        hasher.update(b"\0")
    return hasher.hexdigest()


def project_digest(facts_keys: list[tuple[str, str]]) -> str:
    """Digest of the whole project's facts from (displayed path, facts key) pairs:
    facts are a function of their key, so the facts themselves are not needed."""
    return digest(*sorted(f"{shown}:{key}" for shown, key in facts_keys))


class Cache:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory) / f"v{__version__}"
        self.hits = 0
        self.misses = 0
        self._prepared = False

    # ------------------------------------------------------------------ keys
    @staticmethod
    def content_digest(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    @staticmethod
    def facts_key(content: str, display: str) -> str:
        """``content`` is ``content_digest(file bytes)``."""
        from ddplint.screen.facts import FACTS_VERSION
        from ddplint.screen.manifest import screens_digest

        return digest("facts", __version__, FACTS_VERSION, screens_digest(), display, content)

    @staticmethod
    def result_key(content: str, display: str, settings_fingerprint: str, project_digest: str) -> str:
        return digest("result", __version__, RESULT_FORMAT, display, settings_fingerprint, project_digest, content)

    # ------------------------------------------------------------------ results
    def load_result(self, key: str, display: str) -> Optional[FileResult]:
        raw = self._read(key, ".json")
        if raw is None:
            return None
        try:
            stored = json.loads(raw)
            result = FileResult(
                display,
                diagnostics=[_diagnostic_from_json(item) for item in stored["diagnostics"]],
                parsed=stored["parsed"],
                screened=stored.get("screened", False),
                source_lines={int(line): text for line, text in stored["source_lines"].items()},
                cells={int(line): CellLine(*where) for line, where in stored["cells"].items()},
                suppressed=[_diagnostic_from_json(item) for item in stored["suppressed"]],
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            self.misses += 1
            return None  # corrupt: the caller lints and rewrites it
        self.hits += 1
        return result

    def store_result(self, key: str, result: FileResult) -> None:
        if result.internal_errors:
            return
        payload = {
            "diagnostics": [_diagnostic_to_json(d) for d in result.diagnostics],
            "suppressed": [_diagnostic_to_json(d) for d in result.suppressed],
            "parsed": result.parsed,
            "screened": result.screened,
            "source_lines": {str(line): text for line, text in result.source_lines.items()},
            "cells": {str(line): [where.cell, where.line, where.file_line] for line, where in result.cells.items()},
        }
        self._write(key, ".json", json.dumps(payload).encode("utf-8"))

    # ------------------------------------------------------------------ facts
    def load_facts(self, key: str) -> tuple[bool, Any]:
        """(found, facts). Facts may legitimately be None (nothing to say)."""
        raw = self._read(key, ".facts")
        if raw is None:
            return False, None
        try:
            return True, pickle.loads(raw)
        except Exception:  # corrupt or from an incompatible class layout
            return False, None

    def store_facts(self, key: str, facts: Any) -> None:
        try:
            payload = pickle.dumps(facts, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            return
        self._write(key, ".facts", payload)

    # ------------------------------------------------------------------ files
    def _path(self, key: str, suffix: str) -> Path:
        return self.directory / key[:2] / (key + suffix)

    def _read(self, key: str, suffix: str) -> Optional[bytes]:
        try:
            return self._path(key, suffix).read_bytes()
        except OSError:
            return None

    def _write(self, key: str, suffix: str, payload: bytes) -> None:
        path = self._path(key, suffix)
        try:
            self._prepare()
            path.parent.mkdir(parents=True, exist_ok=True)
            import tempfile  # only when writing (a warm run never does)

            handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(handle, "wb") as stream:
                stream.write(payload)
            os.replace(temporary, path)  # atomic: readers see the old entry or the new one
        except OSError:
            pass  # a read-only or full disk only costs speed

    def _prepare(self) -> None:
        if self._prepared:
            return
        root = self.directory.parent
        root.mkdir(parents=True, exist_ok=True)
        ignore = root / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# Created by ddplint\n*\n", encoding="utf-8")
        tag = root / "CACHEDIR.TAG"
        if not tag.exists():
            tag.write_text("Signature: 8a477f597d28d172789f06886806bc55\n# ddplint cache\n", encoding="utf-8")
        self._prepared = True


def _diagnostic_to_json(diagnostic: Diagnostic) -> dict:
    item = {field.name: getattr(diagnostic, field.name) for field in fields(Diagnostic)}
    item["fix"] = diagnostic.fix.to_json() if diagnostic.fix is not None else None
    return item


def _diagnostic_from_json(item: dict) -> Diagnostic:
    fix = item.get("fix")
    if fix is None:
        return Diagnostic(**{**item, "fix": None})
    from ddplint.fixes import Fix

    return Diagnostic(**{**item, "fix": Fix.from_json(fix)})
