"""What project analysis adds to linting a folder (not a timed test).

    python benchmarks/project_overhead.py CORPUS [--jobs 2]

Times, on the same files and settings (all rules, no cache):
  per-file  lint_files with project analysis switched off (ddplint.engine._needs_project)
  project   lint_files as shipped: pass 1 (ast facts per file + join), then the lint
  pass 1    build_project alone
and prints the overhead ``project / per-file - 1`` (the budget is 30%).
Each mode runs in a fresh interpreter so that imports and pools do not carry over.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import sys, time
from pathlib import Path
import ddplint.engine as engine
from ddplint.config import Settings

def no_project(settings):
    return False

def main():
    root, jobs, mode = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    files = sorted(root.rglob("*.py"))
    if mode == "per-file":
        engine._needs_project = no_project
    start = time.perf_counter()
    if mode == "pass 1":
        engine.build_project([(str(p), p.as_posix()) for p in files], jobs)
    else:
        engine.lint_files(files, Settings(root=root), jobs=jobs)
    print(len(files), time.perf_counter() - start)

if __name__ == "__main__":
    main()
"""


def run(corpus: Path, jobs: int, mode: str) -> tuple[int, float]:
    script = Path(__file__).with_name("_project_overhead_child.py")
    script.write_text(_CHILD, encoding="utf-8")
    try:
        output = subprocess.run([sys.executable, str(script), str(corpus), str(jobs), mode],
                                check=True, capture_output=True, text=True).stdout.split()
    finally:
        script.unlink()
    return int(output[0]), float(output[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    times = {}
    for mode in ("per-file", "project", "pass 1"):
        files, seconds = run(args.corpus, args.jobs, mode)
        times[mode] = seconds
        print(f"{mode:>9}: {files} files, {seconds:.1f} s", flush=True)
    print(f"overhead: {times['project'] / times['per-file'] - 1:+.1%} "
          f"(pass 1 alone: {times['pass 1'] / times['per-file']:.1%} of per-file)")


if __name__ == "__main__":
    main()
