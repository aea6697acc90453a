"""The recording service's wire format: the proxy's `Call` values and the service's acknowledgements.

The proxy (`broker.proxy.link`) and the recording service (`broker.proxy.service`) talk over a
private socket pair. Each frame is a 4-byte big-endian length and a MessagePack payload (msgspec):

proxy -> service, one message per frame, each an array whose first item names its kind:

- `["call", id, Call]`: a whole call to record (`journal.call.Call`, a MessagePack map of its
  parts; bodies and raw header fields are MessagePack bin, so bytes stay bytes; a `Prepared` or
  `JsonValue` body is a map tagged `"type": "prepared"`/`"json"`; a method or URL that is not valid
  UTF-8 goes as its raw bytes, `sendable`);
- `["request", id, Call]`: the request half of a call still upstream (no response part), sent when
  the call goes upstream so the service prepares it meanwhile; or, for a call whose request half the
  proxy has prepared already (a write, for its write-ahead record: journal/write_ahead.py),
- `["prepared_request", id, Call, fields]`: that half's entry fields as `journal.record.Recorder.prepare_request`
  made them in the proxy, which the service takes instead of preparing them again, and the Call
  without its request body (what the service still reads: identity, further request keys, prompt
  capture, and the header fields for an entry saying the call could not be recorded); then
- `["response", id, Response, ts, mcp]`: the rest of that call (`journal.call.Response`, epoch
  seconds, the MCP request that caused it or nil);
- `["forget", id]`: drop a request half whose call ends unrecorded;
- `["coverage", [[session, url or host, what, n], ...]]`: calls the proxy left unrecorded (declared
  coverage, docs/checkpoints.md); never acknowledged.

service -> proxy, first an empty batch `[]` once the service has opened the vault and is ready (the
proxy's acknowledgement deadline, `broker.proxy.link`, runs from then on), then one frame per batch:
an array of acknowledgements `[id, outcome, detail, stopped, effect]`, for every "call" and
"response" in the order received. outcome "ok" (entry durable;
detail = its seq, effect = the entry's effect), "skip" (a token exchange: nothing recorded), "noted"
(the call could not be recorded and an entry saying so is durable; detail = why) or "error"
(detail = the reason; `stopped` when the session's file is stopped and takes nothing more).

A frame the service cannot decode as one of these is logged and skipped; when its id can still be
read and something may wait on it (any kind but "request", "forget", "coverage") it is acknowledged
with an error, and for a "call" whose identity can be read an entry says it could not be recorded.

The Call carries credentials (redaction happens in the service, or in the proxy for a "prepared_request").
They travel only over the socket; what reaches the disk is the redacted entry and its blobs, as for every
other capture point.

Why the service may take a "prepared_request" from the proxy: the two processes are split for CPU (the
proxy's one event-loop thread), not for trust. The proxy already redacts and writes entries itself
(`broker run --recorder inline`, and whenever the service is gone), its write-ahead records, made by
the same `prepare_request` in the proxy, become entries as they are when a write's outcome is lost
(`journal.write_ahead.recover`), it streams large bodies to blobs and hands them over `Prepared`, and
it runs as the same user with the vault open. What the service checks of every entry it appends is
unchanged: the contract's field check and the canonical form, in the writer (`append_many`).
"""

from __future__ import annotations

import logging
import struct
from typing import Any

import msgspec

from journal.call import Call, Identity, Request, Response

log = logging.getLogger("broker.proxy.wire")

HEADER = struct.Struct(">I")


class WholeCall(msgspec.Struct, array_like=True, tag="call"):
    id: int
    call: Call


class RequestAhead(msgspec.Struct, array_like=True, tag="request"):
    id: int
    call: Call


class PreparedAhead(msgspec.Struct, array_like=True, tag="prepared_request"):
    id: int
    call: Call
    fields: dict


class Completion(msgspec.Struct, array_like=True, tag="response"):
    id: int
    response: Response
    ts: float | None = None
    mcp: dict | None = None


class Forget(msgspec.Struct, array_like=True, tag="forget"):
    id: int


class Coverage(msgspec.Struct, array_like=True, tag="coverage"):
    gaps: list[tuple[str, str, str, int]]


class Unreadable(msgspec.Struct):
    """A frame that did not decode: its id when that could be read (then it is acknowledged), why,
    and the call when its identity could be salvaged (for the entry saying it was not recorded)."""

    id: int | None
    why: str
    call: Call | None = None


class Ack(msgspec.Struct, array_like=True):
    id: int
    outcome: str
    detail: Any = None
    stopped: bool = False
    effect: str | None = None
    hash: str | None = None


ToService = WholeCall | RequestAhead | PreparedAhead | Completion | Forget | Coverage

_encoder = msgspec.msgpack.Encoder()
_to_service = msgspec.msgpack.Decoder(ToService)
_to_proxy = msgspec.msgpack.Decoder(list[Ack])


def sendable(text: str) -> str | bytes:
    """A method or URL as mitmproxy gives it, fit for the wire: mitmproxy keeps bytes that are not
    UTF-8 as lone surrogates, which MessagePack cannot carry, so such text goes as those raw bytes
    (the recorder reads them back as it reads any raw field, `journal.record.wire_field`)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        try:
            return text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            return text.encode("utf-8", "surrogatepass")


def frame(message: ToService | list[Ack]) -> bytearray:
    """One frame: the length, then the message as MessagePack (encoded in place after the length)."""
    buf = bytearray(4)
    _encoder.encode_into(message, buf, 4)
    HEADER.pack_into(buf, 0, len(buf) - 4)
    return buf


def _payloads(buf: bytearray) -> tuple[list[memoryview], int]:
    out, pos, size = [], 0, len(buf)
    view = memoryview(buf)
    while size - pos >= 4:
        (n,) = HEADER.unpack_from(buf, pos)
        if size - pos - 4 < n:
            break
        out.append(view[pos + 4 : pos + 4 + n])
        pos += 4 + n
    return out, pos


def split_to_service(buf: bytearray) -> tuple[list[ToService | Unreadable], int]:
    """The complete frames at the start of `buf`, decoded (an undecodable one as `Unreadable`), and
    how many bytes they took."""
    payloads, used = _payloads(buf)
    out: list[ToService | Unreadable] = []
    for payload in payloads:
        try:
            out.append(_to_service.decode(payload))
        except msgspec.DecodeError as exc:
            out.append(_unreadable(payload, str(exc)))
    return out, used


def split_to_proxy(buf: bytearray) -> tuple[list[list[Ack]], int]:
    """The complete acknowledgement frames at the start of `buf`, and how many bytes they took."""
    payloads, used = _payloads(buf)
    out = []
    for payload in payloads:
        try:
            out.append(_to_proxy.decode(payload))
        except msgspec.DecodeError as exc:
            log.error("an unreadable acknowledgement of %d bytes was skipped: %s", len(payload), exc)
    return out, used


def _unreadable(payload: memoryview, why: str) -> Unreadable:
    """What can still be read of a frame that does not decode as a message: its id (for an error
    acknowledgement) and, for a call, enough of it to write the entry saying it was not recorded."""
    try:
        raw = msgspec.msgpack.decode(payload)
    except msgspec.DecodeError:
        log.error("an unreadable frame of %d bytes was skipped: %s", len(payload), why)
        return Unreadable(None, why)
    if not (isinstance(raw, list) and len(raw) >= 2 and isinstance(raw[0], str)
            and isinstance(raw[1], int) and not isinstance(raw[1], bool)):
        log.error("a frame that is not a message was skipped: %s", why)
        return Unreadable(None, why)
    if raw[0] in ("request", "prepared_request", "forget", "coverage"):  # nothing waits: a missing half is told later
        log.error("an unreadable %s message was skipped: %s", raw[0], why)
        return Unreadable(None, why)
    return Unreadable(raw[1], why, _salvage(raw[2]) if raw[0] == "call" and len(raw) > 2 else None)


def _salvage(raw: object) -> Call | None:
    """A Call holding what of a malformed one can be read safely (no bodies), or None."""
    if not isinstance(raw, dict):
        return None
    who, req = raw.get("identity"), raw.get("request")
    if not (isinstance(who, dict) and isinstance(who.get("session"), str) and isinstance(who.get("agent"), str)):
        return None
    req = req if isinstance(req, dict) else {}
    principal = who.get("principal")
    connector, capture = raw.get("connector"), raw.get("capture")
    resp = raw.get("response")
    status = resp.get("status") if isinstance(resp, dict) else None
    return Call(
        Identity(who["session"], who["agent"], principal if isinstance(principal, str) else None),
        connector if isinstance(connector, str) else "unknown",
        Request(req.get("method"), req.get("url"), req.get("headers") if isinstance(req.get("headers"), list) else ()),
        Response(status if isinstance(status, int) else None),
        capture=capture if isinstance(capture, str) else "broker",
        effect=raw.get("effect") if raw.get("effect") in ("read", "write") else None,
        fail_closed=raw.get("fail_closed") is not False,
    )
