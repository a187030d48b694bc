"""Rank conditions: tests whose outcome can differ across ranks (RULES.md).

``is_rank_condition(index, test)`` answers RULES.md's definition:

- a comparison of a rank value with something: ``rank == 0``,
  ``local_rank in [-1, 0]``, ``dist.get_rank() == 0``, ``args.rank % ngpus == 0``
  (but ``local_rank == -1`` / ``!= -1`` only says whether the run is distributed:
  it is the same on every rank, so it is not a rank condition);
- a rank predicate: ``is_main_process()``, ``accelerator.is_main_process``,
  ``trainer.is_global_zero``, a local helper whose body returns a rank test, or
  (project analysis) such a helper defined in another module;
- a name bound from such a test (``master_process = ddp_rank == 0``);
- (lenient) an attribute that every assignment of the project sets to a rank
  test or, under a rank guard, to a boolean (``if opt.log:`` after a set-up
  helper ran ``opt.log = opt.rank % ngpus == 0``: ``Project.is_rank_flag_attribute``);
- a rank value is also a parameter, a ``**kwargs`` key or a ``self`` attribute
  stored from one that every call site of the project fills with a rank
  (``Runner(gpu_index=opt.local_rank)`` ... ``if self.gpu_index == 0:``);
- ``not``/``and``/``or`` of tests where one operand is a rank condition.

``world_size > 1``, epoch and step counters are not rank conditions.

``rank_guards(index, node)`` then says which rank-condition ``if``s guard a node
and in which branch, including the "early exit" form
``if rank != 0: return`` followed by the guarded statements.

``lenient=True`` also accepts tests on names that are usually the process index
(``args.gpu == 0`` in ``mp.spawn`` workers). Rules for which a missed guard means
a false report (DDP011: "is this save guarded?") use it; rules for which a guard
means a report (DDP010) use the strict form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator, Optional, Union

import libcst as cst

from ddplint import names
from ddplint.names import RANK_NAME, RANK_PREDICATES, RANK_VARIABLES, RANK_ZERO_DECORATORS  # noqa: F401
from ddplint.analysis.values import environ_key, literal_int, literal_str
from ddplint.analysis.semantic import SemanticIndex, dotted_name

# Functions returning the rank (``get_rank()`` helpers wrap ``dist.get_rank``).
_RANK_GETTERS = ("get_rank", "get_local_rank", "get_global_rank", "get_node_local_rank", "get_world_rank")
# Lenient mode: names that are the process index in ``mp.spawn`` workers.
_PROCESS_INDEX_NAMES = ("gpu", "gpu_id", "device_id", "proc_id", "process_id", "local_gpu", "dev_id", "gpu_index",
                        "gpu_idx")

Conditional = Union[cst.If, cst.IfExp]


@dataclass(frozen=True)
class Guard:
    """A rank condition that guards a node: the test's owner and the branch."""

    node: cst.CSTNode = field(repr=False)  # the If / IfExp, or the early-exit If before the node
    branch: str  # "body", "orelse" or "after" (statements after ``if ...: return``)


# ---------------------------------------------------------------------- values
def is_rank_value(index: SemanticIndex, expr: cst.BaseExpression, lenient: bool = False,
                  depth: int = 0) -> bool:
    """Does ``expr`` hold a rank (global or local) or a value derived from one?"""
    if depth > 4:
        return False
    if isinstance(expr, cst.Call):
        if environ_key(index, expr) in RANK_VARIABLES:
            return True
        if isinstance(expr.func, cst.Name) and expr.func.value in ("int", "str") and expr.args:
            return is_rank_value(index, expr.args[0].value, lenient, depth + 1)
        callee = index.qualified_name(expr.func) or ""
        if callee == names.GET_RANK or callee.startswith("torch.distributed.get_node_local_rank"):
            return True
        method = dotted_name(expr.func)
        last = method.split(".")[-1] if method is not None else ""
        return last in _RANK_GETTERS or RANK_NAME.match(last) is not None  # ``smp.dp_rank()``, ``group.rank()``
    if isinstance(expr, cst.Subscript):
        if environ_key(index, expr) in RANK_VARIABLES:
            return True
        # ``config["rank"]``, ``args["local_rank"]``: a rank kept in a dict
        key = expr.slice[0].slice if len(expr.slice) == 1 else None
        text = literal_str(key.value) if isinstance(key, cst.Index) else None
        if text is not None and RANK_NAME.match(text) is not None:
            return True
        return text is not None and _keyword_filled_with_rank(index, expr.value, text)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Modulo, cst.FloorDivide)):
        # ``args.rank % ngpus_per_node`` is the local rank.
        return is_rank_value(index, expr.left, lenient, depth + 1)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        # ``args.world_id * args.num_gpu + args.local_rank``: the global rank, spelled out
        sides = (expr.left, expr.right)
        return any(isinstance(side, cst.BinaryOperation) and isinstance(side.operator, cst.Multiply)
                   for side in sides) and any(is_rank_value(index, side, lenient, depth + 1) for side in sides)
    name = dotted_name(expr)
    if name is None:
        return False
    last = name.split(".")[-1]
    if RANK_NAME.match(last):
        return True
    if lenient and last.lower() in _PROCESS_INDEX_NAMES:
        return True
    values = index.reaching_values(expr) if isinstance(expr, cst.Name) else None
    if values:
        return all(is_rank_value(index, v, lenient, depth + 1) for v in values)
    if isinstance(expr, cst.Name):
        return _parameter_filled_with_rank(index, expr)
    return isinstance(expr, cst.Attribute) and _attribute_holds_rank(index, expr, name, lenient, depth)


# Project tags (``ddplint.screen.facts``) of values that are a rank.
_RANK_TAGS = frozenset({"global_rank", "local_rank", "argv_local_rank", "spawn_index"})


def _parameter_filled_with_rank(index: SemanticIndex, expr: cst.Name) -> bool:
    """``def fit(gpu_index): ... if gpu_index == 0:`` where every call site of
    the project passes a rank (``fit(args.local_rank)``, ``mp.spawn(fit)``)."""
    tags = _parameter_tags(index, expr)
    return bool(tags) and tags <= _RANK_TAGS


def _parameter_tags(index: SemanticIndex, expr: cst.Name) -> Optional[frozenset[str]]:
    """What the project's call sites pass for the parameter ``expr`` names (its
    only reaching binding), or None when it is no parameter or no call is known."""
    from ddplint.analysis.models import parameter_values

    bindings = index.reaching(expr.value, expr)
    if len(bindings) != 1 or bindings[0].kind != "param":
        return None
    return parameter_values(index, bindings[0])


def _first_gpu(index: SemanticIndex, expr: cst.BaseExpression) -> bool:
    """``"cuda:0"``, ``torch.device("cuda:0")``, ``torch.device("cuda", 0)``: a
    device compared with it tells the process on GPU 0 (a process-index test,
    lenient like ``args.gpu == 0``)."""
    if isinstance(expr, cst.Call) and index.qualified_name(expr.func) == "torch.device" and expr.args:
        values = [arg.value for arg in expr.args]
        return (len(values) == 1 and literal_str(values[0]) == "cuda:0") or (
            len(values) == 2 and literal_str(values[0]) == "cuda" and literal_int(values[1]) == 0)
    return literal_str(expr) == "cuda:0"


def _parameter_filled_with_rank_flag(index: SemanticIndex, expr: cst.Name) -> bool:
    """``def train(rank, flags, verbose): ... if verbose:`` where every call site
    of the project passes a rank test's outcome (``FLAGS.verbose = dist.get_rank()
    == 0; train(..., FLAGS.verbose)``)."""
    from ddplint.screen.facts import RANK_FLAG

    return _parameter_tags(index, expr) == frozenset({RANK_FLAG})


def _keyword_filled_with_rank(index: SemanticIndex, holder: cst.BaseExpression, key: str) -> bool:
    """``kwargs["gpu_index"]`` where ``kwargs`` is the ``**`` parameter of the
    enclosing function and every call site of the project passes a rank as
    ``gpu_index=`` (``Runner(gpu_index=opt.local_rank)``)."""
    from ddplint.analysis.models import function_key, project_of

    if not isinstance(holder, cst.Name):
        return False
    function = index.enclosing_scope(holder)
    if not isinstance(function, cst.FunctionDef) or not isinstance(function.params.star_kwarg, cst.Param) \
            or function.params.star_kwarg.name.value != holder.value:
        return False
    tags = project_of(index).param_values(index.path, function_key(index, function), key)
    return bool(tags) and tags <= _RANK_TAGS


def _attribute_holds_rank(index: SemanticIndex, expr: cst.Attribute, name: str, lenient: bool,
                          depth: int) -> bool:
    """``self.gpu_index`` whose every assignment stores a rank value
    (``self.gpu_index = kwargs["gpu_index"]``, filled with a rank by the callers)."""
    if not name.startswith("self.") or name.count(".") != 1:
        return False
    bindings = [b for b in index.visible_bindings(name, expr) or [] if b.kind in ("assign", "annassign")]
    return bool(bindings) and all(b.value is not None and is_rank_value(index, b.value, lenient, depth + 1)
                                  for b in bindings)


def _is_minus_one(expr: cst.BaseExpression) -> bool:
    return (isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus)
            and literal_int(expr.expression) == 1)


def _is_distributed_flag_test(comparison: cst.Comparison) -> bool:
    """``local_rank == -1``, ``!= -1``, ``>= 0``, ``< 0``, ``is None``: these test
    "distributed or not", which is the same on every rank."""
    if len(comparison.comparisons) != 1:
        return False
    target = comparison.comparisons[0]
    operator, value = target.operator, target.comparator
    if isinstance(value, cst.Name) and value.value == "None":
        return isinstance(operator, (cst.Is, cst.IsNot, cst.Equal, cst.NotEqual))
    if _is_minus_one(value):
        return isinstance(operator, (cst.Equal, cst.NotEqual, cst.GreaterThan, cst.LessThanEqual))
    return literal_int(value) == 0 and isinstance(operator, (cst.GreaterThanEqual, cst.LessThan))


def is_shard_test(index: SemanticIndex, test: cst.BaseExpression) -> bool:
    """``i % world_size != rank``: work divided by rank, every rank takes part."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    left, right = test.left, test.comparisons[0].comparator
    modulo = (cst.Modulo,)
    return (isinstance(left, cst.BinaryOperation) and isinstance(left.operator, modulo)
            and is_rank_value(index, right)) or \
           (isinstance(right, cst.BinaryOperation) and isinstance(right.operator, modulo)
            and is_rank_value(index, left))


# ---------------------------------------------------------------------- conditions
def is_rank_condition(index: SemanticIndex, test: cst.BaseExpression, lenient: bool = False,
                      depth: int = 0) -> bool:
    """RULES.md's rank condition (see the module docstring)."""
    if depth > 6:
        return False
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return is_rank_condition(index, test.expression, lenient, depth + 1)
    if isinstance(test, cst.BooleanOperation):
        return (is_rank_condition(index, test.left, lenient, depth + 1)
                or is_rank_condition(index, test.right, lenient, depth + 1))
    if isinstance(test, cst.Comparison):
        if lenient and _nulled_off_main_test(index, test):
            return True  # ``if cfg.ckpt_dir is not None:`` where ranks but 0 set it to None
        if _is_distributed_flag_test(test):
            return False
        operands = [test.left] + [target.comparator for target in test.comparisons]
        if lenient and len(operands) == 2 and any(_first_gpu(index, operand) for operand in operands):
            return True  # ``torch.device(self.device) == torch.device("cuda:0")``: the process on GPU 0
        return any(is_rank_value(index, operand, lenient) for operand in operands)
    if isinstance(test, cst.Call):
        # (lenient) ``self._on_main_rank()``: a method of the class that returns a
        # process-index test (``torch.device(self.device) == torch.device("cuda:0")``)
        return is_rank_predicate_call(index, test, depth) or (
            lenient and isinstance(test.func, cst.Attribute) and _rank_property(index, test.func, depth, lenient))
    name = dotted_name(test)
    if name is not None:
        last = name.split(".")[-1]
        if is_function_object(index, test):
            return False  # ``if is_main_process:`` without a call: always true
        if "." in name and names.is_rank_predicate_name(last):  # accelerator.is_main_process
            return True
        # ``master_process = ddp_rank == 0`` (and ``= True`` in the single-process
        # branch); ``args.save_logs = args.logs and is_master(args)``.
        values = [v for v in index.reaching_values(test) or [] if not _is_boolean_literal(v)]
        if values:
            if lenient and all(_set_on_rank_subset_only(index, v, depth) for v in values):
                return True  # ``out_dir = args.out if rank == 0 else None`` ... ``if out_dir:``
            if all(is_rank_condition(index, v, lenient, depth + 1) for v in values):
                return True
            # ``rank = dist.get_rank()`` ... ``if rank:`` (truthy: every rank but 0)
            return lenient and is_rank_value(index, test)
        if names.is_rank_predicate_name(last):  # a parameter or a global named like the predicate
            return True
        if isinstance(test, cst.Name) and _parameter_filled_with_rank_flag(index, test):
            return True  # ``def train(..., verbose): if verbose:`` with ``train(..., dist.get_rank() == 0)``
        if isinstance(test, cst.Attribute) and _rank_property(index, test, depth):
            return True  # ``if self.should_save_on_this_rank:`` (a property returning a rank test)
        if isinstance(test, cst.Attribute) and all(_is_none(v) for v in values):
            from ddplint.analysis.models import project_of

            if project_of(index).is_switched_off_main(test.attr.value):
                return True  # ``if self.save_models:`` that set-up turns off on every rank but the main one
        if lenient and is_rank_value(index, test, lenient):
            return True  # ``if not rank:``
        if lenient and isinstance(test, cst.Attribute) and not values:
            from ddplint.analysis.models import project_of

            # ``if opt.log:`` where a set-up helper (here or in another module) ran
            # ``if opt.rank % ngpus == 0: opt.log = True else: opt.log = False``.
            project = project_of(index)
            return project.is_rank_flag_attribute(test.attr.value) or project.is_nulled_off_main(test.attr.value)
    return False


def _is_none(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"


def _nulled_off_main_test(index: SemanticIndex, comparison: cst.Comparison) -> bool:
    """``obj.attr is not None`` (``is None``, ``!=``/``==``) where the project sets
    ``obj.attr = None`` only on the ranks but 0 (``Project.is_nulled_off_main``)."""
    if len(comparison.comparisons) != 1 or not isinstance(comparison.left, cst.Attribute):
        return False
    target = comparison.comparisons[0]
    if not (isinstance(target.comparator, cst.Name) and target.comparator.value == "None"
            and isinstance(target.operator, (cst.Is, cst.IsNot, cst.Equal, cst.NotEqual))):
        return False
    from ddplint.analysis.models import project_of

    return project_of(index).is_nulled_off_main(comparison.left.attr.value)


def is_function_object(index: SemanticIndex, expr: cst.BaseExpression) -> bool:
    """Does ``expr`` name a function rather than call it: a ``def`` of this module,
    an imported name (``from utils import is_main_process``) or an attribute of
    an imported module (``utils.is_main_process``)? Such a test is always true."""
    name = dotted_name(expr)
    if name is None:
        return False
    if isinstance(expr, cst.Attribute):
        return names.is_rank_predicate_name(name.split(".")[-1]) and name.split(".")[0] in index.imports \
            and index.qualified_name(expr) is not None and not index.visible_bindings(name, expr)
    bindings = index.reaching(name, expr)
    return bool(bindings) and all(b.kind == "def" or (b.kind == "import" and names.is_rank_predicate_name(name))
                                  for b in bindings)


def _set_on_rank_subset_only(index: SemanticIndex, value: cst.BaseExpression, depth: int) -> bool:
    """``x if rank == 0 else None``: a value that is empty on every rank the test
    excludes (None, False, "", 0), so ``if x:`` holds on a subset of the ranks."""
    if not isinstance(value, cst.IfExp) or not is_rank_condition(index, value.test, True, depth + 1):
        return False
    return _is_empty_literal(value.orelse) or _is_empty_literal(value.body)


def _is_empty_literal(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.Name):
        return expr.value in ("None", "False")
    if isinstance(expr, cst.SimpleString):
        return expr.value in ('""', "''")
    return literal_int(expr) == 0


def is_rank_predicate_call(index: SemanticIndex, call: cst.Call, depth: int = 0) -> bool:
    """``is_main_process()``, ``utils.is_master()``, or a call of a helper (here or,
    with project analysis, in another module) whose body returns a rank test."""
    name = dotted_name(call.func)
    if name is None:
        return False
    last = name.split(".")[-1]
    if names.is_rank_predicate_name(last):
        return True
    if "." not in name and rank_predicate_function(index, last, depth):
        return True
    from ddplint.analysis.models import project_callee, project_of  # a text linted alone is a one-module project

    project = project_of(index)
    if project.is_rank_predicate(index.path, index.imports, name):
        return True
    # ``if self._should_save_checkpoint(epoch):`` that a DDP subclass overrides with a rank test
    return name.startswith("self.") and project.override_is_rank_predicate(
        index.path, project_callee(index, call) or name, index.imports)


def rank_predicate_function(index: SemanticIndex, name: str, depth: int = 0) -> bool:
    """Is the module-level function ``name`` a helper whose every ``return`` value
    (at least one) is a rank test?"""
    key = ("rank_predicate", name)
    if key in index.cache:
        return index.cache[key]
    index.cache[key] = False  # recursion guard
    result = False
    for function in index.functions_named(name):
        returns = [e for e in index.exits if isinstance(e, cst.Return) and e.value is not None
                   and index.enclosing_scope(e) is function]
        if returns and all(_is_boolean_literal(r.value) or
                           is_rank_condition(index, r.value, depth=depth + 1) for r in returns) \
                and any(not _is_boolean_literal(r.value) for r in returns):
            result = True
    index.cache[key] = result
    return result


def _rank_property(index: SemanticIndex, attribute: cst.Attribute, depth: int = 0, lenient: bool = False) -> bool:
    """``self.name`` in a method, where ``name`` is a property (or method) of the
    enclosing class whose every ``return`` value (at least one not a literal) is a
    rank test: ``@property def is_dp_master(self): return self.dp_rank == 0``."""
    if not (isinstance(attribute.value, cst.Name) and attribute.value.value == "self"):
        return False
    function = index.enclosing(attribute, cst.FunctionDef)
    owner = index.enclosing(function, cst.ClassDef) if function is not None else None
    if owner is None:
        return False
    name = attribute.attr.value
    key = ("rank_property", id(owner), name, lenient)
    if key in index.cache:
        return index.cache[key]
    index.cache[key] = False  # recursion guard
    result = False
    for method in index.functions_named(name):
        if method is function or index.parent(index.parent(method)) is not owner:
            continue
        returns = [e for e in index.exits if isinstance(e, cst.Return) and e.value is not None
                   and index.enclosing_scope(e) is method]
        values = [r.value for r in returns if not _is_boolean_literal(r.value)]
        if values and all(is_rank_condition(index, value, lenient, depth=depth + 1) for value in values):
            result = True
    index.cache[key] = result
    return result


def _is_boolean_literal(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value in ("True", "False")


# ---------------------------------------------------------------------- guards
def rank_guards(index: SemanticIndex, node: cst.CSTNode, lenient: bool = False) -> list[Guard]:
    """The rank conditions that decide whether ``node`` runs, innermost first,
    inside its function: enclosing ``if``/conditional expressions whose test is a
    rank condition (and ``node`` sits in a branch, not the test), and earlier
    ``if <rank condition>: return/continue/raise`` statements in enclosing blocks."""
    guards: list[Guard] = []
    child: cst.CSTNode = node
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test:
            if is_rank_condition(index, ancestor.test, lenient):
                branch = "orelse" if child is ancestor.orelse else "body"
                guards.append(Guard(ancestor, branch))
        elif isinstance(ancestor, (cst.IndentedBlock, cst.Module)) and isinstance(child, cst.BaseStatement):
            early = _early_exit_guard(index, ancestor, child, lenient)
            if early is not None:
                guards.append(Guard(early, "after"))
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            break
        child = ancestor
    return guards


def is_rank_guarded(index: SemanticIndex, node: cst.CSTNode, lenient: bool = False) -> bool:
    return bool(rank_guards(index, node, lenient))


def _early_exit_guard(index: SemanticIndex, block: Union[cst.IndentedBlock, cst.Module],
                      statement: cst.BaseStatement, lenient: bool) -> Optional[cst.If]:
    """An ``if <rank condition>: return`` (no else) before ``statement`` in ``block``."""
    for sibling in block.body:
        if sibling is statement:
            return None
        if (isinstance(sibling, cst.If) and sibling.orelse is None and always_exits(sibling.body)
                and is_rank_condition(index, sibling.test, lenient)):
            return sibling
    return None


def always_exits(body: cst.BaseSuite) -> bool:
    """Does the block end in return / continue / raise / break / sys.exit()?"""
    statements = body.body if isinstance(body, cst.IndentedBlock) else [body]
    if not statements:
        return False
    last = statements[-1]
    small = last.body if isinstance(last, cst.SimpleStatementLine) else [last]
    if isinstance(last, cst.SimpleStatementSuite):
        small = last.body
    return any(isinstance(s, (cst.Return, cst.Continue, cst.Raise, cst.Break)) for s in small) \
        or any(isinstance(s, cst.Expr) and isinstance(s.value, cst.Call)
               and dotted_name(s.value.func) in ("sys.exit", "exit", "os._exit") for s in small)


def guard_restricts(index: SemanticIndex, guard: Guard) -> bool:
    """Does the guarded code certainly run on a strict subset of the ranks of a
    distributed run? ``if rank == 0 and x:`` does; ``if use_fsdp or rank == 0:``
    and ``if not fsdp and rank != 0: return`` do not (with the flag set, every
    rank runs it); ``if not distributed or rank == 0:`` does (the flag is false in
    a distributed run); ``if i % world_size != rank: continue`` shards work."""
    test = getattr(guard.node, "test", None)
    if test is None or is_shard_test(index, test):
        return False
    return _restricts(index, test, negated=guard.branch != "body")


def _restricts(index: SemanticIndex, test: cst.BaseExpression, negated: bool) -> bool:
    from ddplint.analysis.roles import flag_polarity as _flag_polarity

    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _restricts(index, test.expression, not negated)
    if isinstance(test, cst.BooleanOperation):
        conjunction = isinstance(test.operator, cst.And) != negated  # De Morgan
        operands = [test.left, test.right]
        if conjunction:
            return any(_restricts(index, o, negated) for o in operands)
        return all(_restricts(index, o, negated) or _flag_polarity(index, o) is negated for o in operands)
    return is_rank_condition(index, test)


def _schedule_escapes(index: SemanticIndex, guard: Guard) -> bool:
    """Does every rank pass ``guard`` when some rank-independent step or epoch
    test holds: its body branch under a disjunction one of whose operands is a
    plain comparison of counters (no rank value, no string or ``None``, not a
    "distributed or not" test)?"""
    test = getattr(guard.node, "test", None)
    if guard.branch != "body" or not isinstance(test, cst.BooleanOperation) \
            or not isinstance(test.operator, cst.Or):
        return False
    return any(_is_schedule_test(index, operand) for operand in _disjuncts(test))


def _disjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
        return _disjuncts(test.left) + _disjuncts(test.right)
    return [test]


def _is_schedule_test(index: SemanticIndex, test: cst.BaseExpression) -> bool:
    """``it in [100, 200]``, ``epoch == cfg.epochs - 1``, ``step % 500 == 0``:
    a comparison that reads no rank, no string, no ``None`` and no flag."""
    if not isinstance(test, cst.Comparison) or _is_distributed_flag_test(test):
        return False
    if is_rank_condition(index, test, lenient=True):
        return False
    reads = False
    for sub in _walk(test):
        if isinstance(sub, (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString,
                            cst.BooleanOperation, cst.Lambda, cst.Await)):
            return False
        if isinstance(sub, cst.Call) and not (isinstance(sub.func, cst.Name)
                                              and sub.func.value in _ARITHMETIC_BUILTINS):
            return False
        if isinstance(sub, cst.Name) and sub.value in ("None", "True", "False"):
            return False
        if isinstance(sub, cst.Attribute) or (isinstance(sub, cst.Name) and sub.value not in _ARITHMETIC_BUILTINS):
            reads = True  # a counter, not only literals
    return reads


_ARITHMETIC_BUILTINS = ("round", "int", "len", "min", "max", "abs")


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in node.children:
        yield from _walk(child)


def has_rank_zero_decorator(function: cst.FunctionDef, index: Optional[SemanticIndex] = None) -> bool:
    """``@rank_zero_only`` / ``@master_only`` and friends, and (given the
    module's index) a decorator of the module that calls what it wraps under a
    rank test only (``facts.rank_gate_decorators``)."""
    gates = _rank_gates(index) if index is not None else ()
    for decorator in function.decorators:
        expr = decorator.decorator
        if isinstance(expr, cst.Call):
            expr = expr.func
        name = dotted_name(expr)
        if name is not None and name.split(".")[-1] in RANK_ZERO_DECORATORS + gates:
            return True
    return False


def _rank_gates(index: SemanticIndex) -> tuple[str, ...]:
    """The module's own rank-gate decorators, as its facts recorded them."""
    from ddplint.analysis.models import project_of

    facts = project_of(index).modules.get(index.path)
    return facts.rank_gates if facts is not None else ()


def enclosing_function(index: SemanticIndex, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
    scope = index.enclosing_scope(node)
    return scope if isinstance(scope, cst.FunctionDef) else None


def runs_on_rank_subset(index: SemanticIndex, node: cst.CSTNode, lenient: bool = False) -> bool:
    """Guarded in its own function: a rank ``if``, an early rank exit, or a
    rank-zero-only decorator on the enclosing function. An ``if`` whose test is
    ``<rank test> or <schedule test>`` (``if master and it % k == 0 or it in
    [100, 200]:``, which groups as ``(a and b) or c``) does not guard its body:
    at those steps every rank runs it."""
    if any(not _schedule_escapes(index, guard) for guard in rank_guards(index, node, lenient)):
        return True
    function = enclosing_function(index, node)
    return function is not None and has_rank_zero_decorator(function, index)


def iter_guarded_calls(index: SemanticIndex, lenient: bool = False) -> Iterator[tuple[object, list[Guard]]]:
    """Every call site with its rank guards (only those that have some)."""
    for site in index.calls:
        guards = rank_guards(index, site.node, lenient)
        if guards:
            yield site, guards


# ---------------------------------------------------------------------- subgroups
_COORDINATE = re.compile(
    r"^_*(tp|pp|dp|cp|ep|sp|mp|tensor|pipeline|data|context|expert|model|sequence|stage|replica|shard|group)"
    r"(_model)?(_parallel)?_?(rank|rank_id|group_rank|index|idx)$", re.IGNORECASE)
_GLOBAL_GETTERS = ("get_rank", "get_local_rank", "get_global_rank", "get_world_rank", "get_node_local_rank")


def selects_group_members(index: SemanticIndex, test: cst.BaseExpression) -> bool:
    """Does a rank test pick the members of a subgroup rather than single out
    the main rank? A membership test (``rank in dist.get_process_group_ranks(g)``),
    a range (``start <= rank < start + size``, ``rank < n``), or a test of a
    coordinate that every member of the group shares (``tp_rank == 0``,
    ``mpu.get_pipeline_model_parallel_rank() == 0``, ``dist.get_rank(group)``).
    ``rank == 0`` / ``is_main_process()`` single out one rank: not a selection."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return selects_group_members(index, test.expression)
    if isinstance(test, cst.BooleanOperation):
        return selects_group_members(index, test.left) or selects_group_members(index, test.right)
    if isinstance(test, cst.Call):
        return _selecting_predicate(index, test)
    if not isinstance(test, cst.Comparison):
        return False
    operators = [target.operator for target in test.comparisons]
    if any(isinstance(o, (cst.In, cst.NotIn)) for o in operators):
        return True
    if len(operators) > 1 or any(isinstance(o, (cst.LessThan, cst.LessThanEqual, cst.GreaterThan,
                                                  cst.GreaterThanEqual)) for o in operators):
        return True
    operands = [test.left, *(target.comparator for target in test.comparisons)]
    return any(_is_coordinate(index, operand) for operand in operands)


def _selecting_predicate(index: SemanticIndex, call: cst.Call) -> bool:
    """A call of a function of this module (``helper(...)``, ``self.helper(...)``)
    whose every ``return`` value (at least one not a literal) selects group
    members: ``def is_source(pg): return is_last_stage(pg.pp) and
    dist.get_rank(group=pg.tp) == 0``; ``def in_grid(self, g): return
    g.offset <= self.rank < g.offset + g.size``."""
    from ddplint.analysis.flow import helper_functions

    site = index.call_site(call)
    functions = helper_functions(index, site) if site is not None else []
    key = ("selecting_predicate", tuple(id(f) for f in functions))
    if key in index.cache:
        return index.cache[key]
    index.cache[key] = False  # recursion guard
    result = False
    for function in functions:
        returns = [e for e in index.exits if isinstance(e, cst.Return) and e.value is not None
                   and index.enclosing_scope(e) is function]
        values = [r.value for r in returns if not _is_boolean_literal(r.value)]
        if values and all(selects_group_members(index, value) for value in values):
            result = True
    index.cache[key] = result
    return result


def _is_coordinate(index: SemanticIndex, expr: cst.BaseExpression, depth: int = 0) -> bool:
    if depth > 3:
        return False
    if isinstance(expr, cst.Call):
        name = (dotted_name(expr.func) or "").split(".")[-1]
        if name in _GLOBAL_GETTERS:
            return bool(expr.args)  # ``dist.get_rank(group)``: the rank inside the group
        return name.startswith("get_") and _COORDINATE.match(name[4:]) is not None
    name = dotted_name(expr)
    if name is None:
        return False
    if _COORDINATE.match(name.split(".")[-1]):
        return True
    values = index.reaching_values(expr) if isinstance(expr, cst.Name) else None
    return bool(values) and all(_is_coordinate(index, value, depth + 1) for value in values)
