"""The Node MCP SDK client through the stdio shim against `@modelcontextprotocol/server-everything`
(issue 25): prompts, sampling, elicitation, a cancelled call and a task-based call's result are all
in the record.

The npm packages are installed once into a cache outside the repository ($BROKER_NODE_CACHE, default
~/.cache/broker-node-mcp); the test is skipped, saying why, when node or npm is missing or the
install fails (no registry)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.mcp_servers.harness import REPO, WAIT, assert_intact, entries, shim_argv

pytestmark = pytest.mark.e2e
PACKAGES = ("@modelcontextprotocol/sdk@1", "@modelcontextprotocol/server-everything")
CLIENT = REPO / "tests" / "support" / "node" / "mcp_client.cjs"


def _node_packages() -> Path:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node or npm is not installed")
    cache = Path(os.environ.get("BROKER_NODE_CACHE", Path.home() / ".cache" / "broker-node-mcp"))
    server = cache / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
    if not server.exists():
        cache.mkdir(parents=True, exist_ok=True)
        if not (cache / "package.json").exists():
            (cache / "package.json").write_text('{"name": "broker-node-mcp", "private": true}\n')
        r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", *PACKAGES], cwd=cache, capture_output=True,
                           text=True, timeout=600)
        if r.returncode != 0 or not server.exists():
            pytest.skip(f"npm install of {' '.join(PACKAGES)} failed (no registry?): {r.stderr[-500:]}")
    return cache


def test_node_sdk_client_against_server_everything(tmp_path: Path) -> None:
    cache = _node_packages()
    vault = tmp_path / "vault"
    server = ["node", str(cache / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"),
              "stdio"]
    env = {**os.environ, "NODE_MCP_DIR": str(cache),
           "SHIM_ARGV": json.dumps([*shim_argv(vault, "--cancel-grace", "0.5"), "--", *server])}
    r = subprocess.run(["node", str(CLIENT)], cwd=REPO, env=env, capture_output=True, text=True, timeout=WAIT * 4)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["prompt"] >= 1 and "node says 42" in out["sampling"] and "Ann" in out["elicitation"]
    assert out["cancelled"] is True
    assert_intact(vault)
    got = entries(vault, asks=True)
    by_method: dict[str, list[dict]] = {}
    for e in got:
        by_method.setdefault(e["request"]["method"], []).append(e)
    assert by_method["prompts/get"][0]["effect"] == "read"
    (sampling,) = by_method["sampling/createMessage"]
    assert sampling["response"]["body"]["result"]["content"]["text"] == "node says 42"
    (elicitation,) = by_method["elicitation/create"]
    assert elicitation["response"]["body"]["result"]["content"] == {"name": "Ann"}
    calls = {e["mcp"]["params"]["name"]: e for e in by_method["tools/call"]}
    cancelled = calls["trigger-long-running-operation"]["response"]
    assert cancelled["error"].startswith("cancelled by the client"), cancelled
    # the task-based call: its result (tasks/result) is in the record, tied to the call that created it
    assert "taskCreated" in out["task_kinds"] and "result" in out["task_kinds"], out
    task_call = calls["simulate-research-query"]
    assert task_call["response"]["body"]["result"]["task"]["taskId"] == out["task_id"]
    results = [e for e in by_method["tasks/result"] if e["mcp"]["params"]["taskId"] == out["task_id"]]
    assert results and all(e["request"]["task_of"] == f"s1#{task_call['seq']}" for e in results)
    assert results[-1]["response"]["body"]["result"]["content"] == json.loads(out["task_result"])
