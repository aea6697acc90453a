"""The stdio shim takes any JSON-RPC (issue 9, items 5 to 7): ids of every JSON type both ways, a
fuzz test of arbitrary lines both ways through the real shim process, effects from the server's
annotations for a first call, and who answered."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters

from broker.mcp.oversize import Skeleton
from tests.support.mcp_servers.harness import NOTES_SERVER, PY, REPO, WAIT, RawShim, assert_intact, entries, shim_argv

pytestmark = pytest.mark.e2e

RECORDED = ("tools/call", "resources/read")


def _line(rid_text: str, tool: str = "echo", text: str = "hi") -> bytes:
    params = json.dumps({"name": tool, "arguments": {"text": text}})
    return f'{{"jsonrpc":"2.0","id":{rid_text},"method":"tools/call","params":{params}}}\n'.encode()


# -- ids of every JSON type -----------------------------------------------------------------------

IDS = ["18446744073709551616", "-1180591620717411303424", "1" + "0" * 400, "1.5", "1e+300", "-0.0",
       '"s"', '"\\ud800"', "null", '{"a": [1, {"b": 2}]}', "[1, 2]", "true", "9007199254740991"]


def test_ids_of_every_json_type_relay_and_record(tmp_path: Path) -> None:
    shim = RawShim(tmp_path)
    try:
        shim.handshake()
        for rid in IDS:
            shim.send(_line(rid, text=rid))
            back = shim.recv()
            assert back is not None and f'"id": {rid}'.encode() in back, (rid, back)
        # the server sends ids of every type too: answers nobody asked for, requests to the client
        emitted = b"".join(
            f'{{"jsonrpc":"2.0","id":{rid},"result":{{}}}}\n{{"jsonrpc":"2.0","id":{rid},"method":"ping"}}\n'.encode()
            for rid in IDS
        )
        shim.send(_line('"emit"', "emit").replace(b'"text": "hi"', f'"b64": "{base64.b64encode(emitted).decode()}"'
                                                   .encode()))
        got = b"".join(shim.recv() or b"" for _ in range(2 * len(IDS)))
        assert got == emitted
        assert shim.recv_json()["id"] == "emit"
        shim.send(_line("2", text="still alive"))
        assert shim.recv_json()["result"]["content"][0]["text"] == "still alive"
        assert shim.close() == 0
    finally:
        shim.kill()
    assert "internal error" not in shim.stderr
    assert_intact(shim.vault)
    got = entries(shim.vault)
    assert len(got) == len(IDS) + 2 and {e["response"]["status"] for e in got} == {200}
    for rid, e in zip(IDS, got, strict=False):
        value = json.loads(rid)
        exact = not (isinstance(value, int) and abs(value) > 2**53 - 1) and not (
            isinstance(value, float) and value.is_integer() and 2**53 - 1 < abs(value) < 1e21)
        if exact and "\\ud800" not in rid:
            assert e["mcp"]["id"] == value and e["response"]["body"]["id"] == value
        else:  # no canonical form: the line is kept as text, with the id's digits as sent
            assert set(e["mcp"]) == {"unparsed"} and f'"id":{rid},'.encode() in e["mcp"]["unparsed"].encode()
            assert e["request"]["body"] == e["mcp"]["unparsed"] and e["request"]["body_error"]
            assert f'"id": {rid}' in e["response"]["body"] and e["response"]["body_error"]
        assert e["response"]["answered_by"] == "upstream"


def test_invalid_utf8_lines_are_recorded_losslessly(tmp_path: Path) -> None:
    shim = RawShim(tmp_path)
    try:
        shim.handshake()
        odd = (b'{"jsonrpc":"2.0","id":5,"method":"tools/call",'
               b'"params":{"name":"echo","arguments":{"text":"\xff\xfe"}}}\n')
        shim.send(odd)  # not UTF-8: the raw server cannot parse it and answers -32700
        assert shim.recv_json()["error"]["code"] == -32700
        shim.send(_line("6"))
        assert shim.recv_json()["id"] == 6
        assert shim.close() == 0
    finally:
        shim.kill()
    # the line is read as a lenient (Node) server reads it, id 5 and all (review6): its entry waits for an
    # answer with that id, and is written when the client leaves (the raw server's -32700 names no id)
    got = entries(shim.vault)
    first = next(e for e in got if "unparsed" in e["mcp"])
    second = next(e for e in got if e["mcp"].get("id") == 6)
    assert base64.b64decode(first["mcp"]["unparsed"]["base64"]) == odd.rstrip(b"\n")
    assert first["response"]["status"] is None and first["response"]["answered_by"] == "none"
    assert second["mcp"]["id"] == 6
    assert_intact(shim.vault)


# -- fuzz: arbitrary lines both ways --------------------------------------------------------------

_json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
    st.integers(min_value=2**63 - 3, max_value=2**65), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
_json = st.recursive(_json_scalars, lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
_tools = st.sampled_from(["echo", "chatty", "bigint", "notjson", "hold", "no_such_tool", "get_thing", "emit"])
_methods = st.sampled_from([*RECORDED, "tools/list", "ping", "notifications/cancelled", "initialize", "x/y"])


@st.composite
def _message(draw) -> object:
    msg: dict = {"jsonrpc": draw(st.sampled_from(["2.0", "1.0", 2]))}
    if draw(st.booleans()):
        msg["id"] = draw(_json)
    method = draw(_methods)
    if draw(st.integers(0, 9)):
        msg["method"] = method
    if method == "tools/call" and draw(st.booleans()):
        msg["params"] = {"name": draw(_tools), "arguments": draw(st.dictionaries(st.text(max_size=5), _json,
                                                                               max_size=3))}
    elif draw(st.booleans()):
        msg["params"] = draw(_json)
    if draw(st.integers(0, 5)) == 0:
        msg["result" if draw(st.booleans()) else "error"] = draw(_json)
    return msg


_NUMBER_TOKENS = [b"1e400", b"-1e400", b"1" * 500, b"NaN", b"-Infinity", b"-0", b"1.0e-400", b"18446744073709551616",
                  b"9007199254740993", b"1E+2", b"0.1"]


def _encode(value: object) -> bytes:
    return json.dumps(value).encode("utf-8", "surrogatepass")


@st.composite
def _line_bytes(draw) -> bytes:
    """One line: JSON-RPC-ish messages and batches, mangled or not, or arbitrary bytes."""
    kind = draw(st.integers(0, 7))
    if kind == 0:
        data = draw(st.binary(max_size=60))
    elif kind == 6:  # number tokens no parser keeps exactly, as ids and as values
        token = draw(st.sampled_from(_NUMBER_TOKENS))
        data = (b'{"jsonrpc":"2.0","id":' + token + b',"method":"' + draw(_methods).encode()
                + b'","params":{"name":"echo","arguments":{"n":' + draw(st.sampled_from(_NUMBER_TOKENS)) + b"}}}")
    elif kind == 7:  # nesting deeper than any parser's recursion limit
        depth = draw(st.sampled_from([900, 1100, 5000]))
        data = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":' + b"[" * depth + b"]" * depth + b"}"
    elif kind == 1:
        data = _encode(draw(st.lists(_message(), max_size=3)))
    else:
        data = _encode(draw(_message()))
    if draw(st.integers(0, 3)) == 0 and data:  # mangle: cut, or put bytes (invalid UTF-8 among them) in
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.binary(max_size=4)) + data[at + draw(st.integers(0, 3)):]
    return data.replace(b"\n", b" ") + draw(st.sampled_from([b"\n", b"\r\n"]))


def _expected_entries(line: bytes) -> int:
    """How many entries a client line makes (docs/mcp.md): one per request of a recorded method in it;
    a line that is not JSON at all but names a recorded method makes one, with no answer matched."""
    body = line.rstrip(b"\r\n")
    if not body.strip():
        return 0
    try:  # bytes that are not UTF-8 read as U+FFFD, as a Node server reads them (review6)
        value = json.loads(body.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return int(any(m.encode() in body for m in RECORDED))
    items = value if isinstance(value, list) else [value]
    return sum(1 for v in items if isinstance(v, dict) and v.get("method") in RECORDED and "id" in v)


FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def _sentinel(shim: RawShim, tool: str = "echo", **arguments: object) -> tuple[str, list[bytes]]:
    """A fresh call; returns its id and every line the client got before its answer."""
    rid = f"sentinel-{uuid.uuid4()}"
    shim.call(rid, tool, **arguments)
    before = []
    while True:
        line = shim.recv()
        assert line is not None, f"the shim closed its output; stderr:\n{shim.stderr[-3000:]}"
        try:
            if json.loads(line).get("id") == rid:
                return rid, before
        except (ValueError, AttributeError, RecursionError):
            pass
        before.append(line)


def test_fuzz_client_lines(tmp_path: Path) -> None:
    shim = RawShim(tmp_path)
    counts = {"lines": 0, "bytes": 0, "expected": 0}
    try:
        shim.handshake()

        @FUZZ
        @given(st.lists(_line_bytes(), min_size=1, max_size=5))
        def one_example(lines: list[bytes]) -> None:
            for line in lines:
                shim.send(line)
                counts["lines"] += 1
                counts["bytes"] += len(line)
                counts["expected"] += _expected_entries(line)
            rid, before = _sentinel(shim, text="alive")
            counts["expected"] += 1
            assert not [b for b in before if b"broker-mcp/" in b]  # the shim's own answers never reach the client
            assert any(e["mcp"].get("id") == rid for e in entries(shim.vault)[-8:])  # durable before the answer

        one_example()
        assert shim.close() == 0
    finally:
        shim.kill()
    print(f"fuzz client: {counts}")  # noqa: T201 - the figure the report quotes
    assert "internal error" not in shim.stderr, shim.stderr[-3000:]
    received = b"".join(x for x in shim.received_by_server() if b"broker-mcp/" not in x)
    assert received.endswith(b"\n") and counts["bytes"] > 0
    got = entries(shim.vault)
    assert [x for x in shim.stderr.splitlines() if "could not record" in x] == []
    assert len(got) == counts["expected"]
    assert_intact(shim.vault)


def test_fuzz_server_lines(tmp_path: Path) -> None:
    shim = RawShim(tmp_path)
    counts = {"lines": 0, "bytes": 0}
    try:
        shim.handshake()

        @FUZZ
        @given(st.lists(_line_bytes(), min_size=1, max_size=5))
        def one_example(lines: list[bytes]) -> None:
            emitted = b"".join(lines)
            counts["lines"] += len(lines)
            counts["bytes"] += len(emitted)
            rid, before = _sentinel(shim, "emit", b64=base64.b64encode(emitted).decode())
            assert b"".join(before) == emitted  # every byte, in order, unchanged
            assert any(e["mcp"].get("id") == rid for e in entries(shim.vault)[-8:])

        one_example()
        rid, _ = _sentinel(shim, text="still recording")
        assert shim.close() == 0
    finally:
        shim.kill()
    print(f"fuzz server: {counts}")  # noqa: T201
    assert "internal error" not in shim.stderr, shim.stderr[-3000:]
    assert [x for x in shim.stderr.splitlines() if "could not record" in x] == []
    got = entries(shim.vault)
    assert got[-1]["mcp"]["id"] == rid and got[-1]["response"]["answered_by"] == "upstream"
    assert_intact(shim.vault)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(_message(), min_size=1, max_size=3), st.booleans(), st.data())
def test_skeleton_keeps_id_method_and_tool_whatever_the_chunks(msgs: list, batch: bool, data) -> None:
    value = msgs if batch else msgs[0]
    text = _encode(value)
    skeleton = Skeleton()
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True):
        skeleton.feed(text[a:b])
    line = skeleton.line()
    items = value if batch else [value]
    assert len(line.messages) == len(items)
    for got, want in zip(line.messages, items, strict=True):
        assert isinstance(got.value, dict)
        for key in ("id", "method"):
            if isinstance(want.get(key), str | int | bool) or want.get(key) is None:
                assert got.value.get(key) == want.get(key)
        if isinstance(want.get("params"), dict) and isinstance(want["params"].get("name"), str):
            assert got.value["params"]["name"] == want["params"]["name"]


# -- effects for a first call, with the real SDK client ------------------------------------------


def _client(vault: Path, mode: str, server: list[str]) -> Client:
    argv = shim_argv(vault)
    params = StdioServerParameters(command=argv[0], args=[*argv[1:], "--", *server], cwd=str(REPO))
    return Client(params, mode=mode, read_timeout_seconds=WAIT)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_sdk_client_first_call_is_decided_by_annotations(tmp_path: Path, mode: str) -> None:
    vault = tmp_path / "vault"

    async def scenario() -> None:
        async with _client(vault, mode, NOTES_SERVER) as c:
            assert (await c.call_tool("get_note", {"note_id": "n1"})).content[0].text == "buy milk"  # before listing
            assert (await c.call_tool("add_note", {"note_id": "n9", "text": "x"})).content[0].text == "ok"
            assert (await c.call_tool("list_notes", {})).is_error is False

    asyncio.run(scenario())
    assert_intact(vault)
    got = [(e["mcp"]["params"]["name"], e["effect"], e["request"]["effect_basis"]) for e in entries(vault)]
    assert got == [("get_note", "read", "annotations"), ("add_note", "write", "annotations"),
                   ("list_notes", "write", "default")]


def test_published_server_first_call_is_a_read(tmp_path: Path) -> None:
    exe = shutil.which("mcp-server-time", path=str(Path(PY).parent))
    if exe is None:
        pytest.skip("mcp-server-time is not installed (pip install mcp-server-time)")
    vault = tmp_path / "vault"

    async def scenario() -> None:
        async with _client(vault, "auto", [exe, "--local-timezone", "UTC"]) as c:
            assert (await c.call_tool("get_current_time", {"timezone": "UTC"})).is_error is False

    asyncio.run(scenario())
    (e,) = entries(vault)
    assert (e["effect"], e["request"]["effect_basis"]) == ("read", "annotations")


def test_tools_list_changed_makes_the_shim_ask_again(tmp_path: Path) -> None:
    shim = RawShim(tmp_path)

    def own_lists() -> int:
        return sum(b"broker-mcp/" in x for x in shim.received_by_server())

    try:
        shim.handshake()  # the client's listing, page 1
        shim.send({"jsonrpc": "2.0", "id": "p2", "method": "tools/list", "params": {"cursor": "page-2"}})
        assert shim.recv_json()["id"] == "p2"
        _sentinel(shim, "echo", text="listed")
        change = b'{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}\n'
        _, before = _sentinel(shim, "emit", b64=base64.b64encode(change).decode())
        assert before == [change] and own_lists() == 0
        _sentinel(shim, "echo", text="after the change")  # the listing is stale now: asked again
        assert own_lists() == 2
        assert shim.close() == 0
    finally:
        shim.kill()
    assert [e["request"]["effect_basis"] for e in entries(shim.vault)] == ["annotations"] * 3


def test_a_call_for_a_big_answer_is_not_sent_when_the_journal_is_down(tmp_path: Path) -> None:
    """A journal down from the start: the call is refused before it goes upstream (review6). The answer
    over the limit withheld when the journal breaks while the server works:
    tests/broker/mcp/test_mcp_refusals.py."""
    vault = tmp_path / "vault"
    (vault / "journal" / "s1.jsonl").mkdir(parents=True)  # the session file cannot be opened
    shim = RawShim(tmp_path, "--max-message-mib", "1")
    try:
        shim.handshake()
        shim.call(1, "big", size=3 << 20)
        answer = shim.recv_json()
        assert shim.close() == 0
    finally:
        shim.kill()
    assert answer["id"] == 1 and answer["error"]["code"] == -32603 and "result" not in answer
    assert not [line for line in shim.received_by_server() if b'"big"' in line]
    assert "the journal could not record this call, so it was not sent" in shim.stderr


def test_nested_too_deeply_for_an_entry_is_recorded_as_text(tmp_path: Path) -> None:
    shim = RawShim(tmp_path)
    deep = b"[" * 900 + b"]" * 900  # parses, but deeper than the writer's JSON encoder goes
    line = (b'{"jsonrpc":"2.0","id":"deep","method":"tools/call","params":{"name":"echo","arguments":{"x":'
            + deep + b"}}}\n")
    try:
        shim.handshake()
        shim.send(line)
        assert shim.recv_json()["id"] == "deep"
        assert shim.close() == 0
    finally:
        shim.kill()
    (e,) = entries(shim.vault)
    assert e["mcp"] == {"unparsed": line.rstrip(b"\n").decode()} and e["response"]["body_error"]
    assert e["response"]["answered_by"] == "upstream"
    assert_intact(shim.vault)
