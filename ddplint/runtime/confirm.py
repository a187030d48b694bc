"""``ddplint confirm``: run each rule's probe (pattern vs fix) and report the measured effect.

One session of ranks runs all the selected probes in order: spawned here (gloo on CPU,
NCCL on CUDA), or, under ``torchrun``, the ranks torchrun started.  Every probe gets a fresh
process group with a short timeout, so a probe that fails or hangs on one rank costs at most
that timeout and the next probe still runs.  Rank 0 prints the report before teardown.
"""

from __future__ import annotations

import datetime
import sys
import time
import traceback
from typing import IO

import torch
import torch.distributed as dist

import ddplint
from ddplint.runtime import probes
from ddplint.runtime.harness import (
    CONFIRMED, ERROR, NOT_APPLICABLE, NOT_CONFIRMED, ProbeContext, ProbeResult, not_applicable,
)
from ddplint.runtime.ranks import default_backend, joins_existing_group, run_ranks

PROBE_TIMEOUT_S = 30.0  # every probe's process group; hang probes use shorter ones


def run_confirm(rule_ids: list[str] | None, device: str = "auto", world_size: int = 2,
                steps: int | None = None, fmt: str = "text", stream: IO[str] = sys.stdout) -> int:
    """Run the probes of ``rule_ids`` (None: all) and print the report. Returns the exit code:
    0 every probe ran, 1 a verdict is "not confirmed", 2 an error (bad input, a probe failed)."""
    ids, unknown = probes.resolve(rule_ids)
    if unknown:
        print(f"ddplint confirm: unknown rule id(s): {', '.join(unknown)}; "
              f"known: {', '.join(probes.ALL)}", file=sys.stderr)
        return 2
    device_type, problem = _resolve_device(device)
    if problem:
        print(f"ddplint confirm: {problem}", file=sys.stderr)
        return 2
    if world_size < 1 or (steps is not None and steps < 1):
        print("ddplint confirm: --world-size and --steps must be positive", file=sys.stderr)
        return 2
    backend = default_backend(device_type)
    joined = joins_existing_group()
    t0 = time.monotonic()
    try:
        per_rank = run_ranks(_session, world_size=world_size, backend=backend,
                             timeout=PROBE_TIMEOUT_S * 2, args=(ids, device_type, steps))
    except Exception as exc:  # the session itself broke: report, do not hang
        print(f"ddplint confirm: the probe session failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    results = _merge(per_rank)
    meta = {
        "tool": {"name": "ddplint", "version": ddplint.__version__},
        "torch": torch.__version__,
        "device": device_type,
        "backend": backend,
        "world_size": len(per_rank),
        "launcher": "torchrun" if joined else "spawn",
        "wall_seconds": round(time.monotonic() - t0, 2),
    }
    code = exit_code(results)
    if not joined or dist.get_rank() == 0:
        from ddplint.runtime import report  # rich loads only when we print

        report.render(results, meta, fmt, stream, code)
    if joined:
        _teardown()
    return code


def exit_code(results: list[dict]) -> int:
    verdicts = {r["verdict"] for r in results}
    if ERROR in verdicts:
        return 2
    return 1 if NOT_CONFIRMED in verdicts else 0


def _resolve_device(device: str) -> tuple[str, str | None]:
    if device == "auto":
        return ("cuda" if torch.cuda.is_available() else "cpu"), None
    if device == "cpu":
        return "cpu", None
    if device == "cuda":
        if not torch.cuda.is_available():
            return "cuda", "--device cuda was asked for but torch sees no CUDA device"
        return "cuda", None
    return device, f"unknown --device {device!r} (use auto, cpu or cuda)"


def _session(rank: int, world_size: int, ids: list[str], device_type: str, steps: int | None) -> list[dict]:
    store = dist.distributed_c10d._get_default_store()
    out = []
    for rule in ids:
        res = _run_probe(rule, rank, world_size, device_type, steps)
        res.rule = rule
        d = res.to_dict()
        d.update(torch=torch.__version__, device=device_type, world_size=world_size)
        out.append(d)
        _store_barrier(store, f"ddplint/confirm/{rule}", world_size, 2 * PROBE_TIMEOUT_S)
    return out


def _run_probe(rule: str, rank: int, world_size: int, device_type: str, steps: int | None) -> ProbeResult:
    mod = probes.load(rule)
    ctx = ProbeContext(rank, world_size, device_type, default_backend(device_type), steps,
                       timeout_s=PROBE_TIMEOUT_S)
    reason = mod.not_applicable(ctx) if hasattr(mod, "not_applicable") else None
    if reason:
        return not_applicable(rule, mod.NAME, reason)
    ctx.group = ctx.new_group(PROBE_TIMEOUT_S)
    t0 = time.monotonic()
    try:
        res = mod.run(ctx)
    except Exception as exc:
        # Drop the probe's group so peers blocked in it fail now rather than at its timeout.
        try:
            dist.distributed_c10d._abort_process_group(ctx.group)
        except Exception:
            pass
        res = ProbeResult(rule, mod.NAME, ERROR, reason=f"rank {rank}: {type(exc).__name__}: {exc}",
                          detail=traceback.format_exc(limit=6))
    res.seconds = time.monotonic() - t0
    return res


def _store_barrier(store, key: str, world_size: int, timeout_s: float) -> None:
    """Realign ranks between probes through the store, which a broken group cannot wedge."""
    if store.add(key, 1) == world_size:
        store.set(key + "/all", "1")
    store.wait([key + "/all"], datetime.timedelta(seconds=timeout_s))


def _merge(per_rank: list[list[dict]]) -> list[dict]:
    """Rank 0's figures, unless some rank failed the probe: then that rank's error."""
    merged = []
    for i, res in enumerate(per_rank[0]):
        errors = [ranks[i] for ranks in per_rank if ranks[i]["verdict"] == ERROR]
        merged.append(errors[0] if errors else res)
    return merged


def _teardown() -> None:
    try:
        dist.destroy_process_group()
    except Exception:
        pass  # after the report, a failed teardown does not change the outcome


__all__ = ["run_confirm", "exit_code", "CONFIRMED", "NOT_CONFIRMED", "NOT_APPLICABLE", "ERROR"]
