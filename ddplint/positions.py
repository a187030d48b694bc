"""Line and column of reported nodes, computed only where something was reported.

libcst's PositionProvider regenerates the code of the whole module to count
lines: on a 40,000-line file with one finding that cost twice the parse. Here
positions are computed per top-level statement that holds a finding: the
statement is regenerated alone (inside a copy of the module that holds only
it), and its real first line comes from CPython's ``ast`` (about a tenth of a
libcst parse), which numbers top-level statements the same way libcst does
(a decorated ``def`` starts at ``def``; ``a; b`` is one libcst statement and two
ast statements). Top-level statements start at column 0, so columns inside the
statement are the same in the copy and in the file.
"""

from __future__ import annotations

import ast
from typing import Iterable, Optional

import libcst as cst
from libcst.metadata import CodeRange, CodePosition, MetadataWrapper, PositionProvider

from ddplint.semantic import SemanticIndex


def locate(index: SemanticIndex, nodes: Iterable[cst.CSTNode]) -> dict[cst.CSTNode, CodeRange]:
    nodes = list(nodes)
    module = index.module
    starts = _top_level_start_lines(module, index.source)
    if starts is None:
        return _whole_module_positions(module)
    position_of_statement = {id(statement): i for i, statement in enumerate(module.body)}
    by_statement: dict[int, list[cst.CSTNode]] = {}
    located: dict[cst.CSTNode, CodeRange] = {}
    for node in nodes:
        top = _top_level_statement(index, node)
        if top is None:  # the module itself, or a node outside the body
            return _whole_module_positions(module)
        by_statement.setdefault(position_of_statement[id(top)], []).append(node)
    for number, members in by_statement.items():
        statement = module.body[number]
        alone = module.with_changes(body=[statement], header=[], footer=[])
        positions = MetadataWrapper(alone, unsafe_skip_copy=True).resolve(PositionProvider)
        shift = starts[number] - positions[statement].start.line
        for node in members:
            where = positions.get(node)
            if where is not None:
                located[node] = CodeRange(CodePosition(where.start.line + shift, where.start.column),
                                          CodePosition(where.end.line + shift, where.end.column))
    return located


def _top_level_statement(index: SemanticIndex, node: cst.CSTNode) -> Optional[cst.CSTNode]:
    previous = node
    for ancestor in index.ancestors(node):
        if ancestor is index.module:
            return previous
        previous = ancestor
    return None


def _top_level_start_lines(module: cst.Module, source: str) -> Optional[list[int]]:
    """The first line of each libcst top-level statement, from CPython's parser;
    None when the two parsers disagree about the file."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    starts = []
    cursor = 0
    for statement in module.body:
        if cursor >= len(tree.body):
            return None
        starts.append(tree.body[cursor].lineno)
        cursor += len(statement.body) if isinstance(statement, cst.SimpleStatementLine) else 1
    return starts if cursor == len(tree.body) else None


def _whole_module_positions(module: cst.Module):
    return MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
