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
