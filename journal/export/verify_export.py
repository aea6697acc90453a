"""Re-check the hash chain inside an export (OCSF JSON lines, HAR, OTLP/JSON), without the vault.

A copy of an export kept elsewhere (a SIEM, a ticket) can lose, reorder, repeat or change events on
the way. Every export carries each entry's `seq`, `hash` and `prev`, and what the session held
(entries and head), so the copy alone shows it:

- per session, in file order, seq must run 1, 2, 3, ... and each `prev` must be the hash before it
  (seq 1: 64 zeros): a gap is a dropped event, a seq not above the last one a reordered or repeated
  one; the last seq and hash must be the session's entries and head (the tail was not cut);
- OCSF events also carry the entry itself (`raw_data`, the bytes the hash is computed over): its
  SHA-256 must be the hash, its `seq`/`prev` must be the event's, and the event must equal the event
  rebuilt from it, so an altered event is caught whichever field was changed;
- HAR and OTLP carry the chain fields, not the entries (their bodies are transformed for their
  readers), so they catch drops, reordering and repeats, and a change to the chain fields.

The first bad event is named (its line or position, session and seq).

Memory is bounded whatever the size of the export (issue 26): OCSF is read a line at a time, HAR and OTLP
a value at a time (journal/export/json_walk.py: an entry or a span, never the document), and the links
go to a private temporary SQLite file (`LinkTable`) where the chain is checked in one ordered pass,
with what needs the whole file (was a missing seq moved or dropped, was a hash met before) asked of
the table's indexes rather than held in sets.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import orjson

from journal.chain import GENESIS
from journal.errors import InputError
from journal.export.json_walk import JsonWalk, NotJson


class ExportUnreadable(InputError):
    """The file is not an export `broker export` writes (OCSF JSON lines, HAR or OTLP/JSON)."""


@dataclass
class Link:
    """One event's place in its chain, as the export states it."""

    where: str  # "line 3", "entry 2", "span 4": how a reader finds the event in the file
    session: str
    seq: object
    hash: object
    prev: object
    entries: object = None  # the session's entry count when exported, when the event says
    head: object = None  # the session's last hash when exported, when the event says


@dataclass
class Verdict:
    format: str
    events: int
    sessions: int
    problem: str | None  # None: every chain intact

    @property
    def ok(self) -> bool:
        return self.problem is None


def _obj(value: object) -> dict:
    """A JSON object of the file, or {} for anything else (the file may be hostile: no exception)."""
    return value if isinstance(value, dict) else {}


def _ocsf_problem(where: str, event: dict) -> str | None:
    """What is wrong with one OCSF event on its own (its raw_data against its hash and fields), or None."""
    from journal.export.ocsf import ocsf_event

    raw = event.get("raw_data")
    broker = _obj(_obj(event.get("unmapped")).get("broker"))
    if not isinstance(raw, str) or not broker:
        return f"{where}: no raw_data or unmapped.broker: not an event `broker export --format ocsf` wrote"
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()
    if digest != broker.get("hash") or digest != _obj(event.get("raw_data_hash")).get("value"):
        return f"{where}: altered: raw_data does not hash to the event's hash (seq {broker.get('seq')})"
    try:
        entry = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return f"{where}: altered: raw_data is not JSON (seq {broker.get('seq')})"
    if not isinstance(entry, dict):
        return f"{where}: altered: raw_data is not an entry (seq {broker.get('seq')})"
    entry["hash"] = digest
    product = _obj(_obj(event.get("metadata")).get("product")).get("version")
    try:
        rebuilt = ocsf_event(entry, session_entries=broker.get("session_entries"),  # type: ignore[arg-type]
                             session_head=broker.get("session_head"), product_version=str(product))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return f"{where}: altered: raw_data is not an entry the export can map ({exc}; seq {broker.get('seq')})"
    if rebuilt != event:
        changed = sorted(k for k in set(rebuilt) | set(event) if rebuilt.get(k) != event.get(k))
        return f"{where}: altered: {', '.join(changed)} differ from the entry in raw_data (seq {broker.get('seq')})"
    return None


class LinkTable:
    """The links of an export in a private temporary SQLite file (gone when closed), in the order they are
    checked in: as read (OCSF, OTLP), or by seq (HAR, whose WebSocket messages sit inside their handshake's
    entry). Memory: SQLite's page cache, not the links."""

    _PAGE = 2048

    def __init__(self) -> None:
        self.db = sqlite3.connect("")
        self.db.execute("CREATE TABLE links (pos INTEGER PRIMARY KEY, place TEXT, session TEXT, seq BLOB, "
                        "seqkey INTEGER, hash BLOB, hashstr TEXT, prev BLOB, entries BLOB, head BLOB)")
        self.count = 0
        self._seq_index = False

    def add(self, link: Link) -> None:
        key = link.seq if type(link.seq) is int and -(1 << 63) <= link.seq < (1 << 63) else 0
        self.db.execute("INSERT INTO links VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?)", (
            link.where, link.session, orjson.dumps(link.seq), key, orjson.dumps(link.hash),
            link.hash if isinstance(link.hash, str) else None, orjson.dumps(link.prev),
            orjson.dumps(link.entries), orjson.dumps(link.head)))
        self.count += 1

    def state_last(self, entries: object, head: object) -> None:
        """Set what the session held (entries, head) on the last link added."""
        self.db.execute("UPDATE links SET entries = ?, head = ? WHERE pos = (SELECT MAX(pos) FROM links)",
                        (orjson.dumps(entries), orjson.dumps(head)))

    def set_session(self, session: str) -> None:
        self.db.execute("UPDATE links SET session = ?", (session,))

    def sort_by_seq(self) -> None:
        """Put the links in seq order (a seq that is no integer first, as 0), ties as read."""
        self.db.execute("CREATE TABLE sorted AS SELECT ROW_NUMBER() OVER (ORDER BY seqkey, pos) AS rank, place, "
                        "session, seq, seqkey, hash, hashstr, prev, entries, head FROM links")
        self.db.execute("DELETE FROM links")
        self.db.execute("INSERT INTO links SELECT * FROM sorted")
        self.db.execute("DROP TABLE sorted")

    def sessions(self) -> int:
        return int(self.db.execute("SELECT COUNT(DISTINCT session) FROM links").fetchone()[0])

    def __iter__(self) -> Iterator[tuple[int, Link]]:
        last = 0
        while True:
            page = self.db.execute("SELECT pos, place, session, seq, hash, prev, entries, head FROM links "
                                   "WHERE pos > ? ORDER BY pos LIMIT ?", (last, self._PAGE)).fetchall()
            if not page:
                return
            for pos, place, session, seq, h, prev, entries, head in page:
                yield pos, Link(place, session, orjson.loads(seq), orjson.loads(h), orjson.loads(prev),
                                orjson.loads(entries), orjson.loads(head))
            last = page[-1][0]

    def has_seq(self, session: str, seq: int) -> bool:
        """Whether any link of the session (anywhere in the file) has this seq."""
        if not self._seq_index:
            self.db.execute("CREATE INDEX seq_of ON links (session, seqkey)")
            self._seq_index = True
        return self.db.execute("SELECT 1 FROM links WHERE session = ? AND seqkey = ? AND seq = ? LIMIT 1",
                               (session, seq, orjson.dumps(seq))).fetchone() is not None

    def first_repeat(self) -> int | None:
        """The position of the first link whose hash (a string) an earlier link of its session has."""
        self.db.execute("CREATE INDEX hash_of ON links (session, hashstr, pos)")
        row = self.db.execute(
            "SELECT MIN(b.pos) FROM links b WHERE b.hashstr IS NOT NULL AND EXISTS (SELECT 1 FROM links a "
            "WHERE a.session = b.session AND a.hashstr = b.hashstr AND a.pos < b.pos)").fetchone()
        return row[0] if row and row[0] is not None else None

    def close(self) -> None:
        self.db.close()


def _ocsf(f: BinaryIO, table: LinkTable) -> str | None:
    """Read OCSF JSON lines a line at a time (numbered as bytes.splitlines numbers them)."""
    n = 0
    for physical in f:
        pieces = physical.splitlines()
        for i, line in enumerate(pieces):
            n += 1
            if not line.strip():
                continue
            where = f"line {n}"
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError:
                if i == len(pieces) - 1 and not physical.endswith((b"\n", b"\r")):  # no line end: the last line
                    return f"{where}: not JSON, and the file ends inside it without a line end: cut short"
                return f"{where}: not JSON"
            if not isinstance(event, dict) or event.get("class_uid") != 6003:
                return f"{where}: not an OCSF API Activity event (class_uid 6003)"
            if problem := _ocsf_problem(where, event):
                return problem
            b = event["unmapped"]["broker"]
            table.add(Link(where, str(b.get("session")), b.get("seq"), b.get("hash"), b.get("prev"),
                           b.get("session_entries"), b.get("session_head")))
    return None


def _har_link(table: LinkTable, where: str, item: object, last: int, what: str) -> int:
    """Check one HAR entry's or WebSocket message's `_journal` (present, its seq above `last`: in file
    order) and add its link; the seq to compare the next one with. Raises _Problem."""
    j = item.get("_journal") if isinstance(item, dict) else None
    if not isinstance(j, dict):
        raise _Problem(f"{where}: no _journal{what}")
    seq = j.get("seq")
    if type(seq) is int and seq <= last:
        raise _Problem(f"{where}: seq {seq} after seq {last}: reordered or repeated")
    table.add(Link(where, "", seq, j.get("hash"), j.get("prev")))
    return seq if type(seq) is int else last


def _har_entry(n: int, e: object, messages: Iterable[object] | None, table: LinkTable, last_top: int) -> int:
    """Check and add one HAR entry and its WebSocket messages (from the entry, or walked: `messages`);
    the entry's seq for the next one. Raises _Problem."""
    top = _har_link(table, f"entry {n}", e, last_top, ": not an entry `broker export --format har` wrote")
    last_msg = top if top != last_top else 0
    for m, msg in enumerate((e.get("_webSocketMessages") or []) if messages is None else messages, 1):  # type: ignore[attr-defined]
        last_msg = _har_link(table, f"entry {n} message {m}", msg, last_msg, "")
    return top


class _Problem(Exception):
    """The first thing wrong with the export, found while reading it."""


def _big_har_entry(walk: JsonWalk, n: int, table: LinkTable, last_top: int) -> int:
    """An entry too big to hold (a WebSocket connection's messages): its members walked, its messages one at
    a time. Messages ahead of the entry's `_journal` (no export writes them so) are held until it comes."""
    journal: object = None
    held: list[object] = []
    seen_messages = False

    def messages() -> Iterator[object]:
        for _ in walk.elements():
            yield walk.value()

    for key in walk.members():
        if key == "_journal":
            journal = walk.value()
        elif key == "_webSocketMessages" and walk.peek() == b"[":
            seen_messages = True
            if journal is None:
                held = list(messages())
            else:
                last_top = _har_entry(n, {"_journal": journal}, messages(), table, last_top)
                journal = None
        else:
            walk.skip()
    if journal is not None or not seen_messages:
        return _har_entry(n, {"_journal": journal}, held, table, last_top)
    return last_top


def _har(walk: JsonWalk, occurrence: int, table: LinkTable) -> str | None:
    """Read a HAR's entries a value at a time (the `occurrence`-th top-level "log": the one a parser keeps)."""
    session: object = None
    head: object = {}
    seen = 0
    for key in walk.members():
        if key != "log" or (seen := seen + 1) != occurrence:
            walk.skip()
            continue
        for member in walk.members():
            if member == "entries" and walk.peek() == b"[":
                last_top = 0
                for n in walk.elements():
                    small, e = walk.small_value()
                    try:
                        last_top = (_har_entry(n + 1, e, None, table, last_top) if small or walk.peek() != b"{"
                                    else _big_har_entry(walk, n + 1, table, last_top))
                    except _Problem as problem:
                        return str(problem)
            elif member == "entries":
                value = walk.value()
                last_top = 0
                try:
                    for n, e in enumerate(value or [], 1):  # type: ignore[arg-type]
                        last_top = _har_entry(n, e, None, table, last_top)
                except _Problem as problem:
                    return str(problem)
            elif member == "_session":
                session = walk.value()
            elif member == "_sessionHead":
                got = walk.value()
                head = got if isinstance(got, dict) else {}
            else:
                walk.skip()
    table.set_session(str(session))
    table.sort_by_seq()  # messages sit inside their handshake's entry
    if table.count and head:
        table.state_last(head.get("entries"), head.get("head"))  # type: ignore[attr-defined]
    return None


def _span_attrs(span: object) -> dict:
    out = {}
    for a in span.get("attributes") or []:  # type: ignore[attr-defined]
        value = a.get("value") or {}
        v = value.get("stringValue", value.get("intValue"))
        out[a.get("key")] = int(v) if "intValue" in value and isinstance(v, str) and v.lstrip("-").isdigit() else v
    return out


class _OtelRead:
    """The spans of an OTLP/JSON document, a span at a time, into the table."""

    def __init__(self, walk: JsonWalk, table: LinkTable) -> None:
        self.walk, self.table, self.n = walk, table, 0

    def _each(self) -> Iterator[JsonWalk | object]:
        """The elements of the array here: the walk positioned at each, or the values of a non-array
        (iterated as the old reader iterated any value: `value or []`)."""
        if self.walk.peek() == b"[":
            for _ in self.walk.elements():
                yield self.walk
        else:
            yield from (self.walk.value() or [])  # type: ignore[misc]

    def _members(self, element: JsonWalk | object, wanted: str) -> Iterator[None]:
        """Position the walk at the `wanted` member of the object here (skipping the others)."""
        if element is not self.walk:
            raise AttributeError(f"{type(element).__name__!r} object has no attribute 'get'")
        if self.walk.peek() != b"{":
            value = self.walk.value()
            raise AttributeError(f"{type(value).__name__!r} object has no attribute 'get'")
        for key in self.walk.members():
            if key == wanted:
                yield None
            else:
                self.walk.skip()

    def span(self, span: object, root: dict) -> str | None:
        self.n += 1
        a = _span_attrs(span)
        if "broker.entries" in a:  # the session span
            root.clear()
            root.update(a)
            return None
        if "broker.entry.seq" not in a:
            return f"span {self.n}: no broker.entry.seq: not a span `broker export --format otel` wrote"
        self.table.add(Link(f"span {self.n}", str(a.get("broker.session")), a.get("broker.entry.seq"),
                            a.get("broker.entry.hash"), a.get("broker.entry.prev")))
        return None

    def read(self, occurrence: int) -> str | None:
        seen = 0
        for key in self.walk.members():
            if key != "resourceSpans" or (seen := seen + 1) != occurrence:
                self.walk.skip()
                continue
            for rs in self._each():
                for _ in self._members(rs, "scopeSpans"):
                    for ss in self._each():
                        root: dict = {}
                        for _ in self._members(ss, "spans"):
                            for span in self._each():
                                value = self.walk.value() if span is self.walk else span
                                if problem := self.span(value, root):
                                    return problem
                        if self.table.count and root:
                            self.table.state_last(root.get("broker.entries"), root.get("broker.session.head"))
        return None


def _check(table: LinkTable) -> str | None:
    last: dict[str, tuple[int, object]] = {}
    final: dict[str, Link] = {}
    stated_by: dict[str, Link] = {}
    stated_problem: str | None = None
    repeat = table.first_repeat()
    for pos, k in table:
        if type(k.seq) is not int or not isinstance(k.hash, str) or not isinstance(k.prev, str):
            return f"{k.where}: session {k.session}: no seq, hash and prev"
        before_seq, before_hash = last.get(k.session, (0, GENESIS))
        if pos == repeat:
            return f"{k.where}: session {k.session} seq {k.seq}: repeated (this event is in the file twice)"
        if k.seq <= before_seq:
            return f"{k.where}: session {k.session} seq {k.seq} after seq {before_seq}: reordered"
        if k.seq != before_seq + 1 and table.has_seq(k.session, before_seq + 1):
            return f"{k.where}: session {k.session} seq {k.seq} before seq {before_seq + 1}: reordered"
        if k.seq != before_seq + 1:
            missing = f"seq {before_seq + 1}" if k.seq == before_seq + 2 else f"seq {before_seq + 1}..{k.seq - 1}"
            return f"{k.where}: session {k.session} seq {k.seq}: dropped: {missing} missing before it"
        if k.prev != before_hash:
            return f"{k.where}: session {k.session} seq {k.seq}: prev is not the hash of seq {before_seq}: altered"
        last[k.session] = (k.seq, k.hash)
        final[k.session] = k
        if stated_problem is None and (k.entries is not None or k.head is not None):
            first = stated_by.setdefault(k.session, k)
            if (k.entries, k.head) != (first.entries, first.head):
                stated_problem = (f"{k.where}: session {k.session} seq {k.seq}: states {k.entries} entries and head "
                                  f"{k.head}, {first.where} stated {first.entries} and {first.head}: altered")
    if stated_problem is not None:
        return stated_problem
    for session, k in final.items():
        stated = stated_by.get(session)
        if stated is not None and (stated.entries != k.seq or stated.head != k.hash):
            return (f"{k.where}: session {session} ends at seq {k.seq} but the export held {stated.entries} "
                    "entries: dropped at the end")
    return None


_BEGINS_AS = {"har": 'a HAR (`{"log": {...`)', "otel": 'an OTLP/JSON export (`{"resourceSpans": [...`)'}


def _kind(path: Path) -> tuple[str | None, int, str | None]:
    """What the file is, as a parser of the whole file would see it: ("har"|"otel"|"ocsf", which occurrence
    of the key to read, None), (None, 0, None) for JSON that is no export. A file that begins as a HAR or an
    OTLP/JSON document (its first object opens "log" or "resourceSpans") but is not one whole JSON document
    is named so, with why, as the third value: it is not JSON lines. The file is walked, not held."""
    log = spans = class_uid = 0
    is_log = is_spans = has_class = False
    started: str | None = None  # "har" or "otel" once the first object opens a "log" object or "resourceSpans" array
    with open(path, "rb") as f:
        walk = JsonWalk(f)
        try:
            if walk.peek() != b"{":
                walk.skip()
                return (None, 0, None) if walk.at_end() else ("ocsf", 0, None)
            for key in walk.members():  # a key given twice: the last one counts, as for orjson
                if key == "log":
                    log += 1
                    is_log = walk.peek() == b"{"
                    started = started or ("har" if walk.peek() in (b"{", b"") else None)  # b"": cut there
                    walk.skip()
                elif key == "resourceSpans":
                    spans += 1
                    is_spans = walk.peek() == b"["
                    started = started or ("otel" if walk.peek() in (b"[", b"") else None)
                    walk.skip()
                elif key == "class_uid":
                    class_uid += 1
                    has_class = walk.value() is not None
                else:
                    walk.skip()
            if not walk.at_end():
                return "ocsf", 0, None
        except NotJson:
            if started is not None:  # a HAR or OTLP document cut short (or damaged), not JSON lines
                return started, 0, (f"not one complete JSON document: it begins as {_BEGINS_AS[started]} but is "
                                    "not JSON to its end, so it was cut short or damaged")
            return "ocsf", 0, None  # not one JSON document: JSON lines (or nothing readable)
    if is_log:
        return "har", log, None
    if is_spans:
        return "otel", spans, None
    return ("ocsf", 0, None) if has_class else (None, 0, None)


def verify_export(path: str | Path) -> Verdict:
    """Check the chains in the export at `path` (see the module docstring)."""
    path = Path(path)
    fmt, occurrence, cut = _kind(path)
    if fmt is None:
        raise ExportUnreadable(f"{path} is not an OCSF JSON-lines, HAR or OTLP/JSON export of `broker export`")
    if cut is not None:
        return Verdict(fmt, 0, 0, cut)
    table = LinkTable()
    try:
        with open(path, "rb") as f:
            try:
                if fmt == "har":
                    problem = _har(JsonWalk(f), occurrence, table)
                elif fmt == "otel":
                    problem = _OtelRead(JsonWalk(f), table).read(occurrence)
                else:
                    problem = _ocsf(f, table)
            except (AttributeError, TypeError, KeyError, ValueError) as exc:  # a value of the wrong JSON type
                return Verdict(fmt, 0, 0, f"malformed: not as `broker export --format {fmt}` writes it ({exc!r:.200})")
        if problem is None:
            problem = _check(table)
        if problem is None and not table.count:
            problem = "no events: nothing to verify"
        return Verdict(fmt, table.count, table.sessions(), problem)
    finally:
        table.close()
