"""Faster drop-ins for ``ast.walk`` and ``ast.iter_child_nodes``.

The screen walks every module of the project several times; ``ast.walk``
spends most of its time in ``ast.iter_fields`` generators and on nodes no
one asks about (the ``Load``/``Store`` contexts and operator singletons).
These yield the same nodes in the same order (breadth first), minus those
leaf singletons.
"""

from __future__ import annotations

import ast
from bisect import bisect_left
from collections import deque
from typing import Iterator, Optional

_LEAVES = (ast.expr_context, ast.boolop, ast.operator, ast.unaryop, ast.cmpop)
_FIELDS: dict[type, tuple[str, ...]] = {}
# Fields that never hold a node worth visiting: names, flags, operator singletons
# and import aliases (the ``Subtrees`` index skips them without a type test).
_SCALAR_FIELDS = frozenset({"name", "names", "type_comment", "type_ignores", "ops", "op", "ctx", "simple", "module",
                            "level", "conversion", "kind", "n", "s", "attr", "id", "is_async", "arg", "asname",
                            "rest", "kwd_attrs", "tag", "lineno"})
_NODE_FIELDS: dict[type, tuple[str, ...]] = {}


def _node_fields(kind: type) -> tuple[str, ...]:
    """The fields of ``kind`` that hold nodes or lists of nodes, last first."""
    fields = tuple(name for name in reversed(kind._fields) if name not in _SCALAR_FIELDS
                   and not (name == "value" and kind in (ast.Constant, ast.MatchSingleton)))
    _NODE_FIELDS[kind] = fields
    return fields


def _fields(kind: type) -> tuple[str, ...]:
    fields = _FIELDS.get(kind)
    if fields is None:
        fields = _FIELDS[kind] = tuple(name for name in kind._fields if name not in ("ctx", "op"))
    return fields


def iter_child_nodes(node: ast.AST) -> Iterator[ast.AST]:
    for name in _FIELDS.get(type(node)) or _fields(type(node)):
        value = getattr(node, name, None)
        if type(value) is list:
            for item in value:
                if isinstance(item, ast.AST) and not isinstance(item, _LEAVES):
                    yield item
        elif isinstance(value, ast.AST) and not isinstance(value, _LEAVES):
            yield value


def walk(node: ast.AST) -> Iterator[ast.AST]:
    todo = deque([node])
    popleft, append = todo.popleft, todo.append
    fields_of = _FIELDS
    while todo:
        node = popleft()
        fields = fields_of.get(type(node)) or _fields(type(node))
        for name in fields:
            value = getattr(node, name, None)
            if type(value) is list:
                for item in value:
                    if isinstance(item, ast.AST) and not isinstance(item, _LEAVES):
                        append(item)
            elif isinstance(value, ast.AST) and not isinstance(value, _LEAVES):
                append(value)
        yield node


class Subtrees:
    """Every node of one tree in depth-first preorder, so that the nodes under
    any node are one slice of a list: the facts extractor asks for the calls or
    assignments under a function, a class or an expression many times over
    (nested scopes), and a slice costs nothing where a re-walk costs a
    generator step per node. Built by one walk; holds the tree only while the
    module is summarised."""

    KINDS = (ast.Call, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.FunctionDef, ast.AsyncFunctionDef)

    __slots__ = ("order", "ends", "position", "kinds")

    def __init__(self, tree: ast.AST) -> None:
        order: list[ast.AST] = []
        ends: list[int] = []
        kinds: dict[type, tuple[list[int], list[ast.AST]]] = {kind: ([], []) for kind in self.KINDS}
        node_fields = _NODE_FIELDS
        stack: list = [tree]
        pop, push, append, end = stack.pop, stack.append, order.append, ends.append
        while stack:
            node = pop()
            if type(node) is int:  # the end of the subtree that starts at this index
                ends[node] = len(order)
                continue
            index = len(order)
            append(node)
            end(0)
            kind = type(node)
            slot = kinds.get(kind)
            if slot is not None:
                slot[0].append(index)
                slot[1].append(node)
            push(index)
            fields = node_fields.get(kind)
            if fields is None:
                fields = _node_fields(kind)
            for name in fields:  # last field first: the stack pops them in source order
                value = getattr(node, name, None)
                if value is None:
                    continue
                if type(value) is list:
                    for item in reversed(value):
                        if item is not None:  # ``{**d}``: a None key
                            push(item)
                else:
                    push(value)
        self.order, self.ends, self.kinds = order, ends, kinds
        self.position = {id(node): index for index, node in enumerate(order)}

    def under(self, node: ast.AST) -> list[ast.AST]:
        """``node`` and every node below it (what ``walk`` yields, depth first)."""
        start = self.position.get(id(node))
        if start is None:  # not of this tree (a node built on the fly)
            return list(walk(node))
        return self.order[start:self.ends[start]]

    def of_kind(self, node: ast.AST, kind: type) -> list:
        """The nodes of ``kind`` (one of KINDS) at or below ``node``, in source order."""
        start = self.position.get(id(node))
        if start is None:
            return [child for child in walk(node) if type(child) is kind]
        positions, nodes = self.kinds[kind]
        return nodes[bisect_left(positions, start):bisect_left(positions, self.ends[start])]

    def contains(self, owner: ast.AST, node: ast.AST) -> bool:
        """Is ``node`` ``owner`` or below it?"""
        start, found = self.position.get(id(owner)), self.position.get(id(node))
        if start is None or found is None:
            return any(child is node for child in walk(owner))
        return start <= found < self.ends[start]


def dotted(expr: ast.AST) -> Optional[str]:
    """``a.b.c`` for a chain of names and attributes, else None (the ``ast``
    twin of ``ddplint.analysis.semantic.dotted_name``)."""
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name):
        parts.append(expr.id)
        return ".".join(reversed(parts))
    return None
