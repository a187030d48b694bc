"""The semantic index: one pass over a module's CST that rules query.

Rules never walk the tree themselves for facts that this index already knows.
The index is built in a single traversal (no libcst metadata providers: their
Scope/QualifiedName/Parent/Position passes cost several times the parse), and
records:

- imports and aliases, so ``qualified_name(expr)`` resolves ``DDP(...)``,
  ``dist.barrier()`` and ``torch.nn.parallel.DistributedDataParallel(...)`` to
  one canonical dotted name;
- every call, with its resolved name, its method name and receiver, and the
  function it sits in;
- every binding (assignment, parameter, loop target, ``with ... as``, import),
  per function scope, so a rule can ask what a name may hold;
- string literals and f-strings;
- each node's parent, so rules can look at enclosing loops, ``if`` tests and
  ``with`` regions without a second walk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Optional, Union

import libcst as cst

from ddplint import names

Scope = Union[cst.Module, cst.FunctionDef, cst.Lambda]

from ddplint.screen.context import DDP_CONTEXT_PATTERN  # noqa: E402  (shared with the screen)


def may_be_in_ddp_context(source: str) -> bool:
    return DDP_CONTEXT_PATTERN.search(source) is not None


@dataclass
class Binding:
    """One place where a (possibly dotted) name receives a value."""

    name: str
    kind: str  # assign, augassign, annassign, param, loop, with, import, unpack, def, class, other
    value: Optional[cst.BaseExpression]
    node: cst.CSTNode
    scope: Scope
    order: int = 0  # position in source order among all bindings and calls


@dataclass
class CallSite:
    """A call expression with everything rules usually need about it."""

    node: cst.Call
    qualified_name: Optional[str]
    method: Optional[str]
    receiver: Optional[cst.BaseExpression]
    scope: Scope
    order: int = 0  # position in source order among all bindings and calls

    @property
    def has_star_kwargs(self) -> bool:
        return any(arg.star == "**" for arg in self.node.args)

    @property
    def has_star_args(self) -> bool:
        return any(arg.star == "*" for arg in self.node.args)

    def keyword(self, name: str) -> Optional[cst.Arg]:
        for arg in self.node.args:
            if arg.keyword is not None and arg.keyword.value == name:
                return arg
        return None

    def positional(self, index: int) -> Optional[cst.Arg]:
        """The index-th positional argument, or None when absent or hidden behind ``*args``."""
        position = 0
        for arg in self.node.args:
            if arg.keyword is not None or arg.star == "**":
                continue
            if arg.star == "*":
                return None
            if position == index:
                return arg
            position += 1
        return None

    def argument(self, name: str, position: Optional[int] = None) -> Optional[cst.Arg]:
        """Find an argument by keyword or by its position in the callee's signature.

        The position comes from ``names.SIGNATURES`` when not given.
        """
        found = self.keyword(name)
        if found is not None:
            return found
        if position is None and self.qualified_name in names.SIGNATURES:
            signature = names.SIGNATURES[self.qualified_name]
            if name in signature:
                position = signature.index(name)
        if position is None:
            return None
        return self.positional(position)

    def may_pass(self, name: str, position: Optional[int] = None) -> bool:
        """True when the call passes ``name`` or might (through ``**kwargs`` / ``*args``)."""
        if self.argument(name, position) is not None:
            return True
        if position is None and name in names.SIGNATURES.get(self.qualified_name or "", ()):
            position = names.SIGNATURES[self.qualified_name].index(name)
        return self.has_star_kwargs or (position is not None and self.has_star_args)


def dotted_name(expr: cst.BaseExpression) -> Optional[str]:
    """``a.b.c`` for a chain of names and attributes, else None."""
    parts = []
    while isinstance(expr, cst.Attribute):
        parts.append(expr.attr.value)
        expr = expr.value
    if isinstance(expr, cst.Name):
        parts.append(expr.value)
        return ".".join(reversed(parts))
    return None


def unpack_position(node: cst.Assign, name: str) -> Optional[int]:
    """Where ``name`` sits in the tuple target of ``a, name = ...`` (0-based), else None."""
    for target in node.targets:
        if isinstance(target.target, (cst.Tuple, cst.List)):
            for i, element in enumerate(target.target.elements):
                if dotted_name(element.value) == name:
                    return i
    return None


def _classes_in(node: cst.CSTNode) -> list[cst.ClassDef]:
    """The classes a module-level statement defines (also under ``if``/``try``)."""
    if isinstance(node, cst.ClassDef):
        return [node]
    if isinstance(node, (cst.If, cst.Try, cst.Else, cst.IndentedBlock, cst.ExceptHandler, cst.Finally)):
        return [cls for child in node.children for cls in _classes_in(child)]
    return []


def _module_name(node: Union[cst.Attribute, cst.Name, None]) -> str:
    return dotted_name(node) or "" if node is not None else ""


class SemanticIndex:
    """Facts about one module, built by ``SemanticIndex.build``."""

    def __init__(self, module: cst.Module, source: str, path: str) -> None:
        self.module = module
        self.source = source
        self.path = path
        self.imports: dict[str, str] = {}
        self.imported_modules: set[str] = set()  # dotted modules of plain `import a.b.c`
        self.calls: list[CallSite] = []
        self.calls_by_name: dict[str, list[CallSite]] = {}
        self.calls_by_method: dict[str, list[CallSite]] = {}
        self.bindings: dict[tuple[int, str], list[Binding]] = {}
        self.subscript_assignments: list[tuple[cst.Subscript, cst.BaseExpression]] = []
        self.strings: list[tuple[cst.SimpleString, object]] = []
        self.fstrings: list[cst.FormattedString] = []
        self.functions: dict[str, list[cst.FunctionDef]] = {}
        # Structure, in source order, for flow questions (loops, regions, exits).
        self.loops: list[Union[cst.For, cst.While]] = []
        self.withs: list[cst.With] = []
        self.ifs: list[cst.If] = []
        self.exits: list[Union[cst.Continue, cst.Break, cst.Return, cst.Raise]] = []
        self.asserts: list[cst.Assert] = []  # a failed ``assert`` raises: a conditional exit
        self.classes: list[cst.ClassDef] = []
        self.cache: dict = {}  # derived facts computed lazily by ddplint.analysis.values / flow modules
        self._parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self._call_by_node: dict[cst.Call, CallSite] = {}
        self._ddp_context: Optional[bool] = None
        self.project = None  # set by project analysis when several files are linted together
        self.star_imports: list[str] = []  # modules of ``from m import *``
        self._aliases: dict[str, Optional[str]] = {}
        self._by_name: Optional[dict[str, list[Binding]]] = None

    # ------------------------------------------------------------------ build
    @classmethod
    def build(cls, module: cst.Module, source: str, path: str = "<string>") -> "SemanticIndex":
        index = cls(module, source, path)
        _IndexBuilder(index).walk(module)
        index._resolve_call_names()
        return index

    def _resolve_call_names(self) -> None:
        # Done after the walk so that a call above a late or function-local import
        # still resolves (imports are module-wide facts here).
        for site in self.calls:
            site.qualified_name = self.qualified_name(site.node.func)
            if site.qualified_name is not None:
                self.calls_by_name.setdefault(site.qualified_name, []).append(site)

    # ------------------------------------------------------------------ tree
    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self._parents.get(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        current = self._parents.get(node)
        while current is not None:
            yield current
            current = self._parents.get(current)

    def enclosing_scope(self, node: cst.CSTNode) -> Scope:
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
                return ancestor
        return self.module

    def enclosing(self, node: cst.CSTNode, *types: type) -> Optional[cst.CSTNode]:
        """The nearest ancestor of one of ``types`` inside the same function."""
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, types):
                return ancestor
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return None
        return None

    def call_site(self, node: cst.Call) -> Optional[CallSite]:
        return self._call_by_node.get(node)

    # ------------------------------------------------------------------ names
    def qualified_name(self, expr: cst.BaseExpression) -> Optional[str]:
        """Resolve ``expr`` through the module's imports to a canonical dotted name.

        Returns None for names that are not imported (locals, builtins, attributes
        of values), so rules never match a user's own ``DataLoader`` class.
        """
        dotted = dotted_name(expr)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        target = self.imports.get(head)
        if target is None:
            target = self._alias_target(head)
            if target is None:
                return None
        full = f"{target}.{rest}" if rest else target
        return names.canonical(full)

    def _alias_target(self, head: str) -> Optional[str]:
        """What a name that no import binds stands for: a local alias
        (``Wrapper = DistributedDataParallel``, ``dist = torch.distributed``:
        every binding of the name assigns the same imported thing), or, in a
        module with a star import, one of the conventional torch names that
        nothing here binds (``torch``, ``dist``, ``nn``, ``F``, ...)."""
        if head in self._aliases:
            return self._aliases[head]
        self._aliases[head] = None  # guards against ``a = b; b = a``
        bindings = self._bindings_named().get(head)
        target = None
        if bindings:
            targets = set()
            for binding in bindings:
                value = binding.value
                if binding.kind not in ("assign", "annassign") or value is None or dotted_name(value) is None:
                    targets = set()
                    break
                targets.add(self.qualified_name(value))
            if len(targets) == 1 and None not in targets:
                target = targets.pop()
        elif self.star_imports:
            target = names.STAR_IMPORT_CONVENTIONS.get(head)
        elif head == "torch" and any(t.startswith("torch.") for t in self.imports.values()):
            target = "torch"  # ``import torch.distributed as dist`` alone binds no ``torch``
        self._aliases[head] = target
        return target

    def _bindings_named(self) -> dict[str, list[Binding]]:
        if self._by_name is None:
            self._by_name = {}
            for (_, name), bindings in self.bindings.items():
                self._by_name.setdefault(name, []).extend(bindings)
        return self._by_name

    def calls_to(self, *qualified_names: str) -> list[CallSite]:
        found: list[CallSite] = []
        for qualified in qualified_names:
            found.extend(self.calls_by_name.get(qualified, ()))
        return found

    def method_calls(self, *methods: str) -> list[CallSite]:
        found: list[CallSite] = []
        for method in methods:
            found.extend(self.calls_by_method.get(method, ()))
        return found

    def imports_module(self, prefix: str) -> bool:
        return any(t == prefix or t.startswith(prefix + ".") for t in self.imports.values())

    # ------------------------------------------------------------------ bindings
    def bindings_of(self, name: str, scope: Scope) -> list[Binding]:
        return self.bindings.get((id(scope), name), [])

    def visible_bindings(self, name: str, at: cst.CSTNode) -> Optional[list[Binding]]:
        """Bindings a name may refer to at ``at``: the innermost function scope that
        binds it, else module scope. Dotted names (``self.model``, ``args.rank``) are
        looked up module-wide. None when nothing binds it in this module.
        """
        if "." in name:
            found = self.bindings.get((id(self.module), name))
            return found or None
        scope: Optional[cst.CSTNode] = self.enclosing_scope(at)
        while scope is not None:
            found = self.bindings.get((id(scope), name))
            if found:
                return found
            if scope is self.module:
                break
            scope = self.enclosing_scope(scope)
        return None

    def reaching(self, name: str, at: cst.CSTNode) -> list[Binding]:
        """Every binding of ``name`` that may hold its value at ``at`` (reaching
        definitions over statement order, branches, loops and ``try``; see
        ``ddplint.analysis.reaching``), in source order. Dotted names
        (``self.model``, ``args.rank``) are not flow-analysed: all their
        bindings in the module count. Empty when nothing here binds the name.
        """
        if "." in name:
            return self._attribute_bindings(name, at)
        use_scope = self.enclosing_scope(at)
        scope: cst.CSTNode = use_scope
        while True:
            found = self.bindings.get((id(scope), name))
            if found:
                break
            if scope is self.module:
                return []
            scope = self.enclosing_scope(scope)
        comprehension = [b for b in found if isinstance(b.node, cst.CompFor)]
        if comprehension:
            inside = [b for b in comprehension if self._in_comprehension_of(at, b.node)]
            if inside:
                return inside
            found = [b for b in found if not isinstance(b.node, cst.CompFor)]
            if not found:
                return []
        flow = self._flow(scope, name, found)
        if scope is use_scope:
            reached = flow.at(at)
            return reached if reached is not None else list(found)
        return flow.at_end() or list(found)

    def _attribute_bindings(self, name: str, at: cst.CSTNode) -> list[Binding]:
        """Every binding of a dotted name in the module, except when its head
        is a parameter of the function the use is in (``args.rank`` in ``def
        setup_mp(args)``): then that function's own bindings and those of the
        functions it hands the object to (``setup(opts)`` then ``opts.writer``),
        since another function's ``args.rank = ...`` binds another object
        (what this one holds comes from its callers)."""
        found = list(self.bindings.get((id(self.module), name), ()))
        head = name.split(".")[0]
        if found and head in ("self", "cls"):
            found = self._same_class_family(found, at)
            use_scope = self.enclosing_scope(at)
            if isinstance(use_scope, cst.FunctionDef) and use_scope.name.value == "__init__":
                # The constructor runs once, first: its later ``self.g = DDP(self.g)`` cannot
                # reach an earlier use (a summary forward before the wrap; a114 StyleGAN2).
                found = [b for b in found if not self._rebound_later(b, at, use_scope)]
            return found
        if not found:
            return found
        use_scope = self.enclosing_scope(at)
        found = [b for b in found if not self._rebound_later(b, at, use_scope)]
        if not isinstance(use_scope, cst.FunctionDef) or not any(
                b.kind == "param" for b in self.bindings.get((id(use_scope), head), ())):
            return found
        handed_to = {site.node.func.value for site in self.calls
                     if site.scope is use_scope and isinstance(site.node.func, cst.Name)
                     and any(isinstance(arg.value, cst.Name) and arg.value.value == head for arg in site.node.args)}
        kept = []
        for binding in found:
            scope = self.enclosing_scope(binding.node)
            if scope is use_scope or (isinstance(scope, cst.FunctionDef) and scope.name.value in handed_to):
                kept.append(binding)
        return kept

    def _same_class_family(self, bindings: list[Binding], at: cst.CSTNode) -> list[Binding]:
        """``self.model`` in a method of class C: the bindings made in C, its subclasses and the
        bases of any of them (of this module): the classes whose methods may act on the instance.
        Not those of a sibling class (``class DDP(Base)`` wraps its own ``self.model``; ``class
        LocalSGD(Base)`` does not) nor of an unrelated class.
        Bindings outside any class, and uses outside one, keep every binding."""
        owner = self._owning_class(at)
        if owner is None:
            return bindings
        family = self._class_family(owner)
        return [b for b in bindings if (cls := self._owning_class(b.node)) is None or id(cls) in family]

    def _owning_class(self, node: cst.CSTNode) -> Optional[cst.ClassDef]:
        return next((a for a in self.ancestors(node) if isinstance(a, cst.ClassDef)), None)

    def _class_family(self, owner: cst.ClassDef) -> set[int]:
        key = ("semantic.class_family", id(owner))
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        classes: dict[str, list[cst.ClassDef]] = {}
        for node in self.module.body:
            for cls in _classes_in(node):
                classes.setdefault(cls.name.value, []).append(cls)

        def bases(cls: cst.ClassDef) -> list[cst.ClassDef]:
            return [b for arg in cls.bases if arg.keyword is None
                    for b in classes.get((dotted_name(arg.value) or "").split(".")[-1], ())]

        def walk(start: cst.ClassDef, step) -> set[int]:
            seen, pending = {id(start)}, [start]
            while pending:
                for nxt in step(pending.pop()):
                    if id(nxt) not in seen:
                        seen.add(id(nxt))
                        pending.append(nxt)
            return seen

        every = [cls for group in classes.values() for cls in group]
        by_id = {id(cls): cls for cls in every}
        below = walk(owner, lambda c: [s for s in every if any(b is c for b in bases(s))])
        family = set().union(*(walk(by_id.get(i, owner), bases) for i in below))
        self.cache[key] = family
        return family

    def _rebound_later(self, binding: Binding, at: cst.CSTNode, use_scope: Scope) -> bool:
        """A binding of the use's own function that comes after the use, with no
        loop around both (``set_device(args.local_rank)`` then ``args.local_rank =
        dist.get_rank()``): it cannot reach the use."""
        from ddplint.analysis.flow import precedes

        if self.enclosing_scope(binding.node) is not use_scope or not precedes(self, at, binding.node):
            return False
        around = {id(a) for a in self.ancestors(at)}
        for ancestor in self.ancestors(binding.node):
            if ancestor is use_scope:
                return True
            if isinstance(ancestor, (cst.For, cst.While)) and id(ancestor) in around:
                return False
        return True

    def _flow(self, scope: cst.CSTNode, name: str, bindings: list[Binding]):
        from ddplint.analysis.reaching import ScopeFlow

        key = ("reaching", id(scope), name)
        flow = self.cache.get(key)
        if flow is None:
            flow = self.cache[key] = ScopeFlow(self, scope, bindings)
        return flow

    def _in_comprehension_of(self, node: cst.CSTNode, comp_for: cst.CompFor) -> bool:
        owner = next((a for a in self.ancestors(comp_for) if isinstance(
            a, (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp))), None)
        return owner is not None and any(a is owner for a in self.ancestors(node))

    def reaching_values(self, expr: cst.BaseExpression) -> Optional[list[cst.BaseExpression]]:
        """The values a name (or dotted name) may hold at ``expr``: the values of
        its reaching bindings when every one is a plain assignment; None when
        one is opaque (a parameter, loop target, unknown unpacking, import) or
        nothing here binds it. Dotted names count every binding in the module."""
        name = dotted_name(expr)
        if name is None:
            return None
        bindings = self.reaching(name, expr)
        if not bindings:
            return None
        values = []
        for binding in bindings:
            if binding.kind not in ("assign", "annassign") or binding.value is None:
                return None
            values.append(binding.value)
        return values

    # ------------------------------------------------------------------ context
    @property
    def in_ddp_context(self) -> bool:
        """RULES.md's DDP context: imports torch.distributed or DDP/FSDP, calls
        init_process_group, wraps a model, or builds a DistributedSampler
        (RULES.md, Clarifications). Project analysis may widen it."""
        if self._ddp_context is None:
            self._ddp_context = self._compute_ddp_context()
        return self._ddp_context

    def _compute_ddp_context(self) -> bool:
        # Keep in step with DDP_CONTEXT_PATTERN: every way in here needs a match.
        for target in (*self.imports.values(), *self.imported_modules):
            canonical = names.canonical(target)
            if canonical.startswith("torch.distributed") or canonical in (names.DDP, names.FSDP):
                return True
        if self.calls_to(names.INIT_PROCESS_GROUP, names.DDP, names.FSDP, names.FULLY_SHARD,
                         names.DISTRIBUTED_SAMPLER):
            return True
        # ``class MyDDP(torch.nn.parallel.DistributedDataParallel)``: constructing one wraps a model
        if any(self.qualified_name(base.value) in (names.DDP, names.FSDP) for klass in self.classes
               for base in klass.bases):
            return True
        if self.project is not None and self.project.module_in_ddp_context(self.path):
            return True
        return False

    def functions_named(self, name: str) -> list[cst.FunctionDef]:
        return self.functions.get(name, [])


# ---------------------------------------------------------------------- traversal
# libcst's own visitor rebuilds every node it passes (the machinery is shared with
# transformers) and visits every whitespace, comma and parenthesis node; that costs
# about as much as the parse. The index walks the dataclass fields directly,
# skipping the formatting-only fields, in source order.
_FORMATTING_FIELDS = frozenset({
    "lpar", "rpar", "comma", "semicolon", "colon", "first_colon", "second_colon", "leading_lines",
    "lines_after_decorators", "header", "footer", "newline", "trailing_whitespace", "leading_whitespace",
    "indent", "empty_lines", "equal", "dot", "lbrace", "rbrace", "lbracket", "rbracket", "star",
    "asynchronous", "trailing_comma", "posonly_ind", "separator", "comment", "default_indent",
    "default_newline", "encoding", "has_trailing_newline", "operator", "whitespace",
})
# Fields whose declaration order differs from the order in the source text.
_SOURCE_ORDER = {
    cst.FunctionDef: ("decorators", "name", "type_parameters", "params", "returns", "body"),
    cst.ClassDef: ("decorators", "name", "type_parameters", "bases", "keywords", "body"),
    cst.ExceptHandler: ("type", "name", "body"),
    cst.IfExp: ("body", "test", "orelse"),
    cst.MatchCase: ("pattern", "guard", "body"),
}
if hasattr(cst, "ExceptStarHandler"):
    _SOURCE_ORDER[cst.ExceptStarHandler] = ("type", "name", "body")


def _all_node_types() -> frozenset:
    found, pending = set(), [cst.CSTNode]
    while pending:
        for subclass in pending.pop().__subclasses__():
            if subclass not in found:
                found.add(subclass)
                pending.append(subclass)
    return frozenset(found)


_NODE_TYPES = _all_node_types()
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def _child_fields(node_type: type) -> tuple[str, ...]:
    fields = _CHILD_FIELDS.get(node_type)
    if fields is None:
        import dataclasses

        fields = _SOURCE_ORDER.get(node_type) or tuple(
            f.name for f in dataclasses.fields(node_type)
            if f.name not in _FORMATTING_FIELDS and not f.name.startswith("whitespace"))
        _CHILD_FIELDS[node_type] = fields
    return fields


class _IndexBuilder:
    """Fills a SemanticIndex in one traversal."""

    def __init__(self, index: SemanticIndex) -> None:
        self.index = index
        self.stack: list[cst.CSTNode] = []
        self.scopes: list[Scope] = [index.module]
        self.order = 0

    def walk(self, node: cst.CSTNode) -> None:
        """Pre-order walk over syntactic children (see _FORMATTING_FIELDS)."""
        self.on_visit(node)
        node_types = _NODE_TYPES
        for name in _child_fields(type(node)):
            value = getattr(node, name, None)
            if type(value) in node_types:
                self.walk(value)
            elif type(value) in (tuple, list):
                for item in value:
                    if type(item) in node_types:
                        self.walk(item)
        self.on_leave(node)

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.stack:
            self.index._parents[node] = self.stack[-1]
        self.stack.append(node)
        handler = _VISIT.get(type(node))
        if handler is not None:
            handler(self, node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.stack.pop()
        if isinstance(original_node, (cst.FunctionDef, cst.Lambda)):
            self.scopes.pop()

    # ------------------------------------------------------------------ helpers
    @property
    def scope(self) -> Scope:
        return self.scopes[-1]

    def bind(self, name: str, kind: str, value: Optional[cst.BaseExpression], node: cst.CSTNode,
             scope: Optional[Scope] = None) -> None:
        if "." in name:
            scope = self.index.module  # attribute bindings are looked up module-wide
        scope = scope or self.scope
        self.order += 1
        self.index.bindings.setdefault((id(scope), name), []).append(
            Binding(name, kind, value, node, scope, self.order)
        )

    def bind_target(self, target: cst.BaseExpression, kind: str,
                    value: Optional[cst.BaseExpression], node: cst.CSTNode) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            pairs = _element_values(target, value) if kind == "assign" else None
            for position, element in enumerate(target.elements):
                if pairs is not None:  # ``net, cfg = self.net, self.cfg``: one assignment each
                    self.bind_target(element.value, "assign", pairs[position], node)
                else:
                    self.bind_target(element.value, "unpack" if kind == "assign" else kind, None, node)
        elif isinstance(target, cst.StarredElement):
            self.bind_target(target.value, kind, None, node)
        elif isinstance(target, cst.Subscript):
            if value is not None:
                self.index.subscript_assignments.append((target, value))
        else:
            name = dotted_name(target)
            if name is not None:
                self.bind(name, kind, value, node)

    # ------------------------------------------------------------------ visitors
    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = _module_name(alias.name)
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
                self.index.imports[local] = full
                self.bind(local, "import", None, node)
            else:
                head = full.split(".")[0]
                self.index.imports.setdefault(head, head)
                self.index.imported_modules.add(full)  # `import torch.distributed` binds only `torch`
                self.bind(head, "import", None, node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        base = "." * len(node.relative) + _module_name(node.module)
        if isinstance(node.names, cst.ImportStar):
            self.index.star_imports.append(base)
            return
        for alias in node.names:
            imported = _module_name(alias.name)
            local = imported
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            separator = "" if base.endswith(".") else "."
            self.index.imports[local] = f"{base}{separator}{imported}" if base else imported
            self.bind(local, "import", None, node)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        method = receiver = None
        if isinstance(func, cst.Attribute):
            method, receiver = func.attr.value, func.value
        elif isinstance(func, cst.Name):
            method = func.value
        self.order += 1
        site = CallSite(node, None, method, receiver, self.scope, self.order)
        index = self.index
        index.calls.append(site)
        index._call_by_node[node] = site
        if method is not None:
            index.calls_by_method.setdefault(method, []).append(site)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self.bind_target(target.target, "assign", node.value, node)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self.bind_target(node.target, "annassign", node.value, node)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.bind_target(node.target, "augassign", node.value, node)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self.bind_target(node.target, "assign", node.value, node)

    def visit_For(self, node: cst.For) -> None:
        self.bind_target(node.target, "loop", None, node)
        self.index.loops.append(node)

    def visit_While(self, node: cst.While) -> None:
        self.index.loops.append(node)

    def visit_With(self, node: cst.With) -> None:
        self.index.withs.append(node)

    def visit_If(self, node: cst.If) -> None:
        self.index.ifs.append(node)

    def visit_exit(self, node: cst.CSTNode) -> None:
        self.index.exits.append(node)

    def visit_Assert(self, node: cst.Assert) -> None:
        self.index.asserts.append(node)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self.bind_target(node.target, "loop", None, node)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self.bind_target(node.asname.name, "with", node.item, node)

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if node.name is not None and isinstance(node.name.name, cst.Name):
            self.bind(node.name.name.value, "other", None, node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.bind(node.name.value, "def", None, node)
        self.index.functions.setdefault(node.name.value, []).append(node)
        self.scopes.append(node)
        self._bind_params(node.params, node)

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self.scopes.append(node)
        self._bind_params(node.params, node)

    def _bind_params(self, params: cst.Parameters, owner: cst.CSTNode) -> None:
        every = [*params.posonly_params, *params.params, *params.kwonly_params]
        for extra in (params.star_arg, params.star_kwarg):
            if isinstance(extra, cst.Param):
                every.append(extra)
        for param in every:
            self.bind(param.name.value, "param", param.default, param)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.bind(node.name.value, "class", None, node)
        self.index.classes.append(node)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        raw = node.value
        if raw[0] in "'\"" and "\\" not in raw:
            # The common case without a prefix or escapes; evaluated_value runs
            # ast.literal_eval (a compile) per string.
            quotes = 3 if raw[:3] in ('"""', "'''") and len(raw) >= 6 else 1
            value: object = raw[quotes:-quotes]
        else:
            try:
                value = node.evaluated_value
            except Exception:  # malformed escapes: not a literal rules can use
                return
        self.index.strings.append((node, value))

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        self.index.fstrings.append(node)


def _element_values(target: Union[cst.Tuple, cst.List],
                    value: Optional[cst.BaseExpression]) -> Optional[list[cst.BaseExpression]]:
    """The value of each element of ``a, b = x, y`` (same length, no starred)."""
    if not isinstance(value, (cst.Tuple, cst.List)) or len(value.elements) != len(target.elements):
        return None
    if any(isinstance(e, cst.StarredElement) for e in (*target.elements, *value.elements)):
        return None
    return [element.value for element in value.elements]


_VISIT = {
    cst.Import: _IndexBuilder.visit_Import,
    cst.ImportFrom: _IndexBuilder.visit_ImportFrom,
    cst.Call: _IndexBuilder.visit_Call,
    cst.Assign: _IndexBuilder.visit_Assign,
    cst.AnnAssign: _IndexBuilder.visit_AnnAssign,
    cst.AugAssign: _IndexBuilder.visit_AugAssign,
    cst.NamedExpr: _IndexBuilder.visit_NamedExpr,
    cst.For: _IndexBuilder.visit_For,
    cst.While: _IndexBuilder.visit_While,
    cst.With: _IndexBuilder.visit_With,
    cst.If: _IndexBuilder.visit_If,
    cst.Continue: _IndexBuilder.visit_exit,
    cst.Break: _IndexBuilder.visit_exit,
    cst.Return: _IndexBuilder.visit_exit,
    cst.Raise: _IndexBuilder.visit_exit,
    cst.Assert: _IndexBuilder.visit_Assert,
    cst.CompFor: _IndexBuilder.visit_CompFor,
    cst.WithItem: _IndexBuilder.visit_WithItem,
    cst.ExceptHandler: _IndexBuilder.visit_ExceptHandler,
    cst.FunctionDef: _IndexBuilder.visit_FunctionDef,
    cst.Lambda: _IndexBuilder.visit_Lambda,
    cst.ClassDef: _IndexBuilder.visit_ClassDef,
    cst.SimpleString: _IndexBuilder.visit_SimpleString,
    cst.FormattedString: _IndexBuilder.visit_FormattedString,
}


def iter_literal_strings(index: SemanticIndex) -> Iterable[tuple[cst.SimpleString, str]]:
    for node, value in index.strings:
        if isinstance(value, str):
            yield node, value
