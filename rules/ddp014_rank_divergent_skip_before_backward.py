"""## What it does
Flags, in a DDP training loop, control flow that can differ across ranks and
changes whether a rank reaches `backward()` (or a collective): a
`continue` / `break` / `return` / `raise` before the backward under a per-rank,
data-dependent condition (`if torch.isnan(loss): continue`,
`if batch is None: continue`, a value read from the batch or the loss), or a
`break` under a rank condition (`if rank == 0 and ...: break`).

A `raise` is reported as a warning: it fails fast on the rank that raises, but
its peers wait in the all-reduce until the collective timeout.

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

Not flagged: conditions computed from all-reduced / broadcast values; step and
epoch counters (`if step >= max_steps: break`); `sys.exit` on a non-finite
loss (the process ends and the launcher tears the job down); exits after the
backward; exits of inner loops that do not skip the backward.

## References
- https://pytorch.org/docs/stable/notes/ddp.html#internal-design
- https://pytorch.org/docs/stable/distributed.html#debugging-torch-distributed-applications
"""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from ddplint.analysis import flow
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import SemanticIndex

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
NON_FINITE_CHECKS = ("isnan", "isinf", "isfinite")


class RankDivergentSkipBeforeBackward(Rule):
    code, name, severity = "DDP014", "rank-divergent-skip-before-backward", "error"
    message = ("this rank may skip backward() while its peers run it: DDP's all-reduce then "
               "hangs; agree on the decision across ranks first (all_reduce the flag)")
    triggers = ("continue", "break", "return", "raise")
    needs_ddp_context = True

    valid = [
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
    ]
    invalid = [
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
    ]

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        for exit_node in index.exits:
            severity = _skip_severity(index, exit_node)
            if severity is not None:
                yield self.report(exit_node, severity=severity)


def _skip_severity(index: SemanticIndex, exit_node: cst.CSTNode) -> Optional[str]:
    loops = flow.enclosing_loops(index, exit_node)
    if not loops or flow.in_framework_code(index, exit_node):
        return None
    # continue/break leave the innermost loop; return/raise leave them all.
    candidates = loops[:1] if isinstance(exit_node, (cst.Continue, cst.Break)) else loops
    for loop in candidates:
        if not flow.is_training_loop(index, loop):
            continue
        syncs = _sync_points(index, loop)
        tests = [branch.test for branch, _ in flow.if_ancestors(index, exit_node, stop=loop)]
        if not tests:
            continue
        if isinstance(exit_node, cst.Break) and any(_rank_condition(index, t) for t in tests):
            return "error"
        if not any(flow.precedes(index, exit_node, s) for s in syncs):
            continue
        if any(_per_rank_data_condition(index, t, loops) for t in tests):
            return "warning" if isinstance(exit_node, cst.Raise) else "error"
    return None


def _sync_points(index: SemanticIndex, loop: flow.Loop) -> list[cst.CSTNode]:
    """Where every rank must arrive together in one iteration: tensor backwards
    (DDP all-reduces in them) and explicit collectives, helpers inlined."""
    points = []
    backwards = {id(s) for s in flow.tensor_backwards(index)}
    for event in flow.events(index, loop):
        site = event.site
        if id(site) in backwards:
            points.append(event.anchor)
        elif site.method in COLLECTIVES and (site.qualified_name or "").startswith("torch.distributed"):
            points.append(event.anchor)
    return points


def _rank_condition(index: SemanticIndex, test: cst.BaseExpression) -> bool:
    if _shared_rank_condition is not None:
        return _shared_rank_condition(index, test)
    return False


def _per_rank_data_condition(index: SemanticIndex, test: cst.BaseExpression,
                             loops: list[flow.Loop]) -> bool:
    """Does the test depend on this rank's data (a non-finite check, the batch,
    the loss) rather than on agreed values or counters?"""
    read = flow.names_in(test)
    order = flow.order_near(index, test)
    if any(flow.is_agreed_value(index, name, test) for name in read if "." not in name):
        return False
    if any(_depends_on_agreed(index, name, order, test) for name in read if "." not in name):
        return False
    if _has_non_finite_check(test):
        return True
    data = set().union(*(flow.loop_data_names(index, loop) for loop in loops))
    for name in read:
        if name in data:
            return True
        if "." not in name:
            for binding in index.reaching(name, test):
                if binding.kind not in ("assign", "unpack", "annassign"):
                    continue
                value = binding.value if binding.kind != "unpack" else getattr(binding.node, "value", None)
                if value is not None and _reads_data(value, data):
                    return True
                if flow.binding_carries_graph(index, binding, 0) and _binding_in_loop(binding, loops, index):
                    return True
    return False


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
        if isinstance(func, cst.Attribute):
            return _reads_data(func.value, data)
        if isinstance(func, cst.Name) and func.value == "len" and expr.args:
            return _reads_data(expr.args[0].value, data)
    return False


def _depends_on_agreed(index: SemanticIndex, name: str, order: int, at: cst.CSTNode) -> bool:
    return any(flow.is_agreed_value(index, other, at)
               for binding in index.reaching(name, at) if binding.value is not None
               for other in flow.names_in(binding.value) if "." not in other)


def _binding_in_loop(binding, loops: list[flow.Loop], index: SemanticIndex) -> bool:
    return any(flow.is_inside(index, binding.node, loop) for loop in loops)


def _has_non_finite_check(test: cst.BaseExpression) -> bool:
    stack: list[cst.CSTNode] = [test]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call):
            func = node.func
            name = func.attr.value if isinstance(func, cst.Attribute) else (
                func.value if isinstance(func, cst.Name) else "")
            if name in NON_FINITE_CHECKS:
                return True
        stack.extend(node.children)
    return False
