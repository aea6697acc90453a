"""The hash chain: `hash` = SHA-256 of the canonical entry without `hash`; `prev` links to seq - 1."""

from __future__ import annotations

import hashlib
import secrets
from typing import NamedTuple

import orjson

from journal.canonical import canonical_bytes

GENESIS = "0" * 64
"""`prev` of seq 1."""


def line_link(line: bytes) -> tuple[int, str, str] | None:
    """(seq, prev, hash) of a journal line, or None when the line is not a JSON object holding an integer
    `seq` and string `prev` and `hash` (a line read from a store that may be hostile: no exception)."""
    try:
        entry = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(entry, dict):
        return None
    seq, prev, digest = entry.get("seq"), entry.get("prev"), entry.get("hash")
    if type(seq) is not int or not isinstance(prev, str) or not isinstance(digest, str):
        return None
    return seq, prev, digest


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


_SLOT = secrets.token_hex(16)
"""Placeholder value for seq, prev and hash in `link_pieces` (fresh per process; see there)."""
_SLOT_B = _SLOT.encode()


class LinkPieces(NamedTuple):
    """The canonical line of an entry, cut where its seq, prev and hash go (see `link_pieces`)."""

    before_hash: bytes  # '{"agent":...,"effect":"read"' (the ',"hash":"<hex>"' member goes here)
    before_prev: bytes  # ',"mcp":...,"prev":"'
    before_seq: bytes  # '","principal":...,"response":{...},"seq":'
    after_seq: bytes  # ',"session":...,"ts":...}'


def link_pieces(fields: dict) -> LinkPieces | None:
    """Canonicalise `fields` once, before its seq and prev are known, so that `link` can finish the
    entry later with joins and one SHA-256 (the writer does this in the caller's thread, leaving its
    group-commit leader only the chaining).

    Why this gives chain_entry's bytes: JCS orders members by key alone and writes each member's value
    independently of the others, so the canonical form of the entry with seq, prev and hash set to a
    placeholder string differs from the real one only inside those three members. The placeholder is
    a random hex string; when it occurs exactly three times, the three occurrences are the top-level
    members (which exist), so cutting there is exact. None when that does not hold (fields that hold
    the placeholder, or already hold seq/prev/hash, or a key sorting before "hash"): the caller uses
    chain_entry instead. Raises CanonicalError like canonical_bytes.
    """
    if "seq" in fields or "prev" in fields or "hash" in fields:
        return None
    data = canonical_bytes({**fields, "hash": _SLOT, "prev": _SLOT, "seq": _SLOT})
    n = len(_SLOT_B)
    h = data.find(_SLOT_B)
    p = data.find(_SLOT_B, h + n)
    s = data.find(_SLOT_B, p + n)
    if s < 0 or data.find(_SLOT_B, s + n) >= 0:
        return None
    # Keys sort as "hash" < "prev" < "seq"; ',' before "hash": some key sorts before it (the splice
    # of the hash member below assumes one does).
    if data[h - 9 : h] != b',"hash":"' or data[p - 8 : p] != b'"prev":"' or data[s - 7 : s] != b'"seq":"':
        return None
    return LinkPieces(data[: h - 9], data[h + n + 1 : p], data[p + n : s - 1], data[s + n + 1 :])


def link(fields: dict, pieces: LinkPieces, seq: int, prev: str) -> tuple[dict, list[bytes]]:
    """chain_entry(fields, seq, prev) from `link_pieces(fields)`: the entry and its line (with the
    newline) as pieces to join. A `prev` other than letters and digits (only a damaged file gives
    one) would need escaping, so it goes through chain_entry."""
    a, b, c, d = pieces
    pv, sq = prev.encode(), str(seq).encode()
    if not pv.isalnum():
        entry, line = chain_entry(fields, seq, prev)
        return entry, [line]
    digest = hashlib.sha256(b"".join((a, b, pv, c, sq, d))).hexdigest()
    entry = dict(fields)
    entry["seq"] = seq
    entry["prev"] = prev
    entry["hash"] = digest
    return entry, [a, b',"hash":"', digest.encode(), b'"', b, pv, c, sq, d, b"\n"]
