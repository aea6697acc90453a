"""The writer's seq index beside a session file: `journal/<encoded>.seqidx`, where seq 1, 1+STRIDE, 1+2*STRIDE...
start, so a reader finds seq N by reading one record and one line, however long the session (issue 26).

Kept by the writer (journal/writer.py): after each durable group, under the session file's flock, the group's
records are appended with one write. No fsync: the sidecar is not evidence. A record is written only after the
lines it points at are durable, and the writer appends only to a sidecar whose length is exactly what the lines
before the group call for; a missing, short or longer one (a writer without this code, a crash between the two
writes, a hand edit) is left as it is and covers a prefix, or nothing. A new session file (seq 1) starts a new
sidecar. The only other writer is `broker reindex` (`rebuild`): the sidecar of a session already recorded,
written anew under the same flock through the same code (`_group_records`, `_keep`).

Never trusted: a reader (journal/seq_index.py) takes a record only when its seq is the one its place calls for,
its offset starts a line of the file and the line there holds that seq; anything else and the reader uses the
index it builds itself in the user's cache. Readers never write it (the vault may be read-only), and
verification never reads it.

Format (little-endian): a 16-byte head b"BSX1", the stride (u32), eight zero bytes; then one 16-byte record per
STRIDE lines: the seq (u64) and the byte offset of its line (u64). Record i holds seq i*STRIDE + 1.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import struct
from array import array
from pathlib import Path

from journal.confine import NotConfined, open_dir_inside, open_inside
from journal.errors import VaultError
from journal.vault import Vault, write_all

STRIDE = 128
SUFFIX = ".seqidx"
_MAGIC = b"BSX1"
_HEAD = struct.Struct("<4sI8x")
_RECORD = struct.Struct("<QQ")
RECORD_SIZE = _RECORD.size
_HEAD_BYTES = _HEAD.pack(_MAGIC, STRIDE)
assert _HEAD.size == RECORD_SIZE


def sidecar_name(session_file: str) -> str:
    """`<encoded>.seqidx` for `<encoded>.jsonl` (never a session file name: it lacks the .jsonl suffix)."""
    return session_file.removesuffix(".jsonl") + SUFFIX


def records_before(seq: int) -> int:
    """How many records the lines of seqs 1..seq call for (seq 1, 1+STRIDE, ... up to seq)."""
    return (seq + STRIDE - 1) // STRIDE if seq > 0 else 0


# -- the writer's part (and `broker reindex`'s) -----------------------------------------------------------


class SidecarRefused(VaultError):
    """The sidecar's name is taken by something the writer must not write through (a symlink, a hard link,
    a FIFO or anything but a regular file)."""


def note_group(session_path: Path, start: int, first_seq: int, count: int, data: bytes) -> None:
    """After a durable group of `count` lines (`data`, written at byte `start`, seqs first_seq...): append the
    records of the seqs it holds that start a stride. Never raises: a sidecar that cannot be kept only makes
    readers build their own index."""
    records = _group_records(start, first_seq, count, data)
    if not records:
        return
    try:
        _keep(session_path, first_seq, records)
    except (OSError, SidecarRefused) as exc:  # absent for a session begun before sidecars (ENOENT), a symlink
        _not_kept(session_path, exc)


def _not_kept(session_path: Path, exc: BaseException) -> None:
    """Say at debug level why the sidecar was not kept. logging is imported here, on the writer's rare
    failure path, so that a reader of this module (`broker show --seq`) does not load it."""
    import logging

    logging.getLogger(__name__).debug("seq sidecar of %s not kept: %s", session_path, exc)


def _group_records(start: int, first_seq: int, count: int, data: bytes) -> list[bytes] | None:
    """The records of the group's seqs that start a stride; None when `data` holds fewer lines than `count`
    says (nothing rather than a wrong record)."""
    target = first_seq + (-(first_seq - 1)) % STRIDE  # the first seq >= first_seq that starts a stride
    last = first_seq + count - 1
    if count <= 0 or target > last:
        return None  # (most groups of a lone writer: one line that starts no stride)
    records = []
    line, pos = 0, 0
    try:
        for seq in range(target, last + 1, STRIDE):
            while line < seq - first_seq:
                pos = data.index(b"\n", pos) + 1
                line += 1
            records.append(_RECORD.pack(seq, start + pos))
    except ValueError:
        return None
    return records


def _keep(session_path: Path, first_seq: int, records: list[bytes], dir_fd: int | None = None) -> bool:
    """Write `records` into the session's sidecar, under the session file's flock (the caller's): from seq 1 a
    new sidecar (created, or emptied and written anew), else appended when the sidecar's length is exactly
    what the lines before `first_seq` call for (False when it is not: left as it is). Only a regular file with
    one link is written: SidecarRefused otherwise; OSError when it cannot be opened (absent for seq > 1).
    `dir_fd`: the session file's folder as the caller opened it (the sidecar is named in it, not by path)."""
    fresh = first_seq == 1
    path = session_path.with_name(sidecar_name(session_path.name))
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_CREAT if fresh else 0)
    try:
        fd = os.open(path if dir_fd is None else path.name, flags, 0o644, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise SidecarRefused(f"{path} is a symlink; not followed, not written") from None
        if exc.errno == errno.ENXIO:  # O_NONBLOCK: a FIFO no one reads refuses the open instead of hanging it
            raise SidecarRefused(f"{path} is a FIFO, not a regular file; not written") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SidecarRefused(f"{path} is not a regular file; not written")
        if st.st_nlink != 1:  # a hard link could make us write elsewhere
            raise SidecarRefused(f"{path} has {st.st_nlink} links (a hard link to another file?); not written")
        if fresh:
            os.ftruncate(fd, 0)
            write_all(fd, _HEAD_BYTES + b"".join(records))
            return True
        if st.st_size == RECORD_SIZE * (1 + records_before(first_seq - 1)):
            write_all(fd, b"".join(records))
            return True
        return False
    finally:
        os.close(fd)


def rebuild(vault: Vault, session: str) -> int:
    """Write the sidecar of an existing session file anew (`broker reindex`: a session begun before the writer
    kept one, or a sidecar cut short, edited or left behind), with the records the writer would have written,
    through the writer's own code (`_group_records`, `_keep`) and under the writer's lock (the session file's
    flock), so a live writer's groups and this never interleave. The session file is opened as readers open
    it (journal/confine.py: reached through no symlink, a regular file) and only read; the sidecar is written
    in the folder that file was opened in (a `journal/` swapped for a symlink meanwhile is not followed).
    Returns the number of lines it covers (the complete ones: a torn tail is the writer's to move aside)."""
    path = vault.session_path(session)
    folder = open_dir_inside(vault.root, ("journal",))
    try:
        fd = open_inside(folder, (path.name,))
    except BaseException:
        os.close(folder)
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the writer's lock (journal/writer.py); released by the close
        size = os.fstat(fd).st_size
        records: list[bytes] = []
        lines, at, carry = 0, 0, b""
        while at + len(carry) < size:
            block = carry + os.pread(fd, min(1 << 20, size - at - len(carry)), at + len(carry))
            if len(block) == len(carry):
                break  # cut short under us: only a writer recovering a torn tail does that, and it holds the lock
            cut = block.rfind(b"\n") + 1
            count = block.count(b"\n", 0, cut)
            if count:
                records += _group_records(at, lines + 1, count, block[:cut]) or []
            lines, at, carry = lines + count, at + cut, block[cut:]
        _keep(path, 1, records, folder)
        return lines
    finally:
        os.close(fd)
        os.close(folder)


# -- the readers' part ---------------------------------------------------------------------------------


def read_offsets(vault_root: Path, session_file: str, size: int) -> array | None:
    """The sidecar's offsets (offset i is where seq i*STRIDE + 1 starts, as claimed), as far as they are well
    formed: each record's seq is the one its place calls for and the offsets rise and lie inside the file of
    `size` bytes. None when there is no sidecar or it is refused (a symlink, not a regular file, a bad head).
    What the offsets point at is the caller's to check (`journal/seq_index.py`)."""
    try:
        fd = open_inside(vault_root, ("journal", sidecar_name(session_file)))
    except (OSError, NotConfined):
        return None
    try:
        data = b""
        limit = RECORD_SIZE * (2 + size // STRIDE)  # a file of `size` bytes has at most `size` lines
        while len(data) < limit and (chunk := os.read(fd, min(1 << 20, limit - len(data)))):
            data += chunk
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) < RECORD_SIZE or data[:RECORD_SIZE] != _HEAD_BYTES:
        return None
    n = (len(data) - RECORD_SIZE) // RECORD_SIZE  # a torn last record is left out
    pairs = array("Q")
    pairs.frombytes(data[RECORD_SIZE : RECORD_SIZE * (n + 1)])
    if struct.pack("=I", 1) != struct.pack("<I", 1):
        pairs.byteswap()
    offsets, seqs = pairs[1::2], pairs[0::2]
    if (n and seqs == array("Q", range(1, n * STRIDE + 1, STRIDE)) and offsets[0] == 0
            and offsets[-1] < size and len(set(offsets)) == n and list(offsets) == sorted(offsets)):
        return offsets  # every record well formed (the usual case), checked at C speed
    out = array("Q")
    prev = -1
    for i in range(n):
        seq, offset = pairs[2 * i], pairs[2 * i + 1]
        if seq != i * STRIDE + 1 or offset <= prev or offset >= size or (i == 0 and offset != 0):
            break
        out.append(offset)
        prev = offset
    return out
