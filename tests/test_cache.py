"""The content-hash cache: hits when nothing changed, misses exactly when the file,
the configuration, the version or the project's facts change; corrupt entries are
ignored and rewritten; concurrent runs can share it.

A hit is made visible by tampering with the stored entry: a run that prints the
tampered message read the cache; a run that does not, re-linted the file.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import ddplint.cache
from ddplint.config import Settings
from ddplint.engine import lint_files, lint_paths
from tests.helpers import BAD_SCRIPT, run_cli, write

TAMPERED = "served from the cache"


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.rglob("*.json"))


def _tamper(cache: Path) -> None:
    for entry in _entries(cache):
        stored = json.loads(entry.read_text())
        for diagnostic in stored["diagnostics"]:
            diagnostic["message"] = TAMPERED
        entry.write_text(json.dumps(stored))


def _lint(folder: Path, cache: Path, select=("ALL",)):
    settings = Settings(select=tuple(select), root=folder)
    files = sorted(folder.glob("*.py"))
    shown = {path: path.name for path in files}
    return lint_files(files, settings, jobs=1, display=shown, cache_dir=cache)


def _messages(results):
    return [d.message for result in results for d in result.diagnostics]


@pytest.fixture
def project(tmp_path):
    folder = tmp_path / "proj"
    write(folder / "train.py", BAD_SCRIPT)
    return folder, tmp_path / "cache"


def test_warm_run_reads_the_cache(project):
    folder, cache = project
    write(folder / "launch.py", BAD_SCRIPT)  # two files: the project digest is part of the keys
    cold = _messages(_lint(folder, cache))
    assert cold and TAMPERED not in cold
    assert _entries(cache)
    _tamper(cache)
    assert set(_messages(_lint(folder, cache))) == {TAMPERED}


def test_editing_the_file_invalidates_it(project):
    folder, cache = project
    _lint(folder, cache)
    _tamper(cache)
    (folder / "train.py").write_text(BAD_SCRIPT + "\n# edited\n")
    assert TAMPERED not in _messages(_lint(folder, cache))


def test_changing_the_configuration_invalidates(project):
    folder, cache = project
    _lint(folder, cache, select=["DDP005", "DDP007"])
    _tamper(cache)
    assert TAMPERED not in _messages(_lint(folder, cache, select=["DDP007"]))


def test_upgrading_the_version_invalidates(project, monkeypatch):
    folder, cache = project
    _lint(folder, cache)
    _tamper(cache)
    monkeypatch.setattr(ddplint.cache, "__version__", "99.0.0")
    assert TAMPERED not in _messages(_lint(folder, cache))
    assert (cache / "v99.0.0").is_dir()


def test_a_change_in_another_files_facts_invalidates(tmp_path):
    folder, cache = tmp_path / "proj", tmp_path / "cache"
    write(folder / "main.py", "import torch.distributed as dist\nfrom utils import finish_job\n\n"
                              "def main():\n    dist.init_process_group('gloo')\n    finish_job()\n")
    write(folder / "utils.py", "import torch.distributed as dist\n"
                               "def finish_job():\n    dist.destroy_process_group()\n")
    assert _messages(_lint(folder, cache, select=["DDP015"])) == []
    # main.py is unchanged, but the project no longer destroys the group.
    write(folder / "utils.py", "import torch.distributed as dist\ndef finish_job():\n    pass\n")
    results = _lint(folder, cache, select=["DDP015"])
    assert [(r.path, d.code) for r in results for d in r.diagnostics] == [("main.py", "DDP015")]


def test_corrupt_entries_are_ignored_and_rewritten(project):
    folder, cache = project
    expected = _messages(_lint(folder, cache))
    for entry in _entries(cache):
        entry.write_text("{not json")
    assert _messages(_lint(folder, cache)) == expected
    for entry in _entries(cache):
        json.loads(entry.read_text())  # rewritten whole


def test_concurrent_runs_share_the_cache(tmp_path):
    for index in range(30):
        write(tmp_path / "pkg" / f"m{index}.py", BAD_SCRIPT.replace("Net()", f"Net{index}()"))
    command = [sys.executable, "-m", "ddplint", "--format", "json", "-j", "2", "pkg"]
    runs = [subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outputs = [run.communicate(timeout=300)[0] for run in runs]
    assert outputs[0] == outputs[1] == outputs[2]
    assert json.loads(outputs[0])["summary"]["files_with_diagnostics"] == 30
    assert run_cli("--format", "json", "pkg", cwd=tmp_path).stdout == outputs[0]


def test_no_cache_writes_nothing(tmp_path):
    write(tmp_path / "train.py", BAD_SCRIPT)
    run_cli("--no-cache", "train.py", cwd=tmp_path)
    assert not (tmp_path / ".ddplint_cache").exists()
    run_cli("--cache-dir", "elsewhere", "train.py", cwd=tmp_path)
    assert (tmp_path / "elsewhere" / ".gitignore").read_text().strip().endswith("*")


def test_a_change_in_a_file_that_is_not_named_invalidates(tmp_path):
    """Pre-commit names one file; the project root's other files still count."""
    folder, cache = tmp_path / "proj", tmp_path / "cache"
    write(folder / "data.py", "from torch.utils.data import DataLoader, DistributedSampler\n"
                              "def build():\n    return DataLoader(ds, sampler=DistributedSampler(ds))\n")
    write(folder / "main.py", "import torch.distributed as dist\nfrom data import build\n"
                              "def main():\n    dist.init_process_group('nccl')\n"
                              "    for epoch in range(3):\n        run(build())\n")
    settings = Settings(select=("DDP008",), root=folder)

    def lint_data_alone():
        return _messages(lint_paths([folder / "data.py"], settings, cache_dir=cache))

    assert len(lint_data_alone()) == 1
    _tamper(cache)
    assert lint_data_alone() == [TAMPERED]  # warm: nothing changed
    write(folder / "main.py", "import torch.distributed as dist\nfrom data import build\n"
                              "def main():\n    dist.init_process_group('nccl')\n"
                              "    for epoch in range(3):\n        loader = build()\n"
                              "        loader.sampler.set_epoch(epoch)\n")
    assert lint_data_alone() == []
