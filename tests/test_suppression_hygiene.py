"""Suppressions with reasons, DDP100 (unused-suppression) in whole runs,
`--add-noqa [--reason]` and `--ignore-noqa`."""

import ast

from ddplint.suppressions import parse_suppressions
from tests.helpers import BAD_SCRIPT, run_cli, write

SELECT = ("--isolated", "--no-cache", "--no-show-source")


def _found(result) -> list[str]:
    return [line.split(": ", 1)[0] + " " + line.split(": ", 1)[1].split()[0]
            for line in result.stdout.splitlines() if ": DDP" in line]


def test_ignore_comments_with_reasons_are_parsed_like_noqa():
    source = ("a = 1  # ddplint: ignore[DDP007, ddp005] the launcher pins one GPU per process\n"
              "b = 2  # ddplint: ignore\n"
              "c = 3  # ddplint: ignored[DDP007] (not a directive)\n"
              "d = '# ddplint: ignore[DDP007]'\n"
              "e = 4  # type: ignore  # noqa: DDP001\n")
    found = parse_suppressions(source)
    assert found.by_line == {1: frozenset({"DDP007", "DDP005"}), 2: frozenset({"*"}), 5: frozenset({"DDP001"})}
    first = found.directives[0]
    assert (first.column, first.text) == (8, "# ddplint: ignore[DDP007, ddp005] the launcher pins one GPU per process")
    assert first.listed_codes() == ["DDP007", "DDP005"]


def test_reasoned_suppression_silences_its_codes(lint):
    source = BAD_SCRIPT.replace('model.to("cuda:0")', 'model.to("cuda:0")  # ddplint: ignore[DDP007] single-GPU demo')
    result = lint(source, select=["DDP005", "DDP007"])
    assert [d.code for d in result.diagnostics] == ["DDP005"]
    assert [d.code for d in result.suppressed] == ["DDP007"]


def test_unused_suppressions_are_judged_only_for_rules_that_ran(tmp_path):
    script = write(tmp_path / "train.py", BAD_SCRIPT.replace(
        "find_unused_parameters=True)", "find_unused_parameters=True)  # noqa: DDP005, DDP007").replace(
        'model.to("cuda:0")', 'model.to("cuda:0")  # noqa: DDP016, DDP009'))
    # DDP007 and DDP016 were not selected: nothing to say.
    assert _found(run_cli(*SELECT, "--select", "DDP005,DDP100", "train.py", cwd=tmp_path)) == []
    # Every rule selected: DDP007 ran and found nothing on line 6, DDP016 ran (its trigger
    # word is in the file) and found nothing on line 7; DDP009 did not run (no DataLoader).
    everything = run_cli(*SELECT, "train.py", cwd=tmp_path)
    assert "train.py:6:57: DDP100 unused suppression: DDP007 reported nothing on this line" in everything.stdout
    assert "train.py:7:29: DDP100 unused suppression: DDP016 reported nothing on this line" in everything.stdout
    # DDP100 is safe to fix: the unused codes go, the others stay.
    fixed = run_cli(*SELECT, "--fix", "train.py", cwd=tmp_path)
    assert "Fixed 2 findings in 1 file." in fixed.stderr, fixed.stderr
    text = script.read_text()
    assert "find_unused_parameters=True)  # noqa: DDP005\n" in text
    assert 'model = model.to("cuda:0")  # noqa: DDP009\n' in text
    assert "DDP100" not in run_cli(*SELECT, "train.py", cwd=tmp_path).stdout


def test_ignore_noqa_shows_what_is_suppressed(tmp_path):
    write(tmp_path / "train.py", BAD_SCRIPT.replace('model.to("cuda:0")', 'model.to("cuda:0")  # noqa: DDP007'))
    quiet = run_cli(*SELECT, "--select", "DDP007,DDP100", "train.py", cwd=tmp_path)
    assert quiet.returncode == 0 and _found(quiet) == []
    loud = run_cli(*SELECT, "--select", "DDP007,DDP100", "--ignore-noqa", "train.py", cwd=tmp_path)
    assert loud.returncode == 1 and _found(loud) == ["train.py:7:18 DDP007"]


def test_add_noqa_suppresses_every_finding_and_leaves_no_unused_suppression(tmp_path):
    source = BAD_SCRIPT + 'x = model.to("cuda:0")  # keep on GPU 0\n' \
        'y = DDP(model.to("cuda:1"), find_unused_parameters=True)  # noqa: DDP005\n'
    script = write(tmp_path / "train.py", source)
    result = run_cli(*SELECT, "--add-noqa", "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Added 6 suppressions in 1 file." in result.stderr  # also DDP015 on line 5, DDP018 on line 6
    text = script.read_text()
    ast.parse(text)
    assert "find_unused_parameters=True)  # noqa: DDP005, DDP018\n" in text
    assert 'x = model.to("cuda:0")  # keep on GPU 0  # noqa: DDP007\n' in text
    assert 'find_unused_parameters=True)  # noqa: DDP005, DDP007\n' in text  # an existing list is extended
    after = run_cli(*SELECT, "train.py", cwd=tmp_path)
    assert after.returncode == 0 and _found(after) == [], after.stdout
    again = run_cli(*SELECT, "--add-noqa", "train.py", cwd=tmp_path)
    assert "Added 0 suppressions in 0 files." in again.stderr and script.read_text() == text


def test_add_noqa_with_a_reason_and_lines_that_cannot_take_a_comment(tmp_path):
    source = BAD_SCRIPT + 'z = torch.ones(1, device="""cuda:0""" if x else \\\n    "cpu")\n' \
        'w = torch.ones(1, device="cuda:0"); s = """\n"""\n'
    script = write(tmp_path / "train.py", source)
    result = run_cli(*SELECT, "--select", "DDP005,DDP007", "--add-noqa", "--reason", "legacy: tracked in #12".replace(
        "#", "issue "), "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "train.py: cannot add a suppression on lines 8, 10 (it ends inside a string or with a backslash)" \
        in result.stderr
    text = script.read_text()
    assert 'model = model.to("cuda:0")  # ddplint: ignore[DDP007] legacy: tracked in issue 12\n' in text
    assert _found(run_cli(*SELECT, "--select", "DDP005,DDP007", "train.py", cwd=tmp_path)) == [
        "train.py:8:26 DDP007", "train.py:10:26 DDP007"]
    bad_reason = run_cli(*SELECT, "--add-noqa", "--reason", "see ] here", "train.py", cwd=tmp_path)
    assert bad_reason.returncode == 2 and "--reason must be one line" in bad_reason.stderr


def test_a_bare_noqa_is_never_judged_a_bare_ddplint_ignore_only_when_every_rule_could_run(lint):
    # flake8, Ruff and others share a bare ``# noqa``: ddplint cannot know what it silences for them.
    shared = BAD_SCRIPT + "from .version import __version__  # noqa\ny = 1  # NOQA\n"
    assert [d.code for d in lint(shared).diagnostics if d.code == "DDP100"] == []
    stale = BAD_SCRIPT + "y = 1  # ddplint: ignore\n"
    found = [(d.line, d.code, d.message) for d in lint(stale).diagnostics if d.code == "DDP100"]
    assert found == [(8, "DDP100", "unused suppression: nothing is reported on this line")]
    # Without DDP context the context rules did not run: a bare ignore may be meant for them.
    plain = "import torch\nx = torch.ones(1, device='cuda:0')  # ddplint: ignore\n"
    assert [d.code for d in lint(plain).diagnostics] == []
    # Nor when only some rules are selected.
    assert [d.code for d in lint(stale, select=["DDP005", "DDP007", "DDP100"]).diagnostics] == ["DDP005", "DDP007"]
