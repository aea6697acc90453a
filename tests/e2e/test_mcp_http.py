"""The HTTP shim end to end: streamable HTTP and legacy SSE relays (`--listen`), and the stdio front
for an HTTP upstream, with the real SDK client in both protocol eras."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CreateMessageResult, ElicitResult, TextContent

from journal.vault import Vault
from tests.support.mcp_servers.harness import (
    PY,
    REPO,
    WAIT,
    assert_intact,
    entries,
    free_port,
    shim_argv,
    wait_for_port,
)

pytestmark = pytest.mark.e2e
TOKEN = "Bearer test-token-0123456789abcdef"


def _start(argv: list[str], port: int) -> subprocess.Popen:
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_port(port, proc)
    except Exception:
        proc.kill()
        raise
    return proc


def _stop(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.terminate()
    try:
        _, err = proc.communicate(timeout=WAIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return (err or b"").decode("utf-8", "replace")


@pytest.fixture(scope="module")
def upstream_http() -> Iterator[str]:
    port = free_port()
    proc = _start([PY, "-m", "tests.support.mcp_servers.notes_server", "http", str(port)], port)
    yield f"http://127.0.0.1:{port}/mcp"
    _stop(proc)


@pytest.fixture(scope="module")
def upstream_sse() -> Iterator[str]:
    port = free_port()
    proc = _start([PY, "-m", "tests.support.mcp_servers.notes_server", "sse", str(port)], port)
    yield f"http://127.0.0.1:{port}/sse"
    _stop(proc)


class Shim:
    def __init__(self, vault: Path, upstream: str, *options: str) -> None:
        self.port = free_port()
        self.proc = _start([*shim_argv(vault, *options), "--listen", f"127.0.0.1:{self.port}", "--upstream", upstream],
                           self.port)
        self.stderr = ""

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> str:
        self.stderr = _stop(self.proc)
        return self.stderr


async def _sampling(ctx, params) -> CreateMessageResult:
    return CreateMessageResult(role="assistant", content=TextContent(type="text", text="42"), model="m")


async def _elicitation(ctx, params) -> ElicitResult:
    return ElicitResult(action="accept", content={"ok": False})


async def _scenario(c: Client) -> None:
    assert c.server_info is not None and c.server_info.name == "Test Notes"
    assert "get_note" in {t.name for t in (await c.list_tools()).tools}
    assert (await c.call_tool("get_note", {"note_id": "n1"})).content[0].text == "buy milk"
    assert (await c.call_tool("add_note", {"note_id": "h1", "text": "x"})).content[0].text == "ok"
    assert (await c.call_tool("fail", {})).is_error is True
    seen: list[float] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        seen.append(p)

    assert (await c.call_tool("progress", {"steps": 3}, progress_callback=on_progress)).content[0].text == "done 3"
    assert seen == [1, 2, 3]
    assert (await c.call_tool("ask_llm", {"question": "q"})).content[0].text == "llm said: 42"
    assert (await c.call_tool("ask_user", {"question": "q"})).content[0].text == "user said ok=False"
    digest = (await c.call_tool("auth_digest", {})).content[0].text
    assert digest == hashlib.sha256(TOKEN.encode()).hexdigest()  # the client's Authorization reached upstream


def _check_entries(vault: Path, upstream_prefix: str) -> list[dict]:
    assert_intact(vault)
    got = entries(vault)
    names = [e["mcp"]["params"]["name"] for e in got]
    assert names[:3] == ["get_note", "add_note", "fail"] and names[-1] == "auth_digest"
    effects = {e["mcp"]["params"]["name"]: e["effect"] for e in got}
    assert effects["get_note"] == "read" and effects["add_note"] == "write"
    for e in got:
        assert e["capture"] == "gateway" and e["connector"] == "test-notes"
        assert e["request"]["url"].startswith(upstream_prefix)
        assert e["response"]["status"] == 200 and e["response"]["body"]["id"] == e["mcp"]["id"]
        auth = [v for k, v in e["request"]["headers"] if k.lower() == "authorization"]
        assert auth == ["[never captured]"]
        assert e["principal"].startswith("fp:")
    vault_bytes = b"".join(p.read_bytes() for p in vault.rglob("*") if p.is_file())
    assert b"test-token-0123456789abcdef" not in vault_bytes
    return got


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_streamable_http_relay(tmp_path: Path, upstream_http: str, mode: str) -> None:
    vault = tmp_path / "vault"
    shim = Shim(vault, upstream_http)
    try:
        async def run() -> None:
            http = httpx2.AsyncClient(headers={"Authorization": TOKEN}, timeout=httpx2.Timeout(WAIT, read=WAIT))
            transport = streamable_http_client(shim.url("/mcp"), http_client=http)
            async with Client(transport, mode=mode, sampling_callback=_sampling, elicitation_callback=_elicitation,
                              read_timeout_seconds=WAIT) as c:
                assert c.protocol_version == ("2026-07-28" if mode == "auto" else "2025-11-25")
                await _scenario(c)

        asyncio.run(run())
    finally:
        shim.stop()
    got = _check_entries(vault, upstream_http)
    session_ids = {v for e in got for k, v in e["request"]["headers"] if k.lower() == "mcp-session-id"}
    if mode == "legacy":  # one session, its id passed through both ways
        assert len(session_ids) == 1
    else:  # the 2026 era is stateless
        assert session_ids == set()


def test_legacy_sse_relay(tmp_path: Path, upstream_sse: str) -> None:
    vault = tmp_path / "vault"
    shim = Shim(vault, upstream_sse)
    try:
        async def run() -> None:
            transport = sse_client(shim.url("/sse"), headers={"Authorization": TOKEN}, timeout=WAIT)
            async with Client(transport, mode="legacy", sampling_callback=_sampling,
                              elicitation_callback=_elicitation, read_timeout_seconds=WAIT) as c:
                await _scenario(c)

        asyncio.run(run())
    finally:
        shim.stop()
    origin = upstream_sse.rsplit("/", 1)[0]
    _check_entries(vault, origin + "/messages/?session_id=")


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_stdio_front_for_http_upstream(tmp_path: Path, upstream_http: str, mode: str) -> None:
    vault = tmp_path / "vault"
    argv = shim_argv(vault, "--upstream", upstream_http, "--principal", "alice@example.com")

    async def run() -> None:
        params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(REPO))
        async with Client(params, mode=mode, sampling_callback=_sampling, read_timeout_seconds=WAIT) as c:
            assert c.protocol_version == ("2026-07-28" if mode == "auto" else "2025-11-25")
            await c.list_tools()
            assert (await c.call_tool("get_note", {"note_id": "n2"})).content[0].text == "call bob"
            assert (await c.call_tool("archive_all", {})).content[0].text == "archived"
            assert (await c.call_tool("ask_llm", {"question": "q"})).content[0].text == "llm said: 42"
            assert (await c.read_resource("note://n2")).contents[0].text == "call bob"

    asyncio.run(run())
    assert_intact(vault)
    got = entries(vault)
    assert [e["effect"] for e in got[:2]] == ["read", "write"]
    assert got[-1]["request"]["method"] == "resources/read"
    for e in got:
        assert e["request"]["url"] == upstream_http and e["response"]["status"] == 200
        assert e["principal"] == "alice@example.com" and e["connector"] == "test-notes"


def test_upstream_unreachable_and_crash(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    dead = f"http://127.0.0.1:{free_port()}/mcp"
    shim = Shim(vault, dead)
    try:
        r = httpx.post(shim.url("/mcp"), json={"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                                               "params": {"name": "get_note", "arguments": {}}}, timeout=WAIT)
        assert r.status_code == 502
        assert r.json()["id"] == 5 and r.json()["error"]["code"] == -32000
    finally:
        err = shim.stop()
    assert "could not be reached" in err
    (e,) = entries(vault)
    assert e["response"]["status"] is None and "could not be reached" in e["response"]["error"]
    assert_intact(vault)

    # an upstream that dies mid-call (its own process exits while answering)
    port = free_port()
    upstream = _start([PY, "-m", "tests.support.mcp_servers.notes_server", "http", str(port)], port)
    vault2 = tmp_path / "vault2"
    shim = Shim(vault2, f"http://127.0.0.1:{port}/mcp")
    try:
        async def run() -> None:
            async with Client(shim.url("/mcp"), read_timeout_seconds=WAIT) as c:
                await c.list_tools()
                result = None
                with pytest.raises(Exception):  # noqa: B017 - the SDK surfaces the 502 as an error
                    result = await c.call_tool("crash", {})
                assert result is None

        asyncio.run(run())
    finally:
        shim.stop()
        _stop(upstream)
    (e,) = entries(vault2)
    assert e["mcp"]["params"]["name"] == "crash" and e["response"]["status"] is None
    assert "before answering" in e["response"]["error"] or "could not be reached" in e["response"]["error"]
    assert_intact(vault2)


def test_client_disconnect_mid_call(tmp_path: Path, upstream_http: str) -> None:
    vault = tmp_path / "vault"
    shim = Shim(vault, upstream_http)
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}
    body = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": {"name": "wait_for_file", "arguments": {"path": str(tmp_path / "never")}, "_meta": meta}}
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28",
               "mcp-method": "tools/call", "mcp-name": "wait_for_file"}
    try:
        with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes its connection
            httpx.post(shim.url("/mcp"), json=body, headers=headers, timeout=httpx.Timeout(WAIT, read=1.0))
        got = _wait_entries(vault, 1)
    finally:
        shim.stop()
    (e,) = got
    assert e["mcp"]["id"] == 9 and e["response"]["error"] == "the client disconnected before the answer came"
    assert_intact(vault)


def _wait_entries(vault: Path, n: int) -> list[dict]:
    import time

    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        got = entries(vault)
        if len(got) >= n:
            return got
        time.sleep(0.05)
    raise AssertionError(f"expected {n} entries")


def test_bad_bodies_are_relayed_and_recorded(tmp_path: Path, upstream_http: str) -> None:
    vault = tmp_path / "vault"
    shim = Shim(vault, upstream_http)
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    try:
        r = httpx.post(shim.url("/mcp"), content=b'{"method": "tools/call", oops', headers=headers, timeout=WAIT)
        assert r.status_code >= 400  # the upstream's own answer to a body that is not JSON, relayed
        r = httpx.post(shim.url("/mcp"), json={"jsonrpc": "2.0", "id": 3, "method": "no/such"}, headers=headers,
                       timeout=WAIT)
        assert r.status_code < 500
        got = _wait_entries(vault, 1)
    finally:
        err = shim.stop()
    assert "the client sent a body that is not JSON" in err
    (e,) = got
    assert e["mcp"] == {"unparsed": '{"method": "tools/call", oops'} and e["response"]["status"] is None
    assert_intact(vault)


def test_journal_failure_fails_closed_over_http(tmp_path: Path, upstream_http: str) -> None:
    vault = tmp_path / "vault"
    (vault / "journal" / "s1.jsonl").mkdir(parents=True)  # the session file cannot be opened
    shim = Shim(vault, upstream_http)
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28",
               "mcp-method": "tools/call", "mcp-name": "get_note"}
    try:
        r = httpx.post(shim.url("/mcp"), headers=headers, timeout=WAIT, json={
            "jsonrpc": "2.0", "id": 4, "method": "tools/call",
            "params": {"name": "get_note", "arguments": {"note_id": "n1"}, "_meta": meta}})
    finally:
        err = shim.stop()
    body = r.json()
    assert body["id"] == 4 and body["error"]["code"] == -32603
    assert "journal could not record" in body["error"]["message"]
    assert "buy milk" not in r.text
    # checked before the call goes upstream (review6; tests/e2e/test_mcp_http_refusals.py)
    assert "the journal could not record this call, so it was not sent" in err


async def _first_call_then_list(c: Client) -> None:
    assert (await c.call_tool("get_note", {"note_id": "n1"})).content[0].text == "buy milk"  # before any listing
    assert (await c.call_tool("archive_all", {})).content[0].text == "archived"
    assert "get_note" in {t.name for t in (await c.list_tools()).tools}


def _first_call_entries(vault: Path) -> None:
    assert_intact(vault)
    got = [(e["mcp"]["params"]["name"], e["effect"], e["request"]["effect_basis"], e["response"]["answered_by"])
           for e in entries(vault)]
    assert got == [("get_note", "read", "annotations", "upstream"), ("archive_all", "write", "default", "upstream")]


@pytest.mark.parametrize("transport", ["streamable-auto", "streamable-legacy", "sse", "stdio-front"])
def test_first_call_effect_from_annotations_over_http(
    tmp_path: Path, upstream_http: str, upstream_sse: str, transport: str,
) -> None:
    vault = tmp_path / "vault"
    if transport == "stdio-front":
        argv = shim_argv(vault, "--upstream", upstream_http)

        async def front() -> None:
            params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(REPO))
            async with Client(params, read_timeout_seconds=WAIT) as c:
                await _first_call_then_list(c)

        asyncio.run(front())
        _first_call_entries(vault)
        return
    shim = Shim(vault, upstream_sse if transport == "sse" else upstream_http)
    try:
        async def run() -> None:
            if transport == "sse":
                client = Client(sse_client(shim.url("/sse"), headers={"Authorization": TOKEN}, timeout=WAIT),
                                mode="legacy", read_timeout_seconds=WAIT)
            else:
                http = httpx2.AsyncClient(headers={"Authorization": TOKEN}, timeout=httpx2.Timeout(WAIT, read=WAIT))
                client = Client(streamable_http_client(shim.url("/mcp"), http_client=http),
                                mode=transport.split("-")[1], read_timeout_seconds=WAIT)
            async with client as c:
                await _first_call_then_list(c)

        asyncio.run(run())
    finally:
        err = shim.stop()
    assert "could not ask" not in err
    _first_call_entries(vault)


def test_http_answered_by_and_oversize_request(tmp_path: Path, upstream_http: str) -> None:
    vault = tmp_path / "vault"
    shim = Shim(vault, upstream_http, "--max-message-mib", "1")
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28",
               "mcp-method": "tools/call", "mcp-name": "echo"}
    text = "e" * (2 << 20)
    try:
        first = httpx.post(shim.url("/mcp"), headers={**headers, "mcp-method": "resources/read", "mcp-name": "note://n1"},
                           timeout=WAIT, json={"jsonrpc": "2.0", "id": 1, "method": "resources/read",
                                               "params": {"uri": "note://n1", "_meta": meta}})
        assert first.status_code == 200, first.text
        # over the limit: read from its skeleton, its tool asked of the server with the client's _meta
        r = httpx.post(shim.url("/mcp"), headers=headers, timeout=WAIT, json={
            "jsonrpc": "2.0", "id": 2**64, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": text}, "_meta": meta}})
    finally:
        shim.stop()
    assert r.status_code == 200 and r.json()["result"]["content"][0]["text"] == text
    read, e = entries(vault)
    assert (read["effect"], read["request"]["effect_basis"]) == ("read", "rule")
    assert set(e["mcp"]) == {"unparsed"} and e["mcp"]["unparsed"]["size"] > 2 << 20
    assert Vault(vault).blob_path(e["mcp"]["unparsed"]["ref"]).read_bytes().startswith(b'{"jsonrpc"')
    assert e["response"]["answered_by"] == "upstream" and e["response"]["status"] == 200
    assert (e["effect"], e["request"]["effect_basis"]) == ("read", "annotations")
    assert_intact(vault)


def test_own_tools_list_never_reaches_a_legacy_sse_client(tmp_path: Path, upstream_sse: str) -> None:
    """On the legacy transport answers come on the client's GET stream: the shim's own tools/list
    answer is taken out of it."""
    import json
    import threading

    vault = tmp_path / "vault"
    shim = Shim(vault, upstream_sse)
    events: list[dict] = []
    endpoint: list[str] = []
    done = threading.Event()

    def read_stream() -> None:
        with httpx.stream("GET", shim.url("/sse"), timeout=httpx.Timeout(WAIT, read=WAIT)) as r:
            kind = ""
            for line in r.iter_lines():
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:"):
                    data = line[5:].strip()
                    if kind == "endpoint":
                        endpoint.append(data)
                    else:
                        events.append(json.loads(data))
                        if events[-1].get("id") == 2:
                            done.set()
                            return

    reader = threading.Thread(target=read_stream, daemon=True)
    reader.start()
    try:
        deadline = WAIT
        while not endpoint and deadline > 0:
            done.wait(0.05)
            deadline -= 0.05
        post = shim.url(endpoint[0])
        httpx.post(post, timeout=WAIT, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
        httpx.post(post, timeout=WAIT, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        httpx.post(post, timeout=WAIT, json={"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                             "params": {"name": "get_note", "arguments": {"note_id": "n1"}}})
        assert done.wait(WAIT)
    finally:
        shim.stop()
    assert [e.get("id") for e in events] == [1, 2]  # nothing but the answers to the client's own requests
    (e,) = entries(vault)
    assert (e["effect"], e["request"]["effect_basis"]) == ("read", "annotations")
