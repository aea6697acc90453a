"""`broker mcp --listen --gateway`: one shim in front of one MCP server serving many agents at once,
each agent's calls in its own session (headers, URL path, or one per MCP session / connection), the
gateway's own headers never forwarded. Real SDK clients, concurrently."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from journal.vault import Vault
from journal.verify import verify_session
from tests.e2e.test_mcp_http import Shim, upstream_http  # noqa: F401 - fixture
from tests.support.mcp_servers.harness import WAIT, entries

pytestmark = pytest.mark.e2e


async def _agent(url: str, mode: str, headers: dict[str, str], note: str) -> str:
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(WAIT, read=WAIT))
    async with Client(streamable_http_client(url, http_client=http), mode=mode, read_timeout_seconds=WAIT) as c:
        assert (await c.call_tool("get_note", {"note_id": "n1"})).content[0].text == "buy milk"
        assert (await c.call_tool("add_note", {"note_id": note, "text": note})).content[0].text == "ok"
        return (await c.call_tool("header_names", {})).content[0].text


def test_a_shared_gateway_keeps_each_agent_in_its_own_session(tmp_path: Path, upstream_http: str) -> None:  # noqa: F811
    vault = tmp_path / "vault"
    shim = Shim(vault, upstream_http, "--gateway")
    try:
        async def run() -> list[str]:
            return await asyncio.gather(
                _agent(shim.url("/mcp"), "auto", {"X-Broker-Session": "alice", "X-Broker-Agent": "agent-a"}, "a"),
                _agent(shim.url("/bob/mcp"), "auto", {"X-Broker-Agent": "agent-b"}, "b"),
                _agent(shim.url("/mcp"), "legacy", {}, "c"),
                _agent(shim.url("/mcp"), "legacy", {}, "d"),
            )

        forwarded = asyncio.run(run())
    finally:
        shim.stop()
    for names in forwarded:
        assert "x-broker-session" not in names and "x-broker-agent" not in names
    sessions = Vault(vault).sessions()
    assert "alice" in sessions and "bob" in sessions
    legacy = [s for s in sessions if s.startswith("s1.")]
    assert len(legacy) == 2  # one per MCP session (Mcp-Session-Id), named by its keyed fingerprint, never the id
    assert all(re.fullmatch(r"s1\.[0-9a-f]{16}", s) for s in legacy)
    ids = {v for s in legacy for e in entries(vault, s) for k, v in e["response"]["headers"]
           if k.lower() == "mcp-session-id"}
    assert {"s1." + i.removeprefix("fp:") for i in ids} == set(legacy)
    for s in sessions:
        assert verify_session(Vault(vault), s).intact
    alice, bob = entries(vault, "alice"), entries(vault, "bob")
    assert [e["mcp"]["params"]["name"] for e in alice] == ["get_note", "add_note", "header_names"]
    assert {e["agent"] for e in alice} == {"agent-a"} and {e["agent"] for e in bob} == {"agent-b"}
    assert [e["mcp"]["params"]["arguments"].get("note_id") for e in bob][1] == "b"
    assert bob[0]["request"]["url"] == upstream_http  # the session segment is not sent upstream
    for s in legacy:
        got = entries(vault, s)
        assert len(got) == 3 and {e["agent"] for e in got} == {"agent-1"}
    for s in sessions:
        for e in entries(vault, s):
            assert not any(k.lower().startswith("x-broker-") for k, _ in e["request"]["headers"])


def test_a_session_that_cannot_be_a_vault_file_is_refused(tmp_path: Path, upstream_http: str) -> None:  # noqa: F811
    import httpx

    shim = Shim(tmp_path / "vault", upstream_http, "--gateway")
    try:
        r = httpx.post(shim.url("/mcp"), headers={"X-Broker-Session": "x" * 300, "Accept": "application/json"},
                       json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=WAIT)
    finally:
        shim.stop()
    assert r.status_code == 400 and "too long" in r.text
