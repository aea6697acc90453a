"""A session file's seq index: where line k starts, so that "show me seq 50,000" reads one line, not 50,000.

A sidecar kept outside the vault, in a folder the user owns ($XDG_CACHE_HOME/broker/seq-index, else
~/.cache/broker/seq-index): readers never write into the vault (it may be a read-only mount), and the
index is not evidence, so it has no place beside the entries. It holds the byte offset of every
STRIDE-th line of the file and how far it covers; a file that grew is indexed on from there.

It is never trusted: the line found at an offset must hold the seq asked for (line k holds seq k in every
intact file), else the index is rebuilt from the file, and when even then no line at that position holds
it (a tampered file) the file is read through for it. Verification never looks at it.

Format: b"BSQ1", the number of lines covered and the bytes covered (two little-endian u64), then one
little-endian u64 offset per STRIDE lines (the offset of line 0, STRIDE, 2*STRIDE, ...).
"""

from __future__ import annotations

import hashlib
import os
import struct
import sys
from array import array
from pathlib import Path

from journal.chain import line_link
from journal.confine import open_regular
from journal.reader import RowSource, iter_lines
from journal.user_cache import cache_home
from journal.vault import Vault

STRIDE = 128
_MAGIC = b"BSQ1"
_HEAD = struct.Struct("<4sQQ")
_READ = 1 << 20


class SeqIndex:
    """The offsets of every STRIDE-th line of one session file, as far as `covered` bytes (`lines` lines)."""

    def __init__(self, lines: int = 0, covered: int = 0, offsets: array | None = None) -> None:
        self.lines, self.covered = lines, covered
        self.offsets = offsets if offsets is not None else array("Q")

    def extend(self, fd: int, size: int) -> None:
        """Index the whole lines from `covered` up to `size` (a last line without its newline waits)."""
        pos, lines, offsets = self.covered, self.lines, self.offsets
        while pos < size:
            buf = os.pread(fd, min(_READ, size - pos), pos)
            if not buf:
                break
            start = 0
            while (nl := buf.find(b"\n", start)) >= 0:
                if lines % STRIDE == 0:
                    offsets.append(pos + start)
                lines += 1
                start = nl + 1
            if start == 0:  # a line longer than one read
                more = _line_end(fd, pos + len(buf), size)
                if more is None:
                    break
                if lines % STRIDE == 0:
                    offsets.append(pos)
                lines += 1
                pos = more
                continue
            pos += start
        self.lines, self.covered = lines, pos

    def to_bytes(self) -> bytes:
        if sys.byteorder != "little":
            swapped = array("Q", self.offsets)
            swapped.byteswap()
            return _HEAD.pack(_MAGIC, self.lines, self.covered) + swapped.tobytes()
        return _HEAD.pack(_MAGIC, self.lines, self.covered) + self.offsets.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> SeqIndex | None:
        if len(data) < _HEAD.size or (len(data) - _HEAD.size) % 8:
            return None
        magic, lines, covered = _HEAD.unpack_from(data)
        offsets = array("Q")
        offsets.frombytes(data[_HEAD.size:])
        if sys.byteorder != "little":
            offsets.byteswap()
        if magic != _MAGIC or len(offsets) != (lines + STRIDE - 1) // STRIDE:
            return None
        return cls(lines, covered, offsets)


def _line_end(fd: int, pos: int, size: int) -> int | None:
    """The offset after the next newline at or after `pos`, None when the file ends first."""
    while pos < size:
        buf = os.pread(fd, min(_READ, size - pos), pos)
        if not buf:
            return None
        nl = buf.find(b"\n")
        if nl >= 0:
            return pos + nl + 1
        pos += len(buf)
    return None


def index_path(path: Path, st: os.stat_result) -> Path:
    """The sidecar of the file at `path`: named by the file's real path and identity (device, inode)."""
    key = f"{os.path.realpath(path)}\0{st.st_dev}\0{st.st_ino}".encode("utf-8", "surrogateescape")
    return cache_home() / "seq-index" / (hashlib.sha256(key).hexdigest()[:40] + ".seqidx")


def _load(ipath: Path) -> SeqIndex | None:
    try:
        return SeqIndex.from_bytes(ipath.read_bytes())
    except OSError:
        return None


def _save(ipath: Path, index: SeqIndex) -> None:
    """Write the sidecar atomically; a cache that cannot be written is only slower, never an error."""
    try:
        ipath.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = ipath.with_name(f"{ipath.name}.{os.getpid()}.tmp")
        tmp.write_bytes(index.to_bytes())
        os.replace(tmp, ipath)
    except OSError:
        pass


def session_index(vault: Vault, session: str, *, rebuild: bool = False) -> tuple[SeqIndex, Path]:
    """The session file's index, brought up to the file's size (built when missing, rebuilt when `rebuild`
    or when the file is shorter than it covers), saved back when it changed."""
    path = vault.require_session(session)
    fd = open_regular(path)
    try:
        st = os.fstat(fd)
        ipath = index_path(path, st)
        index = None if rebuild else _load(ipath)
        if index is None or index.covered > st.st_size:
            index = SeqIndex()
        before = (index.lines, index.covered)
        index.extend(fd, st.st_size)
        if (index.lines, index.covered) != before or rebuild:
            _save(ipath, index)
        return index, path
    finally:
        os.close(fd)


def _line_at(path: Path, index: SeqIndex, k: int) -> bytes | None:
    """Line k (0-based) of the file, found from the index (None past the lines it covers)."""
    if k >= index.lines:
        return None
    skip = k % STRIDE
    for line in iter_lines(path, index.offsets[k // STRIDE]):
        if line.index == skip:
            return line.data
    return None


def _holds(line: bytes | None, seq: int) -> bool:
    if line is None:
        return False
    link = line_link(line)
    return link is not None and link[0] == seq


def find_line(vault: Vault, session: str, seq: int) -> bytes | None:
    """The line of the entry with this seq: line seq - 1 by the index, checked to hold that seq; else the
    index is rebuilt and checked again; else the file is read through for it (tampered: it is elsewhere)."""
    index, path = session_index(vault, session)
    line = _line_at(path, index, seq - 1)
    if line is not None and not _holds(line, seq):  # stale (the file was replaced) or tampered: rebuild once
        index, path = session_index(vault, session, rebuild=True)
        line = _line_at(path, index, seq - 1)
    if _holds(line, seq):
        return line
    for found in iter_lines(path):
        if _holds(found.data, seq):
            return found.data
    return None


def line_of_seq(vault: Vault, session: str, seq: int) -> bytes | None:
    """The line (with its newline) of the session's entry with this seq, None when there is none: a database
    store's row by its key; in a file the line found through the session's seq index (journal/seq_index.py),
    checked to hold that seq. What it returns is not verified: `broker verify` says whether to trust it."""
    if seq < 1:
        return None
    if isinstance(vault, RowSource):
        vault.require_session(session)
        return vault.line_at(session, seq)
    return find_line(vault, session, seq)
