"""An MCP session id is kept as a keyed fingerprint: never in clear, equal within one session."""

from __future__ import annotations

import orjson

from journal.call import Call, Identity, Request, Response
from journal.record import Recorder


def _call(session_id: str, *, reply_id: str | None = None) -> Call:
    req = Request("POST", "https://mcp.example.test/mcp", [("Content-Type", "application/json"),
                                                           ("Mcp-Session-Id", session_id)], b"{}")
    resp_headers = [("Mcp-Session-Id", reply_id)] if reply_id else []
    return Call(Identity("s1", "agent"), "mcp", req, Response(200, resp_headers, b"{}"), effect="read",
                effect_basis="rule")


def _session_ids(entry: dict, part: str) -> list[str]:
    return [v for k, v in entry[part]["headers"] if k.lower() == "mcp-session-id"]


def test_session_id_is_a_fingerprint_equal_within_a_session(tmp_path) -> None:
    rec = Recorder(tmp_path)
    a1 = rec.record(_call("9b1c-secret-session-a", reply_id="9b1c-secret-session-a"))
    a2 = rec.record(_call("9b1c-secret-session-a"))
    b = rec.record(_call("77d0-secret-session-b"))
    assert a1 is not None and a2 is not None and b is not None
    (fa1,), (fa2,), (fb,) = _session_ids(a1, "request"), _session_ids(a2, "request"), _session_ids(b, "request")
    assert fa1 == fa2 != fb and fa1.startswith("fp:")
    assert _session_ids(a1, "response") == [fa1]  # the server's header: the same fingerprint
    for entry in (a1, a2, b):
        assert b"secret-session" not in orjson.dumps(entry)
    rec.close()
