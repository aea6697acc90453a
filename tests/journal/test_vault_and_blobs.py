"""Session id -> file name rule, and the content-addressed blob store."""

from __future__ import annotations

import hashlib
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from journal.blobstore import BlobStore
from journal.vault import SessionIdError, Vault, VaultError, session_filename, session_from_filename

session_ids = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="".join(map(chr, range(32))) + "\x7f"),
    min_size=1, max_size=16,  # 16 four-byte characters encode to 192 bytes, under the limit
)


@given(session_ids)
def test_session_filename_is_reversible_and_stays_in_journal(session):
    name = session_filename(session)
    assert "/" not in name and "\x00" not in name and name not in (".jsonl", "..jsonl")
    assert not name.startswith(".")
    assert session_from_filename(name) == session


@pytest.mark.parametrize(
    "session,name",
    [
        ("session-2026-09-22", "session-2026-09-22.jsonl"),
        ("../etc/passwd", "%2E.%2Fetc%2Fpasswd.jsonl"),
        ("..", "%2E..jsonl"),
        ("a/b", "a%2Fb.jsonl"),
        ("caf\u00e9", "caf%C3%A9.jsonl"),
        ("50%", "50%25.jsonl"),
    ],
)
def test_session_filename_examples(session, name):
    assert session_filename(session) == name


@pytest.mark.parametrize("bad", ["", "a\x00b", "line\nbreak", "x" * 201, "\ud800"])
def test_unmappable_session_ids_are_refused(bad):
    with pytest.raises(SessionIdError):
        session_filename(bad)


def test_distinct_ids_never_share_a_file():
    ids = ["a b", "a%20b", "a+b", "A b", ".a", "%2Ea"]
    names = [session_filename(i) for i in ids]
    assert len(set(names)) == len(ids)


def test_foreign_file_names_are_ignored(tmp_path):
    v = Vault.create(tmp_path)
    (v.journal_dir / "ok.jsonl").write_bytes(b"")
    (v.journal_dir / "not%2fcanonical.jsonl").write_bytes(b"")
    (v.journal_dir / "ok.jsonl.torn-1").write_bytes(b"x")
    assert v.sessions() == ["ok"]


def test_missing_vault_and_unknown_session_errors(tmp_path):
    with pytest.raises(VaultError, match="no vault"):
        Vault.open_existing(tmp_path / "nope")
    v = Vault.create(tmp_path)
    with pytest.raises(VaultError, match="no session"):
        v.require_session("ghost")


def test_blob_ref_refuses_paths_outside_blobs(tmp_path):
    v = Vault.create(tmp_path)
    for ref in ["../x", "blobs/sha256/aa/../../../etc", "blobs/sha256/ab/" + "c" * 64]:
        with pytest.raises(VaultError):
            v.blob_path(ref)


def test_put_bytes_is_content_addressed_and_deduplicated(tmp_path):
    store = BlobStore(tmp_path)
    data = os.urandom(3000)
    ref1 = store.put_bytes(data)
    ref2 = store.put_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    assert ref1 == ref2 == {"sha256": digest, "size": 3000, "ref": f"blobs/sha256/{digest[:2]}/{digest}"}
    assert (tmp_path / ref1["ref"]).read_bytes() == data
    assert list((tmp_path / "blobs" / "tmp").iterdir()) == []
    assert store.check(digest, 3000) is None


def test_put_stream_never_needs_the_whole_blob(tmp_path):
    store = BlobStore(tmp_path)
    h = hashlib.sha256()
    produced = 0

    def chunks():
        nonlocal produced
        for i in range(64):
            c = bytes([i]) * (256 << 10)
            h.update(c)
            produced += len(c)
            yield c

    ref = store.put_stream(chunks())
    assert ref["sha256"] == h.hexdigest() and ref["size"] == produced == 16 << 20
    assert store.check(ref["sha256"], produced) is None


def test_aborted_stream_leaves_no_blob_and_no_temp(tmp_path):
    store = BlobStore(tmp_path)

    def chunks():
        yield b"partial"
        raise RuntimeError("client went away")

    with pytest.raises(RuntimeError):
        store.put_stream(chunks())
    assert not [p for p in (tmp_path / "blobs").rglob("*") if p.is_file()]  # no blob, no temp file
    assert (tmp_path / "blobs" / "tmp").is_dir()  # the write did start


def test_check_reports_corruption(tmp_path):
    store = BlobStore(tmp_path)
    ref = store.put_bytes(b"hello")
    p = tmp_path / ref["ref"]
    p.chmod(0o644)
    p.write_bytes(b"hellO")
    assert "corrupt" in store.check(ref["sha256"])
    p.unlink()
    assert "missing" in store.check(ref["sha256"])
