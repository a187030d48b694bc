"""``ddplint smoke``: lint the script, run it on a few instrumented ranks, gate, report.

Exit codes: 0 every gate passed (or had nothing to judge), 1 a gate failed, 2 the run could
not be made (no such script, torch missing, no CUDA for --device cuda, no rank started).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ddplint.runtime.smoke import gates, launch
from ddplint.runtime.smoke.bootstrap import write_bootstrap
from ddplint.runtime.smoke.join import LintError, join, lint_script
from ddplint.runtime.smoke.report import Header, render
from ddplint.runtime.smoke.telemetry import EventReader, RankRun

EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2
INSTALL_HINT = ("`ddplint smoke` needs PyTorch: install the runtime extra with "
                "`pip install 'ddplint[runtime]'` (or install torch yourself)")


@dataclass
class SmokeOptions:
    script: str | None = None
    module: str | None = None
    args: list[str] = field(default_factory=list)
    nproc: int | None = None  # None: 2 under torchrun
    steps: int = 10
    timeout: float = 60.0
    device: str = "auto"
    max_comm_fraction: float = 0.5
    fmt: str = "text"
    launcher: str = "auto"  # auto | torchrun | script
    quiet: bool = False


class RunError(Exception):
    """The run could not be made (exit 2)."""


def run_smoke(opts: SmokeOptions, stream: IO[str] = sys.stdout) -> int:
    try:
        return _run(opts, stream)
    except RunError as error:
        print(f"ddplint smoke: error: {error}", file=sys.stderr)
        return EXIT_ERROR


def _run(opts: SmokeOptions, stream: IO[str]) -> int:
    target = resolve_target(opts)
    if importlib.util.find_spec("torch") is None:
        raise RunError(INSTALL_HINT)
    device = resolve_device(opts.device)
    try:
        findings = lint_script(target.source)
    except LintError as error:
        raise RunError(f"cannot lint {target.source}: {error}") from error
    launcher = choose_launcher(opts, target)
    ranks, done = _launch(opts, target, device, launcher)
    checks = gates.evaluate(ranks, gates.RunFacts(opts.max_comm_fraction, opts.timeout, done.stalled_s))
    join(findings, checks)
    header = Header(_display(target), launcher, device, _backend(ranks), _backend_note(ranks), done.wall_s)
    render(checks, findings, ranks, header, opts.fmt, stream, Path.cwd())
    return EXIT_FAIL if any(c.verdict == gates.FAIL for c in checks) else EXIT_PASS


def _launch(opts: SmokeOptions, target: launch.Target, device: str, launcher: str):
    """Run the script on its instrumented ranks; returns what each rank recorded."""
    with tempfile.TemporaryDirectory(prefix="ddplint-smoke-") as tmp:
        run_dir = Path(tmp)
        boot = write_bootstrap(run_dir / "boot")
        reader = EventReader(run_dir)
        env = launch.environment(run_dir, boot, opts.steps, opts.timeout, device, launcher)
        cmd = launch.command(target, launcher, opts.nproc or 2)
        # No progress for this long and no collective timeout fired: a hang outside collectives.
        stall_limit = 2 * opts.timeout + 30
        done = launch.run(cmd, env, reader, stall_limit, opts.quiet, launcher)
        ranks = reader.ranks()
    if not ranks:
        raise RunError(_no_ranks(done))
    return with_silent_ranks(ranks, opts.nproc or 2 if launcher == "torchrun" else 0), done


# ------------------------------------------------------------------ inputs


def resolve_target(opts: SmokeOptions) -> launch.Target:
    if bool(opts.script) == bool(opts.module):
        raise RunError("name the script to run (`ddplint smoke -- train.py ARGS`) or a module (`-m pkg.train`)")
    if opts.script:
        script = Path(opts.script)
        if not script.is_file():
            raise RunError(f"script not found: {opts.script}")
        return launch.Target(list(opts.args), source=script, script=script)
    source = module_file(opts.module)
    if source is None:
        raise RunError(f"module not found: {opts.module} (looked in the current folder and sys.path)")
    return launch.Target(list(opts.args), source=source, module=opts.module)


def module_file(name: str) -> Path | None:
    """The file ``python -m name`` would run, found without importing anything."""
    parts = name.split(".")
    for entry in [os.getcwd(), *sys.path]:
        base = Path(entry or ".").joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__main__.py"):
            if candidate.is_file():
                return candidate
    return None


def resolve_device(device: str) -> str:
    if device == "cpu":
        return "cpu"
    import torch  # the parent needs it only to see whether CUDA is there

    if device == "cuda" and not torch.cuda.is_available():
        raise RunError("--device cuda was asked for but torch sees no CUDA device")
    return "cuda" if torch.cuda.is_available() else "cpu"


def choose_launcher(opts: SmokeOptions, target: launch.Target) -> str:
    if opts.launcher != "auto":
        return opts.launcher
    source = target.source.read_text(encoding="utf-8", errors="replace")
    if launch.spawns_its_own_ranks(source):
        if opts.nproc is not None:
            print("ddplint smoke: the script starts its own ranks (mp.spawn); --nproc-per-node is not used",
                  file=sys.stderr)
        return "script"
    return "torchrun"


# ------------------------------------------------------------------ outputs


def _no_ranks(done: launch.Launch) -> str:
    banner = ("*****", "Setting OMP_NUM_THREADS")  # torchrun's own notice
    tail = "\n".join([line for line in done.output_tail if line.strip() and not line.startswith(banner)][-20:])
    if done.returncode == 0:
        return ("the script ran but no process initialised a torch.distributed process group, "
                "so there was nothing to measure" + (f"; its last output:\n{tail}" if tail else ""))
    return (f"no rank started (the launcher exited with code {done.returncode})"
            + (f"; its last output:\n{tail}" if tail else ""))


def with_silent_ranks(ranks: list[RankRun], launched: int) -> list[RankRun]:
    """Add the ranks that never wrote a word (killed before their process group came up)."""
    expected = max([launched, *(r.init.get("world_size", 0) for r in ranks)])
    known = {r.rank for r in ranks}
    silent = [RankRun(rank=rank, pid=0) for rank in range(expected) if rank not in known]
    return sorted(ranks + silent, key=lambda r: r.rank if r.rank is not None else 1 << 30)


def _display(target: launch.Target) -> str:
    if target.module:
        return f"-m {target.module}"
    try:
        return target.script.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(target.script)


def _backend(ranks: list[RankRun]) -> str | None:
    return next((r.init["backend"] for r in ranks if r.init), None)


def _backend_note(ranks: list[RankRun]) -> str:
    init = next((r.init for r in ranks if r.init), {})
    asked, used = init.get("backend_requested"), init.get("backend")
    if asked and used and asked != used:
        return f"note: the script asked for the {asked} backend; on CPU (--device cpu) it runs on {used}"
    return ""
