"""The seq index (journal/seq_index.py): the line of seq N found without reading the lines before it, and never
trusted: a stale or forged index, a file that grew or was replaced, a tampered file all still give the line
that holds seq N (or none)."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from journal.chain import GENESIS, chain_entry
from journal.seq_index import STRIDE, SeqIndex, index_path, line_of_seq, session_index
from journal.store.file_store import FileStore
from journal.vault import Vault
from tests.support.journal_factories import fields


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _lines(n: int, session: str = "s", start: int = 1, prev: str = GENESIS) -> list[bytes]:
    out = []
    for seq in range(start, start + n):
        entry, line = chain_entry(fields(session, n=seq), seq, prev)
        prev = entry["hash"]
        out.append(line)
    return out


def _vault(tmp_path: Path, lines: list[bytes], session: str = "s") -> Vault:
    vault = Vault.create(tmp_path / "v")
    vault.session_path(session).write_bytes(b"".join(lines))
    return vault


def _seq(line: bytes | None) -> int | None:
    return None if line is None else orjson.loads(line)["seq"]


def test_every_seq_is_found_and_the_index_is_kept_outside_the_vault(tmp_path, cache):
    lines = _lines(3 * STRIDE + 5)
    vault = _vault(tmp_path, lines)
    for seq in (1, 2, STRIDE, STRIDE + 1, 3 * STRIDE + 5):
        assert line_of_seq(vault, "s", seq) == lines[seq - 1]
    assert line_of_seq(vault, "s", 3 * STRIDE + 6) is None and line_of_seq(vault, "s", 0) is None
    assert sorted(p.name for p in vault.root.rglob("*") if p.is_file()) == ["VAULT.json", "s.jsonl"]
    assert list((cache / "broker" / "seq-index").glob("*.seqidx"))


def test_a_file_that_grew_is_indexed_on(tmp_path):
    lines = _lines(STRIDE + 3)
    vault = _vault(tmp_path, lines[:5])
    assert _seq(line_of_seq(vault, "s", 5)) == 5
    with open(vault.session_path("s"), "ab") as f:
        f.write(b"".join(lines[5:]))
    assert line_of_seq(vault, "s", STRIDE + 3) == lines[-1]
    index, _ = session_index(vault, "s")
    assert index.lines == STRIDE + 3


def test_a_forged_index_is_checked_and_rebuilt(tmp_path):
    lines = _lines(2 * STRIDE)
    vault = _vault(tmp_path, lines)
    path = vault.session_path("s")
    forged = SeqIndex(2 * STRIDE, path.stat().st_size, None)
    forged.offsets.extend([0, len(lines[0])])  # line STRIDE placed at the second line's offset: wrong
    ipath = index_path(path, path.stat())
    ipath.parent.mkdir(parents=True, exist_ok=True)
    ipath.write_bytes(forged.to_bytes())
    assert line_of_seq(vault, "s", STRIDE + 1) == lines[STRIDE]
    ipath.write_bytes(b"not an index")
    assert line_of_seq(vault, "s", 7) == lines[6]


def test_a_replaced_file_is_not_read_through_the_old_index(tmp_path):
    vault = _vault(tmp_path, _lines(STRIDE + 2))
    assert _seq(line_of_seq(vault, "s", STRIDE + 2)) == STRIDE + 2
    other = _lines(STRIDE + 2, session="s")
    other[STRIDE] = other[STRIDE].replace(b'"agent":"agent-a"', b'"agent":"agent-zz"')  # longer: offsets move
    path = vault.session_path("s")
    tmp = path.with_suffix(".new")
    tmp.write_bytes(b"".join(other))
    os.replace(tmp, path)
    assert line_of_seq(vault, "s", STRIDE + 2) == other[STRIDE + 1]


def test_a_tampered_file_still_gives_the_line_holding_the_seq(tmp_path):
    lines = _lines(10)
    lines[3], lines[4] = lines[4], lines[3]  # reordered: seq 4 is on line 5
    vault = _vault(tmp_path, lines)
    assert _seq(line_of_seq(vault, "s", 4)) == 4 and _seq(line_of_seq(vault, "s", 5)) == 5
    del lines[6]  # removed: seq 7 is nowhere
    vault.session_path("s").write_bytes(b"".join(lines))
    assert line_of_seq(vault, "s", 7) is None and _seq(line_of_seq(vault, "s", 8)) == 8


def test_an_unwritable_cache_only_costs_time(tmp_path, monkeypatch):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    lines = _lines(STRIDE + 1)
    vault = _vault(tmp_path, lines)
    assert line_of_seq(vault, "s", STRIDE + 1) == lines[-1]


def test_a_torn_last_line_is_not_indexed(tmp_path):
    lines = _lines(3)
    vault = _vault(tmp_path, [*lines[:2], lines[2][:-5]])
    assert line_of_seq(vault, "s", 3) is None and line_of_seq(vault, "s", 2) == lines[1]


def test_the_file_store_answers_the_store_protocols_reader_calls(tmp_path):
    lines = _lines(STRIDE + 4)
    store = FileStore(_vault(tmp_path, lines).root)
    assert store.has_session("s") and not store.has_session("t")
    assert store.line_at("s", STRIDE + 4) == lines[-1]
    assert list(store.lines_after("s", 3, 6)) == lines[3:6]
