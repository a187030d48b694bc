"""What the screen needs to know of every rule, without importing the rules.

A rule module imports libcst and the judge's analysis modules (hundreds of
milliseconds); a run whose screens all fail must not pay for that. So the
screen reads each rule file's text for its identity (``code, name, severity``),
its ``triggers``, ``needs_ddp_context``, ``uses_project`` and its ``screen``
method, which is compiled on its own (it may use only its ``sketch`` argument,
builtins, ``re``, ``ddplint.names`` and ``COLLECTIVES`` / ``COLLECTIVE_STATE_DICT``
of ``ddplint.screen.facts``). tests/test_screen.py checks that this
manifest agrees with the imported rule classes.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Optional

_IDENTITY = re.compile(r"^    code, name, severity = (.+)$", re.MULTILINE)
_TRIGGERS = re.compile(r"^    triggers = (.+)$", re.MULTILINE)
_FLAG = r"^    {} = (True|False)\s*$"
_SCREEN = re.compile(r"^    def screen\(self, sketch\)[^\n]*:\n", re.MULTILINE)


@dataclass(frozen=True)
class RuleInfo:
    code: str
    name: str
    severity: str
    triggers: tuple[str, ...]
    needs_ddp_context: bool
    uses_project: bool
    module: str  # ddplint.rules.<module>
    screen_source: str  # "" when the rule has no screen (it always passes)
    path: str = ""  # the rule's file

    def url(self) -> str:
        """``Rule.url`` without importing the rule: its file as a URI."""
        return Path(self.path).resolve().as_uri()

    def screen(self, sketch):
        """The rule's verdict on a module's sketch: True, False, or the tuple of
        project facts that must hold (``ddplint.screen.screening.resolve``). A
        tuple is passed on as is: made a bool, every conditional screen passed."""
        function = _compiled(self.code, self.screen_source)
        if function is None:
            return True
        verdict = function(None, sketch)
        return verdict if isinstance(verdict, tuple) else bool(verdict)


def rules_folders() -> list[Path]:
    """Every folder of the ``ddplint.rules`` package (a plugin may append one
    to its ``__path__``, as ``ddplint.registry.all_rules`` honours too)."""
    import ddplint.rules as package  # rules/__init__.py: a docstring, nothing else

    return [Path(folder) for folder in package.__path__]


@lru_cache(maxsize=1)
def rule_infos() -> tuple[RuleInfo, ...]:
    """Every rule, sorted by code (as ``ddplint.registry.all_rules``)."""
    found: dict[str, RuleInfo] = {}
    for path in sorted(path for folder in rules_folders() for path in folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        info = _read(path)
        if info is not None:
            found[info.code] = info
    return tuple(found[code] for code in sorted(found))


def infos_by_code() -> dict[str, RuleInfo]:
    return {info.code: info for info in rule_infos()}


@lru_cache(maxsize=1)
def screens_digest() -> str:
    """Changes whenever a screen changes (part of the facts cache key)."""
    import hashlib

    text = "\0".join(f"{i.code}:{i.needs_ddp_context}:{i.screen_source}" for i in rule_infos())
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _read(path: Path) -> Optional[RuleInfo]:
    text = path.read_text(encoding="utf-8")
    identity = _IDENTITY.search(text)
    if identity is None:
        return None
    code, name, severity = ast.literal_eval(identity.group(1))
    triggers = _TRIGGERS.search(text)
    return RuleInfo(code, name, severity, tuple(ast.literal_eval(triggers.group(1))) if triggers else (),
                    _flag(text, "needs_ddp_context"), _flag(text, "uses_project"),
                    f"ddplint.rules.{path.stem}", _screen_source(text), str(path))


def _flag(text: str, name: str) -> bool:
    found = re.search(_FLAG.format(name), text, re.MULTILINE)
    return found is not None and found.group(1) == "True"


def _screen_source(text: str) -> str:
    start = _SCREEN.search(text)
    if start is None:
        return ""
    lines = [start.group(0).rstrip("\n")]
    for line in text[start.end():].split("\n"):
        if line.strip() and not line.startswith("        "):
            break
        lines.append(line)
    return textwrap.dedent("\n".join(lines).rstrip() + "\n")


_COMPILED: dict[str, Optional[Callable]] = {}


def _compiled(code: str, source: str) -> Optional[Callable]:
    if code not in _COMPILED:
        if not source:
            _COMPILED[code] = None
        else:
            from ddplint import names
            from ddplint.screen.facts import COLLECTIVE_STATE_DICT, COLLECTIVES

            namespace: dict = {"re": re, "names": names, "COLLECTIVES": COLLECTIVES,
                               "COLLECTIVE_STATE_DICT": COLLECTIVE_STATE_DICT}
            exec(compile(source, f"<screen of {code}>", "exec"), namespace)
            _COMPILED[code] = namespace["screen"]
    return _COMPILED[code]
