"""WebSocket messages through `broker run`, with real clients (`websockets`, the Slack SDK, the openai SDK)
against a fake upstream on loopback (tests/support/ws_upstream.py).

Each message is an entry of its own, both directions, durable before it is passed on, linked to its
handshake's entry (docs/contract.md, "WebSocket messages").
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import subprocess
import time
from pathlib import Path

import pytest
from websockets.asyncio.client import connect

from tests.journal.test_websocket_messages import RTM_URL
from tests.journal.test_websocket_messages import _message as _message_call
from tests.support.broker_harness import BIN, BrokerProcess
from tests.support.ws_upstream import RTM_TICKET, SOCKET_TICKET, WsUpstream

pytestmark = pytest.mark.e2e

GITHUB_PAT = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


@pytest.fixture
def upstream():
    with WsUpstream() as up:
        yield up


def _client_ssl(broker: BrokerProcess) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=broker.ca)


def _messages(entries: list[dict]) -> list[dict]:
    return [e for e in entries if "websocket" in e["request"]]


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 180))


def _vault_text(vault: Path) -> str:
    return "".join(p.read_text() for p in (vault / "journal").glob("*.jsonl"))


def test_text_binary_fragmented_ping_close_each_an_entry(tmp_path, upstream):
    """Every message is an entry in the direction it went, with its kind; a ping and its pong (which
    the upstream answered, through the proxy) are entries too; the close is an entry; each message is
    on disk before the other side gets it."""
    broker = BrokerProcess(tmp_path, upstream, "--spill-threshold", "100000").start()
    seen_on_disk: list[bool] = []

    def durable_first(path: str, message: str | bytes) -> None:  # runs in the server before it answers
        # every message the server has got so far is already an entry on disk
        seen_on_disk.append(_vault_text(broker.vault).count('"direction":"client_to_server"')
                            >= len(upstream.received))

    upstream.on_message = durable_first
    try:
        async def talk() -> list:
            got = []
            async with connect("wss://api.github.com/ws/echo?access_token=" + GITHUB_PAT,
                               proxy=broker.proxy_url("ws1", "agent-a"), ssl=_client_ssl(broker),
                               compression=None) as ws:
                await ws.send('{"msg": "hello", "token": "' + GITHUB_PAT + '"}')
                got.append(await ws.recv())
                await ws.send(b"\x00\x01\xffbinary")
                got.append(await ws.recv())
                await ws.send(["frag-", "ment-", "ed"])  # one message in three frames
                got.append(await ws.recv())
                pong = await ws.ping(b"are-you-there")
                await asyncio.wait_for(pong, 10)
                got.append("pong")
                await ws.send("big:" + str(300_000))
                got.append(len(await ws.recv()))
                await ws.close(1000, "done here")
            return got

        got = _run(talk())
        assert got[0] == '{"msg": "hello", "token": "' + GITHUB_PAT + '"}'
        assert got[1] == b"\x00\x01\xffbinary"
        assert got[2] == "frag-ment-ed"
        assert got[3] == "pong" and got[4] == 300_000
        entries = broker.entries("ws1", count=14)
    finally:
        broker.stop()
    assert upstream.errors == []
    assert seen_on_disk and all(seen_on_disk), seen_on_disk
    handshake = entries[0]
    assert handshake["response"]["status"] == 101 and "websocket" not in handshake["request"]
    assert GITHUB_PAT not in handshake["request"]["url"]
    msgs = _messages(entries)
    kinds = [(m["request"]["websocket"]["direction"], m["request"]["websocket"]["kind"]) for m in msgs]
    assert kinds[:12] == [
        ("client_to_server", "text"), ("server_to_client", "text"),
        ("client_to_server", "binary"), ("server_to_client", "binary"),
        ("client_to_server", "text"), ("server_to_client", "text"),
        ("client_to_server", "ping"), ("server_to_client", "pong"),
        ("client_to_server", "text"), ("server_to_client", "text"),
        ("client_to_server", "close"), ("server_to_client", "close"),
    ][: len(kinds[:12])]
    assert len(msgs) >= 11
    for i, m in enumerate(msgs, 1):
        ws = m["request"]["websocket"]
        assert ws["handshake"] == handshake["hash"] and ws["handshake_seq"] == handshake["seq"]
        assert ws["message"] == i
        assert m["connector"] == handshake["connector"] == "github"
        assert m["session"] == "ws1" and m["agent"] == "agent-a" and m["capture"] == "broker"
        assert GITHUB_PAT not in json.dumps(m)
        assert m["request"]["method"] == "WEBSOCKET"
    # the client's text went in request.body (JSON, redacted), the server's answer in response.body
    assert msgs[0]["request"]["body"] == {"msg": "hello", "token": "[never captured]"}
    assert msgs[0]["response"]["body"] is None
    assert msgs[1]["response"]["body"] == {"msg": "hello", "token": "[never captured]"}
    assert msgs[1]["request"]["body"] is None
    assert msgs[2]["request"]["body"] == {"base64": base64.b64encode(b"\x00\x01\xffbinary").decode()}
    assert msgs[4]["request"]["body"] == "frag-ment-ed"
    ping, pong = msgs[6], msgs[7]
    assert ping["request"]["body"] == {"base64": base64.b64encode(b"are-you-there").decode()}
    assert pong["response"]["body"] == {"base64": base64.b64encode(b"are-you-there").decode()}
    assert ping["effect"] == pong["effect"] == "read"  # no application data
    assert msgs[9]["response"]["body"]["size"] == 300_000  # over the spill threshold: a blob
    assert (broker.vault / msgs[9]["response"]["body"]["ref"]).stat().st_size == 300_000
    close = msgs[10]
    assert close["request"]["websocket"]["kind"] == "close"
    assert close["request"]["websocket"]["close_code"] == 1000
    assert close["request"]["websocket"]["close_reason"] == "done here"
    # the vault verifies, and the readers take the entries
    assert subprocess.run([str(BIN / "broker"), "verify", "--vault", str(broker.vault)],
                          capture_output=True).returncode == 0
    shown = subprocess.run([str(BIN / "broker"), "show", "--vault", str(broker.vault), "ws1"],
                           capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert "client_to_server" in shown.stdout or "→" in shown.stdout or "WEBSOCKET" in shown.stdout


def test_server_close_unknown_host_recorded_passed_host_left_alone(tmp_path, upstream):
    """The server's close is an entry; a WebSocket to a host no connector knows is recorded (connector
    `other`), unless the operator passed that host (--pass-unknown): then it leaves no entry."""
    with BrokerProcess(tmp_path, upstream, "--pass-unknown", "ws.passed-host.example") as broker:
        async def talk() -> None:
            async with connect("wss://api.github.com/ws/echo", proxy=broker.proxy_url("ws2", "a"),
                               ssl=_client_ssl(broker)) as ws:
                await ws.send("server-close")
                with pytest.raises(Exception):  # noqa: B017 - closed by the server with 4001
                    await ws.recv()
            async with connect("wss://ws.unknown-host.example/ws/echo", proxy=broker.proxy_url("ws3", "a"),
                               ssl=_client_ssl(broker)) as ws:
                await ws.send("an unknown host is recorded too")
                assert await ws.recv() == "an unknown host is recorded too"
            async with connect("wss://ws.passed-host.example/ws/echo", proxy=broker.proxy_url("ws4", "a"),
                               ssl=_client_ssl(broker)) as ws:
                await ws.send("nobody records this")
                assert await ws.recv() == "nobody records this"

        _run(talk())
        entries = broker.entries("ws2", count=3)
        unknown = broker.entries("ws3", count=3)
        assert not broker.vault.joinpath("journal", "ws4.jsonl").exists()
    closes = [m for m in _messages(entries) if m["request"]["websocket"]["kind"] == "close"]
    assert closes and closes[0]["request"]["websocket"]["direction"] == "server_to_client"
    assert closes[0]["request"]["websocket"]["close_code"] == 4001
    assert {e["connector"] for e in unknown} == {"other"}
    sent = [m for m in _messages(unknown) if m["request"]["websocket"]["direction"] == "client_to_server"]
    assert sent and sent[0]["effect"] == "write"  # no rule reads it: what the agent sends is a write


def test_slack_socket_mode_and_rtm_recorded_with_ticket_redacted(tmp_path, upstream):
    """apps.connections.open and rtm.connect are entries (not token exchanges); the wss URL's ticket
    is never written; an RTM message that posts is a write, an ack and the events received are reads."""
    with BrokerProcess(tmp_path, upstream) as broker:
        async def talk() -> None:
            import httpx

            async with httpx.AsyncClient(proxy=broker.proxy_url("slack1", "bot"), verify=_client_ssl(broker),
                                         timeout=60) as c:
                r = await c.post("https://slack.com/api/apps.connections.open",
                                 headers={"Authorization": "Bearer xapp-1-A0FAKE-123-abcdef"})
                url = r.json()["url"]
                r2 = await c.get("https://slack.com/api/rtm.connect",
                                 headers={"Authorization": "Bearer xoxb-1-2-abcdefghijkl"})
                rtm_url = r2.json()["url"]
            async with connect(url, proxy=broker.proxy_url("slack1", "bot"), ssl=_client_ssl(broker)) as ws:
                json.loads(await ws.recv())  # hello
                envelope = json.loads(await ws.recv())
                await ws.send(json.dumps({"envelope_id": envelope["envelope_id"]}))
            async with connect(rtm_url, proxy=broker.proxy_url("slack1", "bot"), ssl=_client_ssl(broker)) as ws:
                await ws.send(json.dumps({"id": 1, "type": "message", "channel": "C1", "text": "posted via RTM"}))
                await ws.recv()
                await ws.send(json.dumps({"id": 2, "type": "ping"}))
                await ws.recv()

        _run(talk())
        entries = broker.entries("slack1", count=12)
    raw = _vault_text(broker.vault)
    assert SOCKET_TICKET not in raw and RTM_TICKET not in raw
    assert "verification-secret-xyz" not in raw
    urls = [e["request"]["url"] for e in entries if "websocket" not in e["request"]]
    assert any("apps.connections.open" in u for u in urls) and any("rtm.connect" in u for u in urls)
    assert any(u.startswith("https://wss-primary.slack.com/link/") or u.startswith("wss://wss-primary.slack.com/link/")
               for u in urls)
    msgs = _messages(entries)
    assert msgs and all(m["connector"] == "slack" for m in msgs)
    post = next(m for m in msgs if "posted via RTM" in json.dumps(m["request"]["body"]))
    assert post["effect"] == "write" and post["request"]["effect_basis"] == "rule"
    ack = next(m for m in msgs if m["request"]["body"] == {"envelope_id": "env-1"})
    assert ack["effect"] == "read"
    ping = next(m for m in msgs if m["request"]["body"] == {"id": 2, "type": "ping"})
    assert ping["effect"] == "read"
    received = [m for m in msgs if m["request"]["websocket"]["direction"] == "server_to_client"]
    assert received and all(m["effect"] == "read" for m in received)


def test_slack_sdk_socket_mode_client(tmp_path, upstream):
    """The Slack SDK's own Socket Mode client (its built-in flavour, which takes a proxy) through the broker:
    apps.connections.open, the hello and the event it receives, and its ack are all entries."""
    pytest.importorskip("slack_sdk")
    import threading

    from slack_sdk.socket_mode.builtin import SocketModeClient
    from slack_sdk.socket_mode.request import SocketModeRequest
    from slack_sdk.socket_mode.response import SocketModeResponse
    from slack_sdk.web import WebClient

    with BrokerProcess(tmp_path, upstream) as broker:
        proxy = broker.proxy_url("sdk1", "bolt")
        got: list = []
        done = threading.Event()
        web = WebClient(token="xoxb-1-2-sdkbottoken", proxy=proxy, ssl=_client_ssl(broker))
        client = SocketModeClient(app_token="xapp-1-A0FAKE-1-sdkapptoken", web_client=web, proxy=proxy,
                                  auto_reconnect_enabled=False, ping_interval=60)

        def on_request(c: SocketModeClient, req: SocketModeRequest) -> None:
            got.append(req.payload["event"]["text"])
            c.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
            done.set()

        client.socket_mode_request_listeners.append(on_request)
        try:
            client.connect()
            assert done.wait(20), broker.output.decode(errors="replace")[-2000:]
            # (the SDK's ping and its pong are entries too, in an order the SDK's threads decide: wait for the
            # ack's own entry, not for a count the ping and pong can reach first)
            deadline = time.monotonic() + 20
            while True:
                entries = broker.entries("sdk1", count=7)
                acked = any(e["request"].get("body") == {"envelope_id": "env-1"} for e in entries)
                if acked or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        finally:
            client.close()
    assert got == ["<@U0BOT> hello"]
    raw = _vault_text(broker.vault)
    assert SOCKET_TICKET not in raw and "sdkapptoken" not in raw
    assert any("apps.connections.open" in e["request"]["url"] for e in entries)
    msgs = _messages(entries)
    ack = next(m for m in msgs if m["request"]["body"] == {"envelope_id": "env-1"})
    assert ack["effect"] == "read"
    assert any((m["response"]["body"] or {}).get("type") == "events_api" for m in msgs)


def test_openai_realtime_sdk_is_a_model_call_with_prompt_refs(tmp_path, upstream):
    """The openai SDK's Realtime client through `broker run --prompts refs`: every event is an entry of
    connector openai, a read, its texts referenced; with prompt capture off nothing is recorded."""
    openai = pytest.importorskip("openai")
    with BrokerProcess(tmp_path, upstream, "--prompts", "refs") as broker:
        proxy = broker.proxy_url("rt1", "model-agent")

        async def talk() -> list:
            client = openai.AsyncOpenAI(api_key="sk-proj-realtimesecretkey0123456789abcdef",
                                        websocket_base_url="wss://api.openai.com/v1")
            out = []
            async with client.realtime.connect(
                model="gpt-realtime", websocket_connection_options={"proxy": proxy, "ssl": _client_ssl(broker)},
            ) as conn:
                await conn.conversation.item.create(item={
                    "type": "message", "role": "user",
                    "content": [{"type": "input_text", "text": "a private question"}]})
                await conn.response.create()
                async for event in conn:
                    out.append(event.type)
                    if event.type == "response.done":
                        break
            return out

        events = _run(talk())
        import httpx

        with httpx.Client(proxy=proxy, verify=_client_ssl(broker), timeout=60) as c:  # the tool call asked for
            c.get("https://api.github.com/repos/octo/hello/issues")
        entries = broker.entries("rt1", count=7)
    assert "response.done" in events
    raw = _vault_text(broker.vault)
    assert "a private question" not in raw and "realtimesecretkey" not in raw and "Hello" not in raw
    msgs = [m for m in _messages(entries) if m["connector"] == "openai"]
    assert msgs and all(m["effect"] == "read" for m in msgs)
    assert all(m["request"]["prompt_capture"] == "refs" for m in msgs)
    done = next(m for m in msgs if (m["response"]["body"] or {}).get("type") == "response.done")
    call = done["response"]["body"]["response"]["output"][1]
    assert call["name"] == "list_issues" and call["arguments"] == '{"repo": "octo/hello"}'  # the instruction, in clear
    tool = next(e for e in entries if e["connector"] == "github")
    assert tool["connector"] == "github" and tool["prompt_ref"] == done["hash"]  # the message that asked for it


def test_openai_responses_websocket_mode_sdk(tmp_path, upstream):
    """The openai SDK's Responses WebSocket client (`responses.connect`) through `broker run --prompts full`:
    the prompt is in the blob store, not the entry; the tool call the response asks for is in clear."""
    openai = pytest.importorskip("openai")
    if not hasattr(openai.AsyncOpenAI(api_key="x").responses, "connect"):
        pytest.skip("this openai SDK has no Responses WebSocket client")
    with BrokerProcess(tmp_path, upstream, "--prompts", "full") as broker:
        proxy = broker.proxy_url("resp1", "model-agent")

        async def talk() -> list:
            client = openai.AsyncOpenAI(api_key="sk-proj-responsessecret0123456789abcdef",
                                        websocket_base_url="wss://api.openai.com/v1")
            out = []
            async with client.responses.connect(
                websocket_connection_options={"proxy": proxy, "ssl": _client_ssl(broker)}, max_retries=0,
            ) as conn:
                await conn.response.create(model="gpt-fake", input="summarise my private notes")
                async for event in conn:
                    out.append(event.type)
                    if event.type == "response.completed":
                        break
            return out

        events = _run(talk())
        entries = broker.entries("resp1", count=5)
    assert events[-1] == "response.completed"
    raw = _vault_text(broker.vault)
    assert "summarise my private notes" not in raw and "responsessecret" not in raw
    msgs = _messages(entries)
    sent = next(m for m in msgs if m["request"]["websocket"]["direction"] == "client_to_server")
    ref = sent["request"]["body"]["input"]
    assert (broker.vault / ref["ref"]).read_bytes() == b"summarise my private notes"
    done = next(m for m in msgs if (m["response"]["body"] or {}).get("type") == "response.completed")
    assert done["response"]["body"]["response"]["output"][1]["name"] == "list_issues"


def test_model_websocket_unrecorded_with_prompt_capture_off(tmp_path, upstream):
    with BrokerProcess(tmp_path, upstream) as broker:
        async def talk() -> None:
            async with connect("wss://generativelanguage.googleapis.com/ws/google.ai.generativelanguage.v1beta."
                               "GenerativeService.BidiGenerateContent?key=AIzaSyA1234567890abcdefghijklmnopqrstu",
                               proxy=broker.proxy_url("g0", "a"), ssl=_client_ssl(broker)) as ws:
                await ws.send(json.dumps({"setup": {"model": "models/gemini-live"}}))
                await ws.recv()

        _run(talk())
    assert not broker.vault.joinpath("journal", "g0.jsonl").exists()


def test_gemini_live_key_redacted_and_texts_referenced(tmp_path, upstream):
    key = "AIzaSyA1234567890abcdefghijklmnopqrstu"
    with BrokerProcess(tmp_path, upstream, "--prompts", "full") as broker:
        async def talk() -> None:
            async with connect("wss://generativelanguage.googleapis.com/ws/google.ai.generativelanguage.v1beta."
                               f"GenerativeService.BidiGenerateContent?key={key}",
                               proxy=broker.proxy_url("g1", "a"), ssl=_client_ssl(broker)) as ws:
                await ws.send(json.dumps({"clientContent": {"turns": [
                    {"role": "user", "parts": [{"text": "secret plans for friday"}]}], "turnComplete": True}}))
                await ws.recv()

        _run(talk())
        entries = broker.entries("g1", count=3)
    raw = _vault_text(broker.vault)
    assert key not in raw and "secret plans for friday" not in raw
    msgs = _messages(entries)
    assert msgs and all(m["connector"] == "gemini" and m["request"]["prompt_capture"] == "full" for m in msgs)
    part = msgs[0]["request"]["body"]["clientContent"]["turns"][0]["parts"][0]["text"]
    assert part["size"] == len("secret plans for friday") and "ref" in part
    assert (broker.vault / part["ref"]).read_bytes() == b"secret plans for friday"


def test_readers_take_message_entries(tmp_path):  # here, not in tests/journal/: replay forks
    """verify, the timeline label, HAR (messages under their handshake), OTel, the fixture, replay and its
    revert plan read a session holding WebSocket messages; a message that posted is never 'refused'."""
    from journal.call import Call
    from journal.export.fixture import read_entries
    from journal.export.har import build_har
    from journal.export.otel import build_otlp
    from journal.listing import entry_row
    from journal.record import Recorder
    from journal.replay import plan_dict, replay_session
    from journal.vault import Vault
    from journal.verify import verify_session

    rec = Recorder(tmp_path / "v")
    try:
        hs = rec.record(Call.make(session="s", agent="agent", principal="me", connector="slack", method="GET",
                                  url=RTM_URL, status=101, response_headers=[("Upgrade", "websocket")]))
        assert hs is not None
        post = _message_call(RTM_URL, "client_to_server", b'{"id": 1, "type": "message", "channel": "C1", "text": "x"}')
        post.request.extra["websocket"].update(handshake=hs["hash"], handshake_seq=hs["seq"])
        reply = _message_call(RTM_URL, "server_to_client", b'{"ok": true, "reply_to": 1}')
        reply.request.extra["websocket"].update(handshake=hs["hash"], handshake_seq=hs["seq"], message=2)
        rec.record(post)
        rec.record(reply)
    finally:
        rec.close()
    vault = Vault.open_existing(tmp_path / "v")
    assert verify_session(vault, "s").intact
    entries, _ = read_entries(vault, "s")
    assert [entry_row(e, i)["method"] for i, e in enumerate(entries, 1)] == ["GET", "WS→text", "WS←text"]
    har = build_har(tmp_path / "v", "s")["log"]
    assert len(har["entries"]) == 1
    ws = har["entries"][0]["_webSocketMessages"]
    assert [(m["type"], m["opcode"]) for m in ws] == [("send", 1), ("receive", 1)]
    assert json.loads(ws[0]["data"])["text"] == "x"
    assert build_otlp(tmp_path / "v", "s")["resourceSpans"]
    plan = plan_dict(replay_session(vault, "s"))
    step = next(s for s in plan["steps"] if s["for_seq"] == 2)
    assert "refused" not in json.dumps(step) and "changed nothing" not in json.dumps(step)


def test_playback_replays_websockets_without_upstream(tmp_path, upstream):
    """`--playback` plays a recorded session's WebSockets back: the handshake and the server's messages
    (a Socket Mode hello sent first, echoes after each client message, text and binary) reach the client
    in the recorded order, pings are answered, and nothing reaches the upstream. A client message that
    differs from the recorded one stops the playback of that connection with an error naming the entry."""
    socket_url = f"wss://wss-primary.slack.com/link/?ticket={SOCKET_TICKET}&app_id=A0FAKE"
    for d in ("rec", "pb", "pb2"):
        (tmp_path / d).mkdir()

    async def echo(broker: BrokerProcess, session: str, second: str, wait: float = 60) -> list:
        got: list = []
        async with connect("wss://api.github.com/ws/echo", proxy=broker.proxy_url(session, "agent-a"),
                           ssl=_client_ssl(broker), compression=None, open_timeout=60) as ws:
            await ws.send("hello")
            got.append(await ws.recv())
            await ws.send(second)
            try:
                got.append(await asyncio.wait_for(ws.recv(), wait))
            except TimeoutError:
                got.append("no answer")
            await ws.send(b"\x00\x01binary")
            try:
                got.append(await asyncio.wait_for(ws.recv(), wait))
            except TimeoutError:
                got.append("no answer")
            await asyncio.wait_for(await ws.ping(b"still-there"), 10)
        return got

    async def socket_mode(broker: BrokerProcess, session: str) -> list:
        async with connect(socket_url, proxy=broker.proxy_url(session, "bot"), ssl=_client_ssl(broker),
                           compression=None, open_timeout=60) as ws:
            got = [json.loads(await ws.recv())["type"], json.loads(await ws.recv())["type"]]
            await ws.send(json.dumps({"envelope_id": "env-1"}))
        return got

    def started(name: str, *extra: str, vault: Path | None = None) -> BrokerProcess:
        return BrokerProcess(tmp_path / name, upstream, *extra, vault=vault).start(timeout=120)  # (a busy machine)

    rec = started("rec")
    try:
        recorded = _run(echo(rec, "rec", '{"n": 1}'))
        assert _run(socket_mode(rec, "rec")) == ["hello", "events_api"]
        rec.entries("rec", count=17)
    finally:
        rec.stop()
    assert recorded == ["hello", '{"n": 1}', b"\x00\x01binary"]
    requests, received = list(upstream.http_requests), list(upstream.received)

    pb = started("pb", "--playback", "rec", vault=rec.vault)
    try:
        replayed = _run(echo(pb, "pb", '{"n": 1}'))
        # the recorded answers, in order (a JSON text message is recorded as its JSON value: replayed as
        # that value, compact, not byte for byte)
        assert replayed[0] == "hello" and json.loads(replayed[1]) == {"n": 1} and replayed[2] == recorded[2]
        assert _run(socket_mode(pb, "pb")) == ["hello", "events_api"]  # sent before the client said anything
        played = pb.entries("pb", count=17)
    finally:
        pb.stop()
    assert "error" not in bytes(pb.output).decode(errors="replace").lower(), bytes(pb.output).decode()
    pb2 = started("pb2", "--playback", "rec", vault=rec.vault)
    try:
        assert _run(echo(pb2, "pb2", '{"n": 2}', wait=5)) == ["hello", "no answer", "no answer"]
    finally:
        pb2.stop()
    output = bytes(pb2.output).decode(errors="replace")
    assert upstream.http_requests == requests and upstream.received == received  # no upstream connection
    assert "client message 2 on https://api.github.com/ws/echo differs from the recorded one (rec#" in output
    handshakes = [e for e in played if e["response"]["status"] == 101 and "websocket" not in e["request"]]
    assert len(handshakes) == 2 and all(e["request"]["playback_of"].startswith("rec#") for e in handshakes)
    assert all(e["response"]["answered_by"] == "capture" for e in handshakes)
    kinds = [(m["request"]["websocket"]["direction"], m["request"]["websocket"]["kind"]) for m in _messages(played)]
    assert kinds[:6] == [("client_to_server", "text"), ("server_to_client", "text")] * 2 + [
        ("client_to_server", "binary"), ("server_to_client", "binary")]
