"""What a rule is: identity, documentation, examples and a check over the index.

A rule module in ``rules/`` defines one ``Rule`` subclass. Its module docstring is
the user documentation (Ruff's headings: What it does / Why is this bad? /
Example / Use instead / References). Its ``valid`` and ``invalid`` examples are
run by the test suite (tests/test_rule_examples.py), so a new rule needs no test
boilerplate: add examples and they are checked.
"""

from __future__ import annotations

import sys
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Iterable, Optional

if TYPE_CHECKING:
    import libcst as cst

if TYPE_CHECKING:
    from ddplint.analysis.semantic import SemanticIndex
    from ddplint.fixes import NodeFix

SEVERITIES = ("error", "warning", "info")
SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


@dataclass(frozen=True)
class Valid:
    """Code the rule must NOT flag (a near-miss drawn from real training code)."""

    code: str
    filename: str = "train.py"

    @property
    def source(self) -> str:
        return textwrap.dedent(self.code).lstrip("\n")


@dataclass(frozen=True)
class Invalid:
    """Code the rule must flag, at 1-based ``line`` and ``column``. ``fixed`` is the
    source after applying the finding's fix (safe or unsafe); None when the rule
    offers no fix for it. The example tests check both ways."""

    code: str
    line: int
    column: int
    severity: Optional[str] = None
    filename: str = "train.py"
    fixed: Optional[str] = None

    @property
    def source(self) -> str:
        return textwrap.dedent(self.code).lstrip("\n")

    @property
    def fixed_source(self) -> Optional[str]:
        return None if self.fixed is None else textwrap.dedent(self.fixed).lstrip("\n")


@dataclass
class Report:
    """A finding before positions are resolved: a node plus what to say about it."""

    code: str
    node: cst.CSTNode
    message: str
    severity: str
    fix: Optional["NodeFix"] = None  # ddplint.fixes: edits in CST terms, positioned by the engine


class Rule:
    """Base class of every rule in ``rules/``."""

    code: ClassVar[str]
    name: ClassVar[str]
    severity: ClassVar[str]
    message: ClassVar[str]
    # Text that must appear in a file for the rule to possibly fire; a file that
    # contains none of the selected rules' triggers is never parsed.
    triggers: ClassVar[tuple[str, ...]] = ()
    # (ctx) rules fire only in modules that take part in distributed training.
    needs_ddp_context: ClassVar[bool] = False
    valid: ClassVar[list[Valid]] = []
    invalid: ClassVar[list[Invalid]] = []
    # Other rules the examples are linted with (DDP100 judges other rules' suppressions).
    example_selection: ClassVar[tuple[str, ...]] = ()

    def check(self, index: "SemanticIndex") -> Iterable[Report]:
        raise NotImplementedError

    def report(self, node: cst.CSTNode, message: Optional[str] = None,
               severity: Optional[str] = None, fix: Optional["NodeFix"] = None) -> Report:
        return Report(self.code, node, message or self.message, severity or self.severity, fix)

    @classmethod
    def documentation(cls) -> str:
        module = sys.modules[cls.__module__]
        return textwrap.dedent(module.__doc__ or "").strip()

    @classmethod
    def summary(cls) -> str:
        """The first paragraph under "What it does", as one line."""
        doc = cls.documentation()
        _, _, rest = doc.partition("## What it does")
        paragraph = rest.strip().split("\n\n")[0]
        return " ".join(paragraph.split())

    @classmethod
    def url(cls) -> str:
        """Where the rule's documentation lives: its own module (docs and examples
        are in that file), as a file URI that works offline in any editor."""
        from pathlib import Path

        return Path(sys.modules[cls.__module__].__file__).resolve().as_uri()
