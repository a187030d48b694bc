"""The training-loop model: facts about loops, grad regions and tensors that the
training-loop rules (DDP001-DDP004, DDP013, DDP014) share.

Everything here is derived from what ``SemanticIndex`` recorded in its single
traversal (calls, bindings, parents, loops, withs, ifs, exits); nothing walks the
tree again. Results that several rules need are cached in ``index.cache``.

Vocabulary:

- a *tensor backward* is ``expr.backward()`` on a tensor (``loss.backward()``,
  ``scaler.scale(loss).backward()``, ``torch.autograd.backward(loss)``), not a
  framework's ``accelerator.backward(loss)`` / DeepSpeed ``engine.backward(loss)``;
- an *optimizer step* is ``opt.step()`` on something that holds an optimizer, or
  ``scaler.step(opt)``;
- a *training loop* is a loop whose iteration (with one level of same-module
  helper calls inlined) runs a tensor backward; the innermost such loop is the
  *step loop*, a loop around it the *epoch loop*;
- a *graph tensor* is a value with autograd history: a model or criterion output
  and anything computed from it by arithmetic, indexing, tensor methods and
  ``torch.*`` functions, until a sanitiser (``.item()``, ``.detach()``,
  ``float()``, ``.tolist()``, ``torch.tensor(x)``) cuts the history.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Optional, Union

import libcst as cst

from ddplint import names
from ddplint.analysis.values import is_ddp_model, literal_bool
from ddplint.analysis.semantic import Binding, CallSite, SemanticIndex, dotted_name, unpack_position

Loop = Union[cst.For, cst.While]
_FUNCTION_TYPES = (cst.FunctionDef, cst.Lambda)

WRAPPERS = (names.DDP, names.FSDP)

# ---------------------------------------------------------------------- structure


def enclosing_function(index: SemanticIndex, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, cst.FunctionDef):
            return ancestor
        if isinstance(ancestor, cst.Lambda):
            return None
    return None


def enclosing_loops(index: SemanticIndex, node: cst.CSTNode) -> list[Loop]:
    """Loops around ``node`` inside its own function, innermost first. A node in
    a loop's ``else`` or its iterable is not "in" the loop's iteration."""
    found: list[Loop] = []
    child = node
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, (cst.For, cst.While)) and child is ancestor.body:
            found.append(ancestor)
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            break
        child = ancestor
    return found


def is_inside(index: SemanticIndex, node: cst.CSTNode, container: cst.CSTNode) -> bool:
    return node is container or any(a is container for a in index.ancestors(node))


def precedes(index: SemanticIndex, first: cst.CSTNode, second: cst.CSTNode) -> bool:
    """Does ``first`` start before ``second`` in source order? Compared through
    their lowest common ancestor's children, so no positions are needed."""
    chain_first = [first, *index.ancestors(first)]
    position = {id(node): i for i, node in enumerate(chain_first)}
    child_second = second
    for ancestor in [second, *index.ancestors(second)]:
        if id(ancestor) in position:
            i = position[id(ancestor)]
            if i == 0:
                return True  # first contains second
            child_first = chain_first[i - 1]
            if ancestor is second:
                return False
            for child in ancestor.children:
                if child is child_first:
                    return True
                if child is child_second:
                    return False
            return False
        child_second = ancestor
    return False


def _calls_by_loop(index: SemanticIndex) -> dict[int, list[CallSite]]:
    """Every loop's calls (its own body, nested loops included), built once."""
    cached = index.cache.get("flow.calls_by_loop")
    if cached is None:
        cached = {}
        for site in index.calls:
            for loop in enclosing_loops(index, site.node):
                cached.setdefault(id(loop), []).append(site)
        index.cache["flow.calls_by_loop"] = cached
    return cached


def calls_in(index: SemanticIndex, loop: Loop) -> list[CallSite]:
    return _calls_by_loop(index).get(id(loop), [])


def calls_in_function(index: SemanticIndex, function: cst.CSTNode) -> list[CallSite]:
    cached = index.cache.get("flow.calls_by_function")
    if cached is None:
        cached = {}
        for site in index.calls:
            cached.setdefault(id(site.scope), []).append(site)
        index.cache["flow.calls_by_function"] = cached
    return cached.get(id(function), [])


# ---------------------------------------------------------------------- helpers (one level)


def helper_functions(index: SemanticIndex, site: CallSite) -> list[cst.FunctionDef]:
    """Same-module functions a call may run: ``helper(...)`` by name, or
    ``self.helper(...)`` for a method of the enclosing class."""
    func = site.node.func
    if isinstance(func, cst.Name):
        if site.qualified_name is not None:
            return []
        return [f for f in index.functions_named(func.value) if f is not site.scope]
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
        owner = index.enclosing(site.node, cst.ClassDef)
        if owner is None:
            # enclosing() stops at the method itself; look one function further out
            function = enclosing_function(index, site.node)
            owner = index.enclosing(function, cst.ClassDef) if function is not None else None
        if owner is None:
            return []
        return [f for f in index.functions_named(func.attr.value)
                if f is not site.scope and index.parent(index.parent(f)) is owner]
    return []


@dataclass(frozen=True)
class Event:
    """A call as seen from a loop: ``site`` may sit in a helper; ``anchor`` is the
    node in the loop that runs it (the site itself, or the helper call)."""

    site: CallSite
    anchor: cst.CSTNode

    @property
    def inlined(self) -> bool:
        return self.anchor is not self.site.node


def events(index: SemanticIndex, region: cst.CSTNode) -> list[Event]:
    """Calls a loop or function runs, in source order, with the calls of
    same-module helpers it calls inlined one level deep."""
    key = ("flow.events", id(region))
    cached = index.cache.get(key)
    if cached is not None:
        return cached
    if isinstance(region, (cst.For, cst.While)):
        sites = calls_in(index, region)
    else:
        sites = calls_in_function(index, region)
    found: list[Event] = []
    for site in sites:
        found.append(Event(site, site.node))
        for helper in helper_functions(index, site):
            for inner in calls_in_function(index, helper):
                found.append(Event(inner, site.node))
    index.cache[key] = found
    return found


def callers(index: SemanticIndex, function: cst.FunctionDef) -> list[CallSite]:
    """Same-module calls of ``function`` (by plain name, or ``self.name`` from its class)."""
    name = function.name.value
    found = []
    for site in index.method_calls(name):
        func = site.node.func
        if isinstance(func, cst.Name) and site.qualified_name is None:
            found.append(site)
        elif (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)
              and func.value.value == "self"):
            found.append(site)
    return found


# ---------------------------------------------------------------------- frameworks


LIGHTNING_BASES = ("LightningModule",)


def in_framework_code(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """Code whose training step a framework drives (a Lightning module's
    methods): the framework does backward, accumulation and scaling."""
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, cst.ClassDef):
            for base in ancestor.bases:
                text = dotted_name(base.value) or ""
                if text.split(".")[-1] in LIGHTNING_BASES:
                    return True
    return False


# ---------------------------------------------------------------------- backward and step


def is_tensor_backward(index: SemanticIndex, site: CallSite) -> bool:
    """``x.backward()`` on a tensor: framework calls pass the loss as an argument
    (``accelerator.backward(loss)``, ``engine.backward(loss)``)."""
    if site.method != "backward":
        return False
    if site.qualified_name in ("torch.autograd.backward",):
        return True
    if site.receiver is None or site.positional(0) is not None:
        return False
    receiver = site.receiver
    if isinstance(receiver, cst.Name) and receiver.value in ("self", "super"):
        return False
    if in_framework_code(index, site.node):
        return False
    return True


def backward_operand(site: CallSite) -> Optional[cst.BaseExpression]:
    """The tensor a backward runs on: ``loss`` in ``loss.backward()`` and in
    ``scaler.scale(loss).backward()``."""
    if site.qualified_name == "torch.autograd.backward":
        arg = site.positional(0)
        return arg.value if arg is not None else None
    receiver = site.receiver
    scaled = scaled_operand(receiver)
    return scaled if scaled is not None else receiver


def scaled_operand(expr: Optional[cst.BaseExpression]) -> Optional[cst.BaseExpression]:
    """``loss`` when ``expr`` is ``scaler.scale(loss)``."""
    if (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute)
            and expr.func.attr.value == "scale" and expr.args):
        return expr.args[0].value
    return None


def scaler_of_backward(site: CallSite) -> Optional[cst.BaseExpression]:
    """The scaler in ``scaler.scale(loss).backward()``, else None."""
    receiver = site.receiver
    if scaled_operand(receiver) is not None:
        assert isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute)
        return receiver.func.value
    return None


OPTIMIZER_WORDS = ("optimizer", "optim", "opt")


def holds_optimizer(index: SemanticIndex, expr: Optional[cst.BaseExpression]) -> bool:
    """A name bound to ``torch.optim.*(...)``, or named like an optimizer
    (``optimizer``, ``opt``, ``self.optimizer_g``); schedulers are not."""
    name = dotted_name(expr) if expr is not None else None
    if name is None:
        return False
    for binding in index.visible_bindings(name, expr) or []:
        if isinstance(binding.value, cst.Call):
            qualified = index.qualified_name(binding.value.func) or ""
            if qualified.startswith("torch.optim."):
                return not qualified.startswith("torch.optim.lr_scheduler")
    last = name.split(".")[-1].lower()
    if "sched" in last or "scaler" in last:
        return False
    return (last in OPTIMIZER_WORDS or last.startswith("optim") or last.endswith("optimizer")
            or last.startswith("opt_") or last.endswith("_opt"))


def is_optimizer_step(index: SemanticIndex, site: CallSite) -> bool:
    return site.method == "step" and holds_optimizer(index, site.receiver)


def is_scaler_step(site: CallSite) -> bool:
    return site.method == "step" and bool(site.node.args) and site.receiver is not None and \
        "scaler" in (dotted_name(site.receiver) or "").lower()


def any_step(index: SemanticIndex, site: CallSite) -> bool:
    return is_optimizer_step(index, site) or is_scaler_step(site) or is_helper_step(index, site) \
        or steps_in_another_module(index, site)


def steps_in_another_module(index: SemanticIndex, site: CallSite) -> bool:
    """A call of a function or method of another project module that steps the
    optimizer once per call (``self._optimizer_step()`` of a base class defined
    elsewhere: a46 RL2). Same-module helpers are inlined in ``events`` instead."""
    if site.method is None or "step" not in site.method.lower():
        return False
    from ddplint.analysis.models import project_callee, project_of

    callee = project_callee(index, site.node)
    project = project_of(index)
    key = project.resolve_function(index.path, callee) if callee and project is not None else None
    if key is None or key[0] == index.path:
        return False
    facts = project.function(key)
    return facts is not None and facts.steps_optimizer


def is_helper_step(index: SemanticIndex, site: CallSite) -> bool:
    """A helper object's step that takes the optimizer
    (``amp.step(model, optimizer, scheduler)``, ``helper.optimizer_step(opt)``)."""
    if site.method is None or "step" not in site.method.lower() or site.receiver is None:
        return False
    if site.qualified_name is not None or is_scaler_step(site) or is_optimizer_step(index, site):
        return False
    return any(holds_optimizer(index, arg.value) for arg in site.node.args)


FRAMEWORK_PACKAGES = ("accelerate", "lightning", "pytorch_lightning", "deepspeed", "apex", "colossalai",
                      "fairscale", "composer", "transformers", "torch", "ignite", "horovod")


def is_helper_backward(index: SemanticIndex, site: CallSite) -> bool:
    """``amp.backward(loss)`` on an instance of a class of the project whose
    ``backward`` runs the tensor backward (a mixed-precision manager), as
    opposed to a framework's ``accelerator.backward(loss)`` /
    ``engine.backward(loss)``: the class is defined in this module (and its
    method visibly runs a backward) or imported from a module of the project."""
    if site.method != "backward" or site.receiver is None or site.positional(0) is None:
        return False
    if in_framework_code(index, site.node):
        return False
    facts = project_function_facts(index, site.node)
    if facts is not None:
        return facts.runs_backward
    class_name = instance_class(index, site.receiver)
    if class_name is None:
        return False
    owner = next((c for c in index.classes if c.name.value == class_name), None)
    if owner is not None:
        return any(index.parent(index.parent(f)) is owner and function_trains(index, f)
                   for f in index.functions_named("backward"))
    target = index.imports.get(class_name.split(".")[0])
    if target is None or target.lstrip(".").split(".")[0] in FRAMEWORK_PACKAGES:
        return False
    module = target.rpartition(".")[0]
    if not module.strip("."):
        return False
    from ddplint.analysis.models import project_of

    return project_of(index).resolve_module(index.path, module) is not None


def project_function_facts(index: SemanticIndex, call: cst.Call):
    """The project's facts (``ddplint.screen.facts.FunctionFacts``) of the
    function or method a call runs (``train(...)``, ``obj.m(...)``,
    ``self.m(...)``, ``obj(...)`` through ``__call__``), or None when the
    callee is not a function of the project."""
    from ddplint.analysis.models import project_callee, project_of

    callee = project_callee(index, call)
    if not callee:
        return None
    return project_of(index).callee_facts(index.path, callee)


def never_read(index: SemanticIndex, value: cst.CSTNode) -> bool:
    """``val_loader = DataLoader(...)`` and nothing ever reads ``val_loader``: the value is
    built and dropped. Only a value that is the whole right-hand side of an assignment to a
    plain name; the name counts as read wherever it appears other than as an assignment
    target (also as a keyword or an attribute: conservative). A module-level name of a module
    other project modules reach may be imported, so it counts as read."""
    from ddplint.analysis.models import project_of

    statement = index.parent(value)
    if not isinstance(statement, cst.Assign) or statement.value is not value or len(statement.targets) != 1 \
            or not isinstance(statement.targets[0].target, cst.Name):
        return False
    name = statement.targets[0].target.value
    if index.enclosing_scope(statement) is index.module and project_of(index).reached_by(index.path):
        return False
    assigned = sum(1 for bindings in index.bindings.values() for binding in bindings
                   if binding.name == name and binding.kind in ("assign", "annassign")
                   and isinstance(binding.node, (cst.Assign, cst.AnnAssign)))
    return _name_counts(index).get(name, 0) <= assigned


def _name_counts(index: SemanticIndex) -> dict[str, int]:
    cached = index.cache.get("flow.name_counts")
    if cached is None:
        cached = {}

        class _Counter(cst.CSTVisitor):
            def visit_Name(self, node: cst.Name) -> None:
                cached[node.value] = cached.get(node.value, 0) + 1

        index.module.visit(_Counter())
        index.cache["flow.name_counts"] = cached
    return cached


def instance_class(index: SemanticIndex, expr: cst.BaseExpression) -> Optional[str]:
    """The class name (as written) of ``Cls(...)``, the one value every
    binding that may reach ``expr`` assigns; None otherwise."""
    values = index.reaching_values(expr) if dotted_name(expr) is not None else None
    if not values:
        return None
    found = set()
    for value in values:
        if not isinstance(value, cst.Call):
            return None
        name = dotted_name(value.func)
        if name is None or not name.split(".")[-1][:1].isupper():
            return None
        found.add(name)
    return found.pop() if len(found) == 1 else None


# ---------------------------------------------------------------------- training loops


def tensor_backwards(index: SemanticIndex) -> list[CallSite]:
    cached = index.cache.get("flow.backwards")
    if cached is None:
        cached = [s for s in index.method_calls("backward") if is_tensor_backward(index, s)]
        cached += [s for s in index.calls_to("torch.autograd.backward")]
        index.cache["flow.backwards"] = cached
    return cached


FRAMEWORK_WORDS = ("accelerator", "fabric", "engine", "deepspeed", "trainer", "strategy", "lightning")
STEP_FLAG_WORDS = ("update_grad", "do_step", "should_step", "optimizer_step", "take_step", "step",
                   "update", "sync", "boundary", "is_last", "last_step", "accum")


def helper_step_calls(index: SemanticIndex) -> list[tuple[CallSite, cst.BaseExpression]]:
    """Calls in loops that hand the loss and an optimizer to a helper which
    runs the backward and steps when an argument says so (MAE/ConvNeXt's
    ``loss_scaler(loss, optimizer, update_grad=(i + 1) % k == 0)``,
    ``amp_helper(loss, opt, do_step=...)``): (call, the step argument). A
    helper whose body this module shows must run a tensor backward; one
    defined elsewhere is recognised by the call's shape."""
    cached = index.cache.get("flow.helper_steps")
    if cached is not None:
        return cached
    found = []
    for site in index.calls:
        if site.method in ("backward", "step") or \
                not enclosing_loops(index, site.node) or is_tensor_backward(index, site):
            continue
        receiver = (dotted_name(site.node.func) or "").lower()
        if any(word in receiver for word in FRAMEWORK_WORDS):
            continue
        flag = _step_flag(site)
        if flag is None:
            continue
        if site.qualified_name is not None and project_function_facts(index, site.node) is None:
            continue  # a library's function; a project function imported by name is judged below
        values = [a.value for a in site.node.args]
        if not any(holds_optimizer(index, v) for v in values):
            continue
        if not any(carries_graph(index, v, site.order) or "loss" in (dotted_name(v) or "").lower()
                   for v in values):
            continue
        visible = visible_bodies(index, site)
        if visible and not any(function_trains(index, body) for body in visible):
            continue
        facts = project_function_facts(index, site.node) if not visible else None
        if facts is not None and not facts.runs_backward:
            continue
        found.append((site, flag))
    index.cache["flow.helper_steps"] = found
    return found


def _step_flag(site: CallSite) -> Optional[cst.BaseExpression]:
    """The argument that tells a helper whether to step this iteration: a
    keyword named like ``update_grad``/``do_step`` (not a literal), or any
    argument holding a modulo test."""
    for arg in site.node.args:
        keyword = arg.keyword.value.lower() if arg.keyword is not None else ""
        named = bool(keyword) and any(word in keyword for word in STEP_FLAG_WORDS)
        if named and not isinstance(arg.value, cst.Integer) and literal_bool(arg.value) is None:
            return arg.value
        if _has_modulo(arg.value):
            return arg.value
    return None


def _has_modulo(expr: cst.CSTNode) -> bool:
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
            return True
        stack.extend(node.children)
    return False


def visible_bodies(index: SemanticIndex, site: CallSite) -> list[cst.FunctionDef]:
    """Same-module bodies a call runs: a function by name, ``self.m``, or the
    ``__call__`` of a class of this module that the callee is an instance of."""
    bodies = helper_functions(index, site)
    func = site.node.func
    if not bodies and isinstance(func, cst.Name):
        for value in index.reaching_values(func) or []:
            if isinstance(value, cst.Call) and isinstance(value.func, cst.Name):
                owner = next((c for c in index.classes if c.name.value == value.func.value), None)
                if owner is not None:
                    bodies += [f for f in index.functions_named("__call__")
                               if index.parent(index.parent(f)) is owner]
    return bodies


def backward_events(index: SemanticIndex, region: cst.CSTNode) -> list[Event]:
    backwards = {id(s) for s in tensor_backwards(index)}
    return [e for e in events(index, region) if id(e.site) in backwards]


def is_training_loop(index: SemanticIndex, loop: Loop) -> bool:
    """A loop whose iteration runs a tensor backward (directly or in a helper)."""
    return bool(backward_events(index, loop))


def training_loops(index: SemanticIndex) -> list[Loop]:
    cached = index.cache.get("flow.training_loops")
    if cached is None:
        cached = [loop for loop in index.loops
                  if is_training_loop(index, loop) and not in_framework_code(index, loop)]
        index.cache["flow.training_loops"] = cached
    return cached


def step_loop_of(index: SemanticIndex, node: cst.CSTNode) -> Optional[Loop]:
    """The innermost training loop around ``node`` (its step loop)."""
    for loop in enclosing_loops(index, node):
        if is_training_loop(index, loop):
            return loop
    return None


def function_trains(index: SemanticIndex, function: Optional[cst.CSTNode]) -> bool:
    if function is None:
        return False
    return any(is_tensor_backward(index, s) for s in calls_in_function(index, function))


# ---------------------------------------------------------------------- grad regions

NO_GRAD_CONTEXTS = ("torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad",
                    "torch.autograd.grad_mode.no_grad", "torch.autograd.grad_mode.inference_mode",
                    "torch.autograd.inference_mode")
SET_GRAD_ENABLED = ("torch.set_grad_enabled", "torch.autograd.set_grad_enabled",
                    "torch.autograd.grad_mode.set_grad_enabled")


def _disables_grad(index: SemanticIndex, expr: cst.BaseExpression) -> bool:
    """``torch.no_grad()``, ``torch.inference_mode()``, ``torch.set_grad_enabled(x)``
    with anything but a literal True (``phase == "train"`` may be off)."""
    func = expr.func if isinstance(expr, cst.Call) else expr
    qualified = index.qualified_name(func)
    if qualified in NO_GRAD_CONTEXTS:
        if isinstance(expr, cst.Call) and qualified.endswith("inference_mode") and expr.args:
            return literal_bool(expr.args[0].value) is not False
        return True
    if qualified in SET_GRAD_ENABLED and isinstance(expr, cst.Call) and expr.args:
        return literal_bool(expr.args[0].value) is not True
    return False


def _decorated_no_grad(index: SemanticIndex, function: cst.FunctionDef) -> bool:
    for decorator in function.decorators:
        if _disables_grad(index, decorator.decorator):
            return True
        # Project wrappers such as yolov5's ``@smart_inference_mode()``.
        callee = decorator.decorator
        callee = callee.func if isinstance(callee, cst.Call) else callee
        last = _last_part(callee)
        if "no_grad" in last or "inference_mode" in last:
            return True
    return False


def in_module_internals(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """Inside a class that defines ``forward`` (an ``nn.Module``): its loops run
    once per forward call, over layers, not over training steps."""
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, cst.ClassDef):
            for base in ancestor.bases:
                if (dotted_name(base.value) or "").split(".")[-1] == "Module":
                    return True
            for function in index.functions_named("forward"):
                if index.parent(index.parent(function)) is ancestor:
                    return True
    return False


def in_no_grad_region(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """Inside ``with torch.no_grad()`` (and friends) or a function decorated
    with them, in this function or an enclosing one."""
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, cst.With):
            if any(_disables_grad(index, item.item) for item in ancestor.items):
                return True
        elif isinstance(ancestor, cst.FunctionDef) and _decorated_no_grad(index, ancestor):
            return True
    return False


def grad_mode(index: SemanticIndex, node: cst.CSTNode) -> str:
    """"off" when autograd is disabled at ``node``, "on" when it is known to be
    on, "unknown" when that depends on callers this module does not show.

    One level of callers: a function whose every same-module caller sits in a
    no-grad region is "off"; one that trains (runs a backward) or is called
    outside such a region is "on"; one with no caller here is "unknown".
    """
    if in_no_grad_region(index, node):
        return "off"
    function = enclosing_function(index, node)
    if function is None:
        return "on"
    if function_trains(index, function):
        return "on"
    calls = callers(index, function)
    if _project_callers_no_grad(index, function):
        return "off"  # every call in the project runs under no_grad, a few callers up
    if not calls:
        return "unknown"
    if all(in_no_grad_region(index, c.node) for c in calls):
        return "off"
    return "on"


def _project_callers_no_grad(index: SemanticIndex, function: cst.FunctionDef) -> bool:
    from ddplint.analysis.models import function_key, project_of

    try:
        return project_of(index).callers_no_grad(index.path, function_key(index, function)) is True
    except Exception:  # pragma: no cover - a project without the module's facts
        return False


# ---------------------------------------------------------------------- models and criteria

MODEL_NAMES = ("model", "net", "network", "netg", "netd", "generator", "discriminator",
               "encoder", "decoder", "backbone", "classifier", "student", "unet", "vae", "gpt",
               "transformer", "ddp_model", "raw_model")
CRITERION_WORDS = ("criterion", "loss_fn", "lossfn", "loss_func", "loss_function", "compute_loss",
                   "loss_fct", "criterian", "loss_module")
MODEL_FACTORIES = ("create_model", "build_model", "get_model", "make_model")
# Verbs of functions that return (or prepare) a model rather than run one.
FACTORY_VERBS = ("build_", "create_", "get_", "make_", "load_", "init_", "setup_", "prepare_",
                 "wrap_", "construct_", "instantiate_", "new_", "copy_", "clone_", "save_")


def _last_part(expr: cst.BaseExpression) -> str:
    name = dotted_name(expr)
    return name.split(".")[-1].lower() if name else ""


def is_model(index: SemanticIndex, expr: cst.BaseExpression, at_order: int, _depth: int = 0) -> bool:
    """Does ``expr`` (the callee of a call) hold a model? A DDP/FSDP wrap (also
    through ``model = DDP(model)`` and ``self.model``), ``model.module``, a
    ``torch.nn`` module, a model factory, a model-like name, also under a key
    (``state["model"]``) and through plain aliases (``fwd = model``)."""
    if is_ddp_model(index, expr, at_order, WRAPPERS):
        return True
    if isinstance(expr, cst.Attribute) and expr.attr.value in ("module", "_orig_mod"):
        return is_model(index, expr.value, at_order, _depth)
    if isinstance(expr, cst.Subscript):
        from ddplint.analysis.models import _string_key

        key = (_string_key(expr) or "").lower()
        return bool(key) and (key in MODEL_NAMES or key.endswith("_model") or key.endswith("_net"))
    name = dotted_name(expr)
    if name is None:
        return False
    for binding in index.visible_bindings(name, expr) or []:
        if binding.kind in ("def", "class", "import"):
            return False  # ``build_model(...)`` is a function, not a model
        if binding.kind == "param" and isinstance(binding.node, cst.Param) and _module_param(index, binding):
            return True  # ``def train_step(data, module: nn.Module, ...)``
        value = binding.value
        if binding.kind == "assign" and isinstance(value, (cst.Name, cst.Subscript)) and _depth < 3 \
                and is_model(index, value, at_order, _depth + 1):
            return True  # ``forward_1 = forward_2 = model``; ``model = state["model"]``
        if isinstance(value, cst.Call):
            qualified = index.qualified_name(value.func) or ""
            if qualified.startswith("torch.nn.") and qualified.split(".")[-1][:1].isupper() \
                    and not qualified.endswith("Loss"):
                return True
            if _last_part(value.func) in MODEL_FACTORIES:
                return True
    last = name.split(".")[-1].lower()
    if last.startswith(FACTORY_VERBS):
        return False  # ``factory.build_model(cfg)`` returns a module; it is not one
    return last in MODEL_NAMES or last.endswith("_model") or last.endswith("_net")


def _module_param(index: SemanticIndex, binding) -> bool:
    """A parameter annotated ``nn.Module`` (or a DDP/FSDP class), or one that the
    project's callers fill with a DDP/FSDP model (``training_func(data, detector, ...)``)."""
    annotation = binding.node.annotation
    if annotation is not None:
        written = index.qualified_name(annotation.annotation) or dotted_name(annotation.annotation) or ""
        if written in ("torch.nn.Module", "torch.nn.modules.module.Module") or written in WRAPPERS:
            return True
    if not isinstance(binding.scope, cst.FunctionDef):
        return False
    from ddplint.analysis.models import function_key, project_of

    return bool(project_of(index).wrapped_param(index.path, function_key(index, binding.scope), binding.name))


def is_criterion(index: SemanticIndex, expr: cst.BaseExpression) -> bool:
    """A loss function: ``torch.nn.*Loss()`` instances, criterion-like names."""
    name = dotted_name(expr)
    if name is None:
        return False
    qualified = index.qualified_name(expr) or ""
    if qualified.startswith("torch.nn.functional."):
        return True
    for binding in index.visible_bindings(name, expr) or []:
        if isinstance(binding.value, cst.Call):
            qualified = index.qualified_name(binding.value.func) or ""
            if qualified.startswith("torch.nn.") and qualified.endswith("Loss"):
                return True
    last = name.split(".")[-1].lower()
    return any(word in last for word in CRITERION_WORDS)


# ---------------------------------------------------------------------- graph tensors

SANITISER_METHODS = ("item", "detach", "tolist", "numpy", "detach_", "data_ptr", "numel",
                     "size", "dim", "ndimension")
# Results without autograd history: integer/boolean outputs and comparisons.
NO_GRAD_METHODS = ("argmax", "argmin", "eq", "ne", "lt", "gt", "le", "ge", "isnan", "isinf",
                   "isfinite", "long", "int", "bool", "byte", "nonzero", "argsort", "count_nonzero",
                   "all", "any", "equal", "allclose", "__len__")
NO_GRAD_BUILTINS = ("float", "int", "bool", "len", "str", "round", "repr", "format", "isinstance")
NO_HISTORY_TORCH = ("torch.tensor", "torch.argmax", "torch.argmin", "torch.eq", "torch.ne",
                    "torch.isnan", "torch.isinf", "torch.isfinite", "torch.zeros", "torch.ones",
                    "torch.zeros_like", "torch.ones_like", "torch.empty", "torch.randn",
                    "torch.rand", "torch.arange", "torch.full", "torch.numel", "torch.randint",
                    "torch.empty_like", "torch.full_like", "torch.randn_like", "torch.rand_like")
INDEX_RESULTS = ("max", "min", "topk", "sort", "mode", "median", "kthvalue")
DETACHED_ATTRIBUTES = ("data", "grad", "shape", "dtype", "device", "requires_grad", "is_cuda")


def carries_graph(index: SemanticIndex, expr: Optional[cst.BaseExpression], at_order: int,
                  depth: int = 0) -> bool:
    """Does ``expr`` hold a tensor with autograd history at source position
    ``at_order``? Only what can be shown: unknown functions, parameters and
    loop targets are assumed not to (precision first)."""
    if expr is None or depth > 8:
        return False
    # Memoised per question: the walk over reaching bindings meets the same
    # (expression, position, depth) again and again in long functions (each
    # binding has several reaching definitions, each with its own), which made
    # one 2,000-line module take minutes. The answer is a function of the key;
    # the memo keeps the expression alive, so its id names it for the index's life.
    memo = index.cache.setdefault("carries_graph", {})
    key = (id(expr), at_order, depth)
    found = memo.get(key)
    if found is None:
        found = memo[key] = (expr, _carries_graph(index, expr, at_order, depth))
    return found[1]


NUMBER_TYPES = ("float", "int", "bool", "complex", "numbers.Number", "numbers.Real")
TENSOR_TYPES = ("torch.Tensor", "Tensor", "torch.autograd.Variable", "Variable")


def _isinstance_of(index: SemanticIndex, test: cst.BaseExpression, expr: cst.BaseExpression,
                   types: tuple[str, ...]) -> bool:
    """Is ``test`` ``isinstance(<expr>, T)`` (or ``(T1, T2)``) with every ``T`` in ``types``?"""
    if not (isinstance(test, cst.Call) and dotted_name(test.func) == "isinstance" and len(test.args) == 2):
        return False
    subject, kinds = test.args[0].value, test.args[1].value
    if index.module.code_for_node(subject).strip() != index.module.code_for_node(expr).strip():
        return False
    elements = [e.value for e in kinds.elements] if isinstance(kinds, cst.Tuple) else [kinds]
    return bool(elements) and all(dotted_name(e) in types for e in elements)


def narrowed_to_number(index: SemanticIndex, expr: cst.BaseExpression) -> bool:
    """Is ``expr`` used only where a test proved it a Python number:
    in the body of ``if isinstance(expr, float):`` (also ``and``-joined), or in the
    ``else`` of ``if isinstance(expr, torch.Tensor):``? Then it holds no graph
    (``if isinstance(v, float): total += v else: total += v.item()``)."""
    child: cst.CSTNode = expr
    for ancestor in index.ancestors(expr):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return False
        if isinstance(ancestor, (cst.If, cst.IfExp)):
            in_body = child is ancestor.body
            in_else = child is ancestor.orelse
            if in_body:
                tests, pending = [], [ancestor.test]
                while pending:
                    test = pending.pop()
                    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
                        pending.extend([test.left, test.right])
                    else:
                        tests.append(test)
                if any(_isinstance_of(index, t, expr, NUMBER_TYPES) for t in tests):
                    return True
            elif in_else and _isinstance_of(index, ancestor.test, expr, TENSOR_TYPES):
                return True
        child = ancestor
    return False


def _carries_graph(index: SemanticIndex, expr: cst.BaseExpression, at_order: int, depth: int) -> bool:
    if isinstance(expr, (cst.Name, cst.Attribute, cst.Subscript)) and narrowed_to_number(index, expr):
        return False
    # Parts of the same expression: the tree shrinks, so no depth is spent
    # (binding hops and calls spend it).
    part = lambda e: carries_graph(index, e, at_order, depth)  # noqa: E731
    if isinstance(expr, (cst.Name, cst.Attribute)):
        if isinstance(expr, cst.Attribute) and expr.attr.value in DETACHED_ATTRIBUTES:
            return False
        name = dotted_name(expr)
        if name is not None and "." not in name and detached_in_place(index, name, expr):
            return False  # ``loss.detach_()`` just before: the tensor lost its history in place
        if name is not None and "." not in name:
            reaching = index.reaching(name, expr)
            if any(binding_carries_graph(index, binding, depth) for binding in reaching):
                return True
            return _container_fills_carry_graph(index, name, expr, reaching, depth)
        if name is not None and index.visible_bindings(name, expr):
            bindings = [b for b in index.visible_bindings(name, expr) or [] if b.order < at_order]
            return bool(bindings) and binding_carries_graph(index, bindings[-1], depth)
        if isinstance(expr, cst.Attribute):
            return part(expr.value)  # ``outputs.logits``, ``out.loss``
        return False
    if isinstance(expr, cst.Subscript):
        base = expr.value
        if isinstance(base, cst.Call) and _method(base) in INDEX_RESULTS and _subscript_int(expr) == 1:
            return False  # ``out.max(1)[1]``: indices
        return part(base)
    if isinstance(expr, cst.BinaryOperation):
        return part(expr.left) or part(expr.right)
    if isinstance(expr, cst.UnaryOperation):
        return not isinstance(expr.operator, cst.Not) and part(expr.expression)
    if isinstance(expr, cst.IfExp):
        return part(expr.body) or part(expr.orelse)
    if isinstance(expr, (cst.Tuple, cst.List)):
        return any(part(e.value) for e in expr.elements)
    if isinstance(expr, (cst.GeneratorExp, cst.ListComp)):
        return part(expr.elt)
    if isinstance(expr, cst.Call):
        return _call_carries_graph(index, expr, at_order, depth)
    return False


def detached_in_place(index: SemanticIndex, name: str, use: cst.CSTNode) -> bool:
    """Is ``name`` detached in place (``name.detach_()`` as a statement) on the straight-line path before ``use``: an earlier statement of the same block, or
    of a block around it, with no binding of ``name`` in between, not crossing a loop or function
    boundary? Then the tensor has no history at ``use`` (``loss.detach_()``; ``total += loss``)."""
    bindings = index.bindings.get((id(index.enclosing_scope(use)), name), [])
    child = use
    for ancestor in index.ancestors(use):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef, cst.For, cst.While,
                                 cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
            return False
        if isinstance(ancestor, (cst.IndentedBlock, cst.Module, cst.SimpleStatementLine)):
            body = list(ancestor.body)
            position = next((i for i, stmt in enumerate(body) if stmt is child), None)
            for sibling in reversed(body[:position] if position is not None else []):
                if _detaches_in_place(sibling, name):
                    return True
                if any(is_inside(index, binding.node, sibling) for binding in bindings):
                    return False
        child = ancestor
    return False


def _detaches_in_place(statement: cst.CSTNode, name: str) -> bool:
    small = statement.body if isinstance(statement, cst.SimpleStatementLine) else [statement]
    for part in small:
        call = part.value if isinstance(part, cst.Expr) else None
        if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
                and isinstance(call.func.value, cst.Name) and call.func.value.value == name):
            continue
        method = call.func.attr.value
        if method == "detach_" and not call.args:
            return True
    return False


def _container_fills_carry_graph(index: SemanticIndex, name: str, expr: cst.BaseExpression,
                                 reaching: list[Binding], depth: int) -> bool:
    """A list or dict built empty and filled with graph tensors before ``expr``
    (``outs = []``, ``outs.append(model(x))``, then ``torch.cat(outs)``)."""
    if not reaching or depth > 6 or not all(
            b.kind in ("assign", "annassign") and isinstance(b.value, (cst.List, cst.Dict, cst.Tuple))
            for b in reaching):
        return False
    scope = index.enclosing_scope(expr)
    for site in index.method_calls("append", "extend", "insert"):
        if isinstance(site.receiver, cst.Name) and site.receiver.value == name and site.scope is scope \
                and site.node.args and precedes(index, site.node, expr) \
                and carries_graph(index, site.node.args[-1].value, site.order, depth + 2):
            return True
    return False


def _method(call: cst.Call) -> Optional[str]:
    return call.func.attr.value if isinstance(call.func, cst.Attribute) else None


def _subscript_int(expr: cst.Subscript) -> Optional[int]:
    if len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
        value = expr.slice[0].slice.value
        if isinstance(value, cst.Integer):
            return int(value.value)
    return None


def _call_carries_graph(index: SemanticIndex, call: cst.Call, at_order: int, depth: int) -> bool:
    follow = lambda e: carries_graph(index, e, at_order, depth + 1)  # noqa: E731
    func = call.func
    qualified = index.qualified_name(func)
    if isinstance(func, cst.Name) and qualified is None:
        if func.value in NO_GRAD_BUILTINS:
            return False
        if func.value in ("sum", "max", "min", "abs"):
            return any(follow(a.value) for a in call.args)
    if qualified is not None and not qualified.startswith("torch."):
        return _passes_argument_history(index, call, follow)
    if qualified is not None:
        if qualified in NO_HISTORY_TORCH or not qualified.startswith("torch."):
            return False
        if qualified.startswith("torch.nn.functional.") or "." not in qualified[len("torch."):]:
            return any(follow(a.value) for a in call.args)  # torch.stack, torch.cat, F.*
        return False
    method = _method(call)
    if method is not None and not _is_model_call(index, call, at_order):
        if method in SANITISER_METHODS or method in NO_GRAD_METHODS:
            return False
        if method == "scale":  # scaler.scale(loss)
            return follow(call.args[0].value) if call.args else False
        if method in ("to", "cpu", "cuda", "float", "half", "double", "type", "mean", "sum",
                      "view", "reshape", "squeeze", "unsqueeze", "flatten", "clone", "contiguous",
                      "mul", "div", "add", "sub", "pow", "exp", "log", "sqrt", "abs", "norm",
                      "softmax", "log_softmax", "sigmoid", "permute", "transpose", "expand",
                      "max", "min", "topk", "gather", "masked_fill", "squeeze_", "mul_", "div_",
                      "add_", "sub_", "bfloat16", "chunk", "split", "unbind", "__getitem__",
                      "values", "get", "pop"):
            return follow(func.value)  # type: ignore[union-attr]
        if is_criterion(index, func) or is_criterion(index, func.value):  # type: ignore[union-attr]
            return any(follow(a.value) for a in call.args)  # also ``self.criterion.mse_loss(out, y)``
        return False
    if _is_model_call(index, call, at_order):
        return True
    default = default_function(index, func)
    if default is not None:  # ``eval_criterion(output, target)`` that is always ``accuracy``
        return _returns_graph(index, [default], depth)
    if is_criterion(index, func):
        return any(follow(a.value) for a in call.args)
    if returns_backward_operand(index, call, None):
        return True
    # (a same-module helper handing back its argument or a copy of it, ``rt = t.clone();
    # dist.all_reduce(rt); return rt``, as one of another module does: a106 DL-Demos)
    return _helper_returns_graph(index, call, at_order, depth) or _passes_argument_history(index, call, follow)


def returns_backward_operand(index: SemanticIndex, call: cst.Call, position: Optional[int]) -> bool:
    """A same-module helper (``f(...)``, ``self.m(...)``) that runs a tensor
    backward and returns the tensor it ran it on (``loss.backward(); return
    loss``), or a tuple holding it at ``position`` (``return loss, logs``): the
    caller's value keeps its autograd history (the graph's skeleton, grad_fn
    and all) after the backward. A term of the backward's operand returned as
    it is (``loss = a + b; loss.backward(); return a, b``) counts too.
    Memoised per (call, position)."""
    memo = index.cache.setdefault("flow.returns_backward_operand", {})
    key = (id(call), position)
    if key in memo:
        return memo[key][1]
    memo[key] = (call, False)
    site = index.call_site(call)
    found = False
    if site is not None:
        for function in helper_functions(index, site):
            if _function_returns_backward_operand(index, function, position):
                found = True
                break
    memo[key] = (call, found)
    return found


def _function_returns_backward_operand(index: SemanticIndex, function: cst.FunctionDef,
                                       position: Optional[int]) -> bool:
    operands: set[str] = set()
    for site in tensor_backwards(index):
        if enclosing_function(index, site.node) is not function:
            continue
        operand = backward_operand(site)
        if isinstance(operand, cst.BinaryOperation) and isinstance(operand.operator, (cst.Divide, cst.Multiply)):
            operand = operand.left  # ``(loss / k).backward()``
        if not isinstance(operand, cst.Name):
            continue
        operands.add(operand.value)
        for binding in index.reaching(operand.value, operand):
            # the named terms of ``loss = a_loss + c * c_loss - e * entropy``
            if binding.kind in ("assign", "annassign") and not in_no_grad_region(index, binding.node):
                operands.update(_summed_terms(binding.value))
    params = {p.name.value for p in (*function.params.posonly_params, *function.params.params,
                                      *function.params.kwonly_params)}
    operands -= params  # a coefficient handed in (``loss = a + coef * b``)
    if not operands:
        return False
    returns = [e for e in index.exits if isinstance(e, cst.Return) and e.value is not None
               and enclosing_function(index, e) is function]
    for exit_node in returns:
        value = exit_node.value
        if position is not None:
            if not isinstance(value, (cst.Tuple, cst.List)) or position >= len(value.elements):
                continue
            value = value.elements[position].value
        if isinstance(value, cst.Name) and value.value in operands and not _detached_again(index, value):
            return True
    return False


def _detached_again(index: SemanticIndex, name: cst.Name) -> bool:
    """``loss = loss.detach() / k`` after the backward, then ``return loss``: every
    binding that reaches the return rebinds the name from itself through a sanitiser
    (a96 MM-Video's ``training_step``)."""
    bindings = index.reaching(name.value, name)
    return bool(bindings) and all(
        b.kind in ("assign", "annassign") and b.value is not None and name.value in names_in(b.value)
        and not _reads_raw(b.value, name.value) for b in bindings)


def _summed_terms(expr: Optional[cst.BaseExpression]) -> set[str]:
    """The names added or subtracted in ``a + c * b - e``: a, b, e (a factor's
    tensor side as well as the coefficient; the caller checks it is returned)."""
    found: set[str] = set()
    stack = [expr] if expr is not None else []
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Name):
            found.add(node.value)
        elif isinstance(node, cst.BinaryOperation) and isinstance(
                node.operator, (cst.Add, cst.Subtract, cst.Multiply, cst.Divide)):
            stack.extend((node.left, node.right))
        elif isinstance(node, cst.UnaryOperation):
            stack.append(node.expression)
    return found


def _passes_argument_history(index: SemanticIndex, call: cst.Call, follow) -> bool:
    """A project function of another module that hands back its argument's
    tensor, or a copy keeping its history (``reduce_tensor(loss)`` doing
    ``rt = loss.clone(); dist.all_reduce(rt); return rt``): the result carries
    the argument's graph."""
    facts = project_function_facts(index, call)
    if facts is None or not getattr(facts, "returns_params", None):
        return False
    params = list(facts.params)
    if params and params[0] in ("self", "cls") and "." in facts.name:
        params = params[1:]
    for param in facts.returns_params:
        position = params.index(param) if param in params else None
        arg = next((a for a in call.args if a.keyword is not None and a.keyword.value == param), None)
        if arg is None and position is not None:
            positional = [a for a in call.args if a.keyword is None and not a.star]
            arg = positional[position] if position < len(positional) else None
        if arg is not None and follow(arg.value):
            return True
    return False


def _is_model_call(index: SemanticIndex, call: cst.Call, at_order: int) -> bool:
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value == "forward":
        func = func.value
    if isinstance(func, cst.Attribute) and func.attr.value in ("backward", "step", "eval", "train"):
        return False
    return is_model(index, func, at_order)


def _helper_returns_graph(index: SemanticIndex, call: cst.Call, at_order: int, depth: int) -> bool:
    """One level of same-module helpers: ``loss = compute_loss(model, batch)``
    carries history when the helper returns a model or criterion output."""
    if depth > 2 or not isinstance(call.func, cst.Name):
        return False
    return _returns_graph(index, index.functions_named(call.func.value), depth)


def _returns_graph(index: SemanticIndex, functions: list[cst.FunctionDef], depth: int) -> bool:
    if depth > 2:
        return False
    for function in functions:
        for exit_node in index.exits:
            if isinstance(exit_node, cst.Return) and exit_node.value is not None \
                    and enclosing_function(index, exit_node) is function:
                site_order = order_near(index, exit_node)
                if carries_graph(index, exit_node.value, site_order, depth + 3):
                    return True
    return False


def default_function(index: SemanticIndex, func: cst.BaseExpression) -> Optional[cst.FunctionDef]:
    """The function of this module that a call through a parameter runs when the
    parameter defaults to it and no project call fills it: ``def train(...,
    eval_criterion=accuracy)`` called as ``train(loader, model, ...)`` runs
    ``accuracy`` (a109 Action-Recognition-Study)."""
    from ddplint.analysis.models import function_key, project_of

    if not isinstance(func, cst.Name):
        return None
    bindings = index.reaching(func.value, func)
    if len(bindings) != 1 or bindings[0].kind != "param" or not isinstance(bindings[0].value, cst.Name) \
            or not isinstance(bindings[0].scope, cst.FunctionDef):
        return None
    targets = index.functions_named(bindings[0].value.value)
    if len(targets) != 1 or not project_of(index).leaves_unfilled(
            index.path, function_key(index, bindings[0].scope), func.value):
        return None
    return targets[0]


def order_near(index: SemanticIndex, node: cst.CSTNode) -> int:
    """A source order just after the last call or binding that precedes ``node``
    in its function (the index gives calls and bindings an order, not statements)."""
    function = enclosing_function(index, node) or index.module
    best = 0
    for site in calls_in_function(index, function):
        if site.order > best and precedes(index, site.node, node):
            best = site.order
    for binding in _bindings_by_scope(index).get(id(function), ()):
        if binding.order > best and precedes(index, binding.node, node):
            best = binding.order
    return best + 1


def _bindings_by_scope(index: SemanticIndex) -> dict[int, list[Binding]]:
    cached = index.cache.get("flow.bindings_by_scope")
    if cached is None:
        cached = {}
        for bindings in index.bindings.values():
            for binding in bindings:
                cached.setdefault(id(binding.scope), []).append(binding)
        index.cache["flow.bindings_by_scope"] = cached
    return cached


def binding_carries_graph(index: SemanticIndex, binding: Binding, depth: int) -> bool:
    memo = index.cache.setdefault("binding_carries_graph", {})
    key = (id(binding), depth)  # memoised as carries_graph is (the memo keeps the binding alive)
    found = memo.get(key)
    if found is None:
        found = memo[key] = (binding, _binding_carries_graph(index, binding, depth))
    return found[1]


def _backward_is_run_on(index: SemanticIndex, binding: Binding) -> bool:
    """``loss = self.criterion(self.model, *batch)`` then ``loss.backward()`` that
    this binding reaches: whatever the call is, the value has autograd history
    (LiteASR's criterion that runs the model itself)."""
    if "." in binding.name:
        return False
    for site in index.method_calls("backward"):
        receiver = site.receiver
        if isinstance(receiver, cst.Name) and receiver.value == binding.name and site.scope is binding.scope \
                and any(b is binding for b in index.reaching(binding.name, receiver)):
            return True
    return False


def _binding_carries_graph(index: SemanticIndex, binding: Binding, depth: int) -> bool:
    node = binding.node
    if in_no_grad_region(index, node):
        return False  # bound under ``torch.no_grad()``: no history, whatever is read later
    if binding.kind in ("assign", "annassign"):
        return carries_graph(index, binding.value, binding.order, depth + 1) or _backward_is_run_on(index, binding)
    if binding.kind == "augassign":
        # ``snap /= n`` keeps whatever history ``snap`` already had.
        if carries_graph(index, binding.value, binding.order, depth + 1):
            return True
        if "." in binding.name or depth > 6:
            return False
        return any(earlier is not binding and binding_carries_graph(index, earlier, depth + 2)
                   for earlier in index.reaching(binding.name, node))
    if binding.kind == "loop" and isinstance(node, cst.CompFor):
        # ``sum(w * crit(aux, y) for aux in aux_outs)``: an element of a model output
        return carries_graph(index, node.iter, binding.order, depth + 1)
    if binding.kind == "unpack" and isinstance(node, cst.Assign):
        value = node.value
        if isinstance(value, cst.Call) and _method(value) in INDEX_RESULTS:
            position = unpack_position(node, binding.name)
            if position != 0:
                return False  # ``_, pred = out.max(1)``: indices
        if isinstance(value, (cst.Tuple, cst.List)):
            position = unpack_position(node, binding.name)
            if position is not None and position < len(value.elements):
                return carries_graph(index, value.elements[position].value, binding.order, depth + 1)
        if isinstance(value, cst.Call) and returns_backward_operand(index, value, unpack_position(node, binding.name)):
            return True  # ``loss, logs = self.update_fn(batch)``: the helper ran ``loss.backward()`` and returns it
        if isinstance(value, cst.Call):
            # ``loss, loss_items = compute_loss(pred, y)`` where the project's
            # function returns ``..., torch.cat(parts).detach()``: that item has no history.
            facts = project_function_facts(index, value)
            position = str(unpack_position(node, binding.name))
            if facts is not None and position in facts.returns_detached:
                return False
            if facts is None and _every_alternative_detaches(index, value, position):
                return False
            if facts is None and _is_model_call(index, value, binding.order) \
                    and forward_detached_position(index, value, position):
                return False  # ``loss, acc = model(x)``: the project's forward returns ``acc`` detached
        return carries_graph(index, value, binding.order, depth + 1)
    return False


_MODEL_WRAPS = (names.DDP, names.FSDP, "torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
                "torch.nn.parallel.data_parallel.DataParallel")
_MODEL_MOVES = ("to", "cuda", "cpu", "float", "half", "double", "bfloat16", "train", "eval")


def model_classes(index: SemanticIndex, expr: cst.BaseExpression, depth: int = 0) -> Optional[set[str]]:
    """The project classes (as written here) a model expression may be an
    instance of, followed through its reaching bindings, wrap calls
    (``DDP(model)``, ``DataParallel(model)``), moves (``model.to(device)``)
    and parameters filled by this module's calls (``train(args, model)`` with
    ``model = Model(...)``); None when any alternative is unknown."""
    if depth > 12:
        return None
    memo = index.cache.setdefault("flow.model_classes", {})
    key = id(expr)
    if key in memo:
        return memo[key][1]
    memo[key] = (expr, None)  # a cycle (a recursive caller) is unknown
    found = _model_classes(index, expr, depth)
    memo[key] = (expr, found)
    return found


def _model_classes(index: SemanticIndex, expr: cst.BaseExpression, depth: int) -> Optional[set[str]]:
    if isinstance(expr, cst.Call):
        qualified = index.qualified_name(expr.func)
        if qualified in _MODEL_WRAPS:
            inner = expr.args[0].value if expr.args and not expr.args[0].star else None
            keyword = next((a.value for a in expr.args if a.keyword is not None and a.keyword.value == "module"),
                           None)
            inner = keyword if keyword is not None else inner
            return model_classes(index, inner, depth + 1) if inner is not None else None
        if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _MODEL_MOVES:
            return model_classes(index, expr.func.value, depth + 1)
        name = dotted_name(expr.func)
        if name is None or not name.split(".")[-1][:1].isupper() or qualified is not None and \
                qualified.startswith(("torch.", "transformers.", "timm.", "torchvision.")):
            return None
        return {name}
    if not isinstance(expr, cst.Name):
        return None
    reaching = index.reaching(expr.value, expr)
    if not reaching:
        return None
    found: set[str] = set()
    for binding in reaching:
        if binding.kind in ("assign", "annassign") and binding.value is not None:
            classes = model_classes(index, binding.value, depth + 1)
        elif binding.kind == "param" and isinstance(binding.scope, cst.FunctionDef):
            classes = _param_model_classes(index, binding, depth)
        elif binding.kind == "unpack" and isinstance(binding.node, cst.Assign):
            classes = _prepared_model_classes(index, binding, depth)
        else:
            classes = None
        if classes is None:
            return None
        found |= classes
    return found


_PREPARE_CALLS = ("apex.amp.initialize", "amp.initialize")


def _prepared_model_classes(index: SemanticIndex, binding: Binding, depth: int) -> Optional[set[str]]:
    """``model, optimizer = amp.initialize(model, optimizer)`` (apex) or
    ``model, opt = accelerator.prepare(model, opt)``: item i is argument i, the same model."""
    value = binding.value if isinstance(binding.value, cst.Call) else binding.node.value
    if not isinstance(value, cst.Call):
        return None
    qualified = index.qualified_name(value.func) or dotted_name(value.func) or ""
    if qualified not in _PREPARE_CALLS and not (
            isinstance(value.func, cst.Attribute) and value.func.attr.value == "prepare"
            and "accelerat" in (dotted_name(value.func.value) or "").lower()):
        return None
    position = unpack_position(binding.node, binding.name)
    positional = [a for a in value.args if a.keyword is None]
    if position is None or position >= len(positional) or any(a.star for a in positional[:position + 1]):
        return None
    return model_classes(index, positional[position].value, depth + 1)


def _param_model_classes(index: SemanticIndex, binding: Binding, depth: int) -> Optional[set[str]]:
    function = binding.scope
    params = [p.name.value for p in function.params.params]
    if binding.name not in params:
        return None
    position = params.index(binding.name)
    if position and params[0] in ("self", "cls"):
        position -= 1
    sites = callers(index, function)
    if not sites or _called_from_other_modules(index, function):
        return None
    found: set[str] = set()
    for site in sites:
        arg = next((a for a in site.node.args if a.keyword is not None and a.keyword.value == binding.name), None)
        if arg is None:
            positional = [a for a in site.node.args if a.keyword is None]
            if any(a.star for a in positional[:position + 1]) or position >= len(positional):
                return None
            arg = positional[position]
        classes = model_classes(index, arg.value, depth + 1)
        if classes is None:
            return None
        found |= classes
    return found


def _called_from_other_modules(index: SemanticIndex, function: cst.FunctionDef) -> bool:
    """Does a module of the project other than this one call ``function``
    (its arguments are not this module's to read)?"""
    from ddplint.analysis.models import function_key, project_of

    project = project_of(index)
    calls = project.callers.get(project.function_key(index.path, function_key(index, function))) or []
    return any(path != index.path for path, _ in calls)


def forward_detached_position(index: SemanticIndex, call: cst.Call, position: str) -> bool:
    """``loss, acc = model(x)`` where every class the model may be an instance
    of is a project class whose ``forward`` returns item ``position`` without
    autograd history in every return (``acc = logits.argmax(1).eq(y).float().mean().item()``,
    a constant ``0``)."""
    from ddplint.analysis.models import project_of

    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value == "forward":
        func = func.value
    classes = model_classes(index, func)
    if not classes:
        return False
    project = project_of(index)
    for cls in classes:
        facts = project.callee_facts(index.path, f"{cls}.forward")
        if facts is None or position not in facts.returns_detached:
            return False
    return True


def _every_alternative_detaches(index: SemanticIndex, call: cst.Call, position: str) -> bool:
    """``self.loss_fn(...)`` built from one of several project classes chosen at
    run time, each of whose ``__call__`` returns that item detached."""
    from ddplint.analysis.models import alternative_callees, project_of

    callees = alternative_callees(index, call)
    if not callees:
        return False
    project = project_of(index)
    facts = [project.callee_facts(index.path, callee, index.imports) for callee in callees]
    return all(f is not None and position in f.returns_detached for f in facts)


def names_in(expr: Optional[cst.CSTNode]) -> set[str]:
    """Dotted names an expression reads (``a``, ``self.x``), via the index's
    parent map: no tree walk beyond the expression itself."""
    found: set[str] = set()
    if expr is None:
        return found
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.Name, cst.Attribute)):
            name = dotted_name(node)
            if name is not None:
                found.add(name)
                if isinstance(node, cst.Attribute):
                    found.add(name.split(".")[0])
                continue
        stack.extend(node.children)
    return found


def depends_on(index: SemanticIndex, expr: cst.BaseExpression, name: str, at_order: int,
               depth: int = 0) -> bool:
    """Does ``expr`` read ``name``, directly or through the bindings of the
    names it reads (``loss = sum(losses) / k`` depends on ``losses``)?"""
    read = names_in(expr)
    if name in read:
        return True
    if depth > 4:
        return False
    for other in read:
        if "." in other:
            continue
        for binding in index.reaching(other, expr):
            if binding.value is not None and binding.kind != "param":
                if depends_on(index, binding.value, name, binding.order, depth + 1):
                    return True
            elif binding.kind == "unpack" and isinstance(binding.node, cst.Assign):
                if depends_on(index, binding.node.value, name, binding.order, depth + 1):
                    return True
            elif binding.kind == "loop" and isinstance(binding.node, cst.For):
                # ``for l in pending: l.backward()`` consumes what ``pending`` holds
                if depends_on(index, binding.node.iter, name, binding.order, depth + 1):
                    return True
    return False


# ---------------------------------------------------------------------- bindings and loops


def method_keeps_param(index: SemanticIndex, method: cst.FunctionDef, param: str) -> bool:
    """Does ``method`` store its parameter ``param`` in the instance so that it
    outlives the call: ``self.sum += val * n``, ``self.sum = self.sum + val``,
    ``self.values.append(val)`` (not ``val.item()``, ``float(val)``,
    ``val.detach()``)?"""
    for (_, name), bindings in index.bindings.items():
        if not name.startswith("self."):
            continue
        for binding in bindings:
            if not is_inside(index, binding.node, method) or binding.value is None:
                continue
            accumulates = binding.kind == "augassign" or (
                binding.kind == "assign" and name in names_in(binding.value))
            if accumulates and _reads_raw(binding.value, param):
                return True
    for site in index.method_calls("append", "extend", "insert"):
        if site.node.args and isinstance(site.receiver, cst.Attribute) and \
                (dotted_name(site.receiver) or "").startswith("self.") and is_inside(index, site.node, method) \
                and _reads_raw(site.node.args[-1].value, param):
            return True
    return False


def _reads_raw(expr: cst.CSTNode, name: str) -> bool:
    """Does ``expr`` read ``name`` other than through a sanitiser
    (``name.item()``, ``float(name)``, ``name.detach()``)?"""
    if isinstance(expr, cst.Name):
        return expr.value == name
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value in SANITISER_METHODS:
            return False
        if isinstance(func, cst.Name) and func.value in NO_GRAD_BUILTINS:
            return False
    if isinstance(expr, cst.Attribute):
        return _reads_raw(expr.value, name) if expr.attr.value not in DETACHED_ATTRIBUTES else False
    return any(_reads_raw(child, name) for child in expr.children)



def binds_inside(index: SemanticIndex, name: str, loop: Loop, at: cst.CSTNode) -> bool:
    """Is ``name`` (re)bound by a plain assignment inside ``loop``? Then it is
    iteration-local; otherwise it outlives the iteration."""
    for binding in index.visible_bindings(name, at) or []:
        if binding.kind in ("assign", "annassign") and name in names_in(binding.value):
            continue  # ``total = total + loss`` accumulates, it does not reset
        if binding.kind in ("assign", "annassign", "unpack", "loop", "with") \
                and is_inside(index, binding.node, loop) and binding.node is not loop:
            return True
        if binding.kind == "loop" and binding.node is loop:
            return True
    return False


def surviving_loops(index: SemanticIndex, name: str, node: cst.CSTNode, loops: list[Loop]) -> list[Loop]:
    """The loops among ``loops`` (those around ``node``) whose next iteration
    still sees the object that ``name`` holds at ``node``: no rebinding of the
    name lies on some path from ``node`` back to the loop's head (a reset
    skipped by ``continue``, or made only every k-th iteration, does not count).
    ``name`` is a local name or an attribute (``self.loss``: this function's
    bindings of it); the question is answered by reaching definitions with a marker binding at
    ``node``."""
    from ddplint.analysis.reaching import ScopeFlow

    scope = index.enclosing_scope(node)
    bindings = index.bindings_of(name, scope)
    if "." in name:  # ``self.loss``: the bindings this function makes (dotted names are module-wide)
        bindings = [b for b in index.visible_bindings(name, node) or () if index.enclosing_scope(b.node) is scope]
    if not bindings:
        return list(loops)  # a global or a name of an enclosing function: never reset here
    marker = Binding(name, "marker", None, node, scope, 0)
    key = ("flow.survives", id(node), name)
    found = index.cache.get(key)
    if found is None:
        flow = ScopeFlow(index, scope, [*bindings, marker])
        found = []
        for loop in loops:
            # The object reaches the loop's next iteration (no rebinding on
            # some path to the back edge) and is not replaced on every path
            # from the head back to ``node`` (a reset at the top of the body).
            first = _first_statement(loop)
            state = flow.at(first) if first is not None else None
            if state is not None and any(b is marker for b in state) \
                    and not _reset_before(index, bindings, node, loop):
                found.append(loop)
        index.cache[key] = found
    return list(found)


def _reset_before(index: SemanticIndex, bindings: list[Binding], node: cst.CSTNode, loop: Loop) -> bool:
    """Is the name rebound on every path from ``loop``'s head to ``node`` (a
    reset at the top of the body, on both arms of an ``if``)? Answered with a
    marker binding made at the head of every iteration."""
    from ddplint.analysis.reaching import ScopeFlow

    scope = index.enclosing_scope(node)
    head = Binding(bindings[0].name, "marker", None, loop, scope, 0)
    reached = ScopeFlow(index, scope, [*bindings, head]).at(node)
    return reached is not None and not any(b is head for b in reached)


def _first_statement(loop: Loop) -> Optional[cst.CSTNode]:
    body = loop.body
    if isinstance(body, cst.IndentedBlock):
        return body.body[0] if body.body else None
    return body  # a one-line suite is recorded as a whole


DATA_WORDS = ("loader", "dataset", "data", "iter", "epoch", "step", "sample", "pbar", "tqdm",
              "progress", "bar", "queue", "stream", "episode", "batches", "dl", "ds", "records",
              "examples", "split", "enumerate_batches", "rollout", "env", "prefetch")


def is_data_loop(index: SemanticIndex, loop: Loop) -> bool:
    """A loop over the data (batches, steps, epochs), as opposed to a short
    loop over the parts of one step (heads, views, crops, micro-batches of one
    batch: ``for j in range(len(parts))``). ``while`` loops and anything that
    is not recognisably a loop over parts count as data."""
    if not isinstance(loop, cst.For):
        return True
    if iterates_chunks(index, loop):
        return False
    iterable = loop.iter
    while isinstance(iterable, cst.Call) and dotted_name(iterable.func) in ("enumerate", "zip", "reversed",
                                                                             "list", "sorted"):
        if dotted_name(iterable.func) == "zip" and len(iterable.args) > 1:
            return any(_iterates_data(arg.value) for arg in iterable.args)
        if not iterable.args:
            return True
        iterable = iterable.args[0].value
    return _iterates_data(iterable)


def _iterates_data(iterable: cst.BaseExpression) -> bool:
    if isinstance(iterable, cst.Call) and dotted_name(iterable.func) == "range":
        args = [a.value for a in iterable.args]
        bound = args[1] if len(args) > 1 else (args[0] if args else None)
        if isinstance(bound, cst.Call) and dotted_name(bound.func) == "len":
            return _words_say_data(bound.args[0].value) if bound.args else True
        if isinstance(bound, cst.Integer):
            return False
        return bound is None or _words_say_data(bound) or not _names_parts(bound)
    return _words_say_data(iterable)


def is_parts_loop(index: SemanticIndex, loop: Loop) -> bool:
    """A short loop over the parts of one step, recognised positively:
    ``range(len(parts))``, ``range(<literal>)``, a count or collection of
    heads, views, crops, stages, layers (``for h in heads``,
    ``range(self.num_crops)``), or configuration (``optimizer.param_groups``,
    ``dict.items()``). What it keeps locally is bounded by one step."""
    if not isinstance(loop, cst.For):
        return False
    if iterates_config(index, loop) or iterates_chunks(index, loop):
        return True
    iterable = loop.iter
    while isinstance(iterable, cst.Call) and dotted_name(iterable.func) in ("enumerate", "zip", "reversed",
                                                                             "list", "sorted") \
            and iterable.args:
        iterable = iterable.args[0].value
    if isinstance(iterable, cst.Call) and dotted_name(iterable.func) == "range":
        args = [a.value for a in iterable.args]
        bound = args[1] if len(args) > 1 else (args[0] if args else None)
        if isinstance(bound, cst.Integer):
            return True
        if isinstance(bound, cst.Call) and dotted_name(bound.func) == "len" and bound.args:
            return not _words_say_data(bound.args[0].value)
        return bound is not None and not _words_say_data(bound) and _names_parts(bound)
    return isinstance(iterable, (cst.Name, cst.Attribute, cst.List, cst.Tuple)) and \
        not _words_say_data(iterable) and (isinstance(iterable, (cst.List, cst.Tuple)) or _names_parts(iterable))


def iterates_chunks(index: SemanticIndex, loop: Loop) -> bool:
    """A loop over the chunks of one input, however they are named: the
    iterable (first of a ``zip``/``enumerate``) is bound only to calls that cut
    one tensor into pieces (``x.split(n)``, ``torch.chunk(x, k)``,
    ``batches = prepare_chunks(points, fn, chunksize=chunksize)``)."""
    if not isinstance(loop, cst.For):
        return False
    iterable = loop.iter
    while isinstance(iterable, cst.Call) and dotted_name(iterable.func) in ("enumerate", "zip", "reversed",
                                                                             "list") and iterable.args:
        iterable = iterable.args[0].value
    if isinstance(iterable, cst.Call):
        values = [iterable]
    elif isinstance(iterable, cst.Name):
        values = index.reaching_values(iterable) or []
    else:
        return False
    # ``chunks = split(data, k) if k > 1 else [data]``: the single-chunk arm is bounded too
    cuts = [value for value in values if not _few_items(value)]
    return bool(cuts) and all(_cuts_into_chunks(value) or _cuts_through_parameter(index, value) for value in cuts)


def _cuts_through_parameter(index: SemanticIndex, value: cst.BaseExpression) -> bool:
    """``batches = get_minibatches_function(points)`` where the function is a
    parameter and every same-module call passes a function of this module that
    returns the pieces of its input (``[inputs[i:i + n] for i in range(...)]``,
    or a cut such as ``inputs.split(n)``)."""
    if not isinstance(value, cst.Call) or not isinstance(value.func, cst.Name):
        return False
    bindings = index.reaching(value.func.value, value.func)
    if len(bindings) != 1 or bindings[0].kind != "param" or not isinstance(bindings[0].scope, cst.FunctionDef):
        return False
    function, name = bindings[0].scope, value.func.value
    params = [p.name.value for p in (*function.params.posonly_params, *function.params.params)]
    position = params.index(name) if name in params else None
    passed = []
    for site in callers(index, function):
        arg = site.keyword(name)
        if arg is None and position is not None:
            positional = [a for a in site.node.args if a.keyword is None and not a.star]
            arg = positional[position] if position < len(positional) and not any(
                a.star for a in site.node.args[:position + 1]) else None
        passed.append(arg.value if arg is not None else None)
    return bool(passed) and all(isinstance(v, cst.Name) and _returns_pieces(index, v) for v in passed)


def _returns_pieces(index: SemanticIndex, name: cst.Name) -> bool:
    definitions = [b.node for b in index.reaching(name.value, name) if b.kind == "def"]
    if len(definitions) != 1 or not isinstance(definitions[0], cst.FunctionDef):
        return False
    returns = [node.value for node in _returns_of(definitions[0])]
    return bool(returns) and all(_pieces_of_input(r) for r in returns)


def _returns_of(function: cst.FunctionDef) -> list[cst.Return]:
    found, stack = [], list(function.body.children)
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Return) and node.value is not None:
            found.append(node)
        elif not isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            stack.extend(node.children)
    return found


def _pieces_of_input(value: cst.BaseExpression) -> bool:
    """``[x[i:i + n] for i in range(...)]`` (slices of one input) or a cut call."""
    if isinstance(value, cst.ListComp) and isinstance(value.elt, cst.Subscript):
        return any(isinstance(element.slice, cst.Slice) for element in value.elt.slice)
    return _cuts_into_chunks(value)


def _few_items(value: cst.BaseExpression) -> bool:
    """A list or tuple display of its items (``[data]``), no starred item."""
    return isinstance(value, (cst.List, cst.Tuple)) and bool(value.elements) and \
        not any(isinstance(e, cst.StarredElement) for e in value.elements)


def _cuts_into_chunks(value: cst.BaseExpression) -> bool:
    if not isinstance(value, cst.Call):
        return False
    callee = (dotted_name(value.func) or (value.func.attr.value if isinstance(value.func, cst.Attribute) else ""))
    last = callee.rsplit(".", 1)[-1].lower()
    if "chunk" in last or last in ("split", "tensor_split", "array_split", "split_batch"):
        return True  # (not ``random_split(dataset, ...)``: a data set)
    return any(arg.keyword is not None and "chunk" in arg.keyword.value.lower() for arg in value.args)


PART_WORDS = ("head", "view", "crop", "part", "chunk", "scale", "level", "layer", "task", "branch",
              "stage", "loss", "output", "out", "term", "weight", "micro", "accum", "block", "modal",
              "feat", "pred", "logit", "target", "label", "group", "component", "model", "net", "key",
              "name", "k", "n", "num", "len", "size")


def _words_say_data(expr: cst.BaseExpression) -> bool:
    words = "_".join(sorted(names_in(expr))).lower()
    tokens = set(words.replace(".", "_").split("_"))
    return any(word in words for word in DATA_WORDS if len(word) > 3) or bool(tokens & {"dl", "ds", "it"})


def _names_parts(expr: cst.BaseExpression) -> bool:
    """``range(n_heads)``, ``range(self.num_crops)``: a count of parts."""
    words = "_".join(sorted(names_in(expr))).lower()
    tokens = set(words.replace(".", "_").split("_"))
    return any(word in tokens or any(t.startswith(word) for t in tokens if len(word) > 2)
               for word in PART_WORDS)


def loop_counter_names(index: SemanticIndex, loop: Loop) -> set[str]:
    """Names a loop's target binds to a counter (``for i in range``, the index of
    ``enumerate``)."""
    if not isinstance(loop, cst.For):
        return set()
    iterable = loop.iter
    if isinstance(iterable, cst.Name):
        # ``pbar = tqdm(enumerate(loader), total=n)`` then ``for i, sample in pbar``
        values = index.reaching_values(iterable) or []
        if not values:
            # ``with tqdm(range(n)) as bar:`` then ``for epoch in bar``
            bindings = index.reaching(iterable.value, iterable)
            if len(bindings) == 1 and bindings[0].kind == "with":
                values = [bindings[0].value]
        if len(values) > 1 and all(isinstance(v, cst.Call) and (_calls_range(v) or _wraps_range_name(index, v))
                                   for v in values):
            # ``epoch_iter = tqdm(range(n)) if bar else range(n)`` (on two branches); also
            # ``steps = range(n)`` then ``if rank == 0: steps = tqdm(steps, initial=start)``
            return names_in(loop.target)
        if len(values) > 1 and all(isinstance(v, cst.Call) and _unwrapped_callee(v) == "enumerate" for v in values) \
                and isinstance(loop.target, cst.Tuple) and loop.target.elements:
            # ``pbar = tqdm(enumerate(loader)) if rank == 0 else enumerate(loader)`` (on two branches)
            return names_in(loop.target.elements[0].value)
        if len(values) == 1 and isinstance(values[0], cst.Call):
            iterable = values[0]
    callee = dotted_name(iterable.func) if isinstance(iterable, cst.Call) else None
    if isinstance(iterable, cst.Call) and callee == "zip" and isinstance(loop.target, (cst.Tuple, cst.List)) \
            and len(loop.target.elements) == len(iterable.args) \
            and not any(arg.star or arg.keyword is not None for arg in iterable.args) \
            and not any(isinstance(e, cst.StarredElement) for e in loop.target.elements):
        # ``for (images, boxes), step in zip(loader, range(n))``: only the targets
        # paired with a range count; the loader's are data.
        counters: set[str] = set()
        for element, arg in zip(loop.target.elements, iterable.args):
            if isinstance(arg.value, cst.Call) and _calls_range(arg.value):
                counters |= names_in(element.value)
            elif isinstance(arg.value, cst.Call) and dotted_name(arg.value.func) == "enumerate" \
                    and isinstance(element.value, cst.Tuple) and element.value.elements:
                counters |= names_in(element.value.elements[0].value)
        return counters
    if _counts(callee) or _calls_range(iterable) or (isinstance(iterable, cst.Call)
                                                     and _wraps_range_name(index, iterable)):
        # also ``tqdm(range(n))``, ``log_every(range(n))``, ``pbar = range(n); pbar = tqdm(pbar)``
        return names_in(loop.target)
    # ``enumerate(loader)``, also wrapped: ``tqdm(enumerate(loader))``
    while isinstance(iterable, cst.Call) and callee != "enumerate" and iterable.args \
            and (callee or "").split(".")[-1] not in ("zip", "chain", "product", "map", "filter") \
            and isinstance(iterable.args[0].value, cst.Call) and iterable.args[0].keyword is None:
        iterable = iterable.args[0].value
        callee = dotted_name(iterable.func)
    if callee == "enumerate" and isinstance(loop.target, cst.Tuple) and loop.target.elements:
        return names_in(loop.target.elements[0].value)
    return set()


def _unwrapped_callee(call: cst.Call) -> Optional[str]:
    """The callee under progress-bar-like wrappers that take the iterable first
    (``tqdm(enumerate(loader), total=n)`` -> "enumerate")."""
    callee = dotted_name(call.func)
    while callee != "enumerate" and call.args and call.args[0].keyword is None \
            and (callee or "").split(".")[-1] not in ("zip", "chain", "product", "map", "filter") \
            and isinstance(call.args[0].value, cst.Call):
        call = call.args[0].value
        callee = dotted_name(call.func)
    return callee


def _wraps_range_name(index: SemanticIndex, call: cst.Call) -> bool:
    """``tqdm(steps, ...)`` whose first positional argument is a name every reaching
    binding of which is a ``range`` (``steps = range(n)``): a progress bar over a
    counter, so the loop still counts."""
    if not call.args or call.args[0].keyword is not None or call.args[0].star \
            or not isinstance(call.args[0].value, cst.Name):
        return False
    inner = call.args[0].value
    values = [v for v in (index.reaching_values(inner) or []) if v is not call]
    return bool(values) and all(isinstance(v, cst.Call) and _counts(dotted_name(v.func)) for v in values)


def _counts(callee: Optional[str]) -> bool:
    """``range(n)``, or tqdm's ``trange(n)`` (``tqdm(range(n))``; a111 compositional_SLMs'
    ``train_iterator = trange(0, int(epochs))``)."""
    return callee is not None and (callee == "range" or callee.split(".")[-1] == "trange")


def _calls_range(expr: cst.BaseExpression) -> bool:
    stack: list[cst.CSTNode] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and isinstance(node.func, (cst.Name, cst.Attribute)) \
                and _counts(dotted_name(node.func)):
            return True
        stack.extend(node.children)
    return False


def known_ints(index: SemanticIndex, expr: cst.BaseExpression, _depth: int = 0) -> Optional[list[int]]:
    """Every int ``expr`` may be: a literal, a name whose every reaching
    binding is one (``microbatches = 4``), or a parameter that every
    same-module caller fills with one (``run(model, xs, microbatches)``).
    None when any value is unknown or no caller is visible."""
    from ddplint.analysis.values import literal_int

    value = literal_int(expr)
    if value is not None:
        return [value]
    if not isinstance(expr, cst.Name) or _depth > 3:
        return None
    bindings = index.reaching(expr.value, expr)
    if not bindings:
        return None
    found: list[int] = []
    for binding in bindings:
        if binding.kind in ("assign", "annassign") and binding.value is not None:
            values = known_ints(index, binding.value, _depth + 1)
        elif binding.kind == "param" and isinstance(binding.node, cst.Param):
            values = _caller_ints(index, binding.node, expr.value, _depth)
        else:
            values = None
        if values is None:
            return None
        found.extend(values)
    return found


def _caller_ints(index: SemanticIndex, param: cst.Param, name: str, depth: int) -> Optional[list[int]]:
    function = enclosing_function(index, param)
    if function is None or param.star:
        return None
    params = [p.name.value for p in function.params.params]
    position = params.index(name) if name in params else None
    if position is not None and params and params[0] == "self":
        position -= 1
    sites = callers(index, function)
    if not sites:
        return None
    found: list[int] = []
    for site in sites:
        arg = site.argument(name, position)
        if arg is None:
            if site.has_star_args or site.has_star_kwargs or param.default is None:
                return None
            values = known_ints(index, param.default, depth + 1)
        else:
            values = known_ints(index, arg.value, depth + 1)
        if values is None:
            return None
        found.extend(values)
    return found


CONFIG_WORDS = ("optim", "sched", "param", "module", "layer", "config", "cfg", "criteri", "loss_fn",
                "callback", "hook", "metric", "plan", "device", "param_group")


def iterates_config(index: SemanticIndex, loop: Loop) -> bool:
    """A loop over configuration, not data: the entries of a dict
    (``for name, op in self.optimizers.items()``), optimizers, parameters,
    modules, callbacks. Its targets are the same on every rank."""
    if not isinstance(loop, cst.For):
        return False
    iterable = loop.iter
    while isinstance(iterable, cst.Call) and dotted_name(iterable.func) in ("enumerate", "list", "sorted") \
            and iterable.args:
        iterable = iterable.args[0].value
    words = "_".join(sorted(names_in(iterable))).lower()
    if any(word in words for word in ("batch", "load", "data", "sample", "iter", "input", "image")):
        return False
    if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Attribute) \
            and iterable.func.attr.value in ("items", "keys", "values", "parameters", "named_parameters",
                                             "modules", "named_modules", "children"):
        return True
    return any(word in words for word in CONFIG_WORDS)


def loop_data_names(index: SemanticIndex, loop: Loop) -> set[str]:
    """Names a loop's target binds to data (the batch), not counters."""
    if not isinstance(loop, cst.For):
        return set()
    return names_in(loop.target) - loop_counter_names(index, loop)


# ---------------------------------------------------------------------- scalers


GRAD_SCALERS = (names.GRAD_SCALER, "torch.GradScaler", "torch.cuda.amp.GradScaler",
                # GradScaler subclasses for sharded optimizers (same scale, same unscale_)
                "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
                "fairscale.optim.grad_scaler.ShardedGradScaler")


def scaler_constructions(index: SemanticIndex) -> list[CallSite]:
    return index.calls_to(*GRAD_SCALERS)


def scaler_disabled(index: SemanticIndex, scaler: Optional[cst.BaseExpression]) -> bool:
    """Is ``scaler`` bound only to ``GradScaler(enabled=False)``? Then scaling is
    the identity and none of the scaler rules apply."""
    name = dotted_name(scaler) if scaler is not None else None
    if name is None:
        return False
    bindings = index.visible_bindings(name, scaler) or []
    values = [b.value for b in bindings if b.value is not None]
    if not values:
        return False
    for value in values:
        if not (isinstance(value, cst.Call) and index.qualified_name(value.func) in GRAD_SCALERS):
            return False
        site = index.call_site(value)
        enabled = site.keyword("enabled") if site is not None else None
        if enabled is None or literal_bool(enabled.value) is not False:
            return False
    return True


def is_helper_scaler(index: SemanticIndex, scaler: Optional[cst.BaseExpression]) -> bool:
    """A scaler-like object built from a class that is not torch's GradScaler
    (a helper that does step and update itself). A name that one branch binds to a
    stand-in (``DummyGradScalar()``) and another to a real ``GradScaler(...)`` scales
    whenever the real one is chosen: not a helper (a52 LION)."""
    built = scaler_builds(index, scaler)
    return bool(built) and not any(qualified in GRAD_SCALERS for qualified in built)


def may_be_stand_in_scaler(index: SemanticIndex, scaler: Optional[cst.BaseExpression]) -> bool:
    """Some binding of the scaler builds another class than torch's GradScaler
    (``DummyGradScalar()`` when AMP is off): it may lack ``unscale_``."""
    return any(qualified not in GRAD_SCALERS for qualified in scaler_builds(index, scaler))


def scaler_builds(index: SemanticIndex, scaler: Optional[cst.BaseExpression]) -> list[Optional[str]]:
    """The classes (qualified) the bindings of a scaler name build, one per binding that is a call."""
    name = dotted_name(scaler) if scaler is not None else None
    if name is None:
        return []
    return [index.qualified_name(b.value.func) for b in index.visible_bindings(name, scaler) or []
            if isinstance(b.value, cst.Call)]


def same_text(a: Optional[cst.CSTNode], b: Optional[cst.CSTNode]) -> bool:
    if a is None or b is None:
        return False
    return a.deep_equals(b)


# ---------------------------------------------------------------------- branches


def if_ancestors(index: SemanticIndex, node: cst.CSTNode,
                 stop: Optional[cst.CSTNode] = None) -> Iterator[tuple[cst.If, bool]]:
    """Enclosing ``if`` statements up to ``stop``, each with True when ``node``
    is in its body, False when in its ``else``/``elif``."""
    child = node
    for ancestor in index.ancestors(node):
        if ancestor is stop or isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return
        if isinstance(ancestor, cst.If):
            if child is ancestor.body:
                yield ancestor, True
            elif child is ancestor.orelse:
                yield ancestor, False
        child = ancestor


def exclusive(index: SemanticIndex, a: cst.CSTNode, b: cst.CSTNode) -> bool:
    """Can ``a`` and ``b`` not both run in one pass? True when they sit in
    opposite branches of one ``if``, or of two ``if``s with the same test."""
    branches_a = list(if_ancestors(index, a))
    branches_b = list(if_ancestors(index, b))
    for if_a, body_a in branches_a:
        test_a, polarity_a = _normalised(if_a.test)
        for if_b, body_b in branches_b:
            if if_a is if_b:
                if body_a != body_b:
                    return True
                continue
            test_b, polarity_b = _normalised(if_b.test)
            if same_text(test_a, test_b) and (body_a == polarity_a) != (body_b == polarity_b):
                return True
    return False


def _normalised(test: cst.BaseExpression) -> tuple[cst.BaseExpression, bool]:
    """``(x, False)`` for ``not x``, ``x is None`` and ``x == False``; ``(x, True)``
    for ``x``, ``x is not None`` and ``x == True``, so that ``if amp:`` and
    ``if not amp:`` compare."""
    polarity = True
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, polarity = test.expression, not polarity
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        if isinstance(target.comparator, cst.Name) and target.comparator.value == "None":
            if isinstance(target.operator, cst.Is):
                return test.left, not polarity
            if isinstance(target.operator, cst.IsNot):
                return test.left, polarity
        # ``if args.fsdp == False:`` / ``is True``: the flag itself, with its polarity.
        if isinstance(target.comparator, cst.Name) and target.comparator.value in ("True", "False") \
                and isinstance(target.operator, (cst.Equal, cst.Is, cst.NotEqual, cst.IsNot)):
            holds = target.comparator.value == "True"
            if isinstance(target.operator, (cst.NotEqual, cst.IsNot)):
                holds = not holds
            return test.left, polarity if holds else not polarity
    return test, polarity


AMP_WORDS = ("scaler", "amp", "fp16", "half", "mixed", "precision", "autocast", "dtype")


def under_amp_switch(index: SemanticIndex, node: cst.CSTNode, stop: Optional[cst.CSTNode] = None) -> bool:
    """Is ``node`` under an ``if`` whose test mentions a scaler or an AMP flag?
    Such code runs only with or only without AMP: the rules cannot tell which."""
    for branch, _ in if_ancestors(index, node, stop):
        text = " ".join(names_in(branch.test)).lower()
        if any(word in text for word in AMP_WORDS):
            return True
    child = node  # ``scaler.scale(loss).backward() if self.amp else loss.backward()``
    for ancestor in index.ancestors(node):
        if ancestor is stop or isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef,
                                                       cst.SimpleStatementLine)):
            break
        if isinstance(ancestor, cst.IfExp) and child is not ancestor.test \
                and any(word in " ".join(names_in(ancestor.test)).lower() for word in AMP_WORDS):
            return True
        child = ancestor
    return False


def enclosing_with_items(index: SemanticIndex, node: cst.CSTNode) -> Iterable[cst.WithItem]:
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, cst.With):
            yield from ancestor.items


# ---------------------------------------------------------------------- forwards


def forward_sites(index: SemanticIndex, expr: Optional[cst.BaseExpression], at_order: int,
                  depth: int = 0, expanded: Optional[dict[int, int]] = None) -> list[cst.Call]:
    """The calls where the forward pass behind ``expr`` ran: model calls (and
    same-module helpers that return a model output) reached through the
    bindings of the names ``expr`` reads. A binding's value is followed again
    only from a shallower depth (``expanded``: value -> depth): a loop that
    rebinds many names from each other (``a = a + b; b = b * a``) would otherwise
    fan out exponentially."""
    if expr is None or depth > 8:
        return []
    expanded = {} if expanded is None else expanded
    found: list[cst.Call] = []
    stack: list[cst.CSTNode] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call):
            if _is_model_call(index, node, at_order) or (
                    isinstance(node.func, cst.Name) and _helper_returns_graph(index, node, at_order, 0)):
                found.append(node)
                continue
        if isinstance(node, cst.Name):
            reaching = index.reaching(node.value, node)
            for binding in reaching:
                value = binding.value
                if binding.kind == "unpack" and isinstance(binding.node, cst.Assign):
                    value = binding.node.value
                if binding.kind == "loop" and isinstance(binding.node, cst.For):
                    # ``for key, part in losses.items(): loss += part``: what the container holds
                    followed = binding.node.iter
                elif value is not None and binding.kind != "param":
                    followed = value
                else:
                    continue
                if expanded.get(id(followed), 99) > depth + 1:
                    expanded[id(followed)] = depth + 1
                    found.extend(forward_sites(index, followed, binding.order, depth + 1, expanded))
            for value in _container_stores(index, node, reaching):
                if expanded.get(id(value), 99) > depth + 1:
                    expanded[id(value)] = depth + 1
                    found.extend(forward_sites(index, value, at_order, depth + 1, expanded))
            continue
        if isinstance(node, cst.Attribute):
            name = dotted_name(node)
            if name is not None and "." in name and index.visible_bindings(name, node):
                continue
        stack.extend(node.children)
    return found


def _container_stores(index: SemanticIndex, use: cst.Name, reaching: list[Binding]) -> list[cst.BaseExpression]:
    """The values stored into a dict or list built by a literal before ``use``
    in the same scope (``losses = {}``, ``losses[name] = crit(out, y)``, then
    ``sum(losses.values())``; ``parts.append(...)``)."""
    if not reaching or not all(b.kind in ("assign", "annassign") and isinstance(b.value, (cst.Dict, cst.List))
                               for b in reaching):
        return []
    scope = index.enclosing_scope(use)
    found = []
    for target, value in index.subscript_assignments:
        if isinstance(target.value, cst.Name) and target.value.value == use.value \
                and index.enclosing_scope(target) is scope and precedes(index, target, use):
            found.append(value)
    for site in index.method_calls("append", "insert"):
        if isinstance(site.receiver, cst.Name) and site.receiver.value == use.value and site.scope is scope \
                and site.node.args and precedes(index, site.node, use):
            found.append(site.node.args[-1].value)
    return found


def model_of_forward(call: cst.Call) -> cst.BaseExpression:
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value == "forward":
        return func.value
    return func


def _sharded_in_place(index: SemanticIndex, expr: cst.BaseExpression) -> bool:
    """``fully_shard(model)`` (FSDP2) earlier in the same function: it turns the
    module itself into an FSDP module, with no new name to bind."""
    name = dotted_name(expr)
    scope = index.enclosing_scope(expr)
    for site in index.calls_to(names.FULLY_SHARD):
        module = site.argument("module", 0)
        if module is not None and name is not None and dotted_name(module.value) == name \
                and index.enclosing_scope(site.node) is scope and precedes(index, site.node, expr):
            return True
    return False


def wrapped_model(index: SemanticIndex, expr: cst.BaseExpression, at_order: int,
                  wrappers: tuple[str, ...] = WRAPPERS) -> bool:
    """Is ``expr`` a DDP/FSDP-wrapped model: wrapped here, or a parameter that
    some caller passes a wrapped model for (same module, or anywhere in the
    project when project analysis is available)?"""
    if is_ddp_model(index, expr, at_order, wrappers):
        return True
    if not isinstance(expr, (cst.Name, cst.Attribute)):
        return False
    if names.FSDP in wrappers and _sharded_in_place(index, expr):
        return True
    from ddplint.analysis.models import wrapped_kind

    if wrapped_kind(index, expr, at_order):
        return True
    if not isinstance(expr, cst.Name):
        return False
    binding = next((b for b in index.reaching(expr.value, expr) if b.kind == "param"), None)
    if binding is None or not isinstance(binding.node, cst.Param):
        return False
    function = enclosing_function(index, binding.node)
    if function is None:
        return False
    params = [p.name.value for p in function.params.params]
    position = params.index(expr.value) if expr.value in params else None
    if position is not None and params and params[0] == "self":
        position -= 1
    for site in callers(index, function):
        arg = site.argument(expr.value, position)
        if arg is not None and is_ddp_model(index, arg.value, site.order, wrappers):
            return True
    return False


# ---------------------------------------------------------------------- conditions


PER_RANK_CALLS = ("isnan", "isinf", "isfinite", "any", "all")


AGREEING_COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor",
                        "broadcast_object_list", "all_gather_object", "reduce_across_processes",
                        "reduce", "gather")


def is_agreed_value(index: SemanticIndex, name: str, at: cst.CSTNode) -> bool:
    """Is ``name`` a value every rank agrees on: the tensor (first argument) of
    a collective that makes it equal on every rank (``dist.all_reduce(flag,
    op=MAX)``, ``broadcast``) in this function, or the result of a same-module
    or project helper that all-reduces a value and returns it
    (``Project.returns_agreed``)?"""
    function = enclosing_function(index, at) or index.module
    for site in calls_in_function(index, function):
        if site.method in AGREEING_COLLECTIVES and not _after_in_same_block_flow(index, site.node, at):
            first = site.positional(0) or site.keyword("tensor") or site.keyword("object_list") \
                or site.keyword("tensor_list") or site.keyword("output_tensor_list")
            if first is not None and name in names_in(first.value):
                return True
    if "." in name:
        return False
    for binding in index.reaching(name, at):
        value = binding.value
        if binding.kind == "unpack" and isinstance(binding.node, cst.Assign):
            value = binding.node.value
        if binding.kind in ("assign", "annassign", "unpack") and isinstance(value, cst.Call) \
                and returns_agreed_call(index, value):
            return True
    return False


def _after_in_same_block_flow(index: SemanticIndex, collective: cst.CSTNode, at: cst.CSTNode) -> bool:
    """Does the collective come after ``at`` in the same loop body (``if
    torch.isnan(loss): continue`` ... later ``dist.reduce(losses[k], dst=0)`` for
    logging): it cannot have made the tested value agreed."""
    if not precedes(index, at, collective):
        return False
    loops_at = enclosing_loops(index, at)
    return bool(loops_at) and loops_at[0] in enclosing_loops(index, collective)


def returns_agreed_call(index: SemanticIndex, call: cst.Call) -> bool:
    """A call of a project function whose every return is a value a collective
    made the same on every rank (``t = x.clone(); dist.all_reduce(t); return t``)."""
    callee = dotted_name(call.func)
    if callee is None:
        return False
    from ddplint.analysis.models import project_of

    try:
        return project_of(index).returns_agreed(index.path, callee)
    except Exception:  # pragma: no cover - a project without the module's facts
        return False


NON_FINITE_CHECKS = ("isnan", "isinf", "isfinite")
_AGREEING_CALLS = ("all_reduce", "all_gather", "broadcast", "reduce", "all_gather_object", "broadcast_object_list",
                   "barrier")


def returns_non_finite_flag(index: SemanticIndex, call: cst.Call, position: Optional[int]) -> bool:
    """Does the same-module helper this call runs (``helper(...)`` or
    ``self.helper(...)``) return, at ``position`` of its returned tuple (None:
    the whole value), a flag that a non-finite test of its own values decides?
    ``if torch.isnan(loss) or torch.isinf(loss): return None, {}, False`` ...
    ``return loss, metrics, True``, or ``return torch.isfinite(loss).all()``.
    Such a flag is this rank's. Not when the helper issues a collective (its
    test may read an agreed value); one level deep, memoised per helper."""
    site = index.call_site(call)
    if site is None:
        return False
    helpers = helper_functions(index, site)
    if not helpers:
        return False
    cache = index.cache.setdefault("flow.non_finite_flag", {})
    return all(_helper_returns_non_finite_flag(index, helper, position, cache) for helper in helpers)


def _helper_returns_non_finite_flag(index: SemanticIndex, helper: cst.FunctionDef, position: Optional[int],
                                    cache: dict) -> bool:
    key = (id(helper), position)
    if key in cache:
        return cache[key]
    cache[key] = False
    found = False
    if not any((site.method or dotted_name(site.node.func) or "").rsplit(".", 1)[-1] in _AGREEING_CALLS
               for site in calls_in_function(index, helper)):
        for node in _returns_of(helper):
            value = _returned_at(node.value, position)
            if value is None:
                continue
            if calls_non_finite_check(value):
                found = True
                break
            if _is_bool_literal(value) and any(isinstance(a, cst.If) and calls_non_finite_check(a.test)
                                               for a in _ancestors_within(index, node, helper)):
                found = True
                break
    cache[key] = found
    return found


def _returns_of(function: cst.FunctionDef) -> Iterator[cst.Return]:
    pending: list[cst.CSTNode] = [function.body]
    while pending:
        node = pending.pop()
        if isinstance(node, cst.Return):
            yield node
        elif not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            pending.extend(node.children)


def _returned_at(value: Optional[cst.BaseExpression], position: Optional[int]) -> Optional[cst.BaseExpression]:
    if value is None or position is None:
        return value
    if isinstance(value, cst.Tuple) and position < len(value.elements) \
            and not any(isinstance(e, cst.StarredElement) for e in value.elements):
        return value.elements[position].value
    return None


def _is_bool_literal(value: cst.BaseExpression) -> bool:
    return isinstance(value, cst.Name) and value.value in ("True", "False")


def calls_non_finite_check(expr: cst.CSTNode) -> bool:
    """Does ``expr`` call ``isnan`` / ``isinf`` / ``isfinite`` (torch's, math's, numpy's) anywhere?"""
    pending = [expr]
    while pending:
        node = pending.pop()
        if isinstance(node, cst.Call):
            func = node.func
            name = func.attr.value if isinstance(func, cst.Attribute) else (
                func.value if isinstance(func, cst.Name) else "")
            if name in NON_FINITE_CHECKS:
                return True
        pending.extend(node.children)
    return False


def arm_switched_off(index: SemanticIndex, function: cst.FunctionDef, branch: cst.If, in_body: bool,
                     calls: list[CallSite]) -> bool:
    """The arm of ``if <param>:`` (or ``if not <param>:``) in ``function`` that none
    of ``calls`` takes: each passes the same literal for the parameter, or leaves
    its literal default (``save_checkpoint(..., save_cur=True)`` never runs the
    ``elif``; ``if raise_on_error: raise ... else: return`` with the default kept)."""
    from ddplint.analysis.values import literal_bool

    test, negate = branch.test, False
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, negate = test.expression, True
    if not isinstance(test, cst.Name) or not calls:
        return False
    params = [*function.params.params, *function.params.kwonly_params]
    param = next((p for p in params if p.name.value == test.value), None)
    if param is None:
        return False
    names = [p.name.value for p in function.params.params]
    offset = 1 if names and names[0] in ("self", "cls") else 0
    position = names.index(test.value) - offset if test.value in names else None
    values = set()
    for site in calls:
        arg = site.argument(test.value, position)
        if arg is None and (site.has_star_args or site.has_star_kwargs):
            return False
        value = literal_bool(arg.value if arg is not None else param.default)
        if value is None:
            return False
        values.add(value)
    if len(values) != 1:
        return False
    taken = values.pop() != negate  # the test's value on every call
    return taken != in_body


def earlier_statements(index: SemanticIndex, node: cst.CSTNode, stop: cst.CSTNode) -> Iterator[cst.BaseStatement]:
    """The statements that run before ``node`` in each indented block around it,
    innermost block first, up to ``stop`` (a loop or a function)."""
    child = node
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, cst.IndentedBlock):
            for statement in ancestor.body:
                if statement is child:
                    break
                yield statement
        if ancestor is stop:
            return
        child = ancestor


def _ancestors_within(index: SemanticIndex, node: cst.CSTNode, stop: cst.CSTNode) -> Iterator[cst.CSTNode]:
    for ancestor in index.ancestors(node):
        if ancestor is stop:
            return
        yield ancestor


_PLAIN_SAMPLERS = ("torch.utils.data.RandomSampler", "torch.utils.data.SequentialSampler",
                   "torch.utils.data.sampler.RandomSampler", "torch.utils.data.sampler.SequentialSampler")


def short_batch_test(index: SemanticIndex, test: cst.BaseExpression, loop: Loop) -> bool:
    """``if input_ids.size(0) != args.batch_size: continue`` in a loop over a
    ``DataLoader(ds, sampler=DistributedSampler(ds), batch_size=args.batch_size)``:
    the test compares a batch's leading size (``x.size(0)``, ``x.size()[0]``,
    ``x.shape[0]``, ``len(x)``) with that loader's own ``batch_size``. The
    sampler gives every rank the same number of samples, so the short last
    batch comes at the same step on every rank: the same decision everywhere.
    (A sampler that is a ``DistributedSampler`` or, in the single-process arm,
    a plain Random/SequentialSampler.)"""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1 or not isinstance(loop, cst.For):
        return False
    left, right = test.left, test.comparisons[0].comparator
    if _leading_size(right) and not _leading_size(left):
        left, right = right, left
    if not _leading_size(left) or not isinstance(right, (cst.Name, cst.Attribute)):
        return False
    sized = _sized_name(left)
    if sized is None or not _unfiltered_batch(index, sized, loop, 0):
        return False  # ``x = x[mask]`` first: the size is this rank's
    loader = _iterated_name(loop.iter)
    if loader is None:
        return False
    values = index.reaching_values(loader) or []
    return bool(values) and all(_distributed_loader_of_size(index, value, right) for value in values)


def _leading_size(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Name) and func.value == "len" and len(expr.args) == 1:
            return True
        return isinstance(func, cst.Attribute) and func.attr.value == "size" and len(expr.args) == 1 \
            and isinstance(expr.args[0].value, cst.Integer) and expr.args[0].value.value == "0"
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1 \
            and isinstance(expr.slice[0].slice, cst.Index) and isinstance(expr.slice[0].slice.value, cst.Integer) \
            and expr.slice[0].slice.value.value == "0":
        holder = expr.value
        if isinstance(holder, cst.Attribute) and holder.attr.value == "shape":
            return True
        return isinstance(holder, cst.Call) and isinstance(holder.func, cst.Attribute) \
            and holder.func.attr.value == "size" and not holder.args
    return False


def _sized_name(expr: cst.BaseExpression) -> Optional[cst.Name]:
    """``x`` of ``len(x)``, ``x.size(0)``, ``x.size()[0]``, ``x.shape[0]``."""
    if isinstance(expr, cst.Call):
        inner = expr.args[0].value if isinstance(expr.func, cst.Name) else expr.func.value
    else:
        holder = expr.value
        inner = holder.value if isinstance(holder, cst.Attribute) else holder.func.value
    return inner if isinstance(inner, cst.Name) else None


def _unfiltered_batch(index: SemanticIndex, name: cst.Name, loop: cst.For, depth: int) -> bool:
    """Is ``name`` the loop's batch as the loader yields it: its target, an
    item unpacked from it, or a copy moved to the device (``x.to(dev)``,
    ``tuple(t.to(dev) for t in batch)``), never a selection of it?"""
    memo = index.cache.setdefault("flow.unfiltered_batch", {})
    key = (id(name), id(loop))
    if key not in memo:
        memo[key] = False  # a name bound from itself (a loop-carried rebinding) is not known to be plain
        memo[key] = _unfiltered_bindings(index, name, loop, depth)
    return memo[key]


def _unfiltered_bindings(index: SemanticIndex, name: cst.Name, loop: cst.For, depth: int) -> bool:
    bindings = index.reaching(name.value, name)
    if not bindings or depth > 3:
        return False
    for binding in bindings:
        if binding.kind == "loop":
            if binding.node is not loop:
                return False
            continue
        value = binding.value if binding.kind != "unpack" else getattr(binding.node, "value", None)
        if binding.kind not in ("assign", "unpack") or value is None:
            return False
        if binding.kind == "unpack" and isinstance(value, cst.Subscript) and isinstance(value.value, cst.Name) \
                and len(value.slice) == 1 and isinstance(value.slice[0].slice, cst.Slice):
            value = value.value  # ``input_ids, mask = batch[:2]``: items of the batch tuple
        source = _moved_source(value)
        if source is None or not _unfiltered_batch(index, source, loop, depth + 1):
            return False
    return True


def _moved_source(value: cst.BaseExpression) -> Optional[cst.Name]:
    if isinstance(value, cst.Name):
        return value
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
            and value.func.attr.value in ("to", "cuda") and isinstance(value.func.value, cst.Name):
        return value.func.value
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in ("tuple", "list") \
            and len(value.args) == 1:
        value = value.args[0].value
    if isinstance(value, (cst.GeneratorExp, cst.ListComp)) \
            and value.for_in.inner_for_in is None and isinstance(value.for_in.iter, cst.Name) \
            and isinstance(value.for_in.target, cst.Name) and _moved_source(value.elt) is not None \
            and _moved_source(value.elt).value == value.for_in.target.value:
        return value.for_in.iter
    return None


def _iterated_name(iterable: cst.BaseExpression) -> Optional[cst.Name]:
    """The loader a loop iterates through ``enumerate(...)`` / ``tqdm(...)``
    wrappers (their first argument)."""
    for _ in range(4):
        if isinstance(iterable, cst.Name):
            return iterable
        if isinstance(iterable, cst.Call) and iterable.args and iterable.args[0].keyword is None \
                and isinstance(iterable.func, (cst.Name, cst.Attribute)):
            iterable = iterable.args[0].value
            continue
        return None
    return None


def _distributed_loader_of_size(index: SemanticIndex, value: cst.BaseExpression, size: cst.BaseExpression) -> bool:
    if not isinstance(value, cst.Call) or index.qualified_name(value.func) != names.DATALOADER:
        return False
    keywords = {arg.keyword.value: arg.value for arg in value.args if arg.keyword is not None}
    if not same_text(keywords.get("batch_size"), size) or "batch_sampler" in keywords \
            or any(arg.star for arg in value.args):
        return False
    sampler = keywords.get("sampler")
    if sampler is None:
        return False
    samplers = [sampler] if isinstance(sampler, (cst.Call, cst.IfExp)) else (index.reaching_values(sampler) or [])
    samplers = [arm for v in samplers for arm in ((v.body, v.orelse) if isinstance(v, cst.IfExp) else (v,))]
    kinds = [index.qualified_name(v.func) if isinstance(v, cst.Call) else None for v in samplers]
    return names.DISTRIBUTED_SAMPLER in kinds and all(k == names.DISTRIBUTED_SAMPLER or k in _PLAIN_SAMPLERS
                                                      for k in kinds)


# ---------------------------------------------------------------------- step sequences


def scaled_backward_scaler(index: SemanticIndex, site: CallSite) -> Optional[cst.BaseExpression]:
    """The GradScaler of ``scaler.scale(loss).backward()`` when it really scales:
    not ``GradScaler(enabled=False)``, not a helper object of another class."""
    if not is_tensor_backward(index, site):
        return None
    scaler = scaler_of_backward(site)
    if scaler is None or scaler_disabled(index, scaler) or is_helper_scaler(index, scaler):
        return None
    return scaler


def step_regions(index: SemanticIndex) -> list[cst.CSTNode]:
    """Where one optimizer step's calls can be read in order: every training
    loop (helpers inlined), and every function that runs a scaled backward
    itself (a ``train_step`` whose loop lives in another module)."""
    cached = index.cache.get("flow.step_regions")
    if cached is None:
        cached = list(training_loops(index))
        seen = {id(region) for region in cached}
        for site in tensor_backwards(index):
            if scaler_of_backward(site) is None:
                continue
            function = enclosing_function(index, site.node)
            if function is not None and id(function) not in seen and not in_framework_code(index, function):
                seen.add(id(function))
                cached.append(function)
        index.cache["flow.step_regions"] = cached
    return cached


def events_exclusive(index: SemanticIndex, a: Event, b: Event) -> bool:
    """``exclusive`` for two events: compared where they are written when they
    sit in the same helper, else where the loop runs them."""
    if a.anchor is b.anchor:
        return a.site.node is not b.site.node and exclusive(index, a.site.node, b.site.node)
    return exclusive(index, a.anchor, b.anchor)


def event_under_amp_switch(index: SemanticIndex, event: Event) -> bool:
    return under_amp_switch(index, event.anchor) or (
        event.inlined and under_amp_switch(index, event.site.node))


# ---------------------------------------------------------------------- branches no caller takes


def in_branch_no_caller_takes(index: SemanticIndex, node: cst.CSTNode) -> bool:
    """Is ``node`` in the arm of ``if mode == "test":`` (or ``mode in ("a", "b")``)
    where ``mode`` is a parameter of the enclosing function that every call
    site of the project fills with a string constant, none of them that one
    (``Loader(cfg, "train")``, ``Loader(cfg, "online_eval")``)? That arm never
    runs in the project. Unknown callers, or any other argument, say no."""
    from ddplint.analysis.models import parameter_values
    from ddplint.screen.facts import STRING_PREFIX

    child = node
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, _FUNCTION_TYPES):
            return False
        if isinstance(ancestor, cst.If) and child is ancestor.body:
            tested = _string_test(ancestor.test)
            if tested is not None:
                name, wanted = tested
                bindings = index.reaching(name.value, name)
                if bindings and all(b.kind == "param" for b in bindings):
                    tags = parameter_values(index, bindings[0])
                    if tags and all(t.startswith(STRING_PREFIX) for t in tags) \
                            and not any(t[len(STRING_PREFIX):] in wanted for t in tags):
                        return True
        child = ancestor
    return False


def _string_test(test: cst.BaseExpression) -> Optional[tuple[cst.Name, set[str]]]:
    """``name == "x"``, ``"x" == name``, ``name in ("x", "y")``: (name, {"x", "y"})."""
    from ddplint.analysis.values import literal_str

    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    left, right = test.left, target.comparator
    if isinstance(target.operator, cst.Equal):
        if isinstance(right, cst.Name):
            left, right = right, left
        text = literal_str(right)
        return (left, {text}) if isinstance(left, cst.Name) and text is not None else None
    if isinstance(target.operator, cst.In) and isinstance(left, cst.Name) \
            and isinstance(right, (cst.Tuple, cst.List, cst.Set)):
        texts = {literal_str(e.value) for e in right.elements}
        return (left, texts) if None not in texts else None
    return None
