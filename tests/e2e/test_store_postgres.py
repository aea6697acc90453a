"""The PostgreSQL store against a real server: chain, byte-identical lines, many writers, blobs,
append-only rows, pull/push, erasure. (tests/support/postgres_server.py starts the server.)"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import tracemalloc

import orjson
import psycopg
import pytest
import rfc8785

from journal.chain import GENESIS, chain_entry
from journal.checkpoint.note import Signer
from journal.store import BlobErased, StoreError, open_store
from journal.store.file_store import FileStore
from journal.store.postgres_schema import CURRENT_VERSION
from journal.store.postgres_store import PostgresStore
from journal.store.transfer import copy_store
from journal.verify import verify_session
from journal.writer import JournalWriter
from tests.support import postgres_server as _pg
from tests.support.journal_factories import fields

postgres_server, pg_url = _pg.postgres_server, _pg.pg_url  # fixtures
BIG = 6 << 20  # over the 5 MiB line limit: spilled by the writer itself


def _check_rfc8785(line: bytes) -> None:
    """An independent RFC 8785 check: the line is the JCS form of what it parses to, and hashes right."""
    assert line.endswith(b"\n")
    value = json.loads(line)
    assert rfc8785.dumps(value) == line[:-1]
    body = {k: v for k, v in value.items() if k != "hash"}
    assert hashlib.sha256(rfc8785.dumps(body)).hexdigest() == value["hash"]


def test_lines_are_byte_identical_to_the_file_vault(pg_url, tmp_path):
    body = {"f": 1e15, "g": 1e-7, "h": 0.1, "\U0001f600key": -0.0, "i": 2**53 - 1}  # the slow canonical path
    odd = {"status": 200, "headers": [], "body": body}
    batch = [fields(n=i) for i in range(4)] + [fields(n=4, response=odd), fields("s2", n=9)]
    pg = open_store(pg_url)
    with pg.writer() as w:
        got = w.append_many(batch)
    with JournalWriter(tmp_path / "v") as fw:
        want = fw.append_many(batch)
    assert got == want
    assert [e["seq"] for e in got[:5]] == [1, 2, 3, 4, 5] and got[1]["prev"] == got[0]["hash"]
    file_lines = list(FileStore(tmp_path / "v").iter_lines("s1"))
    assert list(pg.iter_lines("s1")) == file_lines
    for line in file_lines:
        _check_rfc8785(line)
    assert pg.sessions() == ["s1", "s2"]
    assert pg.head("s1") == (5, got[4]["hash"])


def test_pull_writes_a_vault_the_file_verifier_and_rfc8785_accept(pg_url, tmp_path):
    pg = PostgresStore(pg_url)
    big = "x" * BIG  # spilled: the blob goes into the database before the entry
    with pg.writer() as w:
        w.append_many([fields(n=1), fields(n=2, response={"status": 200, "headers": [], "body": big})])
        w.append(fields(n=3))
    target = FileStore(tmp_path / "pulled", create=True)
    report = copy_store(pg, target)
    assert report.sessions == {"s1": 3} and report.blobs == 1
    r = verify_session(target.vault, "s1")
    assert r.intact and r.entries == 3
    for line in target.iter_lines("s1"):
        _check_rfc8785(line)
    # pulling again copies nothing new, and then only what was appended since
    with pg.writer() as w:
        w.append(fields(n=4))
    assert copy_store(pg, target).sessions == {"s1": 1}
    assert verify_session(target.vault, "s1").entries == 4


def test_push_migrates_a_vault_into_the_database(pg_url, tmp_path):
    with JournalWriter(tmp_path / "v") as fw:
        for i in range(1200):  # more than one page of PAGE lines
            fw.append(fields(n=i))
        fw.append(fields(n=1, response={"status": 200, "headers": [], "body": "y" * BIG}))
    src = FileStore(tmp_path / "v")
    pg = PostgresStore(pg_url)
    assert copy_store(src, pg).sessions == {"s1": 1201}
    assert list(pg.iter_lines("s1")) == list(src.iter_lines("s1"))
    with pg.writer() as w:  # brokers continue the migrated chain
        assert w.append(fields(n=5))["seq"] == 1202
    back = FileStore(tmp_path / "back", create=True)
    copy_store(pg, back)
    assert verify_session(back.vault, "s1").intact


def test_a_diverging_copy_is_refused(pg_url, tmp_path):
    pg = PostgresStore(pg_url)
    with pg.writer() as w:
        w.append(fields(n=1))
    with JournalWriter(tmp_path / "v") as fw:
        fw.append(fields(n=2))
    with pytest.raises(StoreError, match="differs"):
        copy_store(FileStore(tmp_path / "v"), pg)


def _append_from_process(url: str, worker: int, count: int) -> None:
    store = PostgresStore(url)
    with store.writer() as w:
        for i in range(count):
            pair = [fields("shared", n=i, agent=f"w{worker}"), fields("shared", n=i, agent=f"w{worker}")]
            results = w.append_many(pair)
            assert all(isinstance(r, dict) for r in results), results


def test_many_processes_append_one_chain_without_gap_or_fork(pg_url, tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_append_from_process, args=(pg_url, k, 40)) for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    pg = PostgresStore(pg_url)
    entries = list(pg.iter_entries("shared"))
    assert [e["seq"] for e in entries] == list(range(1, 321))
    prev = GENESIS
    for e in entries:
        assert e["prev"] == prev
        prev = e["hash"]
    assert {e["agent"] for e in entries} == {"w0", "w1", "w2", "w3"}
    target = FileStore(tmp_path / "pulled", create=True)
    copy_store(pg, target)
    assert verify_session(target.vault, "shared").intact


def test_the_database_itself_refuses_a_gap_or_a_fork(pg_url):
    pg = PostgresStore(pg_url)
    with pg.writer() as w:
        w.append(fields(n=1))
        w.append(fields(n=2))
    lines = list(pg.iter_lines("s1"))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UniqueViolation):  # a second seq 2 (a fork at the same seq)
            conn.execute("INSERT INTO journal_entries (session, seq, prev, hash, line) VALUES ('s1', 2, %s, %s, %s)",
                         (orjson.loads(lines[0])["hash"], "f" * 64, lines[1]))
        with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="a gap"):
            conn.execute("INSERT INTO journal_entries (session, seq, prev, hash, line) VALUES ('s1', 5, %s, %s, 'x')",
                         ("a" * 64, "b" * 64))
        with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="a fork"):
            conn.execute("INSERT INTO journal_entries (session, seq, prev, hash, line) VALUES ('s1', 3, %s, %s, 'x')",
                         ("a" * 64, "b" * 64))


def test_a_lost_race_for_the_next_seq_is_retried(pg_url):
    """A writer that does not take the advisory lock commits seq 2 between our head read and our
    insert: the primary key refuses ours, and the writer retries from the new head."""
    pg = PostgresStore(pg_url)
    w = pg.writer()
    first = w.append(fields(n=1))
    conn = w._connection()
    real = conn.execute
    sneaked = []

    def execute(query, params=None, **kw):
        result = real(query, params, **kw)
        if isinstance(query, str) and query.startswith("SELECT seq, hash FROM journal_entries") and not sneaked:
            sneaked.append(True)
            _, line = chain_entry(fields(n=99, agent="other"), 2, first["hash"])
            with psycopg.connect(pg_url, autocommit=True) as other:
                other.execute(
                    "INSERT INTO journal_entries (session, seq, prev, hash, line) VALUES ('s1', 2, %s, %s, %s)",
                    (first["hash"], orjson.loads(line)["hash"], line),
                )
        return result

    conn.execute = execute
    entry = w.append(fields(n=2))
    w.close()
    assert w.retries == 1 and entry["seq"] == 3
    assert [e["agent"] for e in pg.iter_entries("s1")] == ["agent-a", "other", "agent-a"]


def test_rows_cannot_be_changed_by_the_owner_or_the_broker_role(pg_url):
    pg = PostgresStore(pg_url)
    with pg.writer() as w:
        w.append(fields(n=1))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for stmt in ("UPDATE journal_entries SET line = 'x'", "DELETE FROM journal_entries",
                     "TRUNCATE journal_entries CASCADE", "DELETE FROM journal_sessions",
                     "TRUNCATE journal_blobs"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
                conn.execute(stmt)
        role = "broker_" + conn.info.dbname
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
    pg.grant_writer(role)
    as_broker = pg_url.replace("broker_admin@", f"{role}@")
    with PostgresStore(as_broker).writer() as w:  # the broker's own role writes ...
        assert w.append(fields(n=2))["seq"] == 2
    with psycopg.connect(as_broker, autocommit=True) as conn:  # ... and cannot change a row, trigger or not
        for stmt in ("UPDATE journal_entries SET line = 'x'", "DELETE FROM journal_entries",
                     "ALTER TABLE journal_entries DISABLE TRIGGER journal_entries_append_only",
                     "DELETE FROM journal_blob_chunks"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(stmt)
    assert len(list(pg.iter_lines("s1"))) == 2


def test_a_large_blob_streams_in_bounded_memory(pg_url):
    pg = PostgresStore(pg_url)
    size = 48 << 20
    block = bytes(range(256)) * 4096  # 1 MiB

    def chunks():
        for _ in range(size // len(block)):
            yield block

    tracemalloc.start()
    ref = pg.put_blob(chunks())
    peak = tracemalloc.get_traced_memory()[1]
    got = hashlib.sha256()
    n = 0
    for chunk in pg.read_blob(ref["sha256"]):
        got.update(chunk)
        n += len(chunk)
    peak = max(peak, tracemalloc.get_traced_memory()[1])
    tracemalloc.stop()
    assert n == size and got.hexdigest() == ref["sha256"]
    assert peak < 8 << 20, f"peak {peak} bytes for a {size}-byte blob"
    assert pg.put_blob(chunks())["sha256"] == ref["sha256"]  # stored once
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM journal_blobs").fetchone()[0] == 1


def test_erasure_keeps_the_chain_in_both_stores(pg_url, tmp_path):
    pg = PostgresStore(pg_url)
    body = "secret " * (BIG // 7 + 1)
    with pg.writer() as w:
        e = w.append(fields(n=1, response={"status": 200, "headers": [], "body": body}))
        w.append(fields(n=2))
    digest = e["response"]["body"]["sha256"]
    signer = Signer.generate("erasure.example")
    keys = [signer.verifier()]
    t = pg.erase_blob(digest, reason="subject request #12", by="dpo@example.com", signer=signer)
    assert (t.sha256, t.reason, t.erased_by) == (digest, "subject request #12", "dpo@example.com")
    with pytest.raises(BlobErased, match="subject request #12"):
        list(pg.read_blob(digest))
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM journal_blob_chunks").fetchone()[0] == 0
    target = FileStore(tmp_path / "pulled", create=True)
    copy_store(pg, target)
    r = verify_session(target.vault, "s1", erasure_keys=keys)
    assert r.intact and r.entries == 2
    assert [x["sha256"] for x in r.erased] == [digest]
    assert any("erased" in n and "subject request #12" in n for n in r.notes)
    # the file vault erases the same way, and push carries the tombstone
    with JournalWriter(tmp_path / "v") as fw:
        fe = fw.append(fields(n=1, response={"status": 200, "headers": [], "body": body + "!"}))
    fs = FileStore(tmp_path / "v")
    fd = fe["response"]["body"]["sha256"]
    fs.erase_blob(fd, reason="retention", by="ops", signer=signer)
    assert not fs.blobs.path_for(fd).exists()
    r = verify_session(fs.vault, "s1", erasure_keys=keys)
    assert r.intact and r.erased[0]["reason"] == "retention"
    copy_store(fs, pg, sessions=[])
    assert {t.sha256 for t in pg.tombstones()} == {digest, fd}


def test_an_unreachable_database_is_a_clear_error():
    pg = PostgresStore("postgresql://nobody@127.0.0.1:1/none")
    w = pg.writer()
    result = w.append_many([fields(n=1)])[0]
    assert isinstance(result, StoreError) and "unreachable" in str(result)
    with pytest.raises(StoreError, match="unreachable"):
        w.check_session("s1")


def test_schema_is_versioned_created_on_first_use_and_refused_when_newer(pg_url):
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert PostgresStore(pg_url).schema_version(conn) == 0
        pg = PostgresStore(pg_url)
        with pg.writer() as w:  # first use creates it
            w.append(fields(n=1))
        assert pg.schema_version(conn) == CURRENT_VERSION
        now = (CURRENT_VERSION, CURRENT_VERSION)
        assert PostgresStore(pg_url).migrate() == now  # `broker store migrate` on a current schema: nothing
        conn.execute("INSERT INTO journal_schema (version) VALUES (99)")
    result = PostgresStore(pg_url).writer().append_many([fields(n=2)])[0]
    assert isinstance(result, StoreError) and "newer than this broker" in str(result)


def test_threads_share_commits_and_keep_one_chain(pg_url):
    """The MCP shim and the inline recorder append from many threads: batches queued while one
    commits go together in the next transaction."""
    import threading

    pg = PostgresStore(pg_url)
    w = pg.writer()
    w.append(fields(n=0))  # schema and connection ready
    start = threading.Barrier(32)
    got: list = []

    def one(k: int) -> None:
        start.wait()
        got.append(w.append(fields("shared" if k % 2 else f"own{k}", n=k)))

    threads = [threading.Thread(target=one, args=(k,)) for k in range(32) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    assert len(got) == 64 and w.commits < 65
    shared = list(pg.iter_entries("shared"))
    assert [e["seq"] for e in shared] == list(range(1, 33))
    assert all(b["prev"] == a["hash"] for a, b in zip(shared, shared[1:], strict=False))


def test_dedupe_in_the_database_as_in_the_file_vault(pg_url):
    """The proxy's fallback after its recording service died appends with dedupe: an identical entry
    already committed by the dead service is returned, not written again."""
    pg = open_store(pg_url)
    with pg.writer() as dead:
        first = dead.append(fields("s-dd", n=1))
    with pg.writer() as w:
        w.append(fields("s-dd", n=2))
        assert w.append(fields("s-dd", n=1), dedupe=True) == first
        assert w.append(fields("s-dd", n=3), dedupe=True)["seq"] == 3
    assert [e["seq"] for e in pg.iter_entries("s-dd")] == [1, 2, 3]
