"""## What it does
Flags gradient accumulation on a DDP/FSDP-wrapped model without `no_sync()`:
`backward()` runs on every micro-step while the optimizer steps only on some
(`if (i + 1) % accum_steps == 0: optimizer.step()`, an earlier
`if (i + 1) % k != 0: continue`, an inner micro-step loop followed by one
step (also in a per-step method that a loop elsewhere calls once per step), or
a per-iteration step function such as an Ignite `update`), and
nothing turns gradient synchronisation off on the non-stepping micro-steps
(`with model.no_sync():` around the accumulating backward or its forward, or
`model.require_backward_grad_sync = False`). FSDP accumulation without
`no_sync()` is the same warning. A `no_sync()` entered on an `ExitStack` counts
where it is entered: under the step's own test (`if (i + 1) % k: stack.enter_context(...)`)
it is the fix; under another test (`if i_cycle < n - 1:`, recycling passes without
grad) the pass whose loss goes backward still syncs.

Backward and step may be done by a helper: a same-module function, a
mixed-precision manager of the project (`amp.backward(loss)` then
`amp.step(model, optimizer)`), or a helper object told when to step
(MAE/ConvNeXt's `loss_scaler(loss, optimizer, update_grad=(i + 1) % k == 0)`,
also when it lives in another module). The report is at the backward call of
the accumulating iteration, once per call: in a step function of this module
that the loop calls (`self.train_in_steps()`, `optimizer_step(loss, ...,
is_update=...)`), at that function's backward (an AMP arm and a plain arm get
one report each); at the loop's call for a helper named for the backward
(`backward(loss, scaler)`, `amp.backward(loss)`) or one of another module.

A per-step function judged on its own (no loop of this module runs it
directly: `train_step()` calls `self.optimize(batch, self.model, ...,
step_optimizer=...)` and a loop elsewhere calls `train_step()`) is reported at
its backward when it steps only under an accumulation test or flag
(`if step_optimizer:`, `if global_steps % self.num_accum == 0:`); the step test
may also sit inside the helper that the loop calls (`self.step(x,
global_steps)`). A `while True:` micro-step loop that ends with a `break` is a
micro-step loop like a `for` one.

The model may be wrapped in the same function, held in `self.model` (also a
constructor parameter that a caller anywhere in the project, e.g. through
`from pkg import *`, fills with a wrapped model), passed in as a parameter by
such a caller, held under a key of a state object that this module fills with
a wrapped model (`model = state_tracker["model"]` with
`StateTracker(..., model=ddp_model)`), or handed by the loop, or by helpers
two calls down, to a call that runs its forward
(`self.diffusion.train_losses(self.model, ...)`). A subclass of DDP/FSDP
defined in the module (`class _DDP(torch.nn.parallel.DistributedDataParallel)`,
then `model = _DDP(task)`) wraps like DDP itself, and defining one puts the
module in DDP context. A parameter annotated with the wrapper class (`def
__init__(self, model: FSDP)`) holds a wrapped model, and `fully_shard(model)`
(FSDP2) earlier in the function makes `model` itself an FSDP module (its switch
is `model.set_requires_gradient_sync(False)`). A method of a project object
that stores a wrapped model (`policy = Policy(FSDP(m), ...)` then `loss =
policy.loss(x)`) runs that model's forward, and a subclass of a class that stores
one (`self.model = prepare_dp_model(self.model)` in a base worker of another module)
acts on it; a once-per-call step helper of another module
(`self._optimizer_step()`) is a step. In a GAN loop an unconditional step after
another model's backward (`loss_d.backward(); optim_d.step()`) does not step an
earlier backward whose own step waits for the accumulation test.

## Why is this bad?
DDP all-reduces every gradient bucket in every `backward()`. With `k`
accumulation steps the job sends `k` times the gradient bytes per optimizer
step, although only the sum at the last micro-step is used. On multi-node jobs
that is often the largest part of the step time.

## Example
    for i, (x, y) in enumerate(loader):
        loss = criterion(ddp_model(x), y) / accum
        loss.backward()                      # all-reduce on every micro-step
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()

## Use instead
    for i, (x, y) in enumerate(loader):
        sync = (i + 1) % accum == 0
        ctx = contextlib.nullcontext() if sync else ddp_model.no_sync()
        with ctx:
            loss = criterion(ddp_model(x), y) / accum
            loss.backward()
        if sync:
            optimizer.step()
            optimizer.zero_grad()

Not flagged: accumulation handled by a framework (`with
accelerator.accumulate(model)` or an `Accelerator`'s `accumulate`, not a
metrics object's `accumulate()`; `accelerator.no_sync`, DeepSpeed engines,
Lightning), nanoGPT's `model.require_backward_grad_sync = (micro_step == k - 1)`,
FSDP2's `set_requires_gradient_sync`, forwards through `model.module(x)` on the
non-final micro-steps, the syncing iteration's own backward (`if step % k == 0:
loss.backward() else: with model.no_sync(): loss.backward()`), a caller that
runs the per-step function inside `no_sync()`, backwards stepped later in
their own block on every run (a GAN discriminator's two backwards then its
step, while the generator steps every k iterations), `no_sync` contexts chosen at run time
(`ctx = model.no_sync if ... else nullcontext`), helpers told to step on every
call (`update_grad=True`), models not known to be wrapped (`self.model` of a class is
the one its own class, its subclasses and their bases assign, not a sibling class's
`self.model = DDP(...)`). A `no_sync()` that
encloses other code only (an evaluation pass) does not count, nor one chosen
only under `isinstance(model, FSDP)` when the model may be a DDP model, nor a
`no_sync()` or `accelerator.accumulate(model)` on the other arm of an `if`
(`if args.fp16: amp backward else: with model.no_sync(): ...`). A helper's
backward on the arm that the loop's call switches off with a literal argument
(`self.one_step(mb, True)` where the helper runs `if generator_turn: ...;
return` before the critic's backward) is not that loop's backward.

## References
- https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html#torch.nn.parallel.DistributedDataParallel.no_sync
- https://huggingface.co/docs/accelerate/concept_guides/gradient_synchronization
"""

from __future__ import annotations

import re
from typing import Iterator, Optional

import libcst as cst

from ddplint.analysis import flow, models
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import SemanticIndex, dotted_name
from ddplint.analysis.values import SELF_RETURNING_METHODS, literal_int

DDP = """\
import contextlib
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
"""

ACCUMULATION_WORDS = ("accum", "update", "sync", "should_step", "do_step", "step_optim", "is_last",
                      "last_step", "micro", "boundary", "optimizer_step", "take_step",
                      "grad_interval", "gradient_interval")


class MissingNoSyncAccumulation(Rule):
    code, name, severity = "DDP002", "missing-no-sync-accumulation", "warning"
    message = ("gradient accumulation without no_sync(): DDP all-reduces the gradients on every "
               "micro-step, not once per optimizer step")
    # A backward, or a helper object told when to step (MAE's ``update_grad=``).
    triggers = ("backward", "update_grad", "do_step", "should_step", "optimizer_step", "take_step")
    needs_ddp_context = True

    valid = [
        # StyleGAN2's lazy regularisation: every regulariser's backward is stepped in the same
        # test's block, right after it (a113 StyleGAN2_Pytorch).
        Valid("""\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def train(g, d, loader, g_optim, d_optim, d_reg_every, g_reg_every, rank):
    g, d = DDP(g, device_ids=[rank]), DDP(d, device_ids=[rank])
    for i, real in enumerate(loader):
        d_loss = d(g(torch.randn(8, 512)).detach()).mean() - d(real).mean()
        d.zero_grad()
        d_loss.backward()
        d_optim.step()
        if i % d_reg_every == 0:
            d.zero_grad()
            r1 = d(real.requires_grad_()).pow(2).mean()
            r1.backward()
            d_optim.step()
        g_loss = -d(g(torch.randn(8, 512))).mean()
        g.zero_grad()
        g_loss.backward()
        g_optim.step()
        if i % g_reg_every == 0:
            g.zero_grad()
            path = g(torch.randn(4, 512)).pow(2).mean()
            path.backward()
            g_optim.step()
"""),
        # ``no_sync()`` entered on an ExitStack on the iterations that do not step: done right.
        Valid("""\
from contextlib import ExitStack
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train(net, loader, opt, k):
    model = DDP(net)
    for i, batch in enumerate(loader):
        with ExitStack() as stack:
            if (i + 1) % k != 0:
                stack.enter_context(model.no_sync())
            loss = model(batch).mean()
            loss.backward()
        if (i + 1) % k == 0:
            opt.step()
            opt.zero_grad()
"""),
        # ``self.model`` of a sibling class: the DDP strategy wraps its own model; the local-SGD
        # strategy's is never wrapped and is all-reduced by hand (a95 Pseudo-Asynchronous-LocalSGD).
        Valid("import torch\nimport torch.distributed as dist\nimport torch.nn as nn\n"
              "class BaseAlgorithm:\n    def __init__(self, model, optimizer, accumulation):\n"
              "        self.model = model.cuda()\n        self.optimizer = optimizer\n"
              "        self.accumulation = accumulation\nclass DDP(BaseAlgorithm):\n"
              "    def __init__(self, model, optimizer, accumulation):\n"
              "        super().__init__(model, optimizer, accumulation)\n"
              "        self.model = nn.parallel.DistributedDataParallel(self.model)\n"
              "class LocalSGD(BaseAlgorithm):\n    def average_gradients(self):\n"
              "        for p in self.model.parameters():\n            dist.all_reduce(p.grad)\n"
              "    def train(self, loader):\n        for step, (image, target) in enumerate(loader):\n"
              "            loss = self.model(image).mean() / self.accumulation\n            loss.backward()\n"
              "            if (step + 1) % self.accumulation == 0:\n                self.average_gradients()\n"
              "                self.optimizer.step()\n                self.optimizer.zero_grad()\n"),
        # FSDP2 sharded in place, the sync switched off on the accumulating steps.
        Valid("""\
import torch
from torch.distributed.fsdp import fully_shard

fully_shard(model)
for step, (x, y) in enumerate(loader):
    model.set_requires_gradient_sync(step % k == k - 1)
    loss = model(x, y)
    loss.backward()
    if step % k == k - 1:
        opt.step()
        opt.zero_grad()
"""),
        # The same sync choice written once per input mode, around a step helper that steps
        # only on the syncing iteration: the no_sync arm covers the accumulating ones.
        Valid(DDP + "def run_epoch(model, loader, opt, k, packed):\n"
                    "    can_skip = hasattr(model, 'no_sync')\n"
                    "    for i, (x, y) in enumerate(loader):\n        last = (i + 1) % k == 0\n"
                    "        def fwd():\n            return model(x).sub(y).pow(2).mean() / k\n"
                    "        def bwd(loss):\n            loss.backward()\n            if last:\n"
                    "                opt.step()\n                opt.zero_grad()\n"
                    "        if packed:\n            x = x.flatten(1)\n"
                    "            if can_skip and not last:\n                with model.no_sync():\n"
                    "                    bwd(fwd())\n            else:\n                bwd(fwd())\n"
                    "        else:\n            if can_skip and not last:\n                with model.no_sync():\n"
                    "                    bwd(fwd())\n            else:\n                bwd(fwd())\n"
                    "def main(net, loader):\n    model = DDP(net)\n"
                    "    run_epoch(model, loader, torch.optim.SGD(model.parameters(), lr=0.1), 4, True)\n"),
        # Each helper steps right after its own backward; one helper runs every other iteration.
        Valid(DDP + "class Trainer:\n    def __init__(self, net):\n        self.ddp = DDP(net)\n"
                    "        self.opt = torch.optim.Adam(self.ddp.parameters())\n"
                    "    def main_pass(self, x):\n        self.ddp(x).mean().backward()\n"
                    "        self.opt.step()\n        self.opt.zero_grad()\n"
                    "    def aux_pass(self, x):\n        self.ddp(x, aux=True).mean().backward()\n"
                    "        self.opt.step()\n        self.opt.zero_grad()\n"
                    "    def fit(self, loader):\n        for it, x in enumerate(loader):\n            self.main_pass(x)\n"
                    "            if it % 2 == 0:\n                self.aux_pass(x)\n"),
        # ... stepping every iteration there: no accumulation.
        Valid(DDP + "class Engine:\n    def __init__(self, net):\n        self.model = DDP(net)\n"
                      "        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)\n"
                      "        self.accumulate = 4\n        self.last_step = 0\n"
                      "    def fit(self, loader):\n        for self.it, batch in enumerate(loader):\n"
                      "            self.train_step(batch)\n    def train_step(self, batch):\n"
                      "        loss = self.model(batch).mean()\n        loss.backward()\n        self.maybe_step()\n"
                      "    def maybe_step(self):\n"
                    "        self.opt.step()\n        self.opt.zero_grad()\n"),
        # ... the same epoch function given the unwrapped network (one process).
        Valid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
              "def setup(net, rank):\n    opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
              "    return opt, DDP(net, device_ids=[rank])\n"
              "def run_epoch(model, loader, opt, accum):\n    for i, (x, y) in enumerate(loader):\n"
              "        loss = model(x).sub(y).pow(2).mean() / accum\n        loss.backward()\n"
              "        if (i + 1) % accum == 0:\n            opt.step()\n            opt.zero_grad()\n"
              "def main(net, loader, rank):\n    opt, model = setup(net, rank)\n"
              "    run_epoch(net, loader, opt, 4)\n"),
        Valid(DDP + """\
model = DDP(net)
for i, (x, y) in enumerate(loader):
    sync = (i + 1) % accum == 0
    ctx = contextlib.nullcontext() if sync else model.no_sync()
    with ctx:
        loss = model(x).sum() / accum
        loss.backward()
    if sync:
        optimizer.step()
"""),
        # nanoGPT: toggle the flag before the forward.
        Valid(DDP + """\
model = DDP(model, device_ids=[local_rank])
while True:
    for micro_step in range(gradient_accumulation_steps):
        model.require_backward_grad_sync = (micro_step == gradient_accumulation_steps - 1)
        logits, loss = model(X, Y)
        loss = loss / gradient_accumulation_steps
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
"""),
        # Non-final micro-steps run the unwrapped module: no reducer hooks armed.
        Valid(DDP + """\
model = DDP(net)
for i, (x, y) in enumerate(loader):
    if (i + 1) % accum != 0:
        out = model.module(x)
    else:
        out = model(x)
    out.sum().backward()
    if (i + 1) % accum == 0:
        optimizer.step()
"""),
        Valid(DDP + """\
from accelerate import Accelerator
accelerator = Accelerator(gradient_accumulation_steps=4)
model, optimizer = accelerator.prepare(model, optimizer)
for x, y in loader:
    with accelerator.accumulate(model):
        loss = model(x).sum()
        accelerator.backward(loss)
        optimizer.step()
"""),
        # DeepSpeed engines accumulate themselves.
        Valid(DDP + """\
import deepspeed
engine, optimizer, _, _ = deepspeed.initialize(model=model, config=cfg)
for step, batch in enumerate(loader):
    loss = engine(batch)
    engine.backward(loss)
    engine.step()
"""),
        # No accumulation: step every iteration.
        Valid(DDP + """\
model = DDP(net)
for x, y in loader:
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
    if step % 100 == 0:
        scheduler.step()
"""),
        # Not a wrapped model (single-GPU fallback in a DDP script).
        Valid(DDP + """\
def train(model, loader, optimizer):
    for i, (x, y) in enumerate(loader):
        model(x).sum().backward()
        if (i + 1) % 4 == 0:
            optimizer.step()
"""),
        Valid(DDP + """\
import lightning as L
class Model(L.LightningModule):
    def training_step(self, batch, i):
        loss = self.model(batch).sum()
        loss.backward()
        if (i + 1) % 4 == 0:
            self.optimizer.step()
"""),
        # A meter's accumulate() is not Accelerate's; here no_sync is used anyway.
        Valid(DDP + """\
model = DDP(net)
for i, (x, y) in enumerate(loader):
    sync = (i + 1) % 4 == 0
    with contextlib.nullcontext() if sync else model.no_sync():
        loss = model(x).sum()
        loss.backward()
    meter.accumulate(loss.item())
    if sync:
        optimizer.step()
"""),
        # The helper object steps every iteration: no accumulation.
        Valid(DDP + """\
def train_one_epoch(model, loader, optimizer, loss_scaler):
    for step, (x, y) in enumerate(loader):
        loss = model(x).sum()
        loss_scaler(loss, optimizer, parameters=model.parameters(), update_grad=True)

train_one_epoch(DDP(net), loader, optimizer, scaler)
"""),
        # A visible helper that never runs backward is not a backward.
        Valid(DDP + """\
def log_progress(loss, optimizer, every):
    print(loss.item(), optimizer.param_groups[0]["lr"], every)

model = DDP(net)
for i, (x, y) in enumerate(loader):
    loss = model(x).sum()
    log_progress(loss, optimizer, every=(i + 1) % 10 == 0)
"""),
        # The helper's micro-steps run inside no_sync.
        Valid(DDP + """\
model = DDP(net)
for i, (x, y) in enumerate(loader):
    boundary = (i + 1) % 4 == 0
    ctx = contextlib.nullcontext() if boundary else model.no_sync()
    with ctx:
        loss = model(x).sum()
        amp_helper(loss, optimizer, do_step=boundary)
"""),
        # A per-iteration step function that steps every call.
        Valid(DDP + """\
model = DDP(net)

def update(engine, batch):
    loss = model(batch).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()
"""),
        # no_sync for the FSDP path and a plain DDP model never wrapped here: FSDP only.
        Valid(DDP + """\
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
model = FSDP(net)
for batch in loader:
    for ii in range(accum):
        ctx = model.no_sync if ii != accum - 1 else contextlib.nullcontext
        with ctx():
            model(batch[ii]).mean().backward()
    optimizer.step()
"""),
        # A nested backward helper called inside no_sync() on the accumulating steps (timm).
        Valid(DDP + """\
def train_one_epoch(model, loader, optimizer, accum_steps):
    for batch_idx, (x, y) in enumerate(loader):
        need_update = (batch_idx + 1) % accum_steps == 0

        def _backward(_loss):
            _loss.backward()
            if need_update:
                optimizer.step()

        if not need_update:
            with model.no_sync():
                _backward(model(x).sum())
        else:
            _backward(model(x).sum())

train_one_epoch(DDP(net), loader, optimizer, 4)
"""),
        # A project's own sync switch around the micro-steps (EDM's misc.ddp_sync).
        Valid(DDP + """\
from torch_utils import misc
ddp = DDP(net, device_ids=[device])
while True:
    for round_idx in range(num_accumulation_rounds):
        with misc.ddp_sync(ddp, round_idx == num_accumulation_rounds - 1):
            loss = loss_fn(net=ddp, images=next(it))
            loss.sum().backward()
    optimizer.step()
"""),
        # With a scaler the step may be `scaler.step`; here no_sync is used.
        Valid(DDP + """\
model = DDP(net)
for i, (x, y) in enumerate(loader):
    if (i + 1) % accum != 0:
        with model.no_sync():
            scaler.scale(model(x).sum()).backward()
    else:
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
"""),
        # The per-step method's micro-steps skip the sync on all but the last.
        Valid(DDP + """\
import contextlib

class GanWorker:
    def __init__(self, dis, d_opt, micro_steps):
        self.dis = DDP(dis)
        self.d_opt = d_opt
        self.micro_steps = micro_steps
    def train_discriminator(self, chunks):
        self.d_opt.zero_grad()
        for m in range(self.micro_steps):
            last = m == self.micro_steps - 1
            with contextlib.nullcontext() if last else self.dis.no_sync():
                loss = self.dis(chunks[m]).mean() / self.micro_steps
                loss.backward()
        self.d_opt.step()
"""),
        # One backward per call, one step after it: no micro-step loop.
        Valid(DDP + """\
class GanWorker:
    def __init__(self, dis, d_opt):
        self.dis = DDP(dis)
        self.d_opt = d_opt
    def train_discriminator(self, chunks):
        self.d_opt.zero_grad()
        for chunk in chunks:
            self.log(chunk.shape)
        self.dis(chunks[0]).mean().backward()
        self.d_opt.step()
"""),
        # The syncing iteration's own backward (same test as the step); the others run
        # inside no_sync().
        Valid(DDP + """\
model = DDP(net)
for step, (x, y) in enumerate(loader):
    if step % k == 0:
        model(x).sum().backward()
    else:
        with model.no_sync():
            model(x).sum().backward()
    if step % k == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
        # A per-step method told when to step, two calls below the loop, on a model
        # nobody wraps (one process).
        Valid(DDP + """\
class Runner:
    def __init__(self, net, opt, accum):
        self.net = net
        self.opt = opt
        self.accum = accum
    def apply(self, batch, net, step_optimizer=True):
        loss = net(batch).mean() / self.accum
        loss.backward()
        if step_optimizer:
            self.opt.step()
            self.opt.zero_grad()
    def train_step(self, batch, step):
        self.apply(batch, self.net, step_optimizer=(step + 1) % self.accum == 0)
    def fit(self, loader):
        for step, batch in enumerate(loader):
            self.train_step(batch, step)
"""),
        # ... wrapped, but the caller runs the non-stepping calls inside no_sync().
        Valid(DDP + """\
class Runner:
    def __init__(self, net, opt, accum):
        self.net = DDP(net)
        self.opt = opt
        self.accum = accum
    def apply(self, batch, net, step_optimizer=True):
        loss = net(batch).mean() / self.accum
        loss.backward()
        if step_optimizer:
            self.opt.step()
            self.opt.zero_grad()
    def train_step(self, batch, step):
        if (step + 1) % self.accum == 0:
            self.apply(batch, self.net, step_optimizer=True)
        else:
            with self.net.no_sync():
                self.apply(batch, self.net, step_optimizer=False)
    def fit(self, loader):
        for step, batch in enumerate(loader):
            self.train_step(batch, step)
"""),
        # A per-step method stepping every k calls, on a trainer given a plain model.
        Valid(DDP + """\
class Trainer:
    def __init__(self, model, opt, num_accum, objective):
        self.model = model
        self.opt = opt
        self.num_accum = num_accum
        self.objective = objective
    def loss(self, x):
        return self.objective.losses(self.model, x)
    def step(self, x, global_steps):
        loss = self.loss(x).mean()
        loss.div(self.num_accum).backward()
        if global_steps % self.num_accum == 0:
            self.opt.step()
            self.opt.zero_grad()
    def train(self, loader):
        seen = 0
        for x in loader:
            seen += 1
            self.step(x, global_steps=seen)

def main(net, opt, loader, objective):
    Trainer(net, opt, 4, objective).train(loader)
"""),
        # A while micro-step loop that breaks, on a model held under a key the
        # module never fills with a wrapped model.
        Valid(DDP + """\
def train_step(state, batches, k):
    model, opt = state["model"], state["optimizer"]
    done = 0
    while True:
        loss = model(next(batches)).mean() / k
        loss.backward()
        done += 1
        if done == k:
            break
    opt.step()
    opt.zero_grad()

def train(net, batches, steps):
    state = RunState(model=net.cuda(), optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    for _ in range(steps):
        train_step(state, batches, 4)
"""),
        # A GAN step: the generator steps every k iterations, the discriminator's two
        # backwards are stepped right after them, every time.
        Valid(DDP + """\
class GanModel:
    def __init__(self, gen, dis, k):
        self.net_g, self.net_d = DDP(gen), DDP(dis)
        self.k = k
    def optimize_parameters(self, it, real):
        fake = self.net_g(real)
        g_loss = -self.net_d(fake).mean()
        if it % self.k == 0:
            self.optimizer_g.zero_grad()
            g_loss.backward()
            self.optimizer_g.step()
        self.optimizer_d.zero_grad()
        d_real = self.net_d(real).mean()
        (1 - d_real).relu().backward()
        d_fake = self.net_d(fake.detach()).mean()
        (1 + d_fake).relu().backward()
        self.optimizer_d.step()
    def fit(self, loader):
        for it, real in enumerate(loader):
            self.optimize_parameters(it, real)
"""),
        # The code picks sync or no_sync per iteration on its own flag; the sync arm's
        # backward is the one meant to all-reduce.
        Valid(DDP + """\
model = DDP(net)
for it, (x, y) in enumerate(loader):
    share = it % share_every == 0
    out = model(x)
    if share:
        out.sum().backward()
    else:
        with model.no_sync():
            out.sum().backward()
    if (it - 1) % step_every == step_phase:
        optimizer.step()
"""),
    ]
    invalid = [
        # A GAN whose generator accumulates: its step waits for the accumulation test; the
        # discriminator's unconditional step after its own backward is another model's
        # (a117 whisper-vits-svc).
        Invalid("""\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def train(gen, disc, loader, optim_g, optim_d, accum_step, rank):
    model_g = DDP(gen, device_ids=[rank])
    model_d = DDP(disc, device_ids=[rank])
    for step, (x, audio) in enumerate(loader):
        fake = model_g(x)
        loss_g = (model_d(fake) - 1).pow(2).mean()
        loss_g.backward()
        if (step + 1) % accum_step == 0:
            optim_g.step()
            optim_g.zero_grad()
        optim_d.zero_grad()
        loss_d = model_d(fake.detach()).pow(2).mean() + (model_d(audio) - 1).pow(2).mean()
        loss_d.backward()
        optim_d.step()
""", line=11, column=9),
        # The ExitStack enters ``no_sync()`` only for the no-grad recycling passes; the last
        # pass, whose loss goes backward, syncs on every micro-step (a55 RoseTTAFold2).
        Invalid("""\
from contextlib import ExitStack
import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train(net, loader, opt, k, max_cycle):
    model = DDP(net)
    for i, batch in enumerate(loader):
        n_cycle = np.random.randint(1, max_cycle + 1)
        out = batch
        for i_cycle in range(n_cycle):
            with ExitStack() as stack:
                if i_cycle < n_cycle - 1:
                    stack.enter_context(torch.no_grad())
                    stack.enter_context(model.no_sync())
                out = model(out)
        loss = out.mean() / k
        loss.backward()
        if (i + 1) % k == 0:
            opt.step()
            opt.zero_grad()
""", line=20, column=9),
        # FSDP2 shards the model in place (fully_shard(model), no new name): accumulating every
        # step without set_requires_gradient_sync(False) (simpler-fsdp).
        Invalid("""\
import torch
from torch.distributed.fsdp import fully_shard

fully_shard(model)
for step, (x, y) in enumerate(loader):
    loss = model(x, y)
    loss.backward()
    if step % k == k - 1:
        opt.step()
        opt.zero_grad()
""", line=7, column=5),
        # The trainer is handed its model, annotated as the FSDP wrapper (epochraft): an inner
        # micro-step loop accumulates without no_sync().
        Invalid("""\
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

class Trainer:
    def __init__(self, model: FSDP, optimizer, k):
        self.model = model
        self.optimizer, self.k = optimizer, k

    def train_step(self, it):
        for _ in range(self.k):
            loss = self.model(next(it)).mean()
            loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
""", line=12, column=13),
        # The generator's micro-batch loop accumulates; the critic's arm of the same
        # helper is switched off for that call by the literal argument (not reported).
        Invalid(DDP + """\
class GanTrainer:
    def one_step(self, batch, generator_turn):
        if generator_turn:
            loss = self.gen(batch).mean()
            loss.backward()
            return {"g": loss.item()}
        else:
            logs = {}
        d_loss = self.critic(batch).mean()
        d_loss.backward()
        logs["d"] = d_loss.item()
        return logs

    def train(self, loader):
        self.gen = DDP(self.gen)
        self.critic = DDP(self.critic)
        while True:
            for micro in loader.next_group():
                self.one_step(micro, True)
            self.gen_opt.step()
            self.one_step(next(loader), False)
            self.critic_opt.step()
""", line=8, column=13),
        # A subclass of DDP of this module wraps the model; the step is gated by
        # ``if steps % k > 0: continue`` after the backward.
        Invalid("""\
import torch

class ForwardingDDP(torch.nn.parallel.DistributedDataParallel):
    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)

def fit(task, loader, opt, accumulate, world_size):
    model = task.cuda()
    if world_size > 1:
        model = ForwardingDDP(task, device_ids=[0])
    steps = 0
    for batch in loader:
        loss = model(batch).mean()
        (loss / accumulate).backward()
        steps += 1
        if steps % accumulate > 0:
            continue
        opt.step()
        opt.zero_grad()
""", line=17, column=9),
        # A step function of this module told when to step (``is_update``): reported at its backward.
        Invalid(DDP + """\
def apply_update(loss, opt, net, cfg, is_update=True):
    loss.backward()
    if is_update:
        torch.nn.utils.clip_grad_norm_(net.parameters(), cfg.clip)
        opt.step()
        opt.zero_grad()

def fit(net, loader, opt, cfg):
    net = DDP(net)
    seen = 0
    for xb in loader:
        seen += 1
        is_update = seen % cfg.grad_acc == 0
        apply_update(net(xb).mean() / cfg.grad_acc, opt, net, cfg, is_update=is_update)
""", line=5, column=5),
        # The step sits two helpers down (train_step -> maybe_step), under a counter test:
        # reported at the step function's backward (RULES.md: the backward() call).
        Invalid(DDP + "class Engine:\n    def __init__(self, net):\n        self.model = DDP(net)\n"
                      "        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)\n"
                      "        self.accumulate = 4\n        self.last_step = 0\n"
                      "    def fit(self, loader):\n        for self.it, batch in enumerate(loader):\n"
                      "            self.train_step(batch)\n    def train_step(self, batch):\n"
                      "        loss = self.model(batch).mean()\n        loss.backward()\n        self.maybe_step()\n"
                      "    def maybe_step(self):\n"
                      "        if self.it - self.last_step >= self.accumulate:\n"
                      "            self.opt.step()\n            self.opt.zero_grad()\n            self.last_step = self.it\n",
                line=15, column=9),
        # The DDP model comes back from a helper (unpacked) and is passed on to the epoch function.
        Invalid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
              "def setup(net, rank):\n    opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
              "    return opt, DDP(net, device_ids=[rank])\n"
              "def run_epoch(model, loader, opt, accum):\n    for i, (x, y) in enumerate(loader):\n"
              "        loss = model(x).sub(y).pow(2).mean() / accum\n        loss.backward()\n"
              "        if (i + 1) % accum == 0:\n            opt.step()\n            opt.zero_grad()\n"
              "def main(net, loader, rank):\n    opt, model = setup(net, rank)\n"
              "    run_epoch(model, loader, opt, 4)\n", line=9, column=9),
        Invalid(DDP + """\
model = DDP(net)
for i, (x, y) in enumerate(loader):
    loss = model(x).sum() / accum
    loss.backward()
    if (i + 1) % accum == 0:
        optimizer.step()
        optimizer.zero_grad()
""", line=7, column=5),
        # Two code paths: only the accumulating one is flagged.
        Invalid(DDP + """\
model = DDP(net)
for idx, (x, y) in enumerate(loader):
    out = model(x)
    if cfg.ACCUMULATION_STEPS > 1:
        loss = out.sum() / cfg.ACCUMULATION_STEPS
        loss.backward()
        if (idx + 1) % cfg.ACCUMULATION_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()
    else:
        loss = out.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
""", line=9, column=9),
        # Inner micro-step loop, one step per outer iteration.
        Invalid(DDP + """\
model = DDP(model, device_ids=[local_rank])
while True:
    for micro_step in range(gradient_accumulation_steps):
        logits, loss = model(X, Y)
        (loss / gradient_accumulation_steps).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
""", line=8, column=9),
        # The model is wrapped by the same module's caller.
        Invalid(DDP + """\
def train(model, loader, optimizer, accum):
    for step, batch in enumerate(loader):
        loss = model(batch).mean()
        loss.backward()
        if step % accum == 0:
            optimizer.step()

def main():
    model = DDP(build(), device_ids=[rank])
    train(model, loader, optimizer, 8)
""", line=7, column=9),
        Invalid(DDP + """\
class Trainer:
    def __init__(self, net):
        self.model = DDP(net)
    def fit(self, loader):
        for i, batch in enumerate(loader):
            loss = self.model(batch).mean()
            self.scaler.scale(loss).backward()
            if (i + 1) % self.accum_steps == 0:
                self.scaler.step(self.optimizer)
                self.scaler.update()
""", line=10, column=13),
        Invalid(DDP + """\
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
model = FSDP(net)
for step, batch in enumerate(loader):
    loss = model(batch).mean()
    loss.backward()
    if (step + 1) % grad_accum == 0 or step + 1 == len(loader):
        optimizer.step()
""", line=8, column=5),
        # A flag decides when to step.
        Invalid(DDP + """\
model = DDP(net)
for i, batch in enumerate(loader):
    loss = model(batch).mean()
    loss.backward()
    should_update = (i + 1) % args.update_freq == 0
    if should_update:
        optimizer.step()
        optimizer.zero_grad()
""", line=7, column=5),
        # A counter decides when to step.
        Invalid(DDP + """\
model = DDP(net)
accum_count = 0
for batch in loader:
    model(batch).mean().backward()
    accum_count += 1
    if accum_count == accum_steps:
        optimizer.step()
        accum_count = 0
""", line=7, column=5),
        # The step is gated by an earlier `continue`.
        Invalid(DDP + """\
model = DDP(net)
for i, (x, y) in enumerate(loader):
    loss = model(x).sum() / 4
    loss.backward()
    if (i + 1) % 4 != 0:
        continue
    optimizer.step()
    optimizer.zero_grad()
""", line=7, column=5),
        # The only no_sync() encloses evaluation code, not the accumulating backward.
        Invalid(DDP + """\
def train(model, loader, val_x, optimizer, k):
    for i, (x, y) in enumerate(loader):
        loss = model(x).sum() / k
        loss.backward()
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()
    with model.no_sync(), torch.no_grad():
        probe = model(val_x).mean()
    return probe

train(DDP(net), loader, val_x, optimizer, 4)
""", line=7, column=9),
        # A comment that mentions no_sync is not a no_sync.
        Invalid(DDP + """\
def train_one_epoch(model, loader, optimizer, args):
    for num_steps, batch in enumerate(loader):
        # gradient accumulation with cpu offloading requires a no_sync context manager
        loss = model(batch)[0] / args.gradient_accumulation_steps
        loss.backward()
        if (num_steps + 1) % args.gradient_accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()

train_one_epoch(DDP(net), loader, optimizer, args)
""", line=8, column=9),
        # A metrics object's accumulate() is not Accelerate's accumulate().
        Invalid(DDP + """\
model = DDP(net)
for i, (x, y) in enumerate(loader):
    loss = model(x).sum()
    loss.backward()
    meter.accumulate(loss.item())
    if (i + 1) % 4 == 0:
        optimizer.step()
""", line=7, column=5),
        # Backward and step in a helper object (MAE/ConvNeXt-style loss scaler).
        Invalid(DDP + """\
def train_one_epoch(model, loader, optimizer, loss_scaler, update_freq):
    for data_iter_step, (samples, targets) in enumerate(loader):
        loss = model(samples).sum() / update_freq
        loss_scaler(loss, optimizer, parameters=model.parameters(),
                    update_grad=(data_iter_step + 1) % update_freq == 0)

train_one_epoch(DDP(net), loader, optimizer, scaler, 8)
""", line=7, column=9),
        Invalid(DDP + """\
model = DDP(net)
for i, (x, y) in enumerate(loader):
    loss = model(x).sum()
    amp_helper(loss, optimizer, do_step=(i + 1) % 4 == 0)
""", line=7, column=5),
        # A helper class of this module whose __call__ scales, backwards and steps:
        # reported at that backward.
        Invalid(DDP + """\
class ScaledStep:
    def __init__(self):
        self.scaler = torch.cuda.amp.GradScaler()
    def __call__(self, loss, optimizer, update_grad=True):
        self.scaler.scale(loss).backward()
        if update_grad:
            self.scaler.step(optimizer)
            self.scaler.update()

loss_scaler = ScaledStep()
model = DDP(net)
for i, (x, y) in enumerate(loader):
    loss = model(x).sum()
    loss_scaler(loss, optimizer, update_grad=(i + 1) % accum_iter == 0)
""", line=8, column=9),
        # A per-iteration step function (an Ignite-style `update`): the step is
        # taken on some calls only.
        Invalid(DDP + """\
model = DDP(net)

def update(engine, batch):
    loss = model(batch).mean() / accum
    loss.backward()
    if engine.state.iteration % accum == 0:
        optimizer.step()
        optimizer.zero_grad()
    return loss.item()
""", line=8, column=5),
        # A mixed-precision helper object of this module runs the backward, and steps.
        Invalid(DDP + """\
class MixedPrecision:
    def __init__(self):
        self.scaler = torch.cuda.amp.GradScaler()
    def backward(self, loss):
        self.scaler.scale(loss).backward()
    def step(self, model, optimizer):
        self.scaler.step(optimizer)
        self.scaler.update()

amp = MixedPrecision()
model = DDP(net)
for batch_steps in loader:
    for x, y in batch_steps:
        loss = model(x).sum() / accum
        amp.backward(loss)
    amp.step(model, optimizer)
""", line=18, column=9),
        # no_sync chosen only for FSDP models: the DDP path syncs every micro-step.
        Invalid(DDP + """\
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

def backward(total_loss, scaler):
    scaler.scale(total_loss).backward()

def train_one_epoch(model, data, optimizer, scaler, accum_freq):
    for batch in data:
        for ii in range(accum_freq):
            maybe_no_sync = contextlib.nullcontext
            if isinstance(model, FSDP) and ii != accum_freq - 1:
                maybe_no_sync = model.no_sync
            with maybe_no_sync():
                out = model(batch[ii])
                backward(out.mean(), scaler)
        scaler.step(optimizer)
        scaler.update()

train_one_epoch(DDP(net), data, optimizer, scaler, 4)
""", line=17, column=17),
        # The forward runs in a helper the loop hands the DDP model to.
        Invalid(DDP + """\
def train_class_batch(model, samples, targets, criterion):
    outputs = model(samples)
    return criterion(outputs, targets), outputs

def train_one_epoch(model, loader, optimizer, criterion, update_freq):
    for step, (samples, targets) in enumerate(loader):
        loss, output = train_class_batch(model, samples, targets, criterion)
        (loss / update_freq).backward()
        if (step + 1) % update_freq == 0:
            optimizer.step()

train_one_epoch(DDP(net), loader, optimizer, criterion, 8)
""", line=11, column=9),
        # The forward runs in a local function handed to a helper (a diffusion loss).
        Invalid(DDP + """\
import functools

def main(net, loader, optimizer, diffusion, accumulation_steps):
    model = DDP(net)

    def denoise_fn(input_ids, timestep):
        return model(input_ids, timestep)

    for i, batch in enumerate(loader):
        metrics = diffusion.compute_kl(batch["input_ids"],
                                       denoise_fn=functools.partial(denoise_fn, timestep=0))
        loss = metrics["loss"] / accumulation_steps
        loss.backward()
        if i % accumulation_steps == accumulation_steps - 1:
            optimizer.step()
""", line=16, column=9),
        # FSDP: an inner micro-step loop, one step after it.
        Invalid(DDP + """\
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
model = FSDP(net)
for batch in loader:
    for micro in range(4):
        loss = model(batch[micro]).mean() / 4
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()
""", line=9, column=9),
        # The backward runs in a same-module helper: reported where the loop
        # calls it (the accumulating iteration's backward).
        Invalid(DDP + """\
def backward_step(loss):
    loss.backward()

model = DDP(net)
for i, batch in enumerate(loader):
    loss = model(batch).mean()
    backward_step(loss)
    if (i + 1) % accum == 0:
        optimizer.step()
""", line=10, column=5),
        # Shared gap 1: the wrap on one arm reaches the loop (the other arm is a plain model).
        Invalid(DDP + """\
def fit(net, loader, opt, k, distributed):
    if distributed:
        net = DDP(net)
    else:
        net = net.cuda()
    for i, xb in enumerate(loader):
        loss = net(xb).mean() / k
        loss.backward()
        if (i + 1) % k == 0:
            opt.step()
""", line=11, column=9),
        # Shared gap 5: a conditional wrap through a local alias of the class.
        Invalid(DDP + """\
Wrapper = DDP

def fit(m, loader, opt, k, on_gpu):
    net = Wrapper(m) if on_gpu else m
    for i, xb in enumerate(loader):
        net(xb).mean().div(k).backward()
        if (i + 1) % k == 0:
            opt.step()
""", line=9, column=9),
        # Shared gap 5: a tuple-unpacked alias of a wrapped attribute.
        Invalid(DDP + """\
class Runner:
    def __init__(self, m, cfg):
        self.net, self.cfg = DDP(m), cfg
    def fit(self, loader, opt):
        net, cfg = self.net, self.cfg
        for i, xb in enumerate(loader):
            loss = net(xb).mean() / cfg.k
            loss.backward()
            if (i + 1) % cfg.k == 0:
                opt.step()
""", line=11, column=13),
        # Shared gap 5: a well-known library's DDP subclass.
        Invalid(DDP + """\
from mmcv.parallel import MMDistributedDataParallel

def fit(m, loader, opt, k):
    net = MMDistributedDataParallel(m.cuda())
    for i, xb in enumerate(loader):
        loss = net(xb).mean() / k
        loss.backward()
        if (i + 1) % k == 0:
            opt.step()
""", line=10, column=9),
        # Shared gap 3: the backward runs in a method of a project object.
        Invalid(DDP + """\
class Backprop:
    def backward(self, loss):
        loss.backward()

def fit(m, loader, opt, k):
    net = DDP(m)
    helper = Backprop()
    for i, xb in enumerate(loader):
        helper.backward(net(xb).mean() / k)
        if (i + 1) % k == 0:
            opt.step()
""", line=12, column=9),
        # Two arms: k == 1 steps every batch (silent); the other caches k batches
        # behind a ``continue`` gate, then replays them with a backward each.
        Invalid(DDP + """\
def fit(m, loader, opt, k):
    net = DDP(m)
    cached = []
    for i, xb in enumerate(loader):
        if k == 1:
            net(xb).mean().backward()
            opt.step()
        else:
            cached.append(xb)
            if (i + 1) % k > 0:
                continue
            for chunk in cached:
                loss = net(chunk).mean() / k
                loss.backward()
            opt.step()
            cached = []
""", line=17, column=17),
        # The step every ``gradient_interval`` batches, counted from the last step.
        Invalid(DDP + """\
def fit(m, loader, opt, gradient_interval):
    net = DDP(m)
    start = 0
    for batch_id, xb in enumerate(loader):
        loss = net(xb).mean() / gradient_interval
        loss.backward()
        if batch_id - start + 1 == gradient_interval:
            opt.step()
            opt.zero_grad()
            start = batch_id + 1
""", line=9, column=9),
        # A per-step method (a loop elsewhere calls it once per step) runs k
        # micro-step backwards, then steps once after its loop.
        Invalid(DDP + """\
class GanWorker:
    def __init__(self, dis, d_opt, micro_steps):
        self.dis = DDP(dis)
        self.d_opt = d_opt
        self.micro_steps = micro_steps
    def train_discriminator(self, chunks):
        self.d_opt.zero_grad()
        for m in range(self.micro_steps):
            loss = self.dis(chunks[m]).mean() / self.micro_steps
            loss.backward()
        self.d_opt.step()
""", line=13, column=13),
        # An AMP arm whose backward runs outside the no_sync() of the other arm.
        Invalid(DDP + """\
model = DDP(net)
for step, (x, y) in enumerate(loader):
    if half:
        with amp.scale_loss(model(x).mean() / k, optimizer) as scaled:
            scaled.backward()
    elif step % k == 0:
        model(x).mean().div(k).backward()
    else:
        with model.no_sync():
            model(x).mean().div(k).backward()
    if step % k == 0:
        optimizer.step()
        optimizer.zero_grad()
""", line=8, column=13),
        # A per-step method told when to step (``step_optimizer``), called by a
        # per-batch method that a loop calls: reported at its backward.
        Invalid(DDP + """\
class Runner:
    def __init__(self, net, opt, accum):
        self.net = DDP(net)
        self.opt = opt
        self.accum = accum
    def apply(self, batch, net, step_optimizer=True):
        loss = net(batch).mean() / self.accum
        loss.backward()
        if step_optimizer:
            self.opt.step()
            self.opt.zero_grad()
    def train_step(self, batch, step):
        self.apply(batch, self.net, step_optimizer=(step + 1) % self.accum == 0)
    def fit(self, loader):
        for step, batch in enumerate(loader):
            self.train_step(batch, step)
""", line=11, column=9),
        # The per-step method steps only every k calls; the trainer is given a DDP
        # model and runs its forward two helpers down.
        Invalid(DDP + """\
class Trainer:
    def __init__(self, model, opt, num_accum, objective):
        self.model = model
        self.opt = opt
        self.num_accum = num_accum
        self.objective = objective
    def loss(self, x):
        return self.objective.losses(self.model, x)
    def step(self, x, global_steps):
        loss = self.loss(x).mean()
        loss.div(self.num_accum).backward()
        if global_steps % self.num_accum == 0:
            self.opt.step()
            self.opt.zero_grad()
    def train(self, loader):
        seen = 0
        for x in loader:
            seen += 1
            self.step(x, global_steps=seen)

def main(net, opt, loader, objective):
    Trainer(DDP(net), opt, 4, objective).train(loader)
""", line=14, column=9),
        # A while micro-step loop that breaks, then one step; the DDP model comes
        # from a state holder filled with ``model=`` by the module.
        Invalid(DDP + """\
def train_step(state, batches, k):
    model, opt = state["model"], state["optimizer"]
    done = 0
    while True:
        loss = model(next(batches)).mean() / k
        loss.backward()
        done += 1
        if done == k:
            break
    opt.step()
    opt.zero_grad()

def train(net, batches, steps):
    model = DDP(net.cuda())
    state = RunState(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    for _ in range(steps):
        train_step(state, batches, 4)
""", line=9, column=9),
        # The model comes from a builder method that returns what a project
        # helper wrapped; the per-step method steps every k calls.
        Invalid(DDP + """\
def create_ddp_model(model, **kwargs):
    if torch.distributed.get_world_size() == 1:
        return model
    ddp = DDP(model, **kwargs)
    return ddp

class Runner:
    def __init__(self, cfg):
        self.cfg = cfg
        self.model = self.build_model()
        self.counter = 0
    def build_model(self):
        model = make_net(self.cfg).cuda()
        model = create_ddp_model(model, broadcast_buffers=False)
        return model
    def run_step(self, batch):
        loss = self.model(batch).mean() / self.cfg.accum_steps
        loss.backward()
        self.counter += 1
        if self.counter >= self.cfg.accum_steps:
            self.optimizer.step()
            self.optimizer.zero_grad()
            self.counter = 0
    def train(self, loader):
        for batch in loader:
            self.run_step(batch)
""", line=21, column=9),
        # no_sync() on the stepping arm, the accumulating arm syncs: the arms are
        # the wrong way round.
        Invalid(DDP + """\
model = DDP(net)
for it, batch in enumerate(loader):
    out = model(batch).mean() / accum
    update = (it + 1) % accum == 0
    if update:
        with model.no_sync():
            out.backward()
    else:
        out.backward()
    if update:
        optimizer.step()
        optimizer.zero_grad()
""", line=12, column=9),
    ]

    invalid += [
        # The trainer stores the wrapped model it is given after a device move
        # (``self.model = model.to(device=...)`` / ``.cuda()``): still the DDP model.
        Invalid('import torch\nimport torch.nn as nn\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\nclass Trainer:\n    def __init__(self, model, optimizer, loader, k):\n        self.model = model.to(device=0)\n        self.optimizer = optimizer\n        self.loader = loader\n        self.k = k\n\n    def _run_step(self, x, y):\n        return nn.functional.cross_entropy(self.model(x), y)\n\n    def train(self):\n        for i, (x, y) in enumerate(self.loader, start=1):\n            loss = self._run_step(x, y)\n            (loss / self.k).backward()\n            if i % self.k == 0:\n                self.optimizer.step()\n                self.optimizer.zero_grad()\n\ndef main(net, opt, loader):\n    model = DDP(net, device_ids=[0])\n    trainer = Trainer(model, opt, loader=loader, k=4)\n    trainer.train()\n', line=18, column=13),
        Invalid('import torch\nimport torch.nn as nn\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\nclass Trainer:\n    def __init__(self, model, optimizer, loader, k):\n        self.model = model.cuda()\n        self.optimizer = optimizer\n        self.loader = loader\n        self.k = k\n\n    def _run_step(self, x, y):\n        return nn.functional.cross_entropy(self.model(x), y)\n\n    def train(self):\n        for i, (x, y) in enumerate(self.loader, start=1):\n            loss = self._run_step(x, y)\n            (loss / self.k).backward()\n            if i % self.k == 0:\n                self.optimizer.step()\n                self.optimizer.zero_grad()\n\ndef main(net, opt, loader):\n    model = DDP(net, device_ids=[0])\n    trainer = Trainer(model=model, optimizer=opt, loader=loader, k=4)\n    trainer.train()\n', line=18, column=13),
    ]

    def screen(self, sketch):
        """The screen (necessary for check() to report): True, False, or the project facts that must hold."""
        return "backward" in sketch.calls or (sketch.loops > 0 and (sketch.modulo or any(
            word in keyword.lower() for keyword in sketch.keywords
            for word in ("step", "update", "sync", "boundary", "is_last", "accum"))))

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        # One report per accumulating backward() call, at that call (RULES.md
        # "Report at"): a step function of this module that the loop calls
        # (``self.train_in_steps()``, ``optimizer_step(loss, ..., is_update)``)
        # is reported at its backward (an AMP arm and a plain arm make one
        # report each); a helper named for the backward (``backward(loss,
        # scaler)``) and a helper of another module where the loop calls it.
        reported: set[int] = set()
        handled: set[int] = set()
        for region, backward in _backwards(index):
            node = backward.anchor
            site = backward.site.node if backward.inlined and not _names_backward(node) else node
            if id(site) in reported:
                continue
            test = _accumulates(index, region, backward)
            if test is not None and _on_wrapped_model(index, region) \
                    and not _sync_handled(index, region, node, backward.site.node) \
                    and not _callers_sync(index, region):
                reported.add(id(site))
                handled.add(id(node))
                yield self.report(site, _message(index, test, region))
        # Backward and step done by a helper object, told when to step:
        # ``loss_scaler(loss, optimizer, update_grad=(i + 1) % k == 0)``.
        for site, test in flow.helper_step_calls(index):
            loop = flow.enclosing_loops(index, site.node)[0]
            if id(site.node) in handled or flow.in_framework_code(index, site.node):
                continue
            if not _is_accumulation_test(test) or not _on_wrapped_model(index, loop) \
                    or _sync_handled(index, loop, site.node):
                continue
            handled.add(id(site.node))
            for node in _backward_sites(index, site):
                if id(node) not in reported:
                    reported.add(id(node))
                    yield self.report(node, _message(index, test, loop))


def _backward_sites(index: SemanticIndex, site) -> list[cst.CSTNode]:
    """Where a helper call's accumulating backward is reported: the tensor
    backwards of the helper's body when this module shows it and the helper
    is not named for the backward, else the call."""
    if _names_backward(site.node):
        return [site.node]
    found = [inner.node for body in flow.visible_bodies(index, site)
             for inner in flow.calls_in_function(index, body) if flow.is_tensor_backward(index, inner)]
    return found or [site.node]


def _names_backward(call: cst.CSTNode) -> bool:
    """A call that reads as the iteration's backward: ``backward(loss, scaler)``,
    ``backward_step(loss)``, ``amp.backward(loss)``."""
    if not isinstance(call, cst.Call):
        return False
    name = dotted_name(call.func) or ""
    return "backward" in name.rsplit(".", 1)[-1].lower()


def _backwards(index: SemanticIndex) -> Iterator[tuple[cst.CSTNode, flow.Event]]:
    """(region, backward) pairs: every backward of a training loop (tensor
    backwards, helpers inlined, and ``amp.backward(loss)`` of a project's
    mixed-precision helper object), and every backward a function runs
    outside any loop of its own (a per-iteration step function such as an
    Ignite ``update(engine, batch)``)."""
    loops = list(flow.training_loops(index))
    helper_backwards = [s for s in index.method_calls("backward") if flow.is_helper_backward(index, s)]
    for site in helper_backwards:
        loop = next(iter(flow.enclosing_loops(index, site.node)), None)
        if loop is not None and loop not in loops and not flow.in_framework_code(index, loop):
            loops.append(loop)
    helper_ids = {id(s) for s in helper_backwards}
    seen: set[int] = set()
    for loop in loops:
        for event in flow.events(index, loop):
            if flow.is_tensor_backward(index, event.site) or (not event.inlined and id(event.site) in helper_ids):
                seen.add(id(event.site))
                if event.inlined and _dead_for_call(index, event):
                    continue
                yield loop, event
    for site in [*flow.tensor_backwards(index), *helper_backwards]:
        function = flow.enclosing_function(index, site.node)
        if function is None or flow.enclosing_loops(index, site.node) or flow.in_framework_code(index, site.node):
            continue
        if id(site) in seen or flow.enclosing_loops(index, function):
            continue  # a helper: judged where its callers' loops run it
        # No caller, or callers that no loop here runs directly (``train_step()``
        # calls ``self.optimize(..., step_optimizer=...)``, a loop elsewhere calls
        # ``train_step()``): judged in the function, once per call.
        yield function, flow.Event(site, site.node)


def _dead_for_call(index: SemanticIndex, event: flow.Event) -> bool:
    """The helper's backward sits on the arm that the loop's call switches off
    with a literal argument: ``self.step(mb, True)`` where the helper does ``if
    train_generator: ...; return`` before the critic's backward (or puts that
    backward under ``if not train_generator:`` / an ``else``)."""
    helper = flow.enclosing_function(index, event.site.node)
    call = index.call_site(event.anchor) if isinstance(event.anchor, cst.Call) else None
    if helper is None or call is None:
        return False
    params = [p.name.value for p in helper.params.params]
    offset = 1 if params and params[0] in ("self", "cls") else 0

    def literal(test: cst.BaseExpression) -> Optional[bool]:
        negate = False
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, negate = test.expression, True
        if not isinstance(test, cst.Name) or test.value not in params:
            return None
        arg = call.argument(test.value, params.index(test.value) - offset)
        value = flow.literal_bool(arg.value) if arg is not None else None
        return None if value is None else value != negate

    node: cst.CSTNode = event.site.node
    for ancestor in index.ancestors(node):
        if ancestor is helper:
            break
        if isinstance(ancestor, cst.If) and node is not ancestor.test:
            value = literal(ancestor.test)
            if value is not None and value == (node is not ancestor.body):
                return True  # on the arm the literal switches off
        if isinstance(ancestor, cst.IndentedBlock):
            for statement in ancestor.body:
                if statement is node:
                    break
                if isinstance(statement, cst.If):
                    value = literal(statement.test)
                    if value is True and _ends_with_return(statement.body):
                        return True  # ``if train_generator: ... return`` before it
                    if value is False and isinstance(statement.orelse, cst.Else) \
                            and _ends_with_return(statement.orelse.body):
                        return True
        node = ancestor
    return False


def _ends_with_return(body: cst.BaseSuite) -> bool:
    statements = body.body if isinstance(body, cst.IndentedBlock) else [body]
    last = statements[-1] if statements else None
    smalls = last.body if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) else []
    return bool(smalls) and isinstance(smalls[-1], cst.Return)


def _message(index: SemanticIndex, test: cst.CSTNode, region: Optional[cst.CSTNode] = None) -> str:
    k = _literal_k(index, test)
    fsdp = region is not None and _runs_fsdp(index, region)
    sync = "reduce-scatters" if fsdp else "all-reduces"
    count = f"{k} {sync} per optimizer step instead of 1 (k={k})" if k is not None else \
        f"k {sync} per optimizer step instead of 1 (k = accumulation steps)"
    return (f"gradient accumulation without no_sync(): {'FSDP' if fsdp else 'DDP'} {sync} the gradients in every "
            f"backward, {count}")


def _runs_fsdp(index: SemanticIndex, region: cst.CSTNode) -> bool:
    """Is every wrapped model the region's forwards run (that ddplint can name) an FSDP one?"""
    kinds = {models.wrapped_kind(index, flow.model_of_forward(event.site.node), event.site.order)
             or (_holder_kind(index, event.site) if not event.inlined else "")
             for event in flow.events(index, region)} - {""}
    return kinds == {"fsdp"}


def _literal_k(index: SemanticIndex, test: cst.CSTNode) -> Optional[int]:
    """The accumulation count when it is a literal: ``(i + 1) % 4``,
    ``range(4)``, or a name bound only to a literal."""
    candidates: list[cst.BaseExpression] = []
    stack: list[cst.CSTNode] = [test]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
            candidates.append(node.right)
        elif isinstance(node, cst.Call) and dotted_name(node.func) == "range" and len(node.args) == 1:
            candidates.append(node.args[0].value)
        stack.extend(node.children)
    for candidate in candidates:
        value = literal_int(candidate)
        if value is None and isinstance(candidate, cst.Name):
            values = index.reaching_values(candidate) or []
            found = {literal_int(v) for v in values}
            value = found.pop() if len(found) == 1 else None
        if value is not None and value > 1:
            return value
    return None


def _accumulates(index: SemanticIndex, loop: flow.Loop, backward: flow.Event) -> Optional[cst.CSTNode]:
    """Backward every micro-step, step only on some: either the step sits under
    an accumulation test the backward is not under (or after an earlier
    ``if not accumulation_boundary: continue``), or the backward's loop steps
    nowhere and the loop around it steps after it. Returns the test (or the
    micro-step loop) that decides, else None."""
    around = flow.enclosing_loops(index, backward.anchor)
    if isinstance(loop, cst.FunctionDef):
        if around:
            return None  # the loops judge it
    elif flow.is_helper_backward(index, backward.site):
        if not around or around[0] is not loop:
            return None
    elif flow.step_loop_of(index, backward.anchor) is not loop:
        return None
    steps = [e for e in flow.events(index, loop) if flow.any_step(index, e.site)]
    if backward.inlined and any(_steps_its_own_backward(index, backward, step) for step in steps):
        return None  # the helper that runs this backward steps right after it, every time
    if any(_stepped_in_its_block(index, loop, backward, step) for step in steps):
        return None  # ``l_d_real.backward(); l_d_fake.backward(); opt_d.step()``: stepped every time
    for step in steps:
        test = _accumulation_test(index, step.anchor, loop)
        if test is None and step.inlined:
            # ``self.step(x, global_steps)`` whose body steps only ``if global_steps % k == 0:``
            test = _accumulation_test(index, step.site.node, flow.enclosing_function(index, step.site.node))
        if test is not None and not flow.is_inside(index, backward.anchor, test) \
                and not flow.is_inside(index, backward.site.node, test) \
                and not _under_same_test(index, backward.anchor, test) \
                and not _under_same_test(index, backward.site.node, test) \
                and (not flow.events_exclusive(index, backward, step)
                     or _under_same_test(index, backward.anchor, test, in_body=False)):
            return test
        gate = _accumulation_gate(index, step.anchor, loop)
        if gate is not None and flow.precedes(index, backward.anchor, gate) \
                and not flow.is_inside(index, backward.anchor, gate) \
                and not flow.events_exclusive(index, backward, step):
            return gate
    if not steps:
        deeper = _step_test_in_a_helper(index, loop, backward)
        if deeper is not None:
            return deeper
    if steps or not (isinstance(loop, cst.For) or _breaks_out(loop)):
        return None
    outer = flow.enclosing_loops(index, loop)
    if not outer:
        # A per-step method (``train_discriminator()``, called once per step by a
        # loop elsewhere) runs the micro-step loop, then steps once after it.
        function = flow.enclosing_function(index, loop)
        if function is not None and any(
                flow.any_step(index, site) and flow.precedes(index, loop, site.node)
                and flow.enclosing_function(index, site.node) is function
                for site in flow.calls_in_function(index, function)):
            return loop.iter if isinstance(loop, cst.For) else loop.test
        return None
    if any(flow.any_step(index, e.site) and flow.precedes(index, loop, e.anchor)
           and not flow.is_inside(index, e.anchor, loop)
           for e in flow.events(index, outer[0])):
        return loop.iter if isinstance(loop, cst.For) else loop.test
    return None


def _breaks_out(loop: flow.Loop) -> bool:
    """A ``while`` micro-step loop that ends itself: a ``break`` in its own body
    (``while True: ...; loss.backward(); if should_break: break``), not in a
    nested loop or function."""
    if not isinstance(loop, cst.While):
        return False
    stack: list[cst.CSTNode] = [loop.body]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Break):
            return True
        if isinstance(node, (cst.For, cst.While, cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            continue
        stack.extend(node.children)
    return False


def _stepped_in_its_block(index: SemanticIndex, loop: flow.Loop, backward: flow.Event, step: flow.Event) -> bool:
    """A step later in the backward's own block, in the same loop iteration,
    with no accumulation gate between (a discriminator's two backwards then its
    step): that optimizer consumes this backward's gradients every time it
    runs, whatever other optimizers do under an accumulation test."""
    if backward.inlined and step.anchor is backward.anchor:
        first, second = backward.site.node, step.site.node
    elif not backward.inlined and not step.inlined:
        first, second = backward.anchor, step.anchor
    else:
        return False
    if not flow.precedes(index, first, second) or flow.exclusive(index, first, second):
        return False
    block = next((a for a in index.ancestors(second) if isinstance(a, cst.IndentedBlock)), None)
    if block is None or not flow.is_inside(index, first, block):
        return False
    if flow.enclosing_loops(index, first)[:1] != flow.enclosing_loops(index, second)[:1]:
        return False  # a micro-step loop between them
    if isinstance(loop, (cst.For, cst.While)) and _accumulation_gate(index, step.anchor, loop) is not None:
        return False
    if any(flow.any_step(index, other.site) and flow.precedes(index, first, other.anchor)
           and flow.precedes(index, other.anchor, second) and _gates_apart(index, other, loop, first)
           for other in flow.events(index, loop)):
        # ``loss_g.backward(); if (step + 1) % k == 0: optim_g.step()`` ... ``loss_d.backward();
        # optim_d.step()``: the gated step is this backward's; the later one is another model's
        # (a117 whisper-vits-svc).
        return False
    return _accumulation_test(index, second, block) is None


def _gates_apart(index: SemanticIndex, step: flow.Event, loop: flow.Loop, backward: cst.CSTNode) -> bool:
    """Is ``step`` under an accumulation test that ``backward`` is not under (the generator's
    own gated step, not a lazy regulariser's ``if i % k == 0: reg.backward(); step()``)?"""
    test = _accumulation_test(index, step.anchor, loop)
    return test is not None and not flow.is_inside(index, backward, test)


def _under_same_test(index: SemanticIndex, node: cst.CSTNode, test: cst.If, in_body: bool = True) -> bool:
    """``node`` runs only when ``test`` holds: it sits in the body of another
    ``if`` with the same test (``if step % k == 0: loss.backward() else: with
    model.no_sync(): loss.backward()`` then ``if step % k == 0: opt.step()``):
    the syncing step's own backward. With ``in_body=False``: in the other arm
    of such an ``if`` (the non-stepping iterations' backward)."""
    return any(body == in_body and branch is not test and flow.same_text(branch.test, test.test)
               for branch, body in flow.if_ancestors(index, node))


def _steps_its_own_backward(index: SemanticIndex, backward: flow.Event, step: flow.Event) -> bool:
    """``train_mat()`` runs ``scaler.scale(loss).backward()`` then
    ``scaler.step(opt)`` with no test around the step: the helper call that
    runs the backward also steps after it (another helper called only on some
    iterations does not make this one accumulate)."""
    if step.anchor is not backward.anchor:
        return False
    helper = flow.enclosing_function(index, backward.site.node)
    if helper is None or flow.enclosing_function(index, step.site.node) is not helper \
            or not flow.precedes(index, backward.site.node, step.site.node):
        return False
    return not any(True for _ in flow.if_ancestors(index, step.site.node, stop=helper))


def _step_test_in_a_helper(index: SemanticIndex, loop: flow.Loop, backward: flow.Event) -> Optional[cst.If]:
    """The step sits one helper further down than ``flow.events`` inlines
    (``train_in_steps()`` runs the backward and calls ``update_optimizer()``,
    which steps only ``if curr_step - self.last_opt_step >= self.accumulate:``):
    that accumulation test, when the backward runs outside it."""
    for event in flow.events(index, loop):
        if event.site is backward.site or flow.any_step(index, event.site):
            continue
        for helper in flow.helper_functions(index, event.site):
            for inner in flow.calls_in_function(index, helper):
                if not flow.any_step(index, inner):
                    continue
                for branch, _ in flow.if_ancestors(index, inner.node, stop=helper):
                    if _is_accumulation_test(branch.test):
                        return branch
    return None


def _accumulation_test(index: SemanticIndex, node: cst.CSTNode, loop: flow.Loop) -> Optional[cst.If]:
    """The ``if`` (inside ``loop``) that makes ``node`` run only on some
    iterations: a modulo test, an accumulation counter or flag."""
    for branch, in_body in flow.if_ancestors(index, node, stop=loop):
        if _is_accumulation_test(branch.test):
            return branch
    return None


def _accumulation_gate(index: SemanticIndex, node: cst.CSTNode, loop: flow.Loop) -> Optional[cst.If]:
    """An earlier ``if (i + 1) % k != 0: continue`` in the loop body that
    ``node`` sits after: the step runs only on the iterations it lets through."""
    for statement in flow.earlier_statements(index, node, loop):
        if isinstance(statement, cst.If) and statement.orelse is None \
                and _ends_with_continue(statement.body) and _is_accumulation_test(statement.test):
            return statement
    return None


def _ends_with_continue(body: cst.BaseSuite) -> bool:
    statements = body.body if isinstance(body, cst.IndentedBlock) else [body]
    if not statements:
        return False
    last = statements[-1]
    smalls = last.body if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) else []
    return bool(smalls) and isinstance(smalls[-1], cst.Continue)


def _is_accumulation_test(test: cst.BaseExpression) -> bool:
    stack: list[cst.CSTNode] = [test]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
            return True
        stack.extend(node.children)
    words = " ".join(flow.names_in(test)).lower()
    if any(word in words for word in ACCUMULATION_WORDS):
        return True
    # ``accum_count == accum_steps``: a counter compared with a bound
    return "count" in words and isinstance(test, cst.Comparison)


def _on_wrapped_model(index: SemanticIndex, loop: flow.Loop) -> bool:
    """Some forward in the loop runs a DDP/FSDP-wrapped model, and none runs the
    unwrapped ``model.module`` (the known way to skip the sync)."""
    wrapped = False
    for event in flow.events(index, loop):
        call = event.site.node
        func = flow.model_of_forward(call)
        if isinstance(func, cst.Attribute) and func.attr.value == "module":
            if flow.wrapped_model(index, func.value, event.site.order):
                return False
        if flow.wrapped_model(index, func, event.site.order):
            wrapped = True
        elif not event.inlined and (_hands_wrapped_model(index, event.site)
                                    or _hands_forward_function(index, event.site)):
            wrapped = True  # ``loss = train_batch(model, x, y)``: the helper runs its forward
        elif event.inlined and _helper_runs_wrapped_forward(index, event.site, 0):
            wrapped = True  # ``self.step(x)`` -> ``self.loss(x)`` -> ``train_losses(self.model, ...)``
        elif not event.inlined and _method_of_wrapped_holder(index, event.site):
            wrapped = True  # ``loss = policy.loss(x)`` with ``policy = Policy(FSDP(m), ...)``
    return wrapped


def _method_of_wrapped_holder(index: SemanticIndex, site) -> bool:
    """A method of a project object that holds a DDP/FSDP model in an attribute
    (``policy = Policy(FSDP(m), ...)`` then ``loss = policy.loss(x)``): the method
    runs that model's forward."""
    return bool(_holder_kind(index, site))


def _holder_kind(index: SemanticIndex, site) -> str:
    """"ddp"/"fsdp" for ``_method_of_wrapped_holder``'s calls (the kind every possible
    object holds), "" otherwise."""
    from ddplint.analysis.models import project_of

    if site.receiver is None or site.method is None or dotted_name(site.receiver) is None:
        return ""
    if any(word in site.method.lower() for word in ("ema", "save", "log", "eval", "clip", "unwrap", "state_dict")):
        return ""
    values = index.reaching_values(site.receiver) or []
    # Every object that may be there (``model = Policy(FSDP(m))`` / ``model = DPO(ref, FSDP(m))``
    # in the arms of a task switch) is one.
    classes = {dotted_name(v.func) if isinstance(v, cst.Call) else None for v in values}
    if not classes or None in classes:
        return ""
    kinds = {project_of(index).instance_holds_wrap(index.path, cls) for cls in classes}
    return kinds.pop() if len(kinds) == 1 else ("ddp" if "" not in kinds else "")


def _helper_runs_wrapped_forward(index: SemanticIndex, site, depth: int) -> bool:
    """A call inside a helper the loop runs that, one or two same-module
    helpers further down, runs the forward of a wrapped model or hands one to a
    call (``self.loss(x)`` whose body is ``self.diffusion.train_losses(self.model,
    **inputs)``)."""
    if depth > 2:
        return False
    if depth > 0:
        if flow.wrapped_model(index, flow.model_of_forward(site.node), site.order) \
                or _hands_wrapped_model(index, site):
            return True
    for helper in flow.helper_functions(index, site):
        if any(_helper_runs_wrapped_forward(index, inner, depth + 1)
               for inner in flow.calls_in_function(index, helper)):
            return True
    return False


def _hands_forward_function(index: SemanticIndex, site) -> bool:
    """A function of this module handed to a call (``denoise_fn=partial(
    denoise_fn, ...)``) whose body runs the wrapped model's forward."""
    for arg in site.node.args:
        value = arg.value
        if isinstance(value, cst.Call) and (dotted_name(value.func) or "").endswith("partial") and value.args:
            value = value.args[0].value
        if not isinstance(value, cst.Name) or index.qualified_name(value) is not None:
            continue
        for function in index.functions_named(value.value):
            for inner in flow.calls_in_function(index, function):
                if flow.wrapped_model(index, flow.model_of_forward(inner.node), inner.order):
                    return True
    return False


def _hands_wrapped_model(index: SemanticIndex, site) -> bool:
    if (site.qualified_name or "").startswith("torch.") or site.method in SELF_RETURNING_METHODS:
        return False
    method = (site.method or "").lower()
    if any(word in method for word in ("ema", "save", "log", "eval", "clip", "unwrap", "state_dict")):
        return False
    return any(isinstance(arg.value, (cst.Name, cst.Attribute))
               and flow.wrapped_model(index, arg.value, site.order) for arg in site.node.args)


FRAMEWORK_SYNC = ("set_requires_gradient_sync",)


def _sync_handled(index: SemanticIndex, loop: flow.Loop, backward: cst.CSTNode,
                  backward_site: Optional[cst.CSTNode] = None) -> bool:
    """Something turns the gradient sync off for this backward: ``no_sync()``
    around the backward, its forward or the loop (or bound to a name, entered
    on an ExitStack, done in a helper), ``require_backward_grad_sync``, FSDP2's
    ``set_requires_gradient_sync``, or a framework's accumulation
    (``with accelerator.accumulate(model)``). A ``no_sync()`` that only
    encloses other code of the function (an evaluation pass) does not count."""
    for (scope_id, name), bindings in index.bindings.items():
        if name.endswith("require_backward_grad_sync") or name.endswith("require_forward_param_sync"):
            return True
    for with_node in index.withs:
        # a project's own sync switch around the backward (``with misc.ddp_sync(ddp, last):``)
        if flow.is_inside(index, backward, with_node) and any(_is_sync_switch(index, item.item)
                                                              for item in with_node.items):
            return True
    function = loop if isinstance(loop, cst.FunctionDef) else (flow.enclosing_function(index, loop) or index.module)
    for event in flow.events(index, function):
        site = event.site
        if site.method in FRAMEWORK_SYNC:
            return True
        if site.method == "accumulate" and _is_framework_accumulate(index, site) \
                and not _other_arm(index, event, backward, backward_site):
            return True  # (not one on another arm: ``if use_accelerate: ... else: loss.backward()``)
        if site.method == "no_sync" and not _fsdp_only(index, site.node) \
                and _no_sync_applies(index, event, loop, backward):
            return True
    # ``ctx = model.no_sync if ... else nullcontext``: not traced, assumed to
    # apply, unless it is chosen only for FSDP models.
    for reference in _no_sync_references(index, function):
        if not _fsdp_only(index, reference):
            return True
    return False


def _other_arm(index: SemanticIndex, event: flow.Event, backward: cst.CSTNode,
               backward_site: Optional[cst.CSTNode]) -> bool:
    """Do ``event`` and the backward sit in opposite arms of one ``if`` (compared
    where they are written when both are in the same helper)?"""
    if backward_site is not None and event.anchor is backward and event.inlined:
        return flow.exclusive(index, event.site.node, backward_site)
    return flow.exclusive(index, event.anchor, backward)


def _callers_sync(index: SemanticIndex, region: flow.Loop) -> bool:
    """A per-step function judged on its own whose callers here turn the sync
    off around the call (``with model.no_sync(): self.optimize(...)``)."""
    if not isinstance(region, cst.FunctionDef):
        return False
    for site in flow.callers(index, region):
        around = flow.enclosing_loops(index, site.node)
        outer = around[0] if around else (flow.enclosing_function(index, site.node) or index.module)
        if _sync_handled(index, outer, site.node):
            return True
    return False


def _is_sync_switch(index: SemanticIndex, expr: cst.BaseExpression) -> bool:
    """``misc.ddp_sync(ddp, sync)``, ``sync_context(model, last)``: a helper
    (not a local variable holding ``model.no_sync``) named for switching the
    gradient sync."""
    if not isinstance(expr, cst.Call):
        return False
    name = (dotted_name(expr.func) or "").lower()
    if "sync" not in name.split(".")[-1] or name.endswith("no_sync"):
        return False
    return index.reaching_values(expr.func) is None


def _no_sync_references(index: SemanticIndex, function: cst.CSTNode) -> list[cst.CSTNode]:
    """``model.no_sync`` mentioned without a call (a context factory chosen at run time)."""
    text = index.module.code_for_node(function)
    if "no_sync" not in text:
        return []
    # attribute uses in code, not words in comments
    code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    mentions = len(re.findall(r"\.no_sync\b", code))
    found = []
    for (_, name), bindings in index.bindings.items():
        for binding in bindings:
            value = binding.value
            if value is not None and (isinstance(function, cst.Module) or flow.is_inside(
                    index, binding.node, function)) and \
                    any(n.endswith("no_sync") for n in flow.names_in(value)) and not _calls_no_sync(value):
                found.append(binding.node)
    if not found and mentions > sum(
            1 for e in flow.events(index, function) if e.site.method == "no_sync" and not e.inlined):
        found.append(function)  # elsewhere (an argument, a lambda): assume it applies
    return found


def _calls_no_sync(expr: cst.CSTNode) -> bool:
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "no_sync":
            return True
        stack.extend(node.children)
    return False


def _fsdp_only(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """Under ``if isinstance(model, FSDP):``: a DDP model takes the other path,
    which has no no_sync."""
    for branch, in_body in flow.if_ancestors(index, node):
        if not in_body:
            continue
        stack = [branch.test]
        while stack:
            test = stack.pop()
            if isinstance(test, cst.Call) and dotted_name(test.func) == "isinstance" and len(test.args) == 2:
                kind = index.qualified_name(test.args[1].value) or dotted_name(test.args[1].value) or ""
                if kind.endswith(("FullyShardedDataParallel", "FSDP")):
                    return True
            if isinstance(test, cst.BooleanOperation):
                stack.extend((test.left, test.right))
    return False


def _no_sync_applies(index: SemanticIndex, event: flow.Event, loop: flow.Loop, backward: cst.CSTNode) -> bool:
    """A ``no_sync()`` call that is a ``with`` item applies when the ``with``
    encloses the backward, the loop, or the forward of the backward's loss;
    bound to a name, entered elsewhere or made in a helper, it is assumed to."""
    if event.inlined:
        return True
    item = _with_item_of(index, event.site.node)
    if item is None:
        entered = _entered_on_exit_stack(index, event.site.node)
        if entered is None:
            return True
        with_node, guard = entered
        if guard is not None and not flow.is_inside(index, backward, guard) \
                and not _decided_by_the_step_test(index, index.parent(guard), loop):
            # ``if i_cycle < n - 1: stack.enter_context(model.no_sync())``: only the no-grad
            # recycling passes run unsynced; the last pass, whose loss goes backward, syncs
            # (a55 RoseTTAFold2). (``if (i + 1) % k: stack.enter_context(model.no_sync())``
            # is the accumulation done right.)
            return False
    else:
        with_node = index.parent(item)
    if flow.exclusive(index, with_node, backward):
        # The other arm's no_sync (``if args.fp16: ... else: with model.no_sync():``)
        # does not apply, unless the code chooses right there between syncing
        # and not (``if communicate: loss.backward() else: with no_sync(): ...``)
        # on a test that is not the step's (LVSM's ``if update_grads: with
        # no_sync(): ... else: backward`` has the arms the wrong way round).
        return _chooses_sync(index, with_node, loop, backward)
    if flow.is_inside(index, backward, with_node) or flow.is_inside(index, loop, with_node):
        return True
    # the forward ran inside it: ``with model.no_sync(): loss = model(x)`` then backward
    return any(flow.is_inside(index, e.site.node, with_node) and flow.is_inside(index, e.site.node, loop)
               for e in flow.events(index, loop))


def _decided_by_the_step_test(index: SemanticIndex, branch: cst.CSTNode, loop: flow.Loop) -> bool:
    """Does the ``if`` that enters a ``no_sync()`` test what the loop's optimizer step
    tests (the same names: ``if (i + 1) % k != 0:`` beside ``if (i + 1) % k == 0: step``)?"""
    if not isinstance(branch, cst.If):
        return False
    tested = flow.names_in(branch.test)
    for event in flow.events(index, loop):
        if flow.any_step(index, event.site):
            if any(tested & flow.names_in(test.test) for test, _ in flow.if_ancestors(index, event.site.node)):
                return True
    return False


def _entered_on_exit_stack(index: SemanticIndex, call: cst.Call) -> Optional[tuple[cst.With, Optional[cst.CSTNode]]]:
    """``stack.enter_context(model.no_sync())`` inside ``with ExitStack() as stack:``: that
    ``with``, and the arm of the ``if`` between them that enters it (None when it always
    is entered). None for anything else."""
    enter = index.parent(index.parent(call))  # Call(enter_context) <- Arg <- no_sync()
    if not (isinstance(enter, cst.Call) and isinstance(enter.func, cst.Attribute)
            and enter.func.attr.value == "enter_context" and isinstance(enter.func.value, cst.Name)):
        return None
    stack_name, guard, child = enter.func.value.value, None, enter
    for ancestor in index.ancestors(enter):
        if isinstance(ancestor, cst.If) and guard is None and child is not ancestor.test:
            guard = child  # the arm (body or else) that enters it
        child = ancestor
        if isinstance(ancestor, cst.With) and any(
                isinstance(item.asname, cst.AsName) and isinstance(item.asname.name, cst.Name)
                and item.asname.name.value == stack_name for item in ancestor.items):
            return ancestor, guard
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
            return None
    return None


def _chooses_sync(index: SemanticIndex, with_node: cst.With, loop: flow.Loop, backward: cst.CSTNode) -> bool:
    branch = next((a for a in index.ancestors(with_node) if isinstance(a, cst.If)), None)
    if branch is None or not flow.is_inside(index, backward, branch) or flow.is_inside(index, backward, branch.test):
        return False
    chosen_on = flow.names_in(branch.test)
    choice = index.module.code_for_node(branch.test)
    for event in flow.events(index, loop):
        if not flow.any_step(index, event.site):
            continue
        for node in {id(event.anchor): event.anchor, id(event.site.node): event.site.node}.values():
            for test, _ in flow.if_ancestors(index, node):
                if test is branch or (index.module.code_for_node(test.test) == choice
                                      and ".no_sync(" in index.module.code_for_node(test)):
                    # the choice itself, or the same choice written again in another arm
                    # (timm: ``if has_no_sync and not need_update:`` per input mode), around a
                    # step helper called in its sync arm: not the step's own test
                    continue
                if chosen_on and chosen_on <= flow.names_in(test.test):
                    return False  # the same test decides the step: the arms can be judged
    return True


def _with_item_of(index: SemanticIndex, call: cst.Call) -> Optional[cst.WithItem]:
    for ancestor in index.ancestors(call):
        if isinstance(ancestor, cst.WithItem):
            return ancestor
        if not isinstance(ancestor, (cst.IfExp, cst.BooleanOperation)):
            return None
    return None


def _is_framework_accumulate(index: SemanticIndex, site) -> bool:
    """Accelerate's ``accelerator.accumulate(model)``: a ``with`` item, or a
    receiver that holds an ``Accelerator`` (not ``meter.accumulate()``)."""
    if _with_item_of(index, site.node) is not None and site.node.args:
        return True
    receiver = site.receiver
    name = dotted_name(receiver) if receiver is not None else None
    if name is None:
        return False
    if "accelerator" in name.lower():
        return True
    for binding in index.visible_bindings(name, receiver) or []:
        if isinstance(binding.value, cst.Call) and \
                (index.qualified_name(binding.value.func) or "").startswith("accelerate."):
            return True
    return False
