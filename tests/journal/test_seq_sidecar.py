"""The writer's seq sidecar (journal/seq_sidecar.py) and readers of it (journal/seq_index.py): kept by the
writer beside the session file; used by readers only as far as it checks out against the lines, never
written by them, never read by verification. Attacks: a wrong offset, a truncated sidecar, a symlink, a
hard link, a FIFO, a sidecar of a session since tampered."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from journal import seq_index, seq_sidecar
from journal.chain import GENESIS, chain_entry
from journal.seq_index import current_index, line_of_seq, lines_at
from journal.seq_sidecar import RECORD_SIZE, STRIDE, rebuild, sidecar_name
from journal.store.file_store import FileStore
from journal.vault import Vault
from journal.verify import verify_session
from journal.writer import JournalWriter
from tests.support.journal_factories import fields


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _lines(n: int, session: str = "s") -> list[bytes]:
    out, prev = [], GENESIS
    for seq in range(1, n + 1):
        entry, line = chain_entry(fields(session, n=seq), seq, prev)
        prev = entry["hash"]
        out.append(line)
    return out


def _written(tmp_path: Path, n: int, session: str = "s") -> Vault:
    """A vault whose session was written by the journal writer, in groups of several sizes."""
    vault = Vault.create(tmp_path / "v")
    with JournalWriter(vault, durable=False) as w:
        k, size = 1, 1
        while k <= n:
            batch = [fields(session, n=i) for i in range(k, min(n, k + size - 1) + 1)]
            assert all(isinstance(r, dict) for r in w.append_many(batch))
            k += len(batch)
            size = size % 300 + 37
    return vault


def _sidecar(vault: Vault, session: str = "s") -> Path:
    return vault.journal_dir / sidecar_name(vault.session_path(session).name)


def _seq(line: bytes | None) -> int | None:
    return None if line is None else orjson.loads(line)["seq"]


def _vault_files(vault: Vault) -> dict[str, tuple[int, int]]:
    return {str(p): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in vault.root.rglob("*")}


def test_the_writer_keeps_the_sidecar_as_a_scan_would_build_it(tmp_path, cache):
    vault = _written(tmp_path, 3 * STRIDE + 5)
    kept = _sidecar(vault).read_bytes()
    assert len(kept) == RECORD_SIZE * (1 + 4)
    rebuild(vault, "s")
    assert _sidecar(vault).read_bytes() == kept
    files = _vault_files(vault)
    lines = vault.session_path("s").read_bytes().splitlines(keepends=True)
    for seq in (1, STRIDE, STRIDE + 1, 3 * STRIDE + 1, 3 * STRIDE + 5):
        assert line_of_seq(vault, "s", seq) == lines[seq - 1]
    index, _ = current_index(vault, "s")
    assert index.claimed and index.lines == 3 * STRIDE + 5
    assert not cache.exists()  # answered from the sidecar: nothing built or written anywhere
    assert _vault_files(vault) == files  # and nothing written into the vault


def test_a_session_begun_without_a_sidecar_gets_none_and_readers_use_their_own(tmp_path, cache):
    vault = Vault.create(tmp_path / "v")
    lines = _lines(STRIDE + 3)
    vault.session_path("s").write_bytes(b"".join(lines))
    with JournalWriter(vault, durable=False) as w:
        w.append(fields("s", n=999))
    assert not _sidecar(vault).exists()
    assert line_of_seq(vault, "s", STRIDE + 2) == lines[STRIDE + 1]
    assert list((cache / "broker" / "seq-index").glob("*.seqidx"))


def test_a_sidecar_pointing_at_the_wrong_offsets_is_not_followed(tmp_path):
    vault = _written(tmp_path, 3 * STRIDE)
    lines = vault.session_path("s").read_bytes().splitlines(keepends=True)
    side = _sidecar(vault)
    data = bytearray(side.read_bytes())
    wrong = [len(lines[0]), sum(map(len, lines[:5])) + 7]  # another line's start; the middle of a line
    for offset in wrong:
        for i in (1, 2):
            data[RECORD_SIZE * (i + 1) + 8 : RECORD_SIZE * (i + 2)] = offset.to_bytes(8, "little")
            side.write_bytes(bytes(data))
            for seq in (STRIDE + 1, STRIDE + 9, 2 * STRIDE + 1, 3 * STRIDE):
                assert line_of_seq(vault, "s", seq) == lines[seq - 1]


def test_a_sidecar_whose_records_lie_about_their_seq_is_cut_there(tmp_path):
    vault = _written(tmp_path, 2 * STRIDE + 1)
    lines = vault.session_path("s").read_bytes().splitlines(keepends=True)
    side = _sidecar(vault)
    data = bytearray(side.read_bytes())
    # record 1 claims the line of seq STRIDE + 1 is seq 2 * STRIDE + 1 (and so on): refused from there on
    data[RECORD_SIZE * 2 : RECORD_SIZE * 2 + 8] = (2 * STRIDE + 1).to_bytes(8, "little")
    side.write_bytes(bytes(data))
    assert line_of_seq(vault, "s", 2 * STRIDE + 1) == lines[-1]
    assert line_of_seq(vault, "s", STRIDE + 4) == lines[STRIDE + 3]


def test_a_truncated_sidecar_covers_a_prefix_and_the_rest_is_read_from_the_file(tmp_path):
    vault = _written(tmp_path, 4 * STRIDE + 2)
    lines = vault.session_path("s").read_bytes().splitlines(keepends=True)
    side = _sidecar(vault)
    full = side.read_bytes()
    for cut in (RECORD_SIZE * 3 - 5, RECORD_SIZE * 2, RECORD_SIZE + 3, 7, 0):
        side.write_bytes(full[:cut])
        for seq in (1, STRIDE + 1, 3 * STRIDE + 7, 4 * STRIDE + 2):
            assert line_of_seq(vault, "s", seq) == lines[seq - 1], (cut, seq)
        assert current_index(vault, "s")[0].lines == 4 * STRIDE + 2
    # the writer leaves a sidecar of the wrong length alone (readers rely on the prefix it covers)
    side.write_bytes(full[: RECORD_SIZE * 3])
    with JournalWriter(vault, durable=False) as w:
        for i in range(STRIDE):
            w.append(fields("s", n=10_000 + i))
    assert side.read_bytes() == full[: RECORD_SIZE * 3]


def test_a_sidecar_that_is_a_symlink_is_neither_read_nor_written_through(tmp_path):
    vault = _written(tmp_path, 2 * STRIDE)
    lines = vault.session_path("s").read_bytes().splitlines(keepends=True)
    side = _sidecar(vault)
    elsewhere = tmp_path / "elsewhere.seqidx"
    good = side.read_bytes()
    lying = bytearray(good)
    lying[RECORD_SIZE * 2 + 8 : RECORD_SIZE * 3] = len(lines[0]).to_bytes(8, "little")
    elsewhere.write_bytes(bytes(lying))
    side.unlink()
    side.symlink_to(elsewhere)
    assert line_of_seq(vault, "s", STRIDE + 1) == lines[STRIDE]
    assert not current_index(vault, "s")[0].claimed  # the link was not followed
    before = elsewhere.read_bytes()
    with JournalWriter(vault, durable=False) as w:
        for i in range(STRIDE + 1):
            w.append(fields("s", n=20_000 + i))
    assert elsewhere.read_bytes() == before and side.is_symlink()


def test_a_new_session_does_not_truncate_a_file_hard_linked_as_its_sidecar(tmp_path):
    vault = Vault.create(tmp_path / "v")
    precious = tmp_path / "precious"
    precious.write_bytes(b"not the broker's to truncate")
    vault.journal_dir.mkdir(parents=True, exist_ok=True)
    os.link(precious, _sidecar(vault))
    with JournalWriter(vault, durable=False) as w:
        w.append(fields("s", n=1))
    assert precious.read_bytes() == b"not the broker's to truncate"


def test_a_fifo_as_sidecar_does_not_hang_the_writer_or_a_reader(tmp_path):
    vault = Vault.create(tmp_path / "v")
    vault.journal_dir.mkdir(parents=True, exist_ok=True)
    os.mkfifo(_sidecar(vault))
    with JournalWriter(vault, durable=False) as w:
        for i in range(3):
            w.append(fields("s", n=i))
    assert _seq(line_of_seq(vault, "s", 3)) == 3


def test_a_sidecar_of_a_session_since_tampered_never_gives_another_seq(tmp_path):
    vault = _written(tmp_path, 3 * STRIDE)
    path = vault.session_path("s")
    lines = path.read_bytes().splitlines(keepends=True)
    # an entry early in the file made longer: every offset after it in the (old) sidecar is now wrong
    lines[3] = lines[3].replace(b'"agent":"agent-a"', b'"agent":"agent-a-longer"')
    path.write_bytes(b"".join(lines))
    for seq in (STRIDE + 1, 2 * STRIDE + 5, 3 * STRIDE):
        assert line_of_seq(vault, "s", seq) == lines[seq - 1]
    # a line removed: seq k + 1 now sits on line k; the sidecar's records no longer hold their seqs
    del lines[STRIDE + 10]
    path.write_bytes(b"".join(lines))
    assert line_of_seq(vault, "s", STRIDE + 11) is None
    assert _seq(line_of_seq(vault, "s", 2 * STRIDE + 1)) == 2 * STRIDE + 1
    _, got = lines_at(vault, "s", 2 * STRIDE, 1)  # position 2*STRIDE is the file's line, whatever it holds
    assert got == [lines[2 * STRIDE]]


def test_verify_never_reads_the_sidecar(tmp_path, monkeypatch):
    vault = _written(tmp_path, STRIDE + 5)
    _sidecar(vault).write_bytes(b"BSX1" + b"\xff" * 100)

    def refuse(*args, **kwargs):
        raise AssertionError("verification read the seq sidecar")

    monkeypatch.setattr(seq_sidecar, "read_offsets", refuse)
    monkeypatch.setattr("journal.seq_index.read_offsets", refuse)
    report = verify_session(vault, "s")
    assert report.intact and report.entries == STRIDE + 5


def test_readers_use_no_sidecar_beside_a_database_or_in_a_read_only_vault(tmp_path, cache):
    vault = _written(tmp_path, STRIDE + 2)
    files = _vault_files(vault)
    os.chmod(vault.journal_dir, 0o555)
    try:
        assert _seq(line_of_seq(vault, "s", STRIDE + 2)) == STRIDE + 2
    finally:
        os.chmod(vault.journal_dir, 0o755)
    assert _vault_files(vault) == files


def test_a_pulled_session_gets_the_sidecar_the_writer_would_keep(tmp_path, monkeypatch):
    monkeypatch.setattr("journal.store.file_store.CHUNK", 4096)  # several writes, records in several of them
    lines = _lines(3 * STRIDE + 9)
    store = FileStore(Vault.create(tmp_path / "pulled").root)
    assert store.append_lines("s", lines[:STRIDE + 1]) == STRIDE + 1
    assert store.append_lines("s", lines[STRIDE + 1 :]) == 2 * STRIDE + 8
    vault = Vault(tmp_path / "pulled")
    kept = _sidecar(vault).read_bytes()
    rebuild(vault, "s")
    assert _sidecar(vault).read_bytes() == kept and len(kept) == RECORD_SIZE * 5


def test_a_sidecar_left_far_behind_gives_way_to_the_cache_index(tmp_path, monkeypatch, cache):
    vault = _written(tmp_path, 2 * STRIDE + 3)
    side = _sidecar(vault)
    side.write_bytes(side.read_bytes()[: RECORD_SIZE * 2])  # the writer stopped keeping it after seq 1
    monkeypatch.setattr("journal.seq_index.SIDECAR_TAIL", 1000)
    lines = vault.session_path("s").read_bytes().splitlines(keepends=True)
    assert line_of_seq(vault, "s", 2 * STRIDE + 3) == lines[-1]
    assert not current_index(vault, "s")[0].claimed and cache.exists()


def test_a_tampered_file_is_rebuilt_once_not_at_every_read(tmp_path, monkeypatch):
    vault = _written(tmp_path, 3 * STRIDE)
    path = vault.session_path("s")
    lines = path.read_bytes().splitlines(keepends=True)
    del lines[10]
    path.write_bytes(b"".join(lines))
    rebuilt = []
    real = seq_index.session_index
    monkeypatch.setattr(seq_index, "session_index",
                        lambda v, s, rebuild=False: rebuilt.append(rebuild) or real(v, s, rebuild=rebuild))
    for first in (2 * STRIDE, STRIDE + 3, 2 * STRIDE + 7, 0):
        assert lines_at(vault, "s", first, 3)[1] == lines[first : first + 3]
    assert rebuilt.count(True) == 1
