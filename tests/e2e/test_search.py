"""broker search: every filter, AND-combined, against what a full parse would find."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from journal.search import Query, search
from journal.vault import Vault
from tests.support.replay_factories import GMAIL, SLACK, SessionBuilder, gmail_session, slack_session

BROKER = [sys.executable, "-m", "broker.cli"]


@pytest.fixture(scope="module")
def vault(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("search") / "v"
    gmail_session(root, "g1")
    slack_session(root, "s1")
    with SessionBuilder(root, "mixed", agent="other-agent", principal="bob@example.com") as s:
        s.get(f"{GMAIL}/messages/m1", {"id": "m1", "snippet": 'He said "Quarterly \\ numbers" caf\u00e9'})
        s.post(f"{SLACK}/chat.postMessage", {"channel": "C1", "text": "Ship IT"}, {"ok": True, "ts": "1.2"})
        s.call("GET", f"{GMAIL}/messages/m2", None, status=None, error="upstream timed out")
        s.call("GET", f"{GMAIL}/messages/m3", resp_raw=b"plain TEXT body", resp_type="text/plain")
    return root


def brute(root: Path, pred) -> list[tuple[str, int]]:
    """What a search must find: every entry parsed and tested."""
    v = Vault.open_existing(root)
    out = []
    for s in v.sessions():
        for i, line in enumerate(v.session_path(s).read_bytes().splitlines(), 1):
            e = orjson.loads(line)
            if pred(e):
                out.append((s, i))
    return out


def found(root: Path, **q) -> list[tuple[str, int]]:
    return [(m.session, m.line) for m in search(Vault.open_existing(root), Query(**q))]


def _body_text(e: dict) -> str:
    parts = []
    for part in ("request", "response"):
        b = e[part]["body"]
        if b is not None:
            parts.append(b if isinstance(b, str) else json.dumps(b, ensure_ascii=False, sort_keys=True,
                                                                  separators=(",", ":")))
    return " ".join(parts).lower()


def st(e: dict) -> int:
    return e["response"]["status"] or 0


def cli(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run([*BROKER, "search", *args], capture_output=True, text=True, check=check)


CASES = [
    ({"connector": "slack"}, lambda e: e["connector"] == "slack"),
    ({"effect": "write", "connector": "gmail"}, lambda e: e["effect"] == "write" and e["connector"] == "gmail"),
    ({"capture": "broker", "session": "mixed"}, lambda e: e["session"] == "mixed"),
    ({"status": "404"}, lambda e: e["response"]["status"] == 404),
    ({"status": "2xx", "session": "g1"}, lambda e: e["session"] == "g1" and 200 <= st(e) < 300),
    ({"status": "none"}, lambda e: e["response"]["status"] is None),
    ({"agent": "other-agent"}, lambda e: e["agent"] == "other-agent"),
    ({"principal": "bob@example.com", "effect": "read"},
     lambda e: e["principal"] == "bob@example.com" and e["effect"] == "read"),
    ({"url": "/messages/m1"}, lambda e: "/messages/m1" in e["request"]["url"]),
    ({"text": "quarterly"}, lambda e: "quarterly" in _body_text(e)),
    ({"text": '"quarterly \\'}, lambda e: '"quarterly \\' in _body_text(e)),
    ({"text": "ship it"}, lambda e: "ship it" in _body_text(e)),
    ({"text": "plain text"}, lambda e: "plain text" in _body_text(e)),
    ({"text": '"channel":"c1"'}, lambda e: '"channel":"c1"' in _body_text(e)),
    ({"since": "2026-09-22T10:00:05", "until": "2026-09-22T10:00:09"},
     lambda e: "2026-09-22T10:00:05" <= e["ts"][:19] <= "2026-09-22T10:00:09"),
    ({"connector": "gmail", "status": "4xx", "url": "modify"},
     lambda e: e["connector"] == "gmail" and 400 <= st(e) < 500 and "modify" in e["request"]["url"]),
]


@pytest.mark.parametrize(("query", "pred"), CASES, ids=[str(c[0]) for c in CASES])
def test_search_finds_what_a_full_parse_finds(vault, query, pred):
    expected = brute(vault, pred)
    assert found(vault, **query) == expected
    assert expected or query.get("answered_by"), "the case should match something"


def test_answered_by_is_matched_when_entries_carry_it(vault):
    have = brute(vault, lambda e: "answered_by" in e["response"])
    got = found(vault, answered_by="upstream")
    assert got == brute(vault, lambda e: e["response"].get("answered_by") == "upstream")
    assert got or not have


def test_bad_status_is_refused():
    with pytest.raises(ValueError, match="status"):
        Query(status="abc")
    with pytest.raises(ValueError, match="unknown search filter"):
        Query.from_mapping({"colour": "red"})


def test_cli_json_prints_entries_as_recorded(vault):
    r = cli("--vault", str(vault), "--connector", "slack", "--effect", "write", "--json", check=True)
    lines = r.stdout.splitlines()
    expected = brute(vault, lambda e: e["connector"] == "slack" and e["effect"] == "write")
    assert len(lines) == len(expected) > 0
    files = {s: Vault.open_existing(vault).session_path(s).read_text().splitlines() for s in ("s1", "mixed")}
    assert lines == [files[s][i - 1] for s, i in expected]


def test_cli_table_and_exit_codes(vault):
    r = cli("--vault", str(vault), "--status", "404")
    assert r.returncode == 0 and "g1" in r.stdout and "1 entry" in r.stderr
    r = cli("--vault", str(vault), "--connector", "nothing")
    assert r.returncode == 1 and r.stdout == ""
    r = cli("--vault", str(vault), "--status", "abc")
    assert r.returncode == 2 and "status" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("block", [1, 700, 4096, 1 << 20])
def test_block_search_numbers_lines_right_at_any_block_size(vault, monkeypatch, block):
    import journal.search as search_module

    expected = {label: found(vault, **q) for label, q in (("slack", {"connector": "slack"}),
                                                           ("text", {"text": "quarterly"}),
                                                           ("404", {"status": "404"}))}
    monkeypatch.setattr(search_module, "_BLOCK", block)
    for label, q in (("slack", {"connector": "slack"}), ("text", {"text": "quarterly"}), ("404", {"status": "404"})):
        assert found(vault, **q) == expected[label], label


def test_a_last_line_without_newline_is_still_searched(tmp_path):
    with SessionBuilder(tmp_path / "v", "torn") as s:
        s.get(f"{GMAIL}/messages/m1", {"id": "m1"})
        s.get(f"{GMAIL}/messages/m2", {"id": "m2"})
    path = Vault.open_existing(tmp_path / "v").session_path("torn")
    path.write_bytes(path.read_bytes()[:-1])
    assert found(tmp_path / "v", url="/messages/m2") == [("torn", 2)]
    assert found(tmp_path / "v", connector="gmail") == [("torn", 1), ("torn", 2)]
