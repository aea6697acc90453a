"""Reading session files: raw lines (for the verifier) and parsed entries (for everyone else)."""

from __future__ import annotations

import bisect
import errno
import itertools
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import orjson

from journal.confine import open_regular
from journal.errors import InputError
from journal.vault import Vault

_MISSING = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)
_BLOCK = 1 << 18  # iter_line_blocks: a block and its lines stay in the CPU caches (faster than 1 MiB here)
_FIND_PER_LINE = 256
"""split_lines: a first line this long or longer and the lines are cut at a bytes.find each (see there)."""


@dataclass(frozen=True, slots=True)
class LineBlock:
    """Whole lines read together (the verifier's unit of reading: one split per block, not a read per line)."""

    lines: list[bytes]  # each without its newline
    raw: bytes  # the bytes read; every line of `lines` lies inside it (scans of the block hold for each line)
    torn: bytes = b""  # the file's (or range's) last line when it has no final newline; `lines` is then empty

    def lines_holding(self, mark: bytes) -> set[int]:
        """Indexes of the lines that contain `mark` (which holds no newline), from searches of the whole
        block: one pass when no line has it, rather than a search per line."""
        pos = self.raw.find(mark)
        if pos < 0:
            return set()
        ends = list(itertools.accumulate(len(line) + 1 for line in self.lines))  # offset after each newline
        found = set()
        while pos >= 0:
            i = bisect.bisect_right(ends, pos)
            if i >= len(ends):
                break  # in the bytes after the last newline (read again with the next block)
            found.add(i)
            pos = self.raw.find(mark, ends[i])
        return found


def split_lines(buf: bytes) -> list[bytes]:
    """The lines of `buf` that end in a newline, each without it: `buf.split(b"\\n")` less the part after the
    last newline ([] when there is none).

    Why not always bytes.split: for a one-byte separator CPython compares byte by byte (stringlib's
    split_char), while bytes.find goes through memchr, which reads many bytes a step. Lines of a few hundred
    bytes and more (a journal line is ~2 KB) are cut faster by a find and a slice each (2 KB lines, block in
    cache: 0.26 us against 0.57 us a line); short lines keep bytes.split, whose per-line cost is lower.
    Judged by the block's first line: either way gives the same list."""
    j = buf.find(b"\n")
    if j < _FIND_PER_LINE:
        if j < 0:
            return []
        lines = buf.split(b"\n")
        lines.pop()
        return lines
    find, lines, i = buf.find, [], 0
    while j >= 0:
        lines.append(buf[i:j])
        i = j + 1
        j = find(b"\n", i)
    return lines


def iter_line_blocks(path: str | os.PathLike, start: int = 0, stop: int | None = None) -> Iterator[LineBlock]:
    """Yield the lines from byte `start` (a line start) to `stop` (default: the end of the file as it
    grows while being read), a quarter megabyte at a time; lines are split on b"\\n" only, as iter_lines does.
    A last line without a newline before `stop` or the end comes alone, as `torn`. A symlink or anything
    but a regular file is refused (journal/confine.py)."""
    fd = open_regular(path)
    try:
        yield from fd_line_blocks(fd, start, stop)
    finally:
        os.close(fd)


def fd_line_blocks(fd: int, start: int = 0, stop: int | None = None) -> Iterator[LineBlock]:
    """iter_line_blocks of a descriptor the caller opened (and checked: e.g. stamped with its fstat)."""
    pos = start
    while stop is None or pos < stop:
        buf = _pread(fd, pos, stop)
        if not buf:
            return
        end = buf.rfind(b"\n")
        if end < 0:  # a line longer than one read: read on until its newline
            parts, got = [buf], len(buf)
            while end < 0:
                more = _pread(fd, pos + got, stop)
                if not more:
                    break
                parts.append(more)
                nl = more.rfind(b"\n")
                end = got + nl if nl >= 0 else -1
                got += len(more)
            buf = b"".join(parts)
            if end < 0:
                yield LineBlock([], buf, buf)
                return
        pos += end + 1  # the part after the last newline: read again as the start of the next block
        yield LineBlock(split_lines(buf), buf)


def _pread(fd: int, pos: int, stop: int | None) -> bytes:
    return os.pread(fd, _BLOCK if stop is None else min(_BLOCK, stop - pos), pos)


@dataclass(frozen=True, slots=True)
class Line:
    index: int  # 0-based line number (counted from `start`)
    offset: int  # byte offset in the file
    data: bytes  # the line's bytes including its final newline, if it has one


def iter_lines(path: str | os.PathLike, start: int = 0) -> Iterator[Line]:
    """Yield each line from byte `start` (a line start) on with its offset: iter_line_blocks, a line at a time."""
    return _lines_of(iter_line_blocks(path, start), start)


def _lines_of(blocks: Iterator[LineBlock], start: int) -> Iterator[Line]:
    """The lines of `blocks` (read from byte `start`) one at a time, with their offsets."""
    index, offset = 0, start
    for block in blocks:
        if block.torn:
            yield Line(index, offset, block.torn)
            return
        for data in block.lines:
            yield Line(index, offset, data + b"\n")
            index += 1
            offset += len(data) + 1


def parse_entry(line: bytes | None) -> dict | None:
    """A raw journal line (or None: no such line) as an entry, or None when it is not a JSON object: a line
    tampered with or torn, read by a reader that shows what it can (`broker show`, the inspector) and raises
    nothing."""
    if line is None:
        return None
    try:
        entry = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return entry if isinstance(entry, dict) else None


def line_link(line: bytes) -> tuple[int, str, str] | None:
    """(seq, prev, hash) of a journal line, or None when the line is not a JSON object holding an integer
    `seq` and string `prev` and `hash` (a line read from a store that may be hostile: no exception). Here
    with the readers, not in journal/chain.py: finding a line by its seq (journal/seq_index.py) takes no
    canonical form, and so loads none of its libraries."""
    entry = parse_entry(line)
    if entry is None:
        return None
    seq, prev, digest = entry.get("seq"), entry.get("prev"), entry.get("hash")
    if type(seq) is not int or not isinstance(prev, str) or not isinstance(digest, str):
        return None
    return seq, prev, digest


def open_vault(vault: Vault | str | os.PathLike) -> Vault:
    """A reader's vault: one already opened (a file vault, or a database store read in place:
    journal/store/database_vault.py) as it is, else the vault directory at that path."""
    return vault if isinstance(vault, Vault) else Vault.open_existing(vault)


def blocks_of_lines(lines: Iterable[bytes], size: int = 512) -> Iterator[LineBlock]:
    """LineBlocks of about `size` lines (as iter_line_blocks gives a file's) from lines held elsewhere (a
    database row each). A line is what a file holding these bytes one after another would hold: a line
    lacking its final newline gets one (as `broker pull` writes it) and one holding a newline inside is
    two lines, so a reader of either store sees the same lines."""
    it = iter(lines)
    while True:
        chunk = [line if line.endswith(b"\n") else line + b"\n" for line in itertools.islice(it, size)]
        if not chunk:
            return
        raw = b"".join(chunk)
        yield LineBlock(split_lines(raw), raw)


@runtime_checkable
class RowSource(Protocol):
    """A vault whose sessions live in rows of a database rather than in files (journal/store/database_vault.py).
    The functions below read either; what a reader sees is the same lines in the same order."""

    def line_blocks(self, session: str, after_seq: int = 0, last_seq: int | None = None) -> Iterator[LineBlock]:
        """The session's lines (blocks_of_lines) of the rows with seq in (after_seq, last_seq], in seq order."""
        ...

    def line_at(self, session: str, seq: int) -> bytes | None:
        """The line (with its newline) of the row with this seq; None when there is none."""
        ...

    def size_of(self, session: str) -> int:
        """The session's bytes (for progress bars and the sharing out of work)."""
        ...


def session_blocks(vault: Vault, session: str) -> Iterator[LineBlock]:
    """A session's lines in blocks, in file (seq) order, from whichever store holds them."""
    if isinstance(vault, RowSource):
        vault.require_session(session)
        return vault.line_blocks(session)
    return _opened_blocks(vault, session)


def _opened_blocks(vault: Vault, session: str, start: int = 0) -> Iterator[LineBlock]:
    """fd_line_blocks of the session's file opened by the vault (confined: journal/confine.py) at the first block,
    and closed after the last. Why not a check, then a read by path: the vault's writer could swap `journal/` for
    a link elsewhere in between."""
    fd = vault.open_session(session)
    try:
        yield from fd_line_blocks(fd, start)
    finally:
        os.close(fd)


def session_lines(vault: Vault, session: str, start: int = 0) -> Iterator[Line]:
    """As iter_lines over the session's file from byte `start` (a line start), whichever store holds it
    (a database's offsets are those of the same lines in a pulled file)."""
    if not isinstance(vault, RowSource):
        yield from _lines_of(_opened_blocks(vault, session, start), start)
        return
    index, offset = 0, 0
    for block in session_blocks(vault, session):
        for data in block.lines:
            if offset >= start:
                yield Line(index, offset, data + b"\n")
                index += 1
            offset += len(data) + 1


def session_size(vault: Vault, session: str) -> int:
    """The session's bytes, whichever store holds it."""
    if isinstance(vault, RowSource):
        return vault.size_of(session)
    return vault.session_path(session).stat().st_size


def iter_entries(vault: Vault, session: str) -> Iterator[dict]:
    """Parsed entries of a session, in file order. Unparseable lines raise InputError (a ValueError) naming the line."""
    for line in session_lines(vault, session):
        try:
            yield orjson.loads(line.data)
        except orjson.JSONDecodeError as exc:
            raise InputError(f"session {session!r}: line {line.index + 1} is not JSON ({exc}); run `broker verify`"
                             ) from None


class SessionTail:
    """A vault's session lines from seq N on, for readers that follow a session as it grows (prompt links,
    autoseal): each read resumes at the byte offset where the last one stopped rather than from the start.

    Only complete lines count (a line still being written waits for the next read), and line k is taken to
    be seq k, as it is in every intact file; the verifier is the one that checks that."""

    MARKS = 1024  # sessions whose resume point is kept
    WRITTEN_BYTES = 1 << 20  # at most this much of what `wrote` was told is kept

    def __init__(self, vault: Vault) -> None:
        self.vault = vault
        self._marks: OrderedDict[str, tuple[int, int]] = OrderedDict()  # session -> (lines read, byte offset)
        self._paths: dict[str, str] = {}  # session -> its file (made once: an MCP shim asks on every call)
        # session -> the runs of whole lines this process appended last, (byte offset, bytes), in file order
        self._written: OrderedDict[str, list[tuple[int, bytes]]] = OrderedDict()
        self._written_size = 0
        self._lock = threading.Lock()

    def wrote(self, session: str, offset: int, data: bytes) -> None:
        """The writer of this tail appended `data` (whole lines) at byte `offset` of the session's file (and
        synced it, if it syncs): a read of exactly that range takes these bytes, not the file's (the same bytes,
        the file being append-only), so a follower of a session this process writes (the MCP shim's
        prompt links, before every call) does not open and read the file for its own lines."""
        with self._lock:
            runs = self._written.pop(session, [])
            if runs and runs[-1][0] + len(runs[-1][1]) != offset:  # others appended between: start again
                self._written_size -= sum(len(d) for _, d in runs)
                runs = []
            if data.endswith(b"\n") and len(data) <= self.WRITTEN_BYTES // 4:
                runs.append((offset, data))
                self._written_size += len(data)
            if runs:
                self._written[session] = runs
            while self._written_size > self.WRITTEN_BYTES and self._written:
                oldest = next(iter(self._written))
                dropped = self._written[oldest].pop(0)
                self._written_size -= len(dropped[1])
                if not self._written[oldest]:
                    del self._written[oldest]

    def _runs_from(self, session: str, at: int) -> list[tuple[int, bytes]]:
        """The runs `wrote` kept that follow each other from byte `at` on (those before it are let go)."""
        with self._lock:
            runs = self._written.get(session)
            if not runs:
                return []
            while runs and runs[0][0] + len(runs[0][1]) <= at:
                self._written_size -= len(runs.pop(0)[1])
            if not runs:
                del self._written[session]
                return []
            return list(runs) if runs[0][0] == at else []

    def _path(self, session: str) -> str:
        path = self._paths.get(session)
        if path is None:
            path = os.fspath(self.vault.session_path(session))
            if len(self._paths) >= self.MARKS:
                self._paths.clear()
            self._paths[session] = path
        return path

    def lines_after(self, session: str, seq: int = 0) -> Iterator[bytes]:
        """The session's lines (with their newline) after line `seq`, in order; none for a session not begun.

        A file no longer than the resume point holds no line after it: that is answered from one stat,
        without opening the file (the common case of a follower that asks before every call)."""
        path = self._path(session)
        with self._lock:
            n, at = self._marks.get(session, (0, 0))
        if n > seq:
            n, at = 0, 0
        try:
            size = os.stat(path).st_size
        except OSError as exc:
            if exc.errno in _MISSING:  # as Path.exists: no file, so no line
                return
            raise
        if size <= at:
            return
        for offset, data in self._runs_from(session, at):
            if offset != at or offset + len(data) > size:
                break
            for line in split_lines(data):  # `wrote` keeps whole lines only
                n += 1
                if n > seq:
                    yield line + b"\n"
            at += len(data)
            self._mark(session, n, at)
        if size <= at:
            return
        for block in iter_line_blocks(path, at):
            if block.torn:
                return
            for line in block.lines:
                n += 1
                at += len(line) + 1
                if n > seq:
                    yield line + b"\n"
            self._mark(session, n, at)

    def _mark(self, session: str, n: int, at: int) -> None:
        with self._lock:
            self._marks[session] = (n, at)
            self._marks.move_to_end(session)
            if len(self._marks) > self.MARKS:
                self._marks.popitem(last=False)

