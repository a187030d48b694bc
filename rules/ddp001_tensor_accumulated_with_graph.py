"""## What it does
Flags a tensor that carries autograd history (the loss, model outputs, anything
computed from them, also through augmented assignments such as `snap /= n`)
being kept beyond the loop iteration that produced it: appended or inserted
into a container that outlives the iteration (`losses.append(loss)`),
accumulated into a variable defined outside the loop (`total_loss += loss`,
`total = total + loss`, a running mean `avg = (avg * step + loss) / (step + 1)`),
or handed to a meter of the project whose class keeps its argument
(`meter.update(loss)` where `update` does `self.sum += val`). The history is
followed through sums of criterion terms, comprehensions over model outputs,
and project helpers that hand back their argument or a copy of it
(`reduce_tensor(loss)` doing `rt = loss.clone(); dist.all_reduce(rt); return rt`),
and training-step helpers of the module (`f(...)`, `self.m(...)`) that run
`loss.backward()` and return that loss, or a named term of it, undetached
(`loss, logs = self.update_fn(batch)`; `return actor_loss, critic_loss`). A
value that `backward()` is run on has history whatever call made it
(`loss = self.criterion(self.model, *batch)` then `loss.backward()`).

An accumulator counts as reset only when every path through the iteration
resets it: a reset that a `continue` skips does not count, nor one made only at
the optimizer step (`if i % k == 0: self.loss = 0`, also for an attribute: it
keeps k steps' graphs). A per-batch method
without a loop of its own (`def step(self, xb): ... self.history.append(loss)`)
is flagged when a loop of the module calls it: the instance's container
outlives every call.

It is an error where no `backward()` consumes the tensor (evaluation, validation
and metric loops keep the whole activation graph of every batch alive) and a
warning in training loops (after `backward()` the graph's buffers are freed, but
its skeleton and the tensors it references stay until the accumulator goes).

## Why is this bad?
Each iteration adds another graph to the accumulator, so memory grows with the
number of steps until the process runs out of memory, typically hours into a
run and on one rank first (the others then hang in the next collective).

## Example
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        total_loss += loss            # keeps every step's graph

## Use instead
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        total_loss += loss.item()     # or loss.detach()

Fix (unsafe): keeps `loss.item()` instead of `loss` when the value is a scalar
loss (a criterion's output, a `.mean()`/`.sum()`, a name like `loss`), else
`value.detach()`; not offered for `extend(...)`. Unsafe: `.item()` turns the
accumulator into a Python number (and waits for the GPU), and code that later
calls tensor methods on it or back-propagates through it changes behaviour.

Not flagged: `.item()`, `.detach()`, `float(...)`, `.tolist()`, `torch.tensor(x)`,
a tensor detached in place (`loss.detach_()` as a statement on the straight-line path before the
use, with no rebinding in between) (`.cpu()` and `.to("cpu")` keep the graph); code under `torch.no_grad()`,
`torch.inference_mode()`, `torch.set_grad_enabled(False)` or in functions
decorated with them (also functions every caller of which runs them under
such a region, a few callers up and across the project's modules), and values bound in such a region and read after it; an
accumulator reset on every path of the iteration; terms summed into a loss
that `backward()` consumes (`torch.stack(losses).sum().backward()`, graphs
kept for a deferred `for l in pending: l.backward()`); short loops over the
parts of one step (`for j in range(len(parts))`, heads, views, the chunks of
one input however named: `batches = prepare_chunks(x, chunksize=n)`,
`x.split(4096)`, also `split(x, k) if k > 1 else [x]`, or cut by a function every
same-module caller hands in that returns slices of its input) whose sum or
concatenation is returned, or that a list reset every step collects; a list reset for every batch and filled by an inner
loop over what that batch pulled (`for j in range(images.shape[0])`); items
that the project's model hands back without history (`loss, acc = net(x)`
where every `forward` of the model's class returns `acc` as `.item()` or a
constant, the class followed through `DDP(...)`, `amp.initialize` and the
callers' arguments); `meter.update(loss)` when the meter's class is not in
the project or does not keep its argument (also one that adds it into an element of a
numpy array: `self.sum[i] += val[i]`); the result of a metric passed as a parameter that
every project call leaves at its default, a no-grad function of the module
(`def train(..., eval_criterion=accuracy)`); a helper's return that it rebinds detached after
its backward (`loss.backward(); loss = loss.detach() / k; return outputs, loss`); modules (`replicas.append(
factory.build_model(cfg))`); loops inside a module's `forward`, a few literal
iterations (`range(10)`, also `range(n)` with `n` bound to a small literal or
passed one by every caller in the module), code a framework drives
(Lightning modules), and unit tests (`test_*.py`, `*_test.py`, `tests/`: a
test runs a bounded number of steps and keeps their outputs to compare them).

## References
- https://pytorch.org/docs/stable/notes/faq.html#my-model-reports-cuda-runtime-error-2-out-of-memory
- https://pytorch.org/docs/stable/notes/autograd.html
"""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from ddplint.analysis import flow
from ddplint.fixes import UNSAFE, insert_after, insert_before, node_fix
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import SemanticIndex, dotted_name
from ddplint.analysis.values import is_test_module

TRAIN = """\
import torch
import torch.nn as nn
criterion = nn.CrossEntropyLoss()
"""

# A metric through a parameter (``eval_criterion=accuracy``): what the calls pass decides.
METRIC_BY_DEFAULT = """\
import torch


def accuracy(output, target):
    with torch.no_grad():
        pred = output.argmax(1)
        return (pred == target).float().mean() * 100.0


class AverageMeter:
    def __init__(self):
        self.sum = 0

    def update(self, val, n=1):
        self.sum += val * n


def train(loader, model, criterion, optimizer, eval_criterion=accuracy):
    top1 = AverageMeter()
    for images, target in loader:
        output = model(images)
        loss = criterion(output, target)
        prec1 = eval_criterion(output, target)
        top1.update(prec1, images.size(0))
        loss.backward()
        optimizer.step()


def main(loader, model, criterion, optimizer):
    for epoch in range(10):
        train(loader, model, criterion, optimizer)
"""
METRIC_PASSED = METRIC_BY_DEFAULT.replace("train(loader, model, criterion, optimizer)\n",
                                          "train(loader, model, criterion, optimizer, eval_criterion=criterion)\n")


class TensorAccumulatedWithGraph(Rule):
    code, name, severity = "DDP001", "tensor-accumulated-with-graph", "error"
    # Project helpers of other modules that hand back their argument's tensor
    # (``reduce_tensor(loss)``) keep its graph: the project's facts say which.
    uses_project = True
    message = ("tensor with autograd history kept across iterations: its graph is retained; "
               "use .item() or .detach()")
    # An accumulation is an append/extend/insert or an (augmented) assignment.
    triggers = ("=", "append", "extend", "insert", ".add(")

    valid = [
        # The training step runs the backward, then returns the loss detached under the same
        # name (``loss = loss.detach() / k``): the caller sums numbers without history (a96 MM-Video).
        Valid("""\
import torch
import torch.distributed as dist
class Trainer:
    def training_step(self, model, inputs):
        outputs = model(inputs)
        loss = outputs["loss"]
        loss.backward()
        loss = loss.detach() / self.accumulation_steps
        return outputs, loss
    def train(self, model, loader):
        loss_total = 0
        for epoch in range(self.epochs):
            for inputs in loader:
                outputs, loss = self.training_step(model, inputs)
                loss_total += loss
                self.optimizer.step()
"""),
        # A trainer attribute reset on every iteration: it holds one step's graph.
        Valid(TRAIN + """\
class Trainer:
    def run(self, loader):
        for xb in loader:
            loss = self.net(xb).mean()
            self.loss += loss
            self.loss.backward()
            self.opt.step(); self.opt.zero_grad(); self.loss = 0
"""),
        # The fallback of ``.item()``: the value is no tensor when the handler runs (a63 UFDN-Reid).
        Valid(TRAIN + """\

def train(model, loader, optimizer, losses):
    history = []
    for x, y in loader:
        loss = criterion(model(x), y) if use_reid else 0
        optimizer.zero_grad()
        try:
            history.append(loss.item())
        except AttributeError:
            history.append(loss)
"""),
        # A running mean of items the loss function hands back detached (``return loss, parts.detach()``).
        Valid(TRAIN + """\
class DetectionLoss:
    def __call__(self, pred, targets):
        box, cls = box_loss(pred, targets), cls_loss(pred, targets)
        loss = box + cls
        return loss, torch.stack((box, cls, loss)).detach()

def train(model, loader, optimizer):
    compute_loss = DetectionLoss()
    mean_items = torch.zeros(3)
    for step, (images, targets) in enumerate(loader):
        loss, loss_items = compute_loss(model(images), targets)
        loss.backward()
        optimizer.step()
        mean_items = (mean_items * step + loss_items) / (step + 1)
"""),
        Valid(TRAIN + """\
def train(model, loader, optimizer):
    total = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
"""),
        Valid(TRAIN + """\
def train(model, loader, optimizer):
    losses = []
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        losses.append(loss.detach())
        losses.append(float(loss))
        losses.append(loss.tolist())
        losses.append(torch.tensor(loss.item()))
"""),
        Valid(TRAIN + """\
@torch.no_grad()
def evaluate(model, loader):
    total = 0
    outputs = []
    for x, y in loader:
        out = model(x)
        total += criterion(out, y)
        outputs.append(out)
    return total
"""),
        Valid(TRAIN + """\
def evaluate(model, loader):
    total = 0
    with torch.no_grad():
        for x, y in loader:
            total += criterion(model(x), y)
    with torch.inference_mode():
        for x, y in loader:
            total += model(x).sum()
    return total
"""),
        Valid(TRAIN + """\
def run(model, loader, train):
    total = 0
    with torch.set_grad_enabled(False):
        for x, y in loader:
            total = total + criterion(model(x), y)
    return total
"""),
        # Terms summed into the loss of the same iteration, then backward.
        Valid(TRAIN + """\
def train(model, loader, optimizer, weights):
    for x, y in loader:
        out = model(x)
        loss = 0
        for w in weights:
            loss += w * criterion(out, y)
        loss.backward()
        optimizer.step()
"""),
        Valid(TRAIN + """\
def train(model, loader, optimizer):
    for batch in loader:
        losses = []
        for chunk in batch:
            losses.append(criterion(model(chunk), chunk))
        torch.stack(losses).sum().backward()
        optimizer.step()
"""),
        # Accumulation over micro-batches consumed by one backward.
        Valid(TRAIN + """\
def train(model, micro_batches, optimizer):
    total = 0
    outs = []
    for mb in micro_batches:
        outs.append(model(mb))
    loss = criterion(torch.cat(outs), 0)
    loss.backward()
"""),
        # Indices and comparisons have no autograd history.
        Valid(TRAIN + """\
def evaluate(model, loader):
    correct = 0
    preds = []
    for x, y in loader:
        out = model(x)
        _, pred = out.max(1)
        correct += pred.eq(y).sum()
        preds.append(out.argmax(dim=1))
        correct += (out.argmax(1) == y).sum()
    return correct
evaluate(net, val_loader)
"""),
        # Values from unknown functions are not guessed at.
        Valid(TRAIN + """\
def train(model, loader, optimizer):
    history = []
    for batch in loader:
        stats = train_step(batch)
        history.append(stats)
"""),
        # An evaluation function every caller runs under no_grad.
        Valid(TRAIN + """\
def validate(model, loader):
    total = 0
    for x, y in loader:
        total += criterion(model(x), y)
    return total

def main(model, loader):
    with torch.no_grad():
        validate(model, loader)
"""),
        # A project's own no-grad decorator (yolov5's ``@smart_inference_mode()``).
        Valid(TRAIN + """\
from utils.torch_utils import smart_inference_mode

@smart_inference_mode()
def run(model, loader):
    loss = 0
    for x, y in loader:
        loss += criterion(model(x), y)
    return loss

run(net, val_loader)
"""),
        # Intermediates collected inside a module's forward.
        Valid(TRAIN + """\
class Encoder(nn.Module):
    def forward_features(self, x):
        intermediates = []
        for blk in self.blocks:
            x = blk(x)
            intermediates.append(self.norm(x))
        return intermediates

    def forward(self, x):
        return self.forward_features(x)
"""),
        # A few literal iterations (an export check): bounded, not a leak.
        Valid(TRAIN + """\
def check_export(encoder, chunk):
    outputs = []
    for i in range(10):
        out, cache = encoder(chunk)
        outputs.append(out)
    return torch.cat(outputs)

check_export(model, x)
"""),
        # Accumulator reset inside the iteration.
        Valid(TRAIN + """\
def train(model, loader, optimizer):
    for x, y in loader:
        step_losses = []
        step_losses.append(criterion(model(x), y))
        optimizer.step()
"""),
        # Bound under no_grad, read after the block: no history.
        Valid(TRAIN + """\
def validate(net, loader):
    total = 0
    for xb in loader:
        with torch.no_grad():
            v = net(xb).mean()
        total += v
    return total

validate(model, val_loader)
"""),
        # A short loop over the parts of one step, its sum returned into the loss.
        Valid(TRAIN + """\
import torch.nn.functional as F

def head_loss(student, views, targets):
    acc = 0
    for j in range(len(views)):
        acc += (1 - F.cosine_similarity(student(views[j]), targets[j])).mean()
    return acc

def train(student, loader, optimizer):
    for views, targets in loader:
        loss = head_loss(student, views, targets)
        loss.backward()
        optimizer.step()
"""),
        # Nested part loops summed into the loss that backward() consumes.
        Valid(TRAIN + """\
import torch.nn.functional as F

def multi_crop_step(net, x, heads, views, n):
    out = net(x)
    total = 0
    for h in heads:
        part = 0
        for v in views:
            part -= F.log_softmax(out[h][v], 1).mean()
        total += part / n
    total.backward()
"""),
        Valid(TRAIN + """\
import torch.nn.functional as F

def multi_crop_loss(net, x, heads, views, n):
    out = net(x)
    total = 0
    for h in heads:
        part = 0
        for v in views:
            part -= F.log_softmax(out[h][v], 1).mean()
        total += part / n
    return total

def train(net, loader, optimizer, heads, views):
    for x in loader:
        loss = multi_crop_loss(net, x, heads, views, len(heads) * len(views))
        loss.backward()
        optimizer.step()
"""),
        # A meter whose class is not visible: not guessed at.
        Valid(TRAIN + """\
from utils import AverageMeter

def train(model, loader, optimizer):
    meter = AverageMeter()
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        meter.update(loss)
"""),
        # A metric parameter every call leaves at its default, a no-grad accuracy (a109 Action-Recognition).
        Valid(METRIC_BY_DEFAULT),
        # A project meter that keeps a Python number.
        Valid(TRAIN + """\
class Meter:
    def __init__(self):
        self.sum, self.count = 0.0, 0
    def update(self, val, n=1):
        self.sum += val.item() * n
        self.count += n

def train(model, loader, optimizer):
    meter = Meter()
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        meter.update(loss, x.size(0))
"""),
        # Framework code: a list of modules, not of tensors with history.
        Valid(TRAIN + """\
def build_replicas(factory, cfgs):
    replicas = []
    for cfg in cfgs:
        replicas.append(factory.build_model(cfg))
    return replicas

replicas = build_replicas(registry, configs)
"""),
        # Graphs stored for a deferred backward are consumed.
        Valid(TRAIN + """\
def train_step(net, micro_batches, optimizer):
    pending = []
    for x, y in micro_batches:
        pending.append(criterion(net(x), y))
    for l in pending:
        l.backward()
    optimizer.step()
"""),
        # Losses kept for a deferred framework backward are consumed.
        Valid(TRAIN + """\
def check_sync(accelerator, ddp_model, batches):
    losses = []
    for x, y in batches:
        with accelerator.no_sync(ddp_model):
            losses.append(criterion(ddp_model(x), y))
    for i in range(len(losses)):
        loss = losses[i]
        accelerator.backward(loss)

check_sync(acc, model, data)
"""),
        # A test helper capturing the outputs of a few iterations: every caller passes a small count.
        Valid(TRAIN + """\
def capture_reference(model, inputs, steps):
    captured = []
    for k in range(steps):
        y = model(inputs[k].clone())
        captured.append(y)
        y.sum().backward()
    return captured

def test_overlap_matches_reference(model, make_inputs):
    n_micro = 3
    reference = capture_reference(model, make_inputs(n_micro), n_micro)
    assert len(reference) == n_micro
"""),
        # A unit test keeps the losses of a short run to compare two configurations.
        Valid(TRAIN + """\
def run_steps(model, loader):
    losses = []
    for xb, yb in loader:
        loss = criterion(model(xb), yb)
        losses.append(loss)
        model.backward(loss)
        model.step()
    return losses

def test_granularity_keeps_the_loss(make_engine, tiny_loader):
    base = run_steps(make_engine(fine=False), tiny_loader)
    fine = run_steps(make_engine(fine=True), tiny_loader)
    assert all(torch.allclose(a, b) for a, b in zip(base, fine))
""", filename="tests/unit/test_granularity.py"),
        # A list reset for every batch, filled over the samples of that batch: it lives one step.
        Valid(TRAIN + """\
def train(model, loader, optimizer):
    for images, targets in loader:
        preds = model(images)
        kept = []
        for j in range(images.shape[0]):
            kept.append(preds[j][preds[j] > 0.5])
        loss = criterion(preds, targets)
        loss.backward()
        optimizer.step()
        log_counts([len(k) for k in kept])
"""),
        # A loop over a few configurations (a test comparing ZeRO stages).
        Valid(TRAIN + """\
def test_stages(make_engine, batch):
    def run(stage):
        model = make_engine(stage)
        out = model(batch)
        loss = out.mean()
        model.backward(loss)
        model.step()
        return loss

    losses = []
    for stage in zero_stages:
        losses.append(run(stage))
    assert all(torch.allclose(l, losses[0]) for l in losses)
"""),
        # A model output bound under no_grad: its fields have no history.
        Valid(TRAIN + """\
def evaluate(net, loader):
    losses = []
    for b in loader:
        with torch.no_grad():
            out = net(b)
        losses.append(out.loss)
    return losses

evaluate(model, val_loader)
"""),
        # Items the project's forward hands back without history (a constant, an ``.item()``), reached
        # through the DDP wrap and the caller's argument: nothing to keep.
        Valid(TRAIN + """\
from torch.nn.parallel import DistributedDataParallel as DDP

class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(16, 4)

    def forward(self, x, y):
        aux, extra = 0, 0
        scores = self.body(x)
        loss = criterion(scores, y)
        hits = (scores.argmax(1) == y).float().mean().item()
        return loss, hits, aux, extra

def fit(cfg, net, loader, opt):
    net = DDP(net, device_ids=[cfg.gpu])
    hit_log, aux_log = [], []
    for x, y in loader:
        loss, hits, aux, extra = net(x, y)
        hit_log.append(hits)
        if aux != 0:
            aux_log.append(aux)
        loss.backward()
        opt.step()

def main(cfg, loader):
    net = TwoHeads().cuda()
    fit(cfg, net, loader, torch.optim.SGD(net.parameters(), lr=0.1))
"""),
        # A render helper runs the model over the chunks of one input (however the
        # chunk list is named) and returns their concatenation: bounded by one call.
        Valid(TRAIN + """\
def render(model, points, chunksize):
    pieces = split_into_chunks(points, chunksize=chunksize)
    outs = []
    for piece in pieces:
        outs.append(model(piece))
    return torch.cat(outs, dim=0)

def fit(model, loader, optimizer):
    for points, target in loader:
        loss = criterion(render(model, points, 1024), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""),
        # ... also when the function that cuts the input is handed in by the caller
        # (a75 nerf_ddp: ``get_minibatches_function=get_minibatches``).
        Valid(TRAIN + """\
def get_minibatches(inputs):
    size = 4096
    return [inputs[i:i + size] for i in range(0, inputs.shape[0], size)]

def render(model, points, get_minibatches_function):
    batches = get_minibatches_function(points)
    predictions = []
    for batch in batches:
        predictions.append(model(batch))
    return torch.cat(predictions, dim=0)

def fit(model, loader, optimizer):
    for points, target in loader:
        loss = criterion(render(model, points, get_minibatches), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""),
        # ... and over `x.split(n)` pieces named like batches.
        Valid(TRAIN + """\
def predict(model, x):
    batches = x.split(4096)
    preds = []
    for batch in batches:
        preds.append(model(batch))
    return torch.cat(preds)
"""),
        # A training-step helper that returns its loss detached (or as a float).
        Valid(TRAIN + """\
class Runner:
    def step(self, batch):
        loss = criterion(self.model(batch["x"]), batch["y"])
        loss.backward()
        self.opt.step()
        return loss.detach(), batch["x"].shape[0]

    def epoch(self, loader):
        history = []
        for batch in loader:
            loss, n = self.step(batch)
            history.append(loss)
        return history
"""),
        Valid(TRAIN + """\
def train_step(model, opt, x, y):
    opt.zero_grad()
    out = criterion(model(x), y)
    out.backward()
    opt.step()
    return out.item(), y.shape[0]

def fit(model, opt, loader):
    seen = []
    for x, y in loader:
        value, n = train_step(model, opt, x, y)
        seen.append(value)
    return seen
"""),
        # The micro-chunks of one step (or the whole batch as one chunk): what the
        # step keeps is bounded by the step.
        Valid(TRAIN + """\
def train_step(model, optimizer, batch, k, on_outputs):
    chunks = batch.split(batch.shape[0] // k) if k > 1 else [batch]
    done = False
    while not done:
        outputs = []
        total, seen = 0.0, 0
        for i, chunk in enumerate(chunks):
            out = model(chunk)
            outputs.append(out)
            loss = out.mean() / len(chunks)
            loss.backward()
            total += loss.item()
            seen += chunk.shape[0]
        done = optimizer.step()
    on_outputs(outputs)
    return total, seen
"""),
        # Every call reaches the helper under no_grad, two callers up: no history.
        Valid(TRAIN + """\
def embed_all(model, loader):
    rows = []
    for batch in loader:
        rows.append(model(batch))
    return torch.cat(rows)

def zero_shot(model, loader, images):
    weights = embed_all(model, loader)
    return images @ weights.t()

def validate(model, loader, images):
    with torch.no_grad():
        return zero_shot(model, loader, images)
"""),
        # A value a test proved a Python number holds no graph: the isinstance(float)
        # branch of a logging accumulator, the else of isinstance(Tensor), an and-joined test.
        Valid(TRAIN + """\

def train(model, loader, optimizer):
    seen = 0.0
    for batch in loader:
        out = model(**batch)
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        if isinstance(out.loss, float):
            seen = seen + out.loss
        elif isinstance(out.loss, torch.Tensor):
            seen = seen + out.loss.item()
"""),
        Valid(TRAIN + """\

def train(model, loader, optimizer):
    total = 0.0
    for x, y in loader:
        out = model(x)
        loss = criterion(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if isinstance(loss, torch.Tensor):
            total += loss.item()
        else:
            total += loss
"""),
        Valid(TRAIN + """\

def train(model, loader, optimizer, log):
    running = 0
    for x, y in loader:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if log and isinstance(loss, (int, float)):
            running += loss
"""),
    ]
    invalid = [
        # ... but a call that passes the loss function as the metric keeps its history.
        Invalid(METRIC_PASSED, line=24, column=9,
                fixed=METRIC_PASSED.replace("top1.update(prec1,", "top1.update(prec1.item(),")),
        # A same-module reduce helper hands back a clone of the loss, history and all (a106 DL-Demos).
        Invalid("""\
import torch
import torch.distributed as dist


def reduce_sum(tensor):
    rt = tensor.clone()
    dist.all_reduce(rt, op=dist.ReduceOp.SUM)
    return rt


def train(model, dataloader, optimizer, loss_fn, n_epochs):
    for e in range(n_epochs):
        total_loss = 0
        for x in dataloader:
            predict_x = model(x)
            loss = loss_fn(predict_x, x)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss = reduce_sum(loss)
            total_loss += loss * x.shape[0]
        print(total_loss)
""", line=21, column=13,
                fixed="""\
import torch
import torch.distributed as dist


def reduce_sum(tensor):
    rt = tensor.clone()
    dist.all_reduce(rt, op=dist.ReduceOp.SUM)
    return rt


def train(model, dataloader, optimizer, loss_fn, n_epochs):
    for e in range(n_epochs):
        total_loss = 0
        for x in dataloader:
            predict_x = model(x)
            loss = loss_fn(predict_x, x)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss = reduce_sum(loss)
            total_loss += (loss * x.shape[0]).detach()
        print(total_loss)
"""),
        # The handed-in function builds a loader over a whole data set: every batch's graph is kept.
        Invalid(TRAIN + """\
def make_loader(dataset):
    return torch.utils.data.DataLoader(dataset, batch_size=64)

def predict_all(model, dataset, loader_function):
    batches = loader_function(dataset)
    predictions = []
    for batch in batches:
        predictions.append(model(batch))
    return torch.cat(predictions, dim=0)

def fit(model, loader, optimizer, val_set):
    for points, target in loader:
        loss = criterion(model(points), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(predict_all(model, val_set, make_loader).argmax(1))
""", line=11, column=9, fixed=TRAIN + """\
def make_loader(dataset):
    return torch.utils.data.DataLoader(dataset, batch_size=64)

def predict_all(model, dataset, loader_function):
    batches = loader_function(dataset)
    predictions = []
    for batch in batches:
        predictions.append(model(batch).detach())
    return torch.cat(predictions, dim=0)

def fit(model, loader, optimizer, val_set):
    for points, target in loader:
        loss = criterion(model(points), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(predict_all(model, val_set, make_loader).argmax(1))
"""),
        # The handler of a ``try`` that stored ``.item()`` of another value still keeps this one.
        Invalid(TRAIN + """\

def train(model, loader, optimizer, meter):
    history = []
    for x, y in loader:
        loss = criterion(model(x), y)
        aux = model.aux_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        try:
            meter.append(aux.item())
        except AttributeError:
            history.append(loss)
""", line=16, column=13, severity="warning", fixed=TRAIN + """\

def train(model, loader, optimizer, meter):
    history = []
    for x, y in loader:
        loss = criterion(model(x), y)
        aux = model.aux_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        try:
            meter.append(aux.item())
        except AttributeError:
            history.append(loss.item())
"""),
        # A method of the criterion object (``self.criterion.mse_loss``) on the model's output (a56 TriND41).
        Invalid(TRAIN + """\

class Trainer:
    def fit(self, loader):
        train_loss = 0.0
        for inputs, noise in loader:
            outputs = self.model(inputs, noise)
            loss = self.criterion.mse_loss(outputs, noise)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            train_loss += loss
        return train_loss / len(loader)
""", line=14, column=13, severity="warning", fixed=TRAIN + """\

class Trainer:
    def fit(self, loader):
        train_loss = 0.0
        for inputs, noise in loader:
            outputs = self.model(inputs, noise)
            loss = self.criterion.mse_loss(outputs, noise)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            train_loss += loss.detach()
        return train_loss / len(loader)
"""),
        # The project's forward hands back an item with history (``scores``): kept, it holds every graph.
        # The else of isinstance(float) is where the tensor goes: still kept with its graph.
        Invalid(TRAIN + """\

def train(model, loader, optimizer):
    total = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if isinstance(loss, float):
            total += 1.0
        else:
            total += loss
""", line=15, column=13, severity="warning", fixed=TRAIN + """\

def train(model, loader, optimizer):
    total = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if isinstance(loss, float):
            total += 1.0
        else:
            total += loss.item()
"""),
        Invalid(TRAIN + """\
from torch.nn.parallel import DistributedDataParallel as DDP

class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(16, 4)

    def forward(self, x, y):
        aux = 0
        scores = self.body(x)
        loss = criterion(scores, y)
        return loss, scores, aux

def fit(cfg, net, loader, opt):
    net = DDP(net, device_ids=[cfg.gpu])
    score_log = []
    for x, y in loader:
        loss, scores, aux = net(x, y)
        score_log.append(scores)
        loss.backward()
        opt.step()

def main(cfg, loader):
    net = TwoHeads().cuda()
    fit(cfg, net, loader, torch.optim.SGD(net.parameters(), lr=0.1))
""", line=22, column=9, severity="warning", fixed=TRAIN + """\
from torch.nn.parallel import DistributedDataParallel as DDP

class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(16, 4)

    def forward(self, x, y):
        aux = 0
        scores = self.body(x)
        loss = criterion(scores, y)
        return loss, scores, aux

def fit(cfg, net, loader, opt):
    net = DDP(net, device_ids=[cfg.gpu])
    score_log = []
    for x, y in loader:
        loss, scores, aux = net(x, y)
        score_log.append(scores.detach())
        loss.backward()
        opt.step()

def main(cfg, loader):
    net = TwoHeads().cuda()
    fit(cfg, net, loader, torch.optim.SGD(net.parameters(), lr=0.1))
"""),
        Invalid(TRAIN + """\
def train(model, loader, optimizer):
    total = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss
""", line=10, column=9, severity="warning", fixed=TRAIN + """\
def train(model, loader, optimizer):
    total = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
"""),
        Invalid(TRAIN + """\
def train(model, loader, optimizer):
    losses = []
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        losses.append(loss)
""", line=9, column=9, severity="warning", fixed=TRAIN + """\
def train(model, loader, optimizer):
    losses = []
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        losses.append(loss.item())
"""),
        # `.cpu()` keeps the graph.
        Invalid(TRAIN + """\
def train(model, loader, optimizer):
    losses = []
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        losses.append(loss.cpu())
""", line=9, column=9, severity="warning", fixed=TRAIN + """\
def train(model, loader, optimizer):
    losses = []
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        losses.append(loss.cpu().item())
"""),
        # Evaluation without no_grad: the whole graph of every batch is retained.
        Invalid(TRAIN + """\
def validate(model, loader):
    total = 0
    for x, y in loader:
        out = model(x)
        total += criterion(out, y)
    return total

validate(net, val_loader)
""", line=8, column=9, severity="error", fixed=TRAIN + """\
def validate(model, loader):
    total = 0
    for x, y in loader:
        out = model(x)
        total += criterion(out, y).item()
    return total

validate(net, val_loader)
"""),
        Invalid(TRAIN + """\
def predict(model, loader):
    outputs = []
    for x in loader:
        outputs.append(model(x).to("cpu"))
    return outputs

predict(net, test_loader)
""", line=7, column=9, severity="error", fixed=TRAIN + """\
def predict(model, loader):
    outputs = []
    for x in loader:
        outputs.append(model(x).to("cpu").detach())
    return outputs

predict(net, test_loader)
"""),
        # nanoGPT-style unpacking of (logits, loss).
        Invalid(TRAIN + """\
def train(model, optimizer):
    running = 0
    for it in range(max_iters):
        logits, loss = model(X, Y)
        loss.backward()
        optimizer.step()
        running = running + loss
""", line=10, column=9, severity="warning", fixed=TRAIN + """\
def train(model, optimizer):
    running = 0
    for it in range(max_iters):
        logits, loss = model(X, Y)
        loss.backward()
        optimizer.step()
        running = running + loss.item()
"""),
        Invalid(TRAIN + """\
class Trainer:
    def fit(self, loader):
        for x, y in loader:
            out = self.model(x)
            loss = criterion(out, y).mean()
            loss.backward()
            self.history.append(loss * 2)
""", line=10, column=13, severity="warning", fixed=TRAIN + """\
class Trainer:
    def fit(self, loader):
        for x, y in loader:
            out = self.model(x)
            loss = criterion(out, y).mean()
            loss.backward()
            self.history.append((loss * 2).item())
"""),
        Invalid(TRAIN + """\
def train(model, loader, optimizer):
    epoch_loss = 0
    for batch in loader:
        out = model(batch["x"])
        loss = (out - batch["y"]).pow(2).mean()
        loss.backward()
        optimizer.step()
        epoch_loss += loss[0] if loss.dim() else loss
""", line=11, column=9, severity="warning", fixed=TRAIN + """\
def train(model, loader, optimizer):
    epoch_loss = 0
    for batch in loader:
        out = model(batch["x"])
        loss = (out - batch["y"]).pow(2).mean()
        loss.backward()
        optimizer.step()
        epoch_loss += (loss[0] if loss.dim() else loss).detach()
"""),
        # A dict of running totals.
        Invalid(TRAIN + """\
def train(model, loader, optimizer):
    totals = {"loss": 0.0}
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        totals["loss"] += loss
""", line=9, column=9, severity="warning", fixed=TRAIN + """\
def train(model, loader, optimizer):
    totals = {"loss": 0.0}
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        totals["loss"] += loss.item()
"""),
        # A per-sample loss (reduction="none") is not a scalar: .detach(), not .item().
        Invalid(TRAIN + """\
per_sample = nn.CrossEntropyLoss(reduction="none")
def train(model, loader, optimizer):
    history = []
    for x, y in loader:
        sample_losses = per_sample(model(x), y)
        sample_losses.mean().backward()
        history.append(sample_losses)
""", line=10, column=9, severity="warning", fixed=TRAIN + """\
per_sample = nn.CrossEntropyLoss(reduction="none")
def train(model, loader, optimizer):
    history = []
    for x, y in loader:
        sample_losses = per_sample(model(x), y)
        sample_losses.mean().backward()
        history.append(sample_losses.detach())
"""),
        # extend() takes an iterable of tensors: no fix is offered.
        Invalid(TRAIN + """\
def evaluate(model, loader):
    outs = []
    for x in loader:
        outs.extend(model(x).unbind(0))
    return outs

evaluate(net, val_loader)
""", line=7, column=9, severity="error"),
        # Module-level evaluation loop.
        Invalid(TRAIN + """\
outputs = []
for x in loader:
    outputs.append(torch.softmax(model(x), dim=-1))
""", line=6, column=5, severity="error", fixed=TRAIN + """\
outputs = []
for x in loader:
    outputs.append(torch.softmax(model(x), dim=-1).detach())
"""),
        # An augmented assignment keeps the history of its target.
        Invalid(TRAIN + """\
def train(net, loader, opt, n):
    history = []
    for xb in loader:
        loss = net(xb).mean(); loss.backward(); opt.step()
        snap = loss.clone(); snap /= n
        history.append(snap)
""", line=9, column=9, severity="warning", fixed=TRAIN + """\
def train(net, loader, opt, n):
    history = []
    for xb in loader:
        loss = net(xb).mean(); loss.backward(); opt.step()
        snap = loss.clone(); snap /= n
        history.append(snap.detach())
"""),
        # A per-batch method without a loop of its own, called from a loop.
        Invalid(TRAIN + """\
class Runner:
    def step(self, xb):
        loss = self.net(xb).mean()
        self.history.append(loss)
        loss.backward()
        self.opt.step()

    def epoch(self, loader):
        for xb in loader:
            self.step(xb)
""", line=7, column=9, severity="warning", fixed=TRAIN + """\
class Runner:
    def step(self, xb):
        loss = self.net(xb).mean()
        self.history.append(loss.item())
        loss.backward()
        self.opt.step()

    def epoch(self, loader):
        for xb in loader:
            self.step(xb)
"""),
        # The reset is skipped by `continue` on the accumulating iterations.
        Invalid(TRAIN + """\
def train(net, loader, opt, k):
    acc = 0.0
    for i, xb in enumerate(loader):
        loss = net(xb).mean() / k
        acc += loss
        if (i + 1) % k:
            loss.backward(); continue
        loss.backward(); opt.step(); acc = 0.0
""", line=8, column=9, severity="warning", fixed=TRAIN + """\
def train(net, loader, opt, k):
    acc = 0.0
    for i, xb in enumerate(loader):
        loss = net(xb).mean() / k
        acc += loss.detach()
        if (i + 1) % k:
            loss.backward(); continue
        loss.backward(); opt.step(); acc = 0.0
"""),
        # A trainer attribute reset only at the optimizer step (every k-th iteration): it keeps
        # k micro-steps' graphs and is read by the logger, not by backward() (LiteASR, whose
        # criterion runs the model itself: the loss has history, backward() is run on it).
        Invalid(TRAIN + """\
class Trainer:
    def run(self, loader, k):
        for i, xb in enumerate(loader, start=1):
            loss = self.criterion(self.net, xb)
            self.loss += loss / k
            loss.backward()
            if i % k == 0:
                self.opt.step(); self.opt.zero_grad(); self.loss = 0
""", line=8, column=13, severity="warning", fixed=TRAIN + """\
class Trainer:
    def run(self, loader, k):
        for i, xb in enumerate(loader, start=1):
            loss = self.criterion(self.net, xb)
            self.loss += (loss / k).detach()
            loss.backward()
            if i % k == 0:
                self.opt.step(); self.opt.zero_grad(); self.loss = 0
"""),
        # A meter of this module that keeps its argument (`self.sum += val`).
        Invalid(TRAIN + """\
class AverageMeter:
    def __init__(self):
        self.sum, self.count = 0.0, 0
    def update(self, val, n=1):
        self.sum += val * n
        self.count += n

def train(model, loader, optimizer):
    meter = AverageMeter()
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        meter.update(loss, x.size(0))
""", line=16, column=9, severity="warning", fixed=TRAIN + """\
class AverageMeter:
    def __init__(self):
        self.sum, self.count = 0.0, 0
    def update(self, val, n=1):
        self.sum += val * n
        self.count += n

def train(model, loader, optimizer):
    meter = AverageMeter()
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        meter.update(loss.item(), x.size(0))
"""),
        # A framework's backward frees the buffers; the outputs kept still hold the graph.
        Invalid(TRAIN + """\
def train(model, loader):
    kept = []
    for batch in loader:
        outputs = model(batch)
        kept.append(outputs.logits.to("cpu"))
        model.backward(outputs.loss)
        model.step()
    return kept

kept = train(engine, train_loader)
""", line=8, column=9, severity="warning", fixed=TRAIN + """\
def train(model, loader):
    kept = []
    for batch in loader:
        outputs = model(batch)
        kept.append(outputs.logits.to("cpu").detach())
        model.backward(outputs.loss)
        model.step()
    return kept

kept = train(engine, train_loader)
"""),
        # The count comes from a caller that passes a run-time value: a loop over data.
        Invalid(TRAIN + """\
def collect(model, inputs, steps):
    captured = []
    for k in range(steps):
        y = model(inputs[k])
        captured.append(y)
        y.sum().backward()
    return captured

collect(net, batches, args.iters)
""", line=8, column=9, severity="warning", fixed=TRAIN + """\
def collect(model, inputs, steps):
    captured = []
    for k in range(steps):
        y = model(inputs[k])
        captured.append(y.detach())
        y.sum().backward()
    return captured

collect(net, batches, args.iters)
"""),
        # A loss summed from a list of per-sample criterion terms keeps the graph of each.
        Invalid(TRAIN + """\
def train(model, loader, optimizer):
    for epoch in range(3):
        running = torch.zeros(1)
        for images, targets in loader:
            outs = model(images)
            terms = []
            for j in range(images.shape[0]):
                terms.append(criterion(outs[j], targets[j]))
            loss = sum(terms)
            loss.backward()
            optimizer.step()
            running += loss
""", line=15, column=13, severity="warning", fixed=TRAIN + """\
def train(model, loader, optimizer):
    for epoch in range(3):
        running = torch.zeros(1)
        for images, targets in loader:
            outs = model(images)
            terms = []
            for j in range(images.shape[0]):
                terms.append(criterion(outs[j], targets[j]))
            loss = sum(terms)
            loss.backward()
            optimizer.step()
            running += loss.detach()
"""),
        # An auxiliary loss summed over the model's auxiliary outputs (a comprehension).
        Invalid(TRAIN + """\
def train(model, loader, optimizer, weight):
    aux_total = 0.0
    for images, targets in loader:
        out, aux_outs = model(images)
        aux = sum(weight * criterion(a, targets) for a in aux_outs)
        (criterion(out, targets) + aux).backward()
        optimizer.step()
        aux_total += aux * images.size(0)
""", line=11, column=9, severity="warning", fixed=TRAIN + """\
def train(model, loader, optimizer, weight):
    aux_total = 0.0
    for images, targets in loader:
        out, aux_outs = model(images)
        aux = sum(weight * criterion(a, targets) for a in aux_outs)
        (criterion(out, targets) + aux).backward()
        optimizer.step()
        aux_total += (aux * images.size(0)).detach()
"""),
        # A running mean rebuilt from itself and the loss.
        Invalid(TRAIN + """\
def train(model, loader, optimizer):
    avg = torch.zeros(1)
    for step, (images, targets) in enumerate(loader):
        loss = criterion(model(images), targets)
        loss.backward()
        optimizer.step()
        avg = (avg * step + loss) / (step + 1)
""", line=10, column=9, severity="warning", fixed=TRAIN + """\
def train(model, loader, optimizer):
    avg = torch.zeros(1)
    for step, (images, targets) in enumerate(loader):
        loss = criterion(model(images), targets)
        loss.backward()
        optimizer.step()
        avg = (avg * step + loss.item()) / (step + 1)
"""),
        # The same per-batch method reached through an instance, with no backward: error.
        Invalid(TRAIN + """\
class Scorer:
    def score(self, xb):
        self.outputs.append(self.net(xb))

scorer = Scorer()
for xb in loader:
    scorer.score(xb)
""", line=6, column=9, severity="error", fixed=TRAIN + """\
class Scorer:
    def score(self, xb):
        self.outputs.append(self.net(xb).detach())

scorer = Scorer()
for xb in loader:
    scorer.score(xb)
"""),
        # A micro-step loop of a per-step function sums each scaled loss into a
        # total kept with its graph; the model comes from a state holder.
        Invalid(TRAIN + """\
def train_step(state, batches, k):
    model, opt, scaler = state["model"], state["optimizer"], state["scaler"]
    forward = model
    total = torch.zeros(1, device="cuda")
    done = 0
    while True:
        loss = scaler.scale(criterion(forward(next(batches)), None) / k)
        total += loss
        loss.backward()
        done += 1
        if done == k:
            break
    scaler.step(opt)
    scaler.update()
    return total
""", line=11, column=9, severity="warning", fixed=TRAIN + """\
def train_step(state, batches, k):
    model, opt, scaler = state["model"], state["optimizer"], state["scaler"]
    forward = model
    total = torch.zeros(1, device="cuda")
    done = 0
    while True:
        loss = scaler.scale(criterion(forward(next(batches)), None) / k)
        total += loss.detach()
        loss.backward()
        done += 1
        if done == k:
            break
    scaler.step(opt)
    scaler.update()
    return total
"""),
        # An evaluation helper over the loader (not the chunks of one input) keeps
        # every batch's graph until it returns.
        Invalid(TRAIN + """\
def predict_all(model, loader):
    preds = []
    for batch in loader:
        preds.append(model(batch))
    return torch.cat(preds)

def main(model, loader):
    with torch.no_grad():
        warm = model(next(iter(loader)))
    print(predict_all(model, loader).shape, warm.shape)
""", line=7, column=9, severity="error", fixed=TRAIN + """\
def predict_all(model, loader):
    preds = []
    for batch in loader:
        preds.append(model(batch).detach())
    return torch.cat(preds)

def main(model, loader):
    with torch.no_grad():
        warm = model(next(iter(loader)))
    print(predict_all(model, loader).shape, warm.shape)
"""),
        # A loss returned by a training-step helper after its backward keeps its history.
        Invalid(TRAIN + """\
class Runner:
    def step(self, batch):
        loss = criterion(self.model(batch["x"]), batch["y"])
        loss.backward()
        self.opt.step()
        return loss, batch["x"].shape[0]

    def epoch(self, loader):
        history = []
        for batch in loader:
            loss, n = self.step(batch)
            history.append(loss)
        return history
""", line=15, column=13, severity="warning", fixed=TRAIN + """\
class Runner:
    def step(self, batch):
        loss = criterion(self.model(batch["x"]), batch["y"])
        loss.backward()
        self.opt.step()
        return loss, batch["x"].shape[0]

    def epoch(self, loader):
        history = []
        for batch in loader:
            loss, n = self.step(batch)
            history.append(loss.item())
        return history
"""),
        Invalid(TRAIN + """\
def train_step(model, opt, x, y):
    opt.zero_grad()
    out = criterion(model(x), y)
    out.backward()
    opt.step()
    return out

def fit(model, opt, loader):
    seen = []
    for x, y in loader:
        seen.append(train_step(model, opt, x, y))
    return seen
""", line=14, column=9, severity="warning", fixed=TRAIN + """\
def train_step(model, opt, x, y):
    opt.zero_grad()
    out = criterion(model(x), y)
    out.backward()
    opt.step()
    return out

def fit(model, opt, loader):
    seen = []
    for x, y in loader:
        seen.append(train_step(model, opt, x, y).detach())
    return seen
"""),
        Invalid(TRAIN + """\
class PPO:
    def update(self, mb):
        actor_loss = -(self.policy(mb["obs"]) * mb["adv"]).mean()
        critic_loss = (self.value(mb["obs"]) - mb["ret"]).pow(2).mean()
        total = actor_loss + 0.5 * critic_loss
        self.opt.zero_grad()
        total.backward()
        self.opt.step()
        return actor_loss, critic_loss

    def train(self, minibatches):
        actor_losses = []
        for mb in minibatches:
            a_loss, c_loss = self.update(mb)
            actor_losses.append(a_loss)
        return actor_losses
""", line=18, column=13, severity="warning", fixed=TRAIN + """\
class PPO:
    def update(self, mb):
        actor_loss = -(self.policy(mb["obs"]) * mb["adv"]).mean()
        critic_loss = (self.value(mb["obs"]) - mb["ret"]).pow(2).mean()
        total = actor_loss + 0.5 * critic_loss
        self.opt.zero_grad()
        total.backward()
        self.opt.step()
        return actor_loss, critic_loss

    def train(self, minibatches):
        actor_losses = []
        for mb in minibatches:
            a_loss, c_loss = self.update(mb)
            actor_losses.append(a_loss.item())
        return actor_losses
"""),
    ]

    valid += [
        # Detached in place on the line before the accumulation (two spellings).
        Valid(TRAIN + """\
def train(model, loader, optimizer):
    total = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss.detach_()
        total += loss
"""),
        Valid(TRAIN + """\
def fit(model, batches, opt):
    history = []
    for batch in batches:
        out = model(batch).mean()
        out.backward()
        opt.step()
        out.detach_(); print(out)
        if out > 0:
            history.append(out)
"""),
    ]
    invalid += [
        # Detached only on one branch, or rebound after the in-place detach: history kept.
        Invalid(TRAIN + """\
def train(model, loader, optimizer, cfg):
    total = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        if cfg.log:
            loss.detach_()
        total += loss
""", line=12, column=9, severity="warning", fixed=TRAIN + """\
def train(model, loader, optimizer, cfg):
    total = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        if cfg.log:
            loss.detach_()
        total += loss.item()
"""),
        Invalid(TRAIN + """\
def run(model, loader, opt):
    seen = []
    for x in loader:
        out = model(x).sum()
        out.detach_()
        out = model(x).sum()
        out.backward()
        opt.step()
        seen.append(out)
""", line=12, column=9, severity="warning", fixed=TRAIN + """\
def run(model, loader, opt):
    seen = []
    for x in loader:
        out = model(x).sum()
        out.detach_()
        out = model(x).sum()
        out.backward()
        opt.step()
        seen.append(out.item())
"""),
    ]

    def screen(self, sketch):
        """The screen (necessary for check() to report): True, False, or the project facts that must hold."""
        # a value kept in a loop, and a model or loss; never in a unit test
        return sketch.graph_accumulation and sketch.graph_root and not sketch.in_test_module()

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        for node, accumulator, value, order in _accumulations(index):
            if _fallback_of_item(index, node, value):
                continue
            severity = _severity(index, node, accumulator, value, order)
            if severity is not None:
                yield self.report(node, _message(index, value, severity), severity=severity,
                                  fix=_fix(index, node, value))


def _fallback_of_item(index: SemanticIndex, node: cst.CSTNode, value: cst.BaseExpression) -> bool:
    """``try: meter.update(loss.item()) except: meter.update(loss)``: the handler runs
    only when ``loss`` has no ``.item()``, i.e. is no tensor (a plain 0 on a branch
    that skipped the loss; a63 UFDN-Reid)."""
    if not isinstance(value, cst.Name):
        return False
    child = node
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return False
        if isinstance(ancestor, cst.Try) and isinstance(child, cst.ExceptHandler):
            code = index.module.code_for_node(ancestor.body)
            return f"{value.value}.item()" in code.replace(" ", "")
        child = ancestor
    return False


def _message(index: SemanticIndex, value: cst.BaseExpression, severity: str) -> str:
    text = index.module.code_for_node(value).strip()
    shown = f"`{text}`" if len(text) <= 40 and "\n" not in text else "this tensor"
    if severity == "error":
        return (f"{shown} carries autograd history and no backward() frees it: the whole activation "
                "graph of every batch stays alive and memory grows until out-of-memory; "
                "use .item() or .detach()")
    return (f"{shown} carries autograd history and is kept across iterations: every step's graph "
            "stays referenced and memory grows each step; use .item() or .detach()")


def _accumulations(index: SemanticIndex):
    """(reported node, accumulator expression, accumulated value, order) for
    every append/extend/insert, every accumulating assignment, and every call
    of a project meter method that keeps its argument (``meter.update(loss)``)."""
    for site in index.method_calls("append", "extend", "insert", "add"):
        if site.receiver is None or not site.node.args:
            continue
        value = site.node.args[-1].value
        yield site.node, site.receiver, value, site.order
    for site, value in _keeping_calls(index):
        yield site.node, site.receiver, value, site.order
    for target, value in index.subscript_assignments:  # ``totals["loss"] += loss``
        statement = index.parent(target)
        if isinstance(statement, cst.AugAssign) and isinstance(statement.operator, cst.AddAssign):
            order = _order_of(index, statement)
            if order is not None:
                yield statement, target.value, value, order
    for bindings in index.bindings.values():
        for binding in bindings:
            if binding.kind == "augassign" and isinstance(binding.node, cst.AugAssign):
                if isinstance(binding.node.operator, (cst.AddAssign, cst.SubtractAssign, cst.MultiplyAssign)):
                    yield binding.node, binding.node.target, binding.value, binding.order
            elif binding.kind == "assign" and isinstance(binding.value, cst.BinaryOperation):
                target_name = binding.name
                if target_name in flow.names_in(binding.value) and isinstance(binding.node, cst.Assign):
                    other = _other_operand(binding.value, target_name)
                    if other is None:  # a running mean: ``m = (m * step + loss) / (step + 1)``
                        other = next((t for t in _arithmetic_terms(binding.value)
                                      if dotted_name(t) != target_name
                                      and flow.carries_graph(index, t, binding.order)), None)
                    if other is not None:
                        yield binding.node, binding.node.targets[0].target, other, binding.order


def _keeping_calls(index: SemanticIndex):
    """``meter.update(loss)`` where ``meter`` is an instance of a class of this
    module whose method stores the argument in the instance
    (``self.sum += val``, ``self.values.append(val)``): (call, argument)."""
    for site in index.calls:
        if site.method in ("append", "extend", "insert", "add") or not isinstance(site.receiver, cst.Name):
            continue
        if not isinstance(site.node.func, cst.Attribute) or not site.node.args:
            continue
        method = _instance_method(index, site.receiver, site.method)
        if method is not None:
            params = [p.name.value for p in method.params.params][1:]
            keeps = lambda param: flow.method_keeps_param(index, method, param)  # noqa: E731
        elif flow.instance_class(index, site.receiver) is not None:
            facts = flow.project_function_facts(index, site.node)  # a meter class of another module
            if facts is None or not facts.keeps:
                continue
            params = [p for p in facts.params if p not in ("self", "cls")]
            keeps = facts.keeps.__contains__
        else:
            continue
        for position, arg in enumerate(site.node.args):
            if arg.star:
                break
            param = arg.keyword.value if arg.keyword is not None else (
                params[position] if position < len(params) else None)
            if param is not None and keeps(param):
                yield site, arg.value
                break


def _instance_method(index: SemanticIndex, receiver: cst.Name, method: str) -> Optional[cst.FunctionDef]:
    values = index.reaching_values(receiver) or []
    classes = set()
    for value in values:
        if not isinstance(value, cst.Call) or not isinstance(value.func, cst.Name):
            return None
        classes.add(value.func.value)
    if len(classes) != 1:
        return None
    wanted = classes.pop()
    owner = next((c for c in index.classes if c.name.value == wanted), None)
    if owner is None:
        return None
    return next((f for f in index.functions_named(method) if index.parent(index.parent(f)) is owner), None)


# Expressions that take a method call without parentheses around them.
_POSTFIX = (cst.Name, cst.Attribute, cst.Call, cst.Subscript)
_REDUCTIONS = ("mean", "sum", "item", "norm")
_KEEPS_SHAPE = ("cpu", "cuda", "to", "float", "double", "half", "clone", "squeeze", "detach")


def _fix(index: SemanticIndex, node: cst.CSTNode, value: cst.BaseExpression):
    """``value.item()`` for a scalar loss, else ``value.detach()``; the value is
    parenthesised when it is not a postfix expression (``(loss * 2).item()``)."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "extend":
        return None  # an iterable of tensors: no single method cuts their graphs
    method = "item" if _scalar(index, value) else "detach"
    if isinstance(value, _POSTFIX):
        edits = (insert_after(value, f".{method}()"),)
    else:
        edits = (insert_before(value, "("), insert_after(value, f").{method}()"))
    what = "a Python number (.item())" if method == "item" else "a detached tensor (.detach())"
    return node_fix(f"Keep {what} instead of the tensor with its graph", UNSAFE, *edits)


def _scalar(index: SemanticIndex, expr: cst.BaseExpression, depth: int = 0) -> bool:
    """Is ``expr`` a one-element loss, on which ``.item()`` cannot fail?"""
    if depth > 4:
        return False
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    if isinstance(expr, (cst.Name, cst.Attribute)):
        values = index.reaching_values(expr)
        if values:
            return all(_scalar(index, value, depth + 1) for value in values)
        name = dotted_name(expr) or ""
        return "loss" in name.split(".")[-1].lower() and not name.lower().endswith("losses")
    if isinstance(expr, cst.Call):
        if isinstance(expr.func, cst.Attribute):
            method = expr.func.attr.value
            if method in _REDUCTIONS and not expr.args:
                return True
            if method in _KEEPS_SHAPE:
                return _scalar(index, expr.func.value, depth + 1)
        return flow.is_criterion(index, expr.func) and _reduces(index, expr)
    if isinstance(expr, cst.BinaryOperation):
        return all(_scalar(index, side, depth + 1) for side in (expr.left, expr.right))
    if isinstance(expr, cst.UnaryOperation):
        return _scalar(index, expr.expression, depth + 1)
    return False


def _reduces(index: SemanticIndex, call: cst.Call) -> bool:
    """A criterion call whose result is reduced: no ``reduction="none"`` on the
    call or on the construction of the criterion it calls."""
    name = dotted_name(call.func)
    if name is not None and not name.split(".")[-1].lower().endswith(("loss", "criterion", "entropy")) \
            and (index.qualified_name(call.func) or "").startswith("torch.nn.functional."):
        return False  # F.relu, F.softmax...: not losses
    bindings = index.visible_bindings(name, call) if name is not None else None
    constructions = [call] + [b.value for b in bindings or [] if isinstance(b.value, cst.Call)]
    for construction in constructions:
        for arg in construction.args:
            if arg.keyword is not None and arg.keyword.value == "reduction" \
                    and isinstance(arg.value, cst.SimpleString) and arg.value.value.strip("'\"") == "none":
                return False
    return True


def _order_of(index: SemanticIndex, statement: cst.AugAssign) -> Optional[int]:
    """A source order for a statement with no binding of its own: that of the
    last call in its value (every use of the value happens by then)."""
    orders = [site.order for site in flow.calls_in_function(index, index.enclosing_scope(statement))
              if flow.is_inside(index, site.node, statement)]
    return max(orders) + 1 if orders else flow.order_near(index, statement)


def _arithmetic_terms(value: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The leaves of nested arithmetic (``(m * step + loss) / (step + 1)``:
    ``m``, ``step``, ``loss``, ``step``, ``1``), parentheses included."""
    if isinstance(value, cst.BinaryOperation) and isinstance(
            value.operator, (cst.Add, cst.Subtract, cst.Multiply, cst.Divide)):
        return _arithmetic_terms(value.left) + _arithmetic_terms(value.right)
    return [value]


def _other_operand(value: cst.BinaryOperation, name: str) -> Optional[cst.BaseExpression]:
    """``loss`` in ``total = total + loss``."""
    if dotted_name(value.left) == name:
        return value.right
    if dotted_name(value.right) == name:
        return value.left
    return None


def _severity(index: SemanticIndex, node: cst.CSTNode, accumulator: cst.BaseExpression,
              value: cst.BaseExpression, order: int) -> Optional[str]:
    if flow.in_framework_code(index, node) or flow.in_module_internals(index, node):
        return None
    if is_test_module(index.path):
        return None  # a unit test runs a few steps and keeps their outputs to compare them
    name = dotted_name(accumulator)
    if name is None:
        return None
    if name.split(".")[0] != "self" and "." in name:
        return None  # an attribute of some value: cannot tell what it is
    if "." not in name and index.visible_bindings(name, node) is None:
        return None
    loops = flow.enclosing_loops(index, node)
    if not loops:
        return _per_call_severity(index, node, name, value, order)
    if not flow.carries_graph(index, value, order):
        return None
    if "." in name:  # ``self.history``: outlives the loop unless rebound in it on every path
        # (``if i % k == 0: self.loss = 0`` keeps k steps' graphs: no reset of every iteration)
        surviving = [loop for loop in loops if not flow.binds_inside(index, name, loop, node)
                     or loop in flow.surviving_loops(index, name, node, [loop])]
    else:
        surviving = flow.surviving_loops(index, name, node, loops)
        # Reset on every iteration of an enclosing loop, and the inner loop runs
        # over what that iteration pulled (``for idx in range(img.shape[0])``
        # inside ``for img, y in loader``): what it keeps lives for one batch.
        surviving = [loop for loop in surviving
                     if not any(outer not in surviving and _iterates_items_of(loop, outer)
                                for outer in loops if outer is not loop)]
    # ``for i in range(10)``: a bounded, short-lived graph, not a leak; nor a
    # local list filled over the parts of one step (heads, views, stages)
    surviving = [loop for loop in surviving if not _few_literal_iterations(index, loop)
                 and ("." in name or not flow.is_parts_loop(index, loop))]
    if not surviving:
        return None  # reset every iteration, on every path
    if _consumed_by_backward(index, node, name):
        return None
    if "." not in name and not any(flow.is_data_loop(index, loop) for loop in surviving) \
            and _returned(index, node, name):
        return None  # a sum over the parts of one step, returned into the loss
    mode = flow.grad_mode(index, node)
    if mode == "off":
        return None
    if flow.is_training_loop(index, loops[0]) or _framework_backward_in(index, loops[0]):
        return "warning"  # the loop's backward frees the graph's buffers, not its skeleton
    if mode == "unknown":
        return None  # an evaluation helper whose callers are elsewhere
    return "error"


def _per_call_severity(index: SemanticIndex, node: cst.CSTNode, name: str,
                       value: cst.BaseExpression, order: int) -> Optional[str]:
    """A per-batch method with no loop of its own (``def step(self, xb): ...
    self.history.append(loss)``) that a loop of this module calls: the
    instance's container outlives every call."""
    if not name.startswith("self."):
        return None
    function = flow.enclosing_function(index, node)
    if function is None or any(flow.is_inside(index, b.node, function) and b.kind in ("assign", "annassign")
                               and name not in flow.names_in(b.value)
                               for b in index.visible_bindings(name, node) or []):
        return None  # rebound in the method: one call's worth
    in_loops = [c for c in flow.callers(index, function) + _instance_callers(index, function)
                if flow.enclosing_loops(index, c.node) and not flow.in_no_grad_region(index, c.node)]
    if not in_loops or flow.in_no_grad_region(index, node):
        return None
    if not flow.carries_graph(index, value, order) or _consumed_by_backward(index, node, name):
        return None
    if flow.function_trains(index, function):
        return "warning"
    return "error"  # called from loops with autograd on, and nothing frees the graph


def _instance_callers(index: SemanticIndex, function: cst.FunctionDef):
    """``runner.step(xb)`` with ``runner = Runner(...)`` in this module."""
    owner = index.parent(index.parent(function))
    if not isinstance(owner, cst.ClassDef):
        return []
    found = []
    for site in index.method_calls(function.name.value):
        if isinstance(site.receiver, cst.Name) and \
                _instance_method(index, site.receiver, function.name.value) is function:
            found.append(site)
    return found


def _returned(index: SemanticIndex, node: cst.CSTNode, name: str) -> bool:
    """Is the accumulator (or a value computed from it) what the function
    returns?"""
    function = flow.enclosing_function(index, node)
    if function is None:
        return False
    for exit_node in index.exits:
        if isinstance(exit_node, cst.Return) and exit_node.value is not None \
                and flow.enclosing_function(index, exit_node) is function \
                and flow.precedes(index, node, exit_node) \
                and flow.depends_on(index, exit_node.value, name, flow.order_near(index, exit_node)):
            return True
    return False


def _iterates_items_of(inner: flow.Loop, outer: flow.Loop) -> bool:
    """Does ``inner`` (nested in ``outer``) iterate over what one iteration of
    ``outer`` bound: its iterable reads a target of ``outer``?"""
    if not isinstance(inner, cst.For) or not isinstance(outer, cst.For):
        return False
    targets = flow.names_in(outer.target)
    return bool(targets) and any(name.split(".")[0] in targets for name in flow.names_in(inner.iter))


SHORT_LOOP = 100


def _few_literal_iterations(index: SemanticIndex, loop: flow.Loop) -> bool:
    """``for i in range(10)`` (an export check over a few chunks): what it
    keeps is bounded and freed with the function, unlike a loop over data.
    Also ``range(n)`` where ``n`` is bound to a small literal, or is a
    parameter every caller of this module fills with one (a test helper
    capturing the outputs of ``microbatches = 4`` iterations)."""
    if not isinstance(loop, cst.For) or not isinstance(loop.iter, cst.Call):
        return False
    if dotted_name(loop.iter.func) != "range" or len(loop.iter.args) != 1:
        return False
    values = flow.known_ints(index, loop.iter.args[0].value)
    return bool(values) and max(values) <= SHORT_LOOP


def _consumed_by_backward(index: SemanticIndex, node: cst.CSTNode, name: str) -> bool:
    """Is the accumulator the loss (or part of the loss) of a later backward in
    the same function (``loss += term`` ... ``loss.backward()``)?"""
    function = flow.enclosing_function(index, node) or index.module
    for site in flow.calls_in_function(index, function):
        if not flow.precedes(index, node, site.node):
            continue
        operand = _backward_operand(index, site)
        if operand is not None and flow.depends_on(index, operand, name, site.order):
            return True
    return False


def _backward_operand(index: SemanticIndex, site) -> Optional[cst.BaseExpression]:
    """The loss of a tensor backward, or of a framework's
    ``accelerator.backward(loss)`` / ``engine.backward(loss)`` /
    ``self.manual_backward(loss)``."""
    if flow.is_tensor_backward(index, site):
        return flow.backward_operand(site)
    if site.method in ("backward", "manual_backward") and site.positional(0) is not None:
        return site.positional(0).value
    return None


def _framework_backward_in(index: SemanticIndex, loop: flow.Loop) -> bool:
    return any(e.site.method in ("backward", "manual_backward") and e.site.positional(0) is not None
               for e in flow.events(index, loop))
