"""A session file's seq index: where line k starts, so that "show me seq 50,000" reads one line, not 50,000.

Two indexes, tried in this order (`current_index`):

- the writer's sidecar beside the session file (`journal/<encoded>.seqidx`, journal/seq_sidecar.py): read,
  never written, by readers; taken when its last record checks out, extended over the lines after it;
- the reader's own, kept outside the vault in a folder the user owns ($XDG_CACHE_HOME/broker/seq-index, else
  ~/.cache/broker/seq-index), for a file with no usable sidecar: built by one newline scan, extended as the
  file grows. Readers never write into the vault (it may be a read-only mount).

Both hold the byte offset of every STRIDE-th line and how far they cover. Neither is trusted: the line read
from an offset must start a line and hold the seq its place calls for (line k holds seq k+1 in every intact
file), else the user's cache index is rebuilt from the file; and a line asked for by seq must hold it, else
the file is read through for it (a tampered file). Verification never looks at either.

Format of the cache file: b"BSQ1", the number of lines covered and the bytes covered (two little-endian u64),
then one little-endian u64 offset per STRIDE lines (the offset of line 0, STRIDE, 2*STRIDE, ...).
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from pathlib import Path

from journal.reader import RowSource, line_link, session_lines
from journal.seq_sidecar import STRIDE, read_offsets
from journal.user_cache import cache_home
from journal.vault import Vault

_MAGIC = b"BSQ1"
_HEAD = struct.Struct("<4sQQ")
_READ = 1 << 20
_PAGE = 1 << 18
SIDECAR_TAIL = 8 << 20
"""A sidecar whose last record is further than this from the file's end (a writer that stopped keeping it)
is not used: every reader would scan that tail again, where the user's cache index scans it once."""


class SeqIndex:
    """The offsets of every STRIDE-th line of one session file, as far as `covered` bytes (`lines` lines)."""

    def __init__(self, lines: int = 0, covered: int = 0, offsets: array | None = None) -> None:
        self.lines, self.covered = lines, covered
        self.offsets = offsets if offsets is not None else array("Q")
        self.claimed = False  # from the writer's sidecar: each offset is checked against its line when used

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
    """The user's cache index of the file at `path`: named by the file's real path and identity (device,
    inode). (hashlib is imported here: a reader served by the writer's sidecar never comes here.)"""
    import hashlib

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
    fd = vault.open_session(session)  # confined; every read below is of this descriptor, none by path again
    path = vault.session_path(session)
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


def _read_lines(fd: int, start: int, count: int, size: int) -> list[bytes]:
    """Up to `count` complete lines (with their newline) from byte `start`, reading only as far as they go."""
    out: list[bytes] = []
    pos, rest = start, b""
    while len(out) < count and pos < size:
        chunk = os.pread(fd, min(_PAGE, size - pos), pos)
        if not chunk:
            break
        pos += len(chunk)
        parts = (rest + chunk).split(b"\n")
        rest = parts.pop()
        out += [p + b"\n" for p in parts]
    return out[:count]


def _starts_line(fd: int, offset: int) -> bool:
    return offset == 0 or os.pread(fd, 1, offset - 1) == b"\n"


def _from_sidecar(vault: Vault, path: Path, fd: int, size: int) -> SeqIndex | None:
    """The writer's sidecar (journal/seq_sidecar.py) as an index of this file, when its last record checks
    out (its offset starts a line holding the seq the record names), extended over the lines after it by a
    scan. The other records are checked as they are used (`lines_at`). None: no usable sidecar."""
    offsets = read_offsets(vault.root, path.name, size)
    if not offsets:
        return None
    k = len(offsets) - 1
    last = offsets[k]
    if size - last > SIDECAR_TAIL or not _starts_line(fd, last):  # a sidecar left behind: the cache's index
        return None                                                # keeps its own scan, this one would not
    line = _read_lines(fd, last, 1, size)
    if not line or not _holds(line[0], k * STRIDE + 1):
        return None
    index = SeqIndex(k * STRIDE, last, offsets[:k])
    index.extend(fd, size)
    index.claimed = True
    return index


def current_index(vault: Vault, session: str, *, rebuild: bool = False) -> tuple[SeqIndex, Path]:
    """The index a reader uses: the writer's sidecar beside the file when it checks out (nothing written
    anywhere, no scan of the file), else the one in the user's cache (`session_index`). `rebuild`: the
    user's cache index, rebuilt from the file."""
    if not rebuild:
        fd = vault.open_session(session)
        path = vault.session_path(session)
        try:
            index = _from_sidecar(vault, path, fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        if index is not None:
            return index, path
    return session_index(vault, session, rebuild=rebuild)


_IRREGULAR: set[tuple[int, int, int, int]] = set()
"""Files (device, inode, size, mtime) whose lines were found not to hold the seq their place calls for even
through an index just built from them (tampered): read by position through the user's cache index from then
on, not rebuilt at every read."""


def lines_at(vault: Vault, session: str, first: int, count: int) -> tuple[SeqIndex, list[bytes]]:
    """(the index, the complete lines `first`..`first+count-1`, 0-based, each with its newline): read from
    the nearest indexed line before `first`, which must start a line and hold the seq its place calls for
    (every intact file: line k holds seq k+1). When it does not, the index is the user's cache rebuilt from
    the file, and its lines are taken as they are (a tampered file's lines are still its lines; the file is
    remembered as such, so later reads take its lines by position without a rebuild)."""
    fd = vault.open_session(session)
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    state = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    irregular = state in _IRREGULAR
    index, path = session_index(vault, session) if irregular else current_index(vault, session)
    for attempt in range(2):
        if first >= index.lines or count <= 0:
            return index, []
        block = first // STRIDE
        start = index.offsets[block]
        fd = vault.open_session(session)
        try:
            size = os.fstat(fd).st_size
            got = _read_lines(fd, start, first % STRIDE + count, min(size, index.covered))
            fine = _starts_line(fd, start) and bool(got) and (irregular or _holds(got[0], block * STRIDE + 1))
        finally:
            os.close(fd)
        if fine or attempt:
            if not fine:
                _IRREGULAR.add(state)
            return index, got[first % STRIDE :]
        index, path = current_index(vault, session, rebuild=True)
    raise AssertionError("unreachable")


def _holds(line: bytes | None, seq: int) -> bool:
    if line is None:
        return False
    link = line_link(line)
    return link is not None and link[0] == seq


def find_line(vault: Vault, session: str, seq: int) -> bytes | None:
    """The line of the entry with this seq: line seq - 1 by the index (`lines_at`), checked to hold that seq;
    else the file is read through for it (tampered: it is elsewhere, or nowhere)."""
    _, got = lines_at(vault, session, seq - 1, 1)
    if got and _holds(got[0], seq):
        return got[0]
    for found in session_lines(vault, session):
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
