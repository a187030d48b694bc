"""## What it does
Flags `with model.no_sync():` (also `with context:` where `context =
nullcontext() if step else model.no_sync()`) whose body calls `backward()` on a
loss whose forward pass ran before the `with`, outside the context (also a loss that a
helper built from outputs it collected, `outs.append(model(x))` then
`torch.cat(outs)`, and a loss summed from a dict of per-criterion losses,
`parts[name] = crit(out, y)` then `sum(parts.values())` or a loop of
`loss += part`), and `model.require_backward_grad_sync = False` set after
the forward of the loss it is meant for already ran.

## Why is this bad?
DDP decides at forward time whether the coming backward synchronises
(`no_sync()` only flips `require_backward_grad_sync`, which DDP reads in
`forward`). A forward outside the context has already armed the all-reduce, so
the backward inside it synchronises anyway: the accumulation still pays one
all-reduce per micro-step, and the code looks as if it did not.

## Example
    loss = criterion(model(x), y)
    with model.no_sync():
        loss.backward()

## Use instead
    with model.no_sync():
        loss = criterion(model(x), y)
        loss.backward()

Not flagged: forward and backward both inside (also inside one helper called
in the block); a forward that ran inside another `no_sync()` block of the same
model; forward inside the context and backward outside on the syncing step (a
known correct idiom: the last micro-step's forward runs inside, its backward
outside, and syncs everything); `require_backward_grad_sync` set before the
forward (nanoGPT); `accelerator.no_sync(model)` (the framework's); `x.no_sync()` in a
project that defines its own data-parallel wrapper with a `no_sync` method, unless `x`
is a torch DDP/FSDP wrap (the project's `no_sync` may only set a flag read at backward time).

## References
- https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html#torch.nn.parallel.DistributedDataParallel.no_sync
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ddplint import names
from ddplint.analysis import flow, models, values
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import SemanticIndex

DDP = """\
import contextlib
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
model = DDP(net)
"""


class NoSyncForwardOutside(Rule):
    code, name, severity = "DDP013", "no-sync-forward-outside", "warning"
    message = ("the forward of this loss ran outside no_sync(): the backward inside still "
               "all-reduces; move the forward into the with block")
    LATE_MESSAGE = ("require_backward_grad_sync is turned off after the forward ran: DDP read it in the "
                    "forward, so this backward still all-reduces; set it before the forward")
    triggers = ("no_sync", "require_backward_grad_sync")
    needs_ddp_context = True

    valid = [
        # ... and with the forward inside the chosen context.
        Valid(DDP + """\
for i, (x, y) in enumerate(loader):
    context = contextlib.nullcontext() if (i + 1) % k == 0 else model.no_sync()
    with context:
        loss = criterion(model(x), y) / k
        loss.backward()
"""),
        Valid(DDP + """\
for x, y in micro_batches[:-1]:
    with model.no_sync():
        loss = criterion(model(x), y)
        loss.backward()
"""),
        # Forward inside, backward outside on the syncing step.
        Valid(DDP + """\
with model.no_sync():
    loss = criterion(model(x), y)
loss.backward()
"""),
        Valid(DDP + """\
for i, (x, y) in enumerate(loader):
    ctx = model.no_sync() if (i + 1) % k else contextlib.nullcontext()
    with ctx:
        out = model(x)
        loss = criterion(out, y)
        loss.backward()
"""),
        Valid(DDP + """\
for i, (x, y) in enumerate(loader):
    with model.no_sync() if (i + 1) % k else contextlib.nullcontext():
        loss = compute_loss(model, x, y)
        loss.backward()

def compute_loss(model, x, y):
    return criterion(model(x), y)
"""),
        # A loss whose origin is not visible here.
        Valid(DDP + """\
def accumulate(loss):
    with model.no_sync():
        loss.backward()
"""),
        Valid(DDP + """\
from accelerate import Accelerator
accelerator = Accelerator()
loss = model(x).sum()
with accelerator.no_sync(model):
    accelerator.backward(loss)
"""),
        Valid(DDP + """\
out = model(x)
with model.no_sync():
    other = model(z).sum()
    other.backward()
out.sum().backward()
"""),
        Valid(DDP + """\
with model.no_sync():
    for x, y in loader:
        logits, loss = model(x, y)
        scaler.scale(loss).backward()
"""),
        # A helper that runs both the forward and the backward, called inside no_sync().
        Valid(DDP + """\
def train_step(model, batch):
    loss = model(batch).mean()
    loss.backward()

for i, batch in enumerate(loader):
    with model.no_sync():
        train_step(model, batch)
"""),
        # The forward ran inside another no_sync() block of the same model.
        Valid(DDP + """\
with model.no_sync():
    loss = model(x).sum()
log_progress(loss.item())
with model.no_sync():
    loss.backward()
"""),
        # nanoGPT: the flag is set before the forward.
        Valid(DDP + """\
for micro_step in range(accum):
    model.require_backward_grad_sync = micro_step == accum - 1
    logits, loss = model(X, Y)
    loss.backward()
"""),
        # The per-criterion losses of a forward run inside the block.
        Valid(DDP + """\
for i, (x, y) in enumerate(loader):
    with model.no_sync():
        out = model(x)
        parts = {}
        for name, crit in criteria.items():
            parts[name] = crit(out, y)
        loss = 0.0
        for name, part in parts.items():
            loss += part
        loss.backward()
"""),
        # The project's own data-parallel wrapper: its no_sync() sets a flag its gradient
        # hook reads at backward time, so the forward may run before the block.
        Valid("""\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


class HomeGrownDDP(torch.nn.Module):
    def __init__(self, module):
        super().__init__()
        self.module, self.do_sync = module, True

    def no_sync(self):
        return _flag_off(self)


def accumulate(model, x, y):
    loss = criterion(model(x), y)
    with model.no_sync():
        loss.backward()
"""),
    ]
    invalid = [
        # A home-grown wrapper elsewhere in the project does not excuse torch's DDP.
        Invalid(DDP + """\
class HomeGrownDDP(torch.nn.Module):
    def no_sync(self):
        return _flag_off(self)


loss = criterion(model(x), y)
with model.no_sync():
    loss.backward()
""", line=11, column=1),
        # The context chosen into a name first (simpler-fsdp): still the forward ran before it.
        Invalid(DDP + """\
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y) / k
    context = contextlib.nullcontext() if (i + 1) % k == 0 else model.no_sync()
    with context:
        loss.backward()
""", line=8, column=5),
        Invalid(DDP + """\
loss = criterion(model(x), y)
with model.no_sync():
    loss.backward()
""", line=6, column=1),
        Invalid(DDP + """\
for i, (x, y) in enumerate(loader):
    out = model(x)
    if (i + 1) % k != 0:
        with model.no_sync():
            criterion(out, y).backward()
""", line=8, column=9),
        Invalid(DDP + """\
for x, y in loader:
    logits, loss = model(x, y)
    with model.no_sync():
        scaler.scale(loss).backward()
""", line=7, column=5),
        Invalid(DDP + """\
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y) / k
    ctx = model.no_sync() if (i + 1) % k else contextlib.nullcontext()
    with model.no_sync() if (i + 1) % k else contextlib.nullcontext():
        loss.backward()
""", line=8, column=5),
        Invalid(DDP + """\
def train_step(model, batch):
    output = model(batch)
    with model.no_sync():
        loss = output.mean()
        loss.backward()
""", line=7, column=5),
        Invalid(DDP + """\
class Trainer:
    def step(self, x):
        out = self.model(x)
        loss = self.criterion(out)
        with self.model.no_sync():
            loss.backward()
""", line=9, column=9),
        Invalid(DDP + """\
outputs = model(batch)
loss = outputs.loss
with model.no_sync():
    (loss / accum).backward()
""", line=7, column=1),
        Invalid(DDP + """\
loss = compute_loss(model, batch)
with model.no_sync():
    loss.backward()

def compute_loss(model, batch):
    return model(batch).mean()
""", line=6, column=1),
        # The loss of a helper that collects outputs and concatenates them.
        Invalid(DDP + """\
def forward_all(model, chunks):
    outs = []
    for chunk in chunks:
        outs.append(model(chunk))
    return torch.cat(outs).mean()

loss = forward_all(model, chunks)
with model.no_sync():
    loss.backward()
""", line=12, column=1),
        # require_backward_grad_sync turned off after the forward already ran.
        Invalid(DDP + """\
for i, batch in enumerate(loader):
    out = model(batch)
    model.require_backward_grad_sync = (i + 1) % accum == 0
    out.sum().backward()
""", line=7, column=5),
        # Shared gap 1: the loss is bound on two arms (one unpacks a tuple); both forwards ran outside.
        Invalid(DDP + """\
for xb in loader:
    if two_heads:
        loss, aux = model(xb), 0.0
    else:
        loss, aux = model(xb).mean(), 0.0
    with model.no_sync():
        (loss + aux).backward()
""", line=10, column=5),
        # The loss sums a dict of per-criterion losses of a forward that ran
        # before the block; only the backward is inside.
        Invalid(DDP + """\
for i, (x, y) in enumerate(loader):
    out = model(x)
    parts = {}
    for name, crit in criteria.items():
        parts[name] = crit(out, y)
    loss = 0.0
    for name, part in parts.items():
        loss += part
    if (i + 1) % k != 0:
        with model.no_sync():
            loss.backward()
    else:
        loss.backward()
        optimizer.step()
""", line=14, column=9),
        # ... summed with sum(parts.values()).
        Invalid(DDP + """\
for i, (x, y) in enumerate(loader):
    out = model(x)
    parts = {}
    for name, crit in criteria.items():
        parts[name] = crit(out, y) * weights[name]
    loss = sum(parts.values()) / k
    with model.no_sync():
        loss.backward()
""", line=11, column=5),
    ]

    def screen(self, sketch):
        """The screen (necessary for check() to report): True, False, or the project facts that must hold."""
        return sketch.uses("no_sync", "require_backward_grad_sync")

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        for with_node in index.withs:
            if not any(_is_no_sync(_context(index, item.item)) for item in with_node.items):
                continue
            if _home_grown_no_sync(index, with_node):
                continue
            for backward in flow.backward_events(index, _region(index, with_node)):
                if not flow.is_inside(index, backward.anchor, with_node):
                    continue
                operand = flow.backward_operand(backward.site)
                forwards = flow.forward_sites(index, operand, backward.site.order)
                if forwards and not any(_forward_unsynced(index, f, with_node, backward) for f in forwards):
                    yield self.report(with_node)
                    break
        yield from self._late_flag(index)

    def _late_flag(self, index: SemanticIndex) -> Iterator[Report]:
        """``model.require_backward_grad_sync = False`` after the forward ran:
        DDP read the flag in that forward, so the backward still syncs."""
        for (_, name), bindings in index.bindings.items():
            if not name.endswith(".require_backward_grad_sync"):
                continue
            for binding in bindings:
                if binding.kind != "assign" or flow.literal_bool(binding.value) is True:
                    continue
                if _flag_set_after_forward(index, binding):
                    yield self.report(binding.node, self.LATE_MESSAGE)


def _forward_unsynced(index: SemanticIndex, forward: cst.Call, with_node: cst.With,
                      backward: flow.Event) -> bool:
    """Did this forward run with sync off: inside this ``with``, inside the
    helper that the ``with`` calls (forward and backward in one helper), or
    inside another ``no_sync()`` block of the same model?"""
    if flow.is_inside(index, forward, with_node):
        return True
    if backward.inlined:
        helper = flow.enclosing_function(index, backward.site.node)
        if helper is not None and flow.is_inside(index, forward, helper):
            return True
    model = _no_sync_receiver(index, with_node)
    for ancestor in index.ancestors(forward):
        if isinstance(ancestor, cst.With) and any(
                _is_no_sync(_context(index, item.item)) and flow.same_text(_no_sync_receiver(index, ancestor), model)
                for item in ancestor.items):
            return True
    return False


def _home_grown_no_sync(index: SemanticIndex, with_node: cst.With) -> bool:
    """The project defines its own ``no_sync`` (a data-parallel wrapper of its own,
    whose ``no_sync`` may just set a flag read at backward time) and the receiver
    is not a torch DDP / FSDP wrap in this function: which ``no_sync`` runs, and
    what it needs from the forward, is the project's."""
    receiver = _no_sync_receiver(index, with_node)
    if receiver is None or not models.project_of(index).defines_own_method("no_sync"):
        return False
    return not values.is_ddp_model(index, receiver, 0, (names.DDP, names.FSDP))


def _no_sync_receiver(index: SemanticIndex, with_node: cst.With):
    for item in with_node.items:
        expr = _context(index, item.item)
        for candidate in ((expr.body, expr.orelse) if isinstance(expr, cst.IfExp) else (expr,)):
            if _is_no_sync(candidate) and isinstance(candidate, cst.Call):
                return candidate.func.value
    return None


def _flag_set_after_forward(index: SemanticIndex, binding) -> bool:
    """A backward after the assignment whose loss's forward ran before it, in
    the same function, with no other assignment of the flag in between."""
    function = flow.enclosing_function(index, binding.node) or index.module
    model = binding.name.rpartition(".")[0]
    for site in flow.calls_in_function(index, function):
        if not flow.is_tensor_backward(index, site) or not flow.precedes(index, binding.node, site.node):
            continue
        forwards = flow.forward_sites(index, flow.backward_operand(site), site.order)
        if forwards and all(flow.precedes(index, f, binding.node) and _same_iteration(index, f, binding.node)
                            and (flow.dotted_name(flow.model_of_forward(f)) or "").split(".")[0]
                            == model.split(".")[0] for f in forwards):
            return True
    return False


def _same_iteration(index: SemanticIndex, first: cst.CSTNode, second: cst.CSTNode) -> bool:
    """Do both nodes sit in the same innermost loop (or in none)?"""
    loops_first = flow.enclosing_loops(index, first)
    loops_second = flow.enclosing_loops(index, second)
    if not loops_first or not loops_second:
        return not loops_first and not loops_second
    return loops_first[0] is loops_second[0]


def _region(index: SemanticIndex, node: cst.With) -> cst.CSTNode:
    """Where to look for the backward calls of a ``with`` block: the function
    (or module) that holds it; ``is_inside`` then keeps those in the block."""
    return flow.enclosing_function(index, node) or index.module


def _context(index: SemanticIndex, expr: cst.BaseExpression) -> cst.BaseExpression:
    """The context manager a ``with`` enters: the expression itself, or the one
    value bound to the name it names (``context = nullcontext() if step else
    model.no_sync()`` then ``with context:``)."""
    if isinstance(expr, cst.Name):
        values = index.reaching_values(expr) or []
        if len(values) == 1:
            return values[0]
    return expr


def _is_no_sync(expr: cst.BaseExpression) -> bool:
    """``model.no_sync()`` (no arguments: ``accelerator.no_sync(model)`` is the
    framework's), also as a branch of a conditional expression."""
    if isinstance(expr, cst.IfExp):
        return _is_no_sync(expr.body) or _is_no_sync(expr.orelse)
    return (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute)
            and expr.func.attr.value == "no_sync" and not expr.args)
