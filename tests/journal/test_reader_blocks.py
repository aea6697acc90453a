"""reader.iter_line_blocks and iter_lines (the one line reader, built on it) yield the file's lines split on
b"\\n" only, whatever the read size, for the whole file or a range between two line starts; iter_lines from
an offset (what replay's fold reads a file on with) gives the lines from there with their offsets."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journal.reader as reader
from journal.reader import iter_line_blocks, iter_lines

_bytes = st.lists(st.sampled_from([b"\n", b"\r", b"\r\n", b"a", b"{}", b"\xff", b"xyz" * 7]), max_size=40).map(b"".join)


def _split(content: bytes) -> list[bytes]:
    """The oracle: each line with its b"\\n", the last one without when the file does not end in one."""
    parts = content.split(b"\n")
    return [p + b"\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _flat(blocks) -> list[bytes]:
    out = []
    for b in blocks:
        assert not (b.torn and b.lines)
        out += [line + b"\n" for line in b.lines]
        if b.torn:
            assert b.torn == b.raw and not b.torn.endswith(b"\n")
            out.append(b.torn)
        for line in b.lines:
            assert line in b.raw
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=_bytes, read=st.integers(1, 9), data=st.data())
def test_blocks_hold_the_lines_of_iter_lines(tmp_path, monkeypatch, content, read, data):
    monkeypatch.setattr(reader, "_BLOCK", read)
    path = tmp_path / "s.jsonl"
    path.write_bytes(content)
    lines = _split(content)
    assert _flat(iter_line_blocks(path)) == lines
    starts = [sum(map(len, lines[:n])) for n in range(len(lines))] + [len(content)]
    expected = list(zip(range(len(lines)), starts[:-1], lines, strict=True))
    assert [(ln.index, ln.offset, ln.data) for ln in iter_lines(path)] == expected
    i = data.draw(st.integers(0, len(starts) - 1))
    j = data.draw(st.integers(i, len(starts) - 1))
    k = sum(1 for s in starts[:-1] if s < starts[i])
    m = sum(1 for s in starts[:-1] if s < starts[j])
    assert _flat(iter_line_blocks(path, starts[i], starts[j])) == lines[k:m]
    assert [ln.data for ln in iter_lines(path, starts[i])] == lines[k:]


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.sampled_from([b"", b"ab", b"abab", b"xaby", b"zzzz" * 9, b"b", b"a"]), max_size=20),
       tail=st.sampled_from([b"", b"ab", b"a"]))
def test_lines_holding_a_mark_are_the_lines_that_contain_it(lines, tail):
    block = reader.LineBlock(lines, b"\n".join(lines) + (b"\n" if lines else b"") + tail)
    assert block.lines_holding(b"ab") == {i for i, line in enumerate(lines) if b"ab" in line}


def test_a_line_longer_than_many_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "_BLOCK", 4)
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"a" * 50 + b"\nbb\n" + b"c" * 30)
    blocks = list(iter_line_blocks(path))
    assert _flat(blocks) == [b"a" * 50 + b"\n", b"bb\n", b"c" * 30]
    assert blocks[-1].torn == b"c" * 30


@settings(max_examples=300, deadline=None)
@given(content=st.lists(st.sampled_from([b"\n", b"\r", b"a", b"\xff", b"x" * 300, b"y" * 255]), max_size=30)
       .map(b"".join), per_line=st.sampled_from([0, 1, 2, 256, 10**9]))
def test_split_lines_is_bytes_split_less_the_part_after_the_last_newline(content, per_line):
    """Whichever way a block is cut (a find per line, or bytes.split, chosen by its first line's length)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(reader, "_FIND_PER_LINE", per_line)
        assert reader.split_lines(content) == content.split(b"\n")[:-1]
