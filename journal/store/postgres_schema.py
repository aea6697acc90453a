"""The PostgreSQL schema of the journal store, versioned (`journal_schema`).

Version 1:

- `journal_sessions` (one row per session) and `journal_entries` keyed by (session, seq), holding
  each entry's line exactly as written (`line`, bytea: canonical JSON and its newline) and, beside
  it, the `prev` and `hash` the database checks the chain with.
- A BEFORE INSERT trigger refuses an entry that does not continue its session's chain (seq 1 after
  64 zeros, else `prev` = `hash` of seq - 1): no gap and no fork can be committed, whoever writes.
  Two writers racing for the same seq: the primary key makes the second fail, it retries.
- Append-only: triggers refuse UPDATE, DELETE and TRUNCATE of entries, sessions, blobs and
  tombstones. Blob chunks may be deleted only for a blob that has a tombstone (erasure).
- Blobs content-addressed (`journal_blobs`, by SHA-256) with their bytes in 1 MiB chunks
  (`journal_blob_chunks`) inserted as they stream in, in one transaction per blob.
- `journal_tombstones`: sha256, size, when, by whom, why (docs/contract.md, "Erasure").

Version 2: the trigger functions qualified and their search_path fixed (see `_V2`).

Version 3: search facets computed by the server from each line (a generated column) and btree indexes on
them (see `_V3`).

`grant_writer(role)` gives a broker's role what it needs and no more: SELECT and INSERT (and EXECUTE on the
facet function its inserts evaluate).
"""

from __future__ import annotations

CURRENT_VERSION = 3
OLDEST_USABLE = 2
"""A store at this version or later is read and written; below it, `broker store migrate` first."""
SCHEMA_LOCK = 0x6A6F75726E616C  # advisory lock key for creating / migrating the schema ("journal")

TABLES = ("journal_schema", "journal_sessions", "journal_entries", "journal_blobs", "journal_blob_chunks",
          "journal_tombstones")

_V1 = r"""
CREATE TABLE journal_schema (
    version integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE journal_sessions (
    session text PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE journal_entries (
    session text NOT NULL REFERENCES journal_sessions (session),
    seq bigint NOT NULL CHECK (seq >= 1),
    prev text NOT NULL,
    hash text NOT NULL,
    line bytea NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session, seq)
);
CREATE TABLE journal_blobs (
    sha256 text PRIMARY KEY CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    size bigint NOT NULL,
    chunks integer NOT NULL,
    upload uuid NOT NULL UNIQUE,
    stored_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE journal_blob_chunks (
    upload uuid NOT NULL,
    n integer NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (upload, n)
);
ALTER TABLE journal_blob_chunks ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE TABLE journal_tombstones (
    sha256 text PRIMARY KEY CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    size bigint,
    erased_at text NOT NULL,
    erased_by text NOT NULL,
    reason text NOT NULL
);

CREATE FUNCTION journal_chain_check() RETURNS trigger LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    before text;
BEGIN
    IF NEW.seq = 1 THEN
        IF NEW.prev <> repeat('0', 64) THEN
            RAISE EXCEPTION USING ERRCODE = 'integrity_constraint_violation',
                MESSAGE = format('journal: seq 1 of session %L must have prev of 64 zeros', NEW.session);
        END IF;
        RETURN NEW;
    END IF;
    SELECT hash INTO before FROM journal_entries WHERE session = NEW.session AND seq = NEW.seq - 1;
    IF before IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'integrity_constraint_violation',
            MESSAGE = format('journal: seq %s of session %L has no seq %s before it (a gap)',
                             NEW.seq, NEW.session, NEW.seq - 1);
    END IF;
    IF before <> NEW.prev THEN
        RAISE EXCEPTION USING ERRCODE = 'integrity_constraint_violation',
            MESSAGE = format('journal: seq %s of session %L does not follow seq %s (a fork)',
                             NEW.seq, NEW.session, NEW.seq - 1);
    END IF;
    RETURN NEW;
END $$;

CREATE FUNCTION journal_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
        MESSAGE = format('journal: %s is append-only, %s refused', TG_TABLE_NAME, TG_OP);
END $$;

CREATE FUNCTION journal_chunk_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND EXISTS (
        SELECT 1 FROM journal_blobs b JOIN journal_tombstones t USING (sha256) WHERE b.upload = OLD.upload
    ) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
        MESSAGE = format('journal: blob bytes are deleted only by an erasure with a tombstone, %s refused', TG_OP);
END $$;

CREATE TRIGGER journal_entries_chain BEFORE INSERT ON journal_entries
    FOR EACH ROW EXECUTE FUNCTION journal_chain_check();
CREATE TRIGGER journal_entries_append_only BEFORE UPDATE OR DELETE ON journal_entries
    FOR EACH ROW EXECUTE FUNCTION journal_refuse_change();
CREATE TRIGGER journal_entries_no_truncate BEFORE TRUNCATE ON journal_entries
    FOR EACH STATEMENT EXECUTE FUNCTION journal_refuse_change();
CREATE TRIGGER journal_sessions_append_only BEFORE UPDATE OR DELETE ON journal_sessions
    FOR EACH ROW EXECUTE FUNCTION journal_refuse_change();
CREATE TRIGGER journal_sessions_no_truncate BEFORE TRUNCATE ON journal_sessions
    FOR EACH STATEMENT EXECUTE FUNCTION journal_refuse_change();
CREATE TRIGGER journal_blobs_append_only BEFORE UPDATE OR DELETE ON journal_blobs
    FOR EACH ROW EXECUTE FUNCTION journal_refuse_change();
CREATE TRIGGER journal_blobs_no_truncate BEFORE TRUNCATE ON journal_blobs
    FOR EACH STATEMENT EXECUTE FUNCTION journal_refuse_change();
CREATE TRIGGER journal_tombstones_append_only BEFORE UPDATE OR DELETE ON journal_tombstones
    FOR EACH ROW EXECUTE FUNCTION journal_refuse_change();
CREATE TRIGGER journal_tombstones_no_truncate BEFORE TRUNCATE ON journal_tombstones
    FOR EACH STATEMENT EXECUTE FUNCTION journal_refuse_change();
CREATE TRIGGER journal_chunks_guard BEFORE UPDATE OR DELETE ON journal_blob_chunks
    FOR EACH ROW EXECUTE FUNCTION journal_chunk_change();
CREATE TRIGGER journal_chunks_no_truncate BEFORE TRUNCATE ON journal_blob_chunks
    FOR EACH STATEMENT EXECUTE FUNCTION journal_refuse_change();
"""

_V2_FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION {schema}.journal_chain_check() RETURNS trigger LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    before text;
BEGIN
    IF NEW.seq = 1 THEN
        IF NEW.prev OPERATOR(pg_catalog.<>) pg_catalog.repeat('0', 64) THEN
            RAISE EXCEPTION USING ERRCODE = 'integrity_constraint_violation',
                MESSAGE = pg_catalog.format('journal: seq 1 of session %L must have prev of 64 zeros', NEW.session);
        END IF;
        RETURN NEW;
    END IF;
    SELECT e.hash INTO before FROM {schema}.journal_entries e
        WHERE e.session OPERATOR(pg_catalog.=) NEW.session AND e.seq OPERATOR(pg_catalog.=) NEW.seq - 1;
    IF before IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'integrity_constraint_violation',
            MESSAGE = pg_catalog.format('journal: seq %s of session %L has no seq %s before it (a gap)',
                                        NEW.seq, NEW.session, NEW.seq - 1);
    END IF;
    IF before OPERATOR(pg_catalog.<>) NEW.prev THEN
        RAISE EXCEPTION USING ERRCODE = 'integrity_constraint_violation',
            MESSAGE = pg_catalog.format('journal: seq %s of session %L does not follow seq %s (a fork)',
                                        NEW.seq, NEW.session, NEW.seq - 1);
    END IF;
    RETURN NEW;
END $fn$;

CREATE OR REPLACE FUNCTION {schema}.journal_refuse_change() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
        MESSAGE = pg_catalog.format('journal: %s is append-only, %s refused', TG_TABLE_NAME, TG_OP);
END $fn$;

CREATE OR REPLACE FUNCTION {schema}.journal_chunk_change() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF TG_OP OPERATOR(pg_catalog.=) 'DELETE' AND EXISTS (
        SELECT 1 FROM {schema}.journal_blobs b JOIN {schema}.journal_tombstones t USING (sha256)
        WHERE b.upload OPERATOR(pg_catalog.=) OLD.upload
    ) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
        MESSAGE = pg_catalog.format('journal: blob bytes are deleted only by an erasure with a tombstone, %s refused',
                                    TG_OP);
END $fn$;
"""

_V2 = (
    "DO $do$ BEGIN EXECUTE pg_catalog.replace($body$" + _V2_FUNCTIONS
    + "$body$, '{schema}', pg_catalog.quote_ident(pg_catalog.current_schema())); END $do$;\n"
    + "ALTER TABLE journal_tombstones ADD COLUMN note text;\n"
)
"""Version 2: every trigger function names its tables with the schema they were created in and runs with
`search_path` fixed to pg_catalog then pg_temp, so nothing the writer role creates (a TEMP TABLE
journal_entries, a function or operator of the same name, a schema put first in its own search_path)
is what a trigger reads or calls: each function and operator is pg_catalog's, spelled out. And
`journal_tombstones.note`: the erasure key's signature (journal/erasure_signature.py)."""

FACET_FUNCTION = "journal_facets"
FACET_COLUMN = "facets"
FACET_KEYS = ("connector", "effect", "agent", "ts")
"""The top-level string fields `broker search` can narrow by from an index (journal/search.py), in the order of
the `facets` array (1-based: facets[1] is the connector)."""


def _pick(key: str) -> str:
    return (f"CASE WHEN pg_catalog.jsonb_typeof(doc OPERATOR(pg_catalog.->) '{key}') OPERATOR(pg_catalog.=) 'string' "
            f"THEN pg_catalog.convert_to(doc OPERATOR(pg_catalog.->>) '{key}', 'UTF8') END")


FACET_BODY = (
    "\nDECLARE\n    doc jsonb;\nBEGIN\n    doc := CAST(pg_catalog.convert_from(line, 'UTF8') AS jsonb);\n"
    "    RETURN ARRAY[\n" + ",\n".join(f"        {_pick(k)}" for k in FACET_KEYS) + "\n    ];\n"
    "EXCEPTION WHEN OTHERS THEN\n    RETURN NULL;\nEND\n"
)
"""The body of `journal_facets(line bytea) RETURNS bytea[]`: per FACET_KEYS, the line's top-level value when it is
a string, as UTF-8 bytes (so comparing is memcmp, which is Python's order of str; no collation), else NULL; and
NULL on any failure (not UTF-8, JSON that jsonb refuses such as "\\u0000" in a string), so that a line never fails
to be recorded because of it, and a line it cannot read is a candidate of every search. Readers compare this text
with `prosrc` before trusting the indexes (journal/store/postgres_search.py)."""

FACET_CONFIG = ["search_path=pg_catalog, pg_temp"]


def facet_index(key: str) -> str:
    """The name of the index on `key`'s facet."""
    return f"journal_entries_facet_{key}"


def facet_expr(key: str) -> str:
    """The indexed expression of `key`'s facet (as pg_get_expr prints it)."""
    return f"{FACET_COLUMN}[{FACET_KEYS.index(key) + 1}]"


_V3 = (
    "DO $do$ BEGIN EXECUTE pg_catalog.replace($body$"
    "CREATE OR REPLACE FUNCTION {schema}." + FACET_FUNCTION + "(line bytea) RETURNS bytea[]\n"
    # not PARALLEL SAFE: its EXCEPTION block starts a subtransaction, which a parallel worker cannot
    "LANGUAGE plpgsql IMMUTABLE\n"
    "SET search_path = pg_catalog, pg_temp AS $fn$" + FACET_BODY + "$fn$;\n"
    "GRANT EXECUTE ON FUNCTION {schema}." + FACET_FUNCTION + "(bytea) TO PUBLIC;\n"
    "ALTER TABLE {schema}.journal_entries ADD COLUMN " + FACET_COLUMN + " bytea[] "
    "GENERATED ALWAYS AS ({schema}." + FACET_FUNCTION + "(line)) STORED;\n"
    + "".join(f"CREATE INDEX {facet_index(k)} ON {{schema}}.journal_entries (session, ({facet_expr(k)}), seq);\n"
              for k in FACET_KEYS)
    + "$body$, '{schema}', pg_catalog.quote_ident(pg_catalog.current_schema())); END $do$;\n"
)
"""Version 3: `journal_entries.facets`, a column GENERATED ALWAYS AS journal_facets(line) STORED (the function
above), and per facet key a btree index (session, facets[i], seq), so that `broker search` by connector, effect,
agent or time asks the indexes for a session's candidate rows instead of reading them all. The server computes the
facets from the stored line as it inserts it (one JSON parse per row); a writer cannot send them (PostgreSQL
refuses a value for a generated column) and still needs only SELECT and INSERT on the tables (plus EXECUTE on the
function, which inserting evaluates: PUBLIC's, granted explicitly in case default privileges took it away; it
reads its argument and nothing else). The migration rewrites journal_entries and builds the indexes, reading
every row once, in one transaction that blocks writers meanwhile."""

MIGRATIONS: dict[int, str] = {1: _V1, 2: _V2, 3: _V3}
"""version -> the SQL that brings the schema from version - 1 to it (version 1 creates it)."""


def grant_writer_sql(role: str) -> list:
    """Statements giving `role` (a broker's database role) SELECT and INSERT, nothing more (and EXECUTE on the facet
    function, which its inserts evaluate)."""
    from psycopg import sql

    ident = sql.Identifier(role)
    out = [sql.SQL("GRANT SELECT ON journal_schema TO {}").format(ident)]
    for table in TABLES[1:]:
        out.append(sql.SQL("GRANT SELECT, INSERT ON {} TO {}").format(sql.Identifier(table), ident))
    # inserting a row evaluates the facet indexes' function as the inserting role
    out.append(sql.SQL("GRANT EXECUTE ON FUNCTION {}(bytea) TO {}").format(sql.Identifier(FACET_FUNCTION), ident))
    return out
