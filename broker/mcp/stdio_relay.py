"""`broker mcp -- COMMAND ...`: a stdio MCP server to the client that runs the real server as a child.

Bytes pass unchanged both ways; the child's stderr is the shim's stderr (inherited). Shutdown:

- the client closes stdin or stops reading stdout: the child's stdin is closed, its answers still in
  flight for `grace` seconds (1) are relayed and recorded, then its process group is terminated
  (SIGTERM, then SIGKILL after `KILL_AFTER` seconds); calls still unanswered get entries saying so;
- the shim gets SIGINT/SIGTERM: the same at once (no grace): a host that kills its servers a few
  seconds after closing them must not kill the shim before the shim stopped the server;
- the child exits or closes stdout: every call still unanswered gets an entry and the client an
  error for each open request, then the shim closes stdout and exits with the child's code.

Either way every entry accepted is on disk before the shim exits.

No orphans: the child runs in its own process group, which the shim kills when it exits (the
server's own children with it), and with the parent-death signal (`PR_SET_PDEATHSIG`, Linux) set to
SIGKILL, so a shim that is itself killed (SIGKILL, a crash) takes the server with it. The signal is
sent when the thread that started the child ends: the shim starts it on its event loop's thread,
which lives as long as the shim.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable

from broker.mcp.recording import CallJournal
from broker.mcp.relay import MAX_LINE, ClientWriter, LineRelay, iter_lines, restore_blocking, say
from journal.redact import compile_for_capture

SHUTDOWN_GRACE = 1.0
"""After the client went away, how long the server may still answer before it is stopped."""
KILL_AFTER = 1.0
"""How long a server has between SIGTERM and SIGKILL."""
PR_SET_PDEATHSIG = 1


def _libc_prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up before any fork (the child must not load a library)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()


def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that gives the child SIGKILL when the shim dies (Linux); None elsewhere.

    Runs between fork and exec: only the prctl call and a check that the shim did not die before it
    (then the child is already orphaned and would never get the signal)."""
    prctl = _PRCTL
    if prctl is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def kill_group(proc: asyncio.subprocess.Process, sig: int) -> None:
    """Send `sig` to the child's process group (the server and what it started); the child alone
    when it has no group of its own."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, sig)


async def open_stdio(max_line: int = MAX_LINE) -> tuple[asyncio.StreamReader, ClientWriter]:
    """The shim's own stdin/stdout as an asyncio reader and a ClientWriter.

    Pipes and sockets go through the event loop; a regular file or a terminal is read and written
    in a thread (asyncio's pipe transports refuse regular files)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=max_line + 2)
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    except (ValueError, OSError):
        _read_in_thread(loop, reader, sys.stdin.buffer.fileno())
    try:
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout.buffer)
        stream = asyncio.StreamWriter(transport, protocol, None, loop)

        async def write(data: bytes) -> None:
            if transport.is_closing():
                raise ConnectionResetError("client stdout is closed")
            stream.write(data)
            await stream.drain()

        async def close() -> None:
            stream.close()

    except (ValueError, OSError):
        fd = sys.stdout.buffer.fileno()

        async def write(data: bytes) -> None:
            await asyncio.to_thread(_write_all, fd, data)

        async def close() -> None:
            with contextlib.suppress(OSError):
                os.close(fd)

    return reader, ClientWriter(write, close)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_in_thread(loop: asyncio.AbstractEventLoop, reader: asyncio.StreamReader, fd: int) -> None:
    def pump() -> None:
        try:
            while chunk := os.read(fd, 1 << 20):
                loop.call_soon_threadsafe(reader.feed_data, chunk)
        except OSError:
            pass
        loop.call_soon_threadsafe(reader.feed_eof)

    threading.Thread(target=pump, name="stdin-reader", daemon=True).start()



def _start_failure(command: str, exc: OSError, env: dict[str, str] | None) -> str:
    """One line saying why the server did not start; for a bare name not found, that the PATH the shim
    got (often a desktop app's minimal one) does not hold it, and that an absolute path is the answer."""
    reason = exc.strerror or str(exc)
    if isinstance(exc, FileNotFoundError) and os.sep not in command:
        path = (env if env is not None else os.environ).get("PATH", "")
        return (f"cannot start the MCP server {command!r}: not found on PATH ({path or 'empty'}); give its "
                f"absolute path after -- (`command -v {command}` prints it): clients such as desktop apps "
                f"start the shim with a minimal PATH")
    return f"cannot start the MCP server {command!r}: {reason}"

class StdioRelay:
    """Relay between the client (a reader and a ClientWriter) and a child process."""

    def __init__(
        self, journal: CallJournal, argv: list[str], *, env: dict[str, str] | None = None,
        call_timeout: float | None = None, cancel_grace: float = 2.0, grace: float = SHUTDOWN_GRACE,
        max_line: int = MAX_LINE,
    ) -> None:
        self.journal = journal
        self.argv = argv
        self.env = env
        self.call_timeout = call_timeout
        self.cancel_grace = cancel_grace
        self.grace = grace
        self.max_line = max_line
        self.proc: asyncio.subprocess.Process | None = None
        self.relay: LineRelay | None = None
        self._stdin_broken = False

    async def start_child(self) -> asyncio.subprocess.Process:
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=None,
                env=self.env, limit=self.max_line + 2, process_group=0, preexec_fn=die_with_parent(),
            )
        except OSError as exc:
            raise OSError(_start_failure(self.argv[0], exc, self.env)) from None
        return self.proc

    async def _to_child(self, data: bytes) -> None:
        proc = self.proc
        assert proc is not None and proc.stdin is not None
        if self._stdin_broken:
            return
        try:
            proc.stdin.write(data)
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError, RuntimeError):
            self._stdin_broken = True  # the child is gone: its stdout reaches EOF and shutdown follows

    async def run(self, reader: asyncio.StreamReader, writer: ClientWriter) -> int:
        proc = self.proc or await self.start_child()
        assert proc.stdout is not None and proc.stdin is not None
        child_stdout = proc.stdout  # narrowed here, for the nested reader below
        relay = self.relay = LineRelay(
            self.journal, writer, send_upstream=self._to_child, call_timeout=self.call_timeout,
            cancel_grace=self.cancel_grace, max_line=self.max_line,
        )
        relay.out.start()

        async def client_to_server() -> None:
            async for data, whole in iter_lines(reader, self.max_line):
                await relay.client_line(data, whole)
            relay.client_eof()

        async def server_to_client() -> None:
            async for data, whole in iter_lines(child_stdout, self.max_line):
                relay.server_line(data, whole)
            relay.server_eof()

        c2s = asyncio.create_task(client_to_server())
        s2c = asyncio.create_task(server_to_client())
        stop = asyncio.Event()
        writer.on_gone = stop.set
        stopped_by_signal = False

        def on_signal() -> None:
            nonlocal stopped_by_signal
            stopped_by_signal = True
            stop.set()

        restore = _install_signals(on_signal)
        stopper = asyncio.create_task(stop.wait())
        try:
            done, _ = await asyncio.wait({c2s, s2c, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if s2c in done:
                # The server closed its stdout: it exited or broke.
                c2s.cancel()
                code = await self._reap(proc, self.grace)
                why = f"the MCP server exited (code {code}) before answering" if code is not None else (
                    "the MCP server closed its output before answering")
                if relay.pending or relay.methods:
                    say(f"{why}; {len(relay.methods)} open request(s) answered with an error")
                relay.fail_pending(why, answer_client=True)
                await relay.drain()
                await writer.close()
                return code if code and code > 0 else (1 if code else 0)
            # The client closed stdin, stopped reading, or the shim was told to stop.
            c2s.cancel()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError, OSError):
                proc.stdin.close()
            if not stopped_by_signal:  # answers already on their way still reach the client
                try:
                    await asyncio.wait_for(asyncio.shield(s2c), self.grace)
                except TimeoutError:
                    say(f"the MCP server did not exit within {self.grace:g} s of its input closing; stopping it")
            await self._reap(proc, 0.0)
            if not s2c.done():  # the server is gone; what it wrote before is read to the end
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(s2c), KILL_AFTER)
            why = ("the shim was stopped (signal) before the MCP server answered" if stopped_by_signal
                   else "the client went away before the MCP server answered")
            relay.fail_pending(why, answer_client=False)
            await relay.drain()
            await writer.close()
            return 0
        finally:
            for t in (c2s, s2c, stopper):
                t.cancel()
            await asyncio.gather(c2s, s2c, stopper, return_exceptions=True)
            restore()
            if proc.returncode is None:
                await self._reap(proc, 0.0)
            kill_group(proc, signal.SIGKILL)  # what the server started and left behind goes with it

    async def _reap(self, proc: asyncio.subprocess.Process, wait: float) -> int | None:
        """Wait for the child to exit; terminate its process group, then kill it, if it will not."""
        steps = ((None, wait), (signal.SIGTERM, KILL_AFTER), (signal.SIGKILL, 5.0))
        for sig, seconds in steps:
            if proc.returncode is not None:
                break
            if sig is not None:
                kill_group(proc, sig)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), seconds)
        return proc.returncode


def _install_signals(callback: Callable[[], None]) -> Callable[[], None]:
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, callback)
            installed.append(sig)

    def restore() -> None:
        for sig in installed:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)

    return restore


async def run_stdio_shim(journal: CallJournal, argv: list[str], **kwargs) -> int:
    relay = StdioRelay(journal, argv, **kwargs)
    await relay.start_child()
    compile_for_capture()  # while the server starts, not on the first call (journal.redact)
    reader, writer = await open_stdio(relay.max_line)
    try:
        return await relay.run(reader, writer)
    finally:
        restore_blocking(0, 1)
