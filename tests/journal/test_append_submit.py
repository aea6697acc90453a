"""`AppendPipeline.submit` on a backend other than the file (the in-memory store): the same pipeline,
settled by the lane's flusher, the same chain as `append`, `on_durable` called, refusals raised at once;
and `append_many` meeting a group that `submit` opened (both backends)."""

from __future__ import annotations

import threading

import pytest

from journal.entry import ContractError
from journal.store.memory_store import MemoryWriter
from tests.support.journal_factories import fields


def test_submitted_entries_are_chained_in_order_and_reported_durable():
    mem = MemoryWriter()
    durable: list[int] = []
    mem.on_durable = lambda session, entries: durable.extend(e["seq"] for e in entries)
    settled: list[dict] = []
    done = threading.Event()

    def callback(p) -> None:
        assert p.error is None, p.error
        settled.append(p.entry)
        if len(settled) == 50:
            done.set()

    for n in range(50):
        mem.submit(fields(n=n), callback)
    assert done.wait(30)
    assert [e["seq"] for e in settled] == list(range(1, 51))  # settled in chain order
    assert sorted(durable) == list(range(1, 51))  # on_durable saw every one before its callback
    assert mem.append(fields(n=99))["prev"] == settled[-1]["hash"]  # append continues the same chain


def test_an_entry_the_contract_refuses_is_refused_at_submit_and_never_settled():
    mem = MemoryWriter()
    called: list[object] = []
    bad = fields(n=1)
    del bad["effect"]
    with pytest.raises(ContractError):
        mem.submit(bad, called.append)
    assert called == []
    assert mem.append(fields(n=2))["seq"] == 1  # nothing was queued


@pytest.mark.parametrize("backend", ["memory", "file"])
def test_append_many_whose_entries_are_all_refused_meets_a_forming_group(tmp_path, backend):
    """The shim's worker thread appends a batch (append_many) whose one entry the contract refuses while
    the event loop's submit has opened a group its flusher has not taken yet. The refused entry must come
    back as its own error, and the other group commit as usual (an empty group once joined the forming
    one with no entry to wait on: IndexError, which failed every entry of the worker's batch)."""
    from journal.writer import JournalWriter

    writer = MemoryWriter() if backend == "memory" else JournalWriter(tmp_path / "vault")
    lane = writer._acquire("s1")
    settled = threading.Event()
    got: list[object] = []

    def callback(p) -> None:
        got.append(p.error or p.entry)
        settled.set()

    lane.io.acquire()  # a group being committed: the next one stays forming, its flusher waits here
    try:
        writer.submit(fields(n=1), callback)
        assert lane.forming and len(lane.pending) == 1
        bad = fields(n=2)
        del bad["effect"]
        (refused,) = writer.append_many([bad])
        assert isinstance(refused, ContractError)
        assert len(lane.pending) == 1  # nothing joined the forming group
    finally:
        lane.io.release()
        writer._release(lane)
    try:
        assert settled.wait(30)
        (entry,) = got
        assert isinstance(entry, dict) and entry["seq"] == 1
        assert writer.append(fields(n=3))["prev"] == entry["hash"]
    finally:
        writer.close()


@pytest.mark.parametrize("backend", ["memory", "file"])
def test_an_append_while_a_group_is_committed_waits_for_it_and_comes_after(tmp_path, backend):
    """A lone caller commits at once only on an idle lane: while another group holds the lane's commit
    (`io`), an append must neither write nor return, and its entry follows that group's in the chain."""
    from journal.writer import JournalWriter

    writer = MemoryWriter() if backend == "memory" else JournalWriter(tmp_path / "vault")
    lane = writer._acquire("s1")
    got: list[dict] = []
    lane.io.acquire()  # the group being committed
    try:
        t = threading.Thread(target=lambda: got.append(writer.append(fields(n=1))))
        t.start()
        t.join(0.5)
        assert t.is_alive() and got == []  # waiting behind the group, nothing written
        assert lane.forming and len(lane.pending) == 1  # it opened the next group, as its leader
    finally:
        lane.io.release()
        writer._release(lane)
    try:
        t.join(30)
        assert [e["seq"] for e in got] == [1]
        assert writer.append(fields(n=2))["prev"] == got[0]["hash"]  # the lane is idle again: alone
        assert not lane.forming and not lane.pending
    finally:
        writer.close()


def test_a_lone_append_on_a_failed_lane_is_refused_with_its_error(tmp_path):
    """The idle-lane path checks the lane's failure first, like a group does."""
    from journal.writer import JournalError

    mem = MemoryWriter()
    lane = mem._acquire("s1")
    lane.failed = JournalError("stopped for the test")
    mem._release(lane)
    with pytest.raises(JournalError, match="stopped for the test"):
        mem.append(fields(n=1))
