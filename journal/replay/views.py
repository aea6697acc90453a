"""Views of a replayed session: the files under `<vault>/views/<session>/` and how they are written.

    index.md                 the session: chain status, evidence, resources, writes, links
    <resource note>.md       one per resource touched (name: readable key + 10 hex of its SHA-256)
    timeline-NNNN.md         every entry, 500 a page, each under a `seq-N` heading
    revert-plan.md / .json   the revert plan (plan.py)
    views.json               everything above, machine-readable (format "connector-replay/1")

`<session>` is the session's journal file name without `.jsonl` (the vault's reversible rule,
journal/vault.py), so it cannot leave `views/`. Note names keep `A-Z a-z 0-9 . _ -` of the key,
are bounded, and end in a hash of the whole key: two keys never share a file, not even on a
case-insensitive file system. Output is deterministic: replaying twice, or after deleting the
folder, gives the same bytes. Files of an earlier replay that are no longer produced are removed
(only names the previous views.json listed); anything else in the folder is left alone.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

import orjson

from journal.vault import SESSION_SUFFIX, Vault, session_filename

from . import collector, forked
from .fold import GRADES, PlanStep, Replay, Resource, Touched, WriteRecord, resource_from_row, weakest, write_from_row
from .labels import PAGE, TITLES, note_name, resource_id, step_flags, title, unknown_link
from .markdown import blob_link, body_block, callout, cell, code, dumps, esc, fence
from .plan import step_dict

FORMAT = "connector-replay/1"
_WHOLE_MANIFEST_LIMIT = 64 << 20
_OWN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\.(md|json)\Z")
_CHUNK = 1 << 18


def views_dir(vault: Vault, session: str) -> Path:
    return vault.views_dir / session_filename(session)[: -len(SESSION_SUFFIX)]


def page_of(pos: int) -> str:
    return f"timeline-{(pos - 1) // PAGE + 1:04d}.md"


def seq_link(pos: int) -> str:
    return f"[seq {pos}](timeline-{(pos - 1) // PAGE + 1:04d}.md#seq-{pos})"


def _clock(ts: str) -> str:
    return ts[11:] if len(ts) > 11 else ts


class _Peek:
    """Rows of a query sorted like the resources, taken group by group."""

    def __init__(self, rows: Iterator[tuple]) -> None:
        self.rows = rows
        self.head: tuple | None = next(rows, None)

    def take(self, value: object) -> list[tuple]:
        """The rows whose first column is `value` (none when the next group is another one's)."""
        out = []
        while self.head is not None and self.head[0] == value:
            out.append(self.head)
            self.head = next(self.rows, None)
        return out

    def skip_below(self, value: bytes | int) -> None:
        while self.head is not None and self.head[0] < value:
            self.head = next(self.rows, None)


class Views:
    """Renders every file of one replay, streaming what it needs from the replay's store, one resource
    (or one timeline page) at a time."""

    def __init__(self, rp: Replay, fresh: bool = False) -> None:
        self.rp = rp
        self.store = rp.store
        self.fresh = fresh  # the folder held nothing: no earlier note to compare a new one with

    def untrusted_banner(self) -> str:
        r = self.rp.report
        return callout("WARNING", [
            f"**Chain broken at seq {r.broken_at_seq} ({esc(r.kind)}).** {esc(r.detail or '', 300)}",
            f"Everything from seq {self.rp.untrusted_from} on is **untrusted**: it is shown, marked, but nothing "
            "verifies it.",
        ])

    # -- resources, in key order ---------------------------------------------------------------------

    def resources(self, lo: bytes | None = None, hi: bytes | None = None
                  ) -> Iterator[tuple[Resource, str | None, list[tuple[tuple, str]]]]:
        """(resource with its touches, writes and lifecycle; its parent's link; its children as (key, link)),
        in key order; with `lo` / `hi`, only the resources whose sort key is >= lo and < hi."""
        rows = self.store.rows
        where, params = _sk_range("r.sk", lo, hi)
        kids_where, kids_params = _sk_range("parent_sk", lo, hi)
        touches = _Peek(rows("SELECT t.rid, t.pos, t.role, t.op, t.ok, t.grade, t.ts, t.failure, t.trusted "
                             f"FROM resources r CROSS JOIN touches t ON t.rid = r.rid {where} ORDER BY r.sk, t.rowid",
                             params))
        writes = _Peek(rows("SELECT w.rid, w.step, w.data FROM resources r CROSS JOIN writes w ON w.rid = r.rid "
                            f"{where} ORDER BY r.sk, w.rowid", params))
        lifecycle = _Peek(rows("SELECT l.rid, l.pos, l.what FROM resources r CROSS JOIN lifecycle l ON l.rid = r.rid "
                               f"{where} ORDER BY r.sk, l.rowid", params))
        kids = _Peek(rows("SELECT parent_sk, key, link FROM resources WHERE parent_sk IS NOT NULL "
                          f"{kids_where.replace('WHERE', 'AND')} ORDER BY parent_sk, sk", kids_params))
        rp = self.rp
        for rid, sk, key, name, data, parent_link in rows(
                "SELECT r.rid, r.sk, r.key, r.name, r.data, p.link FROM resources r "
                f"LEFT JOIN resources p ON p.sk = r.parent_sk {where} ORDER BY r.sk", params):
            res = resource_from_row(tuple(orjson.loads(key)), name, data)
            res.touches = [Touched(p, role, op, bool(ok), g, ts, f, bool(t))
                           for _, p, role, op, ok, g, ts, f, t in touches.take(rid)]
            res.writes = [write_from_row(rp, step, d) for _, step, d in writes.take(rid)]
            res.lifecycle = [(p, what) for _, p, what in lifecycle.take(rid)]
            kids.skip_below(sk)
            children = [(tuple(orjson.loads(k)), lk) for _, k, lk in kids.take(sk)]
            yield res, parent_link, children

    # -- views.json ---------------------------------------------------------------------------------

    def resource_dict(self, res: Resource, children: list[tuple[tuple, str]]) -> dict:
        key = res.key
        captures = res.captures
        return {
            "id": resource_id(key), "key": list(key), "connector": res.connector, "kind": res.kind,
            "title": title(key), "description": res.description, "note": res.name,
            "status": res.status, "lifecycle": [{"seq": p, "what": what} for p, what in res.lifecycle],
            "state": res.state, "sources": res.sources,
            "parent": resource_id(res.parent), "children": [resource_id(c) for c, _ in children],
            "entries": [{"seq": t.pos, "role": t.role, "op": t.op, "ok": t.ok} for t in res.touches],
            "writes": [w.fields | {"plan_step": w.step} for w in res.writes],
            "evidence": {"captures": captures, "weakest": weakest(captures)},
            "trusted": res.untrusted_from is None, "untrusted_from_seq": res.untrusted_from,
        }

    def views_json(self, resources: list[Path]) -> Iterator[bytes]:
        """views.json, streamed: one JSON object with sorted keys; each entry and each resource on a line
        of its own, so the whole document is never held in memory. `resources` are files holding the
        resource lines in key order (written while the notes were), each line after b",\\n"."""
        rp, rows = self.rp, self.store.rows
        yield b'{"chain":' + _compact(rp.chain_summary()) + b",\n"
        yield b'"entries":['
        sep = b"\n"
        buf: list[bytes] = []
        for (data,) in rows("SELECT json FROM entries ORDER BY pos"):
            buf.append(sep + data)
            sep = b",\n"
            if len(buf) >= 1024:
                yield b"".join(buf)
                buf.clear()
        yield b"".join(buf) + b"\n],\n"
        buf.clear()
        yield b'"files":['
        sep = b""
        for (name,) in rows("SELECT name FROM files ORDER BY name"):
            buf.append(sep + _compact(name))
            sep = b","
        yield b"".join(buf) + b'],\n"format":' + _compact(FORMAT) + b",\n"
        buf.clear()
        yield b'"resources":['
        first = True
        for part in resources:  # each line after its separator ",\n"; the first one's is "\n"
            with open(part, "rb") as f:
                while chunk := f.read(_CHUNK):
                    if first:
                        chunk = chunk[1:]
                        first = False
                    yield chunk
        yield b"\n],\n"
        yield b'"session":' + _compact(rp.session) + b',\n"unreadable_lines":['
        sep = b""
        for p, why in rows("SELECT pos, why FROM unreadable ORDER BY rowid"):
            yield sep + _compact({"line": p, "why": why})
            sep = b","
        yield b"]}\n"

    # -- resource notes -----------------------------------------------------------------------------

    def resource_note(self, res: Resource, parent_link: str | None, children: list[tuple[tuple, str]]) -> str:
        rp, key = self.rp, res.key
        out = [f"# {esc(title(key), 300)}", ""]
        desc = res.description
        if desc:
            out += [f"_{esc(desc, 120)}_", ""]
        out += ["[Session index](index.md) · [Revert plan](revert-plan.md)", ""]
        if not rp.report.intact:
            lines = [f"**Chain broken at seq {rp.report.broken_at_seq} ({esc(rp.report.kind)}).** Entries from seq "
                     f"{rp.untrusted_from} on are UNTRUSTED."]
            if res.untrusted_from is not None:
                lines.append(f"This resource was touched by UNTRUSTED entries from seq {res.untrusted_from} on: its "
                             "state and writes from there on are unverified.")
            else:
                lines.append("No untrusted entry touched this resource.")
            out += [callout("WARNING", lines), ""]
        captures = res.captures
        evidence = " · ".join(
            f"{code(g)} {', '.join(str(p) for p in sorted(set(ps)))}"
            for g, ps in sorted(captures.items(), key=lambda kv: _grade_rank(kv[0])))
        status = esc(res.status) + (f" ({seq_link(res.lifecycle[-1][0])})" if res.lifecycle else "")
        rows = [("connector", code(res.connector)), ("kind", code(res.kind)),
                ("key", " / ".join(code(p) for p in key[2:]) or "—"), ("status", status),
                ("evidence", f"{evidence} — weakest {code(weakest(captures) or '?')}")]
        if res.parent is not None:
            rows.append(("part of", parent_link if parent_link is not None else unknown_link(res.parent)))
        if children:
            rows.append(("holds", ", ".join(lk for _, lk in children[:50]) + (" …" if len(children) > 50 else "")))
        out += ["| | |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows), ""]

        out += ["## State as last seen", ""]
        if res.state:
            out += ["Merged field by field from the platform's answers; each field names the entry it last came "
                    "from.", "", "| field | value | from |", "|---|---|---|"]
            state, sources = res.state, res.sources
            origins: dict[int | None, str] = {None: "—"}  # the fields of one answer share their origin
            for field in sorted(state):
                src = sources.get(field)
                origin = origins.get(src)
                if origin is None:
                    mark = "" if src < (rp.untrusted_from or src + 1) else " **untrusted**"  # type: ignore[operator]
                    origin = origins[src] = f"{seq_link(src)} {code(rp.grade(src))}{mark}"  # type: ignore[arg-type]
                out.append(f"| {code(field)} | {cell(state[field])} | {origin} |")
        else:
            out.append("_No answer showed this resource's fields (only its id, or only writes without a body)._")
        if res.lifecycle:
            out += ["", "Lifecycle: " + "; ".join(f"{esc(what)} ({seq_link(p)})" for p, what in res.lifecycle)]
        out += ["", "## Entries", "", "| seq | time | role | call | capture | result |", "|---|---|---|---|---|---|"]
        for pos, role, op, ok, capture, ts, failure, trusted in res.touches:
            result = "ok" if ok else f"failed: {esc(failure or '?')}"
            trust = "" if trusted else " **untrusted**"
            out.append(f"| {seq_link(pos)} | {code(_clock(ts))} | {role} | {code(op)} | {code(capture)}{trust} | "
                       f"{result} |")
        if res.writes:
            out += ["", "## Writes", ""]
            for w in res.writes:
                out += self._write_section(w)
        return "\n".join(out) + "\n"

    def _write_section(self, w: WriteRecord) -> list[str]:
        grade = self.rp.grade
        f = w.fields
        pos, before, intended, actual, failure = f["seq"], f["before"], f["intended"], f["actual"], f["failure"]
        out = [f"### seq-{pos}", ""]
        trust = "" if f["trusted"] else " · **UNTRUSTED**"
        status = f["status"] if f["status"] is not None else "—"
        out.append(f"{seq_link(pos)} · {code(f['op'])} · {code(f['method'])} · HTTP {status} · capture "
                   f"{code(f['capture'])}{trust}" + (" · side effect of this call" if f["role"] == "side" else ""))
        out.append("")
        if f["created"]:
            out.append("- **Before:** did not exist; this write created it.")
        elif before is None:
            out.append("- **Before:** none captured: a **blind write** (no earlier entry of this session read it).")
        else:
            out.append("- **Before:** as seen in " + ", ".join(
                f"{seq_link(p)} ({code(grade(p))})" for p in f["before_seqs"]) + ".")
        if failure is not None:
            out.append(f"- **Result:** failed ({esc(failure)}); the view is unchanged.")
        fields = sorted(set(intended or {}) | {k for k in (actual or {})
                                               if before is None or (before or {}).get(k) != actual[k]})
        if fields:
            out += ["", "| field | before | intended | actual |", "|---|---|---|---|"]
            for name in fields[:60]:
                b = cell((before or {}).get(name), missing=before is None or name not in (before or {}))
                i = cell((intended or {}).get(name), missing=name not in (intended or {}))
                a = cell((actual or {}).get(name), missing=name not in (actual or {}))
                out.append(f"| {code(name)} | {b} | {i} | {a} |")
            if len(fields) > 60:
                out.append(f"| … | {len(fields) - 60} more fields in views.json | | |")
        out.append("")
        if failure is None:
            if f["differences"]:
                out.append("**Differences between intended and actual:**")
                out.append("")
                for d in f["differences"]:
                    line = f"- {code(d['field'], False)} {d['kind']}"
                    if d.get("missing") or d.get("extra"):
                        parts = [f"{label}: {cell(d[k])}" for k, label in (
                            ("missing", "asked for, absent"), ("extra", "present, not asked for")) if d.get(k)]
                        line += " (the lists in the table): " + "; ".join(parts)
                    else:
                        line += f": intended {cell(d.get('intended'))}, actual "
                        line += "—" if d["kind"] == "unconfirmed" else cell(d.get("actual"))
                    if d.get("note"):
                        line += f" ({esc(d['note'])})"
                    out.append(line)
            else:
                out.append("**Differences between intended and actual:** none seen.")
            out.append("")
        out += ["**Intended** (request body):", "", body_block(f["request_body"]), "",
                "**Actual** (response body):", "", body_block(f["response_body"]), ""]
        if w.step is not None:
            n = w.step
            out += [f"**Revert:** [step-{n}](revert-plan.md#step-{n}): {w.step_flags}. {esc(w.step_reason, 400)}", ""]
        return out

    # -- index and timeline -------------------------------------------------------------------------

    def index_note(self) -> Iterator[str]:
        """The index note's lines (joined with newlines)."""
        rp, c, rows = self.rp, self.rp.counts, self.store.rows
        r = rp.report
        yield from [f"# Replay of session {code(rp.session, False)}", ""]
        total = c.entries + c.unreadable
        yield (f"Derived from the session's journal ({total} lines) by `broker replay`. Views are built from "
               "what the platform answered; they can be deleted and rebuilt byte for byte.")
        yield ""
        yield from ["## Chain", ""]
        if r.intact:
            yield f"Intact: all {r.entries} entries verified (canonical form, contract, hash chain, blobs)."
        else:
            yield from [self.untrusted_banner(), "",
                        f"Verified before the break: {r.entries} entries. Untrusted from seq {rp.untrusted_from} on: "
                        f"{c.untrusted} entries folded, {c.unreadable} unreadable lines."]
            for p, why in rows("SELECT pos, why FROM unreadable ORDER BY rowid"):
                yield f"- line {p}: {esc(why)}"
        for note in r.notes:
            yield f"- note: {esc(note)}"
        yield from ["", "## Evidence", "",
                    "Capture grade of the entries (strongest first): " + " · ".join(
                        f"{code(g)} {n}" for g, n in sorted(c.grades.items(), key=lambda kv: _grade_rank(kv[0])))
                    + ".",
                    "`broker` saw the upstream exchange; `gateway` saw the MCP tool call and result; `agent` is the "
                    "agent's own report.", ""]
        yield from [f"## Resources ({c.resources})", ""]
        current = None
        for key, lk, data in rows("SELECT key, link, data FROM resources ORDER BY sk"):
            k = tuple(orjson.loads(key))
            res = resource_from_row(k, "", data)
            if k[0] != current:
                if current is not None:
                    yield ""
                current = k[0]
                yield from [f"### {esc(TITLES.get(current, current))}", "",
                            "| resource | status | reads | writes | evidence |", "|---|---|---|---|---|"]
            trust = "" if res.untrusted_from is None else " **untrusted**"
            yield (f"| {lk} | {esc(res.status)} | {res.reads} | {res.n_writes} | "
                   f"{code(res.weakest or '?')}{trust} |")
        if current is not None:
            yield ""
        (n_writes,) = self.store.one("SELECT COUNT(*) FROM writes WHERE role = 'write'")  # type: ignore[misc]
        yield from [f"## Writes ({n_writes})", "", "| seq | resource | call | result | revert |",
                    "|---|---|---|---|---|"]
        for pos, lk, op, failure, step, flags in rows(
                "SELECT w.pos, r.link, w.op, w.failure, w.step, w.flags FROM writes w JOIN resources r "
                "ON r.rid = w.rid WHERE w.role = 'write' ORDER BY w.pos, r.sk, w.rowid"):
            n = rp.step_number(step) if step is not None else None
            revert = f"[step-{n}](revert-plan.md#step-{n}): {flags}" if n else "—"
            result = "ok" if failure is None else f"failed: {esc(failure)}"
            yield f"| {seq_link(pos)} | {lk} | {code(op)} | {result} | {revert} |"
        if c.unmapped:
            yield from ["", f"## Entries without a resource view ({c.unmapped})", ""]
            for (data,) in rows("SELECT json FROM entries WHERE nres = 0 ORDER BY pos LIMIT 200"):
                e = orjson.loads(data)
                why = f": {esc('; '.join(e['notes']), 200)}" if e["notes"] else ""
                yield (f"- {seq_link(e['seq'])} {code(e['connector'])} {e['effect']} {code(e['method'])} "
                       f"{code(_short_url(e['url']))}{why}")
            if c.unmapped > 200:
                yield f"- … {c.unmapped - 200} more in views.json"
        yield from ["", "## Timeline", ""]
        for page in sorted(f"timeline-{i + 1:04d}.md" for i in c.pages):
            first = (int(page[9:-3]) - 1) * PAGE + 1
            yield f"- [seq {first}–{min(first + PAGE - 1, c.top)}]({page})"
        yield from ["", "## Files", "", "- [Revert plan](revert-plan.md) (also `revert-plan.json`)",
                    "- `views.json`: everything here, machine-readable", ""]

    def timeline_pages(self) -> Iterator[tuple[str, str]]:
        rp = self.rp
        touched = _Peek(self.store.rows("SELECT t.pos, r.link, t.op FROM touches t JOIN resources r "
                                        "ON r.rid = t.rid ORDER BY t.pos, t.rowid"))
        page: list[str] = []
        current = None
        banner = None if rp.report.intact else self.untrusted_banner()
        for pos, seq, data in self.store.rows("SELECT pos, seq, json FROM entries ORDER BY pos"):
            e = orjson.loads(data)
            name = page_of(pos)
            if name != current:
                if current is not None:
                    yield current, "\n".join(page) + "\n"
                current = name
                page = [f"# Timeline of {code(rp.session, False)}: {name[:-3]}", "", "[Session index](index.md)", ""]
                if banner is not None:
                    page += [banner, ""]
            page += [f"### seq-{pos}", ""]
            status = e["status"] if e["status"] is not None else "—"
            failure = e["failure"]
            result = "ok" if failure is None else f"failed: {esc(failure)}"
            trust = "" if e["trusted"] else " · **UNTRUSTED**" + (
                f" (the entry claims seq {seq})" if seq != pos else "")
            page.append(f"{code(e['ts'], False)} · {code(e['connector'], False)} · {e['effect']} · capture "
                        f"{code(e['capture'], False)} · {code(e['method'], False)} {status} {result}{trust}")
            page.append("")
            page.append(f"URL: {code(e['url'], False)}")
            touched.skip_below(pos)
            links = touched.take(pos)
            if e["resources"]:
                page += ["", "Touched: " + ", ".join(f"{lk} ({code(op, False)})" for _, lk, op in links)]
            for note in e["notes"]:
                page += ["", f"Note: {esc(note, 400)}"]
            page.append("")
        if current is not None:
            yield current, "\n".join(page) + "\n"

    # -- revert plan --------------------------------------------------------------------------------

    def plan_note(self) -> Iterator[str]:
        """The plan note's lines (joined with newlines)."""
        rp, c = self.rp, self.rp.counts
        yield from [f"# Revert plan: session {code(rp.session, False)}", "",
                    "Derived from the journal by replay and **never executed**. Newest write first. Each step is the "
                    "inverse call built from the captured before-state and the response, or why there is none.", "",
                    "- **revertible**: the call restores the captured before-state (within what the API allows).",
                    "- **blind**: no earlier entry of the session captured the state the inverse needs.",
                    "- **approximate**: the call is a best-effort compensation, not an exact inverse.",
                    "- **evidence**: the capture grade of the write and of the entries its before-state came from.",
                    "", "[Session index](index.md)", ""]
        if not rp.report.intact:
            yield from [self.untrusted_banner(), ""]
        yield from [f"{c.steps} steps: {c.revertible} revertible, {c.approximate} approximate compensations, "
                    f"{c.blind} blind, {c.no_call} without a call.", ""]
        for sid, data, lk in self.store.rows("SELECT s.id, s.data, r.link FROM steps s LEFT JOIN resources r "
                                             "ON r.rid = s.rid ORDER BY s.id DESC"):
            n = rp.step_number(sid)
            yield from self._plan_step(n, PlanStep.from_row(orjson.loads(data), n), lk)

    def _plan_step(self, i: int, s: PlanStep, lk: str | None) -> list[str]:
        d = step_dict(self.rp, s)
        target = (lk if lk is not None else unknown_link(s.key)) if s.key is not None else "no resource identified"
        out = [f"## step-{i}", "",
               f"For {seq_link(s.pos)} · {code(s.connector, False)} · {code(s.op, False)} · {target}", "",
               f"- {_step_flags(s)}",
               f"- evidence: write {code(s.capture, False)}; before-state " + (
                   ", ".join(f"{seq_link(p)}" for p in s.before_seqs) + " (" + ", ".join(
                       code(g, False) for g in s.before_capture) + ")" if s.before_seqs else "none") +
               f"; weakest {code(d['evidence'] or '?', False)}" + ("" if s.trusted else " · **UNTRUSTED**"),
               f"- reason: {esc(d['reason'], 1000)}", ""]
        if s.call is not None:
            lines = f"{s.call.method} {s.call.url}"
            if s.call.body is not None:
                lines += "\nContent-Type: application/json\n\n" + dumps(s.call.body, indent=True)
            out += [fence(lines, "http"), ""]
            from .markdown import refs_in

            refs = refs_in(s.call.body)
            if refs:
                out += ["The body holds spilled values: send the blob's bytes in their place: " + "; ".join(
                    f"{code(p, False)} → {blob_link(r)}" for p, r in refs), ""]
        return out

    def plan_json(self) -> Iterator[bytes]:
        """revert-plan.json (the plan object, indented, sorted keys), streamed step by step."""
        rp = self.rp
        head = _json_bytes({"chain": rp.chain_summary(), "executed": False, "session": rp.session, "steps": []})
        cut = head.rindex(b"[]")
        if not rp.counts.steps:
            yield head
            return
        yield head[:cut] + b"["
        sep = b"\n"
        for s in rp.steps.newest_first():
            step = orjson.dumps(step_dict(rp, s), option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
            yield sep + b"    " + step.replace(b"\n", b"\n    ")
            sep = b",\n"
        yield b"\n  ]" + head[cut + 2 :]

    # -- all files ----------------------------------------------------------------------------------

    CHILD_SHARE = 0.30
    """The share of the resource notes' work (the last notes in key order, weighed by their touches) a forked
    child writes besides the timeline, the index and the plan, while this process writes the other notes and
    then views.json: about half the work each (measured on the replay benchmark: 0.34 until the notes got
    cheaper to render, branch `replay30b`, when the child became the longer side by about 0.6 s of CPU)."""

    def write_all(self, folder: Path) -> None:
        """Write every file into `folder`, naming each in the store's `files` table. When a fork is possible
        (forked.py), a child writes the timeline, the index, the plan and the last resource notes while this
        process writes the others; views.json comes last either way, written here."""
        store = self.store
        head, tail = store.scratch_path("resources.jsonl"), store.scratch_path("resources-tail.jsonl")
        split = self._split() if forked.can_fork() else None
        child = forked.start(lambda: self._write_tail(folder, split, tail), store) if split else None
        try:
            self.write_notes(folder, None, split[0] if split else None, head)
        except BaseException:
            if child is not None:
                child.close()
            raise
        if split and (child is None or child.result() is None):
            self._write_tail(folder, split, tail)  # the fork failed: the same files, written here
        parts = [head, tail] if split else [head]
        if not split:
            self.write_summaries(folder)
        store.db.execute("INSERT OR IGNORE INTO files SELECT name FROM resources")  # one note each
        for i in sorted(self.rp.counts.pages):
            store.add("files", (f"timeline-{i + 1:04d}.md",))
        for name in ("index.md", "revert-plan.md", "revert-plan.json", "views.json"):
            store.add("files", (name,))
        _put_stream(folder, "views.json", self.views_json(parts))
        for part in parts:
            part.unlink()

    def _split(self) -> tuple[bytes | None]:
        """(sort key of the first resource the child writes,), or (None,) when it writes none."""
        weights = self.store.rows("SELECT r.sk, 1 + c.n FROM resources r JOIN (SELECT rid, COUNT(*) AS n FROM "
                                  "touches GROUP BY rid) c ON c.rid = r.rid ORDER BY r.sk DESC")
        (touches,) = self.store.one("SELECT COUNT(*) FROM touches")  # type: ignore[misc]
        total = touches + self.rp.counts.resources
        share, first = 0, None
        for sk, weight in weights:
            if share + weight > total * self.CHILD_SHARE:
                break
            share += weight
            first = sk
        weights.close()  # its cursor is done with before the store is shared
        return (first,)

    def _write_tail(self, folder: Path, split: tuple[bytes | None], lines: Path) -> bytes:
        """The child's share of write_all; b"" (not None, which forked.start reads as a failed child) when done."""
        if split[0] is not None:
            self.write_notes(folder, split[0], None, lines)
        else:
            lines.write_bytes(b"")
        self.write_summaries(folder)
        return b""

    def write_notes(self, folder: Path, lo: bytes | None, hi: bytes | None, lines: Path) -> None:
        """The notes of the resources with sort keys in [lo, hi), and their views.json lines into `lines`."""
        with open(lines, "wb") as out, _Notes(folder, self.fresh) as notes:
            for res, parent_link, children in self.resources(lo, hi):
                notes.put(res.name, self.resource_note(res, parent_link, children).encode())
                out.write(b",\n" + _compact(self.resource_dict(res, children)))

    def write_summaries(self, folder: Path) -> None:
        """The timeline pages, the index and the revert plan (md and json): files that read the store
        only, so a forked child can write them (forked.py)."""
        with _Notes(folder, self.fresh) as notes:
            for name, text in self.timeline_pages():
                notes.put(name, text.encode())
        _put_stream(folder, "index.md", _joined(self.index_note()))
        _put_stream(folder, "revert-plan.md", _joined(self.plan_note()))
        _put_stream(folder, "revert-plan.json", self.plan_json())


def _sk_range(column: str, lo: bytes | None, hi: bytes | None) -> tuple[str, tuple]:
    """A WHERE clause bounding `column` to [lo, hi) (either bound may be None)."""
    terms, params = [], []
    if lo is not None:
        terms.append(f"{column} >= ?")
        params.append(lo)
    if hi is not None:
        terms.append(f"{column} < ?")
        params.append(hi)
    return ("WHERE " + " AND ".join(terms) if terms else ""), tuple(params)


def _joined(lines: Iterable[str]) -> Iterator[bytes]:
    """"\n".join(lines), encoded, in chunks."""
    buf: list[str] = []
    size = 0
    first = True
    for line in lines:
        if first:
            buf.append(line)
            first = False
        else:
            buf.append("\n" + line)
        size += len(line) + 1
        if size >= _CHUNK:
            yield "".join(buf).encode()
            buf.clear()
            size = 0
    if buf:
        yield "".join(buf).encode()


def _json_bytes(value: object) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"


def _compact(value: object) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _grade_rank(g: str) -> tuple[int, str]:
    return (GRADES.index(g) if g in GRADES else len(GRADES), g)


def _step_flags(s: PlanStep) -> str:
    return step_flags(s.revertible, s.blind, s.approximate, s.call is not None)


def _short_url(u: str) -> str:
    return u if len(u) <= 120 else u[:119] + "…"


def write_views(vault: Vault, rp: Replay) -> tuple[Path, list[str]]:
    """Write every view file of `rp` under views/<session>/; return the folder and the file names."""
    rp.require_views()
    out = views_dir(vault, rp.session)
    out.mkdir(parents=True, exist_ok=True)
    store = rp.store
    store.db.execute("DELETE FROM files")
    store.db.execute("DELETE FROM previous")
    for name in _previous_files(out / "views.json"):
        store.add("previous", (name,))
    with os.scandir(out) as listing:
        fresh = next(listing, None) is None
    with collector.paused():
        Views(rp, fresh).write_all(out)
    for (stale,) in store.rows("SELECT name FROM previous WHERE name NOT IN (SELECT name FROM files) ORDER BY name"):
        if _OWN_NAME.match(stale):
            (out / stale).unlink(missing_ok=True)
    return out, [name for (name,) in store.rows("SELECT name FROM files ORDER BY name")]


def _previous_files(path: Path) -> set[str]:
    """The "files" list of an earlier views.json: from its own line (as replay writes it), else, for a
    file edited into another layout and not too large, from the whole document."""
    files: object = None
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.startswith(b'"files":'):
                    files = orjson.loads(line[len(b'"files":') :].rstrip().rstrip(b","))
                    break
        if files is None and path.stat().st_size <= _WHOLE_MANIFEST_LIMIT:
            doc = orjson.loads(path.read_bytes())
            files = doc.get("files") if isinstance(doc, dict) else None
    except (OSError, orjson.JSONDecodeError):
        return set()
    return {f for f in files if isinstance(f, str) and "/" not in f} if isinstance(files, list) else set()


class _Notes:
    """Writes notes into one folder by name, through a descriptor of the folder (no walk of the folder's
    path per file: 37,000 notes at 10^5 entries). In a folder that held nothing when the replay began
    there is no earlier note to compare with, so none is looked for (a stat per note saved)."""

    def __init__(self, folder: Path, fresh: bool) -> None:
        self.fresh = fresh
        self.fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))

    def __enter__(self) -> _Notes:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)

    def put(self, name: str, data: bytes) -> None:
        _put(self.fd, name, data, self.fresh)


def _put(folder: int, name: str, data: bytes, fresh: bool = False) -> None:
    """Write a note into the folder open as `folder` unless it already holds `data` (unchanged notes keep
    their mtime; `fresh`: the folder was empty, nothing to compare). Notes are derived and rewritten in
    place; views.json, written last, is what says an output is complete."""
    if not fresh:
        try:
            st = os.stat(name, dir_fd=folder, follow_symlinks=False)
            old_size = st.st_size if stat.S_ISREG(st.st_mode) else None
        except OSError:
            old_size = None
        if old_size == len(data):
            try:
                with open(os.open(name, os.O_RDONLY, dir_fd=folder), "rb") as f:
                    if f.read() == data:
                        return
            except OSError:
                pass
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=folder)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _put_stream(folder: Path, name: str, chunks: Iterator[bytes]) -> None:
    """Write a streamed file to a temporary name, then keep the old one if identical, else replace it."""
    target = folder / name
    tmp = folder / f".{name}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
    if _same_file(tmp, target):
        tmp.unlink()
    else:
        os.replace(tmp, target)


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.stat().st_size != b.stat().st_size:
            return False
        with open(a, "rb") as fa, open(b, "rb") as fb:
            while True:
                x, y = fa.read(1 << 20), fb.read(1 << 20)
                if x != y:
                    return False
                if not x:
                    return True
    except OSError:
        return False


__all__ = ["FORMAT", "PAGE", "Views", "blob_link", "body_block", "note_name", "views_dir", "write_views"]
