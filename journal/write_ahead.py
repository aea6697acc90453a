"""Write-ahead records: the request half of a write is durable before the write goes upstream.

An entry is written when a call's response comes back. A write (effect `write`, decided by the
connector rules before the call goes upstream: `Recorder.prepare_request`, the one rule the entry
uses) acts on the platform before that; a crash while it is upstream would leave the platform changed
and no trace. So the capture point first appends the write's request half, redacted and encoded
exactly as the entry's request will be (the same `prepare_request`: nothing secret reaches the disk
here either), to a write-ahead log, and lets the write go only once the record is durable. The entry
then carries the record's id (`request.write_ahead`). At the next start (`recover`), every record
whose id no entry of its session carries becomes an entry: `answered_by: none`, `status: null`, and an
`error` saying the outcome is unknown. docs/contract.md, "Write-ahead records", is the protocol.

Storage (file vaults only; journal/store/README.md): `<vault>/write-ahead/<session file stem>.<pid>-
<random>.wal`, one file per session per process, one JSON line per record, appended with group commit
(the writes waiting at one moment share one write and one fdatasync). The process holds an exclusive
`flock` on its files while it runs, so a recovery never takes the records of a live broker (whose
writes may still be upstream); a killed process's locks go with it. A recovered file is removed.
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import threading
import time
from pathlib import Path

import orjson

from journal.call import Call, Identity, Request, Response
from journal.record import Recorder, RequestHalf
from journal.vault import Vault, fsync_dir, session_filename
from journal.writer import JournalError, JournalWriter

log = logging.getLogger(__name__)

WRITE_AHEAD_DIR = "write-ahead"
"""The vault folder holding write-ahead logs."""
ID_KEY = "write_ahead"
"""The request key of an entry naming its write-ahead record."""
SUFFIX = ".wal"
COMPACT_BYTES = 1 << 20
"""A log whose records all have their entries is emptied once it holds this much."""
UNKNOWN_OUTCOME = ("the broker stopped while this write was upstream: its outcome is unknown (the platform "
                   "may or may not have acted on it)")


class _Lane:
    """One session's log file in this process, with its group commit."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self.fd = path, fd
        self.cond = threading.Condition()
        self.pending: list[bytes] = []
        self.queued = 0  # records handed in so far
        self.durable = 0  # records durable so far (the first `durable` of `queued`)
        self.busy = False  # a thread is writing a group
        self.errors: dict[int, JournalError] = {}  # record number -> why its group failed
        self.failed: JournalError | None = None  # a failed fsync: nothing more is written here
        self.open: set[str] = set()  # ids whose entries are not known to be durable
        self.size = 0


class WriteAheadLog:
    """This process's write-ahead logs in a file vault. Thread-safe: `write` blocks until durable."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.folder = Path(root) / WRITE_AHEAD_DIR
        self._token = f"{os.getpid()}-{secrets.token_hex(4)}"
        self._lanes: dict[str, _Lane] = {}
        self._where: dict[str, _Lane] = {}
        self._lock = threading.Lock()
        self._closed = False

    def write(self, half: RequestHalf, *, body_pending: bool = False, ts: float | None = None) -> str:
        """Append the record of a write about to go upstream; its id once the record is durable.
        `body_pending`: the body is streamed after the headers (the entry carries it; the record does not)."""
        record_id = secrets.token_hex(16)
        line = orjson.dumps({
            "id": record_id, "ts": time.time() if ts is None else ts, "body_pending": body_pending,
            "fields": half.fields, "request_extra": half.request_extra,
        }) + b"\n"
        lane = self._lane(half.fields["session"])
        with lane.cond:
            if lane.failed is not None:
                raise lane.failed
            lane.pending.append(line)
            lane.queued += 1
            mine = lane.queued
            while lane.durable < mine:
                if lane.busy:
                    lane.cond.wait()
                    continue
                self._commit(lane)
            error = lane.errors.pop(mine, None)
            if error is not None:
                raise error
            lane.open.add(record_id)
        with self._lock:
            self._where[record_id] = lane
        return record_id

    def settle(self, record_id: str) -> None:
        """The entry of this record is durable (or the call never went upstream): the record is no longer
        needed; a log whose records are all settled is emptied once it is large."""
        with self._lock:
            lane = self._where.pop(record_id, None)
        if lane is None:
            return
        with lane.cond:
            lane.open.discard(record_id)
            if not lane.open and not lane.busy and not lane.pending and lane.size >= COMPACT_BYTES:
                try:
                    os.ftruncate(lane.fd, 0)  # lost in a crash: the old records all have entries
                    lane.size = 0
                except OSError as exc:
                    log.warning("write-ahead log %s not emptied: %s", lane.path, exc)

    def close(self) -> None:
        """Close the files (releasing their locks): what is left in them is for `recover`."""
        with self._lock:
            self._closed = True
            lanes, self._lanes = list(self._lanes.values()), {}
        for lane in lanes:
            with lane.cond:
                try:
                    os.close(lane.fd)
                except OSError:
                    pass

    def _lane(self, session: str) -> _Lane:
        with self._lock:
            if self._closed:
                raise JournalError("the write-ahead log is closed")
            lane = self._lanes.get(session)
            if lane is not None:
                return lane
            stem = session_filename(session)[: -len(".jsonl")]
            path = self.folder / f"{stem}.{self._token}{SUFFIX}"
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fsync_dir(self.folder)
            except OSError as exc:
                raise JournalError(f"cannot open the write-ahead log {path}: {exc.strerror}") from None
            lane = self._lanes[session] = _Lane(path, fd)
            return lane

    @staticmethod
    def _commit(lane: _Lane) -> None:
        """Under lane.cond: write and sync every record queued, the lock released meanwhile."""
        batch, lane.pending = lane.pending, []
        first, upto = lane.durable + 1, lane.queued
        lane.busy = True
        error: JournalError | None = None
        lane.cond.release()
        try:
            data = b"".join(batch)
            try:
                written = os.write(lane.fd, data)
                if written != len(data):
                    raise OSError(28, "short write")
            except OSError as exc:
                try:
                    os.ftruncate(lane.fd, lane.size)  # no half record is left for a later one to follow
                except OSError:
                    pass
                error = JournalError(f"cannot write the write-ahead log {lane.path}: {exc.strerror}")
            else:
                try:
                    os.fdatasync(lane.fd)
                except OSError as exc:
                    error = JournalError(f"cannot sync the write-ahead log {lane.path}: {exc.strerror}")
                    lane.failed = error  # after a failed fsync the kernel may have dropped the data
        finally:
            lane.cond.acquire()
            lane.busy = False
            if error is None:
                lane.size += len(data)
            else:
                for n in range(first, upto + 1):
                    lane.errors[n] = error
            lane.durable = upto
            lane.cond.notify_all()


def write_ahead_log_for(recorder: Recorder) -> WriteAheadLog | None:
    """The write-ahead log of a recorder's file vault; None for a database store (not supported there yet:
    journal/store/README.md)."""
    writer = recorder.writer
    if not isinstance(writer, JournalWriter):
        return None
    return WriteAheadLog(writer.vault.root)


def recover(recorder: Recorder) -> list[dict]:
    """Turn every write-ahead record of a dead process that no entry names into an entry (outcome unknown);
    the entries written. Logs of live processes (locked) are left alone; a recovered log is removed."""
    writer = recorder.writer
    if not isinstance(writer, JournalWriter):
        return []
    folder = writer.vault.root / WRITE_AHEAD_DIR
    try:
        paths = sorted(p for p in folder.iterdir() if p.name.endswith(SUFFIX))
    except FileNotFoundError:
        return []
    written: list[dict] = []
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # recovered and removed by another process meanwhile
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live process's log
            if os.fstat(fd).st_nlink == 0:
                continue
            written += _recover_file(recorder, writer.vault, path)
            path.unlink()
            fsync_dir(folder)
        finally:
            os.close(fd)
    if written:
        log.warning("write-ahead: %d writes were upstream when the broker stopped; each is recorded with an "
                    "unknown outcome", len(written))
    return written


def _recover_file(recorder: Recorder, vault: Vault, path: Path) -> list[dict]:
    records = []
    for line in path.read_bytes().split(b"\n"):
        if not line:
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a torn last line: its write was never let go
        if isinstance(record, dict) and isinstance(record.get("id"), str) and isinstance(record.get("fields"), dict):
            records.append(record)
    written = []
    seen: dict[str, set[str]] = {}
    for record in records:
        session = record["fields"].get("session")
        if not isinstance(session, str):
            continue
        if session not in seen:
            seen[session] = _recorded_ids(vault, session)
        if record["id"] in seen[session]:
            continue
        entry = recorder.writer.append(unknown_outcome_fields(recorder, record))
        seen[session].add(record["id"])
        written.append(entry)
    return written


def unknown_outcome_fields(recorder: Recorder, record: dict) -> dict:
    """The entry fields of a write whose record has no entry: its request as recorded ahead, no response."""
    fields = record["fields"]
    error = UNKNOWN_OUTCOME + ("; its body was streamed and is not recorded" if record.get("body_pending") else "")
    extra = dict(record.get("request_extra") or {})
    extra[ID_KEY] = record["id"]
    ts = record.get("ts")
    call = Call(Identity(fields["session"], fields["agent"], fields["principal"]), fields["connector"],
                Request(fields["request"]["method"], fields["request"]["url"]),
                Response(None, (), None, error, None, "none"),
                ts=ts if isinstance(ts, int | float) and not isinstance(ts, bool) else None)
    return recorder.prepare_response(RequestHalf(fields, extra), call)


def _recorded_ids(vault: Vault, session: str) -> set[str]:
    """The write-ahead ids the session's entries carry."""
    path = vault.session_path(session)
    mark = f'"{ID_KEY}":"'.encode()
    ids: set[str] = set()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return ids
    for line in data.split(b"\n"):
        if mark not in line:
            continue
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        request = entry.get("request") if isinstance(entry, dict) else None
        value = request.get(ID_KEY) if isinstance(request, dict) else None
        if isinstance(value, str):
            ids.add(value)
    return ids
