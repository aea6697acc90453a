"""The line relay shared by the stdio transports: track calls, hold back one response until its
entry is durable, keep the order of lines, answer for a server that is gone.

A client line goes upstream unchanged and at once. A server line goes to the client unchanged,
in the order the server sent it; a response to a recorded call (`tools/call`, `resources/read`)
waits for its entry, and lines after it wait behind it (`OrderedOutput`). When the journal cannot
take the entry, the client gets a JSON-RPC error for that id instead of the result (fail closed).

Lines over the limit are relayed in parts as they stream and recorded through `oversize.py`; the last
`HOLD_TAIL` bytes of an answer over the limit wait for its entry like any answer.

For a `tools/call` naming a tool the shim has no listing for, the relay sends the server its own
`tools/list` (ids `broker-mcp/<random>/<n>`, never relayed to the client; every page) so the entry's
effect comes from the server's annotations (`CallJournal.ask_tools`).

Nothing a client or a server sends stops the relay: a line that breaks the bookkeeping is still
relayed, and the failure is reported on stderr as an internal error.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import secrets
import sys
from collections.abc import AsyncIterator, Awaitable, Callable

from broker.log_lines import json_line, json_logs
from broker.mcp.messages import (
    RECORDED_METHODS,
    Line,
    Message,
    client_meta,
    dumps,
    error_response,
    id_key,
    notification,
    parse_line,
)
from broker.mcp.oversize import OversizeLine
from broker.mcp.recording import CANCELLED, JOURNAL_ERROR_CODE, STDIO_STATUS, CallJournal, PendingCall

log = logging.getLogger("broker.mcp")

MAX_LINE = 64 << 20
"""Lines up to this size are parsed whole; longer ones are relayed in parts and recorded through
`oversize.py` (and reported)."""
SERVER_GONE_CODE = -32000
TIMEOUT_CODE = -32001
INVALID_REQUEST_CODE = -32600
AMBIGUOUS_REFUSAL = ("its duplicate keys are read differently by parsers that keep the first value and those that "
                     "keep the last: the shim cannot know which call it would send")
"""Why a client line read two ways (`Line.other`) is not sent: the stdio relay's and the HTTP front's words."""
JOURNAL_DOWN_REFUSAL = "the journal could not record this call, so it was not sent: {}"
"""Why a recorded call is not sent when the journal cannot take its entry now (`CallJournal.problem`)."""
_CHUNK = 1 << 20
HOLD_TAIL = 64 << 10
"""The last bytes of an answer over the limit are held until its entry is durable (without its end
the client cannot read the message)."""
LIST_PAGES = 100
"""At most this many pages of the shim's own tools/list."""


def say(message: str) -> None:
    """One line on stderr, prefixed so it stands apart from the server's own stderr (a JSON object with
    `--log-format json`, broker/log_lines.py)."""
    line = json_line("broker mcp", "INFO", message) if json_logs() else f"broker mcp: {message}"
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


async def iter_lines(reader: asyncio.StreamReader, max_line: int = MAX_LINE) -> AsyncIterator[tuple[bytes, bool]]:
    """(bytes, whole): whole lines (with their newline; the last may lack it), or the parts of a
    line longer than `max_line` (whole=False; the part ending that line ends with a newline)."""
    buf = bytearray()
    oversize = False
    while True:
        chunk = await reader.read(_CHUNK)
        if not chunk:
            if buf:
                yield bytes(buf), not oversize
            return
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                break
            if oversize:
                yield chunk[start : nl + 1], False
                oversize = False
            elif buf:
                buf += chunk[start : nl + 1]
                line = bytes(buf)
                buf.clear()
                yield line, len(line) <= max_line + 1
            else:
                yield chunk[start : nl + 1], nl + 1 - start <= max_line + 1
            start = nl + 1
        rest = chunk[start:]
        if oversize:
            if rest:
                yield rest, False
        else:
            buf += rest
            if len(buf) > max_line:
                oversize = True
                yield bytes(buf), False
                buf.clear()


class ClientWriter:
    """Writes to the client; after the client went away, writes are dropped (`gone`)."""

    def __init__(self, write: Callable[[bytes], Awaitable[None]], close: Callable[[], Awaitable[None]]) -> None:
        self._write = write
        self._close = close
        self.gone = False
        self.on_gone: Callable[[], None] | None = None

    async def write(self, data: bytes) -> None:
        if self.gone:
            return
        try:
            await self._write(data)
        except (OSError, RuntimeError, ConnectionError) as exc:
            self.gone = True
            say(f"the client stopped reading ({exc.__class__.__name__}); shutting the server down")
            if self.on_gone is not None:
                self.on_gone()

    async def close(self) -> None:
        with contextlib.suppress(OSError, RuntimeError, ConnectionError):
            await self._close()


class OrderedOutput:
    """Lines to the client in order; an item may be a task that yields the bytes later."""

    def __init__(self, writer: ClientWriter) -> None:
        self.writer = writer
        self._queue: asyncio.Queue[bytes | asyncio.Task | None] = asyncio.Queue()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def put(self, item: bytes | asyncio.Task) -> None:
        self._queue.put_nowait(item)

    async def _run(self) -> None:
        while True:
            item = await self._queue.get()
            if item is None:
                return
            try:
                data = await item if isinstance(item, asyncio.Task) else item
            except Exception as exc:  # noqa: BLE001 - one line's failure must not stop the output
                log.exception("internal error")
                say(f"internal error while releasing a line ({exc.__class__.__name__}: {exc})")
                continue
            if data:
                await self.writer.write(data)

    async def close(self) -> None:
        """Write everything queued (held responses included), then stop."""
        self._queue.put_nowait(None)
        if self._task is not None:
            await self._task


class LineRelay:
    """Call tracking and ordered, journal-gated output for one client and one upstream."""

    def __init__(
        self, journal: CallJournal, writer: ClientWriter, *, send_upstream: Callable[[bytes], Awaitable[None]],
        call_timeout: float | None = None, cancel_grace: float = 2.0, max_line: int = MAX_LINE,
        server_label: str = "the MCP server",
    ) -> None:
        self.journal = journal
        self.writer = writer
        self.out = OrderedOutput(writer)
        self.send_upstream = send_upstream
        self.call_timeout = call_timeout
        self.cancel_grace = cancel_grace
        self.max_line = max_line
        self.server_label = server_label
        self.pending: dict[str, PendingCall] = {}  # recorded calls awaiting their answer
        self.asks: dict[str, PendingCall] = {}  # recorded server-to-client requests awaiting the client's answer
        self._answered: list[tuple[Message, PendingCall]] = []  # answers to them in the client line just read
        self.methods: dict[str, tuple[str, object]] = {}  # every client request in flight: key -> (method, id)
        self._tasks: set[asyncio.Task] = set()  # entries being written: drained before the shim exits
        self._sends: set[asyncio.Task] = set()  # the shim's own lines waiting to go upstream: dropped at the end
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.abandoned: set[str] = set()  # ids the shim answered itself (timeout): late answers are dropped
        # One line at a time goes upstream (the shim's own requests never land inside a client's line).
        self._upstream_lock = asyncio.Lock()
        self._client_big: OversizeLine | None = None  # a client line over the limit, in passage
        self._server_big: OversizeLine | None = None  # a server line over the limit, in passage
        self._server_held = bytearray()  # its last bytes, not yet released
        # The shim's own tools/list requests: key -> (the future the waiting entries share, _meta, page)
        self._own_prefix = f"broker-mcp/{secrets.token_hex(8)}/"
        self._own_ids = itertools.count(1)
        self.own: dict[str, tuple[asyncio.Future, dict, int]] = {}
        self._listing: asyncio.Future | None = None
        self.own_lists_sent = 0
        self.client_meta: dict = {}  # the last 2026-era client _meta seen (for a call read from its skeleton)
        self._fresh: list[PendingCall] = []  # calls of the line just sent upstream: their entries get a head start
        journal.ask_tools = self.ask_tools

    def _spawn(self, coro: Awaitable, tasks: set[asyncio.Task] | None = None) -> None:
        tasks = self._tasks if tasks is None else tasks
        task = asyncio.ensure_future(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    # -- client -> server -----------------------------------------------------------------------

    async def client_line(self, raw: bytes, whole: bool = True) -> None:
        """One line (whole) or one part of a line over the limit (the part ending it ends with a newline)."""
        if whole:
            async with self._upstream_lock:
                if self._guarded(self.track_client, raw) is False:
                    return  # refused: the shim answered it (an id still open)
                if self._answered:  # the client's answer to a recorded server request: durable first
                    answered, self._answered = self._answered, []
                    raw = await self._record_client_answers(raw, answered)
                await self.send_upstream(raw)
            self._prepare_fresh()
            return
        if self._client_big is None:
            await self._upstream_lock.acquire()
            self._client_big = OversizeLine(self.journal.recorder.blobs)
        big = self._client_big
        final = raw.endswith(b"\n")
        self._guarded(big.feed, raw)
        if final:
            self._guarded(self._end_client_big, big)
        try:
            await self.send_upstream(raw)
        finally:
            if final:
                self._client_big = None
                self._upstream_lock.release()

    def client_eof(self) -> None:
        """The client's input ended, maybe inside a line over the limit: its calls are known now."""
        big, self._client_big = self._client_big, None
        if big is not None:
            self._guarded(self._end_client_big, big)
            self._upstream_lock.release()

    def _guarded(self, fn: Callable, *args: object) -> object:
        """Bookkeeping that must never stop the relay: a failure is reported (None), the bytes still pass."""
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - a bug in the bookkeeping must not stop the relay
            log.exception("internal error")
            say(f"internal error while reading a line ({exc.__class__.__name__}: {exc}); relayed unchanged")
            return None

    def track_client(self, raw: bytes) -> bool:
        """Track the line's messages; False when the shim refused the line (it must not go upstream)."""
        line = parse_line(raw)
        if line.error:
            say(f"the client sent a line that is {line.error} ({len(raw)} bytes); relayed unchanged")
        if len(line.messages) == 1 and line.messages[0].value is None:  # not JSON at all
            if any(m.encode() in raw for m in RECORDED_METHODS):
                self._unmatchable_call(raw)
            return True
        if any(m.kind == "request" and self.journal.records(m.method) for m in line.messages) and (
                problem := self.journal.problem()) is not None:
            self._refuse(line, raw, JOURNAL_DOWN_REFUSAL.format(problem), JOURNAL_ERROR_CODE)
            return False
        if line.other is not None:
            self._refuse(line, raw, AMBIGUOUS_REFUSAL)
            return False
        reused = self._open_id(line)
        if reused is not None:
            self._refuse(line, raw, f"request id {reused[:100]} is still open (sent to {self.server_label} and not "
                                    "answered): answers are matched by id")
            return False
        for msg in line.messages:
            self._client_message(msg, raw, line)
        return True

    def _open_id(self, line: Line) -> str | None:
        """The key of a request in the line whose id is still open (sent upstream, not answered; or
        answered by the shim, its late answer still to be dropped) or used twice in the line; else None.

        Answers are matched to calls by id alone: a second request with an open id would have the
        first one's answer recorded as its own and its own answer reach the client with no entry."""
        seen: set[str] = set()
        for msg in line.messages:
            if msg.kind != "request":
                continue
            key = id_key(msg.id)
            if key in self.methods or key in self.abandoned or key in seen:
                return key
            seen.add(key)
        return None

    def _refuse(self, line: Line, raw: bytes, reason: str, code: int = INVALID_REQUEST_CODE) -> None:
        """Send none of the line upstream: answer each request in it (in every reading of it) with an
        error, and record the recorded kinds among them as answered by the capture point."""
        why = f"{reason}; the shim did not send this line"
        say(f"refused a client line: {why}")
        calls: set[tuple[str, str | None]] = set()  # (id, method) of each request of the line as read
        ids: set[str] = set()
        for reading in (line.messages, line.other or []):
            found = []
            for msg in reading:
                key = id_key(msg.id)
                if msg.kind != "request" or (key, msg.method) in calls:
                    continue  # (the other reading adds only what the first does not say)
                found.append((key, msg.method))
                if self.journal.records(msg.method):
                    call = self.journal.start(msg, raw if not line.batch or line.other else _one(msg, raw),
                                              **self.call_info())
                    self._no_answer(call, why, answered_by="capture")
                if reading is line.messages or key not in ids:
                    self.out.put(error_response(msg.id, code, why))
                    ids.add(key)
            calls.update(found)

    def _end_client_big(self, big: OversizeLine) -> None:
        line = big.end()
        say(f"the client sent a line over {self.max_line} bytes ({big.size} bytes); relayed in parts, recorded "
            "from the blob store")
        requests = [m for m in line.messages if m.kind == "request"]
        if not requests:
            if big.may_be_recorded_call:
                self._unmatchable_call(b"", oversize=big)
            else:
                big.abort()
            return
        recorded = False
        for msg in requests:
            recorded |= msg.method in RECORDED_METHODS
            self._client_message(msg, b"", line, oversize=big)
        if not recorded:
            big.abort()

    async def _record_client_answers(self, raw: bytes, answered: list[tuple[Message, PendingCall]]) -> bytes:
        """Record the client's answers to the server's own requests; the line the server gets (an
        answer whose entry could not be written is replaced by a JSON-RPC error: fail closed)."""
        failed = await finish_answers(self.journal, answered, status=STDIO_STATUS, headers=[], raw=raw)
        if not failed:
            return raw
        for key, exc in failed.items():
            say(f"journal: could not record the client's answer to id {key}: {exc}; {self.server_label} gets an "
                "error instead")
        return withhold(parse_line(raw), failed) + b"\n"

    def _client_message(self, msg: Message, raw: bytes, line: Line, oversize: OversizeLine | None = None) -> None:
        if msg.kind == "response":
            ask = self.asks.pop(id_key(msg.id), None)
            if ask is not None and oversize is None:
                self._answered.append((msg, ask))
            elif ask is not None:
                self._no_answer(ask, "the client's answer is over the shim's --max-message-mib; not recorded")
            return
        if msg.kind == "request":
            key = id_key(msg.id)
            self.methods[key] = (msg.method or "?", msg.id)
            self.client_meta = client_meta(msg) or self.client_meta
            if self.journal.records(msg.method):
                if key in self.pending:
                    say(f"the client reused id {key} while its earlier call is unanswered; the earlier one is "
                        "recorded without an answer")
                    self._no_answer(self.pending.pop(key), "the client reused this request id before an answer came")
                own = raw if not line.batch or oversize is not None else _one(msg, raw)
                self.pending[key] = call = self.journal.start(msg, own, oversize=oversize, **self.call_info())
                self._fresh.append(call)
                if self.call_timeout:
                    loop = asyncio.get_running_loop()
                    self._timers[key] = loop.call_later(self.call_timeout, self._timed_out, key)
        elif msg.kind == "notification" and msg.method == "notifications/cancelled":
            params = msg.params if isinstance(msg.params, dict) else {}
            key = id_key(params.get("requestId"))
            cancelled = self.pending.get(key)
            if cancelled is not None and not cancelled.cancelled:
                cancelled.cancelled = True
                asyncio.get_running_loop().call_later(self.cancel_grace, self._cancel_expired, key, cancelled)

    def _prepare_fresh(self) -> None:
        """The request's share of each new call's entry, made while the server works on it: on the
        loop's next turn, after a transport that sends from a task of its own (the HTTP front's POST)
        has sent the request."""
        if not self._fresh:
            return
        fresh, self._fresh = self._fresh, []
        asyncio.get_running_loop().call_soon(self._prepare_calls, fresh)

    def _prepare_calls(self, calls: list[PendingCall]) -> None:
        for call in calls:
            self._guarded(self.journal.prepare_early, call)

    def call_info(self) -> dict:
        """Per-call extras a transport adds (HTTP: url, headers, principal)."""
        return {}

    def _unmatchable_call(self, raw: bytes, oversize: OversizeLine | None = None) -> None:
        method = next((m for m in RECORDED_METHODS if m.encode() in raw), "tools/call")
        msg = Message({"method": method}, False, "invalid")
        call = self.journal.start(msg, raw, oversize=oversize, **self.call_info())
        call.method = method
        if oversize is not None and oversize.skeleton.overflow:
            why = ("the client's line is over --max-message-mib and too large a structure to read its id from: "
                   "relayed unchanged, no answer can be matched to it")
        else:
            why = "the client's line is not JSON: relayed unchanged, no answer can be matched to it"
        self._no_answer(call, why)

    # -- the shim's own tools/list ---------------------------------------------------------------

    def ask_tools(self, message: Message) -> asyncio.Future:
        """Ask the server for its tools (every page); the future is done when the listing is in the
        catalog or cannot be had. Calls that ask while a listing is under way share it."""
        if self._listing is not None and not self._listing.done():
            return self._listing
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._listing = fut
        self._send_own_list(fut, client_meta(message) or self.client_meta, None, 1)
        return fut

    def _send_own_list(self, fut: asyncio.Future, meta: dict, cursor: object, page: int) -> None:
        rid = f"{self._own_prefix}{next(self._own_ids)}"
        params: dict = {}
        if meta:
            params["_meta"] = meta
        if cursor is not None:
            params["cursor"] = cursor
        self.own[id_key(rid)] = (fut, meta, page)
        self.own_lists_sent += 1
        line = dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/list", "params": params})
        self._spawn(self._send_own(line), self._sends)

    async def _send_own(self, data: bytes) -> None:
        async with self._upstream_lock:
            try:
                await self.send_upstream(data + b"\n")
            except Exception as exc:  # noqa: BLE001 - the entry is decided without the listing
                say(f"could not ask {self.server_label} for its tools: {exc}")

    def _own_answer(self, msg: Message, fut: asyncio.Future, meta: dict, page: int) -> None:
        value = msg.value if isinstance(msg.value, dict) else {}
        result = value.get("result")
        if isinstance(result, dict):
            self.journal.catalog.update_from_list_result(result)
            cursor = result.get("nextCursor")
            if cursor is not None and page < LIST_PAGES:
                self._send_own_list(fut, meta, cursor, page + 1)
                return
        elif "error" in value:
            say(f"{self.server_label} refused the shim's own tools/list: {value.get('error')!r:.200}")
        if not fut.done():
            fut.set_result(None)

    def _end_own_lists(self) -> None:
        """The server is gone: nothing more will be listed; entries waiting for a listing go ahead."""
        for fut, _, _ in self.own.values():
            if not fut.done():
                fut.set_result(None)
        self.own.clear()

    # -- server -> client -----------------------------------------------------------------------

    def server_line(
        self, raw: bytes, whole: bool = True, *, status: int | None = STDIO_STATUS,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        if not whole:
            self._server_part(raw, status, headers or [])
            return
        try:
            item = self._server_whole(raw, status, headers or [])
        except Exception as exc:  # noqa: BLE001 - a bug in the bookkeeping must not stop the relay
            log.exception("internal error")
            say(f"internal error while reading a line from {self.server_label} ({exc.__class__.__name__}: "
                f"{exc}); relayed unchanged")
            item = raw
        if item is not None:
            self.out.put(item)

    def _server_whole(
        self, raw: bytes, status: int | None, headers: list[tuple[str, str]],
    ) -> bytes | asyncio.Task | None:
        """What goes to the client for this line: the bytes, a task giving them once recorded, or None."""
        line = parse_line(raw)
        if line.other is not None:
            return self._withhold_ambiguous(line, raw, status, headers)
        if line.error:
            say(f"{self.server_label} sent a line that is {line.error} ({len(raw)} bytes); relayed unchanged")
        finished, drop = self._match_answers(line)
        if drop:
            if not line.batch or len(drop) == len(line.messages):
                return None
            line = Line(raw, [m for i, m in enumerate(line.messages) if i not in drop], True, line.error)
            raw = dumps([m.value for m in line.messages]) + b"\n"
        if not finished:
            return raw
        return asyncio.create_task(self._record_then_release(raw, line, finished, status, headers))

    def _withhold_ambiguous(self, line: Line, raw: bytes, status: int | None, headers: list[tuple[str, str]]) -> bytes:
        """A server line whose duplicate keys parsers read differently (`{"id":42,"id":41,...}`): a client
        may read it as an answer to another call than the shim would, so it does not reach the client.
        Every open request either reading answers gets an error instead; a recorded call's entry keeps
        the line as its response, `answered_by` capture."""
        why = f"{self.server_label} sent an answer whose duplicate keys parsers read differently: withheld"
        say(why)
        out: list[bytes] = []
        for msg in [*line.messages, *(line.other or [])]:
            key = id_key(msg.id) if msg.kind == "response" else None
            if key is None or key not in self.methods:
                continue
            _, request_id = self.methods.pop(key)
            self.abandoned.add(key)  # its entry says the answer was withheld: a later one is dropped too
            call = self.pending.pop(key, None)
            if call is not None:
                self._cancel_timer(key)
                self._spawn(self._record_withheld(call, raw, why, status, headers))
            out.append(error_response(request_id, SERVER_GONE_CODE, why))
        return b"".join(out)

    async def _record_withheld(self, call: PendingCall, raw: bytes, why: str, status: int | None,
                               headers: list[tuple[str, str]]) -> None:
        try:
            await self.journal.finish(call, status=status, response_raw=raw, response_headers=headers, error=why,
                                      answered_by="capture", size=len(raw))
        except Exception as exc:  # noqa: BLE001 - reported, never raised into the relay
            say(f"journal: could not record {call.method} id {id_key(call.request_id)}: {exc}")

    def _match_answers(self, line: Line) -> tuple[list[tuple[Message, PendingCall]], set[int]]:
        """The recorded calls this line answers, and the messages in it the client must not get
        (answers to the shim's own requests, late answers after a timeout)."""
        finished: list[tuple[Message, PendingCall]] = []
        drop: set[int] = set()
        for i, msg in enumerate(line.messages):
            if msg.kind == "notification" and msg.method == "notifications/tools/list_changed":
                self.journal.catalog.clear()  # the next call to a tool asks the server again
            if msg.kind == "request" and self.journal.records_server_request(msg.method):
                self._server_request(msg, line)
            if msg.kind != "response":
                continue
            key = id_key(msg.id)
            own = self.own.pop(key, None)
            if own is not None:
                self._own_answer(msg, *own)
                drop.add(i)
                continue
            method, _ = self.methods.pop(key, (None, None))
            self.journal.observe_response(method, msg)
            call = self.pending.pop(key, None)
            if call is not None:
                self._cancel_timer(key)
                finished.append((msg, call))
            elif key in self.abandoned:
                self.abandoned.discard(key)
                say(f"dropped the late answer to id {key}: its entry says none came (shim timeout, or cancelled)")
                drop.add(i)
        return finished, drop

    def _server_request(self, msg: Message, line: Line) -> None:
        """A server-to-client request that is recorded: its entry is written when the client answers."""
        key = id_key(msg.id)
        earlier = self.asks.pop(key, None)
        if earlier is not None:
            self._no_answer(earlier, "the server reused this request id before the client answered")
        raw = line.raw if not line.batch else _one(msg, line.raw)
        self.asks[key] = self.journal.start(msg, raw, **self.call_info())

    def _server_part(self, raw: bytes, status: int | None, headers: list[tuple[str, str]], *, end: bool = False,
                     ) -> None:
        """A part of a server line over the limit: relayed as it comes, but for its last HOLD_TAIL
        bytes, which wait for the entry when the line answers a recorded call. `end`: the server's output
        ended, and the line with it (no newline came)."""
        if self._server_big is None:
            self._server_big = OversizeLine(self.journal.recorder.blobs)
            say(f"{self.server_label} sent a line over {self.max_line} bytes; relayed in parts")
        big = self._server_big
        held = self._server_held
        held += raw
        try:
            big.feed(raw)
        except Exception as exc:  # noqa: BLE001
            say(f"internal error while reading a long line ({exc.__class__.__name__}: {exc}); relayed unchanged")
        if not raw.endswith(b"\n") and not end:
            if len(held) > HOLD_TAIL:
                self.out.put(bytes(held[:-HOLD_TAIL]))
                del held[:-HOLD_TAIL]
            return
        self._server_big = None
        tail = bytes(held)
        held.clear()
        finished: list[tuple[Message, PendingCall]] = []
        try:
            finished, _ = self._match_answers(big.end())
        except Exception as exc:  # noqa: BLE001
            say(f"internal error while reading a long line ({exc.__class__.__name__}: {exc}); relayed unchanged")
        if not finished:
            big.abort()
            self.out.put(tail)
            return
        self.out.put(asyncio.create_task(self._record_big_then_release(tail, big, finished, status, headers)))

    def server_eof(self) -> None:
        """The server's output ended inside a line over the limit: the line ends there. What it holds is
        read as if its newline had come (a whole answer the server wrote before it exited is recorded,
        and its end released after its entry, as any answer's); the rest of it goes out as it is."""
        if self._server_big is not None:
            self._server_part(b"", STDIO_STATUS, [], end=True)

    async def _record_then_release(
        self, raw: bytes, line: Line, finished: list[tuple[Message, PendingCall]], status: int | None,
        headers: list[tuple[str, str]],
    ) -> bytes:
        failed = await finish_answers(self.journal, finished, status=status, headers=headers, raw=raw)
        if not failed:
            return raw
        for key, exc in failed.items():
            say(f"journal: could not record {finished[0][1].method} id {key}: {exc}; the client gets an error "
                "instead of the result")
        return withhold(line, failed) + b"\n"

    async def _record_big_then_release(
        self, tail: bytes, big: OversizeLine, finished: list[tuple[Message, PendingCall]], status: int | None,
        headers: list[tuple[str, str]],
    ) -> bytes:
        results = await asyncio.gather(
            *(self.journal.finish(call, status=status, response_line=big, response_headers=headers)
              for _, call in finished),
            return_exceptions=True,
        )
        failed = [(call, exc) for (_, call), exc in zip(finished, results, strict=True)
                  if isinstance(exc, BaseException)]
        if not failed:
            return tail
        # The line's end is withheld: the client is left with a line it cannot read, then the errors.
        out = [b"\n"]
        for call, exc in failed:
            say(f"journal: could not record {call.method} id {id_key(call.request_id)}: {exc}; the client gets "
                "an error instead of the result")
            why = f"the journal could not record this call, so its result is withheld: {exc}"
            out.append(error_response(call.request_id, JOURNAL_ERROR_CODE, why))
        return b"".join(out)

    # -- calls that get no answer ---------------------------------------------------------------

    def _no_answer(self, call: PendingCall, why: str, answered_by: str = "none") -> None:
        self._spawn(self._record_no_answer(call, why, answered_by))

    async def _record_no_answer(self, call: PendingCall, why: str, answered_by: str = "none") -> None:
        try:
            await self.journal.finish(call, status=None, error=why, answered_by=answered_by)
        except Exception as exc:  # noqa: BLE001 - reported, never raised into the relay
            say(f"journal: could not record unanswered {call.method} id {id_key(call.request_id)}: {exc}")

    def _cancel_expired(self, key: str, call: PendingCall) -> None:
        if self.pending.get(key) is call:
            del self.pending[key]
            self._cancel_timer(key)
            if key in self.methods:  # its entry says no answer came: a late one is dropped, not relayed unrecorded
                self.abandoned.add(key)
            self._no_answer(call, f"{CANCELLED}; no answer within {self.cancel_grace:g} s")

    def _timed_out(self, key: str) -> None:
        self._timers.pop(key, None)
        call = self.pending.pop(key, None)
        if call is None:
            return
        self.methods.pop(key, None)
        self.abandoned.add(key)
        why = f"no answer from {self.server_label} within {self.call_timeout:g} s (shim timeout)"
        say(f"{call.method} id {key}: {why}; answering the client with an error and cancelling it upstream")
        self._no_answer(call, why, answered_by="capture")
        self.out.put(error_response(call.request_id, TIMEOUT_CODE, why))
        self._spawn(self._send_cancel(call.request_id, why), self._sends)

    async def _send_cancel(self, request_id: object, why: str) -> None:
        with contextlib.suppress(Exception):
            async with self._upstream_lock:
                await self.send_upstream(notification("notifications/cancelled", {"requestId": request_id,
                                                                                   "reason": why}))

    def _cancel_timer(self, key: str) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def fail_pending(self, why: str, *, answer_client: bool) -> None:
        """Every call still unanswered gets its entry; the client gets an error for each open request."""
        self._end_own_lists()
        for key, call in list(self.pending.items()):
            self._cancel_timer(key)
            self._no_answer(call, why)
        self.pending.clear()
        for call in self.asks.values():
            self._no_answer(call, why)
        self.asks.clear()
        if answer_client:
            for _, request_id in list(self.methods.values()):
                self.out.put(error_response(request_id, SERVER_GONE_CODE, why))
        self.methods.clear()

    async def drain(self) -> None:
        """Wait for every entry being written, then flush the client side."""
        for task in list(self._sends):
            task.cancel()
        self._end_own_lists()
        # a task already done may still be in the set (its discard is a callback yet to run): not waited on
        while running := [t for t in self._tasks if not t.done()]:
            await asyncio.gather(*running, return_exceptions=True)
        await self.out.close()


async def finish_answers(
    journal: CallJournal, finished: list[tuple[Message, PendingCall]], *, status: int | None,
    headers: list[tuple[str, str]], raw: bytes,
) -> dict[str, BaseException]:
    """Record the answers of `finished` at once; the failures by id key. `raw` is the answer's line
    (or HTTP body), kept for a response that is not strict JSON-RPC."""
    if len(finished) == 1:  # the common case, without gather's task
        msg, call = finished[0]
        try:
            await journal.finish(call, status=status, response=msg, response_headers=headers,
                                 response_raw=None if msg.strict else raw, size=len(raw))
        except Exception as exc:  # noqa: BLE001 - the caller withholds the answer
            return {id_key(call.request_id): exc}
        return {}
    results = await asyncio.gather(
        *(journal.finish(call, status=status, response=msg, response_headers=headers,
                         response_raw=None if msg.strict else dumps(msg.value), size=len(raw))
          for msg, call in finished),
        return_exceptions=True,
    )
    return {id_key(call.request_id): exc for (_, call), exc in zip(finished, results, strict=True)
            if isinstance(exc, BaseException)}


def withhold(line: Line, failed: dict[str, BaseException]) -> bytes:
    """The line (without a newline) with each failed response replaced by a JSON-RPC error."""
    out = []
    for msg in line.messages:
        key = id_key(msg.id) if msg.kind == "response" else None
        if key in failed:
            why = f"the journal could not record this call, so its result is withheld: {failed[key]}"
            out.append(error_response(msg.id, JOURNAL_ERROR_CODE, why).rstrip(b"\n"))
        else:
            out.append(dumps(msg.value))
    return b"[" + b",".join(out) + b"]" if line.batch else out[0]


def _one(msg: Message, raw: bytes) -> bytes:
    return dumps(msg.value) + b"\n" if msg.value is not None else raw


def restore_blocking(*fds: int) -> None:
    """asyncio pipes set O_NONBLOCK on stdin/stdout; give the terminal or parent back blocking fds."""
    for fd in fds:
        with contextlib.suppress(OSError):
            os.set_blocking(fd, True)
