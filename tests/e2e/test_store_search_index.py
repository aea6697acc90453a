"""`broker search` on PostgreSQL through the facet indexes of schema version 3 (issue 26): the same matches as the
file vault holding the same lines, sessions without a candidate not read, the plan an index scan; and the
database's owner replacing the facet function or dropping an index gets a full scan, not hidden rows.

The database is a real server started by the tests (tests/support/postgres_server.py).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from journal.chain import GENESIS, chain_entry
from journal.search import Query, search
from journal.store.database_vault import DatabaseVault
from journal.store.postgres_schema import MIGRATIONS, facet_index
from journal.store.postgres_search import candidate_seqs, lines_of
from journal.store.postgres_store import PostgresStore
from journal.vault import Vault
from tests.support import postgres_server as _pg
from tests.support.journal_factories import fields

postgres_server, pg_url = _pg.postgres_server, _pg.pg_url  # fixtures
ROOT = Path(__file__).resolve().parents[2]


def _session(session: str, n: int, **over) -> list[bytes]:
    prev, lines = GENESIS, []
    for seq in range(1, n + 1):
        f = fields(session, n=seq, **over)
        if "day" in over:
            f["ts"] = over["day"] + f["ts"][10:]
            del f["day"]
        entry, line = chain_entry(f, seq, prev)
        prev = entry["hash"]
        lines.append(line)
    return lines


def _odd_lines() -> list[bytes]:
    """Lines the facet function cannot read, or reads with odd values: each must go in and still be found."""
    prev, lines = GENESIS, []
    variants = [
        {"response": {"status": 200, "headers": [], "body": "nul \x00 inside"}},  # jsonb refuses \u0000
        {"response": {"status": 200, "headers": [],
                      "body": {"big": 2**53 - 1, "small": 1.5e-300, "neg": -0.0, "huge": 1.7e308}}},
        {"connector": "slack", "request": {"method": "POST", "url": "https://slack.com/api/x", "headers": [],
                                           "body": {"text": "\x00"}}},
        {"agent": "agent-\u00e9\U0001f600"},
        {"ts": "2026-09-23T00:00:00.000Z"},
    ]
    for seq, over in enumerate(variants, 1):
        entry, line = chain_entry(fields("s-odd", n=seq, **over), seq, prev)
        prev = entry["hash"]
        lines.append(line)
    return lines


def _insert_raw(url: str, session: str, line: bytes) -> None:
    """As the owner: a row the chain trigger accepts (its columns continue the head) holding any bytes."""
    with psycopg.connect(url, autocommit=True) as conn:
        seq, digest = conn.execute("SELECT seq, hash FROM journal_entries WHERE session = %s ORDER BY seq DESC "
                                   "LIMIT 1", (session,)).fetchone()
        conn.execute("INSERT INTO journal_entries (session, seq, prev, hash, line) VALUES (%s, %s, %s, %s, %s)",
                     (session, seq + 1, digest, "f" * 64, line))


def _load(url: str) -> None:
    store = PostgresStore(url)
    try:
        store.append_lines("s-gmail", _session("s-gmail", 60, day="2026-09-22"))
        store.append_lines("s-slack", _session("s-slack", 60, connector="slack", effect="write", agent="agent-b",
                                               day="2026-09-23"))
        store.append_lines("s-drive", _session("s-drive", 60, connector="drive", day="2026-09-24"))
        store.append_lines("s-odd", _odd_lines())
    finally:
        store.close()
    for raw in (b'\xff\xfe{"connector":"gmail"}\n', b"not json\n", b'["connector","gmail"]\n',
                b'{"connector":"gmail","n":1e999999,"ts":"2026-09-24"}\n',
                b'{"connector":"gmail","effect":"read","ts":7}', b'{"connector":"gmail","connector":"slack"}\n'):
        _insert_raw(url, "s-odd", raw)


def _pulled(url: str, root: Path) -> Vault:
    """The store's lines as a file vault (what `broker pull` writes), to search the same lines in files."""
    vault = Vault.create(root)
    store = PostgresStore(url)
    try:
        for session in store.sessions():
            vault.session_path(session).write_bytes(
                b"".join(line if line.endswith(b"\n") else line + b"\n" for line in store.lines_after(session)))
    finally:
        store.close()
    return vault


QUERIES = [
    {"connector": "gmail"},
    {"connector": "slack"},
    {"connector": "slack", "since": "2026-09-23", "until": "2026-09-23"},
    {"effect": "write"},
    {"agent": "agent-b"},
    {"agent": "agent-\u00e9\U0001f600"},
    {"since": "2026-09-23"},
    {"until": "2026-09-22T10:00:3"},
    {"since": "2026-09-22T10:00:10", "until": "2026-09-22T10:00:20"},
    {"since": "2026-09-24", "until": "2026-09-24"},
    {"connector": "gmail", "text": "message 7"},
    {"connector": "gmail", "session": "s-odd"},
    {"connector": "nope"},
    {"status": "200"},
]


def _found(vault: Vault, q: dict, skipped: list | None = None) -> list[tuple[str, int, bytes]]:
    return [(m.session, m.line, m.raw) for m in search(vault, Query(**q), skipped)]


def _same_as_files(url: str, tmp_path: Path, monkeypatch, queries=QUERIES) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    files = _pulled(url, tmp_path / f"pulled-{len(list(tmp_path.iterdir()))}")
    store = PostgresStore(url)
    try:
        db = DatabaseVault(store, tmp_path / "none")
        for q in queries:
            assert _found(db, q) == _found(files, q), q
    finally:
        store.close()


def test_search_through_the_indexes_finds_what_the_file_vault_finds(pg_url, tmp_path, monkeypatch, caplog):
    _load(pg_url)
    store = PostgresStore(pg_url)
    try:
        assert store.search_index().schema is not None, store.search_index().why
    finally:
        store.close()
    with caplog.at_level(logging.WARNING):
        _same_as_files(pg_url, tmp_path, monkeypatch)
    assert "reads every row" not in caplog.text
    # the lines the function cannot read went in and are found (NULL facets are candidates)
    store = PostgresStore(pg_url)
    try:
        db = DatabaseVault(store, tmp_path / "none")
        odd = [line for s, line, _ in _found(db, {"connector": "gmail", "session": "s-odd"})]
        assert odd == [1, 2, 4, 5], odd
        assert [line for s, line, _ in _found(db, {"connector": "slack", "session": "s-odd"})] == [3]
        # rows without a session key: a ts that is no string (10), a duplicate key whose last value counts (11)
        assert ("s-odd", 10) in [(s, n) for s, n, _ in _found(db, {"connector": "gmail", "until": "2026"})]
        assert ("s-odd", 11) in [(s, n) for s, n, _ in _found(db, {"connector": "slack"})]
    finally:
        store.close()


def test_a_session_without_candidates_is_not_read(pg_url, tmp_path, monkeypatch):
    _load(pg_url)
    store = PostgresStore(pg_url)
    read: list[str] = []
    real = PostgresStore.candidate_lines

    def candidate_lines(self, session, seqs, needles):
        read.append(session)
        return real(self, session, seqs, needles)

    monkeypatch.setattr(PostgresStore, "candidate_lines", candidate_lines)
    monkeypatch.setattr(PostgresStore, "matching_lines", lambda *a, **k: pytest.fail("a full scan"))
    try:
        db = DatabaseVault(store, tmp_path / "none")
        skipped: list = []
        assert {m.session for m in search(db, Query(since="2026-09-24", until="2026-09-24"), skipped)} == {"s-drive"}
        # s-odd has lines whose ts the function cannot read: they are candidates, so it is read
        assert sorted(read) == ["s-drive", "s-odd"]
        assert [s for s, _ in skipped] == ["s-gmail", "s-slack"]
    finally:
        store.close()


def test_the_candidate_query_is_an_index_scan(pg_url):
    _load(pg_url)
    store = PostgresStore(pg_url)
    big = _session("big", 3000, connector="github", day="2026-09-25")
    try:
        store.append_lines("big", big)
        with store.connect() as conn:
            conn.execute("ANALYZE journal_entries")
        schema = store.search_index().schema
    finally:
        store.close()
    sent: list[tuple[str, tuple]] = []

    class Recorder:
        def __init__(self, conn):
            self.conn = conn

        def execute(self, query, params=()):
            sent.append((query, tuple(params)))
            return self.conn.execute(query, params)

    from journal.store.postgres_search import Facets

    with psycopg.connect(pg_url, autocommit=True) as conn:
        for facets in (Facets({"connector": b"gmail"}), Facets({"effect": b"write", "agent": b"agent-a"}),
                       Facets(since=b"2026-09-25T10:01", before=b"2026-09-25T10:02")):
            sent.clear()
            seqs = candidate_seqs(Recorder(conn), schema, "big", facets)
            assert len(seqs) == (60 if facets.since else 0), seqs[:5]
            query, params = sent[0]
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + query, params))
            assert "Seq Scan" not in plan, plan
            assert any(facet_index(key) in plan for key in facets.equal or {"ts": 1}), plan
        sent.clear()  # the candidates' lines: the primary key
        assert len(lines_of(Recorder(conn), schema, "big", list(range(60, 120)), [b'"connector":"github"'])) == 60
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sent[0][0], sent[0][1]))
        assert "journal_entries_pkey" in plan and "Seq Scan" not in plan, plan


def _broker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, NO_COLOR="1"), timeout=180)


LIAR = """CREATE OR REPLACE FUNCTION public.journal_facets(line bytea) RETURNS bytea[]
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE doc jsonb;
BEGIN
    IF position('"seq":7,'::bytea in line) > 0 THEN RETURN ARRAY['other', 'other', 'other', 'other']::bytea[]; END IF;
    doc := CAST(convert_from(line, 'UTF8') AS jsonb);
    RETURN ARRAY[convert_to(doc ->> 'connector', 'UTF8'), convert_to(doc ->> 'effect', 'UTF8'),
                 convert_to(doc ->> 'agent', 'UTF8'), convert_to(doc ->> 'ts', 'UTF8')];
EXCEPTION WHEN OTHERS THEN RETURN NULL;
END $fn$"""


def _rewrite_rows(conn) -> None:
    """As the owner: every stored row updated (unchanged), so its generated facets are computed again."""
    conn.execute("ALTER TABLE journal_entries DISABLE TRIGGER journal_entries_append_only")
    conn.execute("UPDATE journal_entries SET seq = seq")
    conn.execute("ALTER TABLE journal_entries ENABLE TRIGGER journal_entries_append_only")


@pytest.mark.parametrize("attack", ["liar", "plain-column", "drop", "partial", "volatile"])
def test_the_owner_cannot_hide_rows_through_the_function_or_the_indexes(pg_url, tmp_path, monkeypatch, caplog,
                                                                        attack):
    """The owner makes the facets lie (a function that says 'other' for seq 7, every row computed again), turns the
    generated column into a plain one (whose values a writer could then send), drops or replaces an index, or
    changes the function's volatility: search notices, says so once, and reads every row."""
    _load(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        if attack == "liar":
            conn.execute(LIAR)
            _rewrite_rows(conn)
        elif attack == "plain-column":
            conn.execute("ALTER TABLE journal_entries ALTER COLUMN facets DROP EXPRESSION")
            conn.execute("ALTER TABLE journal_entries DISABLE TRIGGER journal_entries_append_only")
            conn.execute("UPDATE journal_entries SET facets = ARRAY['other', 'other', 'other', 'other']::bytea[] "
                         "WHERE seq = 7")
            conn.execute("ALTER TABLE journal_entries ENABLE TRIGGER journal_entries_append_only")
        elif attack == "drop":
            conn.execute(f"DROP INDEX {facet_index('connector')}")
        elif attack == "partial":
            conn.execute(f"DROP INDEX {facet_index('ts')}")
            conn.execute(f"CREATE INDEX {facet_index('ts')} ON journal_entries (session, (facets[4]), seq) "
                         "WHERE seq < 3")
        elif attack == "volatile":
            conn.execute("ALTER FUNCTION public.journal_facets(bytea) VOLATILE")
        # the lie is in place: the index, asked directly, misses a row
        if attack in ("liar", "plain-column"):
            got = candidate_seqs(conn, "public", "s-gmail", _facets_gmail())
            assert 7 not in got and 8 in got
    with caplog.at_level(logging.WARNING):
        _same_as_files(pg_url, tmp_path, monkeypatch, QUERIES[:4])
    assert caplog.text.count("search reads every row") == 1, caplog.text
    r = _broker("search", "--connector", "gmail", "--session", "s-gmail", "--store", pg_url)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 60, r.stdout + r.stderr
    assert r.stderr.count("search reads every row") == 1, r.stderr


def _facets_gmail():
    from journal.store.postgres_search import Facets

    return Facets({"connector": b"gmail"})


def test_a_version_2_store_is_searched_by_a_scan_until_migrated(pg_url, tmp_path, monkeypatch, caplog):
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for version in (1, 2):
            conn.execute(MIGRATIONS[version])
            conn.execute("INSERT INTO journal_schema (version) VALUES (%s)", (version,))
    _load(pg_url)  # a version-2 store is written as it is
    with caplog.at_level(logging.WARNING):
        _same_as_files(pg_url, tmp_path, monkeypatch, QUERIES[:3])
    assert "schema version 2 has no search indexes" in caplog.text
    r = _broker("store", "migrate", "--store", pg_url)
    assert r.returncode == 0 and "schema version 2 -> 3" in r.stdout, r.stdout + r.stderr
    store = PostgresStore(pg_url)
    try:
        assert store.search_index().schema == "public"
    finally:
        store.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        _same_as_files(pg_url, tmp_path, monkeypatch)
    assert "reads every row" not in caplog.text


def test_the_writer_role_inserts_through_the_indexes_with_select_and_insert_only(pg_url):
    r = _broker("store", "migrate", "--store", pg_url)
    assert r.returncode == 0, r.stderr
    role = "w_" + pg_url.rsplit("/", 1)[1]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute("REVOKE EXECUTE ON FUNCTION public.journal_facets(bytea) FROM PUBLIC")
    assert _broker("store", "migrate", "--store", pg_url, "--grant", role).returncode == 0
    writer_url = pg_url.replace("broker_admin@", f"{role}@")
    with PostgresStore(writer_url).writer() as w:
        done = w.append_many([fields("w1", n=1), fields("w1", n=2, connector="slack"),
                       fields("w1", n=3, response={"status": 200, "headers": [], "body": "\x00"})])
    assert [e["seq"] if isinstance(e, dict) else str(e) for e in done] == [1, 2, 3]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        privileges = {r[0] for r in conn.execute(
            "SELECT privilege_type FROM information_schema.role_table_grants WHERE grantee = %s", (role,))}
        assert privileges == {"SELECT", "INSERT"}
        facets = [r[0] for r in conn.execute("SELECT facets[1] FROM journal_entries ORDER BY seq")]
    assert facets == [b"gmail", b"slack", None]
    with psycopg.connect(writer_url, autocommit=True) as conn:  # a value the writer sends for it is refused
        with pytest.raises(psycopg.errors.GeneratedAlways):
            conn.execute("INSERT INTO journal_entries (session, seq, prev, hash, line, facets) VALUES "
                         "('w1', 4, 'x', 'y', '{}', ARRAY['slack']::bytea[])")
    store = PostgresStore(writer_url)
    try:
        db = DatabaseVault(store, "/nonexistent")
        assert [m.line for m in search(db, Query(connector="slack"))] == [2]
        assert [m.line for m in search(db, Query(connector="gmail"))] == [1, 3]
        assert store.search_index().schema == "public"
    finally:
        store.close()


def test_verify_reports_facets_written_while_the_owner_had_another_function(pg_url, tmp_path):
    """The one lie the definitions cannot show: the owner puts a lying function in place, has the rows' facets
    computed again, and puts the migration's function back. Search through the (now checking out) indexes misses
    seq 7; `broker verify` asks the server which rows' stored facets differ from the function's, and says so."""
    store = PostgresStore(pg_url)
    try:
        store.append_lines("s-gmail", _session("s-gmail", 20, day="2026-09-22"))
    finally:
        store.close()
    args = ("verify", "--no-blobs", "--store", pg_url, "--vault", str(tmp_path / "v"))
    r = _broker(*args)
    assert r.returncode == 0 and "s-gmail: intact (20 entries)" in r.stdout, r.stdout + r.stderr
    with psycopg.connect(pg_url, autocommit=True) as conn:
        original = conn.execute("SELECT pg_catalog.pg_get_functiondef('public.journal_facets(bytea)'::regprocedure)"
                                ).fetchone()[0]
        conn.execute(LIAR)
        _rewrite_rows(conn)
        conn.execute(original)
        assert 7 not in candidate_seqs(conn, "public", "s-gmail", _facets_gmail())
    r = _broker(*args)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "s-gmail: intact (20 entries)" in r.stdout  # the chain itself is untouched
    assert "s-gmail: search index NOT intact: 1 row(s)" in r.stdout and "(seq 7)" in r.stdout, r.stdout
    r = _broker(*args, "--json")
    assert r.returncode == 1
    finding = [line for line in r.stdout.splitlines() if '"search_index"' in line]
    assert len(finding) == 1 and '"broken_at_seq":7' in finding[0], r.stdout


def test_verify_says_so_when_the_facet_check_fails_midway(pg_url, tmp_path, monkeypatch, capsys):
    """The facet check runs in a thread beside the chain's: a database that fails it (here: a store error from
    the query) is one line and exit 2, never a traceback and never exit 0."""
    from broker.cli import cli
    from broker.cli.exit_codes import run_cli
    from journal.store.interface import StoreError

    store = PostgresStore(pg_url)
    try:
        store.append_lines("s-gmail", _session("s-gmail", 5, day="2026-09-22"))
    finally:
        store.close()

    def fails(self, session):
        raise StoreError(f"database {self.shown}: the server went away")

    monkeypatch.setattr(PostgresStore, "stale_facets", fails)
    argv = ["broker", "verify", "--no-blobs", "--store", pg_url, "--vault", str(tmp_path / "v")]
    monkeypatch.setattr(sys, "argv", argv)
    assert run_cli(cli) == 2
    out = capsys.readouterr()
    (line,) = out.err.splitlines()
    assert line.startswith("broker: error: ") and line.endswith("the server went away"), out
