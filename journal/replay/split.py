"""The fold on two cores: a forked partner folds the entries of some connectors while this process folds
the others; when both are done this process absorbs the partner's rows into its own store.

Why: replay with views is per-entry Python (the call, the connector's rules, the state merge) and the
fold was serial: the verifier beside it (fold.py `_fold_beside_verifier`) takes a tenth of the fold's
time, so one of the two cores sat idle for most of a replay. The entries cannot be cut by seq (a
resource's state, and so each write's before-state and inverse, depends on every earlier entry that
touched it), but they can be cut by connector: a resource's key starts with the name of the connector
whose entries touch it (each connector module's keys, and generic.py's `key_for`), and a connector's
parse memo is its own, so the entries of one connector fold the same whatever the other connectors'
entries do. Each process reads every line and gives each connector the same side (`Partition`, decided
on the lines in order); each folds its side's entries into a store of its own, with ids from separate
ranges. Absorbing (store.py `absorb`) appends the partner's rows (entries, touches, writes, lifecycle
marks, steps and resources are keyed by seq or by their own ids), numbers the steps from 1 in seq order
again (the serial fold's numbering), and adds the partner's counts. A resource both shares hold would
break the premise: the store refuses it (its key is unique) and the caller folds serially, as it does
when the partner fails or read a different file. The outputs are the same bytes either way
(tests/e2e/test_replay_outputs.py, split and serial).

Only the fold for views is split (the plan alone, `views=False`, keeps no resource rows to check the
premise against).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import orjson

from journal.chain import GENESIS, next_head
from journal.forked_call import ForkedCall
from journal.reader import iter_lines

from . import collector, forked

PARTNER_IDS = 1 << 40
"""The partner's resource and step ids start above this (this process's stay below it)."""


class Partition:
    """Which process folds an entry: its connector's side, given when the connector first appears to the
    side that has folded fewer entries so far (a tie to the partner: this process also merges). Both
    processes see the same lines in the same order, so they decide the same."""

    def __init__(self) -> None:
        self._here: dict[str, bool] = {}
        self._load = {True: 0, False: 0}

    def here(self, entry: dict) -> bool:
        connector = entry.get("connector")
        name = connector if isinstance(connector, str) else "?"
        side = self._here.get(name)
        if side is None:
            side = self._here[name] = self._load[True] < self._load[False]
        self._load[side] += 1
        return side


class ShareFolder(Protocol):
    """What the partner folds with (fold.py's Folder, made with ids above PARTNER_IDS)."""

    @property
    def counts(self) -> object: ...

    def feed(self, entry: dict, pos: int, trusted: bool = True) -> None: ...

    def hand_over(self) -> Path: ...


@dataclass
class Share:
    """What the partner folded: its counts (fold.py's Counts), the lines and bytes it read, and its store's
    database."""

    counts: object
    lines: int
    size: int
    head: str  # the chain's head as read by the partner (chain.next_head): the verifier's, or no share is taken
    db: Path


def start(path: Path, make_folder: Callable[[], ShareFolder]) -> ForkedCall | None:
    """Fork the partner (None when no fork is possible here): it folds its share of the session file at
    `path` with the folder `make_folder` gives it (whose store is inside this process's store folder,
    removed with it)."""
    return forked.start(lambda: _fold_share(path, make_folder()))


def _fold_share(path: Path, folder: ShareFolder) -> Share:
    part = Partition()
    lines = size = 0
    head = GENESIS
    with collector.paused():
        for line in iter_lines(path):
            size += len(line.data)
            lines = line.index + 1
            entry = orjson.loads(line.data)
            linked = next_head(entry, line.data, head)
            if linked is None:  # not the chain the verifier checks: the parent folds serially
                raise ValueError(f"line {lines} does not link")
            head = linked
            if not part.here(entry):
                folder.feed(entry, lines, True)
        return Share(folder.counts, lines, size, head, folder.hand_over())


__all__ = ["PARTNER_IDS", "Partition", "Share", "ShareFolder", "start"]
