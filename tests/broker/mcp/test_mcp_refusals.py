"""What the line relay refuses to send upstream, and a journal that fails after a call went upstream,
driven with lines in memory (no process; review6)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from broker.mcp.relay import HOLD_TAIL
from tests.support.mcp_wire import Wire


def _call(rid: object, tool: str = "echo") -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                         "params": {"name": tool, "arguments": {}}}) + b"\n"


def _run(tmp: Path, scenario, **kw) -> tuple[Wire, list[dict]]:
    async def main() -> tuple[Wire, list[dict]]:
        wire = Wire(tmp, **kw)
        wire.relay.out.start()
        wire.journal.ask_tools = None  # no listing of its own: the scenario's lines only
        await scenario(wire)
        return wire, await wire.end()

    return asyncio.run(main())


def test_reused_open_ids_and_ambiguous_lines_are_not_sent(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await w.relay.client_line(_call(1))
        await w.relay.client_line(_call(1, "delete_everything"))  # id 1 still open
        await w.relay.client_line(b'[' + _call(2).rstrip() + b"," + _call(2).rstrip() + b"]\n")  # one id twice
        await w.relay.client_line(b'{"jsonrpc":"2.0","id":3,"method":"tools/call","method":"ping"}\n')
        await w.relay.client_line(b'{"jsonrpc":"2.0","id":4,"method":"tools/call","method":"tools/call",'
                                  b'"params":{"name":"echo"}}\n')  # a duplicate key read the same both ways

    wire, got = _run(tmp_path, scenario)
    assert [orjson.loads(x)["id"] for x in wire.to_server] == [1, 4]
    refused = [orjson.loads(x) for x in wire.to_client]
    assert [(m["id"], m["error"]["code"]) for m in refused] == [(1, -32600), (2, -32600), (2, -32600), (3, -32600)]
    by_answer = sorted((str(e["mcp"].get("id", "unparsed")), e["response"]["answered_by"]) for e in got)
    # (ids 3 and 4 are in lines that are not strict JSON: their entries keep the line, `mcp.unparsed`)
    assert by_answer == [("1", "capture"), ("1", "none"), ("2", "capture"), ("2", "capture"),
                         ("unparsed", "capture"), ("unparsed", "none")]


def test_an_answer_over_the_limit_is_withheld_when_the_journal_fails_after_the_call_went_up(tmp_path: Path) -> None:
    """(Was tests/e2e/test_mcp_any_jsonrpc.py's, with a journal broken from the start: now such a call is
    not sent at all, tests/e2e/test_mcp_journal_down.py; the journal here breaks while the server works.)"""
    size = 4 * HOLD_TAIL
    answer = orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "z" * size}]}})

    async def scenario(w: Wire) -> None:
        await w.relay.client_line(_call(1))
        w.journal.recorder.writer.close()  # the journal cannot take the entry any more
        data = answer + b"\n"
        for at in range(0, len(data), HOLD_TAIL // 2):
            w.relay.server_line(data[at : at + HOLD_TAIL // 2], whole=False)

    wire, got = _run(tmp_path, scenario, max_line=HOLD_TAIL)
    assert wire.to_server == [_call(1)]
    out = b"".join(wire.to_client)
    assert not out.startswith(answer)  # its end never came: what passed is a line no client can read...
    lines = out.split(b"\n")
    assert len(lines[0]) > HOLD_TAIL
    error = orjson.loads(lines[1])  # ...then the error for its id
    assert error["id"] == 1 and error["error"]["code"] == -32603 and "result" not in error
    assert got == []
