"""The in-memory writer and blob sink shipped for tests (journal/store/memory_store.py): the same pipeline
as the file writer, so the same lines, the same refusals, the same dedupe."""

from __future__ import annotations

import threading

import pytest

from journal.call import Call
from journal.entry import ContractError
from journal.record import Recorder
from journal.store.memory_store import MemoryWriter
from journal.verify import verify_lines
from journal.writer import JournalError, JournalWriter
from tests.support.journal_factories import fields


def test_lines_are_the_bytes_a_vault_holds(tmp_path):
    mem, disk = MemoryWriter(), JournalWriter(tmp_path / "v", durable=False)
    for n in range(1, 6):
        assert mem.append(fields("s1", n)) == disk.append(fields("s1", n))
    disk.close()
    assert b"".join(mem.lines_after("s1")) == (tmp_path / "v" / "journal" / "s1.jsonl").read_bytes()
    assert verify_lines("s1", mem.lines_after("s1")).intact
    assert [e["seq"] for e in mem.entries("s1")] == [1, 2, 3, 4, 5]
    assert [line[:8] for line in mem.lines_after("s1", 3)] == [b'{"agent"'] * 2
    assert mem.head("s1") == (5, mem.entries("s1")[-1]["hash"])


def test_refuses_what_the_file_writer_refuses():
    mem = MemoryWriter(line_limit=4096)
    with pytest.raises(ContractError):
        mem.append({**fields("s1", 1), "effect": "maybe"})
    forged = {**fields("s1", 1), "seq": 7, "prev": "0" * 64, "hash": "f" * 64}  # a caller may not pick its place
    with pytest.raises(ContractError):
        mem.append(forged)
    out = mem.append_many([fields("s1", 1), {"session": "s1"}, fields("s1", 2)])
    assert isinstance(out[1], ContractError) and [e["seq"] for e in (out[0], out[2])] == [1, 2]
    assert mem.sessions() == ["s1"]


def test_large_values_spill_into_the_memory_blob_sink():
    mem = MemoryWriter(line_limit=4096)
    big = "x" * 10_000
    entry = mem.append(fields("s1", 1, response={"status": 200, "headers": [], "body": {"data": big}}))
    ref = entry["response"]["body"]["data"]
    assert set(ref) == {"sha256", "size", "ref"} and mem.blobs.read(ref) == big.encode()


def test_dedupe_returns_the_twin_and_appends_nothing():
    mem = MemoryWriter()
    first = mem.append(fields("s1", 1))
    assert mem.append(fields("s1", 1), dedupe=True) == first
    assert mem.append(fields("s1", 2), dedupe=True)["seq"] == 2
    assert len(mem.entries("s1")) == 2


def test_threads_chain_one_session_without_gaps():
    mem = MemoryWriter()
    seen: list[int] = []
    mem.on_durable = lambda session, entries: seen.extend(e["seq"] for e in entries)

    def run(base: int) -> None:
        for n in range(25):
            mem.append(fields("s1", base + n))

    threads = [threading.Thread(target=run, args=(i * 100,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert verify_lines("s1", mem.lines_after("s1")).entries == 200
    assert sorted(seen) == list(range(1, 201))


def test_a_recorder_records_into_memory():
    mem = MemoryWriter()
    rec = Recorder(mem)
    entry = rec.record(Call.make(
        session="s1", agent="a", principal="p", connector="gmail", capture="broker", effect="read",
        method="GET", url="https://gmail.googleapis.com/gmail/v1/users/me/messages",
        request_headers=[("Authorization", "Bearer secret")], request_body=None, status=200,
        response_headers=[("Content-Type", "application/json")], response_body=b'{"messages": []}'))
    assert mem.entries("s1") == [entry]
    assert b"secret" not in b"".join(mem.lines_after("s1"))  # the Recorder's redaction ran


def test_journal_error_for_a_closed_file_writer_is_the_pipelines(tmp_path):
    w = JournalWriter(tmp_path / "v", durable=False)
    w.close()
    with pytest.raises(JournalError, match="closed"):
        w.append(fields("s1", 1))
