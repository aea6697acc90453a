"""The journal in PostgreSQL: many brokers on many hosts append to one store (see README.md here).

- Appending: one transaction per batch. Per session, in sorted order: an advisory transaction lock
  on the session, read the head (last seq and hash), chain the entries with journal/chain.py, COPY
  them in. The commit returns with synchronous_commit on: then, and only then, are they durable
  and returned. A lost race (a unique-key or chain-trigger refusal) rolls back and retries from the
  new head; it is never papered over.
- Blobs: streamed in 1 MiB chunks in their own transaction, committed before the entry naming them.
- A database that is unreachable or refusing is a StoreError for the calls at hand (the broker then
  answers 502 under `block`); the next call reconnects. Nothing is stopped for good: a failed
  transaction committed nothing, unlike a failed fsync.
"""

from __future__ import annotations

import hashlib
import logging
import select
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson

from journal.append_pipeline import DEDUPE_LINES, AppendPipeline, Lane, Pending, Recent, chain_group, recent_fields
from journal.blobstore import CHUNK, WriterBackedBlobs, ref_object
from journal.bodies import LINE_LIMIT
from journal.chain import GENESIS
from journal.entry import format_ts
from journal.shown_url import display_url
from journal.store.interface import BlobErased, StoreError, Tombstone
from journal.store.postgres_schema import CURRENT_VERSION, MIGRATIONS, OLDEST_USABLE, SCHEMA_LOCK, grant_writer_sql
from journal.store.postgres_search import (
    SEQ_PAGE,
    Facets,
    IndexCheck,
    candidate_seqs,
    check_index,
    lines_of,
    stale_facets,
)
from journal.vault import SessionIdError, session_filename
from journal.writer import JournalError

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 3
"""Seconds to wait for the database before a call is refused (the broker answers 502 under block)."""
RETRY_INTERVAL = 0.5
"""After a failed connection, calls are refused for this long before the next attempt."""
PING_INTERVAL = 0.25
"""check_session asks the server (SELECT 1) when nothing has been heard from it for this long."""
TCP_DEFAULTS = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 3, "keepalives_count": 3,
                "tcp_user_timeout": 5000}
"""So a server that vanished from the network (no reset) is noticed in seconds, not after TCP's
minutes of retransmissions: a ping or commit waits at most about 5 s. The URL's own values win."""
RACE_RETRIES = 20
PAGE = 500


def _psycopg():
    try:
        import psycopg
    except ImportError:  # pragma: no cover - a dependency of the project
        raise StoreError("the PostgreSQL store needs psycopg 3: pip install 'psycopg[binary]'") from None
    return psycopg


def _race(exc: BaseException) -> bool:
    """A refusal another writer caused (unique key, or the chain trigger seeing a new head)."""
    sqlstate = getattr(exc, "sqlstate", None)
    return sqlstate in ("23505", "23000")


def _file_order(session: str) -> tuple[int, str]:
    """The file vault's order; an id no file can be named for (a row anyone with INSERT could add) last."""
    try:
        return 0, session_filename(session)
    except SessionIdError:
        return 1, session


class PostgresStore:
    """A journal store in one PostgreSQL database. Thread-safe; connections are opened as needed."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.shown = display_url(url)
        self._schema_checked = False
        self._index_check: IndexCheck | None = None
        self._idle: list[tuple[Any, float]] = []  # (connection, when it was handed back)
        self._lock = threading.Lock()

    # -- connections ------------------------------------------------------------------------

    def connect(self, *, autocommit: bool = True, check_schema: bool = True):
        psycopg = _psycopg()
        try:
            given = psycopg.conninfo.conninfo_to_dict(self.url)
            extra = {k: v for k, v in {**TCP_DEFAULTS, "connect_timeout": CONNECT_TIMEOUT,
                                       "application_name": "connector-broker"}.items() if k not in given}
            conn = psycopg.connect(self.url, autocommit=autocommit, **extra)
            # Durable means the commit returned with synchronous_commit on, whatever the server default.
            conn.execute("SET synchronous_commit = on")
            if not autocommit:
                conn.commit()
        except psycopg.Error as exc:
            raise StoreError(f"database {self.shown} unreachable or refusing: {_first_line(exc)}") from None
        if check_schema and not self._schema_checked:
            try:
                self._ensure_schema(conn)
            except BaseException:
                conn.close()
                raise
            self._schema_checked = True
        return conn

    @contextmanager
    def _pooled(self):
        """A connection (autocommit) for readers and blob uploads, returned to a small idle list."""
        psycopg = _psycopg()
        with self._lock:
            conn, since = self._idle.pop() if self._idle else (None, 0.0)
        if conn is not None and time.monotonic() - since > PING_INTERVAL:
            try:
                conn.execute("SELECT 1")  # an idle connection may have been lost to a server restart
            except psycopg.Error:
                conn.close()
        if conn is None or conn.closed or conn.broken:
            conn = self.connect()
        try:
            yield conn
        except psycopg.OperationalError as exc:
            conn.close()
            raise StoreError(f"database {self.shown} unreachable or refusing: {_first_line(exc)}") from None
        except psycopg.Error as exc:
            raise StoreError(f"database {self.shown}: {_first_line(exc)}") from None
        finally:
            if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                try:
                    conn.rollback()
                except psycopg.Error:
                    conn.close()
            with self._lock:
                if len(self._idle) < 4 and not conn.closed and not conn.broken:
                    self._idle.append((conn, time.monotonic()))  # used again at once: no ping (a page's queries)
                    conn = None
            if conn is not None:
                conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn, _ in idle:
            conn.close()

    # -- schema -----------------------------------------------------------------------------

    def schema_version(self, conn) -> int:
        # pg_tables, not to_regclass: a fresh MVCC read sees a table another migrator just committed
        if not conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = 'journal_schema'"
        ).fetchone()[0]:
            return 0
        return conn.execute("SELECT coalesce(max(version), 0) FROM journal_schema").fetchone()[0]

    def _ensure_schema(self, conn) -> None:
        """Create the schema on first use; refuse one older than OLDEST_USABLE (`broker store migrate`) or a newer
        one. A version-2 store is used as it is (its search reads every row: journal/store/postgres_search.py)."""
        version = self.schema_version(conn)
        if version == 0:
            self.migrate(conn)
            return
        if version < OLDEST_USABLE:
            raise StoreError(f"{self.shown} holds journal schema version {version}; this broker needs "
                             f"{CURRENT_VERSION}: run `broker store migrate --store URL`")
        if version > CURRENT_VERSION:
            raise StoreError(f"{self.shown} holds journal schema version {version}, newer than this broker "
                             f"({CURRENT_VERSION}); upgrade the broker")

    def migrate(self, conn=None) -> tuple[int, int]:
        """Bring the schema to the current version, under an advisory lock; (before, after)."""
        own = conn is None
        if own:
            conn = self.connect(check_schema=False)
        psycopg = _psycopg()
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                before = self.schema_version(conn)
                if before > CURRENT_VERSION:
                    raise StoreError(f"{self.shown} holds schema version {before}, newer than this broker")
                for version in range(before + 1, CURRENT_VERSION + 1):
                    conn.execute(MIGRATIONS[version])
                    conn.execute("INSERT INTO journal_schema (version) VALUES (%s)", (version,))
        except psycopg.errors.InsufficientPrivilege as exc:
            raise StoreError(f"{self.shown}: cannot create or upgrade the journal schema ({_first_line(exc)}); "
                             "run `broker store migrate --store URL` as the database owner") from None
        except psycopg.Error as exc:
            raise StoreError(f"{self.shown}: schema migration failed: {_first_line(exc)}") from None
        finally:
            if own:
                conn.close()
        self._schema_checked = True
        return before, CURRENT_VERSION

    def grant_writer(self, role: str) -> None:
        """Give a broker's role SELECT and INSERT on the journal tables (no UPDATE, no DELETE)."""
        with self._pooled() as conn, conn.transaction():
            for stmt in grant_writer_sql(role):
                conn.execute(stmt)

    # -- writing ----------------------------------------------------------------------------

    def writer(self, *, durable: bool = True, line_limit: int = LINE_LIMIT) -> PostgresWriter:
        return PostgresWriter(self, durable=durable, line_limit=line_limit)

    def append_lines(self, session: str, lines: Iterable[bytes]) -> int:
        """Add lines chained elsewhere (push), verbatim, PAGE per transaction; each must continue the head."""
        _session_ok(session)
        count = 0
        page: list[tuple[int, str, str, bytes]] = []
        with self._pooled() as conn:
            for line in lines:
                entry = orjson.loads(line)
                page.append((entry["seq"], entry["prev"], entry["hash"], line))
                if len(page) >= PAGE:
                    count += self._insert_lines(conn, session, page)
                    page = []
            if page:
                count += self._insert_lines(conn, session, page)
        return count

    def _insert_lines(self, conn, session: str, page: list[tuple[int, str, str, bytes]]) -> int:
        with conn.transaction():
            seq, prev = _lock_head(conn, session)
            first_seq, first_prev = page[0][0], page[0][1]
            if first_seq != seq + 1 or first_prev != prev:
                raise StoreError(f"session {session!r}: seq {first_seq} does not continue {self.shown} at seq {seq}")
            if seq == 0:
                conn.execute("INSERT INTO journal_sessions (session) VALUES (%s) ON CONFLICT DO NOTHING", (session,))
            _copy(conn, [(session, s, p, h, line) for s, p, h, line in page])
        return len(page)

    # -- reading ----------------------------------------------------------------------------

    def sessions(self) -> list[str]:
        with self._pooled() as conn:
            names = [r[0] for r in conn.execute("SELECT session FROM journal_sessions")]
        return sorted(names, key=_file_order)  # the file vault's order

    def head(self, session: str) -> tuple[int, str]:
        with self._pooled() as conn:
            return _head(conn, session)

    def head_and_changes(self, session: str) -> tuple[int, str, tuple[int, int, int]]:
        """The session's head (seq, hash) and what says whether any entry row was changed in place since: the
        table's file node (a rewrite or TRUNCATE makes a new one) and the server's count of rows updated and
        deleted in it (append-only: both stay 0 unless an owner switched the triggers off). One query. A reader
        keeping something derived from the rows (the inspector's verdicts) compares all three: a head alone stays
        the same when a row before it is rewritten. The counts are the statistics collector's, which a backend
        reports when its transaction ends (at the latest some seconds later, or when it disconnects); resetting
        them takes a superuser."""
        with self._pooled() as conn:
            row = conn.execute(
                "SELECT e.seq, e.hash, pg_catalog.pg_relation_filenode('journal_entries'::regclass), "
                "COALESCE(s.n_tup_upd, 0), COALESCE(s.n_tup_del, 0) "
                "FROM (SELECT 1) one "
                "LEFT JOIN LATERAL (SELECT seq, hash FROM journal_entries WHERE session = %s "
                "ORDER BY seq DESC LIMIT 1) e ON true "
                "LEFT JOIN pg_catalog.pg_stat_user_tables s ON s.relid = 'journal_entries'::regclass",
                (session,)).fetchone()
        seq, digest = (row[0], row[1]) if row[0] is not None else (0, GENESIS)
        return seq, digest, (int(row[2] or 0), int(row[3]), int(row[4]))

    def iter_lines(self, session: str) -> Iterator[bytes]:
        with self._pooled() as conn:
            if conn.execute("SELECT 1 FROM journal_sessions WHERE session = %s", (session,)).fetchone() is None:
                raise StoreError(f"no session {session!r} in {self.shown}")
        yield from self.lines_after(session, 0)

    def iter_entries(self, session: str) -> Iterator[dict]:
        for line in self.iter_lines(session):
            yield orjson.loads(line)

    def lines_after(self, session: str, seq: int = 0, last_seq: int | None = None, *,
                    page: int = PAGE) -> Iterator[bytes]:
        """The session's lines after seq `seq` (up to `last_seq`), in seq order; nothing for a session with no
        entries. Keyset paging on the primary key (session, seq): each page is one index range scan of `page`
        rows on a pooled connection, so a reader holds one page in memory and no transaction open between
        pages, whatever the session's length."""
        top = last_seq if last_seq is not None else 2**63 - 1
        while True:
            with self._pooled() as conn:
                rows = conn.execute(
                    "SELECT seq, line FROM journal_entries WHERE session = %s AND seq > %s AND seq <= %s "
                    "ORDER BY seq LIMIT %s",
                    (session, seq, top, page),
                ).fetchall()
            for row_seq, line in rows:
                yield bytes(line)
                seq = row_seq
            if len(rows) < page:
                return

    def matching_lines(self, session: str, needles: list[bytes], *, page: int = PAGE) -> Iterator[tuple[int, bytes]]:
        """(seq, line) of the session's rows whose line holds every one of `needles`, in seq order, keyset
        paged on the primary key: the database does the filtering, only matching rows are sent."""
        cond = "".join(" AND position(%s::bytea in line) > 0" for _ in needles)
        seq = 0
        while True:
            with self._pooled() as conn:
                rows = conn.execute(
                    f"SELECT seq, line FROM journal_entries WHERE session = %s AND seq > %s{cond} "
                    "ORDER BY seq LIMIT %s",
                    (session, seq, *needles, page),
                ).fetchall()
            for row_seq, line in rows:
                data = bytes(line)
                yield row_seq, data if data.endswith(b"\n") else data + b"\n"
                seq = row_seq
            if len(rows) < page:
                return

    def search_index(self) -> IndexCheck:
        """Whether search may narrow by the facet indexes (journal/store/postgres_search.py): checked once per
        store; when it may not, a warning says why and search reads every row (`matching_lines`)."""
        with self._lock:
            done = self._index_check
        if done is None:
            with self._pooled() as conn:
                done = check_index(conn)
            if done.schema is None:
                log.warning("search reads every row of %s: %s", self.shown, done.why)
            with self._lock:
                self._index_check = done
        return done

    def facet_candidates(self, session: str, facets: Facets) -> list[int] | None:
        """The seqs (in order) of the session's rows the facet indexes leave as candidates: one index lookup, no
        row read; None when the indexes are not to be trusted (then `matching_lines`)."""
        schema = self.search_index().schema
        if schema is None:
            return None
        with self._pooled() as conn:
            return candidate_seqs(conn, schema, session, facets)

    def stale_facets(self, session: str) -> tuple[int, list[int]] | None:
        """(count, first seqs) of the session's rows whose stored search facets lie (`postgres_search.stale_facets`);
        None when the indexes are not trusted anyway (search then reads every row, so nothing can be hidden)."""
        schema = self.search_index().schema
        if schema is None:
            return None
        with self._pooled() as conn:
            return stale_facets(conn, schema, session)

    def candidate_lines(self, session: str, seqs: list[int], needles: list[bytes]) -> Iterator[tuple[int, bytes]]:
        """(seq, line) of the rows `seqs` (from `facet_candidates`) that hold every needle, in seq order, SEQ_PAGE
        rows of the primary key per query."""
        schema = self.search_index().schema
        assert schema is not None
        for at in range(0, len(seqs), SEQ_PAGE):
            with self._pooled() as conn:
                rows = lines_of(conn, schema, session, seqs[at : at + SEQ_PAGE], needles)
            for seq, data in rows:
                yield seq, data if data.endswith(b"\n") else data + b"\n"

    def has_session(self, session: str) -> bool:
        with self._pooled() as conn:
            return conn.execute("SELECT 1 FROM journal_sessions WHERE session = %s", (session,)).fetchone() is not None

    def line_at(self, session: str, seq: int) -> bytes | None:
        """The line of the row (session, seq): one primary-key lookup."""
        with self._pooled() as conn:
            row = conn.execute("SELECT line FROM journal_entries WHERE session = %s AND seq = %s",
                               (session, seq)).fetchone()
        return bytes(row[0]) if row else None

    def size_of(self, session: str) -> int:
        """The bytes of the session's lines as a pulled file holds them (a row lacking its final newline gets
        one there): one pass over the session's rows in the database, nothing sent but the sum."""
        with self._pooled() as conn:
            return int(conn.execute(
                "SELECT coalesce(sum(octet_length(line) + CASE WHEN octet_length(line) > 0 AND "
                "get_byte(line, octet_length(line) - 1) = 10 THEN 0 ELSE 1 END), 0) FROM journal_entries "
                "WHERE session = %s", (session,)).fetchone()[0])

    # -- blobs ------------------------------------------------------------------------------

    def has_blob(self, digest: str) -> bool:
        with self._pooled() as conn:
            return conn.execute("SELECT 1 FROM journal_blobs WHERE sha256 = %s", (digest,)).fetchone() is not None

    def blob_digests(self) -> Iterator[str]:
        """Every blob with a row, tombstone or not: a tombstone is a claim (anyone with INSERT can write one),
        so bytes still held are offered; `read_blob` says BlobErased when they are really gone."""
        with self._pooled() as conn:
            rows = conn.execute("SELECT sha256 FROM journal_blobs ORDER BY sha256").fetchall()
        for (digest,) in rows:
            yield digest

    def read_blob(self, digest: str) -> Iterator[bytes]:
        with self._pooled() as conn:
            row = conn.execute("SELECT chunks, upload FROM journal_blobs WHERE sha256 = %s", (digest,)).fetchone()
            t = self._tombstone(conn, digest)
            if row is None:
                if t is not None:
                    raise BlobErased(t)
                raise StoreError(f"blob {digest} is missing from {self.shown}")
            chunks, upload = row
            for n in range(chunks):
                got = conn.execute(
                    "SELECT data FROM journal_blob_chunks WHERE upload = %s AND n = %s", (upload, n)
                ).fetchone()
                if got is None:
                    if t is not None:
                        raise BlobErased(t)
                    raise StoreError(f"blob {digest}: chunk {n} is missing from {self.shown}")
                yield bytes(got[0])

    def put_blob(self, chunks: Iterable[bytes]) -> dict:
        return PostgresBlobs(self).put_stream(chunks)

    def _tombstone(self, conn, digest: str) -> Tombstone | None:
        row = conn.execute(
            "SELECT sha256, size, erased_at, erased_by, reason, note FROM journal_tombstones WHERE sha256 = %s",
            (digest,),
        ).fetchone()
        return Tombstone(*row) if row else None

    def tombstone(self, digest: str) -> Tombstone | None:
        with self._pooled() as conn:
            return self._tombstone(conn, digest)

    def tombstones(self) -> Iterator[Tombstone]:
        with self._pooled() as conn:
            rows = conn.execute(
                "SELECT sha256, size, erased_at, erased_by, reason, note FROM journal_tombstones ORDER BY sha256"
            ).fetchall()
        for row in rows:
            yield Tombstone(*row)

    def erase_blob(self, digest: str, *, reason: str, by: str, signer: object | None = None) -> Tombstone:
        """Tombstone and chunk deletion in one transaction, then VACUUM so the bytes leave the table files."""
        with self._pooled() as conn:
            with conn.transaction():
                existing = self._tombstone(conn, digest)
                row = conn.execute("SELECT size FROM journal_blobs WHERE sha256 = %s", (digest,)).fetchone()
                if existing is None and row is None:
                    raise StoreError(f"no blob {digest} in {self.shown}")
                t = existing or Tombstone(digest, row[0], format_ts(), by, reason).signed(signer)
                self._put_tombstone(conn, t)
            self._vacuum(conn)
        return t

    def put_tombstone(self, tombstone: Tombstone) -> None:
        with self._pooled() as conn:
            with conn.transaction():
                self._put_tombstone(conn, tombstone)
            self._vacuum(conn)

    @staticmethod
    def _put_tombstone(conn, t: Tombstone) -> None:
        conn.execute(
            "INSERT INTO journal_tombstones (sha256, size, erased_at, erased_by, reason, note) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (sha256) DO NOTHING",
            (t.sha256, t.size, t.erased_at, t.erased_by, t.reason, t.note),
        )
        conn.execute(
            "DELETE FROM journal_blob_chunks WHERE upload = (SELECT upload FROM journal_blobs WHERE sha256 = %s)",
            (t.sha256,),
        )

    def _vacuum(self, conn) -> None:
        psycopg = _psycopg()
        try:
            conn.execute("VACUUM journal_blob_chunks")
        except psycopg.Error as exc:
            log.warning("erased bytes stay in dead rows until the next VACUUM of journal_blob_chunks "
                        "(this role could not run it: %s)", _first_line(exc))


class PostgresBlobWriter:
    """One blob streamed into the database: chunks inserted as they fill, one transaction, dedupe by rollback."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._conn = store.connect(autocommit=False)
        self._upload = uuid.uuid4()
        self._hash = hashlib.sha256()
        self._buf = bytearray()
        self._n = 0
        self.size = 0
        self._done = False

    def write(self, chunk: bytes) -> None:
        if not chunk:
            return
        self._hash.update(chunk)
        self.size += len(chunk)
        self._buf += chunk
        while len(self._buf) >= CHUNK:
            self._flush(bytes(self._buf[:CHUNK]))
            del self._buf[:CHUNK]

    def _flush(self, data: bytes) -> None:
        try:
            self._conn.execute(
                "INSERT INTO journal_blob_chunks (upload, n, data) VALUES (%s, %s, %s)", (self._upload, self._n, data)
            )
        except _psycopg().Error as exc:
            self.abort()
            raise StoreError(f"cannot store blob in {self._store.shown}: {_first_line(exc)}") from None
        self._n += 1

    def commit(self) -> dict:
        if self._done:
            raise StoreError("blob already committed or aborted")
        if self._buf:
            self._flush(bytes(self._buf))
            self._buf.clear()
        digest = self._hash.hexdigest()
        try:
            row = self._conn.execute(
                "INSERT INTO journal_blobs (sha256, size, chunks, upload) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (sha256) DO NOTHING RETURNING sha256", (digest, self.size, self._n, self._upload),
            ).fetchone()
            if row is None:
                self._conn.rollback()  # the same bytes are stored already: drop this copy
            else:
                self._conn.commit()
        except _psycopg().Error as exc:
            raise StoreError(f"cannot store blob {digest} in {self._store.shown}: {_first_line(exc)}") from None
        finally:
            self._done = True
            self._conn.close()
        return ref_object(digest, self.size)

    def abort(self) -> None:
        if not self._done:
            self._done = True
            try:
                self._conn.rollback()
            except _psycopg().Error:
                pass
            self._conn.close()

    def __enter__(self) -> PostgresBlobWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()

    def __del__(self) -> None:
        if not getattr(self, "_done", True):
            self.abort()


class PostgresBlobs(WriterBackedBlobs):
    """The blob sink journal/bodies.py spills into (as BlobStore does for a vault)."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    def open_writer(self) -> PostgresBlobWriter:
        return PostgresBlobWriter(self.store)

    def has_blob(self, digest: str) -> bool:
        return self.store.has_blob(digest)


class PostgresWriter(AppendPipeline):
    """JournalWriter's interface over a PostgresStore: the storage part of journal/append_pipeline.py.
    One group-commit lane for the whole writer: a group is one transaction, whatever its sessions."""

    def __init__(self, store: PostgresStore, *, durable: bool = True, line_limit: int = LINE_LIMIT) -> None:
        self.store = store
        self.blobs = PostgresBlobs(store)
        self.durable = durable
        self.line_limit = line_limit
        self.on_durable: Callable[[str, list[dict]], None] | None = None  # as JournalWriter's (autoseal)
        self.retries = 0  # lost races retried (for tests and the benchmark)
        self.commits = 0  # transactions committed
        self._conn = None
        self._lock = threading.Lock()  # the connection
        self._lane = Lane()
        self._down: StoreError | None = None
        self._retry_at = 0.0
        self._heard = 0.0

    def _connection(self):
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        now = time.monotonic()
        if self._down is not None and now < self._retry_at:
            raise self._down
        try:
            conn = self.store.connect()
            if not self.durable:
                conn.execute("SET synchronous_commit = off")
        except StoreError as exc:
            self._down, self._retry_at = exc, now + RETRY_INTERVAL
            raise
        if self._down is not None:
            log.warning("database %s is back; recording resumes", self.store.shown)
        self._down, self._conn, self._heard = None, conn, time.monotonic()
        return conn

    def _lost(self, exc: BaseException) -> StoreError:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        err = StoreError(f"database {self.store.shown} unreachable or refusing: {_first_line(exc)}")
        self._down, self._retry_at = err, time.monotonic() + RETRY_INTERVAL
        log.error("%s", err)
        return err

    def lines_after(self, session: str, seq: int = 0) -> Iterator[bytes]:
        return self.store.lines_after(session, seq)

    def checkpoint_vault(self) -> None:
        """A database keeps no checkpoints: they go into a vault directory the operator names."""
        return None

    def check_session(self, session: str) -> None:
        """Raise when an entry for `session` could not be appended now (bad id, database down)."""
        _session_ok(session)
        with self._lock:
            for fresh in (False, True):
                conn = self._connection()
                if time.monotonic() - self._heard <= PING_INTERVAL and not _has_news(conn):
                    return
                try:
                    conn.execute("SELECT 1")
                except _psycopg().Error as exc:
                    err = self._lost(exc)
                    if fresh:
                        raise err from None
                    self._down = None  # an idle connection lost to a restart: try a new one at once
                    continue
                self._heard = time.monotonic()
                return

    def head(self, session: str) -> tuple[int, str]:
        with self._lock:
            conn = self._connection()
            try:
                return _head(conn, session)
            except _psycopg().Error as exc:
                raise self._lost(exc) from None

    def _lane_key(self, session: str) -> str:
        return ""  # one lane: a group is one transaction over all its sessions

    def _acquire(self, key: str) -> Lane:
        return self._lane

    def _check_fields(self, fields: dict) -> None:
        _session_ok(fields["session"])

    def _recent(self, conn, session: str) -> Recent:
        rows = conn.execute(
            "SELECT line FROM journal_entries WHERE session = %s ORDER BY seq DESC LIMIT %s", (session, DEDUPE_LINES),
        ).fetchall()
        return recent_fields(bytes(line) for (line,) in rows)

    def _commit(self, lane: Lane, batch: list[Pending]) -> None:
        with self._lock:
            self._commit_batch(batch)

    def _commit_batch(self, everyone: list[Pending]) -> None:
        psycopg = _psycopg()
        groups: dict[str, list[Pending]] = {}
        for p in everyone:
            groups.setdefault(p.fields["session"], []).append(p)
        stale_retried = False
        for attempt in range(RACE_RETRIES + 1):
            try:
                conn = self._connection()
            except StoreError as exc:
                for p in everyone:
                    p.entry, p.error = None, exc
                return
            rows: list[tuple] = []
            done: list[tuple[str, list[Pending]]] = []
            started = False  # a statement of this transaction reached the server
            try:
                with conn.transaction():  # BEGIN reached the server: the connection is live
                    started = True
                    for session in sorted(groups):
                        items = groups[session]
                        seq, prev = _lock_head(conn, session)
                        if seq == 0:
                            conn.execute(
                                "INSERT INTO journal_sessions (session) VALUES (%s) ON CONFLICT DO NOTHING", (session,)
                            )
                        recent = self._recent(conn, session) if any(p.dedupe for p in items) else None
                        parts, chained, _, _ = chain_group(items, seq, prev, self.line_limit, recent)
                        data, start = b"".join(parts), 0
                        for p in chained:
                            end = data.index(b"\n", start) + 1
                            e = p.entry
                            rows.append((session, e["seq"], e["prev"], e["hash"], data[start:end]))  # type: ignore[index]
                            start = end
                        done.append((session, chained))
                    if rows:
                        _copy(conn, rows)
                self._heard = time.monotonic()
                self.commits += 1
                for session, chained in done:  # committed: with synchronous_commit on, durable
                    self._durable(session, chained)
                return
            except psycopg.Error as exc:
                if _race(exc) and attempt < RACE_RETRIES:
                    self.retries += 1
                    log.info("lost a race for the next seq (%s); retrying from the new head", _first_line(exc))
                    continue
                if not started and not stale_retried:
                    # The idle connection was gone (a server restart) before this transaction did
                    # anything: nothing can have been committed, so a fresh connection may try once.
                    stale_retried = True
                    self._lost(exc)
                    self._down = None
                    continue
                if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError) or conn.broken:
                    err: StoreError = self._lost(exc)
                else:
                    err = StoreError(f"database {self.store.shown} refused the batch: {_first_line(exc)}")
                for p in everyone:
                    p.entry, p.error = None, err
                return

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        self.store.close()

    def __enter__(self) -> PostgresWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _has_news(conn) -> bool:
    """Bytes (or EOF) waiting on an idle connection: the server said something unasked, which is how a
    shutdown or a terminated backend shows. One select(), no round trip."""
    try:
        return bool(select.select([conn.fileno()], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def _session_ok(session: str) -> None:
    """The file vault's session id rule holds here too, so every session can be pulled into a vault."""
    try:
        session_filename(session)
    except SessionIdError as exc:
        raise JournalError(str(exc)) from None


def _head(conn, session: str) -> tuple[int, str]:
    row = conn.execute(
        "SELECT seq, hash FROM journal_entries WHERE session = %s ORDER BY seq DESC LIMIT 1", (session,)
    ).fetchone()
    return (row[0], row[1]) if row else (0, GENESIS)


def _lock_head(conn, session: str) -> tuple[int, str]:
    """Inside a transaction: serialise this session's appenders (advisory lock), then read its head."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 14))", (session,))
    return _head(conn, session)


def _copy(conn, rows: list[tuple]) -> None:
    with conn.cursor() as cur, cur.copy("COPY journal_entries (session, seq, prev, hash, line) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
