"""`broker publish SESSION --to s3://...|DIR` from a recorded vault: the tiles read back from the bucket by the
independent reader of tests/journal/test_tiles.py give the root of the signed checkpoint, and a second
publication after more entries adds only the new tiles, consistent with the first."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from journal.vault import Vault
from tests.journal.test_tiles import _bundle_hashes, _checkpoint, _leaves, _mth, _subproof, _verify_consistency
from tests.support.broker_harness import BIN
from tests.support.checkpoint_harness import signer_key_file, write_session
from tests.support.s3_server import s3_server

pytestmark = pytest.mark.e2e
__all__ = ["s3_server"]


def _download(client, bucket: str, prefix: str, to: Path) -> None:
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            p = to / obj["Key"][len(prefix):]
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())


def _publish(vault: Path, to: str, key: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "broker"), "publish", "--vault", str(vault), "s1", "--to", to, "--key", str(key)],
                          capture_output=True, text=True, timeout=120)


def test_publish_to_s3_then_more_entries(s3_server, tmp_path):
    signer, key = signer_key_file(tmp_path, "pub")
    vault = Vault.create(tmp_path / "vault")
    write_session(vault, "s1", 300)
    bucket = s3_server.new_bucket()
    first = _publish(tmp_path / "vault", f"s3://{bucket}/log", key)
    assert first.returncode == 0, first.stdout + first.stderr
    _download(s3_server.client(), bucket, "log/", tmp_path / "a")
    _, m, old_root = _checkpoint(tmp_path / "a", signer.verifier())
    assert m == 300 and _mth(_leaves(tmp_path / "a", m)) == old_root
    lines = (tmp_path / "vault" / "journal" / "s1.jsonl").read_bytes()
    for h in _bundle_hashes(tmp_path / "a", m):  # public: entry hashes; the entries themselves are not there
        assert h.hex().encode() in lines
    assert b'"request"' not in b"".join(p.read_bytes() for p in (tmp_path / "a").rglob("*") if p.is_file())

    write_session(vault, "s1", 200, start=301)
    second = _publish(tmp_path / "vault", f"s3://{bucket}/log", key)
    assert second.returncode == 0 and "200 new" in second.stdout, second.stdout + second.stderr
    _download(s3_server.client(), bucket, "log/", tmp_path / "b")
    _, n, new_root = _checkpoint(tmp_path / "b", signer.verifier())
    leaves = _leaves(tmp_path / "b", n)
    assert n == 500 and _mth(leaves) == new_root
    assert _verify_consistency(m, n, old_root, new_root, _subproof(m, leaves, True))

    # the session rewritten under the published checkpoint: refused, the bucket's checkpoint unchanged
    path = tmp_path / "vault" / "journal" / "s1.jsonl"
    path.write_bytes(path.read_bytes().replace(b"message 5 ", b"message 6 ", 1))
    third = _publish(tmp_path / "vault", f"s3://{bucket}/log", key)
    assert third.returncode != 0


def test_publish_to_a_directory(tmp_path):
    signer, key = signer_key_file(tmp_path, "pub")
    write_session(Vault.create(tmp_path / "vault"), "s1", 40)
    out = _publish(tmp_path / "vault", str(tmp_path / "tiles"), key)
    assert out.returncode == 0, out.stdout + out.stderr
    _, size, root = _checkpoint(tmp_path / "tiles", signer.verifier())
    assert size == 40 and _mth(_leaves(tmp_path / "tiles", 40)) == root


def test_a_tile_planted_in_the_bucket_is_refused_and_a_huge_checkpoint_is_not_read_whole(s3_server, tmp_path):
    """Whoever can write the bucket plants a tile under a name publish creates (create-only keeps theirs), or
    an empty object, or replaces the checkpoint with a huge object: publish refuses, reading at most a bounded
    prefix of any object, never signing a checkpoint over tiles that are not its tree's."""
    from journal.checkpoint.note import Signer
    from journal.checkpoint.tiles import MAX_READ, PublishRefused, S3Target, publish

    bucket = s3_server.new_bucket()
    client = s3_server.client()
    signer = Signer.generate("vault.example/tiles")
    hashes = [bytes([i % 256]) * 32 for i in range(300)]
    target = S3Target(f"s3://{bucket}/log")  # the fixture put the bucket's endpoint in the environment
    client.put_object(Bucket=bucket, Key="log/tile/0/000", Body=b"")
    with pytest.raises(PublishRefused, match="tile/0/000"):
        publish(target, "o/s", hashes, signer)
    client.delete_object(Bucket=bucket, Key="log/tile/0/000")
    publish(target, "o/s", hashes, signer)
    client.put_object(Bucket=bucket, Key="log/checkpoint", Body=b"x" * (4 * MAX_READ))
    assert len(target.read("checkpoint")) == MAX_READ + 1
    with pytest.raises(PublishRefused, match="does not verify"):
        publish(target, "o/s", hashes, signer)
