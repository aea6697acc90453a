"""The shim's upstream HTTP connections: HTTP/1.1 on asyncio, responses parsed by `httptools`.

`httptools` is llhttp (Node.js's HTTP parser) in C, the parser uvicorn uses; what is ours is small:
writing the request head, a keep-alive pool, and handing the body on as it arrives. It replaced
httpx2's transport (httpcore2, h11, anyio), which cost about 0.55 ms of CPU per relayed request on
the development machine (about 1,700 Python calls a request) against about 0.09 ms here, measured
against the same server in one run (docs/mcp.md, "The upstream HTTP client").

- a keep-alive pool per upstream origin; idle connections are dropped after 4 s, before servers
  close them (uvicorn's default is 5 s); a connection the server has closed (its EOF seen by the
  event loop, or the socket readable while idle) is never reused;
- requests as the relay gives them: the request line with the target (path and query) byte for
  byte, `Host`, the relay's headers in their order and case, `Content-Length` last (0 for a POST,
  PUT or PATCH without a body, none for other methods without one); no `User-Agent`, `Accept`,
  `Accept-Encoding`, `Connection` or cookies of our own;
- no proxy and no environment lookups, no redirects, no cookie jar;
- TLS verified against the system roots or `SSL_CERT_FILE` (`ssl.create_default_context()`);
- responses streamed: no content decoding; chunked framing removed; an event stream passes chunk by
  chunk as it arrives; reading pauses while more than `BUFFER_LIMIT` bytes wait for the relay;
- a method, target or header that would not stay one request line or one header line (a CR or LF
  in a value taken from a client's JSON, say) is refused before anything is sent;
- transport and protocol failures raised as `UpstreamError`, an `OSError`, which is what the relays
  catch. One request per connection at a time (no pipelining); a response not read to its end
  closes its connection.
"""

from __future__ import annotations

import asyncio
import re
import select
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httptools

from journal.errors import BrokerError, InputError

IDLE_SECONDS = 4.0  # pooled connections idle longer than this are not reused (servers close them)
CONNECT_TIMEOUT = 30.0
# no read or write timeout: event streams stay open as long as the server keeps them
BUFFER_LIMIT = 1 << 20
"""Body bytes received and not yet taken by the relay above which the socket is not read."""
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})  # an empty body is sent as Content-Length: 0
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 token: a method, a header name
_BAD_VALUE = re.compile(rb"[\x00\r\n]")  # what would end a header line early (h11 refuses the same)
_BAD_TARGET = re.compile(rb"[\x00-\x20\x7f]")
_DEFAULT_PORTS = {"http": 80, "https": 443}


class UpstreamError(BrokerError, OSError):
    """The upstream could not be reached, or broke the exchange; the message says how."""


def _why(exc: BaseException) -> str:
    return f"{exc.__class__.__name__}: {exc}" if str(exc) else exc.__class__.__name__


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; `response` is the exchange under way (None while idle)."""

    def __init__(self, pool: UpstreamPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.response: UpstreamResponse | None = None
        self.closed = False
        self.reusable = True
        self.idle_since = 0.0
        self.paused = False

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        response = self.response
        if response is None:  # bytes while idle: the connection cannot be trusted with a request
            self.close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            response._fail("the upstream switched protocols, which the shim does not relay")
            self.close()
        except httptools.HttpParserError as exc:
            response._fail(f"the upstream sent malformed HTTP: {_why(exc)}")
            self.close()

    def eof_received(self) -> bool:
        self._lost("the connection closed")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost(_why(exc) if exc is not None else "the connection closed")

    def pause_writing(self) -> None:  # the request body is written at once; the kernel takes it
        pass

    def resume_writing(self) -> None:
        pass

    def _lost(self, why: str) -> None:
        self.closed = True
        self.pool._forget(self)
        response = self.response
        if response is not None and not response.complete:
            if response._head_in and not response._framed and not self._head_only():
                response._finish()  # a body delimited by the connection's end: this is its end
            else:
                response._fail(why)

    # -- httptools callbacks ---------------------------------------------------------------------

    def _current(self) -> UpstreamResponse | None:
        """The response the parser is reading; None (and the connection not reused) for bytes after
        its end, which nobody asked for."""
        response = self.response
        if response is None or response.complete:
            self.reusable = False
            return None
        return response

    def on_header(self, name: bytes, value: bytes) -> None:
        response = self._current()
        if response is not None:
            response.headers.append((name, value))

    def on_headers_complete(self) -> None:
        response = self._current()
        if response is None:
            return
        status = self.parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            response.headers = []  # an interim answer (100 Continue): the real one follows
            return
        response.status = status
        response._head()
        if self._head_only():
            self.reusable = False  # the parser would wait for a body a HEAD answer does not have
            response._finish()

    def on_body(self, body: bytes) -> None:
        response = self._current()
        if response is not None:
            response._chunk(body)

    def on_message_complete(self) -> None:
        response = self._current()
        if response is None or response.status is None:  # the end of an interim answer
            return
        if not self.parser.should_keep_alive():
            self.reusable = False
        response._finish()

    # -- the pool's side -------------------------------------------------------------------------

    def _head_only(self) -> bool:
        return self.response is not None and self.response.method == "HEAD"

    def usable(self, now: float) -> bool:
        """Idle, open, not expired, and nothing readable on the socket (a readable idle socket is an
        EOF or bytes nobody asked for, which the event loop may not have seen yet)."""
        if self.closed or not self.reusable or self.transport is None or self.transport.is_closing():
            return False
        if now - self.idle_since > IDLE_SECONDS:
            return False
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            try:
                poller = select.poll()  # not select(): any fd number
                poller.register(sock.fileno(), select.POLLIN)
                if poller.poll(0):
                    return False
            except (OSError, ValueError):
                return False
        return True

    def pause(self) -> None:
        if not self.paused and self.transport is not None and not self.closed:
            self.paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.paused and self.transport is not None and not self.closed:
            self.paused = False
            self.transport.resume_reading()

    def close(self) -> None:
        self.closed = True
        self.pool._forget(self)
        if self.transport is not None:
            self.transport.close()


class UpstreamResponse:
    """An upstream response whose head is in; the body is read with `iter_raw` or `read`."""

    def __init__(self, pool: UpstreamPool, conn: _Connection, method: str) -> None:
        self._pool = pool
        self._conn = conn
        self.method = method
        self.status: int | None = None
        self.headers: list[tuple[bytes, bytes]] = []  # as sent: order, case, repeats
        self.complete = False
        self._head_in = False
        self._framed = False  # Content-Length or chunked: an early EOF is an error
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._error: str | None = None
        self._waiter: asyncio.Future | None = None
        self._consumed = False
        self._released = False

    def header(self, name: str) -> str | None:
        """The header's value (several of the same name joined with ", "), or None."""
        key = name.lower().encode("latin-1")
        values = [v.decode("latin-1") for k, v in self.headers if k.lower() == key]
        return ", ".join(values) if values else None

    async def iter_raw(self) -> AsyncIterator[bytes]:
        """The body as it arrives (transfer framing removed, content encoding untouched)."""
        if self._consumed:
            return
        self._consumed = True
        while True:
            while self._chunks:
                chunk = self._chunks.popleft()
                self._buffered -= len(chunk)
                if self._buffered <= BUFFER_LIMIT // 2:
                    self._conn.resume()
                yield chunk
            if self._error is not None:
                raise UpstreamError(f"the upstream broke the response body: {self._error}")
            if self.complete:
                self._release()
                return
            await self._wait()

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.iter_raw()])

    async def aclose(self) -> None:
        """The connection goes back to the pool if the body was read to its end, else it is closed."""
        self._release()

    # -- the connection's side -------------------------------------------------------------------

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _head(self) -> None:
        self._head_in = True
        for k, v in self.headers:
            name = k.lower()
            if name == b"content-length" or (name == b"transfer-encoding" and b"chunked" in v.lower()):
                self._framed = True
        self._wake()

    def _chunk(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > BUFFER_LIMIT:
            self._conn.pause()
        self._wake()

    def _finish(self) -> None:
        self.complete = True
        self._wake()

    def _fail(self, why: str) -> None:
        if self._error is None and not self.complete:
            self._error = why
        self._wake()

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        conn = self._conn
        conn.response = None
        if self.complete and self._error is None and not self._chunks and conn.reusable and not conn.closed:
            conn.resume()
            self._pool._put_back(conn)
        else:
            conn.close()


def _check_request(method: str, target: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    if not _TOKEN.fullmatch(method.encode("latin-1", "replace")):
        raise UpstreamError(f"refused to send the request: {method!r} is not an HTTP method")
    if not target.startswith(b"/") or _BAD_TARGET.search(target):
        raise UpstreamError(f"refused to send the request: {target[:200]!r} is not a request target")
    for name, value in headers:
        if not _TOKEN.fullmatch(name) or _BAD_VALUE.search(value):
            raise UpstreamError(f"refused to send the request: header {name[:100]!r} would not stay one line")


class UpstreamPool:
    """Keep-alive connections to one upstream origin."""

    def __init__(self, url: str, *, ssl_context: ssl.SSLContext | None = None, max_idle: int = 32) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputError(f"{url!r} is not an http(s) URL: give the upstream as http://HOST[:PORT]/PATH or https://...")
        self.netloc = parts.netloc.rpartition("@")[2]  # credentials in the URL are not sent
        self.host = parts.hostname
        self.port = parts.port or _DEFAULT_PORTS[parts.scheme]
        host = f"[{self.host}]" if ":" in self.host else self.host
        host = host if self.port == _DEFAULT_PORTS[parts.scheme] else f"{host}:{self.port}"
        self._host_header = host.encode("ascii") if host.isascii() else host.encode("idna")
        self.ssl = (ssl_context or ssl.create_default_context()) if parts.scheme == "https" else None
        self.max_idle = max_idle
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()

    async def request(
        self, method: str, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes | None,
    ) -> UpstreamResponse:
        """Send one request; returns once the response head is in. `target` is the path and query."""
        _check_request(method, target, headers)
        conn = self._take() or await self._connect()
        response = UpstreamResponse(self, conn, method)
        conn.response = response
        head = [method.encode("ascii"), b" ", target, b" HTTP/1.1\r\nHost: ", self._host_header, b"\r\n"]
        for k, v in headers:
            head += (k, b": ", v, b"\r\n")
        if body:
            head += (b"Content-Length: ", str(len(body)).encode("ascii"), b"\r\n")
        elif method in _BODY_METHODS:
            head.append(b"Content-Length: 0\r\n")
        head.append(b"\r\n")
        if body:
            head.append(body)
        try:
            assert conn.transport is not None
            conn.transport.write(b"".join(head))
            while not response._head_in:
                if response._error is not None:
                    raise UpstreamError(f"the exchange with {self.netloc} failed: {response._error}")
                await response._wait()
        except BaseException:
            response._released = True
            conn.response = None
            conn.close()
            raise
        return response

    def _take(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if conn.usable(now):
                return conn
            conn.close()
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(loop.create_connection(
                lambda: _Connection(self), self.host, self.port, ssl=self.ssl,
                server_hostname=self.host if self.ssl is not None else None,
            ), CONNECT_TIMEOUT)
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise UpstreamError(f"cannot connect to {self.netloc}: {_why(exc)}") from None
        self._all.add(conn)
        return conn

    def _put_back(self, conn: _Connection) -> None:
        conn.idle_since = time.monotonic()
        self._idle.append(conn)
        while len(self._idle) > self.max_idle:
            self._idle.pop(0).close()

    def _forget(self, conn: _Connection) -> None:
        self._all.discard(conn)

    async def aclose(self) -> None:
        self._idle.clear()
        for conn in list(self._all):
            conn.close()
        await asyncio.sleep(0)  # let the transports finish closing
