"""## What it does
Flags `torch.save` of model or optimizer state that every rank reaches: no rank-0
guard (`if rank == 0:`, `if is_main_process():`, `if is_first_worker():`,
`if rank != 0: return`, `@rank_zero_only`) on the way to it, neither in its own
function nor in all of the project's calls of that function (`main()` run by
every process). A save helper (a function of the project, here or imported, that
`torch.save`s what it is given: `write_ckpt({"net": model.state_dict()}, d)`) is
judged at its calls: when one runs on every rank, a helper of the same module is
reported once, at its own `torch.save` ("write_ckpt() is called on every rank
(line 40)"), and a helper of another module at that call. So is a method that
saves the instance's state (`self._dump()`) when another call of it in the module
is rank-guarded (reported at its `torch.save`, naming the unguarded call). A
helper imported from a module the project does not hold (its body is not
visible) that is named like a save (save / ckpt / checkpoint, not
`save_on_master`-like) and given the `state_dict()` of a DDP model with no
per-rank argument (`write_ckpt({"net": model.state_dict()}, out)`) is reported
at that call.
A save inside a loop of its own function (the epoch loop of
`main(cfg, gpu, save_dir)`) is that function's save and is reported at the
`torch.save`, whatever its parameters choose. A rank guard joined by `or` to a
step or epoch counter test (`if master and it % k == 0 or it in [1000, 5000]:`,
which Python groups as `(master and ...) or it in [...]`) does not guard: at those
steps every rank saves. When the
file name is a literal the message names it ("every rank writes 'last.pt'").
A worker that no call runs directly but that is handed by name to a function of its
module which spawns that parameter (`run_demo(train, world_size)` with
`mp.spawn(demo_fn, ...)` or `Process(target=fn)` in `run_demo`) runs on every rank.
A module that wraps its model through a project module's re-export
(`ext_dist.DDP(net)`), or builds a `DistributedSampler`, is DDP code even
without importing torch.distributed.

Not flagged: rank-guarded saves (also by a property of the class that returns a
rank test: `if self.saves_on_this_rank:`; by a flag that a set-up helper, in any
module of the project, stores on an options object from a rank test:
`opt.log = opt.rank % ngpus == 0` then `if opt.log:` or `if not opt.log: return`,
a helper that saves only when given a model (`if model is not None:`, the
parameter's default None) called without one (`lm_checkpoint(cfg)` to resume),
also when the single-process arm stores `True`: `if cfg.distributed:
self.is_main = rank == 0 else: self.is_main = True`; by a process index kept on
the instance: `if self.gpu_index == 0:`); a library's own save (`xm.save`,
mmengine's, deepspeed's: they decide who writes); helpers that guard themselves
(`save_on_master`); per-rank file names (also a rank kept in a dict:
`f"rng_{cfg['rank']}.pt"`); saves into in-memory buffers;
`torch.distributed.checkpoint` (collective by design), and a helper that writes through
another one and reaches a collective on the way (a checkpoint client that gathers
the state, or waits at a barrier while rank 0 writes: every rank must call it);
`torch.save(self.state_dict())` of a class whose own `state_dict` returns plain
values (a grad clipper's moving averages: no model state); single-process branches
(`else` of `if args.distributed:` or `if self.ddp:`, `elif save and not is_distributed:`,
also inside a helper those arms call), launcher-parent code, and `nn.DataParallel`
programs that never create a process group (one process); a save under
`if out_dir:` where `out_dir` is set on rank 0 only, or under `if self.verbose:` /
`if cfg.ckpt_dir is not None:` where the project empties that attribute on the
ranks but 0 (`if gpu != 0: self.verbose = False`); helpers nobody is known to
call.

## Why is this bad?
All N ranks write the same file at the same time. On a shared filesystem the
writes interleave or race with a reader, producing truncated or corrupt
checkpoints, and every rank pays the serialisation time and I/O bandwidth of a
save that only one process needs.

## Example
    for epoch in range(epochs):
        train_one_epoch(model, loader)
        torch.save(model.module.state_dict(), "checkpoint.pt")

## Use instead
    for epoch in range(epochs):
        train_one_epoch(model, loader)
        if dist.get_rank() == 0:
            torch.save(model.module.state_dict(), "checkpoint.pt")

## References
- https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#save-and-load-checkpoints
- https://pytorch.org/docs/stable/distributed.checkpoint.html
"""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from ddplint import names
from ddplint.analysis.flow import callers, calls_in_function, helper_functions, names_in
from ddplint.analysis.positions import locate
from ddplint.analysis.models import (checkpoint_file_name, function_key, project_callee, project_of,
                                     wrapped_kind, wraps_through_a_project_module)
from ddplint.analysis.ranks import enclosing_function, is_rank_value, runs_on_rank_subset
from ddplint.analysis.roles import is_worker_code, spawned_through_a_parameter
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.screen.facts import SPAWN_INDEX
from ddplint.analysis.semantic import SemanticIndex, dotted_name

DIST = "import torch\nimport torch.distributed as dist\n"
_STATE_NAME = re.compile(r"model|net|ckpt|checkpoint|state|optim|weights|snapshot", re.IGNORECASE)
# Parts of identifiers that hold a per-process value (``local_rank``, ``args.gpu``, ``get_rank``).
_PER_RANK = re.compile(r"(^|_)(rank|gpu|gpu_id|device_id|proc|proc_id|process_id|process_index|worker|worker_id|"
                       r"shard|shard_id|node_id)(_|$)|rank$", re.IGNORECASE)
_BUFFER_NAME = re.compile(r"buf|bio|stream|bytes|memory", re.IGNORECASE)
# An imported function whose body is not visible: named like a save, not like one
# that guards itself or writes shards / collective checkpoints.
_SAVE_HELPER_NAME = re.compile(r"save|ckpt|checkpoint", re.IGNORECASE)
_SELF_GUARDING_NAME = re.compile(r"master|main|rank|primary|zero|leader|chief|first|dist|shard|async|load|restore|"
                                 r"resume|only", re.IGNORECASE)
_SAVING_LIBRARIES = ("torch", "torch_xla", "accelerate", "lightning", "pytorch_lightning", "lightning_fabric",
                     "deepspeed", "transformers", "mmcv", "mmengine", "colossalai", "fairscale", "megatron", "apex",
                     "timm", "detectron2", "fvcore", "ignite", "composer", "ray", "horovod", "safetensors",
                     "huggingface_hub", "diffusers", "peft", "numpy", "pickle", "joblib", "dill", "orbax", "flax",
                     "paddle", "tensorflow", "keras", "jax", "wandb", "mlflow", "sklearn", "onnx", "torchvision")


class CheckpointSavedOnEveryRank(Rule):
    code, name, severity = "DDP011", "checkpoint-saved-on-every-rank", "warning"
    message = "checkpoint saved on every rank: N processes write the same file"
    triggers = ("save", "ckpt", "checkpoint")
    # In DDP context, or wrapping through a project module's re-export (checked in check()).
    needs_ddp_context = False
    uses_project = True

    valid = [
        # A parameter every caller fills with a rank test's outcome is a rank flag.
        Valid(DIST + "import os\ndef train(rank, verbose):\n"
                     "    model = torch.nn.parallel.DistributedDataParallel(Net().cuda(rank), device_ids=[rank])\n"
                     "    for step in range(10):\n        if verbose:\n"
                     "            torch.save(model.state_dict(), f'model-{step}.pt')\n"
                     "def main():\n    dist.init_process_group('nccl')\n    verbose = dist.get_rank() == 0\n"
                     "    train(int(os.environ['LOCAL_RANK']), verbose)\nif __name__ == '__main__':\n    main()\n"),
        # ... called on rank 0 only.
        Valid(DIST + "import os\n" + "def save_weights(model, cfg, best=False):\n    if cfg.distributed:\n        model = model.module\n"
                       "    torch.save(model.state_dict(), os.path.join(cfg.out, 'weights.pth'))\n"
                     "for epoch in range(cfg.epochs):\n    fit(net)\n    if dist.get_rank() == 0:\n"
                     "        save_weights(net, cfg)\n"),
        Valid(DIST + "if dist.get_rank() == 0:\n    torch.save(model.state_dict(), 'm.pt')\n"),
        Valid(DIST + "if args.local_rank == 0:\n    torch.save(model.state_dict(), 'm.pt')\n"),
        Valid(DIST + "def save(model):\n    if not is_main_process():\n        return\n"
                     "    torch.save(model.state_dict(), 'm.pt')\n"),
        Valid(DIST + "torch.save(model.state_dict(), f'ckpt_rank{dist.get_rank()}.pt')\n"),
        Valid(DIST + "import io\nbuffer = io.BytesIO()\ntorch.save(model.state_dict(), buffer)\n"),
        Valid(DIST + "import torch.distributed.checkpoint as dcp\ndcp.save({'model': model.state_dict()}, "
                     "checkpoint_id='ckpt')\n"),
        # The schedule test inside the rank guard (parenthesised), or a disjunct that is a mode
        # switch rather than a step counter (a string): the save stays guarded.
        Valid(DIST + "def fit(cfg, model):\n    dist.init_process_group('nccl')\n"
                     "    for step in range(cfg.steps):\n        train_step(model)\n"
                     "        if dist.get_rank() == 0 and (step % 500 == 0 or step == cfg.steps - 1):\n"
                     "            torch.save(model.state_dict(), 'last.pt')\nfit(cfg, net)\n"),
        Valid(DIST + "def fit(cfg, model):\n    dist.init_process_group('nccl')\n"
                     "    for ep in range(cfg.epochs):\n        train_step(model)\n"
                     "        if dist.get_rank() == 0 or cfg.save_mode == 'per_rank':\n"
                     "            torch.save(model.state_dict(), 'm.pt')\nfit(cfg, net)\n"),
        # The guard is in the only caller.
        Valid(DIST + "def save_on_master(state, path):\n    torch.save(state, path)\n"
                     "def main():\n    if dist.get_rank() == 0:\n        save_on_master(model.state_dict(), 'm.pt')\n"
                     "main()\n"),
        # A library helper with no known caller: unknown, silent.
        Valid(DIST + "def save_checkpoint(model, path):\n    torch.save(model.state_dict(), path)\n"),
        Valid("import torch\ntorch.save(model.state_dict(), 'm.pt')\n"),  # not DDP code
        Valid(DIST + "master_process = dist.get_rank() == 0\nif master_process:\n"
                     "    torch.save(model.state_dict(), 'm.pt')\n"),
        Valid(DIST + "if not args.multiprocessing_distributed or args.rank % ngpus == 0:\n"
                     "    torch.save({'model': model.state_dict()}, 'm.pt')\n"),
        Valid(DIST + "torch.save(losses, 'losses.pt')\n"),
        Valid(DIST + "def main(args):\n    args.save_logs = args.logs and is_master(args)\n"
                     "    if args.save_logs:\n        torch.save({'state_dict': model.state_dict()}, path)\n"
                     "main(args)\n"),
        # Imported predicates named like the main process.
        Valid(DIST + "from dist_utils import is_first_worker\nif is_first_worker():\n"
                     "    torch.save(model.state_dict(), 'm.pt')\n"),
        # The single-process branch of the script (a config flag named DIST_TRAIN).
        Valid(DIST + "def fit(cfg, model):\n    for ep in range(cfg.EPOCHS):\n        step(model)\n"
                     "        if cfg.MODEL.DIST_TRAIN:\n            if dist.get_rank() == 0:\n"
                     "                torch.save(model.state_dict(), 'w.pth')\n        else:\n"
                     "            torch.save(model.state_dict(), 'w.pth')\nfit(cfg, model)\n"),
        # A save helper whose unguarded save sits in an ``elif flag and not is_distributed:``
        # arm: the single-process run (a97 U-EGformer).
        Valid("import torch\nimport torch.distributed as dist\nimport torch.multiprocessing as mp\n"
              "def save_model(model, args, rank, name, is_distributed):\n"
              "    if args.save_model and is_distributed:\n        if rank == 0:\n"
              "            torch.save(model.state_dict(), f'best_{name}.pt')\n"
              "    elif args.save_model and not is_distributed:\n"
              "        torch.save(model.state_dict(), f'best_{name}.pt')\n"
              "def main(rank, world_size, args):\n    is_distributed = world_size > 1\n"
              "    if is_distributed:\n        dist.init_process_group('nccl', rank=rank, world_size=world_size)\n"
              "    model = torch.nn.parallel.DistributedDataParallel(Net().cuda())\n"
              "    for epoch in range(10):\n        train(model)\n        if is_distributed:\n"
              "            save_model(model, args, rank, 'ssim', is_distributed)\n"
              "if __name__ == '__main__':\n    mp.spawn(main, args=(2, args), nprocs=2)\n"),
        # The single-process branch of the script.
        Valid(DIST + "if args.distributed:\n    train_ddp(args)\nelse:\n"
                     "    torch.save(model.state_dict(), 'm.pt')\n"),
        # The output folder is set on rank 0 only.
        Valid(DIST + "import os\nout_dir = args.out if dist.get_rank() == 0 else None\nif out_dir:\n"
                     "    torch.save(model.state_dict(), os.path.join(out_dir, 'm.pt'))\n"),
        # The helper guards itself; the helper is given a per-rank file.
        Valid(DIST + "def save_on_master(state, path):\n    if is_main_process():\n        torch.save(state, path)\n"
                     "save_on_master({'model': model.state_dict()}, 'm.pt')\n"),
        Valid(DIST + "def write_ckpt(state, path):\n    torch.save(state, path)\n"
                     "write_ckpt(model.state_dict(), f'ckpt_rank{dist.get_rank()}.pt')\n"),
        # A per-rank file name built in a variable first (sharded optimizer state).
        Valid(DIST + "import os\nfn = f'optimizer.{dist.get_rank():05d}.pth'\n"
                     "torch.save(optimizer.state_dict(), os.path.join(out, fn))\n"),
        Valid(DIST + "torch.save(model.state_dict(), 'ckpt_' + str(args.local_rank) + '.pt')\n"),
        # The rank read from a dict inside the file name (directly, or through a name).
        Valid(DIST + "import os\nclass Saver:\n    def dump(self):\n"
                     "        rng = {'torch': torch.get_rng_state(), 'model': self.net.state_dict()}\n"
                     "        torch.save(rng, os.path.join(self.out, f\"rng_{self.cfg['rank']:03d}.pt\"))\n"
                     "for epoch in range(9):\n    Saver().dump()\n"),
        Valid(DIST + "opts = load_config()\ntarget = 'shard_%d.pt' % opts[\"local_rank\"]\n"
                     "torch.save({'net': model.state_dict()}, target)\n"),
        # The rank kept in a configuration dict.
        Valid(DIST + "class Trainer:\n    def save_checkpoint(self, path):\n"
                     "        torch.save({'model': self.model.module.state_dict()}, path)\n"
                     "    def _check_save_interval(self):\n        self.save_checkpoint(f'ckpt-{self.steps}.pkl')\n"
                     "    def _train_step(self):\n        if self.config['rank'] == 0:\n"
                     "            self._check_save_interval()\n    def run(self):\n        self._train_step()\n"
                     "Trainer().run()\n"),
        # The helper writes a per-rank file.
        # A property of the class that says whether this rank saves (a rank test, or True for sharded files).
        Valid(DIST + "class Trainer:\n    @property\n    def dp_rank(self):\n        return dist.get_rank()\n"
                     "    @property\n    def is_dp_leader(self):\n        return self.dp_rank == 0\n"
                     "    @property\n    def saves_here(self):\n        if self.sharded:\n            return True\n"
                     "        return self.is_dp_leader\n"
                     "    def save(self, path):\n        if self.saves_here:\n"
                     "            torch.save({'model': self.model.state_dict()}, 'last.pt')\n"
                     "Trainer().save(out)\n"),
        # One process drives every GPU (DataParallel); nothing creates a process group.
        Valid(DIST + "import torch.nn as nn\ndef main():\n    model = nn.DataParallel(Net().cuda())\n"
                     "    for epoch in range(3):\n        torch.save(model.state_dict(), 'last.pt')\nmain()\n"),
        Valid(DIST + "def write_shard(state):\n    torch.save(state, f'shard_{dist.get_rank()}.pt')\n"
                     "write_shard(optimizer.state_dict())\n"),
        # A save into memory (a workaround to load an object) writes no file.
        Valid(DIST + "import io\ndef load_for_ema(ema, checkpoint):\n    buf = io.BytesIO()\n"
                     "    torch.save(checkpoint, buf)\n    buf.seek(0)\n    ema.load(buf)\n"
                     "load_for_ema(model_ema, ckpt['model_ema'])\n"),
        # The helper's own callers choose the state: only they are judged.
        Valid(DIST + "def write_ckpt(state, path):\n    torch.save(state, path)\n"
                     "def save(state):\n    write_ckpt(state, 'm.pt')\nif dist.get_rank() == 0:\n"
                     "    save(model.state_dict())\n"),
        # A rank read from a group or a library's getter (``grp.rank()``, ``smp.dp_rank()``), and
        # the Hugging Face Trainer's predicate.
        Valid(DIST + "class Keeper:\n    def write(self, out):\n        if self.group.rank() != 0:\n"
                     "            return\n        torch.save(self.net.state_dict(), out)\n"
                     "    def finish(self, out):\n        if self.sharded:\n            self.write(out)\n"
                     "Keeper().finish('w.pt')\n"),
        Valid(DIST + "def finish(trainer, out):\n    if trainer.is_world_process_zero():\n"
                     "        torch.save(trainer.model.state_dict(), out)\nfinish(trainer, 'w.pt')\n"),
        Valid("import torch\nfrom torch.utils.data.distributed import DistributedSampler\n"
              "def fit(cfg, net, data):\n    sampler = DistributedSampler(data) if cfg.local_rank != -1 else None\n"
              "    for ep in range(cfg.epochs):\n        run_epoch(net, data, sampler)\n"
              "        if cfg.local_rank in (-1, 0):\n            torch.save(net.state_dict(), 'tuned.bin')\n"
              "fit(cfg, net, data)\n"),
        # A rank flag whose single-process arm is True (``if cfg.distributed: self.lead = rank == 0
        # else: self.lead = True``), tested by an early return of the save helper or by an ``if``.
        Valid(DIST + "class Fitter:\n    def __init__(self, net, cfg):\n        self.net, self.cfg = net, cfg\n"
                     "        if cfg.distributed:\n            self.lead = cfg.local_rank == 0\n"
                     "        else:\n            self.lead = True\n"
                     "    def _dump(self, ep):\n        if not self.lead:\n            return\n"
                     "        torch.save({'net': self.net.module.state_dict(), 'ep': ep}, 'last.pt')\n"
                     "    def fit(self):\n        dist.init_process_group('nccl')\n"
                     "        for ep in range(self.cfg.epochs):\n            step(self.net)\n            self._dump(ep)\n"
                     "Fitter(net, cfg).fit()\n"),
        Valid(DIST + "def setup(opts):\n    if not opts.multi_gpu:\n        opts.writer = True\n"
                     "    else:\n        dist.init_process_group('nccl')\n        opts.writer = dist.get_rank() == 0\n"
                     "def run(opts):\n    setup(opts)\n    for ep in range(opts.epochs):\n        fit(net)\n"
                     "        if opts.writer:\n            torch.save(net.module.state_dict(), 'w.pt')\n"
                     "run(opts)\n"),
        # A rank flag kept on the options object by a set-up helper (here, or in another
        # module of the project): ``if opts.is_writer:`` tests the rank.
        Valid(DIST + "def init_dist(opts):\n    dist.init_process_group('nccl')\n"
                     "    if opts.rank % opts.gpus_per_node == 0:\n        opts.is_writer = True\n"
                     "    else:\n        opts.is_writer = False\n"
                     "def run(opts):\n    init_dist(opts)\n    for ep in range(opts.epochs):\n        fit(net)\n"
                     "        if opts.is_writer:\n            torch.save(net.module.state_dict(), 'w.pt')\n"
                     "run(opts)\n"),
        # ... bound from a rank predicate in one function, tested around a save helper's body in another.
        Valid(DIST + "def configure(cfg):\n    cfg.keeps_files = cfg.out_dir is not None and is_master(cfg)\n"
                     "def train_loop(cfg, net):\n    for ep in range(cfg.epochs):\n        fit(net)\n"
                     "        if cfg.keeps_files and ep % 5 == 0:\n"
                     "            torch.save({'net': net.state_dict()}, 'last.pt')\n"
                     "def main(cfg):\n    configure(cfg)\n    train_loop(cfg, net)\n"
                     "main(cfg)\n"),
        # A process index stored on the instance (``self.gpu_index = kw['gpu_index']``).
        Valid(DIST + "class Runner:\n    def __init__(self, **kw):\n        self.GPU_INDEX = kw['gpu_index']\n"
                     "    def dump(self):\n        torch.save({'m': self.net.state_dict()}, 'r.pt')\n"
                     "    def run(self):\n        for ep in range(9):\n            if self.GPU_INDEX == 0:\n"
                     "                self.dump()\n"
                     "Runner(gpu_index=args.local_rank).run()\n"),
        # An imported save helper named like one that guards itself, or given no wrapped model's
        # state, or a library's own save: silent.
        Valid(DIST + "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                     "from tools.io import save_on_main_process\nmodel = DDP(net)\n"
                     "save_on_main_process({'net': model.state_dict()}, 'x.pt')\n"),
        Valid(DIST + "from tools.io import write_checkpoint\nwrite_checkpoint({'net': net.state_dict()}, 'x.pt')\n"),
        Valid(DIST + "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                     "from mmengine.runner import save_checkpoint\nmodel = DDP(net)\n"
                     "save_checkpoint(model.state_dict(), 'x.pt')\n"),
        # A flag or path that the ranks but 0 empty (``self.verbose = False``, ``cfg.ckpt_dir =
        # None``) guards the save: rank 0 writes alone.
        Valid(DIST + "class Trainer:\n    def __init__(self, args, model):\n"
                     "        self.model = model\n        self.verbose = True\n"
                     "        if args.distributed and args.gpu != 0:\n"
                     "            self.verbose = False\n    def fit(self, epochs):\n"
                     "        for epoch in range(epochs):\n            train_one_epoch(self.model)\n"
                     "            if self.verbose:\n"
                     "                torch.save(self.model.state_dict(), \"best.pt\")\n"
                     "if __name__ == \"__main__\":\n    Trainer(parse(), build()).fit(10)\n"),
        Valid(DIST + "def setup(cfg):\n    dist.init_process_group(\"nccl\")\n"
                     "    if dist.get_rank() not in [0, -1]:\n        cfg.ckpt_dir = None\n"
                     "def train(cfg, model, loader):\n    setup(cfg)\n"
                     "    for step, batch in enumerate(loader):\n"
                     "        model(batch).sum().backward()\n"
                     "        if cfg.ckpt_dir is not None and step % 100 == 0:\n"
                     "            torch.save(model.state_dict(), f\"{cfg.ckpt_dir}/step.pt\")\n"
                     "if __name__ == \"__main__\":\n    train(parse(), build(), load())\n"),
        # A helper that saves only when given a model (``if model is not None:``) and loads
        # otherwise: the resume call without a model writes nothing; the save is rank-guarded
        # (a47 minimind's lm_checkpoint).
        Valid("""\
import torch
import torch.distributed as dist


def checkpoint(cfg, model=None, step=0, save_dir="ckpt"):
    path = f"{save_dir}/{cfg.name}.pth"
    if model is not None:
        torch.save({"model": model.state_dict(), "step": step}, path)
    else:
        return torch.load(path, map_location="cpu")


def train(cfg, model, loader):
    state = checkpoint(cfg, save_dir="ckpt") if cfg.resume else None
    for step, batch in enumerate(loader):
        model(batch).sum().backward()
        if step % 100 == 0 and dist.get_rank() == 0:
            checkpoint(cfg, model=model, step=step)


if __name__ == "__main__":
    dist.init_process_group("nccl")
    train(parse(), build(), load())
"""),
    ]
    invalid = [
        # The training function's own final save (its checkpoint holds its ``args``): reported at
        # the save, not at ``main(parse())`` as a save helper's call (a45 CDAE).
        Invalid("""\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(args):
    dist.init_process_group("nccl")
    model = DDP(build(args).cuda())
    for epoch in range(args.epochs):
        train_one_epoch(model, args)
    checkpoint = {"model": model.module.state_dict(), "args": args}
    torch.save(checkpoint, f"{args.results_dir}/final.pt")


if __name__ == "__main__":
    main(parse())
""", line=12, column=5),
        # ... the same helper given the model on every rank (by keyword, or by position).
        Invalid("""\
import torch
import torch.distributed as dist


def checkpoint(cfg, model=None, step=0, save_dir="ckpt"):
    path = f"{save_dir}/{cfg.name}.pth"
    if model is not None:
        torch.save({"model": model.state_dict(), "step": step}, path)
    else:
        return torch.load(path, map_location="cpu")


def train(cfg, model, loader):
    state = checkpoint(cfg, save_dir="ckpt") if cfg.resume else None
    for step, batch in enumerate(loader):
        model(batch).sum().backward()
        if step % 100 == 0:
            checkpoint(cfg, model=model, step=step)


if __name__ == "__main__":
    dist.init_process_group("nccl")
    train(parse(), build(), load())
""", line=8, column=9),
        Invalid("""\
import torch
import torch.distributed as dist


def checkpoint(cfg, model=None, step=0, save_dir="ckpt"):
    path = f"{save_dir}/{cfg.name}.pth"
    if model is not None:
        torch.save({"model": model.state_dict(), "step": step}, path)
    else:
        return torch.load(path, map_location="cpu")


def train(cfg, model, loader):
    state = checkpoint(cfg, save_dir="ckpt") if cfg.resume else None
    for step, batch in enumerate(loader):
        model(batch).sum().backward()
        if step % 100 == 0:
            checkpoint(cfg, model, step)


if __name__ == "__main__":
    dist.init_process_group("nccl")
    train(parse(), build(), load())
""", line=8, column=9),
        # A save helper whose body is not visible (imported from outside the project), given
        # the state of the DDP model on every rank (REAL-CODE-SHAPES, DDP011).
        Invalid(DIST + "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                       "from snapshot_io import store_ckpt\ndist.init_process_group('nccl')\nengine = DDP(body)\n"
                       "for ep in range(4):\n    blob = {'w': engine.module.state_dict(), 'ep': ep}\n"
                       "    store_ckpt(blob, 'snap.pt')\n", line=9, column=5),
        # True on the other arm of a test that is not about distribution: no rank flag.
        Invalid(DIST + "class Fitter:\n    def __init__(self, net, cfg):\n        self.net, self.cfg = net, cfg\n"
                       "        if cfg.eval_only:\n            self.lead = cfg.local_rank == 0\n"
                       "        else:\n            self.lead = True\n"
                       "    def _dump(self, ep):\n        if not self.lead:\n            return\n"
                       "        torch.save({'net': self.net.module.state_dict(), 'ep': ep}, 'last.pt')\n"
                       "    def fit(self):\n        dist.init_process_group('nccl')\n"
                       "        for ep in range(self.cfg.epochs):\n            step(self.net)\n            self._dump(ep)\n"
                     "Fitter(net, cfg).fit()\n",
                line=18, column=13),
        # An early return on a flag that is not the rank's: every rank still writes.
        Invalid(DIST + "def save_all(opts, ep):\n    if not opts.keep_ckpt:\n        return\n"
                       "    torch.save({'net': net.module.state_dict()}, 'last.pt')\n"
                       "dist.init_process_group('nccl')\nfor ep in range(3):\n    save_all(opts, ep)\n",
                line=6, column=5),
        # The same flag name also set from something else than the rank: no guard.
        Invalid(DIST + "def init_dist(opts):\n    dist.init_process_group('nccl')\n"
                       "    if opts.rank == 0:\n        opts.is_writer = True\n"
                       "def reconfigure(opts):\n    opts.is_writer = opts.cli_flag\n"
                       "def run(opts):\n    init_dist(opts)\n"
                       "    if opts.is_writer:\n        torch.save(net.module.state_dict(), 'w.pt')\n"
                       "run(opts)\n", line=12, column=9),
        # A local save helper (it saves its parameter's state, unwrapped first), guarded at one call
        # and not at the final one: reported at the unguarded call.
        Invalid(DIST + "import os\n" + "def save_weights(model, cfg, best=False):\n    if cfg.distributed:\n        model = model.module\n"
                       "    torch.save(model.state_dict(), os.path.join(cfg.out, 'weights.pth'))\n"
                       "for epoch in range(cfg.epochs):\n    fit(net)\n    if dist.get_rank() == 0:\n"
                       "        save_weights(net, cfg)\nsave_weights(net, cfg, best=True)\n",
                line=7, column=5),
        # The spawn target runs on every process, even when the spawner's own caller is unknown (a CLI).
        Invalid(DIST + "import torch.multiprocessing as mp\nclass Runner:\n    def __init__(self, net):\n"
                       "        self.net = net\n    def checkpoint(self, step):\n"
                       "        torch.save({'net': self.net.state_dict()}, f'ckpt_{step}.pt')\n"
                       "def work(rank, world):\n    dist.init_process_group('nccl', rank=rank, world_size=world)\n"
                       "    runner = Runner(build())\n    runner.checkpoint(100)\n"
                       "def launch(world):\n    mp.spawn(work, args=(world,), nprocs=world)\n", line=12, column=5),
        # ``rank test and A or B`` groups as ``(rank test and A) or B``: at the steps B names every
        # rank saves (a save directly in the loop; a save helper called there).
        Invalid(DIST + "def fit(cfg, model):\n    dist.init_process_group('nccl')\n"
                       "    master = dist.get_rank() == 0\n    for it in range(cfg.iters):\n        step(model)\n"
                       "        if master and it % 500 == 0 or it in [round(cfg.iters * 0.5), cfg.iters - 1]:\n"
                       "            torch.save({'model': model.state_dict()}, 'ckpt.pt')\nfit(cfg, net)\n",
                line=9, column=13),
        Invalid(DIST + "def write_ckpt(state, path):\n    torch.save(state, path)\n"
                       "def fit(cfg, model):\n    dist.init_process_group('nccl')\n"
                       "    for ep in range(cfg.epochs):\n        step(model)\n"
                       "        if dist.get_rank() == 0 and ep % 5 == 0 or ep == cfg.epochs - 1:\n"
                       "            write_ckpt(model.state_dict(), 'last.pt')\nfit(cfg, net)\n",
                line=4, column=5),
        Invalid(DIST + "torch.save(model.state_dict(), 'm.pt')\n", line=3, column=1),
        Invalid(DIST + "def main():\n    for epoch in range(3):\n        train(model)\n"
                       "        torch.save({'model': model.module.state_dict()}, 'ckpt.pt')\n"
                       "if __name__ == '__main__':\n    main()\n", line=6, column=9),
        # A save helper is reported where it is called on every rank (REAL-CODE-SHAPES, DDP011).
        Invalid(DIST + "def save_on_master(state, path):\n    torch.save(state, path)\n"
                       "def main():\n    save_on_master(model.state_dict(), 'm.pt')\nmain()\n",
                line=4, column=5),
        Invalid(DIST + "import torch.multiprocessing as mp\ndef worker(gpu, args):\n"
                       "    dist.init_process_group('nccl')\n    torch.save(model, 'model.pt')\n"
                       "mp.spawn(worker, nprocs=4, args=(args,))\n", line=6, column=5),
        Invalid(DIST + "checkpoint = {'model': model.state_dict(), 'epoch': epoch}\n"
                       "torch.save(checkpoint, os.path.join(out_dir, 'ckpt.pt'))\n", line=4, column=1),
        Invalid("from torch import save\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
                "model = DDP(net)\nif epoch % 10 == 0:\n    save(model.state_dict(), 'm.pt')\n",
                line=5, column=5),
        Invalid(DIST + "def save(model):\n    if rank == 0:\n        print('saving')\n"
                       "    torch.save(model.state_dict(), 'm.pt')\nsave(net)\n", line=6, column=5),
        Invalid(DIST + "if world_size > 1:\n    torch.save(optimizer.state_dict(), 'opt.pt')\n",
                line=4, column=5),
        Invalid(DIST + "if __name__ == '__main__':\n    dist.init_process_group('nccl')\n"
                       "    for epoch in range(3):\n        torch.save(net.state_dict(), f'ep{epoch}.pt')\n",
                line=6, column=9),
        # Literal text that mentions a GPU is one file for every rank.
        Invalid(DIST + "import os\ntorch.save({'model': model.state_dict()}, os.path.join(out_dir, 'best_gpu.pt'))\n",
                line=4, column=1),
        # A save helper of this module, called on every rank: reported at the call.
        Invalid(DIST + "import os\ndef write_ckpt(blob, d):\n    torch.save(blob, os.path.join(d, 'last.pt'))\n"
                       "write_ckpt({'net': model.state_dict()}, out)\n", line=5, column=5),
        Invalid(DIST + "def write_ckpt(state, path):\n    torch.save(state, path)\n"
                       "def save(state):\n    write_ckpt(state, 'm.pt')\nsave(model.state_dict())\n",
                line=7, column=1),
        # The training function calls the helper guarded in its epoch loop and unguarded after it:
        # reported at the save that unguarded call runs (save_cur=True), not at ``main(opt)`` (a61).
        Invalid(DIST + "import os\ndef save_checkpoint(args, epoch, model, save_cur=False):\n"
                       "    state = {'model': model.state_dict(), 'epoch': epoch}\n"
                       "    if save_cur:\n        torch.save(state, os.path.join(args.log_dir, f'ckpt_epoch_{epoch}.pth'))\n"
                       "    elif epoch % args.save_freq == 0:\n"
                       "        torch.save(state, os.path.join(args.log_dir, f'ckpt_epoch_{epoch}.pth'))\n"
                       "def main(args):\n    for epoch in range(args.epochs):\n        train_one_epoch(model)\n"
                       "        if dist.get_rank() == 0:\n            save_checkpoint(args, epoch, model)\n"
                       "    save_checkpoint(args, 'last', model, save_cur=True)\n"
                       "if __name__ == '__main__':\n    main(opt)\n", line=7, column=9),
        # The experiment class is chosen through an alias (``Exp = Exp_Long_Term_Forecast``), then
        # built and trained on every rank (a66 HERO).
        Invalid(DIST + "import os\nclass Exp_Long_Term_Forecast:\n    def train(self, setting):\n"
                       "        for epoch in range(self.args.train_epochs):\n            self.run_epoch()\n"
                       "        torch.save(self.model.state_dict(), os.path.join(setting, 'model_checkpoint.pth'))\n"
                       "if args.task_name == 'long_term_forecast':\n    Exp = Exp_Long_Term_Forecast\n"
                       "exp = Exp(args)\nexp.train(setting)\n", line=8, column=9),
        # Reported at the helper's checkpoint, not at the run arguments it also writes.
        Invalid(DIST + "import os\ndef write_all(args, blob, out):\n"
                       "    torch.save(args, os.path.join(out, 'args.pt'))\n"
                       "    torch.save(blob, os.path.join(out, 'last.pt'))\n"
                       "for ep in range(3):\n    write_all(args, {'net': model.state_dict()}, out)\n",
                line=6, column=5),
        # A dict key that is not a rank says nothing about the file: every rank writes it.
        Invalid(DIST + "import os\nclass Saver:\n    def dump(self):\n"
                       "        state = {'model': self.net.state_dict()}\n"
                       "        torch.save(state, os.path.join(self.out, f\"ep_{self.cfg['epoch']:03d}.pt\"))\n"
                       "for epoch in range(9):\n    Saver().dump()\n",
                line=7, column=9),
        Invalid(DIST + "opts = load_config()\ntarget = 'shard_%d.pt' % opts[\"step\"]\n"
                       "torch.save({'net': model.state_dict()}, target)\n", line=5, column=1),
        # The helper builds the state itself; the caller chooses the file: reported at the call.
        Invalid(DIST + "def save(args, model, path):\n"
                       "    torch.save({'args': args, 'model': model.state_dict()}, path)\n"
                       "save(args, net, 'm.pt')\n", line=4, column=5),
        # A flag argument (is_best) computed from per-rank values says nothing about the file.
        Invalid(DIST + "import shutil\ndef save_checkpoint(state, is_best, filename='checkpoint.pth.tar'):\n"
                       "    torch.save(state, filename)\n    if is_best:\n"
                       "        shutil.copyfile(filename, 'model_best.pth.tar')\n"
                       "def worker(gpu, args):\n    model = make(gpu)\n    for epoch in range(3):\n"
                       "        acc = validate(model, gpu)\n        is_best = acc > best\n"
                       "        save_checkpoint({'state_dict': model.module.state_dict()}, is_best)\n"
                       "import torch.multiprocessing as mp\nmp.spawn(worker, nprocs=2, args=(args,))\n",
                line=5, column=5),
        # ... in a local name first; the file is named from the epoch it is given.
        Invalid(DIST + "def store(ep, m, opt):\n"
                       "    blob = {'ep': ep, 'model': m.state_dict(), 'opt': opt.state_dict()}\n"
                       "    torch.save(blob, f'ck_{ep}.pt')\n"
                       "def main():\n    for ep in range(3):\n        store(ep, net, opt)\nmain()\n",
                line=5, column=5),
        Invalid(DIST + "import os\nclass Trainer:\n    def save_checkpoint(self, checkpoint_path):\n"
                       "        state = {'model': self.model.module.state_dict(), 'steps': self.steps}\n"
                       "        torch.save(state, checkpoint_path)\n    def run(self):\n        pass\n"
                       "def main():\n    trainer = Trainer()\n    try:\n        trainer.run()\n    finally:\n"
                       "        trainer.save_checkpoint(os.path.join(out, 'last.pkl'))\nmain()\n",
                line=15, column=9),
        # Reached from ``Loop(model).run()`` through ``self.*`` methods.
        Invalid(DIST + "class Loop:\n    def __init__(self, model):\n        self.model = model\n"
                       "    def on_epoch_end(self):\n        torch.save(self.model.module.state_dict(), 'last.pt')\n"
                       "    def run(self):\n        for epoch in range(3):\n            self.on_epoch_end()\n"
                       "Loop(model).run()\n", line=7, column=9),
        # A method without parameters that saves the instance's state, guarded in the epoch loop
        # and called unguarded on the export path: reported at the unguarded call.
        Invalid(DIST + "class Fitter:\n    def _dump(self):\n"
                       "        blob = {'net': self.net.state_dict(), 'opt': self.opt.state_dict()}\n"
                       "        torch.save(blob, self.snapshot_path)\n    def fit(self):\n"
                       "        if self.cfg.export_only:\n            self._dump()\n            return\n"
                       "        for ep in range(self.cfg.epochs):\n            self.step_epoch()\n"
                       "            if dist.get_rank() == 0:\n                self._dump()\n"
                       "Fitter().fit()\n", line=6, column=9),
        # ``torch`` reached only through a star import.
        Invalid("from common import *\ndist.init_process_group('nccl')\n"
                "torch.save(model.state_dict(), 'last.pt')\n", line=3, column=1),
        # A module that builds a DistributedSampler is DDP code (RULES.md, Clarifications), also
        # beside a DataParallel arm for one process with several GPUs.
        Invalid("import torch\nfrom torch.utils.data.distributed import DistributedSampler\n"
                "def fit(cfg, net, data):\n    if cfg.n_gpu > 1:\n        net = torch.nn.DataParallel(net)\n"
                "    sampler = DistributedSampler(data) if cfg.local_rank != -1 else None\n"
                "    for ep in range(cfg.epochs):\n        run_epoch(net, data, sampler)\n"
                "        torch.save(net.state_dict(), 'tuned.bin')\nfit(cfg, net, data)\n", line=9, column=9),
        # Emptied on rank 0 itself: every other rank still writes.
        Invalid(DIST + "def train(cfg, model, loader):\n    dist.init_process_group(\"nccl\")\n"
                       "    if dist.get_rank() == 0:\n        cfg.out_dir = None\n"
                       "    for step, batch in enumerate(loader):\n"
                       "        model(batch).sum().backward()\n        if cfg.out_dir is not None:\n"
                       "            torch.save(model.state_dict(), \"last.pt\")\n"
                       "if __name__ == \"__main__\":\n    train(parse(), build(), load())\n", line=10, column=13),
    ]

    invalid += [
        # The worker handed to a launcher helper that spawns its parameter (the tutorial's
        # run_demo(demo_fn, world_size)): every process runs it and saves.
        Invalid(DIST + "import torch.multiprocessing as mp\ndef train(rank, world_size):\n"
                       "    dist.init_process_group('nccl', rank=rank, world_size=world_size)\n"
                       "    model = build().to(rank)\n    fit(model)\n"
                       "    torch.save(model.state_dict(), 'final.pt')\n"
                       "def run_demo(demo_fn, world_size):\n"
                       "    mp.spawn(demo_fn, args=(world_size,), nprocs=world_size, join=True)\n"
                       "if __name__ == '__main__':\n    run_demo(train, 4)\n", line=8, column=5),
        Invalid(DIST + "import torch.multiprocessing as mp\ndef worker(rank, world):\n"
                       "    dist.init_process_group('gloo', rank=rank, world_size=world)\n"
                       "    net = build()\n    torch.save({'net': net.state_dict()}, 'net.pt')\n"
                       "def launch(world, target=None):\n"
                       "    procs = [mp.Process(target=target, args=(r, world)) for r in range(world)]\n"
                       "    for p in procs:\n        p.start()\n"
                       "launch(2, target=worker)\n", line=7, column=5),
    ]
    valid += [
        # Spawned through the helper, but the save is rank-guarded; a helper that only calls its
        # parameter in this process does not make it a worker.
        Valid(DIST + "import torch.multiprocessing as mp\ndef train(rank, world_size):\n"
                     "    dist.init_process_group('nccl', rank=rank, world_size=world_size)\n"
                     "    if rank == 0:\n        torch.save(model.state_dict(), 'final.pt')\n"
                     "def run_demo(demo_fn, world_size):\n    mp.spawn(demo_fn, args=(world_size,), nprocs=world_size)\n"
                     "run_demo(train, 4)\n"),
        Valid(DIST + "def export(rank):\n    torch.save(model.state_dict(), 'final.pt')\n"
                     "def timed(fn):\n    return fn(0)\ntimed(export)\n"),
        # The helper returns early on the other ranks of a distributed run; a run that is not
        # distributed has one process (a48-a55 SevenNet), nested or at module level.
        Valid(DIST + "def fit(trainer, cfg, rank, is_distributed):\n    def write_checkpoint(epoch):\n"
                     "        if is_distributed and rank != 0:\n            return\n"
                     "        torch.save(trainer.model.state_dict(), f'{cfg.out}/checkpoint_{epoch}.pth')\n"
                     "    for epoch in range(cfg.epochs):\n        trainer.run_epoch()\n        write_checkpoint(epoch)\n"
                     "fit(trainer, cfg, dist.get_rank(), True)\n"),
        Valid(DIST + "def dump(args, net):\n    if args.distributed and dist.get_rank() > 0:\n        return\n"
                     "    torch.save({'net': net.state_dict()}, 'last.pth')\n"
                     "for ep in range(3):\n    dump(args, net)\n"),
        # The class's own decorator runs the save on rank 0 only (a63 SMDE's ``@_parallel_mask``).
        Valid(DIST + "class ModelSaver:\n    def __init__(self, rank_id=0):\n        self.rank_id = rank_id\n"
                     "    def _parallel_mask(func):\n        def inner(self, *args, **kwargs):\n"
                     "            if self.rank_id == 0:\n                return func(self, *args, **kwargs)\n"
                     "        return inner\n    @_parallel_mask\n    def save_model(self, model, epoch):\n"
                     "        torch.save({'model': model.state_dict(), 'epoch': epoch}, 'last_model.pth')\n"
                     "saver = ModelSaver(rank_id=args.local_rank)\nfor epoch in range(10):\n"
                     "    saver.save_model(net, epoch)\n"),
        # A rank flag handed to a constructor (``Dist(..., master=(rank == 0))``) guards the helper (a60).
        Valid(DIST + "from dataclasses import dataclass\n@dataclass\nclass Dist:\n    rank: int\n    master: bool\n"
                     "def init():\n    rank = dist.get_rank()\n    return Dist(rank=rank, master=(rank == 0))\n"
                     "ddp = init()\ndef do_checkpoint(step):\n    if not ddp.master:\n        return\n"
                     "    torch.save({'model': model.state_dict(), 'step': step}, 'ckpt.pt')\n"
                     "for step in range(10):\n    do_checkpoint(step)\n"),
        # A rank predicate of a module named for distribution is still a rank test (a50 YOWOv2).
        Valid(DIST + "from utils import distributed_utils\ndef eval_one_epoch(args, net, epoch):\n"
                     "    if distributed_utils.is_main_process():\n"
                     "        torch.save({'model': net.state_dict(), 'epoch': epoch}, f'{args.out}/ep{epoch}.pth')\n"
                     "    if args.distributed:\n        dist.barrier()\n"
                     "for ep in range(3):\n    eval_one_epoch(args, net, ep)\n"),
    ]
    invalid += [
        # ... but an early return that the rank does not decide guards nothing.
        Invalid(DIST + "def dump(args, net, ep):\n    if args.distributed and ep % 5 != 0:\n        return\n"
                       "    torch.save({'net': net.state_dict()}, 'last.pth')\n"
                       "for ep in range(30):\n    dump(args, net, ep)\n", line=6, column=5),
    ]

    def screen(self, sketch):
        """The screen: torch.save (or a call of a project save helper), in DDP context (here,
        project-wide, or through a project module's re-export of DDP): True, False, or the
        project facts that must hold."""
        kinds = () if sketch.context else ("context",)  # as the engine reads the verdict: None is not context
        if not sketch.may_call(names.TORCH_SAVE) and not (
                "state_dict" in sketch.calls and any(_SAVE_HELPER_NAME.search(c) for c in sketch.calls)):
            kinds += ("saves",)  # a project save helper (or one whose body is not visible, given a state_dict)
        return kinds or True

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        if not index.in_ddp_context and not wraps_through_a_project_module(index):
            return
        project = project_of(index)
        if index.calls_to(names.DATA_PARALLEL) and not project.in_scope(index.path, lambda m: m.own_ddp_context):
            return  # a DataParallel program: one process (``import torch.distributed`` alone starts none)
        reported: set[int] = set()  # torch.save nodes already reported
        moved: dict[int, tuple] = {}  # id(helper) -> (helper, its saves, the calls run on every rank)
        for site in index.calls_to(names.TORCH_SAVE):
            obj, target = site.argument("obj"), site.argument("f")
            if obj is None or target is None or not _is_model_state(index, obj.value):
                continue
            if _per_rank_or_in_memory(index, target.value) or not _runs_on_every_rank(index, site):
                continue
            function = enclosing_function(index, site.node)
            if function is not None and not _in_a_loop_of(index, site.node, function) \
                    and not _trains(project, index, function) and (
                    _saved_parameters(index, obj.value, function)
                    or _path_from_parameters(index, target.value, function)):
                continue  # a save helper: its callers choose what or where; reported at their calls
            if function is not None and _some_call_guarded(index, function) and any(
                    _saved_parameters(index, obj.value, function, only=p.name.value) for p in function.params.params):
                continue  # a helper saving its parameter's state, called guarded here and unguarded there
            if function is not None and _some_call_guarded(index, function) and any(
                    _runs_on_every_rank(index, call) for call in callers(index, function)):
                continue  # a helper called guarded here and unguarded there: reported at the unguarded call

            name = checkpoint_file_name(index, target.value)
            reported.add(id(site.node))
            yield self.report(site.node, _message(name))
        for site in index.calls:
            callee = project_callee(index, site.node)
            key = project.saving_function(index.path, callee, index.imports, unguarded=True) if callee else None
            if site.qualified_name == names.TORCH_SAVE:
                continue
            if key is None:
                if (_local_helper_saves_an_argument(index, site) or _local_helper_saves_state(index, site)
                        or _unseen_save_helper_of_ddp_state(index, project, site)) \
                        and _runs_on_every_rank(index, site):
                    if not _moved_into_helper(index, site, moved):
                        yield self.report(site.node, f"save helper {dotted_name(site.node.func)}() called on every rank: "
                                                     "N processes write the same file")
                continue
            if not _call_makes_it_save(project, key, site.node):
                continue  # ``lm_checkpoint(cfg, weight=w)``: saves only when given a model, loads here
            if _collective_checkpoint_helper(project, key):
                continue
            trainer = project.function(key)
            if (trainer is not None and trainer.trains) or any(
                    _trains(project, index, helper) for helper in helper_functions(index, site)):
                continue  # ``main(opt)`` runs the training loop: its own saves are judged inside it
            saved = _saved_arguments(index, project, key, callee, site)
            if not saved or any(_per_rank_or_in_memory(index, arg.value)
                                for arg in _path_arguments(project, key, callee, site)):
                continue  # a per-rank file or a buffer
            if _runs_on_every_rank(index, site) and not _moved_into_helper(index, site, moved):
                yield self.report(site.node, f"save helper {dotted_name(site.node.func) or callee}() called on every rank: "
                                             "N processes write the same file")
        # A save helper of this module is reported at its own ``torch.save`` (once, where the
        # labellers of real code put it), naming the calls that run it on every rank.
        for helper, saves, calls in moved.values():
            where = locate(index, [call.node for call in calls])
            lines = ", ".join(sorted({str(where[c.node].start.line) for c in calls if c.node in where}, key=int))
            reached = [save for save in saves if _reached_by(index, helper, save, calls)]
            for save in reached or saves:
                if id(save.node) not in reported:
                    reported.add(id(save.node))
                    yield self.report(save.node, f"checkpoint saved on every rank: {helper.name.value}() is called "
                                                 f"on every rank (line {lines}): N processes write the same file")


def _moved_into_helper(index: SemanticIndex, site, moved: dict) -> bool:
    """A call, run on every rank, of a save helper of this module whose body
    ``torch.save``s itself, unguarded, to a file that is not per rank: the
    report moves to that ``torch.save`` (recorded in ``moved``). False for
    helpers in other modules or whose save sits deeper (reported at the call)."""
    helpers = helper_functions(index, site)
    if len(helpers) != 1:
        return False
    helper = helpers[0]
    saves = [s for s in calls_in_function(index, helper) if s.qualified_name == names.TORCH_SAVE
             and s.argument("obj") is not None and s.argument("f") is not None
             and not _per_rank_or_in_memory(index, s.argument("f").value)
             and not runs_on_rank_subset(index, s.node, lenient=True)
             and is_worker_code(index, s.node)  # not the helper's single-process arm
             and enclosing_function(index, s.node) is helper]
    # Only the checkpoints: model state, or a parameter this call fills with model state;
    # ``torch.save(args, 'args.pt')`` beside them is not this rule's finding.
    saves = [s for s in saves if _is_model_state(index, s.argument("obj").value) or any(
        _saved_parameters(index, s.argument("obj").value, helper, only=param)
        and arg is not None and _is_model_state(index, arg.value)
        for param, arg in _arguments_by_parameter(helper, site))]
    if not saves:
        return False
    moved.setdefault(id(helper), (helper, saves, []))[2].append(site)
    return True


def _reached_by(index: SemanticIndex, helper: cst.FunctionDef, save, calls) -> bool:
    """Can these calls run this save of the helper? Not when it sits in an arm of
    ``if <param>:`` that every call's literal (or the default) switches off
    (``save_checkpoint(..., save_cur=True)`` never runs the ``elif`` branch)."""
    from ddplint.analysis.flow import arm_switched_off, if_ancestors

    return not any(arm_switched_off(index, helper, branch, in_body, calls)
                   for branch, in_body in if_ancestors(index, save.node, stop=helper))


def _collective_checkpoint_helper(project, key) -> bool:
    """A helper that writes through another (``self._checkpoint_client.save_checkpoint(...)``)
    and reaches a collective on the way (it gathers the state, or waits at a barrier
    while rank 0 writes): every rank must call it. A helper with its own unguarded
    ``torch.save`` (then a barrier) still writes on every rank."""
    function = project.function(key)
    return function is not None and not function.saves_unguarded and project.reaches_collective(key)


def _unseen_save_helper_of_ddp_state(index: SemanticIndex, project, site) -> bool:
    """``write_ckpt({"net": model.state_dict()}, out)``: a function imported from a
    module the project does not hold (its body is not visible), named like a save
    (save / ckpt / checkpoint) and not like one that guards itself
    (``save_on_master``), given the ``state_dict()`` of a DDP-wrapped model and no
    per-rank or in-memory argument; not a library's own save (``xm.save``,
    ``accelerator.save``, mmcv's, deepspeed's: they decide who writes)."""
    func = site.node.func
    if not isinstance(func, cst.Name) or not _SAVE_HELPER_NAME.search(func.value) \
            or _SELF_GUARDING_NAME.search(func.value):
        return False
    bindings = index.reaching(func.value, func)
    if not bindings or any(b.kind != "import" for b in bindings):
        return False
    qualified = index.qualified_name(func) or ""
    if qualified.split(".")[0] in _SAVING_LIBRARIES or \
            project.resolve_function(index.path, func.value, index.imports) is not None:
        return False  # a library's save, or a project function (judged through its facts)
    if any(arg.star or _per_rank_or_in_memory(index, arg.value) for arg in site.node.args):
        return False
    return any(_holds_ddp_state(index, arg.value) for arg in site.node.args)


def _holds_ddp_state(index: SemanticIndex, expr: cst.BaseExpression, depth: int = 0) -> bool:
    """Does the expression take the ``state_dict()`` of a DDP-wrapped model
    (``model.state_dict()``, ``model.module.state_dict()``), itself or through the
    value of a name it reads (``blob = {"net": model.state_dict()}``)?"""
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
                and node.func.attr.value == "state_dict":
            call = index.call_site(node)
            receiver = node.func.value
            if isinstance(receiver, cst.Attribute) and receiver.attr.value == "module":
                receiver = receiver.value
            if call is not None and wrapped_kind(index, receiver, call.order) == "ddp":
                return True
        elif isinstance(node, cst.Name) and depth < 2:
            if any(_holds_ddp_state(index, value, depth + 1) for value in index.reaching_values(node) or []):
                return True
        stack.extend(node.children)
    return False


def _some_call_guarded(index: SemanticIndex, function: cst.FunctionDef) -> bool:
    """Is some call of the function in this module made under a rank guard?"""
    return any(runs_on_rank_subset(index, site.node, lenient=True) for site in callers(index, function))


def _local_helper_saves_an_argument(index: SemanticIndex, site) -> bool:
    """A function of this module that ``torch.save``s the state of a parameter
    this call fills (``save_checkpoint(self.model, args)`` with
    ``torch.save(model.state_dict(), filename)`` inside, also after ``model =
    model.module``), when no argument is a per-rank value (a per-rank file)."""
    if any(_per_rank_or_in_memory(index, arg.value) for arg in site.node.args):
        return False
    for helper in helper_functions(index, site):
        if not _some_call_guarded(index, helper):
            continue  # every call unguarded: the save inside the helper is reported
        saves = [s for s in calls_in_function(index, helper) if s.qualified_name == names.TORCH_SAVE
                 and s.argument("f") is not None and not _per_rank_or_in_memory(index, s.argument("f").value)
                 and not runs_on_rank_subset(index, s.node, lenient=True)]
        for param, arg in _arguments_by_parameter(helper, site):
            if arg is None:
                continue
            for save in saves:
                obj = save.argument("obj")
                # ``torch.save(model.state_dict(), ...)`` of the parameter (the shape the project
                # facts do not record; the others are judged through them).
                if obj is not None and isinstance(obj.value, cst.Call) and _is_model_state(index, obj.value) \
                        and _saved_parameters(index, obj.value, helper, only=param):
                    return True
    return False


def _arguments_by_parameter(helper: cst.FunctionDef, site) -> list:
    """(parameter name, the argument this call passes for it or None), ``self``
    and ``cls`` left out."""
    params = [p.name.value for p in (*helper.params.posonly_params, *helper.params.params)]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    positional = [a for a in site.node.args if a.keyword is None and not a.star]
    return [(param, site.keyword(param) or (positional[i] if i < len(positional) else None))
            for i, param in enumerate(params)]


def _local_helper_saves_state(index: SemanticIndex, site) -> bool:
    """A function of this module (``self._serialize()``) that ``torch.save``s
    model state with no rank guard inside and no file or state chosen by its
    callers, called under a rank guard elsewhere in this module: the call made
    on every rank is the mistake (the guarded one shows the intent)."""
    for helper in helper_functions(index, site):
        if not _some_call_guarded(index, helper):
            continue  # every call unguarded: the save inside the helper is reported
        for save in calls_in_function(index, helper):
            obj, target = save.argument("obj"), save.argument("f")
            if save.qualified_name != names.TORCH_SAVE or obj is None or target is None:
                continue
            if _is_model_state(index, obj.value) and not _per_rank_or_in_memory(index, target.value) \
                    and not runs_on_rank_subset(index, save.node, lenient=True) \
                    and not _saved_parameters(index, obj.value, helper) \
                    and not _path_from_parameters(index, target.value, helper):
                return True
    return False


def _message(name: str) -> str:
    if name and "*" not in name:
        return f"checkpoint saved on every rank: every rank writes '{name}' (N writers, one file)"
    return CheckpointSavedOnEveryRank.message


def _runs_on_every_rank(index: SemanticIndex, site) -> bool:
    """Not rank-guarded here, worker code, and its function is run unguarded by
    some caller of the project (module-level code always runs)."""
    if runs_on_rank_subset(index, site.node, lenient=True) or not is_worker_code(index, site.node):
        return False
    function = enclosing_function(index, site.node)
    if function is None:
        return True
    if _class_level_unknown(index, function):
        return False
    project = project_of(index)
    key = project.function_key(index.path, function_key(index, function))
    facts = project.function(key)
    if facts is not None and facts.saves_need and not project.saving_callers_unguarded(key):
        return False  # saves only when given ``model=``; every call that gives it is guarded
    verdict = project.callers_guarded(index.path, function_key(index, function))
    if verdict is None and (_spawn_target(project, index.path, function_key(index, function))
                            or spawned_through_a_parameter(index, function)):
        return True  # ``mp.spawn(run_training, ...)``: every process runs it, whoever calls the spawner
    return verdict is False


def _call_makes_it_save(project, key, call: cst.Call) -> bool:
    """Does this call of a save helper pass what its saves need (a helper that
    saves under ``if model is not None:`` and loads otherwise)?"""
    starred = any(arg.star for arg in call.args)
    positional = None if starred else sum(1 for arg in call.args if arg.keyword is None)
    keywords = [arg.keyword.value for arg in call.args if arg.keyword is not None]
    instance = "." in key[1] and isinstance(call.func, cst.Attribute)
    return project.saves_when_called(key, positional, keywords, instance)


def _in_a_loop_of(index: SemanticIndex, node: cst.CSTNode, function: cst.FunctionDef) -> bool:
    """Is ``node`` inside a ``for`` / ``while`` loop of ``function`` itself (the
    epoch loop of ``def main(cfg, gpu, save_dir)``)? Such a function trains and
    saves; it is no save helper, whatever its parameters choose."""
    for ancestor in index.ancestors(node):
        if ancestor is function:
            return False
        if isinstance(ancestor, (cst.For, cst.While)):
            return True
    return False


def _trains(project, index: SemanticIndex, function: cst.FunctionDef) -> bool:
    """Does the function run a training loop itself (``FunctionFacts.trains``)?
    Its saves are its own, not a save helper's."""
    facts = project.function(project.function_key(index.path, function_key(index, function)))
    return bool(facts is not None and facts.trains)


def _spawn_target(project, path: str, function: str) -> bool:
    """Is the function started by ``mp.spawn`` (a call passes it the spawn index)?"""
    calls = project.callers.get(project.function_key(path, function)) or ()
    return any(SPAWN_INDEX in call.args.values() and not call.guarded_lenient for _, call in calls)


def _saved_arguments(index: SemanticIndex, project, key, callee: str, site) -> list:
    """The arguments of a save-helper call that the helper writes on every rank,
    when they are model state (by value, or by the helper parameter's name), and
    not the caller's own parameter that its callers choose (then the caller is a
    save helper too, reported where it is called)."""
    function = enclosing_function(index, site.node)
    own = project.saved_params(index.path, function_key(index, function), unguarded=True) \
        if function is not None and not _trains(project, index, function) else set()
    saved, position = [], 0
    for arg in site.node.args:
        if arg.star:
            break
        slot = arg.keyword.value if arg.keyword is not None else str(position)
        position += arg.keyword is None
        if not project.call_saves(key, callee, slot, unguarded=True):
            continue
        if isinstance(arg.value, cst.Name) and arg.value.value in own:
            return []  # this function is a save helper too: its own callers are judged
        if _is_model_state(index, arg.value) or _STATE_NAME.search(slot) or project.saves_state(key):
            saved.append(arg)
    return saved


def _path_arguments(project, key, callee: str, site) -> list:
    """The arguments of a save-helper call that fill the parameters its file
    name is built from (``write_ckpt(state, f"ckpt_{rank}.pt")``), not the
    saved state nor flags such as ``is_best``."""
    found, position = [], 0
    for arg in site.node.args:
        if arg.star:
            break
        slot = arg.keyword.value if arg.keyword is not None else str(position)
        position += arg.keyword is None
        if project.call_saves(key, callee, slot, unguarded=True) and not project.call_saves(key, callee, slot):
            found.append(arg)
    return found


def _path_from_parameters(index: SemanticIndex, expr: cst.BaseExpression, function: cst.FunctionDef) -> bool:
    """Is the file a save writes built from a parameter of its function
    (``torch.save(state, checkpoint_path)``, ``os.path.join(out_dir, name)``)?"""
    for name in _bare_names(expr):
        for binding in index.reaching(name, expr):
            if binding.kind == "param" and binding.scope is function and name not in ("self", "cls"):
                return True
            if binding.kind in ("assign", "annassign") and binding.value is not None \
                    and binding.scope is function and any(
                        b.kind == "param" and b.scope is function and n not in ("self", "cls")
                        for n in _bare_names(binding.value) for b in index.reaching(n, binding.value)):
                return True
    return False


def _bare_names(expr: cst.CSTNode) -> list[str]:
    """Names read as a whole (``path``, ``out_dir``), not through an attribute
    (``args`` of ``args.output_dir``: a configuration, not a file the caller chose)."""
    found, stack = [], [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Name):
            found.append(node.value)
        elif not isinstance(node, cst.Attribute):
            stack.extend(node.children)
    return found


def _builds_state(index: SemanticIndex, expr: cst.BaseExpression) -> bool:
    """Does the saved object take a ``state_dict()`` itself (here, or in the
    value of a name it reads)? Then the function decides what is saved."""
    if _contains_state_dict(expr):
        return True
    values = index.reaching_values(expr) if isinstance(expr, cst.Name) else None
    return any(_contains_state_dict(value) for value in values or [])


def _saved_parameters(index: SemanticIndex, expr: cst.BaseExpression, function: cst.FunctionDef,
                      depth: int = 0, only: str = "") -> bool:
    """Does the saved object hold one of the function's parameters as it was
    passed in (``torch.save(state, path)``, ``{"model": model_state, ...}``)?"""
    if depth > 3:
        return False
    if isinstance(expr, cst.Name):
        for binding in index.reaching(expr.value, expr):
            if binding.kind == "param" and binding.scope is function and only in ("", binding.name):
                return True
            if binding.kind in ("assign", "annassign") and binding.value is not None \
                    and _saved_parameters(index, binding.value, function, depth + 1, only):
                return True
        return False
    if isinstance(expr, cst.Dict):
        return any(isinstance(e, cst.DictElement) and _saved_parameters(index, e.value, function, depth + 1, only)
                   for e in expr.elements)
    if isinstance(expr, (cst.List, cst.Tuple)):
        return any(_saved_parameters(index, e.value, function, depth + 1, only) for e in expr.elements)
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in ("dict", "OrderedDict"):
        return any(_saved_parameters(index, a.value, function, depth + 1, only) for a in expr.args)
    if only and isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) \
            and expr.func.attr.value == "state_dict":
        return _saved_parameters(index, expr.func.value, function, depth + 1, only)  # ``model.state_dict()`` of it
    if only and isinstance(expr, cst.Attribute) and expr.attr.value == "module":
        return _saved_parameters(index, expr.value, function, depth + 1, only)  # ``model = model.module``
    return False


def _is_model_state(index: SemanticIndex, expr: cst.BaseExpression, depth: int = 0) -> bool:
    """Model/optimizer state: a ``.state_dict()`` inside, a model object, or a name
    that says so (``checkpoint``, ``state``, ``model``)."""
    if _contains_state_dict(expr):
        return True
    name = dotted_name(expr)
    if name is None:
        return False
    if depth < 2 and isinstance(expr, cst.Name):
        values = index.reaching_values(expr) or []
        if any(_is_model_state(index, v, depth + 1) for v in values):
            return True
    return bool(_STATE_NAME.search(name.split(".")[-1]))


def _contains_state_dict(expr: cst.CSTNode) -> bool:
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
                and node.func.attr.value in ("state_dict", "optim_state_dict"):
            return True
        stack.extend(node.children)
    return False


def _per_rank_or_in_memory(index: SemanticIndex, expr: cst.BaseExpression) -> bool:
    """A file name built from the rank (a name or call in it, or in the value
    of a name it reads, says rank / gpu / worker / shard: ``f"ckpt_{rank}.pt"``,
    ``os.path.join(out, fn)`` with ``fn = f"optim.{dist.get_rank()}.pt"``; the
    literal text does not count: every rank writes ``'best_gpu.pt'``), or an
    in-memory buffer."""
    identifiers = set(names_in(expr))
    pending, seen = [(expr, 0)], set()
    while pending:  # the names a path is built from, three bindings deep
        node, depth = pending.pop()
        if _keyed_rank_in(index, node):
            return True  # ``f"rng_{cfg['rank']}.pt"``: a rank kept in a dict
        for name in sorted(names_in(node)):
            if "." in name or name in seen or depth > 2:
                continue
            seen.add(name)
            for binding in index.reaching(name, node):
                if binding.kind in ("assign", "annassign") and binding.value is not None:
                    identifiers |= names_in(binding.value)
                    pending.append((binding.value, depth + 1))
                    if "BytesIO" in index.module.code_for_node(binding.value):
                        return True
    if any(_PER_RANK.search(part) for name in identifiers for part in name.split(".")):
        return True
    if "BytesIO" in index.module.code_for_node(expr):
        return True
    name = dotted_name(expr)
    return name is not None and bool(_BUFFER_NAME.search(name.split(".")[-1]))


def _keyed_rank_in(index: SemanticIndex, expr: cst.CSTNode) -> bool:
    """A subscript in ``expr`` that ``ranks.is_rank_value`` knows as a rank
    (``opt["rank"]``, ``os.environ["LOCAL_RANK"]``); a bounded walk."""
    pending, visited = [expr], 0
    while pending and visited < 200:
        node = pending.pop()
        visited += 1
        if isinstance(node, cst.Subscript) and is_rank_value(index, node):
            return True
        pending.extend(node.children)
    return False


def _class_level_unknown(index: SemanticIndex, function: cst.FunctionDef) -> bool:
    """Functions nested in other functions: their calls are not tracked by name."""
    scope = index.enclosing_scope(function)
    return scope is not index.module
