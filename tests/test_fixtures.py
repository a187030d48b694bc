"""Lint every fixture under fixtures/ and compare with its expected diagnostics.

A fixture is a file ``fixtures/NAME.py`` with ``fixtures/NAME.expected`` beside
it (lines ``LINE:COL CODE``), or a project folder ``fixtures/NAME/`` with
``fixtures/NAME.expected`` (lines ``FILE:LINE:COL CODE``, FILE relative to the
folder). An empty expected file means the fixture must lint clean. Fixtures are
linted with every rule selected and no configuration file (isolated).
"""

from pathlib import Path

import pytest

from ddplint.config import Settings
from ddplint.discovery import discover
from ddplint.engine import lint_paths

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _fixture_cases():
    for expected in sorted(FIXTURES.glob("*.expected")):
        target = expected.with_suffix(".py")
        if not target.exists():
            target = expected.with_suffix("")
        yield pytest.param(target, expected, id=target.name)


def _expected_lines(expected: Path) -> list[str]:
    lines = []
    for raw in expected.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            lines.append(line)
    return sorted(lines)


@pytest.fixture(scope="module")
def facts_cache(tmp_path_factory):
    """The fixtures' project root is this repository: summarise it once."""
    return tmp_path_factory.mktemp("ddplint_cache")


def lint_fixture(target: Path, cache_dir=None) -> list[str]:
    folder = target if target.is_dir() else target.parent
    settings = Settings(root=folder)
    files = discover([str(target)], settings).files
    shown = {path: path.resolve().relative_to(folder.resolve()).as_posix() for path in files}
    # The project root is this repository, as when a user lints a fixture here.
    results = lint_paths(files, settings, jobs=1, display=shown, cache_dir=cache_dir,
                         walked=[target] if target.is_dir() else [])
    found = []
    for result in results:
        for d in result.diagnostics:
            prefix = f"{result.path}:" if target.is_dir() else ""
            found.append(f"{prefix}{d.line}:{d.column} {d.code}")
    return sorted(found)


def test_every_fixture_has_an_expectation():
    orphans = [p.name for p in FIXTURES.iterdir()
               if (p.suffix == ".py" or p.is_dir()) and not p.name.startswith(("_", "."))
               and not p.with_suffix(".expected").exists()]
    assert orphans == []


@pytest.mark.parametrize("target,expected", list(_fixture_cases()))
def test_fixture_matches_expected(target, expected, facts_cache):
    assert lint_fixture(target, facts_cache) == _expected_lines(expected)
