"""What a session file can match, so that `broker search` skips sessions that cannot hold an answer without
reading them (issue 26): the connectors, effects and agents its entries name, and the least and greatest `ts`.

Kept in the user's cache ($XDG_CACHE_HOME/broker/search-summary), never in the vault: whoever can write the
vault can write a sidecar there, and a summary that lies (no slack calls, when there are) would hide entries.
One per session file, named by its real path and identity (device, inode) and stamped with its size, mtime
and ctime: any write to the file, any rename over it, any `touch` changes the ctime (which no user can set
back), and a summary whose stamp is not the file's is built again from the file before it is used. So a
summary only ever says what the file held when it was read last, and the file has not changed since.

Exact for `journal/search.py`: a match is an entry (a JSON object line) whose top-level fields equal the
query's, so a session none of whose entries names the connector (or effect, agent) cannot match; `ts` is
compared as search compares it (a prefix of the string; an entry without a string `ts` counts as "").
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

import orjson

from journal.canonical import canonical_bytes
from journal.confine import open_regular
from journal.reader import fd_line_blocks
from journal.user_cache import cache_home

_VERSION = 2
_KEYS = ("connector", "effect", "agent")


@dataclass
class SessionSummary:
    values: dict[str, list[str]]  # per key in _KEYS: every value spelled in the file (canonical escapes, latin-1)
    ts_min: str | None  # None: no entry
    ts_max: str | None

    def cannot_match(self, query: object) -> str | None:
        """Why no entry of the session can match `query` (a journal/search.py Query), or None when one may."""
        for key in _KEYS:
            want = getattr(query, key, None)
            have = self.values.get(key, [])
            if want is None:
                continue
            spelled = canonical_bytes(want)[1:-1].decode("latin-1")
            if (_ESCAPED if "\\" in spelled else spelled) not in have:
                return f"no entry has {key} {want}"
        if self.ts_min is None:
            return "no entries"
        since, until = getattr(query, "since", None), getattr(query, "until", None)
        if since is not None and self.ts_max is not None and self.ts_max[: len(since)] < since:
            return f"every entry is before {since} (the last at {self.ts_max})"
        if until is not None and self.ts_min[: len(until)] > until:
            return f"every entry is after {until} (the first at {self.ts_min})"
        return None


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _cache_path(path: Path, st: os.stat_result) -> Path:
    key = f"{os.path.realpath(path)}\0{st.st_dev}\0{st.st_ino}".encode("utf-8", "surrogateescape")
    return cache_home() / "search-summary" / (hashlib.sha256(key).hexdigest()[:40] + ".json")


_VALUE = {k: re.compile(b'"' + k.encode() + rb'":"([^"\\\n]*)(["\\])') for k in _KEYS}  # never past a line
_ESCAPED = "\\"  # stands for every value spelled with an escape (recorded as present, not spelled out)
_TS_TAIL = re.compile(rb',"ts":"([^"\\]{0,64})"\}\Z')
_TS_TAILS = re.compile(rb',"ts":"([^"\\\n]{0,64})"\}$', re.MULTILINE)


def _build(fd: int) -> SessionSummary:
    """One read of the file, at C speed for the most part. Values: every `"connector":"..."` (effect, agent)
    anywhere in the file, as spelled there (a value spelled with an escape only as `_ESCAPED`): a superset of
    the top-level ones, and a match's line always holds its value in exactly the canonical spelling
    (journal/search.py looks for it before parsing). In a line that parses, no such value can hide inside
    another (inside a string every quote is escaped), and a line that does not parse matches nothing. Times:
    a line ending in `,"ts":"..."}` (every canonical line: `ts` sorts last) has that top-level `ts` (the last
    member; a duplicate key's last value is the one a parser keeps); any other line is parsed for it."""
    values: dict[str, set[str]] = {k: set() for k in _KEYS}
    ts_min: str | None = None
    ts_max: str | None = None
    for block in fd_line_blocks(fd):  # whole lines at a time (a torn last line alone)
        whole = block.torn or block.raw[: block.raw.rfind(b"\n") + 1]
        for key, pattern in _VALUE.items():
            values[key].update(v.decode("latin-1") if end == b'"' else _ESCAPED
                               for v, end in set(pattern.findall(whole)))
        tails = _TS_TAILS.findall(whole)
        if len(tails) == whole.count(b"\n") + (not whole.endswith(b"\n")) and b"".join(tails).isascii():
            # every line ends in its `ts` (all canonical): the bounds at C speed
            lo, hi = min(tails).decode(), max(tails).decode()
            ts_min = lo if ts_min is None or lo < ts_min else ts_min
            ts_max = hi if ts_max is None or hi > ts_max else ts_max
            continue
        for line in whole.split(b"\n"):
            if not line:
                continue
            m = _TS_TAIL.search(line, max(0, len(line) - 80))
            if m is not None:
                ts = m.group(1).decode("utf-8", "surrogateescape")
            else:
                try:
                    entry = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if not isinstance(entry, dict):
                    continue
                got = entry.get("ts")
                ts = got if isinstance(got, str) else ""
            if ts_min is None or ts < ts_min:
                ts_min = ts
            if ts_max is None or ts > ts_max:
                ts_max = ts
    return SessionSummary({k: sorted(v) for k, v in values.items()}, ts_min, ts_max)


def session_summary(path: Path, fd: int | None = None) -> SessionSummary:
    """The summary of the session file at `path`: from the user's cache when its stamp is the file's as it is
    now (checked on the descriptor read), else built from the file and saved (a cache that cannot be written
    only costs time). `fd`: the file as the caller opened it (inside the vault: journal/confine.py), read at
    its offsets and left open; without one `path` is opened here."""
    own = fd is None
    fd = open_regular(path) if fd is None else fd
    try:
        st = os.fstat(fd)
        cpath = _cache_path(path, st)
        stamp = _stamp(st)
        try:
            saved = orjson.loads(cpath.read_bytes())
            if saved.get("version") == _VERSION and saved.get("stamp") == stamp:
                return SessionSummary(saved["values"], saved["ts_min"], saved["ts_max"])
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            pass
        summary = _build(fd)
        after = os.fstat(fd)
    finally:
        if own:
            os.close(fd)
    if _stamp(after) == stamp:  # the file did not change while it was read: the summary is of `stamp`
        _save(cpath, {"version": _VERSION, "stamp": stamp, "values": summary.values,
                      "ts_min": summary.ts_min, "ts_max": summary.ts_max})
    return summary


def _save(cpath: Path, value: dict) -> None:
    try:
        cpath.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = cpath.with_name(f"{cpath.name}.{os.getpid()}.tmp")
        tmp.write_bytes(orjson.dumps(value))
        os.replace(tmp, cpath)
    except OSError:
        pass
