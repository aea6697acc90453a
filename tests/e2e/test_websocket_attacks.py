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


def _frame(opcode: int, payload: bytes) -> bytes:
    """One masked client frame (RFC 6455 5.2), FIN set."""
    import os
    import struct

    mask = os.urandom(4)
    n = len(payload)
    head = bytes([0x80 | opcode]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack("!H", n))
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def _raw_websocket(broker: BrokerProcess, host: str, path: str, session: str):
    """A TLS socket through the proxy's CONNECT to `host`, nothing sent on it yet."""
    import base64
    import socket

    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=30)
    auth = base64.b64encode(f"{session}:agent".encode()).decode()
    sock.sendall(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\nProxy-Authorization: Basic {auth}\r\n\r\n"
                 .encode())
    got = b""
    while b"\r\n\r\n" not in got:
        got += sock.recv(4096)
    assert got.startswith(b"HTTP/1.1 200"), got
    ctx = ssl.create_default_context(cafile=broker.ca)
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx.wrap_socket(sock, server_hostname=host)


def _upgrade(host: str, path: str) -> bytes:
    return (f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()


def _read_until(tls, needle: bytes, got: bytes = b"") -> bytes:
    import time

    deadline = time.monotonic() + 20
    while needle not in got and time.monotonic() < deadline:
        chunk = tls.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def test_a_message_sent_with_the_upgrade_is_recorded_before_it_is_relayed(tmp_path, upstream):
    """The client sends its first frame in the same write as the upgrade request, before any 101: the
    frame must still be an entry, durable before the upstream gets it."""
    on_disk: list[bool] = []
    with BrokerProcess(tmp_path, upstream) as broker:
        upstream.on_message = lambda path, message: on_disk.append(
            "early-bird" in _vault_text(broker.vault))
        host = "ws.unknown-host.example"
        tls = _raw_websocket(broker, host, "/ws/echo", "early")
        try:
            tls.sendall(_upgrade(host, "/ws/echo") + _frame(0x1, b"early-bird"))
            got = _read_until(tls, b"early-bird")
            assert got.startswith(b"HTTP/1.1 101"), got[:200]
            tls.sendall(_frame(0x8, b"\x03\xe8" + f"bye {GITHUB_PAT}".encode()))  # a close frame with data
            _read_until(tls, b"\x88", got[got.index(b"early-bird") + 10 :])
        finally:
            tls.close()
        broker.entries("early", count=4)
        text = _vault_text(broker.vault)
    assert on_disk == [True], on_disk
    assert text.count("early-bird") >= 2  # the client's message and the echo
    assert GITHUB_PAT not in text, "the close frame's reason kept a credential"
    assert "bye" in text


def test_an_rfc8441_websocket_over_http2_goes_nowhere(tmp_path, upstream):
    """An extended CONNECT (`:protocol websocket`, RFC 8441) on an HTTP/2 connection to the proxy: the
    proxy does not offer it (no SETTINGS_ENABLE_CONNECT_PROTOCOL) and ends the connection; nothing
    reaches the upstream, so nothing unrecorded passes (passes on main: a regression guard)."""

    import h2.events

    from tests.support.h2_client import H2Tunnel

    with BrokerProcess(tmp_path, upstream) as broker:
        tunnel = H2Tunnel(broker.port, broker.ca, "ws.unknown-host.example")
        sid = tunnel.conn.get_next_available_stream_id()
        tunnel.conn.send_headers(sid, [(":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "https"),
                                       (":authority", "ws.unknown-host.example"), (":path", "/ws/echo"),
                                       ("sec-websocket-version", "13")], end_stream=False)
        tunnel.conn.send_data(sid, _frame(0x1, b"over h2"), end_stream=False)
        tunnel.sock.sendall(tunnel.conn.data_to_send())
        tunnel.sock.settimeout(10)
        ended = opened = False
        try:
            while not ended:
                data = tunnel.sock.recv(65536)
                if not data:
                    break
                for ev in tunnel.conn.receive_data(data):
                    opened |= isinstance(ev, h2.events.ResponseReceived) and dict(ev.headers).get(b":status") == b"200"
                    ended |= isinstance(ev, h2.events.ConnectionTerminated | h2.events.StreamReset)
        except (TimeoutError, ConnectionError):
            pass
    assert not opened and upstream.received == [] and upstream.http_requests == []
