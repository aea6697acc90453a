"""`broker reindex`: the seq sidecar of sessions recorded before the writer kept one, written as the writer keeps
it, under the writer's lock, through the writer's code; the session file never changes. Attacks: a symlink, a
hard link or a FIFO where the sidecar goes, a sidecar edited or cut short, a symlinked session file."""

from __future__ import annotations

import fcntl
import os
import shutil
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from broker.cli.main import cli
from journal.chain import GENESIS, chain_entry
from journal.seq_index import line_of_seq
from journal.seq_sidecar import RECORD_SIZE, STRIDE, note_group, sidecar_name
from journal.vault import Vault
from journal.writer import JournalWriter
from tests.support.journal_factories import fields


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _old_session(tmp_path: Path, n: int, name: str = "old") -> Vault:
    """A vault with session `s` of `n` entries as a writer without sidecars left it: the file alone."""
    vault = Vault.create(tmp_path / name)
    out, prev = [], GENESIS
    for seq in range(1, n + 1):
        entry, line = chain_entry(fields("s", n=seq), seq, prev)
        prev = entry["hash"]
        out.append(line)
    vault.session_path("s").write_bytes(b"".join(out))
    return vault


def _side(vault: Vault, session: str = "s") -> Path:
    return vault.journal_dir / sidecar_name(vault.session_path(session).name)


def _expected(path: Path) -> bytes:
    """The sidecar by its documented format (docs/contract.md), computed here from the file's lines."""
    out = [b"BSX1" + STRIDE.to_bytes(4, "little") + bytes(8)]
    at = 0
    for i, line in enumerate(path.read_bytes().splitlines(keepends=True)):
        if line.endswith(b"\n") and i % STRIDE == 0:
            out.append((i + 1).to_bytes(8, "little") + at.to_bytes(8, "little"))
        at += len(line)
    return b"".join(out)


def _run(*args: str) -> tuple[object, str]:
    """(the command's exit value or the exception it raised, what it printed)."""
    r = CliRunner().invoke(cli, list(args), standalone_mode=False)
    return (r.exception if r.exception is not None else r.return_value), r.output


def _verify(vault: Vault) -> str:
    r = CliRunner().invoke(cli, ["verify", "--vault", str(vault.root)])
    assert r.exit_code == 0, r.output
    return r.output


def test_an_old_session_gets_the_sidecar_the_writer_would_have_written(tmp_path):
    n = 3 * STRIDE + 7
    kept = Vault.create(tmp_path / "kept")  # the same lines written by the writer, which keeps a sidecar
    with JournalWriter(kept, durable=False) as w:
        for k in range(1, n + 1, 50):
            w.append_many([fields("s", n=i) for i in range(k, min(n, k + 49) + 1)])
    old = Vault.create(tmp_path / "old")
    shutil.copyfile(kept.session_path("s"), old.session_path("s"))
    assert not _side(old).exists()
    before = _verify(old)
    data, st = old.session_path("s").read_bytes(), old.session_path("s").stat()
    code, out = _run("reindex", "--vault", str(old.root))
    assert code == 0 and out == f"s: journal/{_side(old).name} written ({n} lines)\n"
    assert _side(old).read_bytes() == _side(kept).read_bytes() == _expected(old.session_path("s"))
    assert old.session_path("s").read_bytes() == data  # the session file is only read
    assert (old.session_path("s").stat().st_mtime_ns, old.session_path("s").stat().st_ino) == (st.st_mtime_ns,
                                                                                               st.st_ino)
    assert _verify(old) == before  # verification never reads it
    with JournalWriter(old, durable=False) as w:  # from here on the writer keeps it
        w.append_many([fields("s", n=i) for i in range(n + 1, n + 2 * STRIDE)])
    assert _side(old).read_bytes() == _expected(old.session_path("s"))
    lines = old.session_path("s").read_bytes().splitlines(keepends=True)
    assert line_of_seq(old, "s", 3 * STRIDE + 1) == lines[3 * STRIDE]


def test_named_sessions_only_and_a_torn_tail_is_left_alone(tmp_path):
    vault = _old_session(tmp_path, STRIDE + 2)
    other = _old_session(tmp_path, 3, "unused")
    shutil.copyfile(other.session_path("s"), vault.session_path("t"))
    with open(vault.session_path("s"), "ab") as f:
        f.write(b'{"seq": 131, "torn')  # a crash mid-write: the writer moves it aside, not this command
    data = vault.session_path("s").read_bytes()
    code, out = _run("reindex", "--vault", str(vault.root), "s")
    assert code == 0 and "(130 lines)" in out
    assert _side(vault).read_bytes() == _expected(vault.session_path("s"))
    assert len(_side(vault).read_bytes()) == RECORD_SIZE * 3
    assert vault.session_path("s").read_bytes() == data
    assert not _side(vault, "t").exists()


def test_a_vault_without_sessions_says_so(tmp_path):
    vault = Vault.create(tmp_path / "empty")
    code, out = _run("reindex", "--vault", str(vault.root))
    assert code == 0 and out == f"no sessions in {vault.root}: nothing to reindex\n"


@pytest.mark.parametrize("damage", ["truncated", "torn record", "edited offset", "edited seq", "bad head", "longer"])
def test_a_damaged_sidecar_is_written_anew(tmp_path, damage):
    vault = _old_session(tmp_path, 4 * STRIDE + 1)
    assert _run("reindex", "--vault", str(vault.root))[0] == 0
    good = _side(vault).read_bytes()
    bad = bytearray(good)
    if damage == "truncated":
        bad = bad[: RECORD_SIZE * 2]
    elif damage == "torn record":
        bad = bad[:-5]
    elif damage == "edited offset":
        bad[RECORD_SIZE * 3 + 8] ^= 1
    elif damage == "edited seq":
        bad[RECORD_SIZE * 2] ^= 4
    elif damage == "bad head":
        bad[:4] = b"XXXX"
    else:
        bad += bad[-RECORD_SIZE:]
    _side(vault).write_bytes(bytes(bad))
    assert _run("reindex", "--vault", str(vault.root))[0] == 0
    assert _side(vault).read_bytes() == good == _expected(vault.session_path("s"))


def test_a_symlink_where_the_sidecar_goes_is_refused_and_its_target_untouched(tmp_path):
    vault = _old_session(tmp_path, STRIDE + 1)
    target = tmp_path / "elsewhere"
    target.write_bytes(b"precious")
    _side(vault).symlink_to(target)
    code, out = _run("reindex", "--vault", str(vault.root))
    assert code == 1 and out.startswith("s: NOT reindexed: ") and "symlink" in out
    assert target.read_bytes() == b"precious" and _side(vault).is_symlink()


def test_a_hard_link_where_the_sidecar_goes_is_refused(tmp_path):
    vault = _old_session(tmp_path, STRIDE + 1)
    other = tmp_path / "other-file"
    other.write_bytes(b"precious")
    os.link(other, _side(vault))
    code, out = _run("reindex", "--vault", str(vault.root))
    assert code == 1 and "hard link" in out
    assert other.read_bytes() == b"precious"


def test_a_fifo_where_the_sidecar_goes_is_refused_without_hanging(tmp_path):
    vault = _old_session(tmp_path, STRIDE + 1)
    os.mkfifo(_side(vault))
    code, out = _run("reindex", "--vault", str(vault.root))
    assert code == 1 and "FIFO" in out


def test_a_session_file_reached_through_a_symlink_is_refused(tmp_path):
    vault = _old_session(tmp_path, 3)
    real = tmp_path / "real.jsonl"
    vault.session_path("s").rename(real)
    vault.session_path("s").symlink_to(real)
    err, out = _run("reindex", "--vault", str(vault.root), "s")
    assert isinstance(err, Exception) and "symlink" in str(err) and out == ""
    assert not _side(vault).exists()


def test_journal_swapped_for_a_symlink_while_it_runs_writes_nothing_elsewhere(tmp_path, monkeypatch):
    """Whoever writes the vault swaps `journal/` for a symlink to another folder after the command opened the
    session file (here: as it takes the lock). The sidecar goes beside the file it was built from, in the
    folder that was opened, never through the new link."""
    vault = _old_session(tmp_path, STRIDE + 1)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    real_flock = fcntl.flock

    def swap(fd: int, op: int) -> None:
        real_flock(fd, op)
        if op == fcntl.LOCK_EX and not elsewhere.joinpath("swapped").exists():
            elsewhere.joinpath("swapped").touch()
            vault.journal_dir.rename(vault.root / "journal.real")
            vault.journal_dir.symlink_to(elsewhere)

    monkeypatch.setattr(fcntl, "flock", swap)
    code, out = _run("reindex", "--vault", str(vault.root), "s")
    monkeypatch.undo()
    assert sorted(p.name for p in elsewhere.iterdir()) == ["swapped"], out
    moved = vault.root / "journal.real"
    assert code == 0 and (moved / _side(vault).name).read_bytes() == _expected(moved / vault.session_path("s").name)


def test_reindex_waits_for_the_writers_lock(tmp_path):
    """The writer's group (its lines, then its records) and this command never interleave: while the session
    file's flock is held, as the writer holds it through a group, the command waits; then it covers the
    group too."""
    vault = _old_session(tmp_path, 2 * STRIDE)
    path = vault.session_path("s")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    fcntl.flock(fd, fcntl.LOCK_EX)
    got: list[tuple[object, str]] = []
    t = threading.Thread(target=lambda: got.append(_run("reindex", "--vault", str(vault.root))))
    try:
        t.start()
        t.join(1)
        assert t.is_alive() and not _side(vault).exists()  # held by the writer's lock
        data = b"".join(chain_entry(fields("s", n=i), i, "0" * 64)[1] for i in range(2 * STRIDE + 1, 2 * STRIDE + 4))
        os.write(fd, data)  # the writer's group, under its flock: lines, then its records (none kept yet)
        note_group(path, path.stat().st_size - len(data), 2 * STRIDE + 1, 3, data)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        t.join(30)
    assert got and got[0][0] == 0 and f"({2 * STRIDE + 3} lines)" in got[0][1]
    assert _side(vault).read_bytes() == _expected(path)


def test_a_live_writer_and_reindex_at_once(tmp_path):
    """A writer appending group after group while the command runs again and again: the sidecar ends as the
    writer would have kept it from the first entry."""
    vault = _old_session(tmp_path, STRIDE + 5)
    n = 6 * STRIDE
    stop = threading.Event()
    results: list[object] = []

    ran = threading.Event()

    def reindex_loop() -> None:
        while True:
            results.append(_run("reindex", "--vault", str(vault.root))[0])
            ran.set()
            if stop.is_set():
                break

    t = threading.Thread(target=reindex_loop)
    t.start()
    ran.wait(60)  # the writer starts once the command has run: from then on they run side by side
    try:
        with JournalWriter(vault, durable=False) as w:
            k = STRIDE + 6
            while k <= n:
                batch = [fields("s", n=i) for i in range(k, min(n, k + 16) + 1)]
                assert all(isinstance(r, dict) for r in w.append_many(batch))
                k += len(batch)
    finally:
        stop.set()
        t.join(60)
    assert len(results) >= 2 and set(results) == {0}
    # the last run may have come before the writer's last groups: then the writer kept it up from there
    assert _side(vault).read_bytes() == _expected(vault.session_path("s"))
