"""The screen (ddplint.screen): a cheap necessary condition per rule, read from
CPython's ``ast``, that decides which files libcst parses.

- The manifest read from the rule files' text agrees with the rule classes.
- Completeness: whenever a rule's check reports (in a judge-everything run),
  its screen passed on that file. Over every rule example (and its fixed
  source), every fixture, and the fuzz inputs (tests/test_fuzz.py asserts
  the same oracle on every generated case). A screen that misses a finding
  is a bug, not a trade-off.
- ``--no-screen`` and the default give identical diagnostics on the fixtures.
- A run where no screen passes never imports libcst.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ddplint.config import Settings
from ddplint.discovery import discover
from ddplint.engine import Linter
from ddplint.registry import all_rules
from ddplint.screen.manifest import rule_infos
from ddplint.screen.screening import resolve, screen_source
from tests.helpers import screen_misses, write

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"


def test_manifest_agrees_with_the_rule_classes():
    infos = {info.code: info for info in rule_infos()}
    assert sorted(infos) == [rule.code for rule in all_rules()]
    for rule in all_rules():
        info = infos[rule.code]
        assert (info.name, info.severity, info.triggers, info.needs_ddp_context, info.uses_project) == (
            rule.name, rule.severity, tuple(rule.triggers), rule.needs_ddp_context,
            getattr(rule, "uses_project", False)), rule.code
        assert info.module == rule.__module__
        if rule.code in ("DDP000", "DDP100"):
            continue  # reported by the engine, not by a check
        assert info.screen_source, f"{rule.code} has no screen"
        compiled = compile(info.screen_source, "<screen>", "exec")
        function = next(c for c in compiled.co_consts if hasattr(c, "co_code"))
        assert function.co_code == rule.screen.__code__.co_code, f"{rule.code}: the manifest read another screen"


def _example_cases():
    for rule in all_rules():
        if rule.code in ("DDP000", "DDP100"):
            continue
        for kind in ("valid", "invalid"):
            for number, example in enumerate(getattr(rule, kind)):
                yield pytest.param(rule, example, id=f"{rule.code}-{kind}-{number}")


@pytest.mark.parametrize("rule,example", list(_example_cases()))
def test_screen_passes_wherever_the_check_reports_on_an_example(rule, example):
    sources = [example.source]
    if getattr(example, "fixed_source", None):
        sources.append(example.fixed_source)
    settings = Settings(select=("ALL",), root=Path.cwd())
    for source in sources:
        unscreened = Linter(settings, screen=False).lint_source(source, example.filename)
        screened = Linter(settings).lint_source(source, example.filename)
        assert [(d.line, d.column, d.code) for d in screened.diagnostics] == \
               [(d.line, d.column, d.code) for d in unscreened.diagnostics], source
        verdict = screen_source(source)
        assert verdict is not None, source
        passed, _ = resolve(verdict, None, example.filename)
        missed = [d.code for d in unscreened.diagnostics
                  if d.code not in ("DDP000", "DDP100") and d.code not in passed]
        assert not missed, f"screens of {missed} failed where the check reports:\n{source}"


def _fixture_targets():
    for expected in sorted(FIXTURES.glob("*.expected")):
        target = expected.with_suffix(".py")
        if not target.exists():
            target = expected.with_suffix("")
        yield pytest.param(target, id=target.name)


@pytest.fixture(scope="module")
def facts_cache(tmp_path_factory):
    """The fixtures' project root is this repository: summarise it once."""
    return tmp_path_factory.mktemp("ddplint_facts")


@pytest.mark.parametrize("target", list(_fixture_targets()))
def test_fixture_screens_are_complete_and_change_nothing(target, facts_cache):
    folder = target if target.is_dir() else target.parent
    settings = Settings(root=folder)
    files = discover([str(target)], settings).files
    shown = {path: path.resolve().relative_to(folder.resolve()).as_posix() for path in files}
    assert screen_misses(files, settings, ROOT, shown, cache_dir=facts_cache) == []


def test_a_screened_out_rule_counts_as_run_for_unused_suppressions(tmp_path):
    """DDP005's screen fails (no find_unused_parameters): its suppression is
    unused, as a judge-everything run says."""
    source = ("from torch.nn.parallel import DistributedDataParallel as DDP\n"
              "model = DDP(net)  # noqa: DDP005\n")
    settings = Settings(select=("DDP005", "DDP100"), root=tmp_path)
    for screen in (True, False):
        result = Linter(settings, screen=screen).lint_source(source, "train.py")
        assert [d.code for d in result.diagnostics] == ["DDP100"], screen
    assert not Linter(settings).lint_source(source, "train.py").parsed


def _imports_in_run(tmp_path: Path, text: str) -> str:
    write(tmp_path / "train.py", text)
    code = ("import sys\nfrom ddplint.cli import main\nsys.argv = ['ddplint', '--isolated', '--no-cache', "
            "'--exit-zero', 'train.py']\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('LIBCST' if any(m == 'libcst' or m.startswith('libcst.') for m in sys.modules) else 'NONE',"
            " file=sys.stderr)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    return result.stderr.strip().splitlines()[-1]


def test_a_run_where_no_screen_passes_never_imports_libcst(tmp_path):
    assert _imports_in_run(tmp_path, "import torch\n\ndef add(a, b):\n    return a + b\n") == "NONE"
    # The judge does import it when a screen passes.
    assert _imports_in_run(tmp_path, "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                                     "model = DDP(net, find_unused_parameters=True)\n") == "LIBCST"


def test_a_screen_that_asks_the_project_stays_conditional():
    """A screen's tuple of project facts reaches ``resolve`` as a condition: a
    module with no torch.save and no DDP context of its own is judged for DDP011
    only when the project says it calls a save helper in DDP context."""
    source = "import helpers\n\ndef run(net):\n    helpers.checkpoint(net, 'last.pt')\n"
    verdict = screen_source(source, "train.py")
    conditional = dict(verdict.conditional)
    assert "DDP011" not in verdict.passed.split()
    assert set(conditional["DDP011"]) == {"context", "saves"}
    assert "DDP011" in resolve(verdict, None, "train.py")[0]  # no project: the judge decides


def test_unit_test_modules_are_ruled_out_by_path_for_rules_silent_in_tests():
    source = ("import torch\nimport torch.distributed as dist\nfrom torch.utils.data import DataLoader\n"
              "loader = DataLoader(ds, batch_size=8, num_workers=4)\nmodel.to(f'cuda:{dist.get_rank()}')\n")
    in_tests = set(screen_source(source, "tests/test_loader.py").passed.split())
    in_script = set(screen_source(source, "train.py").passed.split())
    assert {"DDP006", "DDP017"} <= in_script
    assert not {"DDP006", "DDP017"} & in_tests
