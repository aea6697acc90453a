"""The steps every entry writer takes, whatever stores its lines (the file vault, PostgreSQL, memory).

Before storage, in the caller's thread: the contract check, fitting into the line limit (large
values spilled to the writer's blob sink), the canonical form with seq, prev and hash left open
(journal/chain.py `link_pieces`). Then group commit: concurrent appends that share a lane (the file
writer: one per session; PostgreSQL: one per writer, a transaction covering every session) are
committed together; the first to arrive leads the group and the others wait to be woken. At commit,
with the head read under the backend's lock: dedupe (an identical entry among the session's last ones
is returned instead), chaining, the line limit on the finished line. After: `on_durable`.

A backend (a subclass of `AppendPipeline`) does only its storage-specific part: `_acquire` /
`_release` a lane, and `_commit` a group, in which it reads the head, calls `chain_group` and writes
the lines (as Tessera's storage backends share one sequencing queue and each only write).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import orjson

from journal.bodies import LINE_LIMIT, fit_entry, fits_unspilled
from journal.canonical import CanonicalError
from journal.chain import LinkPieces, chain_entry, link, link_pieces
from journal.entry import CHAINED_KEYS, ContractError, validate_fields
from journal.errors import JournalError

if TYPE_CHECKING:
    from journal.store.interface import BlobSink

log = logging.getLogger(__name__)
_allocate_lock = threading.Lock
DEDUPE_LINES = 512
"""How far back `dedupe` looks for an identical entry (a dead recording service's last batch)."""
DEDUPE_BYTES = 64 << 20


class Pending:
    """One entry on its way: prepared in the caller's thread, chained and written by a leader."""

    __slots__ = ("fields", "pieces", "dedupe", "entry", "error", "wake", "after", "done")

    def __init__(self, fields: dict, pieces: LinkPieces | None) -> None:
        self.fields = fields
        self.pieces = pieces
        self.dedupe = False
        self.entry: dict | None = None
        self.error: BaseException | None = None
        self.wake: threading.Lock | None = None  # held while a follower waits; its leader releases it
        self.after: threading.Lock | None = None  # the next follower's lock, released once woken
        self.done: Callable[[Pending], None] | None = None  # `submit`: told once the entry is settled


class Lane:
    """One group-commit queue: the group forming, and the lock the group being committed holds."""

    def __init__(self) -> None:
        self.mutex = threading.Lock()  # guards pending, forming, failed
        self.io = threading.Lock()  # held by the group being written and made durable
        self.pending: list[Pending] = []  # the group forming
        self.forming = False  # the forming group has a leader (its first entry's thread)
        self.failed: JournalError | None = None  # set by a backend that must take nothing more here
        self.flusher: Flusher | None = None  # leads groups opened by `submit` (no caller thread waits)


Recent = list[tuple[dict, dict]]
"""(fields without seq/prev/hash, entry) of a session's last entries, newest first (for dedupe)."""


def recent_fields(lines: Iterable[bytes]) -> Recent:
    """The dedupe view of a session's last lines (given newest first); lines that are no entry are skipped."""
    out = []
    for line in lines:
        if not line:
            continue
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(entry, dict):
            out.append(({k: v for k, v in entry.items() if k not in CHAINED_KEYS}, entry))
    return out


def chain_group(batch: list[Pending], seq: int, prev: str, line_limit: int, recent: Recent | None = None,
                ) -> tuple[list[bytes], list[Pending], int, str]:
    """Chain one session's part of a group after (seq, prev): (line pieces to write, the entries chained,
    the new head seq and hash). Each entry's outcome is set on it: `entry`, or `error` for one that
    cannot be chained or is over the line limit (it fails alone); a `dedupe` entry whose twin is in
    `recent` gets the twin and writes nothing."""
    parts: list[bytes] = []
    chained: list[Pending] = []
    for p in batch:
        p.entry, p.error = None, None
        if p.dedupe and recent:
            mine = orjson.loads(orjson.dumps(p.fields))  # as it would read back from storage
            twin = next((e for f, e in recent if f == mine), None)
            if twin is not None:
                p.entry = twin
                continue
        try:
            if p.pieces is not None:
                entry, line_parts = link(p.fields, p.pieces, seq + 1, prev)
            else:
                entry, line = chain_entry(p.fields, seq + 1, prev)
                line_parts = [line]
            size = sum(map(len, line_parts))
            if size > line_limit:
                raise JournalError(f"entry line is {size} bytes, over the {line_limit} limit")
        except Exception as exc:  # noqa: BLE001 - one entry that cannot be chained fails alone
            p.error = exc if isinstance(exc, JournalError) else JournalError(f"entry refused: {exc}")
            continue
        seq, prev = entry["seq"], entry["hash"]
        p.entry = entry
        parts += line_parts
        chained.append(p)
    return parts, chained, seq, prev


class AppendPipeline:
    """`append` and `append_many` over a backend's `_acquire`, `_release` and `_commit` (see the module doc)."""

    blobs: BlobSink  # where large values are spilled to
    line_limit: int = LINE_LIMIT
    on_durable: Callable[[str, list[dict]], None] | None = None  # each committed batch once durable (autoseal)

    # -- what a backend provides ----------------------------------------------------------------

    def _lane_key(self, session: str) -> str:
        """Appends that share a key share a lane (group commit); default: one lane per session."""
        return session

    def _check_fields(self, fields: dict) -> None:
        """A backend's own refusal of an entry before any work (e.g. a session id it cannot hold)."""

    def _acquire(self, key: str) -> Lane:  # pragma: no cover - interface
        raise NotImplementedError

    def _release(self, lane: Lane) -> None:
        """The lane is no longer in use by this caller."""

    def _commit(self, lane: Lane, batch: list[Pending]) -> None:  # pragma: no cover - interface
        """Chain (`chain_group`) and store one group, setting each entry's outcome; call `_durable` after."""
        raise NotImplementedError

    # -- the pipeline ---------------------------------------------------------------------------

    def append(self, fields: dict, *, dedupe: bool = False) -> dict:
        """Chain `fields` (the eleven capture-point keys) into their session; return the durable entry.

        `dedupe`: the same call may already have been appended by another process that died before
        saying so (a recording service killed after its fsync): if one of the session's last entries
        holds exactly these fields, that entry is returned and nothing is appended."""
        mine = self._prepare(fields)
        mine.dedupe = dedupe
        lane = self._acquire(self._lane_key(fields["session"]))
        try:
            self._together(lane, [mine])
        finally:
            self._release(lane)
        if mine.error is not None:
            raise mine.error
        assert mine.entry is not None
        return mine.entry

    def append_many(self, batch: list[dict]) -> list[dict | JournalError | ContractError]:
        """Append several entries, committed together per lane; per item, the durable entry or the error
        that kept it out. For a single-threaded caller (the recording service) that has a whole batch at
        hand: threads calling `append` get the same grouping by waiting."""
        results: list[dict | JournalError | ContractError] = [None] * len(batch)  # type: ignore[list-item]
        groups: dict[str, list[tuple[int, Pending]]] = {}
        for i, fields in enumerate(batch):
            try:
                pending = self._prepare(fields)
                key = self._lane_key(fields["session"])
            except (ContractError, JournalError) as exc:
                results[i] = exc
                continue
            except Exception as exc:  # noqa: BLE001 - one entry's fields fail that entry alone
                results[i] = ContractError(f"entry refused: {type(exc).__name__}: {exc}")
                continue
            # Only a prepared entry opens its lane's group: a lane whose every entry was refused has
            # no group to join (an empty one met a forming group as a follower with no entry to wait on).
            groups.setdefault(key, []).append((i, pending))
        for key, items in groups.items():
            try:
                lane = self._acquire(key)
            except JournalError as exc:
                for i, _ in items:
                    results[i] = exc
                continue
            except Exception as exc:  # noqa: BLE001 - a session that cannot name its storage fails its entries alone
                for i, _ in items:
                    results[i] = JournalError(f"entry refused: {type(exc).__name__}: {exc}")
                continue
            try:
                self._together(lane, [p for _, p in items])
            except JournalError as exc:
                for _, p in items:
                    if p.entry is None and p.error is None:
                        p.error = exc
            finally:
                self._release(lane)
            for i, p in items:
                results[i] = p.error if p.error is not None else p.entry  # type: ignore[assignment]
        return results

    def _prepare(self, fields: dict) -> Pending:
        """Everything about an entry that does not depend on its place in the chain, done in the
        caller's thread (in parallel with the group being committed): the contract check, the line
        limit and the canonical form with seq/prev/hash left open. The leader then only links."""
        validate_fields(fields)
        self._check_fields(fields)
        try:  # the canonical form first: when orjson wrote it, its size tells that fit_entry would spill nothing
            pieces = link_pieces(fields)
        except Exception:  # noqa: BLE001 - decided below in the reference order, which raises what it raises
            pieces, known = None, False
        else:
            known = True
            if pieces is not None and 0 <= pieces.orjson_size and fits_unspilled(pieces.orjson_size, self.line_limit):
                return Pending(fields, pieces)  # fit_entry would return `fields` itself (the fields' text is shorter)
        fitted = fit_entry(fields, self.blobs, self.line_limit)
        if fitted is fields and known:
            return Pending(fields, pieces)
        try:
            return Pending(fitted, link_pieces(fitted))
        except CanonicalError as exc:
            raise ContractError(f"entry has no canonical form: {exc}") from None

    def submit(self, fields: dict, done: Callable[[Pending], None], *, dedupe: bool = False) -> None:
        """Append without waiting: `done(pending)` is called (in the lane's flusher thread) once the
        entry is durable (`pending.entry`) or refused (`pending.error`), never before its fdatasync.

        The entry is prepared here, in the caller's thread (a ContractError or JournalError is raised
        here and `done` is not called); the group is committed by the lane's flusher thread, which
        leads it exactly as a waiting caller would (`_lead`), so one producer can keep handing entries
        on while the previous group is on its way to the disk, and `done` runs once per entry right
        after its group's fsync (a caller on an event loop batches its wake-ups there)."""
        mine = self._prepare(fields)
        mine.dedupe, mine.done = dedupe, done
        lane = self._acquire(self._lane_key(fields["session"]))  # released by the flusher once settled
        try:
            with lane.mutex:
                lead = _join_group(lane, [mine])
                if lead:
                    if lane.flusher is None:
                        lane.flusher = Flusher(self, lane)
                    flusher = lane.flusher
        except BaseException:
            self._release(lane)
            raise
        if lead:
            flusher.lead()

    def _together(self, lane: Lane, mine: list[Pending]) -> None:
        """Queue `mine` and return once they are committed (or failed).

        Group commit, one leader per group: the thread whose entry opens a group leads it (or the
        lane's flusher thread, when `submit` opened it). The leader waits for the previous group's
        commit (`io`), takes the whole group, has the backend commit it, then wakes exactly its
        group's waiting followers, each on its own lock (no broadcast that wakes every waiting thread
        to find most still waiting), and settles its submitted entries. While a group commits (an
        fsync or a database round trip, the GIL released), the next one forms and its leader waits at `io`.

        A caller that finds the lane idle (no group forming, none being committed) commits `mine` at
        once as a group of its own (`_commit_alone`): the group it would have led holds only its own
        entries, so the hand-off is skipped, not the commit. Appends that arrive meanwhile find `io`
        held and form the next group as usual.
        """
        if not mine:  # nothing to wait for: joining a forming group with no entry has nothing to be woken by
            return
        with lane.mutex:
            if lane.failed:
                raise lane.failed
            alone = not lane.forming and lane.io.acquire(blocking=False)
            if not alone:
                leader = _join_group(lane, mine)
                if not leader:
                    wake = mine[-1].wake = _allocate_lock()
                    wake.acquire()
        if alone:
            self._commit_alone(lane, mine)
            return
        if not leader:
            _wait_turn(wake, mine[-1])
            return
        interrupted = self._lead(lane)
        if interrupted is not None:
            raise interrupted

    def _commit_alone(self, lane: Lane, mine: list[Pending]) -> None:
        """Commit `mine` as a group of their own, `lane.io` already held (released here): the lone
        writer's path, with no followers to wake and no submitted entries to settle."""
        try:
            self._commit(lane, mine)
        except BaseException as exc:
            for p in mine:
                if p.entry is None and p.error is None:
                    p.error = exc
            raise
        finally:
            lane.io.release()

    def _lead(self, lane: Lane) -> BaseException | None:
        """Commit the lane's forming group (whose leader we are): the one commit path of callers and
        flushers. Returns an interrupt that came while waiting for the previous group, to be raised
        once the group is settled (see `_acquire_fully`)."""
        interrupted = _acquire_fully(lane.io)  # the previous group's commit
        try:
            with lane.mutex:
                batch, lane.pending = lane.pending, []
                lane.forming = False
            try:
                self._commit(lane, batch)
            except BaseException as exc:  # never leave followers waiting
                for p in batch:
                    if p.entry is None and p.error is None:
                        p.error = exc
                raise
            finally:
                first = _link_followers(batch)
                if first is not None:
                    first.release()
                self._settle_submitted(lane, batch)
        finally:
            lane.io.release()
        return interrupted

    def _settle_submitted(self, lane: Lane, batch: list[Pending]) -> None:
        """Tell each submitted entry of a committed group its outcome, and release its hold on the lane."""
        for p in batch:
            if p.done is None:
                continue
            try:
                p.done(p)
            except Exception:  # noqa: BLE001 - the entry is settled; a callback must not stop the others
                log.exception("append callback failed")
            finally:
                self._release(lane)

    def _durable(self, session: str, chained: list[Pending]) -> None:
        """After a commit: hand the session's newly durable entries to `on_durable` (it must not fail them)."""
        if self.on_durable is None:
            return
        entries = [p.entry for p in chained if p.entry is not None]
        if not entries:
            return
        try:
            self.on_durable(session, entries)
        except Exception:  # noqa: BLE001 - the entries are durable; a hook must not fail them
            log.exception("on_durable hook failed")


def _join_group(lane: Lane, mine: list[Pending]) -> bool:
    """Add `mine` to the lane's forming group (the caller holds `lane.mutex`): True when they open it,
    so that the caller (or the lane's flusher) leads it. A lane whose writer failed refuses them."""
    if lane.failed:
        raise lane.failed
    lane.pending.extend(mine)
    opens = not lane.forming
    lane.forming = True
    return opens


def _link_followers(batch: list[Pending]) -> threading.Lock | None:
    """Chain the followers of a committed group, each to wake the next; the first one's lock."""
    first = last = None
    for p in batch:
        if p.wake is not None:
            if last is None:
                first = p.wake
            else:
                last.after = p.wake
            last = p
    return first


def _wait_turn(wake: threading.Lock, mine: Pending) -> None:
    """Wait until our group is committed, then wake the next follower of the group.

    Followers are woken one after another rather than all at once: a woken thread first needs the
    GIL, so waking 60 threads at once makes 60 threads fight for it (and preempt the thread that
    holds it) to run one at a time anyway. Woken by its predecessor as that one starts to run, each
    is ready by the time the GIL is free.
    """
    interrupted = _acquire_fully(wake)
    if mine.after is not None:
        mine.after.release()
    if interrupted is not None:
        raise interrupted


def _acquire_fully(lock: threading.Lock) -> BaseException | None:
    """Acquire `lock` even through interrupts (KeyboardInterrupt in the main thread); return the
    interrupt, for the caller to raise once its part is done: a leader that left or a follower that
    did not pass the turn on would leave the other threads of its lane waiting for ever, and a
    follower returning early would report an entry that may not be durable yet."""
    interrupted: BaseException | None = None
    while True:
        try:
            lock.acquire()
            return interrupted
        except BaseException as exc:  # noqa: BLE001 - handed back to be raised
            interrupted = exc


FLUSHER_IDLE_SECONDS = 2.0
"""A lane's flusher thread ends after this long with no group to lead (the next `submit` starts one)."""


class Flusher:
    """The thread that leads a lane's groups opened by `submit`: the durable writer of a producer that
    does not wait (an event loop, a recording service reading the next message). One per lane, started
    on demand, ended when idle."""

    def __init__(self, pipeline: AppendPipeline, lane: Lane) -> None:
        self.pipeline, self.lane = pipeline, lane
        self.cond = threading.Condition(threading.Lock())
        self.wanted = 0  # groups to lead
        self.thread: threading.Thread | None = None

    def lead(self) -> None:
        """A group was opened without a leader: lead it (now, or after the one being led)."""
        with self.cond:
            self.wanted += 1
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="journal-flusher", daemon=True)
                self.thread.start()
            else:
                self.cond.notify()

    def _run(self) -> None:
        while True:
            with self.cond:
                if not self.wanted:
                    self.cond.wait(FLUSHER_IDLE_SECONDS)
                if not self.wanted:
                    self.thread = None
                    return
                self.wanted -= 1
            try:
                self.pipeline._lead(self.lane)
            except BaseException:  # noqa: BLE001 - the group's entries carry the error; keep leading
                log.exception("journal flusher: commit failed")
