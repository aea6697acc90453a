"""A stalled recorder is a dead recorder (issue 21, item 3), through the real `broker run`.

The recording service is stopped (SIGSTOP) while four clients call through the broker. Past the
acknowledgement deadline (`--ack-deadline`) the proxy kills and replaces it and records the calls
that waited on it itself, so every call the upstream received has its entry after a clean stop
(SIGTERM, even with the new service stalled again at that moment) and after a kill of the broker."""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import threading
import time

import httpx
import pytest

from journal.vault import Vault
from journal.verify import verify_session
from tests.support.broker_harness import BrokerProcess
from tests.support.upstreams import Upstream

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
