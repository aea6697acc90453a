"""Attacks on WebSocket capture through `broker run` (review6): what an agent sends or hears over a
WebSocket must be in the vault (or not pass), and no credential it carries may be kept.

Fake upstream: tests/support/ws_upstream.py (echo on any path it has no other use for).
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest
from websockets.asyncio.client import connect

from tests.support.broker_harness import BrokerProcess
from tests.support.ws_upstream import WsUpstream

pytestmark = pytest.mark.e2e

OPENAI_KEY = "sk-proj-" + "Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8L9z0X1c2V3b4"
GITHUB_PAT = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"


@pytest.fixture
def upstream():
    with WsUpstream() as up:
        yield up


def _vault_text(vault: Path) -> str:
    return "".join(p.read_text() for p in (vault / "journal").glob("*.jsonl"))


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


async def _echo_once(broker: BrokerProcess, url: str, session: str, message: str | bytes, **kw) -> object:
    async with connect(url, proxy=broker.proxy_url(session, "agent"), ssl=ssl.create_default_context(
            cafile=broker.ca), **kw) as ws:
        await ws.send(message)
        got = await ws.recv()
        await ws.close()
        return got


@pytest.mark.parametrize("url", [
    "wss://ws.unknown-host.example/oauth/token",
    "wss://api.github.com/login/oauth/access_token",
])
def test_a_websocket_on_a_token_endpoint_path_is_still_recorded(tmp_path, upstream, url):
    """A WebSocket whose URL looks like an OAuth token endpoint was taken for a token exchange: no
    handshake entry, so none of its messages either; a channel both ways, for as long as it stays open,
    with nothing in the vault (fails on main)."""
    with BrokerProcess(tmp_path, upstream) as broker:
        marker = "what the agent sends over a token-looking websocket"
        got = _run(_echo_once(broker, url, "tok", marker))
        assert got == marker  # the message went through...
        text = _vault_text(broker.vault) if (broker.vault / "journal").exists() else ""
        broker.entries("tok", count=4)
        text = _vault_text(broker.vault) if (broker.vault / "journal").exists() else text
    assert marker in text, "a WebSocket message passed with no entry"  # ...so it is in the vault


def test_a_key_in_sec_websocket_protocol_is_not_kept(tmp_path, upstream):
    """Browsers cannot set Authorization on a WebSocket, so OpenAI's Realtime API takes the key as a
    subprotocol (`openai-insecure-api-key.<key>`): the handshake's header must not keep it."""
    with BrokerProcess(tmp_path, upstream) as broker:
        _run(_echo_once(broker, "wss://ws.unknown-host.example/ws/echo", "proto", "hi",
                        subprotocols=["realtime", f"openai-insecure-api-key.{OPENAI_KEY}"]))
        broker.entries("proto", count=4)
        text = _vault_text(broker.vault)
    assert "hi" in text
    assert OPENAI_KEY not in text


@pytest.mark.parametrize("compression", [None, "deflate"])
def test_secrets_in_binary_and_compressed_messages_are_not_kept(tmp_path, upstream, compression):
    """A credential in a binary frame, or in a permessage-deflate compressed one, is redacted like one in text."""
    with BrokerProcess(tmp_path, upstream) as broker:
        payload = ('{"token": "' + GITHUB_PAT + '", "note": "binary carrier"}').encode()
        got = _run(_echo_once(broker, "wss://ws.unknown-host.example/ws/echo", "bin", payload,
                              compression=compression))
        assert got == payload
        broker.entries("bin", count=4)
        text = _vault_text(broker.vault)
    assert "binary carrier" in text or "YmluYXJ5IGNhcnJpZXI" in text or '"ref"' in text
    assert GITHUB_PAT not in text
