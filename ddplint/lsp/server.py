"""``ddplint server``: a language server over stdio (needs the ``lsp`` extra).

Lints a document when it is opened, changed or saved and publishes the same
LSP diagnostics as ``--format json``. Settings come from the configuration file
nearest to the document, as on the command line; a broken configuration is shown
to the user once per folder and the defaults are used meanwhile.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Optional

from lsprotocol import converters, types

from ddplint import __version__
from ddplint.config import ConfigError, Settings, load_settings
from ddplint.cache import CACHE_DIR_NAME
from ddplint.engine import Linter
from ddplint.engine import lint_document as lint_document_in_project
from ddplint.reporters.json_lsp import lsp_diagnostic

try:  # pygls >= 2
    from pygls.lsp.server import LanguageServer
except ImportError:  # pragma: no cover - pygls 1.x
    from pygls.server import LanguageServer

_converter = converters.get_converter()


class DdplintServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("ddplint", __version__)
        self.config_errors_shown: set[str] = set()

    def settings_for(self, path: Optional[Path]) -> Settings:
        folder = path.parent if path is not None else Path.cwd()
        try:
            return _settings_for_folder(str(folder))
        except ConfigError as error:
            if str(folder) not in self.config_errors_shown:
                self.config_errors_shown.add(str(folder))
                self._show_error(f"ddplint: {error}")
            return Settings(root=folder)

    def _show_error(self, message: str) -> None:
        params = types.ShowMessageParams(type=types.MessageType.Error, message=message)
        if hasattr(self, "window_show_message"):
            self.window_show_message(params)
        else:  # pragma: no cover - pygls 1.x
            self.show_message(message, types.MessageType.Error)

    def publish(self, uri: str, diagnostics: list) -> None:
        params = types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics)
        if hasattr(self, "text_document_publish_diagnostics"):
            self.text_document_publish_diagnostics(params)
        else:  # pragma: no cover - pygls 1.x
            self.publish_diagnostics(uri, diagnostics)


@lru_cache(maxsize=64)
def _settings_for_folder(folder: str) -> Settings:
    return load_settings(start=Path(folder))


server = DdplintServer()


def lint_document(ls: DdplintServer, uri: str) -> None:
    document = ls.workspace.get_text_document(uri)
    path = Path(document.path) if uri.startswith("file:") else None
    settings = ls.settings_for(path)
    if path is None:  # an unsaved buffer: a project of its own
        result = Linter(settings).lint_source(document.source, uri)
    else:
        result = lint_document_in_project(document.source, path, settings,
                                          cache_dir=settings.root / CACHE_DIR_NAME)
    diagnostics = [_converter.structure(lsp_diagnostic(d), types.Diagnostic) for d in result.diagnostics]
    ls.publish(uri, diagnostics)


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: DdplintServer, params: types.DidOpenTextDocumentParams) -> None:
    lint_document(ls, params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: DdplintServer, params: types.DidChangeTextDocumentParams) -> None:
    lint_document(ls, params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: DdplintServer, params: types.DidSaveTextDocumentParams) -> None:
    _settings_for_folder.cache_clear()  # a saved config file takes effect
    lint_document(ls, params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: DdplintServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.publish(params.text_document.uri, [])


def serve() -> None:
    server.start_io()
