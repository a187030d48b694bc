"""Fixes: the edit model, its JSON/SARIF/cache/LSP forms, and `--fix` / `--diff`
on real files (round trips over every fixture, atomic writes, refusals)."""

import ast
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from ddplint.diagnostics import Diagnostic, FileResult
from ddplint.fixes import (SAFE, UNSAFE, Edit, Fix, PositionMap, apply_edits, edits_overlap,
                           split_lines)
from tests.helpers import run_cli, write

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
SCHEMA = ROOT.parent / "shared" / "schemas" / "sarif-schema-2.1.0.json"

# One finding of each kind the fixes below handle.
AMP_SCRIPT = """\
import torch
from torch.cuda.amp import GradScaler, autocast

scaler = GradScaler()
for x in loader:
    with autocast():
        loss = model(x).sum()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
"""
AMP_FIXED = AMP_SCRIPT.replace("    torch.nn.utils.clip", "    scaler.unscale_(optimizer)\n    torch.nn.utils.clip")

DDP_SCRIPT = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

local_rank = int(os.environ["LOCAL_RANK"])
rank = dist.get_rank()
torch.cuda.set_device(rank)
loader = DataLoader(ds, batch_size=8, num_workers=4)
model = DDP(net.cuda(), device_ids=[local_rank])
state = torch.load("init.pt")
torch.save(model.state_dict(), "ckpt.pt")
"""


# ---------------------------------------------------------------------- the model
def test_lines_split_where_python_splits_them():
    source = "a = 1\x0c\nb = 2\r\nc = 3\rd = 4"
    assert split_lines(source) == ["a = 1\x0c\n", "b = 2\r\n", "c = 3\r", "d = 4"]
    # A form feed is not a line break: an edit on line 2 lands on "b".
    assert apply_edits(source, [Edit(2, 1, 2, 2, "B")]) == "a = 1\x0c\nB = 2\r\nc = 3\rd = 4"


def test_apply_edits_applies_from_the_end_and_refuses_overlaps():
    source = "x = f(a)\ny = 2\n"
    edits = [Edit(1, 8, 1, 8, ", k=1"), Edit(2, 1, 2, 1, "# c\n"), Edit(1, 1, 1, 2, "z")]
    assert apply_edits(source, edits) == "z = f(a, k=1)\n# c\ny = 2\n"
    with pytest.raises(ValueError):
        apply_edits(source, [Edit(1, 1, 1, 4, ""), Edit(1, 3, 1, 5, "")])
    assert edits_overlap([Edit(1, 3, 1, 3, "a")], [Edit(1, 3, 1, 3, "b")])  # same insertion point
    assert not edits_overlap([Edit(1, 1, 1, 2, "a")], [Edit(2, 1, 2, 2, "b")])


def test_position_map_follows_inserted_lines_and_text():
    before = "a\nb = f(x)\n"
    edits = [Edit(1, 1, 1, 1, "inserted\n"), Edit(2, 7, 2, 7, ".item()")]
    after = apply_edits(before, edits)
    where = PositionMap(before, edits, after)
    assert where.position(2, 1) == (3, 1)
    assert where.position(2, 8) == (3, 15)  # the ')' moved right by the insertion before it


def test_fix_json_round_trip():
    fix = Fix("Add pin_memory=True", UNSAFE, (Edit(1, 5, 1, 5, ", pin_memory=True"), Edit(2, 1, 3, 1, "")))
    assert Fix.from_json(json.loads(json.dumps(fix.to_json()))) == fix
    assert fix.to_json()["edits"][0] == {"range": {"start": {"line": 0, "character": 4},
                                                    "end": {"line": 0, "character": 4}},
                                          "newText": ", pin_memory=True"}
    with pytest.raises(ValueError):
        Fix.from_json({**fix.to_json(), "applicability": "maybe"})


# ---------------------------------------------------------------------- refusals
def _finding(fix: Fix, line=1, column=1, code="DDP001") -> Diagnostic:
    return Diagnostic(line, column, line, column + 1, code, "x", "error", "m", fix)


def test_a_fix_that_breaks_the_syntax_is_refused():
    from ddplint.autofix import fix_source

    source = "x = f(a)\n"
    bad = _finding(Fix("break it", SAFE, (Edit(1, 8, 1, 9, ""),)))  # drops the ')'
    outcome = fix_source(source, FileResult("t.py", [bad]), lambda text: FileResult("t.py"))
    assert outcome.fixed == source and not outcome.changed
    assert "syntax error" in outcome.problem


def test_a_fix_that_leaves_its_finding_is_refused():
    from ddplint.autofix import fix_source

    source = "x = f(a)\n"
    useless = _finding(Fix("rename", SAFE, (Edit(1, 1, 1, 2, "y"),)))
    still_there = FileResult("t.py", [_finding(None)])
    outcome = fix_source(source, FileResult("t.py", [useless]), lambda text: still_there)
    assert not outcome.changed and "did not remove the finding" in outcome.problem


def test_unsafe_fixes_need_the_flag():
    from ddplint.autofix import fix_source

    unsafe = _finding(Fix("u", UNSAFE, (Edit(1, 1, 1, 2, "y"),)))
    assert fix_source("x = 1\n", FileResult("t.py", [unsafe]), lambda text: FileResult("t.py")).applied == []
    outcome = fix_source("x = 1\n", FileResult("t.py", [unsafe]), lambda text: FileResult("t.py"), unsafe=True)
    assert outcome.fixed == "y = 1\n"


# ---------------------------------------------------------------------- the CLI on files
def test_fix_applies_only_safe_fixes_and_reports_what_is_left(tmp_path):
    write(tmp_path / "amp.py", AMP_SCRIPT)
    write(tmp_path / "ddp.py", DDP_SCRIPT)
    result = run_cli("--isolated", "--no-cache", "--fix", "--show-fixes", ".", cwd=tmp_path)
    assert (tmp_path / "amp.py").read_text() == AMP_FIXED
    assert (tmp_path / "ddp.py").read_text() == DDP_SCRIPT  # only unsafe fixes there
    assert "fixed: amp.py:9:5: DDP003 Insert scaler.unscale_(optimizer) before the clip" in result.stderr
    assert "Fixed 1 finding in 1 file." in result.stderr
    assert "amp.py" not in result.stdout  # nothing left there
    assert result.returncode == 1 and "ddp.py:9:23: DDP017" in result.stdout
    assert "4 fixable with --fix --unsafe-fixes" in result.stdout


def test_unsafe_fixes_keep_aliases_and_layout(tmp_path):
    write(tmp_path / "ddp.py", DDP_SCRIPT)
    result = run_cli("--isolated", "--no-cache", "--fix", "--unsafe-fixes", "ddp.py", cwd=tmp_path)
    assert (tmp_path / "ddp.py").read_text() == DDP_SCRIPT.replace(
        "set_device(rank)", "set_device(local_rank)").replace(
        "num_workers=4)", "num_workers=4, pin_memory=True)").replace(
        'torch.load("init.pt")', 'torch.load("init.pt", map_location="cpu")').replace(
        "model.state_dict()", "model.module.state_dict()")
    assert "Fixed 4 findings in 1 file." in result.stderr, result.stderr


def test_diff_prints_a_unified_diff_and_changes_nothing(tmp_path):
    script = write(tmp_path / "amp.py", AMP_SCRIPT)
    result = run_cli("--isolated", "--no-cache", "--diff", "amp.py", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert script.read_text() == AMP_SCRIPT
    assert "--- a/amp.py\n+++ b/amp.py\n" in result.stdout
    assert "+    scaler.unscale_(optimizer)\n" in result.stdout
    assert "Would fix 1 finding in 1 file." in result.stderr
    script.write_text(AMP_FIXED)
    clean = run_cli("--isolated", "--no-cache", "--diff", "amp.py", cwd=tmp_path)
    assert clean.returncode == 0 and clean.stdout == ""


def test_fix_keeps_mode_bom_and_crlf(tmp_path):
    script = tmp_path / "amp.py"
    script.write_bytes(b"\xef\xbb\xbf" + AMP_SCRIPT.replace("\n", "\r\n").encode())
    os.chmod(script, 0o754)
    result = run_cli("--isolated", "--no-cache", "--fix", "amp.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert script.read_bytes() == b"\xef\xbb\xbf" + AMP_FIXED.replace("\n", "\r\n").encode()
    assert stat.S_IMODE(script.stat().st_mode) == 0o754
    assert sorted(p.name for p in tmp_path.iterdir()) == ["amp.py"]  # no temporary file left


def test_a_failed_write_leaves_the_original_intact(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from ddplint.cli import cli

    script = write(tmp_path / "amp.py", AMP_SCRIPT)
    original = script.read_bytes()

    def refuse(source, destination):
        raise OSError(28, "No space left on device")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(os, "replace", refuse)
    result = CliRunner().invoke(cli, ["--isolated", "--no-cache", "-j", "1", "--fix", "amp.py"])
    assert result.exit_code == 2, result.output
    assert "amp.py: not written: No space left on device; the file was left unchanged" in result.output
    assert script.read_bytes() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["amp.py"]


def test_stdin_fix_prints_the_fixed_source():
    result = run_cli("--isolated", "--fix", "-", "--stdin-filename", "amp.py", input=AMP_SCRIPT)
    assert result.stdout == AMP_FIXED
    assert result.returncode == 0, result.stderr
    diff = run_cli("--isolated", "--diff", "-", "--stdin-filename", "amp.py", input=AMP_SCRIPT)
    assert diff.returncode == 1 and "+    scaler.unscale_(optimizer)" in diff.stdout


def test_flags_that_do_not_go_together_are_usage_errors(tmp_path):
    write(tmp_path / "amp.py", AMP_SCRIPT)
    for args, message in ((["--fix", "--add-noqa"], "--fix and --add-noqa cannot be combined"),
                          (["--fix", "--baseline", "b.json"], "--fix cannot be combined with --baseline"),
                          (["--reason", "x"], "--reason goes with --add-noqa")):
        result = run_cli("--isolated", *args, "amp.py", cwd=tmp_path)
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------------- formats and cache
def _apply_lsp_edits(source: str, edits: list) -> str:
    return apply_edits(source, [Edit(e["range"]["start"]["line"] + 1, e["range"]["start"]["character"] + 1,
                                     e["range"]["end"]["line"] + 1, e["range"]["end"]["character"] + 1,
                                     e["newText"]) for e in edits])


def test_json_data_fix_and_the_cache_carry_the_same_fix(tmp_path):
    write(tmp_path / "amp.py", AMP_SCRIPT)
    cold = run_cli("--isolated", "--format", "json", "--cache-dir", str(tmp_path / "cache"), "amp.py", cwd=tmp_path)
    warm = run_cli("--isolated", "--format", "json", "--cache-dir", str(tmp_path / "cache"), "amp.py", cwd=tmp_path)
    assert cold.stdout == warm.stdout
    assert any("unscale_" in entry.read_text() for entry in (tmp_path / "cache").rglob("*.json"))
    [finding] = json.loads(warm.stdout)["files"][0]["diagnostics"]
    fix = finding["data"]["fix"]
    assert fix["applicability"] == "safe" and fix["description"].startswith("Insert scaler.unscale_")
    assert _apply_lsp_edits(AMP_SCRIPT, fix["edits"]) == AMP_FIXED


def test_sarif_fixes_validate_and_apply(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    if not SCHEMA.exists():
        pytest.skip(f"SARIF schema not found at {SCHEMA}")
    write(tmp_path / "amp.py", AMP_SCRIPT)
    log = json.loads(run_cli("--isolated", "--no-cache", "--format", "sarif", "amp.py", cwd=tmp_path).stdout)
    jsonschema.validate(log, json.loads(SCHEMA.read_text()))
    [result] = log["runs"][0]["results"]
    [change] = result["fixes"][0]["artifactChanges"]
    assert change["artifactLocation"]["uri"] == "amp.py"
    edits = [Edit(r["deletedRegion"]["startLine"], r["deletedRegion"]["startColumn"], r["deletedRegion"]["endLine"],
                  r["deletedRegion"]["endColumn"], r["insertedContent"]["text"]) for r in change["replacements"]]
    assert apply_edits(AMP_SCRIPT, edits) == AMP_FIXED


# ---------------------------------------------------------------------- every fixture, twice
def _fixture_targets():
    for expected in sorted(FIXTURES.glob("*.expected")):
        target = expected.with_suffix(".py")
        yield target if target.exists() else expected.with_suffix("")


def _cli(folder: Path, *args: str):
    """The CLI in this process (much faster than a subprocess per run)."""
    from click.testing import CliRunner

    from ddplint.cli import cli

    previous = Path.cwd()
    os.chdir(folder)
    try:
        return CliRunner().invoke(cli, ["--isolated", "--no-cache", "-j", "1", *args])
    finally:
        os.chdir(previous)


def _findings(folder: Path, target: str) -> list:
    result = _cli(folder, "--format", "json", target)
    return [(f["path"], d["code"], d["data"]["fix"]) for f in json.loads(result.stdout)["files"]
            for d in f["diagnostics"]]


def test_fix_round_trip_over_every_fixture(tmp_path):
    """--fix --unsafe-fixes on a copy of every fixture: the files still parse, the
    fixed findings are gone and no fixable one is left, nothing else changes,
    and a second run changes nothing."""
    shutil.copytree(FIXTURES, tmp_path / "fixtures")
    fixed_codes = []
    for original in _fixture_targets():
        folder = tmp_path / "fixtures" if original.is_file() else tmp_path / "fixtures" / original.name
        target = original.name if original.is_file() else "."
        before = _findings(folder, target)
        first = _cli(folder, "--fix", "--unsafe-fixes", "--show-fixes", target)
        assert "left unchanged" not in first.stderr, first.stderr
        fixed = [line.split(": ")[2].split()[0] for line in first.stderr.splitlines() if line.startswith("fixed: ")]
        fixed_codes += fixed
        files = [folder / target] if original.is_file() else sorted(folder.rglob("*.py"))
        for path in files:
            ast.parse(path.read_text(encoding="utf-8"))
        after = _findings(folder, target)
        assert all(fix is None for _, _, fix in after)
        assert sorted(code for _, code, _ in before) == sorted([code for _, code, _ in after] + fixed)
        contents = {path: path.read_bytes() for path in files}
        second = _cli(folder, "--fix", "--unsafe-fixes", target)
        assert "Fixed 0 findings in 0 files." in second.stderr
        assert {path: path.read_bytes() for path in files} == contents
    assert {"DDP001", "DDP003", "DDP006", "DDP025"} <= set(fixed_codes)
