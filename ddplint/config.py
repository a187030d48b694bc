"""Configuration: ``[tool.ddplint]`` in pyproject.toml or ``.ddplint.yaml``.

Files are searched from the first linted path (or the working directory) upwards;
the first folder holding a ``.ddplint.yaml``/``.ddplint.yml`` or a pyproject.toml
with a ``[tool.ddplint]`` table wins (the YAML file first within one folder).
CLI flags override what the file says. Unknown keys and unknown rule ids are
errors that name the offending key.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Optional

from ddplint.budget import DEFAULT_MAX_FILE_SIZE, SizeError, parse_size
from ddplint.rule import SEVERITIES

DEFAULT_EXCLUDE = (
    ".git", ".hg", ".svn", ".venv", "venv", "build", "dist", "__pycache__",
    "node_modules", ".tox", ".nox", ".mypy_cache", ".pytest_cache", ".ruff_cache",
    ".ddplint_cache", ".eggs", "*.egg-info", "site-packages",
)
DEFAULT_INCLUDE = ("*.py", "*.ipynb")
CONFIG_KEYS = (
    "select", "ignore", "extend-select", "per-file-ignores", "exclude", "extend-exclude",
    "include", "extend-include", "severity", "fail-on", "max-file-size",
)
YAML_NAMES = (".ddplint.yaml", ".ddplint.yml")


class ConfigError(Exception):
    """A problem with configuration or selection; the CLI prints it and exits 2."""


@dataclass(frozen=True)
class Settings:
    select: tuple[str, ...] = ("ALL",)
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()
    include: tuple[str, ...] = DEFAULT_INCLUDE
    extend_include: tuple[str, ...] = ()
    notebooks: bool = True  # --no-notebooks: no .ipynb file is linted
    severity: tuple[tuple[str, str], ...] = ()
    fail_on: str = "info"
    max_file_size: int = DEFAULT_MAX_FILE_SIZE  # bytes; 0: no limit (ddplint.budget)
    root: Path = field(default_factory=Path.cwd)
    config_path: Optional[Path] = None

    # ------------------------------------------------------------------ rules
    def selected_codes(self) -> frozenset[str]:
        """Codes chosen by select + extend-select minus ignore (validated)."""
        chosen = _expand(self.select, "select") | _expand(self.extend_select, "extend-select")
        return frozenset(chosen - _expand(self.ignore, "ignore"))

    def ignored_for(self, relative_path: str) -> frozenset[str]:
        ignored: set[str] = set()
        for pattern, selectors in self.per_file_ignores:
            if path_matches(relative_path, pattern):
                ignored |= _expand(selectors, f"per-file-ignores.{pattern}")
        return frozenset(ignored)

    def severity_of(self, code: str, default: str) -> str:
        for selector, level in self.severity:
            if code in _expand((selector,), f"severity.{selector}"):
                return level
        return default

    def includes(self, relative_path: str) -> bool:
        """Whether discovery lints this file found below a folder: a pattern with a
        slash matches the relative path, one without matches the file name."""
        relative_path = relative_path.replace("\\", "/")
        if not self.notebooks and relative_path.lower().endswith(".ipynb"):
            return False
        name = relative_path.rsplit("/", 1)[-1]
        return any(fnmatch.fnmatch(relative_path if "/" in pattern else name, pattern)
                   for pattern in self.include + self.extend_include)

    def all_excludes(self) -> tuple[str, ...]:
        return self.exclude + self.extend_exclude

    def fingerprint(self) -> str:
        """A stable text of everything that changes results (for the cache key)."""
        return repr((sorted(self.selected_codes()), self.per_file_ignores, self.severity, self.max_file_size))

    def validate(self) -> None:
        self.selected_codes()
        for pattern, selectors in self.per_file_ignores:
            _expand(selectors, f"per-file-ignores.{pattern}")
        for selector, _ in self.severity:
            _expand((selector,), f"severity.{selector}")


def path_matches(relative_path: str, pattern: str) -> bool:
    """Glob match against the relative path, or against any trailing part of it
    when the pattern has no slash (``tests`` matches ``a/tests/x.py``'s folder)."""
    path = normalised_path(relative_path)
    return prepared_path_matches(path, path.split("/"), pattern)


def normalised_path(relative_path: str) -> str:
    """The form ``prepared_path_matches`` expects: slashes, the platform's case."""
    return os.path.normcase(relative_path.replace("\\", "/"))


def prepared_path_matches(path: str, parts: list[str], pattern: str) -> bool:
    """``path_matches`` for a path already normalised and split (discovery asks
    every exclude pattern about the same path)."""
    whole, part_or_below = compiled_pattern(pattern)
    if whole(path):
        return True
    if part_or_below is None:
        return any(whole(part) for part in parts)
    return part_or_below(path) is not None


@functools.lru_cache(maxsize=256)
def compiled_pattern(pattern: str):
    """(match of the whole path, match of the pattern's folder and below; None for
    a pattern without a slash), as ``fnmatch.fnmatch`` matches (compiled once:
    discovery asks every pattern about every path of a large project)."""
    pattern = os.path.normcase(pattern.rstrip("/"))
    whole = re.compile(fnmatch.translate(pattern)).match
    below = None if "/" not in pattern else re.compile(fnmatch.translate(pattern + "/*")).match
    return whole, below


def _expand(selectors: Iterable[str], where: str) -> set[str]:
    from ddplint.screen.manifest import rule_infos  # the rule modules (and libcst) stay unloaded

    codes = [rule.code for rule in rule_infos()]
    chosen: set[str] = set()
    for selector in selectors:
        selector = selector.strip()
        if not selector:
            continue
        if selector.upper() == "ALL":
            chosen.update(codes)
            continue
        by_name = [rule.code for rule in rule_infos() if rule.name == selector]
        matched = by_name or [code for code in codes if code.startswith(selector.upper())]
        if not matched:
            raise ConfigError(f"unknown rule id or prefix '{selector}' in {where}")
        chosen.update(matched)
    return chosen


# ---------------------------------------------------------------------- files
def find_config(start: Path) -> Optional[Path]:
    start = start.resolve()
    folder = start if start.is_dir() else start.parent
    for candidate in (folder, *folder.parents):
        for name in YAML_NAMES:
            if (candidate / name).is_file():
                return candidate / name
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file() and _pyproject_table(pyproject) is not None:
            return pyproject
    return None


def _pyproject_table(path: Path) -> Optional[dict]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on older Pythons only
        import tomli as tomllib
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: invalid TOML: {error}") from None
    tool = data.get("tool", {})
    table = tool.get("ddplint") if isinstance(tool, dict) else None
    if table is not None and not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.ddplint] must be a table")
    return table


def _yaml_table(path: Path) -> dict:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read: {error}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: invalid YAML{_yaml_problem(error)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of ddplint settings")
    return data


def _yaml_problem(error) -> str:
    """' at line 3, column 7: expected ...' from a YAML error, on one line."""
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(error, "problem", None) or (str(error).splitlines() or ["cannot parse"])[0]
    return f"{where}: {' '.join(str(problem).split())}"


def load_settings(config_path: Optional[Path] = None, start: Optional[Path] = None,
                  isolated: bool = False) -> Settings:
    """Settings from an explicit file, or the nearest config above ``start``."""
    if isolated:
        return Settings(root=Path.cwd())
    if config_path is not None:
        if not config_path.is_file():
            raise ConfigError(f"config file not found: {config_path}")
    else:
        config_path = find_config(start or Path.cwd())
    if config_path is None:
        return Settings(root=Path.cwd())
    if config_path.name == "pyproject.toml":
        table = _pyproject_table(config_path) or {}
        where = f"{config_path} [tool.ddplint]"
    else:
        table = _yaml_table(config_path)
        where = str(config_path)
    settings = settings_from_table(table, where)
    settings = replace(settings, root=config_path.resolve().parent, config_path=config_path)
    settings.validate()
    return settings


def settings_from_table(table: dict[str, Any], where: str) -> Settings:
    for key in table:
        if key not in CONFIG_KEYS:
            hint, key = "", str(key)  # YAML keys may be numbers
            if key.replace("_", "-") in CONFIG_KEYS:
                hint = f" (did you mean '{key.replace('_', '-')}'?)"
            raise ConfigError(f"{where}: unknown key '{key}'{hint}")
    values: dict[str, Any] = {}
    for key in ("select", "ignore", "extend-select", "exclude", "extend-exclude", "include", "extend-include"):
        if key in table:
            values[key.replace("-", "_")] = _string_list(table[key], f"{where}: '{key}'")
    if "per-file-ignores" in table:
        raw = table["per-file-ignores"]
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: 'per-file-ignores' must map glob patterns to rule lists")
        values["per_file_ignores"] = tuple(
            (str(pattern), _string_list(codes, f"{where}: 'per-file-ignores.{pattern}'"))
            for pattern, codes in raw.items()
        )
    if "severity" in table:
        raw = table["severity"]
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: 'severity' must map rule ids to error|warning|info")
        pairs = []
        for code, level in raw.items():
            if level not in SEVERITIES:
                raise ConfigError(
                    f"{where}: 'severity.{code}' must be one of {', '.join(SEVERITIES)}, not {level!r}")
            pairs.append((str(code), level))
        values["severity"] = tuple(pairs)
    if "fail-on" in table:
        level = table["fail-on"]
        if level not in SEVERITIES:
            raise ConfigError(f"{where}: 'fail-on' must be one of {', '.join(SEVERITIES)}, not {level!r}")
        values["fail_on"] = level
    if "max-file-size" in table:
        try:
            values["max_file_size"] = parse_size(table["max-file-size"])
        except SizeError as error:
            raise ConfigError(f"{where}: 'max-file-size': {error}") from None
    settings = Settings(**values)
    try:
        settings.validate()
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None
    return settings


def _string_list(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    raise ConfigError(f"{where} must be a list of strings")


def split_selectors(values: Iterable[str]) -> tuple[str, ...]:
    """CLI values may be repeated and comma-separated: ``--select DDP0,DDP1``."""
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())
