"""Jupyter notebooks: linted cell by cell, reported at cell and line.

fixtures/notebook_bad.ipynb has a hard-coded device (DDP007) on line 2 of its
third code cell (which is also the notebook's cell 3), under a ``%%time`` cell
magic; its other cells hold line magics and shell escapes.
"""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

from ddplint.notebooks import NotebookError, mask_magics, read_notebook
from tests.helpers import run_cli, write
from tests.test_sarif import validate

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "notebook_bad.ipynb"


def notebook(*cells, language="python") -> str:
    """An nbformat 4 notebook; each cell is (cell_type, source)."""
    return json.dumps({
        "cells": [{"cell_type": kind, "metadata": {}, "source": source,
                   **({"outputs": [], "execution_count": None} if kind == "code" else {})}
                  for kind, source in cells],
        "metadata": {"kernelspec": {"name": language, "language": language, "display_name": language}},
        "nbformat": 4, "nbformat_minor": 5,
    }, indent=1)


@pytest.fixture
def folder(tmp_path):
    shutil.copy(FIXTURE, tmp_path / "train.ipynb")
    write(tmp_path / "util.py", "print('no findings here')\n")
    return tmp_path


def test_text_names_the_cell_and_line(folder):
    result = run_cli("--no-cache", ".", cwd=folder)
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines()[0] == (
        "train.ipynb:cell 3:line 2:col 38: DDP007 hard-coded device index: every rank puts its tensors on cuda:0; "
        "derive the index from LOCAL_RANK")
    assert '2 | model = DDP(torch.nn.Linear(8, 2).to("cuda:0"))' in result.stdout
    assert "in 2 files" in result.stdout


def test_json_range_is_relative_to_the_cell(folder):
    document = json.loads(run_cli("--no-cache", "--format", "json", ".", cwd=folder).stdout)
    (entry,) = document["files"]
    assert entry["path"] == "train.ipynb"
    (diagnostic,) = entry["diagnostics"]
    assert diagnostic["code"] == "DDP007"
    assert diagnostic["data"]["cell"] == 3
    assert diagnostic["range"] == {"start": {"line": 1, "character": 37}, "end": {"line": 1, "character": 45}}


def test_sarif_points_into_the_file_and_names_the_cell(folder):
    log = json.loads(run_cli("--no-cache", "--format", "sarif", ".", cwd=folder).stdout)
    validate(log)
    (result,) = log["runs"][0]["results"]
    location = result["locations"][0]
    raw_lines = (folder / "train.ipynb").read_text(encoding="utf-8").splitlines()
    file_line = next(number for number, text in enumerate(raw_lines, start=1) if "cuda:0" in text)
    assert location["physicalLocation"]["artifactLocation"]["uri"] == "train.ipynb"
    assert location["physicalLocation"]["region"] == {"startLine": file_line, "endLine": file_line}
    assert location["properties"] == {"cell": 3, "cellRegion": {"startLine": 2, "startColumn": 38,
                                                                "endLine": 2, "endColumn": 46}}
    assert location["message"]["text"] == "cell 3, line 2, column 38"


def test_github_annotation_names_the_cell(folder):
    result = run_cli("--no-cache", "--format", "github", ".", cwd=folder)
    (line,) = result.stdout.splitlines()
    assert line.startswith("::warning file=train.ipynb,line=")
    assert "title=DDP007::cell 3, line 2, column 38: hard-coded device index" in line


def test_no_notebooks_and_include_settings_skip_them(folder):
    result = run_cli("--no-cache", "--no-notebooks", ".", cwd=folder)
    assert result.returncode == 0 and "in 1 file " in result.stdout
    (folder / ".ddplint.yaml").write_text('include: ["*.py"]\n')
    result = run_cli("--no-cache", ".", cwd=folder)
    assert result.returncode == 0 and "in 1 file " in result.stdout
    (folder / ".ddplint.yaml").write_text('include: ["*.py"]\nextend-include: ["train.ipynb"]\n')
    assert run_cli("--no-cache", ".", cwd=folder).returncode == 1


def test_a_malformed_notebook_is_one_diagnostic(tmp_path):
    write(tmp_path / "broken.ipynb", '{"cells": [ {"cell_type": "code", "source": ')
    write(tmp_path / "old.ipynb", json.dumps({"worksheets": [], "nbformat": 3}))
    result = run_cli("--no-cache", "--no-show-source", ".", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("broken.ipynb:1:1: DDP000 cannot read notebook: invalid JSON")
    assert lines[1].startswith("old.ipynb:1:1: DDP000 cannot read notebook: no list of cells")
    assert len(lines) == 3


def test_cells_are_numbered_as_the_notebook_shows_them(tmp_path):
    source = notebook(("markdown", "# Title"), ("code", "import torch.distributed as dist\n"),
                      ("raw", "x"), ("code", ["x = 1\n", 'model = model.to("cuda:0")']))
    parsed = read_notebook(source)
    assert parsed.source == 'import torch.distributed as dist\nx = 1\nmodel = model.to("cuda:0")\n'
    assert [(where.cell, where.line) for where in parsed.lines] == [(2, 1), (4, 1), (4, 2)]
    raw = source.splitlines()
    assert raw[parsed.lines[2].file_line - 1].strip() == r'"model = model.to(\"cuda:0\")"'

    write(tmp_path / "nb.ipynb", source)
    result = run_cli("--no-cache", "--no-show-source", "nb.ipynb", cwd=tmp_path)
    assert result.stdout.startswith("nb.ipynb:cell 4:line 2:col 18: DDP007")


def test_magics_are_masked_in_place():
    cell = ["%matplotlib inline", "!pip install x", "files = !ls", "for i in range(3):",
            "    %time f(i)", "model?", "%run -i setup.py \\", "    --fast", "y = 1 % 2"]
    masked = mask_magics(cell)
    assert masked == ["pass", "pass", "files = None", "for i in range(3):", "    pass", "pass", "pass",
                      "#         ", "y = 1 % 2"]
    ast.parse("\n".join(masked))
    assert mask_magics(["%%time", "x = 1"]) == ["#     ", "x = 1"]
    assert mask_magics(["%%bash", "echo hi"]) == ["#     ", "#      "]


def test_other_kernels_are_skipped_and_bad_cells_are_errors():
    assert read_notebook(notebook(("code", "library(torch)"), language="R")) is None
    with pytest.raises(NotebookError, match="cell 1"):
        read_notebook(json.dumps({"cells": [{"cell_type": "code", "source": 3}], "nbformat": 4, "metadata": {}}))


def test_cached_results_keep_the_cells(folder):
    first = run_cli(".", cwd=folder)
    second = run_cli(".", cwd=folder)  # every result from .ddplint_cache
    assert (folder / ".ddplint_cache").is_dir()
    assert second.stdout == first.stdout and "train.ipynb:cell 3:line 2:col 38: DDP007" in second.stdout
