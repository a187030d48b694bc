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
from ddplint.names import is_test_module  # noqa: F401  (the rules import it from here)
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
    if isinstance(expr, cst.Subscript) and is_environ(index, expr.value):
        if len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
            return literal_str(expr.slice[0].slice.value)
    if isinstance(expr, cst.Call) and expr.args:
        callee = index.qualified_name(expr.func)
        if callee in ("os.environ.get", "os.getenv", "os.environ.__getitem__"):
            return literal_str(expr.args[0].value)
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value == "get" and is_environ(index, func.value):
            return literal_str(expr.args[0].value)  # ``env.get("RANK")`` on a copy of os.environ
    return None


def is_environ(index: SemanticIndex, expr: cst.BaseExpression, depth: int = 0) -> bool:
    """``os.environ``, or a name holding a copy of it: ``dict(os.environ)``,
    ``os.environ.copy()``, ``{**os.environ}``, ``{k: os.environ[k] for k in keys}``."""
    if index.qualified_name(expr) == "os.environ":
        return True
    if depth > 2 or not isinstance(expr, cst.Name):
        return False
    values = index.reaching_values(expr)
    return bool(values) and all(_copies_environ(index, value, depth) for value in values)


def _copies_environ(index: SemanticIndex, value: cst.BaseExpression, depth: int) -> bool:
    if isinstance(value, cst.Call):
        func = value.func
        if isinstance(func, cst.Name) and func.value == "dict" and value.args:
            return is_environ(index, value.args[0].value, depth + 1)
        if isinstance(func, cst.Attribute) and func.attr.value == "copy":
            return is_environ(index, func.value, depth + 1)
        return False
    if isinstance(value, cst.Dict):
        return any(isinstance(e, cst.StarredDictElement) and is_environ(index, e.value, depth + 1)
                   for e in value.elements)
    if isinstance(value, cst.DictComp):
        item = value.value
        return (isinstance(item, cst.Subscript) and is_environ(index, item.value, depth + 1)) or (
            isinstance(item, cst.Call) and index.qualified_name(item.func) in ("os.environ.get", "os.getenv"))
    return False


GLOBAL_RANK_VARIABLES = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                        "MV2_COMM_WORLD_LOCAL_RANK", "PMI_LOCAL_RANK")
GLOBAL, LOCAL, LITERAL, UNKNOWN = "global", "local", "literal", "unknown"
# Attributes of framework objects (Accelerate, Lightning/Fabric, ...) that hold the global rank.
FRAMEWORK_GLOBAL_RANKS = ("process_index", "global_rank")


def rank_sources(index: SemanticIndex, expr: cst.BaseExpression, depth: int = 0) -> frozenset[str]:
    """Where a value (typically a device index) may come from, over every
    binding that may reach it: GLOBAL (``dist.get_rank()``, ``RANK``,
    ``SLURM_PROCID``), LOCAL (``LOCAL_RANK``, ``rank % device_count()``),
    LITERAL (an integer) or UNKNOWN (a value ddplint cannot trace)."""
    if depth > 6:
        return frozenset({UNKNOWN})
    if isinstance(expr, cst.Integer):
        return frozenset({LITERAL})
    if isinstance(expr, cst.IfExp):
        return rank_sources(index, expr.body, depth + 1) | rank_sources(index, expr.orelse, depth + 1)
    if isinstance(expr, cst.BinaryOperation):
        # ``rank % ngpus`` is a local index; ``node_rank * ngpus + gpu`` the global
        # rank of a multi-node launch; other arithmetic is not a rank at all.
        if isinstance(expr.operator, cst.Modulo):
            return frozenset({LOCAL})
        if isinstance(expr.operator, cst.Add) and (_counts_nodes(expr.left, index) or _counts_nodes(expr.right, index)):
            return frozenset({GLOBAL})
        return frozenset({UNKNOWN})
    key = environ_key(index, expr)
    if key is not None:
        return frozenset({GLOBAL if key in GLOBAL_RANK_VARIABLES else
                          LOCAL if key in LOCAL_RANK_VARIABLES else UNKNOWN})
    if isinstance(expr, cst.Call):
        return _call_rank_sources(index, expr, depth)
    name = dotted_name(expr)
    if name is None:
        return frozenset({UNKNOWN})
    sources: set[str] = set()
    reaching = index.reaching(name, expr)
    if not reaching and "." in name and name.rsplit(".", 1)[1] in FRAMEWORK_GLOBAL_RANKS:
        return frozenset({GLOBAL})  # ``accelerator.process_index``, ``fabric.global_rank``
    if not reaching and "." in name:
        carried = _attribute_set_by_callee(index, expr, name) or _inherited_attribute_sources(index, expr, name) \
            or _parameter_attribute_sources(index, expr, name)
        if carried is not None:
            return carried
    for binding in reaching:
        if binding.kind in ("assign", "annassign") and binding.value is not None:
            sources |= rank_sources(index, binding.value, depth + 1)
        elif binding.kind == "param":
            sources |= _param_rank_sources(index, binding)
        elif binding.kind == "unpack":
            sources |= _unpacked_rank_sources(index, binding, depth)
        else:
            sources.add(UNKNOWN)
    return frozenset(sources or {UNKNOWN})


def _unpacked_rank_sources(index: SemanticIndex, binding, depth: int) -> frozenset[str]:
    """``rank, world, ok = setup_ddp()`` (or ``... = setup_ddp() if args.ddp else
    (0, 1, False)``): the element at the name's position in what the value
    holds; a call of a function of this module gives the elements of its
    ``return`` tuples (values out of calls)."""
    node = binding.node
    if not isinstance(node, cst.Assign) or len(node.targets) != 1:
        return frozenset({UNKNOWN})
    target = node.targets[0].target
    if not isinstance(target, (cst.Tuple, cst.List)) or any(
            isinstance(e, cst.StarredElement) for e in target.elements):
        return frozenset({UNKNOWN})
    position = next((i for i, e in enumerate(target.elements) if dotted_name(e.value) == binding.name), None)
    if position is None:
        return frozenset({UNKNOWN})
    return _element_sources(index, node.value, position, len(target.elements), depth + 1)


def _element_sources(index: SemanticIndex, value: cst.BaseExpression, position: int, size: int,
                     depth: int) -> frozenset[str]:
    if depth > 6:
        return frozenset({UNKNOWN})
    if isinstance(value, cst.IfExp):
        return (_element_sources(index, value.body, position, size, depth + 1)
                | _element_sources(index, value.orelse, position, size, depth + 1))
    if isinstance(value, (cst.Tuple, cst.List)):
        if len(value.elements) != size or any(isinstance(e, cst.StarredElement) for e in value.elements):
            return frozenset({UNKNOWN})
        return rank_sources(index, value.elements[position].value, depth + 1)
    if isinstance(value, cst.Call) and not isinstance(value.func, cst.Name):
        return _project_returned_rank(index, value, str(position))
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name):
        functions = index.functions_named(value.func.value)
        if len(functions) != 1 or index.qualified_name(value.func) is not None:
            return _project_returned_rank(index, value, str(position))
        function = functions[0]
        returns = [e for e in index.exits if isinstance(e, cst.Return) and index.enclosing_scope(e) is function]
        if not returns or any(r.value is None for r in returns):
            return frozenset({UNKNOWN})
        sources: set[str] = set()
        for ret in returns:
            sources |= _element_sources(index, ret.value, position, size, depth + 1)
        return frozenset(sources)
    return frozenset({UNKNOWN})


def _project_returned_rank(index: SemanticIndex, call: cst.Call, item: str) -> frozenset[str]:
    """``rank, world, device = setup_distributed()`` with the helper in another
    module of the project: the rank its returns hand back at ``item``
    (FunctionFacts.returns_ranks); UNKNOWN when it is no project function or
    the returns do not agree."""
    from ddplint.analysis.models import project_of, rank_source_of_tag

    callee = dotted_name(call.func)
    if callee is None:
        return frozenset({UNKNOWN})
    function = project_of(index).callee_facts(index.path, callee, index.imports)
    tag = function.returns_ranks.get(item) if function is not None else None
    return frozenset({rank_source_of_tag(tag) if tag is not None else UNKNOWN})


def _counts_nodes(expr: cst.BaseExpression, index: Optional[SemanticIndex] = None) -> bool:
    """``args.node_rank * ngpus_per_node`` (one operand of a product names the
    node); also ``args.rank * ngpus_per_node`` (PyTorch's ImageNet example: the
    node's rank, read from the same option that then receives the global rank)
    where the other operand is the per-node GPU count (``torch.cuda.device_count()``,
    a name bound to it, or a ``*_per_node`` count)."""
    if not (isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply)):
        return False
    sides = (expr.left, expr.right)
    lasts = [(dotted_name(side) or "").split(".")[-1] for side in sides]
    if any(last.lower() in names.NODE_WORDS for last in lasts):
        return True
    return index is not None and any(
        names.RANK_NAME.match(lasts[i]) and _gpus_per_node(index, sides[1 - i]) for i in (0, 1))


def _gpus_per_node(index: SemanticIndex, expr: cst.BaseExpression, depth: int = 0) -> bool:
    if isinstance(expr, cst.Call):
        return index.qualified_name(expr.func) == "torch.cuda.device_count"
    name = dotted_name(expr)
    if name is None:
        return False
    if "per_node" in name.split(".")[-1].lower():
        return True
    if depth > 1 or "." in name:
        return False
    values = index.reaching_values(expr) if isinstance(expr, cst.Name) else None
    return bool(values) and all(_gpus_per_node(index, value, depth + 1) for value in values)


def _call_rank_sources(index: SemanticIndex, call: cst.Call, depth: int) -> frozenset[str]:
    func = call.func
    if isinstance(func, cst.Name) and func.value in ("int", "str") and call.args:
        return rank_sources(index, call.args[0].value, depth + 1)
    callee = index.qualified_name(func) or ""
    if callee == names.GET_RANK:
        # ``get_rank(group)`` is the rank inside a subgroup: not a device index either.
        return frozenset({GLOBAL if not call.args else UNKNOWN})
    if callee.startswith("torch.distributed.get_node_local_rank"):
        return frozenset({LOCAL})
    if callee.startswith("horovod.") and not call.args:
        last = callee.split(".")[-1]
        if last in ("rank", "cross_rank"):
            return frozenset({GLOBAL if last == "rank" else UNKNOWN})
        if last == "local_rank":
            return frozenset({LOCAL})
    last = (dotted_name(func) or "").split(".")[-1]
    if last in ("get_rank", "get_global_rank", "get_world_rank") and not call.args:
        return frozenset({GLOBAL})  # project helpers around dist.get_rank()
    if last in ("get_local_rank", "local_rank"):
        return frozenset({LOCAL})
    return frozenset({UNKNOWN})


def _attribute_set_by_callee(index: SemanticIndex, expr: cst.BaseExpression,
                             name: str) -> Optional[frozenset[str]]:
    """``dist_setup_launch(args)`` then ``rank = args.rank``, the helper in another
    module of the project (``args.rank = int(os.environ["RANK"])`` there): the rank
    that project functions the object was handed to earlier in this function set
    in that attribute (FunctionFacts.sets_param_ranks); None when none sets it.
    (A helper of this module binds ``args.rank`` here: index.reaching finds it.)"""
    from ddplint.analysis.flow import precedes
    from ddplint.analysis.models import project_of, rank_source_of_tag

    head, _, attribute = name.partition(".")
    if "." in attribute or head in ("self", "cls"):
        return None
    scope = index.enclosing_scope(expr)
    project = project_of(index)
    found: set[str] = set()
    for site in index.calls:
        if site.scope is not scope or (site.receiver is not None and dotted_name(site.receiver) == head):
            continue  # (``args.update(...)``: a method of the object itself)
        positions, keywords = _slots_holding(site, head)
        if not (positions or keywords) or not precedes(index, site.node, expr):
            continue
        callee = dotted_name(site.node.func)
        function = project.callee_facts(index.path, callee, index.imports) if callee is not None else None
        if function is None:
            continue
        declared = function.params
        if site.receiver is not None and declared[:1] in (("self",), ("cls",)):
            declared = declared[1:]  # a bound method: ``self`` is not among the arguments
        handed = [declared[p] for p in positions if p < len(declared)] + [k for k in keywords if k in declared]
        for param in handed:
            tag = function.sets_param_ranks.get(f"{param}.{attribute}")
            if tag is not None:
                found.add(rank_source_of_tag(tag))
    return frozenset(found) if found else None


def _slots_holding(site: CallSite, head: str) -> tuple[list[int], list[str]]:
    """The positions and keywords at which a call passes the name ``head``
    (positions stop at a ``*args``)."""
    positions, keywords, position = [], [], 0
    for arg in site.node.args:
        if arg.star:
            break
        holds = isinstance(arg.value, cst.Name) and arg.value.value == head
        if arg.keyword is not None:
            if holds:
                keywords.append(arg.keyword.value)
            continue
        if holds:
            positions.append(position)
        position += 1
    return positions, keywords


def _inherited_attribute_sources(index: SemanticIndex, expr: cst.BaseExpression,
                                 name: str) -> Optional[frozenset[str]]:
    """``self.rank`` in a method of ``Trainer(BaseTrainer)`` when only the base class
    (another module) stores it, ``self.rank = rank`` in its ``__init__``: the rank the
    callers of that constructor pass (through ``super().__init__(rank=rank)``; a109
    MVSFormer). Also ``self.args.local_rank`` when the class (or a base) stored
    ``self.args = args`` in ``__init__``: what the constructor's callers' objects carry
    in ``local_rank`` (a111 DUSTGaussian). None when this module binds nothing of the kind."""
    from ddplint.analysis.models import project_of, rank_source_of_tag

    head, _, attribute = name.partition(".")
    attribute, _, carried = attribute.partition(".")
    if head != "self" or "." in carried:
        return None
    function = index.enclosing_scope(expr)  # (``enclosing`` stops at the method: look from the method out)
    owner = index.enclosing(function, cst.ClassDef) if function is not None else None
    if owner is None:
        return None
    project = project_of(index)
    stored = project.inherited_init_param(index.path, owner.name.value, attribute, itself=bool(carried))
    if stored is None:
        return None
    param = f"{stored[1]}.{carried}" if carried else stored[1]
    tags = project.param_values(stored[0][0], stored[0][1], param)
    if not tags:
        return frozenset({UNKNOWN})
    return frozenset(rank_source_of_tag(tag) for tag in tags)


def _parameter_attribute_sources(index: SemanticIndex, expr: cst.BaseExpression,
                                 name: str) -> Optional[frozenset[str]]:
    """``config.rank`` inside ``train(config)`` with no binding of its own: the
    rank the callers' objects carry in that attribute (``CFG.rank =
    int(os.environ["RANK"]); train(CFG)``); None when ``config`` is no parameter."""
    from ddplint.analysis.models import parameter_rank_sources

    head, _, attribute = name.partition(".")
    if "." in attribute:
        return None
    params = [b for b in index.reaching(head, expr) if b.kind == "param"]
    if not params:
        return None
    return frozenset().union(*(parameter_rank_sources(index, b, attribute) for b in params))


def _param_rank_sources(index: SemanticIndex, binding) -> frozenset[str]:
    """What the call sites of the project pass for a parameter (values across
    calls); UNKNOWN when no call is known or they pass something else."""
    from ddplint.analysis.models import parameter_rank_sources

    return parameter_rank_sources(index, binding)


def global_rank_origin(index: SemanticIndex, expr: cst.BaseExpression, depth: int = 0) -> Optional[str]:
    """Where the global rank in ``expr`` comes from, in the user's words
    (``dist.get_rank()``, ``RANK``, ``args.node_rank * args.ngpus + gpu``,
    ``accelerator.process_index``, ``a caller``); None when no binding that
    reaches it reads one (mirrors ``rank_sources``)."""
    if depth > 6:
        return None
    if isinstance(expr, cst.IfExp):
        return global_rank_origin(index, expr.body, depth + 1) or global_rank_origin(index, expr.orelse, depth + 1)
    if isinstance(expr, cst.BinaryOperation):
        return index.module.code_for_node(expr) if GLOBAL in rank_sources(index, expr, depth) else None
    key = environ_key(index, expr)
    if key is not None:
        return "$" + key if key in GLOBAL_RANK_VARIABLES else None
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Name) and func.value in ("int", "str") and expr.args:
            return global_rank_origin(index, expr.args[0].value, depth + 1)
        return index.module.code_for_node(expr) if GLOBAL in _call_rank_sources(index, expr, depth) else None
    name = dotted_name(expr)
    if name is None:
        return None
    reaching = index.reaching(name, expr)
    if not reaching and "." in name and name.rsplit(".", 1)[1] in FRAMEWORK_GLOBAL_RANKS:
        return name
    if not reaching and "." in name and GLOBAL in (_parameter_attribute_sources(index, expr, name) or ()):
        head = next(b for b in index.reaching(name.split(".")[0], expr) if b.kind == "param")
        return _passed_by(index, head)
    if not reaching and name.startswith("self.") and GLOBAL in (_inherited_attribute_sources(index, expr, name) or ()):
        owner = index.enclosing(index.enclosing_scope(expr), cst.ClassDef)
        return f"passed to {owner.name.value}() by its callers" if owner is not None else "passed by the callers"
    for binding in reaching:
        if binding.kind in ("assign", "annassign") and binding.value is not None:
            found = global_rank_origin(index, binding.value, depth + 1)
        elif binding.kind == "param":
            found = _passed_by(index, binding) if GLOBAL in _param_rank_sources(index, binding) else None
        elif binding.kind == "unpack":
            found = "returned by a setup helper" if GLOBAL in _unpacked_rank_sources(index, binding, depth) else None
        else:
            found = None
        if found:
            return found
    return None


def _passed_by(index: SemanticIndex, binding) -> str:
    function = index.enclosing_scope(binding.node)
    if isinstance(function, cst.FunctionDef):
        name = function.name.value
        if name == "__init__":
            owner = next((a for a in index.ancestors(function) if isinstance(a, (cst.ClassDef, cst.FunctionDef))),
                         None)
            name = owner.name.value if isinstance(owner, cst.ClassDef) else name
        return f"passed to {name}() by its callers"
    return "passed by the callers"


def is_global_rank(index: SemanticIndex, expr: cst.BaseExpression) -> bool:
    """Does ``expr`` hold the global rank? Yes when some binding that may reach
    it reads the global rank and none reads a local rank: the binding decides,
    not the name (``local_rank = dist.get_rank()`` is a global rank)."""
    sources = rank_sources(index, expr)
    return GLOBAL in sources and LOCAL not in sources


# ---------------------------------------------------------------------- models
def _is_wrap_call(index: SemanticIndex, expr: cst.BaseExpression, wrappers: tuple[str, ...]) -> bool:
    if isinstance(expr, cst.Call):
        if index.qualified_name(expr.func) in wrappers:
            return True
        # A project subclass of the wrapper (``class _DDP(DistributedDataParallel)``
        # overriding ``forward`` or ``__getattr__``, here or in a project module)
        # wraps as the library class does.
        if not isinstance(expr.func, (cst.Call, cst.Subscript)):
            from ddplint.analysis.models import wrapper_subclass

            return any(wrapper_subclass(index, expr.func, wrapper) for wrapper in wrappers
                       if wrapper in (names.DDP, names.FSDP))
    return False


# nn.Module methods that return the module itself: a wrapped model stays wrapped.
SELF_RETURNING_METHODS = ("to", "cuda", "cpu", "train", "eval", "half", "float", "double", "bfloat16",
                          "requires_grad_", "type", "share_memory", "to_empty")


def is_ddp_model(index: SemanticIndex, expr: cst.BaseExpression, at_order: int = 0,
                 wrappers: tuple[str, ...] = (names.DDP,), depth: int = 0) -> bool:
    """Does ``expr`` hold a model wrapped by one of ``wrappers`` where it is used?

    Wrapped when any binding that may reach the use is a wrap: ``DDP(m)``, a
    conditional wrap (``DDP(m) if cuda else m``: one arm wraps), a call of a
    method that returns the module itself on a wrapped model
    (``DDP(m).to(dev)``, ``model = model.cuda()``), or an alias of a wrapped
    name or attribute (``net = self.net``). The other reaching bindings are
    the single-process alternatives. (``at_order`` is kept for callers; the
    reaching bindings of the use decide.)"""
    if depth > 6:
        return False
    if isinstance(expr, cst.Call):
        if _is_wrap_call(index, expr, wrappers):
            return True
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value in SELF_RETURNING_METHODS:
            return is_ddp_model(index, func.value, at_order, wrappers, depth + 1)
        if index.qualified_name(func) in (names.SYNC_BN_CONVERT, names.ME_SYNC_BN_CONVERT) and expr.args:
            # converts the batch norms inside and hands back the module it was given (a56 sewformer)
            return is_ddp_model(index, expr.args[0].value, at_order, wrappers, depth + 1)
        return False
    if isinstance(expr, cst.IfExp):
        # Only an arm that wraps right there: ``m.module if hasattr(m, "module") else m``
        # unwraps, and its else-arm's name must not count as a wrap.
        return any(isinstance(arm, cst.Call) and is_ddp_model(index, arm, at_order, wrappers, depth + 1)
                   for arm in (expr.body, expr.orelse))
    name = dotted_name(expr)
    if name is None:
        return False
    for binding in index.reaching(name, expr):
        if binding.kind in ("assign", "annassign") and binding.value is not None \
                and not unwrapped_in_other_arm(index, binding) \
                and is_ddp_model(index, binding.value, at_order, wrappers, depth + 1):
            return True
        if binding.kind == "loop" and isinstance(binding.node, cst.For) \
                and _iterates_wrapped_entries(index, binding.node, name, wrappers, depth):
            return True
    return False


def _iterates_wrapped_entries(index: SemanticIndex, loop: cst.For, name: str,
                              wrappers: tuple[str, ...], depth: int) -> bool:
    """``for policy, model in self.models.items():`` (or ``.values()``) over a dict
    whose entries the module wraps (``self.models[policy] = DDP(...)``): the name
    bound to the values holds a wrapped model (a118 warp-drive)."""
    it, target = loop.iter, loop.target
    if not (isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute) and not it.args):
        return False
    method = it.func.attr.value
    if method == "items":
        if not (isinstance(target, cst.Tuple) and len(target.elements) == 2):
            return False
        value = target.elements[1].value
    elif method == "values":
        value = target
    else:
        return False
    if dotted_name(value) != name:
        return False
    container = dotted_name(it.func.value)
    return container is not None and any(
        dotted_name(stored.value) == container and is_ddp_model(index, wrap, 0, wrappers, depth + 1)
        for stored, wrap in index.subscript_assignments)


def unwrapped_in_other_arm(index: SemanticIndex, binding) -> bool:
    """``if isinstance(m, DDP) (or cfg.distributed): net = m.module else: net = m``:
    the arm that binds the plain alias is the one where ``m`` is not wrapped
    (the test chose between the wrapper's ``.module`` and the model itself), so
    that alias binding does not carry the wrap."""
    value = binding.value
    if not isinstance(binding.node, cst.Assign) or not isinstance(value, (cst.Name, cst.Attribute)):
        return False
    source = dotted_name(value)
    return source is not None and opposite_arm_unwraps(index, binding.node, source)


def opposite_arm_unwraps(index: SemanticIndex, node: cst.CSTNode, source: str) -> bool:
    """Does the other arm of the nearest ``if`` around ``node`` use
    ``<source>.module``? Then the test chose between the wrapper and the plain
    model (``if cfg.multi_gpu: sd = m.module.state_dict() else: sd =
    m.state_dict()``), and ``node``'s arm is the one where ``source`` is plain.
    Likewise the handler of a ``try`` whose body uses ``<source>.module``: the
    fallback runs when the model has no ``.module`` (it is not the wrapper)."""
    child = node
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return False
        if isinstance(ancestor, cst.If) and child is not ancestor.test:
            if child is ancestor.body:
                other = ancestor.orelse.body if isinstance(ancestor.orelse, cst.Else) else None
            else:
                other = ancestor.body
            return other is not None and not _tests_another_wrapper(ancestor.test) and _uses_module_of(other, source)
        if isinstance(ancestor, cst.Try) and isinstance(child, cst.ExceptHandler) \
                and _uses_module_of(ancestor.body, source):
            return True  # ``try: sd = m.module.state_dict() except: sd = m.state_dict()``: the fallback
        child = ancestor
    return False


_DISTRIBUTED_WRAPPERS = ("DistributedDataParallel", "DDP", "FullyShardedDataParallel", "FSDP")


def _tests_another_wrapper(test: cst.BaseExpression) -> bool:
    """``isinstance(model, nn.DataParallel)`` (no distributed wrapper among the
    types): the test tells DataParallel from everything else, and a DDP model
    takes the other arm."""
    pending = [test]
    while pending:
        node = pending.pop()
        if isinstance(node, cst.Call) and dotted_name(node.func) == "isinstance" and len(node.args) == 2:
            types = node.args[1].value
            named = [dotted_name(e.value) for e in types.elements] if isinstance(types, cst.Tuple) \
                else [dotted_name(types)]
            return not any((name or "").rsplit(".", 1)[-1] in _DISTRIBUTED_WRAPPERS for name in named)
        pending.extend(node.children)
    return False


def _uses_module_of(tree: cst.CSTNode, source: str) -> bool:
    pending, seen = [tree], 0
    while pending and seen < 2000:
        node = pending.pop()
        seen += 1
        if isinstance(node, cst.Attribute) and node.attr.value == "module" and dotted_name(node.value) == source:
            return True
        if not isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            pending.extend(node.children)
    return False


# ---------------------------------------------------------------------- devices
def device_arguments(site: CallSite) -> Iterator[tuple[cst.BaseExpression, int]]:
    """Expressions a call uses as a CUDA device or device index: torch.device's
    index (``torch.device(i)`` too), set_device's / torch.cuda.device's device,
    ``.cuda(i)`` / ``.to(i)``, DDP's ``device_ids`` elements and ``output_device``,
    FSDP's / init_process_group's ``device_id``, any other ``device=``.
    The second item is the length of the ``device_ids`` list (1 elsewhere)."""
    qualified = site.qualified_name
    picked: list[Optional[cst.Arg]] = []
    if qualified == names.TORCH_DEVICE:
        index_arg = site.argument("index")
        if index_arg is None and len(site.node.args) == 1 and site.node.args[0].keyword is None \
                and not isinstance(site.node.args[0].value, (cst.SimpleString, cst.FormattedString)):
            index_arg = site.node.args[0]  # ``torch.device(rank)``: an integer is a CUDA index
        picked.append(index_arg)
    elif qualified in (names.FSDP, names.INIT_PROCESS_GROUP):
        picked.append(site.keyword("device_id"))  # FSDP's / the process group's bound device
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


_PERCENT_INDEX = re.compile(r"^cuda:%[ds]$")
_FORMAT_INDEX = re.compile(r"^cuda:\{0?\}$")


def cuda_index_strings(index: SemanticIndex) -> Iterator[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """Device strings built around one index expression: ``f"cuda:{i}"``,
    ``"cuda:%d" % i``, ``"cuda:{}".format(i)``, ``"cuda:" + str(i)``. Yields
    (the whole string expression, the index expression ``i``)."""
    for node in index.fstrings:
        holes = [part for part in node.parts if isinstance(part, cst.FormattedStringExpression)]
        if fstring_prefix(node) == "cuda:" and len(holes) == 1:
            yield node, holes[0].expression
    for node, value in index.strings:
        if not isinstance(value, str) or not value.startswith("cuda:"):
            continue
        parent = index.parent(node)
        if isinstance(parent, cst.BinaryOperation) and parent.left is node:
            right = parent.right
            if isinstance(parent.operator, cst.Modulo) and _PERCENT_INDEX.match(value):
                if isinstance(right, cst.Tuple):
                    if len(right.elements) != 1:
                        continue
                    right = right.elements[0].value
                yield parent, right
            elif isinstance(parent.operator, cst.Add) and value == "cuda:":
                if isinstance(right, cst.Call) and isinstance(right.func, cst.Name) and right.func.value == "str" \
                        and len(right.args) == 1:
                    right = right.args[0].value
                yield parent, right
        elif isinstance(parent, cst.Attribute) and parent.attr.value == "format" and _FORMAT_INDEX.match(value):
            call = index.parent(parent)
            if isinstance(call, cst.Call) and call.func is parent and len(call.args) == 1 \
                    and call.args[0].keyword is None and not call.args[0].star:
                yield call, call.args[0].value


BARE_CUDA, CPU = "bare-cuda", "cpu"


def device_kind(index: SemanticIndex, expr: Optional[cst.BaseExpression], depth: int = 0) -> Optional[str]:
    """BARE_CUDA for a CUDA device without an index (``"cuda"``,
    ``torch.device("cuda")``, ``torch.device("cuda" if ok else "cpu")``, a name
    or attribute bound only to such values, a parameter that every call site of
    the project fills with one), CPU for the CPU, None for anything else (an
    indexed or per-rank device, a value ddplint cannot trace). A choice between
    a bare CUDA device and the CPU is BARE_CUDA: on a GPU run it is "cuda"."""
    if expr is None or depth > 5:
        return None
    if isinstance(expr, cst.SimpleString):
        text = literal_str(expr)
        return BARE_CUDA if text == "cuda" else CPU if text == "cpu" else None
    if isinstance(expr, cst.IfExp):
        return _either(device_kind(index, expr.body, depth + 1), device_kind(index, expr.orelse, depth + 1))
    if isinstance(expr, cst.Call):
        if index.qualified_name(expr.func) != names.TORCH_DEVICE:
            return None
        site = index.call_site(expr)
        kind = site.argument("type") if site is not None else None
        if site is None or kind is None or site.argument("index") is not None or len(expr.args) != 1:
            return None
        return device_kind(index, kind.value, depth + 1)
    name = dotted_name(expr)
    if name is None:
        return None
    found: Optional[str] = "none"
    for binding in index.reaching(name, expr):
        if binding.kind in ("assign", "annassign") and binding.value is not None:
            kind = device_kind(index, binding.value, depth + 1)
        elif binding.kind == "param":
            kind = _param_device_kind(index, binding)
        else:
            kind = None
        if kind is None:
            return None
        found = kind if found == "none" else _either(found, kind)
        if found is None:
            return None
    return None if found == "none" else found


def _either(a: Optional[str], b: Optional[str]) -> Optional[str]:
    if a is None or b is None:
        return None
    return CPU if a == b == CPU else BARE_CUDA


def _param_device_kind(index: SemanticIndex, binding) -> Optional[str]:
    from ddplint.analysis.models import parameter_values
    from ddplint.screen.facts import CUDA_DEVICE

    tags = parameter_values(index, binding)
    return BARE_CUDA if tags == frozenset({CUDA_DEVICE}) else None


# ---------------------------------------------------------------------- reads
def attribute_names(index: SemanticIndex, attribute: str) -> list[cst.Name]:
    """The ``attr`` name of every ``x.<attribute>`` of the module (read, called
    or assigned), as ``name_reads`` builds its table: once, from the parent map."""
    table = index.cache.get("values.attribute_names")
    if table is None:
        table = {}
        for node, parent in index._parents.items():
            if isinstance(node, cst.Name) and isinstance(parent, cst.Attribute) and parent.attr is node:
                table.setdefault(node.value, []).append(node)
        index.cache["values.attribute_names"] = table
    return table.get(attribute, [])


def name_reads(index: SemanticIndex, name: str) -> list[cst.Name]:
    """Every ``Name`` node that reads ``name`` in the module (binding targets,
    parameters, definitions and attribute names excluded), in no particular
    order. Built once per module from the index's parent map (no tree walk)."""
    table = index.cache.get("values.name_reads")
    if table is None:
        table = {}
        for node, parent in index._parents.items():
            if isinstance(node, cst.Name) and _is_read(node, parent):
                table.setdefault(node.value, []).append(node)
        index.cache["values.name_reads"] = table
    return table.get(name, [])


def uses_imported_module(index: SemanticIndex, prefix: str) -> bool:
    """Does the module import ``prefix`` (or a submodule) AND read a name that
    import binds? ``from accelerate import Accelerator`` left over from an
    experiment prepares no loader and sets no device (a70 unlearn_multimodal)."""
    return any((target == prefix or target.startswith(prefix + "."))
               and name_reads(index, local.split(".")[0]) for local, target in index.imports.items())


def _is_read(node: cst.Name, parent: cst.CSTNode) -> bool:
    if isinstance(parent, (cst.AssignTarget, cst.Param, cst.FunctionDef, cst.ClassDef, cst.ImportAlias,
                           cst.AsName, cst.Arg, cst.Global, cst.Nonlocal)):
        if isinstance(parent, cst.Arg):
            return parent.keyword is not node
        return False
    if isinstance(parent, cst.Attribute):
        return parent.value is node
    if isinstance(parent, (cst.AugAssign, cst.AnnAssign)):
        return parent.target is not node or isinstance(parent, cst.AugAssign)
    if isinstance(parent, (cst.For, cst.CompFor)):
        return parent.target is not node
    if isinstance(parent, cst.NamedExpr):
        return parent.target is not node
    return True


def binding_is_read(index: SemanticIndex, binding) -> bool:
    """Does some read of the binding's name see this binding (reaching
    definitions)? Dotted names (``self.device``) count as read."""
    if "." in binding.name:
        return True
    return any(any(b is binding for b in index.reaching(binding.name, use))
               for use in name_reads(index, binding.name))


# ---------------------------------------------------------------------- modules
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


# A setting named for several GPUs (``cfg.cuda_visible_devices``, ``args.gpus``, ``opt.gpu_ids``).
_DEVICE_LIST_NAME = re.compile(r"(devices|gpus|gpu_ids|device_ids|gpu_list)$", re.IGNORECASE)


def _joined_device_list(index: SemanticIndex, value: cst.BaseExpression, depth: int = 0) -> bool:
    """``",".join(str(g) for g in gpu_ids)`` (directly or through a name every
    binding of which is one): a list of several GPUs for the whole run, not one
    GPU per process. A join that reads a rank (``gpus[local_rank]``) is not."""
    name = dotted_name(value)
    if name is not None and _DEVICE_LIST_NAME.search(name.split(".")[-1]):
        return True  # ``os.environ["CUDA_VISIBLE_DEVICES"] = self.config.cuda_visible_devices``: "0,1,2,3"
    if isinstance(value, cst.Name) and depth < 2:
        values = index.reaching_values(value)
        return bool(values) and all(_joined_device_list(index, v, depth + 1) for v in values)
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
            and value.func.attr.value == "join" and isinstance(value.func.value, cst.SimpleString)):
        return False
    return not any(isinstance(node, cst.Name) and names.RANK_NAME.match(node.value)
                   for arg in value.args for node in _names_in(arg.value))


def _names_in(expr: cst.CSTNode) -> list[cst.CSTNode]:
    found, pending = [], [expr]
    while pending and len(found) < 200:
        node = pending.pop()
        found.append(node)
        pending.extend(node.children)
    return found


def _masked_once_by_the_parent(index: SemanticIndex, target: cst.CSTNode) -> bool:
    """A mask set in launcher-parent code (before ``mp.spawn``, in a function only the
    launcher calls), outside any loop: every worker inherits the same mask (the run's GPU
    list), not one GPU each. A loop that sets it and starts one process per pass masks each."""
    from ddplint.analysis.roles import LAUNCHER, process_role

    return process_role(index, target) == LAUNCHER and index.enclosing(target, cst.For, cst.While) is None


def module_masks_visible_devices(index: SemanticIndex) -> bool:
    """Does the module give each process its own GPU through
    ``CUDA_VISIBLE_DEVICES`` set from a non-literal (``str(local_rank)``)? Then
    ``cuda:0`` inside the worker is correct. A helper module that only such
    scripts import (tgl's ``utils.py``) runs in those processes too."""
    for target, value in index.subscript_assignments:
        if index.qualified_name(target.value) != "os.environ":
            continue
        key = literal_str(target.slice[0].slice.value) if isinstance(target.slice[0].slice, cst.Index) else None
        if key == "CUDA_VISIBLE_DEVICES" and literal_str(value) is None and not _joined_device_list(index, value) \
                and not _masked_once_by_the_parent(index, target):
            return True
    if any(_exports_one_visible_device(index, call) for call in index.calls if call.method == "export"):
        return True
    if index.project is None:
        return False  # a text on its own: nothing imports it
    return index.project.masked_by_launcher(index.path) or index.project.only_masked_processes_reach(index.path)


# Launcher helpers whose ``export()`` sets ``CUDA_VISIBLE_DEVICES`` to the local
# rank unless told not to (submitit: ``export(set_cuda_visible_devices=True, ...)``).
VISIBLE_DEVICE_EXPORTERS = {"submitit.helpers.TorchDistributedEnvironment": "set_cuda_visible_devices"}


def _exports_one_visible_device(index: SemanticIndex, call: CallSite) -> bool:
    """``submitit.helpers.TorchDistributedEnvironment().export()`` (directly or on a
    name bound to the environment): each process then sees only its local rank's
    GPU, unless the flag is a literal false (``set_cuda_visible_devices=False``)."""
    receiver = call.receiver
    if receiver is None:
        return False
    values = [receiver] if isinstance(receiver, cst.Call) else (index.reaching_values(receiver) or [])
    flags = set()
    for value in values:
        if not isinstance(value, cst.Call):
            return False
        flag = VISIBLE_DEVICE_EXPORTERS.get(index.qualified_name(value.func) or "")
        if flag is None:
            return False
        flags.add(flag)
    if len(flags) != 1:
        return False
    argument = call.keyword(flags.pop()) or call.positional(0)
    return argument is None or not (isinstance(argument.value, cst.Name) and argument.value.value in ("False", "None")
                                    or literal_int(argument.value) == 0)
