"""Unit tests of the shim's pieces: effect rules, command-line redaction, line reading, SSE framing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.mcp.effects import EffectRules, EffectsFileError, ToolCatalog
from broker.mcp.http_relay import event_fields, event_with_data, split_events
from broker.mcp.messages import id_key, parse_line, server_name
from broker.mcp.recording import connector_name, fallback_connector, redact_argv, stdio_url
from broker.mcp.relay import iter_lines


def _catalog(*tools: dict) -> ToolCatalog:
    c = ToolCatalog()
    c.update_from_list_result({"tools": list(tools)})
    return c


def test_effect_order_and_basis() -> None:
    catalog = _catalog(
        {"name": "get_thing", "annotations": {"readOnlyHint": False}},  # the server says write: name does not matter
        {"name": "send_mail", "annotations": {"readOnlyHint": True}},  # the server says read
        {"name": "searchIssues"},  # listed without annotations: the MCP default, a write
        {"name": "github.list_repos", "annotations": {"destructiveHint": False}},  # readOnlyHint defaults to false
        {"name": "archive"},
    )
    rules = EffectRules()

    def got(tool: object, r: EffectRules = rules) -> tuple[str, str]:
        d = r.decide_tool(tool, catalog)
        return d.effect, d.basis

    assert got("get_thing") == ("write", "annotations")
    assert got("send_mail") == ("read", "annotations")
    assert got("searchIssues") == ("write", "default")
    assert got("github.list_repos") == ("write", "annotations")
    assert got("archive") == ("write", "default")
    assert got("get_unlisted") == ("write", "default")  # never listed by the server
    assert got(None) == ("write", "default")
    d = rules.decide("resources/read", {"uri": "x://y"}, catalog)
    assert (d.effect, d.basis) == ("read", "rule")
    over = EffectRules([("send_*", "write"), ("archive", "read")])
    assert over.decide_tool("send_mail", catalog).rule == "override file"
    assert got("send_mail", over) == ("write", "override")
    assert got("archive", over) == ("read", "override")
    assert over.overrides("archive") and not over.overrides("get_thing") and not over.overrides(None)


def test_effects_file(tmp_path: Path) -> None:
    good = tmp_path / "e.toml"
    good.write_text('[tools]\nsend = "write"\n"get_*" = "read"\n')
    rules = EffectRules.from_file(str(good))
    assert rules.exact == {"send": "write"} and rules.globs == [("get_*", "read")]
    for text, message in (('[tools]\nx = "maybe"\n', "use read or write"), ("[other]\n", "unknown table"),
                          ("not toml = = 1", "not valid TOML")):
        bad = tmp_path / "bad.toml"
        bad.write_text(text)
        with pytest.raises(EffectsFileError, match=message):
            EffectRules.from_file(str(bad))
    with pytest.raises(EffectsFileError, match="cannot read"):
        EffectRules.from_file(str(tmp_path / "missing.toml"))


def test_command_line_redaction() -> None:
    token = "xoxb-123456789012-abcdefghijklmnop"
    argv = ["srv", "--api-key", "k1", "--password=hunter2", token, "--repository", "/r", "--verbose"]
    assert redact_argv(argv) == ["srv", "--api-key", "[never captured]", "--password=[never captured]",
                                 "[never captured]", "--repository", "/r", "--verbose"]
    url = stdio_url(argv)
    assert url.startswith("stdio:srv --api-key ") and "k1" not in url and "hunter2" not in url and token not in url


def test_connector_names() -> None:
    assert connector_name("Test Notes") == "test-notes"
    assert connector_name("mcp-time") == "mcp-time"
    assert connector_name("  ") is None
    assert fallback_connector(["/usr/bin/python3", "-u", "-m", "pkg.my_server"]) == "my-server"
    assert fallback_connector(["npx", "-y", "@modelcontextprotocol/server-everything"]) == "server-everything"
    assert fallback_connector(["./bin/mcp-server-git", "--repository", "."]) == "mcp-server-git"


def test_parse_line_kinds() -> None:
    assert parse_line(b'{"jsonrpc":"2.0","id":1,"method":"tools/call"}\n').messages[0].kind == "request"
    assert parse_line(b'{"jsonrpc":"2.0","method":"x"}\n').messages[0].kind == "notification"
    assert parse_line(b'{"id":1,"result":{},"jsonrpc":"2.0"}\n').messages[0].kind == "response"
    line = parse_line(b'{"id":1,"id":2,"method":"m"}\n')  # duplicate keys: lenient, not strict
    assert line.error and not line.messages[0].strict and line.messages[0].kind == "request"
    assert parse_line(b"garbage\n").messages[0].value is None
    batch = parse_line(b'[{"id":1,"method":"a"},{"method":"b"}]\n')
    assert batch.batch and [m.kind for m in batch.messages] == ["request", "notification"]
    assert id_key(1) != id_key("1")
    assert server_name({"serverInfo": {"name": "a"}}) == "a"
    assert server_name({"_meta": {"io.modelcontextprotocol/serverInfo": {"name": "b"}}}) == "b"


def test_iter_lines_splits_and_marks_oversize() -> None:
    async def collect(data: bytes, limit: int) -> list[tuple[bytes, bool]]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return [x async for x in iter_lines(reader, limit)]

    got = asyncio.run(collect(b"a\n" + b"x" * 50 + b"\nbb\ntail", 10))
    assert got[0] == (b"a\n", True)
    assert b"".join(d for d, whole in got if not whole) == b"x" * 50 + b"\n"
    assert got[-2:] == [(b"bb\n", True), (b"tail", True)]


def test_sse_framing() -> None:
    buf = bytearray(b'event: message\r\ndata: {"a":1}\r\n\r\nid: 7\ndata: x\ndata: y\n\npartial')
    events = split_events(buf)
    assert buf == b"partial" and len(events) == 2
    assert event_fields(events[0]) == ("message", b'{"a":1}')
    assert event_fields(events[1]) == ("message", b"x\ny")
    assert event_with_data(events[1], b"z") == b"id: 7\ndata: z\n\n"


@pytest.mark.parametrize(("args", "message"), [
    (["--listen", "127.0.0.1:1"], "--listen needs --upstream"),
    (["--upstream", "http://x/mcp", "--", "srv"], "not both"),
    ([], "give the MCP server to run"),
    (["--upstream", "ftp://x"], "expected an http:// or https:// URL"),
    (["--connector", "Bad Name", "--", "srv"], "lowercase name"),
    (["--through-broker", "--upstream", "http://x/mcp"], "does not apply to --upstream"),
    (["--effects", "/no/such/file.toml", "--", "srv"], "cannot read effects file"),
])
def test_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    from click.testing import CliRunner

    from broker.cli import cli

    r = CliRunner().invoke(cli, ["mcp", "--vault", str(tmp_path / "v"), "--session", "s", "--agent", "a", *args])
    assert r.exit_code == 2 and message in r.output
    assert not (tmp_path / "v").exists()


def test_ids_of_any_json_type() -> None:
    from broker.mcp.messages import error_response

    odd = [2**64, -(2**200), 1.5, float("nan"), float("inf"), None, True, "\ud800", {"a": [1]}, [[[]]], "1", 1]
    keys = [id_key(v) for v in odd]
    assert len(set(keys)) == len(keys)
    assert id_key(1.0) == id_key(1) != id_key("1")  # a JavaScript server answers id 1.0 as 1
    assert error_response(2**64, -1, "x") == b'{"jsonrpc":"2.0","id":18446744073709551616,"error":' \
                                           b'{"code":-1,"message":"x"}}\n'
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    assert isinstance(id_key(deep), str)


def test_skeleton_stops_once_it_knows_enough() -> None:
    import json

    from broker.mcp.oversize import Skeleton

    def skeleton(message: dict, chunk: int = 1000) -> Skeleton:
        data = json.dumps(message).encode()
        s = Skeleton()
        for i in range(0, len(data), chunk):
            s.feed(data[i : i + chunk])
        return s

    big = "x" * 100_000
    first = skeleton({"jsonrpc": "2.0", "id": 12345, "method": "tools/call",
                      "params": {"name": "echo", "arguments": {"text": big}}}, chunk=7)
    assert first.done is not None  # known before the end: the rest only goes to the blob
    assert first.line().messages[0].value["id"] == 12345
    assert first.line().messages[0].value["params"]["name"] == "echo"
    last = skeleton({"params": {"arguments": {"text": big}, "name": "get"}, "method": "tools/call", "id": [1, 2]})
    value = last.line().messages[0].value
    assert (value["id"], value["method"], value["params"]["name"]) == ([1, 2], "tools/call", "get")
    answer = skeleton({"result": {"content": [{"text": big}]}, "id": "r1"})
    assert answer.line().messages[0].kind == "response" and answer.line().messages[0].id == "r1"
