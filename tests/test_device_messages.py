"""The device rules' messages name what is known statically: where the global
rank comes from (DDP017), and which GPU every rank lands on."""

from pathlib import Path

from ddplint.config import Settings
from ddplint.engine import Linter

DIST = "import os\nimport torch\nimport torch.distributed as dist\n"


def _messages(code, source, filename="train.py"):
    result = Linter(Settings(select=(code,), root=Path.cwd())).lint_source(source, filename)
    return [d.message for d in result.diagnostics]


def test_ddp017_names_where_the_global_rank_comes_from():
    assert _messages("DDP017", DIST + "rank = dist.get_rank()\ntorch.cuda.set_device(rank)\n") == [
        "the global rank (dist.get_rank()) is used as a CUDA device index: it exceeds the GPU count on the "
        "second node; use LOCAL_RANK"]
    [message] = _messages("DDP017", DIST + "rank = int(os.environ['SLURM_PROCID'])\nx = x.to('cuda:%d' % rank)\n")
    assert message.startswith("the global rank ($SLURM_PROCID) is used")
    [message] = _messages("DDP017", DIST + "class Trainer:\n    def __init__(self, net, rank):\n"
                                           "        self.net = net.to(rank)\nTrainer(Net(), dist.get_rank())\n")
    assert message.startswith("the global rank (passed to Trainer() by its callers) is used")
    [message] = _messages("DDP017", DIST + "def worker(gpu, a):\n    rank = a.node_rank * a.ngpus + gpu\n"
                                           "    torch.cuda.set_device(rank)\n")
    assert message.startswith("the global rank (a.node_rank * a.ngpus + gpu) is used")


def test_ddp017_names_the_visible_device_mask():
    [message] = _messages("DDP017", DIST + "rank = int(os.environ['RANK'])\n"
                                           "os.environ['CUDA_VISIBLE_DEVICES'] = str(rank)\n")
    assert message == ("the global rank ($RANK) selects the visible GPU (CUDA_VISIBLE_DEVICES): on the second "
                       "node it names a GPU that does not exist; use LOCAL_RANK")


def test_ddp007_names_the_device():
    [message] = _messages("DDP007", DIST + "model = model.to('cuda:1')\n")
    assert "cuda:1" in message
