"""The tamper matrix (issue 10, item 7): each tampering of a vault, with no seal, with checkpoints, and
with checkpoints cosigned by a witness, reported at the seq and kind it concerns.

What a configuration cannot see is asserted too (None = reported intact): without a seal, a cut at a
line boundary, forged entries appended, a rewrite with every hash recomputed; without a witness, an
older checkpoint put back together with the older index.
"""

from __future__ import annotations

import base64
import shutil

import orjson
import pytest

from journal.blobstore import BlobStore
from journal.chain import GENESIS, chain_entry
from journal.checkpoint.checkpoint import checkpoint_path, leaves_path
from journal.checkpoint.merkle import leaf_hash
from journal.checkpoint.note import Signer
from journal.checkpoint.vault_index import index_path
from journal.checkpoint.witness import WitnessClient
from journal.vault import Vault
from journal.verify import verify_session
from journal.writer import JournalWriter
from tests.support.checkpoint_harness import audit, report_of, seal_all, witness_server, write_session
from tests.support.journal_factories import fields

MODES = ("none", "seal", "witness")
N = 8
BLOB_SEQ = 4


@pytest.fixture(scope="module")
def keys():
    return Signer.generate("vault.example/test"), Signer.generate("witness.example/w1")


@pytest.fixture(scope="module")
def witness_url(keys, tmp_path_factory):
    log, wkey = keys
    with witness_server(wkey, tmp_path_factory.mktemp("witness"), [log.verifier()]) as url:
        yield url


class World:
    def __init__(self, vault: Vault, mode: str, log: Signer, wkey: Signer, url: str, tmp) -> None:
        self.vault, self.mode, self.log, self.wkey, self.url, self.tmp = vault, mode, log, wkey, url, tmp

    @property
    def clients(self) -> list[WitnessClient]:
        return [WitnessClient(self.url, self.wkey.cosigner_verifier())] if self.mode == "witness" else []

    def seal(self) -> None:
        if self.mode != "none":
            outcomes = seal_all(self.vault, self.log, self.clients)
            assert all(not o.refused and not o.witness_problems for o in outcomes), outcomes
            if self.mode == "witness":
                assert all(o.cosigned_by == ["witness.example/w1"] for o in outcomes)

    def check(self, session: str = "s1", require_sealed: bool = False):
        """(kind, seq) of the session's first break, None when intact, "absent" when not reported."""
        if self.mode == "none":
            if not self.vault.session_path(session).exists():
                return "absent"
            r = verify_session(self.vault, session)
        else:
            kw = {"require_sealed": require_sealed}
            if self.mode == "witness":
                kw.update(witness_keys=[self.wkey.cosigner_verifier()], witnesses=self.clients)
            result = audit(self.vault, self.log.verifier(), **kw)
            assert not result.vault_problems, result.vault_problems
            r = report_of(result, session)
        self.last = r
        return None if r.intact else (r.kind, r.broken_at_seq)

    @property
    def path(self):
        return self.vault.session_path("s1")

    def lines(self) -> list[bytes]:
        return self.path.read_bytes().splitlines(keepends=True)

    def write_lines(self, lines: list[bytes]) -> None:
        self.path.write_bytes(b"".join(lines))


def _build(tmp_path, mode, keys, url, n=N) -> World:
    log, wkey = keys
    vault = Vault.create(tmp_path / "vault")
    ref = BlobStore(vault.root).put_bytes(b"attachment bytes " * 100)
    with JournalWriter(vault, durable=False) as w:
        for i in range(1, n + 1):
            f = fields(n=i)
            if i == BLOB_SEQ:
                f["response"]["body"] = ref
            w.append(f)
    write_session(vault, "s2", 3)
    world = World(vault, mode, log, wkey, url, tmp_path)
    world.seal()
    assert world.check() is None
    return world


def rechain(entries: list[dict]) -> list[bytes]:
    out, prev = [], GENESIS
    for e in entries:
        entry, line = chain_entry({k: v for k, v in e.items() if k not in ("seq", "prev", "hash")}, e["seq"], prev)
        prev = entry["hash"]
        out.append(line)
    return out


def _edited(line: bytes) -> bytes:
    return line.replace(b"/messages/m3", b"/messages/m9")


# -- the tamperings: each changes the world; the table says what each mode reports ---------------


def t_edit(w: World) -> None:
    lines = w.lines()
    lines[2] = _edited(lines[2])
    w.write_lines(lines)


def t_edit_rehashed(w: World) -> None:
    lines = w.lines()
    e = orjson.loads(_edited(lines[2]))
    lines[2] = chain_entry({k: v for k, v in e.items() if k not in ("seq", "prev", "hash")}, 3, e["prev"])[1]
    w.write_lines(lines)


def t_removal(w: World) -> None:
    lines = w.lines()
    del lines[2]
    w.write_lines(lines)


def t_insertion(w: World) -> None:
    lines = w.lines()
    prev = orjson.loads(lines[1])["hash"]
    forged = chain_entry(fields(n=99), 3, prev)[1]
    w.write_lines(lines[:2] + [forged] + lines[2:])


def t_swap(w: World) -> None:
    lines = w.lines()
    lines[2], lines[3] = lines[3], lines[2]
    w.write_lines(lines)


def t_duplication(w: World) -> None:
    lines = w.lines()
    w.write_lines(lines[:3] + [lines[2]] + lines[3:])


def t_cut_boundary(w: World) -> None:
    w.write_lines(w.lines()[:-1])


def t_cut_midline(w: World) -> None:
    data = w.path.read_bytes()
    w.path.write_bytes(data[: len(data) - len(w.lines()[-1]) // 2])


def t_cut_last_3(w: World) -> None:
    w.write_lines(w.lines()[:-3])


def t_forged_append(w: World) -> None:
    entries = [orjson.loads(x) for x in w.lines()]
    prev = entries[-1]["hash"]
    extra = []
    for seq in (N + 1, N + 2):
        entry, line = chain_entry(fields(n=seq), seq, prev)
        prev = entry["hash"]
        extra.append(line)
    w.write_lines(w.lines() + extra)


def t_rewrite(w: World) -> None:
    entries = [orjson.loads(x) for x in w.lines()]
    entries[1]["agent"] = "someone-else"
    w.write_lines(rechain(entries))


def t_rewrite_and_leaves_deleted(w: World) -> None:
    """Without seals/<stem>.leaves the root still shows the rewrite, but not where it starts."""
    t_rewrite(w)
    leaves_path(w.vault, "s1").unlink(missing_ok=True)


def t_rewrite_and_leaves_forged(w: World) -> None:
    """A .leaves file rewritten to match the forged file (to point elsewhere) does not hash to the
    signed root: it is ignored."""
    t_rewrite(w)
    if w.mode != "none":
        entries = [orjson.loads(x) for x in w.lines()]
        forged = b"".join(leaf_hash(bytes.fromhex(e["hash"])) for e in entries)
        leaves_path(w.vault, "s1").write_bytes(forged)


def t_delete_session(w: World) -> None:
    w.path.unlink()


def t_delete_checkpoint(w: World) -> None:
    checkpoint_path(w.vault, "s1").unlink(missing_ok=True)


def _rolled_back(w: World, restore_index: bool) -> None:
    """Sealed at 5 (the build), then grown to 8 and sealed; cut back to 5 and the checkpoint (and the
    index) of size 5 put back."""
    saved = w.tmp / "saved"
    saved.mkdir()
    for p in (checkpoint_path(w.vault, "s1"), index_path(w.vault)):
        if p.exists():
            shutil.copy2(p, saved / p.name)
    lines = w.lines()
    write_session(w.vault, "s1", N - 5, start=6)
    w.seal()
    w.write_lines(lines)
    for p in saved.iterdir():
        if restore_index or p.name.endswith(".checkpoint"):
            shutil.copy2(p, w.vault.seals_dir / p.name)


def t_rollback_checkpoint(w: World) -> None:
    _rolled_back(w, restore_index=False)


def t_rollback_checkpoint_and_index(w: World) -> None:
    _rolled_back(w, restore_index=True)


def t_blob_corrupt(w: World) -> None:
    entry = orjson.loads(w.lines()[BLOB_SEQ - 1])
    path = w.vault.root / entry["response"]["body"]["ref"]
    path.chmod(0o644)
    path.write_bytes(b"other bytes")


def t_forged_signature(w: World) -> None:
    path = checkpoint_path(w.vault, "s1")
    if not path.exists():
        return
    text, _, sigs = path.read_bytes().partition(b"\n\n")
    first, _, rest = sigs.partition(b"\n")
    name, b64 = first.rsplit(b" ", 1)
    raw = bytearray(base64.b64decode(b64))
    raw[20] ^= 0x01
    path.write_bytes(text + b"\n\n" + name + b" " + base64.b64encode(bytes(raw)) + b"\n" + rest)


def t_copied_checkpoint(w: World) -> None:
    if w.mode == "none":
        return
    other = _build(w.tmp / "other", w.mode, (w.log, w.wkey), w.url)
    shutil.copy2(checkpoint_path(other.vault, "s1"), checkpoint_path(w.vault, "s1"))


TABLE = {
    # tampering: {mode: expected}
    "edit": dict.fromkeys(MODES, ("edited", 3)),
    "edit_rehashed": dict.fromkeys(MODES, "chain@3-4"),
    "removal": dict.fromkeys(MODES, ("removed", 3)),
    "insertion": dict.fromkeys(MODES, "inserted@3-4"),
    "swap": dict.fromkeys(MODES, ("reordered", 3)),
    "duplication": dict.fromkeys(MODES, ("inserted", 4)),
    "cut_boundary": {"none": None, "seal": ("seal_mismatch", N), "witness": ("seal_mismatch", N)},
    "cut_midline": dict.fromkeys(MODES, ("torn_tail", N)),
    "cut_last_3": {"none": None, "seal": ("seal_mismatch", N - 2), "witness": ("seal_mismatch", N - 2)},
    "forged_append": {"none": None, "seal": None, "witness": None},  # a note; a break under --require-sealed
    "rewrite": {"none": None, "seal": ("seal_mismatch", 2), "witness": ("seal_mismatch", 2)},
    "rewrite_and_leaves_deleted": {"none": None, "seal": ("seal_mismatch", 1), "witness": ("seal_mismatch", 1)},
    "rewrite_and_leaves_forged": {"none": None, "seal": ("seal_mismatch", 1), "witness": ("seal_mismatch", 1)},
    "delete_session": {"none": "absent", "seal": ("session_missing", 1), "witness": ("session_missing", 1)},
    "delete_checkpoint": {"none": None, "seal": ("seal_missing", 1), "witness": ("seal_missing", 1)},
    "rollback_checkpoint": {"none": None, "seal": ("seal_rollback", 6), "witness": ("seal_rollback", 6)},
    "rollback_checkpoint_and_index": {"none": None, "seal": None, "witness": ("seal_rollback", 6)},
    "blob_corrupt": dict.fromkeys(MODES, ("blob_corrupt", BLOB_SEQ)),
    "forged_signature": {"none": None, "seal": ("seal_mismatch", 1), "witness": ("seal_mismatch", 1)},
    "copied_checkpoint": {"none": None, "seal": ("seal_mismatch", 1), "witness": ("seal_mismatch", 1)},
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tamper", list(TABLE))
def test_tamper_matrix(tmp_path, keys, witness_url, tamper, mode):
    w = _build(tmp_path, mode, keys, witness_url, n=5 if tamper.startswith("rollback") else N)
    globals()[f"t_{tamper}"](w)
    got = w.check()
    want = TABLE[tamper][mode]
    if want == "chain@3-4":  # the chain verifier decides edited-vs-inserted for a re-hashed edit
        assert got is not None and got[0] in ("edited", "inserted") and got[1] in (3, 4), got
    elif want == "inserted@3-4":
        assert got is not None and got[0] == "inserted" and got[1] in (3, 4), got
    else:
        assert got == want, (got, getattr(w, "last", None))
    if tamper == "forged_append" and mode != "none":
        assert any("unsealed_tail: 2 entries" in n for n in w.last.notes), w.last.notes
        assert w.check(require_sealed=True) == ("unsealed_tail", N + 1)
    assert w.check("s2") is None  # the other session is untouched


def test_unsealed_session_is_a_note_or_a_break(tmp_path, keys, witness_url):
    w = _build(tmp_path, "seal", keys, witness_url)
    write_session(w.vault, "s3", 2)
    assert w.check("s3") is None and any("unsealed_tail" in n for n in w.last.notes)
    assert w.check("s3", require_sealed=True) == ("unsealed_tail", 1)


def test_deleted_index_is_a_vault_problem(tmp_path, keys, witness_url):
    w = _build(tmp_path, "seal", keys, witness_url)
    index_path(w.vault).unlink()
    result = audit(w.vault, w.log.verifier())
    assert [k for k, _ in result.vault_problems] == ["seal_missing"] and not result.intact


def test_checkpoint_without_the_required_cosignature(tmp_path, keys, witness_url):
    w = _build(tmp_path, "seal", keys, witness_url)  # sealed, never shown to the witness
    result = audit(w.vault, w.log.verifier(), witness_keys=[w.wkey.cosigner_verifier()])
    assert (report_of(result, "s1").kind, report_of(result, "s1").broken_at_seq) == ("seal_missing", 1)


def test_a_witness_that_is_down_never_blocks_sealing(tmp_path, keys):
    log, wkey = keys
    vault = Vault.create(tmp_path / "vault")
    write_session(vault, "s1", 3)
    dead = WitnessClient("http://127.0.0.1:9", wkey.cosigner_verifier(), timeout=0.5)  # discard port: refused
    (o,) = seal_all(vault, log, [dead])
    assert o.refused is None and o.path.exists() and o.witness_problems
    result = audit(vault, log.verifier(), witnesses=[dead])
    assert report_of(result, "s1").intact
    assert any("witness not checked" in n for n in report_of(result, "s1").notes)


def test_sealer_refuses_to_sign_over_a_changed_history(tmp_path, keys, witness_url):
    w = _build(tmp_path, "witness", keys, witness_url)
    t_cut_last_3(w)
    (o, *_) = seal_all(w.vault, w.log, w.clients)
    assert o.session == "s1" and o.refused and "covers 8 entries, the file holds 5" in o.refused
    # the witness catches it even when every file in seals/ is gone
    for p in w.vault.seals_dir.iterdir():
        p.unlink()
    (o, *_) = seal_all(w.vault, w.log, w.clients)
    assert o.refused and "witness" in o.refused


class _NoMonitoring(WitnessClient):
    """A witness client for a tlog-witness without the monitoring endpoint: sizes come from 409s."""

    def latest(self, origin: str) -> bytes | None:
        return None


def test_rollback_caught_through_the_409_of_a_stale_submission(tmp_path, keys, witness_url):
    w = _build(tmp_path, "witness", keys, witness_url, n=5)
    t_rollback_checkpoint_and_index(w)
    probe = _NoMonitoring(w.url, w.wkey.cosigner_verifier())
    r = report_of(audit(w.vault, w.log.verifier(), witnesses=[probe]), "s1")
    assert (r.kind, r.broken_at_seq) == ("seal_rollback", 6) and "has cosigned 8 entries" in r.detail


def test_a_crash_before_the_rename_leaves_the_old_checkpoint(tmp_path, keys, witness_url, monkeypatch):
    """write_atomically: temp file, fsync, rename, directory fsync. A crash before the rename leaves
    the previous checkpoint and index whole (and no temp file a reader would take for them)."""
    import os as _os

    w = _build(tmp_path, "seal", keys, witness_url, n=5)
    before = {p.name: p.read_bytes() for p in w.vault.seals_dir.iterdir() if not p.name.startswith(".")}
    write_session(w.vault, "s1", 2, start=6)

    def crash(*args, **kwargs):
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr(_os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        seal_all(w.vault, w.log)
    monkeypatch.undo()
    after = {p.name: p.read_bytes() for p in w.vault.seals_dir.iterdir() if not p.name.startswith(".")}
    assert {k: v for k, v in after.items() if not k.endswith(".leaves")} == {
        k: v for k, v in before.items() if not k.endswith(".leaves")}
    assert not [p for p in w.vault.seals_dir.iterdir() if p.name.startswith(".") and p.name != ".lock"]
    r = report_of(audit(w.vault, w.log.verifier()), "s1")
    assert r.intact and any("unsealed_tail: 2 entries" in n for n in r.notes)
