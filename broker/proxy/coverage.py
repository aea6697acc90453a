"""Declared coverage (docs/checkpoints.md): the calls the proxy leaves unrecorded, counted.

While checkpoints are written, every call that passes unrecorded (no connector knows it), is a token
exchange (never recorded) or is refused is counted per (session, host, what) and handed to the
sealer about once a second, so a vault index says what it does not hold.
"""

from __future__ import annotations

import time
from collections.abc import Callable

Gaps = list[tuple[str, str, str, int]]


class CoverageCount:
    """Counts of calls left unrecorded, handed to `deliver` (the recording service, or the recorder in
    this process) about once a second; `deliver` says False when it could not take them (kept)."""

    def __init__(self, deliver: Callable[[Gaps], bool]) -> None:
        self.deliver = deliver
        self.on = False  # counted only while checkpoints are written
        self._gaps: dict[tuple[str, str, str], int] = {}
        self._sent = 0.0

    def gap(self, session: str, host: str, what: str) -> None:
        """A call to `host` left unrecorded (`what`: passed, token, refused)."""
        if not self.on:
            return
        key = (session, host, what)
        self._gaps[key] = self._gaps.get(key, 0) + 1
        if time.monotonic() - self._sent >= 1.0:
            self.flush()

    def flush(self) -> None:
        if not self._gaps:
            return
        if not self.deliver([(s, h, w, n) for (s, h, w), n in self._gaps.items()]):
            return  # not taken (the service is not connected): kept for the next flush
        self._gaps.clear()
        self._sent = time.monotonic()
