"""## What it does
Flags `SyncBatchNorm.convert_sync_batchnorm(model)` applied to a model that was
already wrapped in `DistributedDataParallel` (the wrapper, its `.module`, or the
inner model passed to `DDP(...)` earlier; also a function parameter that the
project passes a DDP model to). MinkowskiEngine's
`ME.MinkowskiSyncBatchNorm.convert_sync_batchnorm(model)` (sparse-tensor BatchNorm)
is the same converter with the same mistake and is flagged alike.

## Why is this bad?
DDP records the module's parameters and buffers when it is constructed. The
converted model is a new module tree that the DDP wrapper does not drive
(or, when the wrapper itself is converted, its BatchNorm layers are replaced behind
the reducer's back): batch statistics are not synchronised the way the
script intends, and BN statistics silently differ across ranks.

## Example
    model = DDP(model, device_ids=[local_rank])
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)

## Use instead
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = DDP(model, device_ids=[local_rank])

Not flagged: conversion before the wrap, also in a method that `__init__` runs
before it wraps the attribute (`self.start = self.load_from_ckpt()` converting
`self.net`, then `self.net = DDP(self.net)`), when nothing else calls it; a convert after
`self.model = self.model.to(rank)` that
the method wraps only afterwards (the move holds what the attribute held before); a
DataParallel wrapper; a wrap of another model.

## References
- https://pytorch.org/docs/stable/generated/torch.nn.SyncBatchNorm.html
"""

from __future__ import annotations

from typing import Iterator

from ddplint import names
from ddplint.analysis.models import wrapped_root
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import SemanticIndex

IMPORTS = "import torch.nn as nn\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"


class SyncBnAfterDdpWrap(Rule):
    code, name, severity = "DDP012", "syncbn-after-ddp-wrap", "info"
    message = "convert_sync_batchnorm after the DDP wrap: convert first, then wrap"
    triggers = ("convert_sync_batchnorm",)
    needs_ddp_context = True
    uses_project = True

    valid = [
        # ``self.model = self.model.to(rank)`` before the convert holds what the attribute held
        # before it, not the wrap the method makes afterwards (a100 dllib).
        Valid("""\
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


class Trainer:
    def __init__(self, model, use_sync_batch):
        self.model = model
        self.use_sync_batch = use_sync_batch

    def train(self, rank, epochs):
        self.model = self.model.to(rank)
        if self.use_sync_batch:
            self.model = nn.SyncBatchNorm.convert_sync_batchnorm(self.model)
        self.model = DistributedDataParallel(self.model, device_ids=[rank])
        for epoch in range(epochs):
            self.train_on_epoch(epoch)
"""),
        # A loading method that __init__ runs before it wraps the attribute (a81 reflected_gnt).
        Valid(IMPORTS + "class Model:\n    def __init__(self, args):\n        self.net = Net()\n"
                        "        self.start = self.restore(args.ckpt)\n        if args.distributed:\n"
                        "            self.net = DDP(self.net, device_ids=[args.local_rank])\n"
                        "    def restore(self, path):\n        self.net.load_state_dict(load(path))\n"
                        "        self.net = nn.SyncBatchNorm.convert_sync_batchnorm(self.net)\n        return 0\n"),
        Valid(IMPORTS + "model = nn.SyncBatchNorm.convert_sync_batchnorm(model)\nmodel = DDP(model)\n"),
        Valid(IMPORTS + "if args.sync_bn:\n    net = nn.SyncBatchNorm.convert_sync_batchnorm(net)\n"
                        "net = DDP(net, device_ids=[gpu])\n"),
        Valid(IMPORTS + "def build(model):\n    return DDP(nn.SyncBatchNorm.convert_sync_batchnorm(model))\n"),
        Valid(IMPORTS + "ema = DDP(other)\nmodel = nn.SyncBatchNorm.convert_sync_batchnorm(model)\n"),
        Valid(IMPORTS + "def prepare(m):\n    return nn.SyncBatchNorm.convert_sync_batchnorm(m)\n"
                        "model = DDP(prepare(model))\n"),
        Valid(IMPORTS + "class T:\n    def setup(self):\n"
                        "        self.model = nn.SyncBatchNorm.convert_sync_batchnorm(self.model)\n"
                        "        self.model = DDP(self.model)\n"),
        Valid("import torch.nn as nn\nmodel = nn.DataParallel(model)\n"
              "model = nn.SyncBatchNorm.convert_sync_batchnorm(model)\n"),
        Valid("import MinkowskiEngine as ME\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
              "net = ME.MinkowskiSyncBatchNorm.convert_sync_batchnorm(net)\nnet = DDP(net, device_ids=[rank])\n"),
        Valid(IMPORTS + "def a():\n    model = DDP(model)\ndef b(model):\n"
                        "    return nn.SyncBatchNorm.convert_sync_batchnorm(model)\n"),
    ]
    invalid = [
        # ... but run again after the wrap (a reload during training), the conversion comes too late.
        Invalid(IMPORTS + "class Model:\n    def __init__(self, args):\n        self.net = Net()\n"
                          "        if args.distributed:\n"
                          "            self.net = DDP(self.net, device_ids=[args.local_rank])\n"
                          "        self.restore(args.ckpt)\n"
                          "    def restore(self, path):\n        self.net.load_state_dict(load(path))\n"
                          "        self.net = nn.SyncBatchNorm.convert_sync_batchnorm(self.net)\n",
                line=11, column=20),
        Invalid(IMPORTS + "model = DDP(model)\nmodel = nn.SyncBatchNorm.convert_sync_batchnorm(model)\n",
                line=4, column=9),
        Invalid(IMPORTS + "ddp = DDP(net)\nnet = nn.SyncBatchNorm.convert_sync_batchnorm(net)\n",
                line=4, column=7),
        Invalid(IMPORTS + "model = DDP(model)\nmodel.module = nn.SyncBatchNorm.convert_sync_batchnorm(model.module)\n",
                line=4, column=16),
        Invalid("import torch\nfrom torch.nn.parallel import DistributedDataParallel\n"
                "model = DistributedDataParallel(model, device_ids=[rank])\n"
                "model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)\n", line=4, column=9),
        Invalid(IMPORTS + "class Trainer:\n    def __init__(self, m):\n        self.model = DDP(m)\n"
                          "        self.model = nn.SyncBatchNorm.convert_sync_batchnorm(self.model)\n",
                line=6, column=22),
        Invalid(IMPORTS + "def sync(model):\n    return nn.SyncBatchNorm.convert_sync_batchnorm(model)\n"
                          "model = sync(DDP(net))\n", line=4, column=12),
        Invalid("from torch.nn import SyncBatchNorm\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
                "def main():\n    net = DDP(build())\n    if cfg.sync_bn:\n"
                "        net = SyncBatchNorm.convert_sync_batchnorm(net)\n", line=6, column=15),
        Invalid(IMPORTS + "model = DDP(model, device_ids=[local_rank])\nopt = make_opt(model)\n"
                          "model = nn.modules.batchnorm.SyncBatchNorm.convert_sync_batchnorm(model)\n",
                line=5, column=9),
        # MinkowskiEngine's converter has the same shape and the same consequence.
        Invalid("import MinkowskiEngine as ME\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
                "def setup(net, rank):\n    ddp_net = DDP(net.cuda(rank), device_ids=[rank])\n"
                "    ddp_net = ME.MinkowskiSyncBatchNorm.convert_sync_batchnorm(ddp_net)\n    return ddp_net\n",
                line=5, column=15),
        Invalid("from MinkowskiEngine import MinkowskiSyncBatchNorm\nimport torch\n"
                "model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[gpu])\n"
                "if cfg.sync_bn:\n    model = MinkowskiSyncBatchNorm.convert_sync_batchnorm(model)\n",
                line=5, column=13),
    ]

    def screen(self, sketch):
        """The screen (necessary for check() to report): True, False, or the project facts that must hold."""
        return sketch.may_call(names.SYNC_BN_CONVERT, names.ME_SYNC_BN_CONVERT)

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        for site in index.calls_to(names.SYNC_BN_CONVERT, names.ME_SYNC_BN_CONVERT):
            module = site.argument("module", 0)
            if module is not None and wrapped_root(index, module.value, site.order) is not None:
                yield self.report(site.node)
