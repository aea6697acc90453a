"""The writer's group commit under threads: nobody returns before its line is synced, failures reach every
member of a group, an interrupt does not break the wake-up chain, and entries left to chain_entry."""

from __future__ import annotations

import errno
import os
import signal
import threading
import time

import orjson
import pytest

from journal import chain
from journal.vault import Vault
from journal.verify import verify_session
from journal.writer import JournalStopped, JournalWriter
from tests.support.journal_factories import fields


def _last_seq(fd: int) -> int:
    size = os.fstat(fd).st_size
    data = os.pread(fd, min(size, 1 << 16), max(0, size - (1 << 16)))
    return orjson.loads(data.rstrip(b"\n").rsplit(b"\n", 1)[-1])["seq"] if size else 0


def test_no_append_returns_before_its_line_is_synced(tmp_path, monkeypatch):
    synced = [0]  # highest seq covered by a finished fdatasync
    real = os.fdatasync

    def recording(fd: int) -> None:
        written = _last_seq(fd)  # the leader has written its group and holds the flock
        real(fd)
        synced[0] = max(synced[0], written)

    monkeypatch.setattr(os, "fdatasync", recording)
    w = JournalWriter(tmp_path)
    early: list[tuple[int, int]] = []
    barrier = threading.Barrier(24)

    def worker(t: int) -> None:
        barrier.wait()
        for i in range(15):
            e = w.append(fields(n=t * 100 + i))
            if e["seq"] > synced[0]:
                early.append((e["seq"], synced[0]))

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(24)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    w.close()
    assert early == []
    r = verify_session(Vault(tmp_path), "s1")
    assert r.intact and r.entries == 24 * 15


def test_a_failed_fsync_fails_every_entry_of_its_group_and_nobody_hangs(tmp_path, monkeypatch):
    w = JournalWriter(tmp_path)
    w.append(fields(n=0))
    entered, release = threading.Event(), threading.Event()

    def failing(fd: int) -> None:
        entered.set()
        release.wait(30)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    results: dict[int, object] = {}

    def worker(t: int) -> None:
        try:
            results[t] = w.append(fields(n=t + 1))
        except Exception as exc:  # noqa: BLE001 - inspected below
            results[t] = exc

    first = threading.Thread(target=worker, args=(0,))
    first.start()
    assert entered.wait(30)  # the first group is syncing; the others queue behind it
    rest = [threading.Thread(target=worker, args=(t,)) for t in range(1, 12)]
    for t in rest:
        t.start()
    _wait_until(lambda: len(w._logs["s1"].pending) == 11)
    release.set()
    for t in [first, *rest]:
        t.join(30)
        assert not t.is_alive()
    assert all(isinstance(r, JournalStopped) for r in results.values()), results
    with pytest.raises(JournalStopped):
        w.append(fields(n=99))
    w.close()


def test_an_interrupted_follower_returns_only_once_durable_and_wakes_the_rest(tmp_path, monkeypatch):
    """KeyboardInterrupt reaches the main thread while it waits for its group: it is raised once the
    group is synced (the entry is in the file), and the followers after it are still woken."""
    w = JournalWriter(tmp_path)
    w.append(fields(n=0))
    real = os.fdatasync
    entered, release = threading.Event(), threading.Event()
    syncs = []

    def gated(fd: int) -> None:
        if not syncs:
            entered.set()
            release.wait(30)
        syncs.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", gated)
    results: dict[str, object] = {}

    def worker(name: str, n: int) -> None:
        results[name] = w.append(fields(n=n))

    leader = threading.Thread(target=worker, args=("leader", 1))
    leader.start()
    assert entered.wait(30)
    slog = w._logs["s1"]
    before = threading.Thread(target=worker, args=("before", 2))  # opens the next group: its leader
    before.start()
    _wait_until(lambda: len(slog.pending) == 1)
    after = []

    def interrupt_then_queue() -> None:
        _wait_until(lambda: len(slog.pending) == 2)  # the main thread is waiting as a follower
        for k in range(3):
            t = threading.Thread(target=worker, args=(f"after{k}", 10 + k))
            t.start()
            after.append(t)
        _wait_until(lambda: len(slog.pending) == 5)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        handled.wait(30)  # the main thread took the interrupt while its group still waits
        release.set()

    handled = threading.Event()

    def on_sigint(signum, frame):
        handled.set()
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, on_sigint)
    try:
        helper = threading.Thread(target=interrupt_then_queue)
        helper.start()
        with pytest.raises(KeyboardInterrupt):
            w.append(fields(n=3))
    finally:
        signal.signal(signal.SIGINT, old)
    assert handled.is_set()
    assert len(syncs) >= 2  # the main thread's group was synced before the interrupt surfaced
    helper.join(30)
    for t in [leader, before, *after]:
        t.join(30)
        assert not t.is_alive()
    assert {k: v["seq"] for k, v in results.items()}.keys() == {"leader", "before", "after0", "after1", "after2"}
    w.close()
    r = verify_session(Vault(tmp_path), "s1")
    assert r.intact and r.entries == 7


def test_fields_holding_the_link_placeholder_are_chained_the_slow_way(tmp_path):
    f = fields(n=1)
    f["response"]["body"] = {"odd": chain._SLOT}
    with JournalWriter(tmp_path) as w:
        e1 = w.append(f)
        e2 = w.append(fields(n=2))
    assert e2["prev"] == e1["hash"] and e1["response"]["body"] == {"odd": chain._SLOT}
    r = verify_session(Vault(tmp_path), "s1")
    assert r.intact and r.entries == 2


def _wait_until(cond, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.005)


def _threaded_process_appender(root: str, tag: int) -> None:
    w = JournalWriter(root)

    def worker(t: int) -> None:
        for i in range(20):
            w.append(fields(n=tag * 10000 + t * 100 + i))

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    w.close()


def test_processes_with_many_threads_each_keep_one_chain(tmp_path):
    """Groups of different processes interleave under the flock; each continues the other's chain."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_threaded_process_appender, args=(str(tmp_path), k)) for k in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    r = verify_session(Vault(tmp_path), "s1")
    assert r.intact, r
    assert r.entries == 3 * 6 * 20


def test_no_submitted_entry_is_settled_before_its_line_is_synced(tmp_path, monkeypatch):
    """`submit` (the producer does not wait): each callback comes after an fdatasync that covered the
    entry, while blocking appends from other threads share the same groups; the chain stays whole."""
    synced = [0]
    real = os.fdatasync

    def recording(fd: int) -> None:
        written = _last_seq(fd)
        real(fd)
        synced[0] = max(synced[0], written)

    monkeypatch.setattr(os, "fdatasync", recording)
    w = JournalWriter(tmp_path)
    early: list[tuple[int, int]] = []
    settled: list[dict] = []
    done = threading.Event()

    def callback(p) -> None:
        assert p.error is None, p.error
        if p.entry["seq"] > synced[0]:
            early.append((p.entry["seq"], synced[0]))
        settled.append(p.entry)
        if len(settled) == 200:
            done.set()

    def blocking(t: int) -> None:
        for i in range(10):
            e = w.append(fields(n=10_000 + t * 100 + i))
            if e["seq"] > synced[0]:
                early.append((e["seq"], synced[0]))

    ts = [threading.Thread(target=blocking, args=(t,)) for t in range(4)]
    for t in ts:
        t.start()
    for n in range(200):
        w.submit(fields(n=n), callback)
    for t in ts:
        t.join(30)
    assert done.wait(30)
    w.close()
    assert early == []
    assert sorted(e["seq"] for e in settled) == sorted({e["seq"] for e in settled})  # each its own line
    r = verify_session(Vault(tmp_path), "s1")
    assert r.intact and r.entries == 240


def test_a_failed_fsync_settles_every_submitted_entry_with_the_error(tmp_path, monkeypatch):
    w = JournalWriter(tmp_path)
    w.append(fields(n=0))

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    outcomes: list[object] = []
    done = threading.Event()

    def callback(p) -> None:
        outcomes.append(p.entry if p.error is None else p.error)
        if len(outcomes) == 5:
            done.set()

    for n in range(5):
        try:
            w.submit(fields(n=n + 1), callback)
        except JournalStopped as exc:  # the session stopped before this one was queued
            outcomes.append(exc)
            if len(outcomes) == 5:
                done.set()
    assert done.wait(30)
    assert all(isinstance(o, JournalStopped) for o in outcomes), outcomes
    with pytest.raises(JournalStopped):
        w.submit(fields(n=99), callback)
    w.close()


def test_a_failing_callback_does_not_keep_the_others_of_its_group_from_being_settled(tmp_path):
    w = JournalWriter(tmp_path)
    seen: list[int] = []
    done = threading.Event()

    def callback(p) -> None:
        seen.append(p.entry["seq"])
        if len(seen) == 20:
            done.set()
        raise RuntimeError("a broken callback")

    for n in range(20):
        w.submit(fields(n=n), callback)
    assert done.wait(30)
    assert w.append(fields(n=50))["seq"] == 21  # the lane is free again
    w.close()
