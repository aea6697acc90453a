"""Space reserved past the end of a session file (journal/preallocation.py) and the new file's directory
fsync: the bytes of the file never change, failures of the reservation never fail an append, and the
failures of the write and the fdatasync are reported exactly as without it."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

import journal.preallocation as preallocation
import journal.writer as writer_module
from journal.canonical import canonical_bytes
from journal.vault import Vault
from journal.verify import verify_session
from journal.writer import JournalError, JournalStopped, JournalWriter
from tests.support.journal_factories import fields


def _on_disk(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_blocks * 512


def _reserving(tmp_path: Path) -> bool:
    probe = tmp_path / "probe"
    fd = os.open(probe, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        preallocation.fallocate(fd, preallocation.FALLOC_FL_KEEP_SIZE, 0, 1 << 16)
    except OSError:
        return False
    finally:
        os.close(fd)
        probe.unlink()
    return True


def test_reserved_space_changes_no_byte_and_is_given_back_on_close(tmp_path):
    if not _reserving(tmp_path):
        pytest.skip("the file system of tmp_path refuses fallocate(FALLOC_FL_KEEP_SIZE)")
    path = Vault(tmp_path).session_path("s1")
    w = JournalWriter(tmp_path)
    entries = [w.append(fields(n=n)) for n in range(1, 6)]
    size, allocated = _on_disk(path)
    assert size == sum(len(canonical_bytes(e)) + 1 for e in entries)  # the size is the lines', no more
    assert allocated >= size + preallocation.RESERVE_MIN  # the reservation is past the end
    assert path.read_bytes() == b"".join(canonical_bytes(e) + b"\n" for e in entries)  # no NUL, no gap
    w.close()
    size_after, allocated_after = _on_disk(path)
    assert size_after == size and allocated_after < size + preallocation.RESERVE_MIN
    assert verify_session(Vault(tmp_path), "s1").intact


def test_a_refused_reservation_is_not_tried_again_and_appends_go_on(tmp_path, monkeypatch):
    calls = []

    def refusing(fd: int, mode: int, offset: int, length: int) -> None:
        calls.append(mode)
        raise OSError(errno.EOPNOTSUPP, "not supported")

    monkeypatch.setattr(preallocation, "fallocate", refusing)
    with JournalWriter(tmp_path) as w:
        for n in range(1, 40):
            w.append(fields(n=n))
    assert calls == [preallocation.FALLOC_FL_KEEP_SIZE]  # once, then this file appends without it
    r = verify_session(Vault(tmp_path), "s1")
    assert r.intact and r.entries == 39


def test_a_full_disk_at_the_reservation_leaves_the_write_to_report_it(tmp_path, monkeypatch):
    tries = []
    monkeypatch.setattr(preallocation, "fallocate",
                        lambda *a: (tries.append(a), (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))[1])
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    with JournalWriter(tmp_path) as w:
        with pytest.raises(JournalError, match="nothing was written"):  # the write's own report
            w.append(fields(n=1))
        monkeypatch.setattr(os, "write", real_write)
        w.append(fields(n=2))  # space again: the next entry goes in, and reserving is tried again
    assert len(tries) == 2
    r = verify_session(Vault(tmp_path), "s1")
    assert r.intact and r.entries == 1


def test_a_failed_fdatasync_still_stops_the_session_with_space_reserved(tmp_path, monkeypatch):
    with JournalWriter(tmp_path) as w:
        w.append(fields(n=1))
        monkeypatch.setattr(os, "fdatasync", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "EIO")))
        with pytest.raises(JournalStopped, match="fsync"):
            w.append(fields(n=2))
        monkeypatch.undo()
        with pytest.raises(JournalStopped):
            w.append(fields(n=3))


def test_a_new_session_file_has_its_directory_synced_once(tmp_path, monkeypatch):
    synced: list[Path] = []
    real = writer_module.fsync_dir
    monkeypatch.setattr(writer_module, "fsync_dir", lambda p: (synced.append(Path(p)), real(p))[1])
    with JournalWriter(tmp_path) as w:
        w.append(fields(n=1))
        w.append(fields(n=2))
    assert synced == [Vault(tmp_path).journal_dir]
    with JournalWriter(tmp_path) as w:  # the file exists: its name is durable already
        w.append(fields(n=3))
    assert synced == [Vault(tmp_path).journal_dir]


def test_a_failed_directory_sync_fails_the_append(tmp_path, monkeypatch):
    monkeypatch.setattr(writer_module, "fsync_dir", lambda p: (_ for _ in ()).throw(OSError(errno.EIO, "EIO")))
    with JournalWriter(tmp_path) as w:
        with pytest.raises(JournalError, match="cannot open journal file"):
            w.append(fields(n=1))


def test_an_empty_session_file_left_by_a_failed_directory_sync_is_synced_at_the_next_open(tmp_path, monkeypatch):
    """The failed sync left the file (created, empty): the next append must not take its name as durable."""
    monkeypatch.setattr(writer_module, "fsync_dir", lambda p: (_ for _ in ()).throw(OSError(errno.EIO, "EIO")))
    with JournalWriter(tmp_path) as w:
        with pytest.raises(JournalError, match="cannot open journal file"):
            w.append(fields(n=1))
    synced: list[Path] = []
    monkeypatch.setattr(writer_module, "fsync_dir", lambda p: synced.append(Path(p)))
    with JournalWriter(tmp_path) as w:
        w.append(fields(n=1))
    assert synced == [Vault(tmp_path).journal_dir]


def test_a_session_of_4_mb_is_reserved_in_at_most_three_pieces(tmp_path, monkeypatch):
    """Each reservation may become an extent of its own (another file took the blocks after the last one),
    and past four extents ext4 moves the extent tree out of the inode, so every fdatasync writes one more
    block: a session of up to 4 MB is reserved in at most three fallocate calls, each at least RESERVE_MIN."""
    reserved: list[tuple[int, int]] = []
    real = preallocation.fallocate

    def counting(fd: int, mode: int, offset: int, length: int) -> None:
        reserved.append((offset, length))
        real(fd, mode, offset, length)

    monkeypatch.setattr(preallocation, "fallocate", counting)
    body = {"data": "x" * (60 << 10)}  # a line of about 61 KB: 4 MB in 64 appends
    path = Vault(tmp_path).session_path("s1")
    with JournalWriter(tmp_path) as w:
        n = 0
        while n == 0 or path.stat().st_size < 4_000_000:
            n += 1
            w.append(fields(n=n, response={"status": 200, "headers": [], "body": body}))
    assert 1 <= len(reserved) <= 3
    assert all(length >= preallocation.RESERVE_MIN for _, length in reserved)
    assert [offset for offset, _ in reserved] == sorted(offset for offset, _ in reserved)  # each past the last
    assert verify_session(Vault(tmp_path), "s1").intact
