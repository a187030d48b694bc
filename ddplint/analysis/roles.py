"""Process roles: which kind of process runs a piece of code.

A DDP script's code runs in one of three roles (RULES.md, Clarifications):

- the **launcher parent**: a function (or module-level code) that starts the
  workers itself with ``mp.spawn(worker, ...)``, ``start_processes`` or
  ``Process(target=worker)``; its own statements run once, in the parent, before
  and after the spawn, never as a DDP worker;
- a **single-process branch**: the arm of an ``if`` that runs only without
  distributed training (``else`` of ``if args.distributed:``, ``if not use_ddp:``,
  ``if world_size == 1:``, ``if args.local_rank == -1:``);
- a **DDP worker**: everything else.

Worker rules (DDP007, DDP009, DDP011, DDP017, DDP018, DDP019) report only in
worker code. The role is decided once per node here, not per rule.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from ddplint.analysis.semantic import CallSite, SemanticIndex, dotted_name
from ddplint.analysis.values import literal_int

LAUNCHER, WORKER, SINGLE_PROCESS = "launcher", "worker", "single-process"

_SPAWN_MODULES = ("torch.multiprocessing", "multiprocessing", "torch.distributed.elastic.multiprocessing")


def process_role(index: SemanticIndex, node: cst.CSTNode) -> str:
    """LAUNCHER, SINGLE_PROCESS or WORKER for the code at ``node``."""
    if in_single_process_branch(index, node):
        return SINGLE_PROCESS
    if index.enclosing_scope(node) in launcher_scopes(index):
        return LAUNCHER
    return WORKER


def is_worker_code(index: SemanticIndex, node: cst.CSTNode) -> bool:
    return process_role(index, node) == WORKER


# ---------------------------------------------------------------------- launchers
def launcher_scopes(index: SemanticIndex) -> list[cst.CSTNode]:
    """Functions (or the module) whose own code starts worker processes."""
    cached = index.cache.get("roles.launchers")
    if cached is None:
        cached = []
        for site in index.calls:
            if is_spawn_call(index, site) and not any(s is site.scope for s in cached):
                cached.append(site.scope)
        index.cache["roles.launchers"] = cached
    return cached


def is_spawn_call(index: SemanticIndex, site: CallSite) -> bool:
    """``mp.spawn(fn, ...)``, ``start_processes(fn, ...)``, ``Process(target=fn)``
    (torch's or Python's multiprocessing, also through a context object)."""
    if site.method in ("spawn", "start_processes"):
        qualified = site.qualified_name or ""
        receiver = dotted_name(site.receiver) if site.receiver is not None else ""
        known = qualified.startswith(_SPAWN_MODULES) or (receiver or "").split(".")[-1] in ("mp", "multiprocessing")
        return known and site.argument("fn", 0) is not None
    if site.method == "Process":
        return site.keyword("target") is not None
    return False


# ---------------------------------------------------------------------- single-process branches
_DISTRIBUTED_WORDS = ("distributed", "ddp", "is_initialized", "multiprocessing_distributed", "use_dist",
                      "multi_gpu", "multigpu")
_RANK_WORDS = ("local_rank", "rank")
# Names of the number of processes, compared without underscores and case.
_WORLD_WORDS = ("worldsize", "world", "ngpu", "ngpus", "numgpus", "gpus", "nprocs", "nproc", "numprocesses",
                "numprocs", "nprocesses", "numdevices", "ndevices")


def flag_polarity(index: SemanticIndex, test: cst.BaseExpression) -> Optional[bool]:
    """True when ``test`` holds in a distributed run only, False when it holds
    in a single-process run only, None when it says nothing about it."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = flag_polarity(index, test.expression)
        return None if inner is None else not inner
    if isinstance(test, cst.Call):
        callee = index.qualified_name(test.func) or ""
        if callee in ("torch.distributed.is_initialized", "torch.distributed.is_available"):
            return True
        return None
    name = dotted_name(test)
    if name is not None:
        last = name.split(".")[-1].lower()
        return True if any(word in last for word in _DISTRIBUTED_WORDS) else None
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        return _comparison_polarity(test)
    return None


def _comparison_polarity(test: cst.Comparison) -> Optional[bool]:
    target = test.comparisons[0]
    operator, left, right = type(target.operator), test.left, target.comparator
    if dotted_name(left) is None and dotted_name(right) is not None:  # ``1 < world_size``
        left, right = right, left
        operator = _MIRRORED.get(operator, operator)
    name = dotted_name(left)
    if name is None:
        return None
    last = name.split(".")[-1].lower()
    value = _signed_int(right)
    if last in _RANK_WORDS and value == -1:
        return {cst.Equal: False, cst.NotEqual: True}.get(operator)
    if last.replace("_", "") in _WORLD_WORDS and value is not None:
        if (operator, value) in ((cst.GreaterThan, 1), (cst.GreaterThanEqual, 2), (cst.NotEqual, 1)):
            return True
        if (operator, value) in ((cst.Equal, 1), (cst.LessThanEqual, 1), (cst.LessThan, 2)):
            return False
    return None


_MIRRORED = {cst.LessThan: cst.GreaterThan, cst.GreaterThan: cst.LessThan,
             cst.LessThanEqual: cst.GreaterThanEqual, cst.GreaterThanEqual: cst.LessThanEqual}


def _signed_int(expr: cst.BaseExpression) -> Optional[int]:
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        value = literal_int(expr.expression)
        return -value if value is not None else None
    return literal_int(expr)


def in_single_process_branch(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """Is ``node`` in the arm of an ``if`` (or conditional expression) that runs
    only without distributed training?"""
    child: cst.CSTNode = node
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, (cst.If, cst.IfExp)):
            polarity = flag_polarity(index, ancestor.test)
            if polarity is not None:
                if (child is ancestor.body and polarity is False) or (child is ancestor.orelse and polarity is True):
                    return True
        child = ancestor
    return False
