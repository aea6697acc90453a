"""The hash chain: `hash` = SHA-256 of the canonical entry without `hash`; `prev` links to seq - 1."""

from __future__ import annotations

import hashlib
import os
from typing import NamedTuple

import orjson

from journal import canonical
from journal.canonical import canonical_bytes, orjson_canonical

GENESIS = "0" * 64
"""`prev` of seq 1."""


_HASH_KEY = b',"hash":"'
"""How the `hash` member starts in a canonical line: never first (keys sort before it), so after a comma."""
_AFTER_HASH = b',"mcp":'
"""The member right after `hash` in sorted order (`mcp`, a key every entry has)."""


def hash_member(digest: str) -> bytes:
    """The `,"hash":"<digest>"` member as it stands in a canonical line."""
    return b"".join((_HASH_KEY, digest.encode(), b'"'))


def splice_hash(body: bytes, digest: str) -> bytes:
    """The canonical line of an entry from the canonical bytes of the entry without `hash` (`body`): its
    hash member put in before `,"mcp":`. Every key sorted before `hash` (agent, capture, connector,
    effect) holds a string, inside which `,"mcp":` can only appear escaped; so the first `,"mcp":` is the
    top-level key."""
    at = body.index(_AFTER_HASH)
    return b"".join((body[:at], hash_member(digest), body[at:]))


def unsplice_hash(line: bytes, digest: str) -> bytes | None:
    """What `splice_hash` was given: the line (without its newline) with its `,"hash":"<digest>"` member
    cut out, which is what the hash is computed over; None when the line holds no such member. The
    first occurrence is the top-level member, for the reason given at `splice_hash`."""
    member = hash_member(digest)
    at = line.find(member)
    return None if at < 0 else line[:at] + line[at + len(member) :]


_HASH_MEMBER_LEN = len(_HASH_KEY) + 64 + 1  # ,"hash":"<64 hex digits>"


def spliced_digest(line: bytes) -> str | None:
    """What a verifier hashes (`unsplice_hash`: the line without its first `,"hash":"<hash>"`), without
    building that member or searching for it: in a valid canonical entry the first `,"hash":"` is the
    top-level member (see `splice_hash`) and holds the 64 hex digits of `hash`. For a line that is not a
    valid entry this may hash other bytes: the callers' checks of the entry refuse it all the same."""
    at = line.find(_HASH_KEY)
    return None if at < 0 else hashlib.sha256(line[:at] + line[at + _HASH_MEMBER_LEN :]).hexdigest()


def next_head(entry: dict, line: bytes, head: str) -> str | None:
    """The hash of `line` (with or without its newline; `entry` is what it parses to) when it links to `head`
    and carries its own digest, else None. A reader that reads a file again after a verifier read it (replay
    beside its verifier) follows the chain with this: arriving at the head the verifier reported, over as
    many lines, shows that it read the very entries the verifier checked (SHA-256 being collision
    resistant), whatever happened to the file in between; the last hash commits to every entry before it."""
    digest = spliced_digest(line[:-1] if line.endswith(b"\n") else line)
    return digest if digest is not None and entry.get("hash") == digest and entry.get("prev") == head else None


def entry_hash(entry: dict) -> str:
    """SHA-256 (hex) of the canonical form of the entry without its `hash` key."""
    body = {k: v for k, v in entry.items() if k != "hash"}
    return hashlib.sha256(canonical_bytes(body)).hexdigest()


def chain_entry(fields: dict, seq: int, prev: str, *, orjson_ok: bool = False) -> tuple[dict, bytes]:
    """Complete `fields` into an entry at `seq` after `prev`; return it and its line bytes.

    `orjson_ok`: the caller has established canonical.orjson_matches_jcs(fields) (adding a small
    seq and a hex prev keeps that true), so the canonical bytes come straight from orjson.

    Canonicalises once without `hash` and splices the hash in (`splice_hash`).
    """
    entry = dict(fields)
    entry["seq"] = seq
    entry["prev"] = prev
    entry.pop("hash", None)
    body = orjson.dumps(entry, option=orjson.OPT_SORT_KEYS) if orjson_ok else canonical_bytes(entry)
    digest = hashlib.sha256(body).hexdigest()
    entry["hash"] = digest
    return entry, splice_hash(body, digest) + b"\n"


_SLOT = os.urandom(16).hex()
"""Placeholder value for seq, prev and hash in `link_pieces` (fresh per process; see there). What
secrets.token_hex(16) gives, without importing `secrets` (and `random`, ~1.5 ms) into every reader."""
_SLOT_B = _SLOT.encode()


class LinkPieces(NamedTuple):
    """The canonical line of an entry, cut where its seq, prev and hash go (see `link_pieces`)."""

    before_hash: bytes  # '{"agent":...,"effect":"read"' (the ',"hash":"<hex>"' member goes here)
    before_prev: bytes  # ',"mcp":...,"prev":"'
    before_seq: bytes  # '","principal":...,"response":{...},"seq":'
    after_seq: bytes  # ',"session":...,"ts":...}'
    orjson_size: int = -1
    """Bytes of the canonical line with the placeholders when orjson wrote it (the fast path of canonical.py):
    then orjson's text of the fields alone is shorter, which the writer's line-limit check needs (-1: not
    orjson's bytes, unknown)."""


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
    slotted = {**fields, "hash": _SLOT, "prev": _SLOT, "seq": _SLOT}
    data = orjson_canonical(slotted)
    orjson_size = -1 if data is None else len(data)
    if data is None:
        data = canonical_bytes(slotted)
    cut = canonical.slot_cut(data, _SLOT_B) if canonical.slot_cut is not None else slot_cut(data, _SLOT_B)
    return None if cut is None else LinkPieces(*cut, orjson_size)


def slot_cut(data: bytes, slot: bytes) -> tuple[bytes, bytes, bytes, bytes] | None:
    """The canonical line `data` (seq, prev and hash set to the placeholder `slot`) cut into the four pieces
    around them, or None when `slot` does not occur exactly three times, as the values of `,"hash":`, `"prev":`
    and `"seq":` in that order (see `link_pieces`). The reference of the accelerator's `slot_cut`."""
    n = len(slot)
    h = data.find(slot)
    p = data.find(slot, h + n) if h >= 0 else -1
    s = data.find(slot, p + n) if p >= 0 else -1
    if s < 0 or data.find(slot, s + n) >= 0:
        return None
    # Keys sort as "hash" < "prev" < "seq"; ',' before "hash": some key sorts before it (the splice
    # of the hash member below assumes one does).
    hk, pk, sk = _HASH_KEY, b'"prev":"', b'"seq":"'
    if data[h - len(hk) : h] != hk or data[p - len(pk) : p] != pk or data[s - len(sk) : s] != sk:
        return None
    # seq is a number: its slot loses the quotes around the placeholder (one before, one after)
    return data[: h - len(hk)], data[h + n + 1 : p], data[p + n : s - 1], data[s + n + 1 :]


def link(fields: dict, pieces: LinkPieces, seq: int, prev: str) -> tuple[dict, list[bytes]]:
    """chain_entry(fields, seq, prev) from `link_pieces(fields)`: the entry and its line (with the
    newline) as pieces to join. A `prev` other than letters and digits (only a damaged file gives
    one) would need escaping, so it goes through chain_entry."""
    a, b, c, d, _ = pieces
    pv, sq = prev.encode(), str(seq).encode()
    if not pv.isalnum():
        entry, line = chain_entry(fields, seq, prev)
        return entry, [line]
    digest = hashlib.sha256(b"".join((a, b, pv, c, sq, d))).hexdigest()
    entry = dict(fields)
    entry["seq"] = seq
    entry["prev"] = prev
    entry["hash"] = digest
    return entry, [a, hash_member(digest), b, pv, c, sq, d, b"\n"]
