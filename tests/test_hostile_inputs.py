"""Hostile and odd inputs: each test pins what the user sees. Never a traceback;
a file ddplint cannot analyse is a DDP000 diagnostic; a file it cannot read is one
line, the run goes on and exits 2; bad configuration is one line naming the file
and the key, exit 2."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.helpers import BAD_SCRIPT, run_cli, write

DDP007_LINE = 'model = model.to("cuda:0")'  # BAD_SCRIPT line 7; DDP007 at column 18


def lint(cwd, *args, **kwargs):
    """The CLI for real, asserting the things every hostile input must respect."""
    result = run_cli("--no-cache", "--no-show-source", *args, cwd=cwd, **kwargs)
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    assert result.returncode in (0, 1, 2)
    return result


def first_line(result) -> str:
    return result.stdout.splitlines()[0]


# ---------------------------------------------------------------------- contents
def test_empty_file_is_clean(tmp_path):
    write(tmp_path / "empty.py", "")
    result = lint(tmp_path, "empty.py")
    assert result.returncode == 0 and "No diagnostics in 1 file" in result.stdout


def test_only_comments_is_clean(tmp_path):
    write(tmp_path / "notes.py", "# nothing here\n# import torch.distributed\n")
    assert lint(tmp_path, "--select", "ALL", "notes.py").returncode == 0


def test_byte_order_mark_does_not_shift_columns(tmp_path):
    (tmp_path / "bom.py").write_bytes(b"\xef\xbb\xbf" + BAD_SCRIPT.encode())
    result = lint(tmp_path, "--select", "DDP007", "bom.py")
    assert first_line(result).startswith("bom.py:7:18: DDP007")


def test_valid_python_that_libcst_validation_rejects_is_still_linted(tmp_path):
    # ``(a if b else c)for x`` (no space before ``for``) is valid Python; libcst <= 1.9's
    # validation rejected it and the whole file was a DDP000 (a114 StyleGAN2_Pytorch).
    write(tmp_path / "train.py", BAD_SCRIPT + "images = [(x.float() if x.ndim == 4 else x)for x in [model]]\n")
    result = lint(tmp_path, "--select", "ALL", "train.py")
    assert "DDP000" not in result.stdout
    assert "train.py:7:18: DDP007" in result.stdout


@pytest.mark.parametrize("newline", ["\r\n", "\r"], ids=["CRLF", "CR"])
def test_crlf_and_cr_line_endings_keep_lines_and_columns(tmp_path, newline):
    (tmp_path / "ends.py").write_bytes(BAD_SCRIPT.replace("\n", newline).encode())
    result = lint(tmp_path, "--select", "DDP005,DDP007", "--format", "json", "ends.py")
    import json

    ranges = [(d["code"], d["range"]["start"]) for d in json.loads(result.stdout)["files"][0]["diagnostics"]]
    assert ranges == [("DDP005", {"line": 5, "character": 26}), ("DDP007", {"line": 6, "character": 17})]


def test_tabs_count_as_one_column(tmp_path):
    write(tmp_path / "tabs.py", BAD_SCRIPT + 'def f(m):\n\tm = m.to("cuda:1")\n')
    result = lint(tmp_path, "--select", "DDP007", "tabs.py")
    assert "tabs.py:9:11: DDP007" in result.stdout  # \t m = m.to( -> the string starts at column 11


def test_pep_263_cookie_decodes_a_latin_1_file(tmp_path):
    source = "# -*- coding: latin-1 -*-\n" + BAD_SCRIPT.replace('model.to("cuda:0")', 'model.to("cuda:0")  # é')
    (tmp_path / "latin.py").write_bytes(source.encode("latin-1"))
    result = lint(tmp_path, "--select", "DDP007", "latin.py")
    assert first_line(result).startswith("latin.py:8:18: DDP007")


def test_undecodable_bytes_are_a_ddp000(tmp_path):
    (tmp_path / "bad.py").write_bytes(b"import torch.distributed as dist\nx = '\xff\xfe'\n")
    result = lint(tmp_path, "bad.py")
    assert result.returncode == 1
    assert first_line(result) == ("bad.py:1:1: DDP000 cannot decode file as utf-8: invalid start byte")


def test_unknown_coding_cookie_is_a_ddp000(tmp_path):
    write(tmp_path / "odd.py", "# coding: no-such-codec\nimport torch.distributed as dist\n")
    result = lint(tmp_path, "odd.py")
    assert result.returncode == 1 and "odd.py:1:1: DDP000 cannot decode file" in result.stdout


def test_nul_byte_is_a_ddp000_at_its_position(tmp_path):
    (tmp_path / "nul.py").write_bytes(BAD_SCRIPT.encode() + b"x = 1\x00\n")
    result = lint(tmp_path, "nul.py")
    assert result.returncode == 1
    assert first_line(result) == "nul.py:8:6: DDP000 syntax error: the file contains a NUL byte"


def test_python_2_syntax_is_a_ddp000_with_pythons_message(tmp_path):
    write(tmp_path / "old.py", BAD_SCRIPT + 'print "done"\n')
    result = lint(tmp_path, "old.py")
    assert result.returncode == 1
    assert first_line(result).startswith("old.py:8:1: DDP000 syntax error: Missing parentheses in call to 'print'")


def test_ten_megabyte_generated_file_gets_a_notice_not_minutes(tmp_path):
    # 800,000 one-line assignments with one DDP mistake in the middle (issue 10).
    lines = [f"x{i} = {i % 100}\n" for i in range(800_000)]
    lines.insert(400_000, "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                          "model = DDP(net, find_unused_parameters=True)\n")
    (tmp_path / "generated.py").write_text("".join(lines))
    size = (tmp_path / "generated.py").stat().st_size
    assert size > 10_000_000
    result = lint(tmp_path, "generated.py")
    assert result.returncode == 1
    assert result.stdout.splitlines()[0] == (
        f"generated.py:1:1: DDP000 too large to analyse: {size / 1e6:.1f} MB, limit 0.4 MB; see --max-file-size")


def test_max_file_size_option_and_config_key(tmp_path):
    write(tmp_path / "train.py", BAD_SCRIPT + "# padding\n" * 200)  # about 2.3 KB
    notice = "train.py:1:1: DDP000 too large to analyse: 0.002 MB, limit 0.001 MB; see --max-file-size"
    assert first_line(lint(tmp_path, "--max-file-size", "1KB", "train.py")) == notice
    write(tmp_path / "pyproject.toml", '[tool.ddplint]\nmax-file-size = "1KB"\n')
    assert first_line(lint(tmp_path, "train.py")) == notice
    assert "DDP000" not in lint(tmp_path, "--max-file-size", "0", "train.py").stdout  # 0: no limit
    bad = lint(tmp_path, "--max-file-size", "huge", "train.py")
    assert bad.returncode == 2 and bad.stderr.startswith("ddplint: error: --max-file-size: expected a size")


def test_a_file_over_the_budget_without_trigger_words_is_skipped_quietly(tmp_path):
    write(tmp_path / "table.py", "# data\n" * 100_000)  # no rule could fire here
    assert lint(tmp_path, "table.py").returncode == 0


@pytest.mark.parametrize("body", [
    "x = y" + ".a" * 5000,
    "x = f" + "()" * 5000,
    "x = " + " + ".join(["a"] * 5001),
], ids=["attributes", "calls", "operators"])
def test_5000_deep_left_recursive_chain_gets_a_notice(tmp_path, body):
    write(tmp_path / "deep.py", "import torch.distributed as dist\n" + body + "\n")
    result = lint(tmp_path, "deep.py")
    assert result.returncode == 1
    assert first_line(result).startswith("deep.py:2:5: DDP000 too deeply nested to analyse: a chain of 5000 ")


@pytest.mark.parametrize("body,expected", [
    ("x = " + "(" * 5000 + "1" + ")" * 5000, "DDP000 syntax error: too many nested parentheses"),
    ("x = " + "not " * 5000 + "y\n" + DDP007_LINE, "DDP007"),
    ("x = " + "-" * 5000 + "1\n" + DDP007_LINE, "DDP007"),
    ("".join(" " * i + "if x:\n" for i in range(200)) + " " * 200 + "pass",
     "DDP000 syntax error: too many levels of indentation"),
], ids=["brackets", "not", "unary-minus", "indentation"])
def test_5000_deep_nesting_of_other_kinds(tmp_path, body, expected):
    write(tmp_path / "deep.py", "import torch.distributed as dist\n" + body + "\n")
    result = lint(tmp_path, "deep.py")
    assert result.returncode == 1 and expected in first_line(result), result.stdout


# ---------------------------------------------------------------------- file system
def test_a_folder_named_like_a_python_file_is_walked(tmp_path):
    write(tmp_path / "pkg.py" / "inner.py", BAD_SCRIPT)
    for named in (".", "pkg.py"):
        result = lint(tmp_path, "--select", "DDP007", named)
        assert first_line(result).startswith("pkg.py/inner.py:7:18: DDP007")


def test_symlink_loops_are_not_followed(tmp_path):
    write(tmp_path / "train.py", BAD_SCRIPT)
    (tmp_path / "a.py").symlink_to(tmp_path / "b.py")
    (tmp_path / "b.py").symlink_to(tmp_path / "a.py")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "up").symlink_to(tmp_path, target_is_directory=True)
    result = lint(tmp_path, "--select", "DDP007", ".")
    assert result.returncode == 1 and "in 1 file" in result.stdout  # train.py only, once
    named = lint(tmp_path, "a.py")
    assert named.returncode == 2
    assert named.stderr.strip() == "ddplint: error: cannot read a.py: Too many levels of symbolic links"


def test_a_named_socket_is_a_one_line_error(tmp_path):
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "s.py"))
    try:
        result = lint(tmp_path, "s.py")
    finally:
        server.close()
    assert result.returncode == 2 and result.stderr.strip() == "ddplint: error: not a file or folder: s.py"


def _unreadable_tree(base: Path) -> Path:
    write(base / "a.py", BAD_SCRIPT)
    write(base / "b.py", "")
    write(base / "z.py", BAD_SCRIPT)
    (base / "b.py").chmod(0)
    return base


def _run_unprivileged(cwd: Path):
    """As root, chmod 000 does not stop reads: run the CLI as 'nobody' instead."""
    return subprocess.run([sys.executable, "-m", "ddplint", "--no-cache", "--no-show-source",
                           "--select", "DDP007", "."], cwd=cwd, user=65534, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})


def test_an_unreadable_file_is_one_line_and_the_run_goes_on_then_exits_2(tmp_path):
    import tempfile

    if os.geteuid() != 0:
        result = lint(_unreadable_tree(tmp_path), "--select", "DDP007", ".")
    else:
        base = Path(tempfile.mkdtemp(prefix="ddplint-unreadable-"))
        base.chmod(0o755)
        try:
            _run_unprivileged(base)
        except PermissionError:
            pytest.skip("running as root, where chmod 000 does not stop reads, and user 'nobody' cannot run "
                        "this Python; test_a_read_error_is_one_line_and_the_run_goes_on covers the behaviour")
        result = _run_unprivileged(_unreadable_tree(base))
        if "No module named" in result.stderr:
            pytest.skip("running as root, and user 'nobody' cannot import this checkout")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "b.py:1:1: internal-error cannot read file: Permission denied" in result.stdout
    assert "a.py:7:18: DDP007" in result.stdout and "z.py:7:18: DDP007" in result.stdout


def _invoke(args, cwd, monkeypatch):
    """The CLI in this process (for fault injection); returns (exit code, output)."""
    from ddplint.cli import cli

    monkeypatch.chdir(cwd)
    outcome = CliRunner().invoke(cli, ["--no-cache", "--no-show-source", "--jobs", "1", *args])
    assert outcome.exception is None or isinstance(outcome.exception, SystemExit), outcome.exception
    return outcome.exit_code, outcome.output


def test_a_read_error_is_one_line_and_the_run_goes_on(tmp_path, monkeypatch):
    """Works as root too: the read itself fails (an injected EACCES)."""
    from ddplint import budget

    _unreadable_tree(tmp_path)
    real_read = budget.read_within_budget

    def read(path, *args, **kwargs):
        if Path(path).name == "b.py":
            raise PermissionError(13, "Permission denied")
        return real_read(path, *args, **kwargs)

    monkeypatch.setattr(budget, "read_within_budget", read)
    code, output = _invoke(["--select", "DDP007", "a.py", "b.py", "z.py"], tmp_path, monkeypatch)
    assert code == 2
    assert output.splitlines()[:3] == [
        "a.py:7:18: DDP007 hard-coded device index: every rank puts its tensors on cuda:0; derive the index from LOCAL_RANK",
        "b.py:1:1: internal-error cannot read file: Permission denied",
        "z.py:7:18: DDP007 hard-coded device index: every rank puts its tensors on cuda:0; derive the index from LOCAL_RANK",
    ]


def test_a_file_deleted_between_discovery_and_reading(tmp_path, monkeypatch):
    from ddplint import discovery

    write(tmp_path / "a.py", BAD_SCRIPT)
    write(tmp_path / "gone.py", BAD_SCRIPT)
    real_discover = discovery.discover

    def discover_then_delete(*args, **kwargs):
        found = real_discover(*args, **kwargs)
        (tmp_path / "gone.py").unlink(missing_ok=True)  # discovery runs again for the project
        return found

    monkeypatch.setattr(discovery, "discover", discover_then_delete)
    code, output = _invoke(["--select", "DDP007", "."], tmp_path, monkeypatch)
    assert code == 2
    assert "gone.py:1:1: internal-error cannot read file: No such file or directory" in output
    assert "a.py:7:18: DDP007" in output


# ---------------------------------------------------------------------- streams and names
def test_closed_stdin(tmp_path):
    result = subprocess.run([sys.executable, "-m", "ddplint", "-", "--stdin-filename", "x.py"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, preexec_fn=lambda: os.close(0))
    assert result.returncode == 2
    assert result.stderr.strip() == "ddplint: error: cannot read '-': standard input is closed"
    write(tmp_path / "ok.py", "x = 1\n")
    files = subprocess.run([sys.executable, "-m", "ddplint", "ok.py"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120, preexec_fn=lambda: os.close(0))
    assert files.returncode == 0, files.stderr  # linting files does not need stdin


@pytest.mark.parametrize("colour", ["never", "always"])
def test_file_names_with_markup_or_escapes_are_shown_literally(tmp_path, colour):
    write(tmp_path / "[red]x.py", BAD_SCRIPT)
    write(tmp_path / "[bold]x[" / "bold].py", BAD_SCRIPT)  # shown as [bold]x[/bold].py
    write(tmp_path / "\x1b[31mred.py", BAD_SCRIPT)
    result = lint(tmp_path, "--select", "DDP007", "--color", colour, ".")
    assert "\\x1b[31mred.py:7:18:" in result.stdout
    assert "[red]x.py:7:18:" in result.stdout and "[bold]x[/bold].py:7:18:" in result.stdout
    if colour == "never":
        assert "\x1b" not in result.stdout
    github = lint(tmp_path, "--select", "DDP007", "--format", "github", ".")
    assert "file=\\x1b[31mred.py," in github.stdout and "\x1b" not in github.stdout
    missing = lint(tmp_path, "\x1b[2Jgone.py")
    assert missing.stderr.strip() == "ddplint: error: path not found: \\x1b[2Jgone.py"


# ---------------------------------------------------------------------- configuration
@pytest.mark.parametrize("name,text,message", [
    (".ddplint.yaml", "select: [DDP005\n",
     ".ddplint.yaml: invalid YAML at line 2, column 1: expected ',' or ']', but got '<stream end>'"),
    (".ddplint.yaml", "a: b: c\n", ".ddplint.yaml: invalid YAML at line 1, column 5: mapping values are not allowed here"),
    (".ddplint.yaml", "- select\n", ".ddplint.yaml: the top level must be a mapping of ddplint settings"),
    (".ddplint.yaml", "1: 2\n", ".ddplint.yaml: unknown key '1'"),
    (".ddplint.yaml", "select: 5\n", ".ddplint.yaml: 'select' must be a list of strings"),
    (".ddplint.yaml", "exclude: [1, 2]\n", ".ddplint.yaml: 'exclude' must be a list of strings"),
    (".ddplint.yaml", "severity: [1]\n", ".ddplint.yaml: 'severity' must map rule ids to error|warning|info"),
    (".ddplint.yaml", "per-file-ignores: [a]\n", ".ddplint.yaml: 'per-file-ignores' must map glob patterns"),
    (".ddplint.yaml", "max-file-size: big\n", ".ddplint.yaml: 'max-file-size': expected a size such as"),
    ("pyproject.toml", "[tool.ddplint]\nselect = [\n", "pyproject.toml: invalid TOML: "),
    ("pyproject.toml", "[tool]\nddplint = 5\n", "pyproject.toml: [tool.ddplint] must be a table"),
    ("pyproject.toml", "[tool.ddplint]\nfail-on = true\n",
     "pyproject.toml [tool.ddplint]: 'fail-on' must be one of error, warning, info, not True"),
    ("pyproject.toml", "[tool.ddplint]\nmax-file-size = -1\n",
     "pyproject.toml [tool.ddplint]: 'max-file-size': a size cannot be negative: -1"),
    ("pyproject.toml", '[tool.ddplint]\nper-file-ignores = {"a/*" = 5}\n',
     "pyproject.toml [tool.ddplint]: 'per-file-ignores.a/*' must be a list of strings"),
    ("pyproject.toml", '[tool.ddplint]\nseverity = {DDP006 = "loud"}\n',
     "pyproject.toml [tool.ddplint]: 'severity.DDP006' must be one of error, warning, info, not 'loud'"),
]
)
def test_broken_or_mistyped_configuration_is_one_line_exit_2(tmp_path, name, text, message):
    write(tmp_path / name, text)
    write(tmp_path / "train.py", BAD_SCRIPT)
    result = lint(tmp_path, "train.py")
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ddplint: error: {tmp_path / name}"), lines
    assert message in lines[0]


def test_undecodable_configuration_is_one_line_exit_2(tmp_path):
    (tmp_path / "pyproject.toml").write_bytes(b"\xff\xfe[tool.ddplint]\n")
    result = lint(tmp_path, ".")
    assert result.returncode == 2
    assert result.stderr.strip().startswith(f"ddplint: error: {tmp_path / 'pyproject.toml'}: cannot read: ")


def test_linted_modules_do_not_shadow_the_standard_library(tmp_path):
    """`python -m ddplint` from a folder with signal.py or ast.py (torch has signal/)."""
    for name in ("signal", "ast", "json", "multiprocessing", "tokenize"):
        write(tmp_path / f"{name}.py", "raise SystemExit('the linted code was imported')\n")
    write(tmp_path / "train.py", BAD_SCRIPT)
    result = lint(tmp_path, "--select", "DDP007", "--jobs", "2", ".")  # worker processes too
    assert result.returncode == 1, result.stderr
    assert "train.py:7:18: DDP007" in result.stdout


# ---------------------------------------------------------------------- analysis depth
RECURRENCES = """import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
rank = dist.get_rank()
model = DDP(net.cuda(rank), device_ids=[rank])
history = []
for epoch in range(10):
    for step, (x, y) in enumerate(loader):
        a = model(x)
        b = a * 2
        c = b + a
        d = c - b
        e = d * c
        for _ in range(4):
            a = a + b + c + d + e
            b = b * a - c + d * e
            c = c - a * b + a - e
            d = d + c * a - b
            e = e * d + a - b + c
            if a.sum() > 0:
                d, e = e, d
        loss = a + b + c + d + e
        if torch.isnan(loss):
            continue
        total = loss
        total += a
        history.append(total)
        with model.no_sync():
            loss.backward()
        if rank == 0:
            torch.save(model.state_dict(), "last.pt")
"""


def test_names_rebound_from_each_other_in_a_loop_stay_cheap(tmp_path):
    # Five names rebound from each other inside a loop: every read reaches several
    # bindings of several names, and an analysis that follows bindings without
    # remembering them fans out exponentially (a real repository ran for hours).
    # run_cli's 120 s limit is the hang guard; the findings are pinned.
    write(tmp_path / "train.py", RECURRENCES)
    result = lint(tmp_path, "train.py")
    found = sorted(line.split(" ")[1] for line in result.stdout.splitlines() if ": DDP" in line)
    assert found == ["DDP001", "DDP013", "DDP014", "DDP015", "DDP017", "DDP017", "DDP025"], result.stdout
