"""One recorded session with every kind of body and answer, for the export tests."""

from __future__ import annotations

import gzip
import random

import orjson

from journal.call import Call
from journal.chain import GENESIS, chain_entry
from journal.record import JsonValue, Recorder
from journal.vault import Vault

SESSION = "export-1"
SECRET = "ya29.secret-token-never-on-disk"
GMAIL = "https://gmail.googleapis.com/gmail/v1/users/me"
BIG = "A" * 300  # over the test spill threshold
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(128, 228))
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
MCP_TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
THRESHOLD = 200


def record_export_session(root, session: str = SESSION) -> list[dict]:
    """Seven entries: a GET with a redacted token, a JSON POST, a gzip-declared response, a spilled
    whole body, a JSON body with a spilled string, bytes, a call with no answer, and two MCP calls
    (stdio and HTTP)."""
    rec = Recorder(root, spill_threshold=THRESHOLD)
    common = {"session": session, "agent": "bot/1", "principal": "alice@example.com", "capture": "broker"}
    json_resp = [("Content-Type", "application/json; charset=UTF-8")]
    calls = [
        dict(connector="gmail", effect="read", method="GET", url=GMAIL + "/messages?q=is%3Aunread&access_token="
             + SECRET,
             request_headers=[("Authorization", "Bearer " + SECRET), ("traceparent", TRACEPARENT)], request_body=None,
             status=200, response_headers=json_resp + [("Content-Encoding", "gzip")],
             response_body=gzip.compress(b'{"messages": [{"id": "m1"}]}')),
        dict(connector="gmail", effect="write", method="POST", url=GMAIL + "/messages/m1/modify",
             request_headers=[("Content-Type", "application/json")], request_body=b'{"removeLabelIds": ["UNREAD"]}',
             status=200, response_headers=json_resp, response_body=b'{"id": "m1", "labelIds": ["INBOX"]}'),
        dict(connector="gmail", effect="read", method="GET", url=GMAIL + "/messages/m1/attachments/a1",
             request_headers=[], request_body=None, status=200, response_headers=json_resp,
             response_body=orjson.dumps({"size": 300, "data": BIG})),
        dict(connector="drive", effect="read", method="GET", url="https://www.googleapis.com/drive/v3/files/f1?alt=media",
             request_headers=[], request_body=None, status=200, response_headers=[("Content-Type", "image/png")],
             response_body=PNG),
        dict(connector="drive", effect="read", method="GET", url="https://www.googleapis.com/drive/v3/files/f2?alt=media",
             request_headers=[], request_body=None, status=200, response_headers=[("Content-Type", "text/plain")],
             response_body=b"x" * 500),
        dict(connector="slack", effect="write", method="POST", url="https://slack.com/api/chat.postMessage",
             request_headers=[("Content-Type", "application/json")], request_body=b'{"channel": "C1", "text": "hi"}',
             status=None, response_headers=[], response_body=None, error="upstream timed out"),
    ]
    out = [rec.record(Call.make(**common, **c)) for c in calls]
    mcp_call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": "search_notes", "arguments": {"q": "x"}, "_meta": {"traceparent": MCP_TRACEPARENT}}}
    result = {"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "found"}], "isError": False}}
    for url in ("stdio:notes-server", "http://127.0.0.1:9/mcp"):
        out.append(rec.record(Call.make(
            session=session, agent="bot/1", principal="alice@example.com", connector="notes", capture="gateway",
            effect="read", method="tools/call", url=url, request_headers=[], request_body=JsonValue(mcp_call["params"]),
            status=200, response_headers=[], response_body=JsonValue(result), mcp=mcp_call,
        )))
    rec.close()
    return out


# Sessions of every kind, for the export readers' tests (tests/journal/export/test_export_readers.py).
KINDS_HTTP, KINDS_STDIO, KINDS_MCP_HTTP, KINDS_MODEL, KINDS_WS = "k-http", "k-stdio", "k-mcp-http", "k-model", "k-ws"
MCP_SESSION_ID = "191c4850af6c49e08843a3f6c80e5046"


def _record_model(rec: Recorder, call: Call) -> dict:
    """A call recorded as the recording service does with prompt capture on (bodies referenced)."""
    from journal.models.capture import complete

    call = complete(rec, call, request=True)
    half = rec.prepare_request(call)
    assert half is not None
    return rec.writer.append(rec.prepare_response(half, complete(rec, call, request=False)))


def record_every_kind(root) -> dict[str, list[dict]]:
    """One session per kind the broker records: plain HTTP (empty bodies, a JSON type on a body that is
    no JSON, a redirect), MCP over stdio only, MCP over HTTP (with an MCP session id and protocol
    version), model calls (prompt capture `full`, a text spilled inside the JSON body) and a WebSocket."""
    from journal.call import Identity, Request, Response, WebSocketPayload

    rec = Recorder(root, spill_threshold=THRESHOLD)
    out: dict[str, list[dict]] = {}
    base = {"agent": "bot/1", "principal": "alice@example.com"}
    out[KINDS_HTTP] = [rec.record(Call.make(session=KINDS_HTTP, **base, **c)) for c in [
        dict(connector="gmail", method="GET", url=GMAIL + "/profile", status=204),
        dict(connector="gmail", method="POST", url=GMAIL + "/messages/m1/trash", status=200,
             response_headers=[("Content-Type", "application/json")], response_body=b"{not json"),
        dict(connector="gmail", method="DELETE", url=GMAIL + "/messages/m2", status=302,
             response_headers=[("Location", GMAIL + "/messages")]),
        dict(connector="slack", method="POST", url="https://slack.com/api/chat.postMessage", status=None,
             request_headers=[("Content-Type", "application/json")], request_body=b'{"text": "x"}',
             error="upstream refused the connection"),
    ]]
    stdio = []
    calls = [
        ({"name": "search_notes", "arguments": {"q": "x"}},
         {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "found"}], "isError": False}}),
        ({"name": "fail", "arguments": {}},
         {"jsonrpc": "2.0", "id": 2, "result": {"content": [{"type": "text", "text": "no"}], "isError": True}}),
        ({"name": "missing"}, {"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": "Unknown tool"}}),
        ({"name": "slow", "arguments": {"big": BIG}}, None),
    ]
    for n, (params, answer) in enumerate(calls, 1):
        stdio.append(rec.record(Call.make(
            session=KINDS_STDIO, **base, connector="notes", capture="gateway", effect="read", method="tools/call",
            url="stdio:python -m notes_server", request_body=JsonValue(params), status=200 if answer else None,
            response_body=JsonValue(answer) if answer else None, error=None if answer else "the server exited",
            mcp={"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params},
        )))
    stdio.append(rec.record(Call.make(
        session=KINDS_STDIO, **base, connector="notes", capture="gateway", effect="read", method="resources/read",
        url="stdio:python -m notes_server", request_body=JsonValue({"uri": "note://n1"}), status=200,
        response_body=JsonValue({"jsonrpc": "2.0", "id": 5, "result": {"contents": []}}),
        mcp={"jsonrpc": "2.0", "id": 5, "method": "resources/read", "params": {"uri": "note://n1"}},
    )))
    out[KINDS_STDIO] = stdio
    headers = [("Content-Type", "application/json"), ("Mcp-Session-Id", MCP_SESSION_ID),
               ("MCP-Protocol-Version", "2025-11-25"), ("Authorization", "Bearer " + SECRET)]
    params = {"name": "get_prompt_text", "arguments": {}}
    out[KINDS_MCP_HTTP] = [rec.record(Call.make(
        session=KINDS_MCP_HTTP, **base, connector="notes", capture="gateway", effect="read", method="prompts/get",
        url="http://127.0.0.1:9/mcp", request_headers=headers, request_body=JsonValue(params), status=200,
        response_headers=[("Content-Type", "text/event-stream")],
        response_body=JsonValue({"jsonrpc": "2.0", "id": "p1", "result": {"messages": []}}),
        mcp={"jsonrpc": "2.0", "id": "p1", "method": "prompts/get", "params": params},
    ))]
    who = Identity(KINDS_MODEL, "bot/1", "alice@example.com")
    ask = {"model": "gpt-4o", "max_tokens": 50, "messages": [{"role": "user", "content": "Z" * 300}]}
    told = {"id": "chatcmpl-1", "model": "gpt-4o-2024-08-06", "choices": [
        {"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "gmail_list", "arguments": "{}"}}]}}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3}}
    json_type = [("Content-Type", "application/json")]
    out[KINDS_MODEL] = [_record_model(rec, Call(
        who, "openai", Request("POST", "https://api.openai.com/v1/chat/completions",
                               json_type + [("Authorization", "Bearer sk-" + SECRET)], orjson.dumps(ask)),
        Response(200, json_type, orjson.dumps(told)), effect="read", prompts="full", model_api="openai"))]
    ws_who = Identity(KINDS_WS, "bot/1", "alice@example.com")
    ws_url = "https://api.github.com/ws/echo"
    shake = rec.record(Call.make(session=KINDS_WS, **base, connector="github", method="GET", url=ws_url,
                                 request_headers=[("Upgrade", "websocket")], status=101,
                                 response_headers=[("Upgrade", "websocket")]))
    assert shake is not None
    ws = [shake]
    for n, (direction, data, text) in enumerate([("client_to_server", b'{"msg": "hello"}', True),
                                                  ("server_to_client", b'{"msg": "hello"}', True),
                                                  ("client_to_server", b"\x00\x01\xff", False)], 1):
        meta = {"handshake": shake["hash"], "handshake_seq": shake["seq"], "direction": direction,
                "kind": "text" if text else "binary", "message": n}
        payload = WebSocketPayload(data, text)
        sent = direction == "client_to_server"
        ws.append(rec.record(Call(ws_who, "github", Request("WEBSOCKET", ws_url, (), payload if sent else None,
                                                           {"websocket": meta}),
                                  Response(101, (), None if sent else payload, None, None, "upstream"))))
    out[KINDS_WS] = ws
    rec.close()
    return out


ALL_KINDS = [SESSION, KINDS_HTTP, KINDS_STDIO, KINDS_MCP_HTTP, KINDS_MODEL, KINDS_WS]
"""Every session the export tests record (`record_export_session` and `record_every_kind`)."""


def chained_session(root, session: str, fields: list[dict]) -> None:
    """A session file of these entries, chained by the journal's chain code (not through the proxy)."""
    v = Vault.open_existing(root) if (root / "VAULT.json").exists() else Vault.create(root)
    prev, lines = GENESIS, []
    for seq, f in enumerate(fields, 1):
        entry, line = chain_entry({"session": session, **f}, seq, prev)
        prev = entry["hash"]
        lines.append(line)
    v.session_path(session).write_bytes(b"".join(lines))


def http_fields(n: int, url: str = "https://api.example.com/items", status: int = 200, body: object = None) -> dict:
    return {"ts": f"2026-12-02T07:{n // 60 % 60:02d}:{n % 60:02d}.000Z", "agent": "bot/1",
            "principal": "alice@example.com", "connector": "items", "effect": "read", "capture": "broker",
            "prompt_ref": None, "mcp": None,
            "request": {"method": "GET", "url": f"{url}/{n}", "headers": [["Accept", "application/json"]],
                        "body": None},
            "response": {"status": status, "headers": [["Content-Type", "application/json"]],
                         "body": body if body is not None else {"id": n, "text": "x" * 400}}}


def generated_session(root, n: int) -> str:
    rng = random.Random(26)
    fields = [http_fields(i, body={"id": i, "text": "".join(rng.choice("abcdef ") for _ in range(600))})
              for i in range(1, n + 1)]
    chained_session(root, "big", fields)
    return "big"
