"""Blobs in S3 (`--blobs s3://BUCKET/PREFIX`) against a real S3 server on loopback (moto's, started here):
create-only writes, big blobs up and down in bounded memory, a writer killed mid-upload, verify finding a
forged object, and a broker that fails closed while the bucket is down and resumes by itself.

The big-blob size is BROKER_TEST_S3_MIB (default 64, for CI on 2 cores); the 1 GiB figure of the report
comes from `BROKER_TEST_S3_MIB=1024 .venv/bin/python -m pytest -q tests/e2e/test_s3_blobs.py -k big`."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import tracemalloc

import httpx
import pytest

from journal.blobstore import BlobError
from journal.record import Recorder
from journal.store.s3_blobs import CHECK_EVERY, PART, S3Blobs
from journal.vault import Vault
from journal.verify import verify_session
from tests.support import postgres_server as _pg
from tests.support.broker_harness import BIN, ROOT, BrokerProcess
from tests.support.journal_factories import fields
from tests.support.s3_server import s3_server
from tests.support.upstreams import Upstream

pytestmark = pytest.mark.e2e
__all__ = ["s3_server"]  # the fixture, imported for pytest
postgres_server, pg_url = _pg.postgres_server, _pg.pg_url  # fixtures
GMAIL = "https://gmail.googleapis.com/gmail/v1/users/me"
SLACK = "https://slack.com/api"
BIG_MIB = int(os.environ.get("BROKER_TEST_S3_MIB", "64"))


def _chunks(total: int, seed: bytes = b"s3") -> object:
    """Deterministic, incompressible-looking 1 MiB chunks, made one at a time (never the whole body)."""
    block = hashlib.sha256(seed).digest() * (1 << 15)
    for i in range(total >> 20):
        yield hashlib.sha256(seed + i.to_bytes(8, "big")).digest() + block[32:]


def _vault_blobs(root) -> list:
    return [p for p in (root / "blobs" / "sha256").rglob("*") if p.is_file()]


def test_a_blob_is_written_create_only_and_an_overwrite_is_refused(s3_server):
    bucket = s3_server.new_bucket()
    blobs = S3Blobs(f"s3://{bucket}/team-a")
    ref = blobs.put_bytes(b"the body")
    key = blobs.key_for(ref["sha256"])
    assert key == f"team-a/{ref['ref']}"
    client = s3_server.client()
    with pytest.raises(Exception) as refused:  # the attacker's create-only overwrite: the server says no
        client.put_object(Bucket=bucket, Key=key, Body=b"forged!!", IfNoneMatch="*")
    assert "PreconditionFailed" in str(refused.value)
    assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == b"the body"
    assert blobs.put_bytes(b"the body") == ref  # the same bytes again: a dedupe
    assert blobs.check(ref["sha256"], ref["size"]) is None


def test_an_object_forged_under_a_blob_name_is_refused_by_the_writer_and_found_by_verify(s3_server, tmp_path):
    bucket = s3_server.new_bucket()
    url = f"s3://{bucket}/p"
    rec = Recorder(tmp_path / "vault", blobs=url, spill_threshold=1024)
    body = b"x" * 5000
    rec.writer.append(fields(session="s1", response={"status": 200, "headers": [], "body": rec.blobs.put_bytes(body)}))
    rec.close()
    digest = hashlib.sha256(body).hexdigest()
    blobs = S3Blobs(url)
    assert blobs.has_blob(digest) and not _vault_blobs(tmp_path / "vault")
    vault = Vault.open_existing(tmp_path / "vault")
    assert verify_session(vault, "s1", blobs_url=url).intact
    assert not verify_session(vault, "s1").intact  # without --blobs the vault has no such blob: said, not skipped

    # someone with write access (no If-None-Match) puts other bytes under the right name
    s3_server.client().put_object(Bucket=bucket, Key=blobs.key_for(digest), Body=b"y" * 5000)
    report = verify_session(vault, "s1", blobs_url=url)
    assert not report.intact and report.kind == "blob_corrupt" and digest in report.detail
    out = subprocess.run([str(BIN / "broker"), "verify", "--vault", str(tmp_path / "vault"), "--blobs", url, "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and json.loads(out.stdout)["kind"] == "blob_corrupt"
    # a forged object of another size under the name of bytes being written: the writer does not take it as theirs
    s3_server.client().put_object(Bucket=bucket, Key=blobs.key_for(hashlib.sha256(b"z" * 10).hexdigest()), Body=b"z")
    with pytest.raises(BlobError, match="forged or broken"):
        blobs.put_bytes(b"z" * 10)
    s3_server.client().delete_object(Bucket=bucket, Key=blobs.key_for(digest))
    missing = verify_session(vault, "s1", blobs_url=url)
    assert not missing.intact and missing.kind == "blob_missing"


def test_readers_fetch_a_blob_the_vault_lacks_from_the_bucket_and_never_a_forged_one(s3_server, tmp_path,
                                                                                     monkeypatch):
    """With BROKER_BLOBS naming the bucket the broker spilled into, readers of the file vault (exports, the
    inspector, trajectory) fetch a blob the vault does not hold from it, checked against its name."""
    from click.testing import CliRunner

    from broker.cli import cli
    from journal.export.recorded_body import BlobUnavailable, read_blob

    bucket = s3_server.new_bucket()
    url = f"s3://{bucket}/p"
    rec = Recorder(tmp_path / "vault", blobs=url, spill_threshold=1024)
    body = b'{"message": "' + b"m" * 5000 + b'"}'
    ref = rec.blobs.put_bytes(body)
    rec.writer.append(fields(session="s1", response={"status": 200, "headers": [], "body": ref}))
    rec.close()
    vault = Vault.open_existing(tmp_path / "vault")
    assert not _vault_blobs(tmp_path / "vault")
    with pytest.raises(BlobUnavailable):  # no bucket named: the blob is missing, said so
        read_blob(vault, ref)
    monkeypatch.setenv("BROKER_BLOBS", url)
    assert read_blob(vault, ref) == body
    har = CliRunner().invoke(cli, ["export", "--vault", str(tmp_path / "vault"), "--format", "har", "--inline-blobs",
                                   "s1"])
    assert har.exit_code == 0 and ("m" * 5000) in har.output
    # someone with write access to the bucket (no If-None-Match) puts other bytes under the name
    s3_server.client().put_object(Bucket=bucket, Key=S3Blobs(url).key_for(ref["sha256"]), Body=b"y" * len(body))
    with pytest.raises(BlobUnavailable, match="missing"):  # the forged bytes are never handed over
        read_blob(vault, ref)
    s3_server.client().delete_object(Bucket=bucket, Key=S3Blobs(url).key_for(ref["sha256"]))
    with pytest.raises(BlobUnavailable, match="missing"):  # gone from the bucket too: one clear error
        read_blob(vault, ref)
    gone = CliRunner().invoke(cli, ["export", "--vault", str(tmp_path / "vault"), "--format", "har",
                                    "--inline-blobs", "s1"])
    assert gone.exit_code != 0 and "Traceback" not in gone.output


def test_a_big_blob_goes_up_and_down_in_bounded_memory(s3_server):
    blobs = S3Blobs(f"s3://{s3_server.new_bucket()}/big")
    total = BIG_MIB << 20
    want = hashlib.sha256()
    for c in _chunks(total):
        want.update(c)
    tracemalloc.start()
    try:
        ref = blobs.put_stream(_chunks(total))
        _, up_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        got, n = hashlib.sha256(), 0
        for c in blobs.read_blob(ref["sha256"]):
            got.update(c)
            n += len(c)
        _, down_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ref["sha256"] == want.hexdigest() == got.hexdigest() and ref["size"] == n == total
    # memory is a few parts, whatever the size (the size is BIG_MIB: 64 in CI, 1024 for the report)
    assert up_peak < 4 * PART + (8 << 20), up_peak
    assert down_peak < 4 * PART, down_peak
    keys = [o["Key"] for o in s3_server.client().list_objects_v2(Bucket=blobs.bucket).get("Contents", [])]
    assert keys == [blobs.key_for(ref["sha256"])]  # the staging object is gone
    assert blobs.check(ref["sha256"], total) is None


_WRITER = """
import sys, time, hashlib
from journal.record import Recorder
from tests.support.journal_factories import fields
rec = Recorder(sys.argv[1], blobs=sys.argv[2], spill_threshold=1024)

def body(i, mib, stall=False):
    for j in range(mib):
        if stall and j == 20:  # 20 MiB sent as parts of an upload not yet complete: stop here
            print("MID", flush=True)
            time.sleep(600)
        yield hashlib.sha256(b"%d-%d" % (i, j)).digest() * (1 << 15)

for i in range(4):
    ref = rec.blobs.put_stream(body(i, 12 if i < 3 else 40, stall=i == 3))
    rec.writer.append(fields(session="k", n=i, response={"status": 200, "headers": [], "body": ref}))
    print(i, flush=True)
"""


def test_a_writer_killed_mid_upload_leaves_no_entry_naming_a_missing_blob(s3_server, tmp_path):
    bucket = s3_server.new_bucket()
    url = f"s3://{bucket}/kill"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path / "vault"), url], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        seen = [proc.stdout.readline().strip() for _ in range(4)]
    finally:
        proc.send_signal(signal.SIGKILL)  # in the middle of the fourth blob's multipart upload
        proc.wait()
    assert seen == ["0", "1", "2", "MID"]
    client = s3_server.client()
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads")  # the upload the kill cut short
    vault = Vault.open_existing(tmp_path / "vault")
    report = verify_session(vault, "k", blobs_url=url)
    assert report.intact and report.entries == 3, report.detail  # every ref an entry holds is in the bucket
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert len([k for k in keys if "/blobs/sha256/" in k]) == 3  # the cut blob has no name: nothing refers to it


@pytest.fixture(scope="module")
def upstream():
    with Upstream() as up:
        yield up


def _client(b: BrokerProcess, session: str) -> httpx.Client:
    return httpx.Client(proxy=b.proxy_url(session, "agent-s3"), verify=ssl.create_default_context(cafile=b.ca),
                        timeout=60)


def test_broker_with_s3_blobs_fails_closed_while_the_bucket_is_down_and_resumes(upstream, s3_server, tmp_path):
    bucket = s3_server.new_bucket()
    url = f"s3://{bucket}/fleet"
    with BrokerProcess(tmp_path, upstream, "--blobs", url, "--spill-threshold", "1024") as b:
        with _client(b, "s-s3") as c:
            assert c.post(f"{SLACK}/chat.postMessage", data={"channel": "C1", "text": "z" * 4000}).status_code == 200
        s3_server.stop()
        upstream.clear_requests()
        # The bucket is asked (HEAD) before a call at most every CHECK_EVERY seconds while it answers: a call
        # within that time of the last answer goes on (this one could be recorded whole: its body needs no blob).
        # Past it, the bucket is asked and found down. (This test used to pass only because the first call
        # compiled the redaction rules, which took longer than that.)
        time.sleep(CHECK_EVERY + 0.05)
        try:
            with _client(b, "s-s3") as c:
                r = c.post(f"{SLACK}/chat.postMessage", data={"channel": "C0GENERAL", "text": "must not be sent"})
            assert r.status_code == 502 and "journal" in r.text, r.text
            assert not upstream.find(path_prefix="/api/chat.postMessage")  # never reached the platform
        finally:
            s3_server.start()  # same port, empty state: the bucket is made again
        s3_server.client().create_bucket(Bucket=bucket)
        deadline = time.monotonic() + 20
        with _client(b, "s-s3") as c:
            while True:
                r = c.post(f"{SLACK}/chat.postMessage", data={"channel": "C2", "text": "w" * 4000})
                if r.status_code == 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        assert r.status_code == 200, r.text
        assert b.alive()
    vault = Vault.open_existing(tmp_path / "vault")
    entries = [json.loads(line) for line in (tmp_path / "vault" / "journal" / "s-s3.jsonl").read_bytes().splitlines()]
    assert all(e["response"]["status"] == 200 for e in entries)  # the blocked call left no entry
    assert not _vault_blobs(tmp_path / "vault")  # every spilled body went to the bucket
    last = verify_session(vault, "s-s3", blobs_url=url)
    # the first entry's blob went with the server's state (moto keeps none across a restart): named, not hidden
    assert last.kind in (None, "blob_missing") and (last.intact or last.broken_at_seq == 1)


def test_checkpoints_and_the_vault_index_are_copied_to_the_bucket_create_only(s3_server, tmp_path, monkeypatch):
    from journal.checkpoint.note import Signer, open_note
    from tests.support.checkpoint_harness import seal_all, write_session

    bucket = s3_server.new_bucket()
    monkeypatch.setenv("BROKER_BLOBS", f"s3://{bucket}/fleet")
    vault = Vault.create(tmp_path / "vault")
    signer = Signer.generate("vault.example/s3")
    write_session(vault, "s1", 3)
    seal_all(vault, signer)
    write_session(vault, "s1", 2, start=4)
    seal_all(vault, signer)
    client = s3_server.client()
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix="fleet/seals/")["Contents"])
    history = [k for k in keys if k.startswith("fleet/seals/s1/") and k.endswith(".checkpoint")]
    assert len(history) == 2 and history[0].startswith("fleet/seals/s1/00000000000000000003-")
    latest = client.get_object(Bucket=bucket, Key="fleet/seals/s1/latest")["Body"].read()
    assert latest == (tmp_path / "vault" / "seals" / "s1.checkpoint").read_bytes()
    assert open_note(latest, [signer.verifier()]).text.split("\n")[1] == "5"
    index = client.get_object(Bucket=bucket, Key="fleet/seals/index/latest")["Body"].read()
    assert open_note(index, [signer.verifier()])  # the signed vault index, as the vault holds it
    assert sum(k.startswith("fleet/seals/index/") for k in keys) >= 3  # two rounds of history + latest


def test_postgresql_entries_with_s3_blobs_verify_and_pull(s3_server, pg_url, tmp_path):
    from journal.store.postgres_store import PostgresStore

    url = f"s3://{s3_server.new_bucket()}/pg"
    rec = Recorder(pg_url, blobs=url)
    ref = rec.blobs.put_stream(_chunks(3 << 20, b"pg"))  # 3 MiB: below a part, one create-only PUT
    rec.writer.append(fields(session="s-pg", response={"status": 200, "headers": [], "body": ref}))
    rec.close()
    assert not PostgresStore(pg_url).has_blob(ref["sha256"])  # the bytes are in the bucket, not in the database
    assert S3Blobs(url).has_blob(ref["sha256"])
    env = {k: v for k, v in os.environ.items() if k not in ("BROKER_STORE", "BROKER_BLOBS")}
    ok = subprocess.run([str(BIN / "broker"), "verify", "--store", pg_url, "--blobs", url, "--json"],
                        capture_output=True, text=True, timeout=120, env=env)
    assert ok.returncode == 0 and json.loads(ok.stdout)["intact"] is True, ok.stdout + ok.stderr
    pulled = subprocess.run([str(BIN / "broker"), "pull", "--from", pg_url, "--to", str(tmp_path / "read"),
                             "--blobs", url], capture_output=True, text=True, timeout=120, env=env)
    assert pulled.returncode == 0 and "1 blobs" in pulled.stdout, pulled.stdout + pulled.stderr
    assert len(_vault_blobs(tmp_path / "read")) == 1  # readers of the pulled vault find the body
    S3Blobs(url).client.delete_object(Bucket=S3Blobs(url).bucket, Key=S3Blobs(url).key_for(ref["sha256"]))
    gone = subprocess.run([str(BIN / "broker"), "verify", "--store", pg_url, "--blobs", url, "--json"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert gone.returncode == 1 and json.loads(gone.stdout)["kind"] == "blob_missing"
