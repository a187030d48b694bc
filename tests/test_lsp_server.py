"""`ddplint server` driven by a real LSP client over stdio (pytest-lsp, built on
pygls' LanguageClient): the server runs as a subprocess, the client announces VS
Code's capabilities, and every answer is checked against the LSP specification
by pytest-lsp.

The round trip: initialize, open a faulty document, diagnostics with codes and
ranges, hover, code actions, apply the edit as an editor would, send the edited
text, an empty list, shutdown and exit (the fixture's teardown).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("pygls")
pytest_lsp = pytest.importorskip("pytest_lsp")
import pytest_asyncio  # noqa: E402  (pytest-lsp depends on it)

from lsprotocol import types  # noqa: E402
from pygls.workspace import TextDocument  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities  # noqa: E402

from tests.helpers import BAD_SCRIPT, CLEAN_SCRIPT, write  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SERVER = [sys.executable, "-m", "ddplint", "server"]


def make_client() -> LanguageClient:
    """pytest-lsp's client, plus what an editor does: accept dynamic registrations
    and keep every publishDiagnostics in order."""
    from pygls.protocol import default_converter
    from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

    client = LanguageClient(converter_factory=default_converter)
    client.registrations = []
    client.published = []

    def register(client: LanguageClient, params: types.RegistrationParams):
        client.registrations.extend(params.registrations)

    def publish(client: LanguageClient, params: types.PublishDiagnosticsParams):
        client.diagnostics[params.uri] = params.diagnostics
        client.published.append(params)

    register_lsp_features(client, {**DEFAULT_CLIENT_FEATURES, types.CLIENT_REGISTER_CAPABILITY: register,
                                   types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS: publish})
    return client


async def start(command=SERVER, options=None) -> LanguageClient:
    client = await ClientServerConfig(server_command=command, client_factory=make_client).start()
    await client.initialize_session(types.InitializeParams(
        capabilities=client_capabilities("visual-studio-code"), initialization_options=options))
    return client


@pytest_asyncio.fixture
async def client():
    client = await start()
    yield client
    await client.shutdown_session()
    await client.stop()


async def diagnostics_after(client: LanguageClient, uri: str, send, version=None) -> list[types.Diagnostic]:
    """Send something, then wait for the diagnostics of ``uri`` published after it."""
    seen = len(client.published)
    send()
    for _ in range(600):
        for params in client.published[seen:]:
            if params.uri == uri and (version is None or params.version == version):
                return list(params.diagnostics)
        await asyncio.sleep(0.05)
    raise AssertionError(f"no diagnostics published for {uri}")


def open_document(client: LanguageClient, path: Path, text: str):
    return lambda: client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=path.as_uri(), language_id="python", version=1, text=text)))


def change_document(client: LanguageClient, path: Path, text: str, version: int):
    return lambda: client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=path.as_uri(), version=version),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))


def summary(diagnostics) -> list[tuple]:
    return [(d.code, d.range.start.line, d.range.start.character, d.range.end.line, d.range.end.character)
            for d in diagnostics]


def apply_workspace_edit(text: str, uri: str, edit: types.WorkspaceEdit) -> str:
    """Apply a WorkspaceEdit as an editor does: pygls' own TextDocument, the
    edits of one document applied from the last to the first."""
    if edit.document_changes is not None:
        edits = [e for change in edit.document_changes if change.text_document.uri == uri for e in change.edits]
    else:
        edits = edit.changes[uri]
    document = TextDocument(uri, text)
    for text_edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        document.apply_change(types.TextDocumentContentChangePartial(range=text_edit.range, text=text_edit.new_text))
    return document.source


async def code_actions(client, uri, diagnostic, only=None) -> list[types.CodeAction]:
    return await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=diagnostic.range,
        context=types.CodeActionContext(diagnostics=[diagnostic], only=only)))


@pytest.mark.asyncio
async def test_round_trip_diagnostics_hover_code_action_edit_clean(client, tmp_path):
    (tmp_path / ".ddplint.yaml").write_text("select: [DDP005, DDP007]\n")
    path = write(tmp_path / "train.py", BAD_SCRIPT)
    uri = path.as_uri()

    found = await diagnostics_after(client, uri, open_document(client, path, BAD_SCRIPT))
    assert summary(found) == [("DDP005", 5, 26, 5, 53), ("DDP007", 6, 17, 6, 25)]
    assert [d.severity for d in found] == [types.DiagnosticSeverity.Information, types.DiagnosticSeverity.Warning]
    assert all(d.source == "ddplint" and d.code_description.href.startswith("file://") for d in found)
    ddp005, ddp007 = found

    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=6, character=20)))
    assert hover.contents.kind == types.MarkupKind.Markdown
    assert hover.range == ddp007.range
    text = hover.contents.value
    assert text.startswith("**DDP007 (hardcoded-device)**: hard-coded device index")
    for heading in ("## What it does", "## Why is this bad?", "## Use instead"):
        assert heading in text
    assert "## References" not in text
    outside = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=0, character=3)))
    assert outside is None

    actions = await code_actions(client, uri, ddp007)
    assert [(a.title, a.kind) for a in actions] == [
        ("Ignore DDP007 on this line", types.CodeActionKind.QuickFix),
        ("Ignore DDP007 in this file", types.CodeActionKind.QuickFix)]
    assert actions[0].diagnostics[0].code == "DDP007"
    change = actions[0].edit.document_changes[0]
    assert change.text_document.version == 1  # versioned: a stale edit is refused by the editor
    edited = apply_workspace_edit(BAD_SCRIPT, uri, actions[0].edit)
    assert edited.splitlines()[6] == 'model = model.to("cuda:0")  # noqa: DDP007'

    found = await diagnostics_after(client, uri, change_document(client, path, edited, 2), version=2)
    assert summary(found) == [("DDP005", 5, 26, 5, 53)]

    actions = await code_actions(client, uri, found[0])
    file_action = next(a for a in actions if a.title == "Ignore DDP005 in this file")
    edited = apply_workspace_edit(edited, uri, file_action.edit)
    assert edited.startswith("# ddplint: noqa: DDP005\nimport torch\n")
    assert await diagnostics_after(client, uri, change_document(client, path, edited, 3), version=3) == []

    assert await diagnostics_after(client, uri, change_document(client, path, CLEAN_SCRIPT, 4), version=4) == []
    client.text_document_did_close(types.DidCloseTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=uri)))


@pytest.mark.asyncio
async def test_ignore_on_a_line_extends_an_existing_noqa(client, tmp_path):
    (tmp_path / ".ddplint.yaml").write_text("select: [DDP005, DDP007]\n")
    source = BAD_SCRIPT.replace('model.to("cuda:0")', 'model.to("cuda:0")  # noqa: E501')
    path = write(tmp_path / "train.py", source)
    found = await diagnostics_after(client, path.as_uri(), open_document(client, path, source))
    actions = await code_actions(client, path.as_uri(), found[1])
    edited = apply_workspace_edit(source, path.as_uri(), actions[0].edit)
    assert edited.splitlines()[6] == 'model = model.to("cuda:0")  # noqa: E501, DDP007'


@pytest.mark.asyncio
async def test_fix_all_is_offered_only_when_asked_and_only_with_fixes(client, tmp_path):
    """DDP005 and DDP007 have no fix: asking for source.fixAll.ddplint gets
    nothing, and the ignore quick fixes do not leak into that request."""
    (tmp_path / ".ddplint.yaml").write_text("select: [DDP005, DDP007]\n")
    path = write(tmp_path / "train.py", BAD_SCRIPT)
    found = await diagnostics_after(client, path.as_uri(), open_document(client, path, BAD_SCRIPT))
    assert not await code_actions(client, path.as_uri(), found[1], only=["source.fixAll.ddplint"])
    quick = await code_actions(client, path.as_uri(), found[1], only=[types.CodeActionKind.QuickFix])
    assert {a.kind for a in quick} == {types.CodeActionKind.QuickFix} and len(quick) == 2


FIXABLE_SCRIPT = """\
import torch
import torch.distributed as dist
from torch.cuda.amp import GradScaler, autocast
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("nccl")
model = DDP(torch.nn.Linear(4, 1).cuda())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = GradScaler()
loader = DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset), num_workers=4)
for epoch in range(10):
    loader.sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        with autocast():
            loss = model(x.cuda()).sum()
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
dist.destroy_process_group()
"""


@pytest.mark.asyncio
async def test_rule_fixes_round_trip_as_quick_fixes_and_fix_all(client, tmp_path):
    """A rule's own fix (DDP003: insert scaler.unscale_, safe; DDP006: add
    pin_memory=True, unsafe) is offered as a quickfix, applies as the editor
    applies it, and the re-linted document no longer has that finding; the
    fixAll source action applies the safe fix only."""
    (tmp_path / ".ddplint.yaml").write_text("select: [DDP003, DDP006]\n")
    path = write(tmp_path / "train.py", FIXABLE_SCRIPT)
    uri = path.as_uri()
    found = await diagnostics_after(client, uri, open_document(client, path, FIXABLE_SCRIPT))
    assert summary(found) == [("DDP006", 11, 9, 11, 95), ("DDP003", 19, 8, 19, 63)]
    ddp006, ddp003 = found

    actions = await code_actions(client, uri, ddp003)
    assert [(a.title, a.is_preferred) for a in actions][0] == ("Insert scaler.unscale_(optimizer) before the clip", True)
    fixed = apply_workspace_edit(FIXABLE_SCRIPT, uri, actions[0].edit)
    assert fixed.splitlines()[19:21] == ["        scaler.unscale_(optimizer)",
                                         "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"]
    found = await diagnostics_after(client, uri, change_document(client, path, fixed, 2), version=2)
    assert summary(found) == [("DDP006", 11, 9, 11, 95)]

    actions = await code_actions(client, uri, found[0])
    assert actions[0].title == "Add pin_memory=True (unsafe)" and not actions[0].is_preferred
    pinned = apply_workspace_edit(fixed, uri, actions[0].edit)
    assert pinned.splitlines()[11].endswith("num_workers=4, pin_memory=True)")
    assert await diagnostics_after(client, uri, change_document(client, path, pinned, 3), version=3) == []

    found = await diagnostics_after(client, uri, change_document(client, path, FIXABLE_SCRIPT, 4), version=4)
    fix_all = await code_actions(client, uri, found[0], only=["source.fixAll.ddplint"])
    assert [a.kind for a in fix_all] == ["source.fixAll.ddplint"]
    assert apply_workspace_edit(FIXABLE_SCRIPT, uri, fix_all[0].edit) == fixed  # the unsafe fix is left out


@pytest.mark.asyncio
async def test_typing_is_debounced(client, tmp_path):
    (tmp_path / ".ddplint.yaml").write_text("select: [DDP005, DDP007]\n")
    path = write(tmp_path / "train.py", CLEAN_SCRIPT)
    uri = path.as_uri()
    assert await diagnostics_after(client, uri, open_document(client, path, CLEAN_SCRIPT)) == []
    seen = len(client.published)

    def type_quickly():
        for version in range(2, 6):
            change_document(client, path, BAD_SCRIPT if version == 5 else CLEAN_SCRIPT + "#" * version, version)()

    found = await diagnostics_after(client, uri, type_quickly, version=5)
    assert [d.code for d in found] == ["DDP005", "DDP007"]
    assert [p.version for p in client.published[seen:] if p.uri == uri] == [5]


@pytest.mark.asyncio
async def test_a_finding_from_another_file_of_the_project_appears(client, tmp_path):
    """fixtures/project_bad: main.py's DDP010 needs engine.py (evaluate runs a DDP
    forward) and utils.py (on_rank_zero is a rank test); engine.py's DDP012 needs
    main.py (it passes the wrapped model in). Only one file is open at a time."""
    project = tmp_path / "project"
    shutil.copytree(FIXTURES / "project_bad", project)
    (project / "pyproject.toml").write_text("[project]\nname = 'trainer'\n")
    main = project / "main.py"
    found = await diagnostics_after(client, main.as_uri(), open_document(client, main, main.read_text()))
    expected = {line.split()[0]: line.split()[1] for line in (FIXTURES / "project_bad.expected").read_text().splitlines()
                if line and not line.startswith("#")}
    main_expected = {(int(where.split(":")[1]), int(where.split(":")[2]), code)
                     for where, code in expected.items() if where.startswith("main.py:")}
    assert {(d.range.start.line + 1, d.range.start.character + 1, d.code) for d in found} == main_expected
    assert (28, 13, "DDP010") in main_expected

    engine = project / "engine.py"
    found = await diagnostics_after(client, engine.as_uri(), open_document(client, engine, engine.read_text()))
    assert [(d.code, d.range.start.line + 1, d.range.start.character + 1) for d in found] == [("DDP012", 7, 12)]


@pytest.mark.asyncio
async def test_saving_a_file_relints_the_other_open_documents(client, tmp_path):
    """Once main.py is saved without the call that passes the wrapped model to
    maybe_sync_bn, the open engine.py loses its DDP012 (the document's own
    unsaved text counts for itself; the other files are read from disk)."""
    project = tmp_path / "project"
    shutil.copytree(FIXTURES / "project_bad", project)
    (project / "pyproject.toml").write_text("[project]\nname = 'trainer'\n")
    main, engine = project / "main.py", project / "engine.py"
    await diagnostics_after(client, main.as_uri(), open_document(client, main, main.read_text()))
    found = await diagnostics_after(client, engine.as_uri(), open_document(client, engine, engine.read_text()))
    assert [d.code for d in found] == ["DDP012"]
    edited = main.read_text().replace("    maybe_sync_bn(model)  # converts the BatchNorm layers in place\n", "")
    await diagnostics_after(client, main.as_uri(), change_document(client, main, edited, 2), version=2)
    main.write_text(edited)
    found = await diagnostics_after(client, engine.as_uri(), lambda: client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=main.as_uri()))))
    assert found == []


@pytest.mark.asyncio
async def test_excluded_files_get_no_diagnostics(client, tmp_path):
    (tmp_path / ".ddplint.yaml").write_text("select: [DDP005, DDP007]\nextend-exclude: [generated]\n")
    path = write(tmp_path / "generated" / "train.py", BAD_SCRIPT)
    assert await diagnostics_after(client, path.as_uri(), open_document(client, path, BAD_SCRIPT)) == []


@pytest.mark.asyncio
async def test_syntax_error_is_ddp000_and_the_server_keeps_serving(client, tmp_path):
    (tmp_path / ".ddplint.yaml").write_text("select: [DDP000, DDP005, DDP007]\n")
    broken = BAD_SCRIPT + "model.cuda(\n"
    path = write(tmp_path / "train.py", broken)
    found = await diagnostics_after(client, path.as_uri(), open_document(client, path, broken))
    assert [d.code for d in found] == ["DDP000"]
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=path.as_uri()), position=found[0].range.start))
    assert "DDP000" in hover.contents.value
    found = await diagnostics_after(client, path.as_uri(), change_document(client, path, BAD_SCRIPT, 2), version=2)
    assert [d.code for d in found] == ["DDP005", "DDP007"]


@pytest.mark.asyncio
async def test_configuration_changes_relint_open_documents(client, tmp_path):
    config = tmp_path / ".ddplint.yaml"
    config.write_text("select: [DDP005, DDP007]\n")
    path = write(tmp_path / "train.py", BAD_SCRIPT)
    uri = path.as_uri()
    assert [d.code for d in await diagnostics_after(client, uri, open_document(client, path, BAD_SCRIPT))] == \
        ["DDP005", "DDP007"]
    assert [r.method for r in client.registrations] == [types.WORKSPACE_DID_CHANGE_WATCHED_FILES]
    registered = [w["globPattern"] for w in client.registrations[0].register_options["watchers"]]
    assert {"**/pyproject.toml", "**/.ddplint.yaml"} <= set(registered)

    found = await diagnostics_after(client, uri, lambda: client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"ddplint": {"ignore": ["DDP005"]}})))
    assert [d.code for d in found] == ["DDP007"]

    config.write_text("select: [DDP005]\n")
    found = await diagnostics_after(client, uri, lambda: client.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(changes=[types.FileEvent(uri=config.as_uri(),
                                                                   type=types.FileChangeType.Changed)])))
    assert found == []  # the file selects DDP005, the client still ignores it

    found = await diagnostics_after(client, uri, lambda: client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"ddplint": {}})))
    assert [d.code for d in found] == ["DDP005"]


CRASHING_RULE = '''
"""## What it does
Nothing: it raises, to show that one broken rule does not stop the server."""
from ddplint.rule import Rule


class Crash(Rule):
    code, name, severity = "DDP999", "always-crashes", "error"
    message = "never reported"

    def check(self, index):
        raise RuntimeError("boom")
'''


@pytest.mark.asyncio
async def test_a_crashing_rule_is_logged_once_and_the_server_lives(tmp_path):
    """A real rule module that raises, found by the registry like any other."""
    rules = write(tmp_path / "extra_rules" / "ddp999_crash.py", textwrap.dedent(CRASHING_RULE)).parent
    command = [sys.executable, "-c",
               f"import ddplint.rules; ddplint.rules.__path__.append({str(rules)!r}); "
               "from ddplint.cli import main; main()", "server"]
    client = await start(command)
    try:
        path = write(tmp_path / "train.py", BAD_SCRIPT)
        uri = path.as_uri()
        found = await diagnostics_after(client, uri, open_document(client, path, BAD_SCRIPT))
        assert {"DDP005", "DDP007"} <= {d.code for d in found}
        assert "DDP999" not in {d.code for d in found} and "internal-error" not in {d.code for d in found}
        await diagnostics_after(client, uri, change_document(client, path, BAD_SCRIPT + "\n", 2), version=2)
        crashes = [m for m in client.log_messages if "DDP999" in m.message]
        assert len(crashes) == 1 and crashes[0].type == types.MessageType.Error
        assert "RuntimeError: boom" in crashes[0].message
        hover = await client.text_document_hover_async(types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=found[0].range.start))
        assert hover is not None
    finally:
        await client.shutdown_session()
        await client.stop()


@pytest.mark.asyncio
async def test_client_settings_from_initialization_options(tmp_path):
    client = await start(options={"ddplint": {"select": ["DDP007"]}})
    try:
        path = write(tmp_path / "train.py", BAD_SCRIPT)
        found = await diagnostics_after(client, path.as_uri(), open_document(client, path, BAD_SCRIPT))
        assert [d.code for d in found] == ["DDP007"]
    finally:
        await client.shutdown_session()
        await client.stop()


# ---------------------------------------------------------------------- edits, in-process
def test_noqa_edits_where_a_comment_can_and_cannot_go():
    from ddplint.fixes import apply_edits
    from ddplint.lsp.server import noqa_file_edit, noqa_line_edit

    source = 'x = f("a")\ny = """doc\nmore"""\nz = 1 + \\\n    2\n'
    lines = source.splitlines(keepends=True)
    assert apply_edits(source, [noqa_line_edit(lines, 1, "DDP007")]).splitlines()[0] == \
        'x = f("a")  # noqa: DDP007'
    assert noqa_line_edit(lines, 2, "DDP007") is None  # inside a triple-quoted string
    assert noqa_line_edit(lines, 4, "DDP007") is None  # backslash continuation
    assert apply_edits(source, [noqa_line_edit(lines, 3, "DDP007")]).splitlines()[2] == 'more"""  # noqa: DDP007'
    bare = ["x = 1  # noqa\n"]
    assert noqa_line_edit(bare, 1, "DDP007") is None

    script = "#!/usr/bin/env python\n# -*- coding: utf-8 -*-\nimport torch\n"
    assert apply_edits(script, [noqa_file_edit(script.splitlines(keepends=True), "DDP007")]) == \
        "#!/usr/bin/env python\n# -*- coding: utf-8 -*-\n# ddplint: noqa: DDP007\nimport torch\n"
    existing = "import torch\n# ddplint: noqa: DDP005\n"
    assert apply_edits(existing, [noqa_file_edit(existing.splitlines(keepends=True), "DDP007")]) == \
        "import torch\n# ddplint: noqa: DDP005, DDP007\n"
