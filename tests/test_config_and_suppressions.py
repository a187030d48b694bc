"""Configuration files, discovery excludes and noqa suppressions (DESIGN.md)."""

import json
import subprocess

import pytest

from tests.helpers import BAD_SCRIPT, run_cli, write


def _codes(result):
    return sorted({entry["code"] for f in json.loads(result.stdout)["files"] for entry in f["diagnostics"]})


@pytest.fixture
def repo(tmp_path):
    write(tmp_path / "src" / "train.py", BAD_SCRIPT)
    return tmp_path


# ---------------------------------------------------------------------- config files
def test_pyproject_select_and_severity(repo):
    write(repo / "pyproject.toml", '[tool.ddplint]\nselect = ["DDP007"]\nseverity = { DDP007 = "error" }\n')
    result = run_cli("--format", "json", "src", cwd=repo)
    assert _codes(result) == ["DDP007"]
    assert json.loads(result.stdout)["files"][0]["diagnostics"][0]["severity"] == 1


def test_yaml_config_ignore_and_fail_on(repo):
    write(repo / ".ddplint.yaml", "select: [DDP005, DDP007]\nignore: [DDP007]\nfail-on: warning\n")
    result = run_cli("--format", "json", "src", cwd=repo)
    assert _codes(result) == ["DDP005"]
    assert result.returncode == 0  # DDP005 is info, below fail-on: warning


def test_config_is_found_from_the_linted_path_upwards(repo):
    write(repo / "pyproject.toml", '[tool.ddplint]\nselect = ["DDP005", "DDP007"]\nignore = ["DDP005"]\n')
    result = run_cli("--format", "json", str(repo / "src" / "train.py"), cwd=repo.parent)
    assert _codes(result) == ["DDP007"]


def test_cli_flags_override_the_file(repo):
    write(repo / "pyproject.toml", '[tool.ddplint]\nselect = ["DDP007"]\nfail-on = "error"\n')
    result = run_cli("--format", "json", "--select", "DDP005", "--fail-on", "info", "src", cwd=repo)
    assert _codes(result) == ["DDP005"] and result.returncode == 1


def test_per_file_ignores(repo):
    write(repo / "scripts" / "launch.py", BAD_SCRIPT)
    write(repo / ".ddplint.yaml", "select: [DDP005, DDP007]\nper-file-ignores:\n  'scripts/*.py': [DDP005, DDP007]\n")
    result = run_cli("--format", "json", ".", cwd=repo)
    assert [f["path"] for f in json.loads(result.stdout)["files"]] == ["src/train.py"]


def test_per_file_ignores_apply_to_stdin_filename(repo):
    write(repo / ".ddplint.yaml", "per-file-ignores:\n  'scripts/*.py': [ALL]\n")
    result = run_cli("-", "--stdin-filename", "scripts/x.py", cwd=repo, input=BAD_SCRIPT)
    assert result.returncode == 0


@pytest.mark.parametrize("config,named", [
    ('[tool.ddplint]\nselec = ["DDP007"]\n', "unknown key 'selec'"),
    ('[tool.ddplint]\nfail_on = "error"\n', "unknown key 'fail_on' (did you mean 'fail-on'?)"),
    ('[tool.ddplint]\nselect = ["DDP123"]\n', "unknown rule id or prefix 'DDP123' in select"),
    ('[tool.ddplint]\nseverity = { DDP007 = "fatal" }\n', "'severity.DDP007' must be one of error, warning, info"),
    ('[tool.ddplint]\nper-file-ignores = { "a.py" = ["XYZ1"] }\n', "unknown rule id or prefix 'XYZ1'"),
    ('[tool.ddplint]\nfail-on = "critical"\n', "'fail-on' must be one of error, warning, info"),
    ('[tool.ddplint]\nselect = 7\n', "'select' must be a list of strings"),
    ('[tool.ddplint\nselect = 7\n', "invalid TOML"),
])
def test_bad_config_names_the_problem_and_exits_2(repo, config, named):
    write(repo / "pyproject.toml", config)
    result = run_cli("src", cwd=repo)
    assert result.returncode == 2
    assert named in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_bad_yaml_is_a_one_line_error(repo):
    write(repo / ".ddplint.yaml", "select: [DDP007\n")
    result = run_cli("src", cwd=repo)
    assert result.returncode == 2 and "invalid YAML" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_explicit_config_and_isolated(repo):
    write(repo / "other.yaml", "select: [DDP005]\n")
    write(repo / ".ddplint.yaml", "select: [DDP007]\n")
    assert _codes(run_cli("--format", "json", "--config", "other.yaml", "src", cwd=repo)) == ["DDP005"]
    assert {"DDP005", "DDP007"} <= set(_codes(run_cli("--format", "json", "--isolated", "src", cwd=repo)))
    missing = run_cli("--config", "absent.yaml", "src", cwd=repo)
    assert missing.returncode == 2 and "config file not found" in missing.stderr


# ---------------------------------------------------------------------- discovery
def test_default_excludes_and_gitignore(repo):
    write(repo / ".venv" / "lib" / "x.py", BAD_SCRIPT)
    write(repo / "build" / "y.py", BAD_SCRIPT)
    write(repo / "generated" / "z.py", BAD_SCRIPT)
    write(repo / "notes" / "keep.py", BAD_SCRIPT)
    write(repo / "notes" / "drop_me.py", BAD_SCRIPT)
    (repo / ".git").mkdir()
    write(repo / ".gitignore", "generated/\n*drop_*.py\n")
    result = run_cli("--format", "json", ".", cwd=repo)
    paths = [f["path"] for f in json.loads(result.stdout)["files"]]
    assert paths == ["notes/keep.py", "src/train.py"]


def test_gitignore_negation_and_nested_files(repo):
    (repo / ".git").mkdir()
    write(repo / ".gitignore", "exp_*.py\n!exp_keep.py\n")
    write(repo / "lab" / "exp_a.py", BAD_SCRIPT)
    write(repo / "lab" / "exp_keep.py", BAD_SCRIPT)
    write(repo / "lab" / ".gitignore", "local.py\n")
    write(repo / "lab" / "local.py", BAD_SCRIPT)
    result = run_cli("--format", "json", ".", cwd=repo)
    assert [f["path"] for f in json.loads(result.stdout)["files"]] == ["lab/exp_keep.py", "src/train.py"]


def test_tracked_files_are_linted_under_ignore_patterns_and_a_committed_dist_package(repo):
    """Git ignores untracked files only: a committed file under a .gitignore pattern is
    linted, and a committed package named ``dist`` is source (a real git repository)."""
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    write(repo / ".gitignore", "dist/\nscratch/\n")
    write(repo / "dist" / "__init__.py", "")
    write(repo / "dist" / "fsdp.py", BAD_SCRIPT)
    write(repo / "dist" / "__pycache__" / "fsdp.py", BAD_SCRIPT)
    write(repo / "scratch" / "kept.py", BAD_SCRIPT)
    write(repo / "scratch" / "local.py", BAD_SCRIPT)
    write(repo / "build" / "lib" / "pkg" / "copy.py", BAD_SCRIPT)
    for path in ("dist/__init__.py", "dist/fsdp.py", "scratch/kept.py", "build/lib/pkg/copy.py", "src/train.py"):
        subprocess.run(["git", "-C", str(repo), "add", "-f", path], check=True)
    result = run_cli("--format", "json", ".", cwd=repo)
    paths = [f["path"] for f in json.loads(result.stdout)["files"]]
    # build/lib/pkg is no package of its own: a committed build output stays out
    assert paths == ["dist/fsdp.py", "scratch/kept.py", "src/train.py"]  # (the empty __init__.py has nothing)


def test_exclude_extend_exclude_and_force_exclude(repo):
    write(repo / "third_party" / "vendored.py", BAD_SCRIPT)
    write(repo / "pyproject.toml", '[tool.ddplint]\nextend-exclude = ["third_party"]\n')
    folder = json.loads(run_cli("--format", "json", ".", cwd=repo).stdout)
    assert [f["path"] for f in folder["files"]] == ["src/train.py"]
    # a file named explicitly is linted, unless --force-exclude (what the pre-commit hook passes)
    assert run_cli("third_party/vendored.py", cwd=repo).returncode == 1
    assert run_cli("--force-exclude", "third_party/vendored.py", cwd=repo).returncode == 0


def test_exclude_replaces_the_defaults(repo):
    write(repo / "build" / "gen.py", BAD_SCRIPT)
    write(repo / "pyproject.toml", '[tool.ddplint]\nexclude = ["src"]\n')
    paths = [f["path"] for f in json.loads(run_cli("--format", "json", ".", cwd=repo).stdout)["files"]]
    assert paths == ["build/gen.py"]


# ---------------------------------------------------------------------- suppressions
SUPPRESSED = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
a = model.to("cuda:0")  # noqa: DDP007
b = model.to("cuda:0")  # noqa
c = model.to("cuda:0")  # noqa: DDP005
d = model.to("cuda:0")  # noqa:DDP005,DDP007
e = model.to("cuda:0"); s = "# noqa"
f = DDP(m, find_unused_parameters=True)  # NOQA: ddp005
"""


def test_line_noqa(lint):
    result = lint(SUPPRESSED, select=["DDP005", "DDP007"])
    assert [(d.line, d.code) for d in result.diagnostics] == [(6, "DDP007"), (8, "DDP007")]


def test_file_level_noqa(lint):
    import re

    silenced = "# ddplint: noqa: DDP007\n" + re.sub(r"  # (noqa|NOQA).*", "", SUPPRESSED)
    assert [d.code for d in lint(silenced, select=["DDP005", "DDP007"]).diagnostics] == ["DDP005"]
    everything = "# ddplint: noqa\n" + SUPPRESSED
    assert lint(everything).diagnostics == []
    # a trailing comment is not a file-level suppression
    trailing = SUPPRESSED.replace("import torch\n", "import torch  # ddplint: noqa: DDP007\n", 1)
    assert any(d.code == "DDP007" for d in lint(trailing, select=["DDP007"]).diagnostics)


def test_noqa_in_a_file_that_does_not_tokenize(lint):
    broken = "import torch.distributed as dist\nx.cuda()\ndef f(:  # noqa: DDP000\n"
    assert lint(broken, select=["DDP000"]).diagnostics == []
