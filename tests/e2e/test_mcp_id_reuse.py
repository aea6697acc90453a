"""Attacks on the stdio shim's matching of answers to calls by JSON-RPC id (review6).

The shim matches a server's answer to the call it records by id alone. A client that reuses an id
while the first request with it is still open (a `tools/list` and a `tools/call` with one id, two
calls with one id, a batch holding one id twice, a cancelled call's id used again before the server
answered it) made the shim record the wrong answer for the call and let the call's own answer
through to the client with no entry holding it. (Also here: a whole answer over the limit that the
server ends with its exit rather than a newline.) Invariants checked here, whatever the shim does:

- every `tools/call` result that reaches the client is the response of a `tools/call` entry;
- every `tools/call` that reaches the server has an entry whose `mcp` is that request.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.support.mcp_servers.harness import PY, RawShim, assert_intact, entries

pytestmark = pytest.mark.e2e


def _shim(tmp_path: Path, *options: str, first_wins: bool = False) -> RawShim:
    server = [PY, "-m", "tests.support.mcp_servers.plain_server", str(tmp_path / "server-received.log")]
    shim = RawShim(tmp_path, *options, server=[*server, *(["first-wins"] if first_wins else [])])
    shim.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}})
    assert shim.recv_json()["result"]["serverInfo"]["name"] == "Plain Server"
    shim.send({"jsonrpc": "2.0", "id": "list", "method": "tools/list"})
    assert shim.recv_json()["id"] == "list"
    return shim


def _call(rid: object, tool: str, **arguments: object) -> dict:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


def _line(value: object) -> bytes:
    return json.dumps(value).encode() + b"\n"


def _finish(shim: RawShim, settle: float = 0.0) -> list[dict]:
    """What the client received after the handshake, once stdin closed and the shim exited."""
    time.sleep(settle)
    assert shim.close() == 0, shim.stderr
    got = []
    while (line := shim.lines.get_nowait() if not shim.lines.empty() else None) is not None:
        got.append(json.loads(line))
    return got


def _server_calls(shim: RawShim) -> list[dict]:
    out: list[dict] = []
    for raw in shim.received_by_server():
        value = json.loads(raw)
        out += [m for m in (value if isinstance(value, list) else [value]) if m.get("method") == "tools/call"]
    return out


def _check(shim: RawShim, received: list[dict]) -> None:
    calls = [e for e in entries(shim.vault) if e["request"]["method"] == "tools/call"]
    bodies = [e["response"]["body"] for e in calls]
    results = [m for m in received if isinstance(m.get("result"), dict) and "content" in m["result"]]
    unrecorded = [m for m in results if m not in bodies]
    assert not unrecorded, f"tools/call results the client got with no entry holding them: {unrecorded}"
    requests = [e["mcp"] for e in calls]
    missing = [c for c in _server_calls(shim) if c not in requests]
    assert not missing, f"tools/call requests the server got with no entry for them: {missing}"
    assert_intact(shim.vault)


def test_a_call_reusing_the_id_of_an_open_tools_list(tmp_path: Path) -> None:
    """tools/list id 7 then tools/call id 7: the list's answer was recorded as the call's, and the
    call's own result went to the client unrecorded (fails on main)."""
    shim = _shim(tmp_path)
    try:
        shim.send(_line({"jsonrpc": "2.0", "id": 7, "method": "tools/list"})
                  + _line(_call(7, "echo", text="the call's own result")))
        received = _finish(shim, 1.0)
    finally:
        shim.kill()
    _check(shim, received)
    assert not _server_calls(shim)  # the reusing line is not sent...
    assert {"code": -32600} .items() <= received[0]["error"].items() and received[0]["id"] == 7  # ...but answered
    (entry,) = [e for e in entries(shim.vault) if e["request"]["method"] == "tools/call"]  # ...and recorded
    assert entry["response"]["answered_by"] == "capture" and "still open" in entry["response"]["error"]


def test_two_calls_with_one_id_in_flight(tmp_path: Path) -> None:
    """Two tools/call with id 5, the first still open: the first answer was recorded as the second
    call's, the second answer passed unrecorded (fails on main)."""
    shim = _shim(tmp_path)
    try:
        shim.send(_call(5, "slow", seconds=0.3, text="first"))
        shim.send(_call(5, "echo", text="second"))
        received = _finish(shim, 1.0)
    finally:
        shim.kill()
    _check(shim, received)


def test_a_batch_holding_one_id_twice(tmp_path: Path) -> None:
    """[tools/call id 3, tools/call id 3] in one line (fails on main)."""
    shim = _shim(tmp_path)
    try:
        shim.send(_line([_call(3, "echo", text="a"), _call(3, "delete_everything")]))
        received = _finish(shim, 1.0)
    finally:
        shim.kill()
    _check(shim, received)


def test_a_cancelled_calls_id_reused_before_its_late_answer(tmp_path: Path) -> None:
    """Call id 9 cancelled; after --cancel-grace the client sends a new call with id 9; the server
    answers the first call late (as it may), then the second (fails on main)."""
    shim = _shim(tmp_path, "--cancel-grace", "0.2")
    try:
        shim.send(_call(9, "slow", seconds=1.2, text="old"))
        shim.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}})
        time.sleep(0.6)
        shim.send(_call(9, "echo", text="new"))
        received = _finish(shim, 1.5)
    finally:
        shim.kill()
    _check(shim, received)


def test_distinct_ids_still_relay_unchanged(tmp_path: Path) -> None:
    """The guard against reuse leaves ordinary traffic alone: an id may be used again once answered."""
    shim = _shim(tmp_path)
    try:
        shim.send(_call(1, "echo", text="one"))
        assert shim.recv_json()["result"]["content"][0]["text"] == "one"
        shim.send(_call(1, "echo", text="one again"))
        assert shim.recv_json()["result"]["content"][0]["text"] == "one again"
        received = _finish(shim)
    finally:
        shim.kill()
    _check(shim, received)
    assert len(_server_calls(shim)) == 2


def test_a_whole_answer_over_the_limit_without_its_newline_before_the_server_exits(tmp_path: Path) -> None:
    """The server writes a complete answer over --max-message-mib, no newline, and exits: the shim
    released the held end of the line at EOF with the call recorded as unanswered, so the client had a
    complete JSON-RPC answer no entry holds (fails on main)."""
    shim = _shim(tmp_path, "--max-message-mib", "1")
    try:
        shim.send(_call(21, "last_words", size=3 << 20))
        assert shim.proc.wait(timeout=30) == 3  # the shim exits with the server's code
        got = b""
        while (line := shim.lines.get(timeout=30)) is not None:
            got += line
    finally:
        shim.kill()
    calls = [e for e in entries(shim.vault) if e["request"]["method"] == "tools/call"]
    assert len(calls) == 1, calls
    answers = []  # what a client reading JSON values one after another (raw_decode) gets
    text, at = got.decode("utf-8", "replace"), 0
    while at < len(text):
        try:
            value, at = json.JSONDecoder().raw_decode(text, at)
        except ValueError:
            break
        answers.append(value)
        while at < len(text) and text[at] in " \r\n":
            at += 1
    readable = [a for a in answers if isinstance(a, dict) and a.get("id") == 21 and "result" in a]
    assert readable  # the server did write it whole...
    if readable:  # ...and the client can read it: an entry holds it
        assert calls[0]["response"]["status"] == 200 and calls[0]["response"]["answered_by"] == "upstream", (
            calls[0]["response"])
    assert_intact(shim.vault)
