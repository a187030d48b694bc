"""The CLI contract of DESIGN.md: paths, subcommands, selection, formats, exit codes."""

import json
import os
import re

import pytest

from tests.helpers import BAD_SCRIPT, CLEAN_SCRIPT, FIRST_RULES, run_cli, write


@pytest.fixture
def project(tmp_path):
    write(tmp_path / "bad.py", BAD_SCRIPT)
    write(tmp_path / "clean.py", CLEAN_SCRIPT)
    return tmp_path


def test_findings_exit_1_with_path_line_col_code(project):
    result = run_cli("bad.py", cwd=project)
    assert result.returncode == 1, result.stderr
    assert "bad.py:6:27: DDP005 find_unused_parameters=True" in result.stdout
    assert "bad.py:7:18: DDP007 hard-coded device index" in result.stdout
    # code frame with a caret under the reported range
    assert '7 | model = model.to("cuda:0")' in result.stdout
    assert "  |                  ^^^^^^^^" in result.stdout


def test_clean_file_exits_0(project):
    result = run_cli("clean.py", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No diagnostics in 1 file" in result.stdout


def test_check_subcommand_is_the_default(project):
    assert run_cli("check", "bad.py", cwd=project).stdout == run_cli("bad.py", cwd=project).stdout


def test_a_path_named_like_a_subcommand_is_given_as_dot_slash(project):
    write(project / "rules" / "train.py", BAD_SCRIPT)
    result = run_cli("./rules", cwd=project)
    assert result.returncode == 1
    assert "rules/train.py:6:27: DDP005" in result.stdout


def test_folder_lint_is_sorted_and_deterministic(project):
    for index in range(12):
        write(project / "pkg" / f"m{index:02d}.py", BAD_SCRIPT)
    serial = run_cli("--format", "json", "-j", "1", ".", cwd=project)
    parallel = run_cli("--format", "json", "-j", "2", ".", cwd=project)
    assert serial.returncode == parallel.returncode == 1
    assert serial.stdout == parallel.stdout
    paths = [entry["path"] for entry in json.loads(serial.stdout)["files"]]
    assert paths == sorted(paths) and len(paths) == 13


def test_missing_path_is_a_one_line_error_exit_2(project):
    result = run_cli("nope.py", cwd=project)
    assert result.returncode == 2
    assert result.stderr.strip() == "ddplint: error: path not found: nope.py"


def test_unknown_rule_id_is_named_and_exits_2(project):
    result = run_cli("--select", "DDP999", "bad.py", cwd=project)
    assert result.returncode == 2
    assert "unknown rule id or prefix 'DDP999' in select" in result.stderr
    assert "Traceback" not in result.stderr


def test_select_prefix_ignore_and_extend_select(project):
    only_007 = run_cli("--select", "DDP007", "--no-show-source", "bad.py", cwd=project)
    assert "DDP007" in only_007.stdout and "DDP005" not in only_007.stdout
    prefix = run_cli("--select", "DDP00", "--ignore", "DDP007", "--no-show-source", "bad.py", cwd=project)
    assert "DDP005" in prefix.stdout and "DDP007" not in prefix.stdout
    extended = run_cli("--select", "DDP007", "--extend-select", "DDP005", "--no-show-source", "bad.py",
                       cwd=project)
    assert "DDP005" in extended.stdout and "DDP007" in extended.stdout
    everything = run_cli("--select", "ALL", "--ignore", "DDP0", "bad.py", cwd=project)
    assert everything.returncode == 0


def test_fail_on_and_exit_zero(project):
    # DDP005 is info and DDP007 a warning: failing on errors only passes.
    assert run_cli("--select", FIRST_RULES, "--fail-on", "error", "bad.py", cwd=project).returncode == 0
    assert run_cli("--select", FIRST_RULES, "--fail-on", "warning", "bad.py", cwd=project).returncode == 1
    assert run_cli("--select", "DDP005", "--fail-on", "warning", "bad.py", cwd=project).returncode == 0
    assert run_cli("--exit-zero", "bad.py", cwd=project).returncode == 0


def test_no_show_source_prints_one_line_per_diagnostic(project):
    result = run_cli("--select", FIRST_RULES, "--no-show-source", "bad.py", cwd=project)
    lines = result.stdout.splitlines()
    assert lines[:2] == [
        "bad.py:6:27: DDP005 find_unused_parameters=True makes DDP traverse the autograd graph after every forward",
        "bad.py:7:18: DDP007 hard-coded device index: every rank puts its tensors on cuda:0; derive the index from LOCAL_RANK",
    ]
    assert lines[2].startswith("Found 2 diagnostics")


def test_statistics_counts_rules_and_prefilter(project):
    write(project / "plain.py", "def add(a, b):\n    return a + b\n")
    result = run_cli("--select", FIRST_RULES, "--statistics", "--no-show-source", ".", cwd=project)
    assert re.search(r"^\s+1\s+DDP005\s+find-unused-parameters$", result.stdout, re.M)
    # bad.py is judged; clean.py has trigger words but no screen passes; plain.py has none.
    assert "files: 3 checked, 1 parsed, 1 ruled out by the ast screen, 1 skipped by the text prefilter" \
        in result.stdout
    assert re.search(r"^stages: 3 read, 3 ast-screened, 0 facts cache hits, 1 libcst-parsed \(judged\), "
                     r"0 result cache hits$", result.stdout, re.M)


def test_stdin_with_stdin_filename(project):
    result = run_cli("-", "--select", FIRST_RULES, "--stdin-filename", "scripts/train.py", "--no-show-source", cwd=project,
                     input=BAD_SCRIPT)
    assert result.returncode == 1
    assert result.stdout.startswith("scripts/train.py:6:27: DDP005")


def test_text_is_one_based_and_json_zero_based(project):
    text = run_cli("--select", "DDP007", "--no-show-source", "bad.py", cwd=project).stdout
    document = json.loads(run_cli("--select", "DDP007", "--format", "json", "bad.py", cwd=project).stdout)
    assert "bad.py:7:18:" in text
    start = document["files"][0]["diagnostics"][0]["range"]["start"]
    assert start == {"line": 6, "character": 17}


def test_version():
    result = run_cli("--version")
    assert result.returncode == 0
    assert re.fullmatch(r"ddplint \d+\.\d+\.\d+\n", result.stdout)


def test_colour_only_when_asked_or_on_a_terminal(project):
    piped = run_cli("bad.py", cwd=project)
    assert "\x1b[" not in piped.stdout
    forced = run_cli("--color", "always", "bad.py", cwd=project)
    assert "\x1b[" in forced.stdout
    assert "\x1b[" in run_cli("--color", "always", "bad.py", cwd=project, env={"NO_COLOR": "1"}).stdout
    assert "\x1b[" not in run_cli("--color", "never", "bad.py", cwd=project).stdout


def test_no_color_env_disables_colour_on_a_terminal(project):
    pty = pytest.importorskip("pty")
    import subprocess
    import sys

    def run_on_tty(env_extra):
        master, slave = pty.openpty()
        env = dict(os.environ, **env_extra)
        process = subprocess.run([sys.executable, "-m", "ddplint", "bad.py"], cwd=project, stdout=slave,
                                 stderr=slave, env=env, timeout=60)
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        os.close(master)
        return process.returncode, b"".join(chunks).decode()

    code, output = run_on_tty({})
    assert code == 1 and "\x1b[" in output
    code, output = run_on_tty({"NO_COLOR": "1"})
    assert code == 1 and "\x1b[" not in output


def test_rules_and_rule_subcommands():
    table = run_cli("rules")
    assert table.returncode == 0
    assert re.search(r"^DDP007\s+hardcoded-device\s+warning\s+yes", table.stdout, re.M)
    catalog = json.loads(run_cli("rules", "--format", "json").stdout)
    assert {"code": "DDP005", "name": "find-unused-parameters", "severity": "info"}.items() <= catalog[1].items() \
        or any(row["code"] == "DDP005" and row["severity"] == "info" for row in catalog)
    doc = run_cli("rule", "DDP007")
    assert doc.returncode == 0
    for heading in ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## References"):
        assert heading in doc.stdout
    by_name = run_cli("rule", "hardcoded-device")
    assert by_name.stdout == doc.stdout
    missing = run_cli("rule", "DDP999")
    assert missing.returncode == 2 and "unknown rule 'DDP999'" in missing.stderr


def test_syntax_error_is_a_diagnostic_not_a_crash(project):
    # Files are parsed when a selected rule's trigger word appears (here "cuda").
    write(project / "broken.py", "import torch.distributed as dist\ndef train(:\n    x.cuda()\n")
    result = run_cli("--no-show-source", "broken.py", cwd=project)
    assert result.returncode == 1
    assert result.stdout.startswith("broken.py:2:11: DDP000 syntax error")
    assert "Traceback" not in result.stderr


def test_undecodable_file_is_a_diagnostic(project):
    (project / "latin.py").write_bytes(b"import torch.distributed as dist\nx = '\xff\xfe'\n")
    result = run_cli("--no-show-source", "latin.py", cwd=project)
    assert result.returncode == 1
    assert "latin.py:1:1: DDP000 cannot decode file as utf-8" in result.stdout


def test_declared_encoding_is_honoured(project):
    source = "# -*- coding: latin-1 -*-\nimport torch\nimport torch.distributed as dist\nname = 'caf\xe9'\n" \
             "model = model.to('cuda:0')\n"
    (project / "coded.py").write_bytes(source.encode("latin-1"))
    result = run_cli("--no-show-source", "coded.py", cwd=project)
    assert "coded.py:5:18: DDP007" in result.stdout


def test_deeply_nested_file_is_a_diagnostic_not_a_crash(project):
    nested = "import torch.distributed as dist\nx = " + "(" * 3000 + "1" + ")" * 3000 + "\n"
    write(project / "deep.py", nested)
    result = run_cli("--no-show-source", "deep.py", cwd=project)
    assert result.returncode == 1, result.stderr
    assert "deep.py:2:205: DDP000 syntax error: too many nested parentheses" in result.stdout


def test_deep_but_valid_nesting_is_linted(project):
    # Chains that recurse deeply in libcst's parser and in tree walks, but have
    # no brackets: analysed on a deep stack instead of crashing the process.
    # (Left-recursive chains longer than budget.MAX_CHAIN_LINKS are not parsed at
    # all: tests/test_hostile_inputs.py.)
    deep = ("import torch.distributed as dist\nf = " + "lambda: " * 3000 + "1\n"
            "x = " + " + ".join(["1"] * 200) + "\nmodel = model.to('cuda:0')\n")
    write(project / "deep.py", deep)
    result = run_cli("--select", "DDP007", "--no-show-source", "deep.py", cwd=project)
    assert result.returncode == 1, result.stderr
    assert "deep.py:4:18: DDP007" in result.stdout


def test_huge_file_is_linted(project):
    body = BAD_SCRIPT + "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(20000))
    write(project / "huge.py", body)
    # 0.6 MB: over the default size budget (tests/test_hostile_inputs.py), so raise it
    result = run_cli("--no-show-source", "--select", "DDP005", "--max-file-size", "1MB", "huge.py", cwd=project)
    assert result.returncode == 1 and "huge.py:6:27: DDP005" in result.stdout


def test_output_file(project):
    out = project / "report.json"
    result = run_cli("--select", FIRST_RULES, "--format", "json", "-o", str(out), "bad.py", cwd=project)
    assert result.returncode == 1 and result.stdout == ""
    assert json.loads(out.read_text())["summary"]["diagnostics"] == 2


def test_github_format(project):
    result = run_cli("--format", "github", "--select", "DDP007", "bad.py", cwd=project)
    assert result.stdout.strip() == (
        "::warning file=bad.py,line=7,col=18,endLine=7,endColumn=26,"
        "title=DDP007::hard-coded device index%3A"
        .replace("%3A", ":") + " every rank puts its tensors on cuda:0; derive the index from LOCAL_RANK (hardcoded-device)"
    )


def test_confirm_requires_rule_ids_or_all():
    result = run_cli("confirm")
    assert result.returncode == 2
    assert "name rule ids" in result.stderr


def test_ddplint_lints_its_own_repository_clean():
    """Dogfooding: the repository's own config excludes the fixtures (wrong on
    purpose); the deliberate hangs of the runtime probes carry `# noqa: DDP010`."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    result = run_cli("--no-cache", "--no-show-source", ".", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
