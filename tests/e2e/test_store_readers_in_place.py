"""Every reader on a PostgreSQL store reads it in place (no temporary pull) and says what it says on the same
lines pulled into a file vault: for an intact session and for one whose row the table owner edited (issue 26).

The database is a real server started by the tests (tests/support/postgres_server.py). Each reader runs twice,
`--store URL` and `--vault PULLED`; the outputs must be equal once the one thing that names where the entries
live (a path or the URL) is taken out.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import psycopg
import pytest

from tests.support import postgres_server as _pg
from tests.support.example_vault import SESSION, copy_example

postgres_server, pg_url = _pg.postgres_server, _pg.pg_url  # fixtures
ROOT = Path(__file__).resolve().parents[2]


def _broker(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "NO_COLOR": "1", **(env or {})}, timeout=300)


def _loaded(pg_url: str, tmp_path: Path) -> Path:
    """The example session pushed into the database, and pulled back into a file vault (returned)."""
    copy_example(tmp_path / "example")
    pushed = _broker("push", "--from", str(tmp_path / "example"), "--to", pg_url)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    return _pull(pg_url, tmp_path / "pulled")


def _pull(pg_url: str, target: Path) -> Path:
    pulled = _broker("pull", "--from", pg_url, "--to", str(target))
    assert "Traceback" not in pulled.stderr, pulled.stderr
    return target


def _tamper(pg_url: str, seq: int) -> None:
    """As the table's owner, with the append-only trigger off: change one value in row `seq`'s line."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        line = bytes(conn.execute("SELECT line FROM journal_entries WHERE session = %s AND seq = %s",
                                  (SESSION, seq)).fetchone()[0])
        edited = line.replace(b'"effect":"read"', b'"effect":"write"', 1)
        assert edited != line
        conn.execute("ALTER TABLE journal_entries DISABLE TRIGGER journal_entries_append_only")
        conn.execute("UPDATE journal_entries SET line = %s WHERE session = %s AND seq = %s", (edited, SESSION, seq))
        conn.execute("ALTER TABLE journal_entries ENABLE TRIGGER journal_entries_append_only")


READERS = [
    ("verify",),
    ("verify", "--json"),
    ("sessions", "--json"),
    ("show", SESSION),
    ("show", SESSION, "--json"),
    ("show", SESSION, "--seq", "3"),
    ("show", SESSION, "--seq", "5", "--json"),
    ("search", "--connector", "gmail"),
    ("search", "--effect", "write", "--json"),
    ("search", "--session", SESSION, "--text", "contract"),
    ("revert-plan", SESSION),
    ("revert-plan", SESSION, "--json"),
    ("trajectory", SESSION, "--json"),
    ("diff", SESSION, SESSION),
    ("export", SESSION, "--format", "har"),
    ("export", SESSION, "--format", "otel"),
    ("export", SESSION, "--format", "vcr"),
]


def _same(args: tuple[str, ...], pg_url: str, pulled: Path, cache: Path) -> None:
    env = {"XDG_CACHE_HOME": str(cache)}
    a = _broker(*args, "--store", pg_url, env=env)
    b = _broker(*args, "--vault", str(pulled), env=env)
    assert "Traceback" not in a.stderr, (args, a.stderr)
    assert a.returncode == b.returncode, (args, a.stdout, a.stderr, b.stdout, b.stderr)
    assert a.stdout.replace(pg_url, "WHERE") == b.stdout.replace(str(pulled), "WHERE"), args


@pytest.mark.parametrize("tampered", [False, True], ids=["intact", "tampered"])
def test_every_reader_on_the_store_says_what_it_says_on_the_pulled_vault(pg_url, tmp_path, tampered):
    pulled = _loaded(pg_url, tmp_path)
    if tampered:
        _tamper(pg_url, 5)
        pulled = _pull(pg_url, tmp_path / "pulled-tampered")
    for args in READERS:
        _same(args, pg_url, pulled, tmp_path / "cache")
    verdict = _broker("verify", "--store", pg_url)
    assert (verdict.returncode, "BROKEN at seq 5" in verdict.stdout) == ((1, True) if tampered else (0, False))


def test_replay_on_the_store_writes_the_same_views_outside_the_vault(pg_url, tmp_path):
    pulled = _loaded(pg_url, tmp_path)
    views = {}
    for name, where in (("store", ["--store", pg_url]), ("file", ["--vault", str(pulled)])):
        r = _broker("replay", SESSION, *where, "--out", str(tmp_path / name), "--json")
        assert r.returncode == 0, r.stderr
        summary = orjson.loads(r.stdout)
        folder = Path(summary.pop("views"))
        assert folder.parent == tmp_path / name
        views[name] = (summary, sorted(p.name for p in folder.iterdir()))
    assert views["store"] == views["file"]
    assert not (pulled / "views").exists() and not (ROOT / "vault" / "views").exists()


def test_no_reader_of_a_database_store_pulls_or_writes(pg_url, tmp_path):
    """No temporary vault appears (TMPDIR is watched) and the working directory stays empty."""
    _loaded(pg_url, tmp_path)
    tmp, work = tmp_path / "tmp", tmp_path / "work"
    tmp.mkdir()
    work.mkdir()
    env = {**os.environ, "NO_COLOR": "1", "TMPDIR": str(tmp), "BROKER_STORE": pg_url,
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    for args in (("verify",), ("sessions",), ("show", SESSION, "--seq", "2"), ("search", "--connector", "gmail"),
                 ("revert-plan", SESSION), ("trajectory", SESSION), ("diff", SESSION, SESSION),
                 ("export", SESSION, "--format", "har")):
        r = subprocess.run([sys.executable, "-m", "broker.cli", *args], capture_output=True, text=True, cwd=work,
                           env=env, timeout=300)
        assert r.returncode in (0, 1) and "Traceback" not in r.stderr, (args, r.stderr)
        assert list(tmp.iterdir()) == [] and list(work.iterdir()) == [], args
