"""The bootstrap folder that goes first on the ranks' PYTHONPATH.

It holds one file, ``sitecustomize.py``, which Python's ``site`` module imports at start-up
in every process that inherits the environment: torchrun's workers, the ranks an
``mp.spawn`` script starts, their DataLoader workers.  It boots the instrumentation
(``rankside.boot``), then runs the ``sitecustomize`` that it shadows, if the environment
has one, so the user's own start-up customisation still happens.
"""

from __future__ import annotations

from pathlib import Path

import ddplint

_TEMPLATE = '''\
"""Written by `ddplint smoke`: instruments this process from outside the user's script."""
import importlib.machinery as _machinery
import importlib.util as _util
import os as _os
import sys as _sys


def _boot():
    try:
        from ddplint.runtime.smoke import rankside
    except ImportError:  # ddplint runs from a checkout that is not installed here
        _sys.path.append({ddplint_root!r})
        from ddplint.runtime.smoke import rankside
    rankside.boot()


def _run_shadowed_sitecustomize():
    here = _os.path.dirname(_os.path.abspath(__file__))
    rest = [p for p in _sys.path if _os.path.abspath(p or ".") != here]
    spec = _machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = _util.module_from_spec(spec)
        spec.loader.exec_module(module)


try:
    _boot()
except Exception as _error:
    print(f"ddplint smoke: could not instrument this process: {{_error!r}}", file=_sys.stderr)
_run_shadowed_sitecustomize()
'''


def write_bootstrap(folder: Path) -> Path:
    """Create ``folder/sitecustomize.py``; returns ``folder`` (to prepend to PYTHONPATH)."""
    folder.mkdir(parents=True, exist_ok=True)
    ddplint_root = str(Path(ddplint.__file__).resolve().parents[1])
    (folder / "sitecustomize.py").write_text(_TEMPLATE.format(ddplint_root=ddplint_root), encoding="utf-8")
    return folder
