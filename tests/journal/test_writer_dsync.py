"""The writer's one-call durable write (pwritev2 with RWF_DSYNC, journal/writer.py): it syncs only the bytes it
writes, so it is used only when every byte before them is known durable; a kernel that refuses the flag gets
write + fdatasync; and its failures are told apart by the file's size. (The failure tests that run on both
paths are in tests/e2e/test_writer.py and test_writer_groups.py, through tests/support/syncs.py.)"""

from __future__ import annotations

import errno
import os

import pytest

import journal.writer as writer_module
from journal.vault import Vault
from journal.verify import verify_session
from journal.writer import JournalError, JournalStopped, JournalWriter
from tests.support.journal_factories import fields
from tests.support.syncs import choose_path


def _record_syncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The writer's syncs of session files in order: "fdatasync" or "fsync" (the whole file) or "dsync" (a
    pwritev with RWF_DSYNC)."""
    calls: list[str] = []
    real_fdatasync, real_fsync, real_pwritev = os.fdatasync, os.fsync, os.pwritev
    flag = writer_module._RWF_DSYNC or 0

    def fdatasync(fd: int) -> None:
        calls.append("fdatasync")
        real_fdatasync(fd)

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".jsonl"):
            calls.append("fsync")
        real_fsync(fd)

    def pwritev(fd: int, buffers: list, offset: int, flags: int = 0) -> int:
        if flags & flag:
            calls.append("dsync")
        return real_pwritev(fd, buffers, offset, flags)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "pwritev", pwritev)
    return calls


def test_a_lone_writer_syncs_its_own_bytes_in_the_write_after_one_whole_file_sync(tmp_path, monkeypatch):
    choose_path(monkeypatch, True)
    calls = _record_syncs(monkeypatch)
    with JournalWriter(tmp_path) as w:
        for n in range(1, 6):
            w.append(fields(n=n))
    # The first group after opening the file cannot know what is durable before it: the whole file.
    assert calls == ["fdatasync"] + ["dsync"] * 4
    r = verify_session(Vault(tmp_path), "s1")
    assert r.intact and r.entries == 5


def test_bytes_another_writer_left_unsynced_are_synced_by_the_next_group(tmp_path, monkeypatch):
    """RWF_DSYNC syncs only the range it writes. Another writer's line (a process killed between its write
    and its sync: here one that never syncs) is the `prev` of the next entry: if only the next entry's bytes
    were synced, a power cut could keep the acknowledged entry and lose the line it chains to. So a group
    that finds the file grown by bytes it did not sync makes the whole file durable."""
    choose_path(monkeypatch, True)
    calls = _record_syncs(monkeypatch)
    a = JournalWriter(tmp_path)
    a.append(fields(n=1))
    a.append(fields(n=2))
    other = JournalWriter(tmp_path, durable=False)
    other.append(fields(n=3))
    other.close()
    calls.clear()
    assert a.append(fields(n=4))["seq"] == 4
    a.append(fields(n=5))
    assert calls == ["fdatasync", "dsync"]
    a.close()
    r = verify_session(Vault(tmp_path), "s1")
    assert r.intact and r.entries == 5


def test_a_torn_tail_cut_off_is_synced_before_the_next_group_syncs_its_own_bytes(tmp_path, monkeypatch):
    """The recovery fsyncs the file it cut back to the last complete line (this writer's own durable end):
    every byte before the group is durable again, and only then does the group sync its own range alone."""
    if not os.path.exists("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd to tell the session file's fsync from the quarantine file's")
    choose_path(monkeypatch, True)
    calls = _record_syncs(monkeypatch)
    a = JournalWriter(tmp_path)
    a.append(fields(n=1))
    a.append(fields(n=2))
    with open(Vault(tmp_path).session_path("s1"), "ab") as f:
        f.write(b'{"seq":3,"ts":"20')  # a writer that died mid-line
    calls.clear()
    a.append(fields(n=3))
    assert calls == ["fsync", "dsync"] and len(a.recoveries) == 1
    a.close()
    assert verify_session(Vault(tmp_path), "s1").intact


@pytest.mark.parametrize("refusal", [errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL])
def test_a_kernel_that_refuses_the_flag_gets_write_and_fdatasync(tmp_path, monkeypatch, refusal):
    choose_path(monkeypatch, True)
    calls = _record_syncs(monkeypatch)
    recorded_pwritev = os.pwritev
    refused = []

    def refusing(fd: int, buffers: list, offset: int, flags: int = 0) -> int:
        if flags & writer_module._RWF_DSYNC:
            refused.append(fd)
            raise OSError(refusal, os.strerror(refusal))
        return recorded_pwritev(fd, buffers, offset, flags)

    monkeypatch.setattr(os, "pwritev", refusing)
    with JournalWriter(tmp_path) as w:
        for n in range(1, 5):
            assert w.append(fields(n=n))["seq"] == n
    assert len(refused) == 1  # asked once, then this file syncs with fdatasync
    assert calls == ["fdatasync"] * 4
    r = verify_session(Vault(tmp_path), "s1")
    assert r.intact and r.entries == 4


def test_a_refusal_after_bytes_went_in_is_a_failed_sync_not_a_refused_flag(tmp_path, monkeypatch):
    """EINVAL from a call that wrote its bytes is the sync's error (the kernel returns it for bytes it wrote):
    the session stops as after a failed fdatasync, and is not retried with write + fdatasync."""
    choose_path(monkeypatch, True)
    w = JournalWriter(tmp_path)
    w.append(fields(n=1))
    real_pwritev = os.pwritev

    def wrote_then_einval(fd: int, buffers: list, offset: int, flags: int = 0) -> int:
        real_pwritev(fd, buffers, offset, flags & ~writer_module._RWF_DSYNC)
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(os, "pwritev", wrote_then_einval)
    with pytest.raises(JournalStopped, match="fsync"):
        w.append(fields(n=2))
    monkeypatch.undo()
    with pytest.raises(JournalStopped):
        w.append(fields(n=3))
    w.close()


def test_a_write_that_fails_before_any_byte_fails_its_group_only(tmp_path, monkeypatch):
    """ENOSPC with the size unchanged: nothing went in, nothing was synced; the group fails, the session
    goes on (as with a failed `write`)."""
    choose_path(monkeypatch, True)
    w = JournalWriter(tmp_path)
    w.append(fields(n=1))
    monkeypatch.setattr(os, "pwritev", lambda *a: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    with pytest.raises(JournalError, match="nothing was written") as caught:
        w.append(fields(n=2))
    assert not isinstance(caught.value, JournalStopped)
    monkeypatch.undo()
    choose_path(monkeypatch, True)
    assert w.append(fields(n=3))["seq"] == 2
    w.close()
    assert verify_session(Vault(tmp_path), "s1").intact
