"""Replay reads the session file more than once (the verifier, the fold, the fold's partner; the serial fold's
second pass): whoever can write the vault can change the file in between. What replay folds as trusted must
be what a verifier checked, however the file changed (chain.next_head; fold.py `_fold_again`)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from bench.replay_bench import SESSION, build_session
from journal.chain import chain_entry
from journal.errors import InputError
from journal.replay import fold, forked, replay_session, write_outputs
from journal.vault import Vault
from tests.e2e.test_replay_outputs import _digests, _expected

pytestmark = pytest.mark.usefixtures("only_main_thread")

ENTRIES, RESOURCES = 3000, 300  # the outputs test's session: its "edited" digests apply here


def _lines(root: Path) -> tuple[Path, list[bytes]]:
    build_session(root, ENTRIES, RESOURCES)
    path = Vault(root).session_path(SESSION)
    return path, path.read_bytes().splitlines(keepends=True)


def _edited(lines: list[bytes], index: int) -> list[bytes]:
    """Line `index` changed in place (same length), its hash not recomputed: the outputs test's "edited"."""
    out = list(lines)
    assert b'"bench-agent"' in out[index]
    out[index] = out[index].replace(b'"bench-agent"', b'"bench-agEnt"', 1)
    return out


def _overwrite(path: Path, lines: list[bytes]) -> None:
    """Write in place (same inode): what an adversary with write access does between two reads."""
    data = b"".join(lines)
    with open(path, "r+b") as f:
        f.write(data)
        f.truncate(len(data))


class _Finished:
    """A forked child whose result was taken already (the stand-in `forked.start` returns below)."""

    def __init__(self, value: object) -> None:
        self.value = value

    def result(self) -> object:
        return self.value

    def close(self) -> None:
        pass


def test_a_file_changed_after_the_forked_verifier_read_it(tmp_path, monkeypatch):
    """The verifier's child checks the clean file and reports it intact; then the file is edited in place
    (same size, same line count) before the fold reads it. Replay must not fold the edit as trusted under
    the clean report: its outputs are those of a replay of the edited file."""
    root = tmp_path / "v"
    path, lines = _lines(root)
    real = forked.start
    started: list[int] = []

    def verifier_then_edit(work, store=None):
        started.append(1)
        child = real(work, store)
        if len(started) > 1 or child is None:  # the partner, the views' child: as they are
            return child
        report = child.result()
        assert report.intact and report.entries == ENTRIES  # the clean file, verified
        _overwrite(path, _edited(lines, 1499))
        return _Finished(report)

    monkeypatch.setattr(forked, "start", verifier_then_edit)
    vault = Vault.open_existing(root)
    rp = replay_session(vault, SESSION)
    assert (rp.report.intact, rp.report.kind, rp.report.broken_at_seq) == (False, "edited", 1500)
    assert rp.untrusted_from == 1500
    folder, _ = write_outputs(vault, rp)
    rp.close()
    assert _digests(folder) == _expected("edited")


def test_a_file_changed_for_the_partner_only(tmp_path, monkeypatch):
    """The fold's partner (split.py) reads an edited file (every subject and snippet, same sizes) while the
    verifier and the parent read the clean one: its share is not absorbed; the outputs are the clean file's."""
    root = tmp_path / "v"
    path, lines = _lines(root)
    clean = b"".join(lines)
    edited = clean.replace(b"review", b"reviEw")
    assert edited.count(b"reviEw") > 1000
    real_start = fold.split.start

    def partner_reads_edited(at, make_folder):
        path.write_bytes(edited)  # a new file by the same name while the partner opens it
        try:
            child = real_start(at, make_folder)
            if child is not None:
                child.value = child.result()  # the partner has read (and folded) the edited file
                child.result = lambda: child.value  # type: ignore[method-assign]
            return child
        finally:
            path.write_bytes(clean)

    monkeypatch.setattr(fold.split, "start", partner_reads_edited)
    vault = Vault.open_existing(root)
    rp = replay_session(vault, SESSION)
    assert rp.report.intact and rp.untrusted_from is None
    folder, _ = write_outputs(vault, rp)
    rp.close()
    assert _digests(folder) == _expected("intact")


def _recomputed(lines: list[bytes], index: int) -> list[bytes]:
    """Line `index` edited with its hash recomputed: the break is reported at that entry after it was folded
    as trusted, so the serial fold folds again (`_fold_again`)."""
    out = list(lines)
    entry = orjson.loads(out[index])
    fields = {k: v for k, v in entry.items() if k not in ("seq", "prev", "hash")} | {"agent": "someone-else"}
    out[index] = chain_entry(fields, entry["seq"], entry["prev"])[1]
    return out


def test_the_serial_fold_folds_again_from_the_verifier(tmp_path, monkeypatch):
    """No fork: an entry edited with its hash recomputed is untrusted from its own seq, the entries before it
    trusted, as before this fold took its trusted entries from a second verifier pass."""
    monkeypatch.setattr(forked, "ENABLED", False)
    root = tmp_path / "v"
    path, lines = _lines(root)
    path.write_bytes(b"".join(_recomputed(lines, 1499)))
    vault = Vault.open_existing(root)
    rp = replay_session(vault, SESSION)
    assert (rp.report.kind, rp.report.broken_at_seq, rp.untrusted_from) == ("edited", 1500, 1500)
    trusted = [e.trusted for e in rp.entries]
    assert len(trusted) == ENTRIES and trusted == [n < 1500 for n in range(1, ENTRIES + 1)]
    rp.close()


def test_a_file_changed_between_the_serial_folds_two_passes(tmp_path, monkeypatch):
    """The first pass finds the recomputed entry at 1500; before the fold again, line 100 is edited too. The
    entries before 1500 must not be folded as trusted from the file as it is now: replay says the file
    changed under it."""
    monkeypatch.setattr(forked, "ENABLED", False)
    root = tmp_path / "v"
    path, lines = _lines(root)
    first = _recomputed(lines, 1499)
    path.write_bytes(b"".join(first))
    real = fold.verify_session
    passes: list[int] = []

    def verify_then_edit(*args, **kwargs):
        report = real(*args, **kwargs)
        passes.append(report.broken_at_seq)
        if len(passes) == 1:
            _overwrite(path, _edited(first, 99))
        return report

    monkeypatch.setattr(fold, "verify_session", verify_then_edit)
    vault = Vault.open_existing(root)
    with pytest.raises(InputError, match="changed while replay read it"):
        replay_session(vault, SESSION)
    assert passes == [1500, 100]


def test_the_checkpoint_is_checked_over_the_entries_the_verifier_checked(tmp_path, monkeypatch):
    """`broker replay --seal-key` checks the checkpoint after the chain (check_session_checkpoint), building the
    Merkle tree from the file read once more. The vault's writer holds the sealed file; it rewrites an entry and
    recomputes every hash (a chain alone cannot show that: only the checkpoint can), and shows the sealed file to
    the checkpoint's read only. The tree must be that of the entries verified, so the
    rewrite is a finding and nothing is folded as trusted; it was checked against the sealed file instead."""
    from journal.checkpoint.note import Signer
    from journal.replay import check_session_checkpoint
    from journal.verify import verify_session
    from tests.support.checkpoint_harness import seal_all, write_session

    vault = Vault.create(tmp_path / "v")
    write_session(vault, "s1", 4)
    signer = Signer.generate("vault.example/test")
    seal_all(vault, signer)
    path = vault.session_path("s1")
    sealed = path.read_bytes()
    entries = [orjson.loads(line) for line in sealed.splitlines()]
    entries[1]["agent"] = "mallory"
    forged, prev = [], "0" * 64
    for e in entries:
        entry, line = chain_entry({k: v for k, v in e.items() if k not in ("seq", "prev", "hash")}, e["seq"], prev)
        prev = entry["hash"]
        forged.append(line)
    _overwrite(path, forged)
    assert verify_session(vault, "s1").intact  # the chain alone holds

    def sealed_file_back_then_check(*args, **kwargs):  # the verifier reads the forged file, the check the sealed one
        _overwrite(path, sealed.splitlines(keepends=True))
        try:
            return check_session_checkpoint(*args, **kwargs)
        finally:
            _overwrite(path, forged)

    monkeypatch.setattr("journal.replay.check_session_checkpoint", sealed_file_back_then_check)
    monkeypatch.setattr(fold, "SPLIT", False)
    rp = replay_session(vault, "s1", seal_key=signer.verifier())
    assert not rp.intact and rp.report.kind == "seal_mismatch", rp.report.as_dict()
