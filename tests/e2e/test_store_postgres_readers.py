"""Readers of the sessions being recorded, on a PostgreSQL store (a real server, tests/postgres_server.py):
prompt links (`--prompts refs`), the MCP shim's exact prompt tie and autoseal read through the store
protocol's `lines_after`, never a file vault behind the writer (issue 20: with a database store prompt
capture used to turn every call into a "could not be recorded" entry and autoseal could not start)."""

from __future__ import annotations

import pytest

from broker.proxy.service import Service
from broker.proxy.wire import WholeCall
from journal.chain import chain_entry
from journal.checkpoint.autoseal import AutosealConfig
from journal.models.linking import tool_call_prompt_ref
from journal.record import Recorder
from journal.store import StoreError
from journal.store.file_store import FileStore
from journal.store.postgres_store import PostgresStore
from journal.store.transfer import copy_store
from journal.vault import Vault
from tests.support import postgres_server as _pg
from tests.support.checkpoint_harness import audit, checkpoint_size, record_reads, report_of, signer_key_file
from tests.support.journal_factories import fields
from tests.support.prompt_calls import anthropic_call, gmail_call, send_framed

postgres_server, pg_url = _pg.postgres_server, _pg.pg_url  # fixtures
GMAIL = "https://gmail.googleapis.com/gmail/v1/users/me"


def _entries(url: str, session: str) -> list[dict]:
    store = PostgresStore(url)
    try:
        return list(store.iter_entries(session))
    finally:
        store.close()


def test_prompt_capture_ties_calls_on_a_database_store(pg_url):
    svc = Service(Recorder(pg_url, durable=False))
    first = send_framed(svc, WholeCall(1, anthropic_call("s", "refs", 1, tool=("add_note", {"id": "n1"}))))
    assert first[0].outcome == "ok"
    assert send_framed(svc, WholeCall(2, gmail_call("s", 2)))[0].outcome == "ok"
    svc.recorder.close()
    model, call = _entries(pg_url, "s")
    assert model["connector"] == "anthropic" and "prompt_capture" in model["request"]
    assert "error" not in model["response"] or model["response"]["error"] is None
    assert call["connector"] == "gmail" and call["prompt_ref"] == model["hash"]

    restarted = Service(Recorder(pg_url, durable=False))  # a fresh service finds the latest model entry in the database
    assert send_framed(restarted, WholeCall(3, gmail_call("s", 3)))[0].outcome == "ok"
    assert send_framed(restarted, WholeCall(4, gmail_call("other", 4)))[0].outcome == "ok"
    restarted.recorder.close()
    assert _entries(pg_url, "s")[2]["prompt_ref"] == model["hash"]
    assert _entries(pg_url, "other")[0]["prompt_ref"] is None  # another session's model call ties nothing


def test_the_exact_tool_call_tie_reads_a_database_store(pg_url):
    rec = Recorder(pg_url, durable=False)
    try:
        send_framed(Service(rec), WholeCall(1, anthropic_call("s", "refs", 1, tool=("mcp__notes__add_note",
                                                                                   {"id": "n1"}))))
        model = _entries(pg_url, "s")[0]
        tie = tool_call_prompt_ref(rec.writer, "s", "tools/call", {"name": "add_note", "arguments": {"id": "n1"}})
        assert tie == model["hash"]
        assert tool_call_prompt_ref(rec.writer, "s", "tools/call", {"name": "add_note", "arguments": {"id": "n2"}}) \
            is None
        send_framed(Service(rec), WholeCall(2, anthropic_call("s", "refs", 2, tool=("add_note", {"id": "n2"}))))
        second = _entries(pg_url, "s")[1]["hash"]  # read incrementally: the index follows the session
        assert tool_call_prompt_ref(rec.writer, "s", "tools/call", {"name": "add_note", "arguments": {"id": "n2"}}) \
            == second
    finally:
        rec.close()


@pytest.fixture
def key(tmp_path):
    return signer_key_file(tmp_path, "pg")


def test_autoseal_on_a_database_store_writes_checkpoints_that_verify(pg_url, tmp_path, key):
    signer, path = key
    home = tmp_path / "seals"
    config = AutosealConfig(str(path), entries=3, seconds=3600, vault_dir=str(home))
    rec = Recorder(pg_url, autoseal=config, durable=False)
    record_reads(rec, 7)
    rec.close()
    assert rec.autosealer.problems == [] and checkpoint_size(Vault.open_existing(home)) == 7
    rec = Recorder(pg_url, autoseal=config, durable=False)  # a second process continues the checkpoints
    record_reads(rec, 2, start=8)
    rec.close()
    assert checkpoint_size(Vault.open_existing(home)) == 9

    db = PostgresStore(pg_url)  # `broker verify --store URL --vault DIR --seal-key PUB`: pull, then check
    try:
        copy_store(db, FileStore(home, create=True))
    finally:
        db.close()
    report = report_of(audit(Vault.open_existing(home), signer.verifier(), require_sealed=True), "s1")
    assert report.intact and "checkpoint checked: 9 entries" in report.notes


def test_autoseal_on_a_database_store_needs_a_vault_for_its_checkpoints(pg_url, key):
    _, path = key
    with pytest.raises(StoreError, match="no checkpoints.*vault directory"):
        Recorder(pg_url, autoseal=AutosealConfig(str(path)), durable=False)


def test_autoseal_does_not_seal_a_database_session_whose_chain_was_edited(pg_url, tmp_path, key):
    """An attacker with INSERT rights appends a line that continues seq and prev but whose content no longer
    matches its hash: the autosealer verifies what it reads from the database and refuses to sign it."""
    _, path = key
    db = PostgresStore(pg_url)
    try:
        writer = db.writer(durable=False)
        entry = writer.append(fields("s1", 1))
        _, line = chain_entry(fields("s1", 2), 2, entry["hash"])
        line = line.replace(b"m2", b"m9")  # the content changes; seq, prev and hash stay
        db.append_lines("s1", [line])
        writer.close()
    finally:
        db.close()
    config = AutosealConfig(str(path), entries=1, seconds=3600, vault_dir=str(tmp_path / "seals"))
    rec = Recorder(pg_url, autoseal=config, durable=False)
    record_reads(rec, 1, start=3)
    rec.close()
    assert any("not sealed" in p and "edited" in p for p in rec.autosealer.problems)
    assert checkpoint_size(Vault.open_existing(tmp_path / "seals")) == 0

