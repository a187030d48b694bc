"""## What it does
Flags, in a DDP training loop, control flow that can differ across ranks and
changes whether a rank reaches `backward()` (or a collective): a `continue`
before the backward, or a `break` / `return` / `raise` anywhere in the loop,
under a per-rank, data-dependent condition (`if torch.isnan(loss): continue`,
`if batch is None: continue`, a batch pulled with `next(it, None)`, a flag that
a helper of the module returns from a non-finite test of its loss (`loss, ok =
self._forward(batch)` with `if torch.isnan(loss): return None, False`), a value
read from the batch, the loss or the model's outputs, also a selection or comparison
of the batch: `labels = labels[valid]` then `if labels.size(0) == 0: continue`,
`mask = (gt > 0) & (gt < m)` then `if not mask.any(): continue`), and a `break` /
`return` under a rank condition (`if rank == 0 and ...: break`). Leaving the
loop after the backward diverges too: the peers wait in the next step's
all-reduce.

A per-step function (no loop of its own, `train_batch(model, sample, ...)`,
called once per batch) that `return`s or `raise`s before its backward of a DDP
model is flagged the same way when the test reads this rank's non-finite loss
or a parameter that its same-module callers fill with their loop's batch
(`def run_batch(self, batch): if batch is None: return ...`); an arm that every
call switches off (`if raise_on_error: raise ... else: return`, the default
True kept) is not reached.

A DDP training loop is a loop (in DDP context) that runs `backward()`,
directly, in a helper of the module (also `self.m()` whose override in a project
subclass does: `self._train_epoch(epoch)` of an abstract base trainer), or in a helper object of the project
(`loss_scaler(loss, optimizer)` with `loss_scaler: NativeScaler` annotated, whose
`__call__` runs the backward), or hands the DDP/FSDP-wrapped model to
a training function (`fit_one_epoch(model, ...)`, imported or not). A backward
on a private copy of the model (`copy.deepcopy(module)`) or on the unwrapped
`ddp.module` arms no reducer and does not count; nor does a project that wraps no
model anywhere and all-reduces its gradients by hand (`dist.all_reduce(p.grad)`).
A per-step function may also be one a registry hands out (`train_fn =
PIPELINE_DICT[cfg.name]` then `train_fn(data, model, ...)` runs every function
registered with `@PIPELINE_DICT.register_module`), with the model its parameter.
A `raise NotImplementedError` that ends a dispatch on types or arities
(`isinstance(loss, A)` / `len(out) == 3`) answers the program's own objects, the
same on every rank, and is not reported.

A `return` / `continue` / `break` in an `except` handler (bare, `Exception`,
`RuntimeError`, out of memory) of a `try` that runs the step before its backward
counts as per-rank: the exception is this rank's alone (`except RuntimeError as e:
if "out of memory" in str(e): return False` before the backward). Not when the `try`
holds the backward or a collective itself: that may be what failed, on every rank.

A `raise` is reported as a warning: it fails fast on the rank that raises, but
its peers wait in the all-reduce until the collective timeout. So is an `assert`
on a non-finite check of this rank's values (`assert not torch.isnan(loss)`), a
raise in all but name; other asserts (shapes, set-up) hold on every rank or are
bugs of their own, and are not reported.

## Why is this bad?
DDP's backward is a collective: every rank must run it the same number of times.
A rank that skips one backward (its batch was empty, its loss was NaN) leaves
the others waiting in the all-reduce: the job hangs until the NCCL timeout, or
later ranks pair up the wrong buckets and crash with a confusing error.

## Example
    for batch in loader:
        loss = criterion(model(batch["x"]), batch["y"])
        if torch.isnan(loss):
            continue                      # only this rank skips the all-reduce
        loss.backward()

## Use instead
    for batch in loader:
        loss = criterion(model(batch["x"]), batch["y"])
        bad = torch.isnan(loss).float()
        dist.all_reduce(bad, op=dist.ReduceOp.MAX)   # every rank agrees
        if bad.item() > 0:
            optimizer.zero_grad()
            continue
        loss.backward()

Not flagged: a `raise` that the `try` around it catches within the iteration
(`raise StopIteration` under `except StopIteration:` that fetches a fresh batch,
also from a loop inside the `try` that only fetches batches); conditions computed
from all-reduced / broadcast values, also
through a helper of the project that all-reduces a value and returns it
(`if any_rank_nan(loss): continue`), or through a list filled only with
values all-reduced before each append (`np.mean(logs["loss"])`); step and epoch counters
(`if step >= max_steps: break`, also the index of `enumerate` behind a
progress bar: `bar = tqdm(enumerate(loader))`, `for i, batch in bar:`, or
`with tqdm(range(n)) as bar: for epoch in bar:`, or `pbar = tqdm(pbar)` over a
`pbar = range(n)`); the `else: raise NotImplementedError` of a switch over one configuration
value (`if name == "kitti": ... elif name == "nuscenes": ...`), the same on every
rank even under a rank guard; loops over configuration (optimizers,
parameter groups, `dict.items()`) skipping on counters; `sys.exit` on a
non-finite loss (the process ends and the launcher tears the job down); loops
that only some ranks enter (under a rank guard, or in a function every call of
which is rank-guarded: there are no peers to leave); a
`continue` after the last backward and collective of the iteration; exits of
inner loops that do not skip the backward; tests that read only the graph's
set-up (`if not loss.requires_grad: raise ...`, `if out.grad_fn is None:`),
which is the same on every rank; the short last batch of a loader whose sampler
is a `DistributedSampler` (`if x.size(0) != args.batch_size: continue` with
`DataLoader(ds, sampler=sampler, batch_size=args.batch_size)`): every rank gets
as many samples, so every rank skips the same step (not after `x = x[mask]`).

## References
- https://pytorch.org/docs/stable/notes/ddp.html#internal-design
- https://pytorch.org/docs/stable/distributed.html#debugging-torch-distributed-applications
"""

from __future__ import annotations

import re
from typing import Iterator, Optional, Union

import libcst as cst

from ddplint.analysis import flow
from ddplint.names import is_test_module
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import SemanticIndex, dotted_name, unpack_position

try:  # the shared rank-condition definition (RULES.md), when present
    from ddplint.analysis.ranks import is_rank_condition as _shared_rank_condition
except ImportError:  # pragma: no cover - older checkouts
    _shared_rank_condition = None

DIST = """\
import math
import sys
import torch
import torch.distributed as dist
"""

COLLECTIVES = ("all_reduce", "all_gather", "broadcast", "reduce_scatter", "barrier",
               "all_gather_into_tensor", "all_to_all")


class RankDivergentSkipBeforeBackward(Rule):
    code, name, severity = "DDP014", "rank-divergent-skip-before-backward", "error"
    message = ("this rank may skip backward() while its peers run it: DDP's all-reduce then "
               "hangs; agree on the decision across ranks first (all_reduce the flag)")
    triggers = ("continue", "break", "return", "raise", "assert")
    needs_ddp_context = True

    valid = [
        # A dispatch on the loss object's type (and on the arity of what it returns) raises for
        # an unsupported kind: the program's own types, the same on every rank.
        Valid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
def fit(net, loss_fn, loader, opt):
    model = DDP(net.cuda())
    for batch in loader:
        if isinstance(loss_fn, PairLoss):
            ret = loss_fn(model(batch[0]), model(batch[1]))
        elif isinstance(loss_fn, PointLoss):
            ret = loss_fn(model(batch[0]), batch[1])
        else:
            raise NotImplementedError(type(loss_fn))
        if len(ret) == 2:
            loss, info = ret
        else:
            raise NotImplementedError
        loss.backward()
        opt.step()
"""),
        # No model is wrapped anywhere: the gradients are averaged by hand after the step's
        # backward, and the type dispatch raises the same on every rank (a118 allenact).
        Valid(DIST + """\
def run_pipeline(actor_critic, losses, batches, optimizer):
    for batch in batches:
        total = 0
        for loss in losses:
            try:
                out = actor_critic(batch)
            except ValueError:
                save_error_data(batch)
                raise
            if isinstance(loss, ActorCriticLoss):
                current = loss.loss(out, batch)
            else:
                raise NotImplementedError(type(loss))
            total = total + current
        optimizer.zero_grad()
        total.backward()
        for p in actor_critic.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
        optimizer.step()
"""),
        # Resuming: skip the steps done before, counted from tqdm's ``trange`` epoch counter and
        # the step index: the same on every rank (a111 compositional_SLMs).
        Valid(DIST + """\
from tqdm import trange, tqdm
from torch.nn.parallel import DistributedDataParallel as DDP
def train(net, loader, opt, epochs, max_recover_step=-1):
    model = DDP(net.cuda())
    for epoch in trange(0, int(epochs), desc="Epoch"):
        for step, batch in enumerate(tqdm(loader)):
            curr_step = step + epoch * len(loader)
            if curr_step <= max_recover_step:
                continue
            loss = model(batch).mean()
            loss.backward()
            opt.step()
"""),
        # The try holds the backward itself: the all-reduce may be what failed, on every rank.
        Valid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
def train(net, loader, opt):
    model = DDP(net.cuda())
    for x in loader:
        loss = model(x).mean()
        try:
            loss.backward()
        except RuntimeError:
            break
        opt.step()
"""),
        # A handler of the loader's exhaustion only (the try runs no step): every rank goes on.
        Valid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
def train(net, loader, opt, steps):
    model = DDP(net.cuda())
    it = iter(loader)
    for _ in range(steps):
        try:
            x = next(it)
        except Exception:
            it = iter(loader)
            continue
        model(x).mean().backward()
        opt.step()
"""),
        # The else of a switch over a configuration value (no such dataset): the same on every rank (a75 samtemp).
        Valid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
def train(args, loader, net, opt, name):
    model = DDP(net)
    for batch in loader:
        loss = model(batch).mean()
        loss.backward()
        opt.step()
        if args.local_rank < 1:
            if name == 'kitti':
                log(batch, 1)
            elif name == 'nuscenes':
                log(batch, 2)
            else:
                raise NotImplementedError
"""),
        # A progress bar rebound over the counter's range: ``i`` still counts steps (a73 StyleMapGAN).
        Valid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm
def train(args, loader, net, opt):
    model = DDP(net)
    pbar = range(args.start_iter, args.iter)
    pbar = tqdm(pbar, initial=args.start_iter)
    for i in pbar:
        if i > args.iter:
            break
        loss = model(next(loader)).mean()
        loss.backward()
        opt.step()
"""),
        # ... also with the items unpacked from a slice of the batch tuple.
        Valid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler
def train(args, ds, net, opt):
    model = DDP(net)
    sampler = RandomSampler(ds) if args.local_rank == -1 else DistributedSampler(ds)
    loader = DataLoader(ds, sampler=sampler, batch_size=args.train_batch_size)
    for step, batch in enumerate(loader):
        input_ids, labels = batch[:2]
        if input_ids.size()[0] != args.train_batch_size:
            continue
        loss = model(input_ids, labels).mean()
        loss.backward()
        opt.step()
"""),
        # The short last batch of a DistributedSampler loader (its own batch_size): every rank has
        # as many samples, so every rank skips the same step.
        Valid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler
def train(args, ds, net, opt):
    model = DDP(net)
    sampler = RandomSampler(ds) if args.local_rank == -1 else DistributedSampler(ds)
    loader = DataLoader(ds, sampler=sampler, batch_size=args.train_batch_size)
    for step, batch in enumerate(loader):
        input_ids, labels = batch
        if input_ids.size()[0] != args.train_batch_size:
            continue
        loss = model(input_ids, labels).mean()
        loss.backward()
        opt.step()
"""),
        Valid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler
from tqdm import tqdm
def fit(cfg, ds, net, opt):
    model = DDP(net)
    loader = DataLoader(ds, batch_size=cfg.bs, sampler=DistributedSampler(ds, shuffle=True))
    for epoch in range(cfg.epochs):
        loader.sampler.set_epoch(epoch)
        for i, (x, y) in tqdm(enumerate(loader)):
            if len(x) < cfg.bs:
                continue
            model(x).sum().backward()
            opt.step()
"""),
        # The step counter of ``enumerate``, the progress bar only on rank 0 (a56 nia23soc).
        Valid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm
def train(config, net, train_loader, opt):
    model = DDP(net.cuda())
    if config.rank in [-1, 0]:
        pbar = tqdm(enumerate(train_loader), total=len(train_loader))
    else:
        pbar = enumerate(train_loader)
    for step, (images, labels) in pbar:
        model(images.cuda()).mean().backward()
        opt.step()
        if config.debug and step > 16:
            break
"""),
        # A ``raise`` that the ``try`` around it catches: the step goes on with a fresh batch (a58 BiSeNet).
        Valid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
def train(net, dl, sampler, opt, max_iter, n_img_per_gpu):
    model = DDP(net.cuda())
    diter, epoch = iter(dl), 0
    for it in range(max_iter):
        try:
            im, lb = next(diter)
            if not im.size()[0] == n_img_per_gpu:
                raise StopIteration
        except StopIteration:
            epoch += 1
            sampler.set_epoch(epoch)
            diter = iter(dl)
            im, lb = next(diter)
        loss = model(im.cuda()).mean()
        loss.backward()
        opt.step()
"""),
        # ... also from inside a loop that only fetches a usable batch (a92 Mul-Datasets).
        Valid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
def train(net, dl, opt, max_iter, n_img_per_gpu):
    model = DDP(net.cuda())
    diter = iter(dl)
    for it in range(max_iter):
        try:
            im, lb = next(diter)
            while torch.min(lb) == 255:
                im, lb = next(diter)
                if not im.size()[0] == n_img_per_gpu:
                    raise StopIteration
        except StopIteration:
            diter = iter(dl)
            im, lb = next(diter)
        loss = model(im.cuda()).mean()
        loss.backward()
        opt.step()
"""),
        # A returned flag decided by a counter, or by a non-finite test the helper all-reduced first.
        Valid(DIST + """\
class Trainer:
    def _forward(self, batch, step):
        loss = self.model(batch["x"]).mean()
        if step < self.warmup:
            return loss, False
        return loss, True
    def fit(self, loader):
        for step, batch in enumerate(loader):
            loss, ready = self._forward(batch, step)
            if not ready:
                continue
            loss.backward()
            self.opt.step()
"""),
        Valid(DIST + """\
class Trainer:
    def _forward(self, batch):
        loss = self.model(batch["x"]).mean()
        bad = (~torch.isfinite(loss)).float()
        dist.all_reduce(bad, op=dist.ReduceOp.MAX)
        if bad.item() > 0:
            return loss, False
        return loss, True
    def fit(self, loader):
        for batch in loader:
            loss, ok = self._forward(batch)
            if not ok:
                continue
            loss.backward()
            self.opt.step()
"""),
        # The decision is all-reduced first.
        Valid(DIST + """\
for batch in loader:
    loss = model(batch).mean()
    bad = torch.isnan(loss).float()
    dist.all_reduce(bad, op=dist.ReduceOp.MAX)
    if bad.item() > 0:
        continue
    loss.backward()
"""),
        Valid(DIST + """\
for step, batch in enumerate(loader):
    if step >= max_steps:
        break
    if step < start_step:
        continue
    model(batch).mean().backward()
"""),
        Valid(DIST + """\
for batch in loader:
    loss = model(batch).mean()
    loss_value = loss.item()
    if not math.isfinite(loss_value):
        print("Loss is {}, stopping training".format(loss_value))
        sys.exit(1)
    loss.backward()
"""),
        # The check after the backward.
        Valid(DIST + """\
for batch in loader:
    loss = model(batch).mean()
    loss.backward()
    if torch.isnan(loss):
        continue
    optimizer.step()
"""),
        # The continue belongs to an inner loop.
        Valid(DIST + """\
for batch in loader:
    loss = model(batch).mean()
    loss.backward()
    for p in model.parameters():
        if p.grad is None:
            continue
        p.grad.mul_(0.5)
"""),
        # Not a training loop.
        Valid(DIST + """\
for batch in loader:
    if batch is None:
        continue
    evaluate(batch)
"""),
        Valid(DIST + """\
flag = torch.zeros(1)
for batch in loader:
    if batch is None:
        flag.fill_(1)
    dist.all_reduce(flag)
    if flag.item():
        break
    model(batch).mean().backward()
"""),
        # A flag broadcast from rank 0.
        Valid(DIST + """\
for batch in loader:
    stop = torch.tensor([early_stop()])
    dist.broadcast(stop, src=0)
    if stop.item():
        break
    model(batch).mean().backward()
"""),
        # A counter from a wrapped range (LAVIS's ``log_every(range(n))``).
        Valid(DIST + """\
for i in metric_logger.log_every(range(iters_per_epoch), 50, header):
    if i >= iters_per_epoch:
        break
    samples = next(data_loader)
    model(samples).mean().backward()
"""),
        # A helper's result decides (it returns None while accumulating).
        Valid(DIST + """\
for i, batch in enumerate(loader):
    result = train_step_eager(model, batch, accum_state)
    if result is None:
        continue
    losses, accum_state = result
    losses["loss"].backward()
"""),
        # The backward runs on a private deep copy (no reducer): not a DDP training loop.
        Valid(DIST + """\
import copy
from torch.nn.parallel import DistributedDataParallel as DDP

def probe_grad(net, xb):
    twin = copy.deepcopy(net)
    twin(xb).sum().backward()
    return [p.grad for p in twin.parameters()]

def first_match(net, xb, reference):
    for shift in (0, 1):
        if torch.allclose(reference, probe_grad(net, xb + shift)[0]):
            return shift
    return None

def train(net, loader, opt):
    ddp = DDP(net)
    for xb in loader:
        out = ddp(xb).sum()
        out.backward()
        first_match(ddp.module, xb, out)
        opt.step()
"""),
        # The same through a loss helper of another module that runs the copy's forward.
        Valid(DIST + """\
import copy
from losses import l2_loss

def reference_grad(net, batch):
    shadow = copy.deepcopy(net)
    l2_loss(shadow, batch).backward()
    return [p.grad for p in shadow.parameters()]

def matching_offset(net, batch, synced):
    for offset in (0, 1):
        if torch.allclose(synced, reference_grad(net, batch + offset)[0]):
            return offset
    return None
"""),
        # A loop that only rank 0 enters (every call is rank-guarded) has no peers to leave.
        Valid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP

def sanity_check(model, batches):
    for xb in batches:
        loss = model(xb).mean()
        if torch.isnan(loss):
            return False
        loss.backward()
    return True

def train(model, loader, opt, rank):
    model = DDP(model)
    for xb in loader:
        model(xb).mean().backward()
        opt.step()
    if rank == 0:
        sanity_check(model, loader)
"""),
        # Skipping a loop over plans that is not a training loop.
        Valid(DIST + """\
for plan in plans:
    if isinstance(plan, LocalPlan):
        continue
    dist.all_gather_object(out, plan.signature())
"""),
        Valid(DIST + """\
while True:
    for x in loader:
        model(x).sum().backward()
    if epoch >= args.epochs:
        break
    epoch += 1
"""),
        # The skip condition comes from a helper that all-reduces and returns it.
        Valid(DIST + """\
def any_rank_bad(loss):
    flag = torch.isnan(loss).float()
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return flag

for batch in loader:
    loss = model(batch).mean()
    if any_rank_bad(loss).item():
        continue
    loss.backward()
"""),
        Valid(DIST + """\
def agreed_nonfinite(loss):
    bad = (~torch.isfinite(loss)).float()
    dist.all_reduce(bad)
    return bad

for batch in loader:
    loss = model(batch).mean()
    skip = agreed_nonfinite(loss)
    if skip > 0:
        continue
    loss.backward()
"""),
        # A loop over optimizers whose skips read iteration counters only.
        Valid(DIST + """\
def step(self, batch):
    for name, op in self.optimizers.items():
        if op["start_iteration"] > self.last_iter:
            continue
        if op["end_epoch"] > 0 and op["end_epoch"] <= self.last_epoch:
            continue
        out = self.model(batch)
        out["loss"].backward()
        op["optimizer"].step()
"""),
        # The norm of gradients DDP already averaged is the same on every rank.
        Valid(DIST + """\
for batch in loader:
    loss = model(batch).mean()
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if not torch.isfinite(grad_norm):
        optimizer.zero_grad()
        continue
    dist.barrier()
    optimizer.step()
"""),
        # An epoch loop whose break every rank takes (a counter).
        Valid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
from engine import fit_one_epoch
model = DDP(net)
for epoch in range(start, epochs):
    fit_one_epoch(model, loader, optimizer, epoch)
    if epoch + 1 >= stop_epoch:
        break
"""),
        # A set-up check of the graph (the task defines no loss): the same on every rank.
        Valid(DIST + """\
for x, y in loader:
    loss = criterion(model(x), y)
    if not loss.requires_grad:
        raise RuntimeError("the task defines no loss")
    if loss.grad_fn is None:
        continue
    loss.backward()
    opt.step()
"""),
        # The step counter of a progress bar over enumerate(loader): every rank
        # stops at the same iteration.
        Valid(DIST + """\
from tqdm import tqdm
from torch.nn.parallel import DistributedDataParallel as DDP

def train_epoch(model, loader, opt, max_iters):
    bar = tqdm(enumerate(loader), total=max_iters)
    for it, sample in bar:
        loss = model(sample["x"].cuda()).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if it == max_iters - 1:
            break

train_epoch(DDP(net), loader, opt, 500)
"""),
        # The epoch counter of a progress bar bound by ``with``: the same on every rank.
        Valid(DIST + """\
import tqdm

def fit(model, loader, opt, n_epochs):
    with tqdm.tqdm(range(n_epochs)) as bar:
        for epoch in bar:
            if epoch > n_epochs:
                break
            for xb in loader:
                model(xb).mean().backward()
                opt.step()
"""),
        # A history filled only with all-reduced values: every rank tests the same mean.
        Valid(DIST + """\
import numpy as np

def train(model, loader, opt, distributed):
    logs = {"loss": []}
    for xb in loader:
        loss = model(xb).mean()
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        if distributed:
            dist.all_reduce(avg, dist.ReduceOp.AVG)
        logs["loss"].append(avg.item())
        if not np.isfinite(np.mean(logs["loss"])):
            raise RuntimeError("diverged")
"""),
        Valid(DIST + """\
import numpy as np

def train(model, loader, opt):
    seen = []
    for xb in loader:
        loss = model(xb).mean()
        loss.backward()
        opt.step()
        t = torch.tensor([loss.item()])
        dist.all_reduce(t)
        seen.append(t.item() / dist.get_world_size())
        if np.isnan(sum(seen)):
            break
"""),
        # A per-step function that returns on configuration, or after its backward.
        Valid(DIST + """\
class Runner:
    def run_batch(self, batch, i):
        if not self.trainable:
            return None
        out = self.model(batch["x"])
        out.sum().backward()
        if torch.isnan(out.sum()):
            return None
        self.opt.step()
        return i

    def run_epoch(self, loader):
        for i, batch in enumerate(loader):
            self.run_batch(batch, i)
"""),
        # A parameter its callers do not take from a loop: not this rank's batch.
        Valid(DIST + """\
def train_step(model, sample, opt, schedule):
    if schedule is None:
        return
    model(sample).mean().backward()
    opt.step()

def main(model, loader, opt):
    schedule = make_schedule()
    for sample in loader:
        train_step(model, sample, opt, schedule)
"""),
        # The arm every call switches off (``strict`` keeps its default True): not reached.
        Valid(DIST + """\
class Trainer:
    def run_step(self, batch, strict=True):
        loss = self.model(batch).mean()
        if not torch.isfinite(loss):
            if strict:
                sys.exit(1)
            else:
                return
        loss.backward()
        self.opt.step()

    def epoch(self, loader):
        for batch in loader:
            self.run_step(batch)
"""),
        # An epoch counter from a range with or without a progress bar (two branches).
        Valid(DIST + """\
from tqdm import tqdm

def fit(model, loader, opt, n_epochs, stop_at, show_bar):
    if show_bar:
        epochs = tqdm(range(n_epochs))
    else:
        epochs = range(n_epochs)
    for epoch in epochs:
        for xb in loader:
            model(xb).mean().backward()
            opt.step()
        if epoch >= stop_at:
            break
"""),
        # A step counter over a range that rank 0 wraps in a progress bar, offset by the
        # resumed step (the same on every rank): every rank stops at the same step.
        Valid(DIST + """\
from tqdm import tqdm

def train(args, model, batches, opt):
    steps = range(args.total_steps)
    if dist.get_rank() == 0:
        steps = tqdm(steps, initial=args.resume_step)
    for idx in steps:
        step = idx + args.resume_step + 1
        if step > args.total_steps:
            break
        loss = model(next(batches)).mean()
        loss.backward()
        opt.step()
"""),
        # The same with the bar applied on an else arm and the counter tested directly.
        Valid(DIST + """\
import tqdm as tq

def fit(model, loader, opt, n_iters, verbose):
    iters = range(n_iters)
    if not verbose:
        pass
    else:
        iters = tq.tqdm(iters, dynamic_ncols=True)
    data = iter(loader)
    for it in iters:
        if it >= n_iters:
            break
        model(next(data)).sum().backward()
        opt.step()
"""),
        # The range half of a zip with the loader is a counter: every rank stops at the same step.
        Valid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP

def train_epoch(net, loader, opt, n_iter, warm):
    for (images, targets), step in zip(loader, range(n_iter)):
        if step < warm:
            continue
        loss = net(images, targets).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

train_epoch(DDP(model), loader, opt, 100, 10)
"""),
        Valid(DIST + """\
def fit(model, loader, opt, limit):
    for (i, batch), _ in zip(enumerate(loader), range(limit)):
        if i >= limit - 1:
            break
        model(batch).sum().backward()
        opt.step()
"""),
        # An assert that is not a non-finite check (shapes: the same on every rank or a bug of its own),
        # and one on a value every rank agrees on.
        Valid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
def train(net, loader, opt):
    model = DDP(net.cuda())
    for x, y in loader:
        assert x.shape[0] == y.shape[0], "batch mismatch"
        loss = model(x, y)
        total = loss.detach().clone()
        dist.all_reduce(total)
        assert torch.isfinite(total), "diverged"
        loss.backward()
        opt.step()
"""),
        # A unit test's asserts are what it checks (Megatron's tests/unit_tests).
        Valid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
def test_training_steps(net, loader, opt):
    model = DDP(net.cuda())
    for x, y in loader:
        loss = model(x, y)
        assert torch.isfinite(loss)
        loss.backward()
        opt.step()
""", filename="tests/unit_tests/test_ddp_steps.py"),
        # A non-finite assert that the ``try`` around it catches: the step goes on.
        Valid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
def train(net, loader, opt):
    model = DDP(net.cuda())
    for x, y in loader:
        loss = model(x, y)
        try:
            assert torch.isfinite(loss)
        except AssertionError:
            loss = loss.nan_to_num()
        loss.backward()
        opt.step()
"""),
    ]
    invalid = [
        # A step function handed parts of the loop's batch (``sample["disparity"]``) returns
        # when this rank's batch has no valid pixel, before the backward its peers run (a81 ADL).
        Invalid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP


def main(net, loader, optimizer, args, gpu):
    model = DDP(net.cuda(gpu), device_ids=[gpu])
    for epoch in range(args.epochs):
        for batch_idx, sample in enumerate(loader):
            loss = train(model, optimizer, sample["left"], sample["disparity"], gpu)


def train(model, optimizer, img, disp, gpu):
    img, disp = img.cuda(gpu), disp.cuda(gpu)
    mask = (disp < 192) * (disp > 0)
    if mask.sum() == 0:
        return 0.0
    optimizer.zero_grad()
    loss = (model(img)[mask] - disp[mask]).abs().mean()
    loss.backward()
    optimizer.step()
    return loss.item()
""", line=19, column=9),
        # An abstract base trainer's epoch loop: the subclass's _train_epoch runs the backward
        # (a109 MVSFormer); only rank 0 stops early.
        Invalid("""\
import torch.distributed as dist


class BaseTrainer:
    def __init__(self, model, rank=0):
        self.model = model
        self.rank = rank

    def _train_epoch(self, epoch):
        raise NotImplementedError

    def train(self):
        not_improved = 0
        for epoch in range(100):
            result = self._train_epoch(epoch)
            if self.rank == 0:
                if result["loss"] > self.best:
                    not_improved += 1
                if not_improved > 10:
                    break


class Trainer(BaseTrainer):
    def _train_epoch(self, epoch):
        for batch in self.loader:
            loss = self.model(batch).mean()
            loss.backward()
        return {"loss": loss.item()}
""", line=20, column=21),
        # A ``raise`` out of the training loop itself: the ``except`` around the loop ends this
        # rank's epoch while its peers run the next backward.
        Invalid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
def train(net, dl, opt, epochs):
    model = DDP(net.cuda())
    for epoch in range(epochs):
        try:
            for im, lb in dl:
                if torch.min(lb) == 255:
                    raise StopIteration
                loss = model(im.cuda()).mean()
                loss.backward()
                opt.step()
        except StopIteration:
            continue
""", line=12, column=21, severity="warning"),
        # An out-of-memory error in this rank's forward: the step function returns before the
        # backward its peers run (aps).
        Invalid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
class Trainer:
    def __init__(self, net):
        self.model = DDP(net.cuda())
    def train_one_step(self, batch):
        try:
            loss = self.model(batch).mean()
        except RuntimeError as err:
            if "out of memory" in str(err):
                torch.cuda.empty_cache()
                return False
            raise
        loss.backward()
        return True
    def run(self, loader):
        for batch in loader:
            self.train_one_step(batch)
""", line=15, column=17),
        # A failed assert on this rank's non-finite loss is a raise in all but name: a warning.
        Invalid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
def train(net, loader, opt):
    model = DDP(net.cuda())
    for x, y in loader:
        preds = model(x)
        loss = torch.nn.functional.cross_entropy(preds, y)
        assert not torch.isnan(loss).item(), f"NAN IN LOSS ON GPU {torch.cuda.current_device()}"
        loss.backward()
        opt.step()
""", line=11, column=9, severity="warning"),
        # ... but one that no handler around it catches leaves the loop on this rank alone.
        Invalid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
def train(net, loader, opt):
    model = DDP(net.cuda())
    for step, (x, y) in enumerate(loader):
        try:
            loss = model(x.cuda()).mean()
            if not torch.isfinite(loss):
                raise FloatingPointError(step)
        except StopIteration:
            continue
        loss.backward()
        opt.step()
""", line=12, column=17, severity="warning"),
        # A short batch of a loader without a DistributedSampler (each rank its own shard), or of
        # a batch this rank filtered first: per rank.
        Invalid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
def fit(cfg, shard, net, opt):
    model = DDP(net)
    loader = DataLoader(shard, batch_size=cfg.bs, shuffle=True)
    for epoch in range(cfg.epochs):
        for x, y in loader:
            if x.size(0) != cfg.bs:
                continue
            model(x).sum().backward()
            opt.step()
""", line=13, column=17, severity="error"),
        Invalid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler
def fit(cfg, ds, net, opt):
    model = DDP(net)
    loader = DataLoader(ds, batch_size=cfg.bs, sampler=DistributedSampler(ds))
    for epoch in range(cfg.epochs):
        for x, y in loader:
            x = x[y >= 0]
            if x.shape[0] != cfg.bs:
                continue
            model(x).sum().backward()
            opt.step()
""", line=14, column=17, severity="error"),
        # A flag returned by a method of the class that a non-finite test of this rank's loss
        # decides (``return None, False`` under ``if torch.isnan(loss)``), at its place in the tuple.
        Invalid(DIST + """\
class Trainer:
    def _forward(self, batch):
        loss = self.model(batch["x"]).mean()
        if torch.isnan(loss) or torch.isinf(loss):
            return None, False
        return loss, True
    def fit(self, loader):
        for batch in loader:
            loss, ok = self._forward(batch)
            if not ok:
                continue
            loss.backward()
            self.opt.step()
""", line=15, column=17, severity="error"),
        Invalid(DIST + """\
class Runner:
    def _step_loss(self, batch):
        loss = self.net(batch).mean()
        if loss.item() > 1e4:
            return loss, False, {}
        elif not torch.isfinite(loss):
            return loss, False, {}
        return loss, True, {"loss": loss.item()}
    def run(self):
        it = iter(self.loader)
        for _ in range(self.steps):
            loss, good, logs = self._step_loss(next(it))
            if not good:
                continue
            loss.backward()
            self.opt.step()
""", line=18, column=17, severity="error"),
        # A structural check joined with a per-rank value check is per rank.
        # The loader half of a zip with a range yields data: a None batch is per rank.
        Invalid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP

def train_epoch(net, loader, opt, n_iter):
    for (images, targets), step in zip(loader, range(n_iter)):
        if images is None:
            continue
        loss = net(images, targets).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

train_epoch(DDP(model), loader, opt, 100)
""", line=10, column=13, severity="error"),
        Invalid(DIST + """\
def fit(model, loader, opt, n):
    for it, sample in zip(range(n), loader):
        if sample["mask"].sum() == 0:
            continue
        model(sample["x"]).mean().backward()
        opt.step()
""", line=8, column=13, severity="error"),
        # A progress bar wrapped around the loader (not a range) yields data:
        # a test on the batch is per rank.
        Invalid(DIST + """\
from tqdm import tqdm

def train(model, loader, opt):
    batches = loader
    if dist.get_rank() == 0:
        batches = tqdm(batches)
    for batch in batches:
        if batch is None:
            continue
        loss = model(batch).mean()
        loss.backward()
        opt.step()
""", line=13, column=13, severity="error"),
        Invalid(DIST + """\
for x, y in loader:
    loss = criterion(model(x), y)
    if loss.requires_grad and not torch.isfinite(loss):
        continue
    loss.backward()
    opt.step()
""", line=8, column=9, severity="error"),
        # The loss parts are reduced to rank 0 for logging only after the test: the test is per rank.
        Invalid(DIST + """\
for x, y in loader:
    parts = criterion(model(x), y)
    loss = parts.sum()
    if torch.isnan(loss).any():
        continue
    loss.backward()
    opt.step()
    dist.reduce(parts, dst=0)
""", line=9, column=9, severity="error"),
        Invalid(DIST + """\
for batch in loader:
    loss = model(batch).mean()
    if torch.isnan(loss):
        continue
    loss.backward()
""", line=8, column=9, severity="error"),
        Invalid(DIST + """\
for step, batch in enumerate(loader):
    if batch is None:
        continue
    model(batch).mean().backward()
""", line=7, column=9, severity="error"),
        Invalid(DIST + """\
def train(model, loader, optimizer):
    for images, targets in loader:
        if len(targets) == 0:
            return
        loss = model(images, targets).mean()
        loss.backward()
""", line=8, column=13, severity="error"),
        Invalid(DIST + """\
for batch in loader:
    loss = model(batch).mean()
    if not torch.isfinite(loss):
        raise RuntimeError("non-finite loss")
    loss.backward()
""", line=8, column=9, severity="warning"),
        # A break under a rank condition.
        Invalid(DIST + """\
rank = dist.get_rank()
for step, batch in enumerate(loader):
    model(batch).mean().backward()
    if rank == 0 and time_is_up():
        break
""", line=9, column=9, severity="error"),
        Invalid(DIST + """\
for batch in loader:
    if batch["input_ids"].numel() == 0:
        continue
    loss = model(batch["input_ids"]).loss
    loss.backward()
""", line=7, column=9, severity="error"),
        Invalid(DIST + """\
for x, y in loader:
    out = model(x)
    loss = criterion(out, y)
    if math.isnan(loss.item()):
        print("skipping")
        continue
    loss.backward()
""", line=10, column=9, severity="error"),
        # A skip that also skips an explicit collective.
        Invalid(DIST + """\
for batch in loader:
    loss = model(batch).mean()
    loss.backward()
    if batch["weight"].sum() == 0:
        continue
    stats = torch.stack([loss.detach()])
    dist.all_reduce(stats)
""", line=9, column=9, severity="error"),
        # An epoch loop hands the DDP model to an imported training function,
        # then only rank 0 leaves.
        Invalid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
from engine import fit_one_epoch
model = DDP(net)
rank = dist.get_rank()
for epoch in range(epochs):
    fit_one_epoch(model, loader, optimizer, epoch)
    if rank == 0 and early_stopper.should_stop():
        break
""", line=12, column=9, severity="error"),
        # Batches pulled with next() in `while True`.
        Invalid(DIST + """\
it = iter(loader)
while True:
    xb = next(it, None)
    if xb is None:
        continue
    model(xb).mean().backward()
    optimizer.step()
""", line=9, column=9, severity="error"),
        # A per-rank break after the backward: peers wait in the next step's all-reduce.
        Invalid(DIST + """\
for epoch in range(update_epochs):
    for mb in minibatches:
        out = model(mb)
        out.mean().backward()
        optimizer.step()
        approx_kl = (out.detach() - mb).pow(2).mean().item()
    if approx_kl > target_kl:
        break
""", line=12, column=9, severity="error"),
        # Only the main rank returns out of the training loop.
        Invalid(DIST + """\
def train(model, loader, optimizer, args):
    for i, batch in enumerate(loader):
        loss = model(batch).mean()
        loss.backward()
        optimizer.step()
        if dist.get_rank() == 0:
            if math.isnan(meter.avg):
                return False
    return True
""", line=12, column=17, severity="error"),
        # A NaN check on the local loss; the collective nearby agrees on another flag.
        Invalid(DIST + """\
for batch_group in loader:
    for batch in batch_group:
        done = torch.tensor(0)
        torch.distributed.all_reduce(done, torch.distributed.ReduceOp.SUM)
        if done.item() > 0:
            break
        loss = model(batch)["loss"]
        if torch.isnan(loss):
            raise ValueError("nan loss encountered")
        loss.backward()
""", line=13, column=13, severity="warning"),
        # Shared gap 1: wrapped on one arm only, then handed to an imported epoch function.
        Invalid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP
from engine import fit_one_epoch

def main(net, loader, opt, epochs, distributed):
    if distributed:
        net = DDP(net)
    else:
        net = net.cuda()
    for epoch in range(epochs):
        fit_one_epoch(net, loader, opt)
        if dist.get_rank() == 0 and stopper.done():
            break
""", line=16, column=13, severity="error"),
        # The same helper called by every rank: a rank that returns early skips the backward.
        Invalid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP

def sanity_check(model, batches):
    for xb in batches:
        loss = model(xb).mean()
        if torch.isnan(loss):
            return False
        loss.backward()
    return True

def train(model, loader, opt, rank):
    model = DDP(model)
    if sanity_check(model, loader) and rank == 0:
        print("ok")
""", line=11, column=13, severity="error"),
        # ``tqdm(loader)`` yields data, not a counter.
        Invalid(DIST + """\
from tqdm import tqdm
def train(model, loader, optimizer):
    for images, labels in tqdm(loader):
        if images is None:
            continue
        model(images).sum().backward()
        optimizer.step()
""", line=9, column=13, severity="error"),
        # The batch keeps only its valid samples; a rank whose batch has none
        # skips the backward its peers run.
        Invalid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP

def train_epoch(model, loader, opt):
    for it, sample in enumerate(loader):
        targets = sample["targets"].cuda().float()
        logits = model(sample["x"].cuda())
        keep = sample["keep"].cuda() > 0
        logits, targets = logits[keep], targets[keep]
        if targets.size(0) == 0:
            continue
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()

train_epoch(DDP(net), loader, opt)
""", line=14, column=13, severity="error"),
        # A mask compared from this rank's ground truth: a rank whose batch has no
        # valid pixel skips the backward.
        Invalid(DIST + """\
from torch.nn.parallel import DistributedDataParallel as DDP

def train(model, loader, opt, max_disp):
    for step, sample in enumerate(loader):
        gt = sample["disp"].cuda()
        valid = (gt > 0) & (gt < max_disp)
        if not valid.any():
            continue
        pred = model(sample["left"].cuda(), sample["right"].cuda())
        loss = (pred - gt)[valid].abs().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

train(DDP(net), loader, opt, 192)
""", line=12, column=13, severity="error"),
        # A history of this rank's own losses: the test is per rank.
        Invalid(DIST + """\
import numpy as np

def train(model, loader, opt):
    seen = []
    for xb in loader:
        loss = model(xb).mean()
        loss.backward()
        opt.step()
        t = torch.tensor([loss.item()])
        seen.append(t.item())
        if np.isnan(sum(seen)):
            break
""", line=16, column=13, severity="error"),
        # A per-step function returns on this rank's non-finite loss before its backward.
        Invalid(DIST + """\
import numpy as np

def train_batch(model, sample, optimizer, scaler):
    loss = model(sample["x"]).mean()
    value = loss.item()
    if np.isnan(value):
        optimizer.zero_grad()
        return value
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return value
""", line=12, column=9, severity="error"),
        # A step method whose same-module caller hands it the loop's batch.
        Invalid(DIST + """\
class Runner:
    def run_batch(self, batch, i):
        if batch is None:
            return {}
        out = self.model(batch["x"])
        out.sum().backward()
        self.opt.step()
        return {"i": i}

    def run_epoch(self, loader):
        for i, batch in enumerate(loader):
            self.run_batch(batch, i)
""", line=8, column=13, severity="error"),
        # The same with a raise: a warning.
        Invalid(DIST + """\
def optimize(net, xb, yb, opt):
    loss = torch.nn.functional.mse_loss(net(xb), yb)
    if not torch.isfinite(loss):
        raise FloatingPointError("loss diverged")
    loss.backward()
    opt.step()
""", line=8, column=9, severity="warning"),
        # The backward runs in a scaler object's ``__call__``; its parameter is annotated with the class.
        Invalid(DIST + """\
class ScaledUpdate:
    def __init__(self):
        self.scaler = torch.cuda.amp.GradScaler()

    def __call__(self, loss, optimizer):
        self.scaler.scale(loss).backward()
        self.scaler.step(optimizer)
        self.scaler.update()

def train_one_epoch(model, loader, optimizer, update: ScaledUpdate):
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        if not math.isfinite(loss.item()):
            raise ValueError("non-finite loss")
        update(loss, optimizer)
""", line=18, column=13, severity="warning"),
    ]

    def screen(self, sketch):
        """The screen (necessary for check() to report): True, False, or the project facts that must hold."""
        # exits outside loops matter only before a backward of this module (a per-step function)
        return sketch.exits_in_loop or "backward" in sketch.calls

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        # A failed ``assert`` raises too; only one on a non-finite check is a per-rank decision
        # (``assert x.shape[0] == y.shape[0]`` holds on every rank or is a bug of its own).
        asserts = [a for a in index.asserts if flow.calls_non_finite_check(a.test)] \
            if not is_test_module(index.path) else []  # a unit test's asserts are what it checks
        for exit_node in [*index.exits, *asserts]:
            if isinstance(exit_node, (cst.Raise, cst.Assert)) and _caught_right_there(index, exit_node):
                continue  # ``raise StopIteration`` that the ``except StopIteration:`` around it handles
            severity = _skip_severity(index, exit_node)
            if severity is not None:
                yield self.report(exit_node, _message(index, exit_node), severity=severity)


def _caught_right_there(index: SemanticIndex, raise_node: Union[cst.Raise, cst.Assert]) -> bool:
    """Does a ``try`` around the ``raise`` (or ``assert``), in the same function and
    inside the same training loop (loops without a backward in between do not
    count), catch what it raises (``raise StopIteration`` under
    ``except StopIteration:`` that fetches a fresh batch)? Then the step goes on."""
    if isinstance(raise_node, cst.Assert):
        raised = "AssertionError"
    else:
        exc = raise_node.exc
        raised = dotted_name(exc.func if isinstance(exc, cst.Call) else exc) if exc is not None else None
    if raised is None:
        return False  # a bare ``raise`` re-raises what the handler caught
    below: cst.CSTNode = raise_node
    for ancestor in index.ancestors(raise_node):
        if isinstance(ancestor, (cst.For, cst.While)) and not flow.is_training_loop(index, ancestor):
            below = ancestor  # a loop that fetches a usable batch (``while torch.min(lb) == 255:``)
            continue
        if isinstance(ancestor, (cst.FunctionDef, cst.For, cst.While, cst.ExceptHandler)):
            return False
        if isinstance(ancestor, cst.Try):
            if below is not ancestor.body:
                return False  # raised in ``else:`` / ``finally:``: the handlers do not see it
            for handler in ancestor.handlers:
                caught = handler.type
                kinds = [e.value for e in caught.elements] if isinstance(caught, cst.Tuple) else [caught]
                if any(dotted_name(kind) is not None and dotted_name(kind).split(".")[-1]
                       == raised.split(".")[-1] for kind in kinds if kind is not None):
                    return True
            return False
        below = ancestor
    return False


def _message(index: SemanticIndex, exit_node: cst.CSTNode) -> str:
    if isinstance(exit_node, cst.Return) and not flow.enclosing_loops(index, exit_node):
        return ("this rank may return before backward() while its peers run it: their all-reduce waits "
                "for it and the job hangs until the collective timeout; agree on the decision across "
                "ranks first (all_reduce the flag)")
    if isinstance(exit_node, cst.Continue):
        return ("this rank may skip backward() while its peers run it: their all-reduce waits for it "
                "and the job hangs until the collective timeout; agree on the decision across ranks "
                "first (all_reduce the flag)")
    if isinstance(exit_node, cst.Raise):
        return ("this rank may raise while its peers run backward(): they wait in the all-reduce until "
                "the collective timeout; agree on the decision across ranks first (all_reduce the flag)")
    if isinstance(exit_node, cst.Assert):
        return ("this rank's assert may fail while its peers run backward(): they wait in the all-reduce "
                "until the collective timeout; agree on the check across ranks first (all_reduce the flag)")
    return ("this rank may leave the training loop while its peers go on: they wait in the next "
            "backward's all-reduce and the job hangs until the collective timeout; agree on the "
            "decision across ranks first (all_reduce the flag)")


def _skip_severity(index: SemanticIndex, exit_node: cst.CSTNode) -> Optional[str]:
    loops = flow.enclosing_loops(index, exit_node)
    if flow.in_framework_code(index, exit_node):
        return None
    if not loops:
        return _step_function_exit(index, exit_node)
    # continue/break leave the innermost loop; return/raise leave them all.
    candidates = loops[:1] if isinstance(exit_node, (cst.Continue, cst.Break)) else loops
    for loop in candidates:
        if not _is_ddp_training_loop(index, loop) or _entered_by_one_rank(index, loop):
            continue
        syncs = _sync_points(index, loop)
        if isinstance(exit_node, cst.Raise) and _unknown_option_raise(index, exit_node, loop):
            continue
        tests = [branch.test for branch, _ in flow.if_ancestors(index, exit_node, stop=loop)]
        if isinstance(exit_node, cst.Assert):
            tests.append(exit_node.test)
        failed = _handles_a_failed_step(index, exit_node, loop)
        if not tests and not failed:
            continue
        leaves = not isinstance(exit_node, cst.Continue)
        if leaves and any(_rank_condition(index, t) for t in tests):
            # only some ranks leave; the others wait in the next backward
            return "warning" if isinstance(exit_node, (cst.Raise, cst.Assert)) else "error"
        # ``continue`` skips what follows in this iteration; leaving the loop
        # also skips every later iteration's backward.
        if not leaves and not any(flow.precedes(index, exit_node, s) for s in syncs):
            continue
        if failed or any(_per_rank_data_condition(index, t, loops) for t in tests):
            return "warning" if isinstance(exit_node, (cst.Raise, cst.Assert)) else "error"
    return None


# What a forward or backward raises on one rank alone (out of memory, a bad sample's shape).
_STEP_FAILURES = ("Exception", "BaseException", "RuntimeError", "OutOfMemoryError", "MemoryError")


def _handles_a_failed_step(index: SemanticIndex, exit_node: cst.CSTNode, stop: cst.CSTNode) -> bool:
    """A ``return`` / ``continue`` / ``break`` in an ``except`` handler (bare, ``Exception``,
    ``RuntimeError``, out of memory) of a ``try`` whose body runs the step before its
    backward: the exception is this rank's alone (``except RuntimeError as e: if "out of
    memory" in str(e): return False``, aps), so only this rank skips what follows. Not
    when the ``try`` holds the backward or a collective: that may be what failed, on
    every rank alike."""
    if not isinstance(exit_node, (cst.Return, cst.Continue, cst.Break)):
        return False
    below: cst.CSTNode = exit_node
    for ancestor in index.ancestors(exit_node):
        if ancestor is stop or isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
            return False
        if isinstance(ancestor, cst.Try) and below in ancestor.handlers:
            caught = below.type
            kinds = [e.value for e in caught.elements] if isinstance(caught, cst.Tuple) else [caught]
            if not all(kind is None or (dotted_name(kind) or "").split(".")[-1] in _STEP_FAILURES
                       for kind in kinds):
                return False
            inside = [site for site in index.calls if flow.is_inside(index, site.node, ancestor.body)]
            if any(site.method == "backward" or (site.qualified_name or "").startswith("torch.distributed.")
                   for site in inside):
                return False  # the collective itself may have failed, on every rank alike
            return any((dotted_name(site.node.func) or "") not in ("next", "iter") for site in inside)
        below = ancestor
    return False


def _unknown_option_raise(index: SemanticIndex, raise_node: cst.Raise, loop: cst.CSTNode) -> bool:
    """``if name == "kitti": ... elif name == "nuscenes": ... else: raise
    NotImplementedError``: the raise answers a configuration value nothing
    supports (the same on every rank), not this rank's data, even under a
    rank guard."""
    branches = list(flow.if_ancestors(index, raise_node, stop=loop))
    if not branches or branches[0][1]:
        return False
    chain, subject = branches[0][0], None
    # the ``elif`` arms are Ifs nested in ``orelse``: walk up the chain to its first ``if``
    tests = []
    node: cst.CSTNode = chain
    while isinstance(node, cst.If):
        tests.append(node.test)
        parent = index.parent(node)
        node = parent if isinstance(parent, cst.If) and parent.orelse is node else None
    if _not_implemented(raise_node) and all(_type_or_arity_test(test) for test in tests):
        # ``if isinstance(loss, A): ... elif isinstance(loss, B): ... else: raise
        # NotImplementedError``; ``if len(out) == 2: ... elif len(out) == 3: ... else: raise``:
        # the program's own types and shapes, the same on every rank (a118 allenact)
        return True
    for test in tests:
        if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
                and isinstance(test.comparisons[0].operator, (cst.Equal, cst.In))):
            return False
        target = test.comparisons[0].comparator
        literals = target.elements if isinstance(target, (cst.Tuple, cst.List, cst.Set)) else None
        if not (isinstance(target, cst.SimpleString) or (literals and all(
                isinstance(e.value, cst.SimpleString) for e in literals))):
            return False
        left = index.module.code_for_node(test.left)
        if subject not in (None, left):
            return False
        subject = left
    return True


def _not_implemented(raise_node: cst.Raise) -> bool:
    exc = raise_node.exc
    return exc is not None and (dotted_name(exc.func if isinstance(exc, cst.Call) else exc) or "") == "NotImplementedError"


def _type_or_arity_test(test: cst.BaseExpression) -> bool:
    """``isinstance(x, Cls)`` or ``len(x) == 3``: what kind of object the program built."""
    if isinstance(test, cst.Call):
        return dotted_name(test.func) == "isinstance"
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 \
            and isinstance(test.comparisons[0].operator, cst.Equal):
        left, right = test.left, test.comparisons[0].comparator
        return isinstance(left, cst.Call) and dotted_name(left.func) == "len" and isinstance(right, cst.Integer)
    return False


def _step_function_exit(index: SemanticIndex, exit_node: cst.CSTNode) -> Optional[str]:
    """A ``return`` / ``raise`` outside any loop of its function, before the
    function's backward of a DDP model: a per-step function (``train_batch(model,
    sample, ...)``, called once per batch) that returns early on this rank's
    non-finite loss, or on a batch that its same-module callers take from
    their loop (``if batch is None: return``), skips the all-reduce its
    peers run in that backward."""
    if not isinstance(exit_node, (cst.Return, cst.Raise, cst.Assert)):
        return None
    function = flow.enclosing_function(index, exit_node)
    if function is None:
        return None
    memo = index.cache.setdefault("ddp014.step_function_syncs", {})
    if id(function) not in memo:
        trains = not _entered_by_one_rank(index, function) and any(
            not _backward_of_plain_copy(index, e.site) for e in flow.backward_events(index, function))
        # a tensor backward of this module (the screen's condition) on a model that syncs
        memo[id(function)] = (function, _sync_points(index, function) if trains else [])
    syncs = memo[id(function)][1]
    if not syncs:
        return None
    if not any(flow.precedes(index, exit_node, s) and not flow.is_inside(index, s, exit_node) for s in syncs):
        return None
    branches = list(flow.if_ancestors(index, exit_node, stop=function))
    tests = [branch.test for branch, _ in branches] + (
        [exit_node.test] if isinstance(exit_node, cst.Assert) else [])
    if _handles_a_failed_step(index, exit_node, function):
        return "error"  # ``except RuntimeError: ... return False`` before the backward
    if not tests:
        return None
    if any(_switched_off(index, function, branch, in_body) for branch, in_body in branches):
        return None  # ``if raise_on_error: raise ... else: return`` where every call keeps the default True
    if any(_rank_condition(index, t) for t in tests):
        return None  # a rank-0-only step function: DDP010's question, not this rule's
    batch = _per_batch_params(index, function)
    if any(_per_rank_data_condition(index, t, [], batch, function) for t in tests):
        return "warning" if isinstance(exit_node, (cst.Raise, cst.Assert)) else "error"
    return None


def _switched_off(index: SemanticIndex, function: cst.FunctionDef, branch: cst.If, in_body: bool) -> bool:
    """The arm of ``if <param>:`` that no same-module call of the function takes."""
    return flow.arm_switched_off(index, function, branch, in_body, flow.callers(index, function))


def _per_batch_params(index: SemanticIndex, function: cst.FunctionDef) -> set[str]:
    """Parameters of ``function`` that every same-module caller fills with the
    data its loop iterates (``for i, batch in enumerate(loader): self.step(batch, i)``)."""
    params = [p.name.value for p in function.params.params]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    sites = flow.callers(index, function)
    if not sites:
        return set()
    found: Optional[set[str]] = None
    for site in sites:
        loops = flow.enclosing_loops(index, site.node)
        data = set().union(*(flow.loop_data_names(index, loop) for loop in loops)) if loops else set()
        here = set()
        for position, name in enumerate(params):
            arg = site.argument(name, position)
            if arg is not None and _part_of_data(arg.value, data):
                here.add(name)
        found = here if found is None else found & here
    return found or set()


def _part_of_data(value: cst.BaseExpression, data: set[str]) -> bool:
    """The loop's batch or a part of it: ``batch``, ``sample["disparity"]``, ``batch.images``
    (``train(model, opt, sample['left'], ...)``: a81 ADL)."""
    while isinstance(value, (cst.Subscript, cst.Attribute)):
        value = value.value
    return isinstance(value, cst.Name) and value.value in data


def _sync_points(index: SemanticIndex, loop: flow.Loop) -> list[cst.CSTNode]:
    """Where every rank must arrive together in one iteration of a DDP training
    loop: tensor backwards (DDP all-reduces in them), explicit collectives
    (helpers inlined), and calls that hand a DDP/FSDP-wrapped model to a
    training function (``fit_one_epoch(ddp_model, ...)``, imported or not)."""
    points = []
    backwards = {id(s) for s in flow.tensor_backwards(index)}
    for event in flow.events(index, loop):
        site = event.site
        if id(site) in backwards:
            points.append(event.anchor)
        elif site.method in COLLECTIVES and (site.qualified_name or "").startswith("torch.distributed"):
            points.append(event.anchor)
        elif not event.inlined and (_hands_wrapped_model_to_training(index, site)
                                    or _runs_project_backward(index, site)):
            points.append(site.node)
    return points


def _runs_project_backward(index: SemanticIndex, site) -> bool:
    """A call of a project function of another module that runs a backward
    itself (same-module helpers are inlined already), or ``self.m()`` whose
    override in a project subclass does (``self._train_epoch(epoch)`` in an
    abstract base trainer, a109 MVSFormer)."""
    if (site.qualified_name or "").startswith("torch."):
        return False
    if _override_runs_backward(index, site):
        return True
    if site.qualified_name is None and (not isinstance(site.node.func, cst.Name)
                                        or index.functions_named(site.node.func.value)):
        return False  # same-module functions are inlined; ``update(loss, opt)`` on an object is not
    facts = flow.project_function_facts(index, site.node)
    return facts is not None and facts.runs_backward


def _override_runs_backward(index: SemanticIndex, site) -> bool:
    func = site.node.func
    if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self"):
        return False
    from ddplint.analysis.models import project_of

    function = flow.enclosing_function(index, site.node)
    owner = index.enclosing(function, cst.ClassDef) if function is not None else None
    if owner is None:
        return False
    overrides = project_of(index).overriding_methods(index.path, owner.name.value, func.attr.value)
    return any(method.runs_backward for method in overrides)


def _is_ddp_training_loop(index: SemanticIndex, loop: flow.Loop) -> bool:
    """A loop (in DDP context) that runs a tensor backward, directly or in a
    same-module helper, or hands a wrapped model to a training function. A
    backward whose every forward ran on a private copy of the model
    (``local = copy.deepcopy(module)``) or on the unwrapped ``ddp.module``
    arms no reducer: it does not make a DDP training loop. Nor does a project that averages
    gradients by hand and wraps no model anywhere (a118 allenact)."""
    from ddplint.analysis.models import project_of

    if project_of(index).averages_gradients_by_hand():
        return False
    if any(not _backward_of_plain_copy(index, e.site) for e in flow.backward_events(index, loop)):
        return True
    return any(not e.inlined and (_hands_wrapped_model_to_training(index, e.site)
                                  or _runs_project_backward(index, e.site)) for e in flow.events(index, loop))


def _backward_of_plain_copy(index: SemanticIndex, site) -> bool:
    """Did the forward behind this backward run on a private copy of the model
    only? Recognised model calls must all be on such a copy; otherwise (a loss
    helper of another module, ``mse(local, xy)``) some object called or handed
    to a helper must be one, and none may be a wrapped model."""
    operand = flow.backward_operand(site)
    forwards = flow.forward_sites(index, operand, site.order)
    if forwards:
        return all(_plain_copy(index, flow.model_of_forward(call), 0) for call in forwards)
    objects = _called_objects(index, operand)
    return any(_plain_copy(index, o, 0) for o in objects) and \
        not any(flow.wrapped_model(index, o, site.order) for o in objects)


def _called_objects(index: SemanticIndex, expr: Optional[cst.BaseExpression],
                    depth: int = 0) -> list[cst.BaseExpression]:
    """What the calls in ``expr`` run on: the called names (``twin(xb)``) and
    the plain-name arguments of called helpers (``mse(local, xy)``), also
    through the values of the names ``expr`` reads."""
    found: list[cst.BaseExpression] = []
    if expr is None or depth > 3:
        return found
    stack: list[cst.CSTNode] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
            found.append(node.func)
            found.extend(a.value for a in node.args if isinstance(a.value, cst.Name))
            continue
        if isinstance(node, cst.Name):
            for value in index.reaching_values(node) or []:
                found.extend(_called_objects(index, value, depth + 1))
            continue
        stack.extend(node.children)
    return found


def _plain_copy(index: SemanticIndex, model: cst.BaseExpression, depth: int) -> bool:
    """``copy.deepcopy(m)`` (also through names bound to it) or ``x.module``."""
    if isinstance(model, cst.Attribute) and model.attr.value == "module":
        return True
    if isinstance(model, cst.Call):
        return index.qualified_name(model.func) == "copy.deepcopy"
    if isinstance(model, cst.Name) and depth < 4:
        values = index.reaching_values(model)
        return bool(values) and all(_plain_copy(index, v, depth + 1) for v in values)
    return False


def _entered_by_one_rank(index: SemanticIndex, loop: flow.Loop) -> bool:
    """A loop that only some ranks enter has no peers to leave: it sits under a
    rank guard in its function, in a rank-zero-only function, or in a function
    whose every call in the project runs under a rank guard
    (``if rank == 0: compare_with_reference(...)``)."""
    from ddplint.analysis import ranks
    from ddplint.analysis.models import function_key, project_of

    if any(ranks.guard_restricts(index, guard) for guard in ranks.rank_guards(index, loop)):
        return True
    function = ranks.enclosing_function(index, loop)
    if function is None:
        return False
    if ranks.has_rank_zero_decorator(function, index):
        return True
    return project_of(index).callers_guarded(index.path, function_key(index, function)) is True


TRAINING_CALL = re.compile(r"train|fit|epoch|step|update|optimi[sz]e", re.IGNORECASE)
NOT_TRAINING_CALL = re.compile(r"eval|valid|test|infer|predict|save|log|load|print|sampl|ema|checkpoint",
                               re.IGNORECASE)


def _hands_wrapped_model_to_training(index: SemanticIndex, site) -> bool:
    """``fit_one_epoch(model, loader, opt)`` with ``model`` DDP/FSDP-wrapped:
    the callee (named like a training function) runs the model's backward."""
    if (site.qualified_name or "").startswith("torch."):
        return False
    callee = (flow.dotted_name(site.node.func) or "").split(".")[-1]
    if not callee or not TRAINING_CALL.search(callee) or NOT_TRAINING_CALL.search(callee):
        return False
    return any(isinstance(arg.value, (cst.Name, cst.Attribute)) and
               flow.wrapped_model(index, arg.value, site.order) for arg in site.node.args)


def _rank_condition(index: SemanticIndex, test: cst.BaseExpression) -> bool:
    if _shared_rank_condition is not None:
        return _shared_rank_condition(index, test)
    return False


def _per_rank_data_condition(index: SemanticIndex, test: cst.BaseExpression,
                             loops: list[flow.Loop], extra_data: frozenset[str] = frozenset(),
                             step_function: Optional[cst.FunctionDef] = None) -> bool:
    """Does the test depend on this rank's data (a non-finite check, the batch,
    the loss) rather than on agreed values or counters? ``step_function``: a
    per-step function the test sits in, whose own forward makes this rank's loss."""
    read = flow.names_in(test)
    order = flow.order_near(index, test)
    if _reads_only_structure(test):
        return False  # ``if not loss.requires_grad: raise``: the same graph set-up on every rank
    if any(flow.short_batch_test(index, test, loop) for loop in loops):
        return False  # the short last batch of a DistributedSampler loader: the same step on every rank
    if any(flow.is_agreed_value(index, name, test) for name in read if "." not in name):
        return False
    if any(isinstance(node, cst.Call) and flow.returns_agreed_call(index, node) for node in _calls_in(test)):
        return False  # ``if any_rank_nan(loss): continue`` with a helper that all-reduces
    if any(_is_gradient_norm(index, name, test) for name in read if "." not in name):
        return False  # DDP's backward made the gradients, hence their norm, equal on every rank
    if any(_depends_on_agreed(index, name, order, test) for name in read if "." not in name):
        return False
    if _reads_agreed_container(index, test):
        return False  # ``np.mean(history["loss"])`` of values all-reduced before each append
    if flow.calls_non_finite_check(test):
        return True
    data = set(extra_data).union(*(flow.loop_data_names(index, loop) for loop in loops
                                   if not flow.iterates_config(index, loop)))
    for name in read:
        if name in data:
            return True
        if "." not in name:
            for binding in index.reaching(name, test):
                if binding.kind not in ("assign", "unpack", "annassign"):
                    continue
                value = binding.value if binding.kind != "unpack" else getattr(binding.node, "value", None)
                if value is not None and (_reads_data(value, data) or _filters_data(index, value, data, binding)):
                    return True
                if isinstance(value, cst.Call) and flow.returns_non_finite_flag(
                        index, value, unpack_position(binding.node, name)
                        if binding.kind == "unpack" and isinstance(binding.node, cst.Assign) else None):
                    return True  # ``loss, ok = self.step(batch)`` with ``if torch.isnan(loss): return None, False``
                if _binding_in_loop(binding, [*loops, *([step_function] if step_function else [])], index) and (
                        flow.binding_carries_graph(index, binding, 0)
                        or (value is not None and flow.forward_sites(index, value, binding.order))):
                    return True  # this rank's loss or model output (``kl = (...).mean().item()``)
    return False


def _reads_agreed_container(index: SemanticIndex, test: cst.BaseExpression) -> bool:
    """The test reads a list (``losses``, or ``logs["loss"]`` with a literal
    key) that its function fills only with values every rank agrees on
    (``dist.all_reduce(t, AVG)`` then ``logs["loss"].append(t.item())``)."""
    function = flow.enclosing_function(index, test) or index.module
    code = cst.Module([]).code_for_node
    containers = set()
    for node in _nodes_in(test):
        if isinstance(node, cst.Name) or (
                isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name) and len(node.slice) == 1
                and isinstance(node.slice[0].slice, cst.Index)
                and isinstance(node.slice[0].slice.value, cst.SimpleString)):
            containers.add(code(node))
    for container in containers:
        fills = [site for site in flow.calls_in_function(index, function)
                 if site.method in ("append", "extend") and site.receiver is not None
                 and code(site.receiver) == container and site.node.args]
        if fills and all(_agreed_fill(index, site.node.args[0].value, site.node) for site in fills):
            return True
    return False


def _agreed_fill(index: SemanticIndex, value: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """Every name the appended value reads was made equal on every rank by a
    collective of the function written before the append (or comes from a
    helper that returns an agreed value)."""
    names = [n for n in flow.names_in(value) if "." not in n and index.reaching(n, at)
             and not all(b.kind in ("import", "def", "class") for b in index.reaching(n, at))]
    site = index.call_site(at)
    if not names or site is None:
        return False
    function = flow.enclosing_function(index, at) or index.module
    agreed = set()
    for other in flow.calls_in_function(index, function):
        if other.method in flow.AGREEING_COLLECTIVES and other.order < site.order:
            first = other.positional(0) or other.keyword("tensor")
            if first is not None:
                agreed |= flow.names_in(first.value)
    return all(n in agreed or flow.is_agreed_value(index, n, at) for n in names)


def _nodes_in(expr: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack: list[cst.CSTNode] = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children)


# Tensor attributes set by the code's structure, not by the values of this rank's batch.
STRUCTURAL_ATTRIBUTES = ("requires_grad", "is_leaf", "grad_fn", "dtype", "device", "is_cuda")


def _reads_only_structure(test: cst.BaseExpression) -> bool:
    """Every name the test reads is read through a structural attribute
    (``not loss.requires_grad``, ``out.grad_fn is None``)."""
    names = []
    stack: list[cst.CSTNode] = [test]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Attribute) and node.attr.value in STRUCTURAL_ATTRIBUTES:
            names.append(node)
            continue
        if isinstance(node, cst.Name) and node.value in ("None", "True", "False"):
            continue
        if isinstance(node, (cst.Name, cst.Call, cst.Subscript)):
            return False
        stack.extend(node.children)
    return bool(names)


def _reads_data(expr: cst.BaseExpression, data: set[str]) -> bool:
    """A direct read of the batch: ``batch``, ``batch["x"]``, ``batch.y``,
    ``batch["x"].numel()``, ``len(targets)``. The result of a function that
    takes the batch is not: it may be agreed (an accumulation counter).
    """
    if isinstance(expr, cst.Name):
        return expr.value in data
    if isinstance(expr, (cst.Subscript, cst.Attribute)):
        return _reads_data(expr.value, data)
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Name) and func.value == "next" and expr.args:
            return True  # ``xb = next(it, None)``: a batch pulled from an iterator
        if isinstance(func, cst.Attribute):
            return _reads_data(func.value, data)
        if isinstance(func, cst.Name) and func.value == "len" and expr.args:
            return _reads_data(expr.args[0].value, data)
    return False


def _filters_data(index: SemanticIndex, value: cst.BaseExpression, data: set[str], binding, depth: int = 0) -> bool:
    """``labels = labels[valid_idx]`` (or ``x = x.cuda()``, ``mask = (gt > 0) &
    (gt < m)``) where an earlier binding of a name it reads read the batch
    (``labels = sample["labels"].cuda()``, ``gt = sample["disp"].to(dev)``): a
    selection, copy or comparison of this rank's data is this rank's data. Plain
    function calls are not followed (their result may be agreed)."""
    if depth > 2:
        return False
    stack: list[cst.CSTNode] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Name):
            if node.value in data:
                return True  # ``(batch["y"] > 0)``: a comparison of the batch
            for earlier in index.reaching(node.value, node):
                if earlier is binding or earlier.kind not in ("assign", "annassign", "unpack"):
                    continue
                earlier_value = earlier.value if earlier.kind != "unpack" else getattr(earlier.node, "value", None)
                if earlier_value is not None and (_reads_data(earlier_value, data)
                                                  or _filters_data(index, earlier_value, data, earlier, depth + 1)):
                    return True
        elif isinstance(node, cst.Call):
            if isinstance(node.func, cst.Attribute):
                stack.append(node.func.value)  # ``x.cuda()``, ``mask.any()``
        elif isinstance(node, (cst.Subscript, cst.Attribute)):
            stack.append(node.value)
        elif isinstance(node, cst.BinaryOperation):
            stack.extend((node.left, node.right))
        elif isinstance(node, cst.BooleanOperation):
            stack.extend((node.left, node.right))
        elif isinstance(node, cst.UnaryOperation):
            stack.append(node.expression)
        elif isinstance(node, cst.Comparison):
            stack.append(node.left)
            stack.extend(target.comparator for target in node.comparisons)
    return False


GRAD_NORM_CALLS = ("clip_grad_norm_", "clip_grad_norm", "get_grad_norm", "grad_norm", "get_global_grad_norm")


def _is_gradient_norm(index: SemanticIndex, name: str, at: cst.CSTNode) -> bool:
    """``grad_norm = clip_grad_norm_(model.parameters(), c)``: computed from
    gradients DDP already averaged, so every rank gets the same value."""
    bindings = index.reaching(name, at)
    return bool(bindings) and all(
        b.kind in ("assign", "annassign") and isinstance(b.value, cst.Call)
        and (flow.dotted_name(b.value.func) or "").split(".")[-1] in GRAD_NORM_CALLS for b in bindings)


def _calls_in(expr: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack: list[cst.CSTNode] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call):
            yield node
        stack.extend(node.children)


def _depends_on_agreed(index: SemanticIndex, name: str, order: int, at: cst.CSTNode) -> bool:
    return any(flow.is_agreed_value(index, other, at)
               for binding in index.reaching(name, at) if binding.value is not None
               for other in flow.names_in(binding.value) if "." not in other)


def _binding_in_loop(binding, loops: list[flow.Loop], index: SemanticIndex) -> bool:
    return any(flow.is_inside(index, binding.node, loop) for loop in loops)


