"""A stalled recorder is a dead recorder (issue 21, item 3), through the real `broker run`.

The recording service is stopped (SIGSTOP) while four clients call through the broker. Past the
acknowledgement deadline (`--ack-deadline`) the proxy kills and replaces it and records the calls
that waited on it itself, so every call the upstream received has its entry after a clean stop
(SIGTERM, even with the new service stalled again at that moment) and after a kill of the broker.

A WebSocket under `--on-journal-error block` too: a message the relay holds for the stalled service
must not reach the upstream before its entry is on disk (checked in the upstream as each message
arrives); past the deadline it is recorded by the proxy and passed on, or dropped with the reason
logged."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import ssl
import threading
import time
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from journal.vault import Vault
from journal.verify import verify_session
from tests.support.broker_harness import BrokerProcess
from tests.support.upstreams import Upstream
from tests.support.ws_upstream import WsUpstream

GMAIL = "https://gmail.googleapis.com/gmail/v1/users/me"
ON_DISK = b"every accepted entry is on disk"


@pytest.fixture(scope="module")
def upstream():
    with Upstream() as up:
        yield up


class _Load:
    """Four clients calling in a loop (reads), each call marked `call=K-N` in its URL."""

    def __init__(self, b: BrokerProcess, session: str) -> None:
        self.b, self.session, self.stop = b, session, threading.Event()
        self.threads = [threading.Thread(target=self._agent, args=(k,), daemon=True) for k in range(4)]

    def _agent(self, k: int) -> None:
        n = 0
        ctx = ssl.create_default_context(cafile=self.b.ca)
        with httpx.Client(proxy=self.b.proxy_url(self.session, "agent-stall"), verify=ctx, timeout=15) as c:
            while not self.stop.is_set():
                n += 1
                with contextlib.suppress(httpx.HTTPError):
                    c.get(f"{GMAIL}/labels", params={"call": f"{k}-{n}"})

    def __enter__(self) -> _Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


def _warm(upstream: Upstream, calls: int = 8, timeout: float = 60) -> None:
    """Until the load runs: `calls` calls reached the upstream."""
    deadline = time.monotonic() + timeout
    while len(upstream.requests) < calls:
        assert time.monotonic() < deadline, "the load did not start"
        time.sleep(0.05)


def _reached(upstream: Upstream) -> set[str]:
    return {r["path"].partition("call=")[2] for r in upstream.requests if "call=" in r["path"]}


def _recorded(b: BrokerProcess, session: str) -> set[str]:
    return {e["request"]["url"].partition("call=")[2] for e in b.entries(session)}


def _gone(pid: int) -> None:
    """A stopped service left behind by the test: killed (a stopped process takes SIGKILL) and waited for."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    for _ in range(200):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)


@pytest.mark.e2e
def test_a_stalled_service_is_replaced_and_a_clean_stop_leaves_no_call_without_its_entry(upstream, tmp_path):
    upstream.clear_requests()
    stopped: list[int] = []
    b = BrokerProcess(tmp_path, upstream, "--ack-deadline", "1").start()
    try:
        with _Load(b, "s-stall"):
            _warm(upstream)
            first = b.service_pid()
            os.kill(first, signal.SIGSTOP)
            stopped.append(first)
            time.sleep(3)  # well past the deadline: calls go on, recorded by the proxy or a new service
            assert b.alive()
            assert b.service_pid() != first, "the stalled service was not replaced"
            b.stop(signal.SIGTERM, timeout=60)  # while the clients go on calling
        out = bytes(b.output)
        reached, recorded = _reached(upstream), _recorded(b, "s-stall")
        assert len(reached) >= 12
        missing = reached - recorded
        assert missing == set(), f"{len(missing)} of {len(reached)} calls reached the upstream unrecorded:\n" + \
            out.decode(errors="replace")[-3000:]
        assert b"did not acknowledge" in out
        assert b.proc is not None and b.proc.returncode == 0
        assert ON_DISK in out
        assert verify_session(Vault(b.vault), "s-stall").intact
        got = b.entries("s-stall")
        assert len(got) == len({e["request"]["url"] for e in got})  # no call recorded twice
    finally:
        b.stop(signal.SIGKILL)
        for pid in stopped:
            _gone(pid)


@pytest.mark.e2e
def test_a_stop_during_a_stall_records_the_calls_waiting_on_the_stalled_service(upstream, tmp_path):
    upstream.clear_requests()
    b = BrokerProcess(tmp_path, upstream, "--ack-deadline", "1").start()
    first = 0
    try:
        with _Load(b, "s-stall-stop"):
            _warm(upstream)
            first = b.service_pid()
            os.kill(first, signal.SIGSTOP)
            time.sleep(0.3)  # calls are waiting on it, the deadline not yet passed
            b.stop(signal.SIGTERM, timeout=60)
        out = bytes(b.output)
        reached, recorded = _reached(upstream), _recorded(b, "s-stall-stop")
        missing = reached - recorded
        assert missing == set(), f"{len(missing)} of {len(reached)} calls reached the upstream unrecorded:\n" + \
            out.decode(errors="replace")[-3000:]
        assert b.proc is not None and b.proc.returncode == 0 and ON_DISK in out
        assert verify_session(Vault(b.vault), "s-stall-stop").intact
    finally:
        b.stop(signal.SIGKILL)
        if first:
            _gone(first)


@pytest.mark.e2e
def test_after_a_stall_a_kill_of_the_broker_loses_no_call(upstream, tmp_path):
    upstream.clear_requests()
    b = BrokerProcess(tmp_path, upstream, "--ack-deadline", "1").start()
    first = 0
    try:
        with _Load(b, "s-stall-kill"):
            _warm(upstream)
            first = b.service_pid()
            os.kill(first, signal.SIGSTOP)
            time.sleep(3)
        # the load has stopped (every client has its answer): the broker is killed, no clean stop
        try:
            service: int | None = b.service_pid(timeout=1)
        except RuntimeError:
            service = None  # (a new service starts with the next call)
        b.stop(signal.SIGKILL)
        if service is not None and service != first:
            _wait_exit(service)  # the service sees the proxy go, records what it has, and exits
        reached, recorded = _reached(upstream), _recorded(b, "s-stall-kill")
        assert len(reached) >= 12
        missing = reached - recorded
        assert missing == set(), f"{len(missing)} of {len(reached)} calls reached the upstream unrecorded"
        assert verify_session(Vault(b.vault), "s-stall-kill").intact
    finally:
        b.stop(signal.SIGKILL)
        if first:
            _gone(first)


def _wait_exit(pid: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ", 1)[1].startswith("Z"):
                    return
        except FileNotFoundError:
            return
        time.sleep(0.05)
    _gone(pid)


ECHO = "wss://api.github.com/ws/echo"
DURING = ["during-stall-1", "during-stall-2", "during-stall-3"]


def _journal_text(vault: Path) -> str:
    return "".join(p.read_text() for p in (vault / "journal").glob("*.jsonl"))


def _holds_open(pid: int, path: Path) -> bool:
    """The process has `path` open: the recording service keeps a session's file open once it has written
    an entry to it, so it is past its start (whose calls get a longer deadline: link.STARTUP_ALLOWANCE)."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except FileNotFoundError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(fd) == str(path):
                return True
    return False


@pytest.mark.e2e
def test_a_websocket_message_held_for_a_stalled_service_never_reaches_the_upstream_unrecorded(tmp_path):
    with WsUpstream() as upstream:
        b = BrokerProcess(tmp_path, upstream, "--ack-deadline", "2", "--on-journal-error", "block").start()
        unrecorded: list[str] = []

        def entry_first(path: str, message: str | bytes) -> None:  # in the upstream, before it echoes
            if f'"{message!s}"' not in _journal_text(b.vault):
                unrecorded.append(str(message))

        upstream.on_message = entry_first
        stalled = said_before = 0
        echoed: list[str] = []
        answered_unrecorded: list[str] = []

        def answer_entry_first(text: str) -> None:  # in the client: the echo's own entry is on disk too
            if _journal_text(b.vault).count(f'"{text}"') < 2:  # the message's entry and the answer's
                answered_unrecorded.append(text)

        async def talk() -> None:
            nonlocal stalled, said_before
            async with connect(ECHO, proxy=b.proxy_url("ws-stall", "agent-s"), ssl=upstream.client_ssl(b.ca),
                               compression=None, ping_interval=None) as ws:
                for n in range(1, 600):  # until the service records (a service not ready yet has more time)
                    await ws.send(f"before-stall-{n}")
                    echoed.append(str(await ws.recv()))
                    answer_entry_first(echoed[-1])
                    stalled = b.service_pid()
                    if _holds_open(stalled, Vault(b.vault).session_path("ws-stall")):
                        break
                    await asyncio.sleep(0.1)
                os.kill(stalled, signal.SIGSTOP)
                before, said_before = len(echoed), len(b.output)
                for text in DURING:  # one burst: the relay holds them together for one flush
                    await ws.send(text)
                with contextlib.suppress(ConnectionClosed):  # a connection closed for a dropped message
                    while len(echoed) < before + len(DURING):
                        echoed.append(str(await asyncio.wait_for(ws.recv(), 60)))
                        answer_entry_first(echoed[-1])

        try:
            asyncio.run(asyncio.wait_for(talk(), 120))
            entries = b.entries("ws-stall")
        finally:
            b.stop()
            if stalled:
                _gone(stalled)
        out = bytes(b.output).decode(errors="replace")
    assert stalled, out[-3000:]
    assert upstream.errors == []
    assert unrecorded == [], f"reached the upstream without an entry: {unrecorded}\n{out[-3000:]}"
    assert answered_unrecorded == [], f"reached the client without an entry: {answered_unrecorded}"
    assert b"did not acknowledge a call within 2.0 s" in bytes(b.output)[said_before:], out[-3000:]  # says why
    reached = [str(m) for _, m in upstream.received]
    assert reached[0] == "before-stall-1"
    texts = {str(e["request"].get("body")) for e in entries if "websocket" in e["request"]}
    texts |= {str(e["response"].get("body")) for e in entries if "websocket" in e["request"]}
    assert set(reached) <= texts  # (again, after the fact: every message the upstream got is an entry)
    assert set(echoed) <= texts  # and every answer the client got
    for text in DURING:  # each message held for the stalled service: recorded and passed, or dropped and said
        assert text in reached or "not forwarded, entry could not be written" in out, (text, out[-3000:])
    assert verify_session(Vault(b.vault), "ws-stall").intact
