"""The part of the smoke instrumentation that runs in every Python process of a run.

The bootstrap's ``sitecustomize`` calls :func:`boot` at interpreter start.  Importing
torch here would change the user's import order (environment variables read at import,
start-up time of processes that never use torch), so :func:`boot` only arranges for
:mod:`ddplint.runtime.smoke.patches` to run right after the user's own ``import torch``
finishes, and records uncaught exceptions.  Everything it installs is inert until the
process initialises a process group: only ranks write telemetry.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback

ENV_DIR = "DDPLINT_SMOKE_DIR"        # the run folder: telemetry files go here
ENV_STEPS = "DDPLINT_SMOKE_STEPS"    # stop after this many optimizer steps
ENV_TIMEOUT = "DDPLINT_SMOKE_TIMEOUT"  # collective timeout, seconds
ENV_BACKEND = "DDPLINT_SMOKE_BACKEND"  # "gloo" when --device cpu forces it, else ""
ENV_DEVICE = "DDPLINT_SMOKE_DEVICE"    # cpu | cuda


def boot() -> None:
    if not os.environ.get(ENV_DIR):
        return
    sys.meta_path.insert(0, _AfterImport("torch", _torch_imported))
    sys.excepthook = _recording_excepthook(sys.excepthook)


class _AfterImport:
    """A one-shot meta path finder: lets the real finders find ``name``, then runs
    ``callback(module)`` when the module has finished executing."""

    def __init__(self, name: str, callback) -> None:
        self.name = name
        self.callback = callback

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        real_exec = spec.loader.exec_module
        callback = self.callback

        def exec_module(module):
            real_exec(module)
            callback(module)

        spec.loader.exec_module = exec_module
        return spec


def _torch_imported(torch_module) -> None:
    try:
        from ddplint.runtime.smoke import patches

        patches.install()
    except Exception:  # never break the user's `import torch`
        print("ddplint smoke: instrumentation failed; this process runs uninstrumented:\n"
              + traceback.format_exc(), file=sys.stderr)


def _recording_excepthook(previous):
    def hook(exc_type, exc, tb):
        record_exception(exc)
        previous(exc_type, exc, tb)

    return hook


def record_exception(exc: BaseException, spawn_index: int | None = None) -> None:
    """Write an ``error`` event for ``exc`` (uncaught on this rank). Safe before torch loads."""
    try:
        recorder_module = sys.modules.get("ddplint.runtime.smoke.recorder")
        if recorder_module is not None and recorder_module.current() is not None:
            recorder_module.current().error(exc, spawn_index)
            return
        from ddplint.runtime.smoke.events import EventFile, error_fields

        rank = os.environ.get("RANK")
        EventFile.for_process(os.environ[ENV_DIR]).emit(
            "error", rank=int(rank) if rank is not None else spawn_index, **error_fields(exc))
    except Exception:
        pass  # the exception itself is printed by the caller; telemetry is best effort
