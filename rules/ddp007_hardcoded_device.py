"""## What it does
Flags a literal device index used as a DDP worker's device: `"cuda:0"`,
`torch.device("cuda", 0)`, `.cuda(0)`, `.to(0)`, `torch.cuda.set_device(0)`,
`device_ids=[0]`, `output_device=0`, `device=0`, `map_location="cuda:0"`, and
`os.environ["CUDA_VISIBLE_DEVICES"] = "0"`. Also the default of a command-line
option that every rank keeps as its device (`parser.add_argument("--device",
default="cuda:0")`, its value read where a device goes, `model.to(args.device)` or
through a name only it binds, and never reassigned: `args.device =
f"cuda:{args.gpu}"` replaces it).

## Why is this bad?
Every rank runs the same script. A hard-coded index puts every rank's model,
batches and optimizer state on the same GPU: the other GPUs idle, GPU 0 runs out
of memory, and NCCL may fail or deadlock because several ranks share one device.

## Example
    model = model.to("cuda:0")
    model = DDP(model, device_ids=[0])

## Use instead
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = model.to(f"cuda:{local_rank}")
    model = DDP(model, device_ids=[local_rank])

Not flagged: `"cuda"` without an index (after `set_device(local_rank)` it means
the rank's own GPU); `f"cuda:{local_rank}"`; `map_location={"cuda:0": ...}`
remaps; a literal device that a device is only compared with
(`torch.device(self.device) == torch.device("cuda:0")`: which process sits on GPU 0);
scripts that give each process one visible GPU (also through a shell launcher of the
project: `export CUDA_VISIBLE_DEVICES=$1` before `python .../train.py`; `CUDA_VISIBLE_DEVICES`
set from the rank, not a list of several GPUs joined for the whole run:
`",".join(str(g) for g in gpu_ids)`, or submitit's
`TorchDistributedEnvironment().export()`, which masks to the local rank unless
`set_cuda_visible_devices=False`; a setting named for several GPUs,
`cfg.cuda_visible_devices`, is such a list) so that `cuda:0` is the right device; multi-GPU lists such as
`"0,1,2,3"` and lists of several devices (`[torch.device("cuda", 0),
torch.device("cuda", 1)]` enumerates GPUs); a `"cuda:N"` constant that nothing
reads (or that a per-rank device replaces before any read); a single-process
default that the distributed path replaces later on a branch with a rank-built
device (`args.device = "cuda:0"`, then `if args.distributed: args.device =
"cuda:%d" % args.local_rank`); code that runs on
rank 0 only (`if rank == 0:`, or a function every caller runs under a rank
guard: rank 0 owns GPU 0); the self-test block (`if __name__ == "__main__":`)
of a module that is in DDP context only because a DDP script imports it, or that
starts no process group nor workers (itself, or through the functions it calls:
a data module's check of its loader); a round trip
through the GPU whose result stays on the CPU (`.to(0).to("cpu")`); a device a helper
returns (`return device, ids`) that its callers bind only for single-process arms (`if not
ddp: model.to(self.device)`, pytorch-template's `_prepare_device`); code that is
not a DDP worker: launcher-parent code before or after `mp.spawn` (also in
functions only the launcher calls, such as a test pass after the join), the single-process
branch of a script (`if args.local_rank == -1:`, the `else` of `if local_rank >= 0:`, the `else` of
`if args.distributed:` or of `if world_size > 1:`, whatever the world-size
spelling: `worldsize`, `nprocs`, `num_processes`, ...), and the methods of a
class whose `__init__` builds a trainer of the module with its single-process
defaults (`Trainer(name=name)` where `Trainer.__init__` takes `rank=0,
world_size=1`: an inference helper such as a `ModelLoader`); the arm of
`if torch.cuda.device_count() == 1:` (one visible GPU per process; also
through `n_gpu = torch.cuda.device_count()`, and the `else` of `if n_gpu > 1:`); unit tests (`test_*.py`,
`tests/`), which pin devices on purpose; modules outside DDP context.

## References
- https://pytorch.org/tutorials/intermediate/ddp_tutorial.html
- https://pytorch.org/docs/stable/elastic/run.html#launcher-api
"""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from ddplint import names
from ddplint.analysis import flow
from ddplint.analysis.values import (CUDA_INDEX, attribute_names, binding_is_read, device_arguments,
                                     in_device_list, is_test_module, literal_int, literal_str,
                                     module_masks_visible_devices, name_reads)
from ddplint.analysis.models import project_of
from ddplint.analysis.roles import in_single_process_branch, is_worker_code, runs_on_rank_zero_only
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import CallSite, SemanticIndex, dotted_name

DIST = "import torch\nimport torch.distributed as dist\n"
SINGLE_GPU_VISIBLE = re.compile(r"^\s*\d+\s*$")
DEVICE_KEYWORDS = ("device", "map_location", "output_device")

# pytorch-template's ``_prepare_device``: the device it returns goes where the callers put it.
PREPARED_DEVICE = """\
import torch
import torch.distributed as dist


class BaseTrainer:
    def __init__(self, model, config, rank=0, ddp=False):
        self.device, device_ids = self._prepare_device(config["n_gpu"])
        if not ddp:
            self.model = model.to(self.device)
        else:
            self.model = model

    def _prepare_device(self, n_gpu_use):
        n_gpu = torch.cuda.device_count()
        n_gpu_use = min(n_gpu_use, n_gpu)
        device = torch.device("cuda:0" if n_gpu_use > 0 else "cpu")
        list_ids = list(range(n_gpu_use))
        return device, list_ids
"""
PREPARED_DEVICE_TAKEN = PREPARED_DEVICE.replace("""        if not ddp:
            self.model = model.to(self.device)
        else:
            self.model = model
""", "        self.model = model.to(self.device)\n")


class HardcodedDevice(Rule):
    code, name, severity = "DDP007", "hardcoded-device", "warning"
    message = "hard-coded device index: every rank lands on the same GPU; derive it from LOCAL_RANK"
    # (the reports name the device: "every rank puts its tensors on cuda:0")
    triggers = ("cuda", "CUDA_VISIBLE_DEVICES", "device", ".to(")
    needs_ddp_context = True

    valid = [
        # A helper's device that only the single-process arm takes (pytorch-template's
        # _prepare_device; a109 MVSFormer).
        Valid(PREPARED_DEVICE),
        # ``local_rank >= 0`` against the -1 of a run no launcher started: its else is the
        # single-process run, where cuda:0 is the only GPU in use (a111 compositional_SLMs).
        Valid(DIST + "import os\ndef main():\n"
                     "    local_rank = int(os.environ['LOCAL_RANK']) if 'LOCAL_RANK' in os.environ else -1\n"
                     "    if local_rank >= 0:\n        torch.cuda.set_device(local_rank)\n"
                     "        dist.init_process_group('nccl')\n        device = torch.device('cuda')\n"
                     "    else:\n        device = torch.device('cuda:0')\n    return build().to(device)\n"),
        # compared with, not used: which process sits on GPU 0 (a process-index test)
        Valid(DIST + "dist.init_process_group('nccl')\nclass Trainer:\n    def __init__(self, gpu):\n"
                     "        self.device = gpu\n        torch.cuda.set_device(gpu)\n"
                     "    def on_main(self):\n        return torch.device(self.device) == torch.device('cuda:0')\n"),
        # ... but not when the distributed path replaces it with the rank's device first.
        Valid("import argparse\nimport torch\nimport torch.distributed as dist\n"
              "from torch.nn.parallel import DistributedDataParallel as DDP\n"
              "def main(args):\n    device = args.device\n    if args.distributed:\n"
              "        dist.init_process_group('nccl')\n        device = torch.device('cuda', args.local_rank)\n"
              "    model = build().to(device)\n"
              "if __name__ == '__main__':\n    parser = argparse.ArgumentParser()\n"
              "    parser.add_argument('--device', default='cuda:0')\n    main(parser.parse_args())\n"),
        Valid("import argparse\nimport torch\nimport torch.distributed as dist\n"
              "def main(args):\n    dist.init_process_group('nccl')\n    args.device = f'cuda:{args.local_rank}'\n"
              "    model = build().to(args.device)\n"
              "if __name__ == '__main__':\n    parser = argparse.ArgumentParser()\n"
              "    parser.add_argument('--device', default='cuda:0')\n    main(parser.parse_args())\n"),
        # The single-process default that the distributed path replaces with this rank's device.
        Valid(DIST + "def setup(args):\n    args.device = 'cuda:0'\n    if args.distributed:\n"
                     "        args.device = 'cuda:%d' % args.local_rank\n"
                     "        torch.cuda.set_device(args.local_rank)\n    return model.to(args.device)\n"),
        # ... or hands the holder of the default to a library's device setup (timm.utils.init_distributed_device).
        Valid(DIST + "import timm.utils as utils\ndef main(args):\n    args.device = 'cuda:0'\n"
                     "    device = utils.init_distributed_device(args)\n"
                     "    model = Net().to(args.device)\n"),
        Valid(DIST + "from accel.setup import pick_device\nclass Run:\n    def start(self, cfg):\n"
                     "        cfg.gpu = 'cuda:0'\n        pick_device(cfg)\n        return Net().cuda(cfg.gpu)\n"),
        Valid(DIST + "def place(cfg, model):\n    device = 'cuda:0'\n    if cfg.world_size > 1:\n"
                     "        device = f'cuda:{cfg.gpu_rank}'\n    return model.to(device)\n"),
        Valid(DIST + "torch.cuda.set_device(local_rank)\nmodel = model.to('cuda')\n"),
        Valid(DIST + "device = torch.device(f'cuda:{local_rank}')\nmodel.to(device)\n"),
        Valid(DIST + "state = torch.load(path, map_location={'cuda:0': f'cuda:{local_rank}'})\n"),
        Valid(DIST + "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = str(local_rank)\n"
              "model = model.to('cuda:0')\n"),
        Valid(DIST + "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = '0,1,2,3'\n"),
        # submitit's environment export sets CUDA_VISIBLE_DEVICES to the local rank (its default)
        Valid(DIST + "def setup():\n    import submitit\n    submitit.helpers.TorchDistributedEnvironment().export()\n"
              "    dev = torch.device('cuda', 0)\n    dist.init_process_group('nccl', device_id=dev)\n"),
        Valid(DIST + "from submitit.helpers import TorchDistributedEnvironment as TDE\nclass Job:\n"
              "    def __call__(self):\n        env = TDE()\n        env.export(overwrite=True)\n"
              "        dist.init_process_group('nccl')\n        self.net = Net().to('cuda:0')\n"),
        # A per-process list picked by the rank, joined: still one GPU set per process.
        Valid(DIST + "import os\ndef worker(local_rank, groups):\n"
              "    os.environ['CUDA_VISIBLE_DEVICES'] = ','.join(str(g) for g in groups[local_rank])\n"
              "    net = Net().to('cuda:0')\n"),
        Valid("import torch\nmodel = model.to('cuda:0')\n"),  # not DDP code
        Valid(DIST + "if args.local_rank == -1:\n    device = torch.device('cuda:0')\n"
              "else:\n    device = torch.device('cuda', args.local_rank)\n"),
        Valid(DIST + "if args.distributed:\n    torch.cuda.set_device(args.gpu)\n"
              "else:\n    model = model.cuda(0)\n"),
        Valid(DIST + "print(torch.cuda.get_device_name(0))\nif str(device) == 'cuda:0':\n    pass\n"),
        Valid(DIST + "parser.add_argument('--device', default='cuda:0')\n"
              "def evaluate(model, device='cuda:0'):\n    return model\n"),
        Valid(DIST + "devices = [torch.device('cuda', 0), torch.device('cuda', 1)]\n"),
        Valid(DIST + "model = model.to('cuda:0')\n", filename="tests/test_ddp_wrap.py"),
        # a "cuda:N" constant that nothing reads, or that a per-rank device replaces before any read
        Valid(DIST + "DEFAULT_DEVICE = 'cuda:0'\ndef main(local_rank):\n"
                     "    torch.cuda.set_device(local_rank)\n    model = Net().cuda()\n"),
        Valid(DIST + "device = 'cuda:0'\ndevice = torch.device('cuda', local_rank)\nmodel = Net().to(device)\n"),
        # launcher-parent code: runs once, in the parent, before mp.spawn starts the workers
        Valid(DIST + "import torch.multiprocessing as mp\ndef worker(gpu, args):\n    torch.cuda.set_device(gpu)\n"
                     "def main():\n    probe = torch.zeros(1, device='cuda:0')\n"
                     "    mp.spawn(worker, nprocs=torch.cuda.device_count(), args=(None,))\n"),
        # a test pass that only the launcher runs, after the workers joined
        Valid(DIST + "import torch.multiprocessing as mp\ndef worker(gpu, args):\n    torch.cuda.set_device(gpu)\n"
                     "def test(args):\n    net = Net().to('cuda:0')\n    return net\n"
                     "def main(args):\n    mp.spawn(worker, nprocs=4, args=(args,))\n    test(args)\n"),
        # single-process branches named by other world-size spellings
        Valid(DIST + "if worldsize > 1:\n    model = DDP(model, device_ids=[local_rank])\n"
                     "else:\n    model.to('cuda:0')\n"),
        Valid(DIST + "if args.nprocs > 1:\n    model = DDP(model, device_ids=[local_rank])\n"
                     "else:\n    model = model.cuda(0)\n"),
        Valid(DIST + "if num_processes == 1:\n    device = torch.device('cuda', 0)\n"
                     "else:\n    device = torch.device('cuda', local_rank)\n"),
        # code that runs on rank 0 only (rank 0 owns GPU 0), here or in every caller
        Valid(DIST + "torch.cuda.set_device(rank)\nif rank == 0:\n    probe = torch.zeros(1, device='cuda:0')\n"),
        Valid(DIST + "def evaluate(net, loader):\n    for x in loader:\n        net(x.cuda(0))\n"
                     "def train(rank, net, loader):\n    torch.cuda.set_device(rank)\n    if rank == 0:\n"
                     "        evaluate(net, loader)\n"),
        # the else of ``distributed and not <opt-out option>``: single process, or devices masked by the user
        Valid(DIST + "if args.distributed and not args.no_set_device_rank:\n"
                     "    device = 'cuda:%d' % args.local_rank\nelse:\n    device = 'cuda:0'\n"
                     "torch.cuda.set_device(device)\n"),
        # the self-test block of a layer module that a DDP script imports (runs on its own, single-process)
        Valid("import torch\nclass FrameReducer(torch.nn.Module):\n    pass\n"
              "if __name__ == '__main__':\n    x = torch.randn(8, 4, device='cuda:0')\n    FrameReducer()(x)\n",
              filename="frame_reducer.py"),
        # the data check of a data module that builds DistributedSamplers for the trainer: its
        # main block starts no process group, itself or through what it calls (a68 dtmol)
        Valid("import torch\nfrom torch.utils.data import DataLoader\n"
              "from torch.utils.data.distributed import DistributedSampler\n"
              "def get_dataloader(data, batch_size, device, distributed=False):\n"
              "    sampler = DistributedSampler(data) if distributed else None\n"
              "    return DataLoader(data, batch_size, sampler=sampler, collate_fn=lambda b: collate(b, device))\n"
              "if __name__ == '__main__':\n    loader = get_dataloader(load('test.lmdb'), batch_size=4, device=0)\n"
              "    for batch in loader:\n        check(batch)\n", filename="data_input.py"),
        # the fallback for a model without device ids: a DDP worker's model has them (a56 sewformer)
        Valid(DIST + "def predict_single(model, image):\n"
                     "    device = model.device_ids[0] if hasattr(model, 'device_ids') and len(model.device_ids) > 0 "
                     "else torch.device('cuda:0' if torch.cuda.is_available() else 'cpu')\n"
                     "    return model(image.to(device).unsqueeze(0))\n"),
        # a round trip through the GPU whose result stays on the CPU
        Valid(DIST + "w = Int8Params(value).to(0).to('cpu')\nscales = w.SCB.cuda(0).cpu()\n"),
        # An inference helper whose trainer is built with its single-process defaults (rank=0, world_size=1).
        Valid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP

class Runner:
    def __init__(self, name, rank=0, world_size=1):
        self.rank, self.is_ddp = rank, world_size > 1
        self.net = make_net(name).cuda(rank)
        if self.is_ddp:
            self.net = DDP(self.net, device_ids=[rank])

class Sampler:
    def __init__(self, name):
        self.runner = Runner(name)

    def draw(self, n):
        z = torch.randn(n, 64, device=0)
        return self.runner.net(z)

def worker(rank, world_size):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    Runner("exp", rank=rank, world_size=world_size)
"""),
        # The single-process arm of a flag read from nested option dicts.
        Valid(DIST + """\
class Engine:
    def setup_devices(self):
        if self.cfg["run"]["use_ddp"]:
            self.dev = torch.device(self.cfg["run"]["rank"])
            dist.init_process_group("nccl")
        else:
            self.dev = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
        self.net = self.net.to(self.dev)
"""),
        # One GPU visible to the process (one GPU per task): index 0 is its own.
        Valid(DIST + "import os\ndef pin_gpu():\n    if torch.cuda.device_count() == 1:\n"
                     "        torch.cuda.set_device(0)\n        return\n"
                     "    torch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n"),
        # The same test through a name bound to the count, and the else of "several GPUs".
        Valid(DIST + "def load(path):\n    num_gpu = torch.cuda.device_count()\n    if num_gpu == 1:\n"
                     "        return torch.load(path, map_location='cuda:0')\n"
                     "    return torch.load(path, map_location='cpu')\n"),
        Valid(DIST + "def place(net):\n    gpus = torch.cuda.device_count()\n    if gpus > 1:\n"
                     "        return net.cuda()\n    else:\n        return net.to('cuda:0')\n"),
        # The single-process arm of an FSDP switch in a module without a DDP wrap (llama-recipes'
        # ``enable_fsdp``; a35 MoE-RBench).
        Valid(DIST + "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
                     "def train(model, loader, train_config, local_rank):\n    for batch in loader:\n"
                     "        for key in batch.keys():\n            if train_config.enable_fsdp:\n"
                     "                batch[key] = batch[key].to(local_rank)\n            else:\n"
                     "                batch[key] = batch[key].to('cuda:0')\n"
                     "        model(**batch).loss.backward()\n"),
    ]
    invalid = [
        # ... taken by every rank.
        Invalid(PREPARED_DEVICE_TAKEN, line=13, column=31),
        # Not ``local_rank >= 0``'s single-process else: ``rank > 0`` picks the non-zero ranks of the run: workers.
        Invalid(DIST + "import os\ndef main():\n"
                       "    rank = int(os.environ['RANK'])\n    dist.init_process_group('nccl')\n"
                       "    if rank > 0:\n        device = torch.device('cuda:0')\n"
                       "    else:\n        device = torch.device('cuda')\n    return build().to(device)\n",
                line=8, column=31),
        # An argparse default every rank keeps and puts its model on (a62 unlearn_multimodal).
        Invalid("import argparse\nimport torch\nimport torch.distributed as dist\n"
                "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                "def main(args):\n    dist.init_process_group('nccl')\n    device = args.device\n"
                "    model = build().to(device)\n    model = DDP(model, device_ids=[args.gpu])\n"
                "if __name__ == '__main__':\n    parser = argparse.ArgumentParser()\n"
                "    parser.add_argument('--device', default='cuda:0')\n    main(parser.parse_args())\n",
                line=12, column=45),
        # ... but beside a DDP wrap the other arm of an FSDP switch is the DDP run.
        Invalid(DIST + "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
                       "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                       "def train(model, loader, args, local_rank):\n"
                       "    model = FSDP(model) if args.fsdp else DDP(model)\n    for batch in loader:\n"
                       "        for key in batch.keys():\n            if args.fsdp:\n"
                       "                batch[key] = batch[key].to(local_rank)\n            else:\n"
                       "                batch[key] = batch[key].to('cuda:0')\n"
                       "        model(**batch).loss.backward()\n", line=12, column=44),
        # A default replaced only by the CPU: every GPU rank keeps cuda:0.
        Invalid(DIST + "def setup(args):\n    args.device = 'cuda:0'\n    if args.cpu:\n"
                       "        args.device = 'cpu'\n    return model.to(args.device)\n", line=4, column=19),
        # The holder handed to a function that does not set up a device, or to the project's own one.
        Invalid(DIST + "import timm.utils as utils\ndef main(args):\n    args.device = 'cuda:0'\n"
                       "    utils.setup_default_logging(args)\n    model = Net().to(args.device)\n",
                line=5, column=19),
        Invalid(DIST + "def init_device(opts):\n    opts.seed = 1\ndef main(args):\n    args.device = 'cuda:0'\n"
                       "    init_device(args)\n    model = Net().to(args.device)\n", line=6, column=19),
        # Several GPUs may be visible in this arm.
        Invalid(DIST + "def pin_gpu():\n    if torch.cuda.device_count() >= 1:\n"
                       "        torch.cuda.set_device(0)\n", line=5, column=31),
        # ... and the several-GPU arm of the count through a name.
        Invalid(DIST + "def load(path):\n    n = torch.cuda.device_count()\n    if n > 1:\n"
                       "        return torch.load(path, map_location='cuda:0')\n", line=6, column=46),
        # The same helper building the trainer for this rank of a distributed run.
        Invalid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP

class Runner:
    def __init__(self, name, rank=0, world_size=1):
        self.rank, self.is_ddp = rank, world_size > 1
        self.net = make_net(name).cuda(rank)
        if self.is_ddp:
            self.net = DDP(self.net, device_ids=[rank])

class Sampler:
    def __init__(self, name, rank, world_size):
        self.runner = Runner(name, rank, world_size)

    def draw(self, n):
        z = torch.randn(n, 64, device=0)
        return self.runner.net(z)

def worker(rank, world_size):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    Runner("exp", rank=rank, world_size=world_size)
""", line=17, column=39),
        Invalid(DIST + "model = model.to('cuda:0')\n", line=3, column=18),
        # the export told to leave CUDA_VISIBLE_DEVICES alone: every process sees every GPU
        Invalid(DIST + "import submitit\nsubmitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)\n"
                "model = model.to('cuda:0')\n", line=5, column=18),
        Invalid(DIST + "from submitit.helpers import TorchDistributedEnvironment\nenv = TorchDistributedEnvironment()\n"
                "env.export(False)\ntorch.cuda.set_device(0)\n", line=6, column=23),
        Invalid(DIST + "device = torch.device('cuda', 0)\n", line=3, column=31),
        Invalid(DIST + "model = model.cuda(0)\n", line=3, column=20),
        Invalid(DIST + "batch = batch.to(0, non_blocking=True)\n", line=3, column=18),
        Invalid(DIST + "torch.cuda.set_device(0)\n", line=3, column=23),
        Invalid(DIST + "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                "model = DDP(model, device_ids=[0])\n", line=4, column=32),
        Invalid(DIST + "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = '0'\n", line=4, column=38),
        # Several GPUs joined for the whole run do not give each process its own GPU.
        Invalid(DIST + "import os\ngpu_list = ','.join(str(g) for g in [2, 3])\n"
                "os.environ['CUDA_VISIBLE_DEVICES'] = gpu_list\n"
                "state = torch.load(path, map_location='cuda:0')\n", line=6, column=39),
        Invalid(DIST + "import os\ndef main(opt):\n"
                "    os.environ['CUDA_VISIBLE_DEVICES'] = ','.join(map(str, opt.gpu_ids))\n"
                "    dist.init_process_group('nccl')\n    model = Net().cuda(0)\n", line=7, column=24),
        # (now with a read: a "cuda:N" value that nothing reads is silent, REAL-CODE-SHAPES DDP007)
        Invalid(DIST + "device = 'cuda:0' if torch.cuda.is_available() else 'cpu'\nmodel = Net().to(device)\n",
                line=3, column=10),
        Invalid(DIST + "ckpt = torch.load(path, map_location='cuda:0')\n", line=3, column=38),
        Invalid(DIST + "x = torch.zeros(4, device='cuda:1')\n", line=3, column=27),
        # a constant that the worker reads
        Invalid(DIST + "DEVICE = 'cuda:0'\ndef main():\n    dist.init_process_group('nccl')\n"
                       "    model = Net().to(DEVICE)\n", line=3, column=10),
        # the worker itself, beside a launcher parent
        Invalid(DIST + "import torch.multiprocessing as mp\ndef worker(gpu, args):\n"
                       "    model = Net().to('cuda:0')\ndef main():\n    mp.spawn(worker, nprocs=4, args=(None,))\n",
                line=5, column=22),
        # a helper some caller runs on every rank
        Invalid(DIST + "def evaluate(net, loader):\n    for x in loader:\n        net(x.cuda(0))\n"
                       "def train(rank, net, loader):\n    torch.cuda.set_device(rank)\n    evaluate(net, loader)\n",
                line=5, column=20),
        # the else of ``distributed and rank == 0`` runs on every other rank
        Invalid(DIST + "if args.distributed and args.rank == 0:\n    log_device = 'cpu'\nelse:\n"
                       "    torch.cuda.set_device(0)\n", line=6, column=27),
        # the main block of a DDP script is worker code
        Invalid(DIST + "if __name__ == '__main__':\n    dist.init_process_group('nccl')\n"
                       "    model = Net().to('cuda:0')\n", line=5, column=22),
        # ... also when a function of the module it calls starts the process group
        Invalid("import torch\nfrom torch.utils.data.distributed import DistributedSampler\n"
                "def setup():\n    torch.distributed.init_process_group('nccl')\n"
                "if __name__ == '__main__':\n    setup()\n    model = Net().to('cuda:0')\n", line=7, column=22),
        # the distributed arm of a flag read from nested option dicts is a worker
        Invalid(DIST + """\
class Engine:
    def setup_devices(self):
        if self.cfg["run"]["use_ddp"]:
            dist.init_process_group("nccl")
            self.dev = torch.device("cuda:0")
        else:
            self.dev = torch.device("cpu")
        self.net = self.net.to(self.dev)
""", line=7, column=37),
        # the distributed arm of a world-size test is a worker
        Invalid(DIST + "if num_processes > 1:\n    torch.cuda.set_device(0)\n", line=4, column=27),
    ]

    def screen(self, sketch):
        """The screen (necessary for check() to report): True, False, or the project facts that must hold."""
        return (sketch.cuda_index_literal or sketch.device_int_literal or "CUDA_VISIBLE_DEVICES" in sketch.strings) \
            and not sketch.in_test_module()

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        if module_masks_visible_devices(index) or is_test_module(index.path):
            return
        for node in _hardcoded_device_literals(index):
            if is_worker_code(index, node) and not in_device_list(index, node) and not _left_at_once(index, node) \
                    and not runs_on_rank_zero_only(index, node) \
                    and not _one_gpu_visible(index, node) and not _default_replaced_by_rank(index, node) \
                    and not _compared(index, node) and not _fallback_of_unwrapped_model(index, node) \
                    and not _returned_to_single_process_uses(index, node):
                yield self.report(node, _message(index, node))


def _returned_to_single_process_uses(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """``device = torch.device('cuda:0' if n_gpu > 0 else 'cpu'); return device, ids`` in a
    helper (pytorch-template's ``_prepare_device``) whose every call in the module binds
    the device to a name (``self.device, ids = self._prepare_device(n)``) that only
    single-process arms read (``if not ddp: self.model = model.to(self.device)``; a109
    MVSFormer): no DDP worker takes that device."""
    value = node  # up to the whole value: the conditional, ``torch.device(...)`` around it
    while isinstance(index.parent(value), (cst.IfExp, cst.BooleanOperation, cst.Arg)) or (
            isinstance(index.parent(value), cst.Call) and isinstance(value, cst.Arg)):
        value = index.parent(value)
    statement = index.parent(value)
    function = flow.enclosing_function(index, node)
    if function is None or not isinstance(statement, cst.Assign) or len(statement.targets) != 1 \
            or not isinstance(statement.targets[0].target, cst.Name):
        return False
    position = _returned_position(index, function, statement.targets[0].target.value)
    if position is None:
        return False
    calls = [site for site in index.calls if _calls_function(site.node.func, function.name.value)]
    holders = [_bound_at(index, site.node, position) for site in calls]
    if not holders or any(holder is None for holder in holders):
        return False
    reads = [read for holder in holders for read in _reads_of(index, holder)]
    return bool(reads) and all(in_single_process_branch(index, read) for read in reads)


def _returned_position(index: SemanticIndex, function: cst.FunctionDef, name: str):
    """-1 when every ``return`` of ``function`` hands back ``name`` itself, i when each
    returns a tuple holding it at position i; None otherwise."""
    found = set()
    for exit_node in index.exits:
        if not isinstance(exit_node, cst.Return) or flow.enclosing_function(index, exit_node) is not function:
            continue
        value = exit_node.value
        if isinstance(value, cst.Tuple):
            found.add(next((i for i, e in enumerate(value.elements) if dotted_name(e.value) == name), None))
        else:
            found.add(-1 if value is not None and dotted_name(value) == name else None)
    return found.pop() if len(found) == 1 else None


def _calls_function(func: cst.BaseExpression, name: str) -> bool:
    return (isinstance(func, cst.Name) and func.value == name) or (
        isinstance(func, cst.Attribute) and func.attr.value == name and dotted_name(func.value) == "self")


def _bound_at(index: SemanticIndex, call: cst.Call, position: int):
    """The name or attribute (dotted) that ``target = call`` / ``a, target = call``
    binds to the returned element at ``position`` (-1: the whole value)."""
    statement = index.parent(call)
    if not isinstance(statement, cst.Assign) or len(statement.targets) != 1:
        return None
    target = statement.targets[0].target
    if position >= 0:
        if not isinstance(target, (cst.Tuple, cst.List)) or position >= len(target.elements):
            return None
        target = target.elements[position].value
    return dotted_name(target)


def _reads_of(index: SemanticIndex, holder: str) -> list[cst.CSTNode]:
    if "." not in holder:
        return list(name_reads(index, holder))
    head, _, attribute = holder.rpartition(".")
    reads = []
    for name in attribute_names(index, attribute):
        node = index.parent(name)
        if dotted_name(node) == holder and not any(
                isinstance(up, cst.AssignTarget) for up in list(index.ancestors(node))[:3]):
            reads.append(node)  # (not ``self.device, ids = ...`` itself)
    return reads


def _fallback_of_unwrapped_model(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """``model.device_ids[0] if hasattr(model, "device_ids") and ... else "cuda:0"``:
    a DDP worker's model carries its device ids; the literal is the fallback for a
    plain model (a single-process inference path)."""
    child = node
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, (cst.IfExp, cst.If)) and child is ancestor.orelse:
            test = index.module.code_for_node(ancestor.test)
            if "device_ids" in test and "device_ids" in index.module.code_for_node(
                    ancestor.body if isinstance(ancestor, cst.IfExp) else ancestor.body):
                return True
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
            return False
        child = ancestor
    return False


def _compared(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """``torch.device(self.device) == torch.device("cuda:0")``: the literal is what a
    device is compared with (which process is on GPU 0), not a device anything uses."""
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, (cst.Comparison, cst.ComparisonTarget)):
            return True
        if not isinstance(ancestor, (cst.Arg, cst.Call)) or (
                isinstance(ancestor, cst.Call) and index.qualified_name(ancestor.func) != "torch.device"):
            return False
    return False


def _message(index: SemanticIndex, node: cst.CSTNode) -> str:
    text = literal_str(node) if isinstance(node, cst.SimpleString) else None
    number = literal_int(node) if isinstance(node, cst.Integer) else None
    if text is not None and CUDA_INDEX.match(text):
        device = text
    elif number is not None:
        device = f"cuda:{number}"
    elif text is not None:  # CUDA_VISIBLE_DEVICES = "0"
        return (f"hard-coded device index: every rank sees only GPU {text.strip()} (CUDA_VISIBLE_DEVICES); "
                "derive it from LOCAL_RANK")
    else:
        return HardcodedDevice.message
    return f"hard-coded device index: every rank puts its tensors on {device}; derive the index from LOCAL_RANK"


def _one_gpu_visible(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """``node`` is in the arm of ``if torch.cuda.device_count() == 1:`` (or
    ``<= 1``, ``< 2``; the ``else`` of ``> 1`` / ``>= 2`` / ``!= 1``; the count
    also through a name bound to it: ``n_gpu = torch.cuda.device_count()``): the
    process sees one GPU (one per task), so index 0 is its own."""
    child = node
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, cst.If) and child is not ancestor.test:
            test = ancestor.test
            if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 \
                    and _is_device_count(index, test.left):
                target = test.comparisons[0]
                bound = literal_int(target.comparator)
                one = (isinstance(target.operator, (cst.Equal, cst.LessThanEqual)) and bound == 1) or (
                    isinstance(target.operator, cst.LessThan) and bound == 2)
                several = (isinstance(target.operator, (cst.GreaterThan, cst.NotEqual)) and bound == 1) or (
                    isinstance(target.operator, cst.GreaterThanEqual) and bound == 2)
                if (one and child is ancestor.body) or (several and child is ancestor.orelse):
                    return True
        child = ancestor
    return False


def _default_replaced_by_rank(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """``args.device = "cuda:0"`` then ``if args.distributed: args.device =
    "cuda:%d" % args.local_rank``: the literal is the single-process default
    that the distributed path replaces, later in the same scope, on a branch,
    with a device built from a rank."""
    statement = index.parent(node)
    if not isinstance(statement, cst.Assign) or statement.value is not node or len(statement.targets) != 1:
        return False
    target = dotted_name(statement.targets[0].target)
    if target is None:
        return False
    mine = [b for (_, name), found in index.bindings.items() if name == target for b in found
            if b.node is statement]
    if not mine:
        return False
    around = set(index.ancestors(statement))
    for binding in index.bindings.get((id(mine[0].scope), target), []):
        if binding.order > mine[0].order and binding.value is not None and binding.kind == "assign" \
                and any(isinstance(a, cst.If) and a not in around for a in index.ancestors(binding.node)) \
                and _mentions_rank(binding.value):
            return True
    return _holder_handed_to_device_setup(index, mine[0], target)


def _holder_handed_to_device_setup(index: SemanticIndex, default, target: str) -> bool:
    """``args.device = "cuda:0"`` then ``device = init_distributed_device(args)``:
    the object holding the default is handed whole, later in the same scope, to
    a library function (not one of the project's) that sets up the device (its
    name says "device"), which replaces the index with the rank's own in
    distributed mode (timm's ``init_distributed_device``). The default is the
    single-process one."""
    holder, _, _ = target.rpartition(".")
    if not holder:
        return False
    project, scope = project_of(index), index.enclosing_scope(default.node)
    for site in index.calls:
        if site.scope is not scope or site.order <= default.order or site.qualified_name is None:
            continue
        if "device" not in site.qualified_name.rpartition(".")[2].lower():
            continue
        if not any(not arg.star and arg.keyword is None and dotted_name(arg.value) == holder
                   for arg in site.node.args):
            continue
        callee = dotted_name(site.node.func)
        if callee is not None and project.resolve_function(index.path, callee) is not None:
            continue
        return True
    return False


def _mentions_rank(expr: cst.CSTNode) -> bool:
    pending = [expr]
    while pending:
        node = pending.pop()
        if isinstance(node, cst.Name) and names.RANK_NAME.match(node.value):
            return True
        if isinstance(node, cst.Attribute) and names.RANK_NAME.match(node.attr.value):
            return True
        pending.extend(node.children)
    return False


def _is_device_count(index: SemanticIndex, expr: cst.BaseExpression) -> bool:
    """``torch.cuda.device_count()``, or a local name every reaching binding of
    which is that call."""
    if isinstance(expr, cst.Call):
        return index.qualified_name(expr.func) == "torch.cuda.device_count"
    if isinstance(expr, cst.Name):
        values = index.reaching_values(expr)
        return bool(values) and all(isinstance(value, cst.Call) and _is_device_count(index, value)
                                    for value in values)
    return False


def _left_at_once(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """``w.to(0).to("cpu")`` / ``.cuda(0).cpu()``: a round trip through the GPU
    whose result lives on the CPU (quantisation kernels), not a placement."""
    arg = index.parent(node)
    call = index.parent(arg) if isinstance(arg, cst.Arg) else None
    if not isinstance(call, cst.Call) or not isinstance(call.func, cst.Attribute) \
            or call.func.attr.value not in ("to", "cuda"):
        return False
    attribute = index.parent(call)
    if not isinstance(attribute, cst.Attribute) or attribute.value is not call:
        return False
    following = index.parent(attribute)
    if not isinstance(following, cst.Call):
        return False
    if attribute.attr.value == "cpu":
        return True
    return attribute.attr.value == "to" and bool(following.args) and literal_str(following.args[0].value) == "cpu"


def _hardcoded_device_literals(index: SemanticIndex) -> Iterator[cst.CSTNode]:
    for node, value in index.strings:
        if isinstance(value, str) and CUDA_INDEX.match(value) and _used_as_device(index, node):
            yield node
    for site in index.calls:
        yield from _literal_index_arguments(site)
    for target, value in index.subscript_assignments:
        if _is_visible_devices_key(index, target):
            text = literal_str(value)
            if text is not None and SINGLE_GPU_VISIBLE.match(text):
                yield value


def _used_as_device(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """Is this "cuda:N" literal where a device goes (not a dict key of a remap,
    a comparison, a log message, a parameter default, an option default that no
    rank keeps as its device, or a constant
    that nothing reads)?"""
    child, parent = node, index.parent(node)
    while isinstance(parent, (cst.IfExp, cst.BooleanOperation)):  # 'cuda:0' if ok else 'cpu'
        child, parent = parent, index.parent(parent)
    if isinstance(parent, (cst.Assign, cst.AnnAssign)):
        return parent.value is child and _assignment_is_read(index, parent)
    if not isinstance(parent, cst.Arg):
        return False
    call = index.parent(parent)
    site = index.call_site(call) if isinstance(call, cst.Call) else None
    if site is None:
        return False
    if parent.keyword is not None:
        if parent.keyword.value == "default" and site.method == "add_argument":
            return _option_used_as_device(index, site)
        return parent.keyword.value in DEVICE_KEYWORDS
    return _device_slot(site, parent)


def _device_slot(site: CallSite, arg: cst.Arg) -> bool:
    """Is ``arg`` where the call takes a device (``.to(x)``, ``torch.device(x)``,
    ``device=x``, ``map_location=x``)?"""
    if arg.keyword is not None:
        return arg.keyword.value in DEVICE_KEYWORDS
    if site.method == "to" or site.qualified_name in (names.TORCH_DEVICE, names.SET_DEVICE):
        return True
    return site.argument("map_location") is arg


def _option_used_as_device(index: SemanticIndex, site: CallSite) -> bool:
    """``parser.add_argument("--device", default="cuda:0")`` whose value
    (``args.device``, or a name bound to it) every rank then puts its model or
    batches on (``.to(device)``), and that nothing reassigns (``args.device =
    f"cuda:{args.gpu}"``): the default is every rank's device (a62 review)."""
    flags = [literal_str(a.value) for a in site.node.args if a.keyword is None]
    dest = site.argument("dest")
    name = literal_str(dest.value) if dest is not None else next(
        (f.lstrip("-").replace("-", "_") for f in flags if f and f.startswith("--")), None)
    if not name:
        return False
    used = False
    for attr in attribute_names(index, name):
        holder = index.parent(attr)
        parent = index.parent(holder)
        if isinstance(parent, cst.AssignTarget) or (isinstance(parent, (cst.AnnAssign, cst.AugAssign))
                                                   and parent.target is holder):
            return False  # ``args.device = ...``: replaced (per rank or not), judged where it is set
        used = used or _lands_on_device(index, holder)
    return used


def _lands_on_device(index: SemanticIndex, expr: cst.CSTNode, depth: int = 0) -> bool:
    """Does the value ``expr`` go where a device goes, itself or through a name
    bound to it (``device = args.device`` then ``model.to(device)``)?"""
    parent = index.parent(expr)
    if isinstance(parent, cst.Arg):
        call = index.parent(parent)
        site = index.call_site(call) if isinstance(call, cst.Call) else None
        return site is not None and _device_slot(site, parent)
    if depth == 0 and isinstance(parent, cst.Assign) and parent.value is expr and len(parent.targets) == 1 \
            and isinstance(parent.targets[0].target, cst.Name):
        target = parent.targets[0].target.value
        # a read that only this binding reaches (not ``if args.distributed: device = per-rank``)
        return any(_lands_on_device(index, read, depth + 1) for read in name_reads(index, target)
                   if index.enclosing_scope(read) is index.enclosing_scope(parent)
                   and all(b.node is parent for b in index.reaching(target, read) or [None]))
    return False


def _assignment_is_read(index: SemanticIndex, statement: cst.CSTNode) -> bool:
    """``DEFAULT_DEVICE = "cuda:0"`` that nothing reads (or that a later binding
    replaces before every read) puts nothing on GPU 0. A module-level name that
    another module of the project imports counts as read."""
    bindings = [b for key, found in index.bindings.items() for b in found if b.node is statement]
    return not bindings or any(
        binding_is_read(index, b) or (b.scope is index.module and _imported_elsewhere(index, b.name))
        for b in bindings)


def _imported_elsewhere(index: SemanticIndex, name: str) -> bool:
    for path, module in project_of(index).modules.items():
        if path == index.path:
            continue
        if module.star_imports or any(target.rpartition(".")[2] == name for target in module.imports.values()):
            return True
    return False


def _literal_index_arguments(site: CallSite) -> Iterator[cst.CSTNode]:
    """Integer literals passed where a CUDA device index goes (a single-entry
    ``device_ids`` list included; ``torch.device`` only for type "cuda")."""
    if site.qualified_name == names.TORCH_DEVICE:
        kind = site.argument("type")
        if kind is None or literal_str(kind.value) != "cuda":
            return
    for expr, list_length in device_arguments(site):
        if list_length == 1 and literal_int(expr) is not None:
            yield expr


def _is_visible_devices_key(index: SemanticIndex, target: cst.Subscript) -> bool:
    if index.qualified_name(target.value) != "os.environ" or len(target.slice) != 1:
        return False
    element = target.slice[0].slice
    return isinstance(element, cst.Index) and literal_str(element.value) == "CUDA_VISIBLE_DEVICES"
