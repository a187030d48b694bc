"""Import time of every module on the one-file path (issue 13, "start-up").

    python benchmarks/import_times.py [--runs 7] [--top 15]

Runs ``python -X importtime -m ddplint --isolated --no-cache FILE`` on the two
one-file cases of ``bench.py`` (a script with findings, a plain data module
where no screen passes) and prints, per case, the median wall time of the
whole command, the median cumulative import time of the top-level packages
(ddplint's own modules, libcst, click, ...) and the slowest modules by their
own ("self") import time. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import BENCH_ENV, PLAIN_FILE_TEXT, SMALL_FILE  # noqa: E402

_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def one_run(folder: Path, name: str) -> tuple[float, list[tuple[str, int, int, int]]]:
    """Wall seconds and (module, self us, cumulative us, nesting) of one run."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "ddplint", "--isolated", "--no-cache", name],
                          cwd=folder, env=BENCH_ENV, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    rows = []
    for line in done.stderr.splitlines():
        found = _LINE.match(line)
        if found:
            rows.append((found.group(4), int(found.group(1)), int(found.group(2)), len(found.group(3)) // 2))
    return elapsed, rows


def report(label: str, folder: Path, name: str, runs: int, top: int) -> None:
    one_run(folder, name)  # bytecode written, disk cache warm
    walls, cumulative, own = [], defaultdict(list), defaultdict(list)
    for _ in range(runs):
        wall, rows = one_run(folder, name)
        walls.append(wall)
        for module, self_us, total_us, depth in rows:
            own[module].append(self_us)
            if depth == 0:  # imported by ddplint's code or the interpreter itself, not by another module
                cumulative[module].append(total_us)
    print(f"\n{label}: {statistics.median(walls) * 1000:.0f} ms wall (median of {runs}, with -X importtime)")
    print("  top-level imports, cumulative ms:")
    ranked = sorted(cumulative.items(), key=lambda item: -statistics.median(item[1]))
    for module, values in ranked[:top]:
        print(f"    {statistics.median(values) / 1000:7.1f}  {module}")
    print(f"  all imports: {sum(statistics.median(v) for v in cumulative.values()) / 1000:.1f} ms; "
          f"libcst imported: {'yes' if 'libcst' in own else 'no'}")
    print("  slowest modules by their own import time, ms:")
    for module, values in sorted(own.items(), key=lambda item: -statistics.median(item[1]))[:top]:
        print(f"    {statistics.median(values) / 1000:7.1f}  {module}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; {sys.executable}")
    with tempfile.TemporaryDirectory() as scratch:
        one, plain = Path(scratch) / "one", Path(scratch) / "plain"
        one.mkdir(), plain.mkdir()
        (one / "train.py").write_bytes(SMALL_FILE.read_bytes())
        (plain / "data.py").write_text(PLAIN_FILE_TEXT)
        report("one file with findings (train.py)", one, "train.py", args.runs, args.top)
        report("one file, nothing plausible (data.py)", plain, "data.py", args.runs, args.top)


if __name__ == "__main__":
    main()
