"""Search skips sessions that cannot match (journal/search_summary.py) and still finds exactly what a full read
finds; a summary that no longer says what the file holds (the file edited, even back to its size and mtime)
is built again before it can hide an entry."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from journal import search as search_module
from journal.chain import GENESIS, chain_entry
from journal.search import Query, search
from journal.search_summary import session_summary
from journal.vault import Vault
from tests.support.journal_factories import fields


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _session(vault: Vault, session: str, calls: list[tuple[str, str, str]]) -> list[bytes]:
    """Write a chained session of (connector, effect, ts) calls; its lines."""
    prev, lines = GENESIS, []
    for seq, (connector, effect, ts) in enumerate(calls, 1):
        entry, line = chain_entry(fields(session, n=seq, connector=connector, effect=effect, ts=ts), seq, prev)
        prev = entry["hash"]
        lines.append(line)
    vault.session_path(session).write_bytes(b"".join(lines))
    return lines


@pytest.fixture
def vault(tmp_path) -> Vault:
    v = Vault.create(tmp_path / "v")
    v.journal_dir.mkdir(parents=True, exist_ok=True)
    _session(v, "mail-monday", [("gmail", "read", f"2026-09-21T10:00:0{i}.000Z") for i in range(5)])
    _session(v, "chat-tuesday", [("slack", "write", "2026-09-22T09:00:00.000Z"),
                                 ("slack", "read", "2026-09-22T11:30:00.000Z")])
    _session(v, "mixed-wednesday", [("gmail", "read", "2026-09-23T08:00:00.000Z"),
                                    ("slack", "write", "2026-09-23T08:05:00.000Z"),
                                    ("github", "write", "2026-09-23T23:59:59.000Z")])
    odd = [  # not canonical (ts not last, an escaped value), a line that is no entry, an empty line
        orjson.dumps({"ts": "2026-08-30T00:00:00.000Z", "connector": 'sl"ack', "effect": "read", "agent": "x"}),
        b'{"connector":"github","effect":"write","ts":"2026-08-31T00:00:00.000Z","x":{"ts":"2030-01-01"}}',
        b"not json", b"", orjson.dumps({"connector": "slack", "effect": "read"}),  # no ts: "" to search
    ]
    v.session_path("odd-one").write_bytes(b"\n".join(odd) + b"\n")
    return v


QUERIES = [
    Query(connector='sl"ack'), Query(until="2026-09-01"), Query(since="2026-08-31", until="2026-08-31"),
    Query(until="2000"), Query(since="2026-12-01"),
    Query(connector="slack"), Query(connector="github"), Query(connector="nothing"), Query(effect="write"),
    Query(connector="gmail", effect="write"), Query(since="2026-09-22"), Query(until="2026-09-21"),
    Query(since="2026-09-22T10", until="2026-09-23T08"), Query(since="2026-09-24"), Query(agent="agent-a"),
    Query(connector="slack", session="chat-tuesday"), Query(text="messages"),
]


def _full_scan(vault: Vault, query: Query, monkeypatch) -> list[tuple[str, int, bytes]]:
    with monkeypatch.context() as m:
        m.setattr(search_module, "_SUMMARIZED", ())
        return [(x.session, x.line, x.raw) for x in search(vault, query)]


@pytest.mark.parametrize("query", QUERIES, ids=repr)
def test_results_are_those_of_a_full_read(vault, query, monkeypatch):
    want = _full_scan(vault, query, monkeypatch)
    for _ in range(2):  # cold (summaries built) and warm (from the cache)
        assert [(x.session, x.line, x.raw) for x in search(vault, query)] == want


def test_sessions_that_cannot_match_are_not_read_and_the_reason_is_said(vault, monkeypatch):
    list(search(vault, Query(connector="nothing")))  # every summary built and cached
    opened: list[str] = []
    real = search_module._candidates
    names = {p.stat().st_ino: p.name for p in vault.journal_dir.iterdir()}  # the file each one read is
    monkeypatch.setattr(search_module, "_candidates",
                        lambda f, m: opened.append(names[os.fstat(f.fileno()).st_ino]) or real(f, m))
    skipped: list[tuple[str, str]] = []
    found = list(search(vault, Query(connector="slack"), skipped))
    assert {m.session for m in found} == {"chat-tuesday", "mixed-wednesday", "odd-one"}
    assert opened == ["chat-tuesday.jsonl", "mixed-wednesday.jsonl", "odd-one.jsonl"]
    assert skipped == [("mail-monday", "no entry has connector slack")]
    skipped.clear()
    assert not list(search(vault, Query(since="2026-09-24"), skipped))
    assert [s for s, _ in skipped] == ["chat-tuesday", "mail-monday", "mixed-wednesday", "odd-one"]
    assert "before 2026-09-24" in skipped[0][1]


def test_an_edit_that_keeps_size_and_mtime_still_rebuilds_the_summary(vault):
    assert not list(search(vault, Query(connector="slakk")))
    path = vault.session_path("mail-monday")
    st = path.stat()
    data = path.read_bytes()
    forged = data.replace(b'"connector":"gmail"', b'"connector":"slakk"', 1)  # same length
    assert len(forged) == len(data)
    path.write_bytes(forged)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # size and mtime as before: only the ctime moved
    found = list(search(vault, Query(connector="slakk")))
    assert [(m.session, m.line) for m in found] == [("mail-monday", 1)]


def test_a_lying_summary_in_the_cache_is_not_believed_once_the_file_changed(vault, cache):
    session_summary(vault.session_path("mail-monday"))
    [saved] = (cache / "broker" / "search-summary").glob("*.json")
    with open(vault.session_path("mail-monday"), "ab") as f:  # the file grows with a slack entry
        f.write(chain_entry(fields("mail-monday", n=9, connector="slack"), 6, "0" * 64)[1])
    found = list(search(vault, Query(connector="slack", session="mail-monday")))
    assert [m.line for m in found] == [6]
    assert saved.exists()


def test_search_writes_nothing_into_the_vault(vault):
    before = {str(p): p.stat().st_mtime_ns for p in vault.root.rglob("*")}
    list(search(vault, Query(connector="slack")))
    assert {str(p): p.stat().st_mtime_ns for p in vault.root.rglob("*")} == before
