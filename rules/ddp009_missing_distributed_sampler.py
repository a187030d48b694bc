"""## What it does
Flags a training `DataLoader` (its name says `train`, or it shuffles) over a
map-style dataset, in DDP code, built with no `sampler` and no `batch_sampler`;
a project subclass of `DataLoader` without an `__init__` of its own counts as
`DataLoader`; a builder's `DataLoader(ds, shuffle=shuffle)` whose `shuffle` parameter some project
call fills with True;
also `DataLoader(ds, **kw)` where `kw` is a dict built in the function from
literal keys (`{"shuffle": True, ...}`, `dict(...)`, `kw.update({...})`) that
shuffles and carries no sampler; and `train_loader = get_loader(ds, bs)`
calling a project function that builds a `DistributedSampler` only when a flag
defaulting to False is passed (`dist=False`) without passing it, over data not
split by rank.

Not flagged: an `IterableDataset` (it shards itself; also a Hugging Face
`load_dataset(..., streaming=True)`, through a project transform); a loader of the
training set with `shuffle=False` that only project functions which train nothing
read (a feature extractor picking exemplars); a custom sampler or batch
sampler; data sharded by rank by hand (`Subset(ds, range(rank, n, world))`,
`ds.use_partition(rank)`, `dataset[idx]` with `idx` sliced by rank, a dataset made from
a data list indexed by rank, also by keyword (`CacheDataset(data=partition_dataset(...)[rank])`), data out of a
project class that asks for the rank and the world size, also through a factory
returning that class); evaluation loaders and loaders built on rank 0 only,
or read only under a rank guard (`if local_rank == 0: next(iter(self.vis_loader))`);
single-process branches (the innermost arm of a distribution test decides: the
`elif parallel == "FSDP":` after `if parallel == "DDP":` is distributed; a loader
builder called only in single-process arms of other modules, `if args.local_rank == -1:`) and
launcher-parent code; `**kwargs` ddplint cannot
read; loaders prepared by accelerate / Lightning. In a module that sets up
tensor or pipeline parallelism (`initialize_model_parallel(...)`) the message
says to shard over the data-parallel group: the ranks of a model-parallel group
must read the same batches.

## Why is this bad?
Without a `DistributedSampler` every rank iterates the whole dataset: an epoch
costs N times the work it should, each optimizer step averages N copies of
the same (or overlapping) batches, and the effective batch size and learning-rate
schedule are not what the script believes.

## Example
    train_loader = DataLoader(train_set, batch_size=64, shuffle=True)

## Use instead
    sampler = DistributedSampler(train_set)
    train_loader = DataLoader(train_set, batch_size=64, sampler=sampler)

## References
- https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
- https://pytorch.org/tutorials/intermediate/ddp_tutorial.html
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterator, Optional

import libcst as cst

from ddplint import names
from ddplint.analysis.values import literal_bool, literal_str, name_reads, uses_imported_module
from ddplint.analysis import flow
from ddplint.analysis.flow import earlier_statements, enclosing_function
from ddplint.analysis.models import function_key, parameter_values, project_of
from ddplint.screen.facts import SHARDING_FRAMEWORKS, STRING_PREFIX, TRUE
from ddplint.analysis.ranks import is_rank_guarded, is_rank_value, rank_guards
from ddplint.analysis.roles import is_worker_code, run_by_single_process_scripts_only
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import CallSite, SemanticIndex, dotted_name

IMPORTS = "import torch.distributed as dist\nfrom torch.utils.data import DataLoader\n"
_EVAL_NAME = re.compile(r"val|test|eval|dev|calib|infer|predict", re.IGNORECASE)
# Frameworks that shard loaders themselves (accelerate's prepare, Lightning's Trainer).
_STREAMING = re.compile(r"streaming\s*=\s*True|to_iterable_dataset\(")
_DATA_KEYWORDS = ("data", "dataset", "datalist", "data_list")
_SHARDED_BY_HAND = re.compile(r"rank|world_size|num_replicas|shard|split_by_node|num_shards", re.IGNORECASE)

# A loader builder whose ``shuffle`` comes from its callers (a105 rDL-SIM).
LOADER_BUILDER = """\
def get_loader(mode, root, batch_size, shuffle=False, num_workers=0):
    dataset = Microscopy(mode, root)
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, num_workers=num_workers)

"""

class MissingDistributedSampler(Rule):
    code, name, severity = "DDP009", "missing-distributed-sampler", "warning"
    message = "training DataLoader without a DistributedSampler: every rank iterates the whole dataset"
    # A DataLoader, or a call of a loader builder (``get_loader(...)``, FunctionFacts.sampler_switch).
    triggers = ("DataLoader", "loader(")
    needs_ddp_context = True
    uses_project = True

    valid = [
        # The data list is partitioned by rank before MONAI's dataset is made from it (by keyword;
        # a101 monaicore).
        Valid("""\
import torch.distributed as dist
from monai.data import CacheDataset, DataLoader, partition_dataset


def main(cfg, multi_gpu):
    if multi_gpu:
        dist.init_process_group("nccl")
    train_data = prepare_data(cfg["root"], "Train")
    if multi_gpu:
        train_data = partition_dataset(data=train_data, num_partitions=dist.get_world_size(),
                                       shuffle=True, seed=cfg["seed"])[dist.get_rank()]
    train_ds = CacheDataset(data=train_data, transform=train_transforms, cache_rate=1.0)
    train_loader = DataLoader(train_ds, batch_size=cfg["batch_size"], shuffle=True, num_workers=4)
    for epoch in range(cfg["epochs"]):
        for batch in train_loader:
            step(batch)
"""),
        Valid(IMPORTS + "from torch.utils.data import DistributedSampler\n"
                        "train_loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))\n"),
        Valid(IMPORTS + "train_loader = DataLoader(ds, batch_sampler=bucket_sampler)\n"),
        Valid(IMPORTS + "from torch.utils.data import IterableDataset\nclass Stream(IterableDataset):\n"
                        "    pass\ntrain_ds = Stream()\ntrain_loader = DataLoader(train_ds, batch_size=8)\n"),
        # Every call asks the builder for the datasets: its plain loaders are never built (a64 LLM4SNLI).
        Valid(IMPORTS + "from torch.utils.data import DistributedSampler\n"
                        "def build(data, bs, return_datasets=False):\n    if return_datasets:\n        return data\n"
                        "    train_loader = DataLoader(data, shuffle=True, batch_size=bs)\n    return train_loader\n"
                        "train_ds = build(raw, 32, return_datasets=True)\n"
                        "train_loader = DataLoader(train_ds, batch_size=32, sampler=DistributedSampler(train_ds))\n"),
        # A loader of the training set (shuffle=False) that only a feature extractor reads (a74 incrementvideo).
        Valid(IMPORTS + "import torch\ndef extract(loader, model):\n    feats = []\n    with torch.no_grad():\n"
                        "        for x, _ in loader:\n            feats.append(model(x))\n    return feats\n"
                        "def main(ds, model):\n    dist.init_process_group('nccl')\n"
                        "    train_loader_for_exemplar = DataLoader(ds, batch_size=8, shuffle=False)\n"
                        "    return extract(train_loader_for_exemplar, model)\n"),
        # A Hugging Face streaming dataset (an IterableDataset), passed through a project transform.
        Valid(IMPORTS + "from datasets import load_dataset\ndef prepare(ds, seed):\n    return ds.shuffle(seed=seed)\n"
                        "def main(path):\n    dist.init_process_group('nccl')\n"
                        "    data = load_dataset('parquet', data_files={'train': path}, streaming=True)['train']\n"
                        "    data = prepare(data, seed=1)\n"
                        "    train_loader = DataLoader(data, batch_size=32, num_workers=4)\n"
                        "    for batch in train_loader:\n        step(batch)\n"),
        # What a factory builds through a chain of IterableDataset stages (a62 so-vits-svc's pipeline).
        Valid(IMPORTS + "from torch.utils.data import IterableDataset\nclass DataList(IterableDataset):\n"
                        "    pass\nclass Processor(IterableDataset):\n    def __init__(self, source, f):\n"
                        "        self.source, self.f = source, f\n"
                        "def Dataset(files, stages):\n    dataset = DataList(files)\n    for f in stages:\n"
                        "        dataset = Processor(dataset, f)\n    return dataset\n"
                        "train_dataset = Dataset(files, stages)\n"
                        "train_loader = DataLoader(train_dataset, batch_size=None, num_workers=4)\n"),
        Valid(IMPORTS + "train_ds = Subset(ds, range(rank, len(ds), world_size))\n"
                        "train_loader = DataLoader(train_ds, shuffle=True)\n"),
        Valid(IMPORTS + "if rank == 0:\n    val_loader = DataLoader(val_ds, batch_size=8)\n"),
        Valid(IMPORTS + "val_loader = DataLoader(val_ds, batch_size=8, shuffle=False)\n"),
        # A mode whose other arm builds the DistributedSampler: this arm is the single-process one
        # (a98 bert_seq2seq_DDP).
        Valid(IMPORTS + """\
import torch


class Trainer:
    def __init__(self, env_type="pytorch"):
        self.env_type = env_type
        if env_type == "DDP":
            dist.init_process_group("nccl")

    def get_dataloader(self, dataset, shuffle=False, batch_size=1):
        if self.env_type == "pytorch":
            return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle)
        else:
            sampler = torch.utils.data.distributed.DistributedSampler(dataset, shuffle=shuffle)
            return DataLoader(dataset, batch_size=batch_size, sampler=sampler)

    def train(self, model, dataset):
        loader = self.get_dataloader(dataset, shuffle=True, batch_size=8)
        for batch in loader:
            model(batch).sum().backward()
"""),
        # A helper that pulls a few batches for samples from a shuffling loader it builds.
        Valid(IMPORTS + """\
def extract_sample(dataset, size_batch, num_iter, is_shuffle):
    dataloader = DataLoader(dataset, batch_size=size_batch, shuffle=is_shuffle, drop_last=True)
    xs = []
    for i, (x, c) in enumerate(dataloader):
        if i >= num_iter:
            break
        xs.append(x)
    return xs


def main(dataset, args):
    dist.init_process_group("nccl")
    sample_train = extract_sample(dataset, args.size_batch, 1, True)
"""),
        # A subclass whose own __init__ builds the sampler.
        Valid(IMPORTS + """\
from torch.utils.data import DistributedSampler


class ShardedLoader(DataLoader):
    def __init__(self, dataset, batch_size, shuffle=True):
        super().__init__(dataset, batch_size=batch_size, sampler=DistributedSampler(dataset, shuffle=shuffle))


def setup_loader(dataset, batch_size):
    loader = ShardedLoader(dataset, batch_size, shuffle=True)
    while True:
        yield from loader
"""),
        # A loader builder that no call asks to shuffle.
        Valid(IMPORTS + LOADER_BUILDER + """
def main(args):
    dist.init_process_group("nccl")
    loader = get_loader("val", args.root, args.batch_size, False, 4)
    evaluate(loader)
"""),
        Valid(IMPORTS + "train_loader = DataLoader(ds, **loader_kwargs)\n"),
        Valid("from torch.utils.data import DataLoader\ntrain_loader = DataLoader(ds, shuffle=True)\n"),
        Valid(IMPORTS + "from accelerate import Accelerator\naccelerator = Accelerator()\n"
                        "train_loader = accelerator.prepare(DataLoader(ds, shuffle=True))\n"),
        Valid(IMPORTS + "train_loader = DataLoader(ds, batch_size=8, sampler=sampler if ddp else None)\n"),
        Valid(IMPORTS + "loader = DataLoader(ds, batch_size=8)\n"),  # nothing says "training"
        # Returned to callers we cannot see (accelerate may prepare it there).
        Valid(IMPORTS + "def build_train_loader(ds):\n    return DataLoader(ds, batch_size=8, shuffle=True)\n"),
        Valid(IMPORTS + "def build_loaders(train_set, val_set):\n"
                        "    train_loader = DataLoader(train_set, batch_size=8, shuffle=True)\n"
                        "    val_loader = DataLoader(val_set, batch_size=8)\n    return train_loader, val_loader\n"),
        Valid(IMPORTS + "def build_loaders(cfg, train_set):\n"
                        "    train_dl = DataLoader(train_set, shuffle=True) if train_set is not None else None\n"
                        "    return train_dl, None\n"),
        # Sharded by hand through a call that takes the rank.
        Valid(IMPORTS + "train_set = Corpus(path)\ntrain_set.use_partition(dist.get_rank())\n"
                        "train_loader = DataLoader(train_set, batch_size=8, shuffle=True)\n"),
        Valid(IMPORTS + "def main(rank, world_size):\n    ds = Shards(root)\n    ds.select(rank, world_size)\n"
                        "    train_loader = DataLoader(ds, batch_size=8, shuffle=True)\n"),
        # A shuffling loader only rank 0 reads (a batch for plots).
        Valid(IMPORTS + """\
class Runner:
    def __init__(self, ds, local_rank):
        self.local_rank = local_rank
        self.train_loader = DataLoader(ds, batch_size=4, sampler=DistributedSampler(ds))
        self.vis_loader = DataLoader(ds, batch_size=2, shuffle=True)

    def run(self, epochs):
        for ep in range(epochs):
            if self.local_rank == 0 and ep % 10 == 0:
                render(next(iter(self.vis_loader)))
            for batch in self.train_loader:
                self.step(batch)
"""),
        # The single-process branch.
        Valid(IMPORTS + "if args.distributed:\n    sampler = DistributedSampler(ds)\n"
                        "    train_loader = DataLoader(ds, batch_size=8, sampler=sampler)\nelse:\n"
                        "    train_loader = DataLoader(ds, batch_size=8, shuffle=True)\n"),
        # Spread keywords that carry a sampler, or that ddplint cannot read.
        Valid(IMPORTS + "kw = {'batch_size': 8, 'sampler': DistributedSampler(ds)}\n"
                        "train_loader = DataLoader(ds, **kw)\n"),
        Valid(IMPORTS + "kw = dict(batch_size=8, shuffle=True)\nkw.update(extra)\ntrain_loader = DataLoader(ds, **kw)\n"),
        Valid(IMPORTS + "kw = {'batch_size': 8, 'shuffle': True}\nkw['sampler'] = sampler\n"
                        "train_loader = DataLoader(ds, **kw)\n"),
        # A sanity check that shows one batch and stops: no training iterates it.
        Valid(IMPORTS + "tr_loader = DataLoader(ds, batch_size=8, shuffle=True)\n"
                        "for step, (img, gt) in enumerate(tr_loader):\n    plot(img, gt)\n    break\n"),
        Valid(IMPORTS + "def preview(ds):\n    train_loader = DataLoader(ds, batch_size=4, shuffle=True)\n"
                        "    images, labels = next(iter(train_loader))\n    save_grid(images)\n"),
        # The single-process arm of a test named for a distributed run (``is_dist()``, a ``dist``
        # flag, ``get_world_size() > 1``): one process, nothing to shard (a34 coldhottrain, pachyderm).
        Valid(IMPORTS + "from torch.utils.data import DistributedSampler\n"
                        "def is_dist():\n    return dist.is_available() and dist.is_initialized()\n"
                        "def main(texts):\n    if is_dist():\n"
                        "        loader = DataLoader(texts, batch_size=8, sampler=DistributedSampler(texts))\n"
                        "    else:\n        loader = DataLoader(texts, batch_size=8, shuffle=True)\n"
                        "    for batch in loader:\n        step(batch)\n"),
        Valid(IMPORTS + "def fit(d_train, dist_on: bool, dist_flag):\n    dist = dist_flag\n"
                        "    if dist:\n        train_loader = DataLoader(d_train, sampler=make_sampler(d_train))\n"
                        "    else:\n        train_loader = DataLoader(d_train, batch_size=4, shuffle=True)\n"
                        "    for x in train_loader:\n        step(x)\n"),
        # The indices it takes are this rank's slice (a79 tokengt): sharded by hand.
        Valid(IMPORTS + "import math\ndef run(rank, world, dataset, idx):\n"
                        "    dist.init_process_group('nccl', rank=rank, world_size=world)\n"
                        "    if world > 1:\n        idx = idx.split(math.ceil(len(idx) / world))[rank]\n"
                        "    train_dataset = dataset[idx]\n"
                        "    train_loader = DataLoader(train_dataset, batch_size=8, shuffle=True)\n"),
        # The other arm of the flag builds the DistributedSampler: this arm is the single-process run
        # (a56 sewformer's ``if multiprocess:``).
        Valid(IMPORTS + "from torch.utils.data import DistributedSampler\n"
                        "def loaders(train_set, bs, multiprocess):\n    if multiprocess:\n"
                        "        sampler = DistributedSampler(train_set, drop_last=True)\n"
                        "        train_loader = DataLoader(train_set, bs, sampler=sampler)\n    else:\n"
                        "        train_loader = DataLoader(train_set, bs, shuffle=True)\n"
                        "    for batch in train_loader:\n        step(batch)\n"
                        "dist.init_process_group('nccl')\n"),
    ]
    invalid = [
        # An option whose other arm builds no sampler says nothing about the run: flagged.
        Invalid(IMPORTS + "from torch.utils.data import DistributedSampler\n"
                          "def loaders(train_set, bs, cfg):\n    dist.init_process_group('nccl')\n"
                          "    if cfg.balanced:\n"
                          "        train_loader = DataLoader(train_set, bs, sampler=balanced(train_set))\n"
                          "    else:\n        train_loader = DataLoader(train_set, bs, shuffle=True)\n"
                          "    for batch in train_loader:\n        step(batch)\n", line=9, column=24),
        # ... but a helper that trains on it needs the sampler.
        Invalid(IMPORTS + "import torch\ndef fit(loader, model):\n    for x, _ in loader:\n"
                          "        loss = model(x).sum()\n        loss.backward()\n"
                          "def main(ds, model):\n    dist.init_process_group('nccl')\n"
                          "    train_loader = DataLoader(ds, batch_size=8, shuffle=False)\n"
                          "    fit(train_loader, model)\n", line=10, column=20),
        # ... but a call that leaves the switch off builds them.
        Invalid(IMPORTS + "def build(data, bs, return_datasets=False):\n    if return_datasets:\n        return data\n"
                          "    train_loader = DataLoader(data, shuffle=True, batch_size=bs)\n    return train_loader\n"
                          "train_loader = build(raw, 32)\n", line=6, column=20),
        # The elif of a second distributed mode is no single-process arm (a69 DAMI): FSDP needs the sampler too.
        Invalid(IMPORTS + "def train(ds, parallel):\n    dist.init_process_group('nccl')\n"
                          "    if parallel == 'DDP':\n"
                          "        sampler = torch.utils.data.distributed.DistributedSampler(ds)\n"
                          "        loader = DataLoader(ds, batch_size=8, sampler=sampler)\n"
                          "    elif parallel == 'FSDP':\n        loader = DataLoader(ds, batch_size=8, shuffle=True)\n"
                          "    else:\n        loader = DataLoader(ds, batch_size=8, shuffle=True)\n"
                          "    for batch in loader:\n        step(batch)\n", line=9, column=18),
        # The arm a distributed run takes still needs the sampler (its else is single-process).
        Invalid(IMPORTS + "def main(texts):\n    dist.init_process_group('nccl')\n    if is_dist():\n"
                          "        loader = DataLoader(texts, batch_size=8, shuffle=True, pin_memory=True)\n"
                          "    else:\n        loader = DataLoader(texts, batch_size=8, shuffle=True)\n"
                          "    for batch in loader:\n        step(batch)\n", line=6, column=18),
        # A loop that may go on past the first batch is training (a continue skips the break).
        Invalid(IMPORTS + "tr_loader = DataLoader(ds, batch_size=8, shuffle=True)\n"
                          "for x, y in tr_loader:\n    if bad(x):\n        continue\n    step(x, y)\n    break\n",
                line=3, column=13),
        # ... or a break only under a condition.
        Invalid(IMPORTS + "def fit(ds):\n    train_loader = DataLoader(ds, batch_size=8, shuffle=True)\n"
                          "    for i, b in enumerate(train_loader):\n        step(b)\n        if i > 100:\n"
                          "            break\n", line=4, column=20),
        Invalid(IMPORTS + "train_loader = DataLoader(train_set, batch_size=64, shuffle=True)\n",
                line=3, column=16),
        Invalid(IMPORTS + "loader = DataLoader(ds, batch_size=8, shuffle=True, num_workers=4)\n",
                line=3, column=10),
        Invalid(IMPORTS + "train_dl = DataLoader(ds, 32)\n", line=3, column=12),
        Invalid("import torch\nimport torch.distributed as dist\n"
                "trainloader = torch.utils.data.DataLoader(trainset, batch_size=4, shuffle=True)\n",
                line=3, column=15),
        Invalid(IMPORTS + "def fit(ds):\n    loader = DataLoader(ds, batch_size=8, shuffle=True, drop_last=True)\n"
                          "    for x in loader:\n        step(x)\n", line=4, column=14),
        Invalid(IMPORTS + "class Trainer:\n    def __init__(self, ds):\n"
                          "        self.train_loader = DataLoader(ds, batch_size=8)\n", line=5, column=29),
        Invalid(IMPORTS + "train_loader = DataLoader(ds, batch_size=8, sampler=None, shuffle=True)\n",
                line=3, column=16),
        Invalid(IMPORTS + "for epoch in range(3):\n    for x in DataLoader(train_ds, shuffle=True):\n"
                          "        step(x)\n", line=4, column=14),
        # Spread keywords from a local dict literal that shuffles, with no sampler.
        Invalid(IMPORTS + "kw = {'batch_size': 8, 'shuffle': True, 'num_workers': 4}\n"
                          "loader = DataLoader(ds, **kw)\n", line=4, column=10),
        # Tensor parallelism: shard over the data-parallel group (the message says so).
        Invalid(IMPORTS + "from megatron.core import parallel_state\n"
                        "def setup():\n    dist.init_process_group('nccl')\n"
                        "    parallel_state.initialize_model_parallel(tensor_model_parallel_size=2)\n"
                        "def batches(ds):\n    train_loader = DataLoader(ds, batch_size=8, shuffle=True)\n"
                        "    return iter(train_loader)\n", line=8, column=20),
        # The same loader read on every rank.
        Invalid(IMPORTS + """\
class Runner:
    def __init__(self, ds, local_rank):
        self.local_rank = local_rank
        self.vis_loader = DataLoader(ds, batch_size=2, shuffle=True)

    def run(self, epochs):
        for ep in range(epochs):
            if self.local_rank == 0:
                render(next(iter(self.vis_loader)))
            for batch in self.vis_loader:
                self.step(batch)
""", line=6, column=27),
        # A builder whose shuffle parameter a training call fills with True (a105 rDL-SIM, a104 mattersim).
        Invalid(IMPORTS + LOADER_BUILDER + """
def main(args):
    dist.init_process_group("nccl")
    train_loader = get_loader("train", args.root, args.batch_size, True, 4)
    for epoch in range(args.epochs):
        for batch in train_loader:
            step(batch)
""", line=5, column=12),
        # An accelerate import nothing uses prepares no loader (a70 unlearn_multimodal).
        Invalid(IMPORTS + "from accelerate import Accelerator\n"
                          "train_loader = DataLoader(train_set, batch_size=64, shuffle=True)\n", line=4, column=16),
        # ... or whose split parameter a training call fills with "train" (a106 vla0).
        Invalid(IMPORTS + """\
def get_dataloader(split, cfg):
    dataset = Episodes(cfg.root, split)
    return DataLoader(dataset, cfg.batch_size, shuffle=(split == "train"), drop_last=(split == "train"))


def main(cfg):
    dist.init_process_group("nccl")
    loader_train = get_dataloader(split="train", cfg=cfg)
    for batch in loader_train:
        step(batch)
""", line=5, column=12),
        # A project subclass that keeps DataLoader's __init__ (a103 I2SB's prefetching DataLoaderX).
        Invalid(IMPORTS + """\
class DataLoaderX(DataLoader):
    def __iter__(self):
        return BackgroundGenerator(super().__iter__())


def setup_loader(dataset, batch_size):
    loader = DataLoaderX(dataset, batch_size=batch_size, shuffle=True, drop_last=True)
    while True:
        yield from loader
""", line=9, column=14),
        # Read in both arms of one rank test: every rank reads it (a62 so-vits-svc).
        Invalid(IMPORTS + """\
def run(rank, ds, model):
    dist.init_process_group("nccl")
    train_loader = DataLoader(ds, batch_size=8, shuffle=False)
    for epoch in range(10):
        if rank == 0:
            train_and_evaluate(model, [train_loader, eval_loader], writer)
        else:
            train_and_evaluate(model, [train_loader, None], None)
""", line=5, column=20),
        Invalid(IMPORTS + "kw = dict(batch_size=8)\nkw.update({'shuffle': True, 'drop_last': True})\n"
                          "loader = DataLoader(ds, **kw)\n", line=5, column=10),
    ]

    def screen(self, sketch):
        """The screen (necessary for check() to report): True, False, or the project facts that must hold."""
        return True if sketch.may_call(names.DATALOADER) else ("loader",)  # or calls a loader builder

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        if any(uses_imported_module(index, framework) for framework in SHARDING_FRAMEWORKS):
            return
        message = _MODEL_PARALLEL_MESSAGE if _model_parallel(index) else self.message
        for site in _loader_calls(index):
            spread = _spread_keywords(index, site) if site.has_star_kwargs else {}
            if spread is None or site.has_star_args or _has_sampler(site) \
                    or any(key in spread for key in ("sampler", "batch_sampler")):
                continue
            target = _assigned_name(index, site.node)
            shuffle = site.argument("shuffle")
            shuffle_value = shuffle.value if shuffle is not None else spread.get("shuffle")
            # (a shuffle parameter some call fills with True counts for a builder that hands
            # the loader out, not for a helper that pulls a few batches from it itself)
            shuffles = shuffle_value is not None and (literal_bool(shuffle_value) is True or (
                _parameter_passed_true(index, shuffle_value) and _returned(index, site, target)))
            named_train = target is not None and "train" in target.lower()
            if not (shuffles or named_train) or (target is not None and _EVAL_NAME.search(target)):
                continue
            if is_rank_guarded(index, site.node) or _not_map_style(index, site) \
                    or not is_worker_code(index, site.node) or _other_arm_shards(index, site.node):
                continue
            if _returned(index, site, target) and not _callers_known_plain(index, site):
                continue
            if run_by_single_process_scripts_only(index, site.node) or _behind_a_switched_return(index, site.node):
                continue  # a plain loader of a data module that only single-process scripts call
            if target is not None and _read_on_rank_zero_only(index, site, target):
                continue
            if not shuffles and shuffle_value is not None and literal_bool(shuffle_value) is False \
                    and target is not None and _handed_only_to_non_training(index, site, target):
                continue  # ``train_loader_for_exemplar`` (shuffle=False) read by a feature-extraction helper
            yield self.report(site.node, message)
        for site in index.calls:
            if _builder_leaves_out_sampler(index, site):
                yield self.report(site.node, message)


def _other_arm_shards(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """``if self.env_type == "pytorch": return DataLoader(ds, shuffle=shuffle) else:
    sampler = DistributedSampler(ds, ...)``: the innermost ``if`` around the loader
    builds a DistributedSampler in its other arm, so this arm is the single-process
    mode (a98 bert_seq2seq_DDP). Another sampler there (a balanced one) says nothing."""
    child = node
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
            return False
        if isinstance(ancestor, cst.If) and child is not ancestor.test:
            other = ancestor.orelse if child is ancestor.body else ancestor.body
            return other is not None and any(any(a is other for a in index.ancestors(call.node))
                                             for call in index.calls_to(names.DISTRIBUTED_SAMPLER))
        child = ancestor
    return False


def _loader_calls(index: SemanticIndex) -> list[CallSite]:
    """Calls of ``DataLoader`` and of project subclasses that keep its ``__init__``
    (``class DataLoaderX(DataLoader)`` adding a prefetching ``__iter__``, a103 I2SB),
    the latter read with DataLoader's signature."""
    sites = list(index.calls_to(names.DATALOADER))
    project = project_of(index)
    for site in index.calls:
        callee = dotted_name(site.node.func)
        if callee is not None and site.qualified_name != names.DATALOADER and "Loader" in callee \
                and project.plain_subclass_of(index.path, callee, index.imports, "DataLoader"):
            sites.append(dataclasses.replace(site, qualified_name=names.DATALOADER))
    return sites


def _handed_only_to_non_training(index: SemanticIndex, site: CallSite, target: str) -> bool:
    """Is the loader (bound to ``target``) only handed to functions of the
    project that train nothing (no ``backward()`` of their own, nor through a
    visible helper: a feature extractor that picks exemplars under ``no_grad``)?
    A loop over it here, or a call we cannot see into, may train."""
    function = enclosing_function(index, site.node) or index.module
    reads = [read for read in name_reads(index, target)
             if (enclosing_function(index, read) or index.module) is function]
    if not reads:
        return False
    for read in reads:
        arg = index.parent(read)
        call = index.parent(arg) if isinstance(arg, cst.Arg) else None
        if not isinstance(call, cst.Call):
            return False
        callee = index.call_site(call)
        bodies = flow.visible_bodies(index, callee) if callee is not None else []
        if bodies:
            if any(flow.function_trains(index, body) for body in bodies):
                return False
            continue
        facts = flow.project_function_facts(index, call)
        if facts is None or facts.runs_backward or facts.trains:
            return False
    return True


def _builder_leaves_out_sampler(index: SemanticIndex, site: CallSite) -> bool:
    """``train_loader = get_loader(shard, batch_size)`` where the project
    function ``get_loader`` builds its sampler only when a flag parameter that
    defaults to False is passed (``dist=False``) and this call does not pass
    it: a training loader with no sampler, over data not split by rank."""
    if isinstance(site.node.func, cst.Name) and site.node.func.value == "DataLoader" or site.has_star_kwargs \
            or site.has_star_args or site.qualified_name == names.DATALOADER:
        return False
    target = _assigned_name(index, site.node)
    if target is None or "train" not in target.lower() or _EVAL_NAME.search(target):
        return False
    callee = dotted_name(site.node.func)
    project = project_of(index)
    key = project.resolve_function(index.path, callee, index.imports) if callee else None
    function = project.function(key) if key else None
    if function is None or not function.sampler_switch:
        return False
    params = [p for p in function.params if p not in ("self", "cls")] if "." in key[1] else list(function.params)
    switch = function.sampler_switch
    if site.argument(switch, params.index(switch) if switch in params else None) is not None:
        return False
    for arg in site.node.args:
        values = [arg.value, *(index.reaching_values(arg.value) or [])] if isinstance(arg.value, cst.Name) \
            else [arg.value]
        if any(is_rank_value(index, v) or _SPLIT_BY_RANK.search(index.module.code_for_node(v)) for v in values):
            return False  # the data is split by rank before
    function = index.enclosing_scope(site.node)
    if _PROFILING.search(index.path.rsplit("/", 1)[-1]) or (
            isinstance(function, cst.FunctionDef) and _PROFILING.search(function.name.value)):
        return False  # a throughput harness: duplicated batches change no training outcome
    return not is_rank_guarded(index, site.node) and is_worker_code(index, site.node)


_PROFILING = re.compile(r"profil|benchmark|throughput", re.IGNORECASE)
_SPLIT_BY_RANK = re.compile(r"rank|world_size|num_replicas|process_index|num_processes", re.IGNORECASE)


def _model_parallel(index: SemanticIndex) -> bool:
    """Does the module set up tensor / pipeline parallelism
    (``initialize_model_parallel(tensor_model_parallel_size=2)``)? Then the ranks
    of a model-parallel group must read the same batches: the data is split over
    the data-parallel group, not the world (the message says so)."""
    for site in index.calls:
        name = (dotted_name(site.node.func) or "").split(".")[-1]
        if name == "initialize_model_parallel" or any(
                arg.keyword is not None and arg.keyword.value in _MODEL_PARALLEL_SIZES for arg in site.node.args):
            return True
    return False


_MODEL_PARALLEL_MESSAGE = ("training DataLoader without a sampler: every data-parallel replica iterates the whole "
                           "dataset; shard it over the data-parallel group (DistributedSampler(ds, "
                           "num_replicas=dp_size, rank=dp_rank)), not the world")
_MODEL_PARALLEL_SIZES = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "tensor_parallel_size",
                         "pipeline_parallel_size")


def _spread_keywords(index: SemanticIndex, site: CallSite) -> Optional[dict[str, cst.BaseExpression]]:
    """The keywords ``DataLoader(ds, **kw)`` passes when ``kw`` is a dict built
    here from literal keys (a display or ``dict(...)``, then ``kw.update({...})``
    / ``kw["k"] = v``); None when any part of it is unknown."""
    spread: dict[str, cst.BaseExpression] = {}
    for arg in site.node.args:
        if arg.star != "**":
            continue
        if not isinstance(arg.value, cst.Name):
            return None
        name = arg.value.value
        values = index.reaching_values(arg.value)
        if not values or len(values) != 1 or not _literal_keys(values[0], spread):
            return None
        scope = index.enclosing_scope(site.node)
        for other in index.method_calls("update", "setdefault", "pop"):
            if dotted_name(other.receiver) == name and other.scope is scope and other.order < site.order:
                if other.method != "update" or len(other.node.args) != 1 \
                        or not _literal_keys(other.node.args[0].value, spread):
                    return None
        for target, value in index.subscript_assignments:
            if dotted_name(target.value) == name and index.enclosing_scope(target) is scope:
                key = target.slice[0].slice if len(target.slice) == 1 else None
                text = literal_str(key.value) if isinstance(key, cst.Index) else None
                if text is None:
                    return None
                spread[text] = value
    return spread


def _literal_keys(expr: cst.BaseExpression, into: dict[str, cst.BaseExpression]) -> bool:
    if isinstance(expr, cst.Dict):
        for element in expr.elements:
            key = literal_str(element.key) if isinstance(element, cst.DictElement) else None
            if key is None:
                return False
            into[key] = element.value
        return True
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "dict":
        for arg in expr.args:
            if arg.keyword is None:
                return False
            into[arg.keyword.value] = arg.value
        return True
    return False


def _returned(index: SemanticIndex, site: CallSite, target: Optional[str]) -> bool:
    """Does the builder function return the loader (directly or by name)?"""
    parent = index.parent(site.node)
    while isinstance(parent, cst.IfExp):
        parent = index.parent(parent)
    if isinstance(parent, cst.Return):
        return True
    scope = index.enclosing_scope(site.node)
    return target is not None and any(
        isinstance(e, cst.Return) and e.value is not None and index.enclosing_scope(e) is scope
        and target in _returned_names(e.value) for e in index.exits)


def _returned_names(value: cst.BaseExpression) -> list[Optional[str]]:
    if isinstance(value, (cst.Tuple, cst.List)):
        return [dotted_name(element.value) for element in value.elements]
    return [dotted_name(value)]


def _callers_known_plain(index: SemanticIndex, site: CallSite) -> bool:
    """A loader returned by a builder: every caller of the builder is known (project
    analysis) and none hands it to a framework that shards it (accelerate's
    ``prepare``, Lightning)."""
    scope = index.enclosing_scope(site.node)
    project = project_of(index)
    if not isinstance(scope, cst.FunctionDef) or not project.complete:
        return False
    callers = project.caller_modules(index.path, function_key(index, scope))
    return callers is not None and not any(m.uses_sharding_framework for m in callers)


def _read_on_rank_zero_only(index: SemanticIndex, site: CallSite, target: str) -> bool:
    """``self.plot_loader = DataLoader(...)`` (an attribute, or a name of the
    function) whose every read in the module is under a rank guard
    (``if rank == 0 and do_vis: batch = next(iter(self.plot_loader))``): a
    loader only rank 0 iterates, for plots or evaluation."""
    if "." in target:
        if not target.startswith("self.") or target.count(".") != 1:
            return False
        owner = index.enclosing(site.node, cst.ClassDef)
        reads = [node for node in index._parents if isinstance(node, cst.Attribute)
                 and node.attr.value == target[5:] and dotted_name(node) == target
                 and not _is_assignment_target(index, node)
                 and (owner is None or any(a is owner for a in index.ancestors(node)))]
    else:
        scope = index.enclosing_scope(site.node)
        reads = [node for node in name_reads(index, target) if index.enclosing_scope(node) is scope]
    if not reads or not all(is_rank_guarded(index, node) or _peeks_one_batch(index, node) for node in reads):
        return False
    # ``if rank == 0: train(..., [train_loader, eval_loader]) else: train(..., [train_loader, None])``:
    # reads in both arms of one rank test are reads on every rank (a62 so-vits-svc).
    arms = {(id(guard.node), guard.branch) for node in reads for guard in rank_guards(index, node)[:1]}
    return not any((node, "body") in arms and (node, "orelse") in arms for node, _ in arms)


def _call_around(index: SemanticIndex, node: cst.CSTNode, name: str) -> Optional[cst.Call]:
    """The call ``name(node)`` when ``node`` is its only argument."""
    arg = index.parent(node)
    call = index.parent(arg) if isinstance(arg, cst.Arg) else None
    if isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value == name \
            and len(call.args) == 1 and call.args[0] is arg and arg.keyword is None and not arg.star:
        return call
    return None


def _peeks_one_batch(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """A read that takes one batch and stops: ``next(iter(loader))``, or
    ``for batch in loader:`` (``enumerate(loader)``) whose body ends with an
    unconditional ``break`` and holds no ``continue`` (a sanity check that
    shows one batch): no training iterates it."""
    inner = _call_around(index, node, "iter")
    if inner is not None and _call_around(index, inner, "next") is not None:
        return True
    loop_iter = _call_around(index, node, "enumerate") or node
    loop = index.parent(loop_iter)
    if not isinstance(loop, cst.For) or loop.iter is not loop_iter or loop.orelse is not None:
        return False
    body = loop.body.body
    last = body[-1] if body else None
    if not (isinstance(last, cst.SimpleStatementLine) and any(isinstance(s, cst.Break) for s in last.body)):
        return False
    pending = list(body)
    while pending:
        current = pending.pop()
        if isinstance(current, cst.Continue):
            return False
        if not isinstance(current, (cst.FunctionDef, cst.ClassDef)):
            pending.extend(current.children)
    return True


def _is_assignment_target(index: SemanticIndex, node: cst.CSTNode) -> bool:
    parent = index.parent(node)
    return isinstance(parent, cst.AssignTarget) or (
        isinstance(parent, (cst.AnnAssign, cst.AugAssign)) and parent.target is node)


def _has_sampler(site: CallSite) -> bool:
    for keyword in ("sampler", "batch_sampler"):
        arg = site.argument(keyword)
        if arg is not None and not (isinstance(arg.value, cst.Name) and arg.value.value == "None"):
            return True
    return False


def _assigned_name(index: SemanticIndex, node: cst.Call) -> Optional[str]:
    parent = index.parent(node)
    while isinstance(parent, cst.IfExp):  # ``loader = DataLoader(...) if ds is not None else None``
        node, parent = parent, index.parent(parent)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
        return dotted_name(parent.targets[0].target)
    if isinstance(parent, cst.Return):
        scope = index.enclosing_scope(node)
        return scope.name.value if isinstance(scope, cst.FunctionDef) else None  # the builder's name
    return None


def _parameter_passed_true(index: SemanticIndex, value: cst.BaseExpression) -> bool:
    """``DataLoader(ds, shuffle=shuffle)`` in a builder with a ``shuffle``
    parameter that some project call fills with True (``get_loader(..., True)``,
    a105 rDL-SIM; ``build_dataloader(..., shuffle=True)``, a104 mattersim), or
    ``shuffle=(split == "train")`` with a call passing ``split="train"`` (a106
    vla0): the builder makes a shuffling training loader."""
    wanted = TRUE
    if isinstance(value, cst.Comparison) and len(value.comparisons) == 1 \
            and isinstance(value.comparisons[0].operator, cst.Equal):
        word = literal_str(value.comparisons[0].comparator)
        value, wanted = value.left, f"{STRING_PREFIX}{word}"
        if word is None:
            return False
    if not isinstance(value, cst.Name):
        return False
    bindings = index.reaching(value.value, value)
    return len(bindings) == 1 and bindings[0].kind == "param" \
        and wanted in (parameter_values(index, bindings[0]) or ())


def _behind_a_switched_return(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """``if return_datasets: return train_ds, eval_ds`` before the loader, in a
    builder every project call passes ``return_datasets=True`` (or leaves its
    default True): the loaders below are never built (a64 LLM4SNLI)."""
    from ddplint.analysis.ranks import always_exits

    function = enclosing_function(index, node)
    if function is None:
        return False
    params = {p.name.value for p in (*function.params.params, *function.params.kwonly_params)}
    for statement in earlier_statements(index, node, function):
        if isinstance(statement, cst.If) and statement.orelse is None and always_exits(statement.body) \
                and isinstance(statement.test, cst.Name) and statement.test.value in params:
            binding = next((b for b in index.reaching(statement.test.value, statement.test)
                            if b.kind == "param"), None)
            if binding is not None and parameter_values(index, binding) == frozenset({TRUE}):
                return True
    return False


def _not_map_style(index: SemanticIndex, site: CallSite) -> bool:
    """An IterableDataset (it shards itself), or data split by rank by hand."""
    dataset = site.argument("dataset")
    if dataset is None:
        return True
    texts = [index.module.code_for_node(dataset.value)]
    project = project_of(index)
    for value in [dataset.value, *(index.reaching_values(dataset.value) or [])]:
        if value is not dataset.value:
            texts.append(index.module.code_for_node(value))
        if isinstance(value, cst.Call):
            texts.extend(_class_bases(index, value.func))
            callee = dotted_name(value.func)
            if callee and project.builds_instance_of(index.path, callee, index.imports, "Iterable"):
                return True  # a project class (or what a project factory returns) that is an IterableDataset
            # ``data = load_dataset(..., streaming=True)["train"]; data = transform(data, ...)``:
            # what a call makes its dataset from
            # (also by keyword: MONAI's ``CacheDataset(data=train_data, ...)``, a101 monaicore)
            made_from = [arg for arg in value.args[:1] if arg.keyword is None] + [
                arg for arg in value.args if arg.keyword is not None and arg.keyword.value in _DATA_KEYWORDS]
            for arg in made_from:
                if isinstance(arg.value, cst.Name):
                    texts.extend(index.module.code_for_node(v) for v in index.reaching_values(arg.value) or [])
        if isinstance(value, cst.Subscript):
            # ``dataset[train_idx]`` with ``train_idx = train_idx.split(n)[rank]``: the indices it takes
            for element in value.slice:
                index_value = getattr(element.slice, "value", None)
                if isinstance(index_value, cst.Name):  # (a parameter among the bindings has no value)
                    texts.extend(index.module.code_for_node(b.value)
                                 for b in index.reaching(index_value.value, index_value) if b.value is not None)
    if _built_by_rank_sharding_class(index, dataset.value, 0):
        return True
    joined = " ".join(texts)
    if _SHARDED_BY_HAND.search(joined) or "Iterable" in joined or "Stream" in joined \
            or _STREAMING.search(joined):
        return True  # (a Hugging Face ``load_dataset(..., streaming=True)`` is an IterableDataset)
    return _sharded_by_a_call(index, site, dotted_name(dataset.value))


def _built_by_rank_sharding_class(index: SemanticIndex, expr: cst.CSTNode, depth: int) -> bool:
    """Does the dataset come out of a project class that keeps its rank's slice
    itself (it asks for the rank and the world size), through the calls, names
    and ``self`` attributes it is made from? ``next(self.datasets)`` with
    ``self.datasets = create_dataset(cfg)(split="train").get_data()`` and
    ``create_dataset`` returning ``DatasetDDP``, whose loader slices by rank."""
    if depth > 3:
        return False
    project = project_of(index)
    stack, values = [expr], []
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call):
            callee = dotted_name(node.func)
            if callee and project.builds_rank_sharded(index.path, callee, index.imports):
                return True
        name = dotted_name(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
        if name is not None and name.startswith("self.") and name.count(".") == 1:
            values.extend(b.value for (_, bound), bindings in index.bindings.items() if bound == name
                          for b in bindings if b.value is not None)
            continue
        if isinstance(node, cst.Name):
            values.extend(index.reaching_values(node) or [])
            continue
        stack.extend(node.children)
    return any(value is not expr and _built_by_rank_sharding_class(index, value, depth + 1) for value in values)


def _sharded_by_a_call(index: SemanticIndex, site: CallSite, name: Optional[str]) -> bool:
    """``ds.use_partition(rank)`` / ``ds.shard(world_size, rank)`` before the
    loader: the dataset is split by rank by hand through a call taking the rank."""
    if name is None:
        return False
    scope = index.enclosing_scope(site.node)
    for other in index.calls:
        if other.scope is not scope or other.order > site.order or other.receiver is None:
            continue
        if dotted_name(other.receiver) != name:
            continue
        if any(is_rank_value(index, arg.value) or _SHARDED_BY_HAND.search(index.module.code_for_node(arg.value))
               for arg in other.node.args):
            return True
    return False


def _class_bases(index: SemanticIndex, func: cst.BaseExpression) -> list[str]:
    name = dotted_name(func)
    return [index.module.code_for_node(base.value) for cls in index.classes
            if cls.name.value == name for base in cls.bases]
