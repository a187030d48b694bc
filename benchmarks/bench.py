"""Time ddplint beside its peers on one corpus, in one run, and print ratios.

    python benchmarks/bench.py CORPUS [--runs 3] [--peers-bin DIR] [--sample-every 20]
                               [--out benchmarks/RESULTS.md]

What it runs (each a real command line, output discarded, wall time and peak
memory measured per run; medians over --runs):

- ddplint cold (``--no-cache``), with the default jobs (one per CPU) and ``--jobs 1``;
- ddplint warm (the cache filled by a previous run, nothing changed);
- ddplint on one small file (the pre-commit case), median of 21 runs;
- ruff with its default rules and with ``--select ALL`` (no cache);
- TorchFix and Fixit, which are too slow for the whole corpus: they run on a
  deterministic sample (every Nth file) and their time is extrapolated by file
  count; ddplint runs on the same sample for a direct ratio too.

Peers are taken from --peers-bin or PATH; a missing peer is reported as such.
Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
SMALL_FILE = ROOT / "fixtures" / "torchrun_bad.py"


@dataclass
class Measurement:
    name: str
    command: str
    seconds: list[float] = field(default_factory=list)
    peak_mib: list[float] = field(default_factory=list)
    extrapolated_from: Optional[int] = None  # files actually linted, when extrapolated
    scale: float = 1.0
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.seconds) * self.scale

    def spread(self) -> str:
        low, high = min(self.seconds) * self.scale, max(self.seconds) * self.scale
        return f"{low:.2f}–{high:.2f}"


# Installed packages run from compiled bytecode; a PYTHONDONTWRITEBYTECODE
# environment would make every ddplint process recompile its modules.
BENCH_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_once(command: list[str], cwd: Optional[Path] = None, env: Optional[dict] = None) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of the largest process in the command's tree."""
    env = env or BENCH_ENV
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(command)} exited {process.returncode}")
    return elapsed, usage.ru_maxrss / 1024


def measure(name: str, command: list[str], runs: int, **kwargs) -> Measurement:
    result = Measurement(name, " ".join(command))
    for _ in range(runs):
        seconds, peak = run_once(command, **kwargs)
        result.seconds.append(seconds)
        result.peak_mib.append(peak)
        print(f"  {name}: {seconds:.2f} s, {peak:.0f} MiB", flush=True)
    return result


def tool(name: str, peers_bin: Optional[Path]) -> Optional[str]:
    if peers_bin is not None and (peers_bin / name).exists():
        return str(peers_bin / name)
    return shutil.which(name)


def version_of(executable: Optional[str], *args: str) -> str:
    if executable is None:
        return "not installed"
    try:
        output = subprocess.run([executable, *args], capture_output=True, text=True, timeout=60)
        return (output.stdout or output.stderr).strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def python_files(corpus: Path) -> list[Path]:
    return sorted(p for p in corpus.rglob("*.py") if p.is_file())


def make_sample(files: list[Path], corpus: Path, every: int, into: Path) -> int:
    chosen = files[::every]
    for path in chosen:
        target = into / path.relative_to(corpus)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return len(chosen)


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f", {kib / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return f"{os.cpu_count()} CPUs ({cpu}){memory}, {platform.system()} {platform.release()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--peers-bin", type=Path, default=None, help="folder holding ruff, torchfix, fixit")
    parser.add_argument("--sample-every", type=int, default=20, help="slow peers lint every Nth file")
    parser.add_argument("--skip-jobs-1", action="store_true", help="skip the single-process ddplint run")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    args = parser.parse_args()

    corpus = args.corpus.resolve()
    files = python_files(corpus)
    lines = sum(p.read_bytes().count(b"\n") for p in files)
    ddplint = [sys.executable, "-m", "ddplint"]
    ruff, torchfix, fixit = (tool(n, args.peers_bin) for n in ("ruff", "torchfix", "fixit"))
    results: list[Measurement] = []
    print(f"corpus: {len(files)} files, {lines} lines", flush=True)

    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        common = ["--isolated", "--exit-zero", "--format", "json", "-o", os.devnull]
        run_once([*ddplint, "--isolated", "--no-cache", str(SMALL_FILE)])  # writes the bytecode once
        results.append(measure("ddplint cold", [*ddplint, *common, "--no-cache", str(corpus)], args.runs))
        if not args.skip_jobs_1:
            results.append(measure("ddplint cold --jobs 1",
                                   [*ddplint, *common, "--no-cache", "--jobs", "1", str(corpus)], 1))
        results.append(measure("ddplint cold, DDP001 ignored",
                               [*ddplint, *common, "--no-cache", "--ignore", "DDP001", str(corpus)], 1))
        half_dir = scratch / "half"
        half = make_sample(files, corpus, 2, half_dir)
        results.append(measure(f"ddplint cold, half the corpus ({half} files)",
                               [*ddplint, *common, "--no-cache", str(half_dir)], 1))
        shutil.rmtree(half_dir)
        cache = scratch / "cache"
        warm = [*ddplint, *common, "--cache-dir", str(cache), str(corpus)]
        run_once(warm)  # fill the cache
        results.append(measure("ddplint warm (cache filled)", warm, args.runs))
        small = measure("ddplint one small file", [*ddplint, "--isolated", "--no-cache", str(SMALL_FILE)], 21)
        results.append(small)

        if ruff:
            results.append(measure("ruff default rules", [ruff, "check", "--isolated", "--no-cache", "--exit-zero",
                                                          "--quiet", str(corpus)], args.runs))
            results.append(measure("ruff --select ALL", [ruff, "check", "--isolated", "--no-cache", "--exit-zero",
                                                         "--quiet", "--select", "ALL", str(corpus)], args.runs))

        sample_dir = scratch / "sample"
        sampled = make_sample(files, corpus, args.sample_every, sample_dir)
        scale = len(files) / sampled
        on_sample = measure(f"ddplint cold, sample of {sampled} files",
                            [*ddplint, *common, "--no-cache", str(sample_dir)], 1)
        results.append(on_sample)
        for name, executable, command in (
            ("torchfix", torchfix, [str(torchfix), str(sample_dir)] if torchfix else None),
            ("fixit", fixit, [str(fixit), "lint", str(sample_dir)] if fixit else None),
        ):
            if executable is None:
                continue
            measured = measure(f"{name}, sample of {sampled} files", command, 1, cwd=scratch)
            results.append(measured)
            extrapolated = Measurement(f"{name} (extrapolated to the corpus)", measured.command,
                                       list(measured.seconds), list(measured.peak_mib), sampled, scale)
            results.append(extrapolated)

    write_report(args.out, results, corpus, files, lines, {
        "ddplint": version_of(sys.executable, "-m", "ddplint", "--version"),
        "ruff": version_of(ruff, "--version"),
        "torchfix": version_of(torchfix, "--version"),
        "fixit": version_of(fixit, "--version"),
        "libcst": version_of(sys.executable, "-c", "import importlib.metadata as m; print(m.version('libcst'))"),
        "python": platform.python_version(),
    })
    print(args.out.read_text())


def _find(results: list[Measurement], name: str) -> Optional[Measurement]:
    return next((m for m in results if m.name == name), None)


def write_report(out: Path, results: list[Measurement], corpus: Path, files: list[Path], lines: int,
                 versions: dict[str, str]) -> None:
    cold = _find(results, "ddplint cold")
    rows = ["| run | median s | min–max s | runs | peak RSS MiB (largest process) | ddplint cold ÷ this |",
            "|---|---:|---:|---:|---:|---:|"]
    for m in results:
        ratio = f"{cold.median / m.median:.2f}" if cold and m is not cold else ""
        runs = f"{len(m.seconds)}" + (f" (×{m.scale:.1f} from {m.extrapolated_from} files)" if m.extrapolated_from else "")
        rows.append(f"| {m.name} | {m.median:.2f} | {m.spread()} | {runs} | {max(m.peak_mib):.0f} | {ratio} |")

    verdicts = []
    ruff_default = _find(results, "ruff default rules")
    torchfix = _find(results, "torchfix (extrapolated to the corpus)")
    warm = _find(results, "ddplint warm (cache filled)")
    small = _find(results, "ddplint one small file")
    if cold and torchfix:
        verdicts.append(f"- Cold vs TorchFix: {torchfix.median / cold.median:.0f}x faster (target: at least 50x).")
    if cold and ruff_default:
        verdicts.append(f"- Cold vs ruff default: {cold.median / ruff_default.median:.1f}x ruff's time "
                        "(target: within 3x).")
    if warm and ruff_default:
        verdicts.append(f"- Warm vs ruff cold default: {warm.median:.2f} s vs {ruff_default.median:.2f} s "
                        "(target: faster).")
    if small:
        verdicts.append(f"- One small file: {small.median * 1000:.0f} ms median (target: under 250 ms).")
    if cold:
        verdicts.append(f"- Peak memory, cold run: {max(cold.peak_mib):.0f} MiB in the largest process "
                        "(target: under 300 MiB).")

    text = "\n".join([
        "# ddplint benchmark results",
        "",
        f"Measured {date.today().isoformat()} by `benchmarks/bench.py` (one run, all tools on the same corpus).",
        "",
        f"- Machine: {machine()}",
        f"- Corpus: `{corpus.name}`: {len(files)} .py files, {lines} lines (see benchmarks/README.md)",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()),
        "",
        *rows,
        "",
        "Against the targets of the performance issue:",
        "",
        *verdicts,
        "",
    ])
    out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
