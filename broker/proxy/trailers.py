"""HTTP/1.1 trailers through mitmproxy 12, which does not implement them there.

mitmproxy 12 relays HTTP/2 trailers (its HTTP/2 layer reads and sends them, and its HTTP layer keeps
them in `request.trailers` / `response.trailers` and sends them after the `request` / `response`
hook), but its HTTP/1 layer does neither: a chunked message that ends with trailer fields raises
"HTTP trailers are not implemented yet" (the connection dies, the client gets no answer), and
trailers that reach an HTTP/1 peer from an HTTP/2 one raise `AssertionError: Unexpected event:
RequestTrailers(...)`, whose message carries the trailer fields, credentials included, into the log.

`install()` (run when mitmproxy loads the broker's addon) closes both:

- reading: the chunked body reader keeps the trailer fields and the HTTP/1 layer hands them on as a
  `RequestTrailers` / `ResponseTrailers` event before the end of the message, as HTTP/2 does;
- sending: trailer fields to an HTTP/1 peer go in the last chunk of a chunked message; a request whose
  trailers are known before its head goes (a buffered one, e.g. from an HTTP/2 client) is framed
  chunked for that, and so is a buffered response with trailers to an HTTP/1.1 client. A message
  that is not chunked cannot carry them (RFC 9112 7.1.2): to the upstream
  (a streamed HTTP/2 request with a Content-Length), the connection is then cut
  before the message ends, so the platform never gets a request whose trailers were dropped while
  its entry shows them (the entry says the call failed); to a client, the trailers are left out and
  one line says so (the entry holds what the platform answered, trailers included).

What the entry holds: the trailers, redacted like headers, in `request.trailers` and
`response.trailers` (docs/contract.md).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Generator
from typing import Any

import h11
from mitmproxy import http
from mitmproxy.proxy import commands
from mitmproxy.proxy.layers.http import _http1
from mitmproxy.proxy.layers.http._base import ReceiveHttp
from mitmproxy.proxy.layers.http._events import (
    RequestEndOfMessage,
    RequestHeaders,
    RequestTrailers,
    ResponseEndOfMessage,
    ResponseHeaders,
    ResponseTrailers,
)

log = logging.getLogger("broker")

_installed = False
_PENDING = "_broker_trailers"
CUT_MESSAGE = "request trailers cannot be sent to an HTTP/1 upstream without chunked framing: connection cut"


class _TrailerKeepingReader:
    """A body reader that takes the trailer fields off h11's end of message and keeps them."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.trailers: http.Headers | None = None

    def __call__(self, buf: Any) -> Any:
        return self._keep(self.inner(buf))

    def read_eof(self) -> Any:
        return self._keep(self.inner.read_eof())

    def _keep(self, event: Any) -> Any:
        if isinstance(event, h11.EndOfMessage) and len(event.headers):
            self.trailers = http.Headers([(bytes(k), bytes(v)) for k, v in event.headers.raw_items()])
            return h11.EndOfMessage()
        return event


def _reader_keeping_trailers(make: Any) -> Any:
    @functools.wraps(make)
    def make_body_reader(expected_size: int | None) -> Any:
        return _TrailerKeepingReader(make(expected_size))

    return make_body_reader


def _read_body_with_trailers(read_body: Any) -> Any:
    @functools.wraps(read_body)  # (inspect.getsource shows the stock one: broker.proxy.h2_upstream_reuse checks it)
    def patched(self: Any, event: Any) -> Generator[Any, Any, None]:
        inner = read_body(self, event)
        reply = None
        while True:
            try:
                cmd = inner.send(reply)
            except StopIteration:
                return
            if isinstance(cmd, ReceiveHttp) and isinstance(cmd.event, (RequestEndOfMessage, ResponseEndOfMessage)):
                reader = getattr(self, "body_reader", None)
                trailers = reader.trailers if isinstance(reader, _TrailerKeepingReader) else None
                if reader is not None and trailers:
                    reader.trailers = None
                    kind = RequestTrailers if isinstance(cmd.event, RequestEndOfMessage) else ResponseTrailers
                    yield ReceiveHttp(kind(cmd.event.stream_id, trailers))
            reply = yield cmd

    return patched


def _trailer_block(trailers: http.Headers) -> bytes:
    return b"".join(k + b": " + v + b"\r\n" for k, v in trailers.fields)


def _send_with_trailers(send: Any, trailers_type: Any, end_type: type, request_side: bool) -> Any:
    @functools.wraps(send)  # (inspect.getsource shows the stock one: broker.proxy.h2_upstream_reuse checks it)
    def patched(self: Any, event: Any) -> Generator[Any, Any, None]:
        if request_side and isinstance(event, RequestHeaders) and event.request.trailers:
            # trailers known before the head goes (a buffered request, e.g. from an HTTP/2 client): frame it
            # chunked, the one HTTP/1 framing that carries them (framing is hop-by-hop; the entry keeps the
            # fields the client sent)
            headers = event.request.headers
            if "chunked" not in headers.get("transfer-encoding", "").lower():
                headers.pop("content-length", None)
                headers["transfer-encoding"] = "chunked"
        if (not request_side and isinstance(event, ResponseHeaders) and event.response.trailers
                and self.request is not None and self.request.http_version == "HTTP/1.1"
                and self.request.method.upper() != "HEAD"):
            # the same for a response whose trailers are known before its head goes to an HTTP/1.1 client
            # (a buffered response from an HTTP/2 upstream; its entry is already written)
            headers = event.response.headers
            if "chunked" not in headers.get("transfer-encoding", "").lower():
                headers.pop("content-length", None)
                headers["transfer-encoding"] = "chunked"
        if isinstance(event, trailers_type):
            setattr(self, _PENDING, event.trailers)
            return
        pending = getattr(self, _PENDING, None)
        if pending is not None and isinstance(event, end_type):
            setattr(self, _PENDING, None)
            message = self.request if request_side else self.response
            chunked = message is not None and "chunked" in message.headers.get("transfer-encoding", "").lower()
            head = not request_side and self.request is not None and self.request.method.upper() == "HEAD"
            if chunked and not head:
                yield commands.SendData(self.conn, b"0\r\n" + _trailer_block(pending) + b"\r\n")
                yield from self.mark_done(request=request_side, response=not request_side)
                return
            if request_side:  # never a request that reaches the platform without the trailers its entry shows
                log.warning("%s", CUT_MESSAGE)
                yield commands.CloseConnection(self.conn)
                return
            log.warning("response trailers left out: the client's HTTP/1 response is not chunked "
                        "(the entry keeps them)")
        yield from send(self, event)

    return patched


def install() -> None:
    """Patch mitmproxy's HTTP/1 layer once (see the module docstring)."""
    global _installed
    if _installed:
        return
    _installed = True
    _http1.make_body_reader = _reader_keeping_trailers(_http1.make_body_reader)
    _http1.Http1Connection.read_body = _read_body_with_trailers(  # type: ignore[method-assign]
        _http1.Http1Connection.read_body)
    _http1.Http1Client.send = _send_with_trailers(  # type: ignore[method-assign]
        _http1.Http1Client.send, RequestTrailers, RequestEndOfMessage, True)
    _http1.Http1Server.send = _send_with_trailers(  # type: ignore[method-assign]
        _http1.Http1Server.send, ResponseTrailers, ResponseEndOfMessage, False)
