"""The shim's upstream HTTP connections, through `httpx2` (the HTTP client of the MCP SDK).

The relay uses httpx2's transport (`AsyncHTTPTransport`: httpcore2's connection pool, h11's parser)
directly, without an `AsyncClient` around it: a reverse proxy wants none of the client's auth,
redirect, cookie and default-header handling, and leaving it out saves about 0.2 ms per request.

- a keep-alive pool per upstream origin; idle connections are dropped after 4 s, before servers
  close them (uvicorn's default is 5 s), and a connection the server has closed is noticed before
  it is reused (httpcore checks the socket);
- requests as the relay gives them: no `User-Agent`, `Accept`, `Accept-Encoding`, `Connection` or
  cookies of httpx's own, only `Host` and `Content-Length` added; the request target (path and
  query) is sent byte for byte as the client sent it (httpcore's `target` extension), not re-parsed;
- no proxy and no environment lookups (`trust_env=False`), no redirects, no cookie jar;
- TLS verified against the system roots or `SSL_CERT_FILE` (`ssl.create_default_context()`);
- responses streamed (`aiter_raw`): no content decoding, and an event stream passes chunk by chunk
  as it arrives;
- transport failures raised as `UpstreamError`, an `OSError`, which is what the relays catch.

TCP_NODELAY is set by asyncio on every TCP connection it opens, so the request head and body, which
httpcore writes separately, are not held back by Nagle's algorithm.

Why httpx2 and not httpx: with httpx 0.28 / httpcore 1.0 each request pays several failed
`import sniffio` (httpcore looks for it on every lock and event it sets up, and anyio no longer
installs it; encode/httpcore#1103), about 0.4 ms per relayed call more than httpx2, where it is
fixed. docs/mcp.md ("The upstream HTTP client") has the measurements.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httpx2

IDLE_SECONDS = 4.0  # pooled connections idle longer than this are not reused (servers close them)
CONNECT_TIMEOUT = 30.0
# no read or write timeout: event streams stay open as long as the server keeps them
TIMEOUTS = {"connect": CONNECT_TIMEOUT, "read": None, "write": None, "pool": None}


class UpstreamError(OSError):
    """The upstream could not be reached, or broke the exchange; the message says how."""


def _why(exc: Exception) -> str:
    return f"{exc.__class__.__name__}: {exc}" if str(exc) else exc.__class__.__name__


class UpstreamResponse:
    """An upstream response whose head is in; the body is read with `iter_raw` or `read`."""

    def __init__(self, response: httpx2.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.headers: list[tuple[bytes, bytes]] = response.headers.raw  # as sent: order, case, repeats

    def header(self, name: str) -> str | None:
        return self._response.headers.get(name)

    async def iter_raw(self) -> AsyncIterator[bytes]:
        """The body as it arrives (transfer framing removed, content encoding untouched)."""
        try:
            async for chunk in self._response.aiter_raw():
                yield chunk
        except httpx2.StreamConsumed:
            return
        except httpx2.TransportError as exc:
            raise UpstreamError(f"the upstream broke the response body: {_why(exc)}") from None

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.iter_raw()])

    async def aclose(self) -> None:
        """The connection goes back to the pool if the body was read to its end, else it is closed."""
        with contextlib.suppress(httpx2.TransportError):
            await self._response.aclose()


class UpstreamPool:
    """Keep-alive connections to one upstream origin."""

    def __init__(self, url: str, *, ssl_context: ssl.SSLContext | None = None, max_idle: int = 32) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http(s) URL")
        self.netloc = parts.netloc.rpartition("@")[2]  # credentials in the URL are not sent
        self.origin = httpx2.URL(f"{parts.scheme}://{self.netloc}")
        self.transport = httpx2.AsyncHTTPTransport(
            verify=ssl_context or ssl.create_default_context(),
            trust_env=False,
            limits=httpx2.Limits(max_connections=None, max_keepalive_connections=max_idle,
                                 keepalive_expiry=IDLE_SECONDS),
        )

    async def request(
        self, method: str, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes | None,
    ) -> UpstreamResponse:
        """Send one request; returns once the response head is in. `target` is the path and query."""
        request = httpx2.Request(method, self.origin, headers=headers, content=body,
                                 extensions={"target": target, "timeout": TIMEOUTS})
        try:
            response = await self.transport.handle_async_request(request)
        except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:
            raise UpstreamError(f"cannot connect to {self.netloc}: {_why(exc)}") from None
        except httpx2.TransportError as exc:
            raise UpstreamError(f"the exchange with {self.netloc} failed: {_why(exc)}") from None
        return UpstreamResponse(response)

    async def aclose(self) -> None:
        await self.transport.aclose()
