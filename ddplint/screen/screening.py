"""Screen verdicts: which rules can possibly report on a module.

``screen_tree`` runs every rule's screen (``ddplint.screen.manifest``) on the
module's sketch, in the same ``ast`` pass that extracts the project facts; the
verdict is small and kept with the facts. ``resolve`` finishes it once the
project is joined: screens that asked the project (a call of a project rank
predicate, save or load helper, a function given DDP models) and the
project's widening of the DDP context.
"""

from __future__ import annotations

import ast
from typing import NamedTuple, Optional


class Verdict(NamedTuple):
    passed: str  # codes whose screen passed on the module alone, space-separated (small to keep)
    # (code, project facts that must all hold; "a|b": either): Project.screen_facts
    conditional: tuple[tuple[str, tuple[str, ...]], ...]
    context: bool  # the module's own DDP context (SemanticIndex.in_ddp_context without the project)


def screen_tree(tree: ast.Module, source: str, nodes: Optional[list] = None, path: str = "") -> Optional[Verdict]:
    """None when the judge must decide alone (an attribute chain too long for
    it: ``ddplint.budget``). ``nodes``: the tree's nodes, parents first, when
    the caller has them (``Subtrees.order``)."""
    from ddplint import budget
    from ddplint.screen.manifest import rule_infos
    from ddplint.screen.sketch import sketch

    if budget.crude_longest_chain(source) > budget.MAX_CHAIN_LINKS \
            and budget.longest_chain(tree, nodes)[0] > budget.MAX_CHAIN_LINKS:
        return None
    found = sketch(tree, source, path)
    passed, conditional = [], []
    for info in rule_infos():
        if info.code in ("DDP000", "DDP100"):
            continue  # the engine's own: reported when parsing fails / after the other rules
        try:
            verdict = info.screen(found)
        except Exception:  # a broken screen must not hide findings: judge
            verdict = True
        if verdict is True or (verdict and not isinstance(verdict, tuple)):
            passed.append(info.code)
        elif isinstance(verdict, tuple) and verdict:
            conditional.append((info.code, verdict))
    return Verdict(" ".join(passed), tuple(conditional), bool(found.context))


def screen_source(source: str, path: str = "") -> Optional[Verdict]:
    """Parse and screen; None when CPython's parser rejects the text (the judge
    then reports the syntax error as it always did)."""
    if "\0" in source:
        return None
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    try:
        return screen_tree(tree, source, path=path)
    except RecursionError:
        return None


def resolve(verdict: Verdict, project, module: str) -> tuple[frozenset[str], bool]:
    """(codes to judge, DDP context) once the project is known. Without a
    project a conditional screen passes (the judge then decides)."""
    passed = set(verdict.passed.split())
    holds = project.screen_facts(module) if project is not None else None
    for code, kinds in verdict.conditional:
        # Every item must hold; an item "a|b" holds when either does.
        if holds is None or all(any(kind in holds for kind in item.split("|")) for item in kinds):
            passed.add(code)
    context = verdict.context or (project is not None and project.module_in_ddp_context(module))
    return frozenset(passed), context
