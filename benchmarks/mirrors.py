"""Lay out fetched repository snapshots (the search tool's ``fetch`` puts their
git directories under /work/.mirror/owner+name/repo) as plain folders to lint.

Fetched code is never committed: the folders live under /tmp.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

MIRRORS = Path(os.environ.get("DDPLINT_MIRRORS", "/work/.mirror"))

# What a lint of the repository reads: Python files, shell launchers (which scripts run
# with one GPU per process), the files that mark or configure a project root, and
# .gitignore files (discovery honours them).
_WANTED_NAMES = ("pyproject.toml", "setup.py", "setup.cfg", ".ddplint.yaml", ".gitignore")


def lay_out_snapshot(name: str, commit: str, target: Path) -> Path:
    """Write the Python and project files of repository ``name`` at ``commit``
    from its fetched mirror into ``target`` and ``git init`` it (a checkout has
    ``.git`` at its root). Snapshots lack files of 4 MiB and more, so
    ``git archive`` cannot be used; missing blobs are skipped."""
    git_dir = MIRRORS / name.replace("/", "+") / "repo"
    if not git_dir.exists():
        raise FileNotFoundError(f"no mirror for {name} at {git_dir} (fetch it first)")
    if (git_dir / ".git").is_dir():  # some fetches leave a (bare-looking) work tree holding .git
        git_dir = git_dir / ".git"
    if (target / ".git").exists():
        return _tracked_like_a_checkout(target)
    git = ["git", f"--git-dir={git_dir}"]
    listing = subprocess.run([*git, "ls-tree", "-r", "-z", commit], capture_output=True, check=True).stdout
    wanted = []
    for entry in listing.decode("utf-8", "surrogateescape").split("\0"):
        if not entry:
            continue
        meta, path = entry.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind == "blob" and mode != "120000" and (path.endswith((".py", ".sh"))
                                                    or path.rsplit("/", 1)[-1] in _WANTED_NAMES):
            wanted.append((sha, path))
    batch = subprocess.run([*git, "cat-file", "--batch"], input="".join(f"{sha}\n" for sha, _ in wanted).encode(),
                           capture_output=True, check=True).stdout
    position = 0
    for sha, path in wanted:
        header_end = batch.index(b"\n", position)
        header = batch[position:header_end].split()
        position = header_end + 1
        if header[-1] == b"missing":
            continue
        size = int(header[2])
        destination = target / path
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(batch[position:position + size])
        position += size + 1
    subprocess.run(["git", "init", "-q", str(target)], check=True)
    return _tracked_like_a_checkout(target)


def _tracked_like_a_checkout(target: Path) -> Path:
    """Stage the laid-out Python files (ignore patterns or not: all came from the
    commit), so that git tracks them as in a real checkout (ddplint lints tracked
    files under .gitignore patterns)."""
    if not (target / ".git" / "index").exists():
        for pattern in ("*.py", "*.ipynb", "*.sh"):  # (one call each: a pattern matching nothing fails)
            subprocess.run(["git", "-C", str(target), "add", "-f", "--", pattern], check=False, capture_output=True)
    return target
