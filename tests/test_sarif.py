"""SARIF 2.1.0 output, validated against the official schema
(../shared/schemas/sarif-schema-2.1.0.json), and its fingerprints.

Also the fix -> SARIF ``fixes`` helper on a real ``Fix`` (no rule of this branch
has a fix yet) and the GitHub workflow-command escaping.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddplint.diagnostics import Diagnostic, FileResult
from ddplint.engine import RunResult
from ddplint.fingerprints import file_fingerprints, fingerprint
from ddplint.fixes import SAFE, Edit, Fix
from tests.helpers import BAD_SCRIPT, FIRST_RULES, run_cli, write

SCHEMA = Path(__file__).resolve().parents[2] / "shared" / "schemas" / "sarif-schema-2.1.0.json"


def validate(log: dict) -> None:
    """Every SARIF log of these tests goes through the official schema."""
    jsonschema = pytest.importorskip("jsonschema")
    if not SCHEMA.exists():
        pytest.skip(f"the SARIF 2.1.0 schema is not at {SCHEMA} (it lives in the shared folder beside the repo)")
    jsonschema.validate(log, json.loads(SCHEMA.read_text(encoding="utf-8")))


def sarif(*args, cwd) -> tuple[dict, int]:
    result = run_cli("--format", "sarif", "--no-cache", *args, cwd=cwd)
    log = json.loads(result.stdout)
    validate(log)
    return log, result.returncode


def test_driver_rules_results_and_invocation(tmp_path):
    write(tmp_path / "pkg" / "train.py", BAD_SCRIPT)
    log, code = sarif("--select", FIRST_RULES, ".", cwd=tmp_path)
    assert code == 1
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    ddp007 = next(rule for rule in rules if rule["id"] == "DDP007")
    assert ddp007["name"] == "hardcoded-device"
    assert ddp007["shortDescription"]["text"] and ddp007["fullDescription"]["text"]
    assert ddp007["helpUri"].startswith("file://")
    assert ddp007["defaultConfiguration"] == {"level": "warning"}
    assert "ddp-context" in ddp007["properties"]["tags"]

    assert [(r["ruleId"], r["level"]) for r in run["results"]] == [("DDP005", "note"), ("DDP007", "warning")]
    for item in run["results"]:
        assert rules[item["ruleIndex"]]["id"] == item["ruleId"]
    location = run["results"][1]["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "pkg/train.py", "uriBaseId": "%SRCROOT%"}
    assert location["region"] == {"startLine": 7, "startColumn": 18, "endLine": 7, "endColumn": 26}
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.resolve().as_uri() + "/"
    assert run["invocations"] == [{"executionSuccessful": True, "exitCode": 1}]


def test_clean_run_and_exit_zero(tmp_path):
    write(tmp_path / "ok.py", "print('hello')\n")
    log, code = sarif("ok.py", cwd=tmp_path)
    assert code == 0
    assert log["runs"][0]["results"] == []
    assert log["runs"][0]["invocations"] == [{"executionSuccessful": True, "exitCode": 0}]


def test_syntax_errors_are_results_of_rule_ddp000(tmp_path):
    write(tmp_path / "broken.py", "import torch.distributed as dist\nmodel.cuda(\n")
    log, _ = sarif("--select", "DDP000", "broken.py", cwd=tmp_path)
    (result,) = log["runs"][0]["results"]
    assert result["ruleId"] == "DDP000" and result["level"] == "error"


def test_fingerprints_survive_lines_inserted_above(tmp_path):
    write(tmp_path / "train.py", BAD_SCRIPT)
    before, _ = sarif("--select", FIRST_RULES, "train.py", cwd=tmp_path)
    write(tmp_path / "train.py", '"""Training entry point."""\n# launched by torchrun\n\n' + BAD_SCRIPT)
    after, _ = sarif("--select", FIRST_RULES, "train.py", cwd=tmp_path)

    def keyed(log):
        return [(r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["startLine"],
                 r["partialFingerprints"]["ddplint/v1"]) for r in log["runs"][0]["results"]]

    old, new = keyed(before), keyed(after)
    assert [line for _, line, _ in new] == [line + 3 for _, line, _ in old]
    assert [(rule, key) for rule, _, key in new] == [(rule, key) for rule, _, key in old]
    assert len({key for _, _, key in new}) == 2


def test_fingerprints_tell_identical_lines_apart_and_change_with_the_line():
    found = [Diagnostic(3, 10, 3, 18, "DDP007", "hardcoded-device", "warning", "m"),
             Diagnostic(7, 12, 7, 20, "DDP007", "hardcoded-device", "warning", "m")]
    keys = file_fingerprints("train.py", found, {3: 'model.to("cuda:0")', 7: '  model.to("cuda:0")  '})
    assert keys[0] != keys[1]  # same normalised line: occurrence 0 and 1
    assert keys[1] == fingerprint("DDP007", "train.py", 'model.to("cuda:0")', 1)
    assert fingerprint("DDP007", "train.py", 'model.to("cuda:1")', 0) != keys[0]
    assert fingerprint("DDP007", "other.py", 'model.to("cuda:0")', 0) != keys[0]
    assert fingerprint("DDP019", "train.py", 'model.to("cuda:0")', 0) != keys[0]


def test_a_fix_becomes_sarif_fixes(tmp_path, monkeypatch):
    """The Fix model through the SARIF reporter (schema-checked)."""
    from ddplint.reporters.sarif import document

    monkeypatch.chdir(tmp_path)
    fix = Fix('Add map_location="cpu"', SAFE, (Edit(3, 22, 3, 22, ', map_location="cpu"'),))
    finding = Diagnostic(3, 9, 3, 31, "DDP019", "load-without-map-location", "warning",
                         "torch.load without map_location", fix)
    file = FileResult("train.py", [finding], parsed=True,
                      source_lines={3: 'state = torch.load("ckpt.pt")'})
    log = document(RunResult(files=[file]), exit_code=1)
    validate(log)
    (result,) = log["runs"][0]["results"]
    assert result["fixes"] == [{
        "description": {"text": 'Add map_location="cpu"'},
        "artifactChanges": [{
            "artifactLocation": {"uri": "train.py", "uriBaseId": "%SRCROOT%"},
            "replacements": [{"deletedRegion": {"startLine": 3, "startColumn": 22, "endLine": 3, "endColumn": 22},
                              "insertedContent": {"text": ', map_location="cpu"'}}],
        }],
    }]


def test_a_crashed_rule_is_a_tool_notification_not_a_result(tmp_path, monkeypatch):
    from ddplint.diagnostics import INTERNAL_ERROR
    from ddplint.reporters.sarif import document

    monkeypatch.chdir(tmp_path)
    crash = Diagnostic(1, 1, 1, 1, INTERNAL_ERROR, INTERNAL_ERROR, "error",
                       "rule DDP007 (hardcoded-device) failed on this file: KeyError: 'x'; please report it")
    log = document(RunResult(files=[FileResult("train.py", [crash], parsed=True)]), exit_code=2)
    validate(log)
    run = log["runs"][0]
    assert run["results"] == []
    (invocation,) = run["invocations"]
    assert invocation["exitCode"] == 2 and invocation["executionSuccessful"] is False
    assert invocation["toolExecutionNotifications"][0]["message"]["text"].startswith("rule DDP007")


# ---------------------------------------------------------------------- GitHub
def test_github_workflow_commands_escape_data_and_properties(tmp_path):
    """Workflow-command rules: %, CR and LF escaped in the message; also : and ,
    in properties; severities error / warning / notice; title is the rule id."""
    from ddplint.reporters import github

    findings = [
        Diagnostic(2, 1, 2, 5, "DDP010", "rank-conditional-collective", "error", "50% of ranks: hang,\nreally"),
        Diagnostic(3, 1, 3, 5, "DDP007", "hardcoded-device", "warning", "w"),
        Diagnostic(4, 1, 4, 5, "DDP005", "find-unused-parameters", "info", "i\r"),
    ]
    import io

    out = io.StringIO()
    github.report(RunResult(files=[FileResult("dir,1/a:b.py", findings)]), out)
    lines = out.getvalue().splitlines()
    assert lines[0] == ("::error file=dir%2C1/a%3Ab.py,line=2,col=1,endLine=2,endColumn=5,title=DDP010"
                        "::50%25 of ranks: hang,%0Areally (rank-conditional-collective)")
    assert lines[1].startswith("::warning ") and ",title=DDP007::" in lines[1]
    assert lines[2].startswith("::notice ") and lines[2].endswith("::i%0D (find-unused-parameters)")
