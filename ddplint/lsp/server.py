"""``ddplint server``: a language server over stdio (needs the ``lsp`` extra).

- Diagnostics when a document is opened or saved, and after a pause in typing
  (``didChange`` is debounced). Settings come from the configuration file nearest
  to the document, as on the command line, with the client's settings on top;
  facts come from every file of the document's project root
  (``ddplint.engine.lint_document``: the buffer's text for the document, the
  files on disk for the others; facts cached in the root's .ddplint_cache).
  Files excluded by the configuration get no diagnostics.
- Hover over a diagnostic shows its rule's documentation (Markdown).
- Code actions: "Ignore DDPxxx on this line" (adds or extends ``# noqa``), "Ignore
  DDPxxx in this file" (``# ddplint: noqa: DDPxxx``), the rule's fix when the
  finding has one (``quickfix``), and ``source.fixAll.ddplint`` (every safe fix).
- ``workspace/didChangeConfiguration`` and changed ``pyproject.toml`` /
  ``.ddplint.yaml`` files re-lint the open documents.
- A document that does not parse gets DDP000; a rule that crashes is logged once
  (``window/logMessage``) and the server goes on serving.

Client settings (``initializationOptions`` or ``workspace/didChangeConfiguration``,
under ``"ddplint"``): ``select``, ``ignore``, ``extendSelect`` (lists of rule
codes or prefixes, like the command-line flags).
"""

from __future__ import annotations

import asyncio
import io
import logging
import re
import tokenize
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from lsprotocol import converters, types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from ddplint import __version__
from ddplint.config import ConfigError, Settings, load_settings, path_matches, split_selectors
from ddplint.diagnostics import INTERNAL_ERROR, Diagnostic
from ddplint.cache import CACHE_DIR_NAME
from ddplint.discovery import find_project_root
from ddplint.engine import Linter, lint_document
from ddplint.fixes import SAFE, Edit, Fix
from ddplint.notebooks import is_notebook
from ddplint.registry import rules_by_code
from ddplint.reporters.json_lsp import lsp_diagnostic
from ddplint.suppressions import FILE_NOQA, LINE_NOQA

FIX_ALL_KIND = "source.fixAll.ddplint"
CONFIG_FILES = ("pyproject.toml", ".ddplint.yaml", ".ddplint.yml")
DEBOUNCE_SECONDS = 0.3
HOVER_SECTIONS = ("What it does", "Why is this bad?", "Use instead")

_converter = converters.get_converter()
log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """What one lint produced: findings, and messages for the user (sent by the
    event loop: the lint thread never writes to the client)."""

    findings: list[Diagnostic] = field(default_factory=list)
    shown: list[str] = field(default_factory=list)  # window/showMessage, errors
    logged: list[str] = field(default_factory=list)  # window/logMessage, errors


@dataclass
class Linted:
    """The last lint of a document: its version, its text and its findings."""

    version: Optional[int]
    lines: list[str]
    findings: list[tuple[Diagnostic, types.Diagnostic]] = field(default_factory=list)


class DdplintServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("ddplint", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.linted: dict[str, Linted] = {}
        self.pending: dict[str, asyncio.Task] = {}
        self.client_settings: dict[str, Any] = {}
        # Linting runs on one worker thread, in order; the caches below are used there only.
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="ddplint-lint")
        self.settings_cache: dict[Path, Settings] = {}
        self.messages_sent: set[str] = set()  # each message once (until settings change)

    # ------------------------------------------------------------------ lint thread
    def settings_for(self, path: Optional[Path]) -> tuple[Optional[Settings], Optional[str]]:
        """The document's settings, or None and the reason when they are broken."""
        folder = path.parent if path is not None else Path.cwd()
        if folder not in self.settings_cache:
            try:
                self.settings_cache[folder] = _with_client_settings(load_settings(start=folder),
                                                                    self.client_settings)
            except ConfigError as error:
                return None, f"ddplint: {error}"
        return self.settings_cache[folder], None

    def forget(self, client_settings: Optional[dict] = None) -> None:
        """Configuration files or the client's settings may have changed."""
        if client_settings is not None:
            self.client_settings = client_settings
        self.settings_cache.clear()

    def lint_in_thread(self, uri: str, source: str) -> Outcome:
        """The document's findings (runs on the lint thread)."""
        path = _path_of(uri)
        settings, problem = self.settings_for(path)
        if settings is None:
            return Outcome(shown=[problem])
        if path is not None and _excluded(path, settings):
            return Outcome()
        if path is None:  # an untitled buffer: a project of its own
            result = Linter(settings).lint_source(source, uri)
        else:
            root = find_project_root([path])
            result = lint_document(source, path, settings, cache_dir=root / CACHE_DIR_NAME, root=root)
        return Outcome(findings=[d for d in result.diagnostics if d.code != INTERNAL_ERROR],
                       logged=[f"ddplint: {result.path}: {d.message}" for d in result.diagnostics
                               if d.code == INTERNAL_ERROR])

    # ------------------------------------------------------------------ event loop
    def send_once(self, message: str, shown: bool) -> None:
        if message in self.messages_sent:
            return
        self.messages_sent.add(message)
        if shown:
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=message))
        else:
            self.window_log_message(types.LogMessageParams(type=types.MessageType.Error, message=message))

    async def lint(self, uri: str) -> None:
        """Lint the document now and publish; a newer edit meanwhile wins."""
        document = self.workspace.get_text_document(uri)
        version, source = document.version, document.source
        if is_notebook(uri):  # notebook documents are not synced as text
            return
        loop = asyncio.get_running_loop()
        try:
            outcome = await loop.run_in_executor(self.executor, self.lint_in_thread, uri, source)
        except Exception as error:  # an engine failure must not end the session
            self.send_once(f"ddplint: linting {uri} failed: {type(error).__name__}: {error}\n"
                           f"{traceback.format_exc()}", shown=False)
            return
        for message in outcome.shown:
            self.send_once(message, shown=True)
        for message in outcome.logged:
            self.send_once(message, shown=False)
        current = self.workspace.text_documents.get(uri)
        if current is None or current.version != version:
            return  # closed or edited meanwhile: that edit's lint publishes
        lines = source.splitlines(keepends=True)
        codec = current.position_codec
        findings = []
        for diagnostic in outcome.findings:
            item = _converter.structure(lsp_diagnostic(diagnostic), types.Diagnostic)
            item.range = codec.range_to_client_units(lines, item.range)
            findings.append((diagnostic, item))
        self.linted[uri] = Linted(version, lines, findings)
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
            uri=uri, version=version, diagnostics=[item for _, item in findings]))

    def lint_soon(self, uri: str, delay: float) -> None:
        previous = self.pending.pop(uri, None)
        if previous is not None:
            previous.cancel()

        async def later() -> None:
            if delay:
                await asyncio.sleep(delay)
            await self.lint(uri)

        task = asyncio.get_running_loop().create_task(later())
        self.pending[uri] = task
        task.add_done_callback(lambda done: self.pending.get(uri) is done and self.pending.pop(uri))

    def relint_open_documents(self, client_settings: Optional[dict] = None) -> None:
        """Something the findings depend on changed (a saved file, configuration):
        forget settings (on the lint thread, in order with the lints) and lint every
        open document again."""
        self.messages_sent.clear()
        self.executor.submit(self.forget, client_settings)
        for uri in list(self.workspace.text_documents):
            self.lint_soon(uri, 0)


def _path_of(uri: str) -> Optional[Path]:
    """The resolved path of a ``file:`` URI."""
    if not uri.startswith("file:"):
        return None
    return Path(to_fs_path(uri)).resolve()


def _with_client_settings(settings: Settings, client: dict[str, Any]) -> Settings:
    """The client's ``select``/``ignore``/``extendSelect`` on top of the file's settings."""
    overrides = {}
    if client.get("select"):
        overrides["select"] = split_selectors(client["select"])
    if client.get("ignore"):
        overrides["ignore"] = settings.ignore + split_selectors(client["ignore"])
    if client.get("extendSelect"):
        overrides["extend_select"] = settings.extend_select + split_selectors(client["extendSelect"])
    if not overrides:
        return settings
    settings = replace(settings, **overrides)
    try:
        settings.validate()
    except ConfigError as error:
        raise ConfigError(f"client settings: {error}") from None
    return settings


def _excluded(path: Path, settings: Settings) -> bool:
    """Excluded by the configuration (relative to the configuration's folder)."""
    try:
        relative = path.resolve().relative_to(settings.root.resolve()).as_posix()
    except ValueError:
        return False
    return any(path_matches(relative, pattern) for pattern in settings.all_excludes())


def _client_settings(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        inner = value.get("ddplint", value)
        if isinstance(inner, dict):
            return inner
    return {}


server = DdplintServer()


# ---------------------------------------------------------------------- lifecycle
@server.feature(types.INITIALIZE)
def initialize(ls: DdplintServer, params: types.InitializeParams) -> None:
    ls.client_settings = _client_settings(params.initialization_options)


@server.feature(types.INITIALIZED)
async def initialized(ls: DdplintServer, params: types.InitializedParams) -> None:
    watched = ls.client_capabilities.workspace and ls.client_capabilities.workspace.did_change_watched_files
    if watched and watched.dynamic_registration:
        watchers = [types.FileSystemWatcher(glob_pattern=f"**/{name}") for name in CONFIG_FILES]
        watchers += [types.FileSystemWatcher(glob_pattern=pattern,
                                             kind=types.WatchKind.Create | types.WatchKind.Delete)
                     for pattern in ("**/*.py", "**/*.ipynb")]
        registration = types.Registration(
            id="ddplint-watched-files", method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
            register_options=types.DidChangeWatchedFilesRegistrationOptions(watchers=watchers))
        try:
            await ls.client_register_capability_async(types.RegistrationParams(registrations=[registration]))
        except Exception as error:  # the client declined: saves still re-lint
            ls.window_log_message(types.LogMessageParams(
                type=types.MessageType.Warning, message=f"ddplint: cannot watch configuration files: {error}"))


# ---------------------------------------------------------------------- documents
@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: DdplintServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.lint_soon(params.text_document.uri, 0)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: DdplintServer, params: types.DidChangeTextDocumentParams) -> None:
    ls.lint_soon(params.text_document.uri, DEBOUNCE_SECONDS)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: DdplintServer, params: types.DidSaveTextDocumentParams) -> None:
    # A saved file can change what other open documents of its project are told.
    ls.relint_open_documents()


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: DdplintServer, params: types.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    task = ls.pending.pop(uri, None)
    if task is not None:
        task.cancel()
    ls.linted.pop(uri, None)
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
def did_change_configuration(ls: DdplintServer, params: types.DidChangeConfigurationParams) -> None:
    ls.relint_open_documents(client_settings=_client_settings(params.settings))


@server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
def did_change_watched_files(ls: DdplintServer, params: types.DidChangeWatchedFilesParams) -> None:
    ls.relint_open_documents()


# ---------------------------------------------------------------------- hover
@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(ls: DdplintServer, params: types.HoverParams) -> Optional[types.Hover]:
    linted = ls.linted.get(params.text_document.uri)
    if linted is None:
        return None
    here = [(d, item) for d, item in linted.findings if _contains(item.range, params.position)]
    if not here:
        return None
    markdown = _wants_markdown(ls)
    text = "\n\n---\n\n".join(rule_help(d, markdown) for d, _ in here)
    kind = types.MarkupKind.Markdown if markdown else types.MarkupKind.PlainText
    return types.Hover(contents=types.MarkupContent(kind=kind, value=text), range=here[0][1].range)


def rule_help(diagnostic: Diagnostic, markdown: bool = True) -> str:
    """The finding's message and its rule's What it does / Why is this bad? / Use instead."""
    rule = rules_by_code().get(diagnostic.code)
    title = f"{diagnostic.code} ({diagnostic.name})"
    parts = [f"**{title}**: {diagnostic.message}" if markdown else f"{title}: {diagnostic.message}"]
    if rule is not None:
        sections = _sections(rule.documentation())
        for heading in HOVER_SECTIONS:
            if heading in sections:
                parts.append(f"## {heading}\n{sections[heading]}" if markdown
                             else f"{heading}\n{sections[heading]}")
        parts.append(f"[Full documentation]({rule.url()})" if markdown else rule.url())
    return "\n\n".join(parts)


def _sections(documentation: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for chunk in re.split(r"^## ", documentation, flags=re.MULTILINE):
        heading, _, body = chunk.partition("\n")
        if body.strip():
            found[heading.strip()] = body.strip("\n")
    return found


def _wants_markdown(ls: DdplintServer) -> bool:
    text = ls.client_capabilities.text_document
    formats = text.hover.content_format if text and text.hover else None
    return not formats or types.MarkupKind.Markdown in formats


def _contains(where: types.Range, position: types.Position) -> bool:
    start, end = (where.start.line, where.start.character), (where.end.line, where.end.character)
    point = (position.line, position.character)
    return start <= point <= end


def _overlaps(a: types.Range, b: types.Range) -> bool:
    return (a.start.line, a.start.character) <= (b.end.line, b.end.character) and \
        (b.start.line, b.start.character) <= (a.end.line, a.end.character)


# ---------------------------------------------------------------------- code actions
@server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION,
    types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL_KIND],
                            resolve_provider=False),
)
def code_action(ls: DdplintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    uri = params.text_document.uri
    linted = ls.linted.get(uri)
    if linted is None:
        return []
    only = params.context.only
    actions: list[types.CodeAction] = []
    if _kind_wanted(only, types.CodeActionKind.QuickFix):
        for diagnostic, item in linted.findings:
            if not _overlaps(item.range, params.range):
                continue
            if diagnostic.fix is not None:
                actions.append(_fix_action(ls, uri, linted, diagnostic.fix, [item],
                                           preferred=diagnostic.fix.applicability == SAFE))
            line_edit = noqa_line_edit(linted.lines, diagnostic.line, diagnostic.code)
            if line_edit is not None:
                actions.append(_action(ls, uri, linted, f"Ignore {diagnostic.code} on this line",
                                       types.CodeActionKind.QuickFix, [line_edit], [item]))
            actions.append(_action(ls, uri, linted, f"Ignore {diagnostic.code} in this file",
                                   types.CodeActionKind.QuickFix,
                                   [noqa_file_edit(linted.lines, diagnostic.code)], [item]))
    if _kind_wanted(only, FIX_ALL_KIND, explicit=True):
        safe = [(d.fix, item) for d, item in linted.findings if d.fix is not None and d.fix.applicability == SAFE]
        edits = _non_overlapping([edit for fix, _ in safe for edit in fix.edits])
        if edits:
            actions.append(_action(ls, uri, linted, "Fix all safe ddplint findings", FIX_ALL_KIND, edits,
                                   [item for _, item in safe]))
    return actions


def _kind_wanted(only: Optional[list[str]], kind: str, explicit: bool = False) -> bool:
    """Whether ``kind`` answers the request (LSP: a requested kind covers its sub-kinds).
    ``explicit`` kinds (source actions) come only when asked for."""
    if not only:
        return not explicit
    return any(kind == wanted or kind.startswith(wanted + ".") for wanted in only)


def _fix_action(ls, uri, linted, fix: Fix, items, preferred: bool) -> types.CodeAction:
    title = fix.description if fix.applicability == SAFE else f"{fix.description} (unsafe)"
    action = _action(ls, uri, linted, title, types.CodeActionKind.QuickFix, list(fix.edits), items)
    action.is_preferred = preferred
    return action


def _action(ls: DdplintServer, uri: str, linted: Linted, title: str, kind: str, edits: list[Edit],
            items: list[types.Diagnostic]) -> types.CodeAction:
    return types.CodeAction(title=title, kind=kind, diagnostics=items,
                            edit=workspace_edit(ls, uri, linted, edits))


def workspace_edit(ls: DdplintServer, uri: str, linted: Linted, edits: list[Edit]) -> types.WorkspaceEdit:
    """``Edit``s (1-based, code points) as a WorkspaceEdit in the client's units,
    versioned when the client supports ``documentChanges``."""
    document = ls.workspace.get_text_document(uri)
    codec = document.position_codec
    text_edits = []
    for edit in sorted(edits):
        where = types.Range(start=types.Position(line=edit.line - 1, character=edit.column - 1),
                            end=types.Position(line=edit.end_line - 1, character=edit.end_column - 1))
        text_edits.append(types.TextEdit(range=codec.range_to_client_units(linted.lines, where),
                                         new_text=edit.new_text))
    capabilities = ls.client_capabilities.workspace
    if capabilities and capabilities.workspace_edit and capabilities.workspace_edit.document_changes:
        identifier = types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=linted.version)
        return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(text_document=identifier,
                                                                            edits=text_edits)])
    return types.WorkspaceEdit(changes={uri: text_edits})


def _non_overlapping(edits: list[Edit]) -> list[Edit]:
    kept: list[Edit] = []
    for edit in sorted(edits):
        if kept and (edit.line, edit.column) < (kept[-1].end_line, kept[-1].end_column):
            continue  # overlaps the previous fix: the next fix-all run applies it
        kept.append(edit)
    return kept


def noqa_line_edit(lines: list[str], line: int, code: str) -> Optional[Edit]:
    """Add ``code`` to the line's ``# noqa`` (or add one); None where a comment
    cannot go (the line ends inside a string or continues with a backslash)."""
    if not 1 <= line <= len(lines):
        return None
    text = lines[line - 1].rstrip("\r\n")
    comment = _comment_on_line(lines, line)
    if comment is False:
        return None
    if comment is not None:
        column, comment_text = comment
        match = LINE_NOQA.search(comment_text)
        if match is not None:
            if not match.group("codes"):
                return None  # a bare noqa already silences everything
            end = column + match.end("codes")
            return Edit(line, end + 1, line, end + 1, f", {code}")
    end = len(text.rstrip())
    return Edit(line, end + 1, line, len(text) + 1, f"  # noqa: {code}")


def _comment_on_line(lines: list[str], line: int):
    """(0-based column, text) of the line's comment, None when it has none, False
    when a comment cannot be added at its end."""
    text = lines[line - 1].rstrip("\r\n")
    if text.rstrip().endswith("\\"):
        return False
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO("".join(lines)).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        position = text.find("#")  # unparsable: the same fallback as suppressions
        return (position, text[position:]) if position != -1 else None
    for token in tokens:
        if token.type == tokenize.COMMENT and token.start[0] == line:
            return token.start[1], token.string
        if token.start[0] <= line < token.end[0] and token.type not in (tokenize.NL, tokenize.NEWLINE):
            return False  # a string (or f-string) spans the end of this line
    return None


def noqa_file_edit(lines: list[str], code: str) -> Edit:
    """Add ``code`` to the file's ``# ddplint: noqa:`` line, or add that line at
    the top (below a shebang and an encoding cookie)."""
    for number, raw in enumerate(lines, start=1):
        text = raw.rstrip("\r\n")
        match = FILE_NOQA.match(text.strip())
        if match and match.group("codes"):
            end = len(text) - len(text.lstrip()) + match.end("codes")
            return Edit(number, end + 1, number, end + 1, f", {code}")
    line = 1
    while line <= min(2, len(lines)) and (lines[line - 1].startswith("#!") or
                                          re.match(r"^[ \t\f]*#.*?coding[:=]", lines[line - 1])):
        line += 1
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    if line > len(lines) and lines and not lines[-1].endswith(("\n", "\r")):
        return Edit(line - 1, len(lines[-1]) + 1, line - 1, len(lines[-1]) + 1,
                    f"{newline}# ddplint: noqa: {code}{newline}")
    return Edit(line, 1, line, 1, f"# ddplint: noqa: {code}{newline}")


def serve() -> None:
    server.start_io()
