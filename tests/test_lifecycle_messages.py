"""Messages that name the consequence in the user's terms (issue 11, item 4) for
the collective / checkpoint / wrap rules."""

from pathlib import Path

from ddplint.config import Settings
from ddplint.engine import Linter


def _messages(code: str, source: str) -> list[str]:
    linter = Linter(Settings(select=(code,), root=Path.cwd()))
    return [d.message for d in linter.lint_source(source, "train.py").diagnostics]


DIST = "import torch\nimport torch.distributed as dist\n"
DDP = DIST + "from torch.nn.parallel import DistributedDataParallel as DDP\n"


def test_a_literal_checkpoint_name_is_named():
    assert _messages("DDP011", DIST + "torch.save(model.state_dict(), 'last.pt')\n") == [
        "checkpoint saved on every rank: every rank writes 'last.pt' (N writers, one file)"]
    assert "'best.pth'" in _messages(
        "DDP011", DIST + "import os\ntorch.save(model.state_dict(), os.path.join(out, 'best.pth'))\n")[0]


def test_a_name_with_holes_is_not_named():
    found = _messages("DDP011", DIST + "torch.save(model.state_dict(), f'ep{epoch}.pt')\n")
    assert found == ["checkpoint saved on every rank: N processes write the same file"]


def test_a_save_helper_of_the_module_names_the_helper_and_its_unguarded_calls():
    # reported once, at the helper's torch.save
    found = _messages("DDP011", DIST + "def write_ckpt(state, path):\n    torch.save(state, path)\n"
                                       "write_ckpt({'m': model.state_dict()}, 'm.pt')\n"
                                       "for ep in range(3):\n    write_ckpt({'m': model.state_dict()}, 'last.pt')\n")
    assert found == ["checkpoint saved on every rank: write_ckpt() is called on every rank (line 5, 7): "
                     "N processes write the same file"]


def test_a_save_helper_whose_body_is_not_visible_is_named_at_its_call():
    found = _messages("DDP011", DIST + "from ckpt_tools import write_ckpt\n"
                                       "model = torch.nn.parallel.DistributedDataParallel(net)\n"
                                       "write_ckpt({'m': model.state_dict()}, 'm.pt')\n")
    assert found == ["save helper write_ckpt() called on every rank: N processes write the same file"]


def test_a_ddp_forward_may_hang_or_desynchronise_and_a_collective_hangs():
    forward = _messages("DDP010", DDP + "model = DDP(net)\nif rank == 0:\n    model(x)\n")
    assert forward == ["forward of a DDP model (broadcasts buffers) under a rank condition: "
                       "the other ranks do not run it, so the job may hang or desynchronise"]
    barrier = _messages("DDP010", DIST + "if rank == 0:\n    dist.barrier()\n")
    assert barrier == ["collective barrier() under a rank condition: the other ranks never join it "
                       "and the job hangs"]


def test_a_model_parallel_program_is_told_to_shard_over_the_data_parallel_group():
    loader = "from torch.utils.data import DataLoader\ntrain_loader = DataLoader(ds, batch_size=8, shuffle=True)\n"
    plain = _messages("DDP009", DIST + loader)
    assert plain == ["training DataLoader without a DistributedSampler: every rank iterates the whole dataset"]
    parallel = _messages("DDP009", DIST + "from megatron.core import parallel_state\n"
                                          "parallel_state.initialize_model_parallel(tensor_model_parallel_size=2)\n"
                         + loader)
    assert len(parallel) == 1 and "data-parallel group" in parallel[0] and "every data-parallel replica" in parallel[0]
