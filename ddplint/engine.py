"""The lint pipeline for one file and for a set of files.

read -> decode -> text prefilter -> screen (CPython's ``ast``: which rules can
possibly report here, ``ddplint.screen``) -> judge, only when a screen passed:
parse once with libcst -> one semantic index -> the rules whose screen passed
-> positions (only when something was reported) -> suppressions -> sorted
diagnostics. libcst and the rule modules are imported only by the judge.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple, Optional, Sequence, Union

from typing import TYPE_CHECKING

from ddplint import budget
from ddplint.config import Settings
from ddplint.diagnostics import INTERNAL_ERROR, Diagnostic, FileResult
from ddplint.notebooks import is_notebook, lint_notebook, python_source
from ddplint.screen.manifest import RuleInfo, rule_infos
from ddplint.source import decode_source
from ddplint.suppressions import parse_suppressions

if TYPE_CHECKING:
    import libcst as cst

    from ddplint.analysis.semantic import SemanticIndex
    from ddplint.rule import Report, Rule

SYNTAX_ERROR = "DDP000"
UNUSED_SUPPRESSION = "DDP100"  # judged after the other rules (rules/ddp100_unused_suppression.py)


@dataclass
class RunResult:
    """The outcome of linting a set of files."""

    files: list[FileResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # path problems met while discovering
    # How many files each stage handled (``lint_paths``'s ``stats``; --statistics).
    stages: dict = field(default_factory=dict)

    @property
    def diagnostics_count(self) -> int:
        return sum(len(result.diagnostics) for result in self.files)

    @property
    def internal_errors(self) -> int:
        return sum(result.internal_errors for result in self.files)

    @property
    def parsed_count(self) -> int:
        return sum(1 for result in self.files if result.parsed)


class Linter:
    """Holds the selected rules; lints sources and files. The rule classes
    themselves (and libcst) are loaded only when a file is judged."""

    def __init__(self, settings: Settings, screen: bool = True) -> None:
        self.settings = settings
        selected = settings.selected_codes()
        self.infos: list[RuleInfo] = [info for info in rule_infos()
                                      if info.code in selected and info.code not in (SYNTAX_ERROR, UNUSED_SUPPRESSION)]
        self.report_syntax_errors = SYNTAX_ERROR in selected
        self.max_file_size = settings.max_file_size
        # What a file over the size budget is scanned for (the text prefilter's words).
        self.trigger_words = frozenset(trigger.encode("utf-8") for info in self.infos for trigger in info.triggers)
        self.judges_suppressions = UNUSED_SUPPRESSION in selected
        self._unused_suppression = None
        self._all_codes = frozenset(info.code for info in rule_infos()) - {UNUSED_SUPPRESSION}
        # The joined facts of the project root (ddplint.screen.project), set by
        # lint_paths / lint_document; None: a file alone is its own project.
        self.project = None
        # False (``--no-screen``): judge every file the text prefilter lets through.
        self.screening = screen
        self._rules: Optional[dict[str, "Rule"]] = None

    @property
    def rules(self) -> list["Rule"]:
        """The selected rule instances (imports the rule modules and libcst)."""
        return list(self._rule_instances().values())

    def _rule_instances(self) -> dict[str, "Rule"]:
        for info in self.infos:
            self._rule(info)
        return self._rules

    def _rule(self, info: RuleInfo) -> "Rule":
        """The rule of ``info``, importing its module only (and libcst) when first judged."""
        if self._rules is None:
            self._rules = {}
        rule = self._rules.get(info.code)
        if rule is None:
            import importlib

            from ddplint.rule import Rule

            module = importlib.import_module(info.module)
            cls = next(value for value in vars(module).values()
                       if isinstance(value, type) and issubclass(value, Rule) and value.__module__ == module.__name__
                       and getattr(value, "code", None) == info.code)
            rule = self._rules[info.code] = cls()
        return rule

    @property
    def unused_suppression(self):
        """The DDP100 rule when selected (its module needs no libcst)."""
        if self.judges_suppressions and self._unused_suppression is None:
            import importlib

            module = importlib.import_module(next(i.module for i in rule_infos() if i.code == UNUSED_SUPPRESSION))
            self._unused_suppression = module.UnusedSuppression()
        return self._unused_suppression

    # ------------------------------------------------------------------ one file
    def lint_file(self, path: Path, display: Optional[str] = None, module: Optional[str] = None,
                  screened=None) -> FileResult:
        display = display or path.as_posix()
        try:
            data = budget.read_within_budget(path, _read_limit(path, self.max_file_size), self.trigger_words)
        except OSError as error:
            # One line in the report; the run goes on and exits 2 (like a rule that crashed).
            result = FileResult(display, internal_errors=1)
            result.diagnostics.append(_file_error(f"cannot read file: {error.strerror or error}"))
            return result
        if isinstance(data, budget.TooLarge):
            return self.too_large(display, data)
        return self.lint_source(data, display, module, screened)

    def lint_source(self, data: Union[str, bytes], display: str = "<stdin>",
                    module: Optional[str] = None, screened=None) -> FileResult:
        """Lint one file's text. ``display`` names it in the result (and says
        whether it is a notebook); ``module`` is its name in ``self.project``
        (``ddplint.discovery.module_key``; default: ``display``)."""
        if is_notebook(display):
            return lint_notebook(self, data, display, module)
        return self.lint_python(data, display, module, screened)

    def lint_python(self, data: Union[str, bytes], display: str = "<stdin>",
                    module: Optional[str] = None, screened=None) -> FileResult:
        """Lint Python text; the semantic index carries ``module`` as its path.
        ``screened`` is the file's screen verdict when the facts pass computed
        it (``ddplint.screen.screening.resolve``: codes to judge, DDP context)."""
        module = module or display
        raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
        if budget.over_budget(raw, self.max_file_size):
            return self.too_large(display, budget.TooLarge(len(raw), budget.words_in(raw, self.trigger_words)))
        result = FileResult(display)
        if isinstance(data, bytes):
            source, problem = decode_source(data)
            if source is None:
                if self.report_syntax_errors:
                    result.diagnostics.append(_syntax_diagnostic(1, 1, problem))
                return result
        else:
            source = data
        ignored = self._ignored_codes(display)
        maybe_in_context = _may_be_in_ddp_context(source) or (
            self.project is not None and self.project.module_in_ddp_context(module))
        candidates = [info for info in self.infos
                      if info.code not in ignored and _has_trigger(info, source)
                      and (maybe_in_context or not info.needs_ddp_context)]
        syntax_wanted = self.report_syntax_errors and SYNTAX_ERROR not in ignored
        if not candidates and not (syntax_wanted and self._always_parse):
            return result
        ran: set[str] = set()
        judged = candidates
        if self.screening:
            if screened is None:
                from ddplint.screen.screening import resolve, screen_source

                verdict = screen_source(source, module)
                screened = resolve(verdict, self.project, module) if verdict is not None else None
            if screened is not None:
                # CPython's parser read the file. A candidate whose screen fails
                # reports nothing here: it counts as run (DDP100 judges its
                # suppressions as after --no-screen); the judge gets the others.
                passed, context = screened
                result.screened = True
                applies = [info for info in candidates if context or not info.needs_ddp_context]
                judged = [info for info in applies if info.code in passed]
                ran.update(info.code for info in applies if info.code not in passed)
                if syntax_wanted:
                    ran.add(SYNTAX_ERROR)
        if judged or not result.screened:
            result.parsed = True
            rules = [self._rule(info) for info in judged]
            result.judged = tuple(info.code for info in judged)
            if not on_deep_stack(self._analyse, source, module, rules, syntax_wanted, result, ran):
                ran.clear()  # libcst could not read it after all: nothing ran
        judge = None
        unused = self.unused_suppression
        if unused is not None and UNUSED_SUPPRESSION not in ignored:
            # A bare suppression can be judged when every rule either ran or cannot fire on this text.
            cannot_fire = {info.code for info in self.infos
                           if info.code not in ignored and not _has_trigger(info, source)}
            judge = (unused, frozenset(ran), self._all_codes <= ran | cannot_fire,
                     self.settings.severity_of(UNUSED_SUPPRESSION, unused.severity))
        _apply_suppressions(result, source, judge)
        return result

    def too_large(self, display: str, file: budget.TooLarge) -> FileResult:
        """A file over the size budget is not parsed: a DDP000 notice says so when a
        selected rule could have had something to say (its trigger words appear)."""
        result = FileResult(display)
        ignored = self._ignored_codes(display)
        could_fire = any(info.code not in ignored and (
            not info.triggers or any(word.encode("utf-8") in file.mentions for word in info.triggers))
            for info in self.infos)
        if self.report_syntax_errors and SYNTAX_ERROR not in ignored and (could_fire or self._always_parse):
            result.diagnostics.append(_syntax_diagnostic(
                1, 1, budget.too_large_message(file.size, self.max_file_size)))
        return result

    def _ignored_codes(self, display: str) -> frozenset[str]:
        relative = display
        try:
            relative = Path(display).resolve().relative_to(self.settings.root.resolve()).as_posix()
        except (ValueError, OSError):
            pass
        return self.settings.ignored_for(relative)

    def _analyse(self, source: str, module_name: str, rules: list["Rule"], syntax_wanted: bool,
                 result: FileResult, ran: set[str]) -> bool:
        """Parse, index, run the rules and position the findings (on a deep stack).
        ``ran`` receives the codes of the rules that ran to the end on the file.
        False when libcst could not parse the file."""
        from ddplint.analysis.semantic import SemanticIndex

        module, error_diagnostic = parse_module(source)
        if module is None:
            if syntax_wanted:
                result.diagnostics.append(error_diagnostic)
            return False
        if syntax_wanted:
            ran.add(SYNTAX_ERROR)
        try:
            index = SemanticIndex.build(module, source, module_name)
        except RecursionError:
            if syntax_wanted:
                result.diagnostics.append(_syntax_diagnostic(1, 1, "the file is too deeply nested to analyse"))
            return True
        index.project = self.project
        reports: list[Report] = []
        for rule in rules:
            if rule.needs_ddp_context and not index.in_ddp_context:
                continue
            try:
                reports.extend(rule.check(index))
                ran.add(rule.code)
            except RecursionError:
                result.diagnostics.append(_internal(rule, "the file is too deeply nested to analyse"))
                result.internal_errors += 1
            except Exception as error:  # one broken rule must not stop the run
                result.diagnostics.append(_internal(rule, f"{type(error).__name__}: {error}"))
                result.internal_errors += 1
        if reports:
            result.diagnostics.extend(self._positioned(index, reports))
        return True

    # Unparseable files are reported only when they are parsed, i.e. when some
    # selected rule's trigger appears in them (see the prefilter). Set by tests
    # and by `--select DDP000` alone, where parsing everything is the point.
    @property
    def _always_parse(self) -> bool:
        return not self.infos

    def _positioned(self, index: "SemanticIndex", reports: list["Report"]) -> list[Diagnostic]:
        from ddplint.analysis.positions import locate

        from ddplint.fixes import resolve

        by_code = self._rules or {}
        # The nodes that fixes edit are located in the same pass as the findings.
        fix_nodes = [node for report in reports if report.fix is not None for node in report.fix.nodes()]
        positions = locate(index, [*(report.node for report in reports), *fix_nodes])
        diagnostics = []
        for report in reports:
            where = positions.get(report.node)
            if where is None:
                continue
            severity = self.settings.severity_of(report.code, report.severity)
            fix = resolve(report.fix, positions, index.source) if report.fix is not None else None
            diagnostics.append(Diagnostic(
                where.start.line, where.start.column + 1, where.end.line, where.end.column + 1,
                report.code, by_code[report.code].name, severity, report.message, fix,
            ))
        return diagnostics


def _has_trigger(rule: Union[RuleInfo, "Rule"], source: str) -> bool:
    return not rule.triggers or any(trigger in source for trigger in rule.triggers)


def _may_be_in_ddp_context(source: str) -> bool:
    """``ddplint.analysis.semantic.may_be_in_ddp_context`` without importing libcst."""
    from ddplint.screen.context import DDP_CONTEXT_PATTERN

    return DDP_CONTEXT_PATTERN.search(source) is not None


# libcst's native parser and every tree walk recurse once per nesting level. On
# the main thread's 8 MiB stack a few thousand levels crash the process (a
# segfault in the parser, not an exception), so analysis runs on one worker
# thread with a large stack (virtual memory: only the pages used are touched)
# and a matching recursion limit.
_DEEP_STACK_BYTES = 512 * 1024 * 1024
_DEEP_RECURSION_LIMIT = 30_000
_deep_stack_pool = None


def on_deep_stack(function, *args):
    global _deep_stack_pool
    if _deep_stack_pool is None:
        from concurrent.futures import ThreadPoolExecutor

        previous = threading.stack_size(_DEEP_STACK_BYTES)
        try:
            pool = ThreadPoolExecutor(1, thread_name_prefix="ddplint-deep-stack")
            pool.submit(lambda: None).result()  # start the thread while the size is set
        finally:
            threading.stack_size(previous)
        _deep_stack_pool = pool
    return _deep_stack_pool.submit(_with_recursion_limit, function, args).result()


def _with_recursion_limit(function, args):
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(max(previous, _DEEP_RECURSION_LIMIT))
    try:
        return function(*args)
    finally:
        sys.setrecursionlimit(previous)


# CPython refuses more than 200 nested brackets, so deeper nesting is never valid
# Python; the crude count below (strings included) only decides whether to ask
# CPython's parser first, so that libcst never sees such a file.
_MAX_VALID_BRACKET_DEPTH = 200
_NOT_BRACKETS = re.compile(r"[^()\[\]{}]+")


def _crude_bracket_depth(source: str) -> int:
    depth = deepest = 0
    for char in _NOT_BRACKETS.sub("", source):
        if char in "([{":
            depth += 1
            if depth > deepest:
                deepest = depth
        elif char in ")]}":
            depth -= 1
    return deepest


def parse_module(source: str) -> tuple[Optional["cst.Module"], Optional[Diagnostic]]:
    import libcst as cst

    from ddplint import libcst_compat

    libcst_compat.apply()  # valid Python that libcst's own checks reject

    if "\0" in source:  # Python refuses NUL bytes anywhere; say where the first one is
        before = source[:source.index("\0")]
        line = before.count("\n") + 1
        return None, _syntax_diagnostic(line, len(before) - (before.rfind("\n") + 1) + 1,
                                        "syntax error: the file contains a NUL byte")
    long_chain = budget.crude_longest_chain(source) > budget.MAX_CHAIN_LINKS
    if long_chain or _crude_bracket_depth(source) > _MAX_VALID_BRACKET_DEPTH:
        import ast

        try:
            tree = ast.parse(source)
        except SyntaxError as error:
            return None, _syntax_diagnostic(max(error.lineno or 1, 1), max(error.offset or 1, 1),
                                            f"syntax error: {error.msg}")
        except ValueError as error:  # NUL bytes (Python < 3.12)
            return None, _syntax_diagnostic(1, 1, f"syntax error: {error}")
        except (RecursionError, MemoryError):
            return None, _syntax_diagnostic(1, 1, "the file is too deeply nested to parse")
        links, line, column = budget.longest_chain(tree) if long_chain else (0, 1, 1)
        if links > budget.MAX_CHAIN_LINKS:
            return None, _syntax_diagnostic(line, column, (
                f"too deeply nested to analyse: a chain of {links} attribute accesses, calls, subscripts "
                f"or operators (limit {budget.MAX_CHAIN_LINKS})"))
    try:
        return cst.parse_module(source), None
    except cst.ParserSyntaxError as error:
        return None, _explain_syntax_error(source, error)
    except (RecursionError, MemoryError):
        return None, _syntax_diagnostic(1, 1, "the file is too deeply nested to parse")
    except Exception as error:  # the parser itself failed on odd input
        return None, _syntax_diagnostic(1, 1, f"cannot parse file: {type(error).__name__}: {error}")


def _explain_syntax_error(source: str, error) -> Diagnostic:
    """CPython's parser names the position and the problem better than libcst's;
    ask it only now that the file is known to be broken."""
    import ast

    try:
        ast.parse(source)
    except SyntaxError as python_error:
        line = max(python_error.lineno or 1, 1)
        column = max(python_error.offset or 1, 1)
        return _syntax_diagnostic(line, column, f"syntax error: {python_error.msg}")
    except (RecursionError, MemoryError, ValueError):
        pass
    line, column = max(error.raw_line, 1), max(error.raw_column, 0) + 1
    detail = " ".join(str(error.message).split()) or "invalid syntax"
    return _syntax_diagnostic(line, column, f"ddplint's parser cannot read this syntax: {detail}")


def _syntax_diagnostic(line: int, column: int, message: str) -> Diagnostic:
    return Diagnostic(line, column, line, column, SYNTAX_ERROR, "syntax-error", "error", message)


def _file_error(message: str) -> Diagnostic:
    return Diagnostic(1, 1, 1, 1, INTERNAL_ERROR, INTERNAL_ERROR, "error", message)


def _internal(rule: "Rule", detail: str) -> Diagnostic:
    return Diagnostic(1, 1, 1, 1, INTERNAL_ERROR, INTERNAL_ERROR, "error",
                      f"rule {rule.code} ({rule.name}) failed on this file: {detail}; "
                      "please report it")


def _apply_suppressions(result: FileResult, source: str, judge=None) -> None:
    """Move suppressed findings to ``result.suppressed``; with ``judge`` (the
    DDP100 rule, the codes that ran, whether a bare suppression can be judged,
    DDP100's severity) report the suppressions that silenced nothing."""
    if not result.diagnostics and judge is None:
        return
    from ddplint.source import split_lines

    suppressions = parse_suppressions(source)
    lines = [line.rstrip("\r\n") for line in split_lines(source)]  # not str.splitlines: see split_lines
    kept = []
    used: dict = {}
    for diagnostic in result.diagnostics:
        silencers = suppressions.silencers(diagnostic.code, diagnostic.line) \
            if diagnostic.code != INTERNAL_ERROR else []
        for directive in silencers:
            used.setdefault(directive, set()).add(diagnostic.code)
        (result.suppressed if silencers else kept).append(diagnostic)
    if judge is not None and suppressions.directives:
        rule, ran, judge_all, severity = judge
        for diagnostic in rule.judge(source, suppressions, used, ran, judge_all):
            diagnostic = replace(diagnostic, severity=severity)
            # A suppression silences the finding about itself only by naming DDP100
            # (a bare "# noqa" would otherwise hide its own staleness).
            if any((d.line, d.column) != (diagnostic.line, diagnostic.column) or UNUSED_SUPPRESSION in d.codes
                   for d in suppressions.silencers(UNUSED_SUPPRESSION, diagnostic.line)):
                result.suppressed.append(diagnostic)
            else:
                kept.append(diagnostic)
    for diagnostic in [*kept, *result.suppressed]:
        if 0 < diagnostic.line <= len(lines):
            result.source_lines[diagnostic.line] = lines[diagnostic.line - 1]
    result.diagnostics = kept
    result.suppressed.sort()
    result.sort()


# ---------------------------------------------------------------------- many files
class _Job(NamedTuple):
    """A named file to judge: where it is, how it is shown, its name in the project."""

    path: str
    display: str
    module: str
    screened: Optional[tuple] = None  # (codes to judge, DDP context) from the facts pass


_worker: dict = {}  # per worker process: the linter, the cache and the cache-key parts


def _init_worker(settings: Settings, project=None, cache_dir: Optional[str] = None,
                 project_digest: str = "", screen: bool = True) -> None:
    linter = Linter(settings, screen=screen)
    linter.project = project
    cache = None
    if cache_dir:
        from ddplint.cache import Cache  # not imported at all with --no-cache

        cache = Cache(Path(cache_dir))
    _worker.update(linter=linter, cache=cache,
                   fingerprint=settings.fingerprint(), project_digest=project_digest)


def _result_key(content: str, job: _Job, fingerprint: str, project_digest: str) -> str:
    from ddplint.cache import Cache

    # The module name is part of the key: the index carries it (test modules, imports).
    return Cache.result_key(content, f"{job.display}\0{job.module}", fingerprint, project_digest)


def _lint_in_worker(job: _Job) -> FileResult:
    linter, cache = _worker["linter"], _worker["cache"]
    if cache is None:
        return linter.lint_file(Path(job.path), job.display, job.module, job.screened)
    try:
        data = budget.read_within_budget(Path(job.path), _read_limit(job.path, linter.max_file_size),
                                         linter.trigger_words)
    except OSError:
        return linter.lint_file(Path(job.path), job.display, job.module)  # reports the read error
    if isinstance(data, budget.TooLarge):
        return linter.too_large(job.display, data)  # cheap: not cached
    key = _result_key(cache.content_digest(data), job, _worker["fingerprint"], _worker["project_digest"])
    cached = cache.load_result(key, job.display)
    if cached is not None:
        cached.cached = True
        return cached
    result = linter.lint_source(data, job.display, job.module, job.screened)
    cache.store_result(key, result)
    return result


def _summarize_job(job: tuple[str, str, Optional[str], int]):
    """Project facts of one file: (facts or None, facts key, served by the cache).
    ``job`` is (path on disk, module name, cache folder, size budget). Without a
    cache folder the key is "" (it only names cached facts and results)."""
    path, module, cache_dir, max_file_size = job
    try:
        data = budget.read_within_budget(Path(path), _read_limit(path, max_file_size))
    except OSError:
        return None, "unreadable", False
    if isinstance(data, budget.TooLarge):
        return None, TOO_LARGE_FACTS, False  # never summarised: the facts are None whatever the bytes
    if not cache_dir:
        return _summarize_bytes(data, module), "", False
    from ddplint.cache import Cache

    cache = Cache(Path(cache_dir))
    key = Cache.facts_key(Cache.content_digest(data), module)
    found, facts = cache.load_facts(key)
    if not found:
        facts = _summarize_bytes(data, module)
        if cache is not None:
            cache.store_facts(key, facts)
    # Facts are a function of (bytes, module name, version): the facts key digests them.
    return facts, key, found


def _read_limit(path: Union[str, Path], max_file_size: int) -> int:
    """How much of a file to read before calling it too large: a notebook is read
    whole (its JSON carries outputs and images); the budget applies to its code."""
    return 0 if is_notebook(str(path)) else max_file_size


# The facts key of a file over the size budget (ddplint.budget): no facts.
TOO_LARGE_FACTS = "too-large"


def _summarize_bytes(data: bytes, module: str, max_file_size: int = budget.DEFAULT_MAX_FILE_SIZE):
    from ddplint.screen.facts import LAUNCHER_SUFFIX, summarize, summarize_launcher

    source = python_source(data) if is_notebook(module) else decode_source(data)[0]
    if source is None or budget.over_budget(source.encode("utf-8", "surrogatepass"), max_file_size):
        return None
    if module.endswith(LAUNCHER_SUFFIX):
        return summarize_launcher(source, module)
    return summarize(source, module)


def _needs_project(settings: Settings) -> bool:
    """Project analysis matters to (ctx) rules (the context widens) and to rules
    that ask the project (``uses_project``)."""
    return any(info.needs_ddp_context or info.uses_project for info in Linter(settings).infos)


def _map(function, jobs_list, jobs: int, initializer=None, initargs=()):
    if jobs <= 1 or len(jobs_list) < 2 * jobs:
        if initializer is not None:
            initializer(*initargs)
        return [function(job) for job in jobs_list]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # Not "fork": forking a process that runs threads (pytest's faulthandler, an
    # editor's server) can copy a held lock into the child, which then hangs.
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    chunk = max(1, min(64, len(jobs_list) // (jobs * 8)))
    with ProcessPoolExecutor(jobs, mp_context=context, initializer=initializer, initargs=initargs) as pool:
        return list(pool.map(function, jobs_list, chunksize=chunk))


def build_project(pairs: Sequence[tuple[str, str]], jobs: int = 1, cache_dir: Optional[str] = None,
                  buffers: Optional[dict[str, bytes]] = None, max_file_size: int = budget.DEFAULT_MAX_FILE_SIZE,
                  stats: Optional[dict] = None):
    """Pass 1: a small facts summary per file (ast, no CST kept), then the join.
    ``pairs`` are (path on disk, module name); ``buffers`` maps a module name to
    text that replaces the file's (an editor's unsaved buffer). Returns the
    project and a digest of every file's facts (for result cache keys; "" without
    a cache folder)."""
    from ddplint.screen.project import Project

    buffers = buffers or {}
    on_disk = [(path, module, cache_dir, max_file_size) for path, module in pairs if module not in buffers]
    summaries = _map(_summarize_job, on_disk, jobs)
    keys = [(module, key) for (_, module, _, _), (_, key, _) in zip(on_disk, summaries)]
    facts = [found for found, _, _ in summaries]
    from ddplint.screen.facts import intern_strings

    for found in facts:
        if found is not None:
            intern_strings(found)  # one copy of each name across modules (summaries come pickled)
    if stats is not None:
        stats["read"] = stats.get("read", 0) + len(on_disk) + len(buffers)
        stats["facts cache hits"] = stats.get("facts cache hits", 0) + sum(1 for _, _, hit in summaries if hit)
        stats["ast-screened"] = stats.get("ast-screened", 0) + sum(
            1 for found, _, hit in summaries if found is not None and not hit) + len(buffers)
    for module, data in sorted(buffers.items()):
        facts.append(_summarize_bytes(data, module, max_file_size))
    if cache_dir is None:
        return Project([f for f in facts if f is not None]), ""
    from ddplint.cache import Cache, project_digest

    keys += [(module, Cache.facts_key(Cache.content_digest(data), module)) for module, data in sorted(buffers.items())]
    return Project([f for f in facts if f is not None]), project_digest(keys)


def _project_pairs(root: Path, settings: Settings, named: Sequence[Path],
                   walked: Sequence[Path] = (), modules: Optional[dict[Path, str]] = None) -> list[tuple[str, str]]:
    """(path on disk, module name) of every file of the project at ``root``.
    ``walked``: folders the caller already discovered ``named`` from (no
    --force-exclude); when the root is one of them, ``named`` is the project
    and the tree is not walked twice (``modules``: their module names, known)."""
    from ddplint.discovery import launcher_files, module_key, project_files

    modules = modules or {}
    launchers = [(str(path), module_key(path, root)) for path in launcher_files(root, settings, walked)]
    if any(os.path.realpath(folder) == os.path.realpath(root) for folder in walked):
        files = sorted(dict((os.path.abspath(path), Path(path)) for path in named).items())
        return [(str(path), modules.get(path) or module_key(path, root)) for _, path in files] + launchers
    return [(str(path), module_key(path, root)) for path in project_files(root, settings, named)] + launchers


# ---------------------------------------------------------------------- parallel runs, one component at a time
# With several processes, no process holds the whole project. The facts pass
# stores every module's facts (in the cache, or a scratch folder with
# --no-cache) and hands the main process only the dotted names each module
# refers to; the main process links modules into components (import and call
# edges: everything a project question can follow from a module stays inside
# its component) and each judge task builds the project of one component,
# judges that component's named files and lets it go.


def _refs_of(facts) -> tuple[str, ...]:
    """Dotted names through which a module can reach another: its import
    targets, star imports, and the callees and class bases it spells through
    an import (``pkg.mod.f`` with ``import pkg``)."""
    found = set(facts.imports.values()) | set(facts.star_imports) | set(facts.dynamic_imports or ())
    spelled = [call.callee for call in facts.calls] + [b for bases in facts.classes.values() for b in bases]
    for dotted in spelled:
        head, _, rest = dotted.partition(".")
        target = facts.imports.get(head)
        if target is not None and rest:
            found.add(f"{target}.{rest}")
    return tuple(found)


def _facts_job(job: tuple[str, str, Optional[str], int]):
    """The facts pass of the component-sliced run: (facts key, served by the
    cache, the module's references or None when it has no facts, whether every
    component needs the module: see ``_project_wide``)."""
    facts, key, hit = _summarize_job(job)
    return key, hit, (_refs_of(facts) if facts is not None else None), _project_wide(facts)


def _project_wide(facts) -> bool:
    """A module whose facts answer questions of modules it is not linked to: a
    loader that strips the 'module.' prefix of a checkpoint it loads (the
    evaluation script next to the training script that saves it; DDP025 asks
    every such loader of the project). It joins every component, so a parallel
    run answers as a serial one does."""
    return facts is not None and (any(strip.source == "load" for strip in facts.prefix_strips)
                                  or bool(facts.launches_masked)  # a shell launcher masking GPUs
                                  or bool(facts.launches_through) or facts.masks_its_command)  # ... or a wrapper


def _components(modules: list[str], refs: dict[str, tuple[str, ...]]) -> dict[str, list[str]]:
    """Modules linked by any reference (every dotted prefix resolved as the
    project resolves modules), as root -> members."""
    from ddplint.screen.facts import ModuleFacts
    from ddplint.screen.project import Project

    index = Project([ModuleFacts(module) for module in modules])  # module paths only: resolve_module
    parent = {module: module for module in modules}

    def find(module: str) -> str:
        while parent[module] != module:
            parent[module] = parent[parent[module]]
            module = parent[module]
        return module

    for module, names in refs.items():
        for dotted in names:
            if "*" in dotted:  # a run-time import's pattern (``import_module(f"pkg.{name}")``)
                for target in index.modules_matching(dotted):
                    a, b = find(module), find(target)
                    if a != b:
                        parent[a] = b
                continue
            level = len(dotted) - len(dotted.lstrip("."))
            pieces = dotted[level:].split(".")
            for size in range(len(pieces), -1 if level else 0, -1):
                target = index.resolve_module(module, "." * level + ".".join(p for p in pieces[:size] if p))
                if target is not None and target != module:
                    a, b = find(module), find(target)
                    if a != b:
                        parent[a] = b
    groups: dict[str, list[str]] = {}
    for module in modules:
        groups.setdefault(find(module), []).append(module)
    return groups


def _component_tasks(jobs_list: Sequence[_Job], keys: dict[str, str], groups: dict[str, list[str]],
                     workers: int, shared: Sequence[str] = ()) -> list[list[tuple]]:
    """Judge tasks: lists of (component modules with their facts keys, named
    jobs of that component). A large component is split over several tasks
    (each rebuilds its project), small ones share a task. The ``shared``
    modules (``_project_wide``) join every component."""
    root_of = {module: root for root, members in groups.items() for module in members}
    named: dict[str, list[_Job]] = {}
    loose: list[_Job] = []
    for job in jobs_list:
        root = root_of.get(job.module)
        (named.setdefault(root, []) if root is not None else loose).append(job)
    size = max(8, len(jobs_list) // (workers * 4) + 1)
    tasks: list[list[tuple]] = []
    current: list[tuple] = []
    count = 0
    for root in sorted(named, key=lambda r: -len(groups[r])):
        own = set(groups[root])
        members = tuple((module, keys[module]) for module in [*groups[root], *(m for m in shared if m not in own)]
                        if module in keys)
        jobs = named[root]
        for start in range(0, len(jobs), size):
            chunk = jobs[start:start + size]
            current.append((members, chunk))
            count += len(chunk)
            if count >= size:
                tasks.append(current)
                current, count = [], 0
    if loose:
        current.append(((), loose))
    if current:
        tasks.append(current)
    return tasks


def _judge_task(task: list[tuple]) -> list[FileResult]:
    """Judge the named files of one or more components, each with the project
    of its component (kept while consecutive tasks ask for the same one)."""
    from ddplint.cache import Cache
    from ddplint.screen.project import Project
    from ddplint.screen.screening import Verdict, resolve

    linter, store = _worker["linter"], Cache(Path(_worker["facts_store"]))
    results = []
    for members, jobs in task:
        if _worker.get("component") != members:
            _worker["component"] = _worker["project"] = None  # let the previous one go first
            from ddplint.screen.facts import intern_strings

            facts = [store.load_facts(key)[1] for _, key in members]
            for found in facts:
                if found is not None:
                    intern_strings(found)
            _worker["project"] = Project([f for f in facts if f is not None]) if members else None
            _worker["component"] = members
        project = _worker["project"]
        linter.project = project
        for job in jobs:
            module_facts = project.modules.get(job.module) if project is not None else None
            if _worker["screen"] and module_facts is not None and module_facts.screen is not None:
                job = job._replace(screened=resolve(Verdict(*module_facts.screen), project, job.module))
            results.append(_lint_in_worker(job))
    return results


def _lint_by_component(jobs_list: list[_Job], pairs: Sequence[tuple[str, str]], settings: Settings, jobs: int,
                       cache: Optional[str], screen: bool, stats: dict) -> tuple[list[FileResult], int]:
    """The parallel run (see above). Returns the results and the number of components."""
    import shutil
    import tempfile

    from ddplint.cache import project_digest

    scratch = None if cache is not None else tempfile.mkdtemp(prefix="ddplint-facts-")
    store = cache if cache is not None else scratch
    try:
        on_disk = [(path, module, store, settings.max_file_size) for path, module in pairs]
        started = time.perf_counter()
        summaries = _map(_facts_job, on_disk, jobs)
        _timed(stats, "facts pass (read, ast, facts, screens)", started)
        keys = {module: key for (_, module, _, _), (key, _, _, _) in zip(on_disk, summaries)}
        refs = {module: found for (_, module, _, _), (_, _, found, _) in zip(on_disk, summaries) if found is not None}
        shared = sorted(module for (_, module, _, _), (_, _, _, wide) in zip(on_disk, summaries) if wide)
        stats["read"] = stats.get("read", 0) + len(on_disk)
        stats["facts cache hits"] = stats.get("facts cache hits", 0) + sum(1 for _, hit, _, _ in summaries if hit)
        stats["ast-screened"] = stats.get("ast-screened", 0) + sum(
            1 for _, hit, found, _ in summaries if found is not None and not hit)
        started = time.perf_counter()
        digest = project_digest(sorted(keys.items()))
        groups = _components(sorted(refs), refs)
        del summaries, refs
        tasks = _component_tasks(jobs_list, keys, groups, jobs, shared)
        _timed(stats, "components", started)
        started = time.perf_counter()
        results = [result for batch in _map(_judge_task, tasks, jobs, _init_component_worker,
                                            (settings, cache if screen else None, digest, screen, store))
                   for result in batch]
        _timed(stats, "judge (projects joined, libcst, rules)", started)
        return results, len(groups)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _init_component_worker(settings: Settings, cache_dir: Optional[str], project_digest: str, screen: bool,
                           facts_store: str) -> None:
    _init_worker(settings, None, cache_dir, project_digest, screen)
    _worker.update(facts_store=facts_store, screen=screen, component=None, project=None)



def lint_paths(named_files: Sequence[Union[str, Path]], settings: Settings, jobs: int = 1,
               cache_dir: Optional[Path] = None, root: Optional[Path] = None,
               display: Optional[dict[Path, str]] = None, screen: bool = True,
               stats: Optional[dict] = None, walked: Sequence[Path] = ()) -> list[FileResult]:
    """The engine's entry point (CLI, language server, ``ddplint smoke``): judge
    and report the named files with the facts of every Python file of their
    project root (``ddplint.discovery.find_project_root`` unless ``root`` is
    given). So ``ddplint .`` and ``ddplint changed.py`` agree on the files both
    cover. With ``cache_dir``, facts and results are cached by content hash
    (ddplint.cache); results come sorted by displayed path. ``screen=False``
    (``--no-screen``) judges every file the text prefilter lets through;
    ``stats`` receives how many files each stage handled; ``walked``: the
    folders discovery walked to find ``named_files`` (see ``_project_pairs``)."""
    from ddplint.discovery import find_project_root, module_key

    stats = {} if stats is None else stats
    named = list(dict.fromkeys(Path(path) for path in named_files))
    if not named:
        return []
    display = display or {}
    root = Path(root) if root is not None else find_project_root(named)
    jobs_list = [_Job(str(path), display.get(path, path.as_posix()), module_key(path, root)) for path in named]
    modules = {path: job.module for path, job in zip(named, jobs_list)}
    pairs = _project_pairs(root, settings, named, walked, modules) if _needs_project(settings) else []
    cache = str(cache_dir) if cache_dir is not None else None
    if cache is not None and screen:  # --no-screen (a comparison) neither reads nor writes results
        cached = _all_cached(jobs_list, pairs, settings, Path(cache))
        if cached is not None:
            stats.update({"read": len({job.path for job in jobs_list} | {path for path, _ in pairs}),
                          "result cache hits": len(cached)})
            return sorted(cached, key=lambda result: result.path)
    if pairs and jobs > 1 and len(jobs_list) >= 2 * jobs:
        results, components = _lint_by_component(jobs_list, pairs, settings, jobs, cache, screen, stats)
        stats["project components"] = components
        return _finish(results, stats)
    started = time.perf_counter()
    project, project_digest = (build_project(pairs, jobs, cache, max_file_size=settings.max_file_size,
                                             stats=stats) if pairs else (None, ""))
    _timed(stats, "facts pass and join", started)
    if project is not None and screen:
        from ddplint.screen.screening import Verdict, resolve

        for number, job in enumerate(jobs_list):
            facts = project.modules.get(job.module)
            if facts is not None and facts.screen is not None:
                jobs_list[number] = job._replace(screened=resolve(Verdict(*facts.screen), project, job.module))
    started = time.perf_counter()
    results = _map(_lint_in_worker, jobs_list, jobs, _init_worker,
                   (settings, project, cache if screen else None, project_digest, screen))
    _timed(stats, "judge (libcst, rules)", started)
    if not pairs:
        stats["read"] = stats.get("read", 0) + len(jobs_list)
        stats["ast-screened"] = stats.get("ast-screened", 0) + sum(1 for r in results if r.screened and not r.cached)
    return _finish(results, stats)


def _timed(stats: dict, stage: str, started: float) -> None:
    """Wall seconds of one stage, for ``--statistics``."""
    stats.setdefault("seconds", {})[stage] = round(time.perf_counter() - started, 2)


def _finish(results: list[FileResult], stats: dict) -> list[FileResult]:
    """Sort the results and count what the judge did."""
    results.sort(key=lambda result: result.path)
    stats["libcst-parsed (judged)"] = sum(1 for r in results if r.parsed and not r.cached)
    stats["result cache hits"] = sum(1 for r in results if r.cached)
    per_rule: dict[str, int] = {}
    for result in results:
        for code in result.judged:
            per_rule[code] = per_rule.get(code, 0) + 1
    stats["judged per rule"] = dict(sorted(per_rule.items()))
    return results


def lint_files(files: Sequence[Path], settings: Settings, jobs: int = 1,
               display: Optional[dict[Path, str]] = None, cache_dir: Optional[Path] = None,
               root: Optional[Path] = None) -> list[FileResult]:
    """``lint_paths`` with the argument order of earlier versions."""
    return lint_paths(files, settings, jobs, cache_dir=cache_dir, root=root, display=display)


def lint_document(source: Union[str, bytes], path: Union[str, Path], settings: Settings,
                  display: Optional[str] = None, cache_dir: Optional[Path] = None,
                  root: Optional[Path] = None, screen: bool = True) -> FileResult:
    """Lint an editor buffer (or stdin) that stands for the file at ``path``: the
    facts of its project root, with this text in place of the file's."""
    from ddplint.discovery import find_project_root, module_key

    path = Path(path)
    root = Path(root) if root is not None else find_project_root([path])
    module = module_key(path, root)
    linter = Linter(settings, screen=screen)
    if _needs_project(settings):
        data = source.encode("utf-8") if isinstance(source, str) else source
        pairs = _project_pairs(root, settings, [])
        cache = str(cache_dir) if cache_dir is not None else None
        linter.project, _ = build_project(pairs, 1, cache, buffers={module: data},
                                          max_file_size=settings.max_file_size)
    return linter.lint_source(source, display or path.as_posix(), module)


def _all_cached(jobs_list: Sequence[_Job], pairs: Sequence[tuple[str, str]], settings: Settings,
                cache_dir: Path) -> Optional[list[FileResult]]:
    """The warm path: when every named file's result is in the cache, return them
    all without summarising files, joining the project or starting workers. The
    project digest needs only the files' hashes (facts keys), not the facts."""
    from ddplint.cache import Cache, project_digest

    contents: dict[str, Union[str, budget.TooLarge]] = {}
    for path in {job.path for job in jobs_list} | {path for path, _ in pairs}:
        try:
            data = budget.read_within_budget(Path(path), _read_limit(path, settings.max_file_size))
        except OSError:
            return None
        contents[path] = data if isinstance(data, budget.TooLarge) else Cache.content_digest(data)
    digest_of_project = ""
    if pairs:
        digest_of_project = project_digest([
            (module, TOO_LARGE_FACTS if isinstance(contents[path], budget.TooLarge)
             else Cache.facts_key(contents[path], module)) for path, module in pairs])
    cache, fingerprint = Cache(cache_dir), settings.fingerprint()
    results, linter = [], None
    for job in jobs_list:
        if isinstance(contents[job.path], budget.TooLarge):  # never cached; cheap to report again
            linter = linter or Linter(settings)
            results.append(linter.lint_file(Path(job.path), job.display, job.module))
            continue
        hit = cache.load_result(_result_key(contents[job.path], job, fingerprint, digest_of_project), job.display)
        if hit is None:
            return None
        results.append(hit)
    return results


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)
