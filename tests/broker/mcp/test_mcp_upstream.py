"""The HTTP relay's upstream client (`broker.mcp.upstream`, asyncio + httptools) against a raw socket server that
records the exact bytes it receives: requests pass as given, connections are kept alive, bodies
stream as they arrive, and failures are `UpstreamError` (an `OSError`)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from broker.mcp.upstream import UpstreamError, UpstreamPool

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "RawServer"], Awaitable[None]]


class RawServer:
    """An asyncio TCP server; `handler` speaks HTTP by hand. Records request heads and connections."""

    def __init__(self, handler: Handler, ssl_context: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.ssl_context = ssl_context
        self.heads: list[bytes] = []
        self.bodies: list[bytes] = []
        self.connections = 0
        self.url = ""
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task] = set()

    async def __aenter__(self) -> RawServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ssl_context)
        scheme = "https" if self.ssl_context else "http"
        self.url = f"{scheme}://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc) -> None:
        assert self.server is not None
        self.server.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            await self.handler(reader, writer, self)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self.tasks.discard(task)

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        body = await reader.readexactly(length) if length else b""
        self.bodies.append(body)
        return head


def ok(body: bytes = b'{"ok":true}', extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + extra
            + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer) -> None:
    while True:
        await srv.read_request(reader)
        writer.write(ok(extra=b"Set-Cookie: sid=secret; Path=/\r\nX-Trace: a\r\nX-Trace: b\r\n"))
        await writer.drain()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_request_goes_as_given_and_the_connection_is_kept() -> None:
    async def main() -> None:
        async with RawServer(keep_alive) as srv:
            pool = UpstreamPool(srv.url + "/mcp")
            try:
                target = b"/mcp/a%2Fb/../c?x=1&y=%20z"
                headers = [(b"Accept", b"application/json, text/event-stream"), (b"Mcp-Session-Id", b"s-1"),
                           (b"accept-encoding", b"identity")]
                for body in (b'{"jsonrpc":"2.0","id":1,"method":"ping"}', None):
                    resp = await pool.request("POST" if body else "GET", target, headers, body)
                    assert resp.status == 200 and resp.header("content-type") == "application/json"
                    assert [(k, v) for k, v in resp.headers if k.lower() == b"x-trace"] == [
                        (b"X-Trace", b"a"), (b"X-Trace", b"b")]
                    assert await resp.read() == b'{"ok":true}'
                    await resp.aclose()
            finally:
                await pool.aclose()
        assert srv.connections == 1  # kept alive
        port = srv.url.rsplit(":", 1)[1]
        assert srv.heads[0] == (
            b"POST /mcp/a%2Fb/../c?x=1&y=%20z HTTP/1.1\r\nHost: 127.0.0.1:" + port.encode() + b"\r\n"
            b"Accept: application/json, text/event-stream\r\nMcp-Session-Id: s-1\r\naccept-encoding: identity\r\n"
            b"Content-Length: 40\r\n\r\n"
        )  # no User-Agent, Connection or Accept-Encoding of the client's own; the target byte for byte
        assert srv.bodies[0] == b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
        assert srv.heads[1].startswith(b"GET /mcp/a%2Fb/../c?x=1&y=%20z HTTP/1.1\r\n")
        assert b"cookie" not in srv.heads[1].lower()  # the Set-Cookie was relayed, not kept
        assert b"content-length" not in srv.heads[1].lower()

    run(main())


def test_proxy_variables_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")

    async def main() -> None:
        async with RawServer(keep_alive) as srv:
            pool = UpstreamPool(srv.url)
            resp = await pool.request("GET", b"/", [], None)
            assert resp.status == 200
            await resp.read()
            await resp.aclose()
            await pool.aclose()

    run(main())


def test_a_connection_the_server_closed_is_not_reused() -> None:
    async def one_then_close(reader, writer, srv: RawServer) -> None:
        await srv.read_request(reader)
        writer.write(ok())  # no "Connection: close": the client learns it from the socket
        await writer.drain()

    async def main() -> None:
        async with RawServer(one_then_close) as srv:
            pool = UpstreamPool(srv.url)
            for _ in range(3):
                resp = await pool.request("POST", b"/mcp", [], b"{}")
                assert await resp.read() == b'{"ok":true}'
                await resp.aclose()
                await asyncio.sleep(0.05)  # the server's close arrives
            await pool.aclose()
        assert srv.connections == 3

    run(main())


def test_event_stream_passes_as_it_arrives() -> None:
    first_seen = asyncio.Event()

    async def sse(reader, writer, srv: RawServer) -> None:
        await srv.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for event in (b"event: message\ndata: 1\n\n", b"data: 2\n\n"):
            writer.write(b"%x\r\n%b\r\n" % (len(event), event))
            await writer.drain()
            await first_seen.wait()  # the second event only after the client has the first
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def main() -> None:
        async with RawServer(sse) as srv:
            pool = UpstreamPool(srv.url)
            resp = await pool.request("GET", b"/mcp", [(b"accept", b"text/event-stream")], None)
            got = []
            async for chunk in resp.iter_raw():
                got.append(chunk)
                first_seen.set()
            await resp.aclose()
            await pool.aclose()
            assert got == [b"event: message\ndata: 1\n\n", b"data: 2\n\n"]

    run(main())


def test_failures_are_upstream_errors() -> None:
    async def short_body(reader, writer, srv: RawServer) -> None:
        await srv.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        await writer.drain()

    async def no_answer(reader, writer, srv: RawServer) -> None:
        await srv.read_request(reader)

    async def main() -> None:
        async with RawServer(short_body) as srv:
            pool = UpstreamPool(srv.url)
            resp = await pool.request("GET", b"/", [], None)
            with pytest.raises(UpstreamError, match="broke the response body"):
                await resp.read()
            await resp.aclose()
            await pool.aclose()
        async with RawServer(no_answer) as srv:
            pool = UpstreamPool(srv.url)
            with pytest.raises(UpstreamError, match="failed"):
                await pool.request("POST", b"/", [], b"{}")
            await pool.aclose()
            dead = srv.url
        pool = UpstreamPool(dead)
        with pytest.raises(OSError, match="cannot connect to 127.0.0.1"):
            await pool.request("GET", b"/", [], None)
        await pool.aclose()

    run(main())


def test_only_http_urls() -> None:
    with pytest.raises(ValueError):
        UpstreamPool("ftp://example.com/")


def test_tls_verified_against_ssl_cert_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import trustme

    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))

    async def main() -> None:
        async with RawServer(keep_alive, server_ctx) as srv:
            untrusted = UpstreamPool(srv.url + "/mcp")
            with pytest.raises(UpstreamError, match="cannot connect"):
                await untrusted.request("POST", b"/mcp", [], b"{}")
            await untrusted.aclose()
            monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
            pool = UpstreamPool(srv.url + "/mcp")
            resp = await pool.request("POST", b"/mcp", [], None)
            assert resp.status == 200 and await resp.read() == b'{"ok":true}'
            await resp.aclose()
            await pool.aclose()
        assert srv.heads[-1].startswith(b"POST /mcp HTTP/1.1\r\n")
        assert b"Content-Length: 0\r\n" in srv.heads[-1]

    run(main())


def test_framing_edges_head_interim_until_close_and_unread_bodies() -> None:
    async def edges(reader, writer, srv: RawServer) -> None:
        while True:
            head = await srv.read_request(reader)
            path = head.split(b" ", 2)[1]
            if path == b"/head":  # a HEAD answer announces a length it does not send
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n")
            elif path == b"/continue":
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b'{"after":"100"}'))
            elif path == b"/big":
                writer.write(ok(b"x" * (3 << 20)))
            elif path == b"/close":  # no length, not chunked: the body ends with the connection
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end")
                await writer.drain()
                return
            else:
                writer.write(ok())
            await writer.drain()

    async def main() -> None:
        async with RawServer(edges) as srv:
            pool = UpstreamPool(srv.url)
            try:
                resp = await pool.request("HEAD", b"/head", [], None)
                assert resp.status == 200 and resp.header("content-length") == "1234"
                assert await resp.read() == b""
                await resp.aclose()
                resp = await pool.request("POST", b"/continue", [], b"{}")
                assert resp.status == 200 and await resp.read() == b'{"after":"100"}'
                await resp.aclose()
                resp = await pool.request("GET", b"/big", [], None)
                got = 0
                async for chunk in resp.iter_raw():  # read slowly: the socket is paused meanwhile
                    got += len(chunk)
                    await asyncio.sleep(0)
                assert got == 3 << 20
                await resp.aclose()
                resp = await pool.request("GET", b"/big", [], None)
                await resp.aclose()  # not read to its end: that connection is closed
                resp = await pool.request("GET", b"/ok", [], None)
                assert await resp.read() == b'{"ok":true}'
                await resp.aclose()
                resp = await pool.request("GET", b"/close", [], None)
                assert await resp.read() == b"until the end"
                await resp.aclose()
            finally:
                await pool.aclose()
        # one connection for HEAD (never reused: its parser waited for a body), one for /continue and
        # both /big, one after the unread body, for /ok and /close
        assert srv.connections == 3

    run(main())


def test_malformed_answers_are_upstream_errors() -> None:
    async def garbage(reader, writer, srv: RawServer) -> None:
        await srv.read_request(reader)
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(5)

    async def main() -> None:
        async with RawServer(garbage) as srv:
            pool = UpstreamPool(srv.url)
            with pytest.raises(UpstreamError, match="malformed HTTP"):
                await pool.request("GET", b"/", [], None)
            await pool.aclose()

    run(main())


@pytest.mark.parametrize(("method", "target", "headers"), [
    ("POST", b"/mcp", [(b"mcp-protocol-version", b"2026-07-28\r\nX-Injected: 1")]),
    ("POST", b"/mcp", [(b"bad name", b"x")]),
    ("POST", b"/mcp HTTP/1.1\r\nX: y", []),
    ("GET /x", b"/", []),
])
def test_a_request_that_would_not_stay_one_request_is_refused(method, target, headers) -> None:
    async def main() -> None:
        async with RawServer(keep_alive) as srv:
            pool = UpstreamPool(srv.url)
            with pytest.raises(UpstreamError, match="refused to send"):
                await pool.request(method, target, headers, b"{}")
            await pool.aclose()
        assert srv.heads == []  # nothing reached the server

    run(main())
