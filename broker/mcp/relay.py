"""The line relay shared by the stdio transports: track calls, hold back one response until its
entry is durable, keep the order of lines, answer for a server that is gone.

A client line goes upstream unchanged and at once. A server line goes to the client unchanged,
in the order the server sent it; a response to a recorded call (`tools/call`, `resources/read`)
waits for its entry, and lines after it wait behind it (`OrderedOutput`). When the journal cannot
take the entry, the client gets a JSON-RPC error for that id instead of the result (fail closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable

import orjson

from broker.mcp.messages import RECORDED_METHODS, Line, Message, error_response, id_key, notification, parse_line
from broker.mcp.recording import JOURNAL_ERROR_CODE, STDIO_STATUS, CallJournal, PendingCall

log = logging.getLogger("broker.mcp")

MAX_LINE = 64 << 20
"""Lines up to this size are parsed and recorded; longer ones are relayed unparsed (and reported)."""
SERVER_GONE_CODE = -32000
TIMEOUT_CODE = -32001
_CHUNK = 1 << 20


def say(message: str) -> None:
    """One line on stderr, prefixed so it stands apart from the server's own stderr."""
    try:
        sys.stderr.write(f"broker mcp: {message}\n")
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
            data = await item if isinstance(item, asyncio.Task) else item
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
        self.methods: dict[str, str] = {}  # every client request in flight: id -> method
        self._tasks: set[asyncio.Task] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.abandoned: set[str] = set()  # ids the shim answered itself (timeout): late answers are dropped

    # -- client -> server -----------------------------------------------------------------------

    async def client_line(self, raw: bytes, whole: bool = True) -> None:
        if whole:
            self.track_client(raw)
        await self.send_upstream(raw)

    def track_client(self, raw: bytes) -> Line:
        line = parse_line(raw)
        if line.error:
            say(f"the client sent a line that is {line.error} ({len(raw)} bytes); relayed unchanged")
        if len(line.messages) == 1 and line.messages[0].value is None:  # not JSON at all
            if any(m.encode() in raw for m in RECORDED_METHODS):
                self._unmatchable_call(raw)
            return line
        for msg in line.messages:
            self._client_message(msg, raw, line)
        return line

    def _client_message(self, msg: Message, raw: bytes, line: Line) -> None:
        if msg.kind == "request":
            key = id_key(msg.id)
            self.methods[key] = msg.method or "?"
            if self.journal.records(msg.method):
                if key in self.pending:
                    say(f"the client reused id {key} while its earlier call is unanswered; the earlier one is "
                        "recorded without an answer")
                    self._no_answer(self.pending.pop(key), "the client reused this request id before an answer came")
                own = raw if not line.batch else _one(msg, raw)
                self.pending[key] = self.journal.start(msg, own, **self.call_info())
                if self.call_timeout:
                    loop = asyncio.get_running_loop()
                    self._timers[key] = loop.call_later(self.call_timeout, self._timed_out, key)
        elif msg.kind == "notification" and msg.method == "notifications/cancelled":
            params = msg.params if isinstance(msg.params, dict) else {}
            key = id_key(params.get("requestId"))
            call = self.pending.get(key)
            if call is not None and not call.cancelled:
                call.cancelled = True
                asyncio.get_running_loop().call_later(self.cancel_grace, self._cancel_expired, key, call)

    def call_info(self) -> dict:
        """Per-call extras a transport adds (HTTP: url, headers, principal)."""
        return {}

    def _unmatchable_call(self, raw: bytes) -> None:
        method = next((m for m in RECORDED_METHODS if m.encode() in raw), "tools/call")
        msg = Message({"method": method}, False, "invalid")
        call = self.journal.start(msg, raw, **self.call_info())
        call.method = method
        self._no_answer(call, "the client's line is not JSON: relayed unchanged, no answer can be matched to it")

    # -- server -> client -----------------------------------------------------------------------

    def server_line(
        self, raw: bytes, whole: bool = True, *, status: int | None = STDIO_STATUS,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        if not whole:
            self.out.put(raw)
            return
        line = parse_line(raw)
        if line.error:
            say(f"{self.server_label} sent a line that is {line.error} ({len(raw)} bytes); relayed unchanged")
        finished: list[tuple[Message, PendingCall]] = []
        drop = False
        for msg in line.messages:
            if msg.kind != "response":
                continue
            key = id_key(msg.id)
            method = self.methods.pop(key, None)
            self.journal.observe_response(method, msg)
            call = self.pending.pop(key, None)
            if call is not None:
                self._cancel_timer(key)
                finished.append((msg, call))
            elif key in self.abandoned and not line.batch:
                self.abandoned.discard(key)
                say(f"dropped the late answer to id {key}: the shim already answered it (timeout)")
                drop = True
        if drop:
            return
        if not finished:
            self.out.put(raw)
            return
        task = asyncio.create_task(self._record_then_release(raw, line, finished, status, headers or []))
        self.out.put(task)

    async def _record_then_release(
        self, raw: bytes, line: Line, finished: list[tuple[Message, PendingCall]], status: int | None,
        headers: list[tuple[str, str]],
    ) -> bytes:
        failed = await finish_answers(self.journal, finished, status=status, headers=headers,
                                      text=lambda: raw.decode("utf-8", "replace"))
        if not failed:
            return raw
        for key, exc in failed.items():
            say(f"journal: could not record {finished[0][1].method} id {key}: {exc}; the client gets an error "
                "instead of the result")
        return withhold(line, failed) + b"\n"

    # -- calls that get no answer ---------------------------------------------------------------

    def _no_answer(self, call: PendingCall, why: str) -> None:
        task = asyncio.create_task(self._record_no_answer(call, why))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _record_no_answer(self, call: PendingCall, why: str) -> None:
        try:
            await self.journal.finish(call, status=None, error=why)
        except Exception as exc:  # noqa: BLE001 - reported, never raised into the relay
            say(f"journal: could not record unanswered {call.method} id {id_key(call.request_id)}: {exc}")

    def _cancel_expired(self, key: str, call: PendingCall) -> None:
        if self.pending.get(key) is call:
            del self.pending[key]
            self._cancel_timer(key)
            self._no_answer(call, f"cancelled by the client (notifications/cancelled); no answer within "
                                  f"{self.cancel_grace:g} s")

    def _timed_out(self, key: str) -> None:
        self._timers.pop(key, None)
        call = self.pending.pop(key, None)
        if call is None:
            return
        self.methods.pop(key, None)
        self.abandoned.add(key)
        why = f"no answer from {self.server_label} within {self.call_timeout:g} s (shim timeout)"
        say(f"{call.method} id {key}: {why}; answering the client with an error and cancelling it upstream")
        self._no_answer(call, why)
        self.out.put(error_response(call.request_id, TIMEOUT_CODE, why))
        task = asyncio.create_task(self._send_cancel(call.request_id, why))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_cancel(self, request_id: object, why: str) -> None:
        with contextlib.suppress(Exception):
            await self.send_upstream(notification("notifications/cancelled", {"requestId": request_id, "reason": why}))

    def _cancel_timer(self, key: str) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def fail_pending(self, why: str, *, answer_client: bool) -> None:
        """Every call still unanswered gets its entry; the client gets an error for each open request."""
        for key, call in list(self.pending.items()):
            self._cancel_timer(key)
            self._no_answer(call, why)
        self.pending.clear()
        if answer_client:
            for key in list(self.methods):
                self.out.put(error_response(_id_from_key(key), SERVER_GONE_CODE, why))
        self.methods.clear()

    async def drain(self) -> None:
        """Wait for every entry being written, then flush the client side."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self.out.close()


async def finish_answers(
    journal: CallJournal, finished: list[tuple[Message, PendingCall]], *, status: int | None,
    headers: list[tuple[str, str]], text: Callable[[], str],
) -> dict[str, BaseException]:
    """Record the answers of `finished` at once; the failures by id key. `text()` is the raw answer,
    stored for a response that is not strict JSON-RPC."""
    results = await asyncio.gather(
        *(journal.finish(call, status=status, response=msg, response_headers=headers,
                         response_text=None if msg.strict else text())
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
            out.append(orjson.loads(error_response(msg.id, JOURNAL_ERROR_CODE, why)))
        else:
            out.append(msg.value)
    return orjson.dumps(out if line.batch else out[0])


def _one(msg: Message, raw: bytes) -> bytes:
    return orjson.dumps(msg.value) + b"\n" if msg.value is not None else raw


def _id_from_key(key: str) -> object:
    try:
        return orjson.loads(key)
    except orjson.JSONDecodeError:
        return None


def restore_blocking(*fds: int) -> None:
    """asyncio pipes set O_NONBLOCK on stdin/stdout; give the terminal or parent back blocking fds."""
    for fd in fds:
        with contextlib.suppress(OSError):
            os.set_blocking(fd, True)
