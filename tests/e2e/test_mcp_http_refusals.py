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
