"""The hash chain: `hash` = SHA-256 of the canonical entry without `hash`; `prev` links to seq - 1."""

from __future__ import annotations

import hashlib

import orjson

from journal.canonical import canonical_bytes

GENESIS = "0" * 64
"""`prev` of seq 1."""


def entry_hash(entry: dict) -> str:
    """SHA-256 (hex) of the canonical form of the entry without its `hash` key."""
    body = {k: v for k, v in entry.items() if k != "hash"}
    return hashlib.sha256(canonical_bytes(body)).hexdigest()


def chain_entry(fields: dict, seq: int, prev: str, *, orjson_ok: bool = False) -> tuple[dict, bytes]:
    """Complete `fields` into an entry at `seq` after `prev`; return it and its line bytes.

    `orjson_ok`: the caller has established canonical.orjson_matches_jcs(fields) (adding a small
    seq and a hex prev keeps that true), so the canonical bytes come straight from orjson.

    Canonicalises once without `hash` and splices the hash in. In sorted order `hash` comes right
    before `mcp`, and every key before it (agent, capture, connector, effect) holds a string, inside
    which `,"mcp":` can only appear escaped; so the first `,"mcp":` is the top-level key.
    """
    entry = dict(fields)
    entry["seq"] = seq
    entry["prev"] = prev
    entry.pop("hash", None)
    body = orjson.dumps(entry, option=orjson.OPT_SORT_KEYS) if orjson_ok else canonical_bytes(entry)
    digest = hashlib.sha256(body).hexdigest()
    entry["hash"] = digest
    at = body.index(b',"mcp":')
    line = b"".join((body[:at], b',"hash":"', digest.encode(), b'"', body[at:], b"\n"))
    return entry, line
