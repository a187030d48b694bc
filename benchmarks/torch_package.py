"""Scale check (issue 10): lint every .py file of the installed torch package
with all rules, at half and at full size.

    python benchmarks/torch_package.py [--jobs 2] [--max-file-size SIZE]

Copies the package's .py files into a temporary folder (so that site-packages
excludes and the package's own layout do not matter), then runs the real CLI
with --isolated --no-cache --select ALL --format json, on every other file
(half) and on all of them (full), polling /proc for its process tree. Reports, for each: files,
wall time, peak RSS of the largest process (workers included), internal errors,
and DDP000s split into syntax errors on files CPython compiles (must be 0),
too-large notices (--max-file-size) and the rest. Not a test: prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def torch_files() -> tuple[Path, list[Path]]:
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("torch is not installed (pip install torch==2.13.0)")
    package = Path(list(spec.submodule_search_locations)[0])
    return package, sorted(package.rglob("*.py"))


def copy_tree(package: Path, files: list[Path], target: Path) -> None:
    for path in files:
        destination = target / path.relative_to(package)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, destination)


def compiles(path: Path) -> bool:
    try:
        compile(path.read_bytes(), str(path), "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


class TreeWatch:
    """Polls /proc for every process descended from ``root``: the largest peak RSS
    (VmHWM) any of them reached, and their CPU time. wait4's rusage would miss the
    lint workers, which the forkserver, not ddplint, waits for."""

    def __init__(self, root: int) -> None:
        self.root, self.peak_kb, self.cpu_ticks = root, 0, {}
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.running = True
        self.thread.start()

    def stop(self) -> None:
        self.running = False
        self.thread.join()

    def _poll(self) -> None:
        while self.running:
            for pid in self._tree():
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue  # it exited between the listing and the read
                hwm = re.search(r"VmHWM:\s+(\d+) kB", status)
                self.peak_kb = max(self.peak_kb, int(hwm.group(1)) if hwm else 0)
                self.cpu_ticks[pid] = int(fields[11]) + int(fields[12])  # utime + stime
            time.sleep(0.2)

    def _tree(self) -> list[int]:
        parents = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    pass
        tree, frontier = {self.root}, [self.root]
        while frontier:
            parent = frontier.pop()
            children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
            tree.update(children)
            frontier.extend(children)
        return sorted(tree)

    @property
    def cpu_s(self) -> float:
        return sum(self.cpu_ticks.values()) / os.sysconf("SC_CLK_TCK")


def run(folder: Path, jobs: int, max_file_size: str | None) -> dict:
    ddplint = str(Path(sys.executable).with_name("ddplint"))  # the console script, as users run it
    command = [ddplint, "--isolated", "--no-cache", "--select", "ALL", "--format", "json", "--jobs", str(jobs), "."]
    if max_file_size is not None:
        command[-1:-1] = ["--max-file-size", max_file_size]
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, cwd=folder, stdout=out, stderr=err, text=True)
        watch = TreeWatch(process.pid)
        process.wait()
        watch.stop()
        wall = time.perf_counter() - started
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    peak_kb, cpu = watch.peak_kb, watch.cpu_s
    if not stdout.strip():
        sys.exit(f"ddplint printed nothing (exit {process.returncode}):\n{stderr[-3000:]}")
    document = json.loads(stdout)
    syntax_on_compiling, too_large, other_ddp000, internal = [], [], [], []
    for entry in document["files"]:
        for diagnostic in entry["diagnostics"]:
            if diagnostic["code"] == "internal-error":
                internal.append(f"{entry['path']}: {diagnostic['message']}")
            elif diagnostic["code"] == "DDP000":
                if diagnostic["message"].startswith("too large to analyse"):
                    too_large.append(entry["path"])
                elif compiles(folder / entry["path"]):
                    syntax_on_compiling.append(f"{entry['path']}: {diagnostic['message']}")
                else:
                    other_ddp000.append(entry["path"])
    return {
        "files": document["summary"]["files_checked"], "parsed": document["summary"]["files_parsed"],
        "wall_s": wall, "cpu_s": cpu, "peak_mib": peak_kb / 1024, "exit": process.returncode,
        "diagnostics": document["summary"]["diagnostics"], "internal_errors": internal,
        "ddp000_on_compiling_files": syntax_on_compiling, "too_large": too_large,
        "ddp000_on_broken_files": other_ddp000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--max-file-size", default=None, help="passed to ddplint (default: ddplint's)")
    parser.add_argument("--sizes", default="half,full", help="which runs: half, full or both (default)")
    args = parser.parse_args()
    package, files = torch_files()
    import torch  # noqa: F401  (only for the version line)

    print(f"torch {sys.modules['torch'].__version__}: {len(files)} .py files under {package}")
    with tempfile.TemporaryDirectory(prefix="ddplint-torch-") as temporary:
        for label, subset in (("half", files[::2]), ("full", files)):
            if label not in args.sizes.split(","):
                continue
            folder = Path(temporary) / label
            copy_tree(package, subset, folder)
            outcome = run(folder, args.jobs, args.max_file_size)
            print(f"{label}: {outcome['files']} files ({outcome['parsed']} parsed), {outcome['wall_s']:.1f} s wall, "
                  f"{outcome['cpu_s']:.1f} s CPU (all processes), "
                  f"peak RSS {outcome['peak_mib']:.0f} MiB (largest process), exit {outcome['exit']}, "
                  f"{outcome['diagnostics']} diagnostics, {len(outcome['internal_errors'])} internal errors, "
                  f"{len(outcome['ddp000_on_compiling_files'])} DDP000 on files CPython compiles, "
                  f"{len(outcome['too_large'])} too-large notices, "
                  f"{len(outcome['ddp000_on_broken_files'])} DDP000 on files CPython rejects", flush=True)
            for line in (outcome["internal_errors"] + outcome["ddp000_on_compiling_files"])[:20]:
                print("   ", line)
            if outcome["too_large"]:
                print("    too large:", ", ".join(outcome["too_large"]))
            if outcome["ddp000_on_broken_files"]:
                print("    CPython rejects:", ", ".join(outcome["ddp000_on_broken_files"]))


if __name__ == "__main__":
    main()
