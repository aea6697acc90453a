"""The proxy's end of the recording service (`broker.proxy.service`), for the connector-journal addon.

`record(call)` sends one `journal.call.Call` to the service process and resolves once the
service acknowledges it: the entry is durable, or the call was a token exchange, or it failed (a
JournalError with the service's reason). `connect` starts the service (the addon calls it once the
proxy runs). If the service exits, every call waiting on it fails with `ServiceLost` (its entry may
or may not have been written) and a call that finds no live service gets `ServiceUnavailable`;
the addon then records those calls itself (see the addon), so a dead service never lets a call
through unrecorded. The next call starts a new service, which continues each chain from its file.
A stalled service is a dead one: a call that waits longer than `ack_deadline` for its
acknowledgement (`ACK_DEADLINE` by default, `broker run --ack-deadline`) has the service killed
(SIGKILL, which also ends a stopped process, so it can write nothing more) and then lost, as above.

Runs on the proxy's event loop: acknowledgements arrive through a protocol's `data_received`, so
the loop never blocks and no thread is involved. Frames go through an outbox (`_Outbox`): request
halves queued in one turn of the event loop leave in one write just after that turn, a frame a
call waits on leaves at once (see there why).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import msgspec

from broker.proxy.wire import (
    Ack,
    Completion,
    Coverage,
    Forget,
    PreparedAhead,
    RequestAhead,
    WholeCall,
    frame,
    split_to_proxy,
)
from journal.call import Call
from journal.store.url import is_database_url
from journal.writer import JournalError, JournalStopped

log = logging.getLogger("broker")

_ROOT = str(Path(__file__).resolve().parent.parent)
RESTART_INTERVAL = 1.0
"""Seconds between attempts to start the service, so a service that cannot start does not spin."""
ACK_DEADLINE = 5.0
"""Seconds a call waits for the service's acknowledgement by default (`broker run --ack-deadline`). Past
it the service is treated as dead: a stalled service (stopped, swapping, stuck on a disk) is killed
and replaced, and the calls waiting on it are recorded by the proxy, as when it crashes."""


STARTUP_ALLOWANCE = 30.0
"""Seconds a new service has to say it is ready (start Python, open the vault) on top of the deadline:
until then the deadline alone would kill every service that starts slowly on a busy machine."""


class ServiceUnavailable(JournalError):
    """No recording service is running (it died and a new one cannot be started yet); nothing of
    this call was handed over."""


class ServiceLost(JournalError):
    """The service exited while this call was waiting: its entry may or may not be on disk."""


class CallNoted(JournalError):
    """The call could not be recorded, and the service wrote an entry saying so (the message says why)."""


def _encoded(message: WholeCall | RequestAhead | PreparedAhead | Completion) -> bytearray:
    """The frame of a call's message; ServiceUnavailable when the call holds something the wire cannot
    carry (nothing of it is handed over: the proxy records it itself, where any value can be read)."""
    try:
        return frame(message)
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError) as exc:
        raise ServiceUnavailable(f"the call cannot be sent to the recording service ({exc})") from None


class Recorded(NamedTuple):
    """A call's entry is durable: its seq, effect and hash as the entry holds them (None when not told;
    the hash links a WebSocket's messages to its handshake). Always truthy; a token exchange (nothing
    recorded) is False instead."""

    seq: int | None
    effect: str | None
    hash: str | None = None


class RecorderLink:
    def __init__(self, vault: str, spill_threshold: int, connectors: str = "", extra_args: list[str] | None = None,
                 ack_deadline: float = ACK_DEADLINE) -> None:
        self.vault, self.spill_threshold, self.connectors = vault, spill_threshold, connectors
        self.ack_deadline = ack_deadline
        self.extra_args = list(extra_args or [])  # more `python -m broker.proxy.service` options (checkpoints)
        self.proc: subprocess.Popen | None = None
        self._transport: asyncio.Transport | None = None
        self._starting: asyncio.Future | None = None
        self._waiting: dict[int, tuple[asyncio.Future, asyncio.BaseTransport]] = {}
        self._next_id = 0
        self._generation = 0  # one per service started: a request half lives in one service only
        self._last_start = 0.0
        self._start_error: JournalError | None = None
        self.stopped: dict[str, str] = {}
        """Sessions the service reported stopped (a failed write or fsync), with the reason."""
        self._outbox: _Outbox | None = None  # for the connected service
        self._ready: asyncio.BaseTransport | None = None  # the connected service said it is ready
        self._hurry = False  # stopping: no start-up allowance any more
        self._closed = False  # closed: no new service is started

    @property
    def live(self) -> bool:
        """A service is connected right now (a request half handed over now reaches it)."""
        return self._transport is not None and not self._transport.is_closing()

    async def record(self, call: Call) -> Recorded | bool:
        """`Recorded` once the call's entry is durable, False for a token exchange (nothing
        recorded); JournalError when it could not be recorded (ServiceUnavailable, ServiceLost: see
        above)."""
        transport = self._transport
        if transport is None or transport.is_closing():
            try:
                transport = await self.connect()
            except JournalError as exc:
                raise ServiceUnavailable(str(exc)) from None
        self._next_id += 1
        return await self._answer(transport, WholeCall(self._next_id, call), call.identity.session)

    def send_request(self, call: Call, prepared: dict | None = None) -> tuple[int, int] | None:
        """Hand over a call's request half (a Call without its response part) while the call goes
        upstream, so the service prepares it meanwhile; the handle for `finish`, or None when the
        service is not connected (then `finish` sends the whole call). `prepared`: the half's fields,
        made in this process already (a write's, for its write-ahead record): they go instead of the
        request body, and the service takes them (`broker.proxy.wire`)."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return None
        data = None
        if prepared is not None:
            bodiless = msgspec.structs.replace(call, request=msgspec.structs.replace(call.request, body=None))
            try:
                data = _encoded(PreparedAhead(self._next_id + 1, bodiless, prepared))
            except ServiceUnavailable:
                pass  # fields the wire cannot carry: the call goes as it came, for the service to prepare
        try:
            if data is None:
                data = _encoded(RequestAhead(self._next_id + 1, call))
        except ServiceUnavailable:
            return None  # `finish` then fails the same way and the proxy records the call itself
        self._next_id += 1
        self._send(transport, data)
        return self._generation, self._next_id

    async def finish(self, sent: tuple[int, int] | None, call: Call) -> Recorded | bool:
        """As `record`, for a call whose request half may have gone ahead: `sent` is the handle
        `send_request` gave, or None when it was not sent (then the whole call goes now). Of a call
        sent ahead only the response part, `ts` and `mcp` go now."""
        transport = self._transport
        if sent is None or sent[0] != self._generation or transport is None or transport.is_closing():
            return await self.record(call)  # not sent ahead, or to a service now gone
        assert call.response is not None
        ts = call.ts if isinstance(call.ts, int | float) and not isinstance(call.ts, bool) else None
        completion = Completion(sent[1], call.response, ts, call.mcp)
        return await self._answer(transport, completion, call.identity.session)

    def send_coverage(self, gaps: list[tuple[str, str, str, int]]) -> bool:
        """Calls the proxy left unrecorded (declared coverage); False when the service is not connected."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return False
        self._send(transport, frame(Coverage(gaps)))
        return True

    def forget(self, sent: tuple[int, int] | None) -> None:
        """The call of a request half sent ahead will not be recorded (blocked, dropped)."""
        transport = self._transport
        if sent is not None and sent[0] == self._generation and transport is not None and not transport.is_closing():
            self._send(transport, frame(Forget(sent[1])))

    async def _answer(self, transport: asyncio.Transport, message: WholeCall | Completion, session: str,
                      ) -> Recorded | bool:
        call_id = message.id
        data = _encoded(message)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._waiting[call_id] = (fut, transport)
        self._send(transport, data, now=True)
        # Past the deadline `_stalled` fails `fut` (and every call waiting on that service) with ServiceLost.
        allowance = 0.0 if self._ready is transport or self._hurry else STARTUP_ALLOWANCE
        deadline = loop.call_later(self.ack_deadline + allowance, self._stalled, transport)
        try:
            ack: Ack = await fut
        finally:
            deadline.cancel()
        detail = ack.detail
        if ack.outcome == "ok":  # the service names the entry's seq and effect: the caller may log them
            seq = detail if isinstance(detail, int) and not isinstance(detail, bool) and detail > 0 else None
            digest = ack.hash if isinstance(ack.hash, str) else None
            return Recorded(seq, ack.effect, digest)
        if ack.outcome == "skip":
            return False
        if ack.outcome == "noted":
            raise CallNoted(detail)
        if ack.stopped:
            self.stopped[session] = detail
            raise JournalStopped(detail)
        raise JournalError(detail)

    def _send(self, transport: asyncio.Transport, data: bytes | bytearray, now: bool = False) -> None:
        outbox = self._outbox
        if outbox is None or outbox.transport is not transport:  # (not through connect: tests, a race)
            outbox = self._outbox = _Outbox(transport)
        outbox.put(data, now)

    def hurry(self) -> None:
        """The broker is stopping: calls waiting on a service that is not ready yet get only the deadline."""
        self._hurry = True
        transport = self._transport
        if transport is not None and self._ready is not transport and self._waiting:
            asyncio.get_running_loop().call_later(self.ack_deadline, self._stalled, transport)

    async def connect(self) -> asyncio.Transport:
        """The connection to the service, starting the service if it is not running."""
        transport = self._transport
        if transport is not None and not transport.is_closing():
            return transport
        if self._closed:
            raise JournalError("the recording service was stopped with the broker")
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        starting = self._starting
        try:
            return await asyncio.shield(starting)
        finally:
            if self._starting is starting and starting.done():
                self._starting = None

    async def _start(self) -> asyncio.Transport:
        now = time.monotonic()
        if self._start_error is not None and now - self._last_start < RESTART_INTERVAL:
            raise self._start_error
        self._last_start = now
        self._reap()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ)
        if is_database_url(self.vault):  # its password, if any, stays off the command line
            env["BROKER_STORE"] = self.vault
            cmd = [sys.executable, "-m", "broker.proxy.service", "--fd", str(theirs.fileno())]
        else:
            cmd = [sys.executable, "-m", "broker.proxy.service", "--fd", str(theirs.fileno()), "--vault", self.vault]
        cmd += ["--spill-threshold", str(self.spill_threshold)]
        if self.connectors:
            cmd += ["--connectors", self.connectors]
        cmd += self.extra_args
        env["PYTHONPATH"] = _ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        try:
            self.proc = subprocess.Popen(cmd, pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
        except OSError as exc:
            ours.close()
            self._start_error = JournalError(f"cannot start the recording service ({sys.executable}): {exc}")
            raise self._start_error from None
        finally:
            theirs.close()
        self._start_error = None
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_connection(lambda: _Acks(self), sock=ours)
        self._transport = transport
        self._outbox = _Outbox(transport)
        self._generation += 1
        return transport

    def _acknowledged(self, acks: list[Ack]) -> None:
        for ack in acks:
            waiting = self._waiting.pop(ack.id, None)
            if waiting is not None and not waiting[0].done():
                waiting[0].set_result(ack)

    def _stalled(self, transport: asyncio.Transport) -> None:
        """A call waited past the deadline: the service is dead to the proxy. It is killed (SIGKILL works
        on a stopped process too) before its calls are recorded here, so that it cannot write an entry
        for them afterwards; the next call starts a new one."""
        waited_on = any(t is transport for _, t in self._waiting.values())
        if self.proc is None or (self._transport is not transport and not waited_on):
            return  # already lost: its calls were failed then
        log.error("journal: the recording service did not acknowledge a call within %.1f s "
                  "(--ack-deadline); killing and replacing it", self.ack_deadline)
        self.proc.kill()
        try:
            self.proc.wait(1.0)  # a killed process is gone at once; its entries are then all on disk
        except subprocess.TimeoutExpired:
            log.error("journal: the stalled recording service (pid %d) did not exit after SIGKILL", self.proc.pid)
        self._lost(transport)
        transport.abort()

    def _lost(self, transport: asyncio.BaseTransport) -> None:
        if self._transport is not transport and self._outbox is not None and self._outbox.transport is not transport \
                and not any(t is transport for _, t in self._waiting.values()):
            return  # (a service already handled, e.g. killed by `_stalled`)
        if self._transport is transport:
            self._transport = None
        if self._outbox is not None and self._outbox.transport is transport:
            self._outbox.drop()  # its calls are failed below (ServiceLost) and recorded by the proxy
            self._outbox = None
        code = None
        if self.proc is not None:
            try:  # the service closes its end only as it exits: its exit code is at most moments away
                code = self.proc.wait(0.2)  # a service that cannot start leaves by os._exit: no slow shutdown
            except subprocess.TimeoutExpired:
                pass
        why = f"the recording service exited (code {code})" if code is not None else "the recording service hung up"
        if time.monotonic() - self._last_start < RESTART_INTERVAL:
            self._start_error = JournalError(why)  # died at once: do not start another one right away
        lost = [call_id for call_id, (_, t) in self._waiting.items() if t is transport]
        if lost:
            log.error("journal: %s with %d calls not acknowledged", why, len(lost))
        for call_id in lost:
            fut = self._waiting.pop(call_id)[0]
            if not fut.done():
                fut.set_exception(ServiceLost(why))

    def _reap(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()
        self.proc = None

    async def aclose(self, timeout: float = 30.0) -> None:
        """Let the service record what it has received (acknowledging it), then wait for it to exit."""
        transport = self._shut_write(drain=True)
        if self.proc is not None:
            await asyncio.to_thread(self._wait, timeout)
        if transport is not None:
            transport.abort()

    def close(self, timeout: float = 30.0) -> None:
        """As `aclose`, blocking (outside the event loop, or when no call can be waiting)."""
        transport = self._shut_write()
        self._wait(timeout)
        if transport is not None:
            transport.abort()

    def _shut_write(self, drain: bool = False) -> asyncio.Transport | None:
        """Send the end after what is queued; with `drain` (the event loop runs on meanwhile) after
        what the transport still buffers too. A call after this one is recorded by the proxy."""
        self._closed = True
        transport = self._transport
        self._transport = None  # (`live` is False now: nothing more is written to it)
        if self._outbox is not None:
            self._outbox.flush()  # what was queued goes before the end
        if transport is not None and drain and not transport.is_closing() and transport.can_write_eof():
            transport.write_eof()  # the service sees the end once it has read every call
        elif transport is not None:
            sock = transport.get_extra_info("socket")
            try:
                if sock is not None:
                    sock.shutdown(socket.SHUT_WR)  # the service sees the end once it has read every call
            except OSError:
                pass
        return transport

    def _wait(self, timeout: float) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.error("journal: the recording service did not finish within %.0f s; killing it", timeout)
            self.proc.kill()
            self.proc.wait()
        self.proc = None


class _Outbox:
    """Frames for the service, written together once per turn of the event loop.

    Why not one `transport.write` per frame: each write wakes the service, and on a busy machine the
    kernel often runs the woken service on the proxy's own CPU at once, preempting the proxy in the
    middle of its turn. A request half is queued in the `request` hook, before mitmproxy writes that
    request upstream in the same turn; written at once it delayed the request itself by the
    service's work on it. So the outbox is flushed by a zero-delay timer: asyncio runs expired
    timers after the callbacks already queued, i.e. after mitmproxy's continuation of the hook that
    writes the request upstream. Request halves of several flows in one turn (under load) leave in one
    write and reach the service as one batch. A frame that a call waits on (a response half, a whole
    call) is not held: it leaves at once, with whatever is queued before it (waiting for the next
    turn cost 40 us at p50 and 170 us at p90 of sequential latency). Order is kept: frames leave in
    the order queued.
    """

    __slots__ = ("transport", "frames", "timer")

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.frames: list[bytes | bytearray] = []
        self.timer: asyncio.TimerHandle | None = None

    def put(self, data: bytes | bytearray, now: bool = False) -> None:
        """Queue a frame; with `now`, write it (after what is queued) at once."""
        self.frames.append(data)
        if now:
            self.flush()
        elif self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(0, self.flush)

    def flush(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.frames:
            data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
            self.frames.clear()
            if not self.transport.is_closing():
                self.transport.write(data)

    def drop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.frames.clear()


class _Acks(asyncio.Protocol):
    def __init__(self, link: RecorderLink) -> None:
        self.link = link
        self.buf = bytearray()
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.link._ready = self.transport  # its first frame says so; any frame shows it is running
        self.buf += data
        batches, used = split_to_proxy(self.buf)
        if used:
            del self.buf[:used]
        for acks in batches:
            self.link._acknowledged(acks)

    def connection_lost(self, exc: Exception | None) -> None:
        assert self.transport is not None
        self.link._lost(self.transport)
