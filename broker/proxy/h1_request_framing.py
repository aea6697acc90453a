"""An HTTP/2 or HTTP/3 request relayed to an HTTP/1 upstream says where its body ends.

Why: HTTP/2 frames a body itself, so a request may carry one with neither Content-Length nor Transfer-Encoding
(RFC 9113 8.1.1: content-length is optional). mitmproxy 12 converts such a request to HTTP/1.1 as it is: the head
goes without a length, then the body's bytes, raw. The upstream reads a request without a body, and then whatever
the body holds as a request of its own: the recorded agent can smuggle a call inside a recorded body, and it
reaches the platform with no entry of its own. With upstream connections kept for HTTP/2 clients
(broker.proxy.h2_upstream_reuse) its answer is even read as the next call's, and recorded as that call's answer
(found by the review of 2026-12-02: tests/e2e/test_h2_reuse_attacks.py).

`install()` (run when mitmproxy loads the broker's addon, so under `mitmdump -s addons/...` too) gives such a
request its framing before its head goes to an HTTP/1 upstream: a Content-Length when mitmproxy holds the body
whole (it sends the body right after the head), else chunked (a streamed body). Framing is hop-by-hop: the entry
keeps the header fields the client sent, as it does for the chunked framing of trailers (broker.proxy.trailers).
"""

from __future__ import annotations

import functools
from collections.abc import Generator
from typing import Any

from mitmproxy import http
from mitmproxy.proxy.layers.http import _http1
from mitmproxy.proxy.layers.http._events import RequestHeaders

_installed = False


def frame(request: http.Request) -> None:
    """Give a request from an HTTP/2 or HTTP/3 client whose body follows its head the HTTP/1 framing it lacks."""
    if not (request.is_http2 or request.is_http3):
        return  # an HTTP/1 request was read by its own framing, which goes on with it
    headers = request.headers
    if "content-length" in headers or "transfer-encoding" in headers:
        return
    if request.stream or request.raw_content is None:
        headers["transfer-encoding"] = "chunked"  # mitmproxy's HTTP/1 client then sends the body as chunks
    else:
        headers["content-length"] = str(len(request.raw_content))


def _send_framed(send: Any) -> Any:
    @functools.wraps(send)  # (inspect.getsource shows the stock one: broker.proxy.h2_upstream_reuse checks it)
    def patched(self: Any, event: Any) -> Generator[Any, Any, None]:
        if isinstance(event, RequestHeaders) and not event.end_stream:
            frame(event.request)
        yield from send(self, event)

    return patched


def install() -> None:
    """Patch mitmproxy's HTTP/1 client once (see the module docstring)."""
    global _installed
    if _installed:
        return
    _installed = True
    _http1.Http1Client.send = _send_framed(_http1.Http1Client.send)  # type: ignore[method-assign]
