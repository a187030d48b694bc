"""Process roles: which kind of process runs a piece of code.

A DDP script's code runs in one of three roles (RULES.md, Clarifications):

- the **launcher parent**: a function (or module-level code) that starts the
  workers itself with ``mp.spawn(worker, ...)``, ``start_processes`` or
  ``Process(target=worker)``; its own statements run once, in the parent, before
  and after the spawn, never as a DDP worker; so do the ``__main__`` block that
  calls such a launcher and the functions only launcher code calls
  (``parent_only_functions``: argument checks before the spawn, a test pass
  after the workers joined);
- a **single-process branch**: the arm of an ``if`` that runs only without
  distributed training (``else`` of ``if args.distributed:``, ``if not use_ddp:``,
  ``if world_size == 1:``, ``if args.local_rank == -1:``, the ``else`` of
  ``if self.params["training"]["use_ddp"]:`` (nested option dicts), of
  ``if is_dist():`` / ``if utils.is_dist_avail_and_initialized():``, of a
  ``dist`` flag that is not torch.distributed, of ``if dist.get_world_size() > 1:``,
  of ``if cfg.enable_fsdp:`` in a module without a DDP wrap); so is a function
  whose every use in the project is a call from such an arm
  (``else: self.training_loop_single()``);
- the methods of a class whose ``__init__`` builds a trainer class of the
  module with its single-process defaults (``Trainer(name)`` where
  ``Trainer.__init__`` takes ``rank=0, world_size=1``: an inference helper such
  as a ``ModelLoader``) are single-process too (``holds_single_process_trainer``);
- the methods of a top-level class that nothing in the project builds (no call,
  no value read of it or of a project subclass, no module-object import of its
  module, no computed import that may load it), that uses nothing of
  torch.distributed itself, in a module whose distributed code sits in other
  classes (a ``BaseTrainer`` with ``DataParallel`` beside ``Multi_BaseTrainer_dist``):
  single-process (``in_unbuilt_single_process_class``);
- a function that only single-process scripts run (every known project call of
  it sits in a module that neither imports torch.distributed nor runs a project
  function starting the process group: an index builder, an inference script)
  is single-process too (``run_by_single_process_scripts_only``);
- code that **no process runs** (``NOT_RUN``): a function of a library module
  (no ``__main__`` block) that nothing in the complete project calls, imports
  by name, hands on or decorates (``in_function_nothing_runs``: an offline
  utility beside the training helpers);
- a **DDP worker**: everything else.

The ``if __name__ == "__main__":`` block of a module that is in DDP context
only because a DDP module imports it (a layer's self-test) is single-process.

In unit-test modules the role is decided per test function, not per module
(``test_function_role``): a test that launches or joins a multi-process run
(``init_process_group``, a DDP/FSDP wrap, ``fabric.launch()``, ``devices=2``, a
``ddp``/``fsdp`` strategy, a multi-GPU marker such as ``min_cuda_gpus=2``) is a
worker (a launcher parent when it calls ``mp.spawn`` itself); any other test
function runs in one process, even when other tests of the module are
distributed.

``runs_on_rank_zero_only`` says when code runs on rank 0 alone (``if rank == 0:``,
``if is_main_process():``, after ``if rank != 0: return``).

Worker rules (DDP007, DDP009, DDP011, DDP017, DDP018, DDP019) report only in
worker code. The role is decided once per node here, not per rule.
"""

from __future__ import annotations

import fnmatch
import os
import re
from typing import Optional

import libcst as cst

from ddplint import names
from ddplint.analysis.semantic import CallSite, SemanticIndex, dotted_name
from ddplint.analysis.values import is_test_module, literal_int, literal_str
from ddplint.screen.facts import SPAWN_INDEX

LAUNCHER, WORKER, SINGLE_PROCESS = "launcher", "worker", "single-process"
# Code that no process of the project runs (``in_function_nothing_runs``).
NOT_RUN = "not-run"

_SPAWN_MODULES = ("torch.multiprocessing", "multiprocessing", "torch.distributed.elastic.multiprocessing")


def process_role(index: SemanticIndex, node: cst.CSTNode) -> str:
    """LAUNCHER, SINGLE_PROCESS, NOT_RUN or WORKER for the code at ``node``."""
    if in_single_process_branch(index, node) or in_standalone_main_block(index, node) \
            or holds_single_process_trainer(index, node) or overridden_for_ddp_importers(index, node) \
            or in_unbuilt_single_process_class(index, node) or run_by_single_process_scripts_only(index, node):
        return SINGLE_PROCESS
    if in_function_nothing_runs(index, node):
        return NOT_RUN
    in_test = test_function_role(index, node)
    if in_test is not None:
        return in_test
    scope = index.enclosing_scope(node)
    if scope in launcher_scopes(index) or any(scope is f for f in parent_only_functions(index)) \
            or _in_launching_main_block(index, node):
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


def _launching_calls(index: SemanticIndex) -> list[cst.Call]:
    """Calls in the module's ``if __name__ == "__main__":`` block that start the
    workers, themselves or through a launcher function of the module: the
    block's code on their path runs in the parent only (spawned workers import
    the module as ``__mp_main__``)."""
    if "roles.launching_calls" not in index.cache:
        found: list[cst.Call] = []
        names_of = {f.name.value for f in launcher_scopes(index) if isinstance(f, cst.FunctionDef)}
        for site in index.calls:
            if site.scope is not index.module or _main_block_of(index, site.node) is None:
                continue
            if is_spawn_call(index, site) or (isinstance(site.node.func, cst.Name) and site.node.func.value in names_of):
                found.append(site.node)
        index.cache["roles.launching_calls"] = found
    return index.cache["roles.launching_calls"]


def _main_block_of(index: SemanticIndex, node: cst.CSTNode) -> Optional[cst.If]:
    return next((a for a in index.ancestors(node) if isinstance(a, cst.If) and _is_main_test(a.test)
                 and index.parent(a) is index.module), None)


def _in_launching_main_block(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """Module-level code of the ``__main__`` block on the path of a launching
    call: an ``if`` that holds both holds them in the same arm (the other arm of
    ``if torchrun: main_worker(...) else: mp.spawn(...)`` is a worker)."""
    if index.enclosing_scope(node) is not index.module:
        return False
    block = _main_block_of(index, node)
    if block is None:
        return False
    return any(_main_block_of(index, call) is block and _same_arms(index, node, call, block)
               for call in _launching_calls(index))


def _same_arms(index: SemanticIndex, node: cst.CSTNode, other: cst.CSTNode, block: cst.If) -> bool:
    other_ancestors = {id(a) for a in index.ancestors(other)}
    child = node
    for ancestor in index.ancestors(node):
        if ancestor is block:
            return True
        if isinstance(ancestor, cst.If) and id(ancestor) in other_ancestors and child is not ancestor.test:
            # both inside: ``other`` must lie under the same arm (``child``)
            if id(child) not in other_ancestors and child is not other:
                return False
        child = ancestor
    return True


def parent_only_functions(index: SemanticIndex) -> list[cst.FunctionDef]:
    """Module-level functions that only launcher-parent code calls (``check_args``
    called from the launching ``__main__`` block before the spawn, ``test(args)``
    called by the launcher after the workers joined), transitively: every read
    of the name is a call from launcher code or from another such function, and
    no other module of the project calls it. A spawn target is passed, not
    called, and so never qualifies."""
    cached = index.cache.get("roles.parent_only")
    if cached is not None:
        return cached
    from ddplint.analysis.models import project_of
    from ddplint.analysis.values import name_reads

    launchers = launcher_scopes(index)
    if not launchers:
        index.cache["roles.parent_only"] = []
        return []
    project = project_of(index)
    candidates = [f for f in index.module.body if isinstance(f, cst.FunctionDef) and f not in launchers]
    parent_only: list[cst.FunctionDef] = []
    changed = True
    while changed:
        changed = False
        for function in candidates:
            if any(function is f for f in parent_only):
                continue
            reads = name_reads(index, function.name.value)
            if not reads or any(not _called_from_parent(index, read, launchers, parent_only) for read in reads):
                continue
            callers = project.callers.get(project.function_key(index.path, function.name.value)) or []
            if any(path != index.path for path, _ in callers):
                continue
            parent_only.append(function)
            changed = True
    index.cache["roles.parent_only"] = parent_only
    return parent_only


def _called_from_parent(index: SemanticIndex, read: cst.Name, launchers: list, parent_only: list) -> bool:
    call = index.parent(read)
    if not (isinstance(call, cst.Call) and call.func is read):
        return False  # passed on (a spawn target, a callback): it may run anywhere
    scope = index.enclosing_scope(call)
    if any(scope is f for f in parent_only):
        return True
    if any(scope is f for f in launchers):
        # on the path of the spawn (not the other arm of ``if torchrun: fit(...) else: mp.spawn(...)``)
        spawns = [site.node for site in index.calls if site.scope is scope and is_spawn_call(index, site)]
        return any(_same_arms(index, call, spawn, scope) for spawn in spawns)
    return _in_launching_main_block(index, call)


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
                      "multi_gpu", "multigpu", "dist_train", "multiprocess")
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
        last = (dotted_name(test.func) or "").split(".")[-1].lower()
        if not callee.startswith("torch") and _DISTRIBUTED_PREDICATE.match(last) \
                and ("fsdp" not in last or _fsdp_switch_means_distributed(index)):
            return True  # ``is_dist()``, ``is_dist_avail_and_initialized()``, ``utils.is_distributed()``
        return None
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
        # ``train_config.enable_fsdp or distil_config.enable_fsdp``: distributed when either is
        sides = [flag_polarity(index, operand) for operand in (test.left, test.right)]
        return True if sides == [True, True] else False if sides == [False, False] else None
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        # ``args.distributed and not args.no_set_device_rank``: holds only in a
        # distributed run; its ``else`` is the single-process run or a plain
        # opt-out option (never a rank test, which would make the else per-rank).
        operands = (test.left, test.right)
        sides = [flag_polarity(index, operand) for operand in operands]
        if False in sides:
            return False  # ``local_rank == -1 and args.evaluate``: a single-process run only
        if True in sides and all(side is True or _plain_option(operand) for side, operand in zip(sides, operands)):
            return True
        return None
    name = dotted_name(test)
    if name is not None:
        last = name.split(".")[-1].lower()
        if last == "dist" and ("." in name or _dist_is_a_flag(index, test)):
            return True  # ``args.dist``, a ``dist: bool`` parameter (not ``import torch.distributed as dist``)
        return True if _names_distributed_switch(index, last) else None
    key = _option_key(test)
    if key is not None:  # ``opt['dist']``, ``cfg["distributed"]``: an option of a dict
        return True if key == "dist" or _names_distributed_switch(index, key) else None
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        if isinstance(target.operator, (cst.Is, cst.Equal, cst.IsNot, cst.NotEqual)) \
                and isinstance(target.comparator, cst.Name) and target.comparator.value in ("True", "False"):
            # ``args.use_ddp is True`` / ``== False``: the flag itself, or its negation
            inner = flag_polarity(index, test.left)
            negated = (target.comparator.value == "False") != isinstance(target.operator, (cst.IsNot, cst.NotEqual))
            return None if inner is None else (not inner if negated else inner)
        if isinstance(target.operator, (cst.Is, cst.IsNot)) and isinstance(target.comparator, cst.Name) \
                and target.comparator.value == "None" and _always_a_rank(index, test.left):
            # ``if args.gpu is None:`` in a worker whose ``args.gpu = gpu`` every caller fills with
            # the spawn index or the local rank: that arm never runs there (a61 moco-1)
            return isinstance(target.operator, cst.IsNot)
        if isinstance(target.operator, (cst.In, cst.NotIn)) and literal_str(test.left) in _LAUNCHER_VARIABLES \
                and dotted_name(target.comparator) in ("os.environ", "environ"):
            # ``"RANK" in os.environ``: started by a launcher (torchrun) as one of several processes
            return isinstance(target.operator, cst.In)
        return _comparison_polarity(test)
    return None


def _always_a_rank(index: SemanticIndex, expr: cst.BaseExpression) -> bool:
    """Does every binding that reaches ``expr`` hold a rank or device index (never None)?"""
    from ddplint.analysis.values import GLOBAL, LOCAL, rank_sources

    if dotted_name(expr) is None:
        return False
    sources = rank_sources(index, expr)
    return bool(sources) and sources <= {GLOBAL, LOCAL}


# Variables a distributed launcher (torchrun, torch.distributed.launch) sets for each process.
_LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


# Predicates named for a distributed run: ``is_dist()``, ``is_distributed()``,
# ``is_dist_avail_and_initialized()``, ``dist_is_initialized()``, ``use_ddp()``.
_DISTRIBUTED_PREDICATE = re.compile(
    r"^(is_|use_|using_|uses_)?(dist|distributed|ddp|fsdp)(_is)?(_avail(able)?_and)?"
    r"(_initiali[sz]ed|_enabled|_on|_mode|_run|_training)?$")


def _names_distributed_switch(index: SemanticIndex, name: str) -> bool:
    """``args.distributed``, ``use_ddp``, ``cfg.enable_fsdp`` (lower case)."""
    if any(word in name for word in _DISTRIBUTED_WORDS):
        return True
    return "fsdp" in name and _fsdp_switch_means_distributed(index)


def _fsdp_switch_means_distributed(index: SemanticIndex) -> bool:
    """An FSDP switch (``if train_config.enable_fsdp:``) tells a distributed run
    from a single-process one only where the module has no DDP wrap: with one,
    its other arm may be the DDP run (``if args.fsdp: FSDP(m) else: DDP(m)``)."""
    if "roles.fsdp_switch" not in index.cache:
        from ddplint.analysis.models import wrapper_subclass

        index.cache["roles.fsdp_switch"] = not index.calls_to(names.DDP) and not any(
            wrapper_subclass(index, site.node.func) for site in index.calls
            if (site.method or "")[:1].isupper())
    return index.cache["roles.fsdp_switch"]


def _dist_is_a_flag(index: SemanticIndex, test: cst.BaseExpression) -> bool:
    """A bare ``dist`` that holds a flag here (a parameter, an assignment that
    shadows the module) rather than ``torch.distributed``."""
    bindings = index.reaching("dist", test)
    if bindings:
        return all(b.kind not in ("import", "other") and not (b.value is not None and index.qualified_name(
            b.value) == "torch.distributed") for b in bindings)
    return index.qualified_name(test) is None


def _option_key(test: cst.BaseExpression) -> Optional[str]:
    """The literal key of ``opt['dist']`` (lower case), else None."""
    if isinstance(test, cst.Subscript) and len(test.slice) == 1 and _option_holder(test.value):
        element = test.slice[0].slice
        if isinstance(element, cst.Index):
            key = literal_str(element.value)
            return key.lower() if key is not None else None
    return None


def _option_holder(expr: cst.BaseExpression, depth: int = 0) -> bool:
    """``opt`` / ``self.cfg`` / ``self.params["training"]``: a dotted name, or a
    literal-key subscript of one (nested option dicts)."""
    if dotted_name(expr) is not None:
        return True
    if depth < 3 and isinstance(expr, cst.Subscript) and len(expr.slice) == 1 \
            and isinstance(expr.slice[0].slice, cst.Index) and literal_str(expr.slice[0].slice.value) is not None:
        return _option_holder(expr.value, depth + 1)
    return False


def _plain_option(test: cst.BaseExpression) -> bool:
    """``args.flag`` / ``not args.flag`` naming neither a rank nor a rank predicate."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test = test.expression
    name = dotted_name(test)
    if name is None:
        return False
    last = name.split(".")[-1]
    lowered = last.lower()
    return not names.RANK_NAME.match(last) and last not in names.RANK_PREDICATES \
        and not any(word in lowered for word in ("master", "main", "leader", "chief", "zero"))


def _counted_name(expr: cst.BaseExpression) -> Optional[str]:
    """The dotted name compared: ``args.world_size``, or the getter called
    without arguments (``dist.get_world_size()``, ``get_world_size()``: read as
    ``world_size``)."""
    if isinstance(expr, cst.Call) and not expr.args:
        callee = dotted_name(expr.func)
        if callee is not None and callee.split(".")[-1].startswith("get_"):
            return callee.split(".")[-1][len("get_"):]
        return None
    return dotted_name(expr)


def comparison_polarity(test: cst.Comparison) -> Optional[bool]:
    """``flag_polarity`` of a comparison alone: True for ``local_rank != -1`` /
    ``world_size > 1``, False for ``local_rank == -1`` / ``world_size == 1``."""
    return _comparison_polarity(test)


def _comparison_polarity(test: cst.Comparison) -> Optional[bool]:
    target = test.comparisons[0]
    operator, left, right = type(target.operator), test.left, target.comparator
    if _counted_name(left) is None and _counted_name(right) is not None:  # ``1 < world_size``
        left, right = right, left
        operator = _MIRRORED.get(operator, operator)
    name = _counted_name(left)
    if name is None:
        return None
    last = name.split(".")[-1].lower()
    mode = _mode_polarity(last, literal_str(right))
    if mode is not None and operator in (cst.Equal, cst.NotEqual):
        return mode if operator is cst.Equal else not mode
    value = _signed_int(right)
    if last in _RANK_WORDS and value == -1:
        return {cst.Equal: False, cst.NotEqual: True, cst.GreaterThan: True, cst.LessThanEqual: False}.get(operator)
    if last in _RANK_WORDS and value == 0 and operator in (cst.GreaterThanEqual, cst.LessThan):
        # ``local_rank >= 0`` with the -1 of a run no launcher started (a111 compositional_SLMs);
        # ``rank > 0`` is not this: it selects the non-zero ranks
        return operator is cst.GreaterThanEqual
    if last.replace("_", "") in _WORLD_WORDS and value is not None:
        if (operator, value) in ((cst.GreaterThan, 1), (cst.GreaterThanEqual, 2), (cst.NotEqual, 1)):
            return True
        if (operator, value) in ((cst.Equal, 1), (cst.LessThanEqual, 1), (cst.LessThan, 2)):
            return False
    return None


_SINGLE_MODE = re.compile(r"(^|_)single($|_?(gpu|proc|process|device))")
_MULTI_MODE = re.compile(r"(^|_)(multi($|_?(gpu|proc|process|device|node))|ddp|fsdp|distributed)($|_)")


def _mode_polarity(name: str, literal: Optional[str]) -> Optional[bool]:
    """A mode compared with a literal: ``mode == "train_single"`` (False),
    ``mode == "train_multi"`` / ``"ddp"`` (True), mmcv's ``launcher == "none"``
    (False)."""
    if literal is None:
        return None
    word = literal.lower()
    if name == "launcher" and word == "none":
        return False
    if _SINGLE_MODE.search(word):
        return False
    return True if _MULTI_MODE.search(word) else None


_MIRRORED = {cst.LessThan: cst.GreaterThan, cst.GreaterThan: cst.LessThan,
             cst.LessThanEqual: cst.GreaterThanEqual, cst.GreaterThanEqual: cst.LessThanEqual}


def _signed_int(expr: cst.BaseExpression) -> Optional[int]:
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        value = literal_int(expr.expression)
        return -value if value is not None else None
    return literal_int(expr)


def in_single_process_branch(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """Is ``node`` in the arm of an ``if`` (or conditional expression) that runs
    only without distributed training, or in a function that only such arms
    call (``else: self.training_loop_single(...)``, see
    ``_called_from_single_process_only``)?"""
    return _in_single_process_arm(index, node) or _in_single_process_function(index, node, 0) \
        or _run_single_process_by_the_project(index, node)


def _run_single_process_by_the_project(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """Is ``node`` in a function that the project's calls run only from single-process
    arms, across modules (``Project.runs_single_process_only``)?"""
    function = next((a for a in index.ancestors(node) if isinstance(a, cst.FunctionDef)), None)
    if function is None or function.decorators:
        return False
    from ddplint.analysis.models import function_key, project_of
    from ddplint.analysis.values import attribute_names, name_reads

    name = function.name.value
    is_method = isinstance(index.parent(index.parent(function)), cst.ClassDef)
    # (a method's own handing on is ``self.name`` not called; ``args.train`` is another name)
    uses = [use for use in map(index.parent, attribute_names(index, name))
            if isinstance(use, cst.Attribute) and dotted_name(use.value) in ("self", "cls")] \
        if is_method else name_reads(index, name)
    if any(not (isinstance(index.parent(use), cst.Call) and index.parent(use).func is use) for use in uses):
        return False  # handed on here (returned, a callback): it may run anywhere
    project = project_of(index)
    return project.runs_single_process_only(project.function_key(index.path, function_key(index, function)))


def _in_single_process_arm(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """The innermost arm of a distribution test decides: the ``elif parallel ==
    "FSDP":`` arm of ``if parallel == "DDP": ... elif parallel == "FSDP": ...``
    is distributed, though it is also the ``else`` of the DDP test."""
    child: cst.CSTNode = node
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, (cst.If, cst.IfExp)):
            polarity = flag_polarity(index, ancestor.test)
            if polarity is not None:
                if (child is ancestor.body and polarity is False) or (child is ancestor.orelse and polarity is True):
                    return True
                if child is ancestor.body and polarity is True:
                    return False
        child = ancestor
    return False


def _in_single_process_function(index: SemanticIndex, node: cst.CSTNode, depth: int) -> bool:
    function = next((a for a in index.ancestors(node) if isinstance(a, cst.FunctionDef)), None)
    if function is None or depth > 3:
        return False
    key = ("roles.single_process_function", id(function))
    if key not in index.cache:
        index.cache[key] = False  # a recursive call does not decide
        index.cache[key] = _called_from_single_process_only(index, function, depth)
    return index.cache[key]


def _called_from_single_process_only(index: SemanticIndex, function: cst.FunctionDef, depth: int) -> bool:
    """Is every use of ``function`` a call from single-process code of this
    module (``if use_ddp: self.training_loop_ddp(...) else:
    self.training_loop_single(...)``), with at least one such call? A method
    counts every ``.name`` of the module, whatever the receiver; no other
    module of the project may call the name, and a decorated function (a
    route, a hook, an entry point) may run from anywhere."""
    from ddplint.analysis.models import project_of
    from ddplint.analysis.values import attribute_names, name_reads

    name = function.name.value
    if function.decorators or name.startswith("__"):
        return False
    project = project_of(index)
    is_method = isinstance(index.parent(index.parent(function)), cst.ClassDef)
    if any(path != index.path and name in module.call_names
           and _may_call_project_name(project, module, name, is_method, (index.path, name))
           for path, module in project.modules.items()):
        return False
    # A method's uses are the ``x.name`` attributes of the module, whatever ``x``; a function's, its name.
    uses = [index.parent(n) for n in attribute_names(index, name)] if is_method else name_reads(index, name)
    if not uses:
        return False
    for use in uses:
        call = index.parent(use)
        if not (isinstance(call, cst.Call) and call.func is use):
            return False  # handed on (a callback, a spawn target): it may run anywhere
        if not (_in_single_process_arm(index, call) or _in_single_process_function(index, call, depth + 1)):
            return False
    return True


def _may_call_project_name(project, module, name: str, is_method: bool, key=None) -> bool:
    """Does ``module`` call something named ``name`` that may be the project's
    (not ``mlflow.pyfunc.save_model(...)`` through an import from outside the
    project, nor the module's own ``main()`` when ``key`` is another module's
    ``main``)? A function's name handed to a call (``atexit.register(fn)``)
    counts; a method is handed on through an instance, which the facts record
    as a call."""
    calls = [call for call in module.calls if call.callee.split(".")[-1] == name]
    if not calls:
        if is_method:
            return False
        if key is not None and name not in module.imports and not module.star_imports:
            return False  # a bare name no import binds is not ours (``main = project / "main.py"``)
        return True  # a name handed on, or a library call the facts do not record
    for call in calls:
        if key is not None and not is_method:
            found = project.resolve_function(module.path, call.callee)
            if found is not None and found != key:
                continue  # names another function of the project (a104 SVDD2024: each script's ``main``)
        head = call.callee.split(".")[0]
        target = module.imports.get(head)
        if call.instance or "." not in call.callee or target is None \
                or project.resolve_module(module.path, target) is not None:
            return True
    return False


def call_made_single_process(index: SemanticIndex, call: cst.Call) -> bool:
    """Is ``call`` told to build for one process: a keyword argument
    ``local_rank=-1`` / ``world_size=1`` / ``distributed=False``, or a
    configuration switched to one process just before it in the same block
    (``cfg.backbone.num_gpus = 1`` then ``get_network(cfg.backbone)``;
    ``opts.distributed = False``)? A builder that
    wraps only for several processes returns the plain model there (OpenOOD's
    "don't wrap ddp here, we need to modify the backbone")."""
    if any(arg.keyword is not None and _single_process_argument(index, arg.keyword.value, arg.value)
           for arg in call.args):
        return True  # ``get_model(conf, n, local_rank=-1)``, ``build(cfg, distributed=False)``
    statement = next((a for a in index.ancestors(call) if isinstance(a, cst.SimpleStatementLine)), None)
    suite = index.parent(statement) if statement is not None else None
    if suite is None or not hasattr(suite, "body"):
        return False
    arguments = {dotted_name(arg.value) for arg in call.args if dotted_name(arg.value) is not None}
    for earlier in suite.body:
        if earlier is statement:
            return False
        for small in earlier.body if isinstance(earlier, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                    and isinstance(small.targets[0].target, cst.Attribute) \
                    and dotted_name(small.targets[0].target.value) in arguments \
                    and _switches_to_one_process(index, small.targets[0].target.attr.value, small.value):
                return True
    return False


def _single_process_argument(index: SemanticIndex, keyword: str, value: cst.BaseExpression) -> bool:
    """``local_rank=-1`` / ``rank=-1`` (torch.distributed.launch's "not distributed"),
    or a switch to one process (``_switches_to_one_process``)."""
    if keyword.lower() in _RANK_WORDS:
        return _signed_int(value) == -1
    return _switches_to_one_process(index, keyword, value)


def _switches_to_one_process(index: SemanticIndex, attribute: str, value: cst.BaseExpression) -> bool:
    """``num_gpus = 1``, ``world_size = 1``, ``distributed = False``."""
    lowered = attribute.lower()
    if lowered.replace("_", "") in _WORLD_WORDS:
        return literal_int(value) == 1
    return isinstance(value, cst.Name) and value.value == "False" and _names_distributed_switch(index, lowered)


# ---------------------------------------------------------------------- single-process helpers
# Parameters that make a trainer distributed: a world size whose default is 1,
# or a switch whose default is False.
_WORLD_SIZE_PARAMS = ("world_size", "worldsize", "nprocs", "num_processes", "num_gpus", "ngpus", "n_gpus")
_DDP_SWITCH_PARAMS = ("is_ddp", "ddp", "use_ddp", "distributed", "is_distributed", "multiprocessing_distributed")


def holds_single_process_trainer(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """``node`` is in a method of a class whose ``__init__`` builds a class of
    this module with its single-process defaults: ``self.model =
    Trainer(name=name)`` where ``Trainer.__init__(..., is_ddp=False, rank=0,
    world_size=1)`` and the call passes none of them (an inference helper such
    as a ``ModelLoader``: one process, one GPU)."""
    method = next((a for a in index.ancestors(node) if isinstance(a, cst.FunctionDef)), None)
    owner = index.parent(index.parent(method)) if method is not None else None
    if not isinstance(owner, cst.ClassDef):
        return False
    key = ("roles.single_process_trainer", id(owner))
    if key not in index.cache:
        index.cache[key] = _builds_single_process_trainer(index, owner)
    return index.cache[key]


def _builds_single_process_trainer(index: SemanticIndex, owner: cst.ClassDef) -> bool:
    init = next((f for f in index.functions_named("__init__") if index.parent(index.parent(f)) is owner), None)
    if init is None:
        return False
    classes = {c.name.value: c for c in index.classes}
    for site in index.calls:
        func = site.node.func
        if site.scope is not init or not isinstance(func, cst.Name) or func.value not in classes \
                or classes[func.value] is owner:
            continue
        built = next((f for f in index.functions_named("__init__")
                      if index.parent(index.parent(f)) is classes[func.value]), None)
        if built is not None and _left_single_process(built, site.node):
            return True
    return False


def _left_single_process(init: cst.FunctionDef, call: cst.Call) -> bool:
    """Does ``call`` of the class whose constructor is ``init`` leave every
    distributed parameter at a single-process default (at least one)?"""
    if any(arg.star for arg in call.args):
        return False
    params = [p for p in init.params.params][1:]  # after ``self``
    positional = sum(1 for arg in call.args if arg.keyword is None)
    passed = {arg.keyword.value for arg in call.args if arg.keyword is not None}
    switches = []
    for position, param in enumerate([*params, *init.params.kwonly_params]):
        name = param.name.value.lower()
        if name not in _WORLD_SIZE_PARAMS and name not in _DDP_SWITCH_PARAMS:
            continue
        default = param.default
        single = (name in _WORLD_SIZE_PARAMS and literal_int(default) == 1) or (
            name in _DDP_SWITCH_PARAMS and isinstance(default, cst.Name) and default.value == "False")
        if not single or param.name.value in passed or (position < len(params) and position < positional):
            return False
        switches.append(name)
    return bool(switches)


def overridden_for_ddp_importers(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """``node`` is in method ``M`` of class ``C`` of a module that is in DDP
    context only because DDP modules import it, and each of them imports ``C``
    alone, only to subclass it with classes that all override ``M`` (a
    single-GPU ``Predictor.predict_loop`` whose distributed users define their
    own): no DDP code reaches it; the module's own callers are single-process."""
    method = next((a for a in index.ancestors(node) if isinstance(a, cst.FunctionDef)), None)
    owner = index.parent(index.parent(method)) if method is not None else None
    if not isinstance(owner, cst.ClassDef) or index.parent(owner) is not index.module:
        return False
    key = ("roles.overridden", id(method))
    if key not in index.cache:
        index.cache[key] = _overridden_for_ddp_importers(index, owner.name.value, method.name.value)
    return index.cache[key]


def _overridden_for_ddp_importers(index: SemanticIndex, cls: str, method: str) -> bool:
    from ddplint.analysis.models import project_of

    project = project_of(index)
    importers = project.ddp_importers_only(index.path) if project.complete else None
    if not importers:
        return False
    for importer in importers:
        if importer.star_imports or importer.dynamic_imports:
            return False
        aliases = []
        for alias, target in importer.imports.items():
            if project.resolve_module(importer.path, target) == index.path:
                return False  # the whole module: any of its code may be reached
            holder, _, name = target.rpartition(".")
            if holder and project.resolve_module(importer.path, holder) == index.path:
                if name != cls:
                    return False
                aliases.append(alias)
        for alias in aliases:
            subclasses = [sub for sub, bases in importer.classes.items()
                          if any(base == alias or base.endswith("." + alias) for base in bases)]
            if not subclasses or any(f"{sub}.{method}" not in importer.functions
                                     or f"{sub}.{method}" in importer.super_calls for sub in subclasses):
                return False  # used as it is, or a subclass runs the method (inherited or through super())
            if any(call.callee == alias or call.callee.startswith(alias + ".") for call in importer.calls):
                return False
    return True


# ---------------------------------------------------------------------- classes nothing builds
_DISTRIBUTED_PREFIXES = ("torch.distributed", "torch.nn.parallel.DistributedDataParallel",
                         "torch.utils.data.distributed", names.DISTRIBUTED_SAMPLER)


def in_unbuilt_single_process_class(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """``node`` is in a method of a top-level class ``C`` that uses nothing of
    torch.distributed, in a module whose distributed code all sits in other
    classes (a ``BaseTrainer`` with ``DataParallel`` beside a
    ``Multi_BaseTrainer_dist``), and nothing in the (complete) project builds
    ``C`` or a project subclass of it: no call names one of them, no module reads
    one as a value (a registry, a factory argument) or decorates one, imports a
    module that holds one as a module object (``getattr(mod, name)``) or imports
    modules by computed name. Then no process runs it: its role is not a worker's."""
    method = next((a for a in index.ancestors(node) if isinstance(a, cst.FunctionDef)), None)
    owner = next((a for a in index.ancestors(method) if isinstance(a, cst.ClassDef)), None) \
        if method is not None else None
    if owner is None or index.parent(owner) is not index.module:
        return False
    key = ("roles.unbuilt_class", id(owner))
    if key not in index.cache:
        index.cache[key] = _unbuilt_single_process_class(index, owner)
    return index.cache[key]


def _distributed_owner(index: SemanticIndex, site: CallSite) -> Optional[cst.CSTNode]:
    """The top-level class holding a torch.distributed call (the module itself
    when the call is outside every class); None for other calls."""
    name = site.qualified_name or ""
    if not name.startswith(_DISTRIBUTED_PREFIXES):
        return None
    top = next((a for a in index.ancestors(site.node) if isinstance(a, cst.ClassDef)
                and index.parent(a) is index.module), None)
    return top if top is not None else index.module


def _unbuilt_single_process_class(index: SemanticIndex, owner: cst.ClassDef) -> bool:
    from ddplint.analysis.models import project_of

    if owner.decorators or is_test_module(index.path):
        return False
    owners = [o for o in (_distributed_owner(index, site) for site in index.calls) if o is not None]
    if not owners or any(o is owner or o is index.module for o in owners):
        return False  # the class itself (or module-level code) is distributed, or nothing is
    project = project_of(index)
    if not project.complete or index.path not in project.modules or len(project.modules) < 2:
        return False
    built = {owner.name.value}
    holders = {index.path}
    for _ in range(6):  # project subclasses, by name (a superset), a few generations deep
        grown = False
        for path, module in project.modules.items():
            local = built | {alias for alias, target in module.imports.items() if target.split(".")[-1] in built}
            for cls, bases in module.classes.items():
                if cls not in built and any(base.split(".")[-1] in local for base in bases):
                    built.add(cls.split(".")[-1])
                    holders.add(path)
                    grown = True
        if not grown or len(built) > 40:
            break
    if len(built) > 40 or any(not name[:1].isupper() for name in built):
        return False  # too many to follow, or a name the value facts do not record
    for _ in range(4):  # packages that re-export a holder (``from .base_trainer import *``)
        more = {path for path, module in project.modules.items() if path not in holders
                and any(project.resolve_module(path, target) in holders for target in module.star_imports)}
        if not more:
            break
        holders |= more
    dotted = [holder[:-3].replace(os.sep, ".").replace("/", ".").removesuffix(".__init__") for holder in holders]
    for path, module in project.modules.items():
        if any(fnmatch.fnmatchcase(name, pattern.lstrip(".")) or fnmatch.fnmatchcase(name, "*." + pattern.lstrip("."))
               for pattern in module.dynamic_imports for name in dotted):
            return False  # ``import_module(f"pkg.{name}")`` may load a holder
        local = built | {alias for alias, target in module.imports.items() if target.split(".")[-1] in built}
        if local & module.call_names or local & module.class_values:
            return False
        if any(project.resolve_module(path, target) in holders for target in module.imports.values()):
            return False  # a holder imported as a module object: its classes may be built by name
    return True


# ---------------------------------------------------------------------- functions nothing runs
def in_function_nothing_runs(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """``node`` is in a top-level function (or a method of a top-level class)
    of a library module of a (complete) project (no ``__main__`` block, no
    module-level call of it), that nothing in the project runs: no module calls
    it, hands it on or names it as a callee (``Project.may_run``), and it is not
    decorated (a registry, a route, an entry point). An offline utility beside
    the training helpers (``def mix_model(paths): torch.load(...)`` in a
    ``utils.py`` nobody calls it from) is no DDP worker's code. A module that
    defines the function and runs on its own (a single-file script, a snippet)
    is not judged so: its entry may be the function."""
    function = _outermost_function(index, node)
    if function is None:
        return False
    key = ("roles.nothing_runs", id(function))
    if key not in index.cache:
        index.cache[key] = _nothing_runs(index, function)
    return index.cache[key]


def _outermost_function(index: SemanticIndex, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
    functions = [a for a in index.ancestors(node) if isinstance(a, cst.FunctionDef)]
    return functions[-1] if functions else None


def _nothing_runs(index: SemanticIndex, function: cst.FunctionDef) -> bool:
    from ddplint.analysis.models import function_key, project_of

    parent = index.parent(function)
    owner = parent if parent is index.module else index.parent(parent)
    if function.decorators or function.name.value.startswith("__") or is_test_module(index.path):
        return False
    if owner is not index.module and not (isinstance(owner, cst.ClassDef) and index.parent(owner) is index.module
                                          and not owner.bases and not owner.decorators):
        return False  # nested in a class that may be a framework's (its hooks run by name)
    project = project_of(index)
    if not project.complete or index.path not in project.modules:
        return False
    if _has_main_block(index):
        # An entry script runs what its ``__main__`` block reaches: a top-level function that
        # nothing names (``pre_generate_labels`` beside ``mp.spawn(main, ...)``) never runs,
        # unless the block dispatches by name (``fire.Fire()``, ``globals()[cmd]``; a102 BaamPark).
        return owner is index.module and not _dispatches_by_name(index) \
            and not _may_be_imported_by_name(project, index.path) \
            and not _function_referenced(index, project, function.name.value)
    if len(project.modules) < 2 or _may_be_imported_by_name(project, index.path):
        return False
    if owner is index.module:
        return not _function_referenced(index, project, function.name.value)
    return not project.may_run(index.path, function_key(index, function))


def _dispatches_by_name(index: SemanticIndex) -> bool:
    """Does the module look its functions up by name (``fire.Fire()``, ``globals()``,
    ``getattr(sys.modules[__name__], ...)``, ``locals()``)?"""
    text = index.source
    return any(word in text for word in ("Fire(", "globals()", "locals()", "sys.modules", "vars()"))


def _function_referenced(index: SemanticIndex, project, name: str) -> bool:
    """Does anything in the project call or name the top-level function
    ``name`` of this module: a project call linked to it (``utils.load(...)``
    through a module import, ``load(...)`` through a name import), a read of
    the name in this module, an import of it by name, or its name among the
    calls and call arguments of a module that imports this module with ``*``?
    A library's ``torch.load`` elsewhere is no use of ``load``."""
    from ddplint.analysis.values import name_reads

    if project.callers.get((index.path, name)) or project.weak_callers.get((index.path, name)) \
            or name_reads(index, name):
        return True
    for path, module in project.modules.items():
        if path == index.path:
            continue
        if name in module.call_names and any(project.resolve_module(path, target) == index.path
                                             for target in module.star_imports):
            return True
        for target in module.imports.values():
            holder, _, last = target.rpartition(".")
            if last == name and holder and project.resolve_module(path, holder) == index.path:
                return True
    return False


def _may_be_imported_by_name(project, path: str) -> bool:
    """May a computed import (``import_module(f"trainers.{name}")``) load module
    ``path``, whose functions are then looked up by name?"""
    dotted = path[:-3].replace(os.sep, ".").replace("/", ".").removesuffix(".__init__")
    return any(fnmatch.fnmatchcase(dotted, pattern.lstrip("."))
               or fnmatch.fnmatchcase(dotted, "*." + pattern.lstrip("."))
               for module in project.modules.values() for pattern in module.dynamic_imports)


def _has_main_block(index: SemanticIndex) -> bool:
    return any(isinstance(statement, cst.If) and _is_main_test(statement.test) for statement in index.module.body)


# ---------------------------------------------------------------------- self-test blocks
def in_standalone_main_block(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """Code under ``if __name__ == "__main__":`` of a module that is in DDP
    context only because a DDP module imports it (a layer's self-test or
    benchmark): it runs when the file is executed on its own, never inside the
    DDP job that imports it."""
    block = next((a for a in index.ancestors(node) if isinstance(a, cst.If) and _is_main_test(a.test)), None)
    if block is None or index.parent(block) is not index.module:
        return False
    return not _own_ddp_context(index) or not _main_block_starts_processes(index, block)


# Calls that start, or join, a distributed run (``torch.multiprocessing.spawn`` and friends
# are told by is_spawn_call).
_LAUNCHER_NAME = re.compile(r"init_dist|dist_init|setup_dist|launch|spawn|start_processes", re.IGNORECASE)
_STARTING_PREFIXES = ("torch.distributed", "deepspeed", "accelerate", "lightning", "pytorch_lightning", "horovod")


def entry_script_starts_processes(index: SemanticIndex) -> bool:
    """Is the module an entry script whose ``__main__`` block starts the
    distributed run (itself or through what it calls)?"""
    block = next((statement for statement in index.module.body if isinstance(statement, cst.If)
                  and _is_main_test(statement.test)), None)
    return block is not None and _main_block_starts_processes(index, block)


def _main_block_starts_processes(index: SemanticIndex, block: cst.If) -> bool:
    """A data module's ``__main__`` self-check runs as one process: nothing at
    module level or in the block starts a process group or workers, neither
    directly nor through the functions it calls (this module's, followed, and
    the project's, by their facts). A call we cannot see into does not start one."""
    key = ("roles.main_starts", id(block))
    if key not in index.cache:
        outside = [site for site in index.calls
                   if site.scope is index.module and _main_block_of(index, site.node) is None]
        inside = [site for site in index.calls if any(a is block for a in index.ancestors(site.node))]
        index.cache[key] = _sites_start_processes(index, outside + inside, set(), 0)
    return index.cache[key]


def _sites_start_processes(index: SemanticIndex, sites: list, seen: set, depth: int) -> bool:
    from ddplint.analysis.models import project_of

    project = project_of(index)
    for site in sites:
        qualified = site.qualified_name or ""
        if qualified.startswith(_STARTING_PREFIXES) or qualified in (names.DDP, names.FSDP) \
                or is_spawn_call(index, site):
            return True
        callee = dotted_name(site.node.func)
        if callee is None:
            continue
        if _LAUNCHER_NAME.search(callee.rsplit(".", 1)[-1]):
            return True  # ``init_dist(launcher)`` of a library, ``launch(main, ...)``: a distributed run
        local = next((f for f in index.functions_named(callee) if index.parent(f) is index.module), None)
        if local is not None:
            if id(local) not in seen and depth < 5:
                seen.add(id(local))
                body = [other for other in index.calls if any(a is local for a in index.ancestors(other.node))]
                if _sites_start_processes(index, body, seen, depth + 1):
                    return True
            continue
        resolved = project.resolve_function(index.path, callee, index.imports)
        if resolved is not None and project.reaches_group_start(resolved):
            return True
    return False


def _is_main_test(test: cst.BaseExpression) -> bool:
    return isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name) and test.left.value == "__name__" \
        and len(test.comparisons) == 1 and literal_str(test.comparisons[0].comparator) == "__main__"


def _own_ddp_context(index: SemanticIndex) -> bool:
    """The module's own DDP context (its imports and calls), without the project's."""
    for target in (*index.imports.values(), *index.imported_modules):
        canonical = names.canonical(target)
        if canonical.startswith("torch.distributed") or canonical in (names.DDP, names.FSDP):
            return True
    return bool(index.calls_to(names.INIT_PROCESS_GROUP, names.DDP, names.FSDP, names.FULLY_SHARD,
                               names.DISTRIBUTED_SAMPLER))


# ---------------------------------------------------------------------- unit tests
# Keywords that give the number of processes / devices of a run.
_DEVICE_COUNT_KEYWORDS = ("devices", "gpus", "num_processes", "nprocs", "nproc_per_node", "world_size",
                          "num_gpus", "n_gpus", "num_devices")
_DISTRIBUTED_STRATEGY = re.compile(r"ddp|fsdp|deepspeed|horovod|model_?parallel|megatron|xla", re.IGNORECASE)
# Decorators / markers that say a test needs several GPUs or processes.
_MULTI_DEVICE_MARKERS = re.compile(
    r"multi_?gpu|multi_?device|multi_?process|multi_?node|distributed|require_(torch_)?multi|skip_if_lt_x_gpu",
    re.IGNORECASE)
_GPU_COUNT_KEYWORD = re.compile(r"(min|num|n)_?(cuda_)?(gpus|devices|processes|world_size)$")


def test_function_role(index: SemanticIndex, node: cst.CSTNode) -> Optional[str]:
    """In a unit-test module, the role of code written directly in a test
    function (``def test_*``), decided from that function alone: LAUNCHER when it
    spawns workers itself, WORKER when it sets up or joins a multi-process run,
    SINGLE_PROCESS otherwise. None outside test modules and test functions
    (helpers and nested worker functions keep the ordinary roles)."""
    if not is_test_module(index.path):
        return None
    function = index.enclosing_scope(node)
    if not isinstance(function, cst.FunctionDef) or not function.name.value.startswith("test"):
        return None
    key = ("roles.test", id(function))
    if key not in index.cache:
        index.cache[key] = _test_role(index, function)
    return index.cache[key]


def _test_role(index: SemanticIndex, function: cst.FunctionDef) -> str:
    sites = [site for site in index.calls if site.scope is function]
    if any(is_spawn_call(index, site) for site in sites):
        return LAUNCHER
    if any(_marks_multi_device(index, d.decorator) for d in function.decorators):
        return WORKER
    distributed = (names.INIT_PROCESS_GROUP, names.DDP, names.FSDP, names.FULLY_SHARD)
    for site in sites:
        if site.qualified_name in distributed or site.method == "launch":
            return WORKER
        if _configures_several_processes(site):
            return WORKER
    return SINGLE_PROCESS


def _marks_multi_device(index: SemanticIndex, decorator: cst.BaseExpression) -> bool:
    """``@require_multi_gpu``, ``@pytest.mark.distributed``, ``@skip_if_lt_x_gpu(2)``,
    ``@RunIf(min_cuda_gpus=2)``."""
    call = decorator if isinstance(decorator, cst.Call) else None
    name = dotted_name(call.func if call is not None else decorator) or ""
    if _MULTI_DEVICE_MARKERS.search(name.split(".")[-1]):
        if call is None or not call.args:
            return True
        count = literal_int(call.args[0].value)
        return count is None or count > 1
    if call is not None:
        for arg in call.args:
            if arg.keyword is not None and _GPU_COUNT_KEYWORD.search(arg.keyword.value):
                count = literal_int(arg.value)
                if count is not None and count > 1:
                    return True
    return False


def _configures_several_processes(site: CallSite) -> bool:
    """``Fabric(devices=2)``, ``Trainer(strategy="ddp")``, ``Accelerator(num_processes=4)``,
    ``FSDPStrategy(...)`` / ``DDPStrategy(...)``."""
    callee = (dotted_name(site.node.func) or "").split(".")[-1]
    if callee.endswith(("Strategy", "Plugin")) and _DISTRIBUTED_STRATEGY.search(callee):
        return True
    for arg in site.node.args:
        if arg.keyword is None:
            continue
        keyword, value = arg.keyword.value, arg.value
        if keyword in _DEVICE_COUNT_KEYWORDS:
            count = literal_int(value)
            if count is not None and count > 1:
                return True
            if isinstance(value, (cst.List, cst.Tuple)) and len(value.elements) > 1:
                return True
            text = literal_str(value)
            if text is not None and ("," in text or (text.strip().isdigit() and int(text) > 1)):
                return True
        if keyword == "strategy":
            text = literal_str(value)
            if text is not None and _DISTRIBUTED_STRATEGY.search(text):
                return True
    return False


# ---------------------------------------------------------------------- rank zero
def runs_on_rank_zero_only(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """Does ``node`` run on rank 0 alone (local or global rank 0: the process
    that owns device 0)? ``if rank == 0:``, ``if is_main_process():``,
    ``if fabric.global_rank == 0:``, the ``else`` of ``if rank != 0:``, the
    statements after ``if rank > 0: return``, a ``@rank_zero_only`` function,
    a function whose every call in the project runs under a rank guard
    (``Project.callers_guarded``: the guard's polarity is not checked there)."""
    from ddplint.analysis import ranks

    for guard in ranks.rank_guards(index, node, lenient=True):
        side = zero_side(index, guard.node.test)
        if side is True and guard.branch == "body" or side is False and guard.branch != "body":
            return True
    function = ranks.enclosing_function(index, node)
    if function is None:
        return False
    if ranks.has_rank_zero_decorator(function, index):
        return True
    # Every call of the enclosing function (project-wide) runs under a rank guard:
    # ``if rank == 0: evaluate(...)`` with the literal inside ``evaluate``.
    from ddplint.analysis.models import function_key, project_of

    return project_of(index).callers_guarded(index.path, function_key(index, function)) is True


def _subgroup_rank_call(expr: cst.BaseExpression) -> bool:
    """``grp.rank()``, ``smp.dp_rank()``: a rank inside some group, a rank
    condition but not the process that owns device 0."""
    if not isinstance(expr, cst.Call):
        return False
    from ddplint.analysis.ranks import _RANK_GETTERS

    last = (dotted_name(expr.func) or "").split(".")[-1]
    return last not in _RANK_GETTERS and names.RANK_NAME.match(last) is not None


def tests_subgroup_rank(test: cst.CSTNode) -> bool:
    """Does the rank test read a rank inside some group (``smp.dp_rank() != 0``,
    ``grp.rank() == 0``)? Its ranks are not singled out of the whole job."""
    stack = [test]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.BaseExpression) and _subgroup_rank_call(node):
            return True
        stack.extend(node.children)
    return False


def zero_side(index: SemanticIndex, test: cst.BaseExpression, depth: int = 0) -> Optional[bool]:
    """True when ``test`` holds on rank 0 only, False when it holds on every
    rank but 0, None when it says neither."""
    from ddplint.analysis import ranks

    if depth > 4:
        return None
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = zero_side(index, test.expression, depth + 1)
        if inner is None and ranks.is_rank_value(index, test.expression, lenient=True):
            return True  # ``if not rank:``
        return None if inner is None else not inner
    if isinstance(test, cst.BooleanOperation):
        sides = [zero_side(index, o, depth + 1) for o in (test.left, test.right)]
        if isinstance(test.operator, cst.And):
            return True if True in sides else None  # ``rank == 0 and save``
        return False if False in sides else None  # ``rank != 0 or skip``
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        left, right, operator = test.left, target.comparator, type(target.operator)
        if literal_int(left) == 0:
            left, right = right, left
            operator = _MIRRORED.get(operator, operator)
        if not ranks.is_rank_value(index, left, lenient=True) or _subgroup_rank_call(left):
            return None
        if literal_int(right) == 0:
            if operator is cst.Equal or operator is cst.LessThanEqual:
                return True
            if operator in (cst.NotEqual, cst.GreaterThan):
                return False
            return None
        if operator is cst.In and isinstance(right, (cst.List, cst.Tuple, cst.Set)):
            values = {_signed_int(e.value) for e in right.elements}
            return True if values and values <= {0, -1} and 0 in values else None
        return None
    if isinstance(test, cst.Call):
        return True if ranks.is_rank_predicate_call(index, test) else None
    name = dotted_name(test)
    if name is not None:
        last = name.split(".")[-1]
        if last in names.RANK_PREDICATES or last in ("is_global_zero", "is_local_zero"):
            return True
        values = index.reaching_values(test) if isinstance(test, cst.Name) else None
        if values:
            sides = {zero_side(index, v, depth + 1) for v in values if not _is_bool(v)}
            if sides == {True} or sides == {False}:
                return sides == {True}
        if ranks.is_rank_value(index, test):
            return False  # ``if self.rank:`` (truthy): every rank but 0; its else runs on rank 0
    return None


def _is_bool(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value in ("True", "False")


# ---------------------------------------------------------------------- callers
def run_by_single_process_scripts_only(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """Does the function around ``node`` run only from scripts that are no DDP
    workers? Every known project call of it sits at module level in a module
    outside the DDP context (an inference or benchmark script that never imports
    torch.distributed nor a DDP module), or in a function of such a module whose
    own calls do (followed a few levels). Without any known call: False."""
    from ddplint.analysis.models import function_key, project_of
    from ddplint.analysis.ranks import enclosing_function

    function = enclosing_function(index, node)
    if function is None:
        return False
    project = project_of(index)
    return _single_process_calls(project, project.function_key(index.path, function_key(index, function)), {}, 0)


def _single_process_calls(project, key, seen: dict, depth: int) -> bool:
    calls = project.callers.get(key)
    if not calls and depth > 0:
        # a function that nothing calls, of a script outside the DDP context that no module imports
        # (a110 RocWeather's evaluation script); a library module's may be called from anywhere (a
        # dataset class built through a registry, a101 HeltonPretrain)
        return not project.reached_by(key[0])
    if key in seen:
        return seen[key]  # (two calls from one caller ask about it twice; a cycle does not decide)
    if not calls or depth > 3:
        return False
    seen[key] = True
    seen[key] = _callers_single_process(project, key, calls, seen, depth)
    return seen[key]


def _callers_single_process(project, key, calls, seen: dict, depth: int) -> bool:
    for caller_path, call in calls:
        if call.single_process and caller_path != key[0]:
            continue  # ``if args.local_rank == -1: loader = get_dataloader(...)`` in another module
        # A call from the function's own (DDP) module counts against; deeper, the
        # module was already found outside the DDP context (``run()`` in its main block).
        if (depth == 0 and caller_path == key[0]) or project.module_in_ddp_context(caller_path) \
                or _drives_distributed_code(project, caller_path):
            return False
        if call.args.get("0") == SPAWN_INDEX:
            return False  # ``mp.spawn(loader.worker, ...)``: it runs in every worker process
        if call.caller and not _single_process_calls(project, project.function_key(caller_path, call.caller),
                                                     seen, depth + 1):
            return False
    return True


def _drives_distributed_code(project, path: str) -> bool:
    """Does module ``path`` import torch.distributed and use it (RULES.md's DDP context,
    which the project's facts leave to calls; an import nothing reads runs no worker,
    a55 PyTorch-DDP-demo's single-process ``main.py``), or call a project function that
    initialises the process group (``setup_launch(cfg)`` of a utils module)?
    An entry script that does runs as a worker."""
    module = project.modules.get(path)
    return module is None or module.uses_torch_distributed or project.starts_process_group(path)


def spawned_through_a_parameter(index: SemanticIndex, function: cst.FunctionDef) -> bool:
    """Is ``function`` handed by name to a function of this module whose parameter is the
    target of a spawn there (``def run(fn, world_size): mp.spawn(fn, nprocs=world_size)`` ...
    ``run(train, world_size)``; ``Process(target=fn)``)? Then every worker process runs it.
    One hop, this module only; memoised per index."""
    memo = index.cache.setdefault("spawned_through_a_parameter", {})
    if id(function) not in memo:
        memo[id(function)] = (function, _spawned_through_a_parameter(index, function))
    return memo[id(function)][1]


def _spawned_through_a_parameter(index: SemanticIndex, function: cst.FunctionDef) -> bool:
    spawners = _parameter_spawners(index)
    name = function.name.value
    if index.enclosing_scope(function) is not index.module:
        return False
    for site in index.calls:
        spawner = spawners.get(dotted_name(site.node.func) or "")
        if spawner is None:
            continue
        params, spawned = spawner
        for position, arg in enumerate(site.node.args):
            if not (isinstance(arg.value, cst.Name) and arg.value.value == name) or arg.star:
                continue
            param = arg.keyword.value if arg.keyword is not None else (
                params[position] if position < len(params) else None)
            if param in spawned and index.reaching(name, arg.value) \
                    and all(b.kind == "def" and (b.node is function or b.node is function.name)
                            for b in index.reaching(name, arg.value)):
                return True
    return False


def _parameter_spawners(index: SemanticIndex) -> dict[str, tuple[list[str], set[str]]]:
    """Module-level functions that spawn one of their parameters: name -> (positional
    parameter names, the spawned parameters)."""
    cached = index.cache.get("parameter_spawners")
    if cached is not None:
        return cached
    found: dict[str, tuple[list[str], set[str]]] = {}
    for site in index.calls:
        if not is_spawn_call(index, site):
            continue
        target = site.argument("fn", 0) if site.method in ("spawn", "start_processes") else site.keyword("target")
        owner = index.enclosing_scope(site.node)
        if target is None or not isinstance(target.value, cst.Name) or not isinstance(owner, cst.FunctionDef) \
                or index.enclosing_scope(owner) is not index.module:
            continue
        params = [p.name.value for p in owner.params.params]
        if target.value.value in params + [p.name.value for p in owner.params.kwonly_params]:
            entry = found.setdefault(owner.name.value, (params, set()))
            entry[1].add(target.value.value)
    index.cache["parameter_spawners"] = found
    return found
