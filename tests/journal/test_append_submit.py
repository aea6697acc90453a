"""`AppendPipeline.submit` on a backend other than the file (the in-memory store): the same pipeline,
settled by the lane's flusher, the same chain as `append`, `on_durable` called, refusals raised at once."""

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
