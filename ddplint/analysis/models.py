"""What a model expression holds, as the judge sees it: wrapped by DDP/FSDP here,
or a parameter that some call site of the project fills with a wrapped model.

These helpers combine the module's semantic index with the project join.
"""

from __future__ import annotations

import re
from typing import Optional

from ddplint import names
from ddplint.screen.facts import (ARGV_LOCAL_RANK, FACTORY_CALL, GLOBAL_RANK, LIBRARY_PREFIXES, LITERAL, LOCAL_RANK,
                                   SPAWN_INDEX, ModuleFacts, summarize)
from ddplint.screen.project import Project


def project_of(index) -> Project:
    """The project an index belongs to: the engine's joined project (the facts
    of the project root), or, for a text linted on its own, a one-module
    project of this text (complete: nothing else belongs to it)."""
    if index.project is not None:
        return index.project
    project = index.cache.get("project")
    if project is None:
        facts = summarize(index.source, index.path) or ModuleFacts(index.path)
        project = Project([facts])
        index.cache["project"] = project
    return project



# ---------------------------------------------------------------------- index-side helpers
def judged_call_fact(site, callee: str):
    """The project's view of a call (``Project.call_reaches``): what it fills, and the
    slots it gives the constant False or None (``log_step(..., reduce=False)``)."""
    import libcst as cst

    from ddplint.screen.project import judged_call

    def false_or_none(expr) -> bool:
        return isinstance(expr, cst.Name) and expr.value in ("False", "None")

    starred = any(arg.star for arg in site.node.args)
    positional = [arg for arg in site.node.args if arg.keyword is None and not arg.star]
    keywords = tuple(arg.keyword.value for arg in site.node.args if arg.keyword is not None)
    false_slots = tuple(str(i) for i, arg in enumerate(positional) if false_or_none(arg.value)) + tuple(
        arg.keyword.value for arg in site.node.args if arg.keyword is not None and false_or_none(arg.value))
    return judged_call(callee, None if starred else len(positional), keywords, false_slots)


def wrapped_kind(index, expr, at_order: int) -> str:
    """"ddp" / "fsdp" when ``expr`` holds a DDP / FSDP-wrapped model where it is
    used: a local wrap (``model = DDP(model)``), or a parameter of the enclosing
    function that some call site in the project passes a wrapped model to."""
    import libcst as cst

    from ddplint.analysis.values import is_ddp_model

    kind = ""
    if is_ddp_model(index, expr, at_order, (names.DDP,)):
        kind = "ddp"
    elif is_ddp_model(index, expr, at_order, (names.FSDP,)):
        kind = "fsdp"
    elif isinstance(expr, cst.Name):
        for binding in index.reaching(expr.value, expr):
            if binding.kind == "param" and isinstance(binding.scope, cst.FunctionDef):
                kind = project_of(index).wrapped_param(index.path, function_key(index, binding.scope), expr.value) \
                    or wrapped_by_local_callers(index, binding)
                break
        else:
            kind = wrapped_out_of_calls(index, expr)
    else:
        kind = wrapped_out_of_calls(index, expr)
    if kind and _unwrapped_on_the_way(index, expr):
        return ""  # ``if isinstance(model, DDP): model = model.module`` before the use
    if kind and isinstance(expr, cst.Name):
        kind = _kind_of_live_bindings(index, expr, at_order, kind)
    elif kind and _self_attribute(expr) and (_plain_where_used(index, expr) or _wrapper_thrown_away(index, expr)):
        return ""  # ``if self.use_fsdp: self.model = wrap(m) else: self.model = m`` ... ``else: self.model(x)``
    if kind and {"ddp": names.DDP, "fsdp": names.FSDP}[kind] in not_instance_of(index, expr):
        # ``FSDP(m) if cfg.fsdp else m`` used where ``isinstance(m, FSDP)`` is false.
        if kind == "ddp" or not is_ddp_model(index, expr, at_order, (names.DDP,)):
            return ""
    return kind



def may_hold_wrap(index, expr, at_order: int, kind: str) -> bool:
    """Can ``expr`` hold a ``kind`` ("ddp"/"fsdp") model where it is used? Yes
    when ``wrapped_kind`` says so, and also when it says the other kind but a
    wrap of this kind reaches the use on some path whose tested flags the use
    does not contradict: a model a strategy switch makes DDP or FSDP
    (``if self.strategy == "ddp": m = DDP(m) elif self.strategy == "fsdp": m =
    FSDP(m); return m`` stored in ``self.model``) is FSDP in ``save()`` and in the
    ``else`` arm of ``if self.strategy == "ddp":``, but not in its ``if`` arm."""
    found = wrapped_kind(index, expr, at_order)
    if found == kind:
        return True
    if not found:
        return False
    use = condition_facts(index, expr)
    return any(found_kind == kind and not _contradicts(condition_facts(index, node), use)
               for found_kind, node in _wrap_sites(index, expr))


def _wrap_sites(index, expr, depth: int = 0) -> list:
    """The DDP/FSDP wraps whose model ``expr`` may hold, as (kind, the node whose
    tested flags decide where it holds): through the bindings of the name or
    attribute, plain aliases, tuple items, and what calls return
    (``self.model = self._setup_model(model)``, ``_returned_wrap_sites``)."""
    import libcst as cst

    from ddplint.analysis.semantic import dotted_name, unpack_position
    from ddplint.analysis.values import _is_wrap_call

    name = dotted_name(expr)
    if name is None or depth > 3:
        return []
    found = []
    for binding in index.reaching(name, expr):
        value, position = binding.value, None
        if binding.kind == "unpack" and isinstance(binding.node, cst.Assign):
            # ``self.model, self.tokenizer = self._init_model(cfg)``: the item at that position
            value, position = binding.node.value, unpack_position(binding.node, name)
            if position is None:
                continue
        elif binding.kind not in ("assign", "annassign"):
            continue
        if value is None or value is expr:
            continue
        wrapped = [kind for wrapper, kind in ((names.DDP, "ddp"), (names.FSDP, "fsdp"))
                   if _is_wrap_call(index, value, (wrapper,))] if position is None else []
        if wrapped:
            found.append((wrapped[0], binding.node))
        elif isinstance(value, (cst.Name, cst.Attribute)) and position is None:
            found.extend(_wrap_sites(index, value, depth + 1))
        elif isinstance(value, cst.Call):
            found.extend(_returned_wrap_sites(index, value, binding.node, position, depth))
    return found


def _returned_wrap_sites(index, call, binding_node, position, depth: int) -> list:
    """The wrap sites of what a call hands back: a function of this module (its
    returns, the item at ``position`` of a returned tuple), or a project function
    of another module whose facts say it returns a wrap (``get_wrapped_model(cfg,
    m)`` returning ``FSDP(m)``), which counts as made at the binding."""
    import libcst as cst

    from ddplint.analysis import flow

    site = index.call_site(call)
    if site is None:
        return []
    found = []
    helpers = flow.helper_functions(index, site)
    for function in helpers:
        for exit_node in index.exits:
            if not isinstance(exit_node, cst.Return) or flow.enclosing_function(index, exit_node) is not function:
                continue
            returned = exit_node.value
            if position is not None:
                items = returned.elements if isinstance(returned, cst.Tuple) else ()
                returned = items[position].value if position < len(items) else None
            if isinstance(returned, (cst.Name, cst.Attribute)):
                found.extend(_wrap_sites(index, returned, depth + 1))
    if not helpers:
        callee = project_callee(index, call)
        facts = project_of(index).callee_facts(index.path, callee) if callee else None
        kind = facts.returns_wrapped.get("" if position is None else str(position), "") if facts is not None else ""
        if kind:
            found.append((kind, binding_node))
    return found


def _kind_of_live_bindings(index, expr, at_order: int, kind: str) -> str:
    """``kind`` unless the wrap bindings of ``expr`` are made under a condition
    that the use contradicts: ``if cfg.only_eval: m = DDP(net) else: m =
    FSDP(net)`` then ``if not cfg.only_eval: m.state_dict()`` (or after ``if
    cfg.only_eval: break``) sees the FSDP model only."""
    from ddplint.analysis.values import is_ddp_model

    bindings = index.reaching(expr.value, expr)
    use = condition_facts(index, expr)
    if not use:
        return kind
    live = [b for b in bindings if not _contradicts(condition_facts(index, b.node), use)]
    if len(live) == len(bindings):
        return kind
    for wrapper, found in ((names.DDP, "ddp"), (names.FSDP, "fsdp")):
        if any(b.kind in ("assign", "annassign") and b.value is not None
               and is_ddp_model(index, b.value, at_order, (wrapper,)) for b in live):
            return found
    return ""


def _self_attribute(expr) -> bool:
    import libcst as cst

    return isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self"


def _wrapper_thrown_away(index, expr) -> bool:
    """``self.model = DDP(self.model, ...)`` followed, in the same method, by
    ``self.model = self.model.module``, for every wrap of the attribute in this
    module: the attribute holds the plain model afterwards (a62 DDPM-weather)."""
    import libcst as cst

    from ddplint.analysis.semantic import dotted_name
    from ddplint.analysis.values import is_ddp_model

    name = dotted_name(expr)
    bindings = [b for b in index.visible_bindings(name, expr) or [] if b.kind in ("assign", "annassign")]
    wraps = [b for b in bindings if b.value is not None and isinstance(b.value, cst.Call)
             and (is_ddp_model(index, b.value, 0, (names.DDP,)) or is_ddp_model(index, b.value, 0, (names.FSDP,)))]
    if not wraps:
        return False
    unwraps = [b for b in bindings if isinstance(b.value, cst.Attribute) and b.value.attr.value == "module"
               and dotted_name(b.value.value) == name]
    return all(any(u.scope is w.scope and u.order > w.order for u in unwraps) for w in wraps)


def _plain_where_used(index, expr) -> bool:
    """Is the instance attribute ``self.<attr>`` certainly the plain model where it
    is used? The use sits under ``self.<flag>`` tests (``else:`` of ``if
    self.use_fsdp:``) that contradict the conditions of some stores of the
    attribute in this module (``if self.use_fsdp: self.model = wrap(m)``), and
    every other store there keeps a plain, unwrapped value (``self.model =
    self.raw_model.to(dev)``). Only ``self.`` flags count: they are the same in
    every method of the instance."""
    from ddplint.analysis.semantic import dotted_name

    use = {key: value for key, value in condition_facts(index, expr).items() if key.startswith("self.")}
    name = dotted_name(expr)
    if not use or name is None:
        return False
    bindings = index.reaching(name, expr)
    dead = [b for b in bindings if _contradicts(condition_facts(index, b.node), use)]
    if not dead:
        return False
    return all(b.kind in ("assign", "annassign") and b.value is not None and _plain_value(index, b.value)
               for b in bindings if b not in dead)


def _plain_value(index, value, depth: int = 0) -> bool:
    """A value known not to hold a wrapped model: a parameter or attribute
    nothing wraps, a model built from a class, or such a value moved
    (``m.to(dev)``, ``m.cuda()``)."""
    import libcst as cst

    from ddplint.analysis.semantic import dotted_name
    from ddplint.analysis.values import SELF_RETURNING_METHODS, is_ddp_model

    if depth > 3:
        return False
    if isinstance(value, cst.Call):
        func = value.func
        if isinstance(func, cst.Attribute) and func.attr.value in SELF_RETURNING_METHODS:
            return _plain_value(index, func.value, depth + 1)
        # a model built here from a class (``Net(**cfg)``, ``self.model_dict[name](**cfg)``), not a
        # wrap, nor a function that may hand it back wrapped (``wrap_model_with_fsdp(m)``)
        built = isinstance(func, cst.Subscript) or (
            isinstance(func, (cst.Name, cst.Attribute)) and dotted_name(func) is not None
            and dotted_name(func).split(".")[-1][:1].isupper())
        return built and not is_ddp_model(index, value, 0, (names.DDP, names.FSDP)) \
            and not wrapped_out_of_calls(index, value)
    if not isinstance(value, (cst.Name, cst.Attribute)):
        return False
    if is_ddp_model(index, value, 0, (names.DDP, names.FSDP)) or wrapped_out_of_calls(index, value):
        return False
    if isinstance(value, cst.Name):
        bindings = index.reaching(value.value, value)
        return bool(bindings) and all(
            (b.kind == "param" and isinstance(b.scope, cst.FunctionDef)
             and not project_of(index).wrapped_param(index.path, function_key(index, b.scope), value.value)
             and not wrapped_by_local_callers(index, b))
            or (b.kind in ("assign", "annassign") and b.value is not None and _plain_value(index, b.value, depth + 1))
            for b in bindings)
    return True


def _contradicts(a: dict, b: dict) -> bool:
    return any(key in b and b[key] != value for key, value in a.items())


def condition_facts(index, node) -> dict[str, bool]:
    """What the plain flags tested on the way to ``node`` hold there, in its
    function: ``{"cfg.only_eval": False}`` inside ``if x and not cfg.only_eval:``
    or after ``if cfg.only_eval: break``. Only names and attributes (a call may
    answer differently each time)."""
    import libcst as cst

    from ddplint.analysis.ranks import always_exits

    found: dict[str, bool] = {}
    child = node
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test:
            _flag_facts(ancestor.test, child is ancestor.body, found)
        elif isinstance(ancestor, (cst.IndentedBlock, cst.Module)) and isinstance(child, cst.BaseStatement):
            for sibling in ancestor.body:
                if sibling is child:
                    break
                if isinstance(sibling, cst.If) and sibling.orelse is None and always_exits(sibling.body):
                    _flag_facts(sibling.test, False, found)
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            break
        child = ancestor
    return found


def _flag_facts(test, holds: bool, into: dict[str, bool]) -> None:
    import libcst as cst

    from ddplint.analysis.semantic import dotted_name

    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        _flag_facts(test.expression, not holds, into)
    elif isinstance(test, cst.BooleanOperation):
        # ``a and b`` true: both true; ``a or b`` false: both false.
        if isinstance(test.operator, cst.And) == holds:
            _flag_facts(test.left, holds, into)
            _flag_facts(test.right, holds, into)
    elif isinstance(test, cst.Comparison) and len(test.comparisons) == 1 \
            and isinstance(test.comparisons[0].operator, (cst.Equal, cst.NotEqual)) \
            and isinstance(test.comparisons[0].comparator, cst.SimpleString):
        # ``if self.mode == "DDP":`` / ``if self.mode != "DDP":``: one fact, "self.mode == 'DDP'"
        name = dotted_name(test.left)
        if name is not None:
            equal = isinstance(test.comparisons[0].operator, cst.Equal)
            into.setdefault(f"{name} == {test.comparisons[0].comparator.evaluated_value!r}", holds == equal)
    else:
        name = dotted_name(test)
        if name is not None and name not in ("True", "False", "None"):
            into.setdefault(name, holds)


def _used_before_its_constructor_wraps_it(index, expr, name: str) -> bool:
    """``self.g`` used in ``__init__`` before the same constructor's ``self.g =
    DDP(self.g)``: the instance is still being built and the class's wrap comes later,
    so the reaching bindings alone say what it holds (a summary forward before the
    wrap; a114 StyleGAN2), not the class-wide "this attribute is wrapped"."""
    import libcst as cst

    from ddplint.analysis.flow import precedes
    from ddplint.analysis.values import _is_wrap_call

    scope = index.enclosing_scope(expr)
    if not isinstance(scope, cst.FunctionDef) or scope.name.value != "__init__":
        return False
    return any(b.kind == "assign" and isinstance(b.value, cst.Call) and index.enclosing_scope(b.node) is scope
               and precedes(index, expr, b.node) and _is_wrap_call(index, b.value, (names.DDP, names.FSDP))
               for b in index.visible_bindings(name, expr) or ())


def wrapped_out_of_calls(index, expr, depth: int = 0) -> str:
    """"ddp"/"fsdp" when ``expr`` holds a model wrapped elsewhere in the
    project: returned by a project function (``model, opt =
    setup_for_distributed_mode(model, opt)``), or an instance attribute
    (``self.vlm``) that the class, a base or a subclass assigns a wrap to; also
    through plain aliases (``self.biencoder = model``)."""
    import libcst as cst

    from ddplint.analysis.roles import call_made_single_process
    from ddplint.screen.facts import RETURN_PREFIX
    from ddplint.analysis.semantic import dotted_name, unpack_position
    from ddplint.analysis.values import unwrapped_in_other_arm

    if isinstance(expr, cst.Subscript):
        return wrapped_by_key(index, expr) if depth <= 4 else ""
    name = dotted_name(expr)
    if name is None or depth > 4:
        return ""
    project = project_of(index)
    parts = name.split(".")
    if len(parts) == 2 and parts[0] == "self":
        owner = _self_class(index, expr)
        if owner and not _used_before_its_constructor_wraps_it(index, expr, name):
            kind = project.attribute_wrapped(index.path, owner, parts[1])
            if kind:
                return kind
    for binding in index.reaching(name, expr):
        value = binding.value
        position = ""
        if binding.kind == "unpack" and isinstance(binding.node, cst.Assign):
            value = binding.node.value
            index_in_tuple = unpack_position(binding.node, name)
            if index_in_tuple is None:
                continue
            position = str(index_in_tuple)
        elif binding.kind not in ("assign", "annassign"):
            continue
        if isinstance(value, (cst.Name, cst.Attribute, cst.Subscript)) and value is not expr and not position:
            kind = "" if unwrapped_in_other_arm(index, binding) else wrapped_out_of_calls(index, value, depth + 1)
        elif isinstance(value, cst.Call):
            kind = _returned_by_call(index, value, position, depth)
        else:
            kind = ""
        if kind:
            return kind
    if len(parts) == 2 and parts[0] != "self" and depth == 0:
        return wrapped_by_keyword(index, expr, parts[1])
    return ""



def returned_wrap(index, call) -> str:
    """"ddp"/"fsdp" when the project function ``call`` runs returns a wrapped model."""
    return _returned_by_call(index, call, "", 0)


def _returned_by_call(index, call, position: str, depth: int) -> str:
    """"ddp"/"fsdp" when the project function ``call`` runs returns a wrapped model
    (at ``position`` of the tuple it returns, "" for the whole value)."""
    from ddplint.analysis.roles import call_made_single_process
    from ddplint.screen.facts import RETURN_PREFIX

    project = project_of(index)
    callee = project_callee(index, call)
    facts = project.callee_facts(index.path, callee) if callee else None
    kind = facts.returns_wrapped.get(position, "") if facts is not None else ""
    if not kind and facts is not None and facts.returns_through.get(position):
        # ``tokenizer, model = get_model(...)`` where get_model returns set_model()'s FSDP model
        kind = project.returned_tag(index.path, f"{RETURN_PREFIX}{callee}:{position}")
    if not kind and not position:
        kind = _returned_here(index, call, depth)
    if not kind and not position and facts is not None and facts.returns_params and depth <= 3:
        kind = _passed_through(index, call, facts, depth)
    if kind and call_made_single_process(index, call):
        kind = ""  # ``cfg.num_gpus = 1`` just before: the builder leaves the model plain
    return kind


def _passed_through(index, call, facts, depth: int) -> str:
    """``self.netG = self.set_device(networks.define_G(opt))`` where ``set_device(self,
    x)`` (a base class's, another module) returns ``x`` moved: what the argument holds
    (a114 IDM)."""
    import libcst as cst

    params = list(facts.params)
    if isinstance(call.func, cst.Attribute) and params[:1] in (["self"], ["cls"]):
        params = params[1:]
    positional = [a for a in call.args if a.keyword is None and not a.star]
    for param in facts.returns_params:
        arg = next((a for a in call.args if a.keyword is not None and a.keyword.value == param), None)
        if arg is None and param in params and params.index(param) < len(positional):
            arg = positional[params.index(param)]
        if arg is None:
            continue
        if isinstance(arg.value, cst.Call):
            kind = _returned_by_call(index, arg.value, "", depth + 1)
        else:
            kind = wrapped_out_of_calls(index, arg.value, depth + 1)
        if kind:
            return kind
    return ""


def _returned_here(index, call, depth: int) -> str:
    """A function or method of this module that returns a model it had a
    project helper wrap (``def build_model(self): model = create_ddp_model(m);
    return model``, then ``self.model = self.build_model()``)."""
    import libcst as cst

    from ddplint.analysis import flow

    site = index.call_site(call)
    if site is None or depth > 3:
        return ""
    for function in flow.helper_functions(index, site):
        for exit_node in index.exits:
            if isinstance(exit_node, cst.Return) and isinstance(exit_node.value, (cst.Name, cst.Attribute)) \
                    and flow.enclosing_function(index, exit_node) is function:
                kind = wrapped_out_of_calls(index, exit_node.value, depth + 1)
                if kind:
                    return kind
    return ""


def wrapped_by_key(index, expr) -> str:
    """"ddp"/"fsdp" for ``holder["model"]`` (a state tracker, a dict of run
    objects) when this module stores a wrapped model under that key: a keyword
    argument (``StateTracker(..., model=ddp_model)``) or a dict entry bound to
    a name (``state = {"model": ddp_model}``). The holder itself is not
    resolved; the key ties them."""
    key = _string_key(expr)
    if key is None:
        return ""
    cache = index.cache.setdefault("models.wrapped_keys", {})
    if key not in cache:
        cache[key] = ""  # (no recursion through the key itself)
        cache[key] = _wrapped_keyword_argument(index, key) or _wrapped_dict_entry(index, key)
    return cache[key]


def _wrapped_keyword_argument(index, keyword: str, constructors_only: bool = False) -> str:
    """The kind of the first wrapped model this module passes as ``keyword=``
    to a call (with ``constructors_only``: a capitalised callee or
    SimpleNamespace)."""
    from ddplint.analysis.semantic import dotted_name

    for site in index.calls:
        if constructors_only:
            callee = (dotted_name(site.node.func) or "").rsplit(".", 1)[-1]
            if not callee[:1].isupper() and callee != "SimpleNamespace":
                continue
        for arg in site.node.args:
            if arg.keyword is not None and arg.keyword.value == keyword:
                found = wrapped_kind(index, arg.value, site.order)
                if found:
                    return found
                break
    return ""


def wrapped_by_keyword(index, expr, attribute: str) -> str:
    """"ddp"/"fsdp" for ``models.generator`` when the holder is a container
    object this module builds with the wrapped model as a keyword argument of a
    constructor (``return self.Models(generator=fsdp_model)``,
    ``SimpleNamespace(model=ddp_model)``) and the holder itself comes from a
    parameter or a call (nothing else says what it is). Only constructors (a
    capitalised name): a plain function's keyword is not an attribute of what
    it returns."""
    import libcst as cst

    holder = expr.value if isinstance(expr, cst.Attribute) else None
    if not isinstance(holder, cst.Name):
        return ""
    bindings = index.reaching(holder.value, holder)
    if not bindings or any(b.kind not in ("param", "assign", "annassign") for b in bindings) \
            or any(b.kind != "param" and not isinstance(b.value, cst.Call) for b in bindings):
        return ""
    cache = index.cache.setdefault("models.wrapped_keywords", {})
    if attribute not in cache:
        cache[attribute] = ""  # (no recursion through the attribute itself)
        cache[attribute] = _wrapped_keyword_argument(index, attribute, constructors_only=True)
    return cache[attribute]


def _string_key(expr) -> Optional[str]:
    import libcst as cst

    if not isinstance(expr, cst.Subscript) or len(expr.slice) != 1:
        return None
    index_node = expr.slice[0].slice
    if not isinstance(index_node, cst.Index) or not isinstance(index_node.value, cst.SimpleString):
        return None
    value = index_node.value.evaluated_value
    return value if isinstance(value, str) and value.isidentifier() else None


def _wrapped_dict_entry(index, key: str) -> str:
    """``state = {"model": ddp_model}`` in this module."""
    import libcst as cst

    for (_, name), bindings in index.bindings.items():
        for binding in bindings:
            value = binding.value
            if isinstance(value, cst.Dict):
                for element in value.elements:
                    if isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString) \
                            and element.key.evaluated_value == key:
                        kind = wrapped_kind(index, element.value, binding.order)
                        if kind:
                            return kind
    return ""


def _unwrapped_on_the_way(index, expr) -> bool:
    """Does ``name = name.module`` under ``if isinstance(name, DDP):`` (or
    ``hasattr(name, "module")``, or a test that holds in a distributed run only:
    ``if args.distributed:``) reach the use? Then the other bindings that
    reach it (the parameter, the wrap) arrive only when the test was false:
    the name never holds the wrapper there."""
    import libcst as cst

    from ddplint.analysis.semantic import dotted_name

    if not isinstance(expr, cst.Name):
        return False
    reaching = index.reaching(expr.value, expr)
    # ``network = self.netG`` then ``if isinstance(self.netG, DDP): network = network.module``:
    # the test may name what the alias was copied from (a114 IDM)
    subjects = {expr.value} | {dotted_name(b.value) for b in reaching if b.kind == "assign" and _plain_alias(b.value)}
    for binding in reaching:
        value = binding.value
        if binding.kind != "assign" or not isinstance(value, cst.Attribute) or value.attr.value != "module" \
                or dotted_name(value.value) != expr.value:
            continue
        branch = index.enclosing(binding.node, cst.If)
        if branch is None or not any(a is branch.body for a in index.ancestors(binding.node)):
            continue
        if any(subject and _isinstance_facts(index, branch.test, subject, False) for subject in subjects):
            return True
        from ddplint.analysis.roles import flag_polarity

        if flag_polarity(index, branch.test) is True:
            return True  # ``if args.distributed: model = model.module``: wrapped only in that run
    return False


def _plain_alias(value) -> bool:
    """``self.netG`` / ``net`` (not ``net.module``): a copy of another name."""
    import libcst as cst

    return isinstance(value, cst.Name) or (isinstance(value, cst.Attribute) and value.attr.value != "module"
                                           and isinstance(value.value, (cst.Name, cst.Attribute)))


def not_instance_of(index, expr) -> frozenset:
    """The wrapper classes (qualified names) that ``expr`` certainly is not an
    instance of where it is used: it sits in the arm of an ``if`` (or
    conditional expression) where ``isinstance(expr, FSDP)`` is false, or after
    ``if isinstance(expr, FSDP): return``."""
    import libcst as cst

    from ddplint.analysis.ranks import always_exits
    from ddplint.analysis.semantic import dotted_name

    name = dotted_name(expr)
    if name is None:
        return frozenset()
    found: set[str] = set()
    child = expr
    for ancestor in index.ancestors(expr):
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test:
            holds = child is ancestor.body
            found |= _isinstance_facts(index, ancestor.test, name, holds)
        elif isinstance(ancestor, (cst.IndentedBlock, cst.Module)) and isinstance(child, cst.BaseStatement):
            for sibling in ancestor.body:
                if sibling is child:
                    break
                if isinstance(sibling, cst.If) and sibling.orelse is None and always_exits(sibling.body):
                    found |= _isinstance_facts(index, sibling.test, name, False)
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            break
        child = ancestor
    return frozenset(found)


def _isinstance_facts(index, test, name: str, holds: bool) -> set:
    """Classes ``name`` is not an instance of when ``test`` is ``holds``."""
    import libcst as cst

    from ddplint.analysis.semantic import dotted_name

    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _isinstance_facts(index, test.expression, name, not holds)
    if isinstance(test, cst.BooleanOperation):
        # ``a and b`` true: both true; ``a or b`` false: both false.
        if isinstance(test.operator, cst.And) == holds:
            return _isinstance_facts(index, test.left, name, holds) | _isinstance_facts(index, test.right, name, holds)
        return set()
    if holds or not isinstance(test, cst.Call) or len(test.args) != 2 or dotted_name(test.args[0].value) != name:
        return set()
    if dotted_name(test.func) == "hasattr":  # ``m.module if hasattr(m, "module") else m``
        attribute = test.args[1].value
        if isinstance(attribute, cst.SimpleString) and attribute.evaluated_value == "module":
            return {names.DDP, names.FSDP}
        return set()
    if dotted_name(test.func) != "isinstance":
        return set()
    classes = test.args[1].value
    elements = [e.value for e in classes.elements] if isinstance(classes, (cst.Tuple, cst.List)) else [classes]
    return {index.qualified_name(e) for e in elements if index.qualified_name(e)}


def wrapped_slots(index, site) -> dict[str, str]:
    """Argument slots of a call that carry a wrapped model: {"0": "ddp", "model": "fsdp"}."""
    slots: dict[str, str] = {}
    position = 0
    for arg in site.node.args:
        if arg.star:
            break
        slot = arg.keyword.value if arg.keyword is not None else str(position)
        if arg.keyword is None:
            position += 1
        kind = wrapped_kind(index, arg.value, site.order)
        if kind:
            slots[slot] = kind
    return slots


def exclusive_branches(index, a, b) -> bool:
    """Are nodes ``a`` and ``b`` in different branches of one ``if`` (so never
    both run)? ``elif`` chains are nested ifs in ``orelse``."""
    import libcst as cst

    path_a = {id(n): child for child, n in _child_ancestor_pairs(index, a) if isinstance(n, cst.If)}
    for child, ancestor in _child_ancestor_pairs(index, b):
        if id(ancestor) in path_a:
            return path_a[id(ancestor)] is not child and child is not ancestor.test
    return False


def _child_ancestor_pairs(index, node):
    child = node
    for ancestor in index.ancestors(node):
        yield child, ancestor
        child = ancestor


_COPY_NAME = re.compile(r"ema|teacher|shadow|average|swa", re.IGNORECASE)


def _runs_only_before(index, method, binding, depth: int = 0) -> bool:
    """Does ``method`` (a method of a class of this module) run only before the
    statement ``binding`` of another method of the same class: every call of it is
    ``self.method(...)`` in that method ahead of the binding, or in a method that
    itself runs only before it (``__init__`` calls ``self.load_from_ckpt()``, which
    calls ``self.load_model()``, and only then wraps ``self.net`` in DDP)? Nothing
    else in the project may call it."""
    import libcst as cst

    owner = index.parent(index.parent(method)) if isinstance(method, cst.FunctionDef) else None
    home = index.enclosing_scope(binding.node)
    if not isinstance(owner, cst.ClassDef) or home is method or depth > 3 \
            or index.parent(index.parent(home)) is not owner:
        return False
    name = method.name.value
    project = project_of(index)
    if any(path != index.path for path, _ in project.callers.get((index.path, f"{owner.name.value}.{name}"), ())):
        return False
    sites = index.method_calls(name)
    if not sites:
        return False
    for site in sites:
        if not (isinstance(site.receiver, cst.Name) and site.receiver.value == "self"):
            return False
        caller = site.scope
        if caller is home:
            if site.order > binding.order:
                return False
        elif not _runs_only_before(index, caller, binding, depth + 1):
            return False
    return True


def wrapped_root(index, expr, at_order: int, wrappers: tuple[str, ...] = (names.DDP,),
                 _depth: int = 0) -> Optional[str]:
    """The part of ``expr`` (``model``, ``self.net``, ``ddp.module.encoder``) that
    names a model already wrapped by one of ``wrappers`` at ``at_order``: the
    wrapper itself, or the inner model passed to a wrap call earlier in the same
    function. None otherwise, and for EMA/teacher copies."""
    import libcst as cst

    from ddplint.analysis.semantic import dotted_name
    from ddplint.analysis.values import is_ddp_model

    name = dotted_name(expr)
    if name is None or _COPY_NAME.search(name):
        return None
    parts = name.split(".")
    scope = index.enclosing_scope(expr)
    wrap_calls = [site for site in index.calls_to(*wrappers) if site.order < at_order]
    for size in range(len(parts), 0, -1):
        prefix = ".".join(parts[:size])
        held = expr
        for _ in range(len(parts) - size):
            held = held.value if isinstance(held, cst.Attribute) else held
        if set(wrappers) <= not_instance_of(index, held):
            continue  # the ``else:`` of ``if hasattr(self.model, "module"):`` (a59 nemo_test)
        # Bindings before the use, minus the statement the use sits in
        # (``net = convert(net)`` binds ``net`` before its value's calls).
        enclosing = {id(a) for a in index.ancestors(expr)}
        if size == 1:
            bindings = index.reaching(prefix, expr)
        else:
            bindings = [b for b in index.visible_bindings(prefix, expr) or []
                        if b.order < at_order and id(b.node) not in enclosing]
        for binding in bindings:
            value = binding.value
            if size > 1 and _runs_only_before(index, index.enclosing_scope(expr), binding):
                continue  # ``self.load_model()`` that ``__init__`` runs before it wraps ``self.net``
            if binding.kind in ("assign", "annassign") and value is not None:
                if size > 1 and _moves_itself(value, prefix):
                    continue  # ``self.model = self.model.to(rank)``: what it held before (the earlier
                    # bindings, judged here too), not every binding of the attribute (a100 dllib)
                if is_ddp_model(index, value, at_order, wrappers):
                    return prefix
                if isinstance(value, cst.Call) and size > 1 \
                        and {"ddp": names.DDP, "fsdp": names.FSDP}.get(returned_wrap(index, value)) in wrappers:
                    return prefix  # ``self.netG = self.set_device(define_G(opt))``, the wrap in define_G
                # An alias of a wrapped model or of its inner model
                # (``inner = ddp.module``, ``net = self.net``).
                if isinstance(value, (cst.Name, cst.Attribute)) and value is not expr and _depth < 4 \
                        and wrapped_root(index, value, at_order, wrappers, _depth + 1) is not None:
                    return prefix
            if binding.kind == "param" and size == 1 and isinstance(binding.scope, cst.FunctionDef):
                kind = project_of(index).wrapped_param(index.path, function_key(index, binding.scope), prefix)
                if kind and {"ddp": names.DDP, "fsdp": names.FSDP}[kind] in wrappers:
                    return prefix
        for site in wrap_calls:
            module = site.argument("module", 0)
            if site.scope is scope and module is not None and dotted_name(module.value) == prefix \
                    and not exclusive_branches(index, site.node, expr):
                return prefix
        if size == 1 and _returned_wrapped(index, expr, wrappers):
            return prefix
    return None


def _moves_itself(value, name: str) -> bool:
    """``self.model.to(rank)`` / ``.cuda()`` / ``.train()`` of the attribute ``name`` itself."""
    import libcst as cst

    from ddplint.analysis.semantic import dotted_name
    from ddplint.analysis.values import SELF_RETURNING_METHODS

    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
            and value.func.attr.value in SELF_RETURNING_METHODS:
        value = value.func.value
    return dotted_name(value) == name


def _returned_wrapped(index, expr, wrappers: tuple[str, ...]) -> bool:
    """The name at the root of ``expr`` holds a model that a project function
    returned wrapped (``gen, dis = setup.prepare_parallel(gen, dis)``)."""
    import libcst as cst

    base = expr
    while isinstance(base, cst.Attribute):
        base = base.value
    if not isinstance(base, cst.Name):
        return False
    kind = wrapped_out_of_calls(index, base)
    return bool(kind) and {"ddp": names.DDP, "fsdp": names.FSDP}[kind] in wrappers


def function_key(index, function) -> str:
    """The project's name of a function definition: "Class.method" for a method
    defined in a class body ("Outer.Inner.method" in a nested class), the plain
    name otherwise (as ``ddplint.screen.facts`` keys them)."""
    owner = _owning_class(index, function)
    return f"{owner}.{function.name.value}" if owner else function.name.value


def _owning_class(index, node) -> str:
    """The key of the class whose body directly holds ``node`` (a def or a
    class), "" when none."""
    import libcst as cst

    block = index.parent(node)
    owner = index.parent(block) if block is not None else None
    if not isinstance(owner, cst.ClassDef):
        return ""
    outer = _owning_class(index, owner)
    return f"{outer}.{owner.name.value}" if outer else owner.name.value


# Calls into these are never calls of the project's classes.


def project_callee(index, call) -> Optional[str]:
    """A call's callee as the project's facts spell it: the dotted name as
    written, or for a call through an instance of a class of the project
    "Cls.method" / "Cls.__call__": ``self.m()`` in a method of Cls, ``obj.m()``
    with ``obj = Cls(...)``, ``self.x.m()`` with ``self.x = Cls(...)``,
    ``Cls(...).m()``, ``obj(...)``. ``Project.resolve_function`` resolves both."""
    import libcst as cst

    from ddplint.analysis.semantic import dotted_name

    func = call.func
    if isinstance(func, cst.Attribute):
        holder = _instance_class(index, func.value)
        if holder:
            return f"{holder}.{func.attr.value}"
        if isinstance(func.value, cst.Name) and func.value.value in ("self", "cls") \
                and not _instance_class(index, func):
            owner = _self_class(index, call)
            if owner:
                return f"{owner}.{func.attr.value}"
        factory = _factory_of(index, func.value)
        if factory:
            return f"{factory}{FACTORY_CALL}{func.attr.value}"
    holder = _instance_class(index, func)
    return f"{holder}.__call__" if holder else dotted_name(func)


def _factory_of(index, expr) -> str:
    """``build_trainer`` when every value that may reach the name ``expr`` is a
    call of that one function (``trainer = build_trainer(args)``), not a class's nor a
    library's: ``trainer.train(model)`` runs a method of what it returns (the
    facts' ``factory_of``, resolved by ``Project.factory_methods``). "" otherwise."""
    import libcst as cst

    from ddplint.analysis.semantic import dotted_name

    if not isinstance(expr, cst.Name) or expr.value in ("self", "cls"):
        return ""
    values = index.reaching_values(expr) or []
    callees = {dotted_name(v.func) if isinstance(v, cst.Call) else None for v in values}
    if len(callees) != 1:
        return ""
    callee = callees.pop()
    if callee is None or callee.split(".")[-1][:1].isupper() \
            or (index.qualified_name(values[0].func) or "").startswith(LIBRARY_PREFIXES):
        return ""
    return callee


def _self_class(index, node) -> str:
    """The class ``self`` belongs to at ``node``: that of the nearest enclosing
    method (a function nested in a method keeps its ``self``)."""
    import libcst as cst

    for ancestor in index.ancestors(node):
        if isinstance(ancestor, cst.FunctionDef):
            owner = _owning_class(index, ancestor)
            if owner:
                return owner
    return ""


def _instance_class(index, expr, depth: int = 0) -> str:
    """The class (as written) of the instance ``expr`` holds when every value
    that may reach it is a construction of one class (``Cls(...)``), or ""."""
    import libcst as cst

    from ddplint.analysis.semantic import dotted_name

    if isinstance(expr, cst.Call):
        name = dotted_name(expr.func)
        if name is None or not name.split(".")[-1][:1].isupper():
            return ""
        return "" if (index.qualified_name(expr.func) or "").startswith(LIBRARY_PREFIXES) else name
    name = dotted_name(expr)
    if name is None or name in ("self", "cls") or depth > 2:
        return ""
    values = index.reaching_values(expr) or []
    if not values and isinstance(expr, cst.Name):
        return _annotated_class(index, expr)
    classes = {_instance_class(index, value, depth + 1) for value in values}
    return classes.pop() if len(classes) == 1 else ""


def _annotated_class(index, expr) -> str:
    """``def train(..., loss_scaler: NativeScaler)``: the class a parameter is
    annotated with (one plain class name, not a library's), or ""."""
    import libcst as cst

    from ddplint.analysis.semantic import dotted_name

    bindings = index.reaching(expr.value, expr)
    if len(bindings) != 1 or bindings[0].kind != "param" or not isinstance(bindings[0].node, cst.Param):
        return ""
    annotation = bindings[0].node.annotation
    name = dotted_name(annotation.annotation) if annotation is not None else None
    if name is None or not name.split(".")[-1][:1].isupper():
        return ""
    qualified = index.qualified_name(annotation.annotation) or ""
    if qualified.startswith(LIBRARY_PREFIXES) or qualified.startswith("typing."):
        return ""
    return name


def parameter_values(index, binding, attribute: str = "") -> Optional[frozenset[str]]:
    """What the project's call sites pass for a parameter binding (tags of
    ``ddplint.screen.facts``: global_rank, local_rank, spawn_index, ...), or with
    ``attribute`` for that attribute of the object they pass (``config.rank``);
    None when no call of the function is known."""
    import libcst as cst

    if binding.kind != "param" or not isinstance(binding.scope, cst.FunctionDef):
        return None
    project = project_of(index)
    key = function_key(index, binding.scope)
    param = f"{binding.name}.{attribute}" if attribute else binding.name
    found = project.param_values(index.path, key, param)
    if found is None and "." in key:  # summaries that key methods by their bare name
        found = project.param_values(index.path, binding.scope.name.value, param)
    return found


_RANK_SOURCE_OF_TAG = {GLOBAL_RANK: "global", LOCAL_RANK: "local", ARGV_LOCAL_RANK: "local",
                       SPAWN_INDEX: "local", LITERAL: "literal"}


def rank_source_of_tag(tag: str) -> str:
    """The rank source (``values.rank_sources``' words) a facts tag names."""
    return _RANK_SOURCE_OF_TAG.get(tag, "unknown")


def parameter_rank_sources(index, binding, attribute: str = "") -> frozenset[str]:
    """The rank sources (see ``values.rank_sources``) that the project's call
    sites pass for a parameter (or for ``attribute`` of it): a global rank passed
    as ``fit(rank)`` is a global rank inside ``fit``; the index ``mp.spawn``
    passes to its target is a local one (single-node launch). {"unknown"} when
    no call is known."""
    tags = parameter_values(index, binding, attribute)
    if not tags:
        return frozenset({"unknown"})
    return frozenset(rank_source_of_tag(tag) for tag in tags)


def guard_encloses_wrap(index, guard, node, wrappers: tuple[str, ...] = (names.DDP, names.FSDP)) -> bool:
    """Does the rank guard ``guard`` of ``node`` also guard a wrap (``DDP(...)``)
    of the same function that comes before ``node``? Then the guard selects the
    ranks that own the wrapped model (a role: ``if rank in learners:`` around
    both the wrap and its use), and every rank that has the model takes part."""
    from ddplint.analysis.ranks import rank_guards

    scope = index.enclosing_scope(node)
    site = index.call_site(node) if hasattr(node, "func") else None
    order = site.order if site is not None else None
    for wrap in index.calls_to(*wrappers):
        if wrap.scope is not scope or (order is not None and wrap.order > order):
            continue
        if any(g.node is guard.node and g.branch == guard.branch for g in rank_guards(index, wrap.node, True)):
            return True
    return False


def wrap_process_group(index, expr, at_order: int) -> bool:
    """Is the model ``expr`` holds wrapped with an explicit ``process_group=``
    (a subgroup DDP: its forward is a collective over that group only)?"""
    import libcst as cst

    from ddplint.analysis.semantic import dotted_name

    name = dotted_name(expr)
    if name is None:
        return False
    for binding in index.reaching(name, expr) if "." not in name else index.visible_bindings(name, expr) or []:
        value = binding.value
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
                and index.qualified_name(value.func) is None and value.func.attr.value in ("to", "cuda"):
            value = value.func.value
        if isinstance(value, cst.Call) and index.qualified_name(value.func) in (names.DDP, names.FSDP):
            site = index.call_site(value)
            group = site.argument("process_group") if site is not None else None
            if group is not None and not (isinstance(group.value, cst.Name) and group.value.value == "None"):
                return True
    return False


def checkpoint_file_name(index, expr, depth: int = 0) -> str:
    """The file name a save writes, as far as the text tells: the literal name
    (``'last.pt'``, the last part of ``os.path.join(out, 'last.pt')``,
    ``out + '/last.pt'``), with '*' for the holes of an f-string
    (``f'ckpt_{epoch}.pt'`` -> ``'ckpt_*.pt'``); "" when unknown."""
    import libcst as cst

    from ddplint.analysis.semantic import dotted_name

    if depth > 3 or expr is None:
        return ""
    if isinstance(expr, cst.SimpleString):
        value = expr.evaluated_value
        return value.replace("\\", "/").rsplit("/", 1)[-1] if isinstance(value, str) else ""
    if isinstance(expr, cst.FormattedString):
        text = "".join(part.value if isinstance(part, cst.FormattedStringText) else "*" for part in expr.parts)
        name = text.rsplit("/", 1)[-1]
        return name if name.strip("*") else ""
    if isinstance(expr, cst.ConcatenatedString):
        return checkpoint_file_name(index, expr.right, depth + 1)
    if isinstance(expr, cst.Call) and expr.args and (dotted_name(expr.func) or "").endswith("join"):
        return checkpoint_file_name(index, expr.args[-1].value, depth + 1)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Add, cst.Divide)):
        return checkpoint_file_name(index, expr.right, depth + 1)
    if isinstance(expr, cst.Name):
        values = index.reaching_values(expr) or []
        if len(values) == 1:
            return checkpoint_file_name(index, values[0], depth + 1)
    return ""


def overridden_where_wrapped(index, node, attribute: str, kind: str = "fsdp") -> bool:
    """Is ``self.<attribute>`` wrapped (``kind``) only in project subclasses of
    the class whose method holds ``node``, each of which overrides that method
    (``BasicTrainer.clip_gradient`` on a plain model, ``FSDPTrainer`` wrapping
    ``self.policy`` and defining its own ``clip_gradient``)? Then the method
    never runs on the wrapped model."""
    from ddplint.analysis.ranks import enclosing_function

    function = enclosing_function(index, node)
    owner = _owning_class(index, function) if function is not None else ""
    if not owner:
        return False
    project = project_of(index)
    module = project.modules.get(index.path)
    subclasses = getattr(project, "_subclasses", None)
    if module is None or subclasses is None or module.wrapped_attributes.get(owner, {}).get(attribute):
        return False
    method = function.name.value
    found_wrap = False
    pending, seen = list(subclasses().get((index.path, owner), ())), set()
    while pending:
        path, cls = pending.pop()
        if (path, cls) in seen or path not in project.modules:
            continue
        seen.add((path, cls))
        facts = project.modules[path]
        if f"{cls}.{method}" in facts.functions:
            found_wrap = found_wrap or facts.wrapped_attributes.get(cls, {}).get(attribute) == kind
            continue  # this subtree runs its own method
        if facts.wrapped_attributes.get(cls, {}).get(attribute) == kind:
            return False  # a wrapping subclass inherits the method
        pending.extend(subclasses().get((path, cls), ()))
    return found_wrap


def wraps_through_a_project_module(index) -> bool:
    """Does this module wrap a model with DDP/FSDP (or start the process group)
    through a name another module of the project re-exports
    (``import extend_distributed as ext_dist`` ... ``ext_dist.DDP(net)``, where
    that module does ``from torch.nn.parallel import DistributedDataParallel as
    DDP``)? Such a module is in DDP context although it imports nothing of
    torch.distributed itself."""
    from ddplint.analysis.semantic import dotted_name

    wanted = (names.DDP, names.FSDP, names.INIT_PROCESS_GROUP)
    project = project_of(index)
    for site in index.calls:
        callee = dotted_name(site.node.func)
        if callee is None or "." not in callee:
            continue
        holder, _, attribute = callee.rpartition(".")
        target = index.imports.get(holder)
        path = project.resolve_module(index.path, target) if target else None
        module = project.modules.get(path) if path else None
        if module is not None and names.canonical(module.imports.get(attribute, "")) in wanted:
            return True
    return False


def wrapped_by_local_callers(index, binding) -> str:
    """"ddp"/"fsdp" when a call of the parameter's function in this module
    passes a model that is wrapped there in a way the project facts do not tag
    (``optimizer, scheduler, model = prep_optimizer(...)`` returning the DDP
    model, then ``train_epoch(epoch, args, model, ...)``)."""
    import libcst as cst

    from ddplint.analysis.flow import callers

    function = binding.scope
    key = ("models.local_callers", id(function), binding.name)
    if key in index.cache:
        return index.cache[key] or ""
    index.cache[key] = ""  # a recursion through these callers finds nothing
    params = [p.name.value for p in (*function.params.posonly_params, *function.params.params)]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    position = params.index(binding.name) if binding.name in params else None
    kind = ""
    for site in callers(index, function):
        arg = site.keyword(binding.name)
        if arg is None and position is not None:
            positional = [a for a in site.node.args if a.keyword is None and not a.star]
            if any(a.star for a in site.node.args[:position + 1]):
                continue
            arg = positional[position] if position < len(positional) else None
        if arg is not None and isinstance(arg.value, (cst.Name, cst.Attribute)):
            kind = wrapped_kind(index, arg.value, site.order)
            if kind:
                break
    index.cache[key] = kind
    return kind


def alternative_callees(index, call) -> list[str]:
    """The project callees of ``self.loss_fn(...)`` (or ``fn(...)``) when the
    instance is built from a class chosen at run time (``Loss = LossA if small
    else LossB``, or assigned on two branches, ... ``self.loss_fn = Loss(...)``): "LossA.__call__",
    "LossB.__call__"; [] when any alternative is unknown."""
    import libcst as cst

    from ddplint.analysis.semantic import dotted_name

    values = index.reaching_values(call.func) if dotted_name(call.func) is not None else None
    if not values:
        return []
    found: list[str] = []
    for value in values:
        if not isinstance(value, cst.Call) or not isinstance(value.func, cst.Name):
            return []
        classes = index.reaching_values(value.func)
        if not classes:
            return []
        arms = []
        for cls in classes:  # ``Loss = LossA if small else LossB``: both arms
            arms.extend((cls.body, cls.orelse) if isinstance(cls, cst.IfExp) else (cls,))
        for cls in arms:
            name = dotted_name(cls)
            if name is None or not name.split(".")[-1][:1].isupper():
                return []
            found.append(f"{name}.__call__")
    return found


def linked_modules(index) -> frozenset:
    """The modules linked to this one by imports or calls, in either direction
    and transitively (a weakly connected component of the project). A parallel
    run judges each such component with its own project, so a question that
    looks beyond ``Project.scope`` (a standalone script, a sibling) must stay
    inside it to answer the same with one process or several."""
    key = "models.linked_modules"
    if key in index.cache:
        return index.cache[key]
    project = project_of(index)
    seen, pending = {index.path}, [index.path]
    while pending:
        path = pending.pop()
        for other in (*project.reaches.get(path, ()), *project.reached_by(path)):
            if other not in seen and other in project.modules:
                seen.add(other)
                pending.append(other)
    index.cache[key] = frozenset(seen)
    return index.cache[key]


def wrapper_subclass(index, func, wrapper: str = names.DDP, same_init: bool = False) -> bool:
    """Does the callee ``func`` name a project class whose bases lead to
    ``wrapper`` (``class _DDP(torch.nn.parallel.DistributedDataParallel)`` that
    only adds ``__getattr__`` or ``forward``; defined here or imported from a
    project module, through project bases)? Constructing it wraps a model as
    the library class does. With ``same_init``, only when no project class on
    the way defines ``__init__`` (the call's keywords reach the wrapper's own
    constructor unchanged). Bounded (16 classes) and memoised per callee."""
    from ddplint.analysis.semantic import dotted_name

    dotted = dotted_name(func)
    if dotted is None:
        return False
    memo = index.cache.setdefault("wrapper_subclass", {})
    key = (dotted, wrapper, same_init, index.qualified_name(func))
    if key in memo:
        return memo[key]
    memo[key] = False
    project = project_of(index)
    start = project._definition(index.path, dotted) if index.path in project.modules else None
    if start is None or start[1] not in project.modules[start[0]].classes:
        return False
    pending, seen, found = [start], set(), False
    while pending and len(seen) < 16 and not found:
        path, cls = pending.pop()
        if (path, cls) in seen:
            continue
        seen.add((path, cls))
        module = project.modules[path]
        if same_init and f"{cls}.__init__" in module.functions:
            break  # its own constructor decides what reaches the wrapper
        for base in module.classes.get(cls, ()):
            definition = project._definition(path, base)
            if definition is not None and definition[1] in project.modules[definition[0]].classes:
                pending.append(definition)
                continue
            head, _, rest = base.partition(".")
            target = module.imports.get(head)
            if target and names.canonical(target + ("." + rest if rest else "")) == wrapper:
                found = True
    memo[key] = found
    return found
