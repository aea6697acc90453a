"""`broker search` on PostgreSQL through the facet indexes of schema version 3 (journal/store/postgres_schema.py),
so that a search by connector, effect, agent or time reads only a session's candidate rows and no row of a
session without one (issue 26).

The facets are `journal_entries.facets`, a column the server generates from each stored line as it is inserted
(`journal_facets(line)`: the top-level connector, effect, agent and ts when they are strings, as UTF-8 bytes, or
NULL when the line could not be read); each has an index (session, facets[i], seq). A row is a candidate when each
facet asked for equals the wanted value or is NULL, and its `ts` facet is in the time range or NULL; the caller
then checks every candidate exactly as it checks a file's lines (journal/search.py), so the indexes only ever
narrow what is read.

The database's owner can replace the function, the column or the indexes. Before the indexes are used,
`check_index` compares the function with what the migration creates (body, language, volatility, search_path,
signature), the column (generated, stored, from that function of `line`) and each index (valid, btree, not
partial, the same columns and expression); anything else, or a schema older than version 3, and search reads every
row as before (`why` says what differed, once). Not caught here: an owner who replaced the function, let rows in
(or rewrote old ones) and put it back leaves stored facets that lie while every definition checks out, and the
rows themselves are intact. `broker verify` on a store whose indexes check out therefore also asks the server for
the rows whose stored facets differ from what the function gives their line now (`stale_facets`: one pass over
the session's rows, on the server) and reports them as a finding: exit 1, "search may miss these rows".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from journal.store.postgres_schema import (
    FACET_BODY,
    FACET_COLUMN,
    FACET_CONFIG,
    FACET_FUNCTION,
    FACET_KEYS,
    facet_expr,
    facet_index,
)

SEQ_PAGE = 500
"""Candidates per query when their lines are fetched (`lines_of`)."""


@dataclass(frozen=True)
class Facets:
    """What the index can narrow a search by: top-level `equal` values (key -> UTF-8 bytes) and the `ts` range
    `since` <= ts < `before` (UTF-8 bytes; None: unbounded)."""

    equal: dict[str, bytes] = field(default_factory=dict)
    since: bytes | None = None
    before: bytes | None = None

    def __bool__(self) -> bool:
        return bool(self.equal) or self.since is not None or self.before is not None


@dataclass(frozen=True)
class IndexCheck:
    schema: str | None  # the schema (quoted identifier) whose function and indexes checked out; None: scan
    why: str | None  # why not, when not


_CHECK_FUNCTION = """
SELECT p.prosrc, l.lanname, p.provolatile, p.proconfig, p.prosecdef, p.proretset, p.prokind,
       p.prorettype = 'pg_catalog.bytea[]'::pg_catalog.regtype
FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_language l ON l.oid = p.prolang
WHERE p.oid = pg_catalog.to_regprocedure(%s)
"""

_CHECK_COLUMN = """
SELECT a.attgenerated, a.atttypid = 'pg_catalog.bytea[]'::pg_catalog.regtype, pg_catalog.pg_get_expr(d.adbin, d.adrelid)
FROM pg_catalog.pg_attribute a
LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = %s::pg_catalog.oid AND a.attname = %s AND NOT a.attisdropped
"""

_CHECK_INDEXES = """
SELECT c.relname, i.indisvalid AND i.indisready AND i.indislive, i.indpred IS NULL, a.amname, i.indnkeyatts,
       i.indnatts, i.indisunique, (SELECT pg_catalog.array_agg(k ORDER BY n) FROM pg_catalog.unnest(i.indkey::int2[])
       WITH ORDINALITY AS u(k, n)), pg_catalog.pg_get_expr(i.indexprs, i.indrelid)
FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
JOIN pg_catalog.pg_am a ON a.oid = c.relam
WHERE i.indrelid = %s::pg_catalog.oid
"""


def check_index(conn) -> IndexCheck:
    """Whether the facet function and indexes of the `journal_entries` the connection sees are the migration's."""
    table = conn.execute(
        "SELECT c.oid, pg_catalog.quote_ident(n.nspname), c.relkind FROM pg_catalog.pg_class c "
        "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.oid = pg_catalog.to_regclass('journal_entries')").fetchone()
    if table is None or table[2] != "r":
        return IndexCheck(None, "journal_entries is not a table")
    oid, schema = table[0], table[1]
    version = conn.execute(f"SELECT pg_catalog.max(version) FROM {schema}.journal_schema").fetchone()[0]
    if version is None or version < 3:
        return IndexCheck(None, f"schema version {version} has no search indexes (`broker store migrate` adds them)")
    with conn.transaction():
        conn.execute("SET LOCAL search_path = pg_catalog, pg_temp")  # pg_get_expr then names every schema
        fn = conn.execute(_CHECK_FUNCTION, (f"{schema}.{FACET_FUNCTION}(bytea)",)).fetchone()
        column = conn.execute(_CHECK_COLUMN, (oid, FACET_COLUMN)).fetchone()
        indexes = conn.execute(_CHECK_INDEXES, (oid,)).fetchall()
        cols = dict(conn.execute("SELECT attname, attnum FROM pg_catalog.pg_attribute WHERE attrelid = %s::oid "
                                 "AND attname IN ('session', 'seq')", (oid,)).fetchall())
    expected_fn = (FACET_BODY, "plpgsql", "i", FACET_CONFIG, False, False, "f", True)
    if fn is None:
        return IndexCheck(None, f"no function {schema}.{FACET_FUNCTION}(bytea)")
    if tuple(fn) != expected_fn:
        return IndexCheck(None, f"{schema}.{FACET_FUNCTION} is not the one the migration creates")
    if column is None or tuple(column) != ("s", True, f"{schema}.{FACET_FUNCTION}(line)"):
        return IndexCheck(None, f"journal_entries.{FACET_COLUMN} is not the column the migration creates")
    have = {name: rest for name, *rest in indexes}
    for key in FACET_KEYS:
        name = facet_index(key)
        want = [True, True, "btree", 3, 3, False, [cols.get("session"), 0, cols.get("seq")],
                facet_expr(key)]
        if name not in have:
            return IndexCheck(None, f"index {name} is missing")
        if list(have[name]) != want:
            return IndexCheck(None, f"index {name} is not the one the migration creates (or not valid)")
    return IndexCheck(schema, None)


_BYTES = "%s::pg_catalog.bytea"


def candidate_seqs(conn, schema: str, session: str, facets: Facets) -> list[int]:
    """The seqs of the session's rows that each facet asked for does not rule out (NULL facets included), in
    order: answered from the facet indexes (bitmap scans of (session, facet, seq)), no line read. Every operator
    and type is pg_catalog's, the function and table the checked schema's: nothing in the search_path counts."""
    cond: list[str] = ["session OPERATOR(pg_catalog.=) %s"]
    params: list[str | bytes] = [session]
    for key, value in facets.equal.items():
        f = facet_expr(key)
        cond.append(f"({f} OPERATOR(pg_catalog.=) {_BYTES} OR {f} IS NULL)")
        params.append(value)
    ts = facet_expr("ts")
    bounds = [(f"{ts} OPERATOR(pg_catalog.>=) {_BYTES}", facets.since),
              (f"{ts} OPERATOR(pg_catalog.<) {_BYTES}", facets.before)]
    if facets.since is not None or facets.before is not None:
        cond.append("(" + " AND ".join(c for c, v in bounds if v is not None) + f" OR {ts} IS NULL)")
        params += [v for _, v in bounds if v is not None]
    rows = conn.execute(f"SELECT seq FROM {schema}.journal_entries WHERE {' AND '.join(cond)} ORDER BY seq",
                        params).fetchall()
    return [seq for (seq,) in rows]


def lines_of(conn, schema: str, session: str, seqs: list[int], needles: list[bytes]) -> list[tuple[int, bytes]]:
    """(seq, line) of the rows `seqs` (sorted: one page of them) whose line holds every needle (position(), on the
    server): one range of the primary key."""
    cond = "".join(f" AND pg_catalog.position(line, {_BYTES}) OPERATOR(pg_catalog.>) 0" for _ in needles)
    rows = conn.execute(
        f"SELECT seq, line FROM {schema}.journal_entries WHERE session OPERATOR(pg_catalog.=) %s "
        f"AND seq OPERATOR(pg_catalog.=) ANY(%s::pg_catalog.int8[]){cond} ORDER BY seq",
        (session, seqs, *needles)).fetchall()
    return [(seq, bytes(line)) for seq, line in rows]


STALE_SHOWN = 5
"""Seqs of rows with lying facets named per session (`stale_facets`); the count covers them all."""


def stale_facets(conn, schema: str, session: str) -> tuple[int, list[int]]:
    """(how many, the first STALE_SHOWN seqs) of the session's rows whose stored facets are not what the (checked)
    function gives their line: facets written while an owner's other function was in place. The server parses
    every line of the session once; nothing travels but the answer."""
    with conn.transaction():
        # no parallel plan, whatever the function is declared: its EXCEPTION block cannot run in a parallel worker
        conn.execute("SET LOCAL max_parallel_workers_per_gather = 0")
        row = conn.execute(
            f"SELECT pg_catalog.count(*), (pg_catalog.array_agg(seq ORDER BY seq))[1:{STALE_SHOWN}] "
            f"FROM {schema}.journal_entries WHERE session OPERATOR(pg_catalog.=) %s "
            f"AND {FACET_COLUMN} IS DISTINCT FROM {schema}.{FACET_FUNCTION}(line)", (session,)).fetchone()
    return int(row[0]), list(row[1] or [])
