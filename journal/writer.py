"""Durable appends to `<vault>/journal/<session>.jsonl`.

- The writer assigns `seq` and `prev` and computes `hash`; `append` returns only when the line
  is written and fdatasync'ed.
- Group commit: concurrent appends to one session are written together and share one fsync.
  Each caller does its entry's own work (contract check, canonical form) in its own thread; the
  first to arrive in a group leads it: once the previous group is synced it takes the group, links
  the entries (seq, prev, SHA-256), writes them with one write, syncs, and wakes the group's
  followers one after another. Appends that arrive meanwhile form the next group.
- Several processes may append to the same session: every batch is written under an exclusive
  `flock` on the file, and if the file grew since this writer last wrote, it re-reads the last
  line and continues the chain from there.
- A torn last line (bytes after the last newline, from a crash mid-write) is moved into
  `<session>.jsonl.torn-<ns>` beside the file (fsynced, never deleted), the file is truncated to
  the last complete line, and the recovery is reported (log warning and `recoveries`).
- A failed write (a full disk) is cut off again and fails only the entries of that batch; the
  next batch tries again, so recording resumes by itself once space is free. A failed fsync stops
  the writer for that session (JournalStopped): after a failed fsync the kernel may have dropped
  the data, so retrying could hide a loss.
- At most `max_open` session files stay open (least recently used are closed when idle), so a
  long-running broker that sees many sessions does not run out of file descriptors.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from journal.blobstore import BlobStore
from journal.bodies import LINE_LIMIT, fit_entry
from journal.canonical import CanonicalError
from journal.chain import GENESIS, LinkPieces, chain_entry, link, link_pieces
from journal.entry import CHAINED_KEYS, ContractError, validate_fields
from journal.reader import SessionTail
from journal.vault import Vault, fsync_dir

log = logging.getLogger(__name__)
_allocate_lock = threading.Lock
_TAIL_BLOCK = 1 << 16
DEDUPE_LINES = 512
DEDUPE_BYTES = 64 << 20


class JournalError(Exception):
    """The journal could not take an entry; the message says why."""


class JournalStopped(JournalError):
    """A session's file had a write or fsync failure; nothing more is appended to it."""


class JournalCorrupt(JournalError):
    """The session file's last complete line is not an entry: appending would hide the damage."""


@dataclass
class Recovery:
    session: str
    path: str
    quarantine: str
    torn_bytes: int


class _Pending:
    """One entry on its way: prepared in the caller's thread, chained and written by a leader."""

    __slots__ = ("fields", "pieces", "dedupe", "entry", "error", "wake", "after")

    def __init__(self, fields: dict, pieces: LinkPieces | None) -> None:
        self.fields = fields
        self.pieces = pieces
        self.dedupe = False
        self.entry: dict | None = None
        self.error: BaseException | None = None
        self.wake: threading.Lock | None = None  # held while a follower waits; its leader releases it
        self.after: threading.Lock | None = None  # the next follower's lock, released once woken


@dataclass
class _SessionLog:
    session: str
    path: Path
    fd: int
    mutex: threading.Lock = field(default_factory=threading.Lock)  # guards pending, forming, failed
    io: threading.Lock = field(default_factory=threading.Lock)  # held by the group being written and synced
    pending: list[_Pending] = field(default_factory=list)  # the group forming
    forming: bool = False  # the forming group has a leader (its first entry's thread)
    seq: int = -1  # -1: tail not read yet
    prev: str = GENESIS
    end: int = -1
    failed: JournalError | None = None
    users: int = 0  # threads between _acquire and _release; only idle files are closed


class JournalWriter:
    """Appends entries to a vault's session files. Thread-safe; one per process is enough."""

    def __init__(
        self, vault: Vault | str | os.PathLike, *, line_limit: int = LINE_LIMIT, durable: bool = True,
        max_open: int = 256, on_durable: Callable[[str, list[dict]], None] | None = None,
    ) -> None:
        self.vault = vault if isinstance(vault, Vault) else Vault.create(vault)
        self.on_durable = on_durable  # called with each committed batch once it is on disk (autoseal)
        self.blobs = BlobStore(self.vault.root)
        self.line_limit = line_limit
        self.durable = durable
        self.recoveries: list[Recovery] = []
        self.max_open = max_open
        self._logs: OrderedDict[str, _SessionLog] = OrderedDict()  # least recently used first
        self._stopped: dict[str, JournalError] = {}  # failed sessions whose files were closed
        self._lock = threading.Lock()
        self._closed = False
        self._tail = SessionTail(self.vault)

    # -- public -----------------------------------------------------------------------------

    def append(self, fields: dict, *, dedupe: bool = False) -> dict:
        """Chain `fields` (the eleven capture-point keys) into their session; return the durable entry.

        `dedupe`: the same call may already have been appended by another process that died before
        saying so (a recording service killed after its fsync): if one of the session's last entries
        holds exactly these fields, that entry is returned and nothing is appended."""
        mine = self._pending(fields)
        mine.dedupe = dedupe
        slog = self._acquire(fields["session"])
        try:
            self._append(slog, [mine])
        finally:
            self._release(slog)
        return self._result(mine)

    def append_many(self, batch: list[dict]) -> list[dict | JournalError | ContractError]:
        """Append several entries, one write and one fsync per session; per item, the durable entry
        or the error that kept it out. For a single-threaded caller (the recording service) that
        has a whole batch at hand: threads calling `append` get the same grouping by waiting."""
        results: list[dict | JournalError | ContractError] = [None] * len(batch)  # type: ignore[list-item]
        groups: dict[str, list[tuple[int, _Pending]]] = {}
        for i, fields in enumerate(batch):
            try:
                groups.setdefault(fields["session"], []).append((i, self._pending(fields)))
            except (ContractError, JournalError) as exc:
                results[i] = exc
            except Exception as exc:  # noqa: BLE001 - one entry's fields fail that entry alone
                results[i] = ContractError(f"entry refused: {type(exc).__name__}: {exc}")
        for session, items in groups.items():
            try:
                slog = self._acquire(session)
            except JournalError as exc:
                for i, _ in items:
                    results[i] = exc
                continue
            except Exception as exc:  # noqa: BLE001 - a session that cannot name a file fails its entries alone
                for i, _ in items:
                    results[i] = JournalError(f"entry refused: {type(exc).__name__}: {exc}")
                continue
            try:
                self._append(slog, [p for _, p in items])
            except JournalError as exc:
                for _, p in items:
                    if p.entry is None and p.error is None:
                        p.error = exc
            finally:
                self._release(slog)
            for i, p in items:
                results[i] = p.error if p.error is not None else p.entry  # type: ignore[assignment]
        return results

    def _pending(self, fields: dict) -> _Pending:
        """Everything about an entry that does not depend on its place in the chain, done in the
        caller's thread (in parallel with the group being synced): the contract check, the line
        limit and the canonical form with seq/prev/hash left open. The leader then only links."""
        validate_fields(fields)
        fields = fit_entry(fields, self.blobs, self.line_limit)
        try:
            return _Pending(fields, link_pieces(fields))
        except CanonicalError as exc:
            raise ContractError(f"entry has no canonical form: {exc}") from None

    def _append(self, slog: _SessionLog, mine: list[_Pending]) -> None:
        """Queue `mine` and return once they are committed (or failed).

        Group commit, one leader per group: the thread whose entry opens a group leads it. It waits
        for the previous group's sync (`io`), takes the whole group, writes it with one write and
        one fdatasync, then wakes exactly its group's followers, each on its own lock (no broadcast
        that wakes every waiting thread to find most still waiting). While a group syncs (the GIL
        is released), the next one forms and its leader waits at `io`.
        """
        with slog.mutex:
            if slog.failed:
                raise slog.failed
            slog.pending.extend(mine)
            leader = not slog.forming
            if leader:
                slog.forming = True
            else:
                wake = mine[-1].wake = _allocate_lock()
                wake.acquire()
        if not leader:
            _wait_turn(wake, mine[-1])
            return
        interrupted = _acquire_fully(slog.io)  # the previous group's sync
        try:
            with slog.mutex:
                batch, slog.pending = slog.pending, []
                slog.forming = False
            try:
                self._commit(slog, batch)
            except BaseException as exc:  # never leave followers waiting
                for p in batch:
                    if p.entry is None and p.error is None:
                        p.error = exc
                raise
            finally:
                first = _link_followers(batch)
                if first is not None:
                    first.release()
        finally:
            slog.io.release()
        if interrupted is not None:
            raise interrupted

    def check_session(self, session: str) -> None:
        """Raise JournalError if an entry for `session` could not be appended now (the file cannot be
        opened, or the session was stopped by an earlier failure). Cheap once the file is open."""
        slog = self._acquire(session)
        try:
            if slog.failed is not None:
                raise slog.failed
        finally:
            self._release(slog)

    def head(self, session: str) -> tuple[int, str]:
        """(last seq, last hash) of a session as this writer knows it after syncing with the file."""
        slog = self._acquire(session)
        try:
            with slog.io:
                fcntl.flock(slog.fd, fcntl.LOCK_EX)
                try:
                    self._sync_tail(slog)
                finally:
                    fcntl.flock(slog.fd, fcntl.LOCK_UN)
                return slog.seq, slog.prev
        finally:
            self._release(slog)

    def lines_after(self, session: str, seq: int = 0) -> Iterator[bytes]:
        """The session's complete lines after seq `seq` (store protocol, journal/store/interface.py)."""
        return self._tail.lines_after(session, seq)

    def checkpoint_vault(self) -> Vault:
        """Checkpoints of a file vault go into the vault itself."""
        return self.vault

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for slog in self._logs.values():
                try:
                    os.close(slog.fd)
                except OSError:
                    pass
            self._logs.clear()

    def __enter__(self) -> JournalWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------

    @staticmethod
    def _result(p: _Pending) -> dict:
        if p.error is not None:
            raise p.error
        assert p.entry is not None
        return p.entry

    def _acquire(self, session: str) -> _SessionLog:
        """The open log of a session (opening its file if needed), marked in use until _release."""
        with self._lock:
            if self._closed:
                raise JournalError("writer is closed")
            if session in self._stopped:
                raise self._stopped[session]
            slog = self._logs.get(session)
            if slog is None:
                path = self.vault.session_path(session)
                try:
                    self.vault.journal_dir.mkdir(parents=True, exist_ok=True)
                    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
                except OSError as exc:
                    raise JournalError(f"cannot open journal file {path}: {exc.strerror}") from None
                slog = _SessionLog(session, path, fd)
                self._logs[session] = slog
                self._evict_idle()
            else:
                self._logs.move_to_end(session)
            slog.users += 1
            return slog

    def _release(self, slog: _SessionLog) -> None:
        with self._lock:
            slog.users -= 1

    def _evict_idle(self) -> None:
        """Under self._lock: close least recently used files nobody is using, down to max_open."""
        excess = len(self._logs) - self.max_open
        for session in list(self._logs):
            if excess <= 0:
                break
            slog = self._logs[session]
            if slog.users or slog.forming or slog.pending:
                continue
            if slog.failed is not None:
                self._stopped[session] = slog.failed
            del self._logs[session]
            try:
                os.close(slog.fd)
            except OSError:
                pass
            excess -= 1

    def _commit(self, slog: _SessionLog, batch: list[_Pending]) -> None:
        if slog.failed:
            for p in batch:
                p.error = slog.failed
            return
        fd = slog.fd
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            self._sync_tail(slog)
            seq, prev = slog.seq, slog.prev
            parts: list[bytes] = []
            chained: list[_Pending] = []
            recent = self._recent_fields(slog) if any(p.dedupe for p in batch) else []
            for p in batch:
                if p.dedupe:
                    mine = orjson.loads(orjson.dumps(p.fields))  # as it would read back from the file
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
                    if size > self.line_limit:
                        raise JournalError(f"entry line is {size} bytes, over the {self.line_limit} limit")
                except Exception as exc:  # noqa: BLE001 - one entry that cannot be chained fails alone
                    p.error = exc if isinstance(exc, JournalError) else JournalError(f"entry refused: {exc}")
                    continue
                seq, prev = entry["seq"], entry["hash"]
                p.entry = entry
                parts += line_parts
                chained.append(p)
            if not parts:
                return
            data = b"".join(parts)
            try:
                view = memoryview(data)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
            except OSError as exc:
                self._write_failed(slog, chained, f"write to {slog.path} failed: {exc.strerror}")
                return
            if self.durable:
                try:
                    os.fdatasync(fd)
                except OSError as exc:
                    self._fail(slog, chained, f"fsync of {slog.path} failed: {exc.strerror}")
                    return
            slog.seq, slog.prev, slog.end = seq, prev, slog.end + len(data)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        if self.on_durable is not None and not slog.failed:
            try:
                self.on_durable(slog.session, [p.entry for p in chained if p.entry is not None])
            except Exception:  # noqa: BLE001 - the entries are durable; a hook must not fail them
                log.exception("on_durable hook failed")

    def _write_failed(self, slog: _SessionLog, chained: list[_Pending], why: str) -> None:
        """A write that failed before any fsync (a full disk, a quota): the partial bytes are cut off
        again, so the file is exactly as it was and the next batch can try (once space is free).
        Only when the cut itself fails is the session stopped."""
        try:
            os.ftruncate(slog.fd, slog.end)
        except OSError as exc:
            self._fail(slog, chained, f"{why}, and cutting off the partial write failed: {exc.strerror}")
            return
        err = JournalError(f"{why}; nothing was written, the next entry will be tried again")
        log.error("%s", err)
        for p in chained:
            p.entry = None
            p.error = err

    def _fail(self, slog: _SessionLog, chained: list[_Pending], why: str) -> None:
        err = JournalStopped(f"{why}; session {slog.session!r} is stopped, no further entries are accepted")
        log.error("%s", err)
        slog.failed = err
        for p in chained:
            p.entry = None
            p.error = err

    def _recent_fields(self, slog: _SessionLog) -> list[tuple[dict, dict]]:
        """(fields without seq/prev/hash, entry) of the session's last entries, newest first: at most
        DEDUPE_LINES lines or DEDUPE_BYTES bytes back from the end (a dead service's last batch)."""
        start = max(0, slog.end - DEDUPE_BYTES)
        data = os.pread(slog.fd, slog.end - start, start) if slog.end > 0 else b""
        lines = data.split(b"\n")
        if start > 0:
            lines = lines[1:]  # the first piece may be the end of a longer line
        out = []
        for line in reversed(lines[-DEDUPE_LINES - 1 :]):
            if not line:
                continue
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(entry, dict):
                out.append(({k: v for k, v in entry.items() if k not in CHAINED_KEYS}, entry))
        return out

    def _sync_tail(self, slog: _SessionLog) -> None:
        """Under the flock: make (seq, prev, end) match the file, recovering a torn tail."""
        size = os.fstat(slog.fd).st_size
        if size == slog.end:
            return
        if size == 0:
            slog.seq, slog.prev, slog.end = 0, GENESIS, 0
            return
        last_nl = _rfind_byte(slog.fd, size, 0x0A)
        if last_nl != size - 1:
            self._quarantine(slog, last_nl + 1, size)
            size = last_nl + 1
            if size == 0:
                slog.seq, slog.prev, slog.end = 0, GENESIS, 0
                return
        start = _rfind_byte(slog.fd, size - 1, 0x0A) + 1
        line = os.pread(slog.fd, size - start, start)
        try:
            entry = orjson.loads(line)
            seq, digest = entry["seq"], entry["hash"]
            if type(seq) is not int or not isinstance(digest, str) or len(digest) != 64:
                raise ValueError("no seq/hash")
        except (orjson.JSONDecodeError, ValueError, KeyError, TypeError) as exc:
            err = JournalCorrupt(
                f"last line of {slog.path} is not a journal entry ({exc}); run `broker verify` "
                "before appending to this session"
            )
            slog.failed = err
            raise err from None
        slog.seq, slog.prev, slog.end = seq, digest, size

    def _quarantine(self, slog: _SessionLog, start: int, size: int) -> None:
        torn = os.pread(slog.fd, size - start, start)
        qpath = slog.path.with_name(f"{slog.path.name}.torn-{time.time_ns()}")
        with open(qpath, "xb") as q:
            q.write(torn)
            q.flush()
            os.fsync(q.fileno())
        os.ftruncate(slog.fd, start)
        os.fsync(slog.fd)
        fsync_dir(slog.path.parent)
        rec = Recovery(slog.session, str(slog.path), str(qpath), len(torn))
        self.recoveries.append(rec)
        log.warning(
            "session %r: torn last line (%d bytes) moved to %s and the file truncated to its last "
            "complete entry", slog.session, len(torn), qpath,
        )


def _link_followers(batch: list[_Pending]) -> threading.Lock | None:
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


def _wait_turn(wake: threading.Lock, mine: _Pending) -> None:
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
    did not pass the turn on would leave the other threads of its session waiting for ever, and a
    follower returning early would report an entry that may not be durable yet."""
    interrupted: BaseException | None = None
    while True:
        try:
            lock.acquire()
            return interrupted
        except BaseException as exc:  # noqa: BLE001 - handed back to be raised
            interrupted = exc


def _rfind_byte(fd: int, end: int, byte: int) -> int:
    """Offset of the last `byte` before `end` in the file, or -1."""
    pos = end
    while pos > 0:
        start = max(0, pos - _TAIL_BLOCK)
        block = os.pread(fd, pos - start, start)
        i = block.rfind(bytes((byte,)))
        if i >= 0:
            return start + i
        pos = start
    return -1
