"""The stdio MCP shim end to end: the real SDK client (both protocol eras) against the SDK test
server and a published server, and raw wire tests for exact bytes and bad input."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CreateMessageResult, ElicitResult, ListRootsResult, Root, TextContent

from journal.vault import Vault
from tests.support.mcp_servers.harness import (
    NOTES_SERVER,
    PY,
    REPO,
    WAIT,
    RawShim,
    assert_intact,
    entries,
    shim_argv,
)
from tests.support.mcp_servers.notes_server import IMAGE_SIZE

pytestmark = pytest.mark.e2e


async def _sampling(ctx, params) -> CreateMessageResult:
    return CreateMessageResult(role="assistant", content=TextContent(type="text", text="42"), model="test-model")


async def _elicitation(ctx, params) -> ElicitResult:
    return ElicitResult(action="accept", content={"ok": True})


async def _roots(ctx) -> ListRootsResult:
    return ListRootsResult(roots=[Root(uri="file:///work/project", name="project")])


def _client(vault: Path, mode: str, server: list[str], *options: str) -> Client:
    argv = shim_argv(vault, *options)
    params = StdioServerParameters(command=argv[0], args=[*argv[1:], "--", *server], cwd=str(REPO))
    return Client(params, mode=mode, sampling_callback=_sampling, elicitation_callback=_elicitation,
                  list_roots_callback=_roots, read_timeout_seconds=WAIT)


def _blob(vault: Path, ref: dict) -> bytes:
    return Vault(vault).blob_path(ref["ref"]).read_bytes()


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_sdk_client_through_shim_records_every_call(tmp_path: Path, mode: str) -> None:
    vault = tmp_path / "vault"
    progress: list[float] = []

    async def scenario() -> None:
        async with _client(vault, mode, NOTES_SERVER) as c:
            assert c.protocol_version == ("2026-07-28" if mode == "auto" else "2025-11-25")
            assert c.server_info is not None and c.server_info.name == "Test Notes"
            names = {t.name for t in (await c.list_tools()).tools}
            assert {"get_note", "add_note", "image", "ask_llm"} <= names
            assert (await c.call_tool("get_note", {"note_id": "n1"})).content[0].text == "buy milk"
            assert (await c.call_tool("list_notes", {})).is_error is False
            assert (await c.call_tool("add_note", {"note_id": "n3", "text": "hi"})).content[0].text == "ok"
            assert (await c.call_tool("get_and_delete_note", {"note_id": "n3"})).content[0].text == "hi"
            assert (await c.call_tool("archive_all", {})).content[0].text == "archived"
            failed = await c.call_tool("fail", {"reason": "nope"})
            assert failed.is_error is True
            img = await c.call_tool("image", {})
            assert len(base64.b64decode(img.content[0].data)) == IMAGE_SIZE

            async def on_progress(p: float, total: float | None, message: str | None) -> None:
                progress.append(p)

            done = await c.call_tool("progress", {"steps": 3}, progress_callback=on_progress)
            assert done.content[0].text == "done 3"
            asked = await c.call_tool("ask_llm", {"question": "meaning?"})
            assert asked.content[0].text == "llm said: 42"
            assert (await c.call_tool("ask_user", {"question": "sure?"})).content[0].text == "user said ok=True"
            assert (await c.call_tool("roots", {})).content[0].text == "file:///work/project"
            res = await c.read_resource("note://n1")
            assert res.contents[0].text == "buy milk"

    asyncio.run(scenario())
    assert progress == [1, 2, 3]
    assert_intact(vault)
    got = entries(vault)
    by_tool: dict[str, list[dict]] = {}
    for e in got:
        assert e["capture"] == "gateway" and e["connector"] == "test-notes"
        assert e["session"] == "s1" and e["agent"] == "agent-1" and e["principal"] == "unknown"
        assert e["request"]["url"] == "stdio:" + " ".join(NOTES_SERVER)
        assert e["request"]["headers"] == [] and e["response"]["headers"] == []
        assert e["response"]["status"] == 200 and e["response"]["answered_by"] == "upstream"
        assert e["request"]["method"] == e["mcp"]["method"]
        assert e["request"]["body"] == e["mcp"]["params"]
        assert e["response"]["body"]["id"] == e["mcp"]["id"]
        key = e["mcp"]["params"].get("name") or e["mcp"]["params"].get("uri")
        by_tool.setdefault(key, []).append(e)
    effects = {k: v[0]["effect"] for k, v in by_tool.items()}
    assert effects == {
        "get_note": "read", "list_notes": "write", "add_note": "write", "get_and_delete_note": "write",
        "archive_all": "write", "fail": "read", "image": "read", "progress": "read", "ask_llm": "read",
        "ask_user": "read", "roots": "read", "note://n1": "read",
    }
    assert by_tool["note://n1"][0]["request"]["method"] == "resources/read"
    bases = {k: v[0]["request"]["effect_basis"] for k, v in by_tool.items()}
    assert bases["note://n1"] == "rule"
    assert bases["list_notes"] == bases["archive_all"] == "default"  # listed without annotations
    assert {bases[k] for k in by_tool if k not in ("note://n1", "list_notes", "archive_all")} == {"annotations"}
    assert by_tool["fail"][0]["response"]["body"]["result"]["isError"] is True
    # the 2 MiB image went to the blob store, byte for byte (the base64 text as sent)
    data = by_tool["image"][0]["response"]["body"]["result"]["content"][0]["data"]
    assert set(data) == {"sha256", "size", "ref"}
    assert base64.b64decode(_blob(vault, data)) == base64.b64decode(img_b64(IMAGE_SIZE))
    # sampling, elicitation, roots: a server-to-client request in the 2025 era (one call), an
    # input-required round trip in 2026 (two calls, so two entries)
    for tool in ("ask_llm", "ask_user", "roots"):
        asks = by_tool[tool]
        if mode == "legacy":
            assert len(asks) == 1 and "inputRequests" not in asks[0]["response"]["body"]["result"]
        else:
            assert len(asks) == 2 and "inputRequests" in asks[0]["response"]["body"]["result"]
            assert asks[1]["mcp"]["params"]["inputResponses"]
    assert len(got) == 9 + 3 * (1 if mode == "legacy" else 2)
    every = entries(vault, tool_lists=True, asks=True)  # tools/list answers are entries too (effect read)
    assert [e["seq"] for e in every] == list(range(1, len(every) + 1))
    assert all(e["effect"] == "read" for e in every if e["request"]["method"] == "tools/list")
    asks = [e["request"]["method"] for e in every if e["request"]["method"] in ("sampling/createMessage",
                                                                                "elicitation/create", "roots/list")]
    # the 2025 era's server-to-client requests are entries of their own; the 2026 era has none
    assert asks == (["sampling/createMessage", "elicitation/create", "roots/list"] if mode == "legacy" else [])
    assert len(every) > len(got)


def img_b64(size: int) -> str:
    data = b"\x89PNG\r\n\x1a\n" + bytes(i % 251 for i in range(size - 8))
    return base64.b64encode(data).decode()


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_published_server_mcp_server_time(tmp_path: Path, mode: str) -> None:
    exe = shutil.which("mcp-server-time", path=str(Path(PY).parent))
    if exe is None:
        pytest.skip("mcp-server-time is not installed (pip install mcp-server-time)")
    vault = tmp_path / "vault"

    async def scenario() -> None:
        async with _client(vault, mode, [exe, "--local-timezone", "UTC"]) as c:
            tools = {t.name for t in (await c.list_tools()).tools}
            assert tools == {"get_current_time", "convert_time"}
            r = await c.call_tool("get_current_time", {"timezone": "UTC"})
            assert r.is_error is False and "UTC" in r.content[0].text
            r = await c.call_tool("convert_time", {"source_timezone": "UTC", "time": "12:00",
                                                   "target_timezone": "Europe/Paris"})
            assert r.is_error is False
            bad = await c.call_tool("get_current_time", {"timezone": "Not/AZone"})
            assert bad.is_error is True

    asyncio.run(scenario())
    assert_intact(vault)
    got = entries(vault)
    assert [e["mcp"]["params"]["name"] for e in got] == ["get_current_time", "convert_time", "get_current_time"]
    assert {e["connector"] for e in got} == {"mcp-time"}
    assert {e["effect"] for e in got} == {"read"}
    assert got[0]["request"]["url"] == f"stdio:{exe} --local-timezone UTC"


# -- raw wire -------------------------------------------------------------------------------------


def test_bytes_pass_unchanged_both_ways_and_order_is_kept(tmp_path: Path) -> None:
    shim = RawShim(tmp_path)
    try:
        sent = [
            b'{ "method" : "initialize", "jsonrpc":"2.0","params":{} , "id":0 }\n',
            b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n',
            b'{"id":"L","jsonrpc":"2.0","method":"tools/list"}\n',
            b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{"text":"caf\\u00e9 \xe2\x9c\x93"},'
            b'"name":"echo"}}\n',
            b'{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"chatty"}}\r\n',
            b'{"jsonrpc":"2.0","id":9,"method":"no/such/method"}\n',
        ]
        shim.send(sent[0])
        init = shim.recv()
        assert init == (b'{"result": {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": '
                        b'{"name": "Raw Server", "version": "1"}}, "id": 0, "jsonrpc": "2.0"}\n')
        for line in sent[1:3]:
            shim.send(line)
        assert json.loads(shim.recv())["id"] == "L"
        shim.send(sent[3])
        echo = shim.recv()
        assert echo.startswith(b'{"result": {"content": [{"type": "text", "text": "caf\\u00e9 \\u2713"}]')
        shim.send(sent[4])
        # one write holding a notification, the response (held for its entry) and a notification:
        # the client gets all three in the server's order
        assert json.loads(shim.recv())["method"] == "notifications/progress"
        assert json.loads(shim.recv())["id"] == 8
        assert json.loads(shim.recv())["method"] == "notifications/message"
        shim.send(sent[5])
        assert json.loads(shim.recv())["error"]["code"] == -32601  # unknown method: relayed both ways
        assert shim.close() == 0
    finally:
        shim.kill()
    assert shim.received_by_server() == sent
    got = entries(shim.vault)
    assert [e["mcp"]["id"] for e in got] == [7, 8]
    assert got[0]["mcp"]["params"]["arguments"]["text"] == "café ✓"
    assert got[0]["connector"] == "raw-server"
    assert_intact(shim.vault)


def test_server_to_client_request_and_colliding_ids(tmp_path: Path) -> None:
    shim = RawShim(tmp_path)
    try:
        shim.handshake()
        shim.call("s-1", "ask")  # the client's id equals the server's own request id
        req = shim.recv_json()
        assert req == {"jsonrpc": "2.0", "id": "s-1", "method": "sampling/createMessage",
                       "params": {"messages": [], "maxTokens": 5}}
        reply = b'{"jsonrpc":"2.0","id":"s-1","result":{"role":"assistant","content":{"type":"text","text":"hi"}}}\n'
        shim.send(reply)
        done = shim.recv_json()
        assert done["id"] == "s-1" and done["result"]["content"][0]["text"] == "client said hi"
        assert shim.close() == 0
    finally:
        shim.kill()
    assert shim.received_by_server()[-1] == reply
    got = entries(shim.vault)
    assert len(got) == 1 and got[0]["response"]["body"]["result"]["content"][0]["text"] == "client said hi"


def test_lines_that_are_not_json_are_relayed_and_reported(tmp_path: Path) -> None:
    shim = RawShim(tmp_path)
    try:
        shim.handshake()
        shim.send(b"this is not json\n")
        assert shim.recv_json()["error"]["code"] == -32700  # the server's own answer, relayed
        shim.call(1, "notjson")
        assert shim.recv() == b"this line is not JSON\n"
        assert shim.recv_json()["id"] == 1
        # a tools/call the journal cannot hold exactly (integer beyond 2^53): relayed, recorded as text
        odd = (b'{"jsonrpc":"2.0","id":2,"method":"tools/call",'
               b'"params":{"name":"echo","arguments":{"n":12345678901234567890}}}\n')
        shim.send(odd)
        assert shim.recv_json()["id"] == 2
        shim.call(3, "bigint")
        assert b"12345678901234567890" in shim.recv()
        assert shim.close() == 0
    finally:
        shim.kill()
    assert b"this is not json\n" in shim.received_by_server()
    assert odd in shim.received_by_server()
    assert "the client sent a line that is not JSON" in shim.stderr
    assert "the MCP server sent a line that is not JSON" in shim.stderr
    got = entries(shim.vault)
    assert [e["response"]["status"] for e in got] == [200, 200, 200]
    assert got[1]["mcp"] == {"unparsed": odd.decode().rstrip("\n")}
    assert got[1]["request"]["body_error"]
    assert isinstance(got[2]["response"]["body"], str) and "12345678901234567890" in got[2]["response"]["body"]
    assert_intact(shim.vault)


def test_ten_mib_messages_both_ways(tmp_path: Path) -> None:
    text = "x" * (10 << 20)
    shim = RawShim(tmp_path)
    try:
        shim.handshake()
        sent = shim.call(1, "echo", text=text)
        back = shim.recv_json()
        assert back["result"]["content"][0]["text"] == text
        assert shim.close() == 0
    finally:
        shim.kill()
    assert shim.received_by_server()[-1] == sent
    (e,) = entries(shim.vault)
    assert_intact(shim.vault)
    for ref in (e["mcp"]["params"]["arguments"]["text"], e["response"]["body"]["result"]["content"][0]["text"]):
        assert ref["size"] == len(text) and _blob(shim.vault, ref) == text.encode()


def test_messages_over_the_limit_are_recorded_from_the_blob_store(tmp_path: Path) -> None:
    text = "y" * (3 << 20)
    shim = RawShim(tmp_path, "--max-message-mib", "1")
    try:
        shim.handshake()
        sent = shim.call(1, "echo", text=text, password="hunter2")  # over the limit both ways
        back = shim.recv()
        assert json.loads(back)["result"]["content"][0]["text"] == text
        shim.call(2, "echo", text="small")
        assert shim.recv_json()["id"] == 2
        shim.call(3, "big", size=2 << 20)  # a small call with an answer over the limit
        assert len(shim.recv_json()["result"]["content"][0]["text"]) == 2 << 20
        assert shim.close() == 0
    finally:
        shim.kill()
    assert sent in shim.received_by_server()
    assert "the client sent a line over 1048576 bytes (3145" in shim.stderr
    got = {e["mcp"].get("id", "big"): e for e in entries(shim.vault)}
    assert_intact(shim.vault)
    assert len(got) == 3 and "exited" not in shim.stderr
    big = got["big"]  # the request line over the limit: mcp.unparsed is the blob of the whole line
    assert set(big["mcp"]) == {"unparsed"} and big["request"]["body"] == big["mcp"]["unparsed"]
    assert big["effect"] == "read" and big["request"]["effect_basis"] == "annotations"
    line = _blob(shim.vault, big["mcp"]["unparsed"])
    assert line == sent.rstrip(b"\n").replace(b'"hunter2"', b'"[never captured]"')  # redacted on the way
    assert big["response"]["status"] == 200 and big["response"]["answered_by"] == "upstream"
    assert json.loads(_blob(shim.vault, big["response"]["body"]))["result"]["content"][0]["text"] == text
    assert "body_error" in big["request"] and "body_error" in big["response"]
    assert got[2]["response"]["body"]["result"]["content"][0]["text"] == "small"
    answer = json.loads(_blob(shim.vault, got[3]["response"]["body"]))
    assert answer["id"] == 3 and len(answer["result"]["content"][0]["text"]) == 2 << 20


def test_server_crash_mid_call(tmp_path: Path) -> None:
    shim = RawShim(tmp_path)
    try:
        shim.handshake()
        shim.call(1, "hold")
        shim.call(2, "crash")
        answers = {shim.recv_json()["id"]: None, shim.recv_json()["id"]: None}
        assert set(answers) == {1, 2}
        assert shim.recv() is None  # the shim closes its stdout
        assert shim.close() == 7  # and exits with the server's code
    finally:
        shim.kill()
    assert "the MCP server exited (code 7) before answering" in shim.stderr
    got = entries(shim.vault)
    assert sorted(e["mcp"]["id"] for e in got) == [1, 2]
    for e in got:
        assert e["response"]["status"] is None and e["response"]["body"] is None
        assert e["response"]["error"] == "the MCP server exited (code 7) before answering"
        assert e["response"]["answered_by"] == "none"
    assert_intact(shim.vault)


def test_server_error_answers_are_json_rpc_errors(tmp_path: Path) -> None:
    shim = RawShim(tmp_path)
    try:
        shim.handshake()
        shim.call(1, "crash")
        err = shim.recv_json()
        assert err["id"] == 1 and err["error"]["code"] == -32000 and "code 7" in err["error"]["message"]
    finally:
        shim.kill()


def test_client_disconnect_mid_call(tmp_path: Path) -> None:
    shim = RawShim(tmp_path)
    try:
        shim.handshake()
        shim.call(1, "hold")
        shim.call(2, "echo", text="answered")
        assert shim.recv_json()["id"] == 2
        assert shim.close() == 0  # stdin closed: the server is shut down, the shim exits
    finally:
        shim.kill()
    got = {e["mcp"]["id"]: e for e in entries(shim.vault)}
    assert got[2]["response"]["status"] == 200
    assert got[1]["response"]["status"] is None
    assert got[1]["response"]["error"] == "the client went away before the MCP server answered"
    assert_intact(shim.vault)


def test_sigterm_stops_cleanly(tmp_path: Path) -> None:
    import signal

    shim = RawShim(tmp_path)
    try:
        shim.handshake()
        shim.call(1, "hold")
        shim.call(2, "echo", text="x")
        assert shim.recv_json()["id"] == 2
        shim.proc.send_signal(signal.SIGTERM)
        assert shim.proc.wait(timeout=WAIT) == 0
    finally:
        shim.kill()
    got = {e["mcp"]["id"]: e for e in entries(shim.vault)}
    assert got[1]["response"]["error"] == "the shim was stopped (signal) before the MCP server answered"
    assert_intact(shim.vault)


def test_client_cancel_gets_an_entry(tmp_path: Path) -> None:
    shim = RawShim(tmp_path, "--cancel-grace", "0.2")
    try:
        shim.handshake()
        shim.call(1, "hold")
        shim.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "reason": "x"}})
        shim.call(2, "echo", text="after")
        assert shim.recv_json()["id"] == 2
        deadline_entries = _wait_for_entries(shim.vault, 2)
        assert shim.close() == 0
    finally:
        shim.kill()
    got = {e["mcp"]["id"]: e for e in deadline_entries}
    assert got[1]["response"]["status"] is None
    assert got[1]["response"]["error"].startswith("cancelled by the client")
    assert_intact(shim.vault)


def _wait_for_entries(vault: Path, n: int) -> list[dict]:
    import time

    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        got = entries(vault)
        if len(got) >= n:
            return got
        time.sleep(0.05)
    raise AssertionError(f"expected {n} entries, have {len(entries(vault))}")


def test_shim_timeout_answers_and_cancels_upstream(tmp_path: Path) -> None:
    shim = RawShim(tmp_path, "--call-timeout", "0.3")
    try:
        shim.handshake()
        shim.call(1, "hold")
        err = shim.recv_json()
        assert err["id"] == 1 and err["error"]["code"] == -32001
        assert shim.close() == 0
    finally:
        shim.kill()
    cancel = json.loads(shim.received_by_server()[-1])
    assert cancel["method"] == "notifications/cancelled" and cancel["params"]["requestId"] == 1
    (e,) = entries(shim.vault)
    assert e["response"]["status"] is None and "within 0.3 s" in e["response"]["error"]
    assert_intact(shim.vault)


def test_journal_failure_fails_closed(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    (vault / "journal" / "s1.jsonl").mkdir(parents=True)  # the session file cannot be opened
    shim = RawShim(tmp_path)
    try:
        shim.handshake()
        shim.call(1, "echo", text="secret result")
        err = shim.recv_json()
        assert err["id"] == 1 and err["error"]["code"] == -32603
        assert "journal could not record" in err["error"]["message"]
        assert "secret result" not in json.dumps(err)
        shim.send({"jsonrpc": "2.0", "id": 2, "method": "ping"})  # other traffic still flows
        assert shim.recv_json()["id"] == 2
        assert shim.close() == 0
    finally:
        shim.kill()
    # checked before the call goes upstream (review6): the server never ran it (tests/e2e/test_mcp_journal_down.py)
    assert "the journal could not record this call, so it was not sent" in shim.stderr
    assert not [line for line in shim.received_by_server() if b'"tools/call"' in line]


def test_effects_from_annotations_before_the_client_lists_and_overrides(tmp_path: Path) -> None:
    effects = tmp_path / "effects.toml"
    effects.write_text('[tools]\n"delete_*" = "read"\n')
    shim = RawShim(tmp_path, "--effects", str(effects), "--connector", "my-raw")
    try:
        shim.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}})
        shim.recv()
        # not listed yet: the shim asks the server itself (both pages), the client never sees that
        shim.call(1, "echo", text="before tools/list")
        assert shim.recv_json()["id"] == 1
        shim.call(4, "bigint")  # listed (page 2), no annotations: the MCP default
        shim.call(5, "delete_everything")  # the override file says read
        shim.call(6, "no_such_tool")
        shim.send({"jsonrpc": "2.0", "id": 7, "method": "ping"})
        answers = [shim.recv_json() for _ in range(4)]
        assert shim.close() == 0
    finally:
        shim.kill()
    assert [a["id"] for a in answers] == [4, 5, 6, 7]  # nothing but the answers to the client's requests
    got = {e["mcp"]["id"]: (e["effect"], e["request"]["effect_basis"], e["connector"]) for e in entries(shim.vault)}
    assert got == {1: ("read", "annotations", "my-raw"), 4: ("write", "default", "my-raw"),
                   5: ("read", "override", "my-raw"), 6: ("write", "default", "my-raw")}
    own = [json.loads(x) for x in shim.received_by_server() if b"broker-mcp/" in x]
    assert [m["method"] for m in own] == ["tools/list"] * len(own) and len(own) >= 2
    assert {m.get("params", {}).get("cursor") for m in own} >= {None, "page-2"}
    assert not {m["id"] for m in own} & {0, 1, 4, 5, 6, 7}


def test_answered_by(tmp_path: Path) -> None:
    shim = RawShim(tmp_path, "--call-timeout", "2")
    try:
        shim.handshake()
        shim.call(1, "echo", text="x")
        assert shim.recv_json()["id"] == 1
        shim.call(2, "hold")
        assert shim.recv_json()["error"]["code"] == -32001  # the shim answered instead
        shim.call(3, "crash")
        assert shim.recv_json()["id"] == 3
    finally:
        shim.close()
        shim.kill()
    got = {e["mcp"]["id"]: e["response"] for e in entries(shim.vault)}
    assert got[1]["answered_by"] == "upstream" and "error" not in got[1]
    assert got[2]["answered_by"] == "capture" and "shim timeout" in got[2]["error"]
    assert got[3]["answered_by"] == "none" and "exited (code 7)" in got[3]["error"]


@pytest.mark.parametrize("session", ["bad\x01id", "x" * 300])
def test_unmappable_session_is_refused_at_startup(tmp_path: Path, session: str) -> None:
    r = subprocess.run(
        [*shim_argv(tmp_path / "v", session=session), "--", PY, "-c", "pass"], cwd=REPO, capture_output=True,
        text=True, timeout=WAIT,
    )
    assert r.returncode == 2
    assert "broker: error: session id" in r.stderr
    assert not (tmp_path / "v").exists()


def test_server_that_cannot_start(tmp_path: Path) -> None:
    r = subprocess.run(
        [*shim_argv(tmp_path / "v"), "--", str(tmp_path / "no-such-server")], cwd=REPO, capture_output=True,
        text=True, timeout=WAIT, input="",
    )
    assert r.returncode == 2 and "cannot start the MCP server" in r.stderr


def test_server_not_on_a_minimal_path_says_to_give_its_absolute_path(tmp_path: Path) -> None:
    """A desktop app starts the shim with a minimal PATH: the one line names the command and the fix."""
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    r = subprocess.run(
        [*shim_argv(tmp_path / "v"), "--", "mcp-server-nowhere-to-be-found", "--local-timezone", "UTC"],
        cwd=REPO, capture_output=True, text=True, timeout=WAIT, input="", env=env,
    )
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert "'mcp-server-nowhere-to-be-found'" in lines[0] and "/usr/bin:/bin" in lines[0]
    assert "absolute path" in lines[0]


def test_child_stderr_goes_to_shim_stderr_and_url_has_no_secret(tmp_path: Path) -> None:
    script = "import sys; sys.stderr.write('hello from the server\\n')"
    token = "ghp_" + "a" * 36
    r = subprocess.run(
        [*shim_argv(tmp_path / "v"), "--", PY, "-c", script, "--token", "plain-secret", token], cwd=REPO,
        capture_output=True, text=True, timeout=WAIT, input="",
    )
    assert r.returncode == 0, r.stderr
    assert "hello from the server" in r.stderr
    from broker.mcp.recording import stdio_url

    url = stdio_url([PY, "-c", script, "--token", "plain-secret", token])
    assert "plain-secret" not in url and token not in url and "--token" in url


def test_batch_lines(tmp_path: Path) -> None:
    shim = RawShim(tmp_path)
    try:
        shim.handshake()
        batch = orjson.dumps([
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "a"}}},
            {"jsonrpc": "2.0", "id": 2, "method": "ping"},
        ]) + b"\n"
        shim.send(batch)
        # the raw server ignores arrays; what matters is that the shim relays them unchanged
        shim.call(3, "echo", text="b")
        assert shim.recv_json()["id"] == 3
        assert shim.close() == 0
    finally:
        shim.kill()
    assert batch in shim.received_by_server()
    got = {e["mcp"]["id"]: e for e in entries(shim.vault)}
    assert got[3]["response"]["status"] == 200
    assert got[1]["response"]["error"] == "the client went away before the MCP server answered"
    assert_intact(shim.vault)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
