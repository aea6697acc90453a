"""A journal that cannot take entries: no recorded call may reach the MCP server (review6).

The shim withheld the result of a call whose entry could not be written, but had sent the call to the
server first: `delete_everything` ran with no entry anywhere. `broker run` checks the journal before a
call goes upstream (`_journal_problem`); the shim now does too, for the requests it records.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_mcp_id_reuse import _call, _finish, _server_calls, _shim

pytestmark = pytest.mark.e2e


def test_a_call_is_not_sent_when_its_entry_cannot_be_written(tmp_path: Path) -> None:
    (tmp_path / "vault" / "journal" / "s1.jsonl").mkdir(parents=True)  # the session file cannot be opened
    shim = _shim(tmp_path)
    try:
        shim.send(_call(1, "delete_everything"))
        err = shim.recv_json()
        assert err["id"] == 1 and err["error"]["code"] == -32603, err
        assert "journal" in err["error"]["message"]
        shim.send({"jsonrpc": "2.0", "id": 2, "method": "ping"})  # what is not recorded still flows
        assert shim.recv_json()["id"] == 2
        received = _finish(shim)
    finally:
        shim.kill()
    assert not [m for m in received if "result" in m and m.get("id") == 1]
    ran = _server_calls(shim)
    assert not ran, f"the server ran {json.dumps(ran)} with no entry possible (fails on main)"
