"""Comparing two sessions' behaviour: the ordered calls and their statuses (`broker diff`).

A call is what `expected` in a test fixture holds (journal.export.fixture.expected_call): connector,
effect, method, URL (as recorded) and the SHA-256 of the canonical request body, and its status. The
two sequences are aligned on the calls (difflib's longest matching blocks, so one inserted call does
not make every later one differ); then aligned calls whose status differs, calls only in A (removed)
and calls only in B (added) are the differences. Inside a changed stretch, calls to the same
connector, method and URL are paired in order (as are all of them when the stretch has as many calls
on each side) and the fields that differ are named. `seq`, times, headers and response bodies
are not compared: this is about what the agent did and what it was answered.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field

from journal.export.fixture import expected_call, read_entries
from journal.reader import open_vault
from journal.vault import Vault

CALL_FIELDS = ("connector", "effect", "method", "url", "request_body_sha256")


@dataclass
class SessionDiff:
    a: str
    b: str
    a_calls: list[dict]
    b_calls: list[dict]
    differences: list[dict] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return not self.differences

    def as_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "same": self.same, "a_calls": len(self.a_calls),
                "b_calls": len(self.b_calls), "differences": self.differences}


def _key(call: dict) -> tuple:
    return tuple(call[k] for k in CALL_FIELDS)


def diff_calls(a: list[dict], b: list[dict]) -> list[dict]:
    """The differences between two ordered lists of expected calls (see the module docstring)."""
    out: list[dict] = []
    matcher = difflib.SequenceMatcher(a=[_key(c) for c in a], b=[_key(c) for c in b], autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            for x, y in zip(a[i1:i2], b[j1:j2], strict=True):
                if x["status"] != y["status"]:
                    out.append({"op": "changed", "fields": ["status"], "a": x, "b": y})
        elif op == "replace":
            out.extend(_pair(a[i1:i2], b[j1:j2]))
        else:
            out.extend({"op": "removed", "a": x} for x in a[i1:i2])
            out.extend({"op": "added", "b": y} for y in b[j1:j2])
    return out


def _pair(xs: list[dict], ys: list[dict]) -> list[dict]:
    """A changed stretch: calls to the same connector, method and URL are paired in order (and their
    differing fields named); the others are removed (only in A) or added (only in B)."""
    out: list[dict] = []
    j = 0
    for x in xs:
        k = next((k for k in range(j, len(ys)) if _same_target(x, ys[k])), None)
        if k is None and len(xs) == len(ys) and j < len(ys):
            k = j  # as many on each side: pair them in order
        if k is None:
            out.append({"op": "removed", "a": x})
            continue
        out.extend({"op": "added", "b": y} for y in ys[j:k])
        fields = [f for f in (*CALL_FIELDS, "status") if x[f] != ys[k][f]]
        out.append({"op": "changed", "fields": fields, "a": x, "b": ys[k]})
        j = k + 1
    out.extend({"op": "added", "b": y} for y in ys[j:])
    return out


def _same_target(x: dict, y: dict) -> bool:
    return all(x[f] == y[f] for f in ("connector", "method", "url"))


def session_calls(vault: Vault, session: str) -> list[dict]:
    entries, _ = read_entries(vault, session)
    return [expected_call(e) for e in entries]


def diff_sessions(vault_root: Vault | str | os.PathLike, a: str, b: str) -> SessionDiff:
    """Compare two sessions of one vault; VaultError when either is missing."""
    vault = open_vault(vault_root)
    a_calls, b_calls = session_calls(vault, a), session_calls(vault, b)
    return SessionDiff(a, b, a_calls, b_calls, diff_calls(a_calls, b_calls))


def _line(call: dict) -> str:
    return (f"{call['connector']} {call['effect']} {call['method']} {call['url']} "
            f"body {call['request_body_sha256'][:12]} -> {call['status']}")


def render(d: SessionDiff) -> str:
    """The diff for a person: a header, then one block per difference (`-` in A, `+` in B)."""
    return "\n".join(render_lines(d)) + "\n"


def render_lines(d: SessionDiff) -> list[str]:
    """`render`'s lines, each as formed here: the recorded values in it (URLs, connectors, session names) are as
    recorded, line breaks and control characters included, for the command that prints them to escape
    (broker/cli/terminal_text.py)."""
    head = f"{d.a} ({len(d.a_calls)} calls) vs {d.b} ({len(d.b_calls)} calls): "
    if d.same:
        return [head + "same calls, same statuses"]
    lines = [head + f"{len(d.differences)} difference(s)"]
    for x in d.differences:
        if x["op"] == "changed":
            lines.append(f"~ seq {x['a']['seq']} / seq {x['b']['seq']}: {', '.join(x['fields'])} differ")
            lines.append(f"  - {_line(x['a'])}")
            lines.append(f"  + {_line(x['b'])}")
        elif x["op"] == "removed":
            lines.append(f"- seq {x['a']['seq']} only in {d.a}: {_line(x['a'])}")
        else:
            lines.append(f"+ seq {x['b']['seq']} only in {d.b}: {_line(x['b'])}")
    return lines
