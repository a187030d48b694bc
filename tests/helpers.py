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
