"""`broker show` names the tool of every MCP row (issue 28), as the inspector's timeline does."""

from __future__ import annotations

from pathlib import Path

import orjson
from click.testing import CliRunner

from broker.cli.main import cli

EXAMPLE = Path(__file__).resolve().parents[3] / "vault"
S = "session-2026-09-22"


def test_every_mcp_row_of_broker_show_names_its_tool() -> None:
    result = CliRunner().invoke(cli, ["show", "--vault", str(EXAMPLE), S])
    assert result.exit_code == 0, result.output
    rows = result.output.splitlines()
    entries = [orjson.loads(line) for line in (EXAMPLE / "journal" / f"{S}.jsonl").read_bytes().splitlines()]
    mcp = [e for e in entries if e.get("mcp")]
    assert mcp
    for e in mcp:
        row = rows[e["seq"] - 1]
        assert f"{e['request']['method']} {e['mcp']['params']['name']}" in row, row
