"""HTTP transports of the shim.

`serve` (`broker mcp --listen HOST:PORT --upstream URL`): a reverse proxy for streamable HTTP and the
legacy HTTP+SSE transport. Every request goes to the upstream's origin with the same path and
query; headers pass both ways (the client's `Authorization` goes upstream and is redacted in the
entry; `mcp-session-id` and `mcp-protocol-version` are untouched), except hop-by-hop headers and
`Accept-Encoding` (the shim asks the upstream for identity encoding so it can read the stream).
`text/event-stream` answers are relayed event by event as they arrive. An event (or a JSON body)
holding the answer to a recorded call is released only once its entry is durable; later events of
the same stream wait behind it, other streams do not. For a `tools/call` naming a tool it has no
listing for, the relay sends its own `tools/list` POSTs (with the client's session and credential
headers, every page); their answers, also when they come on the legacy transport's GET stream, are
never relayed to the client.

`run_stdio_front` (`broker mcp --upstream URL` without `--listen`): a stdio MCP server to the client
that speaks streamable HTTP to the upstream (one POST per client message, the GET stream for
server-initiated messages, `DELETE` at the end of a session).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import socket
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import orjson

from broker.mcp.messages import (
    PROTOCOL_VERSION_META,
    RECORDED_METHODS,
    Line,
    Message,
    client_meta,
    dumps,
    error_response,
    id_key,
    parse_line,
)
from broker.mcp.oversize import OversizeLine
from broker.mcp.recording import CANCELLED, JOURNAL_ERROR_CODE, LOOKUP_WAIT, STDIO_STATUS, CallJournal, PendingCall
from broker.mcp.relay import (
    AMBIGUOUS_REFUSAL,
    INVALID_REQUEST_CODE,
    JOURNAL_DOWN_REFUSAL,
    LIST_PAGES,
    MAX_LINE,
    SERVER_GONE_CODE,
    LineRelay,
    finish_answers,
    restore_blocking,
    say,
    withhold,
)
from broker.mcp.upstream import UpstreamPool, UpstreamResponse
from broker.proxy.identity import IDENTITY_HEADERS, Claims, take_identity
from journal.record import principal_fingerprint, session_fingerprint, text_pairs, wire_text
from journal.sse import event_fields, event_with_data, split_events
from journal.vault import SessionIdError, session_filename

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade", "host", "content-length", "accept-encoding",
})  # fmt: skip
SESSION_HEADER = "mcp-session-id"
_NOT_FOR_OWN = frozenset({"mcp-method", "mcp-name", "content-type", "accept"})  # set anew on the shim's tools/list


def principal_for(headers: list[tuple[str, str]], url: str, fixed: str) -> str:
    """--principal when given, else the broker's fingerprint of the client's credential."""
    return fixed or principal_fingerprint(headers, url)


# -- the reverse proxy ----------------------------------------------------------------------------


@dataclass
class _Tracked:
    method: str
    call: PendingCall | None
    request_id: object = None


@dataclass
class _Exchange:
    """The client requests of one POST, matched first against answers on that POST's own stream."""

    scope: str
    local: dict[str, _Tracked] = field(default_factory=dict)
    refused: tuple[int, str, int] | None = None  # (JSON-RPC code, why, HTTP status) when the body must not go upstream


class HttpRelay:
    def __init__(
        self, journal: CallJournal, upstream: str, *, principal: str = "", max_line: int = MAX_LINE,
        gateway: bool = False, cancel_grace: float = 2.0,
    ) -> None:
        self.journal = journal
        self.cancel_grace = cancel_grace
        self.asks: dict[tuple[str, str], PendingCall] = {}  # recorded server requests awaiting the client's answer
        self.gateway = GatewaySessions(journal.identity, urlsplit(upstream).path) if gateway else None
        self.upstream = upstream
        parts = urlsplit(upstream)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.principal = principal
        self.max_line = max_line
        self.pool = UpstreamPool(upstream)
        self.tracked: dict[tuple[str, str], _Tracked] = {}  # answers that may come on another stream
        self._bg: set[asyncio.Task] = set()
        self._own_prefix = f"broker-mcp/{secrets.token_hex(8)}/"
        self._own_ids = itertools.count(1)
        self.own: dict[str, asyncio.Future] = {}  # the shim's own tools/list: id key -> future of the answer
        self._listing: asyncio.Future | None = None
        self.own_lists_sent = 0
        self.client_meta: dict = {}  # the last 2026-era client _meta seen (for a call read from its skeleton)

    async def aclose(self) -> None:
        while self._bg:
            await asyncio.gather(*list(self._bg), return_exceptions=True)
        await self.pool.aclose()

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
        path_query = path + (b"?" + query if query else b"")
        target = self.origin + wire_text(path_query)
        # the X-Broker-* headers are read (by a gateway) and never forwarded nor recorded (docs/postgres.md)
        kept, claims = take_identity(text_pairs(scope["headers"]), proxy_auth=False)
        headers: list[tuple[str, str]] = kept if isinstance(kept, list) else list(kept)
        who: tuple[str, str] | None = None
        if self.gateway is not None:
            try:
                who, path = self.gateway.resolve(claims, headers, path, scope.get("client"))
            except SessionIdError as exc:
                await _send_json(send, 400, error_response(None, -32600, f"broker gateway: {exc}").rstrip(b"\n"))
                return
            path_query = path + (b"?" + query if query else b"")
            target = self.origin + wire_text(path_query)
        session = _session_scope(headers, query)
        exchange = _Exchange(session)
        principal = None
        if method == "POST" and body:
            principal = principal_for(headers, target, self.principal)
        forward = [(k, v) for k, v in scope["headers"]
                   if k.decode("latin-1").lower() not in HOP_BY_HOP | IDENTITY_HEADERS]
        forward.append((b"accept-encoding", b"identity"))
        fresh: list[PendingCall] = []
        if method == "POST" and body:
            assert principal is not None  # set above under the same condition
            encoding = next((v for k, v in headers if k.lower() == "content-encoding" and v.strip().lower()
                             not in ("", "identity")), None)
            if encoding is not None:  # what the shim reads must be what the upstream runs
                exchange.refused = (INVALID_REQUEST_CODE, f"the body is sent with Content-Encoding {encoding[:40]!r}, "
                                    "which the shim does not decode: it records what it reads", 415)
            fresh = self._track_request(body, exchange, target, headers, principal, (path_query, forward), who)
            if exchange.refused is None and fresh and (problem := self.journal.problem(who[0] if who else None)):
                exchange.refused = (JOURNAL_ERROR_CODE, JOURNAL_DOWN_REFUSAL.format(problem), 200)
            if exchange.refused is not None:  # as the stdio relay's `LineRelay._refuse`
                code, reason, http_status = exchange.refused
                why = f"{reason}; the shim did not send this request"
                say(f"refused a client request: {why}")
                error_body = _error_body(exchange, code, why)
                await self._unanswered(exchange, why, answered_by="capture")
                await _send_json(send, http_status, error_body)
                return
            if self.asks and (answered := self._client_answers(body, session)):
                body = await self._record_client_answers(body, answered)
        state: dict = {"started": False, "response": None}

        async def tracked_send(message: dict) -> None:
            state["started"] = state["started"] or message["type"] == "http.response.start"
            await send(message)

        async def forward_and_relay() -> None:
            state["response"] = await self.pool.request(method, path_query, forward, body or None)
            await self._relay_response(state["response"], exchange, tracked_send)

        # The client may leave while the upstream is still working (before any answer byte): watch for it
        # from the start, so the call's entry says so at once and the upstream request is closed.
        watcher = asyncio.create_task(_wait_disconnect(receive))
        work = asyncio.create_task(forward_and_relay())
        if fresh:  # after the request is on its way: the entries' request share, while the upstream works
            asyncio.get_running_loop().call_soon(_prepare_early, self.journal, fresh)
        try:
            done, _ = await asyncio.wait({watcher, work}, return_when=asyncio.FIRST_COMPLETED)
            response: UpstreamResponse | None = state["response"]
            status = response.status if response is not None else None
            resp_headers = text_pairs(response.headers) if response is not None else []
            if work not in done:
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await work
                await self._unanswered(exchange, "the client disconnected before the answer came",
                                       status=status, headers=resp_headers)
            elif (failure := work.exception()) is not None:
                if not isinstance(failure, OSError):
                    raise failure
                if response is None:
                    why = f"the upstream MCP server could not be reached: {failure}"
                else:
                    why = f"the upstream broke the connection before answering: {failure}"
                say(f"{method} {target}: {why}")
                error_body = _error_body(exchange, SERVER_GONE_CODE, why)
                await self._unanswered(exchange, why, status=status, headers=resp_headers)
                if not state["started"]:
                    await _send_json(send, 502, error_body)
                else:
                    with contextlib.suppress(Exception):
                        await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            watcher.cancel()
            if state["response"] is not None:
                await state["response"].aclose()

    def _track_request(
        self, body: bytes, exchange: _Exchange, url: str, headers: list[tuple[str, str]], principal: str,
        upstream_request: tuple[bytes, list[tuple[bytes, bytes]]] = (b"/", []),
        who: tuple[str, str] | None = None,
    ) -> list[PendingCall]:
        """Track the body's requests; the recorded calls it starts."""
        fresh: list[PendingCall] = []
        oversize = None
        if len(body) > self.max_line:
            say(f"a client request body over {self.max_line} bytes ({len(body)} bytes): recorded from the blob store")
            oversize = OversizeLine(self.journal.recorder.blobs)
            oversize.feed(body)
            line = oversize.end()
            if not any(m.kind == "request" and m.method in RECORDED_METHODS for m in line.messages):
                oversize.abort()
        else:
            line = parse_line(body)
        if line.error:
            say(f"the client sent a body that is {line.error} ({len(body)} bytes); relayed unchanged")
        unreadable = oversize is not None and not line.messages  # over the limit, too large a structure to read
        if unreadable or (len(line.messages) == 1 and line.messages[0].value is None):  # no id to match an answer to
            method = next((m for m in RECORDED_METHODS if m.encode() in body or m.replace("/", "\\/").encode() in body),
                          None)
            if method is not None:
                unmatched = self.journal.start(Message({"method": method}, False, "invalid"), body, url=url,
                                               request_headers=headers, principal=principal)
                unmatched.method = method
                if who is not None:
                    unmatched.session, unmatched.agent = who
                what = ("is over --max-message-mib and too large a structure to read its id from" if unreadable
                        else "is not JSON")
                why = f"the client's body {what}: relayed unchanged, no answer can be matched to it"
                task = asyncio.create_task(self._record_unanswered(unmatched, why))
                self._bg.add(task)
                task.add_done_callback(self._bg.discard)
            return fresh
        messages = line.messages
        if line.other is not None:  # duplicate keys read two ways: refused, each reading's calls recorded
            exchange.refused = exchange.refused or (INVALID_REQUEST_CODE, AMBIGUOUS_REFUSAL, 200)
            said = {(id_key(m.id), m.method) for m in messages}
            messages = [*messages, *(m for m in line.other if (id_key(m.id), m.method) not in said)]
        for msg in messages:
            if exchange.refused is None and msg.kind == "notification" and msg.method == "notifications/cancelled":
                self._client_cancelled(msg, exchange.scope)
            if msg.kind != "request":
                continue
            self.client_meta = client_meta(msg) or self.client_meta
            call: PendingCall | None = None
            if self.journal.records(msg.method):
                raw = body if not line.batch or oversize is not None else dumps(msg.value)
                call = self.journal.start(msg, raw, url=url, request_headers=headers, principal=principal,
                                          oversize=oversize,
                                          ask_tools=lambda m: self.ask_tools(m, *upstream_request))
                if who is not None:
                    call.session, call.agent = who
                fresh.append(call)
            tracked = _Tracked(msg.method or "?", call, msg.id)
            key = id_key(msg.id)
            if exchange.refused is not None:  # never upstream, so never answered there: one slot each
                exchange.local[f"{key}#{len(exchange.local)}"] = tracked
                continue
            exchange.local[key] = tracked
            self.tracked.setdefault((exchange.scope, key), tracked)
        return fresh

    def _client_answers(self, body: bytes, scope: str) -> list[tuple[Message, PendingCall]]:
        """The client's answers in a POST body to server requests the shim records."""
        if len(body) > self.max_line:
            return []
        found = []
        for msg in parse_line(body).messages:
            if msg.kind == "response" and (ask := self.asks.pop((scope, id_key(msg.id)), None)) is not None:
                found.append((msg, ask))
        return found

    async def _record_client_answers(self, body: bytes, answered: list[tuple[Message, PendingCall]]) -> bytes:
        """Write their entries before the answers go upstream; an answer that cannot be recorded is
        replaced by a JSON-RPC error (fail closed)."""
        failed = await finish_answers(self.journal, answered, status=STDIO_STATUS, headers=[], raw=body)
        if not failed:
            return body
        for key, exc in failed.items():
            say(f"journal: could not record the client's answer to id {key}: {exc}; the upstream gets an error")
        return withhold(parse_line(body), failed)

    def _server_request(self, msg: Message, data: bytes, scope: str) -> None:
        """A server-to-client request on an event stream: recorded when the client answers it."""
        key = (scope, id_key(msg.id))
        earlier = self.asks.pop(key, None)
        if earlier is not None:
            self._spawn(self._record_unanswered(earlier, "the server reused this request id before the client "
                                                         "answered"))
        self.asks[key] = self.journal.start(msg, data)

    def _client_cancelled(self, msg: Message, scope: str) -> None:
        """`notifications/cancelled`: the call's entry is written after `cancel_grace` if no answer came."""
        params = msg.params if isinstance(msg.params, dict) else {}
        key = id_key(params.get("requestId"))
        tracked = self.tracked.get((scope, key))
        if tracked is None or tracked.call is None or tracked.call.cancelled:
            return
        tracked.call.cancelled = True
        asyncio.get_running_loop().call_later(self.cancel_grace, self._cancel_expired, scope, key, tracked)

    def _cancel_expired(self, scope: str, key: str, tracked: _Tracked) -> None:
        if self.tracked.get((scope, key)) is not tracked or tracked.call is None:
            return
        del self.tracked[(scope, key)]
        why = f"{CANCELLED}; no answer within {self.cancel_grace:g} s"
        self._spawn(self._record_unanswered(tracked.call, why))

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    # -- the shim's own tools/list ---------------------------------------------------------------

    def ask_tools(self, message: Message, target: bytes, headers: list[tuple[bytes, bytes]]) -> asyncio.Future:
        """List the server's tools (every page) as the client's own request would reach it: same
        target, same session and credential headers. Calls asking meanwhile share the listing."""
        if self._listing is not None and not self._listing.done():
            return self._listing
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._listing = fut
        meta = client_meta(message) or self.client_meta
        own_headers = [(k, v) for k, v in headers if k.decode("latin-1").lower() not in _NOT_FOR_OWN
                       and not k.decode("latin-1").lower().startswith("mcp-param-")]
        own_headers += [(b"content-type", b"application/json"), (b"accept", b"application/json, text/event-stream"),
                        (b"mcp-method", b"tools/list")]
        task = asyncio.create_task(self._list_tools(fut, target, own_headers, meta))
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)
        return fut

    async def _list_tools(self, fut: asyncio.Future, target: bytes, headers: list, meta: dict) -> None:
        try:
            cursor = None
            for _ in range(LIST_PAGES):
                result = await asyncio.wait_for(self._list_page(target, headers, meta, cursor), LOOKUP_WAIT)
                if not isinstance(result, dict):
                    return
                self.journal.catalog.update_from_list_result(result)
                cursor = result.get("nextCursor")
                if cursor is None:
                    return
        except (OSError, TimeoutError) as exc:
            say(f"could not ask the upstream MCP server for its tools: {exc or exc.__class__.__name__}")
        finally:
            if not fut.done():
                fut.set_result(None)

    async def _list_page(self, target: bytes, headers: list, meta: dict, cursor: object) -> object:
        """One page: the `result` of the server's answer (None for an error)."""
        rid = f"{self._own_prefix}{next(self._own_ids)}"
        key = id_key(rid)
        params: dict = {}
        if meta:
            params["_meta"] = meta
        if cursor is not None:
            params["cursor"] = cursor
        answer: asyncio.Future = asyncio.get_running_loop().create_future()
        self.own[key] = answer  # an answer on another stream (legacy SSE) is taken there
        self.own_lists_sent += 1
        try:
            body = dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/list", "params": params})
            response = await self.pool.request("POST", target, headers, body)
            try:
                ctype = (response.header("content-type") or "").split(";")[0].strip().lower()
                if ctype == "application/json":
                    self._take_own(await response.read())
                elif ctype == "text/event-stream":
                    buf = bytearray()
                    async for chunk in response.iter_raw():
                        buf += chunk
                        for event in split_events(buf):
                            self._take_own(event_fields(event)[1])
                        if answer.done():
                            break
                else:
                    await response.read()
            finally:
                await response.aclose()
            if not answer.done() and response.status != 202:
                return None  # the server answered without a JSON-RPC response (an HTTP error, say)
            msg = await answer  # 202: the answer comes on the session's GET stream (legacy SSE)
        finally:
            self.own.pop(key, None)
        value = msg.value if isinstance(msg.value, dict) else {}
        return value.get("result")

    def _take_own(self, data: bytes) -> bool:
        """True when `data` (a JSON body or an event's data) is an answer to the shim's own request."""
        if not self.own or not data.strip():
            return False
        line = parse_line(data)
        if len(line.messages) != 1 or line.messages[0].kind != "response":
            return False
        answer = self.own.get(id_key(line.messages[0].id))
        if answer is None:
            return False
        if not answer.done():
            answer.set_result(line.messages[0])
        return True

    def _match(self, exchange: _Exchange | None, scope: str, key: str) -> _Tracked | None:
        tracked = exchange.local.pop(key, None) if exchange is not None else None
        if tracked is not None:
            assert exchange is not None  # only an exchange's own table gave it
            if self.tracked.get((exchange.scope, key)) is tracked:
                del self.tracked[(exchange.scope, key)]
            return tracked
        tracked = self.tracked.pop((scope, key), None)
        if tracked is not None and exchange is not None:
            exchange.local.pop(key, None)
        return tracked

    async def _relay_response(self, response: UpstreamResponse, exchange: _Exchange, send) -> None:
        status = response.status
        assert status is not None  # an UpstreamResponse is handed out once its head is in
        out_headers = _forward_headers(response)
        # Read as clients read it: the Python SDK takes any type starting application/json or
        # text/event-stream, the TypeScript SDK any that contains them (SSE first); httpx decodes gzip.
        ctype = (response.header("content-type") or "").lower()
        sse, json_body = "text/event-stream" in ctype, "application/json" in ctype
        encoding = (response.header("content-encoding") or "").strip().lower()
        resp_headers = text_pairs(response.headers)
        if exchange.local and ((sse and json_body) or encoding not in ("", "identity")):
            why = (f"the upstream answered with Content-Type {ctype[:80]!r} and Content-Encoding {encoding[:40]!r}, "
                   "which clients may read in ways the shim cannot record: the answer is withheld")
            say(f"{why}")
            error_body = _error_body(exchange, SERVER_GONE_CODE, why)
            await self._unanswered(exchange, why, status=status, headers=resp_headers, answered_by="capture")
            await _send_json(send, 502, error_body)
            return
        if sse:
            await send({"type": "http.response.start", "status": status, "headers": out_headers})
            await self._relay_events(response, exchange, send, status, resp_headers)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            await self._unanswered(exchange, "the upstream closed the event stream before answering",
                                   status=status, headers=resp_headers)
            return
        if json_body and exchange.local:
            body = await response.read()
            body = await self._settle(body, exchange, exchange.scope, status, resp_headers)
            out_headers.append((b"content-length", str(len(body)).encode()))
            await send({"type": "http.response.start", "status": status, "headers": out_headers})
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        # 202: the answers come on another stream (the legacy SSE transport's GET stream)
        length = response.header("content-length")
        if length is not None and length.isdigit() and int(length) <= 1 << 20:
            body = await response.read()
            out_headers.append((b"content-length", str(len(body)).encode()))
            await send({"type": "http.response.start", "status": status, "headers": out_headers})
            await send({"type": "http.response.body", "body": body, "more_body": False})
        else:
            await send({"type": "http.response.start", "status": status, "headers": out_headers})
            async for chunk in response.iter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        if status >= 300:
            await self._unanswered(exchange, f"the upstream answered HTTP {status} without a JSON-RPC response",
                                   status=status, headers=resp_headers, answered_by="upstream")

    async def _relay_events(self, response, exchange: _Exchange, send, status: int, headers) -> None:
        buf = bytearray()
        scope = exchange.scope
        async for chunk in response.iter_raw():
            buf += chunk
            for event in split_events(buf):
                kind, data = event_fields(event)
                if kind == "endpoint":  # legacy SSE transport: where the client posts; learn its session
                    event, scope = self._endpoint_event(event, data, scope)
                elif data and data.lstrip()[:1] in (b"{", b"[") and self._take_own(data):
                    continue  # the answer to the shim's own tools/list: not the client's
                elif data and data.lstrip()[:1] in (b"{", b"["):
                    settled = await self._settle(data, exchange, scope, status, headers)
                    if settled is not data:
                        event = event_with_data(event, settled)
                await send({"type": "http.response.body", "body": event, "more_body": True})
        if buf:
            await send({"type": "http.response.body", "body": bytes(buf), "more_body": True})

    def _endpoint_event(self, event: bytes, data: bytes, scope: str) -> tuple[bytes, str]:
        endpoint = wire_text(data).strip()
        if endpoint.startswith(self.origin):
            endpoint = endpoint[len(self.origin):] or "/"
            event = event_with_data(event, endpoint.encode())
        sid = parse_qs(urlsplit(endpoint).query).get("session_id", [""])[0]
        return event, f"sse:{sid}" if sid else scope

    async def _settle(
        self, data: bytes, exchange: _Exchange | None, scope: str, status: int, headers,
    ) -> bytes:
        """Record the answers in `data` (a JSON body or an event's data); return what the client gets."""
        line = parse_line(data)
        finished: list[tuple[Message, PendingCall]] = []
        for msg in line.messages:
            if msg.kind == "notification" and msg.method == "notifications/tools/list_changed":
                self.journal.catalog.clear()  # the next call to a tool asks the server again
            if msg.kind == "request" and self.journal.records_server_request(msg.method):
                self._server_request(msg, data if not line.batch else dumps(msg.value), scope)
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
        failed = await finish_answers(
            self.journal, finished, status=status, headers=headers, raw=data
        )
        if not failed:
            return data
        for key, exc in failed.items():
            say(f"journal: could not record id {key}: {exc}; the client gets an error instead of the result")
        return withhold(line, failed)

    async def _unanswered(
        self, exchange: _Exchange, why: str, *, status: int | None = None, headers=(), answered_by: str = "none",
    ) -> None:
        """Calls of this POST still unanswered (and not answerable on another stream) get their entry."""
        for key, tracked in list(exchange.local.items()):
            exchange.local.pop(key, None)
            if self.tracked.get((exchange.scope, key)) is tracked:
                del self.tracked[(exchange.scope, key)]
            if tracked.call is not None:  # a cancelled call's entry says so first (CallJournal.finish)
                try:
                    await self.journal.finish(tracked.call, status=status, response_headers=list(headers), error=why,
                                              answered_by=answered_by)
                except Exception as exc:  # noqa: BLE001
                    say(f"journal: could not record unanswered call id {key}: {exc}")

    async def _record_unanswered(self, call: PendingCall, why: str) -> None:
        try:
            await self.journal.finish(call, status=None, error=why)
        except Exception as exc:  # noqa: BLE001 - reported, never raised into the relay
            say(f"journal: could not record unanswered {call.method}: {exc}")

    async def flush_unanswered(self, why: str) -> None:
        for ask in self.asks.values():
            await self._record_unanswered(ask, why)
        self.asks.clear()
        for (_, key), tracked in list(self.tracked.items()):
            if tracked.call is not None:
                try:
                    await self.journal.finish(tracked.call, status=None, error=why)
                except Exception as exc:  # noqa: BLE001
                    say(f"journal: could not record unanswered call id {key}: {exc}")
        self.tracked.clear()


class GatewaySessions:
    """A shared gateway (`--gateway`): which session and agent a request's calls are recorded under.

    In order: the `X-Broker-Session` / `X-Broker-Agent` headers (`broker.proxy.identity`, as the
    HTTPS proxy reads them; the gateway's principal stays --principal or the credential's
    fingerprint); a session as the first path segment
    (`/<session>/mcp`, stripped before the request goes upstream); else one session per MCP session,
    `<--session>.<16 hex>` (the Mcp-Session-Id's keyed fingerprint, journal/record.py), or, in the
    2026-07-28 era that has no MCP session, one per client
    connection, `<--session>.conn-<host>-<port>`. The agent defaults to `--agent`. A session id that
    cannot be mapped to a vault file is refused (400), never rewritten.
    """

    def __init__(self, identity, upstream_path: str) -> None:
        self.identity = identity
        self.upstream_first = upstream_path.strip("/").split("/", 1)[0].encode()

    def resolve(
        self, claims: Claims, headers: list[tuple[str, str]], path: bytes, client,
    ) -> tuple[tuple[str, str], bytes]:
        session, agent = claims.session, claims.agent
        mcp_session = None
        for k, v in headers:
            if k.lower() == SESSION_HEADER:
                mcp_session = v
        parts = path.lstrip(b"/").split(b"/", 1)
        if len(parts) == 2 and parts[0] and parts[0] != self.upstream_first:
            from urllib.parse import unquote_to_bytes

            if session is None:
                session = unquote_to_bytes(parts[0]).decode("utf-8", "replace")
            path = b"/" + parts[1]
        if session is None:
            base = self.identity.session
            if mcp_session:  # its keyed fingerprint: the id is a capability, and session names are file names
                session = f"{base}.{session_fingerprint(mcp_session).removeprefix('fp:')}"
            elif client:
                session = f"{base}.conn-{client[0]}-{client[1]}"
            else:
                session = base
        session_filename(session)
        return (session, agent or self.identity.agent), path


def _session_scope(headers: list[tuple[str, str]], query: bytes) -> str:
    for k, v in headers:
        if k.lower() == SESSION_HEADER:
            return "http:" + v
    sid = parse_qs(wire_text(query)).get("session_id", [""])[0]
    return f"sse:{sid}" if sid else ""


def _prepare_early(journal: CallJournal, calls: list[PendingCall]) -> None:
    for call in calls:
        try:
            journal.prepare_early(call)
        except Exception as exc:  # noqa: BLE001 - bookkeeping must not stop the relay; the entry is made later
            say(f"internal error while preparing an entry ({exc.__class__.__name__}: {exc})")


def _forward_headers(response: UpstreamResponse) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in response.headers if k.decode("latin-1").lower() not in HOP_BY_HOP]


def _error_body(exchange: _Exchange, code: int, why: str) -> bytes:
    ids = [t.request_id for t in exchange.local.values()] or [None]
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


def client_url(sock: socket.socket, upstream: str) -> str:
    """The URL a client is given for the relay on `sock`: the relay's address with the upstream's path and query
    (every request goes upstream with the same path). A wildcard address is shown as the loopback one."""
    host, port = sock.getsockname()[:2]
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    shown = f"[{host}]" if ":" in host else host
    parts = urlsplit(upstream)
    return f"http://{shown}:{port}{parts.path or '/'}" + (f"?{parts.query}" if parts.query else "")


async def serve(
    journal: CallJournal, upstream: str, sock: socket.socket, *, max_line: int = MAX_LINE, gateway: bool = False,
    cancel_grace: float = 2.0,
) -> int:
    """Run the HTTP relay on `sock` (bound by the caller, so that a port in use is the one error every
    command gives) until SIGINT/SIGTERM; every accepted entry is on disk when it returns.

    There is no shim timeout over HTTP: the client's own timeout closes its stream, which is recorded
    as a disconnect."""
    import uvicorn

    relay = HttpRelay(journal, upstream, principal=journal.identity.principal, max_line=max_line, gateway=gateway,
                      cancel_grace=cancel_grace)
    config = uvicorn.Config(relay, log_level="warning", lifespan="off", timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    say(f"give the MCP client the URL {client_url(sock, upstream)} (relayed to {upstream})")
    try:
        await server.serve(sockets=[sock])
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
        self.pool = UpstreamPool(upstream)
        parts = urlsplit(upstream)
        self.target = ((parts.path or "/") + ("?" + parts.query if parts.query else "")).encode()
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self.relay: _FrontRelay | None = None
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
            got = params.get("_meta")
            meta = got if isinstance(got, dict) else {}
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
            resp = await self.pool.request("POST", self.target, _encode(self._headers(msg)), body)
            try:
                if msg is not None and msg.method == "initialize" and resp.header(SESSION_HEADER):
                    self.session_id = resp.header(SESSION_HEADER)
                await self._deliver(resp, msg)
            finally:
                await resp.aclose()
        except OSError as exc:
            why = f"the upstream MCP server could not be reached: {exc}"
            say(why)
            for m in line.messages:
                if m.kind == "request":
                    relay.answer_locally(m.id, SERVER_GONE_CODE, why)

    async def _deliver(self, resp: UpstreamResponse, msg: Message | None) -> None:
        relay = self.relay
        assert relay is not None
        status = resp.status
        assert status is not None  # an UpstreamResponse is handed out once its head is in
        headers = text_pairs(resp.headers)
        ctype = (resp.header("content-type") or "").split(";")[0].strip().lower()
        if ctype == "text/event-stream":
            buf = bytearray()
            async for chunk in resp.iter_raw():
                buf += chunk
                for event in split_events(buf):
                    _, data = event_fields(event)
                    if data.strip():
                        self._to_client(data, status, headers)
            return
        body = await resp.read()
        if ctype == "application/json" and body.strip():
            self._to_client(body, status, headers)
            return
        if status >= 400 and msg is not None and msg.kind == "request":
            why = f"HTTP {status} from the upstream MCP server: {wire_text(body[:500]).strip()}"
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
            resp = await self.pool.request("GET", self.target, _encode(self._headers(None)), None)
            try:
                if resp.status == 200:
                    await self._deliver(resp, None)
            finally:
                await resp.aclose()
        except OSError:
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
            def forget(_t: asyncio.Task, key: str = key) -> None:
                self.posts.pop(key, None)

            task.add_done_callback(forget)
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
            parts: list[bytes] = []
            async for data, whole in iter_lines(reader, self.max_line):
                if whole:
                    await relay.client_line(data, True)
                    continue
                parts.append(data)  # a line over the limit: one POST, recorded from the blob store
                if data.endswith(b"\n"):
                    await relay.client_line(b"".join(parts), False)
                    parts.clear()

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
                with contextlib.suppress(OSError):
                    resp = await self.pool.request("DELETE", self.target, _encode(self._headers(None)), None)
                    await resp.read()
                    await resp.aclose()
            relay.fail_pending("the client went away before the upstream MCP server answered", answer_client=False)
            await relay.drain()
            await writer.close()
            return 0
        finally:
            for t in (c2s, stopper):
                t.cancel()
            await asyncio.gather(c2s, stopper, return_exceptions=True)
            restore()
            await self.pool.aclose()


def _encode(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1", "replace")) for k, v in headers.items()]


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
