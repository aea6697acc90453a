"""Readers against a hand-built hostile vault: names that try to reach outside it.

Whoever wrote the vault may have put in entries whose blob `sha256` is a path, blobs and session files
that are symlinks to files elsewhere, a FIFO where a blob belongs. Every reader (verify, exports, pull,
the inspector) must read none of it: a finding at the entry's seq, never bytes from outside, never a
stop for the other sessions.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from starlette.testclient import TestClient

from broker.inspector import create_app
from journal import verify as verify_module
from journal.confine import NotConfined, open_blob, open_inside
from journal.export.recorded_body import BlobUnavailable, read_blob
from journal.reader import session_blocks, session_lines
from journal.store.file_store import FileStore
from journal.store.interface import StoreError
from journal.store.transfer import copy_store
from journal.vault import Vault
from journal.vault_verify import verify_sessions
from journal.verify import verify_session
from journal.writer import JournalWriter
from tests.support.journal_factories import fields

ROOT = Path(__file__).resolve().parents[2]
SECRET = b"secret outside the vault: root:x:0:0\n"


def _broker(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=120)


def _outside(tmp_path: Path) -> Path:
    """A file outside the vault, as /etc/hostname would be."""
    path = tmp_path / "outside" / "hostname"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(SECRET)
    return path


def _ref(digest: str, size: int) -> dict:
    return {"sha256": digest, "size": size, "ref": f"blobs/sha256/{digest[:2]}/{digest}"}


def _session_with_body(vault: Vault, session: str, body: object, n: int = 3) -> None:
    """n entries; the response body of seq 2 is `body`."""
    with JournalWriter(vault, durable=False) as w:
        for i in range(1, n + 1):
            f = fields(session=session, n=i)
            if i == 2:
                f["response"]["body"] = body
            w.append(f)


def _intact(vault: Vault, session: str, n: int = 3) -> None:
    with JournalWriter(vault, durable=False) as w:
        for i in range(1, n + 1):
            w.append(fields(session=session, n=i))


def _traversal(tmp_path: Path, outside: Path) -> dict:
    """A ref whose sha256 climbs from blobs/sha256/<hh>/ to `outside`."""
    vault_blobs = tmp_path / "v" / "blobs" / "sha256" / "xx"
    up = os.path.relpath(outside, vault_blobs)
    return {"sha256": up, "size": len(SECRET), "ref": f"blobs/sha256/{up[:2]}/{up}"}


@pytest.mark.parametrize("with_blobs_dir", [True, False])
def test_a_blob_name_that_is_a_path_is_a_finding_not_a_read(tmp_path, with_blobs_dir):
    outside = _outside(tmp_path)
    vault = Vault.create(tmp_path / "v")
    if not with_blobs_dir:
        (vault.root / "blobs" / "sha256").rmdir()
        (vault.root / "blobs").rmdir()
    _intact(vault, "a-good")
    _session_with_body(vault, "b-hostile", _traversal(tmp_path, outside))
    _intact(vault, "c-good")
    r = _broker("verify", "--vault", str(vault.root))
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert "a-good: intact (3 entries)" in r.stdout
    assert "c-good: intact (3 entries)" in r.stdout
    assert "b-hostile: BROKEN at seq 2: contract_violation" in r.stdout
    assert hashlib.sha256(SECRET).hexdigest() not in r.stdout + r.stderr


def test_a_blob_symlinked_outside_is_missing_not_read(tmp_path):
    outside = _outside(tmp_path)
    digest = hashlib.sha256(SECRET).hexdigest()
    vault = Vault.create(tmp_path / "v")
    link = vault.root / "blobs" / "sha256" / digest[:2] / digest
    link.parent.mkdir(parents=True)
    link.symlink_to(outside)
    _session_with_body(vault, "s", _ref(digest, len(SECRET)))
    report = verify_session(vault, "s")
    assert (report.intact, report.broken_at_seq, report.kind) == (False, 2, "blob_missing")
    assert "symlink" in report.detail
    with pytest.raises(NotConfined):
        open_blob(vault.root, digest)
    with pytest.raises(BlobUnavailable, match="not read"):
        read_blob(vault, _ref(digest, len(SECRET)))


def test_a_blob_directory_symlinked_outside_is_not_followed(tmp_path):
    outside = _outside(tmp_path)
    digest = hashlib.sha256(SECRET).hexdigest()
    (outside.parent / digest).write_bytes(SECRET)
    vault = Vault.create(tmp_path / "v")
    (vault.root / "blobs" / "sha256" / digest[:2]).symlink_to(outside.parent, target_is_directory=True)
    _session_with_body(vault, "s", _ref(digest, len(SECRET)))
    report = verify_session(vault, "s")
    assert (report.intact, report.kind) == (False, "blob_missing")


def test_a_fifo_where_a_blob_belongs_does_not_hang_the_reader(tmp_path):
    digest = "ab" * 32
    vault = Vault.create(tmp_path / "v")
    fifo = vault.root / "blobs" / "sha256" / digest[:2] / digest
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    _session_with_body(vault, "s", _ref(digest, 10))
    report = verify_session(vault, "s")
    assert (report.intact, report.kind) == (False, "blob_missing")
    assert "not a regular file" in report.detail


def test_a_session_file_symlinked_outside_is_a_finding_and_the_others_are_verified(tmp_path):
    vault = Vault.create(tmp_path / "v")
    _intact(vault, "good")
    foreign = Vault.create(tmp_path / "foreign")
    _intact(foreign, "leak")  # a well-formed session outside: the old code verified it as if it were in the vault
    (vault.journal_dir / "leak.jsonl").symlink_to(foreign.session_path("leak"))
    reports = {r.session: r for r in verify_sessions(vault, vault.sessions(), workers=1)}
    assert reports["good"].intact
    leak = reports["leak"]
    assert (leak.intact, leak.broken_at_seq, leak.kind, leak.entries) == (False, 1, "contract_violation", 0)
    assert "symlink" in leak.detail
    r = _broker("verify", "--vault", str(vault.root))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "good: intact" in r.stdout and "leak: BROKEN at seq 1: contract_violation" in r.stdout


def test_a_journal_directory_symlinked_outside_is_not_followed(tmp_path):
    foreign = Vault.create(tmp_path / "foreign")
    _intact(foreign, "leak")
    vault = Vault.create(tmp_path / "v")
    vault.journal_dir.rmdir()
    vault.journal_dir.symlink_to(foreign.journal_dir, target_is_directory=True)
    report = verify_session(vault, "leak")
    assert (report.intact, report.kind) == (False, "contract_violation")
    with pytest.raises(NotConfined):
        open_inside(vault.root, ("journal", "leak.jsonl"))


@pytest.mark.parametrize("workers", [1, 2])
def test_a_journal_directory_swapped_for_a_symlink_after_the_check_is_not_read(tmp_path, monkeypatch, workers):
    """The race behind the case above: verify_session checks the session file (a confined open), then reads it.
    Whoever swaps `journal/` for a symlink to a well-formed foreign journal in between must not get that file
    verified in the vault's name (it was: the reads went by path, following the new directory link). What is
    read is the file that was checked, in one process and when forked workers share it."""
    vault = Vault.create(tmp_path / "v")
    _intact(vault, "s", n=3)
    foreign = Vault.create(tmp_path / "foreign")
    _intact(foreign, "s", n=5)
    read_seal = verify_module.read_seal

    def swap_then_read_seal(v: Vault, session: str):  # called after the check, before the lines are read
        vault.journal_dir.rename(vault.root / "journal-moved")
        vault.journal_dir.symlink_to(foreign.journal_dir, target_is_directory=True)
        return read_seal(v, session)

    monkeypatch.setattr(verify_module, "read_seal", swap_then_read_seal)
    report = verify_session(vault, "s", workers=workers)
    checked = vault.root / "journal-moved" / "s.jsonl"
    assert (report.intact, report.entries, report.bytes) == (True, 3, checked.stat().st_size)


@pytest.mark.parametrize("read", ["session_lines", "session_blocks"])
def test_the_readers_read_the_session_file_they_opened_inside_the_vault(tmp_path, monkeypatch, read):
    """journal/reader.py's readers of a session (the inspector's pages, exports, `broker show`, the checkpoint
    proofs) as verify_session above: `journal/` swapped for a symlink to a foreign journal right after the
    session file was opened inside the vault must not make them read the foreign file (they opened it again by
    path, following the new link)."""
    vault = Vault.create(tmp_path / "v")
    _intact(vault, "s", n=3)
    foreign = Vault.create(tmp_path / "foreign")
    _session_with_body(foreign, "s", SECRET.decode(), n=5)
    open_session = Vault.open_session

    def open_then_swap(self: Vault, session: str) -> int:
        fd = open_session(self, session)
        if not vault.journal_dir.is_symlink():
            vault.journal_dir.rename(vault.root / "journal-moved")
            vault.journal_dir.symlink_to(foreign.journal_dir, target_is_directory=True)
        return fd

    monkeypatch.setattr(Vault, "open_session", open_then_swap)
    if read == "session_lines":
        data = b"".join(line.data for line in session_lines(vault, "s"))
    else:
        data = b"".join(block.raw for block in session_blocks(vault, "s"))
    assert vault.journal_dir.is_symlink()  # the swap happened
    assert data == (vault.root / "journal-moved" / "s.jsonl").read_bytes() and SECRET not in data


def test_broker_show_reads_the_session_file_it_checked(tmp_path, monkeypatch):
    """journal/seq_index.py (`broker show --seq`, the inspector's entry page) checked the session file inside the
    vault, then opened it by path: `journal/` swapped for a symlink to a foreign journal in between made it show
    the foreign file's line. Each read now goes through a confined open (the swap is made around each read by path
    where there still is one, the real journal put back for the checks)."""
    from journal import seq_index

    vault = Vault.create(tmp_path / "v")
    _intact(vault, "s", n=3)
    foreign = Vault.create(tmp_path / "foreign")
    _session_with_body(foreign, "s", SECRET.decode(), n=5)
    open_regular = seq_index.__dict__.get("open_regular")

    def swap_then_open(path):  # the symlink is there for the read by path only, the real journal for every check
        vault.journal_dir.rename(vault.root / "journal-moved")
        vault.journal_dir.symlink_to(foreign.journal_dir, target_is_directory=True)
        try:
            return open_regular(path)
        finally:
            vault.journal_dir.unlink()
            (vault.root / "journal-moved").rename(vault.journal_dir)

    monkeypatch.setattr(seq_index, "open_regular", swap_then_open, raising=False)
    real = vault.session_path("s").read_bytes().splitlines(keepends=True)[1]
    assert seq_index.line_of_seq(vault, "s", 2) == real


@pytest.mark.parametrize("query", [{"text": "secret"}, {"text": "secret", "connector": "gmail"}],
                         ids=["text", "text-and-summary"])
def test_search_reads_the_session_file_it_checked(tmp_path, monkeypatch, query):
    """`broker search` checked each session file inside the vault, then opened it by path with a plain open
    (a symlink followed, a FIFO would hang it): the file replaced by a symlink to a foreign session right after
    the check made it print the foreign lines. It now reads the descriptor it opened inside the vault."""
    from journal.search import Query, search

    vault = Vault.create(tmp_path / "v")
    _intact(vault, "s", n=3)
    foreign = Vault.create(tmp_path / "foreign")
    _session_with_body(foreign, "s", SECRET.decode(), n=3)
    open_session = Vault.open_session

    def open_then_replace(self: Vault, session: str) -> int:
        fd = open_session(self, session)
        path = vault.session_path(session)
        if not path.is_symlink():
            path.rename(path.with_name("moved"))
            path.symlink_to(foreign.session_path(session))
        return fd

    monkeypatch.setattr(Vault, "open_session", open_then_replace)
    found = list(search(vault, Query(**query)))
    assert vault.session_path("s").is_symlink()  # the swap happened
    assert found == [] and not any(SECRET in m.raw for m in found)


@pytest.mark.parametrize("parts", [("..", "x"), ("journal", "../x"), ("journal", "."), ("",)])
def test_names_that_leave_the_vault_are_refused_before_any_open(tmp_path, parts):
    vault = Vault.create(tmp_path / "v")
    with pytest.raises(NotConfined):
        open_inside(vault.root, parts)


def test_inspector_serves_no_symlinked_session_or_blob(tmp_path):
    outside = _outside(tmp_path)
    digest = hashlib.sha256(SECRET).hexdigest()
    vault = Vault.create(tmp_path / "v")
    _intact(vault, "good")
    (vault.journal_dir / "leak.jsonl").symlink_to(outside)
    blob = vault.root / "blobs" / "sha256" / digest[:2] / digest
    blob.parent.mkdir(parents=True)
    blob.symlink_to(outside)
    client = TestClient(create_app(Vault.open_existing(vault.root)), base_url="http://127.0.0.1")
    raw = client.get("/api/session/raw", params={"session": "leak"})
    assert raw.status_code == 404 and SECRET not in raw.content
    got = client.get("/api/blob", params={"sha256": digest})
    assert got.status_code == 404 and SECRET not in got.content
    for path in ("/api/session/entries", "/api/session/head", "/api/session/entry"):
        r = client.get(path, params={"session": "leak", "seq": 1})
        assert r.status_code == 404 and SECRET not in r.content
    assert client.get("/api/session/raw", params={"session": "good"}).status_code == 200
    names = client.get("/api/sessions", params={"names": 1}).json()
    assert {n["session"] for n in names} == {"good", "leak"}
    assert client.get("/api/sessions").status_code == 200


def test_inspector_still_serves_a_real_blob(tmp_path):
    vault = Vault.create(tmp_path / "v")
    ref = FileStore(vault.root).put_blob([b"real bytes"])
    client = TestClient(create_app(Vault.open_existing(vault.root)), base_url="http://127.0.0.1")
    got = client.get("/api/blob", params={"sha256": ref["sha256"]})
    assert got.status_code == 200 and got.content == b"real bytes"


def test_export_does_not_inline_bytes_from_outside(tmp_path):
    outside = _outside(tmp_path)
    digest = hashlib.sha256(SECRET).hexdigest()
    vault = Vault.create(tmp_path / "v")
    blob = vault.root / "blobs" / "sha256" / digest[:2] / digest
    blob.parent.mkdir(parents=True)
    blob.symlink_to(outside)
    _session_with_body(vault, "s", _ref(digest, len(SECRET)))
    out = tmp_path / "s.har"
    r = _broker("export", "--vault", str(vault.root), "--format", "har", "--inline-blobs", "--out", str(out), "s")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert not out.exists() or b"root:x:0:0" not in out.read_bytes()
    traversal = _traversal(tmp_path, outside)
    with pytest.raises(BlobUnavailable):
        read_blob(vault, traversal)


def test_pull_from_a_hostile_file_vault_copies_nothing_from_outside(tmp_path):
    outside = _outside(tmp_path)
    digest = hashlib.sha256(SECRET).hexdigest()
    source = FileStore(tmp_path / "src", create=True)
    blob = source.vault.root / "blobs" / "sha256" / digest[:2] / digest
    blob.parent.mkdir(parents=True)
    blob.symlink_to(outside)
    (source.vault.root / "blobs" / "sha256" / "zz").mkdir()
    (source.vault.root / "blobs" / "sha256" / "zz" / "..%2f..%2fetc").write_bytes(b"x")
    target = FileStore(tmp_path / "dst", create=True)
    with pytest.raises(StoreError, match="not read"):
        copy_store(source, target)
    assert not any(p.is_file() and p.read_bytes() == SECRET for p in (tmp_path / "dst").rglob("*"))
    assert list(source.blob_digests()) == [digest]  # the stray name is never offered for reading


def test_a_symlinked_tombstone_is_not_read(tmp_path):
    outside = tmp_path / "tomb.json"
    outside.write_bytes(orjson.dumps({"sha256": "cd" * 32, "erased_at": "x", "erased_by": "y", "reason": "z"}))
    digest = "cd" * 32
    vault = Vault.create(tmp_path / "v")
    (vault.root / "blobs" / "erased").mkdir()
    (vault.root / "blobs" / "erased" / f"{digest}.json").symlink_to(outside)
    _intact(vault, "good")
    _session_with_body(vault, "s", _ref(digest, 10))
    reports = {r.session: r for r in verify_sessions(vault, vault.sessions(), workers=1)}
    assert reports["good"].intact
    assert (reports["s"].intact, reports["s"].kind, reports["s"].erased) == (False, "blob_missing", [])


def test_inspector_never_serves_a_blob_whose_bytes_are_not_its_name(tmp_path):
    """A blob file replaced in the vault: the page labels the download link with the entry's SHA-256, so the
    download must not hand over other bytes under that name (the session's verdict says blob_corrupt, but the
    link alone serves what the attacker wrote). A clear error, never the forged bytes as the recorded blob."""
    vault = Vault.create(tmp_path / "v")
    ref = FileStore(vault.root).put_blob([b"recorded bytes " * 10])
    forged = b"<script>alert(1)</script> forged"
    path = vault.root / ref["ref"]
    os.chmod(path, 0o644)
    path.write_bytes(forged)
    client = TestClient(create_app(Vault.open_existing(vault.root)), base_url="http://127.0.0.1")
    got = client.get("/api/blob", params={"sha256": ref["sha256"]})
    assert got.status_code != 200 and forged not in got.content
    assert "hash" in got.json()["error"]


def test_a_blob_edited_while_it_streams_is_cut_before_its_last_block(tmp_path):
    """The blob passes the check, then its file is rewritten in place while a download streams it: the bytes
    sent are hashed too, and the last block is held back until they match (a download of other bytes is never
    complete: the inspector's answer ends short of its Content-Length)."""
    from journal.blob_read import BlobMismatch, open_recorded_blob, verified_chunks

    vault = Vault.create(tmp_path / "v")
    data = b"a" * (3 << 20)
    ref = FileStore(vault.root).put_blob([data])
    path = vault.root / ref["ref"]
    os.chmod(path, 0o644)
    sent = []
    with open_recorded_blob(vault, ref["sha256"]) as f:
        with open(path, "r+b") as w:
            w.seek(2 << 20)
            w.write(b"b")
        with pytest.raises(BlobMismatch):
            for chunk in verified_chunks(f, ref["sha256"]):
                sent.append(chunk)
    assert 0 < sum(map(len, sent)) < len(data)


def test_a_huge_sparse_file_in_place_of_a_blob_is_judged_without_reading_it_through(tmp_path):
    """A blob file replaced by a sparse file of 1 TiB (no disk used): verify must not hash a terabyte of zeros
    before it says what it can say from the entry's size (it hung for hours). The file vault's check stops
    past the size the entry names; the finding is blob_corrupt at the entry's seq."""
    vault = Vault.create(tmp_path / "v")
    ref = FileStore(vault.root).put_blob([b"recorded bytes"])
    _session_with_body(vault, "s", ref)
    path = vault.root / ref["ref"]
    os.chmod(path, 0o644)
    os.truncate(path, 1 << 40)
    code = ("import sys; from journal.vault import Vault; from journal.verify import verify_session; "
            "r = verify_session(Vault.open_existing(sys.argv[1]), 's'); print(r.intact, r.broken_at_seq, r.kind)")
    try:
        r = subprocess.run([sys.executable, "-c", code, str(vault.root)], capture_output=True, text=True, cwd=ROOT,
                           timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("verify read the sparse terabyte through")
    assert r.stdout.split() == ["False", "2", "blob_corrupt"], r.stderr


def test_a_reader_of_a_blob_stops_past_the_size_its_entry_names(tmp_path):
    """Exports (`iter_blob`) and the trajectory read a blob for its bytes, checked against its name: a sparse
    terabyte in its place was hashed through before the mismatch was said (hours). `open_recorded_blob` now
    stops past the size the entry's reference names."""
    vault = Vault.create(tmp_path / "v")
    ref = FileStore(vault.root).put_blob([b"recorded bytes"])
    path = vault.root / ref["ref"]
    os.chmod(path, 0o644)
    os.truncate(path, 1 << 40)
    code = "\n".join([
        "import sys, json",
        "from journal.vault import Vault",
        "from journal.export.recorded_body import iter_blob, BlobUnavailable",
        "try:",
        "    list(iter_blob(Vault.open_existing(sys.argv[1]), json.loads(sys.argv[2])))",
        "except BlobUnavailable as exc:",
        "    print('refused', exc)",
    ])
    try:
        r = subprocess.run([sys.executable, "-c", code, str(vault.root), orjson.dumps(ref).decode()],
                           capture_output=True, text=True, cwd=ROOT, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the export read the sparse terabyte through")
    assert r.stdout.startswith("refused ") and "does not hold the bytes its name says" in r.stdout, r.stderr


def test_a_store_blob_larger_than_its_entry_says_is_refused_before_it_is_spooled():
    """`checked_blob` (database stores read in place, `--blobs s3://...`) copied the whole object to a
    temporary file before checking its hash: an endless object filled the disk. With the entry's size it
    stops as soon as more came."""
    from journal.store.interface import checked_blob

    pulled = []

    class Endless:
        def read_blob(self, digest):
            while True:
                pulled.append(1)
                yield b"\0" * 65536

    with pytest.raises(FileNotFoundError, match="more than the 14 bytes"):
        checked_blob(Endless(), "0" * 64, "the store", size=14)
    assert len(pulled) == 1


def test_an_export_reads_a_blob_once_and_still_refuses_one_edited_in_place(tmp_path, monkeypatch):
    """`iter_blob` hashes what it reads, so the vault file is not read through first as well (an export of a
    1 GB body read 2 GB); a blob edited in place to other bytes of the same size is still refused."""
    from journal import blob_read

    vault = Vault.create(tmp_path / "v")
    data = os.urandom(3 << 20)
    ref = FileStore(vault.root).put_blob([data])
    read = []

    def counting_open_blob(root, digest):
        f = open_blob(root, digest)
        real = f.read
        f.read = lambda n=-1: (chunk := real(n), read.append(len(chunk)))[0]  # type: ignore[method-assign]
        return f

    monkeypatch.setattr(blob_read, "open_blob", counting_open_blob)
    assert read_blob(vault, ref) == data and sum(read) == len(data)
    path = vault.root / ref["ref"]
    os.chmod(path, 0o644)
    path.write_bytes(bytes(len(data)))
    with pytest.raises(BlobUnavailable, match="does not hold the bytes its name says"):
        read_blob(vault, ref)
