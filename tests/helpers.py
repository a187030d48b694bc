"""Shared test helpers: run the real CLI in a subprocess."""

import os
import subprocess
import sys
from pathlib import Path

BAD_SCRIPT = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
model = DDP(Net().cuda(), find_unused_parameters=True)
model = model.to("cuda:0")
"""

CLEAN_SCRIPT = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
try:
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(Net().cuda(), device_ids=[local_rank])
finally:
    dist.destroy_process_group()
"""

# BAD_SCRIPT's two findings of the first rules; tests that count findings select
# these so that rules added later (which may also have a word to say) do not matter.
FIRST_RULES = "DDP005,DDP007"


def run_cli(*args, cwd=None, input=None, env=None):
    """Run `python -m ddplint ARGS` for real; returns CompletedProcess (text)."""
    environment = dict(os.environ)
    environment.pop("NO_COLOR", None)
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "ddplint", *args], cwd=cwd, input=input, env=environment,
        capture_output=True, text=True, timeout=120,
    )


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------- the screen's oracle
def screen_misses(files, settings, root, display=None, jobs=1, cache_dir=None):
    """Lint ``files`` (a project at ``root``) with and without the ast screen.
    Returns the problems: a finding of the judge-everything run (``--no-screen``)
    whose rule's screen did not pass on its file (the screen must be a
    necessary condition), and any difference between the two runs' findings."""
    from ddplint.engine import _project_pairs, build_project, lint_paths
    from ddplint.discovery import module_key
    from ddplint.screen.screening import Verdict, resolve, screen_source

    files = [Path(f) for f in files]
    # A facts cache (``cache_dir``) is shared; --no-screen never uses the result cache.
    unscreened = lint_paths(files, settings, jobs=jobs, root=root, display=display, screen=False, cache_dir=cache_dir)
    screened = lint_paths(files, settings, jobs=jobs, root=root, display=display, cache_dir=cache_dir)
    problems = []
    key = lambda result: [(d.line, d.column, d.code, d.message, d.severity) for d in result.diagnostics]  # noqa: E731
    for a, b in zip(unscreened, screened):
        if key(a) != key(b) or [d.code for d in a.suppressed] != [d.code for d in b.suppressed]:
            problems.append(f"{a.path}: --no-screen {key(a)} != screened {key(b)}")
    project, _ = build_project(_project_pairs(root, settings, files), max_file_size=settings.max_file_size,
                               cache_dir=str(cache_dir) if cache_dir is not None else None)
    shown = display or {}
    by_display = {shown.get(f, f.as_posix()): f for f in files}
    for result in unscreened:
        path = by_display.get(result.path)
        if path is None:
            continue
        module = module_key(path, root)
        facts = project.modules.get(module)
        if facts is not None and facts.screen is not None:
            passed, _ = resolve(Verdict(*facts.screen), project, module)
        else:
            verdict = screen_source(path.read_text(encoding="utf-8", errors="surrogateescape"))
            if verdict is None:
                continue  # CPython rejects it: the judge decides alone
            passed, _ = resolve(verdict, project, module)
        for d in [*result.diagnostics, *result.suppressed]:
            if d.code.startswith("DDP") and d.code not in ("DDP000", "DDP100") and d.code not in passed:
                problems.append(f"{result.path}:{d.line}:{d.column} {d.code} reported but its screen failed")
    return problems
