"""Replay and Python's cyclic garbage collector: paused while replay builds many objects and no cycles.

The views (views.py) are written with the collector off: its repeated scans of a large heap cost about a
fifth of the time. The fold on two cores (fold.py `_fold_beside_verifier`, split.py) keeps up to
`Folder.CACHE` resources as objects; with the collector on, its scans of them took 0.9 s of an 8.5 s fold
at 10^5 entries (measured with `gc.callbacks`), a third of it in full collections that can free nothing
the fold made. There the collector is paused too, and `young` frees what the connector rules might leave
in cycles once per batch of entries, looking only at the objects made since the last batch, never at the
whole heap.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """Pause the automatic collector; restore it afterwards (a nested or concurrent pause leaves it as it was
    found by the outermost one)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def young() -> None:
    """While paused, collect the youngest generation: cycles a batch of entries left behind are freed without a
    scan of every object the fold keeps (the survivors, mostly resources, move to an older generation, which
    the collector scans again once it is back on)."""
    if not gc.isenabled():
        gc.collect(0)


__all__ = ["paused", "young"]
