"""Event files: what a rank tells the parent, one JSON object per line.

Each process writes ``events-<pid>.jsonl`` in the run folder, line-buffered, so that the
parent can read it while the run goes on and still has everything up to the last line
when the process is killed.  Every event has ``ev`` (its kind) and ``t`` (wall-clock
time, comparable across the ranks and the parent).  No torch here.
"""

from __future__ import annotations

import json
import os
import re
import sys
import sysconfig
import threading
import time
import traceback
from pathlib import Path

# What a failed collective says, on gloo and NCCL: the peer is gone or the wait timed out.
_TIMEOUT_RE = re.compile(r"timed?\s*out|timeout|deadline", re.I)
_PEER_LOST_RE = re.compile(r"connection (closed|reset)|closed by peer|broken pipe|"
                           r"socket|abort|NCCL (error|communicator)|ProcessGroup.*(shut|destroy)", re.I)
_COMM_TYPES = ("DistBackendError", "DistNetworkError", "DistStoreError")
_BACKEND_RE = re.compile(r"gloo|nccl|ProcessGroup|c10d", re.I)


class EventFile:
    """Appends events for this process; silently inert in a forked child (another pid)."""

    _instance: "EventFile | None" = None

    def __init__(self, path: Path) -> None:
        self.pid = os.getpid()
        self.path = path
        self._lock = threading.Lock()
        self._file = open(path, "a", buffering=1, encoding="utf-8")

    @classmethod
    def for_process(cls, run_dir: str) -> "EventFile":
        if cls._instance is None or cls._instance.pid != os.getpid():
            cls._instance = cls(Path(run_dir) / f"events-{os.getpid()}.jsonl")
        return cls._instance

    def emit(self, ev: str, **fields) -> None:
        if os.getpid() != self.pid:
            return  # a DataLoader worker forked from a rank: not a rank
        line = json.dumps({"ev": ev, "t": time.time(), **fields}, default=str)
        with self._lock:
            self._file.write(line + "\n")


def classify_failure(exc: BaseException) -> str | None:
    """'timeout', 'peer-lost' or 'backend' (another backend error, e.g. mismatched
    collectives) when ``exc`` is a failed collective; None for the user's own errors."""
    text = f"{type(exc).__name__}: {exc}"
    from_backend = type(exc).__name__ in _COMM_TYPES or _BACKEND_RE.search(text)
    if not from_backend:
        return None
    if _TIMEOUT_RE.search(text):
        return "timeout"
    return "peer-lost" if _PEER_LOST_RE.search(text) else "backend"


def error_fields(exc: BaseException) -> dict:
    frames = traceback.extract_tb(exc.__traceback__)
    site = next((f for f in reversed(frames) if is_user_file(f.filename)), None)
    return {
        "type": type(exc).__name__,
        "message": str(exc).strip().splitlines()[0][:500] if str(exc).strip() else "",
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-8000:],
        "site": [site.filename, site.lineno] if site else None,
        "failure": classify_failure(exc),
    }


# ------------------------------------------------------------------ where in the user's code

def _folder(path) -> str:
    return str(path).rstrip(os.sep) + os.sep


_PATHS = sysconfig.get_paths()
_STDLIB = tuple({_folder(_PATHS[k]) for k in ("stdlib", "platstdlib") if _PATHS.get(k)})
_INSTALLED = tuple({_folder(_PATHS[k]) for k in ("purelib", "platlib") if _PATHS.get(k)})
_DDPLINT = _folder(Path(__file__).resolve().parents[2])
_torch_dir: str | None = None


def is_user_file(filename: str) -> bool:
    """False for torch, ddplint and the standard library (installed packages are the user's)."""
    global _torch_dir
    if filename.startswith("<"):
        return False
    if _torch_dir is None and "torch" in sys.modules:
        _torch_dir = _folder(Path(sys.modules["torch"].__file__).resolve().parent)
    if (_torch_dir and filename.startswith(_torch_dir)) or filename.startswith(_DDPLINT):
        return False
    return not filename.startswith(_STDLIB) or filename.startswith(_INSTALLED)


def user_site(skip: int = 2) -> list | None:
    """[file, line] of the innermost frame of the caller's stack that is the user's code."""
    frame = sys._getframe(skip)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return [frame.f_code.co_filename, frame.f_lineno]
        frame = frame.f_back
    return None
