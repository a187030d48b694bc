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
    click.echo(f"ddplint: error: {message}", err=True)
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
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Worker processes [default: number of CPUs].")
@click.option("-o", "--output-file", type=click.Path(dir_okay=False, writable=True),
              help="Write the report to this file instead of stdout.")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache.")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Cache folder [default: .ddplint_cache at the project root].")
@click.option("--color", "colour", type=click.Choice(["auto", "always", "never"]), default="auto",
              help="Colour the text output [default: auto: only on a terminal, never with NO_COLOR].")
def check(paths: tuple[str, ...], select, ignore, extend_select, output_format: str,
          fail_on: Optional[str], exit_zero: bool, statistics: bool, show_source: bool,
          stdin_filename: Optional[str], config_file: Optional[Path], isolated: bool,
          force_exclude: bool, jobs: Optional[int], output_file: Optional[str], no_cache: bool,
          cache_dir: Optional[Path], colour: str) -> None:
    """Lint PATHS (files and folders; '-' reads stdin). Default: the current folder."""
    from dataclasses import replace

    from ddplint.config import ConfigError, load_settings, split_selectors
    from ddplint.discovery import PathError, discover, relative_display
    from ddplint.cache import CACHE_DIR_NAME
    from ddplint.engine import Linter, RunResult, default_jobs, lint_document, lint_paths
    from ddplint.reporters import get_reporter
    from ddplint.rule import SEVERITY_RANK

    paths = paths or (".",)
    reads_stdin = "-" in paths
    if reads_stdin and len(paths) > 1:
        raise _fail("'-' (stdin) cannot be combined with other paths")
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
        settings = replace(settings, **overrides)
        settings.validate()
    except ConfigError as error:
        raise _fail(str(error))

    result = RunResult()
    cache = None if no_cache else (cache_dir or settings.root / CACHE_DIR_NAME)
    if reads_stdin:
        display = stdin_filename or "<stdin>"
        skip = False
        if stdin_filename and force_exclude:
            from ddplint.config import path_matches

            skip = any(path_matches(stdin_filename, p) for p in settings.all_excludes())
        if skip:
            pass
        elif stdin_filename:  # the text stands for that file of its project
            result.files.append(lint_document(sys.stdin.buffer.read(), stdin_filename, settings,
                                              display=display, cache_dir=cache))
        else:
            result.files.append(Linter(settings).lint_source(sys.stdin.buffer.read(), display))
    else:
        try:
            found = discover(paths, settings, force_exclude=force_exclude)
        except PathError as error:
            raise _fail(str(error))
        result.errors.extend(found.errors)
        shown = {path: relative_display(path, settings.root) for path in found.files}
        result.files = lint_paths(found.files, settings, jobs or default_jobs(), cache_dir=cache, display=shown)

    stream = open(output_file, "w", encoding="utf-8") if output_file else sys.stdout
    try:
        colour_choice = {"always": True, "never": False}.get(colour)
        get_reporter(output_format)(result, stream, show_source=show_source,
                                    statistics=statistics, colour=colour_choice)
    finally:
        if output_file:
            stream.close()

    for problem in result.errors:
        click.echo(f"ddplint: error: {problem}", err=True)
    if result.internal_errors or result.errors:
        sys.exit(EXIT_ERROR)
    threshold = SEVERITY_RANK[settings.fail_on]
    failing = any(SEVERITY_RANK[d.severity] >= threshold for f in result.files for d in f.diagnostics)
    sys.exit(EXIT_FINDINGS if failing and not exit_zero else EXIT_OK)


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
