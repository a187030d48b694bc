"""Faster drop-ins for ``ast.walk`` and ``ast.iter_child_nodes``.

The screen walks every module of the project several times; ``ast.walk``
spends most of its time in ``ast.iter_fields`` generators and on nodes no
one asks about (the ``Load``/``Store`` contexts and operator singletons).
These yield the same nodes in the same order (breadth first), minus those
leaf singletons.
"""

from __future__ import annotations

import ast
from collections import deque
from typing import Iterator, Optional

_LEAVES = (ast.expr_context, ast.boolop, ast.operator, ast.unaryop, ast.cmpop)
_FIELDS: dict[type, tuple[str, ...]] = {}


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
