"""The fake-upstream HTTPS server: one TLS listener on 127.0.0.1, dispatching on Host and path.

Why: end-to-end tests run offline, so the proxy is pointed (``--resolve host=127.0.0.1:PORT``) at this
server, which presents a trustme certificate for every real API host name and answers in each API's
shape. Threads (one per connection, TLS handshake done in that thread) keep it concurrent; bodies are
streamed both ways so 200 MiB transfers never sit in memory.
"""

from __future__ import annotations

import gzip
import itertools
import os
import shutil
import socket
import socketserver
import ssl
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import trustme

from . import anthropic, drive, gcalendar, gemini, generic, github, gmail, graph, oauth, openai, slack
from .common import (
    ALL_HOSTS,
    LOCAL_HOSTS,
    HttpError,
    Request,
    Response,
    Route,
    error_response,
    flavor_for_host,
    flavor_headers,
)
from .modelscript import ModelState
from .wire import BadBody, BodyReader

GZIP_MIN = 1024
_GOOGLE_AUTH_PARAMS = ("access_token", "oauth_token", "key")


@dataclass
class FakeState:
    """All connector state; tests may inspect or poke it (take the connector's ``lock``)."""

    gmail: gmail.GmailState
    calendar: gcalendar.CalendarState
    drive: drive.DriveState
    slack: slack.SlackState
    github: github.GitHubState
    graph: graph.GraphState
    models: ModelState


def build_routes(state: FakeState) -> list[Route]:
    """Generic routes first (any host), then each connector's."""
    return (
        generic.routes()
        + oauth.routes()
        + gmail.routes(state.gmail)
        + gcalendar.routes(state.calendar)
        + drive.routes(state.drive)
        + slack.routes(state.slack)
        + github.routes(state.github)
        + graph.routes(state.graph)
        + anthropic.routes(state.models)
        + openai.routes(state.models)
        + gemini.routes(state.models)
    )


def _split_host(value: str) -> str:
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if ":" in value else value


def _wants_gzip(req: Request) -> bool:
    forced = req.query.get("gzip")
    if forced is not None:
        return forced not in ("0", "false", "")
    for item in (req.header("accept-encoding") or "").split(","):
        name, _, params = item.strip().partition(";")
        if name.strip().lower() in ("gzip", "*"):
            q = params.strip()
            return not (q.startswith("q=") and float(q[2:] or 0) == 0)
    return False


class _TLSServer(ThreadingHTTPServer):
    """Threaded server that does the TLS handshake in the per-connection thread."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 1024
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], ctx: ssl.SSLContext, upstream: Upstream) -> None:
        self.ssl_context = ctx
        self.upstream = upstream
        self._conns: set[ssl.SSLSocket] = set()
        self._conns_lock = threading.Lock()
        self._conn_ids = itertools.count(1)
        super().__init__(addr, _Handler)

    def server_bind(self) -> None:
        """Bind without HTTPServer's getfqdn() (a reverse DNS lookup, slow offline)."""
        socketserver.TCPServer.server_bind(self)
        self.server_name = "127.0.0.1"
        self.server_port = self.server_address[1]

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Handshake, then serve the connection (keep-alive) until it closes."""
        request.settimeout(30)
        try:
            tls = self.ssl_context.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError):
            request.close()
            return
        tls._fake_conn_id = next(self._conn_ids)  # type: ignore[attr-defined]
        with self._conns_lock:
            self._conns.add(tls)
        try:
            self.RequestHandlerClass(tls, client_address, self)
        except (OSError, ssl.SSLError, ValueError):
            pass
        finally:
            with self._conns_lock:
                self._conns.discard(tls)
            try:
                tls.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            tls.close()

    def close_all(self) -> None:
        """Cut every open connection (used by stop())."""
        with self._conns_lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    """One connection; every request goes through Upstream._dispatch."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    timeout = 300
    server: _TLSServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Silence the per-request stderr log."""

    def handle_one_request(self) -> None:
        """Like the stdlib version, but any method is accepted and dispatched by route."""
        try:
            self.raw_requestline = self.rfile.readline(65537)
        except (TimeoutError, OSError):
            self.close_connection = True
            return
        if len(self.raw_requestline) > 65536:
            self.requestline = ""
            self.request_version = ""
            self.command = ""
            self.send_error(414)
            return
        if not self.raw_requestline:
            self.close_connection = True
            return
        if not self.parse_request():
            return
        try:
            self._serve()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, TimeoutError, BadBody):
            self.close_connection = True

    def _serve(self) -> None:
        up = self.server.upstream
        started = time.monotonic()
        headers = list(self.headers.items())
        host_header = self.headers.get("Host", "")
        sni = getattr(self.connection, "_fake_sni", None)
        host = _split_host(host_header) or (sni or "localhost")
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        chunked = "chunked" in te
        length: int | None = None
        if not chunked and self.headers.get("Content-Length"):
            try:
                length = int(self.headers["Content-Length"])
            except ValueError:
                self.send_error(400, "bad Content-Length")
                self.close_connection = True
                return
        body = BodyReader(self.rfile, length, chunked)  # type: ignore[arg-type]
        record = up._record_start(
            self.command,
            host,
            host_header,
            sni,
            self.path,
            headers,
            self.client_address,
            getattr(self.connection, "_fake_conn_id", 0),
        )
        req = Request(self.command, self.path, host, headers, body, sni, record)
        resp = up._dispatch(req)
        record["effective_method"] = req.method  # differs with X-HTTP-Method-Override
        try:
            body.drain()
        except BadBody:
            self.close_connection = True
        up._record_body(record, body)
        record["status"] = resp.status
        try:
            self._write(req, resp)
        finally:
            record["complete"] = True
            record["duration"] = round(time.monotonic() - started, 6)

    def _write(self, req: Request, resp: Response) -> None:
        status = resp.status
        no_body = req.method == "HEAD" or status in (204, 304) or 100 <= status < 200
        own = {k.lower() for k, _ in resp.headers}
        headers = [(k, v) for k, v in flavor_headers(req.flavor, req) if k.lower() not in own] + resp.headers
        server_name = next((v for k, v in headers if k.lower() == "server"), "upstream-fake/1.0")
        self.send_response_only(status)
        self.send_header("Date", self.date_time_string())
        self.send_header("Server", server_name)
        for k, v in headers:
            if k.lower() != "server":
                self.send_header(k, v)
        if resp.content_type and status != 204:
            self.send_header("Content-Type", resp.content_type)
        if self.close_connection:
            self.send_header("Connection", "close")
        body = resp.body
        if isinstance(body, bytes | bytearray | memoryview):
            data = bytes(body)
            if resp.compressible:
                self.send_header("Vary", "Accept-Encoding")
                if len(data) > GZIP_MIN and _wants_gzip(req) and not no_body:
                    data = gzip.compress(data, compresslevel=1 if len(data) > 256 * 1024 else 6)
                    self.send_header("Content-Encoding", "gzip")
            if status not in (204, 304) and not 100 <= status < 200:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if data and not no_body:
                self.wfile.write(data)
            return
        self._write_stream(resp, body, no_body)

    def _write_stream(self, resp: Response, body: Iterable[bytes], no_body: bool) -> None:
        chunked = resp.length is None
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(resp.length))
        self.end_headers()
        if no_body:
            close = getattr(body, "close", None)
            if callable(close):
                close()
            return
        sent = 0
        try:
            for piece in body:
                if not piece:
                    continue
                sent += len(piece)
                if chunked:
                    self.wfile.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
                else:
                    self.wfile.write(piece)
        except HttpError:
            self.close_connection = True
            return
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
        elif sent != resp.length:
            self.close_connection = True


class Upstream:
    """Fake SaaS upstreams behind one TLS port. Use as a context manager or start()/stop().

    ``requests`` lists what the server received (dicts: id, time, method, effective_method, host,
    host_header, sni, path (raw target incl. query), headers [(name, value)], client, connection (one id
    per TLS connection), body_sha256, body_size, body_head (<= 4 KiB), status, complete, duration). A
    record is appended when the request line arrives and filled in as the exchange proceeds; the list
    is bounded to ``max_records`` (oldest dropped). ``errors`` collects handler crashes (tracebacks).
    """

    def __init__(self, *, require_auth: bool = False, max_records: int = 100_000) -> None:
        self.port = 0
        self.ca_pem = ""
        self.hosts: list[str] = list(ALL_HOSTS)
        self.requests: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.require_auth = require_auth
        self.max_records = max_records
        self.tmpdir = ""
        self.state: FakeState | None = None
        self._routes: list[Route] = []
        self._server: _TLSServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> Upstream:
        """Create the CA and certificate, bind an ephemeral port and serve in a daemon thread."""
        if self._server is not None:
            return self
        self.tmpdir = tempfile.mkdtemp(prefix="fake-upstreams-")
        spill = os.path.join(self.tmpdir, "spill")
        os.makedirs(spill)
        ca = trustme.CA(organization_name="connector-broker fake upstreams")
        cert = ca.issue_cert(*self.hosts)
        self.ca_pem = os.path.join(self.tmpdir, "upstream-ca.pem")
        ca.cert_pem.write_to_path(self.ca_pem)
        cert.private_key_and_cert_chain_pem.write_to_path(os.path.join(self.tmpdir, "server.pem"))
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(ctx)
        ctx.set_alpn_protocols(["http/1.1"])
        ctx.sni_callback = _remember_sni
        self.state = FakeState(
            gmail=gmail.GmailState(),
            calendar=gcalendar.CalendarState(),
            drive=drive.DriveState(spill),
            slack=slack.SlackState(spill),
            github=github.GitHubState(),
            graph=graph.GraphState(),
            models=ModelState(),
        )
        self._routes = build_routes(self.state)
        self._server = _TLSServer(("127.0.0.1", 0), ctx, self)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-upstreams",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, cut open connections and delete the temp dir (CA, spill files)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.close_all()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        shutil.rmtree(self.tmpdir, ignore_errors=True)

    def __enter__(self) -> Upstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- helpers for tests and for the proxy ---------------------------------------------------------------

    def resolve_args(self) -> list[str]:
        """``["--resolve", "gmail.googleapis.com=127.0.0.1:PORT", ...]`` for the broker's CLI."""
        out: list[str] = []
        for host in self.hosts:
            out += ["--resolve", f"{host}=127.0.0.1:{self.port}"]
        return out

    def resolve_map(self) -> dict[str, tuple[str, int]]:
        """``{host: ("127.0.0.1", PORT)}`` for every certificate host."""
        return {host: ("127.0.0.1", self.port) for host in self.hosts}

    def curl_args(self) -> list[str]:
        """``--cacert CA --connect-to host:443:127.0.0.1:PORT ...`` so curl keeps SNI and Host."""
        out = ["--cacert", self.ca_pem]
        for host in self.hosts:
            out += ["--connect-to", f"{host}:443:127.0.0.1:{self.port}"]
        return out

    def ssl_context(self) -> ssl.SSLContext:
        """A client SSLContext that trusts only the fake CA."""
        return ssl.create_default_context(cafile=self.ca_pem)

    def url(self, host: str, path: str) -> str:
        """A direct URL (https://127.0.0.1:PORT/path) for clients that send ``Host: host`` themselves."""
        del host
        return f"https://127.0.0.1:{self.port}{path}"

    def client(self, **kwargs: Any) -> Any:
        """An ``httpx.Client`` that connects every host to this server (SNI and Host unchanged)."""
        from .client import mapped_client

        return mapped_client(self, **kwargs)

    def async_client(self, **kwargs: Any) -> Any:
        """An ``httpx.AsyncClient`` counterpart of ``client()``."""
        from .client import mapped_async_client

        return mapped_async_client(self, **kwargs)

    def clear_requests(self) -> None:
        """Forget recorded requests."""
        with self._lock:
            self.requests.clear()

    def find(
        self, method: str | None = None, host: str | None = None, path_prefix: str | None = None
    ) -> list[dict[str, Any]]:
        """Recorded requests matching all given filters."""
        with self._lock:
            recs = list(self.requests)
        return [
            r
            for r in recs
            if (method is None or r["method"] == method)
            and (host is None or r["host"] == host)
            and (path_prefix is None or r["path"].startswith(path_prefix))
        ]

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 5.0) -> dict[str, Any]:
        """Wait until a complete recorded request satisfies ``predicate``."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                recs = list(self.requests)
            for r in recs:
                if r["complete"] and predicate(r):
                    return r
            if time.monotonic() > deadline:
                raise TimeoutError("no matching request recorded")
            time.sleep(0.01)

    # -- internals -----------------------------------------------------------------------------------------

    def _record_start(
        self,
        method: str,
        host: str,
        host_header: str,
        sni: str | None,
        path: str,
        headers: list[tuple[str, str]],
        client: Any,
        conn_id: int,
    ) -> dict[str, Any]:
        rec: dict[str, Any] = {
            "id": next(self._ids),
            "time": time.time(),
            "method": method,
            "effective_method": method,
            "host": host,
            "host_header": host_header,
            "sni": sni,
            "path": path,
            "headers": headers,
            "client": tuple(client),
            "connection": conn_id,
            "body_sha256": None,
            "body_size": None,
            "body_head": b"",
            "status": None,
            "complete": False,
            "duration": None,
        }
        with self._lock:
            self.requests.append(rec)
            if len(self.requests) > self.max_records:
                del self.requests[: len(self.requests) - self.max_records + max(1, self.max_records // 10)]
        return rec

    @staticmethod
    def _record_body(rec: dict[str, Any], body: BodyReader) -> None:
        rec["body_sha256"] = body.sha256.hexdigest()
        rec["body_size"] = body.size
        rec["body_head"] = bytes(body.head)

    def _dispatch(self, req: Request) -> Response:
        host_flavor = flavor_for_host(req.host)
        req.flavor = host_flavor
        override = req.header("x-http-method-override")
        if override and (host_flavor == "google" or req.host in LOCAL_HOSTS):
            req.method = override.strip().upper()
        wrong_method: Route | None = None
        for r in self._routes:
            if r.hosts is not None and req.host not in r.hosts and req.host not in LOCAL_HOSTS:
                continue
            m = r.pattern.match(req.path)
            if m is None:
                continue
            if req.method not in r.methods and not (req.method == "HEAD" and "GET" in r.methods):
                wrong_method = wrong_method or r
                continue
            req.flavor = host_flavor if r.flavor == generic.ANY else r.flavor
            try:
                denied = None if r.public else self._check_auth(req)
                if denied is not None:
                    return denied
                return r.handler(req, m)
            except HttpError as exc:
                return error_response(req.flavor, exc.status, exc.message, exc.reason)
            except BadBody as exc:
                return error_response(req.flavor, 400, f"Malformed request body: {exc}")
            except Exception as exc:  # noqa: BLE001 - a fake must answer, and tests assert on .errors
                self.errors.append(f"{req.method} {req.host}{req.target}: {traceback.format_exc()}")
                return error_response(req.flavor, 500, f"fake upstream error: {exc!r}")
        if wrong_method is not None:
            req.flavor = host_flavor if wrong_method.flavor == generic.ANY else wrong_method.flavor
            return error_response(req.flavor, 405, f"Method {req.method} not allowed on {req.path}")
        return error_response(
            host_flavor,
            404,
            "Not Found"
            if host_flavor != "google"
            else f"The requested URL {req.path} was not found on this server.",
        )

    def _check_auth(self, req: Request) -> Response | None:
        """Real APIs answer 401 without credentials; the fake does when ``require_auth`` (or a bad token)."""
        if req.flavor not in ("google", "github", "graph"):
            return None
        token = req.bearer()
        if req.flavor == "google":
            token = token or next((req.query[p] for p in _GOOGLE_AUTH_PARAMS if req.query.get(p)), None)
            token = token or req.header("x-goog-api-key")
        bad = token is not None and ("invalid" in token or "expired" in token)
        if not bad and (token or not self.require_auth):
            return None
        if req.flavor == "github":
            return error_response("github", 401, "Bad credentials" if bad else "Requires authentication")
        if req.flavor == "graph":
            return error_response(
                "graph",
                401,
                "Access token has expired or is not yet valid." if bad else "Access token is empty.",
                "InvalidAuthenticationToken",
            )
        return error_response(
            "google",
            401,
            "Request had invalid authentication credentials. Expected OAuth 2 "
            "access token, login cookie or other valid authentication credential.",
            "authError",
        )


def _remember_sni(sock: Any, server_name: str | None, ctx: ssl.SSLContext) -> None:
    """Keep the client's SNI on the socket so requests can record it."""
    try:
        sock._fake_sni = server_name
    except AttributeError:
        pass
