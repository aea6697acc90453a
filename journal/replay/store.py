"""Replay's spill store: what the views need, kept on disk (SQLite) instead of in memory.

What grows with the session's length lives here, not in memory: per entry the engine appends a row
(its views.json line), per touch a row, per write its whole record (before-state, intended, actual,
bodies) and per plan step its fields (a fold for the plan alone appends only the steps). Resources
are folded in memory (one object per distinct resource) and written here once, when the fold ends,
in sort-key order. The views are then streamed from the store in sorted resource order (views.py),
one resource at a time.

The database lives in a private temporary folder (`.replay-*` beside the session's views folder,
so it is on the vault's file system, not in a RAM-backed /tmp), written without a journal or
fsync (it is scratch), and removed when the Replay is closed or collected.

Resource keys are stored as a sort key that orders like Python tuples of strings: each part's
UTF-8 with NUL escaped as NUL 1, followed by NUL NUL (so `ORDER BY sk` is `sorted(keys)`).
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
import weakref
from collections.abc import Generator
from pathlib import Path

import orjson

_SCHEMA = """
CREATE TABLE entries(pos INTEGER PRIMARY KEY, seq INTEGER, nres INTEGER, trusted INTEGER, json BLOB, keys BLOB);
CREATE TABLE touches(rid INTEGER, pos INTEGER, role TEXT, op TEXT, ok INTEGER, grade TEXT, ts TEXT,
                     failure TEXT, trusted INTEGER);
CREATE TABLE writes(rid INTEGER, pos INTEGER, role TEXT, op TEXT, failure TEXT, step INTEGER, flags TEXT,
                    data BLOB);
CREATE TABLE steps(id INTEGER PRIMARY KEY, rid INTEGER, pos INTEGER, data BLOB);
CREATE TABLE lifecycle(rid INTEGER, pos INTEGER, what TEXT);
CREATE TABLE resources(rid INTEGER PRIMARY KEY, sk BLOB UNIQUE, parent_sk BLOB, key BLOB, name TEXT,
                       link TEXT, data BLOB);
CREATE TABLE unreadable(pos INTEGER, why TEXT);
CREATE TABLE files(name TEXT PRIMARY KEY);
CREATE TABLE previous(name TEXT PRIMARY KEY);
"""
_INDEXES = """
CREATE INDEX touches_rid ON touches(rid);
CREATE INDEX writes_rid ON writes(rid);
CREATE INDEX lifecycle_rid ON lifecycle(rid);
CREATE INDEX resources_parent ON resources(parent_sk, sk);
"""
_RENUMBER_STEPS = """
BEGIN;
CREATE TEMP TABLE step_map(old INTEGER PRIMARY KEY, new INTEGER NOT NULL);
INSERT INTO step_map SELECT id, ROW_NUMBER() OVER (ORDER BY pos, id) FROM steps;
UPDATE writes SET step = (SELECT new FROM step_map WHERE old = writes.step) WHERE step IS NOT NULL;
CREATE TABLE steps_renumbered(id INTEGER PRIMARY KEY, rid INTEGER, pos INTEGER, data BLOB);
INSERT INTO steps_renumbered SELECT m.new, s.rid, s.pos, s.data FROM steps s JOIN step_map m ON m.old = s.id
    ORDER BY m.new;
DROP TABLE steps;
ALTER TABLE steps_renumbered RENAME TO steps;
DROP TABLE step_map;
COMMIT;
"""
"""Steps of two shares carry ids from two ranges; the plan numbers them in seq order (the serial fold's
creation order: seq, then the order one entry made them), 1 to n."""
_BATCH = 1000


def sort_key(key: tuple) -> bytes:
    """Bytes that order like the tuple of strings `key` (see the module docstring)."""
    return b"".join(str(p).encode("utf-8", "surrogatepass").replace(b"\x00", b"\x00\x01") + b"\x00\x00"
                    for p in key)


def dumps(value: object) -> bytes:
    """JSON for the store: insertion order kept (replay's state merges are order-sensitive nowhere, but
    a round trip must give back what went in)."""
    return orjson.dumps(value)


class Store:
    """One replay's scratch database (see the module docstring)."""

    def __init__(self, near: Path | None = None) -> None:
        self.dir = _scratch_folder(near)
        # Any thread may read a finished replay (the inspector serves it from a thread pool); SQLite
        # is built serialized here (sqlite3.threadsafety == 3), so one connection is safe to share.
        self.path = self.dir / "replay.sqlite"
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.inherited: sqlite3.Connection | None = None  # a forked child's copy of its parent's connection
        for pragma in ("journal_mode=OFF", "synchronous=OFF", "temp_store=FILE", "cache_size=-8000",
                       "locking_mode=EXCLUSIVE"):
            self.db.execute(f"PRAGMA {pragma}")
        self.db.executescript(_SCHEMA)
        self.db.execute("BEGIN")
        self._finalizer = weakref.finalize(self, _remove, self.db, self.dir)
        self._pending: dict[str, list[tuple]] = {name: [] for name in _INSERTS}
        self.finished = False

    # -- appending ------------------------------------------------------------------------------------

    def add(self, table: str, row: tuple) -> None:
        rows = self._pending[table]
        rows.append(row)
        if len(rows) >= _BATCH:
            self._flush(table)

    def pending(self, table: str) -> list[tuple]:
        """The list of `table`'s rows not yet written: a caller may append to it, then call `flush`."""
        return self._pending[table]

    def _flush(self, table: str) -> None:
        rows = self._pending[table]
        if rows:
            self.db.executemany(_INSERTS[table], rows)
            rows.clear()

    def flush(self) -> None:
        for table in self._pending:
            self._flush(table)

    def add_resources(self, rows: list[tuple]) -> None:
        """Resource rows (rid, sk, parent_sk, key, name, link, data), each once, at the end of the fold."""
        self.db.executemany("INSERT INTO resources VALUES (?,?,?,?,?,?,?)", rows)

    def finish(self) -> None:
        """Everything appended: build the indexes the views read by."""
        self.flush()
        if not self.finished:
            self.db.executescript(_INDEXES)
            self.finished = True

    def hand_over(self) -> None:
        """Commit and close, leaving the database for another process to absorb (split.py): a forked
        partner's store, which lives inside its parent's folder and goes when that one does."""
        self.flush()
        if self.db.in_transaction:
            self.db.execute("COMMIT")
        self._finalizer.detach()
        self.db.close()

    def absorb(self, other: Path) -> None:
        """Append every row of another store of the same replay (a partner's share of the fold, split.py),
        then number the plan's steps from 1 in seq order again, and remove the other store's folder when it is
        one inside this store's (a partner's copy would otherwise take its disk space for as long as the
        Replay lives). A resource both stores hold raises sqlite3.IntegrityError (the shares were not disjoint:
        the caller folds serially instead; the folder goes with this store's)."""
        self.flush()
        if self.db.in_transaction:
            self.db.execute("COMMIT")
        self.db.execute("ATTACH DATABASE ? AS partner", (str(other),))
        try:
            self.db.execute("BEGIN")
            for table in ("entries", "touches", "writes", "lifecycle", "steps", "resources"):
                self.db.execute(f"INSERT INTO {table} SELECT * FROM partner.{table}")  # noqa: S608 - fixed names
            self.db.execute("COMMIT")
        finally:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            self.db.execute("DETACH DATABASE partner")
        self.db.executescript(_RENUMBER_STEPS)
        if other.parent.parent == self.dir:
            shutil.rmtree(other.parent, ignore_errors=True)

    def share(self) -> None:
        """Let another process read the database (forked.py): commit, and drop the exclusive lock."""
        self.finish()
        if self.db.in_transaction:
            self.db.execute("COMMIT")
        self.db.execute("PRAGMA locking_mode=NORMAL")
        self.db.execute("SELECT COUNT(*) FROM previous").fetchall()  # the next access releases the lock

    # -- reading --------------------------------------------------------------------------------------

    def rows(self, sql: str, params: tuple = ()) -> Generator[tuple, None, None]:
        """Rows of a query, streamed (a cursor of its own, so queries can be read side by side)."""
        self.flush()
        cur = self.db.cursor()
        cur.arraysize = 512
        cur.execute(sql, params)
        while batch := cur.fetchmany():
            yield from batch

    def one(self, sql: str, params: tuple = ()) -> tuple | None:
        self.flush()
        return self.db.execute(sql, params).fetchone()

    def scratch_path(self, name: str) -> Path:
        return self.dir / name

    def close(self) -> None:
        self._finalizer()


_INSERTS = {
    "entries": "INSERT INTO entries VALUES (?,?,?,?,?,?)",
    "touches": "INSERT INTO touches VALUES (?,?,?,?,?,?,?,?,?)",
    "writes": "INSERT INTO writes VALUES (?,?,?,?,?,?,?,?)",
    "steps": "INSERT INTO steps VALUES (?,?,?,?)",
    "lifecycle": "INSERT INTO lifecycle VALUES (?,?,?)",
    "unreadable": "INSERT INTO unreadable VALUES (?,?)",
    "files": "INSERT OR IGNORE INTO files VALUES (?)",
    "previous": "INSERT OR IGNORE INTO previous VALUES (?)",
}


def _scratch_folder(near: Path | None) -> Path:
    """A private folder in `near` (created if need be), else in the system's temporary folder."""
    if near is not None:
        try:
            near.mkdir(parents=True, exist_ok=True)
            return Path(tempfile.mkdtemp(prefix=".replay-", dir=near))
        except OSError:
            pass
    return Path(tempfile.mkdtemp(prefix=".replay-"))


def _remove(db: sqlite3.Connection, folder: Path) -> None:
    try:
        db.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


__all__ = ["Store", "dumps", "sort_key"]
