"""Static findings of the script, joined to the measured checks.

The script is linted the way ``ddplint SCRIPT`` lints it (configuration found from the
script's folder, the named file linted even when an exclude matches it).  A failed check
confirms the findings of its rules, a passed one clears them:

    DDP002 train.py:57: confirmed — 4 all-reduce rounds per optimizer step in this run
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ddplint.runtime.smoke.gates import FAIL, PASS, Check

CONFIRMED, CLEARED = "confirmed", "cleared"


@dataclass
class Finding:
    code: str
    name: str
    severity: str
    path: str  # as displayed (relative to the working directory when inside it)
    line: int
    column: int
    message: str
    status: str | None = None  # confirmed | cleared | None (no check speaks to it)
    check: str | None = None
    evidence: str = ""

    def joined_line(self) -> str:
        return f"{self.code} {self.path}:{self.line}: {self.status} — {self.evidence}"

    def to_dict(self) -> dict:
        return {"code": self.code, "name": self.name, "severity": self.severity, "path": self.path,
                "line": self.line, "column": self.column, "message": self.message,
                "status": self.status, "check": self.check}


class LintError(Exception):
    """The configuration around the script is broken (ddplint would exit 2 on it too)."""


def lint_script(script: Path) -> list[Finding]:
    """Diagnostics of ``script`` through ddplint's public lint path, as ``ddplint SCRIPT``
    gives them: its configuration, the facts of its whole project, the result cache."""
    from ddplint.cache import CACHE_DIR_NAME
    from ddplint.config import ConfigError, load_settings
    from ddplint.discovery import PathError, discover, relative_display
    from ddplint.engine import default_jobs, lint_paths

    try:
        settings = load_settings(start=script.parent)
        found = discover([str(script)], settings)
    except (ConfigError, PathError) as error:
        raise LintError(str(error)) from error
    shown = {path: relative_display(path, settings.root) for path in found.files}
    results = lint_paths(found.files, settings, default_jobs(), cache_dir=settings.root / CACHE_DIR_NAME,
                         display=shown)
    findings = [Finding(d.code, d.name, d.severity, result.path, d.line, d.column, d.message)
                for result in results for d in result.diagnostics]
    return sorted(findings, key=lambda f: (f.path, f.line, f.column, f.code))


def join(findings: list[Finding], checks: list[Check]) -> None:
    """Mark each finding confirmed or cleared by the first check that speaks to its rule."""
    for check in checks:
        if check.verdict not in (FAIL, PASS) or not check.evidence:
            continue
        for finding in findings:
            if finding.code in check.rules and finding.status is None:
                finding.status = CONFIRMED if check.verdict == FAIL else CLEARED
                finding.check = check.name
                finding.evidence = check.evidence


def check_locations(check: Check, findings: list[Finding], cwd: Path) -> list[dict]:
    """The check's places for the report: the joined findings, then what the run observed."""
    out = [{"path": f.path, "line": f.line, "rule": f.code, "status": f.status, "message": f.joined_line()}
           for f in findings if f.check == check.name]
    for loc in check.locations:
        out.append({"path": display_path(loc["path"], cwd), "line": loc["line"], "rule": None,
                    "status": "observed", "message": loc["message"]})
    return out


def display_path(path: str, cwd: Path) -> str:
    try:
        return Path(path).resolve().relative_to(cwd.resolve()).as_posix()
    except ValueError:
        return path
