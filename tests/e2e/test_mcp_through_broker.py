"""`broker mcp --through-broker`: the server's own HTTPS calls are captured as `broker` entries that
carry the tool call that caused them; a tool call without HTTP calls keeps its `gateway` entry."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from tests.e2e.test_exec import VENV_PYTHON_OPTIONS
from tests.support.mcp_servers.harness import NOTES_SERVER, REPO, WAIT, assert_intact, entries, shim_argv
from tests.support.upstreams.server import Upstream

pytestmark = pytest.mark.e2e
LABELS = "https://gmail.googleapis.com/gmail/v1/users/me/labels"


def test_tool_calls_and_their_http_calls(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    flag = tmp_path / "release"
    with Upstream() as up:
        # where the machine allows it the server runs confined (nobody by default; the test's Python may be
        # out of nobody's reach: then --as-root), seeing tmp_path (the flag file) through --bind
        tmp_path.chmod(0o755)
        argv = shim_argv(vault, "--through-broker", "--confdir", str(tmp_path / "mitm"), "--upstream-ca", up.ca_pem,
                         *up.resolve_args(), "--bind", str(tmp_path), *VENV_PYTHON_OPTIONS)

        async def run() -> None:
            params = StdioServerParameters(command=argv[0], args=[*argv[1:], "--", *NOTES_SERVER], cwd=str(REPO))
            async with Client(params, read_timeout_seconds=WAIT) as c:
                await c.list_tools()
                r = await c.call_tool("fetch", {"url": LABELS})  # one HTTP call: one broker entry
                assert r.content[0].text.startswith("200 ")
                assert (await c.call_tool("get_note", {"note_id": "n1"})).content[0].text == "buy milk"

                # two calls open at once: the HTTP call made meanwhile cannot be attributed
                opened = asyncio.Event()

                async def on_progress(p: float, total: float | None, message: str | None) -> None:
                    opened.set()

                waiting = asyncio.create_task(
                    c.call_tool("wait_for_file", {"path": str(flag)}, progress_callback=on_progress))
                await asyncio.wait_for(opened.wait(), WAIT)
                r = await c.call_tool("fetch", {"url": LABELS})
                assert r.content[0].text.startswith("200 ")
                flag.write_text("go")
                assert (await waiting).content[0].text == "released"

        asyncio.run(run())
    assert_intact(vault)
    got = entries(vault)
    kinds = [(e["capture"], e["connector"], (e["mcp"] or {}).get("params", {}).get("name")) for e in got]
    assert kinds == [
        ("broker", "gmail", "fetch"),  # the HTTP call, carrying the tool call that caused it
        ("gateway", "test-notes", "get_note"),  # no HTTP call: the tool call's own entry
        ("broker", "gmail", None),  # made while two calls were open: not attributed
        ("gateway", "test-notes", "fetch"),  # so that tool call keeps its gateway entry
        ("gateway", "test-notes", "wait_for_file"),
    ]
    first = got[0]
    assert first["request"]["url"] == LABELS and first["response"]["status"] == 200
    assert first["mcp"]["method"] == "tools/call" and first["mcp"]["params"]["arguments"] == {"url": LABELS}
    assert first["effect"] == "read"
