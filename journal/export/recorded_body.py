"""Bytes back from a recorded body value: the inverse of journal.bodies.encode_body, for exports and
playback that hand a body to another tool.

A recorded body is `null`, a string, `{"base64": ...}`, a parsed JSON value (whose large strings may
be blob references), or a whole-body blob reference (docs/contract.md, Bodies). The original wire bytes of a
JSON body are not recorded, only its value, so a JSON body comes back in its RFC 8785 canonical form
(same value, maybe different whitespace). Redacted values stay redacted: nothing here can undo that.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterator
from typing import Literal, NamedTuple

from journal.blob_read import BlobMismatch, open_recorded_blob
from journal.blobstore import is_ref_object
from journal.bodies import is_json_type
from journal.canonical import canonical_bytes
from journal.confine import NotConfined, is_blob_name
from journal.vault import Vault, VaultError


class BlobUnavailable(VaultError):
    """A body needs a blob that is missing or does not hold the bytes its name says."""


class BodyUndecodable(VaultError):
    """A recorded `{"base64": ...}` body that is not base64 (the broker never writes one: the entry was edited)."""


BodyKind = Literal["empty", "blob", "text", "base64", "json"]


def body_kind(body: object, content_type: str | None) -> BodyKind:
    """Which of the recorded forms of a body (docs/contract.md, Bodies) this value is."""
    if body is None:
        return "empty"
    if is_ref_object(body):
        return "blob"
    if isinstance(body, str):
        return "text"
    if is_base64_body(body, content_type):
        return "base64"
    return "json"


def base64_bytes(body: dict) -> bytes:
    """The bytes of a `{"base64": ...}` body, strictly decoded."""
    try:
        return base64.b64decode(body["base64"], validate=True)
    except (binascii.Error, ValueError):
        raise BodyUndecodable("the recorded base64 body does not decode (run `broker verify`)") from None


BLOB_CHUNK = 1 << 20


def iter_blob(vault: Vault, ref: dict, chunk: int | None = None) -> Iterator[bytes]:
    """The bytes of a blob reference a chunk at a time (memory holds a chunk, whatever the blob's size), checked
    against its SHA-256 once read: BlobUnavailable, after the last chunk, when they do not match, or as soon as
    more bytes came than the reference's size (a caller that must not hand on wrong bytes reads it through
    once before writing any)."""
    digest = ref["sha256"]
    if not is_blob_name(digest) or ref["ref"] != f"blobs/sha256/{digest[:2]}/{digest}":
        raise BlobUnavailable(f"{str(ref['ref'])[:120]!r} is not a blob reference of this vault (run `broker verify`)")
    size = ref.get("size")
    limit = size if type(size) is int and size >= 0 else None
    mismatch = BlobUnavailable(f"blob {ref['ref']} does not hold the bytes its name says (run `broker verify`)")
    h, n = hashlib.sha256(), 0
    try:
        # hashed here as it is read (no reading through first), and never past the size the entry names
        with open_recorded_blob(vault, digest, limit, hashed_by_caller=True) as f:
            while data := f.read(chunk or BLOB_CHUNK):
                n += len(data)
                if limit is not None and n > limit:
                    raise mismatch
                h.update(data)
                yield data
    except BlobMismatch:
        raise mismatch from None
    except FileNotFoundError:
        raise BlobUnavailable(f"blob {ref['ref']} is missing from {vault.root} (run `broker verify`)") from None
    except NotConfined as exc:
        raise BlobUnavailable(f"blob {ref['ref']} is not read: {exc} (run `broker verify`)") from None
    if h.hexdigest() != digest:
        raise mismatch


def read_blob(vault: Vault, ref: dict) -> bytes:
    """The bytes of a blob reference, checked against its SHA-256 (an export never hands on wrong bytes)."""
    return b"".join(iter_blob(vault, ref))


def is_base64_body(body: object, content_type: str | None) -> bool:
    """True for the `{"base64": ...}` form of bytes (a JSON-typed body is a JSON value, never that form)."""
    return (
        isinstance(body, dict) and set(body) == {"base64"} and isinstance(body["base64"], str)
        and not is_json_type(content_type)
    )


def spilled_refs(body: object, path: str = "") -> list[tuple[str, dict]]:
    """Every blob reference inside a body value, with its JSON Pointer ("" for a whole-body spill)."""
    if is_ref_object(body):
        return [(path, body)]  # type: ignore[list-item]
    out: list[tuple[str, dict]] = []
    if isinstance(body, dict):
        for k, v in body.items():
            out.extend(spilled_refs(v, f"{path}/{k.replace('~', '~0').replace('/', '~1')}"))
    elif isinstance(body, list):
        for i, v in enumerate(body):
            out.extend(spilled_refs(v, f"{path}/{i}"))
    return out


def inline_json(value: object, vault: Vault) -> object:
    """A JSON body value with each spilled string put back (its blob holds the string's UTF-8)."""
    if is_ref_object(value):
        return read_blob(vault, value).decode("utf-8", "surrogatepass")  # type: ignore[arg-type]
    if isinstance(value, dict):
        return {k: inline_json(v, vault) for k, v in value.items()}
    if isinstance(value, list):
        return [inline_json(v, vault) for v in value]
    return value


class BodyBytes(NamedTuple):
    data: bytes
    kind: BodyKind


def decode_body(body: object, content_type: str | None, vault: Vault) -> BodyBytes:
    """The body's bytes with every spilled part read back from the blob store, and which form it was
    recorded in (the one decoder of recorded bodies: exports, playback, the inspector)."""
    kind = body_kind(body, content_type)
    if kind == "empty":
        return BodyBytes(b"", kind)
    if kind == "blob":
        return BodyBytes(read_blob(vault, body), kind)  # type: ignore[arg-type]
    if kind == "text":
        assert isinstance(body, str)  # body_kind says "text" only for a str
        return BodyBytes(body.encode("utf-8", "surrogatepass"), kind)
    if kind == "base64":
        return BodyBytes(base64_bytes(body), kind)  # type: ignore[arg-type]
    return BodyBytes(canonical_bytes(inline_json(body, vault)), kind)


def body_bytes(body: object, content_type: str | None, vault: Vault) -> bytes:
    """The body's bytes with every spilled part read back from the blob store."""
    return decode_body(body, content_type, vault).data


def header(headers: list, name: str) -> str | None:
    """The first value of a recorded header ([name, value] pairs), case-insensitively."""
    lname = name.lower()
    for pair in headers or ():
        if isinstance(pair, list | tuple) and len(pair) == 2 and str(pair[0]).lower() == lname:
            return str(pair[1])
    return None


def http_request_view(entry: dict) -> tuple[str, str, list, object, str | None]:
    """(method, url, header pairs, body value, content type) of the HTTP request an entry stands for.

    A gateway entry recorded the JSON-RPC method (`tools/call`) as its method and the params as its
    body; over HTTP the MCP client sent the whole JSON-RPC request (`mcp`, as sent) as a POST.
    """
    req = entry.get("request") or {}
    headers = req.get("headers") or []
    method, body = req.get("method"), req.get("body")
    ctype = header(headers, "content-type")
    if entry.get("capture") == "gateway":
        method = "POST"
        mcp = entry.get("mcp")
        body = mcp if isinstance(mcp, dict) and "unparsed" not in mcp else body
        ctype = ctype or "application/json"
    return str(method), str(req.get("url")), headers, body, ctype
