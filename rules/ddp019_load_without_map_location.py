"""## What it does
Flags `torch.load(...)` (and `torch.hub.load_state_dict_from_url(...)`) without
`map_location` in a DDP worker that uses CUDA (also through a project helper it
calls that sets the process's device: `set_dist(args)` with
`torch.cuda.set_device(args.local_rank)` inside).

## Why is this bad?
`torch.load` restores each tensor onto the device it was saved from. A
checkpoint written by rank 0 holds `cuda:0` tensors, so every rank materialises
a full copy of the checkpoint on GPU 0: rank 0 runs out of memory, or the other
ranks silently keep a second CUDA context there.

## Example
    state = torch.load("checkpoint.pt")
    model.load_state_dict(state["model"])

## Use instead
    state = torch.load("checkpoint.pt", map_location="cpu")
    # or map_location=f"cuda:{local_rank}"
    model.load_state_dict(state["model"])

Fix (unsafe): adds `map_location="cpu"` (or replaces `map_location=None`).
Unsafe: tensors that the code uses directly after loading (rather than copying
them into a model that is already on its GPU) now start on the CPU.

Not flagged: a `map_location` (or `**kwargs` that may carry one); code that
is not a DDP worker (launcher-parent code before or after `mp.spawn`, also in
functions only the launcher calls, functions of an entry script that nothing names, the single-process
branch of a script, an arm that never runs in the worker (`if args.gpu is None:` where
every call fills `args.gpu` with the spawn index or the local rank), the self-test block of an imported module, single-process or
CPU-only test functions: in unit tests the role is decided per test function);
loads that run on rank 0 only (`if rank == 0:`, the `else` of a truthy `if rank:`, or in a function every caller
runs under a rank guard: rank 0 owns device 0); files known to hold CPU tensors
or none (written in this module from `.cpu()` values, tensors allocated with
`device="cpu"` or made by a project module that never uses CUDA, files another
module in reach, or a standalone preprocessing script, that never uses CUDA
writes, files every save of which by another module in reach stores CPU tensors
(`net.cpu()` before `torch.save(net.state_dict(), ".../model_final.pth")` in the
training script, loaded by the evaluation script), a class's `load_x(path)` (or a module's function) whose mirror `save_x`
writes only `.cpu()` entries or a state gathered with CPU offload, also through a
module-level policy), LR scheduler states (unless the function also reads the checkpoint's optimizer or
model entries), random generator states (`torch.cuda.get_rng_state()` is
a CPU tensor), full state dicts saved with CPU offload (also by another function of the module that writes
the same file-name template after `cfg.offload_to_cpu = ...`), `GradScaler.state_dict()`, metadata-only files
such as `meta.pt`, files of the dataset folder (`'DATA/{}/node_features.pt'`, a loaded
pickled dataset that feeds a `DataLoader` or sampler,
unless the name says checkpoint / model / weights / best / last), a sampler's state, files saved by a
CPU-only Fabric/Trainer); processes that see one GPU
(`os.environ["CUDA_VISIBLE_DEVICES"] = str(local_rank)` here, or in every script that imports this module):
a tensor saved from `cuda:0` comes back to the process's own GPU (a mask the launcher parent sets
once before spawning, outside a loop that starts one process per mask, is the run's GPU list: every
worker sees them all, so it does not count);
per-rank files (a name built from this process's rank: `f"model_rank{rank}.bin"`, also
kept on the instance when every assignment of it builds it so: `self._path = f"rank_{cfg.rank}.pt"`,
each rank reads the shard it wrote); in-memory buffers (`torch.load(io.BytesIO(data))`: this rank's own round trip,
or bytes another machine serialised); a file saved and loaded under the same rank
test (`if grp.rank() == 0:` around both: the writer reads its own file back);
a CPU-only module (`gloo`, no CUDA use); `if gpu is None: torch.load(p) else:
torch.load(p, map_location=f"cuda:{gpu}")` (the unmapped arm is the
configuration without a per-rank GPU, unless the function also sets the device
from another value: `torch.cuda.set_device(args.gpu_to_work_on)` on a SLURM path).

Also flagged: a load in a module that never says cuda itself (a checkpoint
manager) when every project call of its function outside unit tests comes from
a module that puts data on a GPU (also through `from pkg.mod import *`).

Flagged although it looks handled: the GPU arm of `torch.load(p) if use_gpu
else torch.load(p, map_location="cpu")`, and a load under an enclosing `if`
whose mapped load elsewhere is unrelated.

## References
- https://pytorch.org/docs/stable/generated/torch.load.html
- https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#save-and-load-checkpoints
"""

from __future__ import annotations

import re
from typing import Iterator, Optional

import libcst as cst

from ddplint import names
from ddplint.analysis.models import linked_modules, project_callee, project_of
from ddplint.analysis.roles import is_worker_code, runs_on_rank_zero_only
from ddplint.analysis.flow import names_in, precedes
from ddplint.analysis.ranks import is_rank_value
from ddplint.analysis.semantic import CallSite, SemanticIndex, dotted_name, iter_literal_strings
from ddplint.analysis.values import literal_str, module_masks_visible_devices, name_reads
from ddplint.fixes import UNSAFE, add_keyword, node_fix, replace, string_literal
from ddplint.rule import Invalid, Report, Rule, Valid

DIST = "import torch\nimport torch.distributed as dist\n"
OPTIMIZER_FROM_CHECKPOINT = DIST + """\
class Algorithm:
    def __init__(self, model, optimizer, scheduler, local_rank):
        torch.cuda.set_device(local_rank)
        self.model = torch.nn.parallel.DistributedDataParallel(model.cuda(), device_ids=[local_rank])
        self.optimizer, self.scheduler = optimizer, scheduler

    def load_optimizer_checkpoint(self, path):
        checkpoint = torch.load(path)
        state = {}
        for k, v in checkpoint["optimizer_state_dict"].items():
            state[k[7:] if k.startswith("module.") else k] = v
        self.optimizer.load_state_dict(state)
        self.scheduler.load_state_dict(checkpoint["scheduler_state_dict"])
"""
OFFLOAD_POLICY = DIST + """\
from pathlib import Path
from torch.distributed.fsdp import FullStateDictConfig, StateDictType
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

save_policy = FullStateDictConfig(offload_to_cpu={offload}, rank0_only=True)


def save_model_checkpoint(model, rank, folder):
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, save_policy):
        cpu_state = model.state_dict()
    if rank == 0:
        torch.save(cpu_state, Path(folder) / "total_model.pt")


def load_model_checkpoint(model, checkpoint_filepath):
    model.cuda()
    path = Path(checkpoint_filepath)
    model.load_state_dict(torch.load(path))
"""
HUB_LOAD = "torch.hub.load_state_dict_from_url"
# Files that hold metadata, not tensors: meta.pt, metadata.pt, training_args.bin.
_METADATA_FILE = re.compile(r"(^|[/_.-])(meta|metadata)([_.-]|$)|(^|[/_.-])(training_)?args\.(pt|pth|bin)$")
_FRAMEWORK_SAVES = ("save", "save_checkpoint")
_FRAMEWORK_RUNNERS = ("Fabric", "Trainer", "Accelerator", "LightningLite")


class LoadWithoutMapLocation(Rule):
    code, name, severity = "DDP019", "load-without-map-location", "warning"
    message = ("torch.load without map_location in a DDP worker: every rank restores the tensors onto the GPU "
               "they were saved from (usually GPU 0); pass map_location")
    triggers = ("load",)
    needs_ddp_context = True

    valid = [
        # A function of an entry script that nothing names: its ``__main__`` block spawns ``main``
        # only (a102 BaamPark's ``pre_generate_labels``).
        Valid("""\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def main(rank, world_size):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    model = torch.nn.parallel.DistributedDataParallel(Net().cuda(rank), device_ids=[rank])
    train(model)
    dist.destroy_process_group()


def pre_generate_labels(model, dataset):
    model.load_state_dict(torch.load("best_model.pt"))
    return [model(x) for x in dataset]


if __name__ == "__main__":
    world_size = torch.cuda.device_count()
    mp.spawn(main, args=(world_size,), nprocs=world_size)
"""),
        # The file holds an epoch number only (a102 IDGEN).
        Valid("""\
import os
import torch
import torch.distributed as dist
dist.init_process_group("nccl")
torch.cuda.set_device(local_rank)
net = torch.nn.parallel.DistributedDataParallel(Net().cuda())
lastpath = os.path.join(moddir, 'last_epoch.pt')
if os.path.exists(lastpath):
    lastepc = torch.load(lastpath)['last_epoch']
    checkpoint = torch.load(os.path.join(moddir, f'ckpt_{lastepc}.pt'), map_location='cpu')
else:
    lastepc = 0
for epc in range(lastepc, epochs):
    train(net)
    if dist.get_rank() == 0:
        torch.save({'net': net.module.state_dict()}, os.path.join(moddir, f'ckpt_{epc + 1}.pt'))
        torch.save({'last_epoch': epc + 1}, os.path.join(moddir, 'last_epoch.pt'))
"""),
        # Cached features of a tokenised corpus (a99 Amdg).
        Valid("""\
import os
import torch
import torch.distributed as dist
dist.init_process_group("nccl")
torch.cuda.set_device(local_rank)
model = torch.nn.parallel.DistributedDataParallel(Net().cuda())
train_features = torch.load(os.path.join(process_path, corpus, train_features_name % model_type))
num_example = len(train_features)
"""),
        # A pickled dataset: what is loaded feeds the sampler and the loader (a95 Biofilm).
        Valid("import torch\nimport torch.distributed as dist\nfrom torch.utils.data import DataLoader\n"
              "from torch.utils.data.distributed import DistributedSampler\ndist.init_process_group('nccl')\n"
              "torch.cuda.set_device(local_rank)\n"
              "model = torch.nn.parallel.DistributedDataParallel(Net().cuda())\n"
              "dataset = torch.load(f'{data_dir}/train_dataloader.pt', weights_only=False)\n"
              "sampler = DistributedSampler(dataset, shuffle=True)\n"
              "loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n"),
        # Only the global rank 0, spelled out as ``node * gpus + local_rank`` (a91 zarzen), loads.
        Valid(DIST + "def resume(model, args, path):\n    model.cuda()\n"
                     "    if args.world_id * args.num_gpu + args.local_rank == 0:\n"
                     "        model.load_state_dict(torch.load(path)['model'])\n"),
        # The single-process arm of ``if cfg.use_ddp is True:``.
        Valid(DIST + "import os\ndef evaluate(net, folder, cfg):\n    net.cuda()\n    if cfg.use_ddp is True:\n"
                     "        net.module.load_state_dict(torch.load(os.path.join(folder, 'w.pth'), map_location='cpu'))\n"
                     "    else:\n        net.load_state_dict(torch.load(os.path.join(folder, 'w.pth')))\n"),
        # The same file name template is written by a function that gathers with CPU offload.
        Valid(DIST + "import os\nmodel.cuda()\nNAME = 'weights'\ndef store(cfg, net, out):\n"
                     "    cfg.full_config.offload_to_cpu = cfg.world > 1\n    fname = f'{NAME}.bin'\n"
                     "    torch.save(net.state_dict(), os.path.join(out, fname))\ndef restore(cfg, src):\n"
                     "    fname = f'{NAME}.bin'\n    return torch.load(os.path.join(src, fname))\n"),
        # A per-rank shard, read back by the rank that wrote it.
        Valid(DIST + "import os\nmodel.cuda()\ndef restore_shard(folder, acc):\n"
                     "    name = f'shard_rank{acc.process_index}.bin'\n"
                     "    return torch.load(os.path.join(folder, name), weights_only=True)\n"),
        # A per-rank file kept on the instance (bound in another method), read back by its rank.
        Valid(DIST + "import os\nclass Keeper:\n    def __init__(self, cfg):\n        self.cfg = cfg\n"
                     "        self._path = os.path.join(cfg.out, f'rank_{self.cfg.rank}-of-{cfg.world}.pt')\n"
                     "    def restore(self, net):\n        net.cuda()\n        state = torch.load(self._path)\n"
                     "        net.load_state_dict(state['net'])\n"),
        Valid(DIST + "class Keeper:\n    def setup(self, folder):\n"
                     "        self.part = folder / ('part' + str(dist.get_rank()) + '.bin')\n"
                     "    def restore(self, opt):\n        torch.cuda.set_device(local_rank)\n"
                     "        opt.load_state_dict(torch.load(self.part))\n"),
        # RNG states: torch.cuda.get_rng_state() returns a CPU ByteTensor.
        Valid(DIST + "import random\nimport numpy as np\nmodel.cuda()\ndef keep_rng(folder):\n"
                     "    blob = {'cpu': torch.get_rng_state(), 'gpu': torch.cuda.get_rng_state(),\n"
                     "            'np': np.random.get_state(), 'py': random.getstate()}\n"
                     "    torch.save(blob, folder / f'rng_{dist.get_rank()}.pt')\n"
                     "def restore_rng(folder):\n    blob = torch.load(folder / f'rng_{dist.get_rank()}.pt')\n"
                     "    torch.cuda.set_rng_state(blob['gpu'])\n"),
        # The single-process arm of a dict option (``opt['dist']``).
        Valid(DIST + "model.cuda()\nif opt['dist']:\n    dist.init_process_group('nccl')\nelse:\n"
                     "    model.load_state_dict(torch.load(opt['pretrained']))\n"),
        Valid(DIST + "model.cuda()\nstate = torch.load(path, map_location='cpu')\n"),
        Valid(DIST + "model.cuda()\nstate = torch.load(path, map_location=f'cuda:{local_rank}')\n"),
        Valid(DIST + "model.cuda()\nstate = torch.load(path, {'cuda:0': f'cuda:{rank}'})\n"),
        Valid(DIST + "model.cuda()\nstate = torch.load(path, **load_kwargs)\n"),
        Valid(DIST + "dist.init_process_group('gloo')\nstate = torch.load(path)\n"),  # CPU-only worker
        Valid("import torch\nmodel.cuda()\nstate = torch.load(path)\n"),  # not DDP code
        Valid(DIST + "model.cuda()\nsd = torch.hub.load_state_dict_from_url(url, map_location='cpu')\n"),
        Valid(DIST + "model.cuda()\nif args.local_rank == -1:\n    state = torch.load(path)\n"),
        Valid(DIST + "model.cuda()\nstate = torch.jit.load(path)\nnp.load(path)\n"),
        Valid(DIST + "model.cuda()\nif args.gpu is None:\n    ckpt = torch.load(args.resume)\nelse:\n"
                     "    ckpt = torch.load(args.resume, map_location=f'cuda:{args.gpu}')\n"),
        Valid(DIST + "model.cuda()\ntorch.save(feats.cpu(), os.path.join(out, 'feats.pth'))\n"
                     "feats = torch.load(os.path.join(out, 'feats.pth'))\n"),
        Valid(DIST + "from unittest import mock\n@mock.patch('torch.cuda.Stream')\ndef test(s):\n"
                     "    state = torch.load(path)\n"),
        # only rank 0 loads: rank 0 owns device 0 (RULES.md, Clarifications: this was an invalid example)
        Valid(DIST + "torch.cuda.set_device(local_rank)\nif rank == 0:\n"
                     "    pretrained = torch.load(args.pretrained)\n"),
        Valid(DIST + "model.cuda()\nif rank in [-1, 0]:\n"
                     "    run_id = torch.load(weights).get('wandb_id')\n"),
        Valid(DIST + "def export(fabric, path):\n    torch.cuda.set_device(fabric.local_rank)\n"
                     "    if fabric.global_rank != 0:\n        return\n    weights = torch.load(path)\n"),
        # the else of a truthy rank test (``if self.rank:``, ``elif local_rank:``): rank 0 alone loads
        Valid(DIST + "class Restorer:\n    def restore(self, net, path):\n        if self.rank:\n"
                     "            net.load_state_dict(torch.load(path, map_location=f'cuda:{self.rank}'))\n"
                     "        else:\n            net.load_state_dict(torch.load(path))\n"),
        Valid(DIST + "local_rank = dist.get_rank()\ntorch.cuda.set_device(local_rank)\n"
                     "if not args.resume:\n    pass\nelif local_rank:\n    dist.barrier()\n"
                     "else:\n    ckpt = torch.load(args.resume)\n"),
        # launcher-parent code: runs once, in the parent, before the workers start
        Valid(DIST + "import torch.multiprocessing as mp\ndef worker(gpu, state):\n"
                     "    torch.cuda.set_device(gpu)\ndef main():\n    state = torch.load(args.resume)\n"
                     "    mp.spawn(worker, nprocs=4, args=(state,))\n"),
        # functions only launcher code calls: an argument check before the spawn, a test pass after the join
        Valid(DIST + "import torch.multiprocessing as mp\ndef check(args):\n    if args.resume:\n"
                     "        args = torch.load(args.resume)['args']\n    return args\n"
                     "def evaluate(args):\n    net = Net().cuda()\n    net.load_state_dict(torch.load(args.best))\n"
                     "def worker(gpu, args):\n    torch.cuda.set_device(gpu)\n"
                     "def main(args):\n    mp.spawn(worker, nprocs=args.gpus, args=(args,))\n    evaluate(args)\n"
                     "if __name__ == '__main__':\n    main(check(parse()))\n"),
        # ``args.gpu is None`` never holds in this worker: every call passes the spawn index or
        # the launcher's local rank (a61 moco-1's main_lincls_dist_launch.py).
        Valid(DIST + """\
import os
import torch.multiprocessing as mp
def main_worker(gpu, args):
    args.gpu = gpu
    dist.init_process_group("nccl", rank=args.rank)
    torch.cuda.set_device(args.gpu)
    model = Net().cuda(args.gpu)
    if args.gpu is None:
        checkpoint = torch.load(args.resume)
    else:
        checkpoint = torch.load(args.resume, map_location=lambda storage, loc: storage)
    model.load_state_dict(checkpoint["state_dict"])
def main(args):
    if args.multiprocessing_distributed:
        mp.spawn(main_worker, nprocs=torch.cuda.device_count(), args=(args,))
    else:
        main_worker(int(os.environ["LOCAL_RANK"]), args)
"""),
        # the single-process branch of a script
        Valid(DIST + "model.cuda()\nif not args.distributed:\n    ckpt = torch.load(args.ckpt)\n"),
        # in-memory buffers: this process's own round trip, or bytes a remote service serialised
        Valid(DIST + "import io\nmodel.cuda()\ndef fetch(prompt):\n    reply = requests.post(URL, json={'p': prompt})\n"
                     "    return torch.load(io.BytesIO(reply.content))\n"),
        Valid(DIST + "from io import BytesIO\ntorch.cuda.set_device(local_rank)\nbuf = BytesIO()\n"
                     "torch.save(model.state_dict(), buf)\nbuf.seek(0)\nstate = torch.load(buf)\n"),
        # the same rank test guards the save and the load of one path: the writer reads its own file back
        Valid(DIST + "class ShardedState:\n    def save(self, filename):\n        state = self.gather()\n"
                     "        if self.dp_group.rank() == 0:\n            torch.save(state, filename)\n"
                     "    def load(self, filename):\n        torch.cuda.set_device(self.local_rank)\n"
                     "        if self.dp_group.rank() == 0:\n            return torch.load(filename)\n"),
        # known CPU payloads
        Valid(DIST + "model.cuda()\nbank = torch.zeros(4096, 128, device='cpu')\ntorch.save(bank, 'bank.pt')\n"
                     "bank = torch.load('bank.pt')\n"),
        Valid(DIST + "from torch.distributed.fsdp import FullStateDictConfig, StateDictType\n"
                     "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
                     "def save_and_reload(model, path):\n    torch.cuda.set_device(local_rank)\n"
                     "    cfg = FullStateDictConfig(offload_to_cpu=True, rank0_only=False)\n"
                     "    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, cfg):\n"
                     "        state = model.state_dict()\n    torch.save(state, path)\n"
                     "    return torch.load(path)\n"),
        Valid(DIST + "model.cuda()\nscaler = torch.amp.GradScaler()\n"
                     "scaler.load_state_dict(torch.load(os.path.join(ckpt_dir, SCALER_NAME)))\n"),
        Valid(DIST + "model.cuda()\nmeta = torch.load(ckpt_dir / 'meta.pt', weights_only=True)\n"),
        # A checkpoint module's load_x reads what its save_x writes, gathered with the module's CPU
        # offload policy (a93 pytorch-trainer's fsdp_handler).
        Valid(OFFLOAD_POLICY.format(offload=True)),
        # The class reads back what its mirror method writes: every entry moved to the CPU first.
        Valid(DIST + "import os\nclass Snapshots:\n    def save_weights(self, net, folder, step):\n"
                     "        sd = net.state_dict()\n        for name, t in sd.items():\n            sd[name] = t.cpu()\n"
                     "        torch.save(sd, os.path.join(folder, f'{step}_net.pth'))\n"
                     "    def load_weights(self, path, net):\n        net.load_state_dict(torch.load(path))\n"
                     "model.cuda()\n"),
        # An LR scheduler's state is numbers (last_epoch, base_lrs), no CUDA tensors.
        # Features prepared in the dataset folder, not a checkpoint.
        Valid(DIST + "import os\nmodel.cuda()\ndef load_tables(name):\n"
                     "    feats = torch.load('DATA/{}/edge_feats.pt'.format(name))\n    return feats.float()\n"),
        # ... an entry of a file that holds it, read after the name held the optimizer's file.
        Valid(DIST + "import os\nmodel.cuda()\ndef restore(self, folder):\n"
                     "    blob = torch.load(os.path.join(folder, 'opt.pt'), map_location='cpu')\n"
                     "    self.opt.load_state_dict(blob['opt'])\n"
                     "    blob = torch.load(os.path.join(folder, 'lr.pt'))\n"
                     "    self.lr_scheduler.load_state_dict(blob['lr_state'])\n"),
        Valid(DIST + "model.cuda()\nsched = torch.optim.lr_scheduler.StepLR(opt, 30)\n"
                     "sched_file = os.path.join(run_dir, 'sched.bin')\nif os.path.isfile(sched_file):\n"
                     "    sched.load_state_dict(torch.load(sched_file))\n"),
        Valid(DIST + "model.cuda()\nif params.sampler_state_dict_path:\n"
                     "    sampler_state = torch.load(params.sampler_state_dict_path)\n"),
        Valid(DIST + "from lightning.fabric import Fabric\ndef test_reload_on_cpu(tmp_path):\n"
                     "    fabric = Fabric(accelerator='cpu', devices=2, strategy='ddp')\n    fabric.launch()\n"
                     "    fabric.save(tmp_path / 'ckpt.pt', {'model': model})\n"
                     "    state = torch.load(tmp_path / 'ckpt.pt')\n    x = torch.ones(1).cuda()\n",
              filename="tests/test_checkpoint.py"),
        # per-function roles in tests: a single-device test among distributed ones
        Valid(DIST + "from lightning.fabric import Fabric\n"
                     "def test_two_gpus(tmp_path):\n    fabric = Fabric(accelerator='cuda', devices=2)\n"
                     "    fabric.launch()\n    x = torch.load(tmp_path / 'a.pt', map_location='cpu')\n"
                     "def test_one_gpu(tmp_path):\n    fabric = Fabric(accelerator='cuda', devices=1)\n"
                     "    state = torch.load(tmp_path / 'b.pt')\n", filename="tests/test_resume.py"),
        Valid(DIST + "def test_checkpoint_has_hparams(tmp_path):\n    trainer = Trainer(max_steps=1)\n"
                     "    trainer.fit(model)\n    trainer.save_checkpoint(tmp_path / 'x.ckpt')\n"
                     "    ckpt = torch.load(tmp_path / 'x.ckpt')\n    model.cuda()\n",
              filename="tests/trainer/test_trainer.py"),
        # a framework's full-state save offloads to CPU
        Valid(DIST + "def test_full_state(tmp_path):\n"
                     "    fabric = Fabric(accelerator='cuda', strategy=FSDPStrategy(state_dict_type='full'), devices=2)\n"
                     "    fabric.launch()\n    path = tmp_path / 'full.pt'\n    fabric.save(path, {'model': model})\n"
                     "    checkpoint = torch.load(path, weights_only=True)\n", filename="tests/test_fsdp.py"),
    ]
    invalid = [
        # The scheduler's state comes from the checkpoint, but so does the optimizer's, copied
        # key by key: its CUDA tensors land on GPU 0 on every rank (a96 Pseudo-Asynchronous-LocalSGD).
        Invalid(OPTIMIZER_FROM_CHECKPOINT, line=10, column=22,
                fixed=OPTIMIZER_FROM_CHECKPOINT.replace("torch.load(path)", 'torch.load(path, map_location="cpu")')),
        # ... but with a metric an evaluation returned beside it (it may be a CUDA tensor).
        Invalid("""\
import os
import torch
import torch.distributed as dist
dist.init_process_group("nccl")
torch.cuda.set_device(local_rank)
net = torch.nn.parallel.DistributedDataParallel(Net().cuda())
lastpath = os.path.join(moddir, 'last_epoch.pt')
if os.path.exists(lastpath):
    lastepc = torch.load(lastpath)['last_epoch']
    checkpoint = torch.load(os.path.join(moddir, f'ckpt_{lastepc}.pt'), map_location='cpu')
else:
    lastepc = 0
for epc in range(lastepc, epochs):
    train(net)
    best = evaluate(net)
    if dist.get_rank() == 0:
        torch.save({'net': net.module.state_dict()}, os.path.join(moddir, f'ckpt_{epc + 1}.pt'))
        torch.save({'last_epoch': epc + 1, 'best': best}, os.path.join(moddir, 'last_epoch.pt'))
""", line=9, column=15,
                fixed="""\
import os
import torch
import torch.distributed as dist
dist.init_process_group("nccl")
torch.cuda.set_device(local_rank)
net = torch.nn.parallel.DistributedDataParallel(Net().cuda())
lastpath = os.path.join(moddir, 'last_epoch.pt')
if os.path.exists(lastpath):
    lastepc = torch.load(lastpath, map_location="cpu")['last_epoch']
    checkpoint = torch.load(os.path.join(moddir, f'ckpt_{lastepc}.pt'), map_location='cpu')
else:
    lastepc = 0
for epc in range(lastepc, epochs):
    train(net)
    best = evaluate(net)
    if dist.get_rank() == 0:
        torch.save({'net': net.module.state_dict()}, os.path.join(moddir, f'ckpt_{epc + 1}.pt'))
        torch.save({'last_epoch': epc + 1, 'best': best}, os.path.join(moddir, 'last_epoch.pt'))
"""),
        # CUDA_VISIBLE_DEVICES set to the run's list of GPUs (a setting named so) hides nothing per process
        # (a76 BERT-Pretrain-Multi-GPU).
        Invalid(DIST + "import os\nclass Trainer:\n    def train(self, local_rank):\n"
                       "        os.environ['CUDA_VISIBLE_DEVICES'] = self.config.cuda_visible_devices\n"
                       "        dist.init_process_group('nccl')\n        model = Net().cuda(local_rank)\n"
                       "        opt.load_state_dict(torch.load(self.config.path + 'optimizer.pt'))\n",
                line=9, column=29,
                fixed=DIST + "import os\nclass Trainer:\n    def train(self, local_rank):\n"
                "        os.environ['CUDA_VISIBLE_DEVICES'] = self.config.cuda_visible_devices\n"
                "        dist.init_process_group('nccl')\n        model = Net().cuda(local_rank)\n"
                "        opt.load_state_dict(torch.load(self.config.path + 'optimizer.pt', map_location='cpu'))\n"),
        # A checkpoint kept under data/ is still a checkpoint.
        Invalid(DIST + "model.cuda()\nstate = torch.load('data/runs/best_model.pt')\n", line=4, column=9,
                fixed=DIST + "model.cuda()\nstate = torch.load('data/runs/best_model.pt', map_location='cpu')\n"),
        # The optimizer's file before the name is rebound to the scheduler's: flagged.
        Invalid(DIST + "import os\nmodel.cuda()\ndef restore(self, folder):\n"
                       "    blob = torch.load(os.path.join(folder, 'opt.pt'))\n"
                       "    self.opt.load_state_dict(blob['opt'])\n"
                       "    blob = torch.load(os.path.join(folder, 'lr.pt'), map_location='cpu')\n"
                       "    self.lr_scheduler.load_state_dict(blob['lr_state'])\n", line=6, column=12,
                fixed=DIST + "import os\nmodel.cuda()\ndef restore(self, folder):\n"
                       "    blob = torch.load(os.path.join(folder, 'opt.pt'), map_location='cpu')\n"
                       "    self.opt.load_state_dict(blob['opt'])\n"
                       "    blob = torch.load(os.path.join(folder, 'lr.pt'), map_location='cpu')\n"
                       "    self.lr_scheduler.load_state_dict(blob['lr_state'])\n"),
        # The unmapped arm of ``if gpu is None`` runs on a per-rank GPU too when another path
        # (a cluster launch, which passes no spawn index) sets the device from another value.
        Invalid(DIST + "import torch.multiprocessing as mp\ndef worker(gpu, cfg):\n    cfg.gpu = gpu\n    if cfg.on_cluster:\n"
                       "        cfg.dev_slot = cfg.rank % torch.cuda.device_count()\n        torch.cuda.set_device(cfg.dev_slot)\n"
                       "    elif cfg.gpu is not None:\n        torch.cuda.set_device(cfg.gpu)\n    if cfg.gpu is None:\n"
                       "        snap = torch.load(cfg.resume)\n    else:\n"
                       "        snap = torch.load(cfg.resume, map_location=f'cuda:{cfg.gpu}')\n"
                       "    net.load_state_dict(snap['net'])\nif cfg.on_cluster:\n    worker(None, cfg)\n"
                       "else:\n    mp.spawn(worker, nprocs=4, args=(cfg,))\n",
                line=12, column=16,
                fixed=DIST + "import torch.multiprocessing as mp\ndef worker(gpu, cfg):\n    cfg.gpu = gpu\n    if cfg.on_cluster:\n"
                       "        cfg.dev_slot = cfg.rank % torch.cuda.device_count()\n        torch.cuda.set_device(cfg.dev_slot)\n"
                       "    elif cfg.gpu is not None:\n        torch.cuda.set_device(cfg.gpu)\n    if cfg.gpu is None:\n"
                       "        snap = torch.load(cfg.resume, map_location='cpu')\n    else:\n"
                       "        snap = torch.load(cfg.resume, map_location=f'cuda:{cfg.gpu}')\n"
                       "    net.load_state_dict(snap['net'])\nif cfg.on_cluster:\n    worker(None, cfg)\n"
                       "else:\n    mp.spawn(worker, nprocs=4, args=(cfg,))\n"),
        # The module's policy keeps the gathered state on the GPU: the files hold CUDA tensors.
        Invalid(OFFLOAD_POLICY.format(offload=False), line=20, column=27,
                fixed=OFFLOAD_POLICY.format(offload=False).replace("torch.load(path)",
                                                                   "torch.load(path, map_location=\"cpu\")")),
        # The mirror method saves the GPU tensors as they are: the class's files hold CUDA tensors.
        Invalid(DIST + "import os\nclass Snapshots:\n    def save_weights(self, net, folder):\n"
                       "        torch.save(net.state_dict(), os.path.join(folder, 'net.pth'))\n"
                       "    def load_weights(self, path, net):\n        net.load_state_dict(torch.load(path))\n"
                       "model.cuda()\n", line=8, column=29,
                fixed=DIST + "import os\nclass Snapshots:\n    def save_weights(self, net, folder):\n"
                             "        torch.save(net.state_dict(), os.path.join(folder, 'net.pth'))\n"
                             "    def load_weights(self, path, net):\n"
                             "        net.load_state_dict(torch.load(path, map_location='cpu'))\nmodel.cuda()\n"),
        Invalid(DIST + "model.cuda()\nstate = torch.load('checkpoint.pt')\n", line=4, column=9,
                fixed=DIST + "model.cuda()\nstate = torch.load('checkpoint.pt', map_location='cpu')\n"),
        Invalid(DIST + "device = torch.device('cuda', rank)\nmodel.load_state_dict(torch.load(args.resume))\n",
                line=4, column=23,
                fixed=DIST + "device = torch.device('cuda', rank)\n"
                "model.load_state_dict(torch.load(args.resume, map_location='cpu'))\n"),
        Invalid(DIST + "model.cuda()\nsd = torch.hub.load_state_dict_from_url(url)\n", line=4, column=6,
                fixed=DIST + "model.cuda()\nsd = torch.hub.load_state_dict_from_url(url, map_location=\"cpu\")\n"),
        Invalid("from torch import load\nimport torch.distributed as dist\nnet.cuda()\nckpt = load(path)\n",
                line=4, column=8,
                fixed="from torch import load\nimport torch.distributed as dist\nnet.cuda()\n"
                "ckpt = load(path, map_location=\"cpu\")\n"),
        Invalid(DIST + "def resume(model, path):\n    ckpt = torch.load(path, weights_only=True)\n"
                       "    model.load_state_dict(ckpt['model'])\nmodel.cuda()\n", line=4, column=12,
                fixed=DIST + "def resume(model, path):\n    ckpt = torch.load(path, weights_only=True, "
                "map_location='cpu')\n    model.load_state_dict(ckpt['model'])\nmodel.cuda()\n"),
        Invalid(DIST + "model.to('cuda')\nstate = torch.load(path, map_location=None)\n", line=4, column=9,
                fixed=DIST + "model.to('cuda')\nstate = torch.load(path, map_location='cpu')\n"),
        Invalid(DIST + "class Trainer:\n    def load(self, path):\n        self.model.cuda()\n"
                       "        return torch.load(path)\n", line=6, column=16,
                fixed=DIST + "class Trainer:\n    def load(self, path):\n        self.model.cuda()\n"
                       "        return torch.load(path, map_location=\"cpu\")\n"),
        # An instance path that is the same file on every rank (or only sometimes per rank).
        Invalid(DIST + "import os\nclass Keeper:\n    def __init__(self, cfg):\n"
                       "        self._path = os.path.join(cfg.out, 'last.pt')\n"
                       "    def restore(self, net):\n        net.cuda()\n        state = torch.load(self._path)\n",
                line=9, column=17,
                fixed=DIST + "import os\nclass Keeper:\n    def __init__(self, cfg):\n"
                       "        self._path = os.path.join(cfg.out, 'last.pt')\n"
                       "    def restore(self, net):\n        net.cuda()\n"
                       "        state = torch.load(self._path, map_location='cpu')\n"),
        Invalid(DIST + "class Keeper:\n    def setup(self, folder, shared):\n"
                       "        self.part = folder / ('part' + str(dist.get_rank()) + '.bin')\n"
                       "        if shared:\n            self.part = folder / 'part.bin'\n"
                       "    def restore(self, opt):\n        torch.cuda.set_device(local_rank)\n"
                       "        opt.load_state_dict(torch.load(self.part))\n", line=10, column=29,
                fixed=DIST + "class Keeper:\n    def setup(self, folder, shared):\n"
                       "        self.part = folder / ('part' + str(dist.get_rank()) + '.bin')\n"
                       "        if shared:\n            self.part = folder / 'part.bin'\n"
                       "    def restore(self, opt):\n        torch.cuda.set_device(local_rank)\n"
                       "        opt.load_state_dict(torch.load(self.part, map_location='cpu'))\n"),
        # Arguments one per line: the new one follows their layout.
        Invalid(DIST + "torch.cuda.set_device(local_rank)\nstate = torch.load(\n    os.path.join(run_dir, 'last.pt'),\n"
                       "    weights_only=False,\n)\n", line=4, column=9,
                fixed=DIST + "torch.cuda.set_device(local_rank)\nstate = torch.load(\n    os.path.join(run_dir, 'last.pt'),\n"
                       "    weights_only=False,\n    map_location='cpu',\n)\n"),
        # every rank but 0 loads (replaces the rank-0 example, now valid)
        Invalid(DIST + "torch.cuda.set_device(local_rank)\nif rank != 0:\n"
                       "    pretrained = torch.load(args.pretrained)\n", line=5, column=18,
                fixed=DIST + "torch.cuda.set_device(local_rank)\nif rank != 0:\n"
                       "    pretrained = torch.load(args.pretrained, map_location=\"cpu\")\n"),
        # the body of a truthy rank test runs on every rank but 0
        Invalid(DIST + "torch.cuda.set_device(local_rank)\nif dist.get_rank():\n"
                       "    pretrained = torch.load(args.pretrained)\n", line=5, column=18,
                fixed=DIST + "torch.cuda.set_device(local_rank)\nif dist.get_rank():\n"
                       "    pretrained = torch.load(args.pretrained, map_location=\"cpu\")\n"),
        # a rank test guards the load, but the file is written under another one
        Invalid(DIST + "class ShardedState:\n    def save(self, filename):\n        if dist.get_rank() == 0:\n"
                       "            torch.save(self.gather(), filename)\n    def load(self, filename):\n"
                       "        torch.cuda.set_device(self.local_rank)\n        if self.dp_group.rank() == 0:\n"
                       "            return torch.load(filename)\n", line=10, column=20,
                fixed=DIST + "class ShardedState:\n    def save(self, filename):\n        if dist.get_rank() == 0:\n"
                       "            torch.save(self.gather(), filename)\n    def load(self, filename):\n"
                       "        torch.cuda.set_device(self.local_rank)\n        if self.dp_group.rank() == 0:\n"
                       "            return torch.load(filename, map_location=\"cpu\")\n"),
        # a helper that the worker calls too runs on every rank
        Invalid(DIST + "import torch.multiprocessing as mp\ndef load_weights(net, path):\n"
                       "    net.load_state_dict(torch.load(path))\ndef worker(gpu, args):\n"
                       "    torch.cuda.set_device(gpu)\n    load_weights(Net().cuda(), args.ckpt)\n"
                       "def main(args):\n    mp.spawn(worker, nprocs=2, args=(args,))\n    load_weights(Net(), args.ckpt)\n",
                line=5, column=25,
                fixed=DIST + "import torch.multiprocessing as mp\ndef load_weights(net, path):\n"
                       "    net.load_state_dict(torch.load(path, map_location=\"cpu\"))\ndef worker(gpu, args):\n"
                       "    torch.cuda.set_device(gpu)\n    load_weights(Net().cuda(), args.ckpt)\n"
                       "def main(args):\n    mp.spawn(worker, nprocs=2, args=(args,))\n    load_weights(Net(), args.ckpt)\n"),
        # the GPU arm of a conditional load is unmapped
        Invalid(DIST + "model.cuda()\n"
                       "ckpt = torch.load(p) if use_gpu else torch.load(p, map_location='cpu')\n",
                line=4, column=8,
                fixed=DIST + "model.cuda()\n"
                "ckpt = torch.load(p, map_location='cpu') if use_gpu else torch.load(p, map_location='cpu')\n"),
        # an unrelated enclosing ``if`` with a mapped load elsewhere excuses nothing
        Invalid(DIST + "model.cuda()\nif args.resume:\n    ckpt = torch.load(args.resume)\n"
                       "    stats = torch.load(args.stats, map_location='cpu')\n", line=5, column=12,
                fixed=DIST + "model.cuda()\nif args.resume:\n    ckpt = torch.load(args.resume, map_location='cpu')\n"
                       "    stats = torch.load(args.stats, map_location='cpu')\n"),
        # a distributed test function of a unit-test module
        Invalid(DIST + "def test_resume_two_gpus(tmp_path):\n"
                       "    fabric = Fabric(accelerator='cuda', devices=2, strategy='ddp')\n    fabric.launch()\n"
                       "    state = torch.load(tmp_path / 'last.ckpt')\n", line=6, column=13,
                filename="tests/test_resume.py",
                fixed=DIST + "def test_resume_two_gpus(tmp_path):\n"
                       "    fabric = Fabric(accelerator='cuda', devices=2, strategy='ddp')\n    fabric.launch()\n"
                       "    state = torch.load(tmp_path / 'last.ckpt', map_location='cpu')\n"),
        # a GPU tensor saved and reloaded on every rank
        Invalid(DIST + "model.cuda()\nbank = torch.zeros(4096, 128, device='cuda')\ntorch.save(bank, 'bank.pt')\n"
                       "bank = torch.load('bank.pt')\n", line=6, column=8,
                fixed=DIST + "model.cuda()\nbank = torch.zeros(4096, 128, device='cuda')\n"
                       "torch.save(bank, 'bank.pt')\nbank = torch.load('bank.pt', map_location='cpu')\n"),
    ]

    invalid += [
        # The parent masks the run's GPUs once before spawning: every worker sees them all.
        Invalid(DIST + "import os\nimport torch.multiprocessing as mp\ndef worker(gpu, args):\n    dist.init_process_group('nccl', rank=gpu, world_size=args.world)\n    torch.cuda.set_device(gpu)\n    net = build().cuda(gpu)\n    state = torch.load(args.weight)\n    net.load_state_dict(state)\ndef main(args):\n    os.environ['CUDA_VISIBLE_DEVICES'] = str(args.gpus)[1:-1]\n    mp.spawn(worker, nprocs=args.world, args=(args,))\n", line=9, column=13,
                fixed=DIST + "import os\nimport torch.multiprocessing as mp\ndef worker(gpu, args):\n    dist.init_process_group('nccl', rank=gpu, world_size=args.world)\n    torch.cuda.set_device(gpu)\n    net = build().cuda(gpu)\n    state = torch.load(args.weight, map_location='cpu')\n    net.load_state_dict(state)\ndef main(args):\n    os.environ['CUDA_VISIBLE_DEVICES'] = str(args.gpus)[1:-1]\n    mp.spawn(worker, nprocs=args.world, args=(args,))\n"),
        Invalid(DIST + "import os\nimport torch.multiprocessing as mp\ndef worker(gpu, args):\n    dist.init_process_group('nccl', rank=gpu, world_size=args.world)\n    torch.cuda.set_device(gpu)\n    net = build().cuda(gpu)\n    state = torch.load(args.weight)\n    net.load_state_dict(state)\ndef main(args):\n    os.environ['CUDA_VISIBLE_DEVICES'] = pick_free_gpus(args.world)\n    mp.spawn(worker, nprocs=args.world, args=(args,))\n", line=9, column=13,
                fixed=DIST + "import os\nimport torch.multiprocessing as mp\ndef worker(gpu, args):\n    dist.init_process_group('nccl', rank=gpu, world_size=args.world)\n    torch.cuda.set_device(gpu)\n    net = build().cuda(gpu)\n    state = torch.load(args.weight, map_location='cpu')\n    net.load_state_dict(state)\ndef main(args):\n    os.environ['CUDA_VISIBLE_DEVICES'] = pick_free_gpus(args.world)\n    mp.spawn(worker, nprocs=args.world, args=(args,))\n"),
    ]
    valid += [
        # The parent sets one GPU per process it starts: each worker's cuda:0 is its own.
        Valid(DIST + "import os\nimport torch.multiprocessing as mp\ndef worker(gpu, args):\n    dist.init_process_group('nccl', rank=gpu, world_size=args.world)\n    torch.cuda.set_device(gpu)\n    net = build().cuda(gpu)\n    state = torch.load(args.weight)\n    net.load_state_dict(state)\ndef main(args):\n    for rank in range(args.world):\n        os.environ['CUDA_VISIBLE_DEVICES'] = str(rank)\n        mp.Process(target=worker, args=(0, args)).start()\n    mp.spawn(worker, nprocs=args.world, args=(args,))\n"),
    ]

    def screen(self, sketch):
        """The screen (necessary for check() to report): True, False, or the project facts that must hold."""
        return sketch.may_call(names.TORCH_LOAD, "torch.hub.load_state_dict_from_url")

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        if module_masks_visible_devices(index):
            return  # each process sees one GPU: cuda:0 is its own
        cuda = _uses_cuda(index)
        loads = index.calls_to(names.TORCH_LOAD, HUB_LOAD)
        for site in loads:
            if site.has_star_kwargs or site.has_star_args or _maps(site):
                continue
            if not cuda and not _called_from_cuda_code(index, site):
                continue  # a CPU-only worker: tensors were saved on, and come back to, the CPU
            if not is_worker_code(index, site.node) or _other_arm_maps_to_gpu(index, site, loads):
                continue
            if runs_on_rank_zero_only(index, site.node) or _cpu_payload(index, site):
                continue
            yield self.report(site.node, fix=_fix(index, site))


def _fix(index: SemanticIndex, site: CallSite):
    """``map_location="cpu"``, in the quote style of the call's (else the module's) strings."""
    strings = [node for node in _call_strings(site.node)] + [node for node, _ in index.strings]
    cpu = string_literal("cpu", strings)
    given = site.argument("map_location")
    if given is not None:  # map_location=None
        return node_fix(f"Replace map_location=None by map_location={cpu}", UNSAFE, replace(given.value, cpu))
    return node_fix(f"Add map_location={cpu}", UNSAFE, add_keyword(site.node, "map_location", cpu))


def _call_strings(call: cst.Call) -> list:
    found = []
    for arg in call.args:
        value = arg.value
        if isinstance(value, cst.SimpleString):
            found.append(value)
        elif isinstance(value, cst.Call):
            found.extend(_call_strings(value))
    return found


def _maps(site: CallSite) -> bool:
    arg = site.argument("map_location")
    return arg is not None and not (isinstance(arg.value, cst.Name) and arg.value.value == "None")


def _uses_cuda(index: SemanticIndex) -> bool:
    """Does the module put anything on a GPU (not merely mention torch.cuda)?"""
    if index.method_calls("cuda") or index.calls_to(names.SET_DEVICE):
        return True
    if any(value == "nccl" or value.startswith("cuda") for _, value in iter_literal_strings(index)):
        return True
    if any(isinstance(part, cst.FormattedStringText) and "cuda" in part.value
           for fstring in index.fstrings for part in fstring.parts):
        return True
    return _given_a_device_by_cuda_code(index) or _calls_device_setup(index)


def _calls_device_setup(index: SemanticIndex) -> bool:
    """Does the module call a project function that sets this process's CUDA
    device (``set_dist(args)`` / ``init_distributed_mode(args)`` with
    ``torch.cuda.set_device(args.local_rank)`` inside)? Then it runs on a GPU."""
    project = project_of(index)
    for site in index.calls:
        if site.qualified_name is not None and site.qualified_name.startswith("torch."):
            continue
        callee = project_callee(index, site.node)
        facts = project.callee_facts(index.path, callee, index.imports) if callee else None
        if facts is not None and facts.sets_device:
            return True
    return False


def _called_from_cuda_code(index: SemanticIndex, site: CallSite) -> bool:
    """Is the load's function (a checkpoint manager's ``load_checkpoint``, one
    that restores state with ``load_state_dict``) called,
    at every call the project knows outside unit tests (at least one), from
    modules that put data on a GPU? Then it runs in a GPU worker although its own module never says cuda.
    A call from the same module (``self._reset()`` in ``Solver.__init__``) stands for that
    function's callers (a57 FaSNet-TAC: ``Solver(data, model, ...)`` in the training script)."""
    from ddplint.analysis.models import function_key

    function = index.enclosing_scope(site.node)
    if not isinstance(function, cst.FunctionDef):
        return False
    if not any(s.scope is function for s in index.method_calls("load_state_dict")) \
            and not _returned(index, site, function):
        return False  # not a checkpoint restore (``bounds = torch.load(p)`` of a numpy table)
    modules = [module for module in project_of(index).outer_caller_modules(index.path, function_key(index, function)) or ()
               if not names.is_test_module(module.path)]  # (a unit test's CPU round trip says nothing of training)
    return bool(modules) and all(module.moves_to_cuda for module in modules)


def _returned(index: SemanticIndex, site: CallSite, function: cst.FunctionDef) -> bool:
    """Does the function hand the loaded object back (``return torch.load(p)``,
    ``blob = torch.load(p)`` ... ``return blob``) for its caller to restore?"""
    parent = index.parent(site.node)
    if isinstance(parent, cst.Return):
        return True
    if not (isinstance(parent, cst.Assign) and len(parent.targets) == 1
            and isinstance(parent.targets[0].target, cst.Name)):
        return False
    name = parent.targets[0].target.value
    return any(isinstance(exit_, cst.Return) and isinstance(exit_.value, cst.Name) and exit_.value.value == name
               and index.enclosing_scope(exit_) is function for exit_ in index.exits)


def _given_a_device_by_cuda_code(index: SemanticIndex) -> bool:
    """A function of the module takes a ``device`` parameter that some module of
    the project calls it from while putting data on a GPU (``Trainer(args, cfg,
    device)`` from a script that builds ``torch.device("cuda", local_rank)``):
    the module works on the GPU its callers chose."""
    project = project_of(index)
    from ddplint.analysis.models import function_key

    for functions in index.functions.values():
        for function in functions:
            params = [p.name.value for p in function.params.params]
            device = next((p for p in params if p in _DEVICE_PARAMETERS), None)
            if device is None:
                continue
            position = params.index(device) - (1 if params and params[0] in ("self", "cls") else 0)
            if _device_from_cuda_callers(project, index.path, function_key(index, function), device, position, 0):
                return True
    return False


_DEVICE_PARAMETERS = ("device", "dev", "gpu_device")


def _device_from_cuda_callers(project, path: str, function: str, device: str, position: int, depth: int) -> bool:
    """Some call of the function comes from a module that puts data on a GPU, or hands on
    its own device parameter from a function that is so called (``get_algorithm(config,
    device)`` -> ``DDP(config, device)`` -> ``super().__init__(config, device)``; a95
    Pseudo-Asynchronous-LocalSGD)."""
    calls = project.callers.get(project.function_key(path, function)) or []
    for caller_path, fact in calls:
        if project.modules[caller_path].moves_to_cuda:
            return True
    if depth >= 3:
        return False
    for caller_path, fact in calls:
        handed = fact.args.get(device) or fact.args.get(str(position)) or ""
        if handed.startswith("param:") and handed[6:] in _DEVICE_PARAMETERS and fact.caller:
            caller_function = project.modules[caller_path].functions.get(fact.caller)
            params = [name for name in (caller_function.params if caller_function is not None else ())]
            where = params.index(handed[6:]) if handed[6:] in params else -1
            if where >= 0 and _device_from_cuda_callers(project, caller_path, fact.caller, handed[6:],
                                                        where - (1 if params[0] in ("self", "cls") else 0),
                                                        depth + 1):
                return True
    return False


# ---------------------------------------------------------------------- alternatives
def _other_arm_maps_to_gpu(index: SemanticIndex, site: CallSite, loads: list[CallSite]) -> bool:
    """``if args.gpu is None: torch.load(p) else: torch.load(p, map_location=f"cuda:{gpu}")``:
    the two loads are the arms of one conditional and the mapped arm is the
    per-rank GPU configuration, so the unmapped one runs without a per-rank GPU.
    (When the mapped arm maps to the CPU, the unmapped arm is the GPU one: flagged.)"""
    for other in loads:
        if other is site or not _maps(other) or _maps_to_cpu(other):
            continue
        if _arms_of_one_conditional(index, site.node, other.node) \
                and not _sets_device_from_another_value(index, site, other):
            return True
    return False


def _sets_device_from_another_value(index: SemanticIndex, site: CallSite, mapped: CallSite) -> bool:
    """Does the function of the two loads also pick this process's GPU from a
    value the mapped arm does not use (``torch.cuda.set_device(args.gpu_to_work_on)``
    on a SLURM path that leaves ``args.gpu`` None)? Then the unmapped arm runs on
    a per-rank GPU too, and restores the tensors onto the saving rank's GPU."""
    function = index.enclosing_scope(site.node)
    mapping = mapped.argument("map_location")
    used = set(names_in(mapping.value)) if mapping is not None else set()
    if mapping is not None and isinstance(mapping.value, cst.Name):  # ``loc = f"cuda:{args.gpu}"``
        for value in index.reaching_values(mapping.value) or []:
            used |= names_in(value)
    if not used:
        return False
    for setter in index.calls_to(names.SET_DEVICE):
        device = setter.argument("device", 0)
        if device is None or index.enclosing_scope(setter.node) is not function:
            continue
        name = dotted_name(device.value)
        if name is not None and name not in used:
            return True
    return False


def _maps_to_cpu(site: CallSite) -> bool:
    arg = site.argument("map_location")
    value = arg.value if arg is not None else None
    if isinstance(value, cst.Call) and dotted_name(value.func) in ("torch.device",) and value.args:
        value = value.args[0].value
    return literal_str(value) == "cpu"


def _arms_of_one_conditional(index: SemanticIndex, a: cst.CSTNode, b: cst.CSTNode) -> bool:
    """Are ``a`` and ``b`` in different arms of the innermost ``if`` (or
    conditional expression, ``elif`` chains included) that holds both?"""
    arms_of_a: dict[int, cst.CSTNode] = {}
    child = a
    for ancestor in index.ancestors(a):
        if isinstance(ancestor, (cst.If, cst.IfExp)):
            arms_of_a[id(ancestor)] = child
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
            break
        child = ancestor
    child = b
    for ancestor in index.ancestors(b):
        if id(ancestor) in arms_of_a:
            arm_a = arms_of_a[id(ancestor)]
            return arm_a is not child and child is not ancestor.test and arm_a is not ancestor.test
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
            break
        child = ancestor
    return False


# ---------------------------------------------------------------------- payloads known to be on the CPU
def _cpu_payload(index: SemanticIndex, site: CallSite) -> bool:
    """Is the loaded file known to hold CPU tensors only (or no tensors)?"""
    path = site.argument("f", 0)
    if path is None:
        return False
    if _per_rank_file(index, path.value):
        return True
    if _in_memory(index, path.value) or _read_back_by_its_writer(index, site, path.value) \
            or _written_by_cpu_only_module(index, path.value) or _written_on_cpu_elsewhere(index, path.value):
        return True
    if any(_METADATA_FILE.search(text) for text in _strings_in(path.value)):
        return True
    if _dataset_file(path.value) or _loaded_as_dataset(index, site):
        return True
    if _names_sampler_state(index, site, path.value):
        return True
    if _feeds_a_scaler(index, site):
        return True
    function = index.enclosing_scope(site.node)
    if _cpu_only_runner_before(index, function, site.order):
        return True
    for save in _saves_of(index, path.value, site):
        if save.qualified_name == names.TORCH_SAVE:
            obj = save.argument("obj", 0)
            if obj is not None and _is_cpu_value(index, obj.value, index.enclosing_scope(save.node)):
                return True
        elif _framework_save_offloads(index, save):
            return True
    if _saved_with_offload_elsewhere(index, path.value):
        return True
    return _class_checkpoints_on_cpu(index, site, path.value)


def _loaded_as_dataset(index: SemanticIndex, site: CallSite) -> bool:
    """``dataset = torch.load(f)`` then ``DistributedSampler(dataset)`` / ``DataLoader(dataset)``:
    a pickled dataset, whose samples the loader's workers read on the CPU (a95 Biofilm); or
    preprocessed data bound to a name that says so (``train_features = torch.load(...)``, the
    cached features of a tokenised corpus: a102 Amdg)."""
    statement = index.parent(site.node)
    if not isinstance(statement, cst.Assign) or statement.value is not site.node:
        return False
    if len(statement.targets) == 1 and isinstance(statement.targets[0].target, cst.Name) \
            and _PREPARED_DATA.search(statement.targets[0].target.value):
        return True
    for loader in index.calls_to(names.DATALOADER, names.DISTRIBUTED_SAMPLER):
        dataset = loader.argument("dataset")
        if dataset is not None and isinstance(dataset.value, cst.Name) \
                and any(b.node is statement for b in index.reaching(dataset.value.value, dataset.value)):
            return True
    return False


# Names of prepared data (not of a checkpoint): ``train_features``, ``dev_examples``, ``dataset``.
_PREPARED_DATA = re.compile(r"(^|_)(features|examples|dataset|samples)$", re.IGNORECASE)


def _dataset_file(path: cst.BaseExpression) -> bool:
    """A file of the dataset folder (``'DATA/{}/node_features.pt'``, ``"data/vocab.pt"``):
    features prepared ahead, on the CPU, not a checkpoint a rank wrote from its GPU."""
    texts = _strings_in(path)
    first = texts[0].lstrip("./").lower() if texts else ""
    return first.split("/")[0] in ("data", "dataset", "datasets") and "/" in first \
        and not any(_CHECKPOINT_WORD.search(text) for text in texts)


_CHECKPOINT_WORD = re.compile(r"ckpt|checkpoint|model|weight|state|snapshot|best|last|epoch", re.IGNORECASE)


def _saved_with_offload_elsewhere(index: SemanticIndex, path: cst.BaseExpression) -> bool:
    """A ``torch.save`` of this module writes a file of the same name template
    (``weights_name = f"{MODEL_NAME}.bin"`` in both functions) in a function that
    gathers the state with CPU offload (``cfg.offload_to_cpu = ...``,
    ``offload_to_cpu=True``): the file holds CPU tensors."""
    wanted = {text for text in _name_templates(index, path) if "{" in text or len(text) > 8}
    if not wanted:
        return False
    for save in index.calls_to(names.TORCH_SAVE):
        target = save.argument("f", 1)
        if target is not None and _offloads_to_cpu(index, save.scope) \
                and wanted & _name_templates(index, target.value):
            return True
    return False


def _name_templates(index: SemanticIndex, expr: cst.BaseExpression, depth: int = 0) -> set[str]:
    """The source text of the string literals / f-strings a path is built from,
    through the names it reads (two bindings deep)."""
    found: set[str] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.FormattedString, cst.SimpleString)):
            found.add(index.module.code_for_node(node))
            continue
        if isinstance(node, cst.Name) and depth < 2:
            for value in index.reaching_values(node) or ():
                found |= _name_templates(index, value, depth + 1)
            continue
        stack.extend(node.children)
    return found


def _per_rank_file(index: SemanticIndex, path: cst.BaseExpression, depth: int = 0) -> bool:
    """A file name built from this process's rank (``f"model_rank{acc.process_index}.bin"``,
    ``ckpt_dir / f"worker_{rank}.pt"``, also through names bound to such parts):
    each rank reads the shard it wrote itself, onto the device it wrote it from."""
    if depth > 2:
        return False
    stack = [path]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.FormattedStringExpression) and is_rank_value(index, node.expression, lenient=True):
            return True
        if isinstance(node, cst.Call) and (dotted_name(node.func) or "") == "str" and node.args \
                and is_rank_value(index, node.args[0].value, lenient=True):
            return True
        if isinstance(node, cst.Name) and depth < 2:
            if any(_per_rank_file(index, value, depth + 1) for value in index.reaching_values(node) or ()):
                return True
            continue
        if isinstance(node, cst.Attribute) and depth < 2 and _self_attribute(node):
            # ``self._ckpt_path`` that every assignment in the module builds from the rank
            values = index.reaching_values(node) or ()
            if values and all(_per_rank_file(index, value, depth + 1) for value in values):
                return True
            continue
        stack.extend(node.children)
    return False


def _self_attribute(node: cst.Attribute) -> bool:
    """``self.path`` (one attribute of the instance, not ``self.cfg.path``)."""
    return isinstance(node.value, cst.Name) and node.value.value == "self"


def _class_checkpoints_on_cpu(index: SemanticIndex, site: CallSite, path: cst.BaseExpression) -> bool:
    """A method's load of a path it is given (``load_network(self, load_path,
    net)``) in a class whose mirror method (``save_network``) writes those
    checkpoints with ``torch.save`` from CPU values only (``sd[k] = p.cpu()`` for
    each entry first): the class reads back the files it writes, which hold no
    CUDA tensors."""
    if not isinstance(path, cst.Name):
        return False
    function = index.enclosing_scope(site.node)
    if not isinstance(function, cst.FunctionDef) or not _given_path(index, path):
        return False
    owner = index.parent(function)
    owner = index.parent(owner) if isinstance(owner, cst.IndentedBlock) else owner
    if not isinstance(owner, (cst.ClassDef, cst.Module)):
        return False  # a method, or a module-level function with its mirror beside it
    mirror = re.sub(r"(^|_)load(_|$)", r"\1save\2", function.name.value, count=1)
    if mirror == function.name.value:
        return False
    saves = [s for s in index.calls_to(names.TORCH_SAVE)
             if isinstance(s.scope, cst.FunctionDef) and s.scope.name.value == mirror
             and _owner_of(index, s.scope) is owner]
    return bool(saves) and all(
        (obj := s.argument("obj", 0)) is not None and _is_cpu_value(index, obj.value, s.scope) for s in saves)


def _given_path(index: SemanticIndex, path: cst.Name) -> bool:
    """A parameter, or a local made from one (``p = Path(checkpoint_filepath)``)."""
    bindings = index.reaching(path.value, path)
    return bool(bindings) and all(
        b.kind == "param" or (b.kind == "assign" and isinstance(b.value, cst.Call) and any(
            isinstance(arg.value, cst.Name)
            and any(o.kind == "param" for o in index.reaching(arg.value.value, arg.value))
            for arg in b.value.args)) for b in bindings)


def _owner_of(index: SemanticIndex, function: cst.FunctionDef) -> Optional[cst.CSTNode]:
    owner = index.parent(function)
    return index.parent(owner) if isinstance(owner, cst.IndentedBlock) else owner


def _entries_moved_to_cpu(index: SemanticIndex, name: cst.Name) -> bool:
    """``for k, p in sd.items(): sd[k] = p.cpu()`` before ``name`` is read: every
    entry of the dict is replaced by a CPU copy."""
    scope = index.enclosing_scope(name)
    for site in index.method_calls("items"):
        if site.scope is not scope or not isinstance(site.receiver, cst.Name) \
                or site.receiver.value != name.value or not precedes(index, site.node, name):
            continue
        loop = index.parent(site.node)
        if not isinstance(loop, cst.For) or not isinstance(loop.target, cst.Tuple) \
                or len(loop.target.elements) != 2:
            continue
        key = loop.target.elements[0].value
        body = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else []
        for statement in body:
            for small in getattr(statement, "body", ()):
                if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                        and isinstance(small.targets[0].target, cst.Subscript) \
                        and dotted_name(small.targets[0].target.value) == name.value \
                        and len(small.targets[0].target.slice) == 1 \
                        and isinstance(key, cst.Name) \
                        and dotted_name(small.targets[0].target.slice[0].slice.value) == key.value \
                        and _is_cpu_value(index, small.value, scope, 3):
                    return True
    return False


_PATH_NOISE = re.compile(r"\.(pt|pth|bin|ckpt|tar|pkl)$|[/.{}_-]")


def _written_by_cpu_only_module(index: SemanticIndex, path: cst.BaseExpression) -> bool:
    """The file is written by another module in reach (RULES.md, project scope),
    or by a script of the project without DDP linked to it through a shared
    module (a preprocessing step run before training; the path part must be
    distinctive, not "model" or "checkpoint"), that never uses CUDA (a preprocessing module: ``torch.save(counts,
    "./word_freq/lm1b.pt")`` for ``torch.load(f"./word_freq/{name}.pt")``): a
    distinctive literal part of the load's path appears in its save path."""
    parts = [t for t in _strings_in(path) if len(_PATH_NOISE.sub("", t)) >= 4]
    if not parts:
        return False
    project = project_of(index)
    scope = project.scope(index.path)  # what the entry scripts reach (one component of the project)
    for other in linked_modules(index):  # the same in a parallel run (one component per process)
        module = project.modules.get(other)
        if other == index.path or module is None or module.moves_to_cuda or not module.saved_paths:
            continue
        if other in scope:
            if any(part in saved for part in parts for saved in module.saved_paths):
                return True
        elif not module.own_ddp_context and any(
                part in saved for part in parts if not _GENERIC_PATH.search(part) for saved in module.saved_paths):
            return True  # a standalone preprocessing script writes it (``python word_freq.py`` first)
    return False


def _written_on_cpu_elsewhere(index: SemanticIndex, path: cst.BaseExpression) -> bool:
    """Another module in reach writes the file, and every save there of a path that
    shares the load's file name saves CPU tensors (``net.cpu()`` then ``torch.save(state,
    osp.join(d, "model_final.pth"))`` in train.py; evaluate.py loads it: a115 DeepLab-v3-plus)."""
    names_in_path = [t for t in _strings_in(path) if len(_PATH_NOISE.sub("", t)) >= 4]
    if isinstance(path, cst.Name):
        names_in_path += [t for value in index.reaching_values(path) or () for t in _strings_in(value)
                          if len(_PATH_NOISE.sub("", t)) >= 4]
    files = [t.rsplit("/", 1)[-1] for t in names_in_path if "." in t.rsplit("/", 1)[-1]]
    if not files:
        return False
    project = project_of(index)
    scope = project.scope(index.path)
    found = False
    for other in linked_modules(index):
        module = project.modules.get(other)
        if other == index.path or module is None or other not in scope:
            continue
        for saved in module.saved_paths:
            if any(saved.endswith(name) for name in files):
                if saved not in module.cpu_saved_paths:
                    return False
                found = True
    return found


# Path parts that many unrelated files share: no tie between a writer out of reach and the load.
_GENERIC_PATH = re.compile(r"model|checkpoint|ckpt|weight|best|last|latest|state|epoch|output|result|save",
                           re.IGNORECASE)


def _guard_test(index: SemanticIndex, node: cst.CSTNode) -> Optional[str]:
    """The source of the innermost ``if`` test whose body holds ``node``, when it is a rank test."""
    child = node
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
            return None
        if isinstance(ancestor, cst.If) and child is ancestor.body:
            text = index.module.code_for_node(ancestor.test)
            return text if "rank" in text.lower() else None
        child = ancestor
    return None


def _read_back_by_its_writer(index: SemanticIndex, site: CallSite, path: cst.BaseExpression) -> bool:
    """``if grp.rank() == 0: torch.save(state, filename)`` in one method and
    ``if grp.rank() == 0: torch.load(filename)`` in its sibling: the same rank
    test guards the save and the load of the same path, so the process that
    wrote the file reads it back onto its own device."""
    test = _guard_test(index, site.node)
    if test is None:
        return False
    text = index.module.code_for_node(path)
    for save in index.calls_to(names.TORCH_SAVE):
        target = save.argument("f", 1)
        if target is not None and index.module.code_for_node(target.value) == text \
                and _guard_test(index, save.node) == test:
            return True
    return False


def _in_memory(index: SemanticIndex, expr: cst.BaseExpression, depth: int = 0) -> bool:
    """``torch.load(io.BytesIO(payload))`` (also through a name): an in-memory
    buffer is either this process's own round trip (its tensors come back to
    the device this rank saved them from) or bytes from another machine, which
    must hold portable CPU tensors; no file that rank 0's GPU wrote."""
    if isinstance(expr, cst.Call):
        return index.qualified_name(expr.func) in ("io.BytesIO", "io.BufferedReader") or (
            isinstance(expr.func, cst.Name) and expr.func.value == "BytesIO")
    if isinstance(expr, cst.Name) and depth < 3:
        values = index.reaching_values(expr)
        return bool(values) and all(_in_memory(index, value, depth + 1) for value in values)
    return False


def _names_sampler_state(index: SemanticIndex, site: CallSite, path: cst.BaseExpression) -> bool:
    """``torch.load(params.sampler_state_dict_path)``, ``sampler_state = torch.load(p)``:
    a sampler's state is indices and counters (a CPU generator state at most)."""
    named = [dotted_name(path) or ""]
    parent = index.parent(site.node)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
        named.append(dotted_name(parent.targets[0].target) or "")
    return any("sampler" in name.split(".")[-1].lower() for name in named)


def _strings_in(expr: cst.CSTNode) -> list[str]:
    found, stack = [], [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.SimpleString):
            text = literal_str(node)
            if text is not None:
                found.append(text)
        elif isinstance(node, cst.FormattedStringText):
            found.append(node.value)
        stack.extend(node.children)
    return found


def _feeds_a_scaler(index: SemanticIndex, site: CallSite) -> bool:
    """``scaler.load_state_dict(torch.load(p))`` (also through a name; an LR
    scheduler too): a GradScaler's or a scheduler's state is a few Python
    numbers, not CUDA tensors."""
    parent = index.parent(site.node)
    target: Optional[str] = None
    if isinstance(parent, cst.Arg):
        call = index.parent(parent)
        return isinstance(call, cst.Call) and _is_scaler_load(call)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
        target = dotted_name(parent.targets[0].target)
    if target is None:
        return False
    scope = index.enclosing_scope(site.node)
    uses = [s for s in index.method_calls("load_state_dict") if s.scope is scope and s.order > site.order
            and s.node.args and _reads_this_load(index, s.node.args[0].value, target, site)]
    return bool(uses) and all(_is_scaler_load(s.node) for s in uses) \
        and not _reads_model_state(index, scope, target, uses)


_MODEL_STATE_WORDS = ("optim", "model", "state_dict", "net", "weight", "param")


def _reads_model_state(index: SemanticIndex, scope: cst.CSTNode, target: str, loads: list[CallSite]) -> bool:
    """Does the function read an entry of the loaded dict that holds tensors, other
    than in the scaler loads (``checkpoint["optimizer_state_dict"]`` copied key by key
    into the optimizer's state, a96 Pseudo-Asynchronous-LocalSGD)?"""
    in_loads = {id(node) for load in loads for node in _subscripts_in(load.node)}
    for node in _subscripts_in(scope):
        if id(node) in in_loads or dotted_name(node.value) != target or len(node.slice) != 1 \
                or not isinstance(node.slice[0].slice, cst.Index):
            continue
        key = (literal_str(node.slice[0].slice.value) or "").lower()
        if any(word in key for word in _MODEL_STATE_WORDS) and "scaler" not in key and "sched" not in key:
            return True
    return False


def _subscripts_in(node: cst.CSTNode) -> list[cst.Subscript]:
    found, stack = [], [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Subscript):
            found.append(current)
        stack.extend(current.children)
    return found


def _reads_this_load(index: SemanticIndex, expr: cst.BaseExpression, target: str, site: CallSite) -> bool:
    """Is ``expr`` the name the load was stored in (``data``), or an entry of it
    (``data["scheduler_state_dict"]``), where that store reaches it (not a
    later ``data = torch.load(other)``)?"""
    if isinstance(expr, cst.Subscript):
        expr = expr.value
    if dotted_name(expr) != target:
        return False
    if not isinstance(expr, cst.Name):
        return True
    return any(binding.value is site.node for binding in index.reaching(target, expr))


def _is_scaler_load(call: cst.Call) -> bool:
    """``scaler.load_state_dict(...)``, ``scheduler.load_state_dict(...)``: a
    GradScaler's or an LR scheduler's state is Python numbers, no CUDA tensors."""
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value == "load_state_dict"):
        return False
    receiver = (dotted_name(func.value) or "").split(".")[-1].lower()
    return "scaler" in receiver or "scheduler" in receiver or receiver in ("sched", "lr_sched")


def _runner_calls(index: SemanticIndex, function: cst.CSTNode) -> list[CallSite]:
    return [s for s in index.calls if s.scope is function
            and (dotted_name(s.node.func) or "").split(".")[-1] in _FRAMEWORK_RUNNERS]


def _cpu_only_runner_before(index: SemanticIndex, function: cst.CSTNode, order: int) -> bool:
    """The Fabric / Trainer / Accelerator in charge at ``order`` (the last one
    built before it in the function) runs on the CPU: ``accelerator="cpu"``
    (``Accelerator(cpu=True)``)."""
    runners = [s for s in _runner_calls(index, function) if s.order < order]
    if not runners:
        return False
    last = max(runners, key=lambda s: s.order)
    accelerator = last.keyword("accelerator")
    cpu = last.keyword("cpu")
    return (accelerator is not None and literal_str(accelerator.value) == "cpu") or (
        cpu is not None and isinstance(cpu.value, cst.Name) and cpu.value.value == "True")


def _saves_of(index: SemanticIndex, path: cst.BaseExpression, load: CallSite) -> list[CallSite]:
    """Saves in this module that write the file ``path`` names: the same path
    expression (in the same function), or a path sharing a file-name literal."""
    text = index.module.code_for_node(path)
    names_in_path = [t for t in _strings_in(path) if len(t) > 3]
    if isinstance(path, cst.Name):  # ``lastpath = os.path.join(d, 'last_epoch.pt')`` then ``torch.load(lastpath)``
        names_in_path += [t for value in index.reaching_values(path) or () for t in _strings_in(value) if len(t) > 3]
    scope = index.enclosing_scope(load.node)
    found = []
    for save in index.calls:
        if save.qualified_name == names.TORCH_SAVE:
            target = save.argument("f", 1)
        elif save.method in _FRAMEWORK_SAVES and save.qualified_name is None and save.node.args:
            target = save.argument("path", 0)
        else:
            continue
        if target is None:
            continue
        target_text = index.module.code_for_node(target.value)
        if (target_text == text and save.scope is scope) or any(n in target_text for n in names_in_path):
            found.append(save)
    return found


def _is_cpu_value(index: SemanticIndex, expr: cst.BaseExpression, scope: cst.CSTNode, depth: int = 0) -> bool:
    """A value known to live on the CPU: ``x.cpu()``, ``x.to("cpu")``, a tensor
    allocated with ``device="cpu"``, ``{k: v.cpu() ...}``, a dict or list of such
    values, a GradScaler's ``state_dict()``, random generator states
    (``torch.cuda.get_rng_state()`` is a CPU ByteTensor; numpy's and Python's
    hold no tensors), a full state dict gathered with CPU offload (``offload_to_cpu=True`` / ``cpu_offload=True`` in the same function)."""
    if depth > 4:
        return False
    if _plain_number(index, expr, depth):
        return True  # ``{'last_epoch': epc + 1}``: no tensor at all (a102 IDGEN)
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            if method == "cpu" or (method == "to" and expr.args and literal_str(expr.args[0].value) == "cpu"):
                return True
            if method == "state_dict" and "scaler" in (dotted_name(func.value) or "").split(".")[-1].lower():
                return True
            if method in ("get_rng_state", "get_rng_state_all"):
                return True  # ``torch.cuda.get_rng_state()`` too: a CPU ByteTensor
        if index.qualified_name(func) in ("random.getstate", "numpy.random.get_state"):
            return True  # Python and numpy generator states: no tensors
        device = next((a for a in expr.args if a.keyword is not None and a.keyword.value == "device"), None)
        if device is not None and literal_str(device.value) == "cpu":
            return True
        if _made_by_cpu_only_module(index, expr):
            return True
        return _offloads_to_cpu(index, scope) and _gathers_state(expr)
    if isinstance(expr, cst.Dict):
        values = [e.value for e in expr.elements if isinstance(e, cst.DictElement)]
        return bool(values) and len(values) == len(expr.elements) and all(
            _is_cpu_value(index, v, scope, depth + 1) for v in values)
    if isinstance(expr, (cst.List, cst.Tuple)):
        return bool(expr.elements) and all(_is_cpu_value(index, e.value, scope, depth + 1) for e in expr.elements)
    if isinstance(expr, (cst.DictComp,)):
        return _is_cpu_value(index, expr.value, scope, depth + 1)
    if isinstance(expr, cst.Name):
        values = index.reaching_values(expr)
        return bool(values) and all(_is_cpu_value(index, v, scope, depth + 1) for v in values) \
            or _entries_moved_to_cpu(index, expr)
    return False


def _plain_number(index: SemanticIndex, expr: cst.BaseExpression, depth: int) -> bool:
    """A Python number or string: a literal, ``int(...)``/``len(...)``/``x.item()``, a loop
    index over ``range(...)``, or arithmetic on such values."""
    if depth > 4:
        return False
    if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString, cst.FormattedString)):
        return True
    if isinstance(expr, cst.UnaryOperation):
        return _plain_number(index, expr.expression, depth + 1)
    if isinstance(expr, cst.BinaryOperation):
        return _plain_number(index, expr.left, depth + 1) and _plain_number(index, expr.right, depth + 1)
    if isinstance(expr, cst.Call):
        if isinstance(expr.func, cst.Name) and expr.func.value in ("int", "float", "len", "str", "round", "bool"):
            return True
        return isinstance(expr.func, cst.Attribute) and expr.func.attr.value in ("item", "tolist")
    if isinstance(expr, cst.Name):
        bindings = index.reaching(expr.value, expr)
        return bool(bindings) and all(_binds_plain_number(index, b, depth) for b in bindings)
    return False


def _binds_plain_number(index: SemanticIndex, binding, depth: int) -> bool:
    if binding.kind == "loop" and isinstance(binding.node, cst.For):
        loop_iter = binding.node.iter
        return isinstance(loop_iter, cst.Call) and dotted_name(loop_iter.func) == "range" \
            and isinstance(binding.node.target, cst.Name)
    if binding.kind in ("assign", "annassign", "augassign") and binding.value is not None:
        return _plain_number(index, binding.value, depth + 1)
    return False


def _made_by_cpu_only_module(index: SemanticIndex, call: cst.Call) -> bool:
    """``data = generate_samples(n)`` where the project function lives in a
    module that never puts anything on a GPU (project facts): CPU tensors."""
    callee = dotted_name(call.func)
    if callee is None:
        return False
    project = project_of(index)
    key = project.resolve_function(index.path, callee, index.imports)
    if key is None or key[0] == index.path:
        return False
    module = project.modules.get(key[0])
    return module is not None and not module.moves_to_cuda


def _gathers_state(call: cst.Call) -> bool:
    name = (dotted_name(call.func) or "").split(".")[-1]
    return name in ("state_dict", "get_model_state_dict", "get_state_dict", "full_optim_state_dict",
                    "optim_state_dict", "get_optimizer_state_dict")


def _offloads_to_cpu(index: SemanticIndex, scope: cst.CSTNode) -> bool:
    """``FullStateDictConfig(offload_to_cpu=True)`` / ``StateDictOptions(full_state_dict=True,
    cpu_offload=True)`` in the function."""
    for site in index.calls:
        if site.scope is not scope and not _policy_read_in(index, site, scope):
            continue
        for keyword in ("offload_to_cpu", "cpu_offload"):
            arg = site.keyword(keyword)
            if arg is not None and isinstance(arg.value, cst.Name) and arg.value.value == "True":
                return True
    # ``plugin.state_dict_config.offload_to_cpu = is_multi_process`` (on whenever several processes run)
    for (_, name), bindings in index.bindings.items():
        if name.split(".")[-1] in ("offload_to_cpu", "cpu_offload") and "." in name \
                and any(b.kind == "assign" and not (isinstance(b.value, cst.Name) and b.value.value == "False")
                        and any(a is scope for a in index.ancestors(b.node)) for b in bindings):
            return True
    return False


def _policy_read_in(index: SemanticIndex, site: CallSite, scope: cst.CSTNode) -> bool:
    """A module-level ``policy = FullStateDictConfig(offload_to_cpu=True, ...)`` whose
    name the function reads (``with FSDP.state_dict_type(model, FULL_STATE_DICT, policy):``)."""
    if site.scope is not index.module:
        return False
    statement = index.parent(site.node)
    if not isinstance(statement, cst.Assign) or len(statement.targets) != 1 \
            or not isinstance(statement.targets[0].target, cst.Name):
        return False
    name = statement.targets[0].target.value
    return any(index.enclosing_scope(read) is scope for read in name_reads(index, name))


def _framework_save_offloads(index: SemanticIndex, save: CallSite) -> bool:
    """``fabric.save(path, state)`` / ``trainer.save_checkpoint(path)`` where the
    function's strategy saves a full state dict (``state_dict_type="full"``,
    ``save_distributed_checkpoint=False``): such saves gather the state on the
    CPU. Also any framework save by a CPU-only Fabric/Trainer."""
    scope = save.scope
    if _cpu_only_runner_before(index, scope, save.order):
        return True
    for site in index.calls:
        if site.scope is not scope or site.order > save.order:
            continue
        kind = site.keyword("state_dict_type")
        if kind is not None and literal_str(kind.value) == "full":
            return True
        distributed = site.keyword("save_distributed_checkpoint")
        if distributed is not None and isinstance(distributed.value, cst.Name) and distributed.value.value == "False":
            return True
    return _offloads_to_cpu(index, scope)
