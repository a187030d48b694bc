"""Per-rank bookkeeping of a smoke run: steps, collectives, data, memory, FLOPs.

One ``Recorder`` per rank, created when the rank's process group comes up (see
``patches``).  The patched torch functions report to it; at each optimizer step boundary
it writes a ``step`` event with what the step did, and after ``--steps`` steps it stops
the rank cleanly.  Every collective is written as it is issued (``coll``), so a rank that
hangs or is killed leaves the collective it was waiting in as its last word.
"""

from __future__ import annotations

import atexit
import datetime
import os
import threading
import time
from dataclasses import dataclass, field

from ddplint.runtime.smoke.events import EventFile, error_fields

_current: "Recorder | None" = None


def current() -> "Recorder | None":
    return _current


def start(**kwargs) -> "Recorder":
    global _current
    _current = Recorder(**kwargs)
    atexit.register(_current.exited)
    return _current


@dataclass
class _Step:
    """What happened since the previous optimizer step."""

    t0: float | None = None  # perf_counter at the step's first activity
    phases: dict = field(default_factory=lambda: {"data": 0.0, "forward": 0.0, "backward": 0.0,
                                                   "optimizer": 0.0})
    comm: list = field(default_factory=list)  # (start, end) of each finished collective
    cuda_comm: list = field(default_factory=list)  # (start, end) CUDA events of bucket all-reduces
    rounds: dict = field(default_factory=dict)  # DDP model -> all-reduce rounds (one per synced backward)
    buckets: int = 0
    bucket_bytes: int = 0
    collectives: dict = field(default_factory=dict)  # op -> count (user collectives)
    coll_bytes: int = 0
    batches: dict = field(default_factory=dict)  # loader label -> batches
    samples: int = 0


class Recorder:
    def __init__(self, events: EventFile, rank: int, world_size: int, steps_limit: int,
                 timeout_s: float, device: str, destroy) -> None:
        self.events = events
        self.rank, self.world_size = rank, world_size
        self.steps_limit, self.timeout_s = steps_limit, timeout_s
        self.device = device
        self._destroy = destroy  # the real destroy_process_group
        self.destroyed = False
        self.steps = 0
        self.seq: dict[str, int] = {}  # group -> collectives issued on it
        self.in_flight: dict[int, dict] = {}
        self.step = _Step()
        self.primary_optimizer: int | None = None
        self.optimizer_t0: float | None = None
        self.backward_site: list | None = None
        self._lock = threading.Lock()
        self._next_id = 0
        self.memory = MemorySampler(device)
        self.flops = FlopWindow()
        self.models = 0  # DDP models built on this rank

    def new_model(self, parameters) -> int:
        """A DDP model was built: its index, and its parameters are not autograd's memory."""
        self.memory.ignore(parameters)
        self.models += 1
        return self.models - 1

    # ---------------------------------------------------------------- activity

    def touch(self) -> None:
        """The step in progress started doing something (data, forward, backward)."""
        if self.step.t0 is None:
            self.step.t0 = time.perf_counter()

    def phase(self, name: str, seconds: float) -> None:
        self.step.phases[name] = self.step.phases.get(name, 0.0) + seconds

    def batch(self, label: str, samples: int, seconds: float) -> None:
        self.step.batches[label] = self.step.batches.get(label, 0) + 1
        self.step.samples += samples
        self.phase("data", seconds)

    def loader(self, label: str, site, length: int | None) -> None:
        self.events.emit("loader", label=label, site=site, length=length, step=self.steps + 1)

    # ---------------------------------------------------------------- collectives

    def enter(self, op: str, group: str, nbytes: int, site, bucket: int | None = None,
              last: bool = False, model: int = 0) -> dict:
        """A collective is issued; returns the entry to pass to ``leave``.  ``bucket`` and
        ``last`` describe a DDP gradient bucket of the ``model``-th DDP model."""
        with self._lock:
            seq = self.seq[group] = self.seq.get(group, 0) + 1
            self._next_id += 1
            entry = {"id": self._next_id, "seq": seq, "group": group, "op": op, "bytes": nbytes,
                     "site": site, "step": self.steps + 1, "bucket": bucket,
                     "t": time.time(), "start": time.perf_counter()}
            self.in_flight[entry["id"]] = entry
            if bucket is not None:
                self.step.buckets += 1
                self.step.bucket_bytes += nbytes
                if last:
                    self.step.rounds[model] = self.step.rounds.get(model, 0) + 1
            else:
                self.step.collectives[op] = self.step.collectives.get(op, 0) + 1
                self.step.coll_bytes += nbytes
        self.events.emit("coll", **{k: v for k, v in entry.items() if k not in ("id", "start")})
        return entry

    def leave(self, entry: dict, cuda_events=None) -> None:
        """The collective finished.  ``cuda_events``: (start, end) recorded on the device, for
        NCCL, whose futures complete when the work is queued rather than done."""
        with self._lock:
            self.in_flight.pop(entry["id"], None)
            self.step.comm.append((entry["start"], time.perf_counter()))
            if cuda_events is not None:
                self.step.cuda_comm.append(cuda_events)

    # ---------------------------------------------------------------- optimizer steps

    def optimizer_started(self, optimizer) -> None:
        if self.primary_optimizer is None:
            # With several optimizers (a GAN), the first one to step marks the boundaries.
            self.primary_optimizer = id(optimizer)
        if id(optimizer) == self.primary_optimizer:
            self.touch()
            self.optimizer_t0 = time.perf_counter()

    def optimizer_finished(self, optimizer) -> None:
        if id(optimizer) != self.primary_optimizer:
            return
        if self.optimizer_t0 is not None:
            self.phase("optimizer", time.perf_counter() - self.optimizer_t0)
        self._end_step()
        if self.steps >= self.steps_limit:
            self.stop()

    def _end_step(self) -> None:
        if self.memory.cuda:
            import torch

            torch.cuda.synchronize()  # the step's kernels belong to the step's wall time
        now = time.perf_counter()
        step = self.step
        self.steps += 1
        t0 = step.t0 if step.t0 is not None else now
        with self._lock:
            comm = _cuda_union_seconds(step.cuda_comm) if step.cuda_comm else union_seconds(step.comm, t0, now)
            issued = sum(self.seq.values())
        record = {
            "n": self.steps, "wall_s": now - t0, "comm_s": comm, **{f"{k}_s": v for k, v in step.phases.items()},
            # Rounds of the model that synced most: two models (GAN, teacher and student)
            # that each sync once are fine; one model that syncs twice is accumulation.
            "rounds": max(step.rounds.values(), default=0), "rounds_by_model": step.rounds,
            "buckets": step.buckets, "bucket_bytes": step.bucket_bytes,
            "collectives": step.collectives, "coll_bytes": step.coll_bytes, "batches": step.batches,
            "samples": step.samples, "issued": issued, **self.memory.sample(),
        }
        if self.steps == 1:
            self.events.emit("flops", **self.flops.end())
        self.events.emit("step", **record)
        # The next step starts now: the sampling above is ours, not the script's time.
        self.step = _Step(t0=time.perf_counter())

    # ---------------------------------------------------------------- the end

    def stop(self) -> None:
        """--steps reached: wait (bounded) for the other ranks to get here too, destroy the
        process group, and leave the user's script through SystemExit(0)."""
        t0 = time.time()
        peers_ok = self._stop_barrier()
        self.events.emit("stop", steps=self.steps, waited_s=time.time() - t0, peers_ok=peers_ok)
        try:
            self._destroy()
        except Exception:
            pass  # the group may be broken after a peer failed; exiting frees it anyway
        self.destroyed = True
        raise SystemExit(0)

    def _stop_barrier(self) -> bool:
        # Through the store, not a collective: a rank that diverged must not pair with it.
        from torch.distributed import distributed_c10d as c10d

        try:
            store = c10d._get_default_store()
            if store.add("ddplint/smoke/stop", 1) == self.world_size:
                store.set("ddplint/smoke/stop/all", "1")
            store.wait(["ddplint/smoke/stop/all"], datetime.timedelta(seconds=self.timeout_s))
            return True
        except Exception:
            return False

    def error(self, exc: BaseException, spawn_index: int | None = None) -> None:
        now = time.perf_counter()
        with self._lock:
            waiting = [{"seq": e["seq"], "group": e["group"], "op": e["op"], "site": e["site"],
                        "step": e["step"], "bucket": e["bucket"], "waited_s": now - e["start"]}
                       for e in self.in_flight.values()]
        self.events.emit("error", rank=self.rank, steps=self.steps, in_flight=waiting,
                         flight_recorder=flight_recorder_tail(), **error_fields(exc))

    def exited(self) -> None:
        self.events.emit("exit", steps=self.steps, issued=sum(self.seq.values()))


def union_seconds(intervals, lo: float, hi: float) -> float:
    """Length of the union of (start, end) intervals, clipped to [lo, hi]: bucket
    all-reduces overlap each other and backward, so their durations do not add up."""
    total, reach = 0.0, lo
    for start, end in sorted(intervals):
        start, end = max(start, reach), min(end, hi)
        if end > start:
            total += end - start
            reach = end
    return total


def _cuda_union_seconds(pairs) -> float:
    """``union_seconds`` of intervals given as CUDA events (already synchronised)."""
    base = pairs[0][0]
    intervals = [(base.elapsed_time(start) / 1e3, base.elapsed_time(end) / 1e3) for start, end in pairs]
    return union_seconds(intervals, float("-inf"), float("inf"))


def flight_recorder_tail(n: int = 4) -> list:
    """This rank's last flight-recorder entries (collective name, sequence id, state)."""
    try:
        import pickle

        import torch

        trace = pickle.loads(torch._C._distributed_c10d._dump_fr_trace())
    except Exception:
        return []
    return [{"name": e.get("profiling_name"), "seq": e.get("collective_seq_id"), "state": e.get("state"),
             "group": str(e.get("process_group", ("",))[0])} for e in trace.get("entries", [])[-n:]]


class MemorySampler:
    """Memory at a step boundary: CUDA allocated/peak on a GPU; on CPU the bytes autograd
    holds in saved tensors (the reliable leak signal) plus the process RSS (noisy)."""

    def __init__(self, device: str) -> None:
        import torch

        self.cuda = device == "cuda" and torch.cuda.is_available()
        self.kind = "cuda-allocated" if self.cuda else "saved-tensors"
        self.tracker = None
        if not self.cuda:
            from ddplint.runtime.memory import SavedTensorTracker

            self.tracker = SavedTensorTracker().__enter__()

    def ignore(self, tensors) -> None:
        if self.tracker is not None:
            self.tracker.add_ignored(tensors)

    def sample(self) -> dict:
        out = {"rss": _rss_bytes()}
        if self.cuda:
            import torch

            out["mem"] = torch.cuda.memory_allocated()
            out["peak"] = torch.cuda.max_memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        else:
            out["mem"] = self.tracker.live_bytes(generation=1)
        return out


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class FlopWindow:
    """FLOPs of the first optimizer step, counted by torch.utils.flop_counter."""

    def __init__(self) -> None:
        self.mode = None
        self.tried = False
        self.problem = ""

    def begin(self) -> None:
        if self.tried:
            return
        self.tried = True
        try:
            from torch.utils.flop_counter import FlopCounterMode

            self.mode = FlopCounterMode(display=False)
            self.mode.__enter__()
        except Exception as exc:
            self.mode, self.problem = None, f"{type(exc).__name__}: {exc}"

    def end(self) -> dict:
        if self.mode is None:
            return {"flops": None, "problem": self.problem or "no forward pass of a DDP model in step 1"}
        mode, self.mode = self.mode, None
        try:
            mode.__exit__(None, None, None)
            return {"flops": int(mode.get_total_flops()), "problem": ""}
        except Exception as exc:
            return {"flops": None, "problem": f"{type(exc).__name__}: {exc}"}
