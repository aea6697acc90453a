"""A fake WebSocket upstream on loopback (TLS, the real API host names), for WebSocket tests and benches.

Why: WebSocket traffic is recorded message by message, so the tests need a real server speaking the
protocol (the `websockets` package) behind `broker run --resolve`. One listener serves every host;
the path decides what it does:

- `/api/apps.connections.open`, `/api/rtm.connect` (plain HTTP POST/GET): Slack's answers, a
  `wss://wss-primary.slack.com/...?ticket=...` URL to connect to;
- `/link/` (Slack Socket Mode): `hello`, then one `events_api` envelope; the client's acks are kept;
- `/v1/realtime`, `/v1/responses` (OpenAI Realtime and the Responses WebSocket mode): a
  `session.created`, and for each `response.create` a short answer of text deltas and `response.done`;
- `/ws/bench`: counts messages and answers only `sync`, with the count (throughput);
- anything else: echo (text as text, binary as binary). `server-close` makes the server close
  with 4001 "bye"; `big:N` makes it send N bytes of text.

`received` lists (path, message) as the server got them; `on_message(path, message)`, when set, runs
before the server answers (a test checks there that the broker's entry is already on disk).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import ssl
import tempfile
import threading
from collections.abc import Callable
from typing import Any

import trustme
from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

HOSTS = [
    "api.github.com", "slack.com", "wss-primary.slack.com", "wss-backup.slack.com", "api.openai.com",
    "generativelanguage.googleapis.com", "ws.unknown-host.example", "ws.passed-host.example",
]
SOCKET_TICKET = "tkt-7f3e9a1c5b2d4e6f8a0b"
RTM_TICKET = "rtm-0a9b8c7d6e5f4a3b2c1d"


class WsUpstream:
    """The server; start()/stop() or a context manager. Attributes as `tests.support.upstreams.Upstream`
    has them for `BrokerProcess`: `port`, `ca_pem`, `hosts`, `resolve_args()`."""

    def __init__(self) -> None:
        self.port = 0
        self.ca_pem = ""
        self.hosts = list(HOSTS)
        self.received: list[tuple[str, str | bytes]] = []
        self.http_requests: list[tuple[str, str]] = []
        self.on_message: Callable[[str, str | bytes], None] | None = None
        self.errors: list[str] = []
        self.bench_count = 0
        self._tmp = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> WsUpstream:
        self._tmp = tempfile.mkdtemp(prefix="ws-upstream-")
        ca = trustme.CA(organization_name="connector-broker fake WebSocket upstream")
        cert = ca.issue_cert(*self.hosts)
        self.ca_pem = os.path.join(self._tmp, "ca.pem")
        ca.cert_pem.write_to_path(self.ca_pem)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(ctx)
        ctx.set_alpn_protocols(["http/1.1"])
        self._thread = threading.Thread(target=self._run, args=(ctx,), name="ws-upstream", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fake WebSocket upstream did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> WsUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def resolve_args(self) -> list[str]:
        out: list[str] = []
        for host in self.hosts:
            out += ["--resolve", f"{host}=127.0.0.1:{self.port}"]
        return out

    def client_ssl(self, ca_pem: str) -> ssl.SSLContext:
        """A client context trusting `ca_pem` (the broker's CA, for clients going through it)."""
        return ssl.create_default_context(cafile=ca_pem)

    # -- the server -----------------------------------------------------------------------------

    def _run(self, ctx: ssl.SSLContext) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._serve(ctx))
        self._loop.close()

    async def _serve(self, ctx: ssl.SSLContext) -> None:
        self._stop = asyncio.Event()
        async with serve(self._handler, "127.0.0.1", 0, ssl=ctx, process_request=self._http,
                         max_size=None, compression=None, ping_interval=None) as server:
            self.port = next(iter(server.sockets)).getsockname()[1]
            self._ready.set()
            await self._stop.wait()

    def _http(self, connection: ServerConnection, request: Request) -> Response | None:
        path = request.path
        self.http_requests.append((request.headers.get("Host", ""), path))
        if "/api/apps.connections.open" in path:
            return _json(200, {"ok": True, "url": f"wss://wss-primary.slack.com/link/?ticket={SOCKET_TICKET}"
                                                  "&app_id=A0FAKE"})
        if "/api/rtm.connect" in path:
            return _json(200, {"ok": True, "url": f"wss://wss-primary.slack.com/websocket/R1?ticket={RTM_TICKET}",
                               "self": {"id": "U0BOT", "name": "bot"},
                               "team": {"id": "T0FAKE", "name": "Fake", "domain": "fake"}})
        if request.headers.get("Upgrade", "").lower() != "websocket":
            return _json(404, {"ok": False, "error": "not_found"})
        return None

    async def _handler(self, ws: ServerConnection) -> None:
        path = ws.request.path if ws.request is not None else "/"
        try:
            if path.startswith("/link/"):
                await self._socket_mode(ws, path)
            elif path.startswith(("/v1/realtime", "/v1/responses")):
                await self._realtime(ws, path)
            elif path.startswith("/ws/bench"):
                async for message in ws:
                    if message == "sync":  # the client waits for this answer: everything before it arrived
                        await ws.send(str(self.bench_count))
                    else:
                        self.bench_count += 1
            else:
                await self._echo(ws, path)
        except Exception as exc:  # noqa: BLE001 - a closed connection mid-test is reported, not raised
            if type(exc).__name__ not in ("ConnectionClosedOK", "ConnectionClosedError"):
                self.errors.append(f"{path}: {type(exc).__name__}: {exc}")

    def _got(self, path: str, message: str | bytes) -> None:
        self.received.append((path, message))
        if self.on_message is not None:
            try:
                self.on_message(path, message)
            except Exception as exc:  # noqa: BLE001 - what the test checks there is reported
                self.errors.append(f"on_message: {type(exc).__name__}: {exc}")

    async def _echo(self, ws: ServerConnection, path: str) -> None:
        async for message in ws:
            self._got(path, message)
            if message == "server-close":
                await ws.close(4001, "bye")
                return
            if isinstance(message, str) and message.startswith("big:"):
                await ws.send("x" * int(message[4:]))
                continue
            await ws.send(message)

    async def _socket_mode(self, ws: ServerConnection, path: str) -> None:
        await ws.send(json.dumps({"type": "hello", "num_connections": 1,
                                  "debug_info": {"host": "applink-fake", "approximate_connection_time": 3600},
                                  "connection_info": {"app_id": "A0FAKE"}}))
        await ws.send(json.dumps({
            "envelope_id": "env-1", "type": "events_api", "accepts_response_payload": False,
            "payload": {"token": "verification-secret-xyz", "team_id": "T0FAKE",
                        "event": {"type": "app_mention", "user": "U1", "text": "<@U0BOT> hello", "channel": "C1"}},
        }))
        async for message in ws:
            self._got(path, message)

    async def _realtime(self, ws: ServerConnection, path: str) -> None:
        if not path.startswith("/v1/responses"):  # the Responses WebSocket mode opens with no event
            await ws.send(json.dumps({"type": "session.created", "event_id": "ev0",
                                      "session": {"id": "sess_1", "type": "realtime", "model": "gpt-realtime",
                                                  "instructions": "You are helpful."}}))
        n = 0
        async for message in ws:
            self._got(path, message)
            try:
                event = json.loads(message)
            except (TypeError, ValueError):
                continue
            if event.get("type") != "response.create":
                continue
            n += 1
            rid = f"resp_{n}"
            for delta in ("Hel", "lo"):
                await ws.send(json.dumps({"type": "response.output_text.delta", "event_id": f"ev{n}d",
                                          "response_id": rid, "item_id": "item_1", "output_index": 0,
                                          "content_index": 0, "delta": delta}))
            responses_mode = path.startswith("/v1/responses")  # its last event is response.completed
            await ws.send(json.dumps({
                "type": "response.completed" if responses_mode else "response.done", "event_id": f"ev{n}x",
                "sequence_number": 3, "response": {
                "id": rid, "object": "response" if responses_mode else "realtime.response", "status": "completed",
                "created_at": 1_700_000_000, "model": "gpt-fake",
                "output": [
                    {"id": "item_1", "type": "message", "role": "assistant", "status": "completed",
                     "content": [{"type": "output_text", "text": "Hello"}]},
                    {"id": "item_2", "type": "function_call", "name": "list_issues", "call_id": "call_1",
                     "arguments": "{\"repo\": \"octo/hello\"}", "status": "completed"},
                ]}}))


def _json(status: int, value: Any) -> Response:
    body = json.dumps(value).encode()
    headers = Headers([("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return Response(status, "OK" if status == 200 else "Not Found", headers, body)
