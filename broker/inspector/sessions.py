"""What the inspector knows about each session, kept while the session stays the same.

Lines come from the session's seq index (journal/seq_index.py: the writer's sidecar, else the index in the
user's cache), so a page of a 100,000-entry timeline and the session's head read only the lines asked for;
on a database store, one key range of its rows. Derived values (the verifier's summary and verdict, the
replay) are recomputed when the file changes (its size or mtime) or the database head moves. Nothing here is
trusted over the file: verdicts come from journal/verify.py on the current bytes.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from journal.reader import RowSource, session_size
from journal.replay import Replay, replay_session
from journal.replay.views import Views
from journal.seq_index import current_index, lines_at
from journal.summary import summarize_session
from journal.user_cache import views_home
from journal.vault import Vault
from journal.verify import SessionReport, verify_session


def _stamp(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def _row_stamp(vault: RowSource, session: str) -> tuple[int, str]:
    """A database session's state: its head (seq, hash); it changes only by growing."""
    return vault.store.head(session)  # type: ignore[attr-defined]


@dataclass
class _PlanJob:
    """A revert plan folded in a thread of its own, so a request never waits minutes for it: the page asks
    again and shows how far the fold has read (`done` of `total` bytes) until `finished` is set."""

    stamp: tuple[int, object]
    total: int
    done: int = 0
    replay: Replay | None = None
    error: BaseException | None = None
    finished: threading.Event = field(default_factory=threading.Event)

    def advance(self, n: int) -> None:
        self.done += n


@dataclass
class _Session:
    path: Path
    derived: dict[str, tuple[tuple[int, object], object]] = field(default_factory=dict)  # by file stamp or db head
    lock: threading.Lock = field(default_factory=threading.Lock)  # `builders`
    builders: dict[str, threading.Lock] = field(default_factory=dict)  # one per derived value
    plan_job: _PlanJob | None = None  # the revert plan being built in the background


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
            seq, _ = _row_stamp(self.vault, session)  # session checked by the caller, Api.session: one query)
            return {"session": session, "lines": seq, "bytes": 0, "complete_bytes": 0}
        self._get(session)
        index, path = current_index(self.vault, session)  # the seq index's end: no scan of the file
        return {"session": session, "lines": index.lines, "bytes": _stamp(path)[0], "complete_bytes": index.covered}

    def lines(self, session: str, first: int, count: int) -> tuple[int, list[bytes]]:
        """(total complete lines, the raw bytes of lines first..first+count-1, 1-based, without newline): read
        from the session's seq index (journal/seq_index.py), only those lines."""
        first = max(1, first)
        if isinstance(self.vault, RowSource):  # a page is one primary-key range of the database's rows (and
            total, _ = _row_stamp(self.vault, session)  # its head); the session was checked by Api.session
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

    def replay(self, session: str) -> tuple[Replay, Views]:
        def build() -> tuple[Replay, Views]:
            rp = replay_session(self.vault, session)
            return rp, Views(rp)

        return self._derived(session, "replay", build)

    def revert_plan(self, session: str, wait: float = 1.0) -> Replay | tuple[int, int]:
        """The replay the session's revert plan comes from, or (bytes read, bytes in all) while it is still
        being folded. A replay with views already built for the current file serves; otherwise a fold for
        the plan alone (no views) runs in a background thread, started by the first request (or again when
        the file changed), and this waits up to `wait` seconds for it."""
        s = self._get(session)
        stamp = self._stamp(s, session)
        hit = s.derived.get("replay")
        if hit is not None and hit[0] == stamp:
            return hit[1][0]  # type: ignore[index]
        with s.lock:
            job = s.plan_job
            if job is None or job.stamp != stamp:
                job = s.plan_job = _PlanJob(stamp, session_size(self.vault, session))
                threading.Thread(target=self._fold_plan, args=(session, job), name=f"revert-plan {session}",
                                 daemon=True).start()
        if not job.finished.wait(wait):
            return job.done, job.total
        if job.error is not None:
            raise job.error
        assert job.replay is not None
        return job.replay

    def _fold_plan(self, session: str, job: _PlanJob) -> None:
        try:
            job.replay = replay_session(self.vault, session, progress=job.advance, views=False)
        except BaseException as exc:  # noqa: BLE001 - handed to the request that asks for the plan
            job.error = exc
        finally:
            job.finished.set()

    def _stamp(self, s: _Session, session: str) -> tuple[int, object]:
        return _row_stamp(self.vault, session) if isinstance(self.vault, RowSource) else _stamp(s.path)


def parse_line(data: bytes) -> dict | None:
    """A raw line as an entry, or None when it is not a JSON object (a tampered or torn line)."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
