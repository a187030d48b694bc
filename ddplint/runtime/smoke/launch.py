"""Start the user's script on its ranks and watch it until it ends (parent side, no torch).

Through ``torch.distributed.run`` (torchrun's elastic agent: it sets RANK/LOCAL_RANK/
WORLD_SIZE/MASTER_ADDR/PORT and tears the other workers down when one fails), or, for a
script that calls ``mp.spawn`` itself, as one plain process that starts its own ranks.
The instrumentation reaches every rank through the environment (the bootstrap folder first
on PYTHONPATH).  While the run goes on the parent reads the ranks' events: it notes when
each rank's process ends, and stops a run that makes no progress at all (a hang outside
any collective, which no collective timeout can end).
"""

from __future__ import annotations

import ast
import collections
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ddplint.runtime.smoke import rankside
from ddplint.runtime.smoke.telemetry import EventReader

STARTUP_LIMIT_S = 300.0  # imports, data preparation and rendezvous before the first event
POLL_S = 0.1


@dataclass
class Target:
    """What to run: a script path or a module name, its arguments, and the file to lint."""

    args: list[str]
    source: Path
    script: Path | None = None
    module: str | None = None

    def argv(self) -> list[str]:
        head = [str(self.script)] if self.script is not None else ["-m", self.module]
        return head + list(self.args)


@dataclass
class Launch:
    launcher: str  # torchrun | script
    returncode: int
    wall_s: float
    stalled_s: float | None = None
    output_tail: list[str] = field(default_factory=list)


def command(target: Target, launcher: str, nproc: int) -> list[str]:
    if launcher == "script":
        return [sys.executable, "-u", *target.argv()]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
            "--nproc-per-node", str(nproc), "--max-restarts", "0", "--monitor-interval", "0.1",
            *target.argv()]


def environment(run_dir: Path, boot_dir: Path, steps: int, timeout_s: float, device: str,
                launcher: str = "torchrun") -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(boot_dir), env.get("PYTHONPATH", "")) if p)
    env.update({
        rankside.ENV_DIR: str(run_dir), rankside.ENV_STEPS: str(steps),
        rankside.ENV_TIMEOUT: str(timeout_s), rankside.ENV_DEVICE: device,
        # --device cpu: gloo, whatever backend the script asks for.
        rankside.ENV_BACKEND: "gloo" if device == "cpu" else "",
        "PYTHONUNBUFFERED": "1",
    })
    # The flight recorder (older torch reads the NCCL-prefixed name): a rank whose collective
    # fails reports its last entries.
    for name in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        env.setdefault(name, "2000")
    if launcher == "script":
        # torchrun gives each worker one OpenMP thread unless told otherwise; ranks an
        # mp.spawn script starts would otherwise each take every core.
        env.setdefault("OMP_NUM_THREADS", "1")
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # a script that picks CUDA when available runs on CPU
    return env


def run(cmd: list[str], env: dict, reader: EventReader, stall_limit_s: float, quiet: bool,
        launcher: str) -> Launch:
    """Run ``cmd`` to its end; the script's output goes to our stderr (stdout is the report)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    tail: collections.deque = collections.deque(maxlen=60)
    pump = threading.Thread(target=_pump, args=(proc.stdout, tail, quiet), daemon=True)
    pump.start()
    stalled = None
    while proc.poll() is None:
        time.sleep(POLL_S)
        reader.poll()
        _note_ended(reader)
        stalled = _stall(reader, t0, stall_limit_s)
        if stalled is not None:
            _kill(proc, [r.pid for r in reader.runs.values() if r.ended_t is None])
            break
    proc.wait()
    pump.join(timeout=5)
    reader.poll()
    _note_ended(reader)
    return Launch(launcher, proc.returncode, time.monotonic() - t0, stalled, list(tail))


def _pump(stream, tail, quiet: bool) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace")
        tail.append(line.rstrip("\n"))
        if not quiet:
            sys.stderr.write(line)
            sys.stderr.flush()


def _stall(reader: EventReader, t0: float, limit_s: float) -> float | None:
    """Seconds without progress when that exceeds the limit, else None."""
    last = reader.last_progress()
    if not last:
        waited = time.monotonic() - t0
        return waited if waited > STARTUP_LIMIT_S + limit_s else None
    idle = time.time() - last
    alive = [r for r in reader.runs.values() if r.is_rank and r.ended_t is None]
    return idle if alive and idle > limit_s else None


def _note_ended(reader: EventReader) -> None:
    now = time.time()
    for run in reader.runs.values():
        if run.ended_t is None and not _alive(run.pid):
            run.ended_t = now


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")  # a zombie has exited; its parent has not reaped it yet
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False


def _kill(proc: subprocess.Popen, rank_pids: list[int]) -> None:
    """Stop the launcher's process group and the ranks: torchrun starts each worker in a
    session of its own, out of reach of a signal to the launcher's group."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for target, send in ((proc.pid, os.killpg), *((pid, os.kill) for pid in rank_pids)):
            try:
                send(target, sig)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            continue
        if not any(_alive(pid) for pid in rank_pids):
            return


# ------------------------------------------------------------------ which launcher


def spawns_its_own_ranks(source: str) -> bool:
    """True when the script starts its ranks itself: a call of torch.multiprocessing's
    ``spawn`` or ``start_processes`` (``mp.spawn(worker, nprocs=...)``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    modules = {"torch.multiprocessing"}  # names bound to torch.multiprocessing
    functions: set[str] = set()  # names bound to its spawn functions
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "torch.multiprocessing" and alias.asname:
                    modules.add(alias.asname)
        elif isinstance(node, ast.ImportFrom) and node.module in ("torch", "torch.multiprocessing"):
            for alias in node.names:
                if node.module == "torch" and alias.name == "multiprocessing":
                    modules.add(alias.asname or alias.name)
                elif node.module == "torch.multiprocessing" and alias.name in ("spawn", "start_processes"):
                    functions.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            head, _, last = name.rpartition(".")
            if (head in modules and last in ("spawn", "start_processes")) or name in functions:
                return True
    return False


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""
