"""Spawn ranks (or join the running process group) and fail fast when one rank raises.

``run_ranks(fn, world_size)`` runs ``fn(rank, world_size, *args)`` on every rank and returns
the per-rank return values, ordered by rank.  When one rank raises, its peers are stopped
within seconds (the failing rank exits and drops its connections; the parent kills ranks
that are still alive after a short grace period), and the caller gets the original
exception with the rank's traceback attached as its ``__cause__``.  A crashing rank never
leaves its peers waiting for the collective timeout.

Under ``torchrun`` (RANK, WORLD_SIZE and MASTER_ADDR in the environment) or inside an
already initialised process group, ``run_ranks`` does not spawn: it runs ``fn`` in this
process, as this rank, and all-gathers the results.
"""

from __future__ import annotations

import datetime
import os
import pickle
import queue as queue_mod
import socket
import time
import traceback
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# How long a failed rank's peers get to fail by themselves before the parent kills them.
FAIL_GRACE_S = 3.0


class RankFailure(RuntimeError):
    """A rank failed in a way that cannot be re-raised as its original exception."""

    def __init__(self, message: str, rank: int | None = None):
        super().__init__(message)
        self.rank = rank

    def __reduce__(self):
        return (type(self), (str(self), self.rank))


class RemoteTraceback(Exception):
    """Carries the formatted traceback of a rank; shown as the re-raised error's cause."""

    def __init__(self, tb: str):
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return self.tb


def free_port() -> int:
    """A TCP port that was free a moment ago (bind port 0 and let the OS choose)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launched_by_torchrun() -> bool:
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR"))


def joins_existing_group() -> bool:
    """True when run_ranks should run in-process instead of spawning."""
    return dist.is_available() and (dist.is_initialized() or launched_by_torchrun())


def default_backend(device: str) -> str:
    return "nccl" if device == "cuda" else "gloo"


def run_ranks(
    fn: Callable[..., Any],
    world_size: int = 2,
    backend: str | None = None,
    timeout: float = 60.0,
    args: Sequence[Any] = (),
    device: str = "cpu",
    wall_timeout: float = 600.0,
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` ranks; return their results.

    ``fn`` must be picklable (a module-level function).  ``timeout`` bounds every collective
    of the process group, ``wall_timeout`` the whole run.  ``backend`` defaults to NCCL for
    ``device="cuda"`` and gloo otherwise.
    """
    backend = backend or default_backend(device)
    if joins_existing_group():
        return _run_in_process(fn, backend, timeout, args)
    return _run_spawned(fn, world_size, backend, timeout, tuple(args), device, wall_timeout)


# ---------------------------------------------------------------- joining torchrun's group


def _run_in_process(fn, backend, timeout, args) -> list[Any]:
    if not dist.is_initialized():
        _init_from_env(backend, timeout)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    try:
        result = fn(rank, world_size, *args)
    except BaseException:
        # Drop this rank's connections so the peers fail now, not at their timeout.
        _abort_quietly()
        raise
    gathered: list[Any] = [None] * world_size
    dist.all_gather_object(gathered, result)
    return gathered


def _init_from_env(backend: str, timeout: float) -> None:
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")  # flight recorder for diagnoses
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))


def _abort_quietly() -> None:
    try:
        dist.distributed_c10d._abort_process_group()
    except Exception:  # already gone, or a backend without abort
        pass


# ---------------------------------------------------------------- spawning our own ranks


def _child(fn, rank, world_size, backend, port, timeout, args, results, device):
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
        WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world_size),
    )
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
    # Ranks share the machine's cores; oversubscription makes timings meaningless.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    ok = False
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        dist.init_process_group(
            backend, rank=rank, world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout),
        )
        result = fn(rank, world_size, *args)
        # Plain pickle to bytes: torch's queue would pass tensors as shared-memory handles,
        # which die with this process before the parent reads them.
        results.put(("ok", rank, pickle.dumps(result)))
        ok = True
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the caller
        results.put(("err", rank, _pickle_or_none(exc), traceback.format_exc()))
    finally:
        results.close()
        results.join_thread()  # the result is out before any teardown can go wrong
    if not ok:
        # Exiting drops every connection: gloo peers fail at once instead of timing out.
        os._exit(1)
    try:
        dist.destroy_process_group()
    except Exception:
        pass  # teardown errors after the result was delivered do not matter


def _pickle_or_none(exc: BaseException) -> bytes | None:
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)
        return data
    except Exception:
        return None


def _run_spawned(fn, world_size, backend, timeout, args, device, wall_timeout) -> list[Any]:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=_child, args=(fn, r, world_size, backend, port, timeout, args, results, device))
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    try:
        outcome = _collect(procs, results, world_size, wall_timeout)
    finally:
        _stop(procs)
    return outcome


def _collect(procs, results, world_size, wall_timeout) -> list[Any]:
    values: dict[int, Any] = {}
    failures: list[tuple[int, bytes | None, str]] = []
    first_failure_at: float | None = None
    deadline = time.monotonic() + wall_timeout
    while len(values) + len(failures) < world_size:
        try:
            msg = results.get(timeout=0.2)
        except queue_mod.Empty:
            msg = None
        if msg is not None:
            if msg[0] == "ok":
                values[msg[1]] = pickle.loads(msg[2])
            else:
                failures.append((msg[1], msg[2], msg[3]))
                first_failure_at = first_failure_at or time.monotonic()
            continue
        reported = set(values) | {f[0] for f in failures}
        for rank, p in enumerate(procs):
            if rank not in reported and p.exitcode is not None and not _queue_may_hold(results):
                failures.append((rank, None, f"rank {rank} exited with code {p.exitcode} without a result"))
                first_failure_at = first_failure_at or time.monotonic()
        now = time.monotonic()
        if first_failure_at is not None and now - first_failure_at > FAIL_GRACE_S:
            break  # peers of a failed rank had their chance; _stop kills them
        if now > deadline:
            missing = [r for r in range(world_size) if r not in reported]
            raise TimeoutError(f"run_ranks: ranks {missing} did not finish within {wall_timeout:.0f} s")
    if failures:
        _raise_first(failures, world_size)
    return [values[r] for r in range(world_size)]


def _queue_may_hold(results) -> bool:
    try:
        return not results.empty()
    except Exception:
        return False


def _raise_first(failures, world_size) -> None:
    rank, blob, tb = failures[0]
    others = [r for r, _, _ in failures[1:]]
    note = f"raised on rank {rank} of {world_size}"
    if others:
        note += f"; ranks {others} failed after it"
    exc = pickle.loads(blob) if blob is not None else None
    if not isinstance(exc, BaseException):
        raise RankFailure(f"{note}:\n{tb}", rank=rank)
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    exc.rank = rank  # type: ignore[attr-defined]
    raise exc from RemoteTraceback(tb)


def _stop(procs) -> None:
    deadline = time.monotonic() + 2.0
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=2.0)
        if p.is_alive():
            p.kill()
            p.join(timeout=2.0)
