"""Packaging: rules/ ships as ddplint.rules in a wheel and in an editable install,
and the pre-commit hook works through the real `pre-commit`."""

import os
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

from tests.helpers import BAD_SCRIPT, CLEAN_SCRIPT, write

ROOT = Path(__file__).resolve().parents[1]
RULE_FILES = sorted(p.stem.split("_")[0].upper() for p in (ROOT / "rules").glob("ddp[0-9]*.py"))


def _run(args, cwd=None, env=None, timeout=600):
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _fresh_venv(where: Path) -> Path:
    venv.EnvBuilder(with_pip=True, clear=True).create(where)
    return where / "bin" / "python"


def _listed_codes(python: Path) -> list[str]:
    # Run outside the checkout so that the installed package, not ./ddplint, is imported.
    result = _run([str(python), "-m", "ddplint", "rules", "--format", "json"], cwd=python.parents[2])
    assert result.returncode == 0, result.stderr
    import json

    return sorted(row["code"] for row in json.loads(result.stdout))


def test_every_subpackage_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = {"ddplint." + ".".join(p.parent.relative_to(ROOT / "ddplint").parts)
               for p in (ROOT / "ddplint").rglob("__init__.py")}
    on_disk = {name.rstrip(".") for name in on_disk} | {"ddplint.rules"}
    assert on_disk <= listed, f"add to [tool.setuptools] packages: {sorted(on_disk - listed)}"
    assert config["package-dir"]["ddplint.rules"] == "rules"


def test_the_running_install_finds_every_rule():
    from ddplint.registry import all_rules

    assert [rule.code for rule in all_rules()] == RULE_FILES


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_lists_every_rule(tmp_path):
    dist = tmp_path / "dist"
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist),
                  str(ROOT)])
    assert built.returncode == 0, built.stderr
    wheel = next(dist.glob("ddplint-*.whl"))
    python = _fresh_venv(tmp_path / "venv")
    installed = _run([str(python), "-m", "pip", "install", "-q", str(wheel)])
    assert installed.returncode == 0, installed.stderr
    assert _listed_codes(python) == RULE_FILES
    # the console script works and the example is linted
    script = tmp_path / "venv" / "bin" / "ddplint"
    write(tmp_path / "bad.py", BAD_SCRIPT)
    result = _run([str(script), "--no-show-source", str(tmp_path / "bad.py")])
    assert result.returncode == 1 and "DDP007" in result.stdout


@pytest.mark.slow
def test_editable_install_in_a_fresh_venv_lists_every_rule(tmp_path):
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", "*.egg-info", "__pycache__", "build"))
    python = _fresh_venv(tmp_path / "venv")
    installed = _run([str(python), "-m", "pip", "install", "-q", "-e", str(source)])
    assert installed.returncode == 0, installed.stderr
    assert _listed_codes(python) == RULE_FILES
    located = _run([str(python), "-c", "import ddplint.rules as r; print(r.__path__[0])"], cwd=tmp_path)
    assert Path(located.stdout.strip()).resolve() == (source / "rules").resolve()


@pytest.mark.slow
def test_pre_commit_hook_fails_then_passes(tmp_path):
    if shutil.which("pre-commit") is None and not _run([sys.executable, "-m", "pre_commit", "--version"]).returncode == 0:
        pytest.skip("pre-commit is not installed")
    work = tmp_path / "user-repo"
    work.mkdir()
    env = dict(os.environ, PRE_COMMIT_HOME=str(tmp_path / "pre-commit-home"), GIT_AUTHOR_NAME="t",
               GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")
    _run(["git", "init", "-q"], cwd=work, env=env)
    script = write(work / "train.py", BAD_SCRIPT)
    _run(["git", "add", "train.py"], cwd=work, env=env)

    def hook():
        return _run([sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), "ddplint", "--files",
                     "train.py"], cwd=work, env=env)

    failing = hook()
    assert failing.returncode == 1, failing.stdout + failing.stderr
    assert "train.py:7:18: DDP007 hard-coded device index" in failing.stdout

    script.write_text(CLEAN_SCRIPT)
    _run(["git", "add", "train.py"], cwd=work, env=env)
    passing = hook()
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert "Passed" in passing.stdout


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


@pytest.mark.slow
def test_pre_commit_fix_hook_fixes_then_passes(tmp_path):
    """The `ddplint-fix` hook applies the safe fix (pre-commit fails the run
    because a file changed), and the next run passes on the fixed file."""
    if shutil.which("pre-commit") is None and not _run([sys.executable, "-m", "pre_commit", "--version"]).returncode == 0:
        pytest.skip("pre-commit is not installed")
    work = tmp_path / "user-repo"
    work.mkdir()
    env = dict(os.environ, PRE_COMMIT_HOME=str(tmp_path / "pre-commit-home"), GIT_AUTHOR_NAME="t",
               GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")
    _run(["git", "init", "-q"], cwd=work, env=env)
    script = write(work / "train.py", AMP_SCRIPT)
    _run(["git", "add", "train.py"], cwd=work, env=env)

    def hook():
        return _run([sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), "ddplint-fix", "--files",
                     "train.py"], cwd=work, env=env)

    fixing = hook()
    assert fixing.returncode == 1, fixing.stdout + fixing.stderr
    assert "files were modified by this hook" in fixing.stdout
    assert "Fixed 1 finding in 1 file." in fixing.stdout
    assert script.read_text() == AMP_SCRIPT.replace(
        "    torch.nn.utils.clip", "    scaler.unscale_(optimizer)\n    torch.nn.utils.clip")

    _run(["git", "add", "train.py"], cwd=work, env=env)
    passing = hook()
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert "Passed" in passing.stdout
