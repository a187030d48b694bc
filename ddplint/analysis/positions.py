"""Line and column of reported nodes, computed only where something was reported.

libcst's PositionProvider regenerates the code of the whole module to count
lines: on a 40,000-line file with one finding that cost twice the parse. Here
positions are computed per smallest statement that holds a finding (descending
through function, class and block bodies): the statement is regenerated alone
(inside a copy of the module that holds only it), and its real line and column
come from CPython's ``ast`` (about a tenth of a libcst parse), which numbers
statements the same way libcst does (a decorated ``def`` starts at ``def``;
``a; b`` is one libcst statement and two ast statements). A statement
regenerated alone loses its indentation, uniformly, so columns shift by the
statement's own column.
"""

from __future__ import annotations

import ast
from typing import Iterable, Optional, Sequence

import libcst as cst
from libcst.metadata import CodeRange, CodePosition, MetadataWrapper, PositionProvider

from ddplint.analysis.semantic import SemanticIndex


def locate(index: SemanticIndex, nodes: Iterable[cst.CSTNode]) -> dict[cst.CSTNode, CodeRange]:
    nodes = list(nodes)
    module = index.module
    tree = _python_ast(index.source)
    tops = _top_level_pairs(module, tree) if tree is not None else None
    if tops is None:
        return _whole_module_positions(module)
    by_statement: dict[int, tuple[cst.CSTNode, ast.stmt, list[cst.CSTNode]]] = {}
    for node in nodes:
        top = _top_level_statement(index, node)
        if top is None or id(top) not in tops:  # the module itself, or outside the body
            return _whole_module_positions(module)
        statement, twin = _innermost_statement(index, node, top, tops[id(top)])
        by_statement.setdefault(id(statement), (statement, twin, []))[2].append(node)
    source_lines = index.source.splitlines()
    located: dict[cst.CSTNode, CodeRange] = {}
    for statement, twin, members in by_statement.values():
        alone = module.with_changes(body=[statement], header=[], footer=[])
        positions = MetadataWrapper(alone, unsafe_skip_copy=True).resolve(PositionProvider)
        line_shift = twin.lineno - positions[statement].start.line
        regenerated = alone.code.splitlines()

        def real(position: CodePosition) -> CodePosition:
            # Regenerated alone, the statement loses its indentation, except inside
            # multi-line strings: compare the line with the file's to find the shift.
            line = position.line + line_shift
            mine = regenerated[position.line - 1] if 0 < position.line <= len(regenerated) else ""
            theirs = source_lines[line - 1] if 0 < line <= len(source_lines) else ""
            shift = len(theirs) - len(mine) if theirs.endswith(mine) else 0
            return CodePosition(line, position.column + shift)

        for node in members:
            where = positions.get(node)
            if where is not None:
                located[node] = CodeRange(real(where.start), real(where.end))
    return located


# Compound statements whose main body is descended into, with their ast twins.
_CONTAINERS = {
    cst.FunctionDef: (ast.FunctionDef, ast.AsyncFunctionDef),
    cst.ClassDef: (ast.ClassDef,),
    cst.If: (ast.If,),
    cst.For: (ast.For, ast.AsyncFor),
    cst.While: (ast.While,),
    cst.With: (ast.With, ast.AsyncWith),
    cst.Try: (ast.Try,),
}


def _innermost_statement(index: SemanticIndex, node: cst.CSTNode, statement: cst.CSTNode,
                         twin: ast.stmt) -> tuple[cst.CSTNode, ast.stmt]:
    """Descend from a top-level statement through the main bodies of functions,
    classes and blocks to the smallest statement holding ``node``, keeping the
    matching ast statement (whose line and column are known)."""
    chain = [node, *index.ancestors(node)]
    chain.reverse()  # module, top statement, ..., node
    position = chain.index(statement)
    while position + 2 < len(chain):
        block, child = chain[position + 1], chain[position + 2]
        twins = _CONTAINERS.get(type(statement))
        if twins is None or not isinstance(twin, twins) or block is not statement.body \
                or not isinstance(block, cst.IndentedBlock):
            break
        child_twin = _twin_in_body(block.body, twin.body, child)
        if child_twin is None:
            break
        statement, twin, position = child, child_twin, position + 2
    return statement, twin


def _twin_in_body(body: Sequence[cst.CSTNode], twins: list[ast.stmt], child: cst.CSTNode) -> Optional[ast.stmt]:
    cursor = 0
    for statement in body:
        if statement is child:
            return twins[cursor] if cursor < len(twins) else None
        cursor += len(statement.body) if isinstance(statement, cst.SimpleStatementLine) else 1
    return None


def _python_ast(source: str) -> Optional[ast.Module]:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _top_level_pairs(module: cst.Module, tree: ast.Module) -> Optional[dict[int, ast.stmt]]:
    """Each libcst top-level statement's first ast statement; None when the two
    parsers disagree about the file."""
    pairs = {}
    cursor = 0
    for statement in module.body:
        if cursor >= len(tree.body):
            return None
        pairs[id(statement)] = tree.body[cursor]
        cursor += len(statement.body) if isinstance(statement, cst.SimpleStatementLine) else 1
    return pairs if cursor == len(tree.body) else None


def _top_level_statement(index: SemanticIndex, node: cst.CSTNode) -> Optional[cst.CSTNode]:
    previous = node
    for ancestor in index.ancestors(node):
        if ancestor is index.module:
            return previous
        previous = ancestor
    return None


def _whole_module_positions(module: cst.Module):
    return MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
