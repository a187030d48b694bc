"""Derived facts that several rules ask the semantic index about.

Everything here is a question over ``SemanticIndex`` (no tree walks): what a
literal is, whether an expression holds the global rank or a DDP-wrapped model,
whether a node sits in the single-process branch of a DDP script.
"""

from __future__ import annotations

import re
from typing import Iterator, Optional

import libcst as cst

from ddplint import names
from ddplint.analysis.semantic import CallSite, SemanticIndex, dotted_name

CUDA_INDEX = re.compile(r"^cuda:\d+$")


# ---------------------------------------------------------------------- literals
def literal_bool(expr: Optional[cst.BaseExpression]) -> Optional[bool]:
    if isinstance(expr, cst.Name) and expr.value in ("True", "False"):
        return expr.value == "True"
    return None


def literal_int(expr: Optional[cst.BaseExpression]) -> Optional[int]:
    if isinstance(expr, cst.Integer):
        try:
            return int(expr.value.replace("_", ""), 0)
        except ValueError:
            return None
    return None


def literal_str(expr: Optional[cst.BaseExpression]) -> Optional[str]:
    if isinstance(expr, cst.SimpleString):
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    return None


def fstring_prefix(node: cst.FormattedString) -> str:
    """The literal text before the first ``{...}`` of an f-string."""
    first = node.parts[0] if node.parts else None
    return first.value if isinstance(first, cst.FormattedStringText) else ""


def is_literal_zero(expr: Optional[cst.BaseExpression]) -> bool:
    return literal_int(expr) == 0


# ---------------------------------------------------------------------- environment reads
def environ_key(index: SemanticIndex, expr: cst.BaseExpression) -> Optional[str]:
    """The variable read by ``os.environ["K"]``, ``os.environ.get("K")``,
    ``os.getenv("K")``, possibly wrapped in ``int(...)``; else None."""
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in ("int", "str"):
        if expr.args:
            return environ_key(index, expr.args[0].value)
        return None
    if isinstance(expr, cst.Subscript) and index.qualified_name(expr.value) == "os.environ":
        if len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
            return literal_str(expr.slice[0].slice.value)
    if isinstance(expr, cst.Call) and expr.args:
        callee = index.qualified_name(expr.func)
        if callee in ("os.environ.get", "os.getenv", "os.environ.__getitem__"):
            return literal_str(expr.args[0].value)
    return None


GLOBAL_RANK_VARIABLES = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


def _is_global_rank_source(index: SemanticIndex, expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.Call):
        callee = index.qualified_name(expr.func)
        if callee == names.GET_RANK and not expr.args:
            return True
    return environ_key(index, expr) in GLOBAL_RANK_VARIABLES


def is_global_rank(index: SemanticIndex, expr: cst.BaseExpression, depth: int = 0) -> bool:
    """True when every value ``expr`` may hold is the global rank (integer
    literals aside), and at least one is. The binding decides, not the name."""
    if _is_global_rank_source(index, expr):
        return True
    if depth > 4 or not isinstance(expr, (cst.Name, cst.Attribute)):
        return False
    values = index.assigned_values(expr)
    if not values:
        return False
    saw_rank = False
    for value in values:
        if literal_int(value) is not None:
            continue
        if not is_global_rank(index, value, depth + 1):
            return False
        saw_rank = True
    return saw_rank


# ---------------------------------------------------------------------- models
def _is_wrap_call(index: SemanticIndex, expr: cst.BaseExpression, wrappers: tuple[str, ...]) -> bool:
    if isinstance(expr, cst.Call):
        return index.qualified_name(expr.func) in wrappers
    return False


def is_ddp_model(index: SemanticIndex, expr: cst.BaseExpression, at_order: int,
                 wrappers: tuple[str, ...] = (names.DDP,)) -> bool:
    """Does ``expr`` (a name or ``self.x``) hold a model wrapped by one of
    ``wrappers`` where it is used? Plain names: the last binding before the use
    decides; dotted names (attributes): any binding to a wrap call."""
    if _is_wrap_call(index, expr, wrappers):
        return True
    name = dotted_name(expr)
    if name is None:
        return False
    if "." in name:
        bindings = index.visible_bindings(name, expr) or []
        return any(b.value is not None and _is_wrap_call(index, b.value, wrappers) for b in bindings)
    binding = index.binding_before(name, at_order, expr)
    if binding is None or binding.value is None or binding.kind not in ("assign", "annassign"):
        return False
    return _is_wrap_call(index, binding.value, wrappers)


# ---------------------------------------------------------------------- devices
def device_arguments(site: CallSite) -> Iterator[tuple[cst.BaseExpression, int]]:
    """Expressions a call uses as a CUDA device or device index: torch.device's
    index, set_device's / torch.cuda.device's device, ``.cuda(i)`` / ``.to(i)``,
    DDP's ``device_ids`` elements and ``output_device``, any other ``device=``.
    The second item is the length of the ``device_ids`` list (1 elsewhere)."""
    qualified = site.qualified_name
    picked: list[Optional[cst.Arg]] = []
    if qualified == names.TORCH_DEVICE:
        picked.append(site.argument("index"))
    elif qualified in (names.SET_DEVICE, "torch.cuda.device") or (
            site.method in ("cuda", "to") and qualified is None):
        picked.append(site.positional(0) or site.keyword("device"))
    elif qualified == names.DDP:
        device_ids = site.argument("device_ids")
        if device_ids is not None and isinstance(device_ids.value, cst.List):
            for element in device_ids.value.elements:
                yield element.value, len(device_ids.value.elements)
        picked.append(site.argument("output_device"))
    else:
        picked.append(site.keyword("device"))
    for arg in picked:
        if arg is not None:
            yield arg.value, 1


# ---------------------------------------------------------------------- modules
def is_test_module(path: str) -> bool:
    """Unit tests pin devices and ranks on purpose (and never run multi-node):
    ``test_*.py``, ``*_test.py``, ``conftest.py`` or anything under ``tests/``."""
    parts = path.replace("\\", "/").split("/")
    name = parts[-1]
    return (name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"
            or any(part in ("tests", "test", "unit_tests") for part in parts[:-1]))


def in_device_list(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """Is ``node`` (or the call it is an argument of) an element of a list, tuple
    or set display of several devices? Such lists enumerate GPUs; they are not
    one worker's device."""
    current = node
    for _ in range(3):  # the literal, its Arg, the torch.device(...) call
        parent = index.parent(current)
        if isinstance(parent, cst.Element):
            display = index.parent(parent)
            return isinstance(display, (cst.List, cst.Tuple, cst.Set)) and len(display.elements) > 1
        if parent is None:
            return False
        current = parent
    return False


# ---------------------------------------------------------------------- branches
_DISTRIBUTED_WORDS = ("distributed", "ddp", "is_initialized", "multiprocessing_distributed", "use_dist")
_RANK_WORDS = ("local_rank", "rank")
_WORLD_WORDS = ("world_size", "n_gpu", "ngpus", "num_gpus", "gpus")


def _flag_polarity(index: SemanticIndex, test: cst.BaseExpression) -> Optional[bool]:
    """True when ``test`` is true in a distributed run, False when true in a
    single-process run, None when it says nothing about it."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _flag_polarity(index, test.expression)
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
        left = dotted_name(test.left)
        target = test.comparisons[0]
        right = target.comparator
        if left is None:
            return None
        last = left.split(".")[-1].lower()
        operator = type(target.operator)
        if any(word == last for word in _RANK_WORDS):
            value = _signed_int(right)
            if value == -1 and operator is cst.Equal:
                return False
            if value == -1 and operator is cst.NotEqual:
                return True
        if any(word == last for word in _WORLD_WORDS):
            value = _signed_int(right)
            if value == 1 and operator in (cst.GreaterThan,):
                return True
            if value == 1 and operator in (cst.Equal, cst.LessThanEqual):
                return False
    return None


def _signed_int(expr: cst.BaseExpression) -> Optional[int]:
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        value = literal_int(expr.expression)
        return -value if value is not None else None
    return literal_int(expr)


def in_single_process_branch(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """Is ``node`` inside the branch of an ``if`` that runs only without
    distributed training (``if args.local_rank == -1:``, ``else`` of
    ``if args.distributed:``, ``if world_size == 1:``)? Such code may pin a
    device without harming DDP workers."""
    child: cst.CSTNode = node
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, (cst.If, cst.IfExp)):
            polarity = _flag_polarity(index, ancestor.test)
            if polarity is not None:
                in_body = child is ancestor.body
                in_else = child is ancestor.orelse
                if (in_body and polarity is False) or (in_else and polarity is True):
                    return True
        child = ancestor
    return False


def module_masks_visible_devices(index: SemanticIndex) -> bool:
    """Does the module give each process its own GPU through
    ``CUDA_VISIBLE_DEVICES`` set from a non-literal (``str(local_rank)``)? Then
    ``cuda:0`` inside the worker is correct."""
    for target, value in index.subscript_assignments:
        if index.qualified_name(target.value) != "os.environ":
            continue
        key = literal_str(target.slice[0].slice.value) if isinstance(target.slice[0].slice, cst.Index) else None
        if key == "CUDA_VISIBLE_DEVICES" and literal_str(value) is None:
            return True
    return False
