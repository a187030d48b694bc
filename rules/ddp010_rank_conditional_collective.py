"""## What it does
Flags a collective (`all_reduce`, `all_gather(_object)`, `broadcast(_object_list)`,
`reduce`, `reduce_scatter`, `barrier`, `scatter`, `gather`, `all_to_all`), a
collective state-dict call (`fsdp_model.state_dict()`, `FSDP.full_optim_state_dict`,
`get_model_state_dict`, `torch.distributed.checkpoint.save/load`,
`ZeroRedundancyOptimizer.consolidate_state_dict()`) or a forward pass of
a DDP/FSDP-wrapped model that runs only under a rank condition (`if rank == 0:`,
`if is_main_process():`, after `if rank != 0: return`, `if self.gpu_index == 0:`
where the project's callers fill `gpu_index` with a rank), directly or through a
function of the project that reaches one (`if rank == 0: evaluate(ddp_model)`,
`self.checkpoint()` ending in `dist.barrier()`, a nested `test(loader)` whose
`model(x)` reads the enclosing function's `model = DDP(model)`, `search()` that builds a DDP model,
which checks parameter shapes across ranks and broadcasts rank 0's weights; a
method of the class that stores the DDP model, `self.evaluate()` or
`learner.predict(x)` running `self.net(x)` where `self.net = net` was given `DDP(...)`,
itself or through other methods of `self`; a method of an instance whose class is not
known, when one project method has that name and takes the model,
`self.diffusion.sample(model=self.model)`, also through the override of a subclass that
a base's method calls on `self`). An FSDP state dict is collective also for a model
that a strategy switch may make FSDP (`if self.strategy == "ddp": DDP(m) elif ...:
FSDP(m)`) where the use's tested flags allow it. A boolean attribute that set-up
turns off on every rank but the main one (`if dist.get_rank() != main_gpu:
self.save_models = False`) is a rank condition (`if self.save_models:`). When
the two arms of a rank test issue different collectives, the first arm is
reported once. A wrapped model handed under a
rank condition to an evaluation function whose body is not visible
(`run_validation(ddp_model, loader)` from another library), or that hands it on
to `obj.run(model=...)` of an object whose class is not visible
(`run_benchmark(name, conf, ddp_model)` building its pipeline by name), is
flagged too. A DDP
forward is reported as "may hang or desynchronise" (DDP broadcasts buffers in
forward); collectives and FSDP forwards hang.

Not flagged: point-to-point `send`/`recv`; the same collective issued on every
branch of the rank test (also through a function of this module; a call that runs
only without distributed training, `if local_rank == -1 and ...:`, or on rank 0 too,
is not the other ranks' side; and the
main-process-first idiom `if not leader: barrier()` ... `if leader: barrier()`);
calls on `model.module` (the unwrapped model); tests that say whether the run is
distributed (`if world_size > 1`, `local_rank != -1`); a bare function reference
(`if is_main_process:` is always true); collectives over a subgroup (`group=g`)
and forwards of a DDP built with `process_group=g` under a test that selects the
group's members (`rank in dist.get_process_group_ranks(g)`, a rank range
`start <= rank < start + size` / `rank < n`, a coordinate every member shares:
`tp_rank == 0`, also through a predicate of the module that returns such a test),
likewise a project function given a group (`reduce_grads(ps, pg_collection=pgs)`)
under such a test; a rank test that also encloses the wrap; `fsdp_model.state_dict()` where `isinstance(model, FSDP)` is false;
`obj = [x] if rank == 0 else [None]` followed by the collective outside the branch;
forwards of a model a builder made for one process (`get_model(conf, local_rank=-1)`,
`world_size=1`, `distributed=False`, or `cfg.num_gpus = 1` set just before the call):
an EMA or evaluation copy that is never wrapped; a helper whose collective runs only
under a flag (`if reduce:`, `x if reduce else y`, or `if self.dist:` with `self.dist`
stored from a constructor parameter) called with that flag `False`/`None` or leaving out
a parameter that defaults to it (`log_step(..., reduce=False)`, `Dataset(cfg)`); a helper
that unwraps the model it is given (`if is_distributed: model = model.module`) before
its forward; a forward in a constructor before the same constructor wraps the model
(`print_summary(self.g, ...)` under `if rank == 0:`, then `self.g = DDP(self.g)`).

## Why is this bad?
Every rank must enter a collective for it to complete. When only rank 0 calls
`barrier()` (or runs a DDP forward, which broadcasts buffers, or an FSDP forward,
which all-gathers parameters), rank 0 waits forever for peers that never arrive:
the job hangs until the NCCL timeout kills it, usually with no hint of where.

## Example
    if dist.get_rank() == 0:
        metrics = evaluate(ddp_model, val_loader)   # DDP forward on rank 0 only
        dist.all_reduce(metrics)                    # peers never join

## Use instead
    metrics = evaluate(ddp_model.module, val_loader)  # or evaluate on every rank
    dist.all_reduce(metrics)                          # every rank joins
    if dist.get_rank() == 0:
        print(metrics)

## References
- https://pytorch.org/docs/stable/distributed.html#collective-functions
- https://pytorch.org/docs/stable/notes/ddp.html
"""

from __future__ import annotations

import re
from typing import Iterator, Optional

import libcst as cst

from ddplint.analysis.flow import calls_in_function, helper_functions
from ddplint.analysis.models import (guard_encloses_wrap, judged_call_fact, may_hold_wrap, not_instance_of,
                                     project_callee, project_of, wrap_process_group, wrapped_kind, wrapped_slots)
from ddplint.screen.facts import COLLECTIVE_STATE_DICT, COLLECTIVES
from ddplint import names
from ddplint.analysis.values import is_ddp_model
from ddplint.analysis.roles import comparison_polarity, in_single_process_branch, tests_subgroup_rank, zero_side
from ddplint.analysis.ranks import Guard, guard_restricts, rank_guards, selects_group_members
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import CallSite, SemanticIndex, dotted_name

DIST = "import torch\nimport torch.distributed as dist\n"
DDP_NAME, FSDP_NAME = names.DDP, names.FSDP
DDP_IMPORT = DIST + "from torch.nn.parallel import DistributedDataParallel as DDP\n"
FSDP_IMPORT = DIST + "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
# A trainer whose strategy switch makes its model DDP or FSDP (JayDS22's shape): the shared
# head of the examples that ask which arm holds which wrap.
STRATEGY_SWITCH = FSDP_IMPORT + "from torch.nn.parallel import DistributedDataParallel as DDP\n" + """\
class Trainer:
    def __init__(self, model, strategy):
        self.strategy = strategy
        self.model = self._setup(model)

    def _setup(self, model):
        if self.strategy == "ddp":
            model = DDP(model)
        elif self.strategy == "fsdp":
            model = FSDP(model)
        return model
"""


# A constructor that runs a summary forward on rank 0 and wraps the model, in either order.
SUMMARY_IN_CONSTRUCTOR = """\
import torch
import torch.nn as nn
import torch.distributed as dist


def print_summary(module, inputs):
    return module(*inputs)


class Trainer:
    def __init__(self, local_rank):
        self.local_rank = local_rank
        self.g = nn.Linear(2, 2).cuda()
{before}
{after}

    def train(self):
        for step in range(10):
            self.g(torch.zeros(1, 2)).sum().backward()


def main():
    dist.init_process_group("nccl")
    Trainer(dist.get_rank() % torch.cuda.device_count()).train()
    dist.destroy_process_group()
"""
SUMMARY_ON_RANK_ZERO = "        if self.local_rank == 0:\n            print_summary(self.g, [torch.zeros(1, 2)])"
WRAP_G = "        self.g = nn.parallel.DistributedDataParallel(self.g, device_ids=[local_rank])"

class RankConditionalCollective(Rule):
    code, name, severity = "DDP010", "rank-conditional-collective", "error"
    message = "collective under a rank condition: the other ranks never join it and the job hangs"
    # Every report sits in a branch of a rank test (``if`` statement or expression).
    triggers = ("if",)
    needs_ddp_context = True
    uses_project = True

    valid = [
        # The summary forward runs in the constructor before the same constructor wraps the
        # model (``self.g = DDP(self.g)`` comes later): rank 0 runs the plain model alone
        # (a114 StyleGAN2_Pytorch).
        Valid(SUMMARY_IN_CONSTRUCTOR.format(before=SUMMARY_ON_RANK_ZERO, after=WRAP_G)),
        # The class all-reduces only ``if self.distributed:``, stored from a constructor
        # parameter that defaults to False and that rank 0's call leaves out (HydraGNN's datasets).
        Valid("""\
import torch
import torch.distributed as dist


class RawDataset:
    def __init__(self, config, distributed=False):
        self.distributed = distributed
        self.count = torch.tensor([len(config.files)], device="cuda")
        self._load()

    def _load(self):
        if self.distributed:
            dist.all_reduce(self.count)


def main(config):
    dist.init_process_group("nccl")
    if dist.get_rank() == 0:
        total = RawDataset(config)
"""),
        # The evaluation helper unwraps the model first (``model = model.module``): its forward
        # starts no collective (a100 Semantic-Segmentation-PyTorch).
        Valid("""\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def validation(model, loader, device, is_distributed):
    if is_distributed:
        model = model.module
    model.eval()
    with torch.no_grad():
        for images, masks in loader:
            outputs = model(images.to(device))


def main(model, train_loader, val_loader, device, epochs):
    dist.init_process_group("nccl")
    model = DDP(model.to(device), device_ids=[device])
    for epoch in range(epochs):
        train(model, train_loader)
        if dist.get_rank() == 0:
            validation(model, val_loader, device, True)
"""),
        # The helper's collective runs only when ``reduce`` is true; the rank-guarded call passes
        # ``reduce=False`` (a89 dhanyajayagopal's pipeline logger).
        Valid("""\
import torch
import torch.distributed as dist


class Logger:
    def _average(self, loss):
        t = torch.tensor([loss], device="cuda")
        dist.all_reduce(t)
        return t.item() / dist.get_world_size()

    def log_step(self, step, loss, reduce=True):
        value = self._average(loss) if reduce else float(loss)
        print(step, value)


def train(model, loader, rank, world_size):
    logger = Logger()
    for step, batch in enumerate(loader):
        loss = model(batch).mean()
        loss.backward()
        if rank == world_size - 1:
            logger.log_step(step, loss.item(), reduce=False)
"""),
        # Only when not launched by torchrun: a single-process run, no peers.
        Valid(DDP_IMPORT + """\
import os
def fit(net, loader, evaluate):
    model = DDP(net)
    if "RANK" not in os.environ:
        evaluate(model(loader))
"""),
        # ... but not in the arm the switch made DDP.
        Valid(STRATEGY_SWITCH + """\

    def save(self, path):
        if dist.get_rank() == 0 and self.strategy == "ddp":
            torch.save(self.model.module.state_dict(), path)
"""),
        # An instance attribute that is FSDP only under ``self.<flag>``, used where that flag says
        # otherwise (its other store keeps the plain model): an ordinary state_dict().
        Valid(FSDP_IMPORT + "class Trainer:\n    def __init__(self, net, cfg):\n        self.use_fsdp = cfg.fsdp\n"
                            "        if self.use_fsdp:\n            self.model = FSDP(net)\n        else:\n"
                            "            self.model = net.cuda()\n    def save(self, path):\n"
                            "        if dist.get_rank() != 0:\n            return\n        if not self.use_fsdp:\n"
                            "            torch.save(self.model.state_dict(), path)\n"),
        Valid(FSDP_IMPORT + "def shard(module):\n    return FSDP(module)\nclass Runner:\n"
                            "    def __init__(self, net, sharded):\n        self.sharded = sharded\n"
                            "        self.raw = net\n        if self.sharded:\n            self.net = shard(net)\n"
                            "        else:\n            self.net = self.raw.to('cuda')\n    def export(self, path):\n"
                            "        if self.sharded:\n            return\n        if dist.get_rank() == 0:\n"
                            "            torch.save(self.net.state_dict(), path)\n"),
        # A helper that runs a module-level model which is not wrapped (the EMA copy), called under a
        # rank guard from a function: no collective.
        Valid(DDP_IMPORT + "model = DDP(net)\nema = Net().cuda()\ndef evaluate(loader):\n    for x, y in loader:\n"
                           "        out = ema(x)\ndef main(loader):\n    if dist.get_rank() == 0:\n"
                           "        evaluate(loader)\n"),
        Valid(DDP_IMPORT + "model = build()\nraw = model\nif ddp:\n    model = DDP(model)\n"
                           "def estimate_loss():\n    return raw(x).mean()\ndef train():\n"
                           "    if master_process:\n        estimate_loss()\n"),
        # A rank inside a group (``grp.rank()``, ``mp.dp_rank()``): which ranks of the job pass is
        # not known here.
        Valid(DIST + "def sync_stats(t):\n    dist.all_reduce(t)\ndef checkpoint(t):\n"
                     "    if mp.dp_rank() != 0:\n        return\n    sync_stats(t)\n"),
        Valid(DIST + "dist.all_reduce(t)\nif dist.get_rank() == 0:\n    print(t)\n"),
        Valid(DIST + "if rank == 0:\n    dist.send(t, dst=1)\nelse:\n    dist.recv(t, src=0)\n"),
        Valid(DIST + "if rank == 0:\n    dist.broadcast(t, src=0)\nelse:\n    dist.broadcast(t, src=0)\n"),
        Valid(DDP_IMPORT + "model = DDP(net)\nif rank == 0:\n    out = model.module(x)\n"),
        Valid(DIST + "if world_size > 1:\n    dist.barrier()\n"),
        Valid(DIST + "objs = [cfg] if rank == 0 else [None]\ndist.broadcast_object_list(objs, src=0)\n"),
        Valid(DIST + "group = dist.new_group([0, 1])\nif rank in ranks:\n    dist.all_reduce(t, group=group)\n"),
        # The download idiom: non-zero ranks wait, rank 0 works, then releases them.
        Valid(DIST + "if local_rank not in [-1, 0]:\n    dist.barrier()\ndownload()\n"
                     "if local_rank == 0:\n    dist.barrier()\n"),
        Valid(DIST + "for epoch in range(10):\n    if epoch % 5 == 0:\n        dist.barrier()\n"),
        Valid(DDP_IMPORT + "def evaluate(net, loader):\n    for x in loader:\n        net(x)\n"
                           "model = DDP(net)\nif rank == 0:\n    evaluate(net, loader)\n"),
        Valid(DIST + "if args.local_rank != -1:\n    dist.barrier()\n"),
        # The evaluation hands the models to a logger's method (it records, it runs nothing) and
        # runs only the unwrapped generator (a117 whisper-vits-svc).
        Valid(DDP_IMPORT + "def validate(generator, discriminator, loader, writer, step):\n"
                           "    for x in loader:\n        out = generator.module.infer(x)\n"
                           "    writer.log_validation(out.mean().item(), generator, discriminator, step)\n"
                           "model_g, model_d = DDP(gen), DDP(disc)\nif rank == 0:\n"
                           "    validate(model_g, model_d, loader, writer, step)\n"),
        # The rank test holds a single-process test: the call runs only without distributed
        # training (a116 albert_pytorch's "only evaluate when single GPU").
        Valid(DDP_IMPORT + "def evaluate(args, model):\n    return model(args.x)\n"
                           "model = DDP(net)\nif args.local_rank in [-1, 0] and step % 10 == 0:\n"
                           "    if args.local_rank == -1:\n        evaluate(args, model)\n"),
        Valid(DIST + "if local_rank >= 0:\n    for t in tensors:\n        dist.broadcast(t, 0)\n"),
        # With the flag set every rank goes on: the collective path is shared.
        Valid(DIST + "def evaluate(shared, rank):\n    if not shared and rank != 0:\n        return\n"
                     "    dist.all_reduce(t)\n"),
        # Work sharded by rank: every rank runs the forward, on its own items.
        Valid(DDP_IMPORT + "model = DDP(net)\nfor i, x in enumerate(items):\n    if i % world_size != rank:\n"
                           "        continue\n    model(x)\n"),
        # The helper's collective runs only behind a flag the caller controls.
        Valid(DIST + "def run_eval(model, use_fsdp):\n    if use_fsdp:\n        dist.broadcast(sig, src=0)\n"
                     "    return model(x)\nif rank == 0:\n    run_eval(m, False)\n"),
        Valid(DIST + "n_tokens = cfg.num_tokens_per_dp_rank\nif n_tokens % 8 != 0:\n    raise ValueError(n_tokens)\n"
                     "dist.barrier()\n"),
        # The helper's collectives are themselves rank-balanced.
        Valid(DIST + "def zero_first(rank):\n    if rank not in [-1, 0]:\n        dist.barrier()\n"
                     "    if rank == 0:\n        dist.barrier()\ndef build(rank):\n    zero_first(rank)\n"
                     "if rank in {-1, 0}:\n    build(-1)\n"),
        Valid("import torch\nif rank == 0:\n    torch.save(model.state_dict(), 'm.pt')\n"),
        # Not an FSDP model in the arm where ``isinstance(model, FSDP)`` is false.
        Valid(FSDP_IMPORT + "model = FSDP(net) if cfg.fsdp else net\nif rank == 0:\n"
                            "    if not isinstance(model, FSDP):\n        sd = model.state_dict()\n"),
        Valid(FSDP_IMPORT + "model = FSDP(net) if cfg.fsdp else net\n"
                            "if rank == 0 and not isinstance(model, FSDP):\n    sd = model.state_dict()\n"),
        # A DDP over a subgroup, run by exactly the members of that subgroup.
        Valid(DDP_IMPORT + "grp = dist.new_group(list(range(n)))\nmodel = DDP(net, process_group=grp)\n"
                           "if rank < n:\n    out = model(x)\n"),
        # The same collective on the other arm, through a function of this module.
        Valid(DIST + "def receive(buf):\n    dist.broadcast(buf, src=0)\n    return buf\n"
                     "if rank == 0:\n    dist.broadcast(t, src=0)\nelse:\n    receive(t)\n"),
        # The same function on both arms.
        Valid(DDP_IMPORT + "def fit(args, trial=None):\n    model = DDP(Net().cuda())\n    for x in loader:\n"
                         "        model(x).sum().backward()\n    return 0.0\n"
                         "def search(args):\n    for t in range(8):\n        fit(args, trial=t)\n"
                         "if rank == 0:\n    fit(args, trial=None)\nelse:\n    fit(args)\n"),
        # Subgroup collectives guarded by membership, a rank range or a shared coordinate.
        Valid(DIST + "if rank in dist.get_process_group_ranks(g):\n    dist.all_reduce(x, group=g)\n"),
        Valid(DIST + "for start in range(0, world, size):\n    if start <= rank < start + size:\n"
                     "        dist.all_reduce(x, group=groups[start // size])\n"),
        Valid(DIST + "if tp_rank == 0:\n    dist.broadcast(x, src, group=dp_group)\n"),
        Valid(DIST + "if pp_rank == 0:\n    dist.all_reduce(x, dist.ReduceOp.SUM, embedding_group)\n"),
        # ... also through a predicate of this module that tests such a coordinate.
        Valid(DIST + "def counts_tokens(grid):\n    if grid is None:\n        return False\n"
                     "    return is_last_stage(grid.pipe) and dist.get_rank(group=grid.tensor) == 0\n"
                     "def total_tokens(n, grid):\n    if counts_tokens(grid):\n"
                     "        dist.all_reduce(n, group=grid.data)\n    return n\n"),
        # A method that runs collectives over the group it is given, for the members of that grid.
        Valid(DIST + "class Stages:\n    def owns(self, grid):\n"
                     "        return grid.first <= self.rank < grid.first + grid.size\n"
                     "    def sync(self):\n        for part, grid, pgs in self.parts:\n"
                     "            if part is not None and self.owns(grid):\n"
                     "                reduce_grads([part], pg_collection=pgs)\n"
                     "def reduce_grads(parts, pg_collection):\n"
                     "    for p in parts:\n        dist.all_reduce(p.grad, group=pg_collection.dp)\n"),
        # Main process first: every rank passes exactly one barrier (through a helper).
        Valid(DIST + "import contextlib\ndef wait_for_everyone():\n    dist.barrier()\n"
                     "@contextlib.contextmanager\ndef main_process_first(leader):\n    if not leader:\n"
                     "        wait_for_everyone()\n    yield\n    if leader:\n        wait_for_everyone()\n"
                     "leader = dist.get_rank() == 0\n"),
        # A function object is always true (RULES.md, Clarifications).
        Valid(DIST + "from utils import is_main_process\nif is_main_process:\n    dist.barrier()\n"),
        # The evaluation helper's body is visible and runs no forward; the inner model.
        Valid(DDP_IMPORT + "def test_model(m):\n    print(m)\nmodel = DDP(net)\nif rank == 0:\n"
                           "    test_model(model)\n"),
        Valid(DDP_IMPORT + "from engine import run_validation\nmodel = DDP(net)\nif rank == 0:\n"
                           "    run_validation(model.module, val_loader)\n"),
        # The helper's collective runs only when the caller asks for it (here: it does not).
        Valid(DIST + "import time\ndef now(do_broadcast=True):\n"
                     "    if not do_broadcast or not dist.is_initialized():\n        return time.time()\n"
                     "    t = torch.tensor([time.time()])\n    dist.broadcast(t, src=0)\n    return t.item()\n"
                     "if rank == 0:\n    start = now(do_broadcast=False)\n"),
        Valid(DIST + "def log_progress(msg, barrier=True):\n    if barrier and dist.is_initialized():\n"
                     "        dist.barrier()\n    print(msg)\nif dist.get_rank() == 0:\n"
                     "    log_progress('saved', barrier=False)\n"),
        # Every rank consolidates the optimizer shards; rank 0 alone writes them.
        Valid(DIST + "from torch.distributed.optim import ZeroRedundancyOptimizer\n"
                     "opt = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.SGD, lr=0.1)\n"
                     "opt.consolidate_state_dict(to=0)\nif rank == 0:\n"
                     "    torch.save(opt.state_dict(), 'opt.pt')\n"),
        # A closure that unwraps the DDP model before its forward (``model.module``),
        # calling ``model(x)`` only when there is no wrapper.
        Valid(DDP_IMPORT + "def worker(rank, net, loader):\n    def check(batches):\n"
                           "        out = 0.0\n        for b in batches:\n            if hasattr(model, 'module'):\n"
                           "                out += float(model.module(b).sum())\n            else:\n"
                           "                out += float(model(b).sum())\n        return out\n"
                           "    model = DDP(net.cuda(rank), device_ids=[rank])\n"
                           "    for b in loader:\n        model(b).mean().backward()\n"
                           "    if rank == 0:\n        print(check(loader))\n"),
        # A closure over the unwrapped network, run on rank 0 only.
        Valid(DDP_IMPORT + "def run(rank, net, batches):\n    def score(b):\n        return net(b).mean()\n"
                           "    ddp = DDP(net)\n    if rank == 0:\n        print(score(batches[0]))\n"),
        # An evaluation-named project function that hands the model only to a counter (not a run).
        Valid(DDP_IMPORT + "def evaluate_size(model):\n    tally = Tally()\n    return tally.count(model)\n"
                           "model = DDP(net)\nif rank == 0:\n    print(evaluate_size(model))\n"),
        # The rank test also encloses the wrap: the ranks that own the model run it.
        Valid(DDP_IMPORT + "if rank in trainers:\n    model = DDP(net, process_group=pg)\n    out = model(x)\n"),
        # The same index filled with a device number that is not a rank: not a rank test.
        Valid(DIST + "import os\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n" + """\
class Renderer:
    def __init__(self, **opts):
        self.dev_idx = opts["dev_idx"]
        self.field = DDP(build_field().cuda(self.dev_idx), device_ids=[self.dev_idx])

    def fit(self, rays, show):
        for r in rays:
            self.field(r).mean().backward()
            if self.dev_idx == 0 and show:
                preview = self.field(r[:64])
                save_image(preview)

if __name__ == "__main__":
    dist.init_process_group("nccl")
    Renderer(dev_idx=args.device_number).fit(load_rays(), True)
"""),
        # A method of the model's holder that runs the stored DDP model, given the
        # unwrapped model or calling ``.module``: no DDP forward.
        Valid(DDP_IMPORT + "class Runner:\n    def __init__(self, net, rank):\n        self.net = net\n"
                          "        self.rank = rank\n    def validate(self, batches):\n"
                          "        with torch.no_grad():\n"
                          "            return [self.net.module(b) for b in batches]\n"
                          "    def fit(self, batches):\n        if self.rank == 0:\n"
                          "            print(self.validate(batches))\ndef main(rank):\n"
                          "    Runner(DDP(Net().cuda(rank), device_ids=[rank]), rank).fit(load())\n"),
        Valid(DDP_IMPORT + "class Runner:\n    def __init__(self, net, rank):\n        self.net = net\n"
                          "        self.rank = rank\n    def validate(self, batches):\n"
                          "        return [self.net(b) for b in batches]\n    def fit(self, batches):\n"
                          "        if self.rank == 0:\n            print(self.validate(batches))\n"
                          "def main(rank):\n    net = Net().cuda(rank)\n"
                          "    ddp = DDP(net, device_ids=[rank])\n    Runner(net, rank).fit(load())\n"),
        # A builder that wraps only for a rank >= 0, called with ``local_rank=-1`` (an EMA copy):
        # the plain model's forward under a rank test runs no collective (a43 fast-autoaugment).
        Valid("""\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def get_model(conf, local_rank=-1):
    model = Net(conf).cuda()
    if local_rank >= 0:
        model = DDP(model, device_ids=[local_rank])
    return model


def train(conf, local_rank, loader):
    model = get_model(conf, local_rank=local_rank)
    model_ema = get_model(conf, local_rank=-1)
    for x in loader:
        model(x).sum().backward()
    if dist.get_rank() == 0:
        evaluate = model_ema(x)
"""),
    ]
    invalid = [
        Invalid("""\
import torch
import torch.distributed as dist


class RawDataset:
    def __init__(self, config, distributed=False):
        self.distributed = distributed
        self.count = torch.tensor([len(config.files)], device="cuda")
        self._load()

    def _load(self):
        if self.distributed:
            dist.all_reduce(self.count)


def main(config):
    dist.init_process_group("nccl")
    if dist.get_rank() == 0:
        total = RawDataset(config, distributed=True)
""", line=19, column=17),
        Invalid("""\
import torch
import torch.distributed as dist


class Logger:
    def _average(self, loss):
        t = torch.tensor([loss], device="cuda")
        dist.all_reduce(t)
        return t.item() / dist.get_world_size()

    def log_step(self, step, loss, reduce=True):
        value = self._average(loss) if reduce else float(loss)
        print(step, value)


def train(model, loader, rank, world_size):
    logger = Logger()
    for step, batch in enumerate(loader):
        loss = model(batch).mean()
        loss.backward()
        if rank == world_size - 1:
            logger.log_step(step, loss.item(), reduce=True)
""", line=22, column=13),
        # The constructor wraps first, then rank 0 alone runs the summary forward on the DDP model.
        Invalid(SUMMARY_IN_CONSTRUCTOR.format(before=WRAP_G, after=SUMMARY_ON_RANK_ZERO), line=16, column=13),
        # "Not launched by torchrun, or rank 0": in a distributed run, rank 0 only (PersonReID).
        Invalid(DDP_IMPORT + """\
import os
def fit(net, loader, evaluate):
    model = DDP(net)
    for epoch in range(10):
        if "RANK" not in os.environ or int(os.environ["RANK"]) == 0:
            evaluate(model(loader))
""", line=9, column=22),
        # A method that runs the stored DDP model through a local alias (rq-vae's reconstruct).
        Invalid(DDP_IMPORT + """\
class Trainer:
    def __init__(self, net, ema):
        self.model = DDP(net)
        self.model_ema = ema

    def reconstruct(self, xs, mode):
        model = self.model_ema if "ema" in mode else self.model
        return model(xs)

    def evaluate(self, xs):
        if dist.get_rank() == 0:
            self.reconstruct(xs, "valid")
""", line=15, column=13),
        # A strategy switch may make the model FSDP: its state_dict() after the rank-0 return is a
        # collective (JayDS22's trainer).
        Invalid(STRATEGY_SWITCH + """\

    def save(self, path):
        if dist.get_rank() != 0:
            return
        torch.save(self.model.state_dict(), path)
""", line=20, column=20),
        # ``convert_sync_batchnorm`` hands back the module it was given: still the DDP model (a56 sewformer).
        Invalid(DIST + "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                       "model = DDP(net.cuda(), device_ids=[local_rank])\n"
                       "model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)\n"
                       "if dist.get_rank() == 0:\n    preds = model(batch)\n", line=7, column=13),
        # ... the same copy built with the process's own rank is a DDP model.
        Invalid("""\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def get_model(conf, local_rank=-1):
    model = Net(conf).cuda()
    if local_rank >= 0:
        model = DDP(model, device_ids=[local_rank])
    return model


def train(conf, local_rank, loader):
    model = get_model(conf, local_rank=local_rank)
    model_ema = get_model(conf, local_rank=local_rank)
    for x in loader:
        model(x).sum().backward()
    if dist.get_rank() == 0:
        evaluate = model_ema(x)
""", line=19, column=20),
        # A rank passed by keyword into **opts and kept on self: the forward runs on local rank 0 only.
        Invalid(DIST + "import os\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n" + """\
class Renderer:
    def __init__(self, **opts):
        self.dev_idx = opts["dev_idx"]
        self.field = DDP(build_field().cuda(self.dev_idx), device_ids=[self.dev_idx])

    def fit(self, rays, show):
        for r in rays:
            self.field(r).mean().backward()
            if self.dev_idx == 0 and show:
                preview = self.field(r[:64])
                save_image(preview)

if __name__ == "__main__":
    dist.init_process_group("nccl")
    Renderer(dev_idx=int(os.environ["LOCAL_RANK"])).fit(load_rays(), True)
""", line=14, column=27),
        Invalid(DIST + "if dist.get_rank() == 0:\n    dist.barrier()\n", line=4, column=5),
        Invalid(DIST + "def is_main_process():\n    return dist.get_rank() == 0\n"
                       "if is_main_process():\n    dist.all_reduce(loss)\n", line=6, column=5),
        Invalid(DIST + "def log(t, rank):\n    if rank != 0:\n        return\n"
                       "    dist.all_gather_object(out, t)\n", line=6, column=5),
        Invalid(DDP_IMPORT + "model = DDP(net)\nif args.rank % ngpus == 0:\n    out = model(x)\n",
                line=6, column=11),
        Invalid(DDP_IMPORT + "def evaluate(net, loader):\n    for x in loader:\n        net(x)\n"
                             "model = DDP(net)\nif rank == 0:\n    evaluate(model, loader)\n", line=9, column=5),
        Invalid(DIST + "import os\ndef sync(t):\n    dist.all_reduce(t)\n    return t\n"
                       "master_process = int(os.environ['RANK']) == 0\n"
                       "if master_process:\n    sync(loss)\n", line=9, column=5),
        Invalid(FSDP_IMPORT + "model = FSDP(net)\nif rank == 0:\n    sd = model.state_dict()\n",
                line=6, column=10),
        Invalid(FSDP_IMPORT + "model = FSDP(net)\nif local_rank in [-1, 0]:\n"
                              "    osd = FSDP.full_optim_state_dict(model, optim)\n", line=6, column=11),
        Invalid(DIST + "import torch.distributed.checkpoint as dcp\nif is_main_process():\n"
                       "    dcp.save(state, checkpoint_id=path)\n", line=5, column=5),
        Invalid(DIST + "value = dist.all_reduce(t) if rank == 0 else None\n", line=3, column=9),
        Invalid(DDP_IMPORT + "model = DDP(net)\nif ddp:\n    master_process = ddp_rank == 0\nelse:\n"
                             "    master_process = True\nif master_process:\n    with torch.no_grad():\n"
                             "        loss = model(x)\n", line=11, column=16),
        Invalid(DDP_IMPORT + "@torch.no_grad()\ndef estimate_loss():\n    return model(x).mean()\n"
                             "model = DDP(net)\nmaster_process = ddp_rank == 0\n"
                             "for it in range(100):\n    if it % 10 == 0 and master_process:\n"
                             "        losses = estimate_loss()\n", line=11, column=18),
        # The same, called from inside a function (the training loop of ``train()``), the model
        # wrapped under ``if ddp:`` at module level; and a helper evaluating a global wrapped net.
        Invalid(DDP_IMPORT + "model = build()\nif ddp:\n    model = DDP(model)\n"
                             "master_process = ddp_rank == 0\n@torch.no_grad()\ndef estimate_loss():\n"
                             "    return model(x).mean()\ndef train():\n    for it in range(100):\n"
                             "        if it % 10 == 0 and master_process:\n            losses = estimate_loss()\n"
                             "train()\n", line=14, column=22),
        Invalid(DDP_IMPORT + "net = DDP(Net().cuda())\ndef evaluate(loader):\n    for x, y in loader:\n"
                             "        out = net(x)\ndef main(loader):\n    for ep in range(9):\n"
                             "        if dist.get_rank() == 0:\n            evaluate(loader)\n", line=11, column=13),
        # ... but used under the flag that wraps it, or with another, unconditional wrap of it.
        Invalid(FSDP_IMPORT + "class Trainer:\n    def __init__(self, net, cfg):\n        self.use_fsdp = cfg.fsdp\n"
                              "        if self.use_fsdp:\n            self.model = FSDP(net)\n        else:\n"
                              "            self.model = net.cuda()\n    def save(self, path):\n"
                              "        if dist.get_rank() == 0:\n            if self.use_fsdp:\n"
                              "                torch.save(self.model.state_dict(), path)\n", line=14, column=28),
        Invalid(FSDP_IMPORT + "class Trainer:\n    def __init__(self, net, cfg):\n        self.use_fsdp = cfg.fsdp\n"
                              "        if self.use_fsdp:\n            self.model = FSDP(net)\n        else:\n"
                              "            self.model = net.cuda()\n    def reshard(self):\n"
                              "        self.model = FSDP(self.model)\n    def save(self, path):\n"
                              "        if dist.get_rank() == 0 and not self.use_fsdp:\n"
                              "            torch.save(self.model.state_dict(), path)\n", line=15, column=24),
        Invalid(DIST + "def log_metrics(distributed, rank):\n    if distributed and rank != 0:\n        return\n"
                       "    dist.barrier()\n", line=6, column=5),
        # An evaluation function whose body is not visible, handed the DDP model.
        Invalid(DDP_IMPORT + "from engine import run_validation\nmodel = DDP(net)\nif rank == 0:\n"
                             "    acc = run_validation(model, val_loader)\n", line=7, column=11),
        # An evaluation function of the project that hands the model to a pipeline whose class
        # is chosen by name (not visible): as for a library's evaluation function.
        Invalid(DDP_IMPORT + "def benchmark_on(name, model):\n    suite = registry[name]()\n"
                             "    return suite.run(model=model)\nmodel = DDP(net)\nfor epoch in range(3):\n"
                             "    if rank == 0:\n        benchmark_on('val', model.eval())\n", line=10, column=9),
        # A function of the project that ends in a barrier, called on the main rank only.
        Invalid(DIST + "def save_all(model, path):\n    torch.save(model.module.state_dict(), path)\n"
                       "    dist.barrier()\nif dist.get_rank() == 0:\n    save_all(model, path)\n",
                line=7, column=5),
        Invalid(DIST + "class Trainer:\n    def checkpoint(self):\n        torch.save(self.state, self.path)\n"
                       "        dist.barrier()\n    def fit(self):\n        if self.rank == 0:\n"
                       "            self.checkpoint()\n", line=9, column=13),
        # FSDP state_dict() on the arm where the model IS the FSDP model.
        Invalid(FSDP_IMPORT + "model = FSDP(net) if cfg.fsdp else net\nif rank == 0:\n"
                              "    if isinstance(model, FSDP):\n        sd = model.state_dict()\n",
                line=7, column=14),
        # A collective over a group that rank 0 alone enters (the group has other members).
        # A helper given a group, under a test that singles out the main rank.
        Invalid(DIST + "def reduce_grads(parts, pg_collection):\n    for p in parts:\n"
                       "        dist.all_reduce(p.grad, group=pg_collection.dp)\n"
                       "if dist.get_rank() == 0:\n    reduce_grads(parts, pg_collection=pgs)\n", line=7, column=5),
        # Rank 0 runs a hyper-parameter search (fit() eight times: it builds a DDP model, which is
        # collective), the other ranks fit() once: the arms share no collective.
        Invalid(DDP_IMPORT + "def fit(args, trial=None):\n    model = DDP(Net().cuda())\n    for x in loader:\n"
                         "        model(x).sum().backward()\n    return 0.0\n"
                         "def search(args):\n    for t in range(8):\n        fit(args, trial=t)\n"
                         "if rank == 0:\n    search(args)\nelse:\n    fit(args)\n", line=13, column=5),
        # A predicate that singles out the main rank does not select a subgroup's members.
        Invalid(DIST + "def is_leader():\n    return dist.get_rank() == 0\n"
                       "if is_leader():\n    dist.all_reduce(x, group=grp)\n", line=6, column=5),
        Invalid(DIST + "g = dist.new_group(list(range(world_size)))\nif rank == 0:\n"
                       "    dist.monitored_barrier(group=g, wait_all_ranks=True)\n", line=5, column=5),
        Invalid(DIST + "def step(rank, world_size, group):\n    if rank == world_size - 1:\n        return\n"
                       "    dist.all_reduce(t, group=group)\n", line=6, column=5),
        # A closure over a name rebound to the DDP model before the rank-0 call.
        Invalid(DDP_IMPORT + "def worker(rank, net, loader):\n    def check(batches):\n"
                             "        return sum(float(model(b).sum()) for b in batches)\n"
                             "    model = net.cuda(rank)\n    model = DDP(model, device_ids=[rank])\n"
                             "    for b in loader:\n        model(b).mean().backward()\n"
                             "    if rank == 0:\n        print(check(loader))\n", line=12, column=15),
        # ZeroRedundancyOptimizer.consolidate_state_dict gathers every rank's shard.
        Invalid(DIST + "from torch.distributed.optim import ZeroRedundancyOptimizer\n"
                       "opt = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW)\n"
                       "if dist.get_rank() == 0:\n    opt.consolidate_state_dict(to=0)\n"
                       "    torch.save(opt.state_dict(), 'opt.pt')\n", line=6, column=5),
        # A call that runs only without distributed training (``local_rank == -1 and
        # ...``) is no peer of the rank-0 call.
        Invalid(DIST + "def validate(cfg, net, data):\n    return [net(x) for x in data]\n"
                       "def fit(cfg, net, data):\n    for epoch in range(cfg.epochs):\n"
                       "        if cfg.local_rank == -1 and cfg.eval_each_step:\n            validate(cfg, net, data)\n"
                       "        if cfg.local_rank in [-1, 0]:\n            validate(cfg, net, data)\n"
                       "def main(cfg):\n    net = torch.nn.parallel.DistributedDataParallel(build(cfg))\n"
                       "    fit(cfg, net, load(cfg))\n", line=10, column=13),
        # A DDP forward on rank 0 only (buffers broadcast by rank 0 alone: may hang).
        Invalid(DDP_IMPORT + "model = DDP(net)\nif rank == 0:\n    with torch.no_grad():\n"
                             "        preds = model(batch)\n", line=7, column=17),
        # A method of the class that runs the DDP model it stores (``self.net = net``, given
        # ``DDP(...)``), called under a rank test: itself, on an instance, through ``self`` helpers.
        Invalid(DDP_IMPORT + "class Runner:\n    def __init__(self, net, rank):\n        self.net = net\n"
                            "        self.rank = rank\n    def validate(self, batches):\n"
                            "        with torch.no_grad():\n"
                            "            return [self.net(b) for b in batches]\n    def fit(self, batches):\n"
                            "        for b in batches:\n            self.net(b).sum().backward()\n"
                            "        if self.rank == 0:\n            print(self.validate(batches))\n"
                            "def main(rank):\n"
                            "    Runner(DDP(Net().cuda(rank), device_ids=[rank]), rank).fit(load())\n", line=15, column=19),
        Invalid(DDP_IMPORT + "class Learner:\n    def __init__(self, network, optimizer):\n"
                            "        self.network = network\n        self.optimizer = optimizer\n"
                            "    def infer(self, x):\n        return self.network(x).argmax(-1)\n"
                            "def run(rank, data):\n    net = DDP(Net().cuda(rank), device_ids=[rank])\n"
                            "    learner = Learner(net, torch.optim.SGD(net.parameters(), lr=0.1))\n"
                            "    if dist.get_rank() == 0:\n        preds = [learner.infer(x) for x in data]\n", line=14, column=18),
        Invalid(DDP_IMPORT + "class Engine:\n    def __init__(self, cfg, model):\n        self.cfg = cfg\n"
                            "        self.model = DDP(model.cuda(), device_ids=[cfg.gpu])\n"
                            "    def _score(self, batch):\n        return self.model(batch).mean()\n"
                            "    def report(self, loader):\n"
                            "        return sum(self._score(b) for b in loader)\n"
                            "    def loop(self, loader):\n        for epoch in range(self.cfg.epochs):\n"
                            "            if not is_main_process():\n                continue\n"
                            "            print(self.report(loader))\n", line=16, column=19),
    ]

    def screen(self, sketch):
        """The screen: a rank test (or a call of a project rank predicate), and
        a collective, a wrap here, or (project) a call reaching a collective or
        a forward, or a model wrapped elsewhere."""
        kinds = ()
        if not sketch.rankish():
            kinds += ("rank_predicate",)
        if not sketch.may_call(*COLLECTIVES, *COLLECTIVE_STATE_DICT, "torch.nn.parallel.DistributedDataParallel",
                               "torch.distributed.fsdp.FullyShardedDataParallel", *_SHARDED_OPTIMIZERS):
            kinds += ("collective|wrapped",)
        return kinds or True

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        reported: set[int] = set()  # rank tests with a report in their first arm
        for site in index.calls:
            what = self._reaches(index, site)
            if what is None:
                continue
            description, consequence = what
            guards = [g for g in rank_guards(index, site.node) if guard_restricts(index, g)
                      and not tests_subgroup_rank(g.node.test)]  # a group's rank: which ranks is not known
            if not guards or _issued_on_every_branch(index, site, guards):
                continue
            if _in_single_process_comparison_arm(index, site.node):
                continue  # ``if args.local_rank == -1: evaluate(...)`` inside the rank test: no peers (a116 albert)
            if _group_scoped(index, site) and all(selects_group_members(index, g.node.test) for g in guards):
                continue  # a subgroup collective: the guard selects the group's members
            if all(guard_encloses_wrap(index, g, site.node) for g in guards):
                continue  # the ranks that own the wrapped model are the ranks that run it
            if guards[0].branch == "orelse" and id(guards[0].node) in reported:
                continue  # the two arms disagree: one report, in the first arm
            reported.add(id(guards[0].node))
            yield self.report(site.node, f"{description} under a rank condition: {consequence}")

    def _reaches(self, index: SemanticIndex, site: CallSite) -> Optional[tuple[str, str]]:
        """What the call is, when it is collective: (a description, the
        consequence), else None."""
        qualified = site.qualified_name or ""
        if qualified in COLLECTIVES or qualified in COLLECTIVE_STATE_DICT:
            return f"collective {qualified.rsplit('.', 1)[-1]}()", HANGS
        if site.method == "consolidate_state_dict" and site.receiver is not None \
                and _sharded_optimizer(index, site.receiver):
            return "collective consolidate_state_dict() (gathers the optimizer shards from every rank)", HANGS
        if site.method == "state_dict" and site.receiver is not None \
                and may_hold_wrap(index, site.receiver, site.order, "fsdp"):
            return "FSDP state_dict() (all-gathers parameters)", HANGS
        if isinstance(site.node.func, (cst.Name, cst.Attribute)) and qualified == "":
            kind = wrapped_kind(index, site.node.func, site.order)
            if kind == "ddp":
                return "forward of a DDP model (broadcasts buffers)", DESYNC
            if kind == "fsdp":
                return "forward of an FSDP model (all-gathers parameters)", HANGS
        callee = dotted_name(site.node.func)
        if callee is None:
            return None
        closure = _closure_forward(index, site)
        if closure:
            return f"call of {callee}(), which runs a forward of a wrapped model,", \
                DESYNC if closure == "ddp" else HANGS
        project = project_of(index)
        slots = wrapped_slots(index, site)
        judged = project_callee(index, site.node) or callee
        reached = project.call_reaches(index.path, judged, index.imports, slots, judged_call_fact(site, judged))
        if reached == "collective":
            return f"call of {callee}(), which issues a collective,", HANGS
        if reached == "forward":
            return f"call of {callee}(), which runs a forward of a wrapped model,", DESYNC
        if isinstance(site.node.func, cst.Attribute):
            # A method of the instance's class that runs ``self.net(x)``, where the
            # class stores a wrapped model (``self.evaluate()``, ``learner.predict(x)``).
            kind = project.attribute_forward(index.path, project_callee(index, site.node) or callee, index.imports)
            if kind:
                return f"call of {callee}(), which runs a forward of a wrapped model,", \
                    DESYNC if kind == "ddp" else HANGS
        if slots and _evaluation_name(callee) \
                and project.hands_on_wrapped(index.path, project_callee(index, site.node) or callee, index.imports, slots):
            # A project function that hands the model on to ``pipeline.run(model=model)`` of an
            # object whose class is not visible: as for an evaluation function of another library.
            return f"call of {callee}() with a wrapped model (evaluation runs its forward)", DESYNC
        if slots and _evaluation_name(callee) and not qualified.startswith(_NOT_EVALUATION) \
                and project.resolve_function(index.path, project_callee(index, site.node) or callee, index.imports) is None \
                and not helper_functions(index, site):
            # The body is not visible (another library, an object of unknown class):
            # the name says it evaluates the wrapped model it is given.
            return f"call of {callee}() with a wrapped model (evaluation runs its forward)", DESYNC
        return None


HANGS = "the other ranks never join it and the job hangs"
DESYNC = "the other ranks do not run it, so the job may hang or desynchronise"
_EVALUATION = re.compile(r"(^|_)(eval|evaluate|evaluation|validate|validation|valid|val|test|infer|inference|"
                         r"predict|benchmark)(_|$)", re.IGNORECASE)
# Callees that never run the model's forward: saving, logging, torch itself.
_NOT_EVALUATION = ("torch.", "os.", "copy.", "logging.", "wandb.", "json.", "pickle.")


def _evaluation_name(callee: str) -> bool:
    last = callee.split(".")[-1]
    words = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", last)
    return bool(_EVALUATION.search(words)) and "save" not in last.lower() and "log" not in last.lower()


def _in_single_process_comparison_arm(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """Is ``node`` in the arm of a comparison that holds only in a run no launcher started
    (``if args.local_rank == -1:``, ``if world_size == 1:``)? That code has no peers. (A plain
    flag such as ``not self.use_fsdp`` is not enough: a later re-wrap may still reach it.)"""
    child: cst.CSTNode = node
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
            return False
        if isinstance(ancestor, cst.If) and isinstance(ancestor.test, cst.Comparison):
            polarity = comparison_polarity(ancestor.test)
            if (child is ancestor.body and polarity is False) or (child is ancestor.orelse and polarity is True):
                return True
        child = ancestor
    return False


def _issued_on_every_branch(index: SemanticIndex, site: CallSite, guards: list[Guard]) -> bool:
    """The same collective also issued on the other side of a rank test in this
    function: the ``else`` branch (directly or through a function of this
    module), or the main-process-first idiom (``if not leader: barrier()`` ...
    ``if leader: barrier()``, also through a helper such as ``wait_for_everyone()``)."""
    mine = _collectives_of(index, site)
    if not mine:
        return False
    own = {id(g.node) for g in guards}
    mine_zero = _rank_zero_only(index, guards)
    for other in calls_in_function(index, site.scope):
        if other is site or not (_collectives_of(index, other) & mine):
            continue
        other_guards = rank_guards(index, other.node)
        if not other_guards:
            continue
        if in_single_process_branch(index, other.node):
            continue  # runs only without distributed training: no peer of this call
        if mine_zero and _rank_zero_only(index, other_guards):
            continue  # rank 0 runs both: the other ranks still run neither
        if {id(g.node) for g in other_guards} != own:
            return True
        if [g.branch for g in other_guards] != [g.branch for g in guards]:
            return True
    return False


# Optimizers whose ``consolidate_state_dict()`` is a collective (every rank sends its shard).
_SHARDED_OPTIMIZERS = ("torch.distributed.optim.ZeroRedundancyOptimizer",
                       "torch.distributed.optim.zero_redundancy_optimizer.ZeroRedundancyOptimizer",
                       "fairscale.optim.OSS", "fairscale.optim.oss.OSS")


def _sharded_optimizer(index: SemanticIndex, receiver: cst.BaseExpression) -> bool:
    """Does ``receiver`` hold a ZeroRedundancyOptimizer (or fairscale OSS)?"""
    return any(isinstance(value, cst.Call) and index.qualified_name(value.func) in _SHARDED_OPTIMIZERS
               for value in index.reaching_values(receiver) or ())


def _closure_forward(index: SemanticIndex, site: CallSite) -> str:
    """"ddp"/"fsdp" when the call runs a function nested in this one that
    calls, as ``model(...)``, a free name of the enclosing function which holds a
    wrapped model where the call is made (``def test(loader): model(x)`` ...
    ``model = DDP(model)`` ... ``if rank == 0: test(val_loader)``)."""
    if not isinstance(site.node.func, cst.Name):
        return ""
    for helper in helper_functions(index, site):
        if index.enclosing_scope(helper) is not site.scope:
            continue  # only closures of the calling function
        for inner in calls_in_function(index, helper):
            func = inner.node.func
            if not isinstance(func, cst.Name) or inner.qualified_name or index.bindings.get((id(helper), func.value)):
                continue
            # ``if hasattr(model, "module"): model.module(x) else: model(x)``: that
            # ``model(x)`` runs only for an unwrapped model.
            unwrapped = not_instance_of(index, func)
            for binding in index.reaching(func.value, site.node):
                if binding.kind not in ("assign", "annassign") or binding.value is None:
                    continue
                for kind, wrapper in (("ddp", DDP_NAME), ("fsdp", FSDP_NAME)):
                    if wrapper not in unwrapped and is_ddp_model(index, binding.value, site.order, (wrapper,)):
                        return kind
    return ""


def _rank_zero_only(index: SemanticIndex, guards: list[Guard]) -> bool:
    """Do these guards let rank 0 alone through (``if rank == 0``, the ``else``
    of ``if rank != 0``, after ``if rank > 0: return``)?"""
    for guard in guards:
        side = zero_side(index, guard.node.test)
        if side is True and guard.branch == "body" or side is False and guard.branch != "body":
            return True
    return False


def _collectives_of(index: SemanticIndex, site: CallSite, depth: int = 0) -> set[str]:
    """The collectives a call issues, by name: itself, or (for a function of this
    module) what its body issues; for another call on the branch itself, its
    callee as written (inside a helper's body only real collectives count: two
    arms that both ``print`` do not issue the same collective)."""
    qualified = site.qualified_name or ""
    if qualified in COLLECTIVES or qualified in COLLECTIVE_STATE_DICT:
        return {qualified}
    found: set[str] = set()
    if depth < 3:
        for helper in helper_functions(index, site):
            for inner in calls_in_function(index, helper):
                found |= _collectives_of(index, inner, depth + 1)
    callee = dotted_name(site.node.func)
    if not found and depth == 0 and callee is not None:
        found.add("call:" + (qualified or callee))  # ``Trainer(cfg)`` imported from the project, on both arms
    return found


def _group_scoped(index: SemanticIndex, site: CallSite) -> bool:
    """A collective over a process group other than the default one
    (``group=g``), or the forward of a model wrapped with ``process_group=g``:
    a rank test around it selects the group's members (membership tests,
    ``if start <= rank < start + size:``, coordinates every member shares)."""
    qualified = site.qualified_name or ""
    if qualified in COLLECTIVES:
        group = site.keyword("group")
        position = _GROUP_POSITION.get(qualified.rsplit(".", 1)[-1])
        if group is None and position is not None:
            group = site.positional(position)
        return group is not None and not _default_group(index, group.value)
    if isinstance(site.node.func, (cst.Name, cst.Attribute)) and not qualified:
        if wrap_process_group(index, site.node.func, site.order):
            return True
    # A function that issues its collectives over the process group(s) it is
    # given (``finalize_grads([m], pg_collection=pgs)``, ``sync(x, dp_group)``).
    return any(_GROUP_KEYWORD.search(arg.keyword.value if arg.keyword is not None else dotted_name(arg.value) or "")
               and not _default_group(index, arg.value) for arg in site.node.args)


_GROUP_KEYWORD = re.compile(r"(^|_)(group|groups|pg|pgs|pg_collection|process_group)$")


def _default_group(index: SemanticIndex, expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.Name) and expr.value == "None":
        return True
    return (index.qualified_name(expr) or "").endswith(("group.WORLD", "GroupMember.WORLD"))


# Position of the ``group`` argument of each collective (torch.distributed signatures).
_GROUP_POSITION = {
    "all_reduce": 2, "broadcast": 2, "reduce": 3, "all_gather": 2, "all_gather_object": 2,
    "broadcast_object_list": 2, "gather": 3, "scatter": 3, "barrier": 0, "monitored_barrier": 0,
    "reduce_scatter": 3, "reduce_scatter_tensor": 3, "all_to_all": 2, "all_to_all_single": 4,
    "all_gather_into_tensor": 2, "gather_object": 3, "scatter_object_list": 3,
}
