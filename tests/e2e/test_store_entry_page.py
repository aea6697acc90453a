"""The inspector's entry page on a PostgreSQL store is two indexed queries whatever the session's length
(issue 26): the session's row and a two-row range of the primary key; no head, no count, no scan."""

from __future__ import annotations

import time

import click
import psycopg
from starlette.testclient import TestClient

from broker.cli.options import reading_vault
from broker.inspector import create_app
from journal.chain import GENESIS, chain_entry
from journal.store.postgres_store import PostgresStore
from tests.support import postgres_server as _pg
from tests.support.journal_factories import fields

postgres_server, pg_url = _pg.postgres_server, _pg.pg_url  # fixtures
ENTRIES = 3000


def _load(url: str) -> None:
    prev, lines = GENESIS, []
    for seq in range(1, ENTRIES + 1):
        entry, line = chain_entry(fields("s", n=seq), seq, prev)
        prev = entry["hash"]
        lines.append(line)
    store = PostgresStore(url)
    try:
        store.append_lines("s", lines)
        with store.connect() as conn:
            conn.execute("ANALYZE journal_entries")
    finally:
        store.close()


def test_an_entry_page_is_two_indexed_queries(pg_url, tmp_path, monkeypatch):
    _load(pg_url)
    sent: list[tuple[str, tuple]] = []
    real = psycopg.Connection.execute

    def execute(self, query, params=None, **kw):
        sent.append((str(query), tuple(params or ())))
        return real(self, query, params, **kw)

    with click.Context(click.Command("x")):
        client = TestClient(create_app(reading_vault(pg_url, str(tmp_path / "none"))), base_url="http://127.0.0.1")
        assert client.get("/api/session/head?session=s").json()["lines"] == ENTRIES  # connect, schema check
        monkeypatch.setattr(psycopg.Connection, "execute", execute)
        for seq in (ENTRIES, ENTRIES // 2, 1):
            sent.clear()
            r = client.get(f"/api/session/entry?session=s&seq={seq}")
            assert r.status_code == 200 and r.json()["entry"]["seq"] == seq
            assert (r.json()["prev_ts"] is None) == (seq == 1)
            assert len(sent) == 2, sent
        assert client.get(f"/api/session/entry?session=s&seq={ENTRIES + 1}").status_code == 404
    monkeypatch.undo()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for query, params in sent[:2]:
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + query, params))
            assert "Index" in plan and "Seq Scan" not in plan, plan


def test_a_row_rewritten_before_an_unchanged_head_is_not_answered_from_cache(pg_url, tmp_path):
    """The owner switches the append-only trigger off and rewrites a row in the middle: the head (seq, hash) stays
    the same, so a cache keyed on it would keep saying intact. The inspector's verdict must see the break."""
    _load(pg_url)
    with click.Context(click.Command("x")):
        client = TestClient(create_app(reading_vault(pg_url, str(tmp_path / "none"))), base_url="http://127.0.0.1")
        first = client.get("/api/session/verdict?session=s").json()
        assert first["intact"] is True, first
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("ALTER TABLE journal_entries DISABLE TRIGGER journal_entries_append_only")
            conn.execute("UPDATE journal_entries SET line = convert_to(replace(convert_from(line, 'UTF8'), "
                         "'\"seq\":1500,', '\"seq\":1500 ,'), 'UTF8') WHERE session = 's' AND seq = 1500")
            conn.execute("ALTER TABLE journal_entries ENABLE TRIGGER journal_entries_append_only")
        # the writer's statistics reach the server when its connection ends (closed above)
        for _ in range(100):
            again = client.get("/api/session/verdict?session=s").json()
            if not again["intact"]:
                break
            time.sleep(0.1)
        assert again["intact"] is False and again["broken_at_seq"] == 1500, again
