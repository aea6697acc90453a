"""docs/mcp.md "Client configurations", exactly as written: each snippet is read from the file, given this
machine's paths and a free port, and started as its client would start it, with the MCP SDK's own client
(stdio servers get the SDK's minimal environment, as desktop apps give). A tool call through each must be
recorded under the session the snippet names."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.support.mcp_servers.harness import PY, REPO, WAIT, entries, free_port, wait_for_port

pytestmark = pytest.mark.e2e
DOC = REPO / "docs" / "mcp.md"
BIN = Path(sys.executable).parent


def _section() -> str:
    text = DOC.read_text()
    start = text.index("## Client configurations")
    return text[start:text.index("\n## ", start + 10)]


def _snippets() -> list[dict]:
    return [json.loads(b) for b in re.findall(r"```json\n(.*?)```", _section(), re.S)]


def _ours(text: str, vault: Path, port: int) -> str:
    """The doc's placeholders replaced by this machine's paths (the snippet's shape untouched)."""
    time_server = BIN / "mcp-server-time"
    return (text.replace("/path/to/checkout/.venv/bin/broker", str(BIN / "broker"))
            .replace("/path/to/vault", str(vault)).replace("/home/me/.local/bin/mcp-server-time", str(time_server))
            .replace("127.0.0.1:8765", f"127.0.0.1:{port}"))


def test_the_doc_has_every_client_form():
    snippets = _snippets()
    stdio = [s for s in snippets if any("command" in v for v in (s.get("mcpServers") or s.get("servers")).values())]
    http = [s for s in snippets if any("url" in v for v in (s.get("mcpServers") or s.get("servers")).values())]
    assert len(stdio) == 3 and len(http) == 2
    args = [next(iter((s.get("mcpServers") or s["servers"]).values()))["args"] for s in stdio]
    assert sum("--" in a for a in args) == 2 and sum("--" not in a for a in args) == 1
    assert {"type": "stdio"}.items() <= next(iter(stdio[2]["servers"].values())).items()
    assert next(iter(http[0]["servers"].values()))["type"] == "http"
    assert "url" in next(iter(http[1]["mcpServers"].values()))


@pytest.mark.parametrize("index", [0, 1, 2])
def test_stdio_snippets_work_as_written(tmp_path, index):
    snippet = json.loads(_ours(json.dumps(_snippets()[index]), tmp_path / "vault", 0))
    name, server = next(iter((snippet.get("mcpServers") or snippet["servers"]).items()))
    assert server.get("type", "stdio") == "stdio"
    session = server["args"][server["args"].index("--session") + 1]

    async def run() -> str:
        params = StdioServerParameters(command=server["command"], args=server["args"])
        async with Client(params, read_timeout_seconds=WAIT) as c:
            result = await c.call_tool("get_current_time", {"timezone": "UTC"})
            return result.content[0].text

    assert "UTC" in asyncio.run(run())
    (e,) = entries(tmp_path / "vault", session)
    assert e["mcp"]["params"]["name"] == "get_current_time" and e["connector"] == "mcp-time"
    assert e["agent"] == server["args"][server["args"].index("--agent") + 1]


def test_http_snippets_work_with_the_shim_command_and_the_url_it_prints(tmp_path):
    up_port, port = free_port(), free_port()
    upstream = subprocess.Popen([PY, "-m", "tests.support.mcp_servers.notes_server", "http", str(up_port)], cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shim = None
    try:
        wait_for_port(up_port, upstream)
        (command,) = [b for b in re.findall(r"```sh\n(.*?)```", _section(), re.S) if "--listen" in b]
        argv = shlex.split(_ours(command.replace("\\\n", " "), tmp_path / "vault", port).replace(
            "https://mcp.example.com/mcp", f"http://127.0.0.1:{up_port}/mcp"))
        shim = subprocess.Popen(argv, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
        assert shim.stderr is not None
        printed = shim.stderr.readline()
        wait_for_port(port, shim)
        session = argv[argv.index("--session") + 1]
        for snippet in _snippets()[3:]:
            server = next(iter(json.loads(_ours(json.dumps(snippet), tmp_path, port))
                               .get("servers", {}).values()), None) or \
                next(iter(json.loads(_ours(json.dumps(snippet), tmp_path, port))["mcpServers"].values()))
            assert f"the URL {server['url']} " in printed  # the URL the shim prints is the one the snippet gives

            async def run(url: str = server["url"]) -> str:
                async with Client(streamable_http_client(url), read_timeout_seconds=WAIT) as c:
                    return (await c.call_tool("get_note", {"note_id": "n1"})).content[0].text

            assert asyncio.run(run()) == "buy milk"
    finally:
        for proc in (shim, upstream):
            if proc is not None:
                proc.terminate()
                proc.wait(WAIT)
    got = entries(tmp_path / "vault", session)
    assert [e["mcp"]["params"]["name"] for e in got] == ["get_note", "get_note"]
    assert {e["agent"] for e in got} == {argv[argv.index("--agent") + 1]}


def test_mcp_help_says_what_the_shim_really_decides():
    """No tool-name heuristic exists (broker/mcp/effects.py): the help says unannotated tools are writes."""
    r = subprocess.run([PY, "-m", "broker.cli", "mcp", "--help"], capture_output=True, text=True, cwd=REPO, timeout=60)
    text = " ".join(r.stdout.split())
    assert r.returncode == 0
    assert "never from a tool's name" in text and "no annotations for is recorded as a write" in text
    assert "read verb" not in text and "get, list, search" not in text
    assert "[--] COMMAND" in text and "URL to give the MCP client" in text
