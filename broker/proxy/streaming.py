"""Streamed bodies: which messages stream, capturing their bodies as they pass, and holding back the end.

When an entry is written: for a buffered response, before the response is released to the
client (the `response` hook waits until the entry is durable). Streamed responses (event streams,
unknown length, bodies over the spill threshold, JSON over JSON_PARSE_LIMIT) reach the client as
they arrive, and the entry is written when the upstream body ends, before mitmproxy sends the end
of the message. So that no client can hold a complete response before its entry is durable, a
streamed response loses its Content-Length on the way to the client: an HTTP/1.1 client gets it
chunked (the last chunk follows the entry), HTTP/1.0 delimited by the connection's close, HTTP/2
by the end of the stream. The entry records the upstream's own headers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from mitmproxy import http

from journal.bodies import JSON_PARSE_LIMIT, BodyCapture, is_json_type
from journal.call import Body, Prepared
from journal.models.capture import StreamHold

if TYPE_CHECKING:
    from journal.store.interface import BlobSink


def must_stream(fields: tuple[tuple[bytes, bytes], ...], spill_threshold: int) -> bool:
    """Stream what could be big or long-lived; buffer the rest so its entry is durable before release.

    JSON bodies of known length up to JSON_PARSE_LIMIT are buffered (bounded memory) so that their
    small fields can stay in the entry and the response is held until the entry is on disk.
    (One pass over the raw header fields: `Headers.get` costs a few microseconds per lookup.)
    """
    ctype = length = coding = None
    for k, v in fields:
        if len(k) in (12, 14, 17):  # content-type, content-length, transfer-encoding
            lk = k.lower()
            if lk == b"content-type" and ctype is None:
                ctype = v.decode("latin-1")
            elif lk == b"content-length" and length is None:
                length = v
            elif lk == b"transfer-encoding" and coding is None:
                coding = v
    if ctype is not None and "text/event-stream" in ctype:
        return True
    if length is None:
        return coding is not None and b"chunked" in coding.lower()
    try:
        size = int(length)
    except ValueError:
        return True
    threshold = spill_threshold
    limit = JSON_PARSE_LIMIT if is_json_type(ctype or "") else threshold
    return size > max(limit, threshold)


def body_capture(blobs: BlobSink, headers: http.Headers, spill_threshold: int) -> BodyCapture:
    """A capture for a body that streams: decoded, redacted and spilled to `blobs` as it passes."""
    return BodyCapture(blobs, headers.get("content-type"), headers.get("content-encoding"), spill_threshold)


def feeding(cap: BodyCapture | StreamHold) -> Callable[[bytes], bytes]:
    """mitmproxy's `stream` callable: each chunk goes on unchanged and into `cap`."""
    def chunk(data: bytes) -> bytes:
        if data:
            cap.feed(data)
        return data

    return chunk


def captured_body(message: http.Message, cap: BodyCapture | StreamHold | None) -> Body:
    """A message's body for its Call: what its capture made of it (a streamed body), else its bytes."""
    if isinstance(cap, StreamHold):
        return cap.data()
    if cap is not None:
        value, extra = cap.finish()
        return Prepared(value, extra)
    return message.raw_content or None


def hold_back_the_end(flow: http.HTTPFlow) -> None:
    """Re-frame a streamed response so that the client learns it is complete only from the end of the
    message, which mitmproxy sends after the `response` hook (after the entry is durable): without a
    Content-Length, the last bytes alone do not tell the client it has everything."""
    resp = flow.response
    assert resp is not None
    if flow.request.method == "HEAD" or "content-length" not in resp.headers:
        return
    del resp.headers["content-length"]
    version = flow.request.http_version
    if version == "HTTP/1.1":
        if "chunked" not in resp.headers.get("transfer-encoding", "").lower():
            resp.headers["transfer-encoding"] = "chunked"
    elif version == "HTTP/1.0":
        resp.headers["connection"] = "close"  # delimited by the close that follows the message
