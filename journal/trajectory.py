"""A session read turn by turn: model call -> tool calls asked for -> entries that carried them out ->
the tool results the next model request showed the model (`broker trajectory`, docs/prompts.md).

Findings (each `{"kind", "seq", "detail"}`):

- `not_carried_out`: a tool call a model response asked for that no recorded call carried out;
- `not_asked_for`: a connector call no model call asked for (`prompt_ref` null, or naming a model
  call that asked for no tool call) in a session that has model calls;
- `not_logged`: a tool result the model was shown that matches no recorded response earlier in the
  session (by SHA-256 in `refs` mode; by SHA-256 or by its text inside a recorded response in
  `full` mode);
- `tools_changed`: a tool's description or schema changed within the session (an MCP server's
  `tools/list` answers, or the tool definitions a model request carried).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from journal.blob_read import open_recorded_blob
from journal.canonical import canonical_bytes
from journal.models import APIS
from journal.models.linking import is_model_entry, model_api_of
from journal.models.refs import is_text_ref
from journal.models.shapes import ToolCall
from journal.reader import iter_entries
from journal.vault import Vault, VaultError

KINDS = ("not_carried_out", "not_asked_for", "not_logged", "tools_changed")
_MIN_TEXT_MATCH = 16
"""A full-mode tool result shorter than this is matched by hash or whole JSON only, never as a
substring (short texts occur everywhere)."""


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canon_sha(value: object) -> str | None:
    try:
        return _sha(canonical_bytes(value))
    except Exception:  # noqa: BLE001 - a value with no canonical form matches by nothing
        return None


def _json_subvalues(value: object, depth: int = 0):
    """The value and every object or array inside it (a tool result is often part of a response)."""
    yield value
    if depth > 6:
        return
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for child in children:
        if isinstance(child, dict | list):
            yield from _json_subvalues(child, depth + 1)


def _unwrap(value: object):
    """A tool result value and, for `{"result": X}`-style wrappers, X."""
    yield value
    if isinstance(value, dict) and len(value) == 1:
        (inner,) = value.values()
        yield inner
    if isinstance(value, str):
        try:
            yield from _unwrap(json.loads(value))
        except ValueError:
            pass


@dataclass
class _Recorded:
    """What a recorded (non-model) entry's response can be matched by."""

    seq: int
    digests: set[str] = field(default_factory=set)
    values: list[object] = field(default_factory=list)  # JSON values (full-mode matching)
    texts: list[str] = field(default_factory=list)  # strings (full-mode substring matching)


def _recorded(entry: dict) -> _Recorded:
    rec = _Recorded(entry["seq"])
    response = entry.get("response") or {}
    if isinstance(response.get("body_sha256"), str):
        rec.digests.add(response["body_sha256"])
    body = response.get("body")
    candidates: list[object] = [body]
    if entry.get("capture") == "gateway" and isinstance(body, dict) and isinstance(body.get("result"), dict):
        result = body["result"]
        candidates = [result, result.get("structuredContent")]
        for item in result.get("content") or ():
            if isinstance(item, dict) and isinstance(item.get("text"), str):
                candidates.append(item["text"])
    for value in candidates:
        if value is None:
            continue
        if isinstance(value, dict) and is_text_ref(value):
            rec.digests.add(value["sha256"])
            continue
        if isinstance(value, str):
            rec.digests.add(_sha(value.encode("utf-8", "surrogatepass")))
            rec.texts.append(value)
            try:
                value = json.loads(value)
            except ValueError:
                continue
        for v in (value, {"result": value}, {"output": value}, {"content": value}):
            digest = _canon_sha(v)
            if digest:
                rec.digests.add(digest)
        rec.values.append(value)
        rec.texts.append(json.dumps(value, ensure_ascii=False))
    return rec


def _matches(part: object, recorded: list[_Recorded], vault: Vault) -> list[int]:
    """Seqs of recorded responses a tool-result part matches."""
    if part is None or part == "":
        return []
    if isinstance(part, dict) and is_text_ref(part):
        digest = part["sha256"]
        hits = [r.seq for r in recorded if digest in r.digests]
        if hits or "ref" not in part:
            return hits
        try:
            vault.blob_path(part["ref"])  # refuses a ref that is not blobs/sha256/<hh>/<64 hex>
            with open_recorded_blob(vault, part["ref"].rsplit("/", 1)[-1], part["size"]) as f:
                text = f.read(max(0, part["size"])).decode("utf-8", "replace")  # no more than the entry names
        except (OSError, VaultError):
            return []
    elif isinstance(part, str):
        text = part
        digest = _sha(text.encode("utf-8", "surrogatepass"))
        hits = [r.seq for r in recorded if digest in r.digests]
        if hits:
            return hits
    else:
        digest = _canon_sha(part)
        return [r.seq for r in recorded if digest in r.digests]
    # full mode (the text is at hand): as JSON inside a recorded response, or as text inside one
    wanted = {d for v in _unwrap(text) if not isinstance(v, str) for d in [_canon_sha(v)] if d}
    hits = []
    for r in recorded:
        if wanted and any(_canon_sha(sub) in wanted for v in r.values for sub in _json_subvalues(v)):
            hits.append(r.seq)
        elif len(text.strip()) >= _MIN_TEXT_MATCH and any(text.strip() in t for t in r.texts):
            hits.append(r.seq)
    return hits


def _call_json(call) -> dict:
    return {"id": call.id, "name": call.name, "arguments": call.arguments}


def _finding(kind: str, seq: int, detail: str) -> dict:
    return {"kind": kind, "seq": seq, "detail": detail}


def _mcp_call(entry: dict) -> tuple[str, object] | None:
    mcp = entry.get("mcp")
    params = mcp.get("params") if isinstance(mcp, dict) else None
    if isinstance(params, dict) and isinstance(params.get("name"), str):
        return params["name"], params.get("arguments")
    return None


def _same_call(call, mcp: tuple[str, object]) -> bool:
    name, arguments = mcp
    if not (call.name == name or call.name.endswith("__" + name)):
        return False
    return _canon_sha(call.arguments if call.arguments is not None else {}) == _canon_sha(
        arguments if arguments is not None else {})


def trajectory(vault: Vault, session: str) -> dict:
    """The session's turns and findings (see the module docstring); `{"session", "turns", "findings", "notes"}`."""
    entries = list(iter_entries(vault, session))
    findings: list[dict] = []
    notes: list[str] = []
    turns: list[dict] = []
    by_hash = {e["hash"]: e for e in entries}
    models = [e for e in entries if is_model_entry(e)]
    recorded: list[_Recorded] = []
    seen_results: set[tuple] = set()
    open_calls: list[tuple[dict, ToolCall]] = []  # (turn, call) not yet given a result
    tool_defs: dict[str, tuple[int, object]] = {}
    listings = ToolListWatch()
    turn_of: dict[str, dict] = {}

    for e in entries:
        request = e.get("request") or {}
        if is_model_entry(e):
            api = APIS.get(model_api_of(e) or "")
            if api is None:
                notes.append(f"seq {e['seq']}: model call of an API this reader does not know ({e['connector']})")
                continue
            body = request.get("body")
            for tool in api.tools(body):
                definition = {"description": tool.description, "schema": tool.schema}
                prior = tool_defs.get(tool.name)
                if prior is not None and _canon_sha(prior[1]) != _canon_sha(definition):
                    findings.append(_finding("tools_changed", e["seq"], (
                        f"the definition of tool {tool.name!r} the model was given changed since seq {prior[0]}")))
                tool_defs[tool.name] = (e["seq"], definition)
            for result in api.tool_results(body):
                key = (result.call_id, result.name) if result.call_id else (
                    None, result.name, tuple(_canon_sha(p) for p in result.parts))
                if key in seen_results:
                    continue
                seen_results.add(key)
                match = next((oc for oc in reversed(open_calls) if result.call_id and oc[1].id == result.call_id),
                             None) or next((oc for oc in open_calls if not result.call_id and oc[1].name == result.name
                                            and oc[1].id is None), None)
                if match is not None:
                    open_calls.remove(match)
                hits = sorted({s for p in result.parts for s in _matches(p, recorded, vault)})
                label = f"{result.name or (match[1].name if match else '?')} ({result.call_id or 'no id'})"
                shown = {"call_id": result.call_id, "name": result.name or (match[1].name if match else None),
                         "shown_in": e["seq"], "matches": hits}
                if match is not None:
                    match[0]["_results"][id(match[1])] = shown
                else:
                    notes.append(f"seq {e['seq']}: tool result {label} answers no tool call recorded in this session")
                if not hits and any(p not in (None, "") for p in result.parts):
                    findings.append(_finding("not_logged", e["seq"], (
                        f"tool result {label} shown to the model matches no recorded response")))
            calls = api.tool_calls((e.get("response") or {}).get("body"))
            turn = {"seq": e["seq"], "hash": e["hash"], "connector": e["connector"], "model_api": api.NAME,
                    "ts": e["ts"], "stream": "stream" in (e.get("response") or {}), "asked": calls, "tied": [],
                    "_results": {}}
            turns.append(turn)
            turn_of[e["hash"]] = turn
            open_calls += [(turn, c) for c in calls]
            continue
        if listings.is_listing(e):
            listings.observe(e)
            continue
        recorded.append(_recorded(e))
        if e.get("capture") == "gateway" and request.get("method") != "tools/call":
            continue
        if not models:
            continue
        ref = e.get("prompt_ref")
        if ref is None:
            findings.append(_finding("not_asked_for", e["seq"], (
                f"{e['connector']} {request.get('method')} {request.get('url')}: no model call asked for it")))
        elif ref not in turn_of:
            why = "a model call later in the session" if ref in by_hash else "no model call in this session"
            findings.append(_finding("not_asked_for", e["seq"], f"prompt_ref names {why}"))
        else:
            turn_of[ref]["tied"].append(e)
            if not turn_of[ref]["asked"]:
                findings.append(_finding("not_asked_for", e["seq"], (
                    f"tied to the model call at seq {turn_of[ref]['seq']}, which asked for no tool call")))

    if not models:
        notes.append("no model calls in this session (prompt capture off, or the agent's model traffic "
                     "did not go through the broker)")
    findings += listings.findings
    return {"session": session, "turns": [_finish_turn(t, findings) for t in turns],
            "findings": sorted(findings, key=lambda f: (f["seq"], f["kind"])), "notes": notes}


def _finish_turn(turn: dict, findings: list[dict]) -> dict:
    """Decide which entries carried out each tool call of a turn; report the ones none did.

    First the exact evidence for every call (an MCP entry with the same name and arguments, or the
    recorded responses its result matched), then the turn's HTTPS entries nothing claimed go to the
    first call still without one: a made-up result never borrows an entry another call's result
    matched."""
    tied = list(turn.pop("tied"))
    results = turn.pop("_results")
    by: dict[int, list[int]] = {}
    for i, call in enumerate(turn["asked"]):
        shown = results.get(id(call))
        found = [e["seq"] for e in tied
                 if e.get("capture") == "gateway" and (m := _mcp_call(e)) and _same_call(call, m)]
        if not found and shown and shown["matches"]:
            found = [s for s in shown["matches"] if s > turn["seq"]]
        by[i] = found
    claimed = {s for seqs in by.values() for s in seqs}
    spare = [e["seq"] for e in tied if e.get("capture") != "gateway" and e["seq"] not in claimed]
    for i in by:
        if not by[i] and spare:
            by[i], spare = spare, []
    asked = []
    for i, call in enumerate(turn["asked"]):
        if not by[i]:
            findings.append(_finding("not_carried_out", turn["seq"], (
                f"tool call {call.name} ({call.id or 'no id'}) asked for by this model call was not carried out "
                "by any recorded call")))
        asked.append({**_call_json(call), "carried_out_by": by[i], "result": results.get(id(call))})
    return {**turn, "asked": asked, "calls": [e["seq"] for e in tied]}


class ToolListWatch:
    """Follows an MCP server's recorded `tools/list` answers through a session and reports a tool whose
    description or schema changed since an earlier listing, or that appeared after the first one.
    Shared by `trajectory` and `broker verify` (which shows its findings as notes)."""

    def __init__(self) -> None:
        self.listings: dict[tuple, dict[str, tuple[int, dict]]] = {}
        self.findings: list[dict] = []

    @staticmethod
    def is_listing(entry: dict) -> bool:
        return entry.get("capture") == "gateway" and (entry.get("request") or {}).get("method") == "tools/list"

    def observe(self, entry: dict) -> None:
        if self.is_listing(entry):
            _listing(entry, self.listings, self.findings)

    def notes(self) -> list[str]:
        return [f"tools_changed at seq {f['seq']}: {f['detail']}" for f in self.findings]


def _listing(entry: dict, listings: dict[tuple, dict[str, tuple[int, dict]]], findings: list[dict]) -> None:
    body = (entry.get("response") or {}).get("body")
    result = body.get("result") if isinstance(body, dict) else None
    tools = result.get("tools") if isinstance(result, dict) else None
    if not isinstance(tools, list):
        return
    server = (entry["connector"], (entry.get("request") or {}).get("url"))
    known = listings.get(server)
    first = known is None
    known = listings.setdefault(server, {})
    for tool in tools:
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            continue
        definition = {"description": tool.get("description"), "inputSchema": tool.get("inputSchema")}
        prior = known.get(tool["name"])
        if prior is None and not first:
            findings.append(_finding("tools_changed", entry["seq"], (
                f"{entry['connector']}: tool {tool['name']!r} appeared after the first tools/list")))
        elif prior is not None and _canon_sha(prior[1]) != _canon_sha(definition):
            what = "description" if prior[1]["description"] != definition["description"] else "schema"
            findings.append(_finding("tools_changed", entry["seq"], (
                f"{entry['connector']}: the {what} of tool {tool['name']!r} changed since seq {prior[0]}")))
        known[tool["name"]] = (entry["seq"], definition)


def render(report: dict) -> str:
    """The human form of `trajectory`'s report."""
    return "\n".join(render_lines(report))


def render_lines(report: dict) -> list[str]:
    """`render`'s lines, each as formed here: the recorded values in it (tool names, arguments, findings) are as
    recorded, line breaks and control characters included, for the command that prints them to escape
    (broker/cli/terminal_text.py)."""
    lines = [f"session {report['session']}: {len(report['turns'])} model call(s), "
             f"{len(report['findings'])} finding(s)"]
    for n, turn in enumerate(report["turns"], 1):
        lines.append(f"turn {n}  seq {turn['seq']}  {turn['connector']} ({turn['model_api']})"
                     f"{'  streamed' if turn['stream'] else ''}  {turn['ts']}")
        if not turn["asked"]:
            lines.append("  asked for no tool call")
        for call in turn["asked"]:
            args = json.dumps(call["arguments"], ensure_ascii=False, sort_keys=True)
            by = ", ".join(f"seq {s}" for s in call["carried_out_by"]) or "NOT CARRIED OUT"
            lines.append(f"  asked {call['name']}({args[:80]}{'...' if len(args) > 80 else ''}) -> {by}")
            result = call["result"]
            if result is not None:
                seen = ", ".join(f"seq {s}" for s in result["matches"]) or "NO RECORDED RESPONSE"
                lines.append(f"    result shown at seq {result['shown_in']}: matches {seen}")
    if report["findings"]:
        lines.append("findings:")
        lines += [f"  {f['kind']}  seq {f['seq']}: {f['detail']}" for f in report["findings"]]
    lines += [f"note: {n}" for n in report["notes"]]
    return lines
