"""Output formats: LSP-shaped JSON (checked with lsprotocol), SARIF (checked with its schema)."""

import json
from pathlib import Path

import pytest

from tests.helpers import BAD_SCRIPT, FIRST_RULES, run_cli, write

SCHEMA = Path(__file__).resolve().parents[2] / "shared" / "schemas" / "sarif-schema-2.1.0.json"


@pytest.fixture
def project(tmp_path):
    write(tmp_path / "a" / "bad.py", BAD_SCRIPT)
    write(tmp_path / "b.py", BAD_SCRIPT.replace("find_unused_parameters=True", "find_unused_parameters=False"))
    write(tmp_path / "broken.py", "import torch.distributed as dist\nmodel.cuda(\n")
    return tmp_path


def test_json_document_shape_and_lsp_diagnostics(project):
    from lsprotocol import converters, types

    result = run_cli("--select", "DDP000," + FIRST_RULES, "--format", "json", ".", cwd=project)
    assert result.returncode == 1
    document = json.loads(result.stdout)
    assert document["tool"]["name"] == "ddplint" and document["tool"]["version"]
    assert [f["path"] for f in document["files"]] == ["a/bad.py", "b.py", "broken.py"]
    converter = converters.get_converter()
    for entry in document["files"]:
        assert entry["uri"] == (project / entry["path"]).resolve().as_uri()
        for raw in entry["diagnostics"]:
            diagnostic = converter.structure(raw, types.Diagnostic)
            assert diagnostic.source == "ddplint"
            assert diagnostic.severity in (types.DiagnosticSeverity.Error, types.DiagnosticSeverity.Warning,
                                           types.DiagnosticSeverity.Information)
            assert diagnostic.code_description.href.startswith("file://")
            assert raw["data"]["name"]
    first = document["files"][0]["diagnostics"]
    assert [(d["code"], d["range"]["start"]["line"], d["range"]["start"]["character"]) for d in first] == [
        ("DDP005", 5, 26), ("DDP007", 6, 17)]
    assert document["summary"]["diagnostics"] == 4
    assert document["summary"]["by_code"] == {"DDP000": 1, "DDP005": 1, "DDP007": 2}


def test_sarif_validates_against_the_schema(project):
    jsonschema = pytest.importorskip("jsonschema")
    if not SCHEMA.exists():
        pytest.skip(f"SARIF schema not found at {SCHEMA}")
    result = run_cli("--select", "DDP000," + FIRST_RULES, "--format", "sarif", ".", cwd=project)
    log = json.loads(result.stdout)
    schema = json.loads(SCHEMA.read_text())
    jsonschema.validate(log, schema)
    results = log["runs"][0]["results"]
    assert len(results) == 4
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    for item in results:
        assert rules[item["ruleIndex"]]["id"] == item["ruleId"]
    assert {r["level"] for r in results} == {"error", "warning", "note"}


def test_empty_json_document_for_clean_input(tmp_path):
    write(tmp_path / "ok.py", "print('hello')\n")
    document = json.loads(run_cli("--format", "json", "ok.py", cwd=tmp_path).stdout)
    assert document["files"] == []
    assert document["summary"]["files_checked"] == 1
