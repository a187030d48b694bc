"""The ``ddplint`` command line (DESIGN.md "User-facing contracts").

``ddplint PATH...`` is ``ddplint check PATH...``; the other subcommands are
``rule``, ``rules``, ``confirm`` and ``server``. A path that equals a subcommand
name is given as ``./name``. Exit codes: 0 nothing at or above the fail
threshold, 1 findings, 2 usage, configuration or internal error.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Optional

import click

from ddplint import __version__

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class _DefaultToCheck(click.Group):
    """Route ``ddplint ARGS`` to ``ddplint check ARGS`` unless ARGS names a subcommand."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h", "--version")):
            args = ["check", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_DefaultToCheck, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="ddplint", message="%(prog)s %(version)s")
def cli() -> None:
    """ddplint: find the mistakes that make PyTorch distributed training slow,
    leaky or hung, statically; then measure them with `ddplint confirm`.

    `ddplint PATH...` lints files and folders (same as `ddplint check PATH...`).
    """


def _fail(message: str) -> "click.exceptions.Exit":
    from ddplint.source import printable

    click.echo(f"ddplint: error: {printable(message)}", err=True)
    return click.exceptions.Exit(EXIT_ERROR)


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--select", multiple=True, metavar="CODES",
              help="Rule codes or prefixes to enable (comma-separated, e.g. DDP0,DDP101; ALL for all).")
@click.option("--ignore", multiple=True, metavar="CODES", help="Rule codes or prefixes to disable.")
@click.option("--extend-select", multiple=True, metavar="CODES", help="Codes to enable on top of the selection.")
@click.option("--format", "output_format", type=click.Choice(["text", "json", "sarif", "github"]),
              default="text", show_default=True, help="Output format (json is LSP-shaped).")
@click.option("--fail-on", type=click.Choice(["error", "warning", "info"]), default=None,
              help="Lowest severity that makes the exit code 1 [default: info, or the config's fail-on].")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("--statistics", is_flag=True, help="Print counts per rule and prefilter figures.")
@click.option("--show-source/--no-show-source", default=True, help="Show the code frame under each finding.")
@click.option("--stdin-filename", metavar="PATH", help="The name of the file read from '-' (stdin).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Read settings from this pyproject.toml or .ddplint.yaml.")
@click.option("--isolated", is_flag=True, help="Ignore every configuration file.")
@click.option("--force-exclude", is_flag=True, help="Apply exclude settings to files named on the command line too.")
@click.option("--no-notebooks", is_flag=True, help="Do not lint Jupyter notebooks (.ipynb) found in folders.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Worker processes [default: number of CPUs].")
@click.option("-o", "--output-file", type=click.Path(dir_okay=False, writable=True),
              help="Write the report to this file instead of stdout.")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache.")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Cache folder [default: .ddplint_cache at the project root].")
@click.option("--max-file-size", metavar="SIZE", default=None,
              help="Files larger than this are not analysed (a DDP000 notice says so): 0.4 or 400KB "
                   "or 2MB; 0 for no limit [default: 0.4 MB, or the config's max-file-size].")
@click.option("--color", "colour", type=click.Choice(["auto", "always", "never"]), default="auto",
              help="Colour the text output [default: auto: only on a terminal, never with NO_COLOR].")
@click.option("--fix", is_flag=True, help="Apply safe fixes to the files, then report what is left.")
@click.option("--unsafe-fixes", is_flag=True, help="Also apply unsafe fixes (with --fix or --diff).")
@click.option("--diff", "show_diff", is_flag=True,
              help="Print the fixes as a unified diff and change nothing; exit 1 when there are any.")
@click.option("--show-fixes", is_flag=True, help="Show each finding's fix; with --fix, list the fixes applied.")
@click.option("--baseline", "baseline_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Report only findings that this baseline file does not hold.")
@click.option("--write-baseline", "write_baseline_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Record the current findings in this baseline file and exit.")
@click.option("--diff-base", metavar="REV", default=None,
              help="Report only findings on lines added or changed since the git revision REV.")
@click.option("--add-noqa", is_flag=True, help="Add a suppression comment for every current finding.")
@click.option("--reason", metavar="TEXT", default=None,
              help="With --add-noqa: write `# ddplint: ignore[CODES] TEXT` instead of `# noqa: CODES`.")
@click.option("--ignore-noqa", is_flag=True, help="Report findings even where a suppression comment silences them.")
@click.option("--no-screen", is_flag=True, hidden=True,
              help="Judge every file the text prefilter lets through (no ast screen): for comparisons.")
@click.option("--stage-times", is_flag=True, hidden=True,
              help="Print the wall seconds of each engine stage to stderr (benchmarks/bench.py).")
def check(paths: tuple[str, ...], select, ignore, extend_select, output_format: str,
          fail_on: Optional[str], exit_zero: bool, statistics: bool, show_source: bool,
          stdin_filename: Optional[str], config_file: Optional[Path], isolated: bool,
          force_exclude: bool, no_notebooks: bool, jobs: Optional[int], output_file: Optional[str],
          no_cache: bool, cache_dir: Optional[Path], max_file_size: Optional[str], colour: str, fix: bool,
          unsafe_fixes: bool,
          show_diff: bool, show_fixes: bool, baseline_file: Optional[Path],
          write_baseline_file: Optional[Path], diff_base: Optional[str], add_noqa: bool,
          reason: Optional[str], ignore_noqa: bool, no_screen: bool = False, stage_times: bool = False) -> None:
    """Lint PATHS (files and folders; '-' reads stdin). Default: the current folder."""
    import os
    from dataclasses import replace

    from ddplint.source import printable

    # Worker processes start as `python -c ...`, which puts the working directory
    # first on sys.path: the linted code (a signal.py, a torch checkout's signal/)
    # would shadow the standard library they import. Python >= 3.11 honours this.
    os.environ.setdefault("PYTHONSAFEPATH", "1")

    from ddplint.config import ConfigError, load_settings, split_selectors
    from ddplint.discovery import PathError, discover, relative_display
    from ddplint.engine import RunResult, default_jobs, lint_paths
    from ddplint.reporters import get_reporter
    paths = paths or (".",)
    reads_stdin = "-" in paths
    if reads_stdin and len(paths) > 1:
        raise _fail("'-' (stdin) cannot be combined with other paths")
    _check_flag_combinations(reads_stdin, fix=fix, diff=show_diff, add_noqa=add_noqa, reason=reason,
                             baseline=baseline_file, write_baseline=write_baseline_file,
                             diff_base=diff_base, ignore_noqa=ignore_noqa)
    start = Path(stdin_filename).parent if (reads_stdin and stdin_filename) else Path(paths[0])
    try:
        settings = load_settings(config_file, start=start if start.exists() else Path.cwd(),
                                 isolated=isolated)
        overrides = {}
        if select:
            overrides["select"] = split_selectors(select)
        if ignore:
            overrides["ignore"] = settings.ignore + split_selectors(ignore)
        if extend_select:
            overrides["extend_select"] = settings.extend_select + split_selectors(extend_select)
        if fail_on:
            overrides["fail_on"] = fail_on
        if no_notebooks:
            overrides["notebooks"] = False
        if max_file_size is not None:
            overrides["max_file_size"] = _size_option(max_file_size)
        settings = replace(settings, **overrides)
        settings.validate()
    except ConfigError as error:
        raise _fail(str(error))

    result = RunResult()
    if no_cache:
        cache = None
    else:
        from ddplint.cache import CACHE_DIR_NAME

        cache = cache_dir or settings.root / CACHE_DIR_NAME
    files: dict[str, Path] = {}  # displayed path -> file
    stdin_data = None
    if reads_stdin:
        display = stdin_filename or "<stdin>"
        skip = False
        if stdin_filename and force_exclude:
            from ddplint.config import path_matches

            skip = any(path_matches(stdin_filename, p) for p in settings.all_excludes())
        if skip:
            click.echo(f"ddplint: 0 files: {printable(stdin_filename)} is excluded (--force-exclude)", err=True)
        else:
            stdin_data = _read_stdin()
            result.files.append(_lint_text(stdin_data, stdin_filename, display, settings, cache, not no_screen))
    else:
        try:
            found = discover(paths, settings, force_exclude=force_exclude)
        except PathError as error:
            raise _fail(str(error))
        result.errors.extend(found.errors)
        if not found.files:
            click.echo(f"ddplint: {printable(found.why_no_files(paths))}", err=True)
        here = Path.cwd().resolve()
        shown = {path: relative_display(path, settings.root, here, found.resolved.get(path)) for path in found.files}
        files = {display: path for path, display in shown.items()}
        walked = [] if force_exclude else [Path(path) for path in paths if Path(path).is_dir()]
        result.files = lint_paths(found.files, settings, jobs or default_jobs(), cache_dir=cache, display=shown,
                                  screen=not no_screen, stats=result.stages, walked=walked)

    if ignore_noqa:
        for file in result.files:  # what the comments silenced, except DDP100's verdicts on them
            file.diagnostics = sorted(d for d in [*file.diagnostics, *file.suppressed] if d.code != "DDP100")
    if fix or show_diff or add_noqa:
        if reads_stdin:
            if stdin_data is not None:
                _fix_stdin(result, stdin_data, settings, stdin_filename, cache, diff=show_diff, unsafe=unsafe_fixes)
            elif not show_diff:  # excluded: an editor piping its buffer gets it back unchanged
                sys.stdout.buffer.write(_read_stdin())
            return
        outcomes = _fix_files(result, files, settings, cache, unsafe=unsafe_fixes,
                              add_noqa=add_noqa, reason=reason, write=not show_diff)
        if show_diff:
            changed = _report_diff(outcomes)
            for problem in result.errors:
                click.echo(f"ddplint: error: {problem}", err=True)
            sys.exit(EXIT_ERROR if result.errors else EXIT_FINDINGS if changed else EXIT_OK)
        _report_fixed(outcomes, add_noqa=add_noqa, show_fixes=show_fixes)
        if add_noqa:
            sys.exit(EXIT_ERROR if result.errors else EXIT_OK)
    if write_baseline_file is not None:
        _write_baseline(result, write_baseline_file, baseline_file)
        sys.exit(EXIT_ERROR if result.errors or result.internal_errors else EXIT_OK)
    if baseline_file is not None:
        _apply_baseline(result, baseline_file)
    if diff_base is not None:
        _keep_changed_lines(result, files, diff_base)

    exit_code = run_exit_code(result, settings.fail_on, exit_zero)

    stream = open(output_file, "w", encoding="utf-8") if output_file else sys.stdout
    try:
        colour_choice = {"always": True, "never": False}.get(colour)
        get_reporter(output_format)(result, stream, show_source=show_source, statistics=statistics,
                                    colour=colour_choice, show_fixes=show_fixes and not fix, exit_code=exit_code)
    finally:
        if output_file:
            stream.close()
    if stage_times and result.stages.get("seconds"):
        click.echo("wall seconds: " + ", ".join(f"{stage} {seconds:.2f}"
                                                for stage, seconds in result.stages["seconds"].items()), err=True)

    for problem in result.errors:
        click.echo(f"ddplint: error: {printable(problem)}", err=True)
    sys.exit(exit_code)


def run_exit_code(result, fail_on: str, exit_zero: bool = False) -> int:
    """DESIGN.md's exit codes for a finished run (a RunResult)."""
    from ddplint.rule import SEVERITY_RANK

    if result.internal_errors or result.errors:
        return EXIT_ERROR
    threshold = SEVERITY_RANK[fail_on]
    failing = any(SEVERITY_RANK[d.severity] >= threshold for f in result.files for d in f.diagnostics)
    return EXIT_FINDINGS if failing and not exit_zero else EXIT_OK


def _read_stdin() -> bytes:
    if sys.stdin is None:  # the process was started with standard input closed
        raise _fail("cannot read '-': standard input is closed")
    try:
        return sys.stdin.buffer.read()
    except (OSError, ValueError) as error:
        raise _fail(f"cannot read '-' (standard input): {error}")


def _size_option(value: str) -> int:
    from ddplint.budget import SizeError, parse_size
    from ddplint.config import ConfigError

    try:
        return parse_size(value)
    except SizeError as error:
        raise ConfigError(f"--max-file-size: {error}") from None


def _check_flag_combinations(reads_stdin: bool, *, fix: bool, diff: bool, add_noqa: bool,
                             reason: Optional[str], baseline: Optional[Path], write_baseline: Optional[Path],
                             diff_base: Optional[str], ignore_noqa: bool) -> None:
    def flags(**given: object) -> list[str]:
        return ["--" + name.replace("_", "-") for name, value in given.items() if value]

    if reason is not None and not add_noqa:
        raise _fail("--reason goes with --add-noqa")
    if reason is not None and ("]" in reason or "#" in reason or "\n" in reason or not reason.strip()):
        raise _fail("--reason must be one line of text without ']' or '#'")
    editing = flags(fix=fix, diff=diff, add_noqa=add_noqa)
    if len(editing) > 1 and not (editing == ["--fix", "--diff"]):
        raise _fail(f"{' and '.join(editing)} cannot be combined")
    for first, second in ((editing, flags(baseline=baseline, diff_base=diff_base, ignore_noqa=ignore_noqa,
                                          write_baseline=write_baseline)),
                          (flags(write_baseline=write_baseline), flags(diff_base=diff_base, ignore_noqa=ignore_noqa))):
        if first and second:
            raise _fail(f"{first[0]} cannot be combined with {second[0]}")
    if reads_stdin:
        unusable = flags(add_noqa=add_noqa, write_baseline=write_baseline, diff_base=diff_base)
        if unusable:
            raise _fail(f"{unusable[0]} works on files, not on stdin")


def _lint_text(text, path: Optional[str], display: str, settings, cache: Optional[Path], screen: bool = True):
    """Lint a text that stands for the file at ``path`` (in its project), or a
    nameless text on its own."""
    from ddplint.engine import Linter, lint_document

    if path is None:
        return Linter(settings, screen=screen).lint_source(text, display)
    return lint_document(text, path, settings, display=display, cache_dir=cache, screen=screen)


def _fix_files(result, files: dict[str, Path], settings, cache: Optional[Path], *, unsafe: bool,
               add_noqa: bool, reason: Optional[str], write: bool) -> list:
    """Fix (or add suppressions to) every file with something to do; replaces
    the files' results by the findings left. Returns the outcomes."""
    from ddplint.autofix import (NOT_SUPPRESSIBLE, Outcome, add_suppressions, applicable, encode_source,
                                 fix_source, read_source, write_atomically)

    def wanted(diagnostic) -> bool:
        return diagnostic.code not in NOT_SUPPRESSIBLE if add_noqa else applicable(diagnostic, unsafe)

    todo = [index for index, file in enumerate(result.files)
            if file.path in files and any(wanted(d) for d in file.diagnostics)]
    outcomes = []
    for index in todo:
        file = result.files[index]
        path = files[file.path]
        try:
            data, source, encoding = read_source(path)
        except (OSError, SyntaxError, UnicodeDecodeError, LookupError) as error:
            result.errors.append(f"{file.path}: cannot read the file to fix it: {error}")
            continue

        def relint(text: str, shown: str = file.path, where: Path = path):
            return _lint_text(text, str(where), shown, settings, cache)

        first = relint(source)  # the findings of exactly the text that will be edited
        outcome = add_suppressions(source, first, relint, reason) if add_noqa else \
            fix_source(source, first, relint, unsafe=unsafe)
        if outcome.changed and write:
            try:
                if path.read_bytes() != data:
                    raise OSError("the file changed while it was being fixed")
                write_atomically(path, encode_source(outcome.fixed, encoding))
            except (OSError, UnicodeEncodeError) as error:
                reason_text = getattr(error, "strerror", None) or str(error)
                result.errors.append(f"{file.path}: not written: {reason_text}; the file was left unchanged")
                outcome = Outcome(first, source, source)
        outcome.path = file.path
        result.files[index] = outcome.result if outcome.changed else first
        outcomes.append(outcome)
    return outcomes


def _fix_stdin(result, data: bytes, settings, path: Optional[str], cache: Optional[Path], *,
               diff: bool, unsafe: bool) -> None:
    """``-`` with --fix prints the fixed text; with --diff, the diff."""
    from ddplint.autofix import fix_source
    from ddplint.source import decode_source

    file = result.files[0]
    source, _ = decode_source(data)
    if source is None:
        sys.stdout.write(data.decode("utf-8", "replace"))
        sys.exit(EXIT_ERROR)
    outcome = fix_source(source, file, lambda text: _lint_text(text, path, file.path, settings, cache),
                         unsafe=unsafe)
    outcome.path = file.path
    if diff:
        changed = _report_diff([outcome])
        sys.exit(EXIT_FINDINGS if changed else EXIT_OK)
    sys.stdout.write(outcome.fixed)
    for problem in [outcome.problem] if outcome.problem else []:
        click.echo(f"ddplint: {file.path}: {problem}", err=True)
    sys.exit(EXIT_FINDINGS if outcome.result.diagnostics else EXIT_OK)


def _report_diff(outcomes: list) -> int:
    """Print a unified diff of each changed file; returns the number of fixes."""
    import difflib

    fixes = 0
    for outcome in outcomes:
        if outcome.problem:
            click.echo(f"ddplint: {outcome.path}: {outcome.problem}", err=True)
        if not outcome.changed:
            continue
        fixes += len(outcome.applied)
        sys.stdout.writelines(difflib.unified_diff(
            outcome.source.splitlines(keepends=True), outcome.fixed.splitlines(keepends=True),
            fromfile=f"a/{outcome.path}", tofile=f"b/{outcome.path}"))
    files = sum(1 for outcome in outcomes if outcome.changed)
    click.echo(f"Would fix {fixes} finding{'s' if fixes != 1 else ''} in {files} file{'s' if files != 1 else ''}."
               if fixes else "No fixes to apply.", err=True)
    return fixes


def _report_fixed(outcomes: list, *, add_noqa: bool, show_fixes: bool) -> None:
    done = sum(len(outcome.applied) for outcome in outcomes if outcome.changed)
    files = sum(1 for outcome in outcomes if outcome.changed)
    for outcome in outcomes:
        for problem in (outcome.problem, outcome.note):
            if problem:
                click.echo(f"ddplint: {outcome.path}: {problem}", err=True)
        if show_fixes and outcome.changed:
            for diagnostic, applied in outcome.applied:
                click.echo(f"fixed: {outcome.path}:{diagnostic.line}:{diagnostic.column}: {diagnostic.code} "
                           f"{applied.description}", err=True)
    what = "Added" if add_noqa else "Fixed"
    noun = "suppression" if add_noqa else "finding"
    click.echo(f"{what} {done} {noun}{'s' if done != 1 else ''} in {files} file{'s' if files != 1 else ''}.",
               err=True)


def _write_baseline(result, path: Path, previous: Optional[Path]) -> None:
    from ddplint.baseline import BaselineError, entries_to_write, load, write

    try:
        old = load(previous) if previous is not None else None
        count = write(path, entries_to_write(result.files, path.resolve().parent, old))
    except BaselineError as error:
        raise _fail(str(error))
    for problem in result.errors:
        click.echo(f"ddplint: error: {problem}", err=True)
    click.echo(f"ddplint: wrote {count} finding{'s' if count != 1 else ''} to the baseline {path}", err=True)


def _apply_baseline(result, path: Path) -> None:
    from ddplint.baseline import BaselineError, apply, load

    try:
        baseline = load(path)
    except BaselineError as error:
        raise _fail(str(error))
    stale = apply(baseline, result.files)
    if stale:
        click.echo(f"ddplint: {len(stale)} baseline entr{'ies' if len(stale) != 1 else 'y'} no longer "
                   f"occur; shrink the baseline with `--baseline {path} --write-baseline {path}`:", err=True)
        for entry in stale:
            click.echo(f"  {entry.path}: {entry.code} {entry.line_text}", err=True)


def _keep_changed_lines(result, files: dict[str, Path], revision: str) -> None:
    from ddplint.gitdiff import GitError, changed_lines, on_changed_lines

    linted = [files[file.path] for file in result.files if file.path in files]
    try:
        changed = changed_lines(linted, revision, folder=Path.cwd())
    except GitError as error:
        raise _fail(str(error))
    for file in result.files:
        lines = changed.get(files[file.path].resolve()) if file.path in files else None
        if lines is not None:
            file.diagnostics = [d for d in file.diagnostics if on_changed_lines(lines, d.line, d.end_line)]


@cli.command("rule")
@click.argument("rule_id")
def rule_command(rule_id: str) -> None:
    """Print the documentation of one rule (by id, e.g. DDP007, or name)."""
    from ddplint.registry import get_rule

    rule = get_rule(rule_id)
    if rule is None:
        raise _fail(f"unknown rule '{rule_id}'; `ddplint rules` lists them")
    context = ", fires only in DDP context" if rule.needs_ddp_context else ""
    text = f"# {rule.code} {rule.name}\n\nDefault severity: {rule.severity}{context}.\n\n{rule.documentation()}\n"
    if sys.stdout.isatty() and not _no_colour():
        from rich.console import Console
        from rich.markdown import Markdown

        Console().print(Markdown(text))
    else:
        click.echo(text, nl=False)


@cli.command("rules")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
def rules_command(output_format: str) -> None:
    """Print the rule catalog."""
    import json

    from ddplint.registry import all_rules

    rows = [
        {"code": r.code, "name": r.name, "severity": r.severity, "ddp_context": r.needs_ddp_context,
         "message": r.message, "summary": r.summary(), "url": r.url()}
        for r in all_rules()
    ]
    if output_format == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    width = max(len(row["name"]) for row in rows)
    click.echo(f"{'code':<7} {'name':<{width}} {'severity':<8} ctx  message")
    for row in rows:
        ctx = "yes" if row["ddp_context"] else "   "
        click.echo(f"{row['code']:<7} {row['name']:<{width}} {row['severity']:<8} {ctx}  {row['message']}")


def _no_colour() -> bool:
    import os

    return bool(os.environ.get("NO_COLOR"))


@cli.command()
@click.argument("rule_ids", nargs=-1)
@click.option("--all", "run_all", is_flag=True, help="Run every probe.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--world-size", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--steps", type=click.IntRange(min=1), default=None, help="Steps per probe (probe default).")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
def confirm(rule_ids: tuple[str, ...], run_all: bool, device: str, world_size: int,
            steps: Optional[int], output_format: str) -> None:
    """Reproduce rule patterns and measure their effect (needs torch)."""
    if not rule_ids and not run_all:
        raise _fail("name rule ids (e.g. `ddplint confirm DDP002`) or pass --all")
    if importlib.util.find_spec("torch") is None:
        raise _fail("`ddplint confirm` needs PyTorch: install the runtime extra with "
                    "`pip install 'ddplint[runtime]'` (or install torch yourself)")
    from ddplint.runtime.confirm import run_confirm

    code = run_confirm(None if run_all else [r.upper() for r in rule_ids], device=device,
                       world_size=world_size, steps=steps, fmt=output_format, stream=sys.stdout)
    sys.exit(code)


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-m", "module", metavar="MODULE", help="Run a module (as `python -m MODULE`) instead of a script.")
@click.option("--nproc-per-node", "nproc", type=click.IntRange(min=1), default=None,
              help="Ranks to launch through torchrun [default: 2].")
@click.option("--steps", type=click.IntRange(min=1), default=10, show_default=True,
              help="Stop after this many optimizer steps on every rank.")
@click.option("--timeout", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Collective timeout in seconds: a hang ends in a diagnosis after this long.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="cpu runs gloo (and hides GPUs) whatever backend the script asks for.")
@click.option("--max-comm-fraction", type=click.FloatRange(0, 1), default=0.5, show_default=True,
              help="Fail when communication takes a larger share of the step.")
@click.option("--launcher", type=click.Choice(["auto", "torchrun", "script"]), default="auto", show_default=True,
              help="torchrun, or the script as one process that spawns its ranks (auto: mp.spawn seen).")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("-q", "--quiet", is_flag=True, help="Do not pass the script's own output through (to stderr).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[--] SCRIPT [ARGS]...")
def smoke(module: Optional[str], nproc: Optional[int], steps: int, timeout: float, device: str,
          max_comm_fraction: float, launcher: str, output_format: str, quiet: bool,
          command: tuple[str, ...]) -> None:
    """Run a training script for a few steps on a few ranks and gate on what it does.

    `ddplint smoke [OPTIONS] -- SCRIPT [ARGS...]` or `ddplint smoke [OPTIONS] -m MODULE [ARGS...]`.
    Exit 0 every gate passed, 1 a gate failed, 2 the run could not be made (needs torch).
    """
    if importlib.util.find_spec("torch") is None:
        raise _fail("`ddplint smoke` needs PyTorch: install the runtime extra with "
                    "`pip install 'ddplint[runtime]'` (or install torch yourself)")
    from ddplint.runtime.smoke.runner import SmokeOptions, run_smoke

    script, args = (None, list(command)) if module else (command[0] if command else None, list(command[1:]))
    options = SmokeOptions(script=script, module=module, args=args, nproc=nproc, steps=steps, timeout=timeout,
                           device=device, max_comm_fraction=max_comm_fraction, fmt=output_format,
                           launcher=launcher, quiet=quiet)
    sys.exit(run_smoke(options, stream=sys.stdout))


@cli.command()
def server() -> None:
    """Run the language server over stdio (needs the lsp extra)."""
    if importlib.util.find_spec("pygls") is None:
        raise _fail("`ddplint server` needs pygls: install the lsp extra with `pip install 'ddplint[lsp]'`")
    from ddplint.lsp.server import serve

    serve()


def main() -> None:
    cli(prog_name="ddplint")


if __name__ == "__main__":  # pragma: no cover
    main()
