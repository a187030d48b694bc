"""Memory held by autograd: saved-tensor tracking on CPU, memory_allocated on CUDA,
and a monitor that fails when memory grows monotonically and linearly over steps."""

from __future__ import annotations

import gc
import weakref
from typing import Iterable

import torch

from ddplint.runtime.growth import linear_growth


class _Held:
    """Weak-referenceable box around a saved tensor: dies when autograd frees the graph."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor


class SavedTensorTracker:
    """Counts tensors that autograd saved for backward and that are still alive.

    Inside the ``with`` block every saved tensor is stored (detached) in a weak-referenceable
    holder; the graph keeps the holder alive exactly as long as it would keep the tensor.
    Storages of ``ignore`` tensors (the model's parameters) are not counted: they live anyway.
    """

    def __init__(self, ignore: Iterable[torch.Tensor] = ()):
        self._ignore: set[int] = set()
        self._live: "weakref.WeakSet[_Held]" = weakref.WeakSet()
        self._hooks = None
        self.add_ignored(ignore)

    def add_ignored(self, tensors: Iterable[torch.Tensor]) -> None:
        """Stop counting these tensors' storages (parameters known only after entering)."""
        self._ignore.update(t.untyped_storage().data_ptr() for t in tensors)

    def __enter__(self) -> "SavedTensorTracker":
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)

    def _pack(self, t: torch.Tensor) -> _Held:
        held = _Held(t.detach())
        self._live.add(held)
        return held

    @staticmethod
    def _unpack(held: _Held) -> torch.Tensor:
        return held.tensor

    def live_bytes(self, generation: int = 2) -> int:
        """Bytes of live saved tensors, after a garbage collection of ``generation``
        (a full one costs ~0.1 s with torch loaded; graphs die by reference counting)."""
        gc.collect(generation)
        seen: set[int] = set()
        total = 0
        for held in list(self._live):
            storage = held.tensor.untyped_storage()
            ptr = storage.data_ptr()
            if ptr in self._ignore or ptr in seen:
                continue
            seen.add(ptr)
            total += storage.nbytes()
        return total

    def live_count(self) -> int:
        gc.collect()
        return len(self._live)


def count_graph_nodes(values: Iterable[object]) -> int:
    """Autograd nodes reachable from the tensors in ``values`` (the graph they keep alive)."""
    seen: set[int] = set()
    stack = [v.grad_fn for v in values if isinstance(v, torch.Tensor) and v.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        stack.extend(fn for fn, _ in node.next_functions if fn is not None)
    return len(seen)


class MemoryGrowthError(AssertionError):
    pass


class MemoryGrowthMonitor:
    """Records memory once per step; fails when it grows monotonically and linearly.

    On CUDA it records ``torch.cuda.memory_allocated()``; on CPU the bytes of tensors that
    autograd saved inside the ``with`` block and that are still alive.

        with MemoryGrowthMonitor(steps=8) as mon:
            for x in batches:
                outputs.append(model(x).sum())   # leaks the graph
                mon.step()
        # -> MemoryGrowthError: memory grew on every one of the last 8 steps, +4096 bytes/step ...
    """

    def __init__(self, steps: int = 8, device: str | torch.device | None = None,
                 min_slope_bytes: float = 1.0, min_r2: float = 0.95,
                 ignore: Iterable[torch.Tensor] = ()):
        if steps < 3:
            raise ValueError("steps must be at least 3 to call growth linear")
        self.window = steps
        self.device = torch.device(device) if device is not None else (
            torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
        self.min_slope = min_slope_bytes
        self.min_r2 = min_r2
        self.values: list[int] = []
        self._tracker = SavedTensorTracker(ignore) if self.device.type == "cpu" else None

    def __enter__(self) -> "MemoryGrowthMonitor":
        if self._tracker:
            self._tracker.__enter__()
        return self

    def __exit__(self, exc_type, *rest) -> None:
        if self._tracker:
            self._tracker.__exit__(exc_type, *rest)
        if exc_type is None:
            self.check()

    def current(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.memory_allocated(self.device)
        return self._tracker.live_bytes()

    def step(self, value: int | None = None) -> int:
        self.values.append(self.current() if value is None else value)
        return self.values[-1]

    def growth(self) -> tuple[float, float] | None:
        """(slope in bytes/step, R^2) of the last ``steps`` values, if they rise every step."""
        return linear_growth(self.values, self.window, self.min_slope, self.min_r2)

    def check(self) -> None:
        found = self.growth()
        if found is None:
            return
        slope, r2 = found
        tail = self.values[-self.window:]
        what = "CUDA allocated" if self.device.type == "cuda" else "autograd saved-tensor"
        raise MemoryGrowthError(
            f"{what} memory grew on every one of the last {self.window} steps, linearly "
            f"(R^2={r2:.3f}): +{slope:,.0f} bytes/step, from {tail[0]:,} to {tail[-1]:,} bytes. "
            "Something keeps a reference per step (e.g. a loss appended with its graph).")
