"""SARIF 2.1.0, for code-scanning dashboards (checked against the schema in tests).

One run: ``tool.driver.rules`` describes every rule; each finding is a result
with a physical location (1-based region, end column exclusive, columns in code
points), ``partialFingerprints`` that survive edits above it
(ddplint.fingerprints), and its ``fixes`` when it has one. ``invocations``
carries the exit code; a rule that crashed on a file is a tool execution
notification there, not a result.

Paths relative to the working directory are given against ``%SRCROOT%`` (the
working directory, declared in ``originalUriBaseIds``); run ddplint from the
repository root in CI so that they are relative to it.

Notebook findings point at the line of the ``.ipynb`` file that holds the code;
the cell and the range in the cell are in the location's ``message`` and
``properties`` (``cell``, ``cellRegion``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, TextIO
from urllib.parse import quote

from ddplint import __version__
from ddplint.diagnostics import INTERNAL_ERROR, Diagnostic, FileResult
from ddplint.engine import RunResult
from ddplint.fingerprints import VERSION as FINGERPRINT_VERSION
from ddplint.fingerprints import file_fingerprints
from ddplint.fixes import Fix
from ddplint.registry import all_rules

LEVEL = {"error": "error", "warning": "warning", "info": "note"}
SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SRCROOT = "%SRCROOT%"
FINGERPRINT_KEY = f"ddplint/v{FINGERPRINT_VERSION}"


def rule_descriptor(rule) -> dict:
    tags = ["pytorch", "distributed"] + (["ddp-context"] if rule.needs_ddp_context else [])
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.message},
        "fullDescription": {"text": rule.summary() or rule.message},
        "help": {"text": rule.documentation(), "markdown": rule.documentation()},
        "helpUri": rule.url(),
        "defaultConfiguration": {"level": LEVEL[rule.severity]},
        "properties": {"tags": tags},
    }


def artifact_location(path: str) -> dict:
    """Relative paths against %SRCROOT%; absolute ones as file URIs."""
    if path.startswith("<"):  # stdin without --stdin-filename
        return {"uri": quote(path.strip("<>"))}
    candidate = Path(path)
    if candidate.is_absolute():
        return {"uri": candidate.as_uri()}
    return {"uri": quote(candidate.as_posix()), "uriBaseId": SRCROOT}


def region(line: int, column: int, end_line: int, end_column: int) -> dict:
    return {"startLine": line, "startColumn": column, "endLine": end_line, "endColumn": end_column}


def sarif_fix(path: str, fix: Fix) -> dict:
    """A ``Fix`` (ddplint.fixes) as a SARIF fix: its edits as replacements."""
    return {
        "description": {"text": fix.description},
        "artifactChanges": [{
            "artifactLocation": artifact_location(path),
            "replacements": [{
                "deletedRegion": region(edit.line, edit.column, edit.end_line, edit.end_column),
                "insertedContent": {"text": edit.new_text},
            } for edit in fix.edits],
        }],
    }


def _location(file: FileResult, d: Diagnostic) -> dict:
    where = file.cells.get(d.line)
    if where is None:
        return {"physicalLocation": {"artifactLocation": artifact_location(file.path),
                                     "region": region(d.line, d.column, d.end_line, d.end_column)}}
    # A notebook: the region is the line of the .ipynb file; the cell says the rest.
    end = file.cells.get(d.end_line, where)
    end_line_in_cell = end.line if end.cell == where.cell else where.line
    return {
        "physicalLocation": {
            "artifactLocation": artifact_location(file.path),
            "region": {"startLine": where.file_line, "endLine": max(end.file_line, where.file_line)},
        },
        "message": {"text": f"cell {where.cell}, line {where.line}, column {d.column}"},
        "properties": {
            "cell": where.cell,
            "cellRegion": region(where.line, d.column, end_line_in_cell, d.end_column),
        },
    }


def _result(file: FileResult, d: Diagnostic, rule_index: Optional[int], fingerprint: str) -> dict:
    item = {
        "ruleId": d.code,
        "level": LEVEL[d.severity],
        "message": {"text": d.message},
        "locations": [_location(file, d)],
        "partialFingerprints": {FINGERPRINT_KEY: fingerprint},
    }
    if rule_index is not None:
        item["ruleIndex"] = rule_index
    if d.fix is not None and d.line not in file.cells:  # notebook edits would need the JSON rewritten
        item["fixes"] = [sarif_fix(file.path, d.fix)]
    return item


def _notification(file: FileResult, d: Diagnostic) -> dict:
    return {
        "level": "error",
        "message": {"text": d.message},
        "locations": [{"physicalLocation": {"artifactLocation": artifact_location(file.path)}}],
    }


def document(result: RunResult, exit_code: Optional[int] = None) -> dict:
    rules = list(all_rules())
    index_of = {rule.code: i for i, rule in enumerate(rules)}
    results, notifications = [], []
    for file in result.files:
        findings = [d for d in file.diagnostics if d.code != INTERNAL_ERROR]
        notifications.extend(_notification(file, d) for d in file.diagnostics if d.code == INTERNAL_ERROR)
        keys = file_fingerprints(file.path, findings, file.source_lines)
        results.extend(_result(file, d, index_of.get(d.code), key) for d, key in zip(findings, keys))
    notifications.extend({"level": "error", "message": {"text": problem}} for problem in result.errors)
    invocation = {"executionSuccessful": exit_code in (0, 1) if exit_code is not None
                  else not notifications}
    if exit_code is not None:
        invocation["exitCode"] = exit_code
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "ddplint",
                "version": __version__,
                "informationUri": "https://pypi.org/project/ddplint/",
                "rules": [rule_descriptor(rule) for rule in rules],
            }},
            "originalUriBaseIds": {SRCROOT: {"uri": _folder_uri(Path.cwd())}},
            "invocations": [invocation],
            "results": results,
            "columnKind": "unicodeCodePoints",
        }],
    }


def _folder_uri(folder: Path) -> str:
    uri = folder.resolve().as_uri()
    return uri if uri.endswith("/") else uri + "/"


def report(result: RunResult, stream: TextIO, exit_code: Optional[int] = None, **_: object) -> None:
    json.dump(document(result, exit_code), stream, indent=2)
    stream.write("\n")
