"""What the inspector knows about each session, kept while the session stays the same.

Lines come from the session's seq index (journal/seq_index.py: the writer's sidecar, else the index in the
user's cache), so a page of a 100,000-entry timeline and the session's head read only the lines asked for;
on a database store, one key range of its rows. Derived values (the verifier's summary and verdict, the
replay) are recomputed when the file changes (its size, mtime, ctime or inode) or the database head moves.
A replay (the views, what a write changed, the revert plan) is folded in a background thread: a request
answers at once with how far it got, and the page asks again. Nothing here is trusted over the file:
verdicts come from journal/verify.py on the current bytes.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from journal.reader import RowSource, session_size
from journal.replay import Replay, replay_session
from journal.replay.views import Views
from journal.seq_index import current_index, lines_at
from journal.summary import summarize_session
from journal.user_cache import views_home
from journal.vault import Vault
from journal.verify import SessionReport, verify_session


def _stamp(path: Path) -> tuple[int, int, int, int, int]:
    """What says the file is the one a derived value was built from: size and mtime, and the inode and ctime
    too (a same-size edit with its mtime put back changes the ctime; a file renamed over it, the inode)."""
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev


def _row_stamp(vault: RowSource, session: str) -> tuple[int, str, tuple[int, int, int]]:
    """A database session's state: its head (seq, hash) and the entry table's in-place changes (its file node,
    rows updated, rows deleted: journal/store/postgres_store.py `head_and_changes`), so that a row rewritten
    before an unchanged head (by an owner who switched the append-only trigger off) is not answered from cache."""
    return vault.store.head_and_changes(session)  # type: ignore[attr-defined]


def _row_head(vault: RowSource, session: str) -> int:
    """A database session's length: the seq of its head."""
    return vault.store.head(session)[0]  # type: ignore[attr-defined]


def _grew(old: tuple, new: tuple) -> bool:
    """Whether the file at stamp `new` is the one at `old` grown: the same device and inode with more bytes
    (a database session: a head further on). An edit in place before the growth cannot be told from here."""
    if len(old) == 5:
        return old[3:] == new[3:] and new[0] > old[0]
    return old[2] == new[2] and new[0] > old[0]


@dataclass(frozen=True)
class Pending:
    """A fold still running: `done` of `total` bytes read, for the page to show while it asks again."""

    done: int
    total: int


@dataclass(frozen=True)
class Folded:
    """A replay to answer with. `current` false: a replay of the file before it grew, served while the fold of
    the file as it is now (`pending`: how far it has read) runs, so a session being written is not a page
    that never finishes; the answer says so."""

    replay: Replay
    current: bool = True
    pending: Pending | None = None

    @property
    def views(self) -> Views:
        return Views(self.replay)


class _Superseded(BaseException):
    """Stops a fold whose file changed under it: its result could never be served (a BaseException, so no
    reader's `except Exception` takes it for a bad line)."""


@dataclass
class _FoldJob:
    """A replay folded in a thread of its own, so a request never waits minutes for it: the page asks again
    and shows how far the fold has read (`done` of `total` bytes) until `finished` is set. `stamp` is the
    file's, taken before the fold opened it, so a result is never filed under a newer file than it read.
    With `views` the fold keeps what the views and the writes need, else the revert plan alone."""

    stamp: tuple
    total: int
    views: bool
    done: int = 0
    replay: Replay | None = None
    error: BaseException | None = None
    superseded: bool = False
    finished: threading.Event = field(default_factory=threading.Event)

    def advance(self, n: int) -> None:
        if self.superseded:
            raise _Superseded
        self.done += n

    def run(self, vault: Vault, session: str) -> None:
        try:
            self.replay = replay_session(vault, session, progress=self.advance, views=self.views)
        except BaseException as exc:  # noqa: BLE001 - handed to the request that asks for the result
            self.error = exc
        finally:
            self.finished.set()


@dataclass
class _Session:
    path: Path
    derived: dict[str, tuple[tuple, object]] = field(default_factory=dict)  # by file stamp or db head
    lock: threading.Lock = field(default_factory=threading.Lock)  # `builders` and `jobs`
    builders: dict[str, threading.Lock] = field(default_factory=dict)  # one per derived value
    jobs: dict[bool, _FoldJob] = field(default_factory=dict)  # the fold in the background, by `views`
    done: dict[bool, _FoldJob] = field(default_factory=dict)  # the last fold that finished, by `views`


class SessionIndex:
    """Per-session derived state for one vault, safe to use from several request threads."""

    def __init__(self, vault: Vault) -> None:
        if vault.views_dir == vault.root / "views":  # replay's scratch (views, revert-plan tabs): never the vault
            vault.views_dir = views_home(vault)
        self.vault = vault
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()

    def _get(self, session: str) -> _Session:
        path = self.vault.require_session(session)  # the vault's rule: an id never reaches outside journal/
        with self._lock:
            s = self._sessions.get(session)
            if s is None:
                s = self._sessions[session] = _Session(path)
            return s

    # -- lines ---------------------------------------------------------------------------------------

    def head(self, session: str) -> dict:
        """How far the file goes: complete lines, bytes, and whether a partial last line is pending."""
        if isinstance(self.vault, RowSource):  # a database store: rows by seq, its head is its length (the
            seq = _row_head(self.vault, session)  # session checked by the caller, Api.session: one query)
            return {"session": session, "lines": seq, "bytes": 0, "complete_bytes": 0}
        self._get(session)
        index, path = current_index(self.vault, session)  # the seq index's end: no scan of the file
        return {"session": session, "lines": index.lines, "bytes": _stamp(path)[0], "complete_bytes": index.covered}

    def lines(self, session: str, first: int, count: int) -> tuple[int, list[bytes]]:
        """(total complete lines, the raw bytes of lines first..first+count-1, 1-based, without newline): read
        from the session's seq index (journal/seq_index.py), only those lines."""
        first = max(1, first)
        if isinstance(self.vault, RowSource):  # a page is one primary-key range of the database's rows (and
            total = _row_head(self.vault, session)  # its head); the session was checked by Api.session
            last = min(total, first + count - 1)
            if first > last:
                return total, []
            return total, self._rows(session, first, last)[:count]
        self._get(session)
        index, got = lines_at(self.vault, session, first - 1, count)
        return index.lines, [line[:-1] for line in got]

    def _rows(self, session: str, first: int, last: int) -> list[bytes]:
        """A database session's lines of the rows with seq first..last (one key range)."""
        got: list[bytes] = []
        for block in self.vault.line_blocks(session, first - 1, last):  # type: ignore[attr-defined]
            got += block.lines
        return got

    def entry_lines(self, session: str, n: int) -> tuple[bytes | None, bytes | None]:
        """(line n, line n - 1) for an entry page: on a database store one key range of two rows, no head."""
        if isinstance(self.vault, RowSource):
            got = self._rows(session, max(1, n - 1), n)  # the session was checked by the caller
            if n == 1:
                return (got[0] if got else None), None
            return (got[1] if len(got) > 1 else None), (got[0] if got else None)
        line = self.line(session, n)
        return line, (self.line(session, n - 1) if n > 1 and line is not None else None)

    def line(self, session: str, n: int) -> bytes | None:
        _, got = self.lines(session, n, 1)
        return got[0] if got else None

    # -- derived from the verifier and replay (recomputed when the file changes) ----------------------

    def _derived(self, session: str, key: str, build):
        s = self._get(session)
        with s.lock:
            builder = s.builders.setdefault(key, threading.Lock())
        with builder:  # a slow verify or replay never holds up the line index (timeline pages)
            stamp = self._stamp(s, session)
            hit = s.derived.get(key)
            if hit is not None and hit[0] == stamp:
                return hit[1]
            value = build()
            s.derived[key] = (stamp, value)
            return value

    def summary(self, session: str) -> dict:
        return self._derived(session, "summary", lambda: summarize_session(self.vault, session))

    def verdict(self, session: str) -> SessionReport:
        return self._derived(session, "verdict", lambda: verify_session(self.vault, session))

    def replay(self, session: str, wait: float = 1.0) -> Folded | Pending:
        """The session's replay with its views (the views tab, what a write changed), or how far its fold has
        read while it runs in the background (see `_fold`)."""
        return self._fold(session, True, wait)

    def revert_plan(self, session: str, wait: float = 1.0) -> Folded | Pending:
        """The replay the session's revert plan comes from, or how far its fold has read. The fold with views
        of the current file serves when there is one (done or still running: no second fold beside it);
        otherwise a fold for the plan alone (no views)."""
        s = self._get(session)
        stamp = self._stamp(s, session)
        with s.lock:
            job = s.jobs.get(True)
        return self._fold(session, job is not None and job.stamp == stamp and job.error is None, wait)

    def _fold(self, session: str, views: bool, wait: float) -> Folded | Pending:
        """One background fold per session and kind, started by the first request, and again when the file
        changed: a fold of a file replaced or edited is stopped at its next block; one of a file that has
        only grown runs to its end, and its replay is then answered (marked not current) while the next fold
        runs. This waits up to `wait` seconds for the fold. Nothing is written into the vault (replay's
        scratch is the user's cache, see __init__)."""
        s = self._get(session)
        stamp = self._stamp(s, session)
        with s.lock:
            job = s.jobs.get(views)
            if job is not None and job.finished.is_set() and job.error is None:
                s.done[views] = job
            if job is None or (job.stamp != stamp and (job.finished.is_set() or not _grew(job.stamp, stamp))):
                if job is not None:
                    job.superseded = True
                job = s.jobs[views] = _FoldJob(stamp, session_size(self.vault, session), views)
                threading.Thread(target=job.run, args=(self.vault, session), daemon=True,
                                 name=f"{'views' if views else 'revert-plan'} {session}").start()
        got = self._answer(job, wait)
        if not isinstance(got, Pending):
            with s.lock:
                s.done[views] = job
            if job.stamp == stamp:
                return Folded(got)
            return self._fold(session, views, 0)  # the file grew while it ran: this, and a fold of the file now
        with s.lock:
            last = s.done.get(views)
        if last is not None and _grew(last.stamp, stamp):
            assert last.replay is not None
            return Folded(last.replay, False, got)
        return got

    @staticmethod
    def _answer(job: _FoldJob, wait: float) -> Replay | Pending:
        """The job's replay once it is done (waiting up to `wait` seconds), else how far it has read."""
        if not job.finished.wait(wait) or isinstance(job.error, _Superseded):
            return Pending(job.done, job.total)  # a superseded fold: the next request finds the new one
        if job.error is not None:
            raise job.error
        assert job.replay is not None
        return job.replay

    def _stamp(self, s: _Session, session: str) -> tuple:
        return _row_stamp(self.vault, session) if isinstance(self.vault, RowSource) else _stamp(s.path)
