"""The PostgreSQL store against its own writer role (`broker store migrate --grant ROLE`: SELECT and INSERT).

Whoever holds the broker's database role can insert any row the triggers let through. Readers (`verify
--store`, `pull`) must report a malformed row as the file verifier reports the same line in a vault (kind
and seq, the other sessions verified), never a traceback, exit 1 for broken and 2 only for usage; and the
chain trigger must hold whatever the role puts in its own search path.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import orjson
import psycopg
import pytest

from journal.canonical import canonical_bytes
from journal.store.postgres_store import PostgresStore
from journal.vault import Vault
from journal.verify import verify_session
from tests.support import postgres_server as _pg
from tests.support.journal_factories import fields

postgres_server, pg_url = _pg.postgres_server, _pg.pg_url  # fixtures
ROOT = Path(__file__).resolve().parents[2]


def _broker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, NO_COLOR="1"), timeout=180)


@pytest.fixture
def writer_url(pg_url) -> str:
    """The URL of a role granted as `broker store migrate --grant ROLE` grants it; the store holds two
    intact sessions, s1 (2 entries) and s2 (3)."""
    r = _broker("store", "migrate", "--store", pg_url)
    assert r.returncode == 0, r.stderr
    role = "w_" + pg_url.rsplit("/", 1)[1]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
    r = _broker("store", "migrate", "--store", pg_url, "--grant", role)
    assert r.returncode == 0, r.stderr
    with PostgresStore(pg_url).writer() as w:
        w.append_many([fields("s1", n=1), fields("s1", n=2), fields("s2", n=1), fields("s2", n=2), fields("s2", n=3)])
    return pg_url.replace("broker_admin@", f"{role}@")


def _head(conn, session: str) -> tuple[int, str]:
    return conn.execute("SELECT seq, hash FROM journal_entries WHERE session = %s ORDER BY seq DESC LIMIT 1",
                        (session,)).fetchone()


def _insert(url: str, session: str, line: bytes, *, seq: int | None = None, prev: str | None = None,
            digest: str = "f" * 64) -> None:
    """As the writer role: a row that the chain trigger accepts (the columns continue the head), holding `line`."""
    with psycopg.connect(url, autocommit=True) as conn:
        head_seq, head_hash = _head(conn, session)
        conn.execute("INSERT INTO journal_entries (session, seq, prev, hash, line) VALUES (%s, %s, %s, %s, %s)",
                     (session, seq or head_seq + 1, prev or head_hash, digest, line))


def _hashed_line(entry: dict) -> bytes:
    """A canonical line whose `hash` matches its content (so only the contract can be at fault)."""
    body = {k: v for k, v in entry.items() if k != "hash"}
    return canonical_bytes({**body, "hash": hashlib.sha256(canonical_bytes(body)).hexdigest()}) + b"\n"


def _twin(tmp_path: Path, lines: list[bytes], session: str = "s1") -> tuple[int | None, str | None]:
    """(broken_at_seq, kind) of the same lines in a file vault."""
    vault = Vault.create(tmp_path / "twin")
    vault.session_path(session).write_bytes(b"".join(lines))
    r = verify_session(vault, session)
    return r.broken_at_seq, r.kind


def _lines(url: str, session: str) -> list[bytes]:
    with psycopg.connect(url) as conn:
        return [bytes(r[0]) for r in conn.execute(
            "SELECT line FROM journal_entries WHERE session = %s ORDER BY seq", (session,))]


def _next_entry(url: str, session: str) -> dict:
    with psycopg.connect(url) as conn:
        seq, digest = _head(conn, session)
    return {**fields(session, n=seq + 1), "seq": seq + 1, "prev": digest}


def _check_reported(writer_url: str, pg_url: str, tmp_path: Path, kind: str, seq: int) -> None:
    assert _twin(tmp_path, _lines(pg_url, "s1")) == (seq, kind)
    for args in (["verify", "--store", writer_url], ["pull", "--from", writer_url, "--to", str(tmp_path / "pulled")]):
        r = _broker(*args)
        assert "Traceback" not in r.stderr, r.stderr
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert f"s1: BROKEN at seq {seq}: {kind}" in r.stdout, r.stdout
        if args[0] == "verify":
            assert "s2: intact (3 entries)" in r.stdout


def test_a_row_that_is_not_json_is_a_finding_at_its_seq(writer_url, pg_url, tmp_path):
    _insert(writer_url, "s1", b"this is not JSON\n")
    _check_reported(writer_url, pg_url, tmp_path, "not_canonical", 3)


def test_a_row_without_a_newline_is_a_finding_at_its_seq(writer_url, pg_url, tmp_path):
    _insert(writer_url, "s1", b"{}")
    _insert(writer_url, "s1", _hashed_line(_next_entry(pg_url, "s1")))
    r = _broker("verify", "--store", writer_url)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "s1: BROKEN at seq 3:" in r.stdout and "s2: intact (3 entries)" in r.stdout


def test_a_json_row_without_seq_is_a_contract_violation(writer_url, pg_url, tmp_path):
    entry = _next_entry(pg_url, "s1")
    del entry["seq"]
    _insert(writer_url, "s1", _hashed_line(entry))
    _check_reported(writer_url, pg_url, tmp_path, "contract_violation", 3)


def test_a_row_with_wrong_types_is_a_contract_violation(writer_url, pg_url, tmp_path):
    entry = _next_entry(pg_url, "s1")
    entry["seq"] = str(entry["seq"])
    _insert(writer_url, "s1", _hashed_line(entry))
    _check_reported(writer_url, pg_url, tmp_path, "contract_violation", 3)


def test_a_json_row_that_is_not_an_object_is_a_finding(writer_url, pg_url, tmp_path):
    _insert(writer_url, "s1", b"[1,2,3]\n")
    _check_reported(writer_url, pg_url, tmp_path, "contract_violation", 3)


def test_a_seq_gap_put_in_by_the_owner_is_reported_as_removed(writer_url, pg_url, tmp_path):
    """A gap the trigger would refuse, made by the table owner with the trigger off: the readers still see it."""
    entry = _next_entry(pg_url, "s1")
    entry["seq"], entry["prev"] = entry["seq"] + 1, "a" * 64  # seq 4 after seq 2, naming a seq 3 not there
    line = _hashed_line(entry)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE journal_entries DISABLE TRIGGER journal_entries_chain")
        conn.execute("INSERT INTO journal_entries (session, seq, prev, hash, line) VALUES (%s, %s, %s, %s, %s)",
                     ("s1", 4, entry["prev"], orjson.loads(line)["hash"], line))
        conn.execute("ALTER TABLE journal_entries ENABLE TRIGGER journal_entries_chain")
    _check_reported(writer_url, pg_url, tmp_path, "removed", 3)


# -- the chain trigger against what the writer role can create -----------------------------------------


def _gap_row(url: str) -> tuple:
    """s1's seq 4 after seq 2 (no seq 3), with a well-formed line."""
    entry = _next_entry(url, "s1")
    entry["seq"], entry["prev"] = entry["seq"] + 1, "a" * 64
    line = _hashed_line(entry)
    return ("s1", entry["seq"], entry["prev"], orjson.loads(line)["hash"], line)


_INSERT = "INSERT INTO public.journal_entries (session, seq, prev, hash, line) VALUES (%s, %s, %s, %s, %s)"


def _refused(conn, row: tuple) -> None:
    with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="gap"):
        conn.execute(_INSERT, row)


def test_a_temp_table_does_not_shadow_the_chain_triggers_table(writer_url, pg_url):
    row = _gap_row(pg_url)
    with psycopg.connect(writer_url, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE journal_entries (session text, seq bigint, prev text, hash text, line bytea)")
        conn.execute("INSERT INTO pg_temp.journal_entries VALUES (%s, 3, %s, %s, '')", ("s1", "b" * 64, "a" * 64))
        _refused(conn, row)
    assert len(_lines(pg_url, "s1")) == 2


def test_a_schema_first_in_the_writers_search_path_does_not_shadow_the_trigger(writer_url, pg_url):
    """A database where the writer role may create schemas: its own journal_entries, its own `-`, `=`, `<>` and
    repeat(), its schema first in its search path (even before pg_catalog), set for the role itself."""
    role = writer_url.split("://", 1)[1].split("@", 1)[0]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'GRANT CREATE ON DATABASE "{conn.info.dbname}" TO "{role}"')
    row = _gap_row(pg_url)
    with psycopg.connect(writer_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA evil")
        conn.execute("CREATE TABLE evil.journal_entries (session text, seq bigint, prev text, hash text, line bytea)")
        conn.execute("INSERT INTO evil.journal_entries VALUES (%s, 3, %s, %s, '')", ("s1", "b" * 64, "a" * 64))
        conn.execute("CREATE FUNCTION evil.repeat(text, integer) RETURNS text LANGUAGE sql AS $$ SELECT 'x' $$")
        conn.execute("CREATE FUNCTION evil.never_differs(text, text) RETURNS boolean LANGUAGE sql "
                     "AS $$ SELECT false $$")
        conn.execute("CREATE OPERATOR evil.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.never_differs)")
        conn.execute("CREATE FUNCTION evil.minus(bigint, integer) RETURNS bigint LANGUAGE sql "
                     "AS $$ SELECT $1 OPERATOR(pg_catalog.-) 2 $$")
        conn.execute("CREATE OPERATOR evil.- (LEFTARG = bigint, RIGHTARG = integer, FUNCTION = evil.minus)")
        conn.execute(f'ALTER ROLE "{role}" SET search_path = evil, pg_catalog, public')
        conn.execute("SET search_path = evil, pg_catalog, public")
        _refused(conn, row)
        fork = _next_entry(pg_url, "s1")
        fork["prev"] = "c" * 64  # a fork: only evil.<> would let it through
        line = _hashed_line(fork)
        with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="fork"):
            conn.execute(_INSERT, ("s1", fork["seq"], fork["prev"], orjson.loads(line)["hash"], line))
    with psycopg.connect(writer_url, autocommit=True) as conn:  # a new session: the role's own search_path
        _refused(conn, row)
    assert len(_lines(pg_url, "s1")) == 2


def test_an_existing_version_1_store_is_upgraded_by_migrate(pg_url):
    from journal.store.postgres_schema import CURRENT_VERSION, MIGRATIONS

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(MIGRATIONS[1])
        conn.execute("INSERT INTO journal_schema (version) VALUES (1)")
    r = _broker("store", "migrate", "--store", pg_url)
    assert r.returncode == 0 and f"schema version 1 -> {CURRENT_VERSION}" in r.stdout, r.stdout + r.stderr
    with psycopg.connect(pg_url, autocommit=True) as conn:
        config = conn.execute("SELECT proconfig FROM pg_proc WHERE proname = 'journal_chain_check'").fetchone()[0]
        assert config == ["search_path=pg_catalog, pg_temp"]


def test_a_session_name_that_maps_to_no_file_is_named_not_a_stop(writer_url, tmp_path):
    with psycopg.connect(writer_url, autocommit=True) as conn:
        conn.execute("INSERT INTO journal_sessions (session) VALUES (%s)", ("bad\x01name",))
    for args in (["verify", "--store", writer_url], ["pull", "--from", writer_url, "--to", str(tmp_path / "pulled")]):
        r = _broker(*args)
        assert "Traceback" not in r.stderr, r.stderr
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert "'bad\\x01name': BROKEN at seq 1: contract_violation" in r.stdout
        if args[0] == "verify":
            assert "s1: intact (2 entries)" in r.stdout and "s2: intact (3 entries)" in r.stdout
