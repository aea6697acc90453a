"""One recorded session with every kind of body and answer, for the export tests."""

from __future__ import annotations

import gzip

import orjson

from journal.call import Call
from journal.record import JsonValue, Recorder

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
