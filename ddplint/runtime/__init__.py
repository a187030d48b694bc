"""Runtime half of ddplint: probes that measure each rule's effect, and test helpers.

Importing this package is cheap: torch and the helper modules load on first use
(module ``__getattr__``), so ``import ddplint.runtime`` never pulls torch in.

    from ddplint.runtime import run_ranks, assert_ddp_matches_single_process
"""

from __future__ import annotations

import importlib

# public name -> submodule that defines it
_EXPORTS = {
    "run_ranks": "ranks",
    "RankFailure": "ranks",
    "free_port": "ranks",
    "assert_ddp_matches_single_process": "equivalence",
    "validate_dataloader_sync": "dataloader",
    "DataLoaderSyncError": "dataloader",
    "collective_watchdog": "watchdog",
    "CollectiveHangError": "watchdog",
    "MemoryGrowthMonitor": "memory",
    "MemoryGrowthError": "memory",
    "SavedTensorTracker": "memory",
    "CommCounter": "comm",
    "StepProfiler": "profiler",
    "scaling_efficiency": "profiler",
    "run_confirm": "confirm",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ddplint.runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # cache: __getattr__ runs once per name
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
