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

CUDA training code is recognised by `.cuda()`, `"cuda"` / `"cuda:N"` / `f"cuda:{i}"`
devices, `torch.cuda` calls, an NCCL backend, DDP's `device_ids=`, or `.to(rank)`;
also in another module of the project that the loader's module is used with
(the loader is built in `data.py`, its batches go to the GPU in `train.py`).
`DataLoader` subclasses of well-known libraries (MONAI, PyTorch Geometric,
DGL) count as `DataLoader`s.

Not flagged: loaders with an identity `collate_fn` (`lambda b: b`: raw examples,
not tensors); any explicit `pin_memory=` (also `pin_memory=False`: a deliberate
choice); `**kwargs` that may carry it; `num_workers=0` or no `num_workers`;
CPU-only code; a module that feeds another accelerator itself (JAX/Flax,
`torch_xla`) and uses no CUDA, whatever CUDA code the libraries it imports
contain; a loader factory of a module without CUDA use that only the module's
own `__main__` smoke test calls; a dataset class of the module whose
`__getitem__` returns only its index and text attributes (`{"prompt":
self.prompt, "index": index}`: prompts to generate images from); a dataset that already holds CUDA tensors (cached latents on the
GPU, a Hugging Face dataset after `set_format(..., device="cuda")`: there is nothing to
copy, and `pin_memory=True` would raise); unit tests
(`test_*.py`, `tests/`), whose loaders test behaviour, not throughput; a
loader in the arm of `if mode == "test":` where `mode` is a parameter that
every call in the project fills with another string constant (`Loader(cfg,
"train")`, `Loader(cfg, "online_eval")`): that arm never runs; a loader bound to a name
nothing reads, beside a loader that is read (`val_loader = DataLoader(...)` built and
never iterated): its batches go nowhere.

## References
- https://pytorch.org/docs/stable/data.html#memory-pinning
- https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html
"""

import re

import libcst as cst

from ddplint import names
from ddplint.analysis import flow
from ddplint.analysis.models import project_of
from ddplint.analysis.semantic import SemanticIndex, dotted_name
from ddplint.analysis.values import (GLOBAL, LOCAL, fstring_prefix, is_literal_zero, is_test_module, literal_int,
                                     literal_str, rank_sources)
from ddplint.fixes import UNSAFE, add_keyword, node_fix
from ddplint.rule import Invalid, Rule, Valid

LOADER = "from torch.utils.data import DataLoader\n"
_TORCH_NON_DEVICE = re.compile(r"^torch\.(float|half|bfloat|int|uint|long|double|bool|complex|channels_last)")


def uses_cuda(index: SemanticIndex) -> bool:
    """Does the module move data to a GPU? (``.cuda()``, a ``torch.cuda`` call,
    a "cuda..." device string, an NCCL backend, DDP's ``device_ids=``, or
    ``.to(rank)``; CPU-only code never benefits from pinning.)"""
    cached = index.cache.get("uses_cuda")
    if cached is None:
        cached = bool(index.calls_by_method.get("cuda")) or any(
            (site.qualified_name or "").startswith("torch.cuda.") for site in index.calls
        ) or any(isinstance(value, str) and (value.startswith("cuda") or value == "nccl")
                 for _, value in index.strings
                 ) or any(fstring_prefix(node).startswith("cuda") for node in index.fstrings
                          ) or any(site.keyword("device_ids") is not None for site in index.calls_to(names.DDP)
                                   ) or any(_to_rank(index, site.node) for site in index.method_calls("to"))
        index.cache["uses_cuda"] = cached
    return cached


def _to_rank(index: SemanticIndex, call: cst.Call) -> bool:
    """``x.to(rank)`` / ``x.to(local_rank)``: an integer device is a CUDA device."""
    if not call.args or call.args[0].keyword is not None:
        return False
    target = call.args[0].value
    if literal_int(target) is not None:
        return True
    if dotted_name(target) is None:
        return False
    return bool(rank_sources(index, target) & {GLOBAL, LOCAL}) or bool(
        names.RANK_NAME.match((dotted_name(target) or "").split(".")[-1]))


# Other accelerators: a module that puts its batches on a TPU / JAX device has nothing to pin.
_OTHER_ACCELERATORS = ("jax", "flax", "torch_xla")


def batches_go_to_cuda(index: SemanticIndex) -> bool:
    """CUDA use in this module, or (project analysis) in a module used together
    with it: the entry scripts that reach this module and what they reach. A
    module that drives another accelerator itself (JAX/Flax, torch_xla) and
    uses no CUDA sends its batches there, whatever library code it reaches does."""
    if uses_cuda(index):
        return True
    if any(index.imports_module(other) for other in _OTHER_ACCELERATORS):
        return False
    return project_of(index).in_scope(index.path, lambda m: m.moves_to_cuda)


class DataLoaderWithoutPinMemory(Rule):
    code, name, severity = "DDP006", "dataloader-without-pin-memory", "info"
    message = ("DataLoader with worker processes and no pin_memory: host-to-GPU copies of its "
               "batches cannot overlap compute; pass pin_memory=True")
    triggers = ("DataLoader",)
    uses_project = True

    valid = [
        # The test mode builds a loader and never reads it (it samples from noise): no batch
        # reaches the GPU (a57 Pytorch-Progressive-GAN).
        Valid("""\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader


def test(args, dataset_test):
    loader_test = DataLoader(dataset_test, batch_size=16, shuffle=False, num_workers=8)
    net = torch.nn.Linear(8, 8).cuda()
    with torch.no_grad():
        return net(torch.randn(16, 8, device="cuda"))


def main(args, dataset_test):
    dist.init_process_group("nccl")
    if args.mode == "test":
        test(args, dataset_test)
"""),
        # The Hugging Face dataset is formatted onto the GPU: batches come out as CUDA tensors
        # (a104 ke-t5-downstreams).
        Valid("""\
import torch
import torch.distributed as dist
from datasets import load_dataset
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("nccl")
train_dataset = load_dataset("ke-t5", split="train")
train_dataset.set_format("torch", columns=["input_ids", "labels"], device="cuda")
train_loader = DataLoader(train_dataset, batch_size=8, sampler=DistributedSampler(train_dataset), num_workers=2)
for epoch in range(3):
    for batch in train_loader:
        step(batch)
"""),
        # The validation loader is built and never read: only the training loader's batches
        # reach the GPU (a97 Diffusion_Modality).
        Valid("import torch\nfrom torch.utils.data import DataLoader\n"
              "train_loader = DataLoader(train_ds, batch_size=2, num_workers=1, pin_memory=True)\n"
              "val_loader = DataLoader(val_ds, batch_size=2, num_workers=1)\n"
              "for epoch in range(10):\n    for batch in train_loader:\n        step(batch.cuda())\n"),
        # A dataset of prompts and indices (class images to generate): nothing to pin.
        Valid("""\
import torch
from torch.utils.data import DataLoader, Dataset

class Prompts(Dataset):
    def __init__(self, prompt, n, pixels):
        self.prompt = prompt
        self.n = n
        self.pixels = pixels

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        item = {}
        item["prompt"] = self.prompt
        item["index"] = i
        return item

pipe = build_pipeline().to("cuda")
prompts = Prompts(args.class_prompt, 200, None)
loader = DataLoader(prompts, batch_size=4, num_workers=2)
for batch in loader:
    save(pipe(batch["prompt"]).images, batch["index"])
"""),
        # An identity collate_fn: the batches are raw examples, turned into tensors after the loader.
        Valid(LOADER + "import torch\ndef keep(examples):\n    return examples\n"
                       "loader = DataLoader(records, batch_size=16, num_workers=4, collate_fn=keep)\n"
                       "for examples in loader:\n    ids = torch.tensor([e.token_ids for e in examples]).cuda()\n"),
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
        # a dataset that already holds CUDA tensors: nothing to pin (pin_memory=True would raise)
        Valid("import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
              "latents = torch.load('latents.pt').to(device)\n"
              "cached = TensorDataset(latents, labels.cuda())\n"
              "loader = DataLoader(cached, batch_size=64, num_workers=2)\n"),
        Valid(LOADER + "loader = DataLoader(range(8), num_workers=2)\nassert len(list(loader)) == 8\n"
              "x = torch.ones(1).cuda()\n", filename="tests/test_loader_workers.py"),
        Valid(LOADER + "class GpuCache(Dataset):\n    pass\n"
              "loader = DataLoader(GpuCache(feats.to('cuda', non_blocking=True)), num_workers=4)\n"),
        # batches for another accelerator (JAX, XLA): nothing to pin, even when imported library code uses CUDA
        Valid("import jax\nimport torch\nfrom mylib.pipelines import Pipeline\n" + LOADER +
              "loader = DataLoader(ds, batch_size=8, num_workers=4, collate_fn=to_numpy)\n"
              "for batch in loader:\n    state = p_step(state, jax.device_put(batch))\n"),
        Valid("import torch_xla.core.xla_model as xm\n" + LOADER + "device = xm.xla_device()\n"
              "loader = DataLoader(ds, num_workers=8)\nfor x in loader:\n    x = x.to(device)\n"),
        # CPU-only code: gloo, .to(dtype), no GPU anywhere
        Valid("import torch\nimport torch.distributed as dist\n" + LOADER +
              "dist.init_process_group('gloo')\nloader = DataLoader(ds, num_workers=4)\n"
              "for x in loader:\n    x = x.to(torch.float16)\n"),
        # A "test"-mode loader of a class every call of the project builds in another mode:
        # that branch never runs (nor would it in a caller passing a mode it cannot tell).
        Valid(LOADER + """\
class Batches:
    def __init__(self, cfg, dataset, mode):
        if mode == "train":
            self.loader = DataLoader(dataset, batch_size=cfg.batch, num_workers=8, pin_memory=True)
        elif mode == "test":
            self.loader = DataLoader(dataset, batch_size=1, num_workers=2)

def run(cfg, model, train_set, val_set):
    for x in Batches(cfg, train_set, "train").loader:
        model(x.cuda(non_blocking=True)).sum().backward()
    for x in Batches(cfg, val_set, "train").loader:
        model(x.cuda(non_blocking=True))
"""),
    ]
    invalid = [
        # The same dataset also returning an image tensor.
        Invalid("""\
import torch
from torch.utils.data import DataLoader, Dataset

class Prompts(Dataset):
    def __init__(self, prompt, n, pixels):
        self.prompt = prompt
        self.n = n
        self.pixels = pixels

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        item = {}
        item["prompt"] = self.prompt
        item["index"] = i
        item["pixels"] = self.pixels[i]
        return item

pipe = build_pipeline().to("cuda")
prompts = Prompts(args.class_prompt, 200, None)
loader = DataLoader(prompts, batch_size=4, num_workers=2)
for batch in loader:
    save(pipe(batch["prompt"]).images, batch["index"])
""", line=22, column=10, fixed="""\
import torch
from torch.utils.data import DataLoader, Dataset

class Prompts(Dataset):
    def __init__(self, prompt, n, pixels):
        self.prompt = prompt
        self.n = n
        self.pixels = pixels

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        item = {}
        item["prompt"] = self.prompt
        item["index"] = i
        item["pixels"] = self.pixels[i]
        return item

pipe = build_pipeline().to("cuda")
prompts = Prompts(args.class_prompt, 200, None)
loader = DataLoader(prompts, batch_size=4, num_workers=2, pin_memory=True)
for batch in loader:
    save(pipe(batch["prompt"]).images, batch["index"])
"""),
        # The same class with a caller that builds the "test" loader.
        Invalid(LOADER + """\
class Batches:
    def __init__(self, cfg, dataset, mode):
        if mode == "train":
            self.loader = DataLoader(dataset, batch_size=cfg.batch, num_workers=8, pin_memory=True)
        elif mode == "test":
            self.loader = DataLoader(dataset, batch_size=1, num_workers=2)

def run(cfg, model, train_set, val_set):
    for x in Batches(cfg, train_set, "train").loader:
        model(x.cuda(non_blocking=True)).sum().backward()
    for x in Batches(cfg, val_set, "test").loader:
        model(x.cuda(non_blocking=True))
""", line=7, column=27, fixed=LOADER + """\
class Batches:
    def __init__(self, cfg, dataset, mode):
        if mode == "train":
            self.loader = DataLoader(dataset, batch_size=cfg.batch, num_workers=8, pin_memory=True)
        elif mode == "test":
            self.loader = DataLoader(dataset, batch_size=1, num_workers=2, pin_memory=True)

def run(cfg, model, train_set, val_set):
    for x in Batches(cfg, train_set, "train").loader:
        model(x.cuda(non_blocking=True)).sum().backward()
    for x in Batches(cfg, val_set, "test").loader:
        model(x.cuda(non_blocking=True))
"""),
        # A collate_fn that builds tensors: the batches are pinnable.
        Invalid(LOADER + "import torch\ndef stack(examples):\n    return torch.stack(examples)\n"
                         "loader = DataLoader(records, batch_size=16, num_workers=4, collate_fn=stack)\n"
                         "for x in loader:\n    x = x.cuda()\n", line=5, column=10,
                fixed=LOADER + "import torch\ndef stack(examples):\n    return torch.stack(examples)\n"
                               "loader = DataLoader(records, batch_size=16, num_workers=4, collate_fn=stack, "
                               "pin_memory=True)\nfor x in loader:\n    x = x.cuda()\n"),
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
        # CUDA code recognised by the NCCL backend, DDP's device_ids, or .to(rank)
        Invalid("import torch.distributed as dist\n" + LOADER +
                "dist.init_process_group(backend='nccl')\nloader = DataLoader(ds, batch_size=8, num_workers=4)\n",
                line=4, column=10,
                fixed="import torch.distributed as dist\n" + LOADER + "dist.init_process_group(backend='nccl')\n"
                "loader = DataLoader(ds, batch_size=8, num_workers=4, pin_memory=True)\n"),
        Invalid("import os\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n" + LOADER +
                "loader = DataLoader(ds, num_workers=8)\nmodel = DDP(model, device_ids=[local_rank])\n",
                line=4, column=10,
                fixed="import os\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n" + LOADER +
                "loader = DataLoader(ds, num_workers=8, pin_memory=True)\n"
                "model = DDP(model, device_ids=[local_rank])\n"),
        Invalid("import torch.distributed as dist\n" + LOADER + "rank = dist.get_rank()\n"
                "loader = DataLoader(ds, num_workers=4)\nfor x, y in loader:\n    x, y = x.to(rank), y.to(rank)\n",
                line=4, column=10,
                fixed="import torch.distributed as dist\n" + LOADER + "rank = dist.get_rank()\n"
                "loader = DataLoader(ds, num_workers=4, pin_memory=True)\nfor x, y in loader:\n"
                "    x, y = x.to(rank), y.to(rank)\n"),
        # DataLoader subclasses of well-known libraries
        Invalid("from monai.data import DataLoader\nloader = DataLoader(ds, batch_size=2, num_workers=4)\n"
                "img = batch['img'].cuda()\n", line=2, column=10,
                fixed="from monai.data import DataLoader\n"
                "loader = DataLoader(ds, batch_size=2, num_workers=4, pin_memory=True)\nimg = batch['img'].cuda()\n"),
        Invalid("from torch_geometric.loader import DataLoader\nloader = DataLoader(graphs, batch_size=32, "
                "num_workers=6)\ndata = data.to('cuda')\n", line=2, column=10,
                fixed="from torch_geometric.loader import DataLoader\nloader = DataLoader(graphs, batch_size=32, "
                "num_workers=6, pin_memory=True)\ndata = data.to('cuda')\n"),
    ]

    def screen(self, sketch):
        """The screen (necessary for check() to report): True, False, or the project facts that must hold."""
        return sketch.may_call(names.DATALOADER) and ("num_workers" in sketch.keywords or sketch.max_positional >= 6) \
            and not sketch.in_test_module()

    def check(self, index):
        if is_test_module(index.path):
            return  # a unit test's loader checks behaviour, not input-pipeline throughput
        calls = [call for call in index.calls_to(names.DATALOADER) if not call.may_pass("pin_memory")]
        calls = [call for call in calls if _uses_workers(call)]
        if not calls or not batches_go_to_cuda(index):
            return
        own_cuda = uses_cuda(index)
        for call in calls:
            if _holds_cuda_tensors(index, call) or _identity_collate(index, call) or _yields_text_only(index, call) \
                    or (not own_cuda and _only_self_tested(index, call)) \
                    or flow.in_branch_no_caller_takes(index, call.node) \
                    or _dropped_beside_a_used_loader(index, call, index.calls_to(names.DATALOADER)):
                continue
            workers = literal_int(call.argument("num_workers").value)
            message = self.message if workers is None else (
                f"DataLoader with {workers} worker processes and no pin_memory: host-to-GPU copies of its "
                "batches cannot overlap compute; pass pin_memory=True")
            yield self.report(call.node, message, fix=node_fix("Add pin_memory=True", UNSAFE,
                                                               add_keyword(call.node, "pin_memory", "True")))


def _dropped_beside_a_used_loader(index: SemanticIndex, call, loaders) -> bool:
    """``val_loader = DataLoader(...)`` that nothing reads, next to the training loader that
    is read: its batches never reach the GPU (a97 Diffusion_Modality); or an unread loader of a
    function the project calls. (A lone unread loader elsewhere is a snippet's loader, not
    evidence of a dropped one.)"""
    if not flow.never_read(index, call.node):
        return False
    scope = index.enclosing_scope(call.node)
    if isinstance(scope, cst.FunctionDef) and index.parent(scope) is index.module \
            and project_of(index).callers.get(project_of(index).function_key(index.path, scope.name.value)):
        return True  # ``loader_test`` built in a ``test()`` the program calls, then never read (a57 Progressive-GAN)
    return any(other is not call and index.enclosing_scope(other.node) is scope
               and not flow.never_read(index, other.node) for other in loaders)


def _only_self_tested(index: SemanticIndex, call) -> bool:
    """The loader is built in a function of a module other modules import, whose
    only calls in the project are in the module's own ``if __name__ == "__main__":``
    block (a smoke test of a data module): that block, not the project's GPU
    code, decides where its batches go, and it uses no CUDA. (The ``__main__``
    block of an entry script that nothing imports is the program itself.)"""
    function = next((a for a in index.ancestors(call.node) if isinstance(a, cst.FunctionDef)), None)
    if function is None or index.parent(function) is not index.module:
        return False
    name = function.name.value
    project = project_of(index)
    if not project.reached_by(index.path):
        return False  # an entry script: its ``__main__`` block is the program, not a smoke test
    callers = project.callers.get(project.function_key(index.path, name)) or []
    if not callers or any(path != index.path or fact.caller for path, fact in callers):
        return False
    uses = [site for site in index.calls if isinstance(site.node.func, cst.Name) and site.node.func.value == name]
    return bool(uses) and all(_in_main_block(index, site.node) for site in uses)


def _in_main_block(index: SemanticIndex, node: cst.CSTNode) -> bool:
    return any(isinstance(a, cst.If) and isinstance(a.test, cst.Comparison) and isinstance(a.test.left, cst.Name)
               and a.test.left.value == "__name__" and index.parent(a) is index.module for a in index.ancestors(node))


def _uses_workers(call) -> bool:
    workers = call.argument("num_workers")
    return workers is not None and not is_literal_zero(workers.value)


def _identity_collate(index: SemanticIndex, call) -> bool:
    """``collate_fn=lambda b: b`` or a function of this module that returns its
    argument unchanged: the batches are lists of the dataset's raw items (feature
    objects, strings), which the training loop turns into tensors after the
    loader; there is nothing for pin_memory to pin."""
    collate = call.argument("collate_fn")
    if collate is None:
        return False
    value = collate.value
    if isinstance(value, cst.Lambda):
        return _returns_its_argument(value.params, value.body)
    if isinstance(value, cst.Name):
        functions = index.functions_named(value.value)
        return bool(functions) and all(_identity_function(f) for f in functions)
    return False


def _identity_function(function: cst.FunctionDef) -> bool:
    """``def fn(features): return features`` (one statement)."""
    body = function.body
    if isinstance(body, cst.IndentedBlock):
        if len(body.body) != 1 or not isinstance(body.body[0], cst.SimpleStatementLine):
            return False
        small = body.body[0].body
    else:
        small = body.body
    return len(small) == 1 and isinstance(small[0], cst.Return) \
        and _returns_its_argument(function.params, small[0].value)


def _returns_its_argument(params: cst.Parameters, value) -> bool:
    return len(params.params) == 1 and isinstance(value, cst.Name) and value.value == params.params[0].name.value


_TEXT_ATTRIBUTE = re.compile(r"^(class_|instance_)?(prompt|text|caption|name|path|file_?name)s?$", re.IGNORECASE)


def _yields_text_only(index: SemanticIndex, call) -> bool:
    """The loader's dataset is a class of this module whose ``__getitem__``
    returns a dict of its index and text attributes only (``{"prompt":
    self.prompt, "index": index}``: prompts to generate from): its batches hold
    no tensor worth pinning."""
    if call.argument("collate_fn") is not None:
        return False
    dataset = call.argument("dataset", 0)
    values = index.reaching_values(dataset.value) if dataset is not None and isinstance(dataset.value, cst.Name) \
        else None
    if not values or not all(isinstance(v, cst.Call) and isinstance(v.func, cst.Name) for v in values):
        return False
    classes = {c.name.value: c for c in index.classes}
    for value in values:
        owner = classes.get(value.func.value)
        getitem = next((f for f in index.functions_named("__getitem__")
                        if owner is not None and index.parent(index.parent(f)) is owner), None)
        if getitem is None or not _returns_text_dict(getitem):
            return False
    return True


def _returns_text_dict(function: cst.FunctionDef) -> bool:
    params = [p.name.value for p in function.params.params]
    position = params[1] if len(params) > 1 else None
    statements = [s.body[0] for s in function.body.body if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1]
    if len(statements) != len(function.body.body) or not statements or not isinstance(statements[-1], cst.Return):
        return False
    returned = statements[-1].value
    items: list[cst.BaseExpression] = []
    if isinstance(returned, cst.Dict):
        items = [e.value for e in returned.elements if isinstance(e, cst.DictElement)]
        if len(items) != len(returned.elements):
            return False
    elif isinstance(returned, cst.Name):
        for statement in statements[:-1]:
            if not isinstance(statement, cst.Assign) or len(statement.targets) != 1:
                return False
            target = statement.targets[0].target
            if isinstance(target, cst.Name) and target.value == returned.value:
                if not (isinstance(statement.value, cst.Dict) and not statement.value.elements):
                    return False
            elif isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name) \
                    and target.value.value == returned.value:
                items.append(statement.value)
            else:
                return False
    else:
        return False

    def text_or_index(item: cst.BaseExpression) -> bool:
        if isinstance(item, cst.Name):
            return item.value == position
        if isinstance(item, (cst.SimpleString, cst.Integer)):
            return True
        return isinstance(item, cst.Attribute) and isinstance(item.value, cst.Name) and item.value.value == "self" \
            and _TEXT_ATTRIBUTE.match(item.attr.value) is not None

    return bool(items) and all(text_or_index(item) for item in items)


def _holds_cuda_tensors(index: SemanticIndex, call) -> bool:
    """The loader's dataset already lives on the GPU: built from CUDA tensors
    (``TensorDataset(x.cuda(), y.cuda())``, ``Cache(latents.to(device))``)."""
    dataset = call.argument("dataset", 0)
    return dataset is not None and (_built_from_cuda(index, dataset.value, 0)
                                    or _formatted_onto_cuda(index, dataset.value, call))


def _formatted_onto_cuda(index: SemanticIndex, dataset: cst.BaseExpression, call) -> bool:
    """``ds.set_format("torch", columns=..., device="cuda")`` (a Hugging Face dataset) before
    the loader: its batches come out already on the GPU (a104 ke-t5-downstreams)."""
    name = dotted_name(dataset)
    if name is None:
        return False
    scope = index.enclosing_scope(call.node)
    return any(site.method in ("set_format", "with_format") and site.receiver is not None
               and dotted_name(site.receiver) == name and site.scope is scope and site.order < call.order
               and (literal_str(device.value) or "").startswith("cuda")
               for site in index.method_calls("set_format", "with_format")
               if (device := site.keyword("device")) is not None)


def _built_from_cuda(index: SemanticIndex, expr: cst.BaseExpression, depth: int) -> bool:
    if depth > 3:
        return False
    if isinstance(expr, cst.Call):
        return any(_is_cuda_value(index, arg.value, depth + 1) for arg in expr.args)
    if isinstance(expr, cst.Name):
        values = index.reaching_values(expr)
        return bool(values) and all(_built_from_cuda(index, value, depth + 1) for value in values)
    return False


def _is_cuda_value(index: SemanticIndex, expr: cst.BaseExpression, depth: int) -> bool:
    """A tensor moved to (or allocated on) a GPU: ``x.cuda()``, ``x.to(device)``
    (not ``.to("cpu")`` nor a dtype), ``torch.zeros(n, device="cuda")``."""
    if depth > 4:
        return False
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value == "cuda":
            return True
        if isinstance(func, cst.Attribute) and func.attr.value == "to" and expr.args:
            target = expr.args[0].value if expr.args[0].keyword is None else None
            device = next((a.value for a in expr.args if a.keyword is not None and a.keyword.value == "device"), None)
            target = target if target is not None else device
            if target is None or literal_str(target) == "cpu":
                return False
            qualified = index.qualified_name(target) or ""
            return not _TORCH_NON_DEVICE.match(qualified)
        device = next((a.value for a in expr.args if a.keyword is not None and a.keyword.value == "device"), None)
        return device is not None and literal_str(device) not in (None, "cpu") and (literal_str(device) or "").startswith("cuda")
    if isinstance(expr, cst.Name):
        values = index.reaching_values(expr)
        return bool(values) and all(_is_cuda_value(index, value, depth + 1) for value in values)
    return False
