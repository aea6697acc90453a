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

import gc
import hashlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson

from journal.vault import SESSION_SUFFIX, Vault, session_filename

from . import connectors
from .fold import GRADES, EntryRecord, PlanStep, Replay, Resource, WriteRecord, weakest
from .markdown import blob_link, body_block, callout, cell, code, dumps, esc, fence
from .plan import ordered_steps, plan_dict, resource_id, step_dict

FORMAT = "connector-replay/1"
PAGE = 500
TITLES = {"gmail": "Gmail", "calendar": "Calendar", "drive": "Drive", "slack": "Slack", "github": "GitHub",
          "graph": "Microsoft Graph"}
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_WHOLE_MANIFEST_LIMIT = 64 << 20
_OWN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\.(md|json)\Z")


def views_dir(vault: Vault, session: str) -> Path:
    return vault.views_dir / session_filename(session)[: -len(SESSION_SUFFIX)]


def note_name(key: tuple) -> str:
    readable = _UNSAFE.sub("_", "-".join(key)).strip("._-")[:80].rstrip("._-") or "resource"
    digest = hashlib.sha256(orjson.dumps(list(key))).hexdigest()[:10]
    return f"{readable}-{digest}.md"


def page_of(pos: int) -> str:
    return f"timeline-{(pos - 1) // PAGE + 1:04d}.md"


def seq_link(pos: int) -> str:
    return f"[seq {pos}](timeline-{(pos - 1) // PAGE + 1:04d}.md#seq-{pos})"


def _clock(ts: str) -> str:
    return ts[11:] if len(ts) > 11 else ts


class Views:
    """The derived model of one replay: names, titles, step numbers; renders every file."""

    def __init__(self, rp: Replay) -> None:
        self.rp = rp
        self.keys = sorted(rp.resources)
        self.names = {k: note_name(k) for k in self.keys}
        self.children: dict[tuple, list[tuple]] = {}
        for k in self.keys:
            parent = rp.resources[k].parent
            if parent is not None and parent in rp.resources:
                self.children.setdefault(parent, []).append(k)
        self.steps = ordered_steps(rp)
        self.step_no = {id(s): i for i, s in enumerate(self.steps, 1)}
        self.descriptions = {k: self._describe(rp.resources[k]) for k in self.keys}
        self._links: dict[tuple, str] = {}

    # -- names and titles ---------------------------------------------------------------------------

    def _describe(self, res: Resource) -> str | None:
        module = connectors.modules().get(res.handler)
        fn = getattr(module, "describe", None)
        if fn is None or not res.state:
            return None
        try:
            text = fn(res.kind, res.key, res.state)
        except Exception:  # noqa: BLE001 - a title is never worth failing a replay
            return None
        return " ".join(text.split())[:120] if isinstance(text, str) and text.strip() else None

    def title(self, key: tuple) -> str:
        return f"{TITLES.get(key[0], key[0])} {key[1]} {'/'.join(key[2:])}"

    def link(self, key: tuple) -> str:
        out = self._links.get(key)
        if out is None:
            if key not in self.names:
                out = code("/".join(key))
            else:
                desc = self.descriptions.get(key)
                out = f"[{esc(self.title(key))}]({self.names[key]})" + (f" ({esc(desc, 60)})" if desc else "")
            self._links[key] = out
        return out

    def untrusted_banner(self) -> str:
        r = self.rp.report
        return callout("WARNING", [
            f"**Chain broken at seq {r.broken_at_seq} ({esc(r.kind)}).** {esc(r.detail or '', 300)}",
            f"Everything from seq {self.rp.untrusted_from} on is **untrusted**: it is shown, marked, but nothing "
            "verifies it.",
        ])

    # -- views.json ---------------------------------------------------------------------------------

    def write_dict(self, w: WriteRecord) -> dict:
        return {
            "seq": w.pos, "op": w.op, "role": w.role, "method": w.method, "url": w.url, "status": w.status,
            "failure": w.failure, "capture": w.capture, "trusted": w.trusted, "created": w.created,
            "lifecycle": w.lifecycle, "before": w.before, "before_seqs": w.before_seqs,
            "intended": w.intended, "actual": w.actual, "differences": w.differences,
            "request_body": w.request_body, "response_body": w.response_body,
            "plan_step": self.step_no.get(id(w.step)) if w.step is not None else None,
        }

    def resource_dict(self, key: tuple) -> dict:
        res = self.rp.resources[key]
        return {
            "id": resource_id(key), "key": list(key), "connector": res.connector, "kind": res.kind,
            "title": self.title(key), "description": self.descriptions.get(key), "note": self.names[key],
            "status": res.status, "lifecycle": [{"seq": p, "what": what} for p, what in res.lifecycle],
            "state": res.state, "sources": res.sources,
            "parent": resource_id(res.parent), "children": [resource_id(c) for c in self.children.get(key, [])],
            "entries": [{"seq": p, "role": role, "op": op, "ok": ok} for p, role, op, ok in res.touches],
            "writes": [self.write_dict(w) for w in res.writes],
            "evidence": {"captures": res.captures, "weakest": weakest(res.captures)},
            "trusted": res.untrusted_from is None, "untrusted_from_seq": res.untrusted_from,
        }

    def entry_dict(self, e: EntryRecord) -> dict:
        return {
            "seq": e.pos, "claimed_seq": e.seq if e.seq != e.pos else None, "ts": e.ts,
            "connector": e.connector, "effect": e.effect, "capture": e.capture, "method": e.method,
            "url": e.url, "status": e.status, "failure": e.failure, "trusted": e.trusted, "ops": e.ops,
            "resources": [resource_id(k) for k in e.resources], "notes": e.notes,
        }

    def views_json(self, files: list[str]) -> Iterator[bytes]:
        """views.json, streamed: one JSON object with sorted keys; each entry and each resource on a line
        of its own, so the whole document is never held in memory."""
        rp = self.rp

        def items(key: bytes, values: Iterator[dict]) -> Iterator[bytes]:
            yield b'"' + key + b'":['
            sep = b"\n"
            for v in values:
                yield sep + _compact(v)
                sep = b",\n"
            yield b"\n],\n"

        yield b'{"chain":' + _compact(rp.chain_summary()) + b",\n"
        yield from items(b"entries", (self.entry_dict(e) for e in rp.entries))
        yield b'"files":' + _compact(files) + b',\n"format":' + _compact(FORMAT) + b",\n"
        yield from items(b"resources", (self.resource_dict(k) for k in self.keys))
        yield b'"session":' + _compact(rp.session) + b',\n"unreadable_lines":' + _compact(
            [{"line": p, "why": why} for p, why in rp.unreadable]) + b"}\n"

    # -- resource notes -----------------------------------------------------------------------------

    def resource_note(self, key: tuple) -> str:
        rp, res = self.rp, self.rp.resources[key]
        out = [f"# {esc(self.title(key), 300)}", ""]
        desc = self.descriptions.get(key)
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
        evidence = " · ".join(
            f"{code(g)} {', '.join(str(p) for p in sorted(set(ps)))}"
            for g, ps in sorted(res.captures.items(), key=lambda kv: _grade_rank(kv[0])))
        status = esc(res.status) + (f" ({seq_link(res.lifecycle[-1][0])})" if res.lifecycle else "")
        rows = [("connector", code(res.connector)), ("kind", code(res.kind)),
                ("key", " / ".join(code(p) for p in key[2:]) or "—"), ("status", status),
                ("evidence", f"{evidence} — weakest {code(weakest(res.captures) or '?')}")]
        if res.parent is not None:
            rows.append(("part of", self.link(res.parent)))
        kids = self.children.get(key, [])
        if kids:
            rows.append(("holds", ", ".join(self.link(k) for k in kids[:50]) + (" …" if len(kids) > 50 else "")))
        out += ["| | |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows), ""]

        out += ["## State as last seen", ""]
        if res.state:
            out += ["Merged field by field from the platform's answers; each field names the entry it last came "
                    "from.", "", "| field | value | from |", "|---|---|---|"]
            for field in sorted(res.state):
                src = res.sources.get(field)
                mark = "" if src is None or src < (rp.untrusted_from or src + 1) else " **untrusted**"
                origin = f"{seq_link(src)} {code(self._grade(src))}{mark}" if src is not None else "—"
                out.append(f"| {code(field)} | {cell(res.state[field])} | {origin} |")
        else:
            out.append("_No answer showed this resource's fields (only its id, or only writes without a body)._")
        if res.lifecycle:
            out += ["", "Lifecycle: " + "; ".join(f"{esc(what)} ({seq_link(p)})" for p, what in res.lifecycle)]
        out += ["", "## Entries", "", "| seq | time | role | call | capture | result |", "|---|---|---|---|---|---|"]
        for p, role, op, ok in res.touches:
            e = rp.entry_at(p)
            result = "ok" if ok else f"failed: {esc(e.failure or '?')}"
            trust = "" if e.trusted else " **untrusted**"
            out.append(f"| {seq_link(p)} | {code(_clock(e.ts))} | {role} | {code(op)} | {code(e.capture)}{trust} | "
                       f"{result} |")
        if res.writes:
            out += ["", "## Writes", ""]
            for w in res.writes:
                out += self._write_section(res, w)
        return "\n".join(out) + "\n"

    def _grade(self, pos: int) -> str:
        return self.rp.entry_at(pos).capture

    def _write_section(self, res: Resource, w: WriteRecord) -> list[str]:
        out = [f"### seq-{w.pos}", ""]
        trust = "" if w.trusted else " · **UNTRUSTED**"
        status = w.status if w.status is not None else "—"
        out.append(f"{seq_link(w.pos)} · {code(w.op)} · {code(w.method)} · HTTP {status} · capture {code(w.capture)}"
                   f"{trust}" + (" · side effect of this call" if w.role == "side" else ""))
        out.append("")
        if w.created:
            out.append("- **Before:** did not exist; this write created it.")
        elif w.before is None:
            out.append("- **Before:** none captured: a **blind write** (no earlier entry of this session read it).")
        else:
            out.append("- **Before:** as seen in " + ", ".join(
                f"{seq_link(p)} ({code(self._grade(p))})" for p in w.before_seqs) + ".")
        if w.failure is not None:
            out.append(f"- **Result:** failed ({esc(w.failure)}); the view is unchanged.")
        fields = sorted(set(w.intended or {}) | {k for k in (w.actual or {})
                                                 if w.before is None or (w.before or {}).get(k) != w.actual[k]})
        if fields:
            out += ["", "| field | before | intended | actual |", "|---|---|---|---|"]
            for f in fields[:60]:
                before = cell((w.before or {}).get(f), missing=w.before is None or f not in (w.before or {}))
                intended = cell((w.intended or {}).get(f), missing=f not in (w.intended or {}))
                actual = cell((w.actual or {}).get(f), missing=f not in (w.actual or {}))
                out.append(f"| {code(f)} | {before} | {intended} | {actual} |")
            if len(fields) > 60:
                out.append(f"| … | {len(fields) - 60} more fields in views.json | | |")
        out.append("")
        if w.failure is None:
            if w.differences:
                out.append("**Differences between intended and actual:**")
                out.append("")
                for d in w.differences:
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
        out += ["**Intended** (request body):", "", body_block(w.request_body), "",
                "**Actual** (response body):", "", body_block(w.response_body), ""]
        if w.step is not None:
            n = self.step_no[id(w.step)]
            out += [f"**Revert:** [step-{n}](revert-plan.md#step-{n}): {_step_flags(w.step)}. "
                    f"{esc(w.step.reason, 400)}", ""]
        return out

    # -- index and timeline -------------------------------------------------------------------------

    def index_note(self) -> str:
        rp = self.rp
        r = rp.report
        out = [f"# Replay of session {code(rp.session, False)}", ""]
        total = len(rp.entries) + len(rp.unreadable)
        out.append(f"Derived from the session's journal ({total} lines) by `broker replay`. Views are built from "
                   "what the platform answered; they can be deleted and rebuilt byte for byte.")
        out.append("")
        out += ["## Chain", ""]
        if r.intact:
            out.append(f"Intact: all {r.entries} entries verified (canonical form, contract, hash chain, blobs).")
        else:
            out += [self.untrusted_banner(), "",
                    f"Verified before the break: {r.entries} entries. Untrusted from seq {rp.untrusted_from} on: "
                    f"{sum(1 for e in rp.entries if not e.trusted)} entries folded, {len(rp.unreadable)} unreadable "
                    "lines."]
            for p, why in rp.unreadable:
                out.append(f"- line {p}: {esc(why)}")
        for note in r.notes:
            out.append(f"- note: {esc(note)}")
        grades: dict[str, int] = {}
        for e in rp.entries:
            grades[e.capture] = grades.get(e.capture, 0) + 1
        out += ["", "## Evidence", "",
                "Capture grade of the entries (strongest first): " + " · ".join(
                    f"{code(g)} {n}" for g, n in sorted(grades.items(), key=lambda kv: _grade_rank(kv[0]))) + ".",
                "`broker` saw the upstream exchange; `gateway` saw the MCP tool call and result; `agent` is the "
                "agent's own report.", ""]
        out += [f"## Resources ({len(self.keys)})", ""]
        by_connector: dict[str, list[tuple]] = {}
        for k in self.keys:
            by_connector.setdefault(k[0], []).append(k)
        for conn in sorted(by_connector):
            out += [f"### {esc(TITLES.get(conn, conn))}", "", "| resource | status | reads | writes | evidence |",
                    "|---|---|---|---|---|"]
            for k in by_connector[conn]:
                res = rp.resources[k]
                reads = sum(1 for _, role, _, _ in res.touches if role == "read")
                trust = "" if res.untrusted_from is None else " **untrusted**"
                out.append(f"| {self.link(k)} | {esc(res.status)} | {reads} | {len(res.writes)} | "
                           f"{code(weakest(res.captures) or '?')}{trust} |")
            out.append("")
        writes = [w for k in self.keys for w in rp.resources[k].writes if w.role == "write"]
        out += [f"## Writes ({len(writes)})", "", "| seq | resource | call | result | revert |",
                "|---|---|---|---|---|"]
        owner = {id(w): k for k in self.keys for w in rp.resources[k].writes}
        for w in sorted(writes, key=lambda w: w.pos):
            n = self.step_no.get(id(w.step)) if w.step is not None else None
            revert = f"[step-{n}](revert-plan.md#step-{n}): {_step_flags(w.step)}" if n else "—"
            result = "ok" if w.failure is None else f"failed: {esc(w.failure)}"
            out.append(f"| {seq_link(w.pos)} | {self.link(owner[id(w)])} | {code(w.op)} | {result} | {revert} |")
        unmapped = [e for e in rp.entries if not e.resources]
        if unmapped:
            out += ["", f"## Entries without a resource view ({len(unmapped)})", ""]
            for e in unmapped[:200]:
                why = f": {esc('; '.join(e.notes), 200)}" if e.notes else ""
                out.append(f"- {seq_link(e.pos)} {code(e.connector)} {e.effect} {code(e.method)} "
                           f"{code(_short_url(e.url))}{why}")
            if len(unmapped) > 200:
                out.append(f"- … {len(unmapped) - 200} more in views.json")
        pages = sorted({page_of(e.pos) for e in rp.entries})
        top = max((e.pos for e in rp.entries), default=0)
        out += ["", "## Timeline", ""]
        for page in pages:
            first = (int(page[9:13]) - 1) * PAGE + 1
            out.append(f"- [seq {first}–{min(first + PAGE - 1, top)}]({page})")
        out += ["", "## Files", "", "- [Revert plan](revert-plan.md) (also `revert-plan.json`)",
                "- `views.json`: everything here, machine-readable", ""]
        return "\n".join(out)

    def timeline_pages(self) -> Iterator[tuple[str, str]]:
        rp = self.rp
        page: list[str] = []
        current = None
        for e in rp.entries:
            name = page_of(e.pos)
            if name != current:
                if current is not None:
                    yield current, "\n".join(page) + "\n"
                current = name
                page = [f"# Timeline of {code(rp.session, False)}: {name[:-3]}", "", "[Session index](index.md)", ""]
                if not rp.report.intact:
                    page += [self.untrusted_banner(), ""]
            page += [f"### seq-{e.pos}", ""]
            status = e.status if e.status is not None else "—"
            result = "ok" if e.failure is None else f"failed: {esc(e.failure)}"
            trust = "" if e.trusted else " · **UNTRUSTED**" + (
                f" (the entry claims seq {e.seq})" if e.seq != e.pos else "")
            page.append(f"{code(e.ts, False)} · {code(e.connector, False)} · {e.effect} · capture "
                        f"{code(e.capture, False)} · {code(e.method, False)} {status} {result}{trust}")
            page.append("")
            page.append(f"URL: {code(e.url, False)}")
            if e.resources:
                page += ["", "Touched: " + ", ".join(
                    f"{self.link(k)} ({code(op, False)})" for k, op in zip(e.resources, e.ops, strict=True))]
            for note in e.notes:
                page += ["", f"Note: {esc(note, 400)}"]
            page.append("")
        if current is not None:
            yield current, "\n".join(page) + "\n"

    # -- revert plan --------------------------------------------------------------------------------

    def plan_note(self) -> str:
        rp = self.rp
        out = [f"# Revert plan: session {code(rp.session, False)}", "",
               "Derived from the journal by replay and **never executed**. Newest write first. Each step is the "
               "inverse call built from the captured before-state and the response, or why there is none.", "",
               "- **revertible**: the call restores the captured before-state (within what the API allows).",
               "- **blind**: no earlier entry of the session captured the state the inverse needs.",
               "- **approximate**: the call is a best-effort compensation, not an exact inverse.",
               "- **evidence**: the capture grade of the write and of the entries its before-state came from.", "",
               "[Session index](index.md)", ""]
        if not rp.report.intact:
            out += [self.untrusted_banner(), ""]
        n_rev = sum(s.revertible for s in self.steps)
        n_blind = sum(s.blind for s in self.steps)
        n_approx = sum(s.approximate for s in self.steps)
        n_none = sum(s.call is None for s in self.steps)
        out += [f"{len(self.steps)} steps: {n_rev} revertible, {n_approx} approximate compensations, {n_blind} blind, "
                f"{n_none} without a call.", ""]
        for i, s in enumerate(self.steps, 1):
            out += self._plan_step(i, s)
        return "\n".join(out)

    def _plan_step(self, i: int, s: PlanStep) -> list[str]:
        d = step_dict(self.rp, s)
        target = self.link(s.key) if s.key is not None else "no resource identified"
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

    # -- all files ----------------------------------------------------------------------------------

    def files(self) -> Iterator[tuple[str, bytes | Iterator[bytes]]]:
        names: list[str] = []
        for k in self.keys:
            names.append(self.names[k])
            yield self.names[k], self.resource_note(k).encode()
        for name, text in self.timeline_pages():
            names.append(name)
            yield name, text.encode()
        yield "index.md", self.index_note().encode()
        yield "revert-plan.md", self.plan_note().encode()
        yield "revert-plan.json", _json_bytes(plan_dict(self.rp))
        names += ["index.md", "revert-plan.md", "revert-plan.json", "views.json"]
        yield "views.json", self.views_json(sorted(names))


def _json_bytes(value: object) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"


def _compact(value: object) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _grade_rank(g: str) -> tuple[int, str]:
    return (GRADES.index(g) if g in GRADES else len(GRADES), g)


def _step_flags(s: PlanStep) -> str:
    flags = ["revertible" if s.revertible else "**not revertible**"]
    if s.blind:
        flags.append("**blind**")
    if s.approximate:
        flags.append("approximate")
    if s.call is None:
        flags.append("no call")
    return ", ".join(flags)


def _short_url(u: str) -> str:
    return u if len(u) <= 120 else u[:119] + "…"


def write_views(vault: Vault, rp: Replay) -> tuple[Path, list[str]]:
    """Write every view file of `rp` under views/<session>/; return the folder and the file names."""
    out = views_dir(vault, rp.session)
    out.mkdir(parents=True, exist_ok=True)
    previous = _previous_files(out / "views.json")
    with os.scandir(out) as it:
        sizes = {e.name: e.stat().st_size for e in it if e.is_file(follow_symlinks=False)}
    written: list[str] = []
    folder = str(out)
    with _no_gc():
        for name, data in Views(rp).files():
            if isinstance(data, bytes):
                _put(folder, name, data, sizes.get(name))
            else:
                _put_stream(out, name, data)
            written.append(name)
    for stale in sorted(previous - set(written)):
        if _OWN_NAME.match(stale):
            (out / stale).unlink(missing_ok=True)
    return out, sorted(written)


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


def _put(folder: str, name: str, data: bytes, old_size: int | None) -> None:
    """Write a note unless it already holds `data` (unchanged notes keep their mtime). Notes are derived
    and rewritten in place; views.json, written last, is what says an output is complete."""
    path = os.path.join(folder, name)
    if old_size == len(data):
        try:
            with open(path, "rb") as f:
                if f.read() == data:
                    return
        except OSError:
            pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
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


@contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector (replay builds many objects and no cycles; the collector's
    repeated scans of a large heap cost about a fifth of the time); restore it afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


__all__ = ["FORMAT", "Views", "blob_link", "body_block", "note_name", "views_dir", "write_views"]
