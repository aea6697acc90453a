"""A small HTTP/1.1 client for the shim's upstream connections (keep-alive pool, streaming bodies).

Why not httpx: the relay's added latency was dominated by the general-purpose client (the request
head and body written separately, several layers per call). This client writes each request in one
`write`, reads the response head in one `readuntil`, and streams the body (Content-Length, chunked,
or until close) so event streams pass as they arrive. It speaks only what an MCP upstream needs:
HTTP/1.1 over TCP or TLS, no proxies, no redirects, no content decoding (the shim asks for
identity encoding).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

HEAD_LIMIT = 1 << 16
IDLE_SECONDS = 4.0  # pooled connections idle longer than this are not reused (servers close them)
CONNECT_TIMEOUT = 30.0


class UpstreamError(OSError):
    """The upstream could not be reached, or broke the exchange; the message says how."""


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = time.monotonic()

    def usable(self) -> bool:
        return (not self.writer.is_closing() and not self.reader.at_eof()
                and time.monotonic() - self.idle_since < IDLE_SECONDS)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class UpstreamResponse:
    def __init__(self, pool: UpstreamPool, conn: _Conn, status: int, headers: list[tuple[bytes, bytes]],
                 method: str) -> None:
        self.pool = pool
        self.status = status
        self.headers = headers
        self._conn: _Conn | None = conn
        self._done = False
        names = {k.lower(): v for k, v in headers}
        self._keep_alive = names.get(b"connection", b"").lower() != b"close"
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            self._mode, self._left = "none", 0
        elif b"chunked" in names.get(b"transfer-encoding", b"").lower():
            self._mode, self._left = "chunked", 0
        elif b"content-length" in names:
            self._mode, self._left = "length", int(names[b"content-length"])
        else:
            self._mode, self._left = "close", 0
            self._keep_alive = False

    def header(self, name: str) -> str | None:
        key = name.lower().encode()
        for k, v in self.headers:
            if k.lower() == key:
                return v.decode("latin-1")
        return None

    async def iter_raw(self) -> AsyncIterator[bytes]:
        """The body as it arrives (chunked framing removed)."""
        conn = self._conn
        if conn is None or self._done:
            return
        reader = conn.reader
        try:
            if self._mode == "length":
                while self._left > 0:
                    chunk = await reader.read(min(self._left, 1 << 20))
                    if not chunk:
                        raise UpstreamError("the upstream closed the connection in the middle of a body")
                    self._left -= len(chunk)
                    yield chunk
            elif self._mode == "chunked":
                while True:
                    size_line = await reader.readuntil(b"\r\n")
                    size = int(size_line.split(b";", 1)[0].strip(), 16)
                    if size == 0:
                        while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                            pass
                        break
                    yield await reader.readexactly(size)
                    await reader.readexactly(2)
            elif self._mode == "close":
                while chunk := await reader.read(1 << 20):
                    yield chunk
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, ConnectionError) as exc:
            self._keep_alive = False
            raise UpstreamError(f"the upstream broke the response body: {exc.__class__.__name__}: {exc}") from None
        self._done = True

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.iter_raw()])

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._done and self._keep_alive:
            self.pool.release(conn)
        else:
            conn.close()


class UpstreamPool:
    """Keep-alive connections to one upstream origin."""

    def __init__(self, url: str, *, ssl_context: ssl.SSLContext | None = None, max_idle: int = 32) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http(s) URL")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.netloc = parts.netloc.rpartition("@")[2]
        self.ssl = (ssl_context or ssl.create_default_context()) if parts.scheme == "https" else None
        self.max_idle = max_idle
        self._idle: list[_Conn] = []

    async def _connect(self) -> _Conn:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=self.ssl, limit=HEAD_LIMIT,
                                        server_hostname=self.host if self.ssl else None),
                CONNECT_TIMEOUT,
            )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise UpstreamError(f"cannot connect to {self.netloc}: {exc.__class__.__name__}: {exc}") from None
        return _Conn(reader, writer)

    def release(self, conn: _Conn) -> None:
        conn.idle_since = time.monotonic()
        if len(self._idle) < self.max_idle:
            self._idle.append(conn)
        else:
            conn.close()

    async def request(
        self, method: str, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes | None, *,
        retry: bool = True,
    ) -> UpstreamResponse:
        """Send one request; returns once the response head is in. `target` is the path and query.

        A kept-alive connection the server closed before answering is replaced once by a new one
        (`retry`); nothing had reached a live server then."""
        head = [method.encode() + b" " + target + b" HTTP/1.1", b"Host: " + self.netloc.encode("idna")]
        head += [k + b": " + v for k, v in headers]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            head.append(b"Content-Length: " + str(len(body or b"")).encode())
        data = b"\r\n".join(head) + b"\r\n\r\n" + (body or b"")
        while self._idle:
            conn = self._idle.pop()
            if conn.usable():
                try:
                    return await self._exchange(conn, data, method)
                except _Stale:
                    conn.close()
                    if not retry:
                        raise UpstreamError("the upstream closed a kept-alive connection before answering") from None
                    break
            conn.close()
        try:
            return await self._exchange(await self._connect(), data, method)
        except _Stale:
            raise UpstreamError("the upstream closed the connection before answering") from None

    async def _exchange(self, conn: _Conn, data: bytes, method: str) -> UpstreamResponse:
        try:
            conn.writer.write(data)
            await conn.writer.drain()
            raw = await conn.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            conn.close()
            if not exc.partial:
                raise _Stale from None
            raise UpstreamError("the upstream closed the connection in the middle of a response head") from None
        except (ConnectionError, OSError) as exc:
            conn.close()
            raise _Stale from exc
        except asyncio.LimitOverrunError:
            conn.close()
            raise UpstreamError(f"the upstream's response head is over {HEAD_LIMIT} bytes") from None
        except BaseException:
            conn.close()
            raise
        lines = raw.split(b"\r\n")
        try:
            version, code, *_ = lines[0].split(b" ", 2)
            status = int(code)
            if not version.startswith(b"HTTP/1."):
                raise ValueError(version)
        except ValueError:
            conn.close()
            raise UpstreamError(f"the upstream did not answer HTTP/1.x: {lines[0][:80]!r}") from None
        headers = []
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(b":")
                headers.append((name.strip(), value.strip()))
        return UpstreamResponse(self, conn, status, headers, method)

    async def aclose(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()


class _Stale(Exception):
    """Nothing came back on a connection: it was closed before the request reached a live server."""
