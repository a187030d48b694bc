"""Reaching bindings: which bindings of a name may hold its value at a use.

Real training scripts rebind names on branches (``net = DDP(net)`` on one arm,
``net = net.cuda()`` on the other), in loops and in ``try`` blocks, so "the
textually last binding before the use" is often wrong. This module answers the
classic reaching-definitions question over one scope's statements, for one name
at a time (rules ask about few names; computing every name of every scope would
cost more than the parse):

- statements run in order; a binding kills the earlier bindings of its name;
- ``if``/``match`` branches are alternatives whose results merge;
- loop bodies may run zero or more times (``continue`` and ``break`` included),
  and ``while True:`` leaves only through ``break``;
- ``return``/``raise``/``continue``/``break`` end a path;
- a handler of a ``try`` may start from any state inside its body.

The result for each statement is the set of bindings that may reach it. Uses
inside a nested function see the bindings that reach the end of the scope that
binds the name (such a function usually runs after the module or the enclosing
function has set things up); comprehension variables reach only their
comprehension.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional

import libcst as cst

if TYPE_CHECKING:
    from ddplint.analysis.semantic import Binding, SemanticIndex

State = Optional[frozenset]  # ids of bindings; None: this point is not reached

_COMPOUND = (cst.If, cst.For, cst.While, cst.Try, cst.With, cst.FunctionDef, cst.ClassDef)
if hasattr(cst, "TryStar"):
    _COMPOUND += (cst.TryStar,)
if hasattr(cst, "Match"):
    _COMPOUND += (cst.Match,)


def _merge(*states: State) -> State:
    result: State = None
    for state in states:
        if state is None:
            continue
        result = state if result is None else result | state
    return result


class ScopeFlow:
    """Reaching bindings of one name in one scope (a module, function or lambda)."""

    def __init__(self, index: "SemanticIndex", scope: cst.CSTNode, bindings: list["Binding"]) -> None:
        self.index = index
        self.by_id = {id(b): b for b in bindings}
        self.gens: dict[int, list[int]] = {}
        self.entry: frozenset = frozenset()
        params = []
        for binding in bindings:
            if binding.kind == "param" or isinstance(binding.node, cst.Param):
                params.append(id(binding))
                continue
            anchor = self._anchor(binding.node)
            if anchor is not None:
                self.gens.setdefault(id(anchor), []).append(id(binding))
        self.entry = frozenset(params)
        self.before: dict[int, frozenset] = {}
        self._loops: list[list[State]] = []  # per enclosing loop: [continue state, break state]
        self._tries: list[list[State]] = []  # per enclosing try body: every state seen
        self.end = self._run(scope)

    # ------------------------------------------------------------------ answers
    def at(self, node: cst.CSTNode) -> Optional[list["Binding"]]:
        """Bindings that may reach ``node``; None when ``node`` is not inside a
        statement this flow saw (then the caller falls back to all bindings)."""
        for candidate in (node, *self.index.ancestors(node)):
            state = self.before.get(id(candidate))
            if state is not None:
                return self._bindings(state)
            if candidate is None or isinstance(candidate, (cst.FunctionDef, cst.Lambda)) and candidate is not node:
                break
        return None

    def at_end(self) -> list["Binding"]:
        return self._bindings(self.end or frozenset())

    def _bindings(self, state: Iterable[int]) -> list["Binding"]:
        return sorted((self.by_id[i] for i in state), key=lambda b: b.order)

    # ------------------------------------------------------------------ anchors
    def _anchor(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        """The statement (small statement, or compound header) where a binding
        made by ``node`` takes effect."""
        if isinstance(node, (cst.BaseSmallStatement, *_COMPOUND, cst.ExceptHandler)):
            return node
        if isinstance(node, cst.WithItem):
            return self.index.parent(node)
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, (cst.BaseSmallStatement, *_COMPOUND)):
                return ancestor
        return None

    def _gen(self, node: cst.CSTNode, state: State) -> State:
        made = self.gens.get(id(node))
        if not made or state is None:
            return state
        return frozenset(made)  # a binding kills every earlier binding of the name

    def _record(self, node: cst.CSTNode, state: State) -> None:
        if state is None:
            return
        previous = self.before.get(id(node))
        self.before[id(node)] = state if previous is None else previous | state
        for seen in self._tries:
            seen.append(state)

    # ------------------------------------------------------------------ statements
    def _run(self, scope: cst.CSTNode) -> State:
        if isinstance(scope, cst.Module):
            return self._block(scope.body, self.entry)
        if isinstance(scope, cst.FunctionDef):
            return self._suite(scope.body, self.entry)
        return self.entry  # a lambda: its parameters are all it binds

    def _suite(self, suite: Optional[cst.CSTNode], state: State) -> State:
        if suite is None:
            return state
        if isinstance(suite, cst.IndentedBlock):
            return self._block(suite.body, state)
        if isinstance(suite, cst.SimpleStatementSuite):
            return self._small_statements(suite, suite.body, state)
        return state

    def _block(self, statements: Iterable[cst.CSTNode], state: State) -> State:
        for statement in statements:
            state = self._statement(statement, state)
        return state

    def _statement(self, node: cst.CSTNode, state: State) -> State:
        if isinstance(node, cst.SimpleStatementLine):
            return self._small_statements(node, node.body, state)
        self._record(node, state)
        handler = _STATEMENTS.get(type(node))
        if handler is None:
            return state
        return handler(self, node, state)

    def _small_statements(self, line: cst.CSTNode, smalls: Iterable[cst.CSTNode], state: State) -> State:
        self._record(line, state)
        for small in smalls:
            self._record(small, state)
            state = self._gen(small, state)
            if isinstance(small, (cst.Return, cst.Raise)):
                state = None
            elif isinstance(small, cst.Continue) and self._loops:
                self._loops[-1][0] = _merge(self._loops[-1][0], state)
                state = None
            elif isinstance(small, cst.Break) and self._loops:
                self._loops[-1][1] = _merge(self._loops[-1][1], state)
                state = None
        return state

    def _if(self, node: cst.If, state: State) -> State:
        state = self._gen(node, state)  # ``if (m := ...):``
        body = self._suite(node.body, state)
        orelse = node.orelse
        if orelse is None:
            return _merge(body, state)
        if isinstance(orelse, cst.If):
            return _merge(body, self._statement(orelse, state))
        return _merge(body, self._suite(orelse.body, state))

    def _loop(self, node: cst.CSTNode, state: State) -> State:
        entry = state
        head = entry
        breaks: State = None
        for _ in range(4):  # sets only grow; a few rounds reach the fixed point
            self._loops.append([None, None])
            start = self._gen(node, head)  # the loop target (and a walrus in the test)
            end = self._suite(node.body, start)
            continues, breaks_now = self._loops.pop()
            breaks = _merge(breaks, breaks_now)
            new_head = _merge(entry, end, continues)
            if new_head == head:
                break
            head = new_head
        if isinstance(node, cst.While):
            self.before[id(node)] = head or frozenset()  # the test runs at the head
        normal_exit = None if _is_while_true(node) else head
        if node.orelse is not None:
            normal_exit = self._suite(node.orelse.body, normal_exit)
        return _merge(normal_exit, breaks)

    def _try(self, node: cst.CSTNode, state: State) -> State:
        seen: list[State] = []
        self._tries.append(seen)
        body = self._suite(node.body, state)
        self._tries.pop()
        in_handler = _merge(state, body, *seen)
        outs = [self._suite(node.orelse.body, body) if node.orelse is not None else body]
        for handler in node.handlers:
            self._record(handler, in_handler)
            outs.append(self._suite(handler.body, self._gen(handler, in_handler)))
        after = _merge(*outs)
        if node.finalbody is None:
            return after
        # The finally block runs on every path, the exceptional ones too.
        self._suite(node.finalbody.body, _merge(after, in_handler))
        return self._suite(node.finalbody.body, after) if after is not None else None

    def _with(self, node: cst.With, state: State) -> State:
        return self._suite(node.body, self._gen(node, state))

    def _definition(self, node: cst.CSTNode, state: State) -> State:
        if isinstance(node, cst.ClassDef):
            # Class bodies run once, in place; the index binds their names here.
            state = self._suite(node.body, state)
        return self._gen(node, state)

    def _match(self, node: cst.CSTNode, state: State) -> State:
        outs = [state]
        for case in node.cases:
            outs.append(self._suite(case.body, state))
        return _merge(*outs)


def _is_while_true(node: cst.CSTNode) -> bool:
    if not isinstance(node, cst.While):
        return False
    test = node.test
    return (isinstance(test, cst.Name) and test.value == "True") or (
        isinstance(test, cst.Integer) and test.value not in ("0",))


_STATEMENTS = {
    cst.If: ScopeFlow._if,
    cst.For: ScopeFlow._loop,
    cst.While: ScopeFlow._loop,
    cst.Try: ScopeFlow._try,
    cst.With: ScopeFlow._with,
    cst.FunctionDef: ScopeFlow._definition,
    cst.ClassDef: ScopeFlow._definition,
}
if hasattr(cst, "TryStar"):
    _STATEMENTS[cst.TryStar] = ScopeFlow._try
if hasattr(cst, "Match"):
    _STATEMENTS[cst.Match] = ScopeFlow._match
