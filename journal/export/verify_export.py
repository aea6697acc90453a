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
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import orjson

from journal.chain import GENESIS
from journal.errors import InputError


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


def _ocsf(data: bytes) -> tuple[list[Link], str | None]:
    links: list[Link] = []
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        where = f"line {n}"
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            return links, f"{where}: not JSON"
        if not isinstance(event, dict) or event.get("class_uid") != 6003:
            return links, f"{where}: not an OCSF API Activity event (class_uid 6003)"
        if problem := _ocsf_problem(where, event):
            return links, problem
        b = event["unmapped"]["broker"]
        links.append(Link(where, str(b.get("session")), b.get("seq"), b.get("hash"), b.get("prev"),
                          b.get("session_entries"), b.get("session_head")))
    return links, None


def _har_link(links: list[Link], where: str, item: object, session: str, last: int, what: str,
              ) -> tuple[int, str | None]:
    """Read one HAR entry's or WebSocket message's `_journal` into `links`: (the last seq now, the
    problem or None). HAR nests a WebSocket's messages in their handshake's entry, so `_har` sorts the
    links by seq for `check_links`; the order as the file has it (each seq above `last`) is checked
    here, before the sort would hide a reordered or repeated event."""
    j = item.get("_journal") if isinstance(item, dict) else None
    if not isinstance(j, dict):
        return last, f"{where}: no _journal{what}"
    seq = j.get("seq")
    if type(seq) is int and seq <= last:
        return last, f"{where}: seq {seq} after seq {last}: reordered or repeated"
    links.append(Link(where, session, seq, j.get("hash"), j.get("prev")))
    return (seq if type(seq) is int else last), None


def _har(doc: dict) -> tuple[list[Link], str | None]:
    log = doc["log"]
    session = str(log.get("_session"))
    head = log.get("_sessionHead") if isinstance(log.get("_sessionHead"), dict) else {}
    links: list[Link] = []
    last_top = 0
    for n, e in enumerate(log.get("entries") or [], 1):
        last_top, problem = _har_link(links, f"entry {n}", e, session, last_top,
                                      ": not an entry `broker export --format har` wrote")
        if problem:
            return links, problem
        last_msg = last_top if type(links[-1].seq) is int else 0
        for m, msg in enumerate(e.get("_webSocketMessages") or [], 1):
            last_msg, problem = _har_link(links, f"entry {n} message {m}", msg, session, last_msg, "")
            if problem:
                return links, problem
    links.sort(key=lambda k: k.seq if type(k.seq) is int else 0)  # messages sit inside their handshake's entry
    if links and head:
        links[-1].entries, links[-1].head = head.get("entries"), head.get("head")
    return links, None


def _otel(doc: dict) -> tuple[list[Link], str | None]:
    def attrs(span: dict) -> dict:
        out = {}
        for a in span.get("attributes") or []:
            value = a.get("value") or {}
            v = value.get("stringValue", value.get("intValue"))
            out[a.get("key")] = int(v) if "intValue" in value and isinstance(v, str) and v.lstrip("-").isdigit() else v
        return out

    links: list[Link] = []
    n = 0
    for rs in doc.get("resourceSpans") or []:
        for ss in rs.get("scopeSpans") or []:
            root: dict = {}
            for span in ss.get("spans") or []:
                n += 1
                a = attrs(span)
                if "broker.entries" in a:  # the session span
                    root = a
                    continue
                if "broker.entry.seq" not in a:
                    return links, f"span {n}: no broker.entry.seq: not a span `broker export --format otel` wrote"
                links.append(Link(f"span {n}", str(a.get("broker.session")), a.get("broker.entry.seq"),
                                  a.get("broker.entry.hash"), a.get("broker.entry.prev")))
            if links and root:
                links[-1].entries, links[-1].head = root.get("broker.entries"), root.get("broker.session.head")
    return links, None


def check_links(links: list[Link]) -> str | None:
    """The first break in the chains the links state (per session, in order), or None."""
    last: dict[str, tuple[int, object]] = {}
    seen: dict[str, set] = {}
    final: dict[str, Link] = {}
    later = {(k.session, k.seq) for k in links}  # a missing seq that comes later was moved, not dropped
    for k in links:
        if type(k.seq) is not int or not isinstance(k.hash, str) or not isinstance(k.prev, str):
            return f"{k.where}: session {k.session}: no seq, hash and prev"
        before_seq, before_hash = last.get(k.session, (0, GENESIS))
        hashes = seen.setdefault(k.session, set())
        if k.hash in hashes:
            return f"{k.where}: session {k.session} seq {k.seq}: repeated (this event is in the file twice)"
        if k.seq <= before_seq:
            return f"{k.where}: session {k.session} seq {k.seq} after seq {before_seq}: reordered"
        if k.seq != before_seq + 1 and (k.session, before_seq + 1) in later:
            return f"{k.where}: session {k.session} seq {k.seq} before seq {before_seq + 1}: reordered"
        if k.seq != before_seq + 1:
            missing = f"seq {before_seq + 1}" if k.seq == before_seq + 2 else f"seq {before_seq + 1}..{k.seq - 1}"
            return f"{k.where}: session {k.session} seq {k.seq}: dropped: {missing} missing before it"
        if k.prev != before_hash:
            return f"{k.where}: session {k.session} seq {k.seq}: prev is not the hash of seq {before_seq}: altered"
        last[k.session] = (k.seq, k.hash)
        hashes.add(k.hash)
        final[k.session] = k
    stated_by: dict[str, Link] = {}
    for x in links:
        if x.entries is None and x.head is None:
            continue
        first = stated_by.setdefault(x.session, x)
        if (x.entries, x.head) != (first.entries, first.head):
            return (f"{x.where}: session {x.session} seq {x.seq}: states {x.entries} entries and head {x.head}, "
                    f"{first.where} stated {first.entries} and {first.head}: altered")
    for session, k in final.items():
        stated = stated_by.get(session)
        if stated is not None and (stated.entries != k.seq or stated.head != k.hash):
            return (f"{k.where}: session {session} ends at seq {k.seq} but the export held {stated.entries} "
                    "entries: dropped at the end")
    return None


def verify_export(path: str | Path) -> Verdict:
    """Check the chains in the export at `path` (see the module docstring)."""
    data = Path(path).read_bytes()
    doc: object = None
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    if isinstance(doc, dict) and isinstance(doc.get("log"), dict):
        fmt, read = "har", lambda: _har(doc)  # type: ignore[arg-type]
    elif isinstance(doc, dict) and isinstance(doc.get("resourceSpans"), list):
        fmt, read = "otel", lambda: _otel(doc)  # type: ignore[arg-type]
    elif isinstance(doc, dict) and doc.get("class_uid") is not None or doc is None:
        fmt, read = "ocsf", lambda: _ocsf(data)
    else:
        raise ExportUnreadable(f"{path} is not an OCSF JSON-lines, HAR or OTLP/JSON export of `broker export`")
    try:
        links, problem = read()
    except (AttributeError, TypeError, KeyError, ValueError) as exc:  # a value of the wrong JSON type
        return Verdict(fmt, 0, 0, f"malformed: not as `broker export --format {fmt}` writes it ({exc!r:.200})")
    if problem is None:
        problem = check_links(links)
    if problem is None and not links:
        problem = "no events: nothing to verify"
    return Verdict(fmt, len(links), len({k.session for k in links}), problem)
