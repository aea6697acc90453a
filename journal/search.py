"""Search entries across a vault's sessions: every filter must hold (AND).

Filters (`Query`): exact `connector`, `effect`, `capture`, `answered_by`, `agent`, `principal`,
`session`; `status` as a number (`404`), a class (`4xx`) or `none` (no status: the call got no
answer); `since` / `until` as a UTC time or a prefix of one (`2026-09-22`, `2026-09-22T10`), both
inclusive at the precision given; `url` a substring of the request URL; `text` a substring of the
request or response body (JSON bodies are searched in their canonical JSON text, so keys and values
both match; base64 bodies and spilled blobs are not searched), ASCII letters matched without case.

How it stays fast on a large vault without an index: each line is canonical JSON, so a value the
query asks for appears in the line's bytes in one known spelling (`"connector":"gmail"`), and
`ts`, the last top-level key, ends the line. Lines without every such spelling, or outside the
time window, are skipped unparsed; only the rest are parsed and checked exactly. A session whose
summary (journal/search_summary.py, in the user's cache) says it cannot match is not read; on PostgreSQL the
store's facet indexes name each session's candidate rows instead (journal/store/postgres_search.py). Search reads
the files as they are on disk and does not verify them: `broker verify` says whether to trust what it finds.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import BinaryIO

import orjson

from journal.canonical import canonical_bytes
from journal.errors import InputError
from journal.reader import RowSource
from journal.search_summary import session_summary
from journal.store.postgres_search import Facets
from journal.vault import Vault

_STATUS_RE = re.compile(r"(?:[1-5][0-9]{2}|[1-5]xx|none)\Z")
_LOWER = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz")
_EXACT_TOP = ("connector", "effect", "capture", "agent", "principal", "session")


@dataclass(frozen=True)
class Query:
    connector: str | None = None
    effect: str | None = None
    capture: str | None = None
    status: str | None = None
    answered_by: str | None = None
    agent: str | None = None
    principal: str | None = None
    session: str | None = None
    since: str | None = None
    until: str | None = None
    url: str | None = None
    text: str | None = None

    def __post_init__(self) -> None:
        if self.status is not None and not _STATUS_RE.match(self.status):
            raise InputError(f"status {self.status!r}: give a code (404), a class (4xx) or none")

    @classmethod
    def from_mapping(cls, values: dict) -> Query:
        """A query from a mapping (CLI options, URL parameters); empty values mean no filter."""
        names = {f.name for f in fields(cls)}
        unknown = set(values) - names
        if unknown:
            raise InputError(f"unknown search filter(s): {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(sorted(names))}")
        return cls(**{k: (str(v) if v not in (None, "") else None) for k, v in values.items()})


@dataclass(frozen=True)
class Match:
    session: str
    line: int  # 1-based position in the session file
    raw: bytes  # the line as recorded, without its newline
    entry: dict


def _ascii_lower(s: str) -> str:
    return s.translate(str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz"))


def _escaped(s: str) -> bytes:
    """`s` as it appears inside a canonical JSON string (without the quotes)."""
    return canonical_bytes(s)[1:-1]


class _Matcher:
    def __init__(self, q: Query) -> None:
        self.q = q
        need: list[bytes] = []  # byte strings every matching line holds
        for name in _EXACT_TOP:
            value = getattr(q, name)
            if value is not None:
                need.append(b'"' + name.encode() + b'":' + canonical_bytes(value))
        if q.answered_by is not None:
            need.append(b'"answered_by":' + canonical_bytes(q.answered_by))
        if q.status is not None and q.status.isdigit():
            need.append(b'"status":' + q.status.encode())
        if q.status == "none":
            need.append(b'"status":null')
        if q.url:
            need.append(_escaped(q.url))
        self.need = need
        self.since = q.since.encode() if q.since else None
        self.until = q.until.encode() if q.until else None
        self.text = _ascii_lower(q.text) if q.text else None
        # A string body holds the needle escaped; a JSON body's canonical text holds it as it is.
        self.text_bytes = (_escaped(self.text), self.text.encode()) if self.text else None

    def anchor(self) -> tuple[bytes, bool] | None:
        """A byte string every matching line holds, to search whole blocks for (and whether it is to be
        found in the ASCII-lowered bytes); the longest such, as the likeliest to be rare."""
        options = [(n, False) for n in self.need]
        if self.text_bytes is not None and self.text_bytes[0] == self.text_bytes[1]:
            options.append((self.text_bytes[0], True))
        return max(options, key=lambda o: len(o[0])) if options else None

    def maybe(self, line: bytes) -> bool:
        for n in self.need:
            if n not in line:
                return False
        if self.since is not None or self.until is not None:
            # `ts` sorts last among the top-level keys, so a canonical line ends with it. Only a ts of exactly
            # 24 bytes (its closing quote next) is compared: a longer one's first 24 bytes can fall below a
            # `since` longer than them while the whole ts does not (`holds` decides for it).
            at = line.rfind(b',"ts":"')
            ts = line[at + 7 : at + 32] if at >= 0 else b""
            if len(ts) == 25 and ts.endswith(b'Z"'):
                ts = ts[:24]
                if self.since is not None and ts[: len(self.since)] < self.since:
                    return False
                if self.until is not None and ts[: len(self.until)] > self.until:
                    return False
        if self.text_bytes is None:
            return True
        lowered = line.translate(_LOWER)
        return self.text_bytes[0] in lowered or self.text_bytes[1] in lowered

    def holds(self, e: dict) -> bool:
        q = self.q
        for name in _EXACT_TOP:
            want = getattr(q, name)
            if want is not None and e.get(name) != want:
                return False
        req = got if isinstance(got := e.get("request"), dict) else {}
        resp = got if isinstance(got := e.get("response"), dict) else {}
        if q.answered_by is not None and resp.get("answered_by") != q.answered_by:
            return False
        if q.status is not None and not _status_holds(q.status, resp.get("status")):
            return False
        ts = got if isinstance(got := e.get("ts"), str) else ""
        if q.since is not None and ts[: len(q.since)] < q.since:
            return False
        if q.until is not None and ts[: len(q.until)] > q.until:
            return False
        if q.url and q.url not in str(req.get("url", "")):
            return False
        if self.text is not None:
            return _body_has(req.get("body"), self.text) or _body_has(resp.get("body"), self.text)
        return True


def _status_holds(want: str, status: object) -> bool:
    if want == "none":
        return status is None
    if not isinstance(status, int) or isinstance(status, bool):
        return False
    if want.endswith("xx"):
        return status // 100 == int(want[0])
    return status == int(want)


def _body_has(body: object, needle: str) -> bool:
    if body is None:
        return False
    if isinstance(body, dict) and set(body) == {"base64"}:
        return False
    text = body if isinstance(body, str) else orjson.dumps(body, option=orjson.OPT_SORT_KEYS).decode()
    return needle in _ascii_lower(text)


_BLOCK = 8 << 20


def _candidates(f: BinaryIO, matcher: _Matcher) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line bytes with its newline, if any) of every line of the session file `f` (open at
    its start) that `matcher.maybe` lets through.

    With a needle every match must hold, whole blocks are searched for it at C speed (bytes.find)
    and only the lines around its hits are looked at; newlines are counted, not split."""
    anchor = matcher.anchor()
    if anchor is None:
        for index, line in enumerate(f, 1):
            if matcher.maybe(line):
                yield index, line
        return
    needle, lowered = anchor
    line_no = 1  # number of the line that starts at offset 0 of `buf`
    rest = b""
    while True:
        block = f.read(_BLOCK)
        buf = rest + block if rest else block
        if not buf:
            return
        end = buf.rfind(b"\n") + 1 if block else len(buf)  # whole lines only, until the file ends
        if end == 0:
            rest = buf
            continue
        hay = buf.translate(_LOWER) if lowered else buf
        counted = 0  # offset up to which newlines are counted into line_no
        at = hay.find(needle, 0, end)
        while at >= 0:
            start = buf.rfind(b"\n", 0, at) + 1
            stop = buf.find(b"\n", at)
            stop = end if stop < 0 or stop >= end else stop + 1
            line_no += buf.count(b"\n", counted, start)
            counted = start
            line = buf[start:stop]
            if matcher.maybe(line):
                yield line_no, line
            at = hay.find(needle, stop, end)
        line_no += buf.count(b"\n", counted, end)
        rest = buf[end:]
        if not block:
            return


def _facets(q: Query) -> Facets:
    """What a PostgreSQL store's facet indexes can narrow `q` by (journal/store/postgres_search.py): the
    connector, effect and agent asked for, and the time range as bytes of UTF-8, whose order is str's: ts[:k] >=
    since exactly when ts >= since, and ts[:k] <= until exactly when ts < `until` with its last byte raised by one
    (no UTF-8 byte is 0xff). Empty when a value cannot be encoded (no recorded line holds it then)."""
    try:
        equal = {k: getattr(q, k).encode() for k in ("connector", "effect", "agent") if getattr(q, k) is not None}
        since = q.since.encode() if q.since else None
        until = q.until.encode() if q.until else None
    except UnicodeEncodeError:
        return Facets()
    before = until[:-1] + bytes([until[-1] + 1]) if until else None
    return Facets(equal, since, before)


def _row_candidates(vault: RowSource, session: str, matcher: _Matcher,
                    skipped: list[tuple[str, str]] | None = None) -> Iterator[tuple[int, bytes]]:
    """(seq, line) of a database session's rows that may match: the rows the store's facet indexes leave as
    candidates (a session with none is not read), else (no indexed filter, or indexes not to be trusted) every
    row of the session, filtered on the server by the spellings the query needs (position() in each line); then
    `matcher.maybe` as for a file's lines."""
    store = vault.store  # type: ignore[attr-defined]
    facets = _facets(matcher.q)
    seqs = store.facet_candidates(session, facets) if facets else None
    if seqs is not None and not seqs:
        if skipped is not None:
            skipped.append((session, "no candidate row in the store's search index"))
        return
    rows = store.matching_lines(session, matcher.need) if seqs is None else \
        store.candidate_lines(session, seqs, matcher.need)
    for seq, line in rows:
        if matcher.maybe(line):
            yield seq, line


_SUMMARIZED = ("connector", "effect", "agent", "since", "until")


def search(vault: Vault, query: Query, skipped: list[tuple[str, str]] | None = None) -> Iterator[Match]:
    """Every entry that matches `query`, session by session (sorted by file name), in file order.

    In a file vault, a query by connector, effect, agent or time first asks each session's summary
    (journal/search_summary.py: kept in the user's cache, checked against the file's stamp) and does not read
    a session that cannot match; `skipped` gets (session, why) for each. A database store asks its facet indexes
    for a session's candidate rows instead, or filters every row on the server (`_row_candidates`)."""
    matcher = _Matcher(query)
    sessions = [query.session] if query.session is not None else vault.sessions()
    summarize = not isinstance(vault, RowSource) and any(getattr(query, k) is not None for k in _SUMMARIZED)
    for session in sessions:
        if isinstance(vault, RowSource):
            vault.require_session(session)
            yield from _matches(session, _row_candidates(vault, session, matcher, skipped), matcher)
            continue
        # The file is opened once inside the vault (journal/confine.py) and that descriptor is read: a check and
        # then an open by path would read whatever the vault's writer put there in between (a symlink, a FIFO).
        with os.fdopen(vault.open_session(session), "rb") as f:
            if summarize:
                why = session_summary(vault.session_path(session), f.fileno()).cannot_match(query)
                if why is not None:
                    if skipped is not None:
                        skipped.append((session, why))
                    continue
            yield from _matches(session, _candidates(f, matcher), matcher)


def _matches(session: str, found: Iterator[tuple[int, bytes]], matcher: _Matcher) -> Iterator[Match]:
    """The candidate lines that parse to an entry the query holds for."""
    for index, line in found:
        raw = line[:-1] if line.endswith(b"\n") else line
        try:
            entry = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(entry, dict) and matcher.holds(entry):
            yield Match(session, index, raw, entry)
