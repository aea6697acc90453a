"""The two ways the file writer makes a group durable (journal/writer.py), for tests that watch, hold or fail
the sync: one `pwritev` with RWF_DSYNC (write and sync in one system call), or `write` + `fdatasync` (where the
flag is missing, and whenever the file holds bytes this writer does not know to be durable).

`around_syncs` puts a test's function at the sync point of both: `fn(fd, sync)` runs when the group's bytes
are in the file and before they are synced, and must call `sync()` for the sync to happen; raising fails the
sync after the write, as the kernel's own failure does (for RWF_DSYNC it returns the sync's error for bytes it
wrote). The RWF_DSYNC call is then made as the plain write it contains followed by `fdatasync`, so such a test
checks the writer's handling of the call and its outcomes; the kernel's flag itself is what every other test
runs through.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from journal import writer

PATHS = pytest.mark.parametrize("dsync", [True, False], ids=["rwf_dsync", "write_fdatasync"])
"""Run a test on both paths; the test calls `choose_path(monkeypatch, dsync)` first."""


def choose_path(monkeypatch: pytest.MonkeyPatch, dsync: bool) -> None:
    """Writers made after this sync with RWF_DSYNC (when this system has it) or with write + fdatasync only."""
    if not dsync:
        monkeypatch.setattr(writer, "_RWF_DSYNC", None)
    elif writer._RWF_DSYNC is None:
        pytest.skip("no RWF_DSYNC here")


def around_syncs(monkeypatch: pytest.MonkeyPatch, fn: Callable[[int, Callable[[], None]], None]) -> None:
    """Run `fn(fd, sync)` at every sync of the writer, on either path (see the module doc)."""
    real_fdatasync, real_pwritev = os.fdatasync, os.pwritev
    flag = writer._RWF_DSYNC or 0

    def fdatasync(fd: int) -> None:
        fn(fd, lambda: real_fdatasync(fd))

    def pwritev(fd: int, buffers: list, offset: int, flags: int = 0) -> int:
        if not flags & flag:
            return real_pwritev(fd, buffers, offset, flags)
        n = real_pwritev(fd, buffers, offset, flags & ~flag)
        fn(fd, lambda: real_fdatasync(fd))
        return n

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "pwritev", pwritev)


def fail_syncs(monkeypatch: pytest.MonkeyPatch, error: OSError, only_fd: int | None = None) -> None:
    """Every sync (of `only_fd`, if given) fails with `error` after its bytes were written."""

    def failing(fd: int, sync: Callable[[], None]) -> None:
        if only_fd is not None and fd != only_fd:
            sync()
            return
        raise error

    around_syncs(monkeypatch, failing)


def fail_writes(monkeypatch: pytest.MonkeyPatch, error: OSError, *, half: bool = False) -> None:
    """Every write of the writer, on either path, fails with `error` (after writing half of its bytes when
    `half`: a disk that fills up in the middle of a group; RWF_DSYNC then returns the half it wrote and
    synced, and the next call fails, as the kernel's short write does)."""
    real_write, real_pwritev = os.write, os.pwritev
    short = [half]  # the next RWF_DSYNC call writes half and returns, the one after it fails

    def write(fd: int, data: bytes) -> int:
        if half:
            real_write(fd, bytes(data[: len(data) // 2]))
        raise error

    def pwritev(fd: int, buffers: list, offset: int, flags: int = 0) -> int:
        data = b"".join(bytes(b) for b in buffers)
        if short[0]:
            short[0] = False
            return real_pwritev(fd, [data[: len(data) // 2]], offset, flags)
        short[0] = half
        raise error

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "pwritev", pwritev)
