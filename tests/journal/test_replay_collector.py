"""The fold pauses the cyclic garbage collector (journal/replay/collector.py): reference cycles the connector
rules leave behind are still freed, a batch of entries at a time, and the collector is back on afterwards."""

from __future__ import annotations

import gc
import random
import weakref

import pytest

from bench.replay_bench import make_call as bench_entry
from journal.replay import collector, connectors
from journal.replay.fold import Folder


class _Cycle:
    def __init__(self) -> None:
        self.me = self


@pytest.mark.parametrize("views", [True, False])
def test_cycles_left_by_connector_rules_are_freed_while_the_collector_is_paused(tmp_path, monkeypatch, views):
    module = connectors.for_connector("gmail")
    real = module.touches
    alive: weakref.WeakSet = weakref.WeakSet()

    def touches(call):
        alive.add(_Cycle())  # garbage the moment it is made, freed only by the cyclic collector
        return real(call)

    monkeypatch.setattr(module, "touches", touches)
    rng = random.Random(7)
    assert gc.isenabled()
    folder = Folder("s", tmp_path, views=views)
    try:
        with collector.paused():
            for n in range(1, 5001):  # every fifth entry is a gmail one: 1,000 cycles made
                folder.feed(bench_entry(n, rng, 50), n)
            assert not gc.isenabled()
            left = len(alive)
    finally:
        folder.discard()
    assert gc.isenabled()
    assert left <= 200  # at most one batch of 1,000 entries' worth is still waiting (all 1,000 without `young`)


def test_a_pause_inside_a_pause_leaves_the_collector_as_the_outer_one_found_it():
    assert gc.isenabled()
    with collector.paused():
        with collector.paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
