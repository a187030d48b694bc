"""Project analysis: facts about every module of the linted set, joined.

Real DDP code spreads one job over several modules (the model is wrapped in
main.py, the loop lives in engine.py, the sampler is built in data.py). So,
before the per-file lint, the engine summarises each file into a small,
picklable ``ModuleFacts`` (``summarize``), joins them into a ``Project``, and
hands the project to every file's semantic index (``index.project``). Rules ask
the project questions such as "is this function only ever called under a rank
guard?", "is ``set_epoch`` called anywhere?", "is this parameter a DDP model at
some call site?".

The summaries are extracted with Python's ``ast`` (about seven times cheaper than
the libcst parse the lint itself needs), never retain a tree, depend only on
the file's text (so they can be cached by content hash), and are tiny: names,
flags and call records.

When a fact is unknown (a dynamic call, code outside the linted set) the
answers say so (``None`` / ``complete = False``) and rules stay silent. A single
file linted alone gets a one-module project (``project_of``) with
``complete = False``: "nobody else does X" is then unknown.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field
from typing import Iterable, Optional

from ddplint import names
from ddplint.ranks import RANK_NAME, RANK_PREDICATES, RANK_ZERO_DECORATORS

COLLECTIVES = frozenset(
    f"torch.distributed.{name}" for name in (
        "all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor", "broadcast",
        "broadcast_object_list", "reduce", "reduce_scatter", "reduce_scatter_tensor", "barrier",
        "scatter", "scatter_object_list", "gather", "gather_object", "all_to_all",
        "all_to_all_single", "monitored_barrier", "all_reduce_coalesced", "all_gather_coalesced",
    )
)
COLLECTIVE_STATE_DICT = frozenset({
    names.FSDP + ".full_optim_state_dict", names.FSDP + ".optim_state_dict",
    names.FSDP + ".sharded_optim_state_dict", names.FSDP + ".scatter_full_optim_state_dict",
    "torch.distributed.checkpoint.state_dict.get_model_state_dict",
    "torch.distributed.checkpoint.state_dict.get_optimizer_state_dict",
    "torch.distributed.checkpoint.state_dict.get_state_dict",
    "torch.distributed.checkpoint.state_dict.set_model_state_dict",
    "torch.distributed.checkpoint.save", "torch.distributed.checkpoint.load",
    "torch.distributed.checkpoint.save_state_dict", "torch.distributed.checkpoint.load_state_dict",
    "torch.distributed.checkpoint.state_dict_saver.save",
    "torch.distributed.checkpoint.state_dict_loader.load",
})
SHARDING_FRAMEWORKS = ("accelerate", "lightning", "pytorch_lightning", "deepspeed", "ray", "horovod",
                       "composer", "torchdata", "webdataset", "ffcv")
_SPAWNERS = ("spawn", "start_processes", "Process", "launch", "elastic_launch", "run")
_PROCESS_INDEX_NAMES = ("gpu", "gpu_id", "device_id", "proc_id", "process_id", "local_gpu", "dev_id")
_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "SLURM_LOCALID", "OMPI_COMM_WORLD_RANK",
                   "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "NODE_RANK")


# ---------------------------------------------------------------------- summaries
@dataclass(slots=True)
class CallFact:
    """A call (or a ``mp.spawn(fn)`` reference) that may reach a project function."""

    callee: str  # dotted, as written: "train", "engine.train", "self.save"
    caller: str  # the enclosing function's name, "" at module level
    guarded: bool  # under a rank condition (strict)
    guarded_lenient: bool  # ... or under a process-index test (``args.gpu == 0``)
    # argument slot (position as str, or keyword) -> "ddp" / "fsdp" / "param:NAME"
    args: dict[str, str] = field(default_factory=dict)
    # imported helpers called in enclosing ``if`` tests: a guard when one of them
    # turns out (at the join) to be a rank predicate defined in another module
    maybe_guards: tuple[str, ...] = ()


@dataclass(slots=True)
class FunctionFacts:
    name: str
    params: tuple[str, ...]
    collective: bool = False  # issues a collective / collective state-dict call itself
    forwards: set[str] = field(default_factory=set)  # params called as ``param(...)``
    forwards_globals: set[str] = field(default_factory=set)  # module names called as ``model(...)``
    loads: set[str] = field(default_factory=set)  # params whose load_state_dict is called
    rank_predicate: bool = False  # every return value is a rank test
    rank_zero_only: bool = False  # decorated with @rank_zero_only / @master_only
    calls_set_epoch: bool = False


@dataclass(slots=True)
class ModuleFacts:
    path: str
    imports: dict[str, str] = field(default_factory=dict)  # local name -> target ("..pkg.mod.f")
    own_ddp_context: bool = False
    functions: dict[str, FunctionFacts] = field(default_factory=dict)
    calls: list[CallFact] = field(default_factory=list)
    calls_set_epoch: bool = False
    destroys_process_group: bool = False
    calls_set_device: bool = False
    has_epoch_loop: bool = False
    reads_local_rank_env: bool = False
    local_rank_attr_as_device: bool = False
    uses_sharding_framework: bool = False  # accelerate / Lightning shard loaders themselves
    wrapped_globals: dict[str, str] = field(default_factory=dict)  # module-level name -> "ddp"/"fsdp"


def summarize(source: str, path: str) -> Optional[ModuleFacts]:
    """The module's facts, or None when Python cannot parse it."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    facts = ModuleFacts(path)
    try:
        _Extractor(facts, "local_rank" in source).module(tree)
    except RecursionError:
        return None
    facts.calls = [call for call in facts.calls if _may_reach_project_function(call.callee, facts)]
    facts.reads_local_rank_env = "LOCAL_RANK" in source
    facts.uses_sharding_framework = any(
        target.lstrip(".").split(".")[0] in SHARDING_FRAMEWORKS for target in facts.imports.values())
    return facts


def _may_reach_project_function(callee: str, facts: "ModuleFacts") -> bool:
    """Keep only calls ``Project.resolve_function`` could resolve: a function of
    this module (also ``self.f``), or a name imported into it. Dropping the rest
    (``x.append``, ``print``, ``logger.info``) keeps summaries small: they are
    cached, pickled to every worker, and held for the whole run."""
    parts = callee.split(".")
    head = parts[0]
    if head in facts.imports:
        return True
    if len(parts) == 1:
        return head in facts.functions
    return head in ("self", "cls") and len(parts) == 2 and parts[1] in facts.functions


def summarize_file(path: str) -> Optional[ModuleFacts]:
    from ddplint.engine import decode_source

    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    source, _ = decode_source(data)
    return summarize(source, path) if source is not None else None


def _dotted(expr: ast.AST) -> Optional[str]:
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name):
        parts.append(expr.id)
        return ".".join(reversed(parts))
    return None


def _int(expr: ast.AST) -> Optional[int]:
    if isinstance(expr, ast.Constant) and type(expr.value) is int:
        return expr.value
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        inner = _int(expr.operand)
        return -inner if inner is not None else None
    return None


class _Extractor:
    """One recursive walk over statements; expressions are scanned with ast.walk."""

    def __init__(self, facts: ModuleFacts, mentions_local_rank: bool = True) -> None:
        self.facts = facts
        self.mentions_local_rank = mentions_local_rank  # skips an ast.dump per device call
        self.function: Optional[FunctionFacts] = None
        self.guards: list[bool] = []  # one entry per enclosing rank guard: strict?
        self.maybe_guards: list[str] = []  # imported calls in other enclosing ``if`` tests
        # Enclosing ``if``s on something other than the rank or "distributed or
        # not" (``if use_fsdp_eval:``): a collective there may never run.
        self.opaque = 0
        self.assigned: list[dict[str, list[ast.AST]]] = [{}]  # per scope: name -> values
        self.returns: list[list[ast.AST]] = [[]]  # per function: returned values

    # ------------------------------------------------------------------ names
    def qualified(self, expr: ast.AST) -> Optional[str]:
        dotted = _dotted(expr)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        target = self.facts.imports.get(head)
        if target is None:
            return None
        return names.canonical(f"{target}.{rest}" if rest else target)

    def values_of(self, name: str) -> list[ast.AST]:
        for scope in reversed(self.assigned):
            if name in scope:
                return scope[name]
        return []

    # ------------------------------------------------------------------ rank tests
    def rank_value(self, expr: ast.AST, lenient: bool, depth: int = 0) -> bool:
        if depth > 4:
            return False
        if isinstance(expr, ast.Call):
            if self.env_key(expr) in _RANK_VARIABLES:
                return True
            if isinstance(expr.func, ast.Name) and expr.func.id in ("int", "str") and expr.args:
                return self.rank_value(expr.args[0], lenient, depth + 1)
            dotted = _dotted(expr.func) or ""
            return dotted.split(".")[-1] in ("get_rank", "get_local_rank", "get_global_rank",
                                             "get_node_local_rank", "get_world_rank")
        if isinstance(expr, ast.Subscript):
            return self.env_key(expr) in _RANK_VARIABLES
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Mod, ast.FloorDiv)):
            return self.rank_value(expr.left, lenient, depth + 1)
        dotted = _dotted(expr)
        if dotted is None:
            return False
        last = dotted.split(".")[-1]
        if RANK_NAME.match(last) or (lenient and last.lower() in _PROCESS_INDEX_NAMES):
            return True
        values = self.values_of(dotted) if isinstance(expr, ast.Name) else []
        return bool(values) and all(self.rank_value(v, lenient, depth + 1) for v in values)

    def env_key(self, expr: ast.AST) -> Optional[str]:
        if isinstance(expr, ast.Subscript) and self.qualified(expr.value) == "os.environ":
            key = expr.slice
            return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None
        if isinstance(expr, ast.Call) and expr.args and \
                self.qualified(expr.func) in ("os.environ.get", "os.getenv"):
            key = expr.args[0]
            return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None
        return None

    def rank_test(self, test: ast.AST, lenient: bool, depth: int = 0) -> bool:
        """Mirror of ddplint.ranks.is_rank_condition over ``ast``."""
        if depth > 6:
            return False
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self.rank_test(test.operand, lenient, depth + 1)
        if isinstance(test, ast.BoolOp):
            return any(self.rank_test(value, lenient, depth + 1) for value in test.values)
        if isinstance(test, ast.Compare):
            if _is_distributed_flag_test(test):
                return False  # "distributed or not": the same on every rank
            return any(self.rank_value(o, lenient) for o in [test.left, *test.comparators])
        if isinstance(test, ast.Call):
            dotted = _dotted(test.func) or ""
            last = dotted.split(".")[-1]
            if last in RANK_PREDICATES:
                return True
            function = self.facts.functions.get(last) if "." not in dotted else None
            return function is not None and function.rank_predicate
        dotted = _dotted(test)
        if dotted is not None:
            last = dotted.split(".")[-1]
            values = [v for v in self.values_of(dotted)
                      if not (isinstance(v, ast.Constant) and isinstance(v.value, bool))]
            if values:
                return all(self.rank_test(v, lenient, depth + 1) for v in values)
            return last in RANK_PREDICATES or (lenient and self.rank_value(test, lenient))
        return False

    # ------------------------------------------------------------------ statements
    def module(self, tree: ast.Module) -> None:
        self.block(tree.body)

    def block(self, statements: list[ast.stmt]) -> None:
        pushed = 0
        for statement in statements:
            self.statement(statement)
            # ``if rank != 0: return`` guards the rest of the block.
            if isinstance(statement, ast.If) and not statement.orelse and _always_exits(statement.body):
                if self.rank_test(statement.test, lenient=True):
                    self.guards.append(self.rank_test(statement.test, lenient=False))
                    pushed += 1
        if pushed:
            del self.guards[-pushed:]

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.function_def(node)
        elif isinstance(node, ast.ClassDef):
            self.expressions(node.decorator_list)
            self.block(node.body)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.facts.imports[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    self.facts.imports.setdefault(head, head)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            for alias in node.names:
                if alias.name == "*":
                    continue
                separator = "" if base.endswith(".") else "."
                self.facts.imports[alias.asname or alias.name] = \
                    f"{base}{separator}{alias.name}" if base else alias.name
        elif isinstance(node, ast.If):
            self.expressions([node.test])
            strict = self.rank_test(node.test, lenient=False)
            lenient = strict or self.rank_test(node.test, lenient=True)
            maybe = [] if lenient else self.imported_calls(node.test)
            opaque = not lenient and not _is_distribution_test(node.test)
            if lenient:
                self.guards.append(strict)
            self.maybe_guards.extend(maybe)
            self.opaque += opaque
            self.block(node.body)
            self.block(node.orelse)
            self.opaque -= opaque
            if lenient:
                self.guards.pop()
            if maybe:
                del self.maybe_guards[-len(maybe):]
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            if isinstance(node, (ast.For, ast.AsyncFor)):
                if "epoch" in ast.dump(node.target).lower() or "epoch" in ast.dump(node.iter).lower():
                    self.facts.has_epoch_loop = True
                self.expressions([node.iter])
            else:
                self.expressions([node.test])
            self.block(node.body)
            self.block(node.orelse)
        elif isinstance(node, ast.Return):
            if node.value is not None:
                self.returns[-1].append(node.value)
                self.expressions([node.value])
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is not None:
                self.expressions([node.value])  # before the binding: ``m = DDP(prep(m))``
                for target in targets:
                    dotted = _dotted(target)
                    if dotted is not None:
                        self.assigned[-1].setdefault(dotted, []).append(node.value)
                        wrapped = self.wrapper_of(node.value) if self.function is None else ""
                        if wrapped and "." not in dotted:  # ``model = DDP(model)`` in a script
                            self.facts.wrapped_globals[dotted] = wrapped
        else:
            children = []
            for name, value in ast.iter_fields(node):
                if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                    self.block(value)
                elif isinstance(value, list) and value and isinstance(value[0], ast.excepthandler):
                    for handler in value:
                        self.block(handler.body)
                elif isinstance(value, list) and value and isinstance(value[0], ast.withitem):
                    children.extend(item.context_expr for item in value)
                elif isinstance(value, ast.expr):
                    children.append(value)
                elif isinstance(value, list):
                    children.extend(v for v in value if isinstance(v, ast.expr))
            self.expressions(children)

    def imported_calls(self, test: ast.AST) -> list[str]:
        found = []
        for node in ast.walk(test):
            if isinstance(node, ast.Call):
                dotted = _dotted(node.func)
                if dotted is not None and dotted.split(".")[0] in self.facts.imports:
                    found.append(dotted)
        return found

    def function_def(self, node: ast.AST) -> None:
        args = node.args
        params = tuple(a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs])
        facts = FunctionFacts(node.name, params)
        facts.rank_zero_only = any(
            (_dotted(d.func if isinstance(d, ast.Call) else d) or "").split(".")[-1]
            in _rank_zero_decorators() for d in node.decorator_list)
        self.expressions(node.decorator_list)
        outer, outer_guards, outer_maybe, outer_opaque = self.function, self.guards, self.maybe_guards, self.opaque
        self.function, self.guards, self.maybe_guards, self.opaque = facts, [], [], 0
        self.assigned.append({})
        self.returns.append([])
        self.block(node.body)
        facts.rank_predicate = self.returns_rank_test(node)
        self.returns.pop()
        self.assigned.pop()
        self.function, self.guards, self.maybe_guards, self.opaque = outer, outer_guards, outer_maybe, outer_opaque
        self.facts.functions.setdefault(node.name, facts)

    def returns_rank_test(self, node: ast.AST) -> bool:
        returns = self.returns[-1]
        real = [r for r in returns if not (isinstance(r, ast.Constant) and isinstance(r.value, bool))]
        return bool(real) and all(self.rank_test(r, lenient=False) for r in real)

    # ------------------------------------------------------------------ expressions
    def expressions(self, roots: Iterable[ast.AST]) -> None:
        for root in roots:
            for node in ast.walk(root):
                if isinstance(node, ast.Call):
                    self.call(node)

    def call(self, node: ast.Call) -> None:
        facts, function = self.facts, self.function
        qualified = self.qualified(node.func) or ""
        dotted = _dotted(node.func) or ""
        method = dotted.split(".")[-1] if dotted else (
            node.func.attr if isinstance(node.func, ast.Attribute) else "")
        if qualified in (names.INIT_PROCESS_GROUP, names.DDP, names.FSDP, names.FULLY_SHARD):
            facts.own_ddp_context = True
        if qualified in COLLECTIVES or qualified in COLLECTIVE_STATE_DICT:
            # Only collectives every caller's rank reaches: rank-guarded ones (the
            # ``if rank != 0: barrier()`` ... ``if rank == 0: barrier()`` idiom) are
            # judged where they are.
            if function is not None and not self.guards and not self.opaque:
                function.collective = True
        if "set_epoch" in method:
            facts.calls_set_epoch = True
            if function is not None:
                function.calls_set_epoch = True
        if qualified == names.DESTROY_PROCESS_GROUP or method == "destroy_process_group":
            facts.destroys_process_group = True
        if qualified == names.SET_DEVICE or method == "set_device":
            facts.calls_set_device = True
        if self.mentions_local_rank and method in (
                "set_device", "cuda", "to", "device", "DistributedDataParallel", "DDP") and \
                any("local_rank" in ast.dump(a) for a in [*node.args, *[k.value for k in node.keywords]]):
            facts.local_rank_attr_as_device = True
        if function is not None:
            if isinstance(node.func, ast.Name) and node.func.id in function.params:
                function.forwards.add(node.func.id)
            elif isinstance(node.func, ast.Name) and node.func.id not in self.assigned[-1]:
                function.forwards_globals.add(node.func.id)
            if method == "load_state_dict" and isinstance(node.func, ast.Attribute):
                root = _dotted(node.func.value) or ""
                head = root.split(".")[0]
                if head in function.params and root in (head, head + ".module"):
                    function.loads.add(head)
        if method in _SPAWNERS:
            self.spawned(node)
        if dotted and not qualified.startswith(("torch.", "os.", "sys.", "numpy.")):
            self.record_call(node, dotted)

    def spawned(self, node: ast.Call) -> None:
        """``mp.spawn(worker, ...)`` / ``Process(target=worker)``: the worker runs on every rank."""
        candidates = [node.args[0]] if node.args else []
        candidates += [k.value for k in node.keywords if k.arg in ("fn", "target", "entrypoint")]
        for candidate in candidates:
            if isinstance(candidate, ast.Name):
                self.facts.calls.append(CallFact(candidate.id, self.caller(), False, False))

    def caller(self) -> str:
        return self.function.name if self.function is not None else ""

    def record_call(self, node: ast.Call, dotted: str) -> None:
        strict = any(self.guards)
        lenient = bool(self.guards)
        slots: dict[str, str] = {}
        for position, arg in enumerate(node.args):
            if isinstance(arg, ast.Starred):
                break
            tag = self.arg_tag(arg)
            if tag:
                slots[str(position)] = tag
        for keyword in node.keywords:
            if keyword.arg is not None:
                tag = self.arg_tag(keyword.value)
                if tag:
                    slots[keyword.arg] = tag
        self.facts.calls.append(CallFact(dotted, self.caller(), strict, lenient, slots,
                                         tuple(self.maybe_guards)))

    def arg_tag(self, expr: ast.AST) -> str:
        """"ddp"/"fsdp" when the argument holds a wrapped model, "param:NAME" when it
        passes the enclosing function's parameter on, else ""."""
        wrapped = self.wrapper_of(expr)
        if wrapped:
            return wrapped
        if isinstance(expr, ast.Name):
            for value in self.values_of(expr.id):
                wrapped = self.wrapper_of(value)
                if wrapped:
                    return wrapped
            if self.function is not None and expr.id in self.function.params:
                return f"param:{expr.id}"
        return ""

    def wrapper_of(self, expr: ast.AST) -> str:
        if isinstance(expr, ast.Call):
            qualified = self.qualified(expr.func)
            if qualified == names.DDP:
                return "ddp"
            if qualified == names.FSDP:
                return "fsdp"
        return ""


_DISTRIBUTION_WORDS = ("distributed", "is_initialized", "is_available", "world_size", "ddp", "ngpus",
                       "n_gpu", "num_gpus", "multiprocessing", "local_rank", "dist_avail")


def _is_distribution_test(test: ast.AST) -> bool:
    """``if dist.is_initialized():``, ``if world_size > 1:``, ``if args.distributed:``:
    the same on every rank of one run."""
    text = ast.dump(test).lower()
    return any(word in text for word in _DISTRIBUTION_WORDS)


def _is_distributed_flag_test(test: ast.Compare) -> bool:
    """Mirror of ddplint.ranks._is_distributed_flag_test."""
    if len(test.ops) != 1:
        return False
    operator, value = test.ops[0], test.comparators[0]
    if isinstance(value, ast.Constant) and value.value is None:
        return isinstance(operator, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq))
    if _int(value) == -1:
        return isinstance(operator, (ast.Eq, ast.NotEq, ast.Gt, ast.LtE))
    return _int(value) == 0 and isinstance(operator, (ast.GtE, ast.Lt))


def _rank_zero_decorators() -> tuple[str, ...]:
    return RANK_ZERO_DECORATORS


def _always_exits(body: list[ast.stmt]) -> bool:
    if not body:
        return False
    last = body[-1]
    if isinstance(last, (ast.Return, ast.Continue, ast.Raise, ast.Break)):
        return True
    return isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) and \
        _dotted(last.value.func) in ("sys.exit", "exit", "os._exit")


# ---------------------------------------------------------------------- the join
FunctionKey = tuple[str, str]  # (module path, function name)


class Project:
    """The joined facts of the linted modules; rules query it."""

    def __init__(self, modules: Iterable[ModuleFacts], complete: bool = True) -> None:
        self.modules: dict[str, ModuleFacts] = {m.path: m for m in modules}
        self.complete = complete  # False: other modules exist that we have not seen
        self._by_suffix: dict[tuple[str, ...], list[str]] = {}
        for path in self.modules:
            parts = _module_parts(path)
            for start in range(len(parts)):
                self._by_suffix.setdefault(tuple(parts[start:]), []).append(path)
        self._nearest: dict[tuple[str, tuple[str, ...]], str] = {}
        self.callers: dict[FunctionKey, list[tuple[str, CallFact]]] = {}
        self._link_calls()
        self.ddp_params: dict[FunctionKey, dict[str, str]] = {}  # param -> "ddp"/"fsdp"
        self._propagate_wrapped_params()
        self._reaches_collective: dict[FunctionKey, bool] = {}
        self._propagate_collectives()
        self._forwards = self._propagate_param_use("forwards")
        self._loads = self._propagate_param_use("loads")
        self._context: dict[str, bool] = {}

    # ------------------------------------------------------------------ resolution
    def resolve_module(self, importer: str, target: str) -> Optional[str]:
        """The project path of module ``target`` ("pkg.mod", ".mod", "..") imported
        from ``importer``; None when it is not in the linted set."""
        level = len(target) - len(target.lstrip("."))
        dotted = target[level:]
        parts = tuple(p for p in dotted.split(".") if p)
        if level:
            base = os.path.dirname(os.path.normpath(importer))
            for _ in range(level - 1):
                base = os.path.dirname(base)
            for candidate in (os.path.join(base, *parts) + ".py",
                              os.path.join(base, *parts, "__init__.py")):
                if os.path.normpath(candidate) in self._normalised:
                    return self._normalised[os.path.normpath(candidate)]
            return None
        if not parts:
            return None
        found = self._by_suffix.get(parts)
        if not found:
            return None
        if len(found) == 1:
            return found[0]
        importer_dir = os.path.dirname(importer)
        key = (importer_dir, parts)
        if key not in self._nearest:  # the candidate nearest the importer wins
            self._nearest[key] = min(found, key=lambda p: (_distance(importer_dir, p), p))
        return self._nearest[key]

    @property
    def _normalised(self) -> dict[str, str]:
        if not hasattr(self, "_norm_cache"):
            self._norm_cache = {os.path.normpath(p): p for p in self.modules}
        return self._norm_cache

    def resolve_function(self, path: str, callee: str,
                         imports: Optional[dict[str, str]] = None) -> Optional[FunctionKey]:
        """The project function that ``callee`` (dotted, as written in module
        ``path``) names, or None when unknown."""
        module = self.modules.get(path)
        if module is None:
            return None
        imports = module.imports if imports is None else imports
        parts = callee.split(".")
        head = parts[0]
        if len(parts) == 1 and head not in imports:
            return (path, head) if head in module.functions else None
        if head in ("self", "cls") and len(parts) == 2:
            return (path, parts[1]) if parts[1] in module.functions else None
        target = imports.get(head)
        if target is None:
            return None
        dotted = target + ("." + ".".join(parts[1:]) if len(parts) > 1 else "")
        # "pkg.mod.func": the last part is the function, the rest the module.
        module_part, _, function = dotted.rpartition(".")
        if not function:
            return None
        resolved = self.resolve_module(path, module_part) if module_part else None
        if resolved is not None and function in self.modules[resolved].functions:
            return (resolved, function)
        return None

    def _link_calls(self) -> None:
        for path, module in self.modules.items():
            resolved = []
            for call in module.calls:
                if call.maybe_guards and not call.guarded and any(
                        self.is_rank_predicate(path, module.imports, g) for g in call.maybe_guards):
                    call.guarded = call.guarded_lenient = True
                key = self.resolve_function(path, call.callee)
                if key is not None:
                    self.callers.setdefault(key, []).append((path, call))
                    resolved.append(call)
            # Calls into other libraries are dead weight from here on, and the
            # project is pickled to every worker process.
            module.calls = resolved

    def function(self, key: FunctionKey) -> Optional[FunctionFacts]:
        module = self.modules.get(key[0])
        return module.functions.get(key[1]) if module is not None else None

    # ------------------------------------------------------------------ propagation
    def _param_for_slot(self, key: FunctionKey, call: CallFact, slot: str) -> Optional[str]:
        function = self.function(key)
        if function is None:
            return None
        if not slot.isdigit():
            return slot if slot in function.params else None
        params = function.params
        if params and params[0] in ("self", "cls") and "." in call.callee:
            params = params[1:]
        position = int(slot)
        return params[position] if position < len(params) else None

    def _propagate_wrapped_params(self) -> None:
        changed = True
        while changed:
            changed = False
            for key, calls in self.callers.items():
                for caller_path, call in calls:
                    for slot, tag in call.args.items():
                        if tag.startswith("param:"):
                            tag = self.ddp_params.get((caller_path, call.caller), {}).get(tag[6:], "")
                        if not tag:
                            continue
                        param = self._param_for_slot(key, call, slot)
                        if param is not None and param not in self.ddp_params.setdefault(key, {}):
                            self.ddp_params[key][param] = tag
                            changed = True

    def _propagate_collectives(self) -> None:
        reaches = {(p, n): f.collective for p, m in self.modules.items() for n, f in m.functions.items()}
        changed = True
        while changed:
            changed = False
            for key, calls in self.callers.items():
                if not reaches.get(key):
                    continue
                for caller_path, call in calls:
                    caller = (caller_path, call.caller)
                    if call.caller and caller in reaches and not reaches[caller]:
                        reaches[caller] = True
                        changed = True
        self._reaches_collective = reaches

    def _propagate_param_use(self, attribute: str) -> dict[FunctionKey, set[str]]:
        """Params that a function forwards / loads into, directly or by passing
        them to a project function that does."""
        uses = {(p, n): set(getattr(f, attribute)) for p, m in self.modules.items()
                for n, f in m.functions.items()}
        changed = True
        while changed:
            changed = False
            for key, calls in self.callers.items():
                for caller_path, call in calls:
                    caller = (caller_path, call.caller)
                    if caller not in uses:
                        continue
                    for slot, tag in call.args.items():
                        if not tag.startswith("param:") or tag[6:] in uses[caller]:
                            continue
                        if self._param_for_slot(key, call, slot) in uses.get(key, ()):
                            uses[caller].add(tag[6:])
                            changed = True
        return uses

    # ------------------------------------------------------------------ questions
    def reaches_collective(self, key: FunctionKey) -> bool:
        return self._reaches_collective.get(key, False)

    def call_reaches(self, path: str, callee: str, imports: dict[str, str],
                     wrapped_slots: dict[str, str]) -> Optional[str]:
        """What a call of ``callee`` from module ``path`` reaches: "collective",
        "forward" (a forward of a wrapped model passed in ``wrapped_slots``),
        "load" (a load_state_dict into it), or None."""
        key = self.resolve_function(path, callee, imports)
        if key is None:
            return None
        if self.reaches_collective(key):
            return "collective"
        function, module = self.function(key), self.modules[key[0]]
        if function is not None and function.forwards_globals & module.wrapped_globals.keys():
            return "forward"  # ``def estimate_loss(): model(x)`` with a module-level DDP model
        call = CallFact(callee, "", False, False)
        for slot in wrapped_slots:
            param = self._param_for_slot(key, call, slot)
            if param is not None and param in self._forwards.get(key, ()):
                return "forward"
        return None

    def loading_function(self, path: str, callee: str, imports: dict[str, str]) -> Optional[FunctionKey]:
        """The project function ``callee`` names when it loads weights into one of
        its parameters (directly or through another project function)."""
        key = self.resolve_function(path, callee, imports)
        return key if key is not None and self._loads.get(key) else None

    def call_loads_into(self, key: FunctionKey, callee: str, slot: str) -> bool:
        param = self._param_for_slot(key, CallFact(callee, "", False, False), slot)
        return param is not None and param in self._loads.get(key, ())

    def wrapped_param(self, path: str, function: str, param: str) -> str:
        """"ddp"/"fsdp" when some call site passes a wrapped model as ``param``."""
        return self.ddp_params.get((path, function), {}).get(param, "")

    def is_rank_predicate(self, path: str, imports: dict[str, str], callee: str) -> bool:
        key = self.resolve_function(path, callee, imports)
        function = self.function(key) if key else None
        return function is not None and function.rank_predicate

    def callers_guarded(self, path: str, function: str, _seen: Optional[set] = None) -> Optional[bool]:
        """True when every known call of the function runs under a rank guard
        (itself, or in a caller that is only ever called guarded); False when
        some call is unguarded; None when no call is known."""
        key = (path, function)
        seen = _seen if _seen is not None else set()
        if key in seen:
            return None
        seen.add(key)
        calls = self.callers.get(key)
        if not calls:
            return None
        for caller_path, call in calls:
            if call.guarded_lenient:
                continue
            caller = self.function((caller_path, call.caller)) if call.caller else None
            if caller is not None and caller.rank_zero_only:
                continue
            if call.caller and call.caller != function:
                above = self.callers_guarded(caller_path, call.caller, seen)
                if above is True:
                    continue
                if above is None and caller is not None:
                    return None  # the caller's own callers are unknown
            return False
        return True

    def caller_modules(self, path: str, function: str) -> Optional[list[ModuleFacts]]:
        """The modules that call the function; None when no call is known."""
        calls = self.callers.get((path, function))
        return [self.modules[caller] for caller, _ in calls] if calls else None

    def any_module(self, attribute: str) -> bool:
        return any(getattr(m, attribute) for m in self.modules.values())

    def module_in_ddp_context(self, path: str) -> bool:
        """RULES.md's DDP context, project-wide: the module itself, a module a DDP
        module imports or calls into, or one whose functions receive DDP models."""
        if path not in self._context:
            self._context[path] = self._compute_context(path)
        return self._context[path]

    def _compute_context(self, path: str) -> bool:
        module = self.modules.get(path)
        if module is None:
            return False
        if module.own_ddp_context:
            return True
        if path in self._receives_wrapped:
            return True
        return path in self._imported_by_ddp_modules

    @property
    def _receives_wrapped(self) -> set[str]:
        if not hasattr(self, "_receives_cache"):
            self._receives_cache = {key[0] for key, params in self.ddp_params.items() if params}
        return self._receives_cache

    @property
    def _imported_by_ddp_modules(self) -> set[str]:
        """Project modules that a DDP module imports (``import utils``,
        ``from utils import f``, ``from . import utils``)."""
        if not hasattr(self, "_imported_cache"):
            found: set[str] = set()
            for other_path, other in self.modules.items():
                if not other.own_ddp_context:
                    continue
                for target in other.imports.values():
                    for candidate in (target, target.rpartition(".")[0]):
                        if candidate.strip("."):
                            resolved = self.resolve_module(other_path, candidate)
                            if resolved is not None:
                                found.add(resolved)
            self._imported_cache = found
        return self._imported_cache


def _module_parts(path: str) -> list[str]:
    parts = [p for p in os.path.normpath(path).replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts:
        return parts
    last = parts[-1]
    if last == "__init__.py":
        return parts[:-1]
    if last.endswith(".py"):
        parts[-1] = last[:-3]
    return parts


def _distance(directory: str, path: str) -> int:
    try:
        return len(os.path.relpath(path, directory or ".").split(os.sep))
    except ValueError:
        return 1 << 20


def project_of(index) -> Project:
    """The project an index belongs to: the engine's joined project, or a
    one-module project built from this file alone (``complete = False``)."""
    if index.project is not None:
        return index.project
    project = index.cache.get("project")
    if project is None:
        facts = summarize(index.source, index.path) or ModuleFacts(index.path)
        project = Project([facts], complete=False)
        index.cache["project"] = project
    return project


# ---------------------------------------------------------------------- index-side helpers
def wrapped_kind(index, expr, at_order: int) -> str:
    """"ddp" / "fsdp" when ``expr`` holds a DDP / FSDP-wrapped model where it is
    used: a local wrap (``model = DDP(model)``), or a parameter of the enclosing
    function that some call site in the project passes a wrapped model to."""
    import libcst as cst

    from ddplint.facts import is_ddp_model

    if is_ddp_model(index, expr, at_order, (names.DDP,)):
        return "ddp"
    if is_ddp_model(index, expr, at_order, (names.FSDP,)):
        return "fsdp"
    if isinstance(expr, cst.Name):
        binding = index.binding_before(expr.value, at_order, expr) or \
            next(iter(index.visible_bindings(expr.value, expr) or []), None)
        if binding is not None and binding.kind == "param" and isinstance(binding.scope, cst.FunctionDef):
            return project_of(index).wrapped_param(index.path, binding.scope.name.value, expr.value)
    return ""


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


def wrapped_root(index, expr, at_order: int, wrappers: tuple[str, ...] = (names.DDP,)) -> Optional[str]:
    """The part of ``expr`` (``model``, ``self.net``, ``ddp.module.encoder``) that
    names a model already wrapped by one of ``wrappers`` at ``at_order``: the
    wrapper itself, or the inner model passed to a wrap call earlier in the same
    function. None otherwise, and for EMA/teacher copies."""
    import libcst as cst

    from ddplint.semantic import dotted_name

    name = dotted_name(expr)
    if name is None or _COPY_NAME.search(name):
        return None
    parts = name.split(".")
    scope = index.enclosing_scope(expr)
    wrap_calls = [site for site in index.calls_to(*wrappers) if site.order < at_order]
    for size in range(len(parts), 0, -1):
        prefix = ".".join(parts[:size])
        # Bindings before the use, minus the statement the use sits in
        # (``net = convert(net)`` binds ``net`` before its value's calls).
        enclosing = {id(a) for a in index.ancestors(expr)}
        bindings = [b for b in index.visible_bindings(prefix, expr) or []
                    if b.order < at_order and id(b.node) not in enclosing]
        if size == 1:
            bindings = bindings[-1:]
        for binding in bindings:
            value = binding.value
            if isinstance(value, cst.Call) and index.qualified_name(value.func) in wrappers:
                return prefix
            if binding.kind == "param" and size == 1 and isinstance(binding.scope, cst.FunctionDef):
                kind = project_of(index).wrapped_param(index.path, binding.scope.name.value, prefix)
                if kind and {"ddp": names.DDP, "fsdp": names.FSDP}[kind] in wrappers:
                    return prefix
        for site in wrap_calls:
            module = site.argument("module", 0)
            if site.scope is scope and module is not None and dotted_name(module.value) == prefix \
                    and not exclusive_branches(index, site.node, expr):
                return prefix
    return None
