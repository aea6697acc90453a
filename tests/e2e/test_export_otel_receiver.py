"""One real OTLP/HTTP receiver: `broker export --format otel --otlp URL` into Arize Phoenix on loopback,
then the spans read back through Phoenix's own REST API. Phoenix lives in ./.venv-phoenix
(`./scripts/setup-phoenix`, run by .ci/run); without it this test is skipped, saying so."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from broker.cli import cli
from tests.support.export_factories import SESSION, record_export_session

ROOT = Path(__file__).resolve().parents[2]
PHOENIX = Path(os.environ.get("BROKER_TEST_PHOENIX", ROOT / ".venv-phoenix" / "bin" / "phoenix"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def phoenix(tmp_path):
    if not PHOENIX.exists():
        pytest.skip(f"no Phoenix at {PHOENIX}: run ./scripts/setup-phoenix for the real-receiver test")
    port = free_port()
    env = {**os.environ, "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(free_port()),
           "PHOENIX_HOST": "127.0.0.1", "PHOENIX_WORKING_DIR": str(tmp_path / "phoenix"),
           "PHOENIX_TELEMETRY_ENABLED": "false", "DO_NOT_TRACK": "1"}
    log = (tmp_path / "phoenix.log").open("wb")
    proc = subprocess.Popen([str(PHOENIX), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            if proc.poll() is not None:
                pytest.fail(f"Phoenix exited: {(tmp_path / 'phoenix.log').read_text()[-2000:]}")
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail("Phoenix did not come up in 120 s")
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_spans_sent_to_a_real_otlp_receiver(tmp_path, phoenix):
    vault = tmp_path / "vault"
    record_export_session(vault)
    assert cli.main(["export", SESSION, "--vault", str(vault), "--format", "otel", "--otlp", phoenix + "/v1/traces"],
                    standalone_mode=False) == 0
    spans: list = []
    for _ in range(60):  # Phoenix ingests in the background
        spans = httpx.get(phoenix + "/v1/projects/default/spans", params={"limit": 100}, timeout=10).json()["data"]
        if len(spans) == 9:
            break
        time.sleep(0.5)
    by_name: dict = {}
    for s in spans:
        by_name.setdefault(s["name"], []).append(s)
    assert len(spans) == 9 and len({s["context"]["trace_id"] for s in spans}) == 1
    assert len(by_name["tools/call search_notes"]) == 2 and len(by_name[f"session {SESSION}"]) == 1
    tool = by_name["tools/call search_notes"][0]
    assert tool["attributes"]["gen_ai.operation.name"] == "execute_tool"
    assert tool["attributes"]["mcp.method.name"] == "tools/call"
    root_id = by_name[f"session {SESSION}"][0]["context"]["span_id"]
    assert all(s["parent_id"] == root_id for s in spans if s["name"] != f"session {SESSION}")
    seqs = sorted(s["attributes"]["broker.entry.seq"] for s in spans if "broker.entry.seq" in s["attributes"])
    assert seqs == list(range(1, 9))


def test_unreachable_endpoint_is_one_clear_error(tmp_path):
    vault = tmp_path / "vault"
    record_export_session(vault)
    url = f"http://127.0.0.1:{free_port()}/v1/traces"
    with pytest.raises(ValueError, match="cannot send spans to .*, not retried; stopped at batch 1"):
        cli.main(["export", SESSION, "--vault", str(vault), "--format", "otel", "--otlp", url, "--otlp-retries", "0"],
                 standalone_mode=False)
