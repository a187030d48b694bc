"""## What it does
Flags a `DataLoader` in CUDA training code that uses worker processes
(`num_workers` > 0, or a value that is not a literal 0) and says nothing about
`pin_memory`.

## Why is this bad?
Batches produced by worker processes land in pageable host memory. Copying
pageable memory to the GPU goes through a staging buffer and cannot overlap with
compute, so `batch.to(device, non_blocking=True)` silently becomes a blocking
copy. With `pin_memory=True` the loader's pin thread puts batches in page-locked
memory, the copy runs asynchronously, and the input pipeline stops stalling every
step on every rank.

## Example
    loader = DataLoader(dataset, batch_size=64, sampler=sampler, num_workers=8)
    for x, y in loader:
        x = x.cuda(non_blocking=True)

## Use instead
    loader = DataLoader(dataset, batch_size=64, sampler=sampler, num_workers=8,
                        pin_memory=True)

An explicit `pin_memory=False` is taken as a deliberate choice and not flagged.

Fix (unsafe): adds `pin_memory=True` to the call. Unsafe because pinned memory
is page-locked host memory: many workers with large batches can exhaust it.

## References
- https://pytorch.org/docs/stable/data.html#memory-pinning
- https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html
"""

from ddplint import names
from ddplint.fixes import UNSAFE, add_keyword, node_fix
from ddplint.analysis.values import fstring_prefix, is_literal_zero
from ddplint.rule import Invalid, Rule, Valid
from ddplint.analysis.semantic import SemanticIndex

LOADER = "from torch.utils.data import DataLoader\n"


def uses_cuda(index: SemanticIndex) -> bool:
    """Does the module move data to a GPU? (``.cuda()``, a ``torch.cuda`` call,
    or a "cuda..." device string; CPU-only code never benefits from pinning.)"""
    cached = index.cache.get("uses_cuda")
    if cached is None:
        cached = bool(index.calls_by_method.get("cuda")) or any(
            (site.qualified_name or "").startswith("torch.cuda.") for site in index.calls
        ) or any(isinstance(value, str) and value.startswith("cuda") for _, value in index.strings
                 ) or any(fstring_prefix(node).startswith("cuda") for node in index.fstrings)
        index.cache["uses_cuda"] = cached
    return cached


class DataLoaderWithoutPinMemory(Rule):
    code, name, severity = "DDP006", "dataloader-without-pin-memory", "info"
    message = ("DataLoader with worker processes and no pin_memory: host-to-GPU copies of its "
               "batches cannot overlap compute; pass pin_memory=True")
    triggers = ("DataLoader",)

    valid = [
        Valid(LOADER + "loader = DataLoader(ds, batch_size=32, num_workers=4, pin_memory=True)\n"
              "for x in loader:\n    x = x.cuda()\n"),
        Valid(LOADER + "loader = DataLoader(ds, batch_size=32, num_workers=4, pin_memory=False)\n"
              "for x in loader:\n    x = x.cuda()\n"),
        Valid(LOADER + "loader = DataLoader(ds, num_workers=4, **loader_kwargs)\nx = x.cuda()\n"),
        Valid(LOADER + "loader = DataLoader(ds, batch_size=32)\nfor x in loader:\n    x = x.cuda()\n"),
        Valid(LOADER + "loader = DataLoader(ds, batch_size=32, num_workers=0)\nx = x.to('cuda')\n"),
        Valid(LOADER + "loader = DataLoader(ds, batch_size=32, num_workers=8)\n"
              "for x in loader:\n    x = x.to('cpu')\n"),
        Valid(LOADER + "loader = DataLoader(ds, 32, True, None, None, 4, None, True)\nx = x.cuda()\n"),
        Valid("from mydata import DataLoader\nloader = DataLoader(ds, num_workers=4)\nx = x.cuda()\n"),
    ]
    invalid = [
        Invalid(LOADER + "loader = DataLoader(ds, batch_size=32, num_workers=4)\n"
                "for x, y in loader:\n    x = x.cuda(non_blocking=True)\n", line=2, column=10,
                fixed=LOADER + "loader = DataLoader(ds, batch_size=32, num_workers=4, pin_memory=True)\n"
                "for x, y in loader:\n    x = x.cuda(non_blocking=True)\n"),
        # One argument per line: the keyword gets its own line (no trailing comma before).
        Invalid("import torch\nloader = torch.utils.data.DataLoader(\n    ds, batch_size=32, shuffle=False,\n"
                "    num_workers=args.workers)\ndevice = torch.device('cuda', local_rank)\n", line=2, column=10,
                fixed="import torch\nloader = torch.utils.data.DataLoader(\n    ds, batch_size=32, shuffle=False,\n"
                "    num_workers=args.workers, pin_memory=True)\ndevice = torch.device('cuda', local_rank)\n"),
        Invalid("import torch\nfrom torch.utils.data import DataLoader\n"
                "train_loader = DataLoader(train_set, 64, False, sampler, None, 8)\n"
                "model = model.to(f'cuda:{local_rank}')\n", line=3, column=16,
                fixed="import torch\nfrom torch.utils.data import DataLoader\n"
                "train_loader = DataLoader(train_set, 64, False, sampler, None, 8, pin_memory=True)\n"
                "model = model.to(f'cuda:{local_rank}')\n"),
        Invalid("from torch.utils.data import dataloader\nimport torch\n"
                "loader = dataloader.DataLoader(ds, num_workers=2)\ntorch.cuda.set_device(local_rank)\n",
                line=3, column=10,
                fixed="from torch.utils.data import dataloader\nimport torch\n"
                "loader = dataloader.DataLoader(ds, num_workers=2, pin_memory=True)\n"
                "torch.cuda.set_device(local_rank)\n"),
        Invalid(LOADER + "def build(cfg, ds):\n    return DataLoader(ds, batch_size=cfg.bs,\n"
                "                      num_workers=cfg.workers, drop_last=True)\n"
                "def step(x):\n    return x.cuda()\n", line=3, column=12,
                fixed=LOADER + "def build(cfg, ds):\n    return DataLoader(ds, batch_size=cfg.bs,\n"
                "                      num_workers=cfg.workers, drop_last=True, pin_memory=True)\n"
                "def step(x):\n    return x.cuda()\n"),
        Invalid("import torch.utils.data as tud\nloader = tud.DataLoader(ds, num_workers=os.cpu_count())\n"
                "device = 'cuda'\n", line=2, column=10,
                fixed="import torch.utils.data as tud\n"
                "loader = tud.DataLoader(ds, num_workers=os.cpu_count(), pin_memory=True)\ndevice = 'cuda'\n"),
        Invalid(LOADER + "val_loader = DataLoader(val_set, batch_size=256, num_workers=4, shuffle=False)\n"
                "images = images.cuda()\n", line=2, column=14,
                fixed=LOADER + "val_loader = DataLoader(val_set, batch_size=256, num_workers=4, shuffle=False, "
                "pin_memory=True)\nimages = images.cuda()\n"),
        # Arguments one per line with a trailing comma: the style is kept (CRLF too).
        Invalid(LOADER.replace("\n", "\r\n") + "loader = DataLoader(\r\n    ds,\r\n    num_workers=8,  # tuned\r\n)\r\n"
                "x = x.cuda()\r\n", line=2, column=10,
                fixed=LOADER.replace("\n", "\r\n") + "loader = DataLoader(\r\n    ds,\r\n    num_workers=8,  # tuned\r\n"
                "    pin_memory=True,\r\n)\r\nx = x.cuda()\r\n"),
        # No trailing comma and a comment after the last argument: the comment stays with it.
        Invalid(LOADER + "loader = DataLoader(\n\tds,\n\tnum_workers=8  # tuned\n)\nx = x.cuda()\n",
                line=2, column=10,
                fixed=LOADER + "loader = DataLoader(\n\tds,\n\tnum_workers=8,  # tuned\n\tpin_memory=True\n)\n"
                "x = x.cuda()\n"),
    ]

    def check(self, index):
        if not uses_cuda(index):
            return
        for call in index.calls_to(names.DATALOADER):
            if call.may_pass("pin_memory"):
                continue
            workers = call.argument("num_workers")
            if workers is None or is_literal_zero(workers.value):
                continue
            yield self.report(call.node, fix=node_fix("Add pin_memory=True", UNSAFE,
                                                      add_keyword(call.node, "pin_memory", "True")))
