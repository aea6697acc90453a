"""Durable appends to `<vault>/journal/<session>.jsonl`.

- The writer assigns `seq` and `prev` and computes `hash`; `append` returns only when the line
  is written and fdatasync'ed.
- Group commit: concurrent appends to one session are written together and share one fsync.
  Each caller does its entry's own work (contract check, canonical form) in its own thread; the
  first to arrive in a group leads it: once the previous group is synced it takes the group, links
  the entries (seq, prev, SHA-256), writes them with one write, syncs, and wakes the group's
  followers one after another. Appends that arrive meanwhile form the next group.
- `submit` (journal/append_pipeline.py) appends without waiting: the group it opens is led by the
  session's flusher thread, which calls each entry's callback after the group's fdatasync, so a
  producer that does not wait (the MCP shim's event loop, a recording service) keeps preparing
  entries while the previous group syncs, and never fsyncs on its own thread.
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
- After each durable group the session's seq sidecar `<session>.seqidx` gets the group's records
  (journal/seq_sidecar.py: where every 128th seq starts, for readers; no fsync, never evidence).
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
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path

import orjson

from journal.append_pipeline import (
    DEDUPE_BYTES,
    DEDUPE_LINES,
    AppendPipeline,
    JournalError,
    Lane,
    Pending,
    Recent,
    chain_group,
    recent_fields,
)
from journal.blobstore import BlobStore
from journal.bodies import LINE_LIMIT
from journal.chain import GENESIS
from journal.preallocation import Reservation
from journal.reader import SessionTail
from journal.seq_sidecar import note_group
from journal.vault import Vault, fsync_dir

log = logging.getLogger(__name__)
_TAIL_BLOCK = 1 << 16
_DEDUPE = attrgetter("dedupe")  # any(map(_DEDUPE, batch)): no generator frame per group
__all__ = ["DEDUPE_BYTES", "DEDUPE_LINES", "JournalCorrupt", "JournalError", "JournalStopped", "JournalWriter",
           "Recovery"]


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


class _SessionLog(Lane):
    """A session file's lane: its descriptor and what this writer knows of its tail."""

    def __init__(self, session: str, path: Path, fd: int) -> None:
        super().__init__()
        self.session, self.path, self.fd = session, path, fd
        self.seq = -1  # -1: tail not read yet
        self.prev = GENESIS
        self.end = -1
        self.users = 0  # threads between _acquire and _release; only idle files are closed
        self.reserve = Reservation()  # disk space reserved past the end (journal/preallocation.py)

    def close(self) -> None:
        """Give back the space reserved past the end (unless a group is being written: then the file
        keeps it) and close the descriptor."""
        if self.io.acquire(blocking=False):
            try:
                self.reserve.release(self.fd)
            finally:
                self.io.release()
        try:
            os.close(self.fd)
        except OSError:
            pass


class JournalWriter(AppendPipeline):
    """Appends entries to a vault's session files (the storage part of journal/append_pipeline.py).
    Thread-safe; one per process is enough."""

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

    # -- public (append and append_many: journal/append_pipeline.py) ----------------------------

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
                slog.close()
            self._logs.clear()

    def __enter__(self) -> JournalWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------

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
                    fd = _open_session_file(path)
                except OSError as exc:
                    raise JournalError(f"cannot open journal file {path}: {exc.strerror}") from None
                slog = _SessionLog(session, path, fd)
                self._logs[session] = slog
                self._evict_idle()
            else:
                self._logs.move_to_end(session)
            slog.users += 1
            return slog

    def _release(self, lane: Lane) -> None:
        with self._lock:
            lane.users -= 1  # type: ignore[attr-defined]  # every lane of this writer is a _SessionLog

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
            slog.close()
            excess -= 1

    def _commit(self, slog: _SessionLog, batch: list[Pending]) -> None:  # type: ignore[override]
        if slog.failed:
            for p in batch:
                p.error = slog.failed
            return
        fd = slog.fd
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            self._sync_tail(slog)
            recent = self._recent_fields(slog) if any(map(_DEDUPE, batch)) else None
            parts, chained, seq, prev = chain_group(batch, slog.seq, slog.prev, self.line_limit, recent)
            if not parts:
                return
            data = b"".join(parts)
            if self.durable:
                slog.reserve.cover(fd, slog.end, len(data))  # the fdatasync then commits no block allocation
            try:
                n = os.write(fd, data)
                while n < len(data):  # a short write (a disk filling up): the rest, until it fails
                    n += os.write(fd, memoryview(data)[n:])
            except OSError as exc:
                self._write_failed(slog, chained, f"write to {slog.path} failed: {exc.strerror}")
                return
            if self.durable:
                try:
                    os.fdatasync(fd)
                except OSError as exc:
                    self._fail(slog, chained, f"fsync of {slog.path} failed: {exc.strerror}")
                    return
            note_group(slog.path, slog.end, slog.seq + 1, len(chained), data)  # readers' seq index, under the flock
            self._tail.wrote(slog.session, slog.end, data)  # read back by a follower without the file
            slog.seq, slog.prev, slog.end = seq, prev, slog.end + len(data)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        if not slog.failed:
            self._durable(slog.session, chained)

    def _write_failed(self, slog: _SessionLog, chained: list[Pending], why: str) -> None:
        """A write that failed before any fsync (a full disk, a quota): the partial bytes are cut off
        again, so the file is exactly as it was and the next batch can try (once space is free).
        Only when the cut itself fails is the session stopped."""
        slog.reserve.forget()  # the cut also drops what was reserved past the end
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

    def _fail(self, slog: _SessionLog, chained: list[Pending], why: str) -> None:
        err = JournalStopped(f"{why}; session {slog.session!r} is stopped, no further entries are accepted")
        log.error("%s", err)
        slog.failed = err
        for p in chained:
            p.entry = None
            p.error = err

    def _recent_fields(self, slog: _SessionLog) -> Recent:
        """The dedupe view of the session's last entries, newest first: at most DEDUPE_LINES lines or
        DEDUPE_BYTES bytes back from the end (a dead service's last batch)."""
        start = max(0, slog.end - DEDUPE_BYTES)
        data = os.pread(slog.fd, slog.end - start, start) if slog.end > 0 else b""
        lines = data.split(b"\n")
        if start > 0:
            lines = lines[1:]  # the first piece may be the end of a longer line
        return recent_fields(reversed(lines[-DEDUPE_LINES - 1 :]))

    def _sync_tail(self, slog: _SessionLog) -> None:
        """Under the flock: make (seq, prev, end) match the file, recovering a torn tail."""
        size = os.lseek(slog.fd, 0, os.SEEK_END)  # the size fstat gives, without building a stat result
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
        slog.reserve.forget()
        os.ftruncate(slog.fd, start)
        os.fsync(slog.fd)
        fsync_dir(slog.path.parent)
        rec = Recovery(slog.session, str(slog.path), str(qpath), len(torn))
        self.recoveries.append(rec)
        log.warning(
            "session %r: torn last line (%d bytes) moved to %s and the file truncated to its last "
            "complete entry", slog.session, len(torn), qpath,
        )


def _open_session_file(path: Path) -> int:
    """Open a session file for appending, creating it if needed; a file created here has its name made
    durable (its directory fsynced) before any entry in it is acknowledged."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        fd = os.open(path, flags | os.O_CREAT, 0o644)
        if os.fstat(fd).st_size:  # an entry in it was acknowledged: its name was made durable then
            return fd
        # empty: made by an open whose directory sync failed (or a writer that died first): sync it now
    try:
        fsync_dir(path.parent)
    except OSError:
        os.close(fd)
        raise
    return fd


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
