"""The HTTP front (`broker mcp --listen --upstream URL`) under attack (review6): a journal that is down,
and a body with duplicate keys. Upstream: the SDK notes server, over the 2026 stateless protocol."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.e2e.test_mcp_http import Shim, upstream_http  # noqa: F401 - the fixture
from tests.support.mcp_servers.harness import WAIT, assert_intact, entries

pytestmark = pytest.mark.e2e

META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}
HEADERS = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28",
           "content-type": "application/json"}


def _call(rid: int, tool: str, **arguments: object) -> dict:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments, "_meta": META}}


def _note(upstream: str, note_id: str) -> str:
    """The note as the upstream has it, asked directly (not through the shim)."""
    r = httpx.post(upstream, headers={**HEADERS, "mcp-method": "tools/call", "mcp-name": "get_note"},
                   json=_call(99, "get_note", note_id=note_id), timeout=WAIT)
    return "ran" if "x-marks" in r.text else r.text


def test_a_call_is_not_sent_when_the_journal_is_down(tmp_path: Path, upstream_http: str) -> None:  # noqa: F811
    """On main the upstream ran add_note (a write) and only its result was withheld."""
    vault = tmp_path / "vault"
    (vault / "journal" / "s1.jsonl").mkdir(parents=True)  # the session file cannot be opened
    shim = Shim(vault, upstream_http)
    try:
        r = httpx.post(shim.url("/mcp"), headers={**HEADERS, "mcp-method": "tools/call", "mcp-name": "add_note"},
                       json=_call(4, "add_note", note_id="jd-1", text="x-marks"), timeout=WAIT)
    finally:
        shim.stop()
    body = r.json()
    assert body["id"] == 4 and body["error"]["code"] == -32603 and "journal" in body["error"]["message"]
    assert _note(upstream_http, "jd-1") != "ran", "the upstream ran a call no entry could be written for"


def test_a_body_whose_duplicate_keys_read_two_ways_is_not_sent(tmp_path: Path, upstream_http: str) -> None:  # noqa: F811
    """`"name":"add_note","name":"get_note"`: the shim read get_note (a read), a first-wins upstream
    would add the note (the SDK upstream keeps the last; the shim cannot know which it talks to)."""
    vault = tmp_path / "vault"
    shim = Shim(vault, upstream_http)
    body = (b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"add_note","name":"get_note",'
            b'"arguments":{"note_id":"n1","text":"x"},"_meta":'
            + httpx.Request("POST", "http://x", json=META).content + b"}}")
    try:
        r = httpx.post(shim.url("/mcp"), headers={**HEADERS, "mcp-method": "tools/call", "mcp-name": "get_note"},
                       content=body, timeout=WAIT)
    finally:
        shim.stop()
    got = r.json()
    assert got["id"] == 5 and got["error"]["code"] == -32600, got
    (entry,) = entries(vault)
    assert entry["response"]["answered_by"] == "capture"
    assert_intact(vault)


class _GzipUpstream:
    """A plain JSON-RPC over HTTP upstream that, as many servers behind a gateway do, decodes a request
    body sent with Content-Encoding: gzip; answers every tools/call and keeps what it ran."""

    def __init__(self) -> None:
        import gzip
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        ran = self.ran = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                data = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.headers.get("content-encoding", "").lower() == "gzip":
                    data = gzip.decompress(data)
                msg = json.loads(data)
                if msg.get("method") == "tools/call":
                    ran.append(msg)
                body = json.dumps({"jsonrpc": "2.0", "id": msg.get("id"),
                                   "result": {"content": [{"type": "text", "text": "done"}]}}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/mcp"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_a_compressed_request_body_is_not_sent_unread(tmp_path: Path) -> None:
    """A POST body with Content-Encoding: gzip: the shim read the compressed bytes (not JSON, and no
    method name in them), so no entry; an upstream that decodes it ran the call (fails on main)."""
    import gzip
    import json

    up = _GzipUpstream()
    vault = tmp_path / "vault"
    shim = Shim(vault, up.url)
    try:
        body = gzip.compress(json.dumps(_call(6, "delete_everything")).encode())
        r = httpx.post(shim.url("/mcp"), content=body, timeout=WAIT,
                       headers={**HEADERS, "content-encoding": "gzip"})
    finally:
        shim.stop()
        up.server.shutdown()
    calls = [e for e in entries(vault) if e["request"]["method"] == "tools/call"]
    assert not up.ran or calls, f"the upstream ran {up.ran} and no entry says so (HTTP {r.status_code})"
    assert not up.ran, "a body the shim cannot read went upstream"


class _TrickUpstream:
    """An upstream that answers every POST with `result` "the tool's own result" in a body shaped by
    `kind`: a Content-Type the shim did not read as JSON or SSE though clients do (the Python SDK reads
    any type starting application/json or text/event-stream, the TypeScript SDK any that contains them),
    or a gzip body though the shim asked for identity (httpx, under both SDKs, decodes it)."""

    def __init__(self, kind: str) -> None:
        import gzip
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                msg = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
                answer = json.dumps({"jsonrpc": "2.0", "id": msg.get("id"),
                                     "result": {"content": [{"type": "text", "text": "the tool's own result"}]}})
                headers = {"content-type": "application/json"}
                data = answer.encode()
                if kind == "json-suffix":
                    headers["content-type"] = "application/json-rpc"
                elif kind == "sse-suffix":
                    headers["content-type"] = "text/event-streaming"
                    data = b"event: message\ndata: " + data + b"\n\n"
                elif kind == "gzip":
                    headers["content-encoding"] = "gzip"
                    data = gzip.compress(data)
                self.send_response(200)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/mcp"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.mark.parametrize("kind", ["json-suffix", "sse-suffix", "gzip"])
def test_an_answer_in_a_shape_clients_read_and_the_shim_did_not(tmp_path: Path, kind: str) -> None:
    """Whatever the upstream's Content-Type or Content-Encoding, a result the client can read is one an
    entry holds (on main each of these passed unrecorded: the call's entry said no answer came)."""
    up = _TrickUpstream(kind)
    vault = tmp_path / "vault"
    shim = Shim(vault, up.url)
    try:
        r = httpx.post(shim.url("/mcp"), json=_call(8, "echo", text="x"), timeout=WAIT, headers=HEADERS)
    finally:
        shim.stop()
        up.server.shutdown()
    (entry,) = [e for e in entries(vault) if e["request"]["method"] == "tools/call"]
    if "the tool's own result" in r.text:  # the client (httpx decodes gzip) can read it
        assert entry["response"]["body"] and entry["response"]["answered_by"] == "upstream", entry["response"]
    else:
        assert entry["response"]["answered_by"] != "upstream" and entry["response"]["error"], entry["response"]
    assert_intact(vault)
