"""## What it does
Flags `clip_grad_norm_` / `clip_grad_value_` applied to the gradients of a loss
scaled by a `GradScaler` (`scaler.scale(loss).backward()`) with no
`scaler.unscale_(optimizer)` earlier in the same step (also a sharded
`GradScaler`, fairscale's or FSDP's `ShardedGradScaler`). The report is at the
clip call; when the step calls a clip helper of this module (a local
`grad_clip_func(params, max_norm)`, `self._clip_gradients(...)`) after the
scaled backward, at that helper call: the `unscale_` belongs before it. When
the scaled backward and the clip share one helper, at the clip inside it. A
scaler that one branch builds as torch's `GradScaler` and another as a stand-in
(`DummyGradScalar()` when AMP is off) scales whenever AMP is on: flagged, with
no fix (the stand-in may have no `unscale_`).

## Why is this bad?
After `scaler.scale(loss).backward()` the gradients are multiplied by the loss
scale (65536 at the start). Clipping them to `max_norm=1.0` then clips almost
every step, by a factor that changes whenever the scale changes, so the
effective learning rate is tiny and erratic. `scaler.step()` later unscales the
already-clipped gradients. Nothing crashes; the model just trains worse.

## Example
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()

## Use instead
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)          # knows the gradients are already unscaled
    scaler.update()

Fix (safe): inserts `scaler.unscale_(optimizer)` on its own line before the
clip (moving a later `unscale_` there), when the scaler and the one optimizer
it steps are named in the same function, the scaled backward runs whenever the
clip runs, and the clip runs once per optimizer step (not in a loop of its own).

Not flagged: bf16 autocast without a scaler; `GradScaler(enabled=False)`;
`unscale_` called before the clip (also in a same-module helper that unscales
and clips); `accelerator.clip_grad_norm_` (the framework unscales); a clip
under an `if` that runs only without AMP.

## References
- https://pytorch.org/docs/stable/notes/amp_examples.html#gradient-clipping
"""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from ddplint.analysis import flow
from ddplint.fixes import SAFE, NodeFix, delete_line, insert_line_before, node_fix
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import CallSite, SemanticIndex, dotted_name

AMP = """\
import torch
from torch.cuda.amp import GradScaler, autocast
scaler = GradScaler()
"""

CLIPS = ("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm")
FRAMEWORK_RECEIVERS = ("accelerator", "fabric", "engine", "model_engine", "deepspeed")


class ClipBeforeUnscale(Rule):
    code, name, severity = "DDP003", "clip-before-unscale", "error"
    message = ("gradients are clipped while still multiplied by the GradScaler's loss scale (65536 at "
               "start): almost every step is clipped, by a factor that changes with the scale; call "
               "scaler.unscale_(optimizer) before clipping")
    triggers = ("clip_grad",)

    valid = [
        Valid(AMP + """\
for x, y in loader:
    with autocast():
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
"""),
        # bf16 autocast without a scaler.
        Valid("""\
import torch
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).sum()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
"""),
        Valid("""\
import torch
scaler = torch.cuda.amp.GradScaler(enabled=False)
for x in loader:
    scaler.scale(model(x).sum()).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
"""),
        # The clip lives in a helper that unscales first.
        Valid(AMP + """\
def clip_and_step(scaler, optimizer, model):
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()

for x in loader:
    scaler.scale(model(x).sum()).backward()
    clip_and_step(scaler, optimizer, model)
"""),
        # The unscale happens in a helper called before the clip.
        Valid(AMP + """\
def unscale(optimizer):
    scaler.unscale_(optimizer)

for x in loader:
    scaler.scale(model(x).sum()).backward()
    unscale(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
"""),
        # AMP and fp32 paths in separate branches.
        Valid(AMP + """\
for x in loader:
    loss = model(x).sum()
    if args.amp:
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
    else:
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
"""),
        Valid(AMP + """\
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
for x in loader:
    accelerator.backward(model(x).sum())
    accelerator.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
"""),
        Valid(AMP + """\
for x in loader:
    loss = model(x).sum()
    if scaler is not None:
        scaler.scale(loss).backward()
    else:
        loss.backward()
    if clip:
        if scaler is not None:
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_value_(model.parameters(), clip)
"""),
        # A scaler-like helper object (timm's NativeScaler) handles the order.
        Valid(AMP + """\
loss_scaler = NativeScaler()
for x in loader:
    loss = model(x).sum()
    loss_scaler(loss, optimizer, clip_grad=1.0, parameters=model.parameters())
"""),
        # A sharded GradScaler, unscaled before the clip helper runs.
        Valid("""\
import torch
from fairscale.optim.grad_scaler import ShardedGradScaler
class Task:
    def __init__(self):
        self.grad_scaler = ShardedGradScaler()
    def _clip(self, max_norm):
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
    def optimize(self, loss):
        self.grad_scaler.scale(loss).backward()
        self.grad_scaler.unscale_(self.optimizer)
        self._clip(1.0)
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()
"""),
    ]
    invalid = [
        Invalid(AMP + """\
for x, y in loader:
    with autocast():
        loss = model(x).sum()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
""", line=8, column=5, fixed=AMP + """\
for x, y in loader:
    with autocast():
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
"""),
        Invalid(AMP + """\
from torch.nn.utils import clip_grad_value_
for x in loader:
    scaler.scale(model(x).sum()).backward()
    clip_grad_value_(model.parameters(), 0.5)
    scaler.step(optimizer)
""", line=7, column=5, fixed=AMP + """\
from torch.nn.utils import clip_grad_value_
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    clip_grad_value_(model.parameters(), 0.5)
    scaler.step(optimizer)
"""),
        # The unscale comes too late.
        Invalid(AMP + """\
for x in loader:
    scaler.scale(model(x).sum()).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
""", line=6, column=5, fixed=AMP + """\
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
"""),
        # A scaler passed in as a parameter, in a train-step function.
        Invalid("""\
import torch
def train_step(model, batch, optimizer, scaler, max_norm):
    loss = model(batch).mean()
    scaler.scale(loss).backward()
    if max_norm > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
""", line=6, column=9, fixed="""\
import torch
def train_step(model, batch, optimizer, scaler, max_norm):
    loss = model(batch).mean()
    scaler.scale(loss).backward()
    if max_norm > 0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
"""),
        # The clip in a helper that does not unscale: reported where the step
        # calls it (the unscale_ belongs before that call).
        Invalid(AMP + """\
def clip(model):
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)

for x in loader:
    scaler.scale(model(x).sum()).backward()
    clip(model)
    scaler.step(optimizer)
""", line=9, column=5, fixed=AMP + """\
def clip(model):
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)

for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    clip(model)
    scaler.step(optimizer)
"""),
        # A batch helper with AMP and fp32 branches: only the AMP clip is wrong.
        Invalid("""\
import torch
class Trainer:
    def __init__(self, cfg):
        self.scaler = torch.cuda.amp.GradScaler()
    def _run_batch(self, x, y):
        _, loss = self.model(x, y)
        if self.cfg.use_amp:
            self.scaler.scale(loss).backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
    def _run_epoch(self, loader):
        for x, y in loader:
            self._run_batch(x, y)
""", line=9, column=13, fixed="""\
import torch
class Trainer:
    def __init__(self, cfg):
        self.scaler = torch.cuda.amp.GradScaler()
    def _run_batch(self, x, y):
        _, loss = self.model(x, y)
        if self.cfg.use_amp:
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
    def _run_epoch(self, loader):
        for x, y in loader:
            self._run_batch(x, y)
"""),
        # FSDP's own clip also needs unscaled gradients.
        Invalid(AMP + """\
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
model = FSDP(net)
for x in loader:
    scaler.scale(model(x).sum()).backward()
    model.clip_grad_norm_(1.0)
    scaler.step(optimizer)
""", line=8, column=5, fixed=AMP + """\
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
model = FSDP(net)
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    model.clip_grad_norm_(1.0)
    scaler.step(optimizer)
"""),
        Invalid("""\
import torch
class Trainer:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")
    def fit(self, loader):
        for x in loader:
            self.scaler.scale(self.model(x).mean()).backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_norm)
            self.scaler.step(self.optimizer)
            self.scaler.update()
""", line=8, column=13, fixed="""\
import torch
class Trainer:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")
    def fit(self, loader):
        for x in loader:
            self.scaler.scale(self.model(x).mean()).backward()
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_norm)
            self.scaler.step(self.optimizer)
            self.scaler.update()
"""),
        # A clip per parameter group: unscale_ may run only once per step, so no fix.
        Invalid(AMP + """\
for x in loader:
    scaler.scale(model(x).sum()).backward()
    for group in optimizer.param_groups:
        torch.nn.utils.clip_grad_norm_(group["params"], 1.0)
    scaler.step(optimizer)
    scaler.update()
""", line=7, column=9),
        # CRLF line endings and an assignment: the inserted line keeps both the indentation and CRLF.
        Invalid(AMP.replace("\n", "\r\n") + "for x in loader:\r\n\tscaler.scale(model(x).sum()).backward()\r\n"
                "\tgrad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\r\n"
                "\tscaler.step(opt)\r\n", line=6, column=14,
                fixed=AMP.replace("\n", "\r\n") + "for x in loader:\r\n\tscaler.scale(model(x).sum()).backward()\r\n"
                "\tscaler.unscale_(opt)\r\n\tgrad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\r\n"
                "\tscaler.step(opt)\r\n"),
        # The backward path differs by branch; the clip runs on both.
        Invalid(AMP + """\
for x in loader:
    loss = model(x).sum()
    if use_amp:
        scaler.scale(loss).backward()
    else:
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
""", line=10, column=5),
        # A stand-in scaler on one branch, a real GradScaler on the other: the clip is wrong
        # whenever AMP is on (a52 LION); no fix, the stand-in may have no unscale_.
        Invalid("""\
import torch
from torch.cuda.amp import GradScaler, autocast
from utils import DummyScaler


class Trainer:
    def __init__(self, cfg, model, optimizer):
        self.model, self.optimizer = model, optimizer
        if cfg.use_grad_scaler:
            self.grad_scaler = GradScaler(2**10, enabled=True)
        else:
            self.grad_scaler = DummyScaler()

    def train_step(self, x, grad_clip):
        with autocast():
            loss = self.model(x).mean()
        self.grad_scaler.scale(loss).backward()
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=grad_clip)
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()
""", line=19, column=13),
        # A local clip helper called after the scaled backward on the GradScaler
        # path (and after apex's own scaling on the other): reported at that call.
        Invalid("""\
import torch
from torch.cuda.amp import GradScaler, autocast

def train(model, loader, opt, native, clip_value):
    scaler = GradScaler()

    def clip_helper(params, value):
        if value > 0.0:
            torch.nn.utils.clip_grad_norm_(params, value)

    for x in loader:
        opt.zero_grad()
        if native:
            with autocast():
                loss = model(x).mean()
            scaler.scale(loss).backward()
            clip_helper(model.parameters(), clip_value)
            scaler.step(opt)
            scaler.update()
        else:
            with amp.scale_loss(model(x).mean(), opt) as scaled:
                scaled.backward()
            clip_helper(model.parameters(), clip_value)
            opt.step()
""", line=17, column=13, fixed="""\
import torch
from torch.cuda.amp import GradScaler, autocast

def train(model, loader, opt, native, clip_value):
    scaler = GradScaler()

    def clip_helper(params, value):
        if value > 0.0:
            torch.nn.utils.clip_grad_norm_(params, value)

    for x in loader:
        opt.zero_grad()
        if native:
            with autocast():
                loss = model(x).mean()
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            clip_helper(model.parameters(), clip_value)
            scaler.step(opt)
            scaler.update()
        else:
            with amp.scale_loss(model(x).mean(), opt) as scaled:
                scaled.backward()
            clip_helper(model.parameters(), clip_value)
            opt.step()
"""),
        # A per-step method of a task with a sharded GradScaler: the clip method
        # runs on scaled gradients.
        Invalid("""\
import torch
from fairscale.optim.grad_scaler import ShardedGradScaler
class Task:
    def __init__(self):
        self.grad_scaler = ShardedGradScaler()
    def _clip(self, max_norm):
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
    def optimize(self, loss):
        self.grad_scaler.scale(loss).backward()
        if self.max_norm is not None:
            self._clip(self.max_norm)
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()
""", line=11, column=13, fixed="""\
import torch
from fairscale.optim.grad_scaler import ShardedGradScaler
class Task:
    def __init__(self):
        self.grad_scaler = ShardedGradScaler()
    def _clip(self, max_norm):
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
    def optimize(self, loss):
        self.grad_scaler.scale(loss).backward()
        if self.max_norm is not None:
            self.grad_scaler.unscale_(self.optimizer)
            self._clip(self.max_norm)
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()
"""),
    ]

    def screen(self, sketch):
        """The screen (necessary for check() to report): True, False, or the project facts that must hold."""
        return {"backward", "scale"} <= sketch.calls and sketch.calls_any(
            "clip_grad_norm_", "clip_grad_value_", "clip_grad_norm")

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        reported: set[int] = set()
        for region in flow.step_regions(index):
            scaled = None
            unscaled = False
            for event in flow.events(index, region):
                site = event.site
                if flow.is_tensor_backward(index, site):
                    if flow.scaled_backward_scaler(index, site) is not None:
                        scaled, unscaled = event, False
                elif site.method == "unscale_":
                    unscaled = True
                elif flow.is_scaler_step(site) or site.method == "update":
                    scaled = None
                elif scaled is not None and not unscaled and _is_clip(index, site) \
                        and not flow.events_exclusive(index, scaled, event):
                    # A clip helper called by the step after the scaled backward: the
                    # mistake (no unscale_ between them) is at that call, where the
                    # fix inserts the unscale_; a backward and clip in one helper: the clip.
                    node = event.anchor if event.inlined and event.anchor is not scaled.anchor else site.node
                    if id(node) in reported:
                        continue
                    reported.add(id(node))
                    yield self.report(node, fix=_fix(index, region, scaled, event))


def _is_clip(index: SemanticIndex, site: CallSite) -> bool:
    if site.method not in CLIPS:
        return False
    receiver = dotted_name(site.receiver) if site.receiver is not None else None
    if receiver is not None and receiver.split(".")[-1].lower() in FRAMEWORK_RECEIVERS:
        return False
    return True


def _fix(index: SemanticIndex, region: cst.CSTNode, scaled: flow.Event, clip: flow.Event) -> Optional[NodeFix]:
    """Insert ``scaler.unscale_(optimizer)`` before the statement that clips (the
    clip itself, or the helper call that runs it), moving a later ``unscale_``.

    Events seen from a loop may sit in a helper it calls: when the backward and
    the clip share one helper, the edit goes inside it; otherwise before the
    loop's statement that runs the clip."""
    scaler = flow.scaled_backward_scaler(index, scaled.site)
    if scaler is None or dotted_name(scaler) is None or flow.may_be_stand_in_scaler(index, scaler):
        return None
    in_helper = clip.inlined and scaled.anchor is clip.anchor

    def place(event: flow.Event) -> Optional[cst.CSTNode]:
        """Where ``event`` runs, at the level of the edit; None at another level."""
        if in_helper:
            return event.site.node if event.anchor is clip.anchor else None
        return None if event.inlined and event is not clip else event.anchor

    at, backward = place(clip), place(scaled)
    function = flow.enclosing_function(index, at)
    if backward is None or flow.enclosing_function(index, backward) is not function:
        return None
    # The scaled backward runs whenever the clip does (no branch of its own).
    clip_branches = {(id(node), body) for node, body in flow.if_ancestors(index, at, stop=region)}
    if any((id(node), body) not in clip_branches
           for node, body in flow.if_ancestors(index, backward, stop=region)):
        return None
    events = flow.events(index, region)
    later = events[events.index(clip) + 1:]
    steps = [e for e in later if flow.is_scaler_step(e.site) and flow.same_text(e.site.receiver, scaler)]
    optimizers = {index.module.code_for_node(e.site.node.args[0].value) for e in steps}
    if len(optimizers) != 1 or place(steps[0]) is None or flow.enclosing_function(index, place(steps[0])) is not function:
        return None
    optimizer = steps[0].site.node.args[0].value
    if dotted_name(optimizer) is None:
        return None
    # unscale_ may run once per step: the clip must not sit in a loop the step is outside of.
    if flow.enclosing_loops(index, at)[:1] != flow.enclosing_loops(index, place(steps[0]))[:1]:
        return None
    statement = _statement_of(index, at)
    if statement is None:
        return None
    text = f"{dotted_name(scaler)}.unscale_({dotted_name(optimizer)})"
    edits = [insert_line_before(statement, text)]
    for event in later:
        if event is steps[0]:
            break
        if event.site.method == "unscale_" and flow.same_text(event.site.receiver, scaler):
            late = _statement_of(index, event.site.node) if place(event) is event.site.node else None
            if late is None or not _deletable(index, late):
                return None
            edits.append(delete_line(late))
    description = f"Insert {text} before the clip" + (" (moved from after it)" if len(edits) > 1 else "")
    return node_fix(description, SAFE, *edits)


def _statement_of(index: SemanticIndex, node: cst.CSTNode) -> Optional[cst.CSTNode]:
    """The simple statement holding ``node`` (``clip(...)``, ``norm = clip(...)``);
    None inside a compound statement's header (an ``elif`` or a loop condition
    has no "line before" that runs each time)."""
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, cst.BaseSmallStatement):
            return ancestor
        if isinstance(ancestor, (cst.BaseCompoundStatement, cst.Lambda, cst.BaseSuite)):
            return None
    return None


def _deletable(index: SemanticIndex, statement: cst.CSTNode) -> bool:
    """A lone expression statement whose block keeps other statements."""
    line = index.parent(statement)
    block = index.parent(line) if line is not None else None
    return (isinstance(statement, cst.Expr) and isinstance(line, cst.SimpleStatementLine)
            and len(line.body) == 1 and isinstance(block, (cst.IndentedBlock, cst.Module))
            and len(block.body) > 1)
