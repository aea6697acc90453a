"""The replay engine: fold a session's entries, in seq order, into views of the resources touched.

One pass over the session file: entries come from the verifier (`verify_session(on_entry=...)`),
so the chain is checked while it is folded. When the chain breaks at seq N the verifier stops;
the engine then reads the rest of the file from the broken line on (block-wise, as the verifier
does) and folds those entries too, marked untrusted. Every output names the break.

Per entry: the connector module for `entry["connector"]` (`journal.replay.connectors`) says which
resources the call touched (`Touch`). The engine merges each touch's response-derived state into
the resource's view field by field, remembers which entry each field came from, and for every
write records the state before it (from earlier entries of the session; none means a blind
write), what the request intended, what the platform answered, and the differences; then it asks
the connector for the inverse and turns it into a revert-plan step.

Nothing here opens a blob: spilled values stay as references (the verifier streams each blob
once to check its hash).

One streaming pass, state bounded by what the session touched, not by its length: every resource is
folded in memory (its state as last seen, where each field came from, counters): the 65,536 touched most
recently as objects, updated in place; past that many the others serialized (about 400 bytes each, a fifth
of the object), thawed when touched again. Memory grows with the distinct resources only, and a touch costs a
dict lookup (at worst one orjson round trip), never a query, whatever the session's length. What the views list
per entry (the entry's views.json line, each touch, each write with its bodies, lifecycle marks) is
appended to the spill store (store.py) as it is folded and read back in key order when the views are
written, once, at the end. A fold for the revert plan alone (`views=False`: `broker revert-plan`, the
inspector's plan tab) keeps only the plan's steps: it writes no entry, touch or write rows at all.
With views, beside the verifier, the entries are folded by two processes, split by connector (split.py).
"""

from __future__ import annotations

import re
import sqlite3
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, cast
from urllib.parse import urlsplit

import orjson

from journal.chain import GENESIS, next_head
from journal.connectors._http import normalise_host, normalise_path, parse_query
from journal.errors import InputError
from journal.reader import RowSource, iter_lines, session_lines
from journal.vault import Vault
from journal.verify import SessionReport, verify_session

from . import collector, connectors, forked, split
from .connectors import generic
from .labels import PAGE, describe, link, note_name, resource_id, step_flags
from .model import (
    CREATED,
    GONE,
    READ,
    SIDE,
    WRITE,
    Call,
    Inverse,
    Key,
    Request,
    Touch,
    Write,
    as_dict,
    diff,
    json_value,
)
from .store import Store, dumps, sort_key

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

_BATCH = 1000
GRADES = ("broker", "gateway", "agent")
"""Capture grades, strongest first (docs/contract.md, evidence grade)."""
_RANK = {g: i for i, g in enumerate(GRADES)}
SPLIT = True
"""Fold with a partner process when views are wanted (split.py); tests switch it off to compare outputs."""
SEAL_KINDS = frozenset({"seal_mismatch", "seal_missing", "seal_rollback", "unsealed_tail", "session_missing"})
"""Breaks found after the verifying pass (a seal or checkpoint), at a seq the fold may already have passed."""


def weakest(grades: object) -> str | None:
    """The weakest capture grade among `grades` (an unknown grade counts as weaker than any known one)."""
    worst = None
    rank = -1
    for g in grades:  # type: ignore[attr-defined]
        r = _RANK.get(g, len(GRADES))
        if r > rank or (r == rank and r == len(GRADES) and g < worst):
            worst, rank = g, r
    return worst


@dataclass
class EntryRecord:
    """One line of the session file as replay saw it (for the timeline and views.json)."""

    pos: int
    seq: int | None
    ts: str
    connector: str
    effect: str
    capture: str
    method: str
    url: str
    status: int | None
    failure: str | None
    trusted: bool
    ops: list[str] = field(default_factory=list)
    resources: list[Key] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class PlanStep:
    """One step of the revert plan (see plan.py for its outputs)."""

    pos: int
    seq: int | None
    connector: str
    key: Key | None
    op: str
    revertible: bool
    blind: bool
    approximate: bool
    call: Request | None
    reason: str
    capture: str
    before_seqs: list[int]
    before_capture: list[str]
    trusted: bool
    number: int = 0  # its place in the plan (newest first), set when read back from the store

    def row(self) -> list:
        return [self.pos, self.seq, self.connector, list(self.key) if self.key is not None else None, self.op,
                self.revertible, self.blind, self.approximate, self.call.as_dict() if self.call is not None else None,
                self.reason, self.capture, self.before_seqs, self.before_capture, self.trusted]

    @classmethod
    def from_row(cls, row: list, number: int) -> PlanStep:
        key = tuple(row[3]) if row[3] is not None else None
        call = Request(**row[8]) if row[8] is not None else None
        return cls(row[0], row[1], row[2], key, row[4], row[5], row[6], row[7], call, row[9], row[10], row[11], row[12],
                   row[13], number=number)


_WRITE_FIELDS = ("seq", "op", "role", "method", "url", "status", "failure", "capture", "trusted", "created",
                 "lifecycle", "before", "before_seqs", "intended", "actual", "differences", "request_body",
                 "response_body")


@dataclass
class WriteRecord:
    """A write (or side effect) on one resource, with what it takes to judge and undo it. `fields` is its
    views.json object without `plan_step`; the step is named by its number and summarised."""

    fields: dict
    step: int | None  # the plan step's number (newest first), None: no step
    step_flags: str = ""
    step_reason: str = ""

    def __getattr__(self, name: str) -> object:  # w.before, w.op ... read the views.json fields
        if name == "pos":
            return self.fields["seq"]
        try:
            return self.__dict__["fields"][name]
        except KeyError:
            raise AttributeError(name) from None


class Touched(NamedTuple):
    """One entry that read or changed a resource (with what its note shows of that entry)."""

    pos: int
    role: str
    op: str
    ok: bool
    capture: str
    ts: str
    failure: str | None
    trusted: bool


@dataclass
class Resource:
    """A resource's view as read back from the store."""

    key: Key
    handler: str
    state: dict = field(default_factory=dict)
    sources: dict[str, int] = field(default_factory=dict)  # field -> pos of the entry it came from
    observed: bool = False
    touches: list[Touched] = field(default_factory=list)
    writes: list[WriteRecord] = field(default_factory=list)
    lifecycle: list[tuple[int, str]] = field(default_factory=list)
    parent: Key | None = None
    title: str | None = None
    untrusted_from: int | None = None
    description: str | None = None
    name: str = ""
    reads: int = 0
    n_writes: int = 0
    weakest: str | None = None
    last_lifecycle: tuple[int, str] | None = None

    @property
    def connector(self) -> str:
        return self.key[0]

    @property
    def kind(self) -> str:
        return self.key[1]

    @property
    def status(self) -> str:
        return self.last_lifecycle[1] if self.last_lifecycle else "exists"

    @property
    def captures(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for t in self.touches:
            out.setdefault(t.capture, []).append(t.pos)
        return out


class _Live:
    """A resource while it is being folded (as an object while it is among the most recently touched, else
    serialized: `freeze` / `thaw`; the store gets its row once, at the end, and only when views are wanted)."""

    __slots__ = ("rid", "key", "handler", "state", "sources", "observed", "parent", "title", "untrusted_from",
                 "last_life", "grades", "reads", "writes")

    def __init__(self, rid: int, key: Key, handler: str) -> None:
        self.rid, self.key, self.handler = rid, key, handler
        self.state: dict = {}
        self.sources: dict[str, int] = {}
        self.observed = False
        self.parent: Key | None = None
        self.title: str | None = None
        self.untrusted_from: int | None = None
        self.last_life: list | None = None
        self.grades: set[str] = set()
        self.reads = 0
        self.writes = 0

    def data(self, description: str | None) -> bytes:
        return dumps([self.handler, self.state, self.sources, self.observed,
                      list(self.parent) if self.parent is not None else None, self.title, self.untrusted_from,
                      self.last_life, sorted(self.grades), self.reads, self.writes, description])

    def freeze(self) -> tuple[int, bytes]:
        """(rid, the rest serialized): what the fold keeps of a resource it is not folding right now."""
        return self.rid, memoryview(self.data(None)).tobytes()  # orjson's bytes keep a 4 KB buffer; a copy is exact

    @classmethod
    def thaw(cls, key: Key, frozen: tuple[int, bytes]) -> _Live:
        rid, data = frozen
        d = orjson.loads(data)
        live = cls(rid, key, d[0])
        live.state, live.sources, live.observed = d[1], d[2], d[3]
        live.parent = tuple(d[4]) if d[4] is not None else None
        live.title, live.untrusted_from, live.last_life = d[5], d[6], d[7]
        live.grades = set(d[8])
        live.reads, live.writes = d[9], d[10]
        return live


def resource_from_row(key: Key, name: str, data: bytes) -> Resource:
    """A Resource (without its touches and writes) from its row in the store."""
    d = orjson.loads(data)
    return Resource(key, d[0], d[1], d[2], d[3], parent=tuple(d[4]) if d[4] is not None else None, title=d[5],
                    untrusted_from=d[6], last_lifecycle=tuple(d[7]) if d[7] is not None else None,
                    weakest=weakest(d[8]), reads=d[9], n_writes=d[10], description=d[11], name=name)


@dataclass
class Counts:
    """What the index and the CLI summary need, counted while folding."""

    entries: int = 0
    writes: int = 0  # entries whose effect is write
    untrusted: int = 0
    unmapped: int = 0  # entries that touched no resource
    resources: int = 0
    steps: int = 0
    revertible: int = 0  # steps that are revertible, blind, approximate, without a call
    blind: int = 0
    approximate: int = 0
    no_call: int = 0
    unreadable: int = 0
    top: int = 0  # the highest line folded
    grades: dict[str, int] = field(default_factory=dict)
    pages: set[int] = field(default_factory=set)  # timeline pages (0-based) that hold an entry

    def add(self, other: Counts) -> None:
        """Count another share of the same session's entries in (split.py)."""
        for name in ("entries", "writes", "untrusted", "unmapped", "resources", "steps", "revertible", "blind",
                     "approximate", "no_call", "unreadable"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.top = max(self.top, other.top)
        for g, n in other.grades.items():
            self.grades[g] = self.grades.get(g, 0) + n
        self.pages |= other.pages


class Replay:
    """Everything one replay derived from one session: counts in memory, the rest in its spill store
    (`entries`, `resources`, `steps` and `unreadable` read it back lazily). `close()` (or collecting the
    object) removes the store. A replay folded for the plan alone (`views` false) holds the steps, the
    counts and the unreadable lines; asking it for entries or resources is a programming error."""

    def __init__(self, session: str, report: SessionReport, store: Store, counts: Counts, grades: bytearray,
                 grade_names: list[str], untrusted_from: int | None, views: bool = True) -> None:
        self.session = session
        self.views = views
        self.report = report
        self.store = store
        self.counts = counts
        self._grades = grades
        self._grade_names = grade_names
        self.untrusted_from = untrusted_from

    @property
    def intact(self) -> bool:
        return self.report.intact

    def grade(self, pos: int) -> str:
        """The capture grade of the entry at line `pos`."""
        return self._grade_names[self._grades[pos]]

    def require_views(self) -> None:
        if not self.views:
            raise ValueError(f"the replay of {self.session!r} was folded for its revert plan alone: it holds no "
                             "entries or resources (replay_session(..., views=True) keeps them)")

    @property
    def entries(self) -> _Entries:
        self.require_views()
        return _Entries(self)

    @property
    def resources(self) -> _Resources:
        self.require_views()
        return _Resources(self)

    @property
    def steps(self) -> _Steps:
        return _Steps(self)

    @property
    def unreadable(self) -> list[tuple[int, str]]:
        return [(p, why) for p, why in self.store.rows("SELECT pos, why FROM unreadable ORDER BY rowid")]

    def step_number(self, step_id: int) -> int:
        """Steps are stored in seq order from 1; the plan numbers them newest first."""
        return self.counts.steps - step_id + 1

    def chain_summary(self) -> dict:
        r = self.report
        return {
            "intact": r.intact,
            "verified_entries": r.entries,
            "broken_at_seq": r.broken_at_seq,
            "kind": r.kind,
            "detail": r.detail,
            "untrusted_from_seq": self.untrusted_from,
            "notes": list(r.notes),
        }

    def close(self) -> None:
        self.store.close()


class _Entries(Sequence):
    """The entries in line order, read from the store."""

    def __init__(self, rp: Replay) -> None:
        self.rp = rp

    def __len__(self) -> int:
        return self.rp.counts.entries

    def _record(self, row: tuple) -> EntryRecord:
        seq, trusted, data, keys = row
        d = orjson.loads(data)
        return EntryRecord(d["seq"], seq, d["ts"], d["connector"], d["effect"], d["capture"], d["method"], d["url"],
                           d["status"], d["failure"], bool(trusted), d["ops"],
                           [tuple(k) for k in orjson.loads(keys)] if keys else [], d["notes"])

    def __iter__(self) -> Iterator[EntryRecord]:
        for row in self.rp.store.rows("SELECT seq, trusted, json, keys FROM entries ORDER BY pos"):
            yield self._record(row)

    def __getitem__(self, index: int) -> EntryRecord:  # type: ignore[override]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(index)
        row = self.rp.store.one("SELECT seq, trusted, json, keys FROM entries ORDER BY pos LIMIT 1 OFFSET ?", (index,))
        return self._record(row)  # type: ignore[arg-type]


class _Resources(Mapping):
    """Resource key -> Resource (with its touches, writes and lifecycle), in key order, read from the store."""

    def __init__(self, rp: Replay) -> None:
        self.rp = rp

    def __len__(self) -> int:
        return self.rp.counts.resources

    def __iter__(self) -> Iterator[Key]:
        for (key,) in self.rp.store.rows("SELECT key FROM resources ORDER BY sk"):
            yield tuple(orjson.loads(key))

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and self.rp.store.one(
            "SELECT 1 FROM resources WHERE sk=?", (sort_key(key),)) is not None

    def __getitem__(self, key: Key) -> Resource:
        row = self.rp.store.one("SELECT rid, name, data FROM resources WHERE sk=?", (sort_key(key),)) \
            if isinstance(key, tuple) else None
        if row is None:
            raise KeyError(key)
        rid, name, data = row
        res = resource_from_row(key, name, data)
        store = self.rp.store
        res.touches = [Touched(p, role, op, bool(ok), g, ts, f, bool(t)) for p, role, op, ok, g, ts, f, t in store.rows(
            "SELECT pos, role, op, ok, grade, ts, failure, trusted FROM touches WHERE rid=? ORDER BY rowid", (rid,))]
        res.writes = [write_from_row(self.rp, step, data) for step, data in store.rows(
            "SELECT step, data FROM writes WHERE rid=? ORDER BY rowid", (rid,))]
        res.lifecycle = [(p, what) for p, what in store.rows(
            "SELECT pos, what FROM lifecycle WHERE rid=? ORDER BY rowid", (rid,))]
        return res


def write_from_row(rp: Replay, step_id: int | None, data: bytes) -> WriteRecord:
    """A write's record from its row: its step id (a column: ids are renumbered when a partner's share of
    the fold is absorbed, split.py) and its data."""
    fields, flags, reason = orjson.loads(data)
    return WriteRecord(fields, rp.step_number(step_id) if step_id is not None else None, flags, reason)


class _Steps(Sequence):
    """The plan steps in seq order (the plan lists them newest first), read from the store."""

    def __init__(self, rp: Replay) -> None:
        self.rp = rp

    def __len__(self) -> int:
        return self.rp.counts.steps

    def __iter__(self) -> Iterator[PlanStep]:
        for sid, data in self.rp.store.rows("SELECT id, data FROM steps ORDER BY id"):
            yield PlanStep.from_row(orjson.loads(data), self.rp.step_number(sid))

    def newest_first(self) -> Iterator[PlanStep]:
        for sid, data in self.rp.store.rows("SELECT id, data FROM steps ORDER BY id DESC"):
            yield PlanStep.from_row(orjson.loads(data), self.rp.step_number(sid))

    def __getitem__(self, index: int) -> PlanStep:  # type: ignore[override]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(index)
        (data,) = self.rp.store.one("SELECT data FROM steps WHERE id=?", (index + 1,))  # type: ignore[misc]
        return PlanStep.from_row(orjson.loads(data), self.rp.step_number(index + 1))


# -- building a Call from an entry -----------------------------------------------------------------


def _mcp_parts(entry: dict, request: dict, response: dict) -> tuple[str | None, dict | None, object, bool]:
    """(tool, arguments, result payload, error) for an MCP tools/call entry; tool None otherwise."""
    mcp = entry.get("mcp")
    params = mcp.get("params") if isinstance(mcp, dict) and mcp.get("method") == "tools/call" else None
    if params is None and request.get("method") == "tools/call":
        params = request.get("body")
    if not isinstance(params, dict) or not isinstance(params.get("name"), str):
        return None, None, None, False
    args = params.get("arguments")
    body = as_dict(json_value(response.get("body")))
    error = "error" in body
    result = body.get("result")
    payload: object = None
    if isinstance(result, dict):
        error = error or result.get("isError") is True
        structured = result.get("structuredContent")
        if isinstance(structured, dict):
            payload = structured
        else:
            for item in result.get("content") or []:
                if isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
                    payload = json_value(item["text"])
                    if payload is not None:
                        break
    return params["name"], args if isinstance(args, dict) else {}, payload, error


_PLAIN_URL = re.compile(r"(https?)://([^/?#@\[\]\\%:\x00-\x20\x7f]+(?::[0-9]*)?)((?:/[^?#\\\x00-\x20\x7f]*)?)"
                        r"(?:\?([^#\\\x00-\x20\x7f]*))?\Z")
"""An ASCII http(s) URL without user info, brackets, percent signs or a port other than digits in its
netloc, without a fragment, whitespace, control characters or backslashes: urlsplit's scheme, netloc,
path (empty or from "/") and query are these groups, and its hostname is the netloc before ":" in
lower case. Any other URL goes through urlsplit."""


@lru_cache(maxsize=1 << 12)
def _parse_url(raw_url: str) -> tuple[str, str, str, dict[str, list[str]]]:
    """(origin, host, normalised path, query) of an http(s) URL; empty parts for anything else. Cached:
    sessions call the same URLs again and again. The query dict is shared: treat it as read-only."""
    plain = _PLAIN_URL.match(raw_url) if raw_url.isascii() else None
    if plain is not None:  # what urlsplit gives for such a URL, without its general machinery
        scheme, netloc, path, query = plain.groups()
        return (f"{scheme}://{netloc}", normalise_host(netloc.partition(":")[0].lower()), normalise_path(path),
                parse_query(query or ""))
    try:
        split = urlsplit(raw_url)
        if split.scheme in ("http", "https") and split.netloc:
            origin = f"{split.scheme}://{split.netloc.rpartition('@')[2]}"
            return origin, normalise_host(split.hostname or ""), normalise_path(split.path), parse_query(split.query)
    except ValueError:
        pass
    return "", "", "", {}


def _str(value: object, default: str = "") -> str:
    return value if isinstance(value, str) else default


def make_call(entry: dict, pos: int, trusted: bool, memo: dict) -> Call:
    """The Call for an entry. Trusted entries passed the contract check; untrusted ones may be anything,
    so every field is type-checked (a wrong type reads as absent)."""
    request = entry.get("request")
    response = entry.get("response")
    if not isinstance(request, dict):
        request = {}
    if not isinstance(response, dict):
        response = {}
    raw_url = _str(request.get("url"))
    origin, host, path, query = _parse_url(raw_url)
    headers = request.get("headers")
    if entry.get("mcp") is not None or request.get("method") == "tools/call":
        tool, args, payload, tool_error = _mcp_parts(entry, request, response)
    else:
        tool, args, payload, tool_error = None, None, None, False
    connector = _str(entry.get("connector"), "?")
    status = response.get("status")
    seq = entry.get("seq")
    effect = entry.get("effect")
    return Call(
        pos=pos,
        seq=seq if type(seq) is int else None,
        ts=_str(entry.get("ts")),
        connector=connector,
        effect=effect if effect == READ else WRITE,
        capture=_str(entry.get("capture"), "?"),
        principal=_str(entry.get("principal")),
        trusted=trusted,
        method=_method(request.get("method"), bool(origin) and tool is None),
        url=raw_url,
        origin=origin,
        host=host,
        path=path,
        query=query,
        raw_headers=headers if isinstance(headers, list) else [],
        request_body=request.get("body"),
        status=status if type(status) is int else None,
        response_body=response.get("body"),
        error=response.get("error") if isinstance(response.get("error"), str) else None,
        tool=tool,
        tool_args=args,
        tool_result=payload,
        tool_error=tool_error,
        memo=memo.setdefault(connector, {}),
    )


def _method(value: object, http: bool) -> str:
    if not isinstance(value, str):
        return ""
    return value.upper() if http else value


WEBSOCKET_METHOD = "WEBSOCKET"


def failure_of(call: Call, module: object) -> str | None:
    """Why the call did not do what it asked (None: it succeeded)."""
    if call.status is None:
        return f"no response ({call.error or 'no answer'})"
    if call.status == 101 and call.method == WEBSOCKET_METHOD:
        return None  # a WebSocket message went over the open connection (docs/contract.md section 8)
    if not 200 <= call.status < 300:
        return f"HTTP {call.status}" + (f" ({call.error})" if call.error else "")
    if call.tool_error:
        return "the MCP tool reported an error"
    check = getattr(module, "failure", None)
    if check is not None:
        try:
            return check(call)
        except Exception:  # noqa: BLE001 - a rules bug must not stop replay (the status said success)
            return None
    return None


# -- the fold ----------------------------------------------------------------------------------------


class Folder:
    """Feeds entries one at a time; `finish` gives the Replay. Memory grows with the distinct resources
    touched, not with the entries: the `CACHE` touched most recently are objects updated in place, the
    others serialized in memory; entries, touches, writes and steps go to the spill store as they are
    folded (with `views` false, only the steps)."""

    CACHE = 1 << 16
    """Resources kept as objects. Serializing the others (`freeze` / `thaw`, an orjson round trip and an object
    built per touch) cost about a tenth of the fold at 10^5 entries, where 36,603 resources are touched at random
    (bench.replay_bench); 65,536 objects of about 1 KB more than their frozen form bound what not freezing costs,
    and a session touching more resources still folds in bounded memory."""

    def __init__(self, session: str, near: Path | None = None, *, views: bool = True,
                 cache: int | None = None, id_base: int = 0) -> None:
        self.session = session
        self.views = views
        self.store = Store(near)
        self._id_base = id_base  # resource and step ids start above it (a partner's share: split.py)
        self.counts = Counts()
        self.memo: dict = {}
        self.untrusted_from: int | None = None
        self._live: OrderedDict[Key, _Live] = OrderedDict()  # least recently touched first
        self._cache = cache or self.CACHE
        self._cold: dict[Key, tuple[int, bytes]] = {}  # every other resource touched so far, frozen
        # The store's pending rows, appended to directly (one list append per row, not a call); flushed
        # every _BATCH entries as one executemany per table.
        pending = self.store.pending
        self._entry_rows, self._touch_rows, self._write_rows = pending("entries"), pending("touches"), pending("writes")
        self._lifecycle_rows, self._step_rows = pending("lifecycle"), pending("steps")
        self._grades = bytearray(1)  # pos -> index into _grade_names
        self._grade_names: list[str] = []
        self._grade_index: dict[str, int] = {}
        self._saved = False  # save_resources ran: the fold is over

    def unreadable(self, pos: int, why: str) -> None:
        self.counts.unreadable += 1
        self.store.add("unreadable", (pos, why))

    def feed(self, entry: dict, pos: int, trusted: bool = True) -> None:
        if not trusted and self.untrusted_from is None:
            self.untrusted_from = pos
        call = make_call(entry, pos, trusted, self.memo)
        module = connectors.for_connector(call.connector)
        failure = failure_of(call, module)
        self._grade(pos, call.capture)
        try:
            found = module.touches(call)
            if found is None:
                module = generic
                found = generic.touches(call)
        except Exception as exc:  # noqa: BLE001 - one odd entry must not stop replay
            found = []
            call.notes.append(f"replay rules for {call.connector} failed on this entry: {type(exc).__name__}: {exc}")
        notes = list(call.notes)
        views = self.views
        ops: list[str] = []
        ids: list[str | None] = []
        keys: list[list[str]] = []
        planned = False
        for touch in found:
            if not touch.handler:
                touch.handler = getattr(module, "NAME", "generic")
            if call.effect == READ or touch.role not in (WRITE, SIDE):
                touch.role = READ
            if views:
                ops.append(touch.op)
                ids.append(resource_id(touch.key))
            keys.append(list(touch.key))
            if self._apply(call, touch, failure):
                planned = True
        if call.effect == WRITE and not planned:
            reason = "; ".join(call.notes) or (
                "a WebSocket message sent over an open connection: replay knows no resource or inverse for it"
                if call.method == WEBSOCKET_METHOD else "replay found no resource this call changed")
            op = call.op or call.tool or call.method or "?"
            self._add_step(self._step(call, None, op, Inverse(None, False, False, reason), None, [], failure,
                                      blind=True), None)
        c = self.counts
        c.entries += 1
        c.writes += call.effect == WRITE
        c.untrusted += not trusted
        c.unmapped += not keys
        c.grades[call.capture] = c.grades.get(call.capture, 0) + 1
        c.pages.add((pos - 1) // PAGE)
        c.top = max(c.top, pos)
        if not views:
            if len(self._step_rows) >= _BATCH:
                self.store.flush()
            if not c.entries % _BATCH:
                collector.young()
            return
        record = {
            "seq": pos, "claimed_seq": call.seq if call.seq != pos else None, "ts": call.ts,
            "connector": call.connector, "effect": call.effect, "capture": call.capture, "method": call.method,
            "url": call.url, "status": call.status, "failure": failure, "trusted": trusted, "ops": ops,
            "resources": ids, "notes": notes,
        }
        self._entry_rows.append((pos, call.seq, len(keys), trusted, orjson.dumps(record, option=orjson.OPT_SORT_KEYS),
                                   dumps(keys) if keys else None))
        if len(self._entry_rows) >= _BATCH:
            self.store.flush()
            collector.young()  # the batch's rows are in the store: what is left young is mostly new resources

    def pass_over(self, entry: dict, pos: int) -> None:
        """An entry a partner folds (split.py): only its capture grade is kept here (the plan and the notes
        name the grade of any entry)."""
        self._grade(pos, _str(entry.get("capture"), "?"))

    def _grade(self, pos: int, capture: str) -> None:
        index = self._grade_index.get(capture)
        if index is None:
            index = self._grade_index[capture] = len(self._grade_names)
            self._grade_names.append(capture)
            if index > 255:
                raise ValueError("more than 256 distinct capture grades in one session")
        grades = self._grades
        if pos >= len(grades):
            grades.extend(bytes(pos + 1 - len(grades) + 4096))
        grades[pos] = index

    def _grade_of(self, pos: int) -> str:
        return self._grade_names[self._grades[pos]]

    def _resource(self, touch: Touch) -> _Live:
        live = self._live
        key = touch.key
        res = live.get(key)
        if res is not None:
            live.move_to_end(key)
        else:
            frozen = self._cold.pop(key, None)
            if frozen is not None:
                res = _Live.thaw(key, frozen)
            else:
                self.counts.resources += 1
                res = _Live(self._id_base + self.counts.resources, key, touch.handler)
            if len(live) >= self._cache:
                old = live.popitem(last=False)[1]
                self._cold[old.key] = old.freeze()
            live[key] = res
        if touch.parent is not None:
            res.parent = touch.parent
        if touch.title:
            res.title = touch.title
        return res

    def _apply(self, call: Call, touch: Touch, failure: str | None) -> bool:
        """Fold one touch into its resource; True when it made a plan step."""
        res = self._resource(touch)
        ok = failure is None
        pos = call.pos
        views = self.views
        if views:
            self._touch_rows.append((res.rid, pos, touch.role, touch.op, ok, call.capture, call.ts, failure,
                                       call.trusted))
        res.grades.add(call.capture)
        if touch.role == READ:
            res.reads += 1
        if not call.trusted and res.untrusted_from is None:
            res.untrusted_from = pos
        planned = False
        if touch.role in (WRITE, SIDE):
            before = dict(res.state) if res.observed else None
            before_seqs = sorted(set(res.sources.values())) if res.observed else []
            created = touch.lifecycle == CREATED
            step_id = None
            flags = reason = ""
            if touch.role == WRITE:
                step = self._invert(call, touch, before, before_seqs, failure)
                step_id = self._add_step(step, res.rid)
                flags = step_flags(step.revertible, step.blind, step.approximate, step.call is not None)
                reason = step.reason
                planned = True
            res.writes += 1
            if views:  # the write's record for its resource note and views.json (the plan needs none of it)
                if ok:
                    diffs = touch.differences if touch.differences is not None else (
                        diff(touch.intended, touch.state or {}) if touch.intended else [])
                else:
                    diffs = []
                fields = {
                    "seq": pos, "op": touch.op, "role": touch.role, "method": call.method, "url": call.url,
                    "status": call.status, "failure": failure, "capture": call.capture, "trusted": call.trusted,
                    "created": created, "lifecycle": touch.lifecycle, "before": before, "before_seqs": before_seqs,
                    "intended": touch.intended, "actual": touch.state if ok else None, "differences": diffs,
                    "request_body": call.request_body, "response_body": call.response_body,
                }
                self._write_rows.append((res.rid, pos, touch.role, touch.op, failure, step_id, flags,
                                          dumps([fields, flags, reason])))
        if ok:
            if touch.state:
                state, sources = res.state, res.sources
                for k, v in touch.state.items():
                    state[k] = v
                    sources[k] = pos
                res.observed = True
            if touch.lifecycle:
                res.last_life = [pos, touch.lifecycle]
                if views:
                    self._lifecycle_rows.append((res.rid, pos, touch.lifecycle))
        return planned

    def _add_step(self, step: PlanStep, rid: int | None) -> int:
        c = self.counts
        c.steps += 1
        c.revertible += step.revertible
        c.blind += step.blind
        c.approximate += step.approximate
        c.no_call += step.call is None
        step_id = self._id_base + self.counts.steps
        self._step_rows.append((step_id, rid, step.pos, dumps(step.row())))
        return step_id

    def _invert(self, call: Call, touch: Touch, before: dict | None, before_seqs: list[int],
                failure: str | None) -> PlanStep:
        if failure is not None:
            return self._step(call, touch, touch.op, Inverse(None, False), before, before_seqs, failure)
        module = connectors.modules().get(touch.handler, generic)
        try:
            inv = module.invert(Write(call, touch, before, before_seqs))
        except Exception as exc:  # noqa: BLE001
            inv = Inverse(None, False, False, f"replay rules for {touch.handler} failed to invert this write: "
                                              f"{type(exc).__name__}: {exc}")
        return self._step(call, touch, touch.op, inv, before, before_seqs, None)

    def _step(self, call: Call, touch: Touch | None, op: str, inv: Inverse, before: dict | None,
              before_seqs: list[int], failure: str | None, blind: bool | None = None) -> PlanStep:
        key = touch.key if touch is not None else None
        grades = sorted({self._grade_of(p) for p in before_seqs})
        if failure is not None:
            if call.status is None:
                reason = (f"{failure}: whether the write took effect is unknown; no inverse is derived. "
                          "Re-read the resource before acting")
            elif 300 <= call.status < 400:
                reason = (f"not a completed write ({failure}: a redirect or an unfinished upload); nothing to "
                          "revert by itself")
            else:
                reason = f"failed write ({failure}): the platform refused it, so it changed nothing"
            return PlanStep(call.pos, call.seq, call.connector, key, op, False, False, False, None, reason,
                            call.capture, before_seqs, grades, call.trusted)
        if blind is None:
            blind = inv.blind if inv.blind is not None else (
                before is None and (touch is None or touch.lifecycle != CREATED))
        has_call = inv.call is not None
        return PlanStep(call.pos, call.seq, call.connector, key, op, inv.revertible and has_call, bool(blind),
                        inv.approximate and has_call, inv.call, inv.reason, call.capture, before_seqs, grades,
                        call.trusted)

    def finish(self, report: SessionReport, partner: split.Share | None = None) -> Replay:
        """The Replay; with `partner`, after absorbing its share of the fold (a resource both folded raises
        sqlite3.IntegrityError)."""
        if self.views:
            self.save_resources()
        if partner is not None:
            self.store.absorb(partner.db)
            self.counts.add(cast(Counts, partner.counts))
        self.store.finish()
        return Replay(self.session, report, self.store, self.counts, self._grades, self._grade_names,
                      self.untrusted_from, self.views)

    def hand_over(self) -> Path:
        """A partner's end of the fold (split.py): its resources saved, its store left for the parent to absorb."""
        self.save_resources()
        self.store.hand_over()
        return self.store.path

    def save_resources(self) -> None:
        """Every resource's row, once, in sort-key order (so the store's key index is built by appends). The fold
        is over: nothing may be fed after it. Called early by a fold whose partner is still folding (its share
        is smaller: see `_fold_beside_verifier`); a second call does nothing."""
        if self._saved:
            return
        self._saved = True
        self._write_resources()
        self._live, self._cold = OrderedDict(), {}

    def _write_resources(self) -> None:
        ordered = sorted([(sort_key(key), key) for key in self._live] + [(sort_key(key), key) for key in self._cold])
        for i in range(0, len(ordered), _BATCH):
            rows = []
            for sk, key in ordered[i : i + _BATCH]:
                res = self._live.get(key) or _Live.thaw(key, self._cold[key])
                name = note_name(res.key)
                description = describe(res.handler, res.key, res.state)
                rows.append((res.rid, sk, sort_key(res.parent) if res.parent is not None else None,
                             dumps(list(res.key)), name, link(res.key, name, description), res.data(description)))
            self.store.add_resources(rows)

    def discard(self) -> None:
        self.store.close()


SealCheck = Callable[[SessionReport, bytes], None]
"""Checks what the chain cannot show (journal/checkpoint/audit.py `check_session_checkpoint`), given the report and
the 32-byte hashes of the entries the verifier passed, in file order: those hashes, never the file read once more
(whoever writes the vault could show that read the sealed file and the verifier a rewritten one)."""


def fold_session(
    vault: Vault, session: str, *, check_blobs: bool = True, progress: Callable[[int], None] | None = None,
    seal_key: Ed25519PublicKey | None = None, seal_check: SealCheck | None = None,
    views: bool = True,
) -> Replay:
    """Verify and fold one session in a single pass (see the module docstring). With `seal_key` (a public
    key, see journal/seal.py) the session's seal is checked too; `seal_check` then checks what the chain
    cannot show (a checkpoint), breaking the verifier's report at the seq it names. With `views` false
    the fold keeps the revert plan alone (no entry, touch or write rows)."""
    if check_blobs:
        read_beside = [0]

        def beside(n: int) -> None:
            read_beside[0] += n
            if progress is not None:
                progress(n)

        rp = _fold_beside_verifier(vault, session, beside, seal_key, seal_check, views)
        if rp is not None:
            return rp
        if read_beside[0]:
            progress = None  # the bar already went through the file once (a fold that could not fork read none)
    folder = Folder(session, vault.views_dir, views=views)
    cursor = [0, 0]  # [start of the line being verified, bytes seen]

    def seen(n: int) -> None:
        cursor[0] = cursor[1]
        cursor[1] += n
        if progress is not None:
            progress(n)

    verified = bytearray()  # the hashes seal_check is given

    def on_entry(entry: dict) -> None:
        folder.feed(entry, entry["seq"], True)
        if seal_check is not None:
            verified.extend(bytes.fromhex(entry["hash"]))

    # The cyclic collector stays on: with the views spilled to the store the heap is small, so its scans
    # cost nothing measurable, and a reference cycle in some connector's rules cannot pile up.
    try:
        report = verify_session(vault, session, check_blobs=check_blobs, progress=seen, on_entry=on_entry,
                                seal_key=seal_key)
        if seal_check is not None:
            seal_check(report, bytes(verified))
        broken = report.broken_at_seq
        if not report.intact and broken is not None:
            if report.kind not in SEAL_KINDS and broken > folder.counts.entries:
                _fold_lines(vault, session, folder, broken, cursor[0])  # the verifier stopped at the broken line
            elif broken <= folder.counts.entries:
                # The break names an entry already folded as trusted: a seal that does not match (found after
                # the pass), or a chain break reported at an earlier line than the one that showed it (an entry
                # edited with its hash recomputed: the next line's prev no longer names it). Fold again,
                # marking from there on.
                folder.discard()
                folder = Folder(session, vault.views_dir, views=views)
                report = _fold_again(vault, session, folder, report, check_blobs, seal_key, seal_check)
            else:  # entries were cut off after the last one: nothing in the file is affected
                folder.untrusted_from = broken
    except BaseException:
        folder.discard()
        raise
    return folder.finish(report)


def _fold_beside_verifier(vault: Vault, session: str, progress: Callable[[int], None] | None,
                          seal_key: Ed25519PublicKey | None,
                          seal_check: SealCheck | None, views: bool = True) -> Replay | None:
    """The common case on two cores: the verifier runs in a forked child (forked.py) while this process
    parses and folds every line as trusted. That is exactly the serial fold when the child reports the
    session intact over the very lines folded here (same count, same bytes): the serial fold gets each
    verified entry, parsed the same way, with its seq as its line number. Anything else (a break, a
    seal that does not match, a file that grew in between, no fork here) gives None: the caller folds
    serially, behind the verifier, as before."""
    if isinstance(vault, RowSource):  # a database store: a forked child must not share this one's connections
        return None
    path = vault.require_session(session)
    child = forked.start(lambda: verify_session(vault, session, seal_key=seal_key))
    if child is None:
        return None
    partner = None
    try:
        folder = Folder(session, vault.views_dir, views=views)
        # the entries of some connectors fold in a second child (split.py): views only
        near = folder.store.dir
        partner = split.start(path, lambda: Folder(session, near, id_base=split.PARTNER_IDS)) \
            if views and SPLIT else None
    except BaseException:
        child.close()
        raise
    part = split.Partition() if partner is not None else None
    lines = size = 0
    verified = bytearray()  # the hashes of the lines read here, for seal_check (they are the verifier's once the
    # heads compare equal below; seal_check is asked only then)
    head = GENESIS  # the chain as read here (chain.next_head): it must end at the head the verifier reports
    try:
        with collector.paused():  # the verifier and the partner were forked with it on
            for line in iter_lines(path):
                index, data = line.index, line.data
                size += len(data)
                if progress is not None:
                    progress(len(data))
                lines = index + 1
                entry = orjson.loads(data)
                linked = next_head(entry, data, head)
                if linked is None:  # not the chain the verifier checks: the serial fold says what it is
                    raise ValueError(f"line {lines} does not link")
                head = linked
                if seal_check is not None:
                    verified.extend(bytes.fromhex(linked))
                if part is None or part.here(entry):
                    folder.feed(entry, lines, True)
                else:
                    folder.pass_over(entry, lines)
        failed = False
    except Exception:  # noqa: BLE001 - a line the verifier will reject: the serial fold says what it is
        failed = True
    except BaseException:  # interrupted: nothing is left running
        child.close()
        if partner is not None:
            partner.close()
        folder.discard()
        raise
    try:
        share = None
        if partner is not None:
            if failed:  # the serial fold comes next: the partner's share is not wanted
                partner.close()
            else:
                # This share is the smaller (split.Partition): its rows are written while the partner still folds.
                with collector.paused():
                    folder.save_resources()
                share = partner.result()
        report = child.result()
    except BaseException:
        child.close()
        if partner is not None:
            partner.close()
        folder.discard()
        raise
    # The file was opened by name three times (the verifier, this process, the partner): what was folded here
    # as trusted is what the verifier checked only if both read the same chain to the same head.
    if failed or not isinstance(report, SessionReport) or not report.intact or report.entries != lines \
            or report.bytes != size or report.head != (head if lines else None) \
            or (partner is not None and not (isinstance(share, split.Share) and share.lines == lines
                                             and share.size == size and share.head == head)):
        folder.discard()
        return None
    if seal_check is not None:
        seal_check(report, bytes(verified))
        if not report.intact:  # a finding sends the caller to the serial fold, which marks from its seq on
            folder.discard()
            return None
    try:
        return folder.finish(report, share if isinstance(share, split.Share) else None)
    except sqlite3.IntegrityError:  # a resource in both shares: the premise of split.py does not hold here
        folder.discard()
        return None
    except BaseException:
        folder.discard()
        raise


def _fold_again(vault: Vault, session: str, folder: Folder, first: SessionReport, check_blobs: bool,
                seal_key: Ed25519PublicKey | None,
                seal_check: SealCheck | None) -> SessionReport:
    """Fold the session again into the empty `folder`, as trusted up to the break `first` names and as read
    from there on. The trusted entries come from the verifier once more, never from the file read back by
    name: the file may have changed since the first pass, and only what a verifier hands over is trusted.
    A second pass that does not find the same break means the file is changing under replay: an error."""
    broken = cast("int", first.broken_at_seq)
    read = [0, 0]  # [bytes verified, offset of line `broken`]

    def seen(n: int) -> None:
        read[0] += n

    verified = bytearray()

    def on_entry(entry: dict) -> None:
        if seal_check is not None:
            verified.extend(bytes.fromhex(entry["hash"]))
        if entry["seq"] < broken:
            folder.feed(entry, entry["seq"], True)
            read[1] = read[0]  # the verifier counts a line before handing its entry over

    report = verify_session(vault, session, check_blobs=check_blobs, progress=seen, on_entry=on_entry,
                            seal_key=seal_key)
    if seal_check is not None:
        seal_check(report, bytes(verified))
    if (report.broken_at_seq, report.kind) != (first.broken_at_seq, first.kind):
        raise InputError(f"session {session!r} changed while replay read it (first a {first.kind} at seq "
                         f"{broken}, then {report.kind or 'no finding'} at seq {report.broken_at_seq}); "
                         "replay it again once nothing writes it")
    _fold_lines(vault, session, folder, broken, read[1])
    return report


def _fold_lines(vault: Vault, session: str, folder: Folder, first_line: int, offset: int) -> None:
    """Fold the file from line `first_line` (at byte `offset`) on as untrusted: lines the verifier did not pass,
    read by name (whatever they are now, they are marked as such)."""
    folder.untrusted_from = first_line
    for line in session_lines(vault, session, offset):
        pos, data = first_line + line.index, line.data
        try:
            entry = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            folder.unreadable(pos, f"not JSON ({exc})")
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("request"), dict):
            folder.unreadable(pos, "not a journal entry")
            continue
        try:
            folder.feed(entry, pos, trusted=False)
        except Exception as exc:  # noqa: BLE001 - tampered content must not stop replay
            folder.unreadable(pos, f"could not be replayed: {type(exc).__name__}: {exc}")


__all__ = ["GONE", "GRADES", "Counts", "EntryRecord", "Folder", "PlanStep", "Replay", "Resource", "Touched",
           "WriteRecord", "fold_session", "weakest"]
