"""The shim's durable appends: never on the event loop; the loop is woken once per durable group.

Entries whose fields were made on the loop (small answers) go to the journal writer's `submit`
(journal/append_pipeline.py): the entry's contract check and canonical form are done on the loop, and
the lane's flusher thread writes every entry queued meanwhile with one write and one fdatasync, then
hands the outcomes back; the loop is woken once for all the answers that group settles (`_settle`),
not once per entry. The event loop never waits on the disk (an fsync there held every other call's
traffic for its duration): the answer whose entry this is waits on its future; other traffic flows.

Everything else goes to a worker thread of our own (`submit` with fields None, or a writer without
`submit`): the fields are built there (large answers) and `write_one`, the exact single-entry path
with its fallbacks (`CallJournal._write`), appends them; jobs queued while it writes go out together
in one `append_many`. An entry that `submit` refuses before queuing it (a `ContractError`, which
`writer.append` would raise as a ValueError, TypeError or RecursionError that `_write` turns into a
text entry) goes that way too: the same result as before, entry for entry.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from journal.entry import ContractError

log = logging.getLogger("broker.mcp")

IDLE_SECONDS = 2.0
"""The worker thread ends after this long without work (a new entry starts it again)."""


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
        self.batches = 0  # how many append_many calls grouped several entries (tests, --profile)
        self.submitted = 0  # entries handed to the writer's flusher (`writer.submit`)
        self._ready: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future, object, BaseException | None]]] = {}
        self._ready_lock = threading.Lock()

    def submit(self, fields: dict | None, write_one: Callable[[dict | None], dict | None]) -> asyncio.Future:
        """Queue one entry; the future gives the durable entry (or None), or raises what writing raised."""
        loop = asyncio.get_running_loop()
        direct = getattr(self.writer, "submit", None) if fields is not None else None
        if direct is not None:
            future = loop.create_future()
            try:
                direct(fields, functools.partial(self._durable, loop, future))
            except Exception:  # noqa: BLE001 - refused before queuing: the single path decides (text fallback)
                pass
            else:
                self.submitted += 1
                return future
        job = Job(fields, write_one, loop.create_future(), loop)
        with self._cond:
            self._jobs.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="broker-mcp-journal", daemon=True)
                self._thread.start()
            else:
                self._cond.notify()
        return job.future

    def _durable(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future, pending) -> None:
        """In the writer's flusher thread, once the entry's group is durable (or refused): queue the
        outcome, and wake the loop only for the first outcome of a group (the rest ride along)."""
        with self._ready_lock:
            ready = self._ready.setdefault(loop, [])
            ready.append((future, pending.entry, pending.error))
            first = len(ready) == 1
        if first:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(self._drain, loop)

    def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._ready_lock:
            ready = self._ready.pop(loop, [])
        for future, entry, error in ready:
            if future.done():  # cancelled: the entry is written all the same
                continue
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(entry)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._jobs:
                    self._cond.wait(IDLE_SECONDS)
                if not self._jobs:
                    self._thread = None
                    return
                jobs, self._jobs = self._jobs, []
            try:
                self._write(jobs)
            except BaseException as exc:  # noqa: BLE001 - every waiting answer must learn what happened
                for job in jobs:
                    if not job.done:
                        job.error, job.done = exc, True
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
