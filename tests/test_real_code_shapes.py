"""Shapes of ../shared/REAL-CODE-SHAPES.md that no rule example or fixture covers.

Each shape is a small project (a folder with a ``.git`` marker) linted through the real
CLI with the named files, as a user or pre-commit would. Only the shape's rule is
compared: its exact (file, line, column) findings, or none. The coverage table of every
shape is benchmarks/accuracy/SHAPES.md.
"""

import json
import textwrap

import pytest

from tests.helpers import run_cli, write

DDP_HEADER = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
"""


def code(source, ddp=False):
    """A snippet as a file: dedented, after the DDP imports when ``ddp``."""
    return (DDP_HEADER if ddp else "") + textwrap.dedent(source)


def _shape(shape_id, rule, files, expected, named=None, also_folder=False):
    """``files``: name -> source; ``expected``: (file, line, column) findings of ``rule``
    in the named files (empty: silent); ``named``: the files given to the CLI (default:
    the first); ``also_folder``: `ddplint .` must give the named files the same findings."""
    return pytest.param(rule, files, sorted(expected), named or [next(iter(files))], also_folder, id=shape_id)


SHAPES = [
    # Gap 5: `import torch.distributed as dist` binds no `torch`; the module is still DDP code.
    _shape("gap5-torch-only-through-dist-import", "DDP010", {
        "train.py": code("""\
            import torch.distributed as dist

            dist.init_process_group("nccl")
            if dist.get_rank() == 0:
                dist.barrier()
            dist.destroy_process_group()
            """),
    }, [("train.py", 5, 5)]),
    # Framework code: only rank 0 loads (it owns device 0); the same load on rank 1, or on
    # every rank, is still a finding.
    _shape("ddp019-only-global-rank-0-loads", "DDP019", {
        "train.py": code("""\
            import torch
            import torch.distributed as dist
            from lightning.fabric import Fabric

            fab = Fabric(accelerator="cuda", devices=4, strategy="ddp")
            fab.launch()
            torch.cuda.set_device(fab.local_rank)
            model = fab.setup(Net().cuda())
            if fab.global_rank == 0:
                weights = torch.load(path)
            extra = torch.load(other_path)
            if fab.global_rank == 1:
                again = torch.load(path)
            """),
    }, [("train.py", 11, 9), ("train.py", 13, 13)]),
    # Project scope: one named file that imports third-party packages is a complete project.
    _shape("project-one-named-file-with-third-party-imports", "DDP015", {
        "train.py": code("""\
            import numpy as np
            import wandb
            from transformers import AutoModel

            dist.init_process_group("nccl")
            run = wandb.init(project="demo")
            model = DDP(AutoModel.from_pretrained("base").cuda())
            """, ddp=True),
        "notes.py": "TITLE = 'unrelated helper'\n",
    }, [("train.py", 9, 1)], also_folder=True),
    # Project scope: the named file reaches a module of its project root that destroys the group.
    _shape("project-one-named-file-reaches-destroy", "DDP015", {
        "train.py": code("""\
            import numpy as np
            from teardown import close_group

            dist.init_process_group("nccl")
            try:
                model = DDP(Net().cuda())
            finally:
                close_group()
            """, ddp=True),
        "teardown.py": code("""\
            import torch.distributed as dist

            def close_group():
                dist.destroy_process_group()
            """),
    }, [], also_folder=True),
    # Project scope: a LOCAL_RANK read in an independent script does not count for DDP022.
    _shape("project-independent-scripts-local-rank", "DDP022", {
        "a_train.py": code("""\
            import argparse

            parser = argparse.ArgumentParser()
            parser.add_argument("--local_rank", type=int, default=0)
            args = parser.parse_args()
            torch.cuda.set_device(args.local_rank)
            dist.init_process_group("nccl")
            dist.destroy_process_group()
            """, ddp=True),
        "b_demo.py": code("""\
            local_rank = int(os.environ["LOCAL_RANK"])
            torch.cuda.set_device(local_rank)
            dist.init_process_group("nccl")
            dist.destroy_process_group()
            """, ddp=True),
    }, [("a_train.py", 8, 1)], also_folder=True),
    # Gap 3: a save helper imported from a module the project does not hold (its body is not
    # visible), given the DDP model's state on every rank: reported at the call.
    _shape("ddp011-unguarded-imported-save-helper", "DDP011", {
        "train.py": code("""\
            from ckpt_utils import write_ckpt

            dist.init_process_group("nccl")
            model = DDP(net)
            write_ckpt({"net": model.state_dict()}, out)
            """, ddp=True),
    }, [("train.py", 9, 1)], also_folder=True),
]


def _findings(cwd, rule, *paths):
    result = run_cli(*paths, "--no-cache", "--format", "json", "-j", "1", cwd=cwd)
    assert result.returncode in (0, 1), result.stderr
    report = json.loads(result.stdout)
    return sorted((entry["path"], d["range"]["start"]["line"] + 1, d["range"]["start"]["character"] + 1)
                  for entry in report["files"] for d in entry["diagnostics"] if d["code"] == rule)


@pytest.mark.parametrize("rule,files,expected,named,also_folder", SHAPES)
def test_real_code_shape(tmp_path, rule, files, expected, named, also_folder):
    root = tmp_path / "project"
    write(root / ".git" / "HEAD", "ref: refs/heads/main\n")
    for name, source in files.items():
        write(root / name, source)
    assert _findings(root, rule, *named) == expected
    if also_folder:
        whole = _findings(root, rule, ".")
        assert [found for found in whole if found[0] in named] == expected
