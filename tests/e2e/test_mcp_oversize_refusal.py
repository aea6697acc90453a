"""Issue 21 item 6 (MCP): a `tools/call` over `--max-message-mib` whose size hides its method and id
from the streaming skeleton (a huge flat `arguments` object before `method`) still leaves an entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.mcp_servers.harness import RawShim, assert_intact, entries

pytestmark = pytest.mark.e2e


def _flat_call_line(n_keys: int) -> bytes:
    """A tools/call whose `params.arguments` (depth 3: every small value kept in the skeleton) comes
    first and is large enough to overflow the skeleton before `method` and `id` are seen."""
    args = ",".join(f'"k{i}":{i}' for i in range(n_keys))
    return (b'{"jsonrpc":"2.0","params":{"name":"echo","arguments":{' + args.encode()
            + b'}},"method":"tools/call","id":7}\n')


def test_an_oversize_call_the_skeleton_cannot_read_still_has_its_entry(tmp_path: Path) -> None:
    shim = RawShim(tmp_path, "--max-message-mib", "1")
    try:
        shim.handshake()
        line = shim.send(_flat_call_line(250_000))
        assert len(line) > 2 << 20
        answer = shim.recv_json()
        assert answer["id"] == 7
        assert shim.close() == 0
    finally:
        shim.kill()
    assert line in shim.received_by_server()  # it reached the server...
    got = [e for e in entries(shim.vault) if "tools/call" in json.dumps(e["mcp"]) or e["request"].get("body_error")]
    assert got, f"no entry for a tools/call the server received; stderr:\n{shim.stderr}"  # ...so it has an entry
    assert_intact(shim.vault)


def test_the_same_call_over_http_still_has_its_entry(tmp_path: Path) -> None:
    import httpx

    from tests.e2e.test_mcp_http import PY, Shim, _start, _stop
    from tests.support.mcp_servers.harness import free_port

    port = free_port()
    server = _start([PY, "-m", "tests.support.mcp_servers.notes_server", "http", str(port)], port)
    vault = tmp_path / "vault"
    shim = Shim(vault, f"http://127.0.0.1:{port}/mcp", "--max-message-mib", "1")
    try:
        body = _flat_call_line(250_000).rstrip(b"\n")
        r = httpx.post(shim.url("/mcp"), content=body, timeout=120, headers={
            "content-type": "application/json", "accept": "application/json, text/event-stream"})
        assert r.status_code < 500
    finally:
        shim.stop()
        _stop(server)
    got = [e for e in entries(vault) if "tools/call" in json.dumps(e["mcp"]) or e["request"].get("body_error")]
    assert got, f"no entry for a tools/call the server received; stderr:\n{shim.stderr}"
    assert "too large a structure" in got[0]["response"]["error"]
    assert_intact(vault)
