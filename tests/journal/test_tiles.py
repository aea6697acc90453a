"""C2SP tlog-tiles written by journal/checkpoint/tiles.py, read back by an independent reader written here
(tile paths, RFC 6962 tree hash, inclusion and consistency proofs from RFC 6962 §2.1.1-2.1.2, checked with
the RFC 9162 §2.1.3.2 / §2.1.4.2 verification algorithms): nothing of journal/checkpoint/merkle.py is used."""

from __future__ import annotations

import base64
import hashlib
import random
from pathlib import Path

import pytest

from journal.checkpoint.note import Signer, open_note
from journal.checkpoint.tiles import DirectoryTarget, PublishRefused, publish

# -- the independent reader ---------------------------------------------------------------------------


def _sha(b: bytes) -> bytes:
    return hashlib.sha256(b).digest()


def _path(level, n: int, width: int) -> str:
    s = str(n).rjust(3 * max(1, -(-len(str(n)) // 3)), "0")
    parts = [s[i:i + 3] for i in range(0, len(s), 3)]
    p = f"tile/{level}/" + "/".join(["x" + g for g in parts[:-1]] + [parts[-1]])
    return p if width == 256 else f"{p}.p/{width}"


def _read_tile(root: Path, level, n: int, count: int) -> bytes:
    width = min(256, count - 256 * n)
    return (root / _path(level, n, width)).read_bytes()


def _checkpoint(root: Path, verifier) -> tuple[str, int, bytes]:
    origin, size, b64 = open_note((root / "checkpoint").read_bytes(), [verifier]).text.split("\n")[:3]
    return origin, int(size), base64.b64decode(b64)


def _leaves(root: Path, size: int) -> list[bytes]:
    out = []
    for n in range(-(-size // 256)):
        t = _read_tile(root, 0, n, size)
        out += [t[i:i + 32] for i in range(0, len(t), 32)]
    return out[:size]


def _bundle_hashes(root: Path, size: int) -> list[bytes]:
    out = []
    for n in range(-(-size // 256)):
        b, i = _read_tile(root, "entries", n, size), 0
        while i < len(b):
            k = int.from_bytes(b[i:i + 2], "big")
            out.append(b[i + 2:i + 2 + k])
            i += 2 + k
    return out


def _mth(d: list[bytes]) -> bytes:  # RFC 6962 2.1 over leaf hashes
    if not d:
        return _sha(b"")
    if len(d) == 1:
        return d[0]
    k = 1 << ((len(d) - 1).bit_length() - 1)
    return _sha(b"\x01" + _mth(d[:k]) + _mth(d[k:]))


def _path_proof(m: int, d: list[bytes]) -> list[bytes]:  # RFC 6962 2.1.1 PATH(m, D[n])
    if len(d) <= 1:
        return []
    k = 1 << ((len(d) - 1).bit_length() - 1)
    return _path_proof(m, d[:k]) + [_mth(d[k:])] if m < k else _path_proof(m - k, d[k:]) + [_mth(d[:k])]


def _subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:  # RFC 6962 2.1.2
    n = len(d)
    if m == n:
        return [] if b else [_mth(d)]
    k = 1 << ((n - 1).bit_length() - 1)
    if m <= k:
        return _subproof(m, d[:k], b) + [_mth(d[k:])]
    return _subproof(m - k, d[k:], False) + [_mth(d[:k])]


def _verify_inclusion(index: int, size: int, leaf: bytes, proof: list[bytes], root: bytes) -> bool:  # RFC 9162
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = _sha(b"\x01" + p + r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = _sha(b"\x01" + r + p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == root


def _verify_consistency(m: int, n: int, old: bytes, new: bytes, proof: list[bytes]) -> bool:  # RFC 9162
    if m == n:
        return not proof and old == new
    if m & (m - 1) == 0:
        proof = [old, *proof]
    fn, sn = m - 1, n - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = proof[0]
    for c in proof[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = _sha(b"\x01" + c + fr), _sha(b"\x01" + c + sr)
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = _sha(b"\x01" + sr + c)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and fr == old and sr == new


# -- the tests ----------------------------------------------------------------------------------------

def _hashes(n: int, seed: int = 1) -> list[bytes]:
    return [_sha(b"%d-%d" % (seed, i)) for i in range(n)]


@pytest.fixture
def signer():
    return Signer.generate("vault.example/tiles")


def test_tiles_give_the_checkpoint_root_and_rfc6962_proofs(tmp_path, signer):
    entries = _hashes(256 * 256 + 300)  # two levels of full tiles, partial tiles at levels 0, 1 and 2
    old, new, written = publish(DirectoryTarget(tmp_path), "vault.example/tiles/s1", entries, signer)
    assert (old, new) == (0, len(entries)) and written > 0
    origin, size, root = _checkpoint(tmp_path, signer.verifier())
    assert (origin, size) == ("vault.example/tiles/s1", len(entries))
    leaves = _leaves(tmp_path, size)
    assert leaves == [_sha(b"\x00" + e) for e in entries]  # leaf = RFC 6962 hash of the entry's hash
    assert _bundle_hashes(tmp_path, size) == entries  # the public entries are the entry hashes, nothing more
    assert _mth(leaves) == root
    level1 = _read_tile(tmp_path, 1, 0, size >> 8)
    assert level1[32 * 5:32 * 6] == _mth(leaves[256 * 5:256 * 6])  # level 1 holds 256-leaf subtree hashes
    assert _read_tile(tmp_path, 2, 0, size >> 16) == _mth(leaves[:65536])
    assert (tmp_path / "tile/0/256").is_file() and (tmp_path / "tile/0/257.p/44").is_file()
    assert (tmp_path / "tile/1/001.p/1").is_file() and (tmp_path / "tile/2/000.p/1").is_file()
    rng = random.Random(7)
    for i in [0, 255, 256, 65535, size - 1, *rng.sample(range(size), 5)]:
        assert _verify_inclusion(i, size, leaves[i], _path_proof(i, leaves), root)
    assert not _verify_inclusion(3, size, leaves[4], _path_proof(3, leaves), root)


def test_tile_paths_follow_the_spec():
    from journal.checkpoint.tiles import tile_path

    assert _path(0, 1234067, 256) == "tile/0/x001/x234/067" == tile_path(0, 1234067)
    assert tile_path(1, 5, 17) == "tile/1/005.p/17" and tile_path("entries", 1000) == "tile/entries/x001/000"


def test_publication_is_incremental_and_consistent(tmp_path, signer):
    target = DirectoryTarget(tmp_path)
    entries = _hashes(1000)
    publish(target, "o/s", entries[:300], signer)
    _, m, old_root = _checkpoint(tmp_path, signer.verifier())
    full_tile = (tmp_path / "tile/0/000").read_bytes()
    first_partial = (tmp_path / "tile/0/001.p/44").read_bytes()
    assert publish(target, "o/s", entries, signer)[:2] == (300, 1000)
    _, n, new_root = _checkpoint(tmp_path, signer.verifier())
    assert (tmp_path / "tile/0/000").read_bytes() == full_tile  # never rewritten
    assert (tmp_path / "tile/0/001.p/44").read_bytes() == first_partial  # the old partial stays for old readers
    leaves = _leaves(tmp_path, n)
    proof = _subproof(m, leaves, True)
    assert _verify_consistency(m, n, old_root, new_root, proof)
    assert not _verify_consistency(m, n, _sha(b"forged"), new_root, proof)
    assert publish(target, "o/s", entries, signer)[2] == 0  # nothing new: nothing written


def test_a_rewritten_session_or_another_key_is_refused(tmp_path, signer):
    target = DirectoryTarget(tmp_path)
    publish(target, "o/s", _hashes(500), signer)
    before = (tmp_path / "checkpoint").read_bytes()
    forged = _hashes(600)
    forged[10] = _sha(b"rewritten")
    with pytest.raises(PublishRefused, match="not a prefix"):
        publish(target, "o/s", forged, signer)
    with pytest.raises(PublishRefused, match="not a prefix"):
        publish(target, "o/s", _hashes(400), signer)  # a shorter session
    with pytest.raises(PublishRefused, match="does not verify"):
        publish(target, "o/s", _hashes(600), Signer.generate("vault.example/other"))
    assert (tmp_path / "checkpoint").read_bytes() == before


def test_a_tile_planted_under_a_name_publish_writes_is_refused_not_kept(tmp_path, signer):
    """Whoever can write the bucket (or the folder) puts a tile of their own under a name the next
    publication creates, or deletes the checkpoint over forged tiles: create-only keeps theirs, so publish must
    compare what is already there with what it would write, and refuse (naming it) instead of signing a
    checkpoint over tiles that do not give its root."""
    target = DirectoryTarget(tmp_path)
    entries = _hashes(600)
    planted = tmp_path / "tile/0/001"
    planted.parent.mkdir(parents=True)
    planted.write_bytes(_sha(b"forged") * 256)
    with pytest.raises(PublishRefused, match="tile/0/001"):
        publish(target, "o/s", entries, signer)
    assert not (tmp_path / "checkpoint").exists()
    planted.unlink()
    publish(target, "o/s", entries, signer)  # the same objects again: kept, no refusal
    (tmp_path / "checkpoint").unlink()
    assert publish(target, "o/s", entries, signer)[:2] == (0, 600)
    (tmp_path / "checkpoint").unlink()
    bundle = tmp_path / "tile/entries/000"
    bundle.write_bytes(b"\x00\x20" + _sha(b"forged") + bundle.read_bytes()[34:])
    with pytest.raises(PublishRefused, match="tile/entries/000"):
        publish(target, "o/s", entries, signer)
