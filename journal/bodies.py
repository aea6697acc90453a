"""How a body is recorded (docs/contract.md, Bodies): decoded, redacted, encoded, spilled.

Body values in an entry:

- `null`: no body (zero bytes).
- a JSON value: the body had a JSON content type (`application/json`, `*+json`) and parsed
  strictly (no duplicate keys, no NaN/Infinity, every integer within +-(2^53-1), every number
  finite), so it survives the canonical form unchanged;
- a string: any other body that is valid UTF-8 and whose content type is not a binary one;
- `{"base64": "..."}`: any other bytes (standard base64 with padding);
- `{"sha256", "size", "ref"}`: the body was spilled to the blob store (over the threshold),
  holding the exact decoded bytes. Inside a JSON body, a string value over the threshold is
  replaced by such an object (the bytes are the UTF-8 of the string).

Content-encodings (gzip, deflate as zlib or raw deflate, br, zstd) are decoded before recording. A body
that fails to decode, or has an encoding the broker does not know, is not kept (the value is null) and
the message carries `content_encoding_error`: bytes that cannot be read cannot be redacted either.
"""

from __future__ import annotations

import base64
import json
import math
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

from journal.blobstore import BlobError, is_ref_object
from journal.canonical import (
    MAX_SAFE_INTEGER,
    CanonicalError,
    canonical_bytes,
    check_reads_back,
    float_reads_back,
    may_hold_float,
)
from journal.redact import StreamingRedactor, redact_body, redact_escaped_json

if TYPE_CHECKING:
    from journal.store.interface import BlobSink, BlobWriting

SPILL_THRESHOLD = 1 << 20
"""Bodies and JSON string values larger than this go to the blob store (configurable)."""
LINE_LIMIT = 5 << 20
"""No journal line may be longer than this (docs/contract.md)."""
JSON_PARSE_LIMIT = 8 << 20
"""A JSON body up to this size is held to be parsed, so its small fields stay in the entry while its
large strings are spilled; a larger JSON body is spilled whole as it streams."""

_BINARY_PREFIXES = ("image/", "audio/", "video/", "font/")
_BINARY_TYPES = frozenset({
    "application/octet-stream", "application/pdf", "application/zip", "application/gzip",
    "application/x-protobuf", "application/protobuf", "application/grpc", "application/x-tar",
    "application/vnd.google-apps.file",
})


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def is_json_type(content_type: str | None) -> bool:
    mt = media_type(content_type)
    return mt == "application/json" or mt.endswith("+json") or mt == "text/json"


def is_binary_type(content_type: str | None) -> bool:
    mt = media_type(content_type)
    return mt in _BINARY_TYPES or mt.startswith(_BINARY_PREFIXES)


# -- content-encoding ---------------------------------------------------------------------------


class ContentDecoder:
    """Incremental decoder for a Content-Encoding header value (possibly a list, applied in order)."""

    def __init__(self, content_encoding: str | None) -> None:
        codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
        self._stages = [_make_stage(c) for c in reversed(codings) if c != "identity"]

    @property
    def active(self) -> bool:
        return bool(self._stages)

    def feed(self, data: bytes) -> bytes:
        for stage in self._stages:
            data = stage.feed(data)
        return data

    def flush(self) -> bytes:
        out = b""
        for stage in self._stages:
            out = (stage.feed(out) if out else b"") + stage.flush()
        return out


def decoded_prefix(data: bytes, content_encoding: str | None, limit: int) -> bytes | None:
    """The decoded body if it decodes to at most `limit` bytes, else None (also when it does not decode).

    For checks on small bodies (is this a token grant?) without risking a decompression bomb: input
    is fed in small pieces and decoding stops once the output passes the limit.
    """
    try:
        decoder = ContentDecoder(content_encoding)
        if not decoder.active:
            return data if len(data) <= limit else None
        out = bytearray()
        for i in range(0, len(data), 16 << 10):
            out += decoder.feed(data[i : i + (16 << 10)])
            if len(out) > limit:
                return None
        out += decoder.flush()
    except Exception:  # noqa: BLE001 - any codec failure: not decodable
        return None
    return bytes(out) if len(out) <= limit else None


class _Stage:
    def feed(self, data: bytes) -> bytes:  # pragma: no cover - interface
        raise NotImplementedError

    def flush(self) -> bytes:
        return b""


class _Zlib(_Stage):
    def __init__(self, wbits: int) -> None:
        self._d = zlib.decompressobj(wbits)

    def feed(self, data: bytes) -> bytes:
        return self._d.decompress(data) if data else b""

    def flush(self) -> bytes:
        out = self._d.flush()
        if not self._d.eof:
            raise ValueError("compressed stream is truncated")
        return out


class _Deflate(_Stage):
    """`deflate` as servers send it: zlib-wrapped (RFC 9110) or raw deflate (RFC 1951, no header), which
    many servers send and browsers accept. The first two bytes tell: a zlib header is CM 8 with a check
    making the 16-bit value a multiple of 31, which raw deflate data starting a block rarely is."""

    def __init__(self) -> None:
        self._head = b""
        self._d: _Zlib | None = None

    def feed(self, data: bytes) -> bytes:
        if self._d is None:
            self._head += data
            if len(self._head) < 2:
                return b""
            data, self._head = self._head, b""
            zlib_header = data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
            self._d = _Zlib(zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS)
        return self._d.feed(data)

    def flush(self) -> bytes:
        if self._d is None:
            if self._head:
                raise ValueError("deflate stream is truncated")
            return b""
        return self._d.flush()


class _Brotli(_Stage):
    def __init__(self) -> None:
        import brotli  # shipped with mitmproxy

        self._d = brotli.Decompressor()

    def feed(self, data: bytes) -> bytes:
        return self._d.process(data) if data else b""

    def flush(self) -> bytes:
        if not self._d.is_finished():
            raise ValueError("brotli stream is truncated")
        return b""


class _Zstd(_Stage):
    def __init__(self) -> None:
        try:
            from compression import zstd  # type: ignore[import-not-found]  # Python >= 3.14
        except ImportError:
            from backports import zstd  # shipped with mitmproxy
        self._d = zstd.ZstdDecompressor()

    def feed(self, data: bytes) -> bytes:
        return self._d.decompress(data) if data else b""


def _make_stage(coding: str) -> _Stage:
    if coding in ("gzip", "x-gzip"):
        return _Zlib(16 + zlib.MAX_WBITS)
    if coding == "deflate":
        return _Deflate()
    if coding == "br":
        return _Brotli()
    if coding == "zstd":
        return _Zstd()
    raise ValueError(f"unknown content-encoding {coding!r}")


# -- JSON bodies --------------------------------------------------------------------------------


class _Unrepresentable(ValueError):
    pass


def _strict_pairs(pairs: list[tuple[str, object]]) -> dict:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise _Unrepresentable("duplicate key")
    return d


def _strict_int(s: str) -> int:
    v = int(s)
    if not -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER:
        raise _Unrepresentable("integer out of range")
    return v


def _strict_float(s: str) -> float:
    v = float(s)
    if not math.isfinite(v):
        raise _Unrepresentable("number overflows a double")
    if not float_reads_back(v):
        raise _Unrepresentable("number would be written as an integer beyond 2^53-1")
    return v


def _no_constant(s: str) -> object:
    raise _Unrepresentable(f"{s} is not JSON")


_STRICT = json.JSONDecoder(
    object_pairs_hook=_strict_pairs, parse_int=_strict_int, parse_float=_strict_float, parse_constant=_no_constant
)


def parse_json_strict(data: bytes) -> tuple[bool, object]:
    """(True, value) when `data` is JSON that survives the canonical form unchanged, else (False, None).

    JSON exactly as orjson writes it, compact (what most SDKs and APIs write, every MCP message of the
    Python and TypeScript SDKs) or indented by two spaces (Google's APIs, `json.dumps(indent=2,
    ensure_ascii=False)`), takes `_orjson_written` first: a fourth to a tenth of the cost, and the same
    answer (tests/journal/test_strict_json.py)."""
    value = _orjson_written(data)
    if value is not _NOT_ORJSON_WRITTEN:
        return True, value
    return _strict(data)


_NOT_ORJSON_WRITTEN = object()
_INDENTED = orjson.OPT_INDENT_2 | orjson.OPT_STRICT_INTEGER


def _orjson_written(data: bytes) -> object:
    """The value of `data` when `data` is exactly what orjson writes for that value, compact or with
    OPT_INDENT_2 (and at most one newline after it), and holds no integer beyond +-(2^53-1) and no float
    that would not read back; else `_NOT_ORJSON_WRITTEN`.

    Then `_strict` gives the same value: everything it refuses and orjson reads (a duplicate key, a
    number or string written another way, whitespace other than orjson's, an escape orjson does not
    write) reads into a value orjson writes differently, orjson refuses the rest (lone surrogates, NaN,
    invalid UTF-8), the two number checks are `_strict_int`'s (OPT_STRICT_INTEGER) and `_strict_float`'s
    (`check_reads_back`), and the newline is whitespace `_strict` allows after the value. orjson writes
    at most 255 levels deep, far inside what `_strict` reads."""
    try:
        value = orjson.loads(data)
        text = data[:-1] if data[-1:] == b"\n" else data
        written = orjson.dumps(value, option=orjson.OPT_STRICT_INTEGER)
        if written != text and (len(written) >= len(text) or orjson.dumps(value, option=_INDENTED) != text):
            return _NOT_ORJSON_WRITTEN
        if may_hold_float(text):  # (walking the value for floats costs several times the scan)
            check_reads_back(value)
    except (orjson.JSONDecodeError, orjson.JSONEncodeError, CanonicalError, RecursionError):
        return _NOT_ORJSON_WRITTEN
    return value


def _strict(data: bytes) -> tuple[bool, object]:
    """`parse_json_strict` for any text: Python's parser with the strict hooks above."""
    try:
        text = data.decode("utf-8")
        value, end = _STRICT.raw_decode(text.lstrip(" \t\r\n"))
        rest = text.lstrip(" \t\r\n")[end:]
        if rest.strip(" \t\r\n"):
            return False, None
        if "\\u" in text:
            canonical_bytes(value)  # a lone surrogate can only come from a \u escape
        return True, value
    except (ValueError, RecursionError):
        return False, None


# -- spilling -----------------------------------------------------------------------------------


def spill_large_strings(value: object, store: BlobSink, threshold: int) -> object:
    """Replace every string inside a JSON value whose UTF-8 exceeds `threshold` with a blob ref."""
    if isinstance(value, str):
        if len(value) * 4 > threshold:
            raw = value.encode("utf-8", "surrogatepass")
            if len(raw) > threshold:
                return store.put_bytes(raw)
        return value
    if isinstance(value, list):
        return [spill_large_strings(v, store, threshold) for v in value]
    if isinstance(value, dict):
        if is_ref_object(value):
            return value
        return {k: spill_large_strings(v, store, threshold) for k, v in value.items()}
    return value


def encode_body(data: bytes, content_type: str | None, store: BlobSink, threshold: int) -> object:
    """The entry value for a whole, already decoded and redacted body held in memory."""
    if not data:
        return None
    if is_json_type(content_type):
        ok, value = parse_json_strict(data)
        if ok:
            if len(data) <= threshold:
                return value
            value = spill_large_strings(value, store, threshold)
            if len(canonical_bytes(value)) <= threshold:
                return value
            return store.put_bytes(data)
    if len(data) > threshold:
        return store.put_bytes(data)
    if not is_binary_type(content_type):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return {"base64": base64.b64encode(data).decode("ascii")}


@dataclass
class BodyCapture:
    """A body passing through in chunks: decoded, redacted, held up to a bound, spilled beyond it.

    Memory stays bounded (threshold, or JSON_PARSE_LIMIT for JSON bodies) whatever the body size.
    `finish()` returns the entry's body value and any extra keys for the message.

    A failure to store the bytes (a full disk) does not raise into the caller that feeds the body
    (mitmproxy, mid-stream): the capture drops what it has, remembers why in `failure`, takes no
    more, and `finish()` raises BlobError with that reason.
    """

    store: BlobSink
    content_type: str | None = None
    content_encoding: str | None = None
    threshold: int = SPILL_THRESHOLD
    redact: bool = True
    _buf: bytearray = field(default_factory=bytearray)
    _blob: BlobWriting | None = None
    _raw_size: int = 0
    _errors: list[str] = field(default_factory=list)
    _omitted: bool = False
    failure: str | None = None

    def __post_init__(self) -> None:
        try:
            self._decoder: ContentDecoder | None = ContentDecoder(self.content_encoding)
        except ValueError as exc:
            self._decoder = None
            self._errors.append(f"{exc}: the body is not kept")
            self._omitted = True
        self._redactor = StreamingRedactor(self.content_type) if self.redact else None
        self._hold = JSON_PARSE_LIMIT if is_json_type(self.content_type) else self.threshold

    def feed(self, raw: bytes) -> None:
        if not raw or self.failure is not None:
            return
        try:
            self._feed(raw)
        except OSError as exc:
            self.failure = f"the body could not be stored: {exc.strerror or exc}"
            self.abort()
            self._buf = bytearray()

    def _feed(self, raw: bytes) -> None:
        self._raw_size += len(raw)
        if self._omitted:
            return
        data = raw
        if self._decoder is not None and self._decoder.active:
            try:
                data = self._decoder.feed(raw)
            except Exception as exc:  # noqa: BLE001 - any codec failure: the body is not kept
                self._decoder_failed(exc)
                return
        self._emit(data)

    def _decoder_failed(self, exc: Exception) -> None:
        self._errors.append(f"content-encoding {self.content_encoding!r} did not decode: {exc}")
        self._omit()

    def _omit(self) -> None:
        """Keep nothing of this body: what cannot be decoded cannot be redacted, and may hold a credential."""
        self._omitted = True
        self._decoder = None
        self.abort()
        self._blob = None
        self._buf = bytearray()

    def _emit(self, data: bytes) -> None:
        if self._redactor is not None:
            data = self._redactor.feed(data)
        self._sink(data)

    def _sink(self, data: bytes) -> None:
        if not data:
            return
        if self._blob is not None:
            self._blob.write(data)
            return
        self._buf += data
        if len(self._buf) > self._hold:
            self._blob = self.store.open_writer()
            self._blob.write(bytes(self._buf))
            self._buf = bytearray()

    def finish(self) -> tuple[object, dict]:
        """Return (body value, extra message keys)."""
        if self.failure is not None:
            raise BlobError(self.failure)
        if self._decoder is not None and self._decoder.active:
            try:
                tail = self._decoder.flush()
                if tail:
                    self._emit(tail)
            except Exception as exc:  # noqa: BLE001
                self._decoder_failed(exc)
        if self._redactor is not None and not self._omitted:
            self._sink(self._redactor.close())
        extra = {"content_encoding_error": "; ".join(self._errors)} if self._errors else {}
        if self._omitted:
            return None, extra
        if self._blob is not None:
            return self._blob.commit(), extra
        held = bytes(self._buf)
        if self._redactor is not None and is_json_type(self.content_type):  # as `record_body`
            held = redact_escaped_json(held)
        return encode_body(held, self.content_type, self.store, self.threshold), extra

    def abort(self) -> None:
        if self._blob is not None:
            self._blob.abort()


def record_body(
    data: bytes | None, content_type: str | None, content_encoding: str | None, store: BlobSink,
    threshold: int = SPILL_THRESHOLD, redact: bool = True,
) -> tuple[object, dict]:
    """Body value (and extra keys) for raw wire bytes already held in memory."""
    if not data:
        return None, {}
    hold = JSON_PARSE_LIMIT if is_json_type(content_type) else threshold
    held = _decoded_within(data, content_encoding, hold)
    if held is not None:
        if redact:
            held = redact_body(held, content_type)
            if is_json_type(content_type):  # what a reader of the JSON gets back from its escapes
                held = redact_escaped_json(held)
        if len(held) <= hold:
            return encode_body(held, content_type, store, threshold), {}
    cap = BodyCapture(store, content_type, content_encoding, threshold, redact)
    cap.feed(data)
    return cap.finish()


def _decoded_within(data: bytes, content_encoding: str | None, hold: int) -> bytes | None:
    """The decoded body when it decodes and is at most `hold` bytes, else None: `record_body`'s fast path.

    When the decoding succeeds and the redacted result is within `hold` (JSON_PARSE_LIMIT for JSON,
    else the threshold), `BodyCapture` fed the body would do no more than decode it, redact it (one
    redactor fed the decoded bytes, which gives what `redact_body` gives, whatever the chunking) and
    `encode_body` what it held, with no extra keys and no blob opened. `record_body` then does just
    that, without the capture's buffer copies. Anything else (a body that does not decode, or is too
    big to hold) goes through `BodyCapture`, which records the decoding error or streams to a blob.
    """
    if not content_encoding or content_encoding.strip().lower() == "identity":
        return data if len(data) <= hold else None
    return decoded_prefix(data, content_encoding, hold)


# -- the 5 MiB line rule ------------------------------------------------------------------------


def _json_size(value: object) -> int:
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass")) + 2
    return len(orjson.dumps(value))


def fits_unspilled(json_size: int, limit: int = LINE_LIMIT, reserve: int = 512) -> bool:
    """True when an entry whose orjson text (any key order) takes `json_size` bytes goes into a line of
    `limit` as it is: `fit_entry` returns it unchanged, spilling nothing. The 64 KiB margin: orjson's size is
    within a few bytes per float of the canonical size, and `reserve` leaves room for seq, prev and hash."""
    return json_size < limit - reserve - (64 << 10)


def fit_entry(fields: dict, store: BlobSink, limit: int = LINE_LIMIT, reserve: int = 512) -> dict:
    """Spill values of the entry, largest first, until its canonical line fits in `limit`.

    Candidates are every string inside request, response and mcp (spilled first: the structure
    around them stays readable), then containers inside them as wholes (their canonical JSON
    bytes). Nothing is truncated or dropped.
    """
    budget = limit - reserve
    if fits_unspilled(len(orjson.dumps(fields)), limit, reserve):
        return fields
    fields = orjson.loads(orjson.dumps(fields))  # private copy to edit in place
    while len(canonical_bytes(fields)) > budget:
        candidates: list[tuple[int, list, dict | list]] = []  # (size, [key], the container holding it)
        for top in ("request", "response", "mcp"):
            if fields.get(top) is not None:
                _collect(fields, top, candidates, depth=0)
        # Large strings first (the structure around them stays readable), then whole containers.
        strings = [c for c in candidates if c[0] > 256 and isinstance(c[2][c[1][-1]], str)]
        candidates = strings or [c for c in candidates if c[0] > 256]
        if not candidates:
            raise ValueError("entry does not fit in a journal line even with every large value spilled")
        size, path, holder = max(candidates, key=lambda c: c[0])
        key = path[-1]
        value = holder[key]  # type: ignore[index]
        raw = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else canonical_bytes(value)
        holder[key] = store.put_bytes(raw)  # type: ignore[index]
    return fields


def _collect(holder: object, key: object, out: list, depth: int) -> None:
    value = holder[key]  # type: ignore[index]
    if isinstance(value, str):
        out.append((_json_size(value), [key], holder))
        return
    if isinstance(value, dict):
        if is_ref_object(value):
            return
        if depth >= 1:
            out.append((_json_size(value), [key], holder))
        for k in value:
            _collect(value, k, out, depth + 1)
    elif isinstance(value, list):
        if depth >= 1:
            out.append((_json_size(value), [key], holder))
        for i in range(len(value)):
            _collect(value, i, out, depth + 1)
