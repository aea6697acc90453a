"""Small pieces of the mitmproxy addon that must agree with mitmproxy itself."""

from __future__ import annotations

import pytest
from mitmproxy import http

from broker.proxy.request_url import request_origin as _origin
from broker.proxy.request_url import request_url as _pretty_url

CASES = [
    ("GET", "https://gmail.googleapis.com/gmail/v1/users/me/labels?x=1", [(b"Host", b"gmail.googleapis.com")]),
    ("GET", "https://gmail.googleapis.com/gmail/v1/users/me/labels", [(b"Host", b"gmail.googleapis.com:8443")]),
    ("GET", "https://10.0.0.1/a", [(b"Host", b"slack.com")]),
    ("POST", "http://127.0.0.1:8080/api/x", [(b"Host", b"example.org:80")]),
    ("GET", "http://example.org/a", [(b"Host", b"example.org:8081")]),
    ("GET", "https://[::1]:8443/a", [(b"Host", b"[::1]:8443")]),
    ("GET", "https://example.org/a", []),  # no Host header
    ("GET", "https://example.org:444/a", []),
    ("OPTIONS", "https://example.org/a", [(b"Host", b"Example.ORG")]),
]


@pytest.mark.parametrize(("method", "url", "headers"), CASES)
def test_cached_origin_gives_mitmproxys_pretty_host_and_url(method, url, headers):
    req = http.Request.make(method, url, b"", headers)
    for _ in range(2):  # computed, then from the cache
        host, origin = _origin(req)
        assert (host, _pretty_url(req, origin)) == (req.pretty_host, req.pretty_url)
    req.path = "*"
    assert _pretty_url(req, _origin(req)[1]) == req.pretty_url


def test_cached_origin_for_authority_form_and_http2():
    req = http.Request.make("CONNECT", "https://example.org:443/", b"", [])
    req.authority = "example.org:443"
    assert req.first_line_format == "authority"
    host, origin = _origin(req)
    assert (host, _pretty_url(req, origin)) == (req.pretty_host, req.pretty_url)
    h2 = http.Request.make("GET", "https://10.0.0.2/v1", b"", [])
    h2.http_version = "HTTP/2.0"
    h2.authority = "api.github.com"
    host, origin = _origin(h2)
    assert (host, _pretty_url(h2, origin)) == (h2.pretty_host, h2.pretty_url)


def test_a_response_is_never_released_unrecorded_whatever_the_failure(tmp_path, monkeypatch):
    """An unexpected error while recording (here a KeyError) answers 502 under block, like a journal
    failure: the agent must not see a response that has no entry."""
    import asyncio

    from mitmproxy.test import taddons, tflow

    import broker.proxy.addon as cj

    addon = cj.ConnectorJournal()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, vault=str(tmp_path / "vault"), broker_recorder="inline")
        f = tflow.tflow()
        f.request = http.Request.make("GET", "https://gmail.googleapis.com/gmail/v1/users/me/labels", b"",
                                      [(b"Host", b"gmail.googleapis.com")])
        addon.requestheaders(f)
        addon.request(f)
        f.response = http.Response.make(200, b'{"labels": []}', [(b"Content-Type", b"application/json")])
        addon.responseheaders(f)

        def broken(*_a, **_k):
            raise KeyError("method")

        monkeypatch.setattr(cj, "call_fields", broken)
        asyncio.run(addon.response(f))
    assert f.response.status_code == 502 and "journal" in f.response.text
    assert addon.inflight == 0


def test_an_unforeseen_failure_before_forwarding_answers_502_instead_of_passing_unrecorded(tmp_path, monkeypatch):
    from mitmproxy.test import taddons, tflow

    import broker.proxy.addon as cj

    addon = cj.ConnectorJournal()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, vault=str(tmp_path / "vault"), broker_recorder="inline")
        monkeypatch.setattr(cj, "request_origin", lambda req: 1 / 0)
        f = tflow.tflow()
        f.client_conn.sni = "gmail.googleapis.com"  # tflow's own SNI ("address") would make it misdirected
        f.request = http.Request.make("GET", "https://gmail.googleapis.com/gmail/v1/users/me/labels", b"",
                                      [(b"Host", b"gmail.googleapis.com")])
        addon.requestheaders(f)
    assert f.response is not None and f.response.status_code == 502
    assert cj._META not in f.metadata and addon.inflight == 0


def test_bad_addon_options_are_refused_with_the_allowed_values(tmp_path):
    from mitmproxy import exceptions
    from mitmproxy.test import taddons

    import broker.proxy.addon as cj

    addon = cj.ConnectorJournal()
    with taddons.context(addon) as tctx:
        cases = (("broker_recorder", "'process' or 'inline'"), ("broker_on_journal_error", "'block' or 'pass'"))
        for option, allowed in cases:
            with pytest.raises(exceptions.OptionsError, match=allowed):
                tctx.configure(addon, vault=str(tmp_path / "vault"), **{option: "bogus"})


def _websocket_flow(addon, url: str):
    """A flow through the request hooks and a recorded 101 handshake, ready for websocket_message."""
    import asyncio

    from mitmproxy.test import tflow
    from mitmproxy.websocket import WebSocketData

    f = tflow.tflow()
    host = url.split("/")[2]
    f.request = http.Request.make("GET", url, b"", [(b"Host", host.encode()), (b"Upgrade", b"websocket")])
    f.client_conn.sni = host  # the destination: tflow's own SNI ("address") would make it misdirected
    addon.requestheaders(f)
    addon.request(f)
    f.response = http.Response.make(101, b"", [(b"Upgrade", b"websocket"), (b"Connection", b"Upgrade")])
    f.websocket = WebSocketData()
    addon.responseheaders(f)
    asyncio.run(addon.response(f))
    return f


async def _relay(addon, f, *frames) -> None:
    """What the relay (broker.proxy.websocket_relay) does for a run of one message (the flow's last)
    and then the control frames given: each hook, then the flush, after which what is not dropped goes."""
    held = [addon.websocket_message(f)] + [addon.websocket_control(frame) for frame in frames]
    for waited in held:
        if waited is not None:  # (the stock relay: the hook itself waits)
            await waited
    flushed = addon.websocket_flush(f)
    if flushed is not None:
        await flushed


def test_each_websocket_message_is_recorded_then_dropped_from_the_flow(tmp_path):
    """The hook writes the message's entry, linked to the handshake, and empties mitmproxy's message list
    (which otherwise holds every message of the connection for its life); the message is still forwarded."""
    import asyncio

    from mitmproxy.test import taddons
    from mitmproxy.websocket import WebSocketMessage
    from wsproto.frame_protocol import Opcode

    import broker.proxy.addon as cj
    from journal.reader import iter_entries
    from journal.vault import Vault

    addon = cj.ConnectorJournal()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, vault=str(tmp_path / "vault"), broker_recorder="inline")
        f = _websocket_flow(addon, "https://wss-primary.slack.com/websocket/R1?ticket=secret-ticket-1")
        for i in range(3):
            msg = WebSocketMessage(Opcode.TEXT, True, b'{"type": "message", "text": "m%d"}' % i)
            f.websocket.messages.append(msg)
            asyncio.run(_relay(addon, f))
            assert f.websocket.messages == [] and not msg.dropped
        f.websocket.closed_by_client, f.websocket.close_code = False, 1001
        asyncio.run(addon.websocket_end(f))
        asyncio.run(addon.done())
    entries = list(iter_entries(Vault(tmp_path / "vault"), "default"))
    assert [e["request"]["method"] for e in entries] == ["GET"] + ["WEBSOCKET"] * 4
    ws = [e["request"]["websocket"] for e in entries[1:]]
    assert {w["handshake"] for w in ws} == {entries[0]["hash"]} and [w["message"] for w in ws] == [1, 2, 3, 4]
    assert ws[-1]["kind"] == "close" and ws[-1]["direction"] == "server_to_client" and ws[-1]["close_code"] == 1001
    assert [e["effect"] for e in entries[1:]] == ["write", "write", "write", "read"]


def test_held_messages_are_durable_when_the_flush_returns_and_pings_are_entries(tmp_path):
    """With the batching relay a message's hook returns before its entry is written (the message is
    held); the flush returns only once every held message and control frame is an entry. A ping the
    client sent and the server's pong are entries (reads), their payloads binary."""
    import asyncio

    from mitmproxy.test import taddons
    from mitmproxy.websocket import WebSocketMessage
    from wsproto.frame_protocol import Opcode

    import broker.proxy.addon as cj
    from broker.proxy import websocket_relay
    from broker.proxy.websocket_relay import ControlFrame
    from journal.reader import iter_entries
    from journal.vault import Vault

    addon = cj.ConnectorJournal()
    with taddons.context(addon) as tctx:
        assert websocket_relay.installed  # loading the addon installs it (mitmproxy 12)
        tctx.configure(addon, vault=str(tmp_path / "vault"), broker_recorder="inline")
        f = _websocket_flow(addon, "https://wss-primary.slack.com/websocket/R1")

        def on_disk() -> int:
            return len(list(iter_entries(Vault(tmp_path / "vault"), "default")))

        async def run() -> tuple[int, int]:
            for i in range(3):
                f.websocket.messages.append(WebSocketMessage(Opcode.TEXT, True, b'{"n": %d}' % i))
                assert addon.websocket_message(f) is None  # held, not waited for here
            ping = ControlFrame(f, "ping", True, b"are-you-there")
            pong = ControlFrame(f, "pong", False, b"are-you-there")
            assert addon.websocket_control(ping) is None and addon.websocket_control(pong) is None
            before = on_disk()
            flushed = addon.websocket_flush(f)
            assert flushed is not None
            await flushed
            assert not ping.dropped and not pong.dropped
            return before, on_disk()

        before, after = asyncio.run(run())
        assert before == 1 and after == 6  # the handshake; then its five frames, all at the flush
        assert addon.websocket_flush(f) is None  # nothing held any more
        asyncio.run(addon.done())
    entries = list(iter_entries(Vault(tmp_path / "vault"), "default"))
    ws = [e["request"]["websocket"] for e in entries[1:]]
    assert [w["message"] for w in ws] == [1, 2, 3, 4, 5]  # appended in the order they went over the wire
    assert [(w["direction"], w["kind"]) for w in ws[3:]] == [("client_to_server", "ping"), ("server_to_client", "pong")]
    assert entries[4]["request"]["body"] == {"base64": "YXJlLXlvdS10aGVyZQ=="}
    assert entries[5]["response"]["body"] == {"base64": "YXJlLXlvdS10aGVyZQ=="}
    assert entries[4]["effect"] == entries[5]["effect"] == "read"
    assert all("secret-ticket-1" not in e["request"]["url"] for e in entries)


def test_a_websocket_message_that_cannot_be_recorded_is_not_forwarded_under_block(tmp_path, monkeypatch):
    import asyncio

    from mitmproxy.test import taddons
    from mitmproxy.websocket import WebSocketMessage
    from wsproto.frame_protocol import Opcode

    import broker.proxy.addon as cj

    addon = cj.ConnectorJournal()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, vault=str(tmp_path / "vault"), broker_recorder="inline")
        f = _websocket_flow(addon, "https://wss-primary.slack.com/websocket/R1")

        def broken(*_a, **_k):
            raise OSError("disk full")

        monkeypatch.setattr(cj, "call_fields", broken)
        msg = WebSocketMessage(Opcode.TEXT, True, b'{"type": "message", "text": "unrecorded"}')
        f.websocket.messages.append(msg)
        asyncio.run(_relay(addon, f))
        assert msg.dropped and addon.journal_failures == 1
        tctx.configure(addon, broker_on_journal_error="pass")
        passed = WebSocketMessage(Opcode.TEXT, True, b'{"type": "message", "text": "passes"}')
        f.websocket.messages.append(passed)
        asyncio.run(_relay(addon, f))
        assert not passed.dropped and addon.journal_failures == 2
        asyncio.run(addon.done())


def test_a_websocket_to_a_passed_host_leaves_no_entry_and_no_history(tmp_path):
    import asyncio

    from mitmproxy.test import taddons
    from mitmproxy.websocket import WebSocketMessage
    from wsproto.frame_protocol import Opcode

    import broker.proxy.addon as cj

    addon = cj.ConnectorJournal()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, vault=str(tmp_path / "vault"), broker_recorder="inline",
                       broker_pass_unknown=["ws.unknown.example"])
        f = _websocket_flow(addon, "https://ws.unknown.example/socket")
        f.websocket.messages.append(WebSocketMessage(Opcode.BINARY, False, b"\x00" * 10))
        asyncio.run(_relay(addon, f))
        assert f.websocket.messages == []
        asyncio.run(addon.done())
    assert not (tmp_path / "vault" / "journal" / "default.jsonl").exists()
