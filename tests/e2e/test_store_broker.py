"""End to end with a PostgreSQL store: `broker run --store postgresql://...` records into the database,
fails closed (502 before upstream) while the database is down, resumes by itself when it is back;
the readers and `broker pull` read it; the Python API Recorder writes to it."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import time

import httpx
import pytest
import rfc8785

from journal.call import Call
from journal.checkpoint.note import Signer
from journal.record import Recorder
from journal.store.postgres_schema import CURRENT_VERSION
from journal.store.postgres_store import PostgresStore
from journal.vault import Vault
from tests.support import postgres_server as _pg
from tests.support.broker_harness import BIN, BrokerProcess
from tests.support.checkpoint_harness import checkpoint_size
from tests.support.journal_factories import fields
from tests.support.upstreams import Upstream

pytestmark = pytest.mark.e2e
GMAIL = "https://gmail.googleapis.com/gmail/v1/users/me"
SLACK = "https://slack.com/api"
postgres_server, pg_url = _pg.postgres_server, _pg.pg_url  # fixtures


@pytest.fixture(scope="module")
def upstream():
    with Upstream() as up:
        yield up


@pytest.fixture
def own_server():
    """A server of this test's own, to stop and start again."""
    server = _pg.start_server()
    try:
        yield server
    finally:
        server.remove()


def _client(b: BrokerProcess, session: str) -> httpx.Client:
    return httpx.Client(proxy=b.proxy_url(session, "agent-pg"), verify=ssl.create_default_context(cafile=b.ca),
                        timeout=60)


def _broker(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "BROKER_STORE"}
    return subprocess.run([str(BIN / "broker"), *args], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("recorder", ["process", "inline"])
def test_broker_records_into_postgres_fails_closed_and_resumes(upstream, own_server, tmp_path, recorder):
    url = _pg.create_database(own_server.admin_url)
    store = PostgresStore(url)
    with BrokerProcess(tmp_path, upstream, "--store", url, "--recorder", recorder) as b:
        with _client(b, "s-pg") as c:
            assert c.get(f"{GMAIL}/labels").status_code == 200
            assert c.get(f"{GMAIL}/messages").status_code == 200
        assert [e["seq"] for e in store.iter_entries("s-pg")] == [1, 2]
        assert not (tmp_path / "vault").exists()  # nothing went to a file vault

        own_server.stop()
        upstream.clear_requests()
        with _client(b, "s-pg") as c:
            r = c.post(f"{SLACK}/chat.postMessage", data={"channel": "C0GENERAL", "text": "must not be sent"})
        assert r.status_code == 502 and "journal" in r.text
        assert not upstream.find(path_prefix="/api/chat.postMessage")  # never reached the platform

        own_server.start()
        deadline = time.monotonic() + 20
        with _client(b, "s-pg") as c:
            while True:
                r = c.get(f"{GMAIL}/labels")
                if r.status_code == 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        assert r.status_code == 200, r.text
        assert b.alive()
    entries = list(store.iter_entries("s-pg"))
    assert [e["seq"] for e in entries] == list(range(1, len(entries) + 1)) and len(entries) >= 3
    assert all(e["response"]["status"] == 200 for e in entries)  # the blocked call left no entry

    verified = _broker("verify", "--store", url, "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout)["intact"] is True
    pulled = _broker("pull", "--from", url, "--to", str(tmp_path / "pulled"))
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    lines = (tmp_path / "pulled" / "journal" / "s-pg.jsonl").read_bytes().splitlines(keepends=True)
    assert lines == list(store.iter_lines("s-pg"))
    for line in lines:
        assert rfc8785.dumps(json.loads(line)) + b"\n" == line
    assert _broker("verify", "--vault", str(tmp_path / "pulled")).returncode == 0
    shown = _broker("show", "--store", url, "s-pg")
    assert shown.returncode == 0 and "gmail" in shown.stdout


def test_readers_and_erase_on_a_database_store(pg_url, tmp_path):
    rec = Recorder(pg_url)  # the Python API, given a store URL
    try:
        big = "q" * (2 << 20)
        rec.record(Call.make(**_call("s-api", body=big)))
        rec.record(Call.make(**_call("s-api", body="small")))
    finally:
        rec.close()
    store = PostgresStore(pg_url)
    entries = list(store.iter_entries("s-api"))
    assert [e["seq"] for e in entries] == [1, 2]
    digest = entries[0]["response"]["body"]["sha256"]
    listed = _broker("sessions", "--store", pg_url, "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)["verifies"] is True
    key, vkey = _erasure_keys(tmp_path)
    erased = _broker("erase", "--store", pg_url, "--blob", digest, "--reason", "retention 30d", "--by", "ops",
                     "--signing-key", key)
    assert erased.returncode == 0, erased.stderr
    verified = _broker("verify", "--store", pg_url, "--json", "--erasure-key", vkey)
    report = json.loads(verified.stdout)
    assert verified.returncode == 0 and report["intact"] is True
    assert any("erased" in n and "retention 30d" in n and "ops" in n for n in report["notes"])
    unkeyed = _broker("verify", "--store", pg_url, "--json")  # no erasure key given: no tombstone counts
    assert unkeyed.returncode == 1 and json.loads(unkeyed.stdout)["kind"] == "blob_missing"
    plan = _broker("revert-plan", "--store", pg_url, "--vault", str(tmp_path / "local"), "s-api")
    assert plan.returncode == 1, plan.stderr  # replay is given no erasure key: the erased blob counts as missing
    assert not (tmp_path / "local").exists()  # read in place: nothing pulled, no view written (issue 26)
    pulled = _broker("pull", "--from", pg_url, "--to", str(tmp_path / "local"))
    assert pulled.returncode == 1 and "blob_missing" in pulled.stdout, pulled.stdout + pulled.stderr  # no erasure key
    pushed = _broker("push", "--from", str(tmp_path / "local"), "--to", pg_url)  # push verifies without an erasure key
    assert pushed.returncode == 1 and "not pushed, BROKEN at seq 1: blob_missing" in pushed.stdout
    migrated = _broker("store", "migrate", "--store", pg_url)
    assert migrated.returncode == 0 and f"version {CURRENT_VERSION}" in migrated.stdout


def _erasure_keys(tmp_path) -> tuple[str, str]:
    """Files of an erasure signer key and its verifier key."""
    signer = Signer.generate("erasure.example")
    (tmp_path / "erasure.key").write_text(signer.key_text() + "\n")
    (tmp_path / "erasure.vkey").write_text(signer.verifier().vkey() + "\n")
    return str(tmp_path / "erasure.key"), str(tmp_path / "erasure.vkey")


def _call(session: str, body: str) -> dict:
    f = fields(session)
    return dict(
        session=session, agent="agent-api", principal="alice@example.com", connector="gmail", capture="agent",
        effect="read", method="GET", url=f["request"]["url"], request_headers=[("Accept", "application/json")],
        request_body=None, status=200, response_headers=[("Content-Type", "text/plain")],
        response_body=body.encode(),
    )


def test_mcp_shim_records_into_postgres(pg_url, tmp_path):
    from mcp import Client, StdioServerParameters

    from tests.support.mcp_servers.harness import NOTES_SERVER, PY, REPO, WAIT

    argv = [PY, "-m", "broker.cli", "mcp", "--store", pg_url, "--session", "s-mcp", "--agent", "agent-mcp"]
    params = StdioServerParameters(command=argv[0], args=[*argv[1:], "--", *NOTES_SERVER], cwd=str(REPO))

    async def scenario() -> None:
        async with Client(params, read_timeout_seconds=WAIT) as c:
            await c.list_tools()  # the tools' annotations decide read / write
            assert (await c.call_tool("get_note", {"note_id": "n1"})).content[0].text == "buy milk"
            assert (await c.call_tool("add_note", {"note_id": "n3", "text": "hi"})).content[0].text == "ok"

    import asyncio

    asyncio.run(scenario())
    got = list(PostgresStore(pg_url).iter_entries("s-mcp"))
    assert [(e["seq"], e["request"]["method"], e["effect"]) for e in got] == [
        (1, "tools/list", "read"), (2, "tools/call", "read"), (3, "tools/call", "write")]
    assert not (tmp_path / "vault").exists()


def test_erase_in_a_file_vault_from_the_command_line(tmp_path):
    rec = Recorder(tmp_path / "v")
    try:
        entry = rec.record(Call.make(**_call("s-file", body="z" * (2 << 20))))
    finally:
        rec.close()
    digest = entry["response"]["body"]["sha256"]
    key, vkey = _erasure_keys(tmp_path)
    erased = _broker("erase", "--vault", str(tmp_path / "v"), "--blob", digest, "--reason", "retention", "--by", "ops",
                     "--signing-key", key)
    assert erased.returncode == 0, erased.stderr
    assert not (tmp_path / "v" / "blobs" / "sha256" / digest[:2] / digest).exists()
    verified = _broker("verify", "--vault", str(tmp_path / "v"), "--json", "--erasure-key", vkey)
    report = json.loads(verified.stdout)
    assert verified.returncode == 0 and report["intact"] is True
    assert any(f"blob {digest} erased" in n and "by ops: retention" in n for n in report["notes"])
    again = _broker("erase", "--vault", str(tmp_path / "v"), "--blob", "0" * 64, "--reason", "x")
    assert again.returncode == 2 and "no blob" in again.stderr


def test_seal_a_database_store_through_a_pulled_vault(pg_url, tmp_path):
    rec = Recorder(pg_url)
    try:
        rec.record(Call.make(**_call("s-seal", body="one")))
        rec.record(Call.make(**_call("s-seal", body="two")))
    finally:
        rec.close()
    keys = _broker("keygen", "--out", str(tmp_path / "keys"))
    assert keys.returncode == 0, keys.stderr
    private = tmp_path / "keys" / "seal-key.key"
    public = tmp_path / "keys" / "seal-key.vkey"
    local = str(tmp_path / "local")
    sealed = _broker("seal", "--store", pg_url, "--vault", local, "--key", str(private))
    assert sealed.returncode == 0 and "s-seal: checkpoint at 2 entries" in sealed.stdout, sealed.stderr
    checked = _broker("verify", "--store", pg_url, "--vault", local, "--seal-key", str(public), "--json")
    report = json.loads(checked.stdout)
    assert checked.returncode == 0 and any("checkpoint checked: 2 entries" in n for n in report["notes"])
    with PostgresStore(pg_url).writer() as w:  # the database grows; the pulled vault follows, the seal still holds
        w.append(fields("s-seal", n=3))
    checked = _broker("verify", "--store", pg_url, "--vault", local, "--seal-key", str(public), "--json")
    report = json.loads(checked.stdout)
    assert checked.returncode == 0 and report["entries"] == 3


@pytest.mark.parametrize("recorder", ["process", "inline"])
def test_broker_run_seals_a_database_store_into_its_vault(upstream, pg_url, tmp_path, recorder):
    """`broker run --store URL --vault DIR --seal-key KEY`: entries go to the database, checkpoints into DIR,
    and `broker verify --store URL --vault DIR --seal-key VKEY` checks them (issue 20: autoseal could not
    build its Recorder on a database store)."""
    signer = Signer.generate("vault.example/pg-run")
    key = tmp_path / "pg-run.key"
    key.write_text(signer.key_text() + "\n")
    vkey = tmp_path / "pg-run.vkey"
    vkey.write_text(signer.verifier().vkey() + "\n")
    seals = tmp_path / "seals"
    with BrokerProcess(tmp_path, upstream, "--store", pg_url, "--recorder", recorder, "--seal-key", str(key),
                       "--checkpoint-entries", "2", vault=seals) as b:
        with _client(b, "s-sealed") as c:
            for _ in range(4):
                assert c.get(f"{GMAIL}/labels").status_code == 200
    assert [e["seq"] for e in PostgresStore(pg_url).iter_entries("s-sealed")] == [1, 2, 3, 4]
    assert checkpoint_size(Vault.open_existing(seals), "s-sealed") >= 2
    assert not (seals / "journal" / "s-sealed.jsonl").exists()  # the entries live in the database only
    checked = _broker("verify", "--store", pg_url, "--vault", str(seals), "--seal-key", str(vkey), "--json",
                      "s-sealed")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    report = json.loads(checked.stdout.splitlines()[0])
    assert report["intact"] is True
