"""## What it does
Flags a `GradScaler` used in a way that breaks mixed-precision training. (A scaler
held by the optimizer object that steps, `opt.grad_scaler.scale(loss).backward()` then
`opt.step()`, belongs to a helper class that does step and update: not flagged.)

Silent mistakes (error):
- `optimizer.step()` after `scaler.scale(loss).backward()` instead of
  `scaler.step(optimizer)`: the update uses gradients still multiplied by the
  loss scale, and steps with inf/NaN gradients are not skipped;
- `optimizer.step()` after `scaler.step(optimizer)` (of the same optimizer, before the next
  backward): the optimizer steps twice, and the step the scaler skipped for inf/NaN
  gradients is applied anyway;
- an unscaled `loss.backward()` on some iterations of a loop whose step goes
  through the scaler: `scaler.step` then divides those gradients by the scale;
- a new `GradScaler()` created inside the epoch or step loop, or at the top of
  a per-epoch function (`train_one_epoch`) that a loop of the same module
  calls: the scale resets to 65536 every time and the first steps of each
  epoch overflow and are skipped.

Info: `scaler.step(optimizer)` in a loop without `scaler.update()`: the scale
never adapts (PyTorch raises only when a second `scaler.step` comes before an
`update()`).

## Why is this bad?
The scaler multiplies the loss so fp16 gradients do not underflow, and it must
divide them again before the optimizer uses them, skip steps with non-finite
gradients, and adapt the scale. Each mistake above breaks one of these, mostly
without an error: training diverges, or quietly learns at a wrong rate.

## Example
    for x, y in loader:
        scaler = torch.cuda.amp.GradScaler()   # reset every iteration
        with torch.autocast("cuda"):
            loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        optimizer.step()                       # bypasses the scaler

## Use instead
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

Not flagged: a scaler wrapped by a helper class that does step and update;
an optimizer step handed the scaler (`optimizer.step(scaler=scaler)`: the
optimizer steps through it);
`GradScaler(enabled=False)`; AMP and fp32 paths in separate branches
(`if scaler is not None: ... else: optimizer.step()`); a warm-up loop that
runs plain `backward()` and never steps before the scaled loop (backwards are
compared with the `scaler.step` of their own loop only); a plain backward whose
next step is a plain `optimizer.step()` (a regulariser pass with its own step);
a scaler built in a function that runs a whole training (its own epoch loop)
and is called in a loop of runs (hyper-parameter search: each run starts afresh).

## References
- https://pytorch.org/docs/stable/amp.html#gradient-scaling
- https://pytorch.org/docs/stable/notes/amp_examples.html
"""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from ddplint.analysis import flow
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import CallSite, SemanticIndex, dotted_name

AMP = """\
import torch
from torch.cuda.amp import GradScaler
"""


class GradScalerMisuse(Rule):
    code, name, severity = "DDP004", "grad-scaler-misuse", "error"
    message = "GradScaler misuse"
    triggers = ("GradScaler", ".scale(")

    MESSAGES = {
        "step": "optimizer.step() after a scaled backward: the update uses gradients still multiplied "
                "by the loss scale (65536 at start) and inf/NaN steps are not skipped; use "
                "scaler.step(optimizer)",
        "twice": "optimizer.step() after scaler.step(optimizer): the optimizer steps twice per iteration, "
                 "and on an inf/NaN step (which scaler.step skips) this plain step applies it anyway; "
                 "remove it",
        "unscaled": "unscaled backward where the step goes through the GradScaler: scaler.step() divides "
                    "these gradients by the loss scale (65536 at start), so these updates are that much "
                    "too small; use scaler.scale(loss).backward()",
        "new": "GradScaler created inside the training loop: the scale resets to 65536 each time and "
               "the first steps after every reset overflow and are skipped; create it once before the loop",
        "new_per_call": "GradScaler created at each call of a function that a training loop calls (once "
                        "per epoch): the scale resets to 65536 each time and the first steps after every "
                        "reset overflow and are skipped; create it once and pass it in",
        "update": "scaler.step() without scaler.update(): the loss scale never adapts, and a second "
                  "scaler.step() before update() raises; call scaler.update() after each step",
    }

    valid = [
        # The optimizer object holds the scaler: its step runs scaler.step and update (a105
        # video_analyst's OptimizerBase).
        Valid("""\
import torch


class Trainer:
    def __init__(self, model, optimizer):
        self._model = model
        self._optimizer = optimizer

    def train(self, loader, criterion):
        for data, target in loader:
            self._optimizer.zero_grad()
            with torch.cuda.amp.autocast():
                total_loss = criterion(self._model(data), target)
            self._optimizer.grad_scaler.scale(total_loss).backward()
            self._optimizer.step()
"""),
        # The plain step is another optimizer's (an EMA or a second model's).
        Valid("""\
import torch


def train(model, loader, optimizer, criterion):
    scaler = torch.cuda.amp.GradScaler()
    for samples, targets in loader:
        with torch.cuda.amp.autocast():
            loss = criterion(model(samples), targets)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        ema_optimizer.step()
        scaler.update()
"""),
        # The unscaled backward is the other arm of an AMP switch written as a conditional expression (a60).
        Valid(AMP + """\
class Trainer:
    def __init__(self, amp):
        self.amp = amp
        self.scaler = GradScaler(enabled=amp) if amp else None

    def step(self, loss):
        self.scaler.scale(loss).backward() if self.amp else loss.backward()
        if self.amp:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
"""),
        Valid(AMP + """\
scaler = GradScaler()
for epoch in range(10):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
"""),
        # A helper class that does step and update (timm/MAE NativeScaler).
        Valid(AMP + """\
class NativeScaler:
    def __init__(self):
        self._scaler = GradScaler()
    def __call__(self, loss, optimizer):
        self._scaler.scale(loss).backward()
        self._scaler.step(optimizer)
        self._scaler.update()

loss_scaler = NativeScaler()
for x in loader:
    loss_scaler(model(x).sum(), optimizer)
    optimizer.zero_grad()
"""),
        Valid(AMP + """\
scaler = GradScaler(enabled=False)
for x in loader:
    scaler.scale(model(x).sum()).backward()
    optimizer.step()
"""),
        Valid(AMP + """\
scaler = GradScaler() if args.amp else None
for x in loader:
    loss = model(x).sum()
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
"""),
        Valid(AMP + """\
scaler = GradScaler()
for x in loader:
    loss = model(x).sum()
    if args.fp16:
        scaler.scale(loss).backward()
    else:
        loss.backward()
    if args.fp16:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
"""),
        # AMP and fp32 branches inside a helper the loop calls.
        Valid("""\
import torch
class Trainer:
    def __init__(self):
        self.scaler = torch.cuda.amp.GradScaler()
    def _run_batch(self, x):
        loss = self.model(x).mean()
        if self.use_amp:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
    def _run_epoch(self, loader):
        for x in loader:
            self._run_batch(x)
"""),
        # The update in a same-module helper.
        Valid(AMP + """\
scaler = GradScaler()
def finish_step():
    scaler.step(optimizer)
    scaler.update()

for x in loader:
    scaler.scale(model(x).sum()).backward()
    finish_step()
"""),
        # A scaler built once per run inside a function, outside the loops.
        Valid(AMP + """\
def train(model, loader, optimizer, epochs):
    scaler = GradScaler()
    for epoch in range(epochs):
        for x in loader:
            scaler.scale(model(x).sum()).backward()
            scaler.step(optimizer)
            scaler.update()
"""),
        # Loops over configurations (not training loops) may build a scaler each.
        Valid(AMP + """\
for cfg in configs:
    scaler = GradScaler()
    run_experiment(cfg, scaler)
"""),
        Valid(AMP + """\
scaler = GradScaler()
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    lr_scheduler.step()
"""),
        # A warm-up loop runs plain backward() and never steps, before the scaled loop.
        Valid(AMP + """\
def train(model, loader, optimizer, warmup_batches):
    for x in warmup_batches:
        model(x).sum().backward()
        model.zero_grad()
    scaler = GradScaler()
    for x in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""),
        # The per-epoch function builds its scaler, but nothing calls it in a loop.
        Valid(AMP + """\
def train(model, loader, optimizer, epochs):
    scaler = GradScaler()
    for epoch in range(epochs):
        for x in loader:
            scaler.scale(model(x).sum()).backward()
            scaler.step(optimizer)
            scaler.update()

def main():
    train(build(), loader(), optim(), 10)
"""),
        # The function runs a whole training (its own epoch loop): a loop calling it
        # starts a new run each time (a hyper-parameter search), so a fresh scaler is right.
        Valid(AMP + """\
def fit(hparams, net, batches, opt, n_epochs):
    amp_scaler = GradScaler()
    for ep in range(n_epochs):
        for xb in batches:
            amp_scaler.scale(net(xb).mean() * hparams["w"]).backward()
            amp_scaler.step(opt)
            amp_scaler.update()

if __name__ == "__main__":
    for trial in range(50):
        fit(sample_hparams(), make_net(), make_batches(), make_opt(), 30)
"""),
        # A regulariser pass: plain backward, then its own plain step (no scaler in that step).
        Valid(AMP + """\
scaler = GradScaler()
for i, x in enumerate(loader):
    scaler.scale(disc(x).mean()).backward()
    scaler.step(opt_d)
    scaler.update()
    if i % 16 == 0:
        opt_d.zero_grad()
        penalty(disc, x).backward()
        opt_d.step()
"""),
        # The step is handed the scaler: the optimizer unscales and skips bad steps itself.
        Valid(AMP + """\
class OuterOptimizer:
    def __init__(self, inner):
        self.inner = inner
    def step(self, scaler=None):
        if scaler is not None:
            scaler.step(self.inner)
        else:
            self.inner.step()

scaler = GradScaler()
opt = OuterOptimizer(torch.optim.AdamW(model.parameters()))
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(opt.inner)
    opt.step(scaler=scaler)
    scaler.update()
"""),
        Valid(AMP + """\
def train(model, loader, optimizer):
    grad_scaler = GradScaler()
    for batch in loader:
        loss = model(batch).mean()
        grad_scaler.scale(loss).backward()
        optimizer.step(None, grad_scaler)
        grad_scaler.update()
"""),
    ]
    invalid = [
        # A plain step after the scaler's step (a100 vit-sr-pytorch).
        Invalid("""\
import torch


def train(model, loader, optimizer, criterion):
    scaler = torch.cuda.amp.GradScaler()
    for samples, targets in loader:
        with torch.cuda.amp.autocast():
            loss = criterion(model(samples), targets)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        optimizer.step()
        scaler.update()
""", line=12, column=9),
        # Handing the step another object (a closure) does not route it through the scaler.
        Invalid(AMP + """\
scaler = GradScaler()
for x in loader:
    scaler.scale(model(x).sum()).backward()
    optimizer.step(closure=lambda: None)
    scaler.update()
""", line=6, column=5),
        Invalid(AMP + """\
scaler = GradScaler()
for x in loader:
    scaler.scale(model(x).sum()).backward()
    optimizer.step()
""", line=6, column=5, severity="error"),
        Invalid(AMP + """\
for epoch in range(epochs):
    scaler = GradScaler()
    for x in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
""", line=4, column=14, severity="error"),
        Invalid(AMP + """\
scaler = GradScaler()
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
""", line=6, column=5, severity="info"),
        # Unscaled backward on the non-stepping iterations.
        Invalid(AMP + """\
scaler = GradScaler()
for i, x in enumerate(loader):
    loss = model(x).sum()
    if (i + 1) % accum != 0:
        loss.backward()
        continue
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""", line=7, column=9, severity="error"),
        Invalid("""\
import torch
def train_one_epoch(model, loader, optimizer, scaler):
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        optimizer.step()
        optimizer.zero_grad()
""", line=7, column=9, severity="error"),
        Invalid("""\
import torch
class Trainer:
    def train(self, loader):
        for x in loader:
            self.scaler = torch.amp.GradScaler("cuda")
            self.scaler.scale(self.model(x).mean()).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
""", line=5, column=27, severity="error"),
        Invalid(AMP + """\
scaler = GradScaler()
for x in loader:
    loss_g = gen(x).mean()
    scaler.scale(loss_g).backward()
    scaler.step(opt_g)
    loss_d = disc(x).mean()
    loss_d.backward()
    scaler.step(opt_d)
    scaler.update()
""", line=9, column=5, severity="error"),
        # Built at the top of a per-epoch function that the epoch loop calls.
        Invalid(AMP + """\
def train_one_epoch(model, loader, optimizer):
    scaler = GradScaler()
    for x in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()

def train(model, loader, optimizer, epochs):
    for epoch in range(epochs):
        train_one_epoch(model, loader, optimizer)
""", line=4, column=14, severity="error"),
        Invalid(AMP + """\
scaler = torch.amp.GradScaler("cuda")
def train_step(x):
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)

for x in loader:
    train_step(x)
""", line=6, column=5, severity="info"),
    ]

    def screen(self, sketch):
        """The screen (necessary for check() to report): True, False, or the project facts that must hold."""
        return "backward" in sketch.calls and (sketch.calls_any("scale", "step") or sketch.may_call(
            "torch.amp.GradScaler", "torch.GradScaler", "torch.cuda.amp.GradScaler"))

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        reported: set[int] = set()

        def once(node: cst.CSTNode, kind: str, severity: str) -> Iterator[Report]:
            if id(node) not in reported:
                reported.add(id(node))
                yield self.report(node, self.MESSAGES[kind], severity)

        for region in flow.step_regions(index):
            evs = flow.events(index, region)
            for node in _optimizer_steps_after_scaling(index, evs):
                yield from once(node, "step", "error")
            for node in _optimizer_steps_after_scaler_step(index, evs):
                yield from once(node, "twice", "error")
            for node in _unscaled_backwards(index, evs):
                yield from once(node, "unscaled", "error")
            for node in _steps_without_update(index, region, evs):
                yield from once(node, "update", "info")
        for site in flow.scaler_constructions(index):
            if _built_in_training_loop(index, site):
                kind = "new" if flow.enclosing_loops(index, site.node) else "new_per_call"
                yield from once(site.node, kind, "error")


def _real_scaler(index: SemanticIndex, expr: Optional[cst.BaseExpression]) -> bool:
    return expr is not None and not flow.scaler_disabled(index, expr) \
        and not flow.is_helper_scaler(index, expr)


def _optimizer_steps_after_scaling(index: SemanticIndex, evs: list[flow.Event]) -> Iterator[cst.CSTNode]:
    scaled: Optional[flow.Event] = None
    for event in evs:
        site = event.site
        if flow.is_tensor_backward(index, site) and flow.scaled_backward_scaler(index, site) is not None:
            scaled = event
        elif flow.is_scaler_step(site) or (scaled is not None and _hands_scaler_on(index, site, scaled)):
            scaled = None
        elif scaled is not None and flow.is_optimizer_step(index, site) \
                and not flow.events_exclusive(index, scaled, event) \
                and not flow.event_under_amp_switch(index, event) \
                and not _owns_the_scaler(index, site, scaled):
            yield site.node


def _owns_the_scaler(index: SemanticIndex, site: CallSite, scaled: flow.Event) -> bool:
    """``self._optimizer.grad_scaler.scale(loss).backward()`` then ``self._optimizer.step()``:
    the stepped object holds the scaler that scaled the backward, so its ``step`` is the
    helper that runs ``scaler.step`` and ``update`` (a105 video_analyst)."""
    scaler = flow.scaled_backward_scaler(index, scaled.site)
    owner = dotted_name(site.receiver) if site.receiver is not None else None
    held = dotted_name(scaler) if scaler is not None else None
    return owner is not None and held is not None and held.startswith(owner + ".")


def _optimizer_steps_after_scaler_step(index: SemanticIndex, evs: list[flow.Event]) -> Iterator[cst.CSTNode]:
    """``scaler.step(optimizer)`` then ``optimizer.step()`` of the same optimizer before the
    next backward (a100 vit-sr-pytorch): the optimizer steps a second time."""
    stepped: list[flow.Event] = []
    for event in evs:
        site = event.site
        if flow.is_tensor_backward(index, site):
            stepped = []
        elif flow.is_scaler_step(site) and _real_scaler(index, site.receiver):
            stepped.append(event)
        elif site.method == "step" and not site.node.args and site.receiver is not None \
                and flow.is_optimizer_step(index, site) and any(
                    flow.same_text(earlier.site.node.args[0].value, site.receiver)
                    and not flow.events_exclusive(index, earlier, event) for earlier in stepped):
            yield site.node


def _hands_scaler_on(index: SemanticIndex, site: CallSite, scaled: flow.Event) -> bool:
    """``optimizer.step(scaler=scaler)`` / ``opt.step(closure, grad_scaler)``: the
    step is given the scaler that scaled the backward, so the optimizer (a
    project class, or one that supports ``grad_scaler``) unscales and skips
    non-finite steps itself."""
    scaler = flow.scaled_backward_scaler(index, scaled.site)
    return scaler is not None and any(flow.same_text(arg.value, scaler) for arg in site.node.args)


def _unscaled_backwards(index: SemanticIndex, evs: list[flow.Event]) -> Iterator[cst.CSTNode]:
    """Plain backwards in a region that scales other backwards and steps
    through a real scaler, where no AMP switch tells them apart."""
    scaled = [e for e in evs if flow.is_tensor_backward(index, e.site)
              and flow.scaled_backward_scaler(index, e.site) is not None]
    scaler_steps = [e for e in evs if flow.is_scaler_step(e.site) and _real_scaler(index, e.site.receiver)]
    if not scaled or not scaler_steps:
        return
    for position, event in enumerate(evs):
        site = event.site
        if not flow.is_tensor_backward(index, site) or flow.scaler_of_backward(site) is not None:
            continue
        if site.qualified_name == "torch.autograd.backward":
            continue
        if _next_step_is_plain(index, event, evs[position + 1:]):
            continue  # a plain backward with its own plain ``opt.step()`` (a regulariser pass)
        if any(flow.events_exclusive(index, s, event) for s in scaled):
            continue
        if flow.event_under_amp_switch(index, event):
            continue
        if not any(_same_loop(index, event, step) for step in scaler_steps):
            continue  # a warm-up loop that never steps, before the scaled loop
        yield site.node


def _next_step_is_plain(index: SemanticIndex, backward: flow.Event, later: list[flow.Event]) -> bool:
    """Is the first step that follows ``backward`` (on its path) a plain
    ``optimizer.step()`` rather than ``scaler.step(optimizer)``?"""
    for event in later:
        if flow.events_exclusive(index, backward, event):
            continue
        if flow.is_scaler_step(event.site):
            return False
        if flow.is_optimizer_step(index, event.site):
            return True
    return False


def _same_loop(index: SemanticIndex, a: flow.Event, b: flow.Event) -> bool:
    """Do two events run in the same loop (or both outside every loop)?"""
    loops_a = {id(loop) for loop in flow.enclosing_loops(index, a.anchor)}
    loops_b = {id(loop) for loop in flow.enclosing_loops(index, b.anchor)}
    return bool(loops_a & loops_b) or (not loops_a and not loops_b)


def _steps_without_update(index: SemanticIndex, region: cst.CSTNode,
                          evs: list[flow.Event]) -> Iterator[cst.CSTNode]:
    """``scaler.step`` in a loop with no ``update()`` on the same scaler in the
    loop, the function around it, or the helpers they call."""
    if not isinstance(region, (cst.For, cst.While)):
        return
    function = flow.enclosing_function(index, region) or index.module
    around = flow.events(index, function)
    for event in evs:
        site = event.site
        if not flow.is_scaler_step(site) or not _real_scaler(index, site.receiver):
            continue
        if not _scaler_in_use(index, site, evs):
            continue
        if any(_updates(e.site, site) for e in (*evs, *around)):
            continue
        yield site.node


def _scaler_in_use(index: SemanticIndex, step: CallSite, evs: list[flow.Event]) -> bool:
    """The receiver is known to be a GradScaler: bound to one, or it scaled a backward."""
    name = flow.dotted_name(step.receiver)
    for binding in index.visible_bindings(name, step.receiver) or [] if name else []:
        if isinstance(binding.value, cst.Call) and index.qualified_name(binding.value.func) in flow.GRAD_SCALERS:
            return True
    return any(flow.same_text(flow.scaler_of_backward(e.site), step.receiver) for e in evs)


def _updates(site: CallSite, step: CallSite) -> bool:
    return site.method == "update" and flow.same_text(site.receiver, step.receiver)


def _built_in_training_loop(index: SemanticIndex, site: CallSite) -> bool:
    enabled = site.keyword("enabled")
    if enabled is not None and flow.literal_bool(enabled.value) is False:
        return False
    loops = flow.enclosing_loops(index, site.node)
    if loops:
        return any(flow.is_training_loop(index, loop) for loop in loops)
    # ``def train_one_epoch(...): scaler = GradScaler(); for batch in loader: ...``
    # called from the epoch loop: a new scaler every epoch.
    function = flow.enclosing_function(index, site.node)
    later = [loop for loop in index.loops if flow.is_training_loop(index, loop)
             and flow.precedes(index, site.node, loop) and flow.enclosing_function(index, loop) is function]
    if function is None or not later:
        return False
    if any(_is_epoch_loop(index, loop) for loop in later):
        return False  # the function runs whole trainings: a loop calling it starts new runs (hyper-parameter search)
    return any(flow.enclosing_loops(index, call.node) for call in flow.callers(index, function))


def _is_epoch_loop(index: SemanticIndex, loop: flow.Loop) -> bool:
    """``for epoch in range(start_epoch, epochs):`` around a step loop: a loop
    named for epochs that holds another training loop."""
    if not isinstance(loop, cst.For):
        return False
    words = flow.dotted_name(loop.target) or ""
    words += " " + (index.module.code_for_node(loop.iter) if loop.iter is not None else "")
    if "epoch" not in words.lower():
        return False
    return any(inner is not loop and flow.is_training_loop(index, inner)
               and any(outer is loop for outer in flow.enclosing_loops(index, inner)) for inner in index.loops)
