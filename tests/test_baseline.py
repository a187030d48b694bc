"""Adoption on existing code: fingerprints, `--write-baseline`/`--baseline`,
and `--diff-base` on temporary git repositories."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from ddplint.diagnostics import Diagnostic
from ddplint.fingerprints import file_fingerprints, fingerprint, normalise_line
from tests.helpers import run_cli, write

HEADER = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
"""
OLD_CODE = HEADER + """\
model = DDP(net, find_unused_parameters=True)
a = model.to("cuda:0")
b = model.to("cuda:0")
"""
SELECT = ("--select", "DDP005,DDP007", "--isolated", "--no-cache", "--no-show-source")


def _found(result) -> list[str]:
    return [line.split(": ", 1)[0] + " " + line.split(": ", 1)[1].split()[0]
            for line in result.stdout.splitlines() if ": DDP" in line]


# ---------------------------------------------------------------------- fingerprints
def test_fingerprints_ignore_line_numbers_whitespace_and_comments():
    assert normalise_line('  x  =  f( "a  #b" )   # noqa: DDP001') == 'x = f( "a #b" )'
    assert fingerprint("DDP001", "a.py", "x = f()") == fingerprint("ddp001", "a.py", "   x = f()  # why")
    assert fingerprint("DDP001", "a.py", "x = f()") != fingerprint("DDP001", "b.py", "x = f()")
    assert fingerprint("DDP001", "a.py", "x = f()", 0) != fingerprint("DDP001", "a.py", "x = f()", 1)
    assert len(fingerprint("DDP001", "a.py", "x")) == 32


def test_identical_findings_get_occurrence_indices_in_position_order():
    found = [Diagnostic(9, 1, 9, 2, "DDP007", "n", "warning", "m"), Diagnostic(3, 5, 3, 6, "DDP007", "n", "warning", "m"),
             Diagnostic(3, 1, 3, 2, "DDP005", "n", "info", "m")]
    lines = {3: "x = f()", 9: "   x = f()"}
    prints = file_fingerprints("a.py", found, lines)
    assert prints == [fingerprint("DDP007", "a.py", "x = f()", 1), fingerprint("DDP007", "a.py", "x = f()", 0),
                      fingerprint("DDP005", "a.py", "x = f()", 0)]


# ---------------------------------------------------------------------- baseline
@pytest.fixture
def legacy(tmp_path):
    write(tmp_path / "src" / "train.py", OLD_CODE)
    return tmp_path


def test_baseline_hides_recorded_findings_and_shows_new_ones(legacy):
    written = run_cli(*SELECT, "--write-baseline", ".ddplint-baseline.json", "src", cwd=legacy)
    assert written.returncode == 0, written.stderr
    assert "wrote 3 findings to the baseline .ddplint-baseline.json" in written.stderr
    data = json.loads((legacy / ".ddplint-baseline.json").read_text())
    assert [(e["path"], e["code"], e["line_text"]) for e in data["findings"]] == [
        ("src/train.py", "DDP005", "model = DDP(net, find_unused_parameters=True)"),
        ("src/train.py", "DDP007", 'a = model.to("cuda:0")'),
        ("src/train.py", "DDP007", 'b = model.to("cuda:0")')]

    quiet = run_cli(*SELECT, "--baseline", ".ddplint-baseline.json", "src", cwd=legacy)
    assert quiet.returncode == 0 and _found(quiet) == [], quiet.stdout

    # New code is reported; code moved down and around (and a copy of an old
    # line: its second occurrence is new) is not resurrected.
    moved = HEADER + '\nc = model.to("cuda:1")\n\n\nb = model.to("cuda:0")\n' \
        'model = DDP(net, find_unused_parameters=True)  # moved\na = model.to("cuda:0")\nb = model.to("cuda:0")\n'
    (legacy / "src" / "train.py").write_text(moved)
    new = run_cli(*SELECT, "--baseline", ".ddplint-baseline.json", "src", cwd=legacy)
    assert new.returncode == 1
    assert _found(new) == ["src/train.py:7:14 DDP007", "src/train.py:13:14 DDP007"]


def test_baseline_does_not_depend_on_the_working_directory(legacy):
    run_cli(*SELECT, "--write-baseline", "baseline.json", "src", cwd=legacy)
    from_inside = run_cli(*SELECT, "--baseline", "../baseline.json", "train.py", cwd=legacy / "src")
    assert from_inside.returncode == 0 and _found(from_inside) == [], from_inside.stdout + from_inside.stderr


def test_entries_that_no_longer_occur_are_listed_and_the_baseline_only_shrinks(legacy):
    run_cli(*SELECT, "--write-baseline", "baseline.json", "src", cwd=legacy)
    fixed = OLD_CODE.replace('a = model.to("cuda:0")', "a = model.to(device)")
    (legacy / "src" / "train.py").write_text(fixed + 'c = model.to("cuda:1")\n')
    result = run_cli(*SELECT, "--baseline", "baseline.json", "src", cwd=legacy)
    assert "1 baseline entry no longer occur" in result.stderr
    assert '  src/train.py: DDP007 a = model.to("cuda:0")' in result.stderr
    assert _found(result) == ["src/train.py:9:14 DDP007"]
    # Rewriting while reading keeps only what still occurs: the new finding is not added.
    shrunk = run_cli(*SELECT, "--baseline", "baseline.json", "--write-baseline", "baseline.json", "src", cwd=legacy)
    assert "wrote 2 findings" in shrunk.stderr, shrunk.stderr
    codes = [e["line_text"] for e in json.loads((legacy / "baseline.json").read_text())["findings"]]
    assert codes == ["model = DDP(net, find_unused_parameters=True)", 'b = model.to("cuda:0")']
    # Entries of files that were not linted in this run are not judged.
    write(legacy / "other" / "x.py", "import os\n")
    elsewhere = run_cli(*SELECT, "--baseline", "baseline.json", "other", cwd=legacy)
    assert "no longer occur" not in elsewhere.stderr


def test_bad_baseline_files_are_one_line_errors(legacy):
    missing = run_cli(*SELECT, "--baseline", "nope.json", "src", cwd=legacy)
    assert missing.returncode == 2
    assert missing.stderr.strip() == ("ddplint: error: baseline file not found: nope.json "
                                      "(create it with --write-baseline nope.json)")
    write(legacy / "bad.json", "{not json")
    broken = run_cli(*SELECT, "--baseline", "bad.json", "src", cwd=legacy)
    assert broken.returncode == 2 and len(broken.stderr.strip().splitlines()) == 1
    assert "bad.json is not a ddplint baseline" in broken.stderr
    write(legacy / "other.json", '{"tool": "eslint"}')
    assert "not a ddplint baseline" in run_cli(*SELECT, "--baseline", "other.json", "src", cwd=legacy).stderr


# ---------------------------------------------------------------------- --diff-base
def _git(cwd: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.com", GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_SYSTEM=os.devnull)
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repository(tmp_path):
    repo = tmp_path / "repo"
    write(repo / "src" / "train.py", OLD_CODE)
    write(repo / "src" / "keep.py", OLD_CODE)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "legacy")
    return repo


def test_diff_base_reports_only_added_or_changed_lines(repository):
    changed = OLD_CODE.replace('b = model.to("cuda:0")', 'b = model.to("cuda:1")') + 'c = model.to("cuda:2")\n'
    (repository / "src" / "train.py").write_text("# a new first line\n" + changed)
    write(repository / "src" / "new.py", HEADER + 'd = model.to("cuda:3")\n')  # untracked: all new
    result = run_cli(*SELECT, "--diff-base", "HEAD", "src", cwd=repository)
    assert result.returncode == 1, result.stderr
    assert _found(result) == ["src/new.py:6:14 DDP007", "src/train.py:9:14 DDP007", "src/train.py:10:14 DDP007"]
    # Committed changes count too, against an older revision.
    _git(repository, "add", ".")
    _git(repository, "commit", "-qm", "more")
    assert _found(run_cli(*SELECT, "--diff-base", "HEAD~1", "src", cwd=repository)) == _found(result)
    assert _found(run_cli(*SELECT, "--diff-base", "HEAD", "src", cwd=repository)) == []


def test_diff_base_follows_a_renamed_file(repository):
    _git(repository, "mv", "src/keep.py", "src/kept.py")
    result = run_cli(*SELECT, "--diff-base", "HEAD", "src", cwd=repository)
    assert result.returncode == 0 and _found(result) == [], result.stdout + result.stderr


def test_diff_base_errors_are_one_line_and_exit_2(repository, tmp_path):
    outside = write(tmp_path / "outside" / "x.py", OLD_CODE)
    not_a_repo = run_cli(*SELECT, "--diff-base", "HEAD", "x.py", cwd=outside.parent)
    assert not_a_repo.returncode == 2
    assert not_a_repo.stderr.strip() == (f"ddplint: error: --diff-base needs a git repository: "
                                         f"{outside.parent.resolve()} is not inside one")
    mixed = run_cli(*SELECT, "--diff-base", "HEAD", "src", str(outside), cwd=repository)
    assert mixed.returncode == 2 and "is outside the git repository at" in mixed.stderr
    assert len(mixed.stderr.strip().splitlines()) == 1
    unknown = run_cli(*SELECT, "--diff-base", "no-such-branch", "src", cwd=repository)
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == "ddplint: error: --diff-base: unknown git revision 'no-such-branch'"
