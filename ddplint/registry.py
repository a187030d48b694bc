"""Discovers the rules shipped in ``ddplint.rules`` (the top-level rules/ folder)."""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from ddplint.rule import Rule


@lru_cache(maxsize=1)
def all_rules() -> tuple[type[Rule], ...]:
    """Every rule class, sorted by code."""
    import ddplint.rules as package

    found: dict[str, type[Rule]] = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, Rule) and value is not Rule
                    and value.__module__ == module.__name__ and hasattr(value, "code")):
                if value.code in found:
                    raise RuntimeError(f"duplicate rule code {value.code} in {module.__name__}")
                found[value.code] = value
    return tuple(found[code] for code in sorted(found))


def rules_by_code() -> dict[str, type[Rule]]:
    return {rule.code: rule for rule in all_rules()}


def get_rule(code: str) -> type[Rule] | None:
    code = code.upper()
    by_code = rules_by_code()
    if code in by_code:
        return by_code[code]
    for rule in all_rules():  # also accept the rule's name: `ddplint rule hardcoded-device`
        if rule.name == code.lower():
            return rule
    return None
