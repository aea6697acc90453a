"""HTTP transports of the shim.

`serve` (`broker mcp --listen HOST:PORT --upstream URL`): a reverse proxy for streamable HTTP and the
legacy HTTP+SSE transport. Every request goes to the upstream's origin with the same path and
query; headers pass both ways (the client's `Authorization` goes upstream and is redacted in the
entry; `mcp-session-id` and `mcp-protocol-version` are untouched), except hop-by-hop headers and
`Accept-Encoding` (the shim asks the upstream for identity encoding so it can read the stream).
`text/event-stream` answers are relayed event by event as they arrive. An event (or a JSON body)
holding the answer to a recorded call is released only once its entry is durable; later events of
the same stream wait behind it, other streams do not.

`run_stdio_front` (`broker mcp --upstream URL` without `--listen`): a stdio MCP server to the client
that speaks streamable HTTP to the upstream (one POST per client message, the GET stream for
server-initiated messages, `DELETE` at the end of a session).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import httpx
import orjson

from broker.mcp.messages import (
    PROTOCOL_VERSION_META,
    RECORDED_METHODS,
    Line,
    Message,
    error_response,
    id_key,
    parse_line,
)
from broker.mcp.recording import JOURNAL_ERROR_CODE, CallJournal, PendingCall
from broker.mcp.relay import MAX_LINE, SERVER_GONE_CODE, LineRelay, restore_blocking, say

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade", "host", "content-length", "accept-encoding",
})  # fmt: skip
_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
SESSION_HEADER = "mcp-session-id"


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def upstream_timeout() -> httpx.Timeout:
    return httpx.Timeout(30.0, read=None)  # event streams stay open as long as the server keeps them


def principal_for(headers: list[tuple[str, str]], url: str, fixed: str) -> str:
    """--principal when given, else the broker's fingerprint of the client's credential."""
    if fixed:
        return fixed
    from addons.connector_journal import principal_fingerprint

    return principal_fingerprint(headers, url)


# -- server-sent events ---------------------------------------------------------------------------


def split_events(buf: bytearray) -> list[bytes]:
    """Take every complete event (with its blank-line terminator) off the front of `buf`."""
    events = []
    while True:
        m = _EVENT_END.search(buf)
        if m is None:
            return events
        events.append(bytes(buf[: m.end()]))
        del buf[: m.end()]


def event_fields(event: bytes) -> tuple[str, bytes]:
    """(event type, data) of one event; data lines are joined with newlines."""
    kind, data = "message", []
    for line in re.split(rb"\r\n|\n|\r", event):
        if line.startswith(b"data:"):
            data.append(line[5:].removeprefix(b" "))
        elif line.startswith(b"event:"):
            kind = _text(line[6:]).strip()
    return kind, b"\n".join(data)


def event_with_data(event: bytes, data: bytes) -> bytes:
    """The same event with its data replaced (keeps id:, event:, retry: lines)."""
    lines = [ln for ln in re.split(rb"\r\n|\n|\r", event) if ln and not ln.startswith(b"data:")]
    return b"\n".join([*lines, b"data: " + data]) + b"\n\n"


# -- the reverse proxy ----------------------------------------------------------------------------


@dataclass
class _Tracked:
    method: str
    call: PendingCall | None


@dataclass
class _Exchange:
    """The client requests of one POST, matched first against answers on that POST's own stream."""

    scope: str
    local: dict[str, _Tracked] = field(default_factory=dict)


class HttpRelay:
    def __init__(
        self, journal: CallJournal, upstream: str, *, principal: str = "", max_line: int = MAX_LINE,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.journal = journal
        self.upstream = upstream
        parts = urlsplit(upstream)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.principal = principal
        self.max_line = max_line
        self.client = client or httpx.AsyncClient(timeout=upstream_timeout(), follow_redirects=False)
        self.tracked: dict[tuple[str, str], _Tracked] = {}  # answers that may come on another stream
        self._bg: set[asyncio.Task] = set()

    async def aclose(self) -> None:
        while self._bg:
            await asyncio.gather(*list(self._bg), return_exceptions=True)
        await self.client.aclose()

    # -- ASGI -----------------------------------------------------------------------------------

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await self._exchange(scope, bytes(body), receive, send)

    async def _exchange(self, scope, body: bytes, receive, send) -> None:
        method = scope["method"]
        path = scope.get("raw_path") or scope["path"].encode()
        query = scope.get("query_string", b"")
        target = self.origin + _text(path) + ("?" + _text(query) if query else "")
        headers = [(_text(k), _text(v)) for k, v in scope["headers"]]
        session = _session_scope(headers, query)
        exchange = _Exchange(session)
        principal = None
        if method == "POST" and body:
            principal = principal_for(headers, target, self.principal)
            self._track_request(body, exchange, target, headers, principal)
        forward = [(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP]
        forward.append(("accept-encoding", "identity"))
        request = self.client.build_request(method, target, headers=forward, content=body or None)
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            why = f"the upstream MCP server could not be reached: {exc.__class__.__name__}: {exc}"
            say(f"{method} {target}: {why}")
            await self._unanswered(exchange, why)
            await _send_json(send, 502, _error_body(exchange, SERVER_GONE_CODE, why))
            return
        watcher = asyncio.create_task(_wait_disconnect(receive))
        relay = asyncio.create_task(self._relay_response(response, exchange, send))
        try:
            done, _ = await asyncio.wait({watcher, relay}, return_when=asyncio.FIRST_COMPLETED)
            if relay not in done:
                relay.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await relay
                await self._unanswered(exchange, "the client disconnected before the answer came",
                                       status=response.status_code, headers=_pairs(response.headers))
            else:
                relay.result()
        finally:
            watcher.cancel()
            await response.aclose()

    def _track_request(
        self, body: bytes, exchange: _Exchange, url: str, headers: list[tuple[str, str]], principal: str,
    ) -> None:
        if len(body) > self.max_line:
            say(f"a client request body over {self.max_line} bytes was relayed unparsed (not recorded)")
            return
        line = parse_line(body)
        if line.error:
            say(f"the client sent a body that is {line.error} ({len(body)} bytes); relayed unchanged")
        for msg in line.messages:
            if msg.kind != "request":
                continue
            call = None
            if msg.method in RECORDED_METHODS:
                raw = body if not line.batch else orjson.dumps(msg.value)
                call = self.journal.start(msg, raw, url=url, request_headers=headers, principal=principal)
            tracked = _Tracked(msg.method or "?", call)
            key = id_key(msg.id)
            exchange.local[key] = tracked
            self.tracked.setdefault((exchange.scope, key), tracked)

    def _match(self, exchange: _Exchange | None, scope: str, key: str) -> _Tracked | None:
        tracked = exchange.local.pop(key, None) if exchange is not None else None
        if tracked is not None:
            if self.tracked.get((exchange.scope, key)) is tracked:
                del self.tracked[(exchange.scope, key)]
            return tracked
        tracked = self.tracked.pop((scope, key), None)
        if tracked is not None and exchange is not None:
            exchange.local.pop(key, None)
        return tracked

    async def _relay_response(self, response: httpx.Response, exchange: _Exchange, send) -> None:
        status = response.status_code
        out_headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.raw_decoded()
                       if k.lower() not in HOP_BY_HOP] if False else _forward_headers(response)
        ctype = response.headers.get("content-type", "").split(";")[0].strip().lower()
        resp_headers = _pairs(response.headers)
        if ctype == "text/event-stream":
            await send({"type": "http.response.start", "status": status, "headers": out_headers})
            await self._relay_events(response, exchange, send, status, resp_headers)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            await self._unanswered(exchange, "the upstream closed the event stream before answering",
                                   status=status, headers=resp_headers)
            return
        if ctype == "application/json" and exchange.local:
            body = await response.aread()
            body = await self._settle(body, exchange, exchange.scope, status, resp_headers, whole_body=True)
            out_headers.append((b"content-length", str(len(body)).encode()))
            await send({"type": "http.response.start", "status": status, "headers": out_headers})
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        if status == 202 or status >= 300:
            pass  # 202: the answers come on another stream (legacy SSE transport)
        await send({"type": "http.response.start", "status": status, "headers": out_headers})
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        if status >= 300:
            await self._unanswered(exchange, f"the upstream answered HTTP {status} without a JSON-RPC response",
                                   status=status, headers=resp_headers)

    async def _relay_events(self, response, exchange: _Exchange, send, status: int, headers) -> None:
        buf = bytearray()
        scope = exchange.scope
        async for chunk in response.aiter_raw():
            buf += chunk
            for event in split_events(buf):
                kind, data = event_fields(event)
                if kind == "endpoint":  # legacy SSE transport: where the client posts; learn its session
                    event, scope = self._endpoint_event(event, data, scope)
                elif data and data.lstrip()[:1] in (b"{", b"["):
                    settled = await self._settle(data, exchange, scope, status, headers, whole_body=False)
                    if settled is not data:
                        event = event_with_data(event, settled)
                await send({"type": "http.response.body", "body": event, "more_body": True})
        if buf:
            await send({"type": "http.response.body", "body": bytes(buf), "more_body": True})

    def _endpoint_event(self, event: bytes, data: bytes, scope: str) -> tuple[bytes, str]:
        endpoint = _text(data).strip()
        if endpoint.startswith(self.origin):
            endpoint = endpoint[len(self.origin):] or "/"
            event = event_with_data(event, endpoint.encode())
        sid = parse_qs(urlsplit(endpoint).query).get("session_id", [""])[0]
        return event, f"sse:{sid}" if sid else scope

    async def _settle(
        self, data: bytes, exchange: _Exchange | None, scope: str, status: int, headers, *, whole_body: bool,
    ) -> bytes:
        """Record the answers in `data` (a JSON body or an event's data); return what the client gets."""
        line = parse_line(data)
        finished: list[tuple[Message, PendingCall]] = []
        for msg in line.messages:
            if msg.kind != "response":
                continue
            tracked = self._match(exchange, scope, id_key(msg.id))
            if tracked is None:
                continue
            self.journal.observe_response(tracked.method, msg)
            if tracked.call is not None:
                finished.append((msg, tracked.call))
        if not finished:
            return data
        results = await asyncio.gather(
            *(self.journal.finish(call, status=status, response=msg, response_headers=headers,
                                  response_text=None if msg.strict else _text(data)) for msg, call in finished),
            return_exceptions=True,
        )
        failed = {id_key(c.request_id): r for (_, c), r in zip(finished, results, strict=True)
                  if isinstance(r, BaseException)}
        if not failed:
            return data
        for key, exc in failed.items():
            say(f"journal: could not record id {key}: {exc}; the client gets an error instead of the result")
        replaced = []
        for msg in line.messages:
            key = id_key(msg.id) if msg.kind == "response" else None
            if key in failed:
                why = f"the journal could not record this call, so its result is withheld: {failed[key]}"
                replaced.append(orjson.loads(error_response(msg.id, JOURNAL_ERROR_CODE, why)))
            else:
                replaced.append(msg.value)
        return orjson.dumps(replaced if line.batch else replaced[0])

    async def _unanswered(self, exchange: _Exchange, why: str, *, status: int | None = None, headers=()) -> None:
        """Calls of this POST still unanswered (and not answerable on another stream) get their entry."""
        for key, tracked in list(exchange.local.items()):
            if self.tracked.get((exchange.scope, key)) is tracked and status is not None and status == 202:
                continue
            exchange.local.pop(key, None)
            if self.tracked.get((exchange.scope, key)) is tracked:
                del self.tracked[(exchange.scope, key)]
            if tracked.call is not None:
                try:
                    await self.journal.finish(tracked.call, status=status, response_headers=list(headers), error=why)
                except Exception as exc:  # noqa: BLE001
                    say(f"journal: could not record unanswered call id {key}: {exc}")

    async def flush_unanswered(self, why: str) -> None:
        for (_, key), tracked in list(self.tracked.items()):
            if tracked.call is not None:
                try:
                    await self.journal.finish(tracked.call, status=None, error=why)
                except Exception as exc:  # noqa: BLE001
                    say(f"journal: could not record unanswered call id {key}: {exc}")
        self.tracked.clear()


def _session_scope(headers: list[tuple[str, str]], query: bytes) -> str:
    for k, v in headers:
        if k.lower() == SESSION_HEADER:
            return "http:" + v
    sid = parse_qs(_text(query)).get("session_id", [""])[0]
    return f"sse:{sid}" if sid else ""


def _pairs(headers: httpx.Headers) -> list[tuple[str, str]]:
    return [(_text(k), _text(v)) for k, v in headers.raw]


def _forward_headers(response: httpx.Response) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in response.headers.raw if k.decode("latin-1").lower() not in HOP_BY_HOP]


def _error_body(exchange: _Exchange, code: int, why: str) -> bytes:
    ids = [orjson.loads(k) for k in exchange.local] or [None]
    return error_response(ids[0], code, why).rstrip(b"\n")


async def _send_json(send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _wait_disconnect(receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def serve(
    journal: CallJournal, upstream: str, host: str, port: int, *, call_timeout: float | None = None,
    max_line: int = MAX_LINE, ready: asyncio.Event | None = None,
) -> int:
    """Run the HTTP relay until SIGINT/SIGTERM; every accepted entry is on disk when it returns."""
    import uvicorn

    del call_timeout  # over HTTP the client's own timeout closes the stream: recorded as a disconnect
    relay = HttpRelay(journal, upstream, principal=journal.identity.principal if journal.identity.principal else "",
                      max_line=max_line)
    config = uvicorn.Config(relay, host=host, port=port, log_level="warning", lifespan="off",
                            timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    say(f"relaying http://{host}:{port} -> {upstream}")
    try:
        await server.serve()
    finally:
        await relay.flush_unanswered("the shim stopped before the upstream answered")
        await relay.aclose()
    return 0 if server.started else 2


# -- stdio front for an HTTP upstream -------------------------------------------------------------


class StdioFront:
    """A stdio MCP server to the client, a streamable HTTP client to the upstream."""

    def __init__(self, journal: CallJournal, upstream: str, *, principal: str = "", call_timeout: float | None = None,
                 cancel_grace: float = 2.0, max_line: int = MAX_LINE) -> None:
        self.journal = journal
        self.upstream = upstream
        self.principal = principal
        self.call_timeout = call_timeout
        self.cancel_grace = cancel_grace
        self.max_line = max_line
        self.client = httpx.AsyncClient(timeout=upstream_timeout(), follow_redirects=False)
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self.relay: LineRelay | None = None
        self.posts: dict[str, asyncio.Task] = {}
        self._tasks: set[asyncio.Task] = set()
        self._get_stream: asyncio.Task | None = None

    def _headers(self, msg: Message | None) -> dict[str, str]:
        from mcp.shared.inbound import encode_header_value, mcp_param_headers, x_mcp_header_map

        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        if self.session_id:
            headers[SESSION_HEADER] = self.session_id
        version = self.protocol_version
        if msg is not None and isinstance(msg.value, dict):
            params = msg.params if isinstance(msg.params, dict) else {}
            meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else {}
            version = meta.get(PROTOCOL_VERSION_META) or version
            if msg.method and msg.kind in ("request", "notification"):
                headers["mcp-method"] = msg.method
            name = params.get("uri" if msg.method == "resources/read" else "name")
            if msg.method in ("tools/call", "prompts/get", "resources/read") and isinstance(name, str):
                headers["mcp-name"] = encode_header_value(name)
            if msg.method == "tools/call" and isinstance(name, str):
                tool = self.journal.catalog.get(name)
                schema = tool.get("inputSchema") if tool else None
                args = params.get("arguments")
                if isinstance(schema, dict) and isinstance(args, dict):
                    with contextlib.suppress(Exception):
                        headers.update(mcp_param_headers(x_mcp_header_map(schema), args))
        if version and not (msg is not None and msg.method == "initialize"):
            headers["mcp-protocol-version"] = version
        return headers

    async def _post(self, raw: bytes, line: Line) -> None:
        relay = self.relay
        assert relay is not None
        msg = line.messages[0] if len(line.messages) == 1 else None
        body = raw.rstrip(b"\r\n")
        try:
            async with self.client.stream("POST", self.upstream, content=body, headers=self._headers(msg)) as resp:
                if msg is not None and msg.method == "initialize" and resp.headers.get(SESSION_HEADER):
                    self.session_id = resp.headers[SESSION_HEADER]
                await self._deliver(resp, msg)
        except httpx.HTTPError as exc:
            why = f"the upstream MCP server could not be reached: {exc.__class__.__name__}: {exc}"
            say(why)
            for m in line.messages:
                if m.kind == "request":
                    relay.answer_locally(m.id, SERVER_GONE_CODE, why)

    async def _deliver(self, resp: httpx.Response, msg: Message | None) -> None:
        relay = self.relay
        assert relay is not None
        status = resp.status_code
        headers = _pairs(resp.headers)
        ctype = resp.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype == "text/event-stream":
            buf = bytearray()
            async for chunk in resp.aiter_raw():
                buf += chunk
                for event in split_events(buf):
                    _, data = event_fields(event)
                    if data.strip():
                        self._to_client(data, status, headers)
            return
        body = await resp.aread()
        if ctype == "application/json" and body.strip():
            self._to_client(body, status, headers)
            return
        if status >= 400 and msg is not None and msg.kind == "request":
            why = f"HTTP {status} from the upstream MCP server: {_text(body[:500]).strip()}"
            say(why)
            self._to_client(error_response(msg.id, JOURNAL_ERROR_CODE if status >= 500 else -32600, why),
                            status, headers)

    def _to_client(self, data: bytes, status: int, headers: list[tuple[str, str]]) -> None:
        """One message as one line: unchanged unless it spans lines (then written compactly)."""
        data = data.strip()
        if b"\n" in data or b"\r" in data:
            ok, value = True, None
            try:
                value = orjson.loads(data)
            except orjson.JSONDecodeError:
                ok = False
            data = orjson.dumps(value) if ok else data.replace(b"\r", b"").replace(b"\n", b" ")
        line = data + b"\n"
        msg_line = parse_line(line)
        assert self.relay is not None
        for m in msg_line.messages:
            if m.kind == "response" and isinstance(m.value, dict):
                result = m.value.get("result")
                if isinstance(result, dict) and isinstance(result.get("protocolVersion"), str):
                    self.protocol_version = result["protocolVersion"]
        self.relay.server_line(line, status=status, headers=headers)

    async def _open_get_stream(self) -> None:
        try:
            async with self.client.stream("GET", self.upstream, headers=self._headers(None)) as resp:
                if resp.status_code != 200:
                    return
                await self._deliver(resp, None)
        except httpx.HTTPError:
            return

    async def send_upstream(self, raw: bytes) -> None:
        """Called by the LineRelay for each client line (already tracked)."""
        line = parse_line(raw)
        if not line.messages:
            return
        msg = line.messages[0]
        if msg.kind == "notification" and msg.method == "notifications/cancelled":
            params = msg.params if isinstance(msg.params, dict) else {}
            key = id_key(params.get("requestId"))
            post = self.posts.get(key)
            modern = self.protocol_version is None or self.protocol_version >= "2026"
            if post is not None and modern:  # the 2026 HTTP wire cancels by closing the request's stream
                post.cancel()
                return
        task = asyncio.create_task(self._post(raw, line))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if msg.kind == "request":
            key = id_key(msg.id)
            self.posts[key] = task
            task.add_done_callback(lambda _t, key=key: self.posts.pop(key, None))
        if msg.kind == "notification" and msg.method == "notifications/initialized" and self._get_stream is None:
            self._get_stream = asyncio.create_task(self._open_get_stream())

    async def run(self) -> int:
        from broker.mcp.relay import iter_lines
        from broker.mcp.stdio_relay import _install_signals, open_stdio

        reader, writer = await open_stdio(self.max_line)
        relay = self.relay = _FrontRelay(
            self.journal, writer, send_upstream=self.send_upstream, call_timeout=self.call_timeout,
            cancel_grace=self.cancel_grace, max_line=self.max_line, server_label="the upstream MCP server",
        )
        relay.front = self
        relay.out.start()
        stop = asyncio.Event()
        writer.on_gone = stop.set
        restore = _install_signals(stop.set)

        async def client_to_server() -> None:
            async for data, whole in iter_lines(reader, self.max_line):
                await relay.client_line(data, whole)

        c2s = asyncio.create_task(client_to_server())
        stopper = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({c2s, stopper}, return_when=asyncio.FIRST_COMPLETED)
            c2s.cancel()
            if self._tasks:  # answers in flight still reach the client and the journal
                await asyncio.wait(list(self._tasks), timeout=5.0)
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            if self._get_stream is not None:
                self._get_stream.cancel()
                await asyncio.gather(self._get_stream, return_exceptions=True)
            if self.session_id:
                with contextlib.suppress(httpx.HTTPError):
                    await self.client.delete(self.upstream, headers=self._headers(None))
            relay.fail_pending("the client went away before the upstream MCP server answered", answer_client=False)
            await relay.drain()
            await writer.close()
            return 0
        finally:
            for t in (c2s, stopper):
                t.cancel()
            await asyncio.gather(c2s, stopper, return_exceptions=True)
            restore()
            await self.client.aclose()


class _FrontRelay(LineRelay):
    front: StdioFront

    def call_info(self) -> dict:
        return {"url": self.front.upstream}

    def answer_locally(self, request_id: object, code: int, why: str) -> None:
        key = id_key(request_id)
        call = self.pending.pop(key, None)
        self.methods.pop(key, None)
        if call is not None:
            self._no_answer(call, why)
        self.out.put(error_response(request_id, code, why))


async def run_stdio_front(journal: CallJournal, upstream: str, **kwargs) -> int:
    front = StdioFront(journal, upstream, principal=journal.identity.principal, **kwargs)
    try:
        return await front.run()
    finally:
        restore_blocking(0, 1)
