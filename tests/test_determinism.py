"""Determinism (issue 10): the same input gives byte-identical output across runs,
across ``--jobs`` values, and between a cold and a warm result cache."""

import shutil
from pathlib import Path

import pytest

from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Every fixture (single scripts and project folders) plus a few odd files, so
    that DDP000 notices and files the prefilter skips are part of the output."""
    folder = tmp_path_factory.mktemp("determinism")
    shutil.copytree(ROOT / "fixtures", folder / "fixtures")
    (folder / "fixtures" / "broken.py").write_text("import torch.distributed as dist\ndef f(:\n")
    (folder / "fixtures" / "latin.py").write_bytes(b"import torch\nx = '\xff'\n")
    (folder / "fixtures" / "plain.py").write_text("print('hello')\n")
    return folder


def _run(corpus: Path, *args: str) -> str:
    result = run_cli("--isolated", "--statistics", *args, "fixtures", cwd=corpus)
    assert result.returncode == 1, result.stderr
    assert result.stderr == ""
    return result.stdout


@pytest.mark.parametrize("fmt", ["text", "json", "sarif"])
def test_same_output_across_runs_and_jobs(corpus, fmt):
    first = _run(corpus, "--no-cache", "--format", fmt, "--jobs", "1")
    assert "DDP000" in first and "DDP017" in first
    assert _run(corpus, "--no-cache", "--format", fmt, "--jobs", "1") == first
    assert _run(corpus, "--no-cache", "--format", fmt, "--jobs", "2") == first
    assert _run(corpus, "--no-cache", "--format", fmt, "--jobs", "3") == first


def test_same_output_cold_and_warm_cache(corpus, tmp_path):
    cache = tmp_path / "cache"
    uncached = _run(corpus, "--no-cache", "--format", "json", "--jobs", "2")
    cold = _run(corpus, "--cache-dir", str(cache), "--format", "json", "--jobs", "2")
    assert any(cache.rglob("*.json")), "the cold run filled the cache"
    warm = _run(corpus, "--cache-dir", str(cache), "--format", "json", "--jobs", "1")
    assert cold == uncached
    assert warm == uncached
