"""WebSocket message entries as the Recorder builds them (docs/contract.md, "WebSocket messages"), and the
connector rules for Slack Socket Mode / RTM and the model WebSockets. No process is started."""

from __future__ import annotations

import json

import pytest

from journal.call import Call, Identity, Request, Response, WebSocketPayload
from journal.connectors import Registry
from journal.entry import validate_entry
from journal.models import route_call
from journal.models.capture import complete
from journal.record import Recorder
from journal.redact import is_token_exchange

SOCKET_URL = "https://wss-primary.slack.com/link/?ticket=tkt-secret-123&app_id=A1"
RTM_URL = "https://wss-primary.slack.com/websocket/R1?ticket=rtm-secret-456"


def _message(url: str, direction: str, data: bytes, *, text: bool = True, connector: str = "slack",
             prompts: str | None = None, model_api: str | None = None, kind: str | None = None) -> Call:
    meta = {"handshake": "a" * 64, "handshake_seq": 1, "direction": direction,
            "kind": kind or ("text" if text else "binary"), "message": 1}
    payload = WebSocketPayload(data, text)
    sent = direction == "client_to_server"
    return Call(Identity("s", "agent", "me"), connector,
                Request("WEBSOCKET", url, (), payload if sent else None, {"websocket": meta}),
                Response(101, (), None if sent else payload, None, None, "upstream"),
                ts=1_700_000_000.0, prompts=prompts, model_api=model_api)


@pytest.fixture
def recorder(tmp_path):
    rec = Recorder(tmp_path / "vault", spill_threshold=1000)
    yield rec
    rec.close()


def _record(rec: Recorder, call: Call) -> dict:
    if call.prompts:  # as the recording service does
        call = complete(rec, call, request=True)
        half = rec.prepare_request(call)
        assert half is not None
        fields = rec.prepare_response(half, complete(rec, call, request=False))
        return rec.writer.append(fields)
    entry = rec.record(call)
    assert entry is not None
    return entry


@pytest.mark.parametrize(("body", "effect"), [
    (b'{"envelope_id": "e1"}', "read"),
    (b'{"envelope_id": "e1", "payload": {"text": "answering as the app"}}', "write"),
    (b'{"id": 1, "type": "message", "channel": "C1", "text": "posts"}', "write"),
    (b'{"id": 2, "type": "ping"}', "read"),
    (b'{"id": 3, "type": "typing", "channel": "C1"}', "write"),
    (b"not json at all", "write"),
    (b'{"type": "ping", "type": "message"}', "write"),  # duplicate keys: the last one counts, as Slack reads it
])
def test_slack_messages_the_app_sends(recorder, body, effect):
    for url in (SOCKET_URL, RTM_URL):
        entry = _record(recorder, _message(url, "client_to_server", body))
        assert entry["effect"] == effect, body
        assert entry["request"]["effect_basis"] == "rule"


def test_what_the_agent_receives_is_a_read_and_the_entry_holds_the_contract(recorder):
    entry = _record(recorder, _message(RTM_URL, "server_to_client",
                                       b'{"type": "message", "text": "hi", "token": "xoxb-1-2-secretsecret"}'))
    validate_entry(entry)
    assert entry["effect"] == "read" and entry["connector"] == "slack"
    assert entry["request"]["method"] == "WEBSOCKET" and entry["request"]["body"] is None
    assert entry["response"]["body"] == {"type": "message", "text": "hi", "token": "[never captured]"}
    assert entry["response"]["status"] == 101 and entry["response"]["answered_by"] == "upstream"
    assert entry["request"]["websocket"] == {"handshake": "a" * 64, "handshake_seq": 1,
                                             "direction": "server_to_client", "kind": "text", "message": 1}
    assert "rtm-secret-456" not in json.dumps(entry) and "ticket=" in entry["request"]["url"]


def test_text_that_is_not_json_binary_and_large_messages(recorder):
    text = _record(recorder, _message(SOCKET_URL, "client_to_server", b'{"envelope_id": "x"} trailing'))
    assert text["request"]["body"] == '{"envelope_id": "x"} trailing'
    secret = b"token=xoxb-1-2-secretsecret&x=1"
    binary = _record(recorder, _message(SOCKET_URL, "client_to_server", b"\x00\xff" + secret, text=False))
    assert "base64" in binary["request"]["body"] and "secretsecret" not in json.dumps(binary)
    big = _record(recorder, _message(SOCKET_URL, "server_to_client", b"y" * 5000))
    assert big["response"]["body"]["size"] == 5000 and "ref" in big["response"]["body"]


def test_a_close_is_a_read_whoever_sends_it(recorder):
    entry = _record(recorder, _message(SOCKET_URL, "client_to_server", b"", kind="close"))
    assert entry["effect"] == "read" and entry["request"]["body"] is None


def test_slack_socket_hosts_match_and_opening_calls_are_recorded():
    reg = Registry.builtin()
    for host in ("wss-primary.slack.com", "wss-backup.slack.com", "wss-mobile.slack.com"):
        assert reg.match(host, "/link/") == "slack"
    assert reg.match("wss-primary.slack.com.evil.example", "/link/") is None
    assert not is_token_exchange("POST", "https://slack.com/api/apps.connections.open", [], b"")
    assert not is_token_exchange("GET", "https://slack.com/api/rtm.connect", [], None)
    handshake = reg.classify("GET", SOCKET_URL, [], None)
    # a WebSocket is never a token exchange, whatever its URL (review6: its messages passed unrecorded)
    assert is_token_exchange("GET", "https://x.example/oauth/token", [], None)
    assert not is_token_exchange("GET", "https://x.example/oauth/token", [("Upgrade", "WebSocket")], None)
    assert not is_token_exchange("WEBSOCKET", "https://x.example/oauth/token", [], b"data")
    assert handshake is not None and handshake.effect == "read"


@pytest.mark.parametrize(("host", "path", "api"), [
    ("api.openai.com", "/v1/realtime", "openai"),
    ("api.openai.com", "/v1/responses", "openai"),
    ("generativelanguage.googleapis.com",
     "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent", "gemini"),
    ("generativelanguage.googleapis.com",
     "/ws/google.ai.generativelanguage.v1alpha.GenerativeService.BidiGenerateContentConstrained", "gemini"),
])
def test_model_websockets_are_model_calls(host, path, api):
    assert route_call(Registry.builtin(), None, host, path) == (api, api)


def test_realtime_events_texts_referenced_tool_calls_in_clear(recorder):
    url = "https://api.openai.com/v1/realtime?model=gpt-realtime"
    sent = _record(recorder, _message(url, "client_to_server", json.dumps({
        "type": "conversation.item.create",
        "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "private words"}]},
    }).encode(), connector="openai", prompts="refs", model_api="openai"))
    assert sent["effect"] == "read" and sent["request"]["prompt_capture"] == "refs"
    assert sent["request"]["model_api"] == "openai"
    text = sent["request"]["body"]["item"]["content"][0]["text"]
    assert text["size"] == len("private words") and "ref" not in text
    got = _record(recorder, _message(url, "server_to_client", json.dumps({
        "type": "response.done", "response": {"output": [
            {"type": "message", "content": [{"type": "output_text", "text": "the answer"}]},
            {"type": "function_call", "name": "send_mail", "call_id": "c1", "arguments": "{\"to\": \"bob\"}"},
        ]}}).encode(), connector="openai", prompts="full", model_api="openai"))
    assert got["request"]["prompt_capture"] == "full" and got["request"]["body"] is None
    out = got["response"]["body"]["response"]["output"]
    assert out[1] == {"type": "function_call", "name": "send_mail", "call_id": "c1", "arguments": "{\"to\": \"bob\"}"}
    assert "ref" in out[0]["content"][0]["text"]
    raw = json.dumps([sent, got])
    assert "private words" not in raw and "the answer" not in raw


def test_gemini_live_key_in_url_never_written(recorder):
    url = ("https://generativelanguage.googleapis.com/ws/google.ai.generativelanguage.v1beta.GenerativeService."
           "BidiGenerateContent?key=AIzaSyA1234567890abcdefghijklmnopqrstu")
    entry = _record(recorder, _message(url, "client_to_server", json.dumps({
        "realtimeInput": {"text": "hello gemini"}}).encode(), connector="gemini", prompts="refs",
        model_api="gemini"))
    assert "AIzaSyA1234567890" not in json.dumps(entry)
    assert entry["request"]["body"]["realtimeInput"]["text"]["size"] == len("hello gemini")

