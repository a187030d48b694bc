"""Which files a run lints: named paths win over excludes (unless --force-exclude),
and a run that lints nothing says why in one line."""

import json
import re
from pathlib import Path

import pytest

from tests.helpers import BAD_SCRIPT, FIRST_RULES, run_cli, write

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo(tmp_path):
    write(tmp_path / "pyproject.toml", '[tool.ddplint]\nextend-exclude = ["generated", "vendor"]\n')
    write(tmp_path / "src" / "train.py", BAD_SCRIPT)
    write(tmp_path / "generated" / "model_pb2.py", BAD_SCRIPT)
    write(tmp_path / "generated" / "deep" / "ops.py", BAD_SCRIPT)
    write(tmp_path / "generated" / "vendor" / "lib.py", BAD_SCRIPT)
    return tmp_path


def _paths(result) -> list[str]:
    return [entry["path"] for entry in json.loads(result.stdout)["files"]]


def test_a_named_folder_is_linted_even_when_an_exclude_matches_it(repo):
    result = run_cli("--select", FIRST_RULES, "--format", "json", "generated", cwd=repo)
    assert result.returncode == 1, result.stderr
    # "vendor" still applies to what the walk finds below the named folder
    assert _paths(result) == ["generated/deep/ops.py", "generated/model_pb2.py"]


def test_a_named_subfolder_of_an_excluded_folder_is_linted(repo):
    result = run_cli("--select", FIRST_RULES, "--format", "json", "generated/deep", cwd=repo)
    assert _paths(result) == ["generated/deep/ops.py"]


def test_walking_from_the_root_still_applies_excludes(repo):
    result = run_cli("--select", FIRST_RULES, "--format", "json", ".", cwd=repo)
    assert _paths(result) == ["src/train.py"]


def test_force_exclude_applies_excludes_to_named_files_and_folders(repo):
    for named in ("generated", "generated/model_pb2.py"):
        result = run_cli("--force-exclude", named, cwd=repo)
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stderr.strip() == (
            "ddplint: 0 files: every path was excluded by extend-exclude in pyproject.toml (--force-exclude)")
    # what is not excluded is linted as usual
    assert run_cli("--force-exclude", "--select", FIRST_RULES, "src/train.py", cwd=repo).returncode == 1


def test_zero_files_by_exclusion_says_which_setting(repo):
    write(repo / "only_generated" / "pyproject.toml", '[tool.ddplint]\nextend-exclude = ["gen*"]\n')
    write(repo / "only_generated" / "gen" / "a.py", BAD_SCRIPT)
    write(repo / "only_generated" / "gen_b.py", BAD_SCRIPT)
    result = run_cli(".", cwd=repo / "only_generated")
    assert result.returncode == 0
    assert result.stderr.strip() == "ddplint: 0 files: every path was excluded by extend-exclude in pyproject.toml"
    assert "0 files" in result.stdout  # the text summary still closes the report


def test_zero_files_with_several_reasons_counts_each(tmp_path):
    (tmp_path / ".git").mkdir()
    write(tmp_path / ".gitignore", "scratch.py\n")
    write(tmp_path / "scratch.py", BAD_SCRIPT)
    write(tmp_path / "build" / "x.py", BAD_SCRIPT)
    result = run_cli("--isolated", ".", cwd=tmp_path)
    assert result.stderr.strip() == (
        "ddplint: 0 files: every path was excluded (1 by .gitignore, 2 by the default excludes)")  # build/ and .git/


def test_zero_files_in_a_folder_without_python_says_so(tmp_path):
    write(tmp_path / "docs" / "index.md", "# docs\n")
    result = run_cli("docs", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stderr.strip() == "ddplint: 0 files: no file matching include (*.py, *.ipynb) in docs"


def test_stdin_excluded_with_force_exclude_says_so(repo):
    result = run_cli("--force-exclude", "-", "--stdin-filename", "generated/x.py", cwd=repo, input=BAD_SCRIPT)
    assert result.returncode == 0
    assert result.stderr.strip() == "ddplint: 0 files: generated/x.py is excluded (--force-exclude)"


def test_the_repositorys_fixtures_folder_is_linted_when_named():
    """This repository excludes fixtures/ (wrong on purpose) in its own pyproject.toml;
    naming the folder lints it anyway."""
    result = run_cli("--no-cache", "--no-show-source", "fixtures/", cwd=ROOT)
    assert result.returncode == 1, result.stderr
    reported = set(re.findall(r"^(fixtures/\S+?):(\d+:\d+): (DDP\d{3})", result.stdout, re.M))
    for expected in sorted((ROOT / "fixtures").glob("*_bad.expected")):
        script = expected.with_suffix(".py")
        if not script.is_file():
            continue  # a project folder: its findings depend on which files form the project
        for line in expected.read_text().splitlines():
            position_and_code = line.split("#", 1)[0].split()
            if position_and_code:
                position, code = position_and_code
                assert (f"fixtures/{script.name}", position, code) in reported


def test_the_project_of_a_walked_root_is_the_named_files(repo):
    """When the folder named on the command line is the project root, the engine
    takes the discovered files as the project instead of walking the tree again."""
    from ddplint.config import Settings
    from ddplint.discovery import discover
    from ddplint.engine import _project_pairs

    settings = Settings(root=repo)
    named = discover([str(repo)], settings).files
    assert named
    assert _project_pairs(repo, settings, named, walked=[repo]) == _project_pairs(repo, settings, named)
