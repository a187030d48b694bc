"""## What it does
Flags gradient accumulation on a DDP/FSDP-wrapped model without `no_sync()`:
`backward()` runs on every micro-step while the optimizer steps only on some
(`if (i + 1) % accum_steps == 0: optimizer.step()`, or an inner micro-step
loop followed by one step), and nothing turns gradient synchronisation off on
the non-stepping micro-steps (`with model.no_sync():` or
`model.require_backward_grad_sync = False`).

The model may be wrapped in the same function, held in `self.model`, or passed
in as a parameter by a same-module caller that wrapped it.

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

Not flagged: accumulation handled by a framework (`accelerator.accumulate`,
`accelerator.no_sync`, DeepSpeed engines, Lightning), nanoGPT's
`model.require_backward_grad_sync = (micro_step == k - 1)`, forwards through
`model.module(x)` on the non-final micro-steps, models not known to be wrapped.

## References
- https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html#torch.nn.parallel.DistributedDataParallel.no_sync
- https://huggingface.co/docs/accelerate/concept_guides/gradient_synchronization
"""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from ddplint.analysis import flow
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import SemanticIndex

DDP = """\
import contextlib
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
"""

ACCUMULATION_WORDS = ("accum", "update", "sync", "should_step", "do_step", "is_last",
                      "last_step", "micro", "boundary", "optimizer_step", "take_step")


class MissingNoSyncAccumulation(Rule):
    code, name, severity = "DDP002", "missing-no-sync-accumulation", "warning"
    message = ("gradient accumulation without no_sync(): DDP all-reduces the gradients on every "
               "micro-step, not once per optimizer step")
    triggers = ("backward",)
    needs_ddp_context = True

    valid = [
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
    ]
    invalid = [
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
        # The backward runs in a same-module helper.
        Invalid(DDP + """\
def backward_step(loss):
    loss.backward()

model = DDP(net)
for i, batch in enumerate(loader):
    loss = model(batch).mean()
    backward_step(loss)
    if (i + 1) % accum == 0:
        optimizer.step()
""", line=5, column=5),
    ]

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        reported: set[int] = set()
        for loop in flow.training_loops(index):
            for backward in flow.backward_events(index, loop):
                # One report per backward, and per helper call that runs one
                # (a ``backward(loss, scaler)`` helper has a scaled and a plain branch).
                if id(backward.site.node) in reported or id(backward.anchor) in reported:
                    continue
                if _accumulates(index, loop, backward) and _on_wrapped_model(index, loop) \
                        and not _sync_handled(index, loop):
                    reported.update((id(backward.site.node), id(backward.anchor)))
                    yield self.report(backward.site.node)


def _accumulates(index: SemanticIndex, loop: flow.Loop, backward: flow.Event) -> bool:
    """Backward every micro-step, step only on some: either the step sits under
    an accumulation test the backward is not under, or the backward's loop
    steps nowhere and the loop around it steps after it."""
    if flow.step_loop_of(index, backward.anchor) is not loop:
        return False
    steps = [e for e in flow.events(index, loop) if flow.any_step(index, e.site)]
    for step in steps:
        test = _accumulation_test(index, step.anchor, loop)
        if test is not None and not flow.is_inside(index, backward.anchor, test) \
                and not flow.events_exclusive(index, backward, step):
            return True
    if steps or not isinstance(loop, cst.For):
        return False
    outer = flow.enclosing_loops(index, loop)
    if not outer:
        return False
    return any(flow.any_step(index, e.site) and flow.precedes(index, loop, e.anchor)
               and not flow.is_inside(index, e.anchor, loop)
               for e in flow.events(index, outer[0]))


def _accumulation_test(index: SemanticIndex, node: cst.CSTNode, loop: flow.Loop) -> Optional[cst.If]:
    """The ``if`` (inside ``loop``) that makes ``node`` run only on some
    iterations: a modulo test, an accumulation counter or flag."""
    for branch, in_body in flow.if_ancestors(index, node, stop=loop):
        if _is_accumulation_test(branch.test):
            return branch
    return None


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
        if not event.inlined and flow.wrapped_model(index, func, event.site.order):
            wrapped = True
    return wrapped


def _sync_handled(index: SemanticIndex, loop: flow.Loop) -> bool:
    """``no_sync()``, ``require_backward_grad_sync`` or a framework's
    accumulation anywhere in the function (or its helpers) that runs the loop."""
    function = flow.enclosing_function(index, loop) or index.module
    for event in flow.events(index, function):
        site = event.site
        if site.method in ("no_sync", "accumulate", "set_requires_gradient_sync"):
            return True
    for (scope_id, name), bindings in index.bindings.items():
        if name.endswith("require_backward_grad_sync") or name.endswith("require_forward_param_sync"):
            return True
    return False
