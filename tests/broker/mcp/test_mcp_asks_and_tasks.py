"""The line relay's bookkeeping for the server's own requests (sampling, elicitation) and for tasks,
driven with lines in memory (no process): what becomes an entry, what cannot be forged, fail closed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from journal.entry import TOOL_ERROR
from tests.support.mcp_wire import Wire


def _run(tmp: Path, scenario) -> tuple[Wire, list[dict]]:
    async def go() -> tuple[Wire, list[dict]]:
        wire = Wire(tmp)
        wire.relay.out.start()
        await scenario(wire)
        return wire, await wire.end()

    return asyncio.run(go())


SAMPLE = {"jsonrpc": "2.0", "id": "s-1", "method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}
ANSWER = {"jsonrpc": "2.0", "id": "s-1", "result": {"role": "assistant", "content": {"type": "text", "text": "hi"}}}


def test_the_clients_answer_is_durable_before_the_server_gets_it(tmp_path: Path) -> None:
    seen_on_disk: list[int] = []

    async def scenario(w: Wire) -> None:
        await w.server(SAMPLE)
        real = w.relay.send_upstream

        async def upstream(data: bytes) -> None:  # what is on disk when the answer goes to the server
            seen_on_disk.append(w.journal.recorded)
            await real(data)

        w.relay.send_upstream = upstream
        await w.client(ANSWER)

    wire, got = _run(tmp_path, scenario)
    assert seen_on_disk == [1]
    assert orjson.loads(wire.to_server[-1]) == ANSWER  # unchanged
    (e,) = got
    assert e["request"]["method"] == "sampling/createMessage" and e["mcp"] == SAMPLE and e["effect"] == "read"
    assert e["response"]["body"] == ANSWER and e["response"]["answered_by"] == "upstream"


def test_entries_for_asks_cannot_be_forged_by_the_client(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        # an answer to a request the server never made, and a "sampling" request sent by the client
        await w.client(ANSWER)
        await w.client({**SAMPLE, "id": 9})
        await w.server({"jsonrpc": "2.0", "id": 9, "result": {}})
        # an answer with the id of a server request, but to one already answered: recorded once
        await w.server(SAMPLE)
        await w.client(ANSWER)
        await w.client(ANSWER)

    wire, got = _run(tmp_path, scenario)
    assert [e["request"]["method"] for e in got] == ["sampling/createMessage"]
    assert got[0]["mcp"]["id"] == "s-1"
    assert len(wire.to_server) == 4  # every line still went on, unchanged


def test_a_server_reusing_its_request_id_keeps_both_entries(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await w.server(SAMPLE)
        await w.server({**SAMPLE, "method": "elicitation/create", "params": {"message": "sure?"}})
        await w.client({"jsonrpc": "2.0", "id": "s-1", "result": {"action": "decline"}})

    _, got = _run(tmp_path, scenario)
    by_method = {e["request"]["method"]: e for e in got}
    assert by_method["sampling/createMessage"]["response"]["answered_by"] == "none"
    assert "reused" in by_method["sampling/createMessage"]["response"]["error"]
    assert by_method["elicitation/create"]["response"]["body"]["result"] == {"action": "decline"}


def test_an_answer_that_cannot_be_recorded_is_withheld_from_the_server(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await w.server(SAMPLE)
        w.journal.recorder.writer.close()  # the journal cannot take the entry any more
        await w.client(ANSWER)

    wire, got = _run(tmp_path, scenario)
    sent = orjson.loads(wire.to_server[-1])
    assert sent["id"] == "s-1" and "result" not in sent and sent["error"]["code"] == -32603
    assert got == []


def _task_call(rid: int, tool: str) -> dict:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": tool, "arguments": {}, "task": {"ttl": 1000}}}


def _task(rid: int, status: str) -> dict:
    return {"jsonrpc": "2.0", "id": rid, "result": {"taskId": "t-1", "status": status}}


def test_task_polls_and_results(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await w.client(_task_call(1, "send_mail"))  # not listed: a write by default
        await w.server({"jsonrpc": "2.0", "id": 1, "result": {"task": {"taskId": "t-1", "status": "working"}}})
        for rid, status in ((2, "working"), (3, "input_required"), (4, "completed")):
            await w.client({"jsonrpc": "2.0", "id": rid, "method": "tasks/get", "params": {"taskId": "t-1"}})
            await w.server(_task(rid, status))
        await w.client({"jsonrpc": "2.0", "id": 5, "method": "tasks/result", "params": {"taskId": "t-1"}})
        await w.server({"jsonrpc": "2.0", "id": 5, "result": {"content": [], "isError": True}})
        # a task id the shim never saw created: no task_of, and a write whatever the client says
        await w.client({"jsonrpc": "2.0", "id": 6, "method": "tasks/result", "params": {"taskId": "t-404"}})
        await w.server({"jsonrpc": "2.0", "id": 6, "error": {"code": -32602, "message": "no such task"}})

    _, got = _run(tmp_path, scenario)
    assert [e["request"]["method"] for e in got] == ["tools/call", "tasks/get", "tasks/result", "tasks/result"]
    call, done, result, unknown = got
    assert done["response"]["body"]["result"]["status"] == "completed"
    for e in (done, result):
        assert e["request"]["task_of"] == f"s1#{call['seq']}" and e["effect"] == call["effect"] == "write"
    assert result["response"]["error"] == TOOL_ERROR and result["response"]["answered_by"] == "upstream"
    assert "task_of" not in unknown["request"] and unknown["effect"] == "write"
    assert unknown["request"]["effect_basis"] == "default"
