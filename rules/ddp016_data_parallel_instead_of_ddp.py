"""## What it does
Flags `torch.nn.DataParallel(...)`, also when it is the fallback branch of a DDP
script.

## Why is this bad?
DataParallel runs one Python process that scatters each batch to the GPUs,
replicates the model on every forward, and gathers outputs on GPU 0. The GIL,
the per-step replication and the imbalance on GPU 0 make it markedly slower
than DistributedDataParallel (one process per GPU), and PyTorch recommends DDP
even on a single machine.

## Example
    model = torch.nn.DataParallel(model)

## Use instead
    # launched with: torchrun --nproc_per_node=NGPUS train.py
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(model.cuda(), device_ids=[local_rank])

## References
- https://pytorch.org/docs/stable/generated/torch.nn.DataParallel.html
- https://pytorch.org/tutorials/intermediate/ddp_tutorial.html
"""

from ddplint import names
from ddplint.rule import Invalid, Rule, Valid


class DataParallelInsteadOfDDP(Rule):
    code, name, severity = "DDP016", "data-parallel-instead-of-ddp", "info"
    message = "nn.DataParallel is single-process and slower than DistributedDataParallel; use DDP"
    triggers = ("DataParallel",)

    valid = [
        Valid("from torch.nn.parallel import DistributedDataParallel\nmodel = DistributedDataParallel(model)\n"),
        Valid("import torch\nif isinstance(model, torch.nn.DataParallel):\n    model = model.module\n"),
        Valid("import torch.nn as nn\nclass MyParallel(nn.DataParallel):\n    pass\n"),
        Valid("import torch_geometric.nn as gnn\nmodel = gnn.DataParallel(model)\n"),
        Valid("from mylib import DataParallel\nmodel = DataParallel(model)\n"),
        Valid("import torch\nunwrapped = model.module if isinstance(model, (torch.nn.DataParallel,)) else model\n"),
        Valid("# torch.nn.DataParallel(model) was replaced by DDP\nx = 1\n"),
    ]
    invalid = [
        Invalid("import torch\nmodel = torch.nn.DataParallel(model)\n", line=2, column=9),
        Invalid("import torch.nn as nn\nmodel = nn.DataParallel(model, device_ids=[0, 1])\n", line=2, column=9),
        Invalid("from torch.nn import DataParallel as DP\nnet = DP(net).cuda()\n", line=2, column=7),
        Invalid("from torch.nn.parallel import DataParallel\nmodel = DataParallel(model)\n", line=2, column=9),
        Invalid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
                "if args.distributed:\n    model = DDP(model)\nelse:\n    model = torch.nn.DataParallel(model)\n",
                line=6, column=13),
        Invalid("import torch\ndef wrap(model):\n    if torch.cuda.device_count() > 1:\n"
                "        return torch.nn.parallel.data_parallel.DataParallel(model)\n    return model\n",
                line=4, column=16),
    ]

    def check(self, index):
        for call in index.calls_to(names.DATA_PARALLEL):
            yield self.report(call.node)
