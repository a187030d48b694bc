"""Time ddplint beside its peers on one corpus, in one run, and print ratios.

    python benchmarks/bench.py CORPUS [--runs 3] [--peers-bin DIR] [--sample-every 20]
                               [--out benchmarks/RESULTS.md] [--date 2026-12-01]

What it runs (each a real command line, output discarded; per run the wall
time, the CPU time of the whole process tree and the peak RSS of its largest
process, polled from /proc; medians over --runs):

- ddplint cold (``--no-cache``) with the default jobs (one per CPU), and with
  ``--no-screen`` (judge everything): the two must give identical diagnostics;
- ddplint cold on half the corpus (every other file): memory must stay flat;
- ddplint warm (the cache filled by a previous run, nothing changed);
- ddplint on one small file with a finding and on one with nothing plausible
  (each alone in a folder, the pre-commit case), medians of 21 runs;
- ruff with its default rules and with ``--select ALL`` (no cache);
- TorchFix and Fixit, too slow for the whole corpus: they run on a
  deterministic sample (every Nth file) and their time is extrapolated by file
  count; ddplint runs on the same sample for a direct ratio too;
- one ``--statistics`` run for the per-stage and per-rule counts.

The machine may be shared: the load average is recorded beside every
measurement, and CPU times are the figures to compare across loads.
Peers are taken from --peers-bin or PATH; a missing peer is reported as such.
Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from torch_package import TreeWatch  # noqa: E402  (polls /proc for a process tree)

ROOT = Path(__file__).resolve().parents[1]
SMALL_FILE = ROOT / "fixtures" / "torchrun_bad.py"  # findings (DDP005, DDP006, DDP017, ...)
PLAIN_FILE_TEXT = '''"""Data helpers: nothing distributed here."""
import torch


def normalise(batch, mean, std):
    out = []
    for x in batch:
        out.append((x - mean) / std)
    return torch.stack(out)
'''


@dataclass
class Measurement:
    name: str
    command: str
    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    peak_mib: list[float] = field(default_factory=list)
    load: list[float] = field(default_factory=list)
    extrapolated_from: Optional[int] = None  # files actually linted, when extrapolated
    scale: float = 1.0

    @property
    def median(self) -> float:
        return statistics.median(self.seconds) * self.scale

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu) * self.scale if self.cpu else float("nan")

    def spread(self) -> str:
        low, high = min(self.seconds) * self.scale, max(self.seconds) * self.scale
        return f"{low:.2f}–{high:.2f}"


# Installed packages run from compiled bytecode; a PYTHONDONTWRITEBYTECODE
# environment would make every ddplint process recompile its modules.
BENCH_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_once(command: list[str], cwd: Optional[Path] = None, short: bool = False,
             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) -> tuple[float, float, float, float]:
    """Wall seconds, CPU seconds of the process tree, peak RSS (MiB) of its
    largest process, and the 1-minute load average when it started. A short
    run (one process) is measured with wait4; a long one by polling /proc."""
    load = os.getloadavg()[0]
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=BENCH_ENV, stdout=stdout, stderr=stderr)
    if short:
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        cpu, peak = usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024
    else:
        watch = TreeWatch(process.pid)
        code = process.wait()
        elapsed = time.perf_counter() - start
        watch.stop()
        cpu, peak = watch.cpu_s, watch.peak_kb / 1024
    if code not in (0, 1):
        raise RuntimeError(f"{' '.join(command)} exited {code}")
    return elapsed, cpu, peak, load


def measure(name: str, command: list[str], runs: int, **kwargs) -> Measurement:
    result = Measurement(name, " ".join(command))
    for _ in range(runs):
        seconds, cpu, peak, load = run_once(command, **kwargs)
        result.seconds.append(seconds)
        result.cpu.append(cpu)
        result.peak_mib.append(peak)
        result.load.append(load)
        print(f"  {name}: {seconds:.2f} s wall, {cpu:.2f} s CPU, {peak:.0f} MiB, load {load:.1f}", flush=True)
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


_STATISTICS = ("files:", "stages:", "judged per rule:")


def diagnostics_in(report: Path) -> list[str]:
    """The finding lines of a text report (``--no-show-source``)."""
    return sorted(line for line in report.read_text(encoding="utf-8").splitlines()
                  if re.match(r"^.+:\d+:\d+: [A-Za-z0-9-]+ ", line))


def stage_counts(report: Path) -> tuple[str, ...]:
    """The ``files:``, ``stages:`` and ``judged per rule:`` lines of a ``--statistics`` report."""
    lines = report.read_text(encoding="utf-8").splitlines()
    return tuple(next((line for line in lines if line.startswith(key)), "") for key in _STATISTICS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--peers-bin", type=Path, default=None, help="folder holding ruff, torchfix, fixit")
    parser.add_argument("--sample-every", type=int, default=20, help="slow peers lint every Nth file")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    parser.add_argument("--date", default=date.today().isoformat(), help="the heading of the section written")
    args = parser.parse_args()

    corpus = args.corpus.resolve()
    files = python_files(corpus)
    lines = sum(p.read_bytes().count(b"\n") for p in files)
    ddplint = [sys.executable, "-m", "ddplint"]
    ruff, torchfix, fixit = (tool(n, args.peers_bin) for n in ("ruff", "torchfix", "fixit"))
    results: list[Measurement] = []
    print(f"corpus: {len(files)} files, {lines} lines", flush=True)
    notes: dict[str, str] = {}

    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        common = ["--isolated", "--exit-zero", "--format", "json", "-o", os.devnull]
        text = ["--isolated", "--exit-zero", "--statistics", "--no-show-source", "--format", "text"]
        screened_report, everything_report = scratch / "screened.txt", scratch / "everything.txt"
        one, plain = scratch / "one", scratch / "plain"
        one.mkdir(), plain.mkdir()
        shutil.copyfile(SMALL_FILE, one / "train.py")
        (plain / "data.py").write_text(PLAIN_FILE_TEXT)
        run_once([*ddplint, "--isolated", "--no-cache", "--exit-zero", "train.py"], cwd=one, short=True)  # bytecode
        stage_times = scratch / "stage-times.txt"
        with stage_times.open("w") as times:  # the hidden --stage-times line: wall seconds per engine stage
            results.append(measure("ddplint cold", [*ddplint, *text, "-o", str(screened_report), "--no-cache",
                                                    "--stage-times", str(corpus)], args.runs, stderr=times))
        notes["seconds"] = next((line for line in stage_times.read_text().splitlines()
                                 if line.startswith("wall seconds:")), "")
        results.append(measure("ddplint cold --no-screen (judge everything)",
                               [*ddplint, *text, "-o", str(everything_report), "--no-cache", "--no-screen",
                                str(corpus)], 1))
        screened, everything = diagnostics_in(screened_report), diagnostics_in(everything_report)
        notes["identical"] = (f"{len(screened)} diagnostics, identical to --no-screen" if screened == everything else
                              f"{len(screened)} diagnostics vs {len(everything)} with --no-screen: "
                              f"{len(set(everything) - set(screened))} missing, "
                              f"{len(set(screened) - set(everything))} extra")
        notes["differences"] = "\n".join(sorted(set(everything) ^ set(screened))[:20])
        notes["files"], notes["stages"], notes["rules"] = stage_counts(screened_report)
        notes["files_all"], notes["stages_all"], notes["rules_all"] = stage_counts(everything_report)
        half_dir = scratch / "half"
        half = make_sample(files, corpus, 2, half_dir)
        results.append(measure(f"ddplint cold, half the corpus ({half} files)",
                               [*ddplint, *common, "--no-cache", str(half_dir)], 1))
        shutil.rmtree(half_dir)
        cache = scratch / "cache"
        warm = [*ddplint, *common, "--cache-dir", str(cache), str(corpus)]
        run_once(warm)  # fill the cache
        results.append(measure("ddplint warm (cache filled)", warm, args.runs))
        results.append(measure("ddplint one file with findings",
                               [*ddplint, "--isolated", "--no-cache", "train.py"], 21, cwd=one, short=True))
        results.append(measure("ddplint one file, nothing plausible",
                               [*ddplint, "--isolated", "--no-cache", "data.py"], 21, cwd=plain, short=True))

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
                                       list(measured.seconds), list(measured.cpu), list(measured.peak_mib),
                                       list(measured.load), sampled, scale)
            results.append(extrapolated)

    section = report_section(args.date, results, corpus, files, lines, notes, {
        "ddplint": version_of(sys.executable, "-m", "ddplint", "--version"),
        "ruff": version_of(ruff, "--version"),
        "torchfix": version_of(torchfix, "--version"),
        "fixit": version_of(fixit, "--version"),
        "libcst": version_of(sys.executable, "-c", "import importlib.metadata as m; print(m.version('libcst'))"),
        "python": platform.python_version(),
    })
    write_section(args.out, section, args.date)
    print(section)


def _find(results: list[Measurement], name: str) -> Optional[Measurement]:
    return next((m for m in results if m.name.startswith(name)), None)


def report_section(day: str, results: list[Measurement], corpus: Path, files: list[Path], lines: int,
                   notes: dict[str, str], versions: dict[str, str]) -> str:
    cold = _find(results, "ddplint cold")
    rows = ["| run | median wall s | min–max s | CPU s (all processes) | runs | load avg at start | "
            "peak RSS MiB (largest process) | ddplint cold ÷ this |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for m in results:
        ratio = f"{cold.median / m.median:.2f}" if cold and m is not cold else ""
        runs = f"{len(m.seconds)}" + (f" (×{m.scale:.1f} from {m.extrapolated_from} files)" if m.extrapolated_from else "")
        rows.append(f"| {m.name} | {m.median:.2f} | {m.spread()} | {m.cpu_median:.2f} | {runs} | "
                    f"{statistics.median(m.load):.1f} | {max(m.peak_mib):.0f} | {ratio} |")

    verdicts = []
    ruff_default = _find(results, "ruff default rules")
    torchfix = _find(results, "torchfix (extrapolated")
    warm = _find(results, "ddplint warm")
    small = _find(results, "ddplint one file with findings")
    plain = _find(results, "ddplint one file, nothing plausible")
    half = _find(results, "ddplint cold, half")
    sample = _find(results, "ddplint cold, sample")
    torchfix_sample = _find(results, "torchfix, sample")

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    if cold and ruff_default:
        ratio, cpu_ratio = cold.median / ruff_default.median, cold.cpu_median / ruff_default.cpu_median
        verdicts.append(f"- Cold vs ruff default: {ratio:.1f}x ruff's wall time, {cpu_ratio:.1f}x its CPU time "
                        f"(target <= 3x): {verdict(ratio <= 3)}; {notes.get('identical', '')}.")
    if warm and ruff_default:
        verdicts.append(f"- Warm vs ruff cold default: {warm.median:.2f} s vs {ruff_default.median:.2f} s = "
                        f"{warm.median / ruff_default.median:.2f}x (target <= 0.5x): "
                        f"{verdict(warm.median <= 0.5 * ruff_default.median)}.")
    if sample and torchfix_sample:
        speedup = torchfix_sample.median / sample.median
        verdicts.append(f"- vs TorchFix on the {sample.name.split('of ')[-1]} sample: {speedup:.0f}x faster "
                        f"(target >= 100x): {verdict(speedup >= 100)}.")
    if torchfix and cold:
        verdicts.append(f"- vs TorchFix extrapolated to the corpus: {torchfix.median / cold.median:.0f}x faster.")
    if small:
        verdicts.append(f"- One file with a finding: {small.median * 1000:.0f} ms median, "
                        f"{small.cpu_median * 1000:.0f} ms CPU (target < 250 ms): {verdict(small.median < 0.25)}.")
    if plain:
        verdicts.append(f"- One file with nothing plausible: {plain.median * 1000:.0f} ms median, "
                        f"{plain.cpu_median * 1000:.0f} ms CPU (target < 150 ms): {verdict(plain.median < 0.15)}.")
    if cold:
        peak = max(cold.peak_mib)
        line = f"- Largest process, cold run: {peak:.0f} MiB (target <= 250 MiB): {verdict(peak <= 250)}"
        if half:
            half_peak = max(half.peak_mib)
            line += (f"; half the corpus {half_peak:.0f} MiB, {100 * (peak - half_peak) / peak:.0f}% less "
                     f"(target: within 20%): {verdict(half_peak >= 0.8 * peak)}")
        verdicts.append(line + ".")

    return "\n".join([
        f"## {day}: `benchmarks/bench.py` (screen and judge, issue 13)",
        "",
        f"- Machine: {machine()}",
        f"- Corpus: `{corpus.name}`: {len(files)} .py files, {lines} lines (see benchmarks/README.md)",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()),
        "",
        *rows,
        "",
        "Stages of the cold run (`--statistics`):",
        "",
        f"- `{notes.get('files', '')}`",
        f"- `{notes.get('stages', '')}`",
        f"- `{notes.get('rules', '')}`",
        f"- `{notes.get('seconds', '')}` (last run)",
        "",
        "The same with `--no-screen` (judge everything the text prefilter lets through):",
        "",
        f"- `{notes.get('files_all', '')}`",
        f"- `{notes.get('stages_all', '')}`",
        "",
        *([f"Differences (first 20):\n\n```\n{notes['differences']}\n```", ""] if notes.get("differences") else []),
        "Against the targets of issue 13:",
        "",
        *verdicts,
        "",
    ])


def write_section(out: Path, section: str, day: str) -> None:
    """Put ``section`` first under the title of ``out``, replacing an earlier
    bench.py section of the same day."""
    text = out.read_text(encoding="utf-8") if out.exists() else "# ddplint benchmark results\n"
    heading = f"## {day}: `benchmarks/bench.py`"
    pattern = re.compile(rf"^{re.escape(heading)}.*?(?=^## |\Z)", re.S | re.M)
    text = pattern.sub("", text)
    title, _, rest = text.partition("\n")
    out.write_text(f"{title}\n\n{section}\n{rest.lstrip()}", encoding="utf-8")


if __name__ == "__main__":
    main()
