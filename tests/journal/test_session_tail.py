"""`SessionTail.lines_after` (what the MCP shim's prompt links read before every call): the lines after a
seq as the file grows, none for a file not begun or not grown, and a symlink still refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from journal.confine import NotConfined
from journal.reader import SessionTail
from journal.vault import Vault


def _tail(tmp_path: Path) -> tuple[SessionTail, Path]:
    vault = Vault.create(tmp_path / "v")
    vault.journal_dir.mkdir(parents=True, exist_ok=True)
    return SessionTail(vault), vault.session_path("s")


def test_follows_a_growing_file(tmp_path: Path) -> None:
    tail, path = _tail(tmp_path)
    assert list(tail.lines_after("s")) == []  # not begun
    path.write_bytes(b"a\nb\n")
    assert list(tail.lines_after("s")) == [b"a\n", b"b\n"]
    assert list(tail.lines_after("s", 2)) == []  # not grown: no line after the mark
    with open(path, "ab") as f:
        f.write(b"c\nd")  # d is still being written
    assert list(tail.lines_after("s", 2)) == [b"c\n"]
    assert list(tail.lines_after("s", 3)) == []
    with open(path, "ab") as f:
        f.write(b"\n")
    assert list(tail.lines_after("s", 3)) == [b"d\n"]
    assert list(tail.lines_after("s", 1)) == [b"b\n", b"c\n", b"d\n"]  # behind the mark: read from the start


def test_a_file_cut_shorter_gives_nothing_past_the_mark(tmp_path: Path) -> None:
    tail, path = _tail(tmp_path)
    path.write_bytes(b"a\nb\nc\n")
    assert len(list(tail.lines_after("s"))) == 3
    path.write_bytes(b"a\n")
    assert list(tail.lines_after("s", 3)) == []


def test_a_symlink_is_refused_and_a_dangling_one_is_no_file(tmp_path: Path) -> None:
    tail, path = _tail(tmp_path)
    os.symlink(tmp_path / "nowhere", path)
    assert list(tail.lines_after("s")) == []
    other = tmp_path / "other.jsonl"
    other.write_bytes(b"x\n")
    path.unlink()
    os.symlink(other, path)
    with pytest.raises(NotConfined):
        list(tail.lines_after("s"))


def _entry(i: int) -> dict:
    return {"ts": "2026-12-02T12:00:00.000Z", "session": "s", "agent": "a", "principal": "p", "connector": "c",
            "capture": "gateway", "prompt_ref": None, "effect": "read", "mcp": None,
            "request": {"method": "tools/call", "url": "stdio:x", "headers": [], "body": {"i": i}},
            "response": {"status": 200, "headers": [], "body": None, "answered_by": "upstream"}}


def test_a_writers_own_lines_read_back_as_the_file_holds_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the writer appended is read back from what it kept (no file read), what another writer appended
    in between from the file; either way the lines are the file's, in order."""
    from journal import reader
    from journal.writer import JournalWriter

    mine, other = JournalWriter(tmp_path / "v"), JournalWriter(tmp_path / "v")  # two processes' writers
    reads: list[int] = []
    real = reader.iter_line_blocks

    def counted(path, start=0, stop=None):  # type: ignore[no-untyped-def]
        reads.append(start)
        return real(path, start, stop)

    monkeypatch.setattr(reader, "iter_line_blocks", counted)
    got: list[bytes] = []
    for i in range(12):
        (other if i % 5 == 4 else mine).append(_entry(i))
        got += list(mine.lines_after("s", len(got)))
    path = Vault(tmp_path / "v").session_path("s")
    assert got == path.read_bytes().splitlines(keepends=True)
    assert len(reads) == 2  # only for the two lines the other writer appended
    assert list(mine.lines_after("s", 3)) == got[3:]  # behind the mark: from the file
    mine.append_many([_entry(20), _entry(21)])
    assert list(mine.lines_after("s", 12)) == path.read_bytes().splitlines(keepends=True)[12:]
    mine.close()
    other.close()


def test_what_is_kept_stays_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tail, path = _tail(tmp_path)
    monkeypatch.setattr(SessionTail, "WRITTEN_BYTES", 64)
    offset = 0
    for i in range(40):
        data = b"line %d\n" % i
        tail.wrote(f"s{i % 3}", offset, data)
        offset += len(data)
    assert tail._written_size <= 64
    assert tail._written_size == sum(len(d) for runs in tail._written.values() for _, d in runs)
    tail.wrote("big", 0, b"x" * 100 + b"\n")  # over a quarter of the bound: not kept
    assert "big" not in tail._written


def test_the_runs_let_go_first_are_those_of_the_session_written_longest_ago(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tail, _ = _tail(tmp_path)
    monkeypatch.setattr(SessionTail, "WRITTEN_BYTES", 40)
    tail.wrote("a", 0, b"a0 line\n")
    tail.wrote("b", 0, b"b0 line\n")
    tail.wrote("a", 8, b"a1 line\n")  # "a" is now the session written last
    tail.wrote("c", 0, b"c0 line\n")
    tail.wrote("c", 8, b"c1 line\n")
    tail.wrote("c", 16, b"c2 line\n")  # 48 bytes: over the bound by one run
    assert "b" not in tail._written
    assert [o for o, _ in tail._written["a"]] == [0, 8]
    tail.wrote("c", 24, b"c3 line\n")  # the oldest run of "a", the session written longest ago now
    assert [o for o, _ in tail._written["a"]] == [8]
    assert tail._written_size == sum(len(d) for runs in tail._written.values() for _, d in runs) <= 40
    tail.wrote("a", 99, b"a9 line\n")  # not after a1: its runs start again from this one
    assert [o for o, _ in tail._written["a"]] == [99]
