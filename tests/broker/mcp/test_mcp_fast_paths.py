"""The shim's per-call fast paths (issue 30) record exactly what the plain paths record.

The same traffic (secrets in params and results, lines that are not compact or not strict JSON, ids of
every JSON type, cancels, a server request) goes through the line relay twice, in memory, with the clock
fixed: once as it runs, once with each fast path switched back to its reference (the strict JSON parser
alone, no memo of clean strings, the JSON encoder for every id key). The two session files must be equal
byte for byte, hashes and all, and hold no secret.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.mcp import messages, recording, relay
from broker.mcp.messages import id_key
from broker.mcp.recording import CallJournal, Identity
from broker.mcp.relay import ClientWriter, LineRelay
from journal import bodies, redact
from journal.record import Recorder
from journal.vault import Vault
from journal.verify import verify_session

SECRETS = ["hunter2", "ghp_" + "a" * 36, "Bearer abcdefghijklmnopqrstuvwxyz0123456789", "s3cretvalue",
           "xoxb-1234567890-abcdefghij"]
TS = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def _call(i: object, name: str, arguments: object) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                         "params": {"name": name, "arguments": arguments}}) + b"\n"


def _answer(i: object, result: object) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": i, "result": result}) + b"\n"


def _traffic() -> list[tuple[str, bytes]]:
    """(side, line) in order: each call's answer follows it (some out of order, some never)."""
    t: list[tuple[str, bytes]] = []
    for round_ in range(2):  # the second round meets what the first left in the memo
        for i, args in enumerate([
            {"text": "hello"},
            {"user": "a", "password": SECRETS[0], "token": SECRETS[1]},
            {"text": SECRETS[2], "note": "https://x.test/?token=" + SECRETS[3]},
            {"nested": [{"access_token": {"deep": SECRETS[3]}}, 1.5, None, True, "é\u2028"]},
            {"text": "x" * 300},
        ]):
            rid: object = [i + 10 * round_, f"id-{i}-{round_}", f"é{i}{round_}", 1.0 * (100 + i + 10 * round_),
                           'q"' + str(i + round_), 2**60 + i + round_][(i + round_) % 6]
            t.append(("client", _call(rid, "echo", args)))
            t.append(("server", _answer(rid, {"content": [{"type": "text", "text": json.dumps(args)}],
                                              "structuredContent": {"password": SECRETS[0], "ok": 1},
                                              "isError": False})))
        # not compact: spaces, escapes, key order the SDKs do not use
        t.append(("client", b'{ "params": {"arguments": {"api_key": "' + SECRETS[4].encode() + b'", "q": "\\u00e9\\/"},'
                            b' "name": "echo"}, "method": "tools/call", "id": "sp' + str(round_).encode() + b'",'
                            b' "jsonrpc": "2.0"}\n'))
        t.append(("server", b'{"id": "sp' + str(round_).encode() + b'", "jsonrpc": "2.0", "result": {"content": '
                            b'[{"type": "text", "text": "Authorization: ' + SECRETS[2].encode() + b'"}]}}\n'))
        # not strict: a duplicate key and an integer beyond 2^53 (recorded as text, redacted)
        t.append(("client", b'{"jsonrpc":"2.0","id":77' + str(round_).encode() + b',"method":"tools/call",'
                            b'"params":{"name":"echo","arguments":{"password":"' + SECRETS[0].encode() + b'",'
                            b'"password":"again"}}}\n'))
        t.append(("server", b'{"jsonrpc":"2.0","id":77' + str(round_).encode() + b',"result":{"n":'
                            b'9007199254740993,"token":"' + SECRETS[1].encode() + b'"}}\n'))
        # a tool error, a protocol error, a batch of two answers to calls in flight together
        t.append(("client", _call(f"e{round_}", "fail", {"reason": "no"})))
        t.append(("server", _answer(f"e{round_}", {"content": [], "isError": True})))
        t.append(("client", _call(f"p{round_}", "echo", {})))
        t.append(("server", orjson.dumps({"jsonrpc": "2.0", "id": f"p{round_}",
                                          "error": {"code": -1, "message": SECRETS[2]}}) + b"\n"))
        t.append(("client", _call(f"b1{round_}", "echo", {"t": 1})))
        t.append(("client", _call(f"b2{round_}", "echo", {"t": 2})))
        t.append(("server", b"[" + _answer(f"b2{round_}", {"v": 2}).rstrip() + b","
                  + _answer(f"b1{round_}", {"v": 1}).rstrip() + b"]\n"))
        # cancelled and answered all the same; a server request the client answers
        t.append(("client", _call(f"c{round_}", "echo", {"text": "slow"})))
        t.append(("client", orjson.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                          "params": {"requestId": f"c{round_}"}}) + b"\n"))
        t.append(("server", _answer(f"c{round_}", {"content": []})))
        t.append(("server", orjson.dumps({"jsonrpc": "2.0", "id": f"s{round_}", "method": "sampling/createMessage",
                                          "params": {"messages": [{"content": {"text": SECRETS[4]}}]}}) + b"\n"))
        t.append(("client", _answer(f"s{round_}", {"role": "assistant", "content": {"text": SECRETS[1]}})))
    t.append(("client", _call("never", "echo", {"password": SECRETS[0]})))  # unanswered at the end
    return t


class _Never(dict):
    def __contains__(self, key: object) -> bool:
        return False

    def __setitem__(self, key: object, value: object) -> None:
        return None


def _reference_id_key(request_id: object) -> str:
    if type(request_id) is float and request_id.is_integer():
        request_id = int(request_id)
    try:
        return json.dumps(request_id, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        return f"<unkeyable {type(request_id).__name__} {id(request_id):x}>"


class _Clock(datetime):
    @classmethod
    def now(cls, tz=None):  # type: ignore[override]
        return TS


def _record(tmp: Path) -> tuple[bytes, list[bytes]]:
    vault = tmp / "vault"
    journal = CallJournal(Recorder(vault, spill_threshold=256), Identity("s1", "a1", "unknown"),
                          url="stdio:server --api-key=k", fallback="server")
    journal.catalog.update_from_list_result({"tools": [  # known tools: no lookup of the shim's own
        {"name": "echo", "annotations": {"readOnlyHint": True}}, {"name": "fail", "annotations": {}}]})
    to_client: list[bytes] = []

    async def write(data: bytes) -> None:
        to_client.append(data)

    async def close() -> None:
        return None

    async def upstream(data: bytes) -> None:
        return None

    async def go() -> None:
        line_relay = LineRelay(journal, ClientWriter(write, close), send_upstream=upstream)
        line_relay.out.start()
        for side, line in _traffic():
            if side == "client":
                await line_relay.client_line(line)  # a client's answer is recorded before this returns
                continue
            before = len(to_client)
            line_relay.server_line(line)
            async def relayed(before: int = before) -> None:
                while len(to_client) == before:  # the answer goes out once its entry is written: one order
                    await asyncio.sleep(0.001)

            await asyncio.wait_for(relayed(), 30)  # a bound against a hang, not a timing assertion
        line_relay.fail_pending("the test ended", answer_client=False)
        await line_relay.drain()
        journal.recorder.close()

    asyncio.run(go())
    assert verify_session(Vault(vault), "s1").intact
    return Vault(vault).session_path("s1").read_bytes(), to_client


def test_fast_paths_record_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording, "datetime", _Clock)
    redact._CLEAN_TEXTS.clear()
    fast, fast_out = _record(tmp_path / "fast")
    with monkeypatch.context() as m:
        m.setattr(bodies, "_orjson_written", lambda data: bodies._NOT_ORJSON_WRITTEN)
        m.setattr(redact, "_CLEAN_TEXTS", _Never())
        for module in (messages, relay, recording):
            if hasattr(module, "id_key"):
                m.setattr(module, "id_key", _reference_id_key)
        plain, plain_out = _record(tmp_path / "plain")
    assert fast == plain
    assert fast_out == plain_out
    entries = [orjson.loads(line) for line in fast.splitlines()]
    assert len(entries) == 27
    assert all(secret.encode() not in fast for secret in SECRETS)
    assert {e["response"].get("error") for e in entries} >= {None, recording.TOOL_ERROR, recording.CANCELLED_ANSWERED}


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.integers(), st.text(max_size=20), st.floats(), st.booleans(), st.none(),
                 st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=3)))
def test_id_key_is_the_json_key(value: object) -> None:
    assert id_key(value) == _reference_id_key(value)


def test_id_key_never_raises_on_huge_integers() -> None:
    assert id_key(10**5000).startswith("<unkeyable int")
