"""## What it does
Flags `clip_grad_norm_` / `clip_grad_value_` applied to the gradients of a loss
scaled by a `GradScaler` (`scaler.scale(loss).backward()`) with no
`scaler.unscale_(optimizer)` earlier in the same step.

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

Not flagged: bf16 autocast without a scaler; `GradScaler(enabled=False)`;
`unscale_` called before the clip (also in a same-module helper that unscales
and clips); `accelerator.clip_grad_norm_` (the framework unscales); a clip
under an `if` that runs only without AMP.

## References
- https://pytorch.org/docs/stable/notes/amp_examples.html#gradient-clipping
"""

from __future__ import annotations

from typing import Iterator

from ddplint.analysis import flow
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
""", line=8, column=5),
        Invalid(AMP + """\
from torch.nn.utils import clip_grad_value_
for x in loader:
    scaler.scale(model(x).sum()).backward()
    clip_grad_value_(model.parameters(), 0.5)
    scaler.step(optimizer)
""", line=7, column=5),
        # The unscale comes too late.
        Invalid(AMP + """\
for x in loader:
    scaler.scale(model(x).sum()).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
""", line=6, column=5),
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
""", line=6, column=9),
        # The clip in a helper that does not unscale.
        Invalid(AMP + """\
def clip(model):
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)

for x in loader:
    scaler.scale(model(x).sum()).backward()
    clip(model)
    scaler.step(optimizer)
""", line=5, column=5),
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
""", line=9, column=13),
        # FSDP's own clip also needs unscaled gradients.
        Invalid(AMP + """\
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
model = FSDP(net)
for x in loader:
    scaler.scale(model(x).sum()).backward()
    model.clip_grad_norm_(1.0)
    scaler.step(optimizer)
""", line=8, column=5),
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
""", line=8, column=13),
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
    ]

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
                        and not flow.events_exclusive(index, scaled, event) \
                        and id(site.node) not in reported:
                    reported.add(id(site.node))
                    yield self.report(site.node)


def _is_clip(index: SemanticIndex, site: CallSite) -> bool:
    if site.method not in CLIPS:
        return False
    receiver = dotted_name(site.receiver) if site.receiver is not None else None
    if receiver is not None and receiver.split(".")[-1].lower() in FRAMEWORK_RECEIVERS:
        return False
    return True
