"""The shim's durable appends: one worker thread per journal, entries queued meanwhile go out together.

`asyncio.to_thread` costs two thread hand-offs through the default executor per entry (about 80 µs on
the 2-core development machine, of a 0.5 ms budget); a thread of our own that is already waiting on
a condition costs about half of that, and it groups what queues while it writes: one
`append_many` call, so one write and one fdatasync per session for all of them, where concurrent
`to_thread` appends relied on the writer's leader/follower grouping. The event loop never waits on
the disk: the answer whose entry this is waits on its future; other traffic keeps flowing.

When nothing else is being written or awaited (the journal has no other call open) and appends
have been quick (`INLINE_APPEND_SECONDS`), the entry is appended on the event loop itself
(`write_now`): no hand-off at all, for the common case of one call at a time. The loop is then held
for that one short append; a slow disk, or a second call in flight (whose answer may come meanwhile
and should share the fdatasync), sends entries to the worker thread again.

Each job brings the fields (worked out on the loop for small answers) or a function that builds
them (large answers, in this thread), and `write_one`, the exact single-entry path with its
fallbacks (`CallJournal._write`). A job that is alone, or whose entry `append_many` refused as a
`ContractError` (which `writer.append` would have raised as a ValueError, TypeError or RecursionError
that `_write` turns into a text entry), goes through `write_one`: the same result as before, entry
for entry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from journal.entry import ContractError

log = logging.getLogger("broker.mcp")

IDLE_SECONDS = 2.0
"""The worker thread ends after this long without work (a new entry starts it again)."""
INLINE_APPEND_SECONDS = 0.002
"""Appends are made on the event loop only while they take less than this (a moving average)."""


@dataclass
class Job:
    """One entry to write: `fields` (or None: `build` makes them in the worker), and `write_one`."""

    fields: dict | None
    write_one: Callable[[dict | None], dict | None]  # the single-entry path, given the fields if made
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    result: object = None
    error: BaseException | None = None
    done: bool = field(default=False)


class EntryWriter:
    """Durable appends off the event loop for one `journal.writer` (file vault or store)."""

    def __init__(self, writer) -> None:
        self.writer = writer
        self._cond = threading.Condition()
        self._jobs: list[Job] = []
        self._thread: threading.Thread | None = None
        self._in_flight = 0  # jobs submitted and not yet written (read on the loop; changed under _cond)
        self.append_seconds = 0.0  # moving average of an append's time, both paths
        self.batches = 0  # how many append_many calls grouped several entries (tests, --profile)
        self.inline = 0  # entries appended on the event loop

    def can_write_now(self) -> bool:
        """Whether an entry may be appended on the loop: the worker has nothing, appends are quick."""
        return self._in_flight == 0 and self.append_seconds < INLINE_APPEND_SECONDS

    def write_now(self, fields: dict, write_one: Callable[[dict | None], dict | None]) -> dict | None:
        """Append on the calling thread (the event loop), timed like the worker's appends."""
        t0 = time.perf_counter()
        try:
            return write_one(fields)
        finally:
            self._timed(time.perf_counter() - t0)
            self.inline += 1

    def _timed(self, seconds: float) -> None:
        self.append_seconds = 0.8 * self.append_seconds + 0.2 * seconds

    def submit(self, fields: dict | None, write_one: Callable[[dict | None], dict | None]) -> asyncio.Future:
        """Queue one entry; the future gives the durable entry (or None), or raises what writing raised."""
        loop = asyncio.get_running_loop()
        job = Job(fields, write_one, loop.create_future(), loop)
        with self._cond:
            self._jobs.append(job)
            self._in_flight += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="broker-mcp-journal", daemon=True)
                self._thread.start()
            else:
                self._cond.notify()
        return job.future

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._jobs:
                    self._cond.wait(IDLE_SECONDS)
                if not self._jobs:
                    self._thread = None
                    return
                jobs, self._jobs = self._jobs, []
            t0 = time.perf_counter()
            try:
                self._write(jobs)
            except BaseException as exc:  # noqa: BLE001 - every waiting answer must learn what happened
                for job in jobs:
                    if not job.done:
                        job.error, job.done = exc, True
            self._timed(time.perf_counter() - t0)
            with self._cond:
                self._in_flight -= len(jobs)
            self._resolve(jobs)

    def _write(self, jobs: list[Job]) -> None:
        if len(jobs) > 1:
            batch = [j for j in jobs if j.fields is not None]
            if len(batch) > 1:
                self.batches += 1
                for job, got in zip(batch, self.writer.append_many([j.fields for j in batch]), strict=True):
                    if isinstance(got, ContractError):
                        continue  # `write_one` decides, with its fallback to a text entry
                    if isinstance(got, BaseException):
                        job.error = got
                    else:
                        job.result = got
                    job.done = True
        for job in jobs:
            if job.done:
                continue
            try:
                job.result = job.write_one(job.fields)
            except BaseException as exc:  # noqa: BLE001 - raised to the awaiting answer
                job.error = exc
            job.done = True

    @staticmethod
    def _resolve(jobs: list[Job]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[Job]] = {}
        for job in jobs:
            by_loop.setdefault(job.loop, []).append(job)
        for loop, mine in by_loop.items():
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(_settle, mine)


def _settle(jobs: list[Job]) -> None:
    for job in jobs:
        if job.future.done():  # cancelled: the entry is written all the same
            continue
        if job.error is not None:
            job.future.set_exception(job.error)
        else:
            job.future.set_result(job.result)
