"""Replay's second core: the verifier in a forked child beside the fold (fold.py), and part of the
view writing in one beside the parent's part (views.py). The fork itself is journal/forked_call.py.

The views of a replay are many independent files: the resource notes (with views.json's resource
lines) on one side; the timeline pages, the index and the revert plan on the other. Both halves
only read the replay's spill store, so after the fold the parent forks once: the child writes its
half through a connection of its own to the same database (the parent commits and drops its
exclusive lock first), the parent writes the other half, then waits. The files are the same bytes
whichever process writes them; `views.json`, which says an output is complete, is still written
last, by the parent, once the child is done.

A fork is only used where it is safe and available: a POSIX system and a process with no other
thread (a fork copies one thread; the inspector replays from a thread pool and writes no views).
When the child cannot run or fails, the parent writes the child's half itself: the outputs never
depend on whether a fork happened.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from journal.forked_call import ForkedCall
from journal.forked_call import can_fork as _fork_is_safe

from .store import Store

ENABLED = True
"""Tests switch this off to compare the forked and the serial output byte for byte."""


def can_fork() -> bool:
    return ENABLED and _fork_is_safe()


def start(work: Callable[[], object], store: Store | None = None) -> ForkedCall | None:
    """Fork a child that runs `work` and sends back what it returns (with `store`, reading it through a
    connection of its own); None when no fork is possible here (the caller runs `work` itself). The
    caller takes the value with `result()` (None when the child failed: `failure` says why) or stops
    the child with `close()`."""
    if not can_fork():
        return None
    if store is not None:
        store.share()

    def in_child() -> object:
        if store is not None:
            # The inherited connection belongs to the parent: set aside, never used or closed here.
            store.inherited = store.db
            store.db = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
        return work()

    try:
        return ForkedCall(in_child)
    except OSError:
        return None


__all__ = ["ENABLED", "can_fork", "start"]
