"""Exports of sessions recorded for real, opened with the tools people use: `broker run` (HTTP calls and
model calls of an agent loop with `--prompts full`, and a WebSocket), `broker mcp` over stdio and over
streamable HTTP; each session exported with `broker export` and read by `mitmdump -nr`, `har2requests`
and haralyzer (HAR), the OCSF schema (OCSF), and `broker verify-export` (OCSF, HAR, OTel)."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from websockets.asyncio.client import connect

from tests.e2e.test_mcp_http import TOKEN, Shim, _elicitation, _sampling, _scenario, _start, _stop
from tests.journal.export.test_export_har_readers import haralyzer_read
from tests.journal.export.test_export_ocsf import ocsf_validator
from tests.support.broker_harness import BIN, BrokerProcess
from tests.support.mcp_servers.harness import NOTES_SERVER, PY, WAIT, RawShim, free_port
from tests.support.model_agent import run_agent
from tests.support.upstreams import Upstream
from tests.support.ws_upstream import WsUpstream

pytestmark = pytest.mark.e2e


def _broker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "broker"), *args], capture_output=True, text=True, timeout=120)


def _record_broker(tmp: Path) -> Path:
    """An agent loop (model calls, Gmail, Slack) and a WebSocket, through `broker run`, into one vault."""
    vault = tmp / "broker-vault"
    (tmp / "b1").mkdir()
    (tmp / "b2").mkdir()
    with Upstream() as up, BrokerProcess(tmp / "b1", up, "--prompts", "full", vault=vault) as b:
        with httpx.Client(proxy=b.proxy_url("agent-run", "triage-bot"),
                          verify=ssl.create_default_context(cafile=b.ca), timeout=60) as c:
            assert run_agent(c, "openai.chat") == ["gmail_list_messages", "slack_post_message"]
        b.entries("agent-run", 5)
    with WsUpstream() as ws_up, BrokerProcess(tmp / "b2", ws_up, vault=vault) as b:
        async def talk() -> None:
            async with connect("wss://api.github.com/ws/echo", proxy=b.proxy_url("ws-run", "agent-a"),
                               ssl=ssl.create_default_context(cafile=b.ca), compression=None) as ws:
                await ws.send('{"msg": "hello"}')
                await ws.recv()
                await ws.send(b"\x00\x01\xffbinary")
                await ws.recv()

        asyncio.run(asyncio.wait_for(talk(), 60))
        b.entries("ws-run", 6)
    return vault


def _record_stdio(tmp: Path) -> Path:
    shim = RawShim(tmp, server=NOTES_SERVER)
    try:
        shim.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        assert "result" in shim.recv_json()
        shim.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        shim.call(1, "get_note", note_id="n1")
        assert shim.recv_json()["id"] == 1
        shim.call(2, "fail")
        assert shim.recv_json()["result"]["isError"] is True
    finally:
        assert shim.close() == 0
    return shim.vault


def _record_mcp_http(tmp: Path) -> Path:
    port = free_port()
    server = _start([PY, "-m", "tests.support.mcp_servers.notes_server", "http", str(port)], port)
    vault = tmp / "vault"
    shim = Shim(vault, f"http://127.0.0.1:{port}/mcp")
    try:
        async def run() -> None:
            http = httpx2.AsyncClient(headers={"Authorization": TOKEN}, timeout=httpx2.Timeout(WAIT, read=WAIT))
            async with Client(streamable_http_client(shim.url("/mcp"), http_client=http), mode="legacy",
                              sampling_callback=_sampling, elicitation_callback=_elicitation,
                              read_timeout_seconds=WAIT) as c:
                await _scenario(c)

        asyncio.run(run())
    finally:
        shim.stop()
        _stop(server)
    return vault


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> list[tuple[Path, str, str]]:
    """(vault, session, kind) of each recorded session."""
    tmp = tmp_path_factory.mktemp("recorded")
    broker_vault = _record_broker(tmp)
    (tmp / "stdio").mkdir()
    (tmp / "http").mkdir()
    return [(broker_vault, "agent-run", "http+model"), (broker_vault, "ws-run", "websocket"),
            (_record_stdio(tmp / "stdio"), "s1", "mcp stdio"), (_record_mcp_http(tmp / "http"), "s1", "mcp http")]


def test_each_kind_was_recorded(recorded):
    kinds = {}
    for vault, session, kind in recorded:
        entries = [json.loads(x) for x in (vault / "journal" / f"{session}.jsonl").read_text().splitlines()]
        kinds[kind] = entries
    assert any("prompt_capture" in e["request"] for e in kinds["http+model"])
    assert any(e["request"]["method"] == "WEBSOCKET" for e in kinds["websocket"])
    assert all(e["request"]["url"].startswith("stdio:") for e in kinds["mcp stdio"])
    assert all(e["request"]["url"].startswith("http://") and e["capture"] == "gateway" for e in kinds["mcp http"])


@pytest.mark.parametrize("index", range(4), ids=["http+model", "websocket", "mcp-stdio", "mcp-http"])
def test_har_opens_in_mitmdump_har2requests_and_haralyzer(recorded, tmp_path, index):
    vault, session, _ = recorded[index]
    for inline in (False, True):
        har_path = tmp_path / f"{session}-{inline}.har"
        done = _broker("export", session, "--vault", str(vault), "--format", "har", "--out", str(har_path),
                       *(["--inline-blobs"] if inline else []))
        assert done.returncode == 0, done.stderr
        har = json.loads(har_path.read_text())
        entries = har["log"]["entries"]
        assert entries
        shown = subprocess.run([str(BIN / "mitmdump"), "-nr", str(har_path)], capture_output=True, text=True,
                               timeout=120)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.count("<<") == len(entries), shown.stdout  # one answer line per flow
        env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}  # it runs `black`
        code = subprocess.run([str(BIN / "har2requests"), "--no-infer", str(har_path)], capture_output=True,
                              text=True, timeout=120, env=env)
        assert code.returncode == 0, code.stderr
        assert code.stdout.count("r = s.") == len(entries)
        assert len(haralyzer_read(har)) == len(entries)


@pytest.mark.parametrize("index", range(4), ids=["http+model", "websocket", "mcp-stdio", "mcp-http"])
def test_ocsf_validates_and_every_export_verifies(recorded, tmp_path, index):
    vault, session, _ = recorded[index]
    paths = {}
    for fmt, name in (("ocsf", "s.jsonl"), ("har", "s.har"), ("otel", "s.json")):
        paths[fmt] = tmp_path / name
        done = _broker("export", session, "--vault", str(vault), "--format", fmt, "--out", str(paths[fmt]))
        assert done.returncode == 0, done.stderr
        checked = _broker("verify-export", str(paths[fmt]))
        assert checked.returncode == 0 and "every chain intact" in checked.stdout, checked.stdout + checked.stderr
    lines = paths["ocsf"].read_bytes().splitlines()
    for line in lines:
        event = json.loads(line)
        errors = [e.message for e in ocsf_validator(event["metadata"]["profiles"]).iter_errors(event)]
        assert errors == []
    if len(lines) > 1:
        paths["ocsf"].write_bytes(b"\n".join(lines[1:]) + b"\n")  # the SIEM lost the first event
        checked = _broker("verify-export", str(paths["ocsf"]))
        assert checked.returncode == 1 and "seq 1 missing" in checked.stdout, checked.stdout
