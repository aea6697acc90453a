"""A write never reaches the platform without a durable trace (issue 21, item 4), through `broker run`.

Four clients send Gmail messages (writes) through the broker while the whole broker process group
(proxy and recording service) is killed with SIGKILL, again and again; each time the broker is started
again on the same vault. After the last start every write the upstream received has its entry: the
ones whose response never came back as an entry saying their outcome is unknown.

CI runs a few kills; the figure of the issue (50 kills) is:

    BROKER_TEST_WAL_KILLS=50 .venv/bin/python -m pytest -q -s tests/e2e/test_write_ahead_kills.py
"""

from __future__ import annotations

import base64
import contextlib
import os
import random
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

SEND = "https://gmail.googleapis.com/gmail/v1/users/me/messages/send"
KILLS = int(os.environ.get("BROKER_TEST_WAL_KILLS", "5"))


@pytest.fixture(scope="module")
def upstream():
    with Upstream() as up:
        yield up


def _writer(b: BrokerProcess, k: int, round_: int, stop: threading.Event) -> None:
    n = 0
    raw = base64.urlsafe_b64encode(b"From: a@example.com\r\nTo: b@example.com\r\n\r\nhello").decode()
    ctx = ssl.create_default_context(cafile=b.ca)
    with httpx.Client(proxy=b.proxy_url("s-wal", "agent-wal"), verify=ctx, timeout=30) as c:
        while not stop.is_set():
            n += 1
            try:
                c.post(SEND, params={"call": f"{round_}-{k}-{n}"}, json={"raw": raw})
            except httpx.HTTPError:
                if not b.alive():
                    return  # the broker was killed
                # (a slow first call on a busy machine: go on)


def _killed_group(b: BrokerProcess) -> None:
    assert b.proc is not None
    pgid = b.proc.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    b.proc.wait(10)  # reaped: a zombie would still count as the group's
    for _ in range(400):  # until no process of the group is left (the service is not our child)
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.025)
    raise AssertionError("the broker's process group did not go away")


@pytest.mark.e2e
def test_no_write_reaches_the_upstream_without_an_entry_over_kills_of_the_whole_broker(upstream, tmp_path):
    upstream.clear_requests()
    vault = tmp_path / "vault"
    rng = random.Random(21)
    for round_ in range(KILLS):
        b = BrokerProcess(tmp_path, upstream, vault=vault)
        b.new_session = True
        b.start()
        stop = threading.Event()
        clients = [threading.Thread(target=_writer, args=(b, k, round_, stop), daemon=True) for k in range(4)]
        try:
            before = len(upstream.requests)
            for t in clients:
                t.start()
            deadline = time.monotonic() + 60
            while len(upstream.requests) < before + 8:  # the writes are flowing (the first ones set up TLS)
                assert time.monotonic() < deadline, "no write reached the upstream:\n" + b.output.decode()[-2000:]
                time.sleep(0.02)
            time.sleep(rng.uniform(0, 0.5))
            _killed_group(b)
        finally:
            stop.set()
            for t in clients:
                t.join(30)
            b.stop(signal.SIGKILL)
        print(f"round {round_ + 1}: {len(upstream.requests)} writes upstream so far", flush=True)
    last = BrokerProcess(tmp_path, upstream, vault=vault).start()  # its start recovers the last round
    last.stop(signal.SIGTERM)
    reached = {r["path"].partition("call=")[2] for r in upstream.requests
               if r["method"] == "POST" and "call=" in r["path"]}
    entries = last.entries("s-wal")
    recorded = {e["request"]["url"].partition("call=")[2] for e in entries}
    unknown = [e for e in entries if e["response"]["answered_by"] == "none"]
    missing = reached - recorded
    print(f"\nwrite-ahead: {KILLS} kills of the whole broker, {len(reached)} writes reached the upstream, "
          f"{len(missing)} without an entry; {len(unknown)} entries say the outcome is unknown")
    assert len(reached) >= KILLS
    assert missing == set(), f"{len(missing)} of {len(reached)} writes reached the upstream with no entry"
    assert verify_session(Vault(vault), "s-wal").intact
    assert len(entries) == len({e["request"]["url"] for e in entries})  # none recorded twice
    assert all("outcome is unknown" in e["response"]["error"] for e in unknown)


@pytest.mark.e2e
def test_a_streamed_write_is_recorded_ahead_with_its_body_pending_and_its_entry_carries_the_body(upstream, tmp_path):
    """A body larger than the spill threshold streams upstream as it arrives: its record is made before the
    headers go, without the body; the entry names the record and holds the body the platform received."""
    import hashlib

    body = bytes(range(256)) * (12 << 10)  # 3 MiB
    with BrokerProcess(tmp_path, upstream) as b:
        ctx = ssl.create_default_context(cafile=b.ca)
        with httpx.Client(proxy=b.proxy_url("s-up", "agent-up"), verify=ctx, timeout=60) as c:
            r = c.post("https://www.googleapis.com/upload/drive/v3/files?uploadType=media", content=body,
                       headers={"Content-Type": "application/octet-stream"})
        assert r.status_code == 200, r.text
        (entry,) = b.entries("s-up", 1)
    assert entry["effect"] == "write" and len(entry["request"]["write_ahead"]) == 32
    assert entry["request"]["body"]["sha256"] == hashlib.sha256(body).hexdigest()
    assert not list((b.vault / "write-ahead").glob("*.wal"))  # a clean stop leaves no record behind
