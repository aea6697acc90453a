"""Disk blocks reserved past the end of a session file, so an append's fdatasync commits less.

An append to a file whose last block is full makes the file system allocate a block when the data
is written back, and the fdatasync that follows must commit that allocation (block bitmap, group
descriptor, extent) in the same journal transaction as the new size. With blocks reserved ahead by
`fallocate(FALLOC_FL_KEEP_SIZE)` the append only marks reserved space as written and moves the size:
measured on the vault's ext4 (bench/journal_bench.py, `plain loop, preallocated`), one
write + fdatasync of a 2 KB line takes about 20 % less time at the median. That is against a file whose
extent tree has left the inode (more than four extents, as a file gets whose blocks are allocated a few at a
time among other files'), where every append that maps a new block also commits the tree's block; against a
plain file the allocator kept in one to three extents the reservation saves 0 to 5 us (branch append31 in
docs/benchmarks.md). Either way the reserved file itself stays in a few extents.

Few, large reservations: each one becomes an extent of its own whenever another file took the blocks
after the previous one (other sessions in the same directory, the seq sidecar), and once a file has more
extents than its inode holds (four on ext4) the extent tree moves to a block of its own, which the
append's conversion of reserved space to written space then dirties: every fdatasync writes that block
too. Reserving an eighth of the size from 16 KiB up left a 3 MB session in 7 to 22 extents; reserving
as much as the file holds (doubling, from `RESERVE_MIN`) keeps it in 1 to 3, and took 10 to 15 % less CPU
per durable append (branch append30b in docs/benchmarks.md).

`FALLOC_FL_KEEP_SIZE` leaves the file's size, and so every byte a reader, `broker verify` or the
torn-tail check sees, exactly as it was; only the space the file takes on disk grows: by as much as
the file holds (at least `RESERVE_MIN`, at most `RESERVE_MAX`), and the writer gives the space back
(`release`) when it closes the file, so what is reserved at any time is bounded by the writer's open
files (`max_open`), not by the vault's size. Where the call is missing (not Linux) or the file system
refuses it (EOPNOTSUPP), appends go on without a reservation.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import sys
from collections.abc import Callable

FALLOC_FL_KEEP_SIZE = 0x01
RESERVE_MIN = 1 << 20
"""Space reserved past the end at a time for a small file (512 lines of 2 KB): a session of up to 4 MB
needs at most three reservations, so its extents stay in the inode however scattered they are."""
RESERVE_MAX = 16 << 20
"""... and at most: what a large session's file takes past its end while it is open."""
_BLOCK = 4096

_UNSUPPORTED = frozenset({errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.ENODEV, errno.EPERM})


def _load_fallocate() -> Callable[[int, int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    fn.restype = ctypes.c_int
    return fn


_fallocate = _load_fallocate()


def fallocate(fd: int, mode: int, offset: int, length: int) -> None:
    """fallocate(2); OSError on failure (also ENOSYS where the C library has no fallocate)."""
    if _fallocate is None:
        raise OSError(errno.ENOSYS, "fallocate is not available here")
    if _fallocate(fd, mode, offset, length) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


class Reservation:
    """What one open file has reserved past its end (`until`), and whether reserving works there."""

    __slots__ = ("until", "works")

    def __init__(self) -> None:
        self.until = 0  # bytes [0, until) are reserved or written, as far as this writer knows
        self.works = _fallocate is not None

    def cover(self, fd: int, end: int, length: int) -> None:
        """Before writing `length` bytes at `end` (the file's size): if [end, end + length) is not
        reserved yet, reserve it and as much again as the file holds (see the module doc). Never fails: a
        refusal only means the append allocates as it would without this (ENOSPC here lets the write report
        the full disk)."""
        if not self.works or end + length <= self.until:
            return
        size = length + min(RESERVE_MAX, max(RESERVE_MIN, end))
        try:
            fallocate(fd, FALLOC_FL_KEEP_SIZE, end, size)
        except OSError as exc:
            if exc.errno in _UNSUPPORTED:
                self.works = False
            return
        self.until = end + size

    def forget(self) -> None:
        """The file was cut (a failed write or a torn tail truncated it): what lay past the new end is gone."""
        self.until = 0

    def release(self, fd: int) -> None:
        """Give back the space reserved past the end of the file, before the writer closes it: a
        truncation to the size the file has, read under the writers' exclusive flock (no writer of the
        session appends meanwhile), so not one byte of it changes. Skipped when another process holds
        the lock (it is writing; its own close gives the space back) or when nothing is reserved."""
        if self.until == 0:
            return
        self.until = 0
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return
        try:
            st = os.fstat(fd)
            if st.st_blocks * 512 > -(-st.st_size // _BLOCK) * _BLOCK:
                os.ftruncate(fd, st.st_size)
        except OSError:
            pass  # the reservation holds no data: failing to give it back only costs space
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
