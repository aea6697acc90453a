"""Erasure only by someone entitled to it: a tombstone counts only when signed by a key the verifier is given.

Anyone who can write the vault, or insert into the database as the broker's role, can write a tombstone
for a blob nobody erased. Unsigned, signed by another key, or signed over other fields, it leaves the blob
reported missing (or present, when its bytes are there), never erased, in both stores.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from journal.checkpoint.note import Signer
from journal.erasure import write_tombstone
from journal.erasure_signature import erasure_signer, sign_tombstone
from journal.store.file_store import FileStore
from journal.store.interface import Tombstone
from journal.store.postgres_store import PostgresStore
from journal.store.transfer import copy_store
from journal.vault import Vault
from journal.verify import verify_session
from journal.writer import JournalWriter
from tests.support import postgres_server as _pg
from tests.support.journal_factories import fields

postgres_server, pg_url = _pg.postgres_server, _pg.pg_url  # fixtures
ROOT = Path(__file__).resolve().parents[2]
DPO = Signer.generate("dpo.example")
OTHER = Signer.generate("dpo.example")  # same name, another key


def _session_with_blob(vault: Vault, data: bytes = b"personal data " * 100) -> str:
    ref = FileStore(vault.root).put_blob([data])
    with JournalWriter(vault, durable=False) as w:
        w.append(fields(n=1))
        w.append(fields(n=2, response={"status": 200, "headers": [], "body": ref}))
    return ref["sha256"]


def _forge(vault: Vault, digest: str, note: str | None = None, **over) -> None:
    """What someone with write access does: a tombstone, then the bytes deleted."""
    t = {"sha256": digest, "size": 1400, "erased_at": "2026-11-30T10:00:00.000Z", "erased_by": "dpo@example.com",
         "reason": "GDPR request #42", **over}
    if note is not None:
        t["note"] = note
    write_tombstone(vault.root, t)
    (vault.root / "blobs" / "sha256" / digest[:2] / digest).unlink()


def _tombstone(digest: str, **over) -> dict:
    return {"sha256": digest, "size": 1400, "erased_at": "2026-11-30T10:00:00.000Z", "erased_by": "dpo@example.com",
            "reason": "GDPR request #42", **over}


def _not_erased(report) -> None:
    assert (report.intact, report.broken_at_seq, report.kind, report.erased) == (False, 2, "blob_missing", [])
    assert "not honoured" in report.detail
    assert not any("erased on" in n for n in report.notes)


def test_an_unsigned_tombstone_is_not_erasure(tmp_path):
    vault = Vault.create(tmp_path / "v")
    digest = _session_with_blob(vault)
    _forge(vault, digest)
    _not_erased(verify_session(vault, "s1"))
    _not_erased(verify_session(vault, "s1", erasure_keys=[DPO.verifier()]))


def test_a_tombstone_signed_by_another_key_is_not_erasure(tmp_path):
    vault = Vault.create(tmp_path / "v")
    digest = _session_with_blob(vault)
    _forge(vault, digest, note=sign_tombstone(_tombstone(digest), OTHER))
    _not_erased(verify_session(vault, "s1", erasure_keys=[DPO.verifier()]))


def test_a_signed_tombstone_with_changed_fields_is_not_erasure(tmp_path):
    vault = Vault.create(tmp_path / "v")
    digest = _session_with_blob(vault)
    note = sign_tombstone(_tombstone(digest, reason="retention 30d"), DPO)
    _forge(vault, digest, note=note)  # the reason says GDPR request #42, the signature covers another reason
    _not_erased(verify_session(vault, "s1", erasure_keys=[DPO.verifier()]))
    other = _session_with_blob(Vault.create(tmp_path / "w"), b"other bytes")
    assert erasure_signer({**_tombstone(other), "note": sign_tombstone(_tombstone(digest), DPO)},
                          [DPO.verifier()]) is None  # a note lifted from another blob's tombstone


def test_a_tombstone_signed_by_a_given_key_is_erasure(tmp_path):
    vault = Vault.create(tmp_path / "v")
    digest = _session_with_blob(vault)
    FileStore(vault.root).erase_blob(digest, reason="GDPR request #42", by="dpo@example.com", signer=DPO)
    r = verify_session(vault, "s1", erasure_keys=[OTHER.verifier(), DPO.verifier()])
    assert r.intact and [t["sha256"] for t in r.erased] == [digest]
    assert any("erased on" in n and "signed by erasure key dpo.example" in n for n in r.notes)
    _not_erased(verify_session(vault, "s1"))  # the same vault, no key given


def test_the_writer_role_cannot_erase_in_the_database(pg_url, tmp_path):
    """The database's writer role inserts a tombstone for a blob nobody erased: pull keeps the bytes, verify
    --store says intact with the blob present, never erased; with the key given, the same."""
    pg = PostgresStore(pg_url)
    pg.migrate()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        role = "w_" + conn.info.dbname
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
    pg.grant_writer(role)
    body = "personal " * 800_000  # over the line limit: spilled into a blob in the database
    with pg.writer() as w:
        e = w.append(fields(n=1, response={"status": 200, "headers": [], "body": body}))
    digest = e["response"]["body"]["sha256"]
    forged = Tombstone(digest, len(body), "2026-11-30T10:00:00.000Z", "dpo@example.com", "GDPR request #42",
                       sign_tombstone(_tombstone(digest), OTHER))
    with psycopg.connect(pg_url.replace("broker_admin@", f"{role}@"), autocommit=True) as conn:  # INSERT only
        conn.execute("INSERT INTO journal_tombstones (sha256, size, erased_at, erased_by, reason, note) "
                     "VALUES (%s, %s, %s, %s, %s, %s)", (forged.sha256, forged.size, forged.erased_at,
                                                         forged.erased_by, forged.reason, forged.note))
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM journal_blob_chunks").fetchone()[0] > 0  # bytes still there
    target = FileStore(tmp_path / "pulled", create=True)
    report = copy_store(pg, target)
    assert (report.blobs, report.tombstones, report.tombstones_not_applied) == (1, 0, 1)
    r = verify_session(target.vault, "s1", erasure_keys=[DPO.verifier()])
    assert r.intact and r.erased == [] and not any("erased" in n for n in r.notes)
    env = dict(os.environ, NO_COLOR="1")
    out = subprocess.run([sys.executable, "-m", "broker.cli", "verify", "--store", pg_url], capture_output=True,
                         text=True, cwd=ROOT, env=env, timeout=120)
    assert out.returncode == 0 and "s1: intact (1 entries)" in out.stdout and "erased" not in out.stdout, out


@pytest.mark.parametrize("note", [None, "not a note"])
def test_erasure_signer_refuses_what_is_not_a_signature(note):
    t = _tombstone("ab" * 32)
    if note is not None:
        t["note"] = note
    assert erasure_signer(t, [DPO.verifier()]) is None
    assert erasure_signer({**t, "note": sign_tombstone(_tombstone("ab" * 32), DPO)}, []) is None


def test_a_signed_tombstone_of_another_blob_copied_under_this_blobs_name_is_not_erasure(tmp_path):
    """A blob erased with the key leaves a signed tombstone `blobs/erased/<B>.json`. Whoever can write the vault
    copies that file, whole and unchanged, to `<A>.json` and deletes blob A: the note verifies (it signs B's
    fields, and B's fields are what the file holds), so the tombstone must also be *of A* to count."""
    vault = Vault.create(tmp_path / "v")
    digest = _session_with_blob(vault)
    other = FileStore(vault.root).put_blob([b"bytes the DPO really erased"])["sha256"]
    FileStore(vault.root).erase_blob(other, reason="GDPR request #42", by="dpo@example.com", signer=DPO)
    erased = vault.root / "blobs" / "erased"
    (erased / f"{digest}.json").write_bytes((erased / f"{other}.json").read_bytes())
    (vault.root / "blobs" / "sha256" / digest[:2] / digest).unlink()
    r = verify_session(vault, "s1", erasure_keys=[DPO.verifier()])
    assert (r.intact, r.broken_at_seq, r.kind, r.erased) == (False, 2, "blob_missing", [])


def test_pull_of_a_vault_with_a_malformed_tombstone_is_an_error_not_a_traceback(tmp_path):
    """A tombstone file that is JSON but lacks the fields (or names another blob) in the source of a pull: a
    clear one-line error (a BrokerError: exit 2, as for a blob that is not read), never a KeyError traceback."""
    vault = Vault.create(tmp_path / "v")
    _session_with_blob(vault)
    (vault.root / "blobs" / "erased").mkdir()
    (vault.root / "blobs" / "erased" / f"{'ab' * 32}.json").write_bytes(b'{"sha256": "' + b"cd" * 32 + b'"}')
    r = subprocess.run([sys.executable, "-m", "broker.cli", "pull", "--from", str(vault.root), "--to",
                        str(tmp_path / "dst")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("broker: error: tombstone") and "names blob" in r.stderr
