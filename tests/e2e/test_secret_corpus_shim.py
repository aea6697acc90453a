"""Issue 23 corpus through the real MCP shim (`broker mcp` on stdio, the MCP SDK client): every sample
rides in a tool's arguments and comes back in its result; then every file the run wrote, what the
shim printed and what the readers make of the vault are scanned (raw, URL-encoded, JSON-escaped,
base64 at three alignments): none may be found."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from journal.fingerprint_key import KEY_FILE_ENV
from tests.support.mcp_servers.harness import NOTES_SERVER, PY, REPO, WAIT, assert_intact, entries, shim_argv
from tests.support.secret_samples import samples, written_forms

pytestmark = pytest.mark.e2e


def test_shim_writes_no_sample_from_arguments_or_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_FILE_ENV, str(tmp_path / "fingerprint.key"))
    corpus = samples(per_shape=1, seed=41)
    vault = tmp_path / "vault"
    log = tmp_path / "shim.log"
    argv = shim_argv(vault)
    params = StdioServerParameters(command=argv[0], args=[*argv[1:], "--", *NOTES_SERVER], cwd=str(REPO))

    async def scenario() -> None:
        with log.open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=WAIT) as c:
                for i, (_shape, text, _needle) in enumerate(corpus):
                    assert (await c.call_tool("add_note", {"note_id": f"k{i}", "text": text})).content[0].text == "ok"
                    got = await c.call_tool("get_note", {"note_id": f"k{i}"})
                    assert got.content[0].text == text  # the client saw the secret: only the record drops it

    asyncio.run(scenario())
    assert_intact(vault)
    assert len(entries(vault)) == 2 * len(corpus)
    readers = [
        subprocess.run([PY, "-m", "broker.cli", *args], capture_output=True, cwd=REPO, check=True).stdout
        for args in (["show", "--vault", str(vault), "s1"], ["show", "--vault", str(vault), "--json", "s1"],
                     ["search", "--vault", str(vault), "--json"], ["export", "--vault", str(vault), "--format",
                                                                  "har", "--inline-blobs", "s1"])
    ]
    files = [p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.name != "fingerprint.key"]
    haystack = b"\n".join([*files, *readers])
    assert haystack.count(b"[never captured]") >= len(corpus)  # the samples were there to be dropped
    assert [s for s, _t, n in corpus if any(f in haystack for f in written_forms(n))] == []
