"""## What it does
Flags a shuffling `DistributedSampler` (also MONAI's, which subclasses it) used for training when nothing calls
`set_epoch` (on the sampler, on the loader's `.sampler`, or in a helper) in this
module or anywhere its entry script reaches (its imports and calls, also the
modules it loads at run time with `importlib.import_module(f"pkg.trainers.{name}")`),
while an epoch loop runs (`for epoch in ...`, a `while` loop that iterates a loader
again and again, or a loader restarted when it runs out: `except StopIteration:
it = iter(loader)`). A `set_epoch` method that hands the epoch to an inner sampler
is a relay, not a call. A one-file project is complete; independent scripts of one
folder (an examples repository) never satisfy each other.

Also flagged: `DistributedSampler(ds, shuffle=shuffle)` in a builder that a
call fills with `shuffle=True` (the training loader's call; the others may pass a
config value or `False`), or whose parameter defaults to `True` and is left out
(`def mk_loaders(ds, bs, shuffle=True)` called as `mk_loaders(ds, 32)`).

Not flagged: a sampler built inside the epoch loop with a seed that reads the loop
variable (`DistributedSampler(ds, seed=seed + epoch)`: a new order every epoch);
`shuffle=False` (or a value ddplint cannot read; a flag set to `True`
only under the opposite test of the arm that builds the sampler counts as `False`); single-pass scripts without an epoch loop;
validation/test samplers (named so, sampling a dataset named so:
`DistributedSampler(valdataset)`, or built in a function named so: `def validation_dataloader(...)`); a helper that calls `set_epoch`; an epoch loop that hands its
epoch to a training function imported from a package the project does not ship
(`train_one_epoch(model, data, epoch)` from open_clip's `training.train`: it may call
`set_epoch` on the data, and its body is not visible). The module need not
import `torch.distributed` (the sampler is evidence enough), and an epoch loop
may iterate a name bound to the epochs (`bar = trange(n_epochs)`,
`for i, _ in enumerate(bar):`).

## Why is this bad?
`DistributedSampler` seeds its shuffle with `seed + epoch`. Without
`sampler.set_epoch(epoch)` the epoch stays 0, so every epoch visits the samples in
exactly the same order on every rank: the shuffle is done once and then frozen,
which hurts convergence the way `shuffle=False` would.

## Example
    sampler = DistributedSampler(train_set)
    loader = DataLoader(train_set, batch_size=64, sampler=sampler)
    for epoch in range(epochs):
        for batch in loader:
            ...

## Use instead
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for batch in loader:
            ...

## References
- https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
"""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from ddplint import names
from ddplint.analysis import flow
from ddplint.analysis.values import literal_bool
from ddplint.analysis.models import function_key, parameter_values, project_of
from ddplint.screen.facts import TRUE, ModuleFacts, summarize
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import CallSite, SemanticIndex, dotted_name

IMPORTS = ("import torch.distributed as dist\nfrom torch.utils.data import DataLoader\n"
           "from torch.utils.data.distributed import DistributedSampler\n")
_EVAL_NAME = re.compile(r"val|test|eval|dev", re.IGNORECASE)


class SamplerSetEpochMissing(Rule):
    code, name, severity = "DDP008", "sampler-set-epoch-missing", "warning"
    message = "DistributedSampler shuffles but set_epoch is never called: the same order every epoch"
    triggers = ("DistributedSampler",)
    needs_ddp_context = False  # a DistributedSampler is itself distributed training
    uses_project = True

    valid = [
        # A validation loader builder's sampler (a57 mipt-distributed-learning); a train_sampler
        # built beside it in a builder named for evaluation is flagged (see invalid).
        Valid(IMPORTS + "class Data:\n    def validation_dataloader(self, batch_size, distributed_mode=False):\n"
                        "        sampler = DistributedSampler(self) if distributed_mode else None\n"
                        "        return DataLoader(self, batch_size=batch_size, sampler=sampler)\n"
                        "def fit(data, model, epochs):\n    for epoch in range(epochs):\n"
                        "        evaluate(model, data.validation_dataloader(32, True))\n"),
        # Rebuilt every epoch with a seed that reads the epoch (a95 mattersim).
        Valid(IMPORTS + "def fit(parts, model, epochs, seed):\n    for epoch in range(epochs):\n"
                        "        for idx, part in enumerate(parts):\n"
                        "            sampler = DistributedSampler(part, seed=seed + idx * 131 + epoch)\n"
                        "            for batch in DataLoader(part, batch_size=32, sampler=sampler):\n"
                        "                step(model, batch)\n"),
        # The epoch and the data go to a training function of a package the repository does not
        # ship (open_clip's train_one_epoch calls set_epoch on what it is given): not visible here.
        Valid(IMPORTS + "from training.train import train_one_epoch\n"
                        "def main(ds, model, epochs):\n    sampler = DistributedSampler(ds)\n"
                        "    data = {'train': (DataLoader(ds, sampler=sampler), sampler)}\n"
                        "    for epoch in range(epochs):\n        train_one_epoch(model, data, epoch)\n"),
        # ... and on both samplers.
        Valid(IMPORTS + "class Loaders:\n    def __init__(self, a, b):\n"
                        "        self.main_sampler = DistributedSampler(a)\n"
                        "        self.aux_sampler = DistributedSampler(b)\n"
                        "        self.main = DataLoader(a, sampler=self.main_sampler)\n"
                        "    def run(self, epochs):\n        for epoch in range(epochs):\n"
                        "            self.aux_sampler.set_epoch(epoch)\n            self.main_sampler.set_epoch(epoch)\n"
                        "            for x in self.main:\n                step(x)\n"),
        Valid(IMPORTS + "sampler = DistributedSampler(ds)\nloader = DataLoader(ds, sampler=sampler)\n"
                        "for epoch in range(10):\n    sampler.set_epoch(epoch)\n    train(loader)\n"),
        Valid(IMPORTS + "loader = DataLoader(ds, sampler=DistributedSampler(ds))\n"
                        "for epoch in range(10):\n    loader.sampler.set_epoch(epoch)\n    train(loader)\n"),
        Valid(IMPORTS + "sampler = DistributedSampler(ds, shuffle=False)\nloader = DataLoader(ds, sampler=sampler)\n"
                        "for epoch in range(10):\n    train(loader)\n"),
        Valid(IMPORTS + "sampler = DistributedSampler(ds)\nloader = DataLoader(ds, sampler=sampler)\n"
                        "for batch in loader:\n    step(batch)\n"),  # single pass, no epoch loop
        Valid(IMPORTS + "def reshuffle(loader, epoch):\n    loader.sampler.set_epoch(epoch)\n"
                        "sampler = DistributedSampler(ds)\nloader = DataLoader(ds, sampler=sampler)\n"
                        "for epoch in range(10):\n    reshuffle(loader, epoch)\n    train(loader)\n"),
        Valid(IMPORTS + "val_sampler = DistributedSampler(val_set)\nfor epoch in range(3):\n"
                        "    evaluate(DataLoader(val_set, sampler=val_sampler))\n"),
        # Samplers of the validation and test datasets, named by their data (a97 U-EGformer).
        Valid(IMPORTS + "sampler_tr = DistributedSampler(traindataset, shuffle=True)\n"
                        "sampler_vl = DistributedSampler(valdataset, rank=rank, num_replicas=world_size)\n"
                        "sampler_ts = DistributedSampler(testdataset, rank=rank, num_replicas=world_size)\n"
                        "for epoch in range(3):\n    sampler_tr.set_epoch(epoch)\n"
                        "    train(DataLoader(traindataset, sampler=sampler_tr))\n"
                        "    evaluate(DataLoader(valdataset, sampler=sampler_vl))\n"),
        # The sampler is built here; the epoch loop lives elsewhere (unknown alone).
        Valid(IMPORTS + "def build_loader(ds):\n    return DataLoader(ds, sampler=DistributedSampler(ds))\n"),
        Valid(IMPORTS + "sampler = DistributedSampler(ds, num_replicas=ws, rank=rank, shuffle=False)\n"
                        "for epoch in range(10):\n    train(DataLoader(ds, sampler=sampler))\n"),
        # The default True, but the one call passes False (by position, by keyword).
        Valid(IMPORTS + "def mk_loaders(ds, bs, shuffle=True):\n"
                        "    return DataLoader(ds, batch_size=bs, sampler=DistributedSampler(ds, shuffle=shuffle))\n"
                        "loader = mk_loaders(ds, 32, False)\nfor epoch in range(3):\n    train(loader)\n"),
        Valid(IMPORTS + "def mk_loaders(ds, bs, *, shuffle=True):\n"
                        "    return DataLoader(ds, batch_size=bs, sampler=DistributedSampler(ds, shuffle=shuffle))\n"
                        "loader = mk_loaders(ds, 32, shuffle=cfg.shuffle)\nfor epoch in range(3):\n    train(loader)\n"),
        # The DistributedSampler is built only under the test where ``shuffle`` is False; training
        # uses another sampler (a92 Mul-Datasets).
        Valid(IMPORTS + "def get_loader(ds, bs, mode, epochs):\n    if mode == 'train':\n        shuffle = True\n"
                        "    else:\n        shuffle = False\n    if mode == 'train':\n"
                        "        sampler = RepeatedDistSampler(ds, bs * epochs, shuffle=shuffle)\n    else:\n"
                        "        sampler = DistributedSampler(ds, shuffle=shuffle)\n"
                        "    return DataLoader(ds, batch_size=bs, sampler=sampler)\n"
                        "for epoch in range(3):\n    train(get_loader(ds, 8, 'train', 3))\n"),
        # ... and when a caller passes False (or something unknown), silent.
        Valid(IMPORTS + "def make_sampler(ds, shuffle):\n    return DistributedSampler(ds, shuffle=shuffle)\n"
                        "train_s = make_sampler(ds, shuffle=True)\nval_s = make_sampler(val, shuffle=False)\n"
                        "for epoch in range(3):\n    train(train_s)\n"),
        Valid(IMPORTS + "sampler = DistributedSampler(ds, shuffle=args.shuffle)\nfor epoch in range(3):\n"
                        "    train(sampler)\n"),
        # One pass; the only loop over "epochs" fills a learning-rate table (a71 pysot).
        Valid(IMPORTS + "def lr_table(start, epochs):\n    lr = [0] * epochs\n    lr[0] = start\n"
                        "    for i in range(1, epochs):\n        lr[i] = lr[i - 1] * 0.9\n    return lr\n"
                        "sampler = DistributedSampler(ds)\nloader = DataLoader(ds, sampler=sampler)\n"
                        "for idx, batch in enumerate(loader):\n    step(batch)\n"),
        # One pass over a name bound to the steps, not to epochs.
        Valid(IMPORTS + "sampler = DistributedSampler(ds)\nloader = DataLoader(ds, sampler=sampler)\n"
                        "steps = range(max_steps)\nfor i, batch in zip(steps, loader):\n    step(batch)\n"),
        Valid("from mylib import DistributedSampler\ns = DistributedSampler(ds)\nfor epoch in range(3):\n"
              "    train(s)\n"),
        # A generic wrapper that repeats whatever loader it is given: the epochs are its user's to count
        # (DeepSpeed's RepeatingLoader next to its loader class).
        Valid(IMPORTS + "class RepeatingLoader:\n    def __init__(self, loader):\n        self.loader = loader\n"
                        "        self.data_iter = iter(loader)\n    def __next__(self):\n        try:\n"
                        "            return next(self.data_iter)\n        except StopIteration:\n"
                        "            self.data_iter = iter(self.loader)\n            return next(self.data_iter)\n"
                        "class EngineLoader:\n    def __init__(self, ds, rank, world):\n"
                        "        self.sampler = DistributedSampler(ds, num_replicas=world, rank=rank)\n"
                        "        self.loader = DataLoader(ds, sampler=self.sampler)\n"),
    ]
    invalid = [
        # The training call passes True, another one a config value (none False): the training
        # loader's sampler is never re-seeded (a102 COIGAN's data_sampler).
        Invalid(IMPORTS + "def make_sampler(ds, shuffle):\n    return DistributedSampler(ds, shuffle=shuffle)\n"
                          "train_s = make_sampler(ds, shuffle=True)\nother_s = make_sampler(extra, shuffle=cfg.shuffle)\n"
                          "for epoch in range(3):\n    train(train_s)\n", line=5, column=12),
        # A train sampler in a builder whose name says eval (a61 CLD-SGM's get_loaders_eval).
        Invalid(IMPORTS + "def get_loaders_eval(train_data, valid_data, distributed):\n"
                          "    train_sampler = DistributedSampler(train_data) if distributed else None\n"
                          "    valid_sampler = DistributedSampler(valid_data) if distributed else None\n"
                          "    return DataLoader(train_data, sampler=train_sampler), DataLoader(valid_data, sampler=valid_sampler)\n"
                          "def fit(model, epochs, data):\n    train_queue, valid_queue = get_loaders_eval(data, data, True)\n"
                          "    for epoch in range(epochs):\n        for batch in train_queue:\n            step(model, batch)\n",
                line=5, column=21),
        # Rebuilt every epoch with the same seed: the same order every epoch.
        Invalid(IMPORTS + "def fit(part, model, epochs, seed):\n    for epoch in range(epochs):\n"
                          "        sampler = DistributedSampler(part, seed=seed)\n"
                          "        for batch in DataLoader(part, batch_size=32, sampler=sampler):\n"
                          "            step(model, batch)\n", line=6, column=19),
        # ... but a function of that package that only reports the epoch trains nothing.
        Invalid(IMPORTS + "from reporting import report\n"
                          "def main(ds, model, epochs):\n    sampler = DistributedSampler(ds)\n"
                          "    loader = DataLoader(ds, sampler=sampler)\n"
                          "    for epoch in range(epochs):\n        report(epoch)\n"
                          "        for x in loader:\n            model(x).sum().backward()\n",
                line=6, column=15),
        # A ``while`` over a flag that goes over a loader bound to ``DataLoader(...)`` (a67 gns).
        Invalid(IMPORTS + "def train(dataset, n_steps):\n"
                          "    sampler = DistributedSampler(dataset, num_replicas=dist.get_world_size(), "
                          "rank=dist.get_rank(), shuffle=True)\n"
                          "    dl = DataLoader(dataset=dataset, sampler=sampler, batch_size=2)\n"
                          "    step, running = 0, True\n    while running:\n        for example in dl:\n"
                          "            step += 1\n            running = step < n_steps\n", line=5, column=15),
        # A builder chosen by a conditional alias, called without ``shuffle`` (default True; a67 gns).
        Invalid(IMPORTS + "def dist_loader(ds, batch_size, shuffle=True):\n"
                          "    sampler = DistributedSampler(ds, shuffle=shuffle)\n"
                          "    return DataLoader(ds, sampler=sampler, batch_size=batch_size)\n"
                          "def cpu_loader(ds, batch_size, shuffle=True):\n"
                          "    return DataLoader(ds, batch_size=batch_size, shuffle=shuffle)\n"
                          "def train(ds, cuda):\n    get_loader = dist_loader if cuda else cpu_loader\n"
                          "    loader = get_loader(ds, batch_size=8)\n"
                          "    for epoch in range(10):\n        for batch in loader:\n            step(batch)\n",
                line=5, column=15),
        # A step budget loop that goes over the loader (a "queue") again and again (a52 CLD-SGM).
        Invalid(IMPORTS + "sampler = DistributedSampler(train_data)\n"
                          "train_queue = DataLoader(train_data, batch_size=64, sampler=sampler)\n"
                          "step = 0\nwhile step < num_total_iter:\n"
                          "    for x, _ in train_queue:\n        step += 1\n", line=4, column=11),
        # A loader restarted when it runs out: pass after pass, the same order.
        Invalid(IMPORTS + "class Systems:\n    def __init__(self, sets):\n"
                          "        self.loaders = [DataLoader(s, sampler=DistributedSampler(s)) for s in sets]\n"
                          "        self.iters = [iter(l) for l in self.loaders]\n"
                          "    def __getitem__(self, i):\n        try:\n            return next(self.iters[i])\n"
                          "        except StopIteration:\n            self.iters[i] = iter(self.loaders[i])\n"
                          "            return next(self.iters[i])\n", line=6, column=47),
        # A wrapper's set_epoch that hands the epoch on is not a call: nothing calls it.
        Invalid(IMPORTS + "class Relay:\n    def __init__(self, inner):\n        self._inner = inner\n"
                          "    def set_epoch(self, epoch):\n        self._inner.set_epoch(epoch)\n"
                          "sampler = DistributedSampler(ds)\nloader = DataLoader(ds, sampler=sampler)\n"
                          "for epoch in range(10):\n    for batch in loader:\n        step(batch)\n",
                line=9, column=11),
        # The shuffle flag is False for the test split only: the training sampler shuffles.
        Invalid(IMPORTS + "def make_loader(cfg, ds, split):\n    if split == 'test':\n        mix = False\n"
                          "    else:\n        mix = True\n    smp = DistributedSampler(ds, shuffle=mix)\n"
                          "    return DataLoader(ds, batch_size=cfg.bs, sampler=smp)\n"
                          "def fit(cfg, ds, model):\n    loader = make_loader(cfg, ds, 'train')\n"
                          "    for epoch in range(cfg.epochs):\n        for batch in loader:\n            model(batch)\n"
                          "fit(cfg, ds, model)\n", line=9, column=11),
        # set_epoch is called, but on the other sampler only.
        Invalid(IMPORTS + "class Loaders:\n    def __init__(self, a, b):\n"
                          "        self.main_sampler = DistributedSampler(a)\n"
                          "        self.aux_sampler = DistributedSampler(b)\n"
                          "        self.main = DataLoader(a, sampler=self.main_sampler)\n"
                          "        self.aux = DataLoader(b, sampler=self.aux_sampler)\n"
                          "    def run(self, epochs):\n        for epoch in range(epochs):\n"
                          "            self.aux_sampler.set_epoch(epoch)\n            for x in self.main:\n"
                          "                step(x, next(iter(self.aux)))\n", line=6, column=29),
        Invalid(IMPORTS + "sampler = DistributedSampler(ds)\nloader = DataLoader(ds, sampler=sampler)\n"
                          "for epoch in range(10):\n    train(loader)\n", line=4, column=11),
        Invalid(IMPORTS + "loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))\n"
                          "for epoch in range(args.epochs):\n    for x in loader:\n        step(x)\n",
                line=4, column=47),
        Invalid(IMPORTS + "sampler = DistributedSampler(ds, shuffle=True)\n"
                          "for ep in range(start_epoch, epochs):\n    train(DataLoader(ds, sampler=sampler))\n",
                line=4, column=11),
        Invalid("import torch.distributed as dist, torch.utils.data as data\ntrain_sampler = data.distributed.DistributedSampler(train_set)\n"
                "epoch = 0\nwhile epoch < 10:\n    train(train_sampler)\n    epoch += 1\n"
                "for epoch in range(3):\n    pass\n", line=2, column=17),
        Invalid(IMPORTS + "def main():\n    sampler = DistributedSampler(ds, num_replicas=ws, rank=rank)\n"
                          "    loader = DataLoader(ds, sampler=sampler)\n"
                          "    for epoch in range(100):\n        train_epoch(loader)\n", line=5, column=15),
        # MONAI's DistributedSampler subclasses torch's and shuffles by default (a97 Diffusion_Modality).
        Invalid("import torch.distributed as dist\nfrom monai.data import DataLoader, DistributedSampler\n"
                "sampler_train = DistributedSampler(train_ds, num_replicas=world_size, rank=local_rank)\n"
                "train_loader = DataLoader(train_ds, sampler=sampler_train)\n"
                "for epoch in range(epochs):\n    for batch in train_loader:\n        step(batch)\n",
                line=3, column=17),
        Invalid("from torch.utils.data import distributed\nfrom torch import distributed as dist\nsampler = distributed.DistributedSampler(dataset)\n"
                "for epoch in range(3):\n    run(sampler)\n", line=3, column=11),
        Invalid(IMPORTS + "def build(ds):\n    return DataLoader(ds, sampler=DistributedSampler(ds))\n"
                          "loader = build(ds)\nfor epoch in range(5):\n    for batch in loader:\n        step(batch)\n",
                line=5, column=35),
        Invalid(IMPORTS + "def get_kwargs(ds, mode):\n    return {'sampler': DistributedSampler(ds, "
                          "shuffle=mode == 'train')}\nfor epoch in range(3):\n    train(get_kwargs(ds, 'train'))\n",
                line=5, column=24),
        # No torch.distributed import here (the process group is set up elsewhere): the
        # DistributedSampler itself says the data is sharded across ranks.
        Invalid("from torch.utils.data import DataLoader\nfrom torch.utils.data.distributed import DistributedSampler\n"
                "sampler = DistributedSampler(clips)\nloader = DataLoader(clips, batch_size=2, sampler=sampler)\n"
                "for epoch in range(start, epochs):\n    for batch in loader:\n        step(batch)\n",
                line=3, column=11),
        # The epoch loop iterates a name bound to the epochs (a progress bar over them).
        Invalid(IMPORTS + "from tqdm import trange\nsampler = DistributedSampler(ds)\n"
                          "loader = DataLoader(ds, sampler=sampler)\n"
                          "bar = trange(int(args.num_train_epochs), desc='Epoch')\n"
                          "for i, _ in enumerate(bar):\n    for batch in loader:\n        step(batch)\n",
                line=5, column=11),
        # A while loop that iterates the loader again and again is an epoch loop.
        Invalid(IMPORTS + "sampler = DistributedSampler(ds, shuffle=True)\n"
                          "train_loader = DataLoader(ds, batch_size=4, sampler=sampler)\nkeep_going = True\n"
                          "while keep_going:\n    for i, batch in enumerate(train_loader):\n"
                          "        steps = step(batch)\n        if steps > 1000:\n            keep_going = False\n",
                line=4, column=11),
        # ... or leaves it out, its default True (a positional parameter, a keyword-only one).
        Invalid(IMPORTS + "def mk_loaders(ds, bs, shuffle=True):\n"
                          "    sampler = DistributedSampler(ds, shuffle=shuffle)\n"
                          "    return DataLoader(ds, batch_size=bs, sampler=sampler)\n"
                          "loader = mk_loaders(ds, 32)\nfor epoch in range(3):\n    train(loader)\n",
                line=5, column=15),
        Invalid(IMPORTS + "class Data:\n    def loader(self, ds, *, shuffle: bool = True):\n"
                          "        return DataLoader(ds, sampler=DistributedSampler(ds, shuffle=shuffle))\n"
                          "    def fit(self, ds):\n        dl = self.loader(ds)\n"
                          "        for epoch in range(9):\n            step(dl)\n",
                line=6, column=39),
        # The builder's shuffle parameter: its one caller passes True.
        Invalid(IMPORTS + "def make_sampler(ds, shuffle, distributed):\n    if distributed:\n"
                          "        return DistributedSampler(ds, shuffle=shuffle)\n    return None\n"
                          "loader = DataLoader(ds, sampler=make_sampler(ds, shuffle=True, distributed=True))\n"
                          "for epoch in range(3):\n    train(loader)\n", line=6, column=16),
        Invalid(IMPORTS + "class Trainer:\n    def __init__(self, ds):\n        self.sampler = DistributedSampler(ds)\n"
                          "    def fit(self):\n        for epoch in range(self.epochs):\n"
                          "            self.train_epoch()\n", line=6, column=24),
    ]

    def screen(self, sketch):
        """The screen (necessary for check() to report): True, False, or the project facts that must hold."""
        return sketch.may_call(names.DISTRIBUTED_SAMPLER)

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        project = project_of(index)
        if any(project.modules[other].calls_set_epoch for other in project.scope(index.path)
               if other != index.path and other in project.modules):
            return
        own = [site for site in index.method_calls("set_epoch") if not _relay(index, site)]
        # (a module judged without its own facts in the project: a one-module summary of its text)
        mine = project.modules.get(index.path) or summarize(index.source, index.path) or ModuleFacts(index.path)
        here = mine.has_epoch_loop or _epoch_loop_through_a_name(index)
        if not here and (not project.complete or not project.in_scope(index.path, lambda m: m.has_epoch_loop)):
            return
        if not own and _epoch_handed_to_unseen_trainer(index):
            return
        for site in index.calls_to(names.DISTRIBUTED_SAMPLER):
            shuffle = site.argument("shuffle")
            if shuffle is not None and literal_bool(shuffle.value) is not True \
                    and not _true_when_training(index, shuffle.value):
                continue  # shuffle=False, or a value we cannot read
            if site.has_star_kwargs or _is_eval_sampler(index, site) or _reseeded_every_epoch(index, site):
                continue
            if (own or mine.calls_set_epoch) and not _others_only(index, site, own):
                continue  # set_epoch is called here, maybe on this sampler
            yield self.report(site.node, None if not own else
                              "DistributedSampler shuffles but set_epoch is called only on the other samplers, "
                              "never on this one: the same order every epoch")


# Libraries whose functions are known not to call set_epoch on what they are given.
_KNOWN_LIBRARIES = ("torch", "numpy", "math", "logging", "os", "time", "json", "wandb", "tqdm", "builtins")
_TRAINING_WORDS = ("train", "epoch", "fit")


def _reseeded_every_epoch(index: SemanticIndex, site: CallSite) -> bool:
    """``DistributedSampler(data, seed=base + idx * 131 + epoch)`` built inside the epoch
    loop: its seed reads a loop variable, so the order changes every epoch without
    ``set_epoch`` (a95 mattersim). A sampler rebuilt with the default seed is not."""
    seed = site.argument("seed")
    if seed is None:
        return False
    read = flow.names_in(seed.value)
    return any(isinstance(loop, cst.For) and read & flow.names_in(loop.target)
               for loop in flow.enclosing_loops(index, site.node))


def _epoch_handed_to_unseen_trainer(index: SemanticIndex) -> bool:
    """The epoch loop hands its epoch to an imported training function that is
    not in the project (``from training.train import train_one_epoch`` of a
    package the repository does not ship; ``train_one_epoch(model, data, loss,
    epoch, ...)``): such a function usually calls ``set_epoch`` on the data it is
    given (open_clip's), and its body is not here to tell."""
    project = project_of(index)
    for loop in index.loops:
        if not isinstance(loop, cst.For) or "epoch" not in index.module.code_for_node(loop.target).lower():
            continue
        epochs = {name.value for name in _names(loop.target)}
        for site in index.calls:
            qualified = site.qualified_name or ""
            if not isinstance(site.node.func, cst.Name) or not qualified or not flow.is_inside(index, site.node, loop):
                continue  # (an imported function called by its name: ``train_one_epoch(...)``)
            callee = site.node.func.value
            if qualified.split(".")[0] in _KNOWN_LIBRARIES or project.resolve_function(index.path, callee, index.imports):
                continue
            if not any(word in callee.lower() for word in _TRAINING_WORDS):
                continue
            if any(isinstance(arg.value, cst.Name) and arg.value.value in epochs for arg in site.node.args):
                return True
    return False


def _relay(index: SemanticIndex, site: CallSite) -> bool:
    """``def set_epoch(self, epoch): self._inner.set_epoch(epoch)``: a wrapper's
    method handing the epoch on, not a call made for the epoch loop."""
    function = next((a for a in index.ancestors(site.node) if isinstance(a, cst.FunctionDef)), None)
    return function is not None and function.name.value == "set_epoch"


def _others_only(index: SemanticIndex, sampler: CallSite, calls: list[CallSite]) -> bool:
    """Every ``set_epoch`` call of this module is made on another sampler,
    known by name: ``self.hr_sampler.set_epoch(...)`` while this sampler is
    ``self.lr_sampler`` (also not through its loader's ``.sampler``), and every
    receiver is a name bound to a ``DistributedSampler(...)`` of its own."""
    parent = index.parent(sampler.node)
    if not isinstance(parent, cst.Assign) or len(parent.targets) != 1 or parent.value is not sampler.node:
        return False
    mine = dotted_name(parent.targets[0].target)
    if mine is None or not calls:
        return False
    for call in calls:
        receiver = dotted_name(call.receiver) if call.receiver is not None else None
        if receiver is None or receiver == mine or receiver.endswith(".sampler"):
            return False
        values = index.reaching_values(call.receiver) or []
        if not values or not all(isinstance(v, cst.Call) and index.qualified_name(v.func) == names.DISTRIBUTED_SAMPLER
                                 and v is not sampler.node for v in values):
            return False
    return True


def _epoch_loop_through_a_name(index: SemanticIndex) -> bool:
    """``train_iterator = trange(start, args.num_train_epochs, desc="Epoch")``
    then ``for idx, _ in enumerate(train_iterator):``: an epoch loop whose
    iterable names the epochs one assignment away."""
    for loop in index.loops:
        if not isinstance(loop, cst.For):
            continue
        for name in _names(loop.iter):
            for value in index.reaching_values(name) or ():
                if "epoch" in index.module.code_for_node(value).lower():
                    return True
    return False


def _names(expr: cst.BaseExpression) -> list[cst.Name]:
    """The bare names an iterable reads (``enumerate(it)`` reads ``it``)."""
    if isinstance(expr, cst.Name):
        return [expr]
    if isinstance(expr, cst.Call):
        return [n for arg in expr.args for n in _names(arg.value)]
    return []


def _true_when_training(index: SemanticIndex, expr: cst.BaseExpression) -> bool:
    """``shuffle=(mode == "train")``, ``shuffle=is_train``: shuffles the training
    data; a name set to ``False`` on the test path and ``True`` on the others; or a parameter that a known call of the sampler's builder fills
    with ``True`` (``data_sampler(ds, shuffle=True)``)."""
    if literal_bool(expr) is None and "train" in index.module.code_for_node(expr).lower():
        return True
    if not isinstance(expr, cst.Name):
        return False
    # A binding under the opposite test never reaches this use (``if mode == "train": shuffle = True``
    # ... ``if mode == "train": RepeatedSampler(...) else: DistributedSampler(ds, shuffle=shuffle)``).
    bindings = [b for b in index.reaching(expr.value, expr) if not flow.exclusive(index, b.node, expr)]
    values = [b.value for b in bindings] if all(b.value is not None and b.kind != "param" for b in bindings) else []
    if values and all(literal_bool(v) is not None for v in values) and any(literal_bool(v) for v in values):
        return True  # ``shuffle_flag = False`` for the test split, ``= True`` otherwise
    # Some call passes ``True`` (``data_sampler(ds, shuffle=True, ...)`` for the training set) and
    # none ``False``: the others pass a config value (a102 COIGAN). (A call with ``False`` marks a
    # builder shared by the training and the evaluation loaders: silent, as when unknown.)
    return bool(bindings) and all(b.kind == "param" and TRUE in (parameter_values(index, b) or ())
                                  and not _switched_off_by_a_call(index, b) for b in bindings)


def _switched_off_by_a_call(index: SemanticIndex, binding) -> bool:
    function = binding.scope
    if not isinstance(function, cst.FunctionDef):
        return False
    return project_of(index).some_call_switches_off(index.path, function_key(index, function), binding.name)


def _is_eval_sampler(index: SemanticIndex, site: CallSite) -> bool:
    """Validation/test samplers: their order does not matter. Named so (``val_sampler =``),
    sampling a dataset named so (``sampler_vl = DistributedSampler(valdataset)``), or built
    in a function named so (``def validation_dataloader(...)``)."""
    dataset = site.argument("dataset")
    if dataset is not None and _names_evaluation(index.module.code_for_node(dataset.value)):
        return True
    target = ""
    for ancestor in index.ancestors(site.node):
        if isinstance(ancestor, (cst.Assign, cst.AnnAssign)):
            targets = ancestor.targets if isinstance(ancestor, cst.Assign) else [ancestor]
            target = " ".join(index.module.code_for_node(t.target) for t in targets)
            if _names_evaluation(target):
                return True
            break
        if isinstance(ancestor, cst.BaseStatement):
            break
    # ... or built by a loader builder named so (``def validation_dataloader(self, ...)``, a57 mipt),
    # unless its name says training (``train_sampler`` in ``get_loaders_eval(...)``, a61 CLD-SGM)
    function = flow.enclosing_function(index, site.node)
    return function is not None and "train" not in target.lower() and _names_evaluation(function.name.value)


def _names_evaluation(text: str) -> bool:
    # ``trainval_set`` (VOC's train+val split) is training data.
    return bool(_EVAL_NAME.search(text)) and "train" not in text.lower()
