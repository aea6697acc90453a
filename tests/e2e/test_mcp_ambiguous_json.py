"""Attacks on the stdio shim with JSON that two parsers read differently (review6).

RFC 8259 leaves an object with a duplicate key to the parser: Python's `json`, JavaScript's
JSON.parse and Go keep the last value, others keep the first. The shim read such a line the
last-wins way to learn its method, id and tool; a server that keeps the first ran another method,
answered another id, or ran another tool than the one the entry names:

- `"method":"tools/call","method":"tools/list"`: the entry said tools/list (or, with
  --no-record-tools-list, there was none) while the server ran the tool;
- `"name":"delete_everything","name":"echo"`: the entry's effect came from echo (a read) while the
  server deleted;
- `"id":1,"id":2`: the shim waited for id 2, the server answered id 1, and the answer reached the
  client before (and without) any entry holding it.

The server here (tests/support/mcp_servers/plain_server.py `first-wins`) keeps the first value.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_mcp_id_reuse import _finish, _server_calls, _shim
from tests.support.mcp_servers.harness import assert_intact, entries

pytestmark = pytest.mark.e2e

LINES = {
    "method": b'{"jsonrpc":"2.0","id":11,"method":"tools/call","method":"tools/list",'
              b'"params":{"name":"delete_everything","arguments":{}}}\n',
    "tool": b'{"jsonrpc":"2.0","id":12,"method":"tools/call",'
            b'"params":{"name":"delete_everything","name":"echo","arguments":{"text":"hi"}}}\n',
    "id": b'{"jsonrpc":"2.0","id":13,"id":14,"method":"tools/call",'
          b'"params":{"name":"delete_everything","arguments":{}}}\n',
}


@pytest.mark.parametrize("options", [(), ("--no-record-tools-list",)], ids=["default", "no-tools-list"])
@pytest.mark.parametrize("what", sorted(LINES))
def test_duplicate_keys_read_differently_by_the_server(tmp_path: Path, what: str, options: tuple[str, ...]) -> None:
    """Whatever the server makes of the line, what it ran has an entry saying so (a write, as
    tools/call delete_everything), and no answer reaches the client before its entry (fails on main)."""
    shim = _shim(tmp_path, *options, first_wins=True)
    try:
        shim.send(LINES[what])
        received = _finish(shim, 1.0)
    finally:
        shim.kill()
    ran = _server_calls(shim)
    calls = [e for e in entries(shim.vault) if e["request"]["method"] == "tools/call"]
    for call in ran:  # (the server's log is read the last-wins way: a call it ran is one with a tools/call in it)
        assert calls, f"the server got a tools/call ({call}) and no tools/call entry says so"
        assert {e["effect"] for e in calls} == {"write"}, calls
    answered = [m for m in received if "result" in m]
    bodies = [e["response"]["body"] for e in calls]
    assert all(m in bodies for m in answered), f"the client got {answered}; tools/call entries hold {bodies}"
    if not ran:  # refused: the client was told, and the entry says the capture point answered
        assert received and all(m.get("error", {}).get("code") == -32600 for m in received), received
        assert calls and all(e["response"]["answered_by"] == "capture" for e in calls)
    assert_intact(shim.vault)


def test_a_call_that_is_not_utf8_read_as_a_node_server_reads_it(tmp_path: Path) -> None:
    """A tools/call with bytes that are not UTF-8 in its arguments: the shim could not read it (no id,
    no answer matched, recorded as unanswered) while a server that reads bad bytes as U+FFFD (Node's
    Buffer.toString: the TypeScript SDK) ran it and answered, and the answer reached the client with no
    entry holding it (fails on main)."""
    shim = _shim(tmp_path)
    try:
        shim.send(b'{"jsonrpc":"2.0","id":31,"method":"tools/call","params":{"name":"echo",'
                  b'"arguments":{"text":"caf\\u00e9 \xff result"}}}\n')
        received = _finish(shim, 1.0)
    finally:
        shim.kill()
    calls = [e for e in entries(shim.vault) if e["request"]["method"] == "tools/call"]
    answered = [m for m in received if "result" in m]
    assert answered, received  # the server did run it
    bodies = [e["response"]["body"] for e in calls]
    assert all(m in bodies for m in answered), f"the client got {answered}; tools/call entries hold {bodies}"
    assert "base64" in calls[0]["mcp"]["unparsed"]  # the request as received, bytes and all
    assert_intact(shim.vault)


def test_a_server_answer_whose_duplicate_keys_read_two_ways(tmp_path: Path) -> None:
    """The server writes `{"id":42,"id":41,"result":...}` while calls 41 and 42 are open: the shim read
    an answer to 41 (the last id), a client that keeps the first read an answer to 42, and call 42's
    entry said no answer came (fails on main). Now the line is withheld and both calls are told so."""
    import base64

    from tests.support.mcp_servers.harness import RawShim

    forged = b'{"jsonrpc":"2.0","id":42,"id":41,"result":{"content":[{"type":"text","text":"forged"}]}}\n'
    shim = RawShim(tmp_path)
    try:
        shim.handshake()
        shim.call(42, "hold")
        shim.call(41, "emit", b64=base64.b64encode(forged).decode())
        received = _finish(shim, 1.0)
    finally:
        shim.kill()
    assert not [m for m in received if "result" in m], received  # neither the forged line nor 41's own answer
    assert sorted(m["id"] for m in received) == [41, 42] and all(m["error"]["code"] == -32000 for m in received)
    by_id = {e["mcp"]["id"]: e["response"] for e in entries(shim.vault)}
    for rid in (41, 42):
        assert by_id[rid]["answered_by"] == "capture" and "withheld" in by_id[rid]["error"], by_id[rid]
        assert "forged" in str(by_id[rid]["body"])  # the line the server wrote, as received
    assert_intact(shim.vault)
