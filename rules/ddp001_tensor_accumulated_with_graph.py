"""## What it does
Flags a tensor that carries autograd history (the loss, model outputs, anything
computed from them) being kept beyond the loop iteration that produced it:
appended or inserted into a container that outlives the iteration
(`losses.append(loss)`), or accumulated into a variable defined outside the loop
(`total_loss += loss`, `total = total + loss`).

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

Not flagged: `.item()`, `.detach()`, `float(...)`, `.tolist()`, `torch.tensor(x)`
(`.cpu()` and `.to("cpu")` keep the graph); code under `torch.no_grad()`,
`torch.inference_mode()`, `torch.set_grad_enabled(False)` or in functions
decorated with them (also functions every caller of which runs them under
such a region); an accumulator reset in the iteration, and terms summed into a
loss that `backward()` consumes (`torch.stack(losses).sum().backward()`).

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

TRAIN = """\
import torch
import torch.nn as nn
criterion = nn.CrossEntropyLoss()
"""


class TensorAccumulatedWithGraph(Rule):
    code, name, severity = "DDP001", "tensor-accumulated-with-graph", "error"
    message = ("tensor with autograd history kept across iterations: its graph is retained; "
               "use .item() or .detach()")
    # An accumulation is an append/extend/insert or an (augmented) assignment.
    triggers = ("=", "append", "extend", "insert", ".add(")

    valid = [
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
    ]
    invalid = [
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
    ]

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        for node, accumulator, value, order in _accumulations(index):
            severity = _severity(index, node, accumulator, value, order)
            if severity is not None:
                yield self.report(node, severity=severity, fix=_fix(index, node, value))


def _accumulations(index: SemanticIndex):
    """(reported node, accumulator expression, accumulated value, order) for
    every append/extend/insert and every accumulating assignment in a loop."""
    for site in index.method_calls("append", "extend", "insert", "add"):
        if site.receiver is None or not site.node.args:
            continue
        value = site.node.args[-1].value
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
                    if other is not None:
                        yield binding.node, binding.node.targets[0].target, other, binding.order


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


def _other_operand(value: cst.BinaryOperation, name: str) -> Optional[cst.BaseExpression]:
    """``loss`` in ``total = total + loss``."""
    if dotted_name(value.left) == name:
        return value.right
    if dotted_name(value.right) == name:
        return value.left
    return None


def _severity(index: SemanticIndex, node: cst.CSTNode, accumulator: cst.BaseExpression,
              value: cst.BaseExpression, order: int) -> Optional[str]:
    loops = flow.enclosing_loops(index, node)
    if not loops or flow.in_framework_code(index, node) or flow.in_module_internals(index, node):
        return None
    loop = loops[0]
    if _few_literal_iterations(loop):
        return None  # ``for i in range(10)``: a bounded, short-lived graph, not a leak
    name = dotted_name(accumulator)
    if name is None:
        return None
    if "." not in name and flow.binds_inside(index, name, loop, node):
        return None  # reset every iteration
    if name.split(".")[0] != "self" and "." in name:
        return None  # an attribute of some value: cannot tell what it is
    if "." not in name and index.visible_bindings(name, node) is None:
        return None
    if not flow.carries_graph(index, value, order):
        return None
    if _consumed_by_backward(index, node, name):
        return None
    mode = flow.grad_mode(index, node)
    if mode == "off":
        return None
    if any(flow.is_training_loop(index, outer) for outer in loops[:1]):
        return "warning"
    if mode == "unknown":
        return None  # an evaluation helper whose callers are elsewhere
    return "error"


SHORT_LOOP = 100


def _few_literal_iterations(loop: flow.Loop) -> bool:
    """``for i in range(10)`` (an export check over a few chunks): what it
    keeps is bounded and freed with the function, unlike a loop over data."""
    if not isinstance(loop, cst.For) or not isinstance(loop.iter, cst.Call):
        return False
    if dotted_name(loop.iter.func) != "range" or len(loop.iter.args) != 1:
        return False
    value = loop.iter.args[0].value
    return isinstance(value, cst.Integer) and int(value.value.replace("_", ""), 0) <= SHORT_LOOP


def _consumed_by_backward(index: SemanticIndex, node: cst.CSTNode, name: str) -> bool:
    """Is the accumulator the loss (or part of the loss) of a later backward in
    the same function (``loss += term`` ... ``loss.backward()``)?"""
    function = flow.enclosing_function(index, node) or index.module
    for site in flow.calls_in_function(index, function):
        if not flow.is_tensor_backward(index, site) or not flow.precedes(index, node, site.node):
            continue
        operand = flow.backward_operand(site)
        if operand is not None and flow.depends_on(index, operand, name, site.order):
            return True
    return False
