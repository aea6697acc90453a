"""End to end: an agent loop asks the (fake) model, carries out its tool calls against the fake Gmail
and Slack through `broker run --prompts refs|full`, and finishes; then the vault is checked."""

from __future__ import annotations

import json
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest

from journal.models.refs import sha256_text
from tests.support.broker_harness import BIN, BrokerProcess
from tests.support.model_agent import KEYS, SYSTEM, TASK, run_agent
from tests.support.upstreams import Upstream
from tests.support.upstreams.modelscript import DEFAULT_SCRIPT

pytestmark = pytest.mark.e2e

VARIANTS = [("anthropic", True), ("anthropic", False), ("openai.chat", True), ("openai.chat", False),
            ("openai.responses", True), ("openai.responses", False), ("gemini", True), ("gemini", False)]
MODEL_TEXTS = [t["text"] for t in DEFAULT_SCRIPT]


@pytest.fixture(scope="module")
def upstream():
    with Upstream() as up:
        yield up


def _client(b: BrokerProcess, session: str) -> httpx.Client:
    return httpx.Client(proxy=b.proxy_url(session, "triage-bot"), verify=ssl.create_default_context(cafile=b.ca),
                        timeout=60)


def _trajectory(b: BrokerProcess, session: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "broker"), "trajectory", "--vault", str(b.vault), session, *flags],
                          capture_output=True, text=True)


def _vault_bytes(vault: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(vault.rglob("*")) if p.is_file())


@pytest.fixture(scope="module")
def refs_broker(upstream, tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("prompts-refs"), upstream, "--prompts", "refs") as b:
        for api, stream in VARIANTS:
            with _client(b, f"{api}-{stream}") as c:
                assert run_agent(c, api, stream=stream) == ["gmail_list_messages", "slack_post_message"]
        yield b


@pytest.mark.parametrize(("api", "stream"), VARIANTS)
def test_refs_model_calls_and_prompt_refs(refs_broker, upstream, api, stream):
    entries = refs_broker.entries(f"{api}-{stream}", 5)
    assert [e["connector"] for e in entries] == [api.split(".")[0], "gmail", api.split(".")[0], "slack",
                                                 api.split(".")[0]]
    model = [e for e in entries if e["request"].get("prompt_capture")]
    assert [e["request"]["prompt_capture"] for e in model] == ["refs"] * 3
    assert all(e["effect"] == "read" and e["prompt_ref"] is None for e in model)
    assert all(("stream" in e["response"]) == stream for e in model)
    gmail, slack = entries[1], entries[3]
    assert gmail["prompt_ref"] == entries[0]["hash"] and slack["prompt_ref"] == entries[2]["hash"]
    assert gmail["response"]["body_sha256"] and slack["effect"] == "write"
    # the tool calls stay in clear in the response that asked for them
    assert "gmail_list_messages" in json.dumps(entries[0]["response"]["body"])
    assert '"channel": "#general"' in json.dumps(entries[2]["response"]["body"]) or \
        '\\"channel\\": \\"#general\\"' in json.dumps(entries[2]["response"]["body"])
    run = _trajectory(refs_broker, f"{api}-{stream}", "--json", "--strict")
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(run.stdout)
    assert report["findings"] == []
    assert [[c["carried_out_by"] for c in t["asked"]] for t in report["turns"]] == [[[2]], [[4]], []]
    assert [t["asked"][0]["result"]["matches"] for t in report["turns"][:2]] == [[2], [4]]


def test_refs_keeps_no_message_text_and_no_key(refs_broker, upstream):
    everything = _vault_bytes(refs_broker.vault)
    for text in [TASK, SYSTEM, *MODEL_TEXTS, *KEYS.values()]:
        assert text.encode() not in everything, text
        assert json.dumps(text).encode()[1:-1] not in everything, text
    assert not (refs_broker.vault / "blobs" / "sha256").exists() or not any(
        (refs_broker.vault / "blobs" / "sha256").rglob("*/*"))
    # the references are there instead: the user's task, by hash, in the first model request
    first = refs_broker.entries("anthropic-True", 5)[0]
    assert first["request"]["body"]["messages"][0]["content"] == {"sha256": sha256_text(TASK), "size": len(TASK)}
    assert subprocess.run([str(BIN / "broker"), "verify", "--vault", str(refs_broker.vault)]).returncode == 0
    assert upstream.errors == []


@pytest.mark.parametrize(("flavour", "options"), [
    ("broker", ("--prompts", "refs", "--recorder", "inline")),
    ("mitmdump", ("--set", "broker_prompts=refs", "--set", "broker_recorder=process")),
])
def test_inline_recorder_and_stock_mitmdump_tie_calls_too(upstream, tmp_path, flavour, options):
    with BrokerProcess(tmp_path, upstream, *options, flavour=flavour) as b, _client(b, "other") as c:
        run_agent(c, "openai.responses", stream=True)
        entries = b.entries("other", 5)
    assert [e["prompt_ref"] for e in entries] == [None, entries[0]["hash"], None, entries[2]["hash"], None]
    assert TASK not in json.dumps(entries)


def test_prompts_off_passes_model_calls_unrecorded(upstream, tmp_path):
    with BrokerProcess(tmp_path, upstream) as b, _client(b, "off") as c:
        run_agent(c, "anthropic", stream=True)
        entries = b.entries("off", 2)
    assert [e["connector"] for e in entries] == ["gmail", "slack"]
    assert all(e["prompt_ref"] is None for e in entries)


@pytest.mark.parametrize(("api", "stream"), [("anthropic", True), ("openai.chat", False), ("gemini", True)])
def test_full_mode_stores_each_text_once_and_catches_a_made_up_result(upstream, tmp_path, api, stream):
    with BrokerProcess(tmp_path, upstream, "--prompts", "full") as b:
        with _client(b, "made-up") as c:
            run_agent(c, api, stream=stream, fabricate=frozenset({"slack_post_message"}))
        entries = b.entries("made-up", 4)
    assert [e["connector"] for e in entries][1] == "gmail" and len(entries) == 4  # Slack never called
    blobs = [p for p in (b.vault / "blobs" / "sha256").rglob("*") if p.is_file()]
    task = [p for p in blobs if p.read_bytes() == TASK.encode()]
    assert len(task) == 1  # sent in every one of the three requests, stored once
    assert any(b"made-up-by-the-agent" in p.read_bytes() for p in blobs)  # what the model was shown
    run = _trajectory(b, "made-up", "--json", "--strict")
    assert run.returncode == 1
    kinds = {(f["kind"], f["seq"]) for f in json.loads(run.stdout)["findings"]}
    assert kinds == {("not_carried_out", 3), ("not_logged", 4)}
    human = _trajectory(b, "made-up").stdout
    assert "NOT CARRIED OUT" in human and "not_logged" in human


def test_openai_compatible_server_through_the_connectors_file(upstream, tmp_path):
    """A local OpenAI-compatible server (the fake answers the OpenAI API on localhost too), named in the
    connectors file: its model calls are model entries under the configured name, tied like any other."""
    conf = tmp_path / "connectors.toml"
    conf.write_text('[[connector]]\nname = "local-llm"\nhosts = ["localhost"]\nmodel_api = "openai"\n')
    with BrokerProcess(tmp_path, upstream, "--prompts", "refs", "--connectors", str(conf)) as b:
        with _client(b, "local") as c:
            run_agent(c, "openai.chat", model_host="localhost", stream=True)
        entries = b.entries("local", 5)
    assert [e["connector"] for e in entries] == ["local-llm", "gmail", "local-llm", "slack", "local-llm"]
    assert entries[0]["request"]["prompt_capture"] == "refs" and entries[0]["request"]["model_api"] == "openai"
    assert entries[1]["prompt_ref"] == entries[0]["hash"]
    assert TASK not in json.dumps(entries)
    assert _trajectory(b, "local", "--strict").returncode == 0


def test_a_streamed_model_response_ends_only_once_its_entry_is_durable(refs_broker):
    """The events pass as they arrive; the end of the stream waits for the entry (chunked HTTP/1.1)."""
    with _client(refs_broker, "durable") as c:
        for n in range(1, 4):
            with c.stream("POST", "https://api.anthropic.com/v1/messages", headers={"x-api-key": KEYS["anthropic"]},
                          json={"model": "m", "max_tokens": 9, "stream": True,
                                "messages": [{"role": "user", "content": f"call {n}"}]}) as r:
                assert r.headers["content-type"].startswith("text/event-stream")
                assert b"message_stop" in b"".join(r.iter_raw())
            entries = refs_broker.entries("durable")  # read at once, no waiting
            assert len(entries) == n and entries[-1]["response"]["stream"]["format"] == "sse"


def test_a_made_up_result_never_borrows_the_entry_of_another_call_of_its_turn(refs_broker, upstream):
    models = upstream.state.models
    with models.lock:
        saved = models.script
        models.script = [{"tool_calls": [
            {"name": "slack_post_message", "arguments": {"channel": "#general", "text": "hi"}},
            {"name": "gmail_list_messages", "arguments": {"q": "is:unread"}}]}, {"text": "Done."}]
    try:
        with _client(refs_broker, "two-calls") as c:
            run_agent(c, "anthropic", fabricate=frozenset({"slack_post_message"}))
    finally:
        with models.lock:
            models.script = saved
    entries = refs_broker.entries("two-calls", 3)
    assert [e["connector"] for e in entries] == ["anthropic", "gmail", "anthropic"]
    report = json.loads(_trajectory(refs_broker, "two-calls", "--json").stdout)
    assert [c["carried_out_by"] for c in report["turns"][0]["asked"]] == [[], [2]]
    assert {(f["kind"], f["seq"]) for f in report["findings"]} == {("not_carried_out", 1), ("not_logged", 3)}
