"""An HTTP/1.1-only TLS upstream on loopback whose connection handling the path chooses, for the tests of
upstream connection reuse (broker/proxy/h2_upstream_reuse.py).

Why not the fake SaaS upstreams: those always send a length and keep every connection; these tests need an
upstream that ends bodies by closing, says `Connection: close`, or drops idle connections. Every answer's body
starts with the request's path (then the sha256 and length of the request's body, if it has one: `answer_body`),
so a test can tell that each response went to the request it answers. The query adds: `?ms=N` waits N ms before
answering, `?size=N` appends N bytes, `?chunked=1` sends the body chunked (`&trailer=1`: with the trailer field
`x-checksum: PATH`), `?trickle=1` sends it in 64 KiB pieces 10 ms apart. The path decides the connection handling:

- `/keep/...`: `Content-Length` (or chunked), the connection stays open;
- `/eof/...`: no length, the body ends when the server closes the connection (HTTP/1's read-until-EOF);
- `/close/...`: `Content-Length` and `Connection: close`, but the server keeps the connection open and would
  answer another request on it: only the proxy's own rule can keep it from reusing that connection;
- `/raw/NAME`: the bytes of `scripts[NAME]` as they are (a float in the list: a pause of that many seconds; `...`:
  until the next request's head has come), for
  answers an upstream should not give (a body after a HEAD answer or a 204, two answers to one request); the
  connection stays open.

`idle_close` (seconds): a connection with no new request that long after an answer is closed by the server.
`accepted` counts TCP connections, `exchanges` lists (connection number, path), `most_in_flight` is the highest
number of requests received and not yet answered at once (each on its own connection, which the proxy cannot have
closed before it has the answer), `idle_closed` counts connections the server closed for idleness.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import ssl
import tempfile
import threading
import time
from urllib.parse import parse_qs, urlsplit

import trustme

HOST = "h1only.upstream.example"
READ_TIMEOUT = 300.0
"""Longer than any test waits: without `idle_close` the server never frees a connection the proxy keeps."""


class H1Upstream:
    """start()/stop() or a context manager; `port`, `ca_pem`, `hosts`, `resolve_args()` for BrokerProcess."""

    def __init__(self, idle_close: float | None = None, scripts: dict[str, list] | None = None) -> None:
        self.idle_close = idle_close
        self.scripts = scripts or {}
        self.hosts = [HOST]
        self.port = 0
        self.ca_pem = ""
        self.accepted = 0
        self.exchanges: list[tuple[int, str]] = []
        self.most_in_flight = 0
        self.idle_closed = 0
        self.errors: list[str] = []
        self._in_flight = 0
        self._lock = threading.Lock()
        self._tmp = ""
        self._sock: socket.socket | None = None
        self._ctx: ssl.SSLContext | None = None
        self._accept_thread: threading.Thread | None = None
        self._conn_threads: list[threading.Thread] = []
        self._conns: set[socket.socket] = set()
        self._stopping = False

    def start(self) -> H1Upstream:
        self._tmp = tempfile.mkdtemp(prefix="h1-upstream-")
        ca = trustme.CA(organization_name="connector-broker HTTP/1.1-only upstream")
        self.ca_pem = os.path.join(self._tmp, "ca.pem")
        ca.cert_pem.write_to_path(self.ca_pem)
        self._ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert(*self.hosts).configure_cert(self._ctx)
        self._ctx.set_alpn_protocols(["http/1.1"])
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._accept_thread = threading.Thread(target=self._accept, name="h1-upstream", daemon=True)
        self._accept_thread.start()
        return self

    def resolve_args(self) -> list[str]:
        return [a for h in self.hosts for a in ("--resolve", f"{h}=127.0.0.1:{self.port}")]

    def stop(self) -> None:
        """Stop accepting (shutdown wakes the blocked accept), cut every connection, join every thread."""
        self._stopping = True
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
        if self._accept_thread is not None:
            self._accept_thread.join(5)
        with self._lock:
            conns, threads = list(self._conns), list(self._conn_threads)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in threads:
            t.join(5)
        alive = [t.name for t in [self._accept_thread, *threads] if t is not None and t.is_alive()]
        shutil.rmtree(self._tmp, ignore_errors=True)
        assert not alive, f"upstream threads did not stop: {alive}"

    def __enter__(self) -> H1Upstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self) -> None:
        assert self._sock is not None
        while not self._stopping:
            try:
                raw, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
                number = self.accepted
                self._conns.add(raw)
                t = threading.Thread(target=self._serve, args=(raw, number), name=f"h1-conn-{number}", daemon=True)
                self._conn_threads.append(t)
            t.start()

    def _serve(self, raw: socket.socket, number: int) -> None:
        sock = raw
        try:
            assert self._ctx is not None
            raw.settimeout(READ_TIMEOUT)
            tls = sock = self._ctx.wrap_socket(raw, server_side=True)  # raw is detached: sock is the one to close
            with self._lock:
                self._conns.discard(raw)
                self._conns.add(tls)
            if self._stopping:
                return
            buf = b""
            answered = False
            while True:
                if answered and self.idle_close is not None:
                    tls.settimeout(self.idle_close)
                try:
                    while b"\r\n\r\n" not in buf:
                        data = tls.recv(65536)
                        if not data:
                            return
                        buf += data
                except TimeoutError:
                    if buf:
                        raise
                    with self._lock:
                        self.idle_closed += 1
                    return
                tls.settimeout(READ_TIMEOUT)
                target, request_body, buf = _read_request(tls, buf)
                path, query = urlsplit(target).path, parse_qs(urlsplit(target).query)
                with self._lock:
                    self.exchanges.append((number, path))
                    self._in_flight += 1
                    self.most_in_flight = max(self.most_in_flight, self._in_flight)
                if "ms" in query:
                    time.sleep(int(query["ms"][0]) / 1000)
                with self._lock:
                    self._in_flight -= 1
                if path.startswith("/raw/"):
                    for piece in self.scripts[path.removeprefix("/raw/")]:
                        if piece is ...:  # the head of the next request is in (not consumed)
                            while b"\r\n\r\n" not in buf:
                                data = tls.recv(65536)
                                if not data:
                                    return
                                buf += data
                        elif isinstance(piece, float):
                            time.sleep(piece)
                        else:
                            tls.sendall(piece)
                    answered = True
                    continue
                body = answer_body(path, request_body, int(query.get("size", ["0"])[0]))
                if path.startswith("/eof/"):
                    tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n" + body)
                    return
                extra = b"Connection: close\r\n" if path.startswith("/close/") else b""
                if "chunked" in query:
                    tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n"
                                + extra + b"\r\n")
                    step = max(1, len(body) // 3 + 1)
                    for i in range(0, len(body), step):
                        tls.sendall(b"%x\r\n%s\r\n" % (len(body[i:i + step]), body[i:i + step]))
                    trailer = b"x-checksum: %s\r\n" % path.encode() if "trailer" in query else b""
                    tls.sendall(b"0\r\n" + trailer + b"\r\n")
                else:
                    tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n%s\r\n"
                                % (len(body), extra))
                    for i in range(0, len(body), 65536):  # with ?trickle, a piece every 10 ms
                        tls.sendall(body[i:i + 65536])
                        if "trickle" in query:
                            time.sleep(0.01)
                answered = True
        except (OSError, ValueError) as exc:
            if not self._stopping:
                self.errors.append(f"connection {number}: {exc!r}")
        finally:
            with self._lock:
                self._conns.discard(sock)
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


def answer_body(path: str, request_body: bytes, size: int) -> bytes:
    """What the server answers: the path; with a request body, its sha256 and length; with ?size=N, a newline and N
    bytes more."""
    out = path.encode()
    if request_body:
        out += b" %s %d" % (hashlib.sha256(request_body).hexdigest().encode(), len(request_body))
    return out + (b"\n" + bytes(range(256)) * (size // 256) + b"z" * (size % 256) if size else b"")


def _read_request(tls: socket.socket, buf: bytes) -> tuple[str, bytes, bytes]:
    """The request target and body (Content-Length or chunked) from buf (which holds the head) and tls; what is left."""
    head, buf = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    target = lines[0].split(" ", 2)[1]
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}

    def more() -> bytes:
        data = tls.recv(65536)
        if not data:
            raise ValueError("the request body was cut off")
        return data

    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = b""
        while True:
            while b"\r\n" not in buf:
                buf += more()
            size_line, buf = buf.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            while len(buf) < size + 2:
                buf += more()
            body, buf = body + buf[:size], buf[size + 2:]
            if size == 0:
                return target, body, buf  # (no trailers from the proxy)
    length = int(headers.get("content-length", "0"))
    while len(buf) < length:
        buf += more()
    return target, buf[:length], buf[length:]
