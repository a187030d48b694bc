"""Fuzzing the whole pipeline (issue 10): generated programs and mutated fixtures
through discovery, the engine (project facts included), every reporter and the
exit-code rule.

Properties, for every input:
- no exception escapes, and no rule crashes (an internal error is a bug);
- every file named gets one result; a file that neither CPython's parser nor
  libcst accepts gets a DDP000 (when the prefilter let it through);
- the exit code is 0 or 1;
- the screen is complete (``tests.helpers.screen_misses``): whatever a rule
  reports without the screen, its screen passed, and both runs agree;
- the JSON document parses and each diagnostic structures into an LSP
  ``Diagnostic`` (lsprotocol + cattrs, as tests/test_reporters.py does), and its
  range lies inside the file; SARIF parses; every github line is a workflow
  command; the text report has its totals line.

Default: a few hundred examples, derandomized (CI sees the same inputs every
run). ``DDPLINT_FUZZ_EXAMPLES=5000`` runs that many per test with fresh random
inputs (the long run).
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
SINGLE_FIXTURES = sorted(FIXTURES.glob("*.py"))
PROJECT_FIXTURES = sorted(p for p in FIXTURES.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))

LONG_RUN = os.environ.get("DDPLINT_FUZZ_EXAMPLES")
# Generated programs are odd on purpose ("'a'()"): CPython's warnings about them are noise here.
pytestmark = pytest.mark.filterwarnings("ignore::SyntaxWarning")


def fuzz_settings(default_examples: int):
    return settings(
        max_examples=int(LONG_RUN) if LONG_RUN else default_examples,
        derandomize=not LONG_RUN,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )


# ---------------------------------------------------------------------- mutations
def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True) or [b""]


@st.composite
def mutated(draw, data: bytes) -> bytes:
    """``data`` after one to four mutations of the kinds the issue lists."""
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["delete", "duplicate", "swap", "indent", "bytes", "truncate"]))
        lines = _lines(data)
        index = draw(st.integers(0, len(lines) - 1))
        if kind == "delete":
            count = draw(st.integers(1, 3))
            del lines[index:index + count]
        elif kind == "duplicate":
            lines.insert(index, lines[index])
        elif kind == "swap":
            other = draw(st.integers(0, len(lines) - 1))
            lines[index], lines[other] = lines[other], lines[index]
        elif kind == "indent":
            prefix = draw(st.sampled_from([b" ", b"    ", b"\t", b"  \t", b""]))
            lines[index] = prefix + (lines[index].lstrip() if draw(st.booleans()) else lines[index])
        elif kind == "bytes":
            blob = b"".join(lines)
            at = draw(st.integers(0, len(blob)))
            noise = draw(st.binary(min_size=1, max_size=8) | st.sampled_from(
                [b"\x00", b"\r", b"\xef\xbb\xbf", b"\xff", b"(", b"'''", b"\\", b"\t", b":", b"\n    "]))
            lines = [blob[:at] + noise + blob[at:]]
        else:  # truncate
            blob = b"".join(lines)
            lines = [blob[:draw(st.integers(0, len(blob)))]]
        data = b"".join(lines)
    return data


def single_fixture_mutants():
    return st.sampled_from(SINGLE_FIXTURES).flatmap(
        lambda path: mutated(path.read_bytes()).map(lambda data: {path.name: data}))


@st.composite
def project_mutants(draw):
    """A project fixture with one of its files mutated (project facts see it too)."""
    folder = draw(st.sampled_from(PROJECT_FIXTURES))
    # Relative paths: some projects keep their scripts in subfolders (fixtures/examples_repo).
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*.py"))}
    victim = draw(st.sampled_from(sorted(files)))
    files[victim] = draw(mutated(files[victim]))
    return files


def generated_programs():
    hypothesmith = pytest.importorskip("hypothesmith")
    # Grammar-generated programs, with a DDP header so that the DDP-context rules run.
    header = "import torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
    return hypothesmith.from_grammar().map(lambda text: {"gen.py": (header + text).encode("utf-8", "surrogatepass")})


# ---------------------------------------------------------------------- the oracle
def lint_everything(tmp_path: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` into a fresh folder, lint it as the CLI does, render every
    format and check the properties."""
    from ddplint.cli import run_exit_code
    from ddplint.config import Settings
    from ddplint.discovery import discover, relative_display
    from ddplint.engine import RunResult, lint_paths
    from ddplint.reporters import get_reporter

    folder = Path(tmp_path) / f"case{next(_counter)}"
    folder.mkdir()
    (folder / "pyproject.toml").write_text("[tool.ddplint]\nselect = [\"ALL\"]\n")
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    settings_ = Settings(root=folder)
    found = discover([str(folder)], settings_)
    assert sorted(p.relative_to(folder).as_posix() for p in found.files) == sorted(files)
    result = RunResult()
    result.files = lint_paths(found.files, settings_, jobs=1, root=folder,
                              display={p: relative_display(p, folder) for p in found.files})

    assert len(result.files) == len(files)
    assert result.internal_errors == 0, [d.message for f in result.files for d in f.diagnostics]
    assert run_exit_code(result, settings_.fail_on) in (0, 1)
    by_name = {_file_key(f.path, files): f for f in result.files}
    for name, data in files.items():
        _check_ddp000(by_name[name], data)

    outputs = {}
    for fmt in ("text", "json", "sarif", "github"):
        stream = io.StringIO()
        get_reporter(fmt)(result, stream, show_source=True, statistics=True, colour=False)
        outputs[fmt] = stream.getvalue()
    _check_json(outputs["json"], files)
    sarif = json.loads(outputs["sarif"])
    assert len(sarif["runs"][0]["results"]) == result.diagnostics_count
    assert all(_GITHUB_LINE.match(line) for line in outputs["github"].splitlines())
    assert any(line.startswith(("Found ", "No diagnostics")) for line in outputs["text"].splitlines())
    # The screen is complete: every finding of a judge-everything run passed its
    # rule's screen, and --no-screen finds exactly what the default finds.
    from tests.helpers import screen_misses

    assert screen_misses(found.files, settings_, folder, {p: relative_display(p, folder) for p in found.files}) == []


_GITHUB_LINE = re.compile(r"^::(error|warning|notice) file=[^,\n]*,line=\d+,col=\d+,endLine=\d+,endColumn=\d+,"
                          r"title=[^\n]*::[^\n]*$")


def _counter_gen():
    n = 0
    while True:
        n += 1
        yield n


_counter = _counter_gen()


def _check_ddp000(result, data: bytes) -> None:
    """What neither parser accepts must be reported (when the file was parsed)."""
    from ddplint.engine import on_deep_stack
    from ddplint.source import decode_source

    if not result.parsed or any(d.code == "DDP000" for d in result.diagnostics):
        return
    source, _ = decode_source(data)
    assert source is not None, "an undecodable file reached the parser without a DDP000"
    if on_deep_stack(_cpython_accepts, source):
        return
    import libcst

    try:
        on_deep_stack(libcst.parse_module, source)
    except Exception:
        pytest.fail(f"{result.path}: neither CPython nor libcst parses it, and no DDP000 was reported")


def _cpython_accepts(source: str) -> bool:
    try:
        ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _file_key(path: str, files: dict[str, bytes]) -> str:
    """The name in ``files`` (a relative path) of a reported path (relative or absolute)."""
    posix = Path(path).as_posix()
    return max((name for name in files if posix == name or posix.endswith("/" + name)), key=len)


def _check_json(text: str, files: dict[str, bytes]) -> None:
    from lsprotocol import converters, types

    from ddplint.source import decode_source

    document = json.loads(text)
    converter = converters.get_converter()
    for entry in document["files"]:
        source, _ = decode_source(files[_file_key(entry["path"], files)])
        lines = re.split(r"\r\n|\r|\n", source) if source is not None else [""]
        for raw in entry["diagnostics"]:
            diagnostic = converter.structure(raw, types.Diagnostic)
            start, end = diagnostic.range.start, diagnostic.range.end
            for position in (start, end):
                assert 0 <= position.line < len(lines), (raw, len(lines))
                assert 0 <= position.character <= len(lines[position.line]), (raw, lines[position.line])
            assert (start.line, start.character) <= (end.line, end.character), raw


# ---------------------------------------------------------------------- the tests
@fuzz_settings(default_examples=150)
@given(files=single_fixture_mutants())
def test_mutated_fixtures(tmp_path_factory, files):
    lint_everything(tmp_path_factory.mktemp("fuzz"), files)


@fuzz_settings(default_examples=40)
@given(files=project_mutants())
def test_mutated_project_fixtures(tmp_path_factory, files):
    lint_everything(tmp_path_factory.mktemp("fuzz"), files)


@fuzz_settings(default_examples=100)
@given(files=generated_programs())
def test_generated_programs(tmp_path_factory, files):
    lint_everything(tmp_path_factory.mktemp("fuzz"), files)


@fuzz_settings(default_examples=12)
@given(files=single_fixture_mutants(), fmt=st.sampled_from(["text", "json", "sarif", "github"]))
def test_mutants_through_the_command_line(tmp_path_factory, files, fmt):
    """The CLI itself, in this process: exit 0 or 1, never an exception."""
    from click.testing import CliRunner

    from ddplint.cli import cli

    folder = tmp_path_factory.mktemp("cli")
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    outcome = CliRunner().invoke(cli, ["--isolated", "--no-cache", "--jobs", "1", "--format", fmt, str(folder)])
    assert isinstance(outcome.exception, SystemExit) or outcome.exception is None, outcome.exception
    assert outcome.exit_code in (0, 1), outcome.output
