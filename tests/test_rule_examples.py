"""Every rule's VALID and INVALID examples, generated from the rule modules.

Adding a rule (or an example) needs no test code: this file finds them.
"""

import ast
from pathlib import Path

import pytest

from ddplint.config import Settings
from ddplint.engine import Linter
from ddplint.fixes import APPLICABILITIES, apply_edits
from ddplint.registry import all_rules


def _cases(kind):
    for rule in all_rules():
        for number, example in enumerate(getattr(rule, kind)):
            yield pytest.param(rule, example, id=f"{rule.code}-{kind}-{number}")


def _lint(rule, example, source=None):
    linter = Linter(Settings(select=(rule.code, *rule.example_selection), root=Path.cwd()))
    return linter.lint_source(example.source if source is None else source, example.filename)


@pytest.mark.parametrize("rule,example", list(_cases("valid")))
def test_valid_example_is_not_flagged(rule, example):
    result = _lint(rule, example)
    found = [(d.line, d.column, d.message) for d in result.diagnostics]
    assert found == [], f"{rule.code} flagged a VALID example:\n{example.source}"


@pytest.mark.parametrize("rule,example", list(_cases("invalid")))
def test_invalid_example_is_flagged_at_its_position(rule, example):
    result = _lint(rule, example)
    found = [(d.code, d.line, d.column) for d in result.diagnostics]
    assert found == [(rule.code, example.line, example.column)], example.source
    if example.severity is not None:
        assert result.diagnostics[0].severity == example.severity


@pytest.mark.parametrize("rule,example", list(_cases("invalid")))
def test_invalid_example_fix_gives_its_fixed_source(rule, example):
    """An example with ``fixed`` must get a fix (safe or unsafe) whose edits turn
    the source into exactly that text, which parses and no longer has the
    finding; an example without ``fixed`` must get no fix."""
    result = _lint(rule, example)
    diagnostic = result.diagnostics[0]
    if example.fixed_source is None:
        assert diagnostic.fix is None, f"{rule.code} offers a fix; give the example its fixed source"
        return
    assert diagnostic.fix is not None, f"{rule.code} offers no fix for:\n{example.source}"
    assert diagnostic.fix.applicability in APPLICABILITIES and diagnostic.fix.description
    fixed = apply_edits(example.source, diagnostic.fix.edits)
    assert fixed == example.fixed_source
    ast.parse(fixed)
    again = _lint(rule, example, fixed)
    assert [d for d in again.diagnostics if d.code == rule.code] == []


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.code)
def test_rule_is_documented_and_exemplified(rule):
    doc = rule.documentation()
    for heading in ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## References"):
        assert heading in doc, f"{rule.code} documentation lacks {heading!r}"
    assert rule.severity in ("error", "warning", "info")
    assert len(rule.valid) >= 6 and len(rule.invalid) >= 6, rule.code
    assert rule.name == rule.name.lower() and " " not in rule.name
