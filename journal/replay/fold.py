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
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

import orjson

from journal.connectors._http import normalise_host, normalise_path, parse_query
from journal.vault import Vault
from journal.verify import SessionReport, verify_session

from . import connectors
from .connectors import generic
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

_BLOCK = 1 << 20
GRADES = ("broker", "gateway", "agent")
"""Capture grades, strongest first (docs/contract.md, evidence grade)."""
_RANK = {g: i for i, g in enumerate(GRADES)}


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


@dataclass
class WriteRecord:
    """A write (or side effect) on one resource, with what it takes to judge and undo it."""

    pos: int
    seq: int | None
    op: str
    role: str
    method: str
    url: str
    status: int | None
    capture: str
    trusted: bool
    failure: str | None
    before: dict | None
    before_seqs: list[int]
    created: bool
    intended: dict | None
    actual: dict | None
    request_body: object
    response_body: object
    differences: list[dict]
    lifecycle: str | None
    step: PlanStep | None = None


@dataclass
class Resource:
    key: Key
    handler: str
    state: dict = field(default_factory=dict)
    sources: dict[str, int] = field(default_factory=dict)  # field -> pos of the entry it came from
    observed: bool = False
    touches: list[tuple[int, str, str, bool]] = field(default_factory=list)  # (pos, role, op, ok)
    writes: list[WriteRecord] = field(default_factory=list)
    lifecycle: list[tuple[int, str]] = field(default_factory=list)
    parent: Key | None = None
    title: str | None = None
    captures: dict[str, list[int]] = field(default_factory=dict)
    untrusted_from: int | None = None

    @property
    def connector(self) -> str:
        return self.key[0]

    @property
    def kind(self) -> str:
        return self.key[1]

    @property
    def status(self) -> str:
        return self.lifecycle[-1][1] if self.lifecycle else "exists"


@dataclass
class Replay:
    """Everything one replay derived from one session."""

    session: str
    report: SessionReport
    entries: list[EntryRecord]
    resources: dict[Key, Resource]
    steps: list[PlanStep]  # in seq order; the plan lists them newest first
    untrusted_from: int | None = None
    unreadable: list[tuple[int, str]] = field(default_factory=list)  # (line, why) after a break
    _by_pos: dict[int, EntryRecord] | None = field(default=None, repr=False)

    @property
    def intact(self) -> bool:
        return self.report.intact

    def entry_at(self, pos: int) -> EntryRecord:
        if self._by_pos is None:
            self._by_pos = {e.pos: e for e in self.entries}
        return self._by_pos[pos]

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


@lru_cache(maxsize=1 << 16)
def _parse_url(raw_url: str) -> tuple[str, str, str, dict[str, list[str]]]:
    """(origin, host, normalised path, query) of an http(s) URL; empty parts for anything else. Cached:
    sessions call the same URLs again and again. The query dict is shared: treat it as read-only."""
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


def failure_of(call: Call, module: object) -> str | None:
    """Why the call did not do what it asked (None: it succeeded)."""
    if call.status is None:
        return f"no response ({call.error or 'no answer'})"
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
    """Feeds entries one at a time; `finish` gives the Replay."""

    def __init__(self, session: str) -> None:
        self.session = session
        self.entries: list[EntryRecord] = []
        self.resources: dict[Key, Resource] = {}
        self.steps: list[PlanStep] = []
        self.memo: dict = {}
        self.untrusted_from: int | None = None
        self.unreadable: list[tuple[int, str]] = []
        self._grades: dict[int, str] = {}  # pos -> capture, for the entries that made a state

    def feed(self, entry: dict, pos: int, trusted: bool = True) -> None:
        if not trusted and self.untrusted_from is None:
            self.untrusted_from = pos
        call = make_call(entry, pos, trusted, self.memo)
        module = connectors.for_connector(call.connector)
        failure = failure_of(call, module)
        record = EntryRecord(pos, call.seq, call.ts, call.connector, call.effect, call.capture, call.method,
                             call.url, call.status, failure, trusted)
        self.entries.append(record)
        self._grades[pos] = call.capture
        try:
            found = module.touches(call)
            if found is None:
                module = generic
                found = generic.touches(call)
        except Exception as exc:  # noqa: BLE001 - one odd entry must not stop replay
            found = []
            call.notes.append(f"replay rules for {call.connector} failed on this entry: {type(exc).__name__}: {exc}")
        record.notes.extend(call.notes)
        planned = False
        for touch in found:
            if not touch.handler:
                touch.handler = getattr(module, "NAME", "generic")
            if call.effect == READ or touch.role not in (WRITE, SIDE):
                touch.role = READ
            record.ops.append(touch.op)
            record.resources.append(touch.key)
            step = self._apply(call, touch, failure)
            if step is not None:
                planned = True
                self.steps.append(step)
        if call.effect == WRITE and not planned:
            reason = "; ".join(call.notes) or "replay found no resource this call changed"
            op = call.op or call.tool or call.method or "?"
            self.steps.append(self._step(call, None, op, Inverse(None, False, False, reason), None, [], failure,
                                         blind=True))

    def _resource(self, touch: Touch) -> Resource:
        res = self.resources.get(touch.key)
        if res is None:
            res = self.resources[touch.key] = Resource(touch.key, touch.handler)
        if touch.parent is not None:
            res.parent = touch.parent
        if touch.title:
            res.title = touch.title
        return res

    def _apply(self, call: Call, touch: Touch, failure: str | None) -> PlanStep | None:
        res = self._resource(touch)
        ok = failure is None
        res.touches.append((call.pos, touch.role, touch.op, ok))
        res.captures.setdefault(call.capture, []).append(call.pos)
        if not call.trusted and res.untrusted_from is None:
            res.untrusted_from = call.pos
        step = None
        if touch.role in (WRITE, SIDE):
            before = dict(res.state) if res.observed else None
            before_seqs = sorted(set(res.sources.values())) if res.observed else []
            created = touch.lifecycle == CREATED
            if ok:
                diffs = touch.differences if touch.differences is not None else (
                    diff(touch.intended, touch.state or {}) if touch.intended else [])
            else:
                diffs = []
            w = WriteRecord(call.pos, call.seq, touch.op, touch.role, call.method, call.url, call.status,
                            call.capture, call.trusted, failure, before, before_seqs, created, touch.intended,
                            touch.state if ok else None, call.request_body, call.response_body, diffs, touch.lifecycle)
            res.writes.append(w)
            if touch.role == WRITE:
                step = w.step = self._invert(call, touch, before, before_seqs, failure)
        if ok:
            if touch.state:
                for k, v in touch.state.items():
                    res.state[k] = v
                    res.sources[k] = call.pos
                res.observed = True
            if touch.lifecycle:
                res.lifecycle.append((call.pos, touch.lifecycle))
        return step

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
        grades = sorted({self._grades[p] for p in before_seqs})
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

    def finish(self, report: SessionReport) -> Replay:
        return Replay(self.session, report, self.entries, self.resources, self.steps, self.untrusted_from,
                      self.unreadable)


def fold_session(
    vault: Vault, session: str, *, check_blobs: bool = True, progress: Callable[[int], None] | None = None,
    seal_key: object = None,
) -> Replay:
    """Verify and fold one session in a single pass (see the module docstring). With `seal_key` (a public
    key, see journal/seal.py) the session's seal is checked too."""
    folder = Folder(session)
    cursor = [0, 0]  # [start of the line being verified, bytes seen]

    def seen(n: int) -> None:
        cursor[0] = cursor[1]
        cursor[1] += n
        if progress is not None:
            progress(n)

    def on_entry(entry: dict) -> None:
        folder.feed(entry, entry["seq"], True)

    was = gc.isenabled()
    gc.disable()  # many objects, no cycles: the collector's rescans of a large heap cost ~20% of the time
    try:
        kw = {"seal_key": seal_key} if seal_key is not None else {}
        report = verify_session(vault, session, check_blobs=check_blobs, progress=seen, on_entry=on_entry, **kw)
        broken = report.broken_at_seq
        if not report.intact and broken is not None:
            if report.kind != "seal_mismatch":  # the verifier stopped at the broken line
                _fold_lines(vault, session, folder, broken, cursor[0])
            elif broken <= len(folder.entries):
                # A seal that does not match is found after the pass: fold again, marking from there on.
                folder = Folder(session)
                _fold_lines(vault, session, folder, 1, 0, trusted_before=broken)
            else:  # entries were cut off after the last one: nothing in the file is affected
                folder.untrusted_from = broken
    finally:
        if was:
            gc.enable()
    return folder.finish(report)


def _fold_lines(vault: Vault, session: str, folder: Folder, first_line: int, offset: int,
                trusted_before: int | None = None) -> None:
    """Fold the file from line `first_line` (at byte `offset`) on without verifying it again: entries
    before line `trusted_before` as trusted (the verifier passed them), every other one untrusted."""
    untrusted_from = trusted_before if trusted_before is not None else first_line
    folder.untrusted_from = untrusted_from
    for index, data in _lines_from(vault.session_path(session), offset):
        pos = first_line + index
        if pos < untrusted_from:
            folder.feed(orjson.loads(data), pos, trusted=True)
            continue
        try:
            entry = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            folder.unreadable.append((pos, f"not JSON ({exc})"))
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("request"), dict):
            folder.unreadable.append((pos, "not a journal entry"))
            continue
        try:
            folder.feed(entry, pos, trusted=False)
        except Exception as exc:  # noqa: BLE001 - tampered content must not stop replay
            folder.unreadable.append((pos, f"could not be replayed: {type(exc).__name__}: {exc}"))


def _lines_from(path: Path, offset: int) -> Iterator[tuple[int, bytes]]:
    """(index from 0, bytes) of each line of the file from `offset` (a line start) on, block-wise."""
    index = 0
    rest = b""
    with open(path, "rb") as f:
        f.seek(offset)
        while block := f.read(_BLOCK):
            buf = rest + block if rest else block
            start = 0
            while (nl := buf.find(b"\n", start)) >= 0:
                yield index, buf[start : nl + 1]
                index += 1
                start = nl + 1
            rest = buf[start:]
    if rest:
        yield index, rest


__all__ = ["GONE", "GRADES", "Folder", "PlanStep", "Replay", "Resource", "WriteRecord", "fold_session", "weakest"]
