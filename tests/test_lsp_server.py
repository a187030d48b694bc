"""A real LSP client (JSON-RPC over stdio, Content-Length framing) talking to
`ddplint server`: open, change and close a document and read the published
diagnostics."""

import json
import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers import BAD_SCRIPT, CLEAN_SCRIPT

pytest.importorskip("pygls")


class StdioClient:
    def __init__(self, cwd: Path):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ddplint", "server"], cwd=cwd,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self.messages: "queue.Queue[dict]" = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        stream = self.process.stdout
        while True:
            headers = {}
            while True:
                line = stream.readline()
                if not line:
                    return
                line = line.decode("ascii").strip()
                if not line:
                    break
                key, _, value = line.partition(":")
                headers[key.lower()] = value.strip()
            body = stream.read(int(headers["content-length"]))
            self.messages.put(json.loads(body))

    def send(self, method, params, request=False):
        message = {"jsonrpc": "2.0", "method": method, "params": params}
        if request:
            self.next_id += 1
            message["id"] = self.next_id
        body = json.dumps(message).encode()
        self.process.stdin.write(f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        self.process.stdin.flush()
        return message.get("id")

    def wait_for(self, predicate, timeout=30):
        while True:
            message = self.messages.get(timeout=timeout)
            if predicate(message):
                return message

    def request(self, method, params):
        ident = self.send(method, params, request=True)
        return self.wait_for(lambda m: m.get("id") == ident and "method" not in m)

    def diagnostics(self, uri):
        message = self.wait_for(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                                and m["params"]["uri"] == uri)
        return message["params"]["diagnostics"]

    def close(self):
        try:
            self.request("shutdown", None)
            self.send("exit", None)
            self.process.wait(timeout=10)
        finally:
            if self.process.poll() is None:
                self.process.kill()


@pytest.fixture
def client(tmp_path):
    client = StdioClient(tmp_path)
    response = client.request("initialize", {"processId": None, "rootUri": tmp_path.as_uri(),
                                             "capabilities": {}})
    assert response["result"]["serverInfo"]["name"] == "ddplint"
    client.send("initialized", {})
    yield client
    client.close()


def test_open_change_close_publishes_diagnostics(client, tmp_path):
    (tmp_path / ".ddplint.yaml").write_text("select: [DDP005, DDP007]\n")
    path = tmp_path / "train.py"
    path.write_text(BAD_SCRIPT)
    uri = path.as_uri()
    client.send("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                         "text": BAD_SCRIPT}})
    found = client.diagnostics(uri)
    assert [(d["code"], d["range"]["start"]["line"], d["range"]["start"]["character"], d["severity"])
            for d in found] == [("DDP005", 5, 26, 3), ("DDP007", 6, 17, 2)]
    assert all(d["source"] == "ddplint" for d in found)

    client.send("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                           "contentChanges": [{"text": CLEAN_SCRIPT}]})
    assert client.diagnostics(uri) == []

    client.send("textDocument/didClose", {"textDocument": {"uri": uri}})
    assert client.diagnostics(uri) == []


def test_server_uses_the_nearest_config(client, tmp_path):
    (tmp_path / ".ddplint.yaml").write_text("select: [DDP007]\n")
    path = tmp_path / "job.py"
    uri = path.as_uri()
    client.send("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                         "text": BAD_SCRIPT}})
    assert [d["code"] for d in client.diagnostics(uri)] == ["DDP007"]
