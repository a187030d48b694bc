"""SARIF 2.1.0, for code-scanning dashboards (checked against the schema in tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TextIO

from ddplint import __version__
from ddplint.engine import RunResult
from ddplint.registry import all_rules

LEVEL = {"error": "error", "warning": "warning", "info": "note"}
SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _rule_descriptor(rule) -> dict:
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.message},
        "fullDescription": {"text": rule.summary() or rule.message},
        "help": {"text": rule.documentation(), "markdown": rule.documentation()},
        "helpUri": rule.url(),
        "defaultConfiguration": {"level": LEVEL[rule.severity]},
    }


def document(result: RunResult) -> dict:
    rules = list(all_rules())
    index_of = {rule.code: i for i, rule in enumerate(rules)}
    results = []
    for file in result.files:
        uri = Path(file.path).as_posix() if not file.path.startswith("<") else file.path
        for d in file.diagnostics:
            item = {
                "ruleId": d.code,
                "level": LEVEL[d.severity],
                "message": {"text": d.message},
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": {"uri": uri},
                        "region": {
                            "startLine": d.line, "startColumn": d.column,
                            "endLine": d.end_line, "endColumn": d.end_column,
                        },
                    }
                }],
            }
            if d.code in index_of:
                item["ruleIndex"] = index_of[d.code]
            if d.fix is not None:
                item["fixes"] = [d.fix.to_sarif(uri)]
            results.append(item)
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "ddplint",
                "version": __version__,
                "informationUri": "https://pypi.org/project/ddplint/",
                "rules": [_rule_descriptor(rule) for rule in rules],
            }},
            "results": results,
            "columnKind": "unicodeCodePoints",
        }],
    }


def report(result: RunResult, stream: TextIO, **_: object) -> None:
    json.dump(document(result), stream, indent=2)
    stream.write("\n")
