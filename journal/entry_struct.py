"""The verifier's quickest reading of a line: the contract's field rules checked on a typed decode, no dict built.

Only for a line already proven canonical (journal/canonical.py `jcs_line`: no duplicate key, no float, no
whitespace). msgspec decodes it into the structs below: the top level must hold exactly the contract's fourteen
keys (every field required, `forbid_unknown_fields`); a `str` field takes only a string and an `int` field only an
integer (never true or false); each header is an array of exactly two strings; the bodies and `mcp` are skipped
as raw bytes. What types cannot say (`ts`'s shape, the names, the status range, `error` beside a null status) is
checked after, with journal/entry.py's own tables, as `is_valid_entry` checks it. A line refused here is not a
finding: the caller's full checks decide it and name what is wrong. tests/journal/test_entry_struct.py holds
the differential tests against `is_valid_entry` and `validate_entry`.

`prev` and `hash` are read but their form is not checked: the verifier compares them with the expected prev and
the digest it computed (is_valid_entry's `links_known`).
"""

from __future__ import annotations

import msgspec

from journal.entry import _DIGITS_TO_ZERO, _TS_SHAPE, CAPTURES, EFFECTS, KEYS, connector_known

_ABSENT = msgspec.Raw(b"")  # a member that is there is at least one byte of JSON


class Request(msgspec.Struct):
    """What the contract reads of `request` (other members are allowed and skipped)."""

    method: str
    url: str
    headers: list[tuple[str, str]]
    body: msgspec.Raw


class Response(msgspec.Struct):
    """What the contract reads of `response`."""

    status: int | None
    headers: list[tuple[str, str]]
    body: msgspec.Raw
    error: msgspec.Raw = _ABSENT


class EntryFields(msgspec.Struct, forbid_unknown_fields=True):
    """The fourteen top-level members of an entry (journal/entry.py KEYS)."""

    seq: int
    ts: str
    session: str
    agent: str
    principal: str
    connector: str
    capture: str
    prompt_ref: str | None
    effect: str
    mcp: msgspec.Raw
    request: Request
    response: Response
    prev: str
    hash: str


assert set(EntryFields.__struct_fields__) == set(KEYS)

_decode = msgspec.json.Decoder(EntryFields).decode


_NULL = msgspec.Raw(b"null")


def _object_or_null(raw: msgspec.Raw) -> bool:
    """`mcp` is null or an object (a canonical line has no blank before a value, so its first byte tells)."""
    return raw == _NULL or memoryview(raw)[:1] == b"{"


def entry_fields(data: bytes) -> EntryFields | None:
    """The fields of the canonical line `data` when they keep the contract's rules (prev and hash aside), else
    None (then the full checks decide)."""
    try:
        e = _decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    ts, req, resp = e.ts, e.request, e.response
    status, mcp = resp.status, e.mcp
    if not (
        e.seq >= 1
        and ts.isascii() and ts.encode().translate(_DIGITS_TO_ZERO) == _TS_SHAPE
        and e.session and e.agent and e.principal and req.method
        and e.capture in CAPTURES and e.effect in EFFECTS
        and _object_or_null(mcp)
        and (100 <= status <= 999 if status is not None else len(resp.error) > 0)
        and connector_known(e.connector)
    ):
        return None
    return e
