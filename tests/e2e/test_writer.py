"""The writer: chaining, durability, concurrency (threads and processes), torn tails, failures."""

from __future__ import annotations

import errno
import multiprocessing
import os
import threading
from pathlib import Path

import orjson
import pytest

from journal.canonical import canonical_bytes
from journal.chain import GENESIS, entry_hash
from journal.entry import ContractError
from journal.vault import Vault
from journal.verify import verify_session
from journal.writer import JournalCorrupt, JournalError, JournalStopped, JournalWriter
from tests.support.journal_factories import fields


def read_lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def test_append_assigns_seq_prev_hash_and_writes_canonical_lines(tmp_path):
    with JournalWriter(tmp_path) as w:
        e1 = w.append(fields(n=1))
        e2 = w.append(fields(n=2))
    assert (e1["seq"], e1["prev"]) == (1, GENESIS)
    assert (e2["seq"], e2["prev"]) == (2, e1["hash"])
    assert e1["hash"] == entry_hash(e1)
    lines = read_lines(Vault(tmp_path).session_path("s1"))
    assert lines == [canonical_bytes(e1) + b"\n", canonical_bytes(e2) + b"\n"]
    assert verify_session(Vault(tmp_path), "s1").intact


def test_writer_refuses_fields_that_break_the_contract(tmp_path):
    with JournalWriter(tmp_path) as w:
        with pytest.raises(ContractError):
            w.append({**fields(), "seq": 5})
        with pytest.raises(ContractError):
            w.append(fields(effect="delete"))
        bad = fields()
        del bad["mcp"]
        with pytest.raises(ContractError):
            w.append(bad)
    assert not Vault(tmp_path).session_path("s1").exists() or Vault(tmp_path).session_path("s1").stat().st_size == 0


def test_many_threads_give_one_contiguous_chain(tmp_path):
    w = JournalWriter(tmp_path)
    per_thread, threads = 50, 16
    errors = []

    def worker(t: int) -> None:
        try:
            for i in range(per_thread):
                w.append(fields(session=f"s{t % 3}", n=t * 1000 + i))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    w.close()
    assert not errors
    vault = Vault(tmp_path)
    total = 0
    for s in vault.sessions():
        r = verify_session(vault, s)
        assert r.intact, r
        total += r.entries
    assert total == per_thread * threads


def test_group_commit_shares_fsyncs(tmp_path, monkeypatch):
    calls = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (calls.append(fd), real(fd)))
    w = JournalWriter(tmp_path)
    barrier = threading.Barrier(32)

    def worker(i: int) -> None:
        barrier.wait()
        for k in range(10):
            w.append(fields(n=i * 100 + k))

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    w.close()
    assert verify_session(Vault(tmp_path), "s1").entries == 320
    assert len(calls) < 320  # batches shared a sync


def _process_appender(root: str, n: int, tag: int) -> None:
    w = JournalWriter(root)
    for i in range(n):
        w.append(fields(n=tag * 10000 + i))
    w.close()


def test_several_processes_continue_each_others_chain(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_process_appender, args=(str(tmp_path), 60, t)) for t in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    r = verify_session(Vault(tmp_path), "s1")
    assert r.intact, r
    assert r.entries == 240


def _acknowledging_appender(root: str, conn, tag: int) -> None:
    """Append for ever, telling the parent each entry's (seq, hash) as soon as `append` returns."""
    w = JournalWriter(root)
    for i in range(1_000_000):
        e = w.append(fields(n=tag * 1_000_000 + i))
        conn.send((e["seq"], e["hash"]))


def test_no_acknowledged_entry_is_lost_when_two_appending_processes_are_killed(tmp_path):
    """Two processes append to one session (each from the other's last line, under the flock) and are
    killed with SIGKILL while appending: every entry either acknowledged is in the file, in one intact chain,
    and a new writer continues it (a line cut by the kill is moved aside, not chained after). What a power cut
    would take is the sync's part: that no `append` returns before its bytes are synced is
    test_writer_groups.py's test_no_append_returns_before_its_line_is_synced."""
    import signal

    ctx = multiprocessing.get_context("spawn")
    pipes = [ctx.Pipe(duplex=False) for _ in range(2)]
    procs = [ctx.Process(target=_acknowledging_appender, args=(str(tmp_path), send, t))
             for t, (_, send) in enumerate(pipes)]
    acked: dict[int, str] = {}
    try:
        for p in procs:
            p.start()
        for _ in range(60):
            for recv, _ in pipes:
                assert recv.poll(60)
                seq, digest = recv.recv()
                assert acked.setdefault(seq, digest) == digest  # no seq given out twice
    finally:
        for p in procs:
            if p.pid is not None:
                os.kill(p.pid, signal.SIGKILL)
                p.join(30)
    assert all(p.exitcode == -signal.SIGKILL for p in procs)
    for recv, _ in pipes:  # acknowledgements sent before the kill
        while recv.poll(0.1):
            seq, digest = recv.recv()
            assert acked.setdefault(seq, digest) == digest
    with JournalWriter(tmp_path) as w:
        after = w.append(fields(n=7))
    got = {orjson.loads(line)["seq"]: orjson.loads(line)["hash"]
           for line in read_lines(Vault(tmp_path).session_path("s1"))}
    assert {seq: got.get(seq) for seq in acked} == acked
    assert after["seq"] == max(got) and after["seq"] > max(acked)
    r = verify_session(Vault(tmp_path), "s1")
    assert r.intact and r.entries == after["seq"]


def test_writer_notices_an_append_by_another_writer(tmp_path):
    a, b = JournalWriter(tmp_path), JournalWriter(tmp_path)
    a.append(fields(n=1))
    b.append(fields(n=2))
    e3 = a.append(fields(n=3))
    assert e3["seq"] == 3
    assert verify_session(Vault(tmp_path), "s1").intact


@pytest.mark.parametrize("tail", [b'{"seq":3,"ts":"2026', b"\x00\x00\x00\x00", b"garbage without newline"])
def test_torn_tail_is_quarantined_not_deleted(tmp_path, tail):
    with JournalWriter(tmp_path) as w:
        w.append(fields(n=1))
        w.append(fields(n=2))
    path = Vault(tmp_path).session_path("s1")
    with open(path, "ab") as f:
        f.write(tail)
    r = verify_session(Vault(tmp_path), "s1")
    assert (r.intact, r.kind, r.broken_at_seq) == (False, "torn_tail", 3)
    with JournalWriter(tmp_path) as w:
        e = w.append(fields(n=3))
        assert e["seq"] == 3
        assert len(w.recoveries) == 1
        quarantine = Path(w.recoveries[0].quarantine)
    assert quarantine.read_bytes() == tail
    assert quarantine.parent == path.parent and quarantine.name.startswith(path.name + ".torn-")
    r = verify_session(Vault(tmp_path), "s1")
    assert r.intact and r.entries == 3
    assert any("torn tail quarantined" in n for n in r.notes)


def test_corrupt_last_line_stops_the_writer(tmp_path):
    with JournalWriter(tmp_path) as w:
        w.append(fields(n=1))
    path = Vault(tmp_path).session_path("s1")
    with open(path, "ab") as f:
        f.write(b"not json at all\n")
    with JournalWriter(tmp_path) as w:
        with pytest.raises(JournalCorrupt, match="broker verify"):
            w.append(fields(n=2))
    assert read_lines(path)[-1] == b"not json at all\n"


def test_fsync_failure_stops_the_session_without_retry(tmp_path, monkeypatch):
    w = JournalWriter(tmp_path)
    w.append(fields(n=1))
    calls = []

    def failing(fd):
        calls.append(fd)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(JournalStopped, match="fsync"):
        w.append(fields(n=2))
    monkeypatch.undo()
    with pytest.raises(JournalStopped):
        w.append(fields(n=3))
    assert len(calls) == 1  # never retried
    w.append(fields(session="other"))  # other sessions are unaffected
    w.close()


def test_large_entry_is_spilled_to_fit_the_line_limit(tmp_path):
    big = "x" * (900 << 10)  # each under the 1 MiB rule, together over a small line limit
    f = fields()
    f["response"]["body"] = {"a": big, "b": big + "y", "c": "small"}
    with JournalWriter(tmp_path, line_limit=1 << 20) as w:
        e = w.append(f)
    line = read_lines(Vault(tmp_path).session_path("s1"))[0]
    assert len(line) <= 1 << 20
    body = e["response"]["body"]
    assert body["c"] == "small"
    spilled = [v for v in body.values() if isinstance(v, dict)]
    assert spilled and all(set(v) == {"sha256", "size", "ref"} for v in spilled)
    for v in spilled:
        data = (tmp_path / v["ref"]).read_bytes()
        assert data in (big.encode(), (big + "y").encode())
    assert verify_session(Vault(tmp_path), "s1").intact


def test_line_is_canonical_of_returned_entry(tmp_path):
    with JournalWriter(tmp_path) as w:
        e = w.append(fields(n=7))
    line = read_lines(Vault(tmp_path).session_path("s1"))[0]
    assert orjson.loads(line) == e


def test_idle_session_files_are_closed_beyond_max_open(tmp_path):
    w = JournalWriter(tmp_path, max_open=2)
    for round_ in range(3):
        for s in range(5):
            w.append(fields(session=f"s{s}", n=round_))
            assert len(w._logs) <= 2
    w.close()
    vault = Vault(tmp_path)
    for s in range(5):
        r = verify_session(vault, f"s{s}")
        assert r.intact and r.entries == 3


def test_a_stopped_session_stays_stopped_after_its_file_is_closed(tmp_path, monkeypatch):
    w = JournalWriter(tmp_path, max_open=1)
    w.append(fields(session="bad"))
    monkeypatch.setattr(os, "fdatasync", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "EIO")))
    with pytest.raises(JournalStopped):
        w.append(fields(session="bad"))
    monkeypatch.undo()
    w.append(fields(session="other"))  # evicts "bad"
    with pytest.raises(JournalStopped):
        w.append(fields(session="bad"))
    w.close()


def test_failed_write_is_rolled_back_and_the_session_resumes(tmp_path, monkeypatch):
    """A write that fails half way (a full disk) leaves no partial line behind, fails only its own
    entries (not JournalStopped), and the next append goes through once the disk takes it again."""
    w = JournalWriter(tmp_path)
    w.append(fields(n=1))
    path = Vault(tmp_path).session_path("s1")
    size = path.stat().st_size
    real_write = os.write

    def half_then_enospc(fd, data):
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_enospc)
    with pytest.raises(JournalError, match="No space left") as caught:
        w.append(fields(n=2))
    assert not isinstance(caught.value, JournalStopped)
    monkeypatch.undo()
    assert path.stat().st_size == size
    assert w.append(fields(n=3))["seq"] == 2
    w.close()
    assert verify_session(Vault(tmp_path), "s1").intact


def test_short_writes_are_continued_until_the_whole_group_is_in(tmp_path, monkeypatch):
    """os.write may take fewer bytes than asked (a disk filling up, a signal): the rest is written after
    them, so each line is whole and the chain intact."""
    real_write = os.write
    sizes = []

    def short(fd, data):
        sizes.append(len(data))
        return real_write(fd, bytes(data[:700]))

    monkeypatch.setattr(os, "write", short)
    with JournalWriter(tmp_path) as w:
        got = [w.append(fields(n=n)) for n in range(1, 4)]
        got += w.append_many([fields(n=n) for n in range(4, 8)])
    monkeypatch.undo()
    assert max(sizes) > 700 and len(sizes) > 7  # each group took several writes
    path = Vault(tmp_path).session_path("s1")
    assert read_lines(path) == [canonical_bytes(e) + b"\n" for e in got]
    assert verify_session(Vault(tmp_path), "s1").intact


def test_failed_cut_after_a_failed_write_stops_the_session(tmp_path, monkeypatch):
    """When the partial write cannot be cut off again, the file may hold a torn line: stop."""
    w = JournalWriter(tmp_path)
    w.append(fields(n=1))

    def enospc(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    def eio(fd, size):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "write", enospc)
    monkeypatch.setattr(os, "ftruncate", eio)
    with pytest.raises(JournalStopped, match="cutting off"):
        w.append(fields(n=2))
    monkeypatch.undo()
    with pytest.raises(JournalStopped):
        w.append(fields(n=3))
    w.close()


def test_vault_path_that_is_a_file_is_a_clear_error(tmp_path):
    from journal.vault import VaultError

    (tmp_path / "file").write_text("x")
    with pytest.raises(VaultError, match="not a directory"):
        JournalWriter(tmp_path / "file")


def test_append_many_writes_each_session_once_and_reports_per_item(tmp_path, monkeypatch):
    syncs = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (syncs.append(fd), real(fd)))
    batch = [fields(session="s1", n=1), fields(session="s2", n=2), {**fields(n=3), "seq": 9},
             fields(session="s1", n=4), fields(session="s2", n=5), fields(effect="delete")]
    with JournalWriter(tmp_path) as w:
        out = w.append_many(batch)
    assert [type(r).__name__ for r in out] == ["dict", "dict", "ContractError", "dict", "dict", "ContractError"]
    got = [(r["session"], r["seq"]) for r in out if isinstance(r, dict)]
    assert got == [("s1", 1), ("s2", 1), ("s1", 2), ("s2", 2)]
    assert out[3]["prev"] == out[0]["hash"]
    assert len(syncs) == 2  # one fsync per session for the whole batch
    for s in ("s1", "s2"):
        r = verify_session(Vault(tmp_path), s)
        assert r.intact and r.entries == 2


def test_append_many_on_a_stopped_session_fails_only_that_session(tmp_path, monkeypatch):
    real = os.fdatasync
    w = JournalWriter(tmp_path)
    w.append(fields(session="bad"))
    target = w._logs["bad"].fd

    def failing(fd):
        if fd == target:
            raise OSError(errno.EIO, "I/O error")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", failing)
    out = w.append_many([fields(session="bad", n=1), fields(session="good", n=2)])
    assert isinstance(out[0], JournalStopped) and isinstance(out[1], dict)
    out = w.append_many([fields(session="bad", n=3)])
    assert isinstance(out[0], JournalStopped)  # stays stopped: no retry after a failed fsync
    w.close()


def test_dedupe_returns_the_entry_a_dead_process_already_wrote(tmp_path):
    """The proxy records a call its recording service may have appended before dying: with dedupe,
    an identical entry among the session's last ones is returned and nothing is appended; a call that
    differs (here by its time) is appended as usual."""
    other = JournalWriter(tmp_path)  # the service that died after its fsync, before its ack
    written = other.append(fields(n=1))
    other.close()
    w = JournalWriter(tmp_path)
    w.append(fields(n=2))
    again = w.append(fields(n=1), dedupe=True)
    assert again == written
    assert w.append(fields(n=3), dedupe=True)["seq"] == 3
    assert w.append(fields(n=1))["seq"] == 4  # without dedupe the same fields are a new entry
    w.close()
    path = Vault(tmp_path).session_path("s1")
    assert len(path.read_bytes().splitlines()) == 4
    assert verify_session(Vault(tmp_path), "s1").intact
