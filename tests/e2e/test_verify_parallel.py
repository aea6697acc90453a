"""The verifier's fast path and its sharing of a file among processes change nothing in a report.

Every report is compared, field by field, with `reference_report`: the verifier's loop as it was before
(one process, one line at a time, every line through `_check_line`). Sessions mix the lines that take
the slow paths (floats, key orders where orjson and JCS differ, tools/list answers, blob references
that are present, corrupt, missing or erased) and are tampered with in every way test_verify.py knows;
each is verified in one process and cut into 2 and 5 ranges checked by forked workers.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journal.verify as verify
from journal.blobstore import BlobStore
from journal.chain import GENESIS, chain_entry
from journal.checkpoint.note import Signer
from journal.erasure import write_tombstone
from journal.erasure_signature import sign_tombstone
from journal.reader import iter_lines
from journal.seal import generate_keypair, load_private_key, load_public_key, read_seal, write_seal
from journal.trajectory import ToolListWatch
from journal.vault import Vault
from journal.verify import SessionReport
from tests.journal.test_verify import _FORGERIES, make_chain
from tests.support.journal_factories import fields

pytestmark = pytest.mark.usefixtures("only_main_thread")

ERASER = Signer.generate("eraser.example")
KEYS = [ERASER.verifier()]  # the blob_erased tombstone is signed by it: honoured only with it
verify_session = functools.partial(verify.verify_session, erasure_keys=KEYS)

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
SESSION = "s1"


def reference_report(vault: Vault, session: str, seal_key=None) -> SessionReport:
    """verify_session before the fast path: every line through _check_line, in one process."""
    path = vault.require_session(session)
    seal = read_seal(vault, session)
    sealed_hash = None
    report = SessionReport(session)
    blobs = BlobStore(vault.root, erasure_keys=KEYS)
    blob_ok: dict = {}
    erased: list = []
    expected_prev = GENESIS
    tool_lists = ToolListWatch()
    before = None
    lines = (line.data for line in iter_lines(path))
    for k, data in enumerate(lines, 1):
        report.bytes += len(data)
        try:
            entry = verify._check_line(data, session)
            if entry["seq"] != k or entry["prev"] != expected_prev:
                raise verify._classify_chain_break(entry, k, before, lines)
            if verify._REF_MARK in data:
                verify._check_blobs(entry, blobs, blob_ok, erased)
        except verify._Break as brk:
            report.intact = False
            report.broken_at_seq = brk.seq or k
            report.entries = report.broken_at_seq - 1
            report.kind = brk.kind
            report.detail = f"line {k}: {brk.detail}"
            break
        report.entries = k
        expected_prev = entry["hash"]
        before = entry
        if seal is not None and k == seal.entries:
            sealed_hash = entry["hash"]
        if report.first_ts is None:
            report.first_ts = entry["ts"]
        report.last_ts = entry["ts"]
        tool_lists.observe(entry)
    if report.intact and report.entries:
        report.head = expected_prev
    report.erased = [t for _, t in erased]
    report.notes += tool_lists.notes()
    for t in report.erased:
        report.notes.append(
            f"blob {t['sha256']} erased on {t.get('erased_at')} by {t.get('erased_by')}: {t.get('reason')} "
            f"(signed by erasure key {t.get('signed_by')})"
        )
    for q in sorted(path.parent.glob(path.name + ".torn-*")):
        report.notes.append(f"torn tail quarantined by the writer: {q.name} ({q.stat().st_size} bytes)")
    verify._check_seal(report, seal, seal_key, sealed_hash)
    return report


class _CountingForkedCall(verify.ForkedCall):
    started = 0

    def __init__(self, fn) -> None:
        type(self).started += 1
        super().__init__(fn)


@pytest.fixture(autouse=True)
def count_forks(monkeypatch):
    monkeypatch.setattr(verify, "ForkedCall", _CountingForkedCall)
    _CountingForkedCall.started = 0
    return _CountingForkedCall


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    generate_keypair(d / "k.pem", d / "k.pub")
    return load_private_key(d / "k.pem"), load_public_key(d / "k.pub")


# -- sessions ---------------------------------------------------------------------------------------

_KINDS = ["plain", "plain", "plain", "float", "keys", "listing", "listing2", "blob_ok", "blob_erased", "big"]
_BROKEN_BLOBS = ["blob_bad", "blob_gone"]  # one of these, in a few sessions: a break of its own kind


def _fields_of(kind: str, n: int, refs: dict) -> dict:
    f = fields(SESSION, n)
    body = f["response"]["body"]
    if kind == "float":
        body["score"] = [1.5, 2.0, 1e-7]
    elif kind == "keys":
        body["k"] = {"\U0001f600": 1, "\ue000": 2}
    elif kind in ("listing", "listing2"):
        f["capture"] = "gateway"
        f["request"]["method"] = "tools/list"
        tools = [{"name": "search", "description": "finds" if kind == "listing" else "finds, and more",
                  "inputSchema": {"type": "object"}}]
        if kind == "listing2":
            tools.append({"name": "delete", "description": "deletes", "inputSchema": {}})
        f["response"]["body"] = {"jsonrpc": "2.0", "id": n, "result": {"tools": tools}}
    elif kind.startswith("blob_"):
        f["response"]["body"] = {"data": refs[kind], "size": refs[kind]["size"]}
    elif kind == "big":
        body["pad"] = "x" * 3000
    return f


def _make_blobs(vault: Vault) -> dict:
    store = BlobStore(vault.root)
    refs = {name: store.put_bytes(name.encode() * 50) for name in ("blob_ok", "blob_bad", "blob_gone", "blob_erased")}
    bad = store.path_for(refs["blob_bad"]["sha256"])
    bad.chmod(0o644)
    bad.write_bytes(b"tampered")
    store.path_for(refs["blob_gone"]["sha256"]).unlink()
    gone = refs["blob_erased"]["sha256"]
    tombstone = {"sha256": gone, "erased_at": "2026-12-01T00:00:00.000Z", "erased_by": "dpo", "reason": "request"}
    write_tombstone(vault.root, {**tombstone, "note": sign_tombstone(tombstone, ERASER)})
    store.path_for(gone).unlink()
    return refs


def _chain(kinds: list[str], refs: dict) -> list[bytes]:
    lines, prev = [], GENESIS
    for n, kind in enumerate(kinds, 1):
        entry, line = chain_entry(_fields_of(kind, n, refs), n, prev)
        prev = entry["hash"]
        lines.append(line)
    return lines


def _rehashed(line: bytes, **changes) -> bytes:
    entry = orjson.loads(line)
    entry.pop("hash")
    entry.update(changes)
    return chain_entry({k: v for k, v in entry.items() if k not in ("seq", "prev")}, entry["seq"], entry["prev"])[1]


_TAMPERS = ["none", "none", "edit", "rehash", "remove", "insert", "duplicate", "swap", "torn", "blank", "space",
            "garbage", "float_form"]


def _tamper(data, lines: list[bytes]) -> None:
    what = data.draw(st.sampled_from(_TAMPERS))
    n = len(lines)
    i = data.draw(st.integers(0, n - 1))
    if what == "edit":
        lines[i] = lines[i].replace(b'"agent":"', b'"agent":"x', 1)
    elif what == "rehash":
        lines[i] = _rehashed(lines[i], principal="mallory@example.com")
    elif what == "remove" and n > 1:
        del lines[i]
    elif what == "insert":
        lines.insert(i, chain_entry(fields(SESSION, 99, agent="mallory"), data.draw(st.integers(1, n + 1)),
                                    hashlib.sha256(b"fake").hexdigest())[1])
    elif what == "duplicate":
        lines.insert(i + 1, lines[i])
    elif what == "swap" and n > 1:
        j = data.draw(st.integers(0, n - 1))
        lines[i], lines[j] = lines[j], lines[i]
    elif what == "torn":
        lines[-1] = lines[-1][: data.draw(st.integers(1, len(lines[-1]) - 1))]
    elif what == "blank":
        lines.insert(i, b"\n")
    elif what == "space":
        lines[i] = lines[i].replace(b'{"agent"', b'{ "agent"', 1)
    elif what == "garbage":
        lines.insert(i, b"not json at all\n")
    elif what == "float_form":
        lines[i] = lines[i].replace(b'"status":200', b'"status":200.0', 1)


def _reports(vault: Vault, seal_key=None) -> list[dict]:
    """In one process; in 2 and 5 equal ranges (a small file); and in the shrinking ranges of a big file
    (`_range_targets`), here down to a line or two each: a tampered line lands on a range's first or last line."""
    reports = [verify_session(vault, SESSION, workers=w, seal_key=seal_key).as_dict() for w in (1, 2, 5)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(verify, "MIN_RANGE_BYTES", 1)
        reports.append(verify_session(vault, SESSION, workers=2, seal_key=seal_key).as_dict())
    return reports


@SETTINGS
@given(data=st.data(), kinds=st.lists(st.sampled_from(_KINDS), min_size=1, max_size=30))
def test_reports_equal_the_one_line_at_a_time_verifier(tmp_path_factory, keys, data, kinds):
    if data.draw(st.integers(0, 4)) == 0:
        kinds.insert(data.draw(st.integers(0, len(kinds))), data.draw(st.sampled_from(_BROKEN_BLOBS)))
    vault = Vault.create(tmp_path_factory.mktemp("v"))
    refs = _make_blobs(vault)
    genuine = _chain(kinds, refs)
    lines = list(genuine)
    _tamper(data, lines)
    vault.session_path(SESSION).write_bytes(b"".join(lines))
    seal_key = None
    if data.draw(st.booleans()):
        m = data.draw(st.integers(1, len(genuine)))
        write_seal(vault, SESSION, m, orjson.loads(genuine[m - 1])["hash"], keys[0])
        seal_key = keys[1]
    expected = reference_report(vault, SESSION, seal_key).as_dict()
    for got in _reports(vault, seal_key):
        assert got == expected


def test_a_break_classified_by_lines_in_the_next_range(tmp_path):
    """seq 1 rehashed: line 2's prev breaks, and whether line 3 names line 2 decides the detail; with two
    ranges, line 3 is in the worker's range."""
    vault = Vault.create(tmp_path)
    lines = _chain(["plain"] * 3, {})
    lines[0] = _rehashed(lines[0], principal="mallory@example.com")
    vault.session_path(SESSION).write_bytes(b"".join(lines))
    expected = reference_report(vault, SESSION).as_dict()
    assert expected["broken_at_seq"] == 1 and "(or seq 2" not in expected["detail"]
    assert _reports(vault) == [expected] * 4


def test_workers_are_forked_for_each_range_and_agree(tmp_path, count_forks):
    vault = Vault.create(tmp_path)
    refs = _make_blobs(vault)
    kinds = ["plain", "listing", "float", "blob_ok", "blob_erased", "keys", "listing2", "big"] * 5
    vault.session_path(SESSION).write_bytes(b"".join(_chain(kinds, refs)))
    expected = reference_report(vault, SESSION).as_dict()
    assert expected["intact"] and expected["entries"] == 40 and expected["erased"] and expected["notes"]
    assert verify_session(vault, SESSION, workers=4).as_dict() == expected
    assert count_forks.started == 3
    count_forks.started = 0
    assert verify_session(vault, SESSION, workers=1).as_dict() == expected
    assert count_forks.started == 0


def test_a_failing_worker_is_redone_by_the_parent(tmp_path, monkeypatch, count_forks):
    vault = Vault.create(tmp_path)
    lines = _chain(["plain"] * 20, {})
    lines[14] = lines[14].replace(b'"agent":"', b'"agent":"x', 1)
    vault.session_path(SESSION).write_bytes(b"".join(lines))
    expected = reference_report(vault, SESSION).as_dict()

    def crash(*args):
        raise RuntimeError("worker died")

    monkeypatch.setattr(verify, "_verify_range", crash)
    assert verify_session(vault, SESSION, workers=3).as_dict() == expected
    assert count_forks.started == 2 and expected["broken_at_seq"] == 15


def test_lines_appended_during_a_parallel_verify_are_read_too(tmp_path, monkeypatch):
    vault = Vault.create(tmp_path)
    lines = _chain(["plain"] * 12, {})
    path = vault.session_path(SESSION)
    path.write_bytes(b"".join(lines[:10]))
    cut = verify._line_starts

    def cut_then_append(*args):
        cuts = cut(*args)
        with open(path, "ab") as f:  # the writer appends after the size was taken
            f.write(b"".join(lines[10:]))
        return cuts

    monkeypatch.setattr(verify, "_line_starts", cut_then_append)
    r = verify_session(vault, SESSION, workers=2)
    assert (r.intact, r.entries, r.bytes) == (True, 12, path.stat().st_size)


def test_auto_mode_forks_only_for_big_files_without_on_entry_or_threads(tmp_path, monkeypatch, count_forks):
    vault = Vault.create(tmp_path)
    vault.session_path(SESSION).write_bytes(b"".join(_chain(["plain"] * 30, {})))
    monkeypatch.setattr(verify, "usable_cpus", lambda: 2)
    assert verify_session(vault, SESSION).intact and count_forks.started == 0  # below PARALLEL_MIN_BYTES
    monkeypatch.setattr(verify, "PARALLEL_MIN_BYTES", 1000)
    monkeypatch.setattr(verify, "MIN_WORKER_BYTES", 1000)
    assert verify_session(vault, SESSION).intact and count_forks.started == 1
    seen: list[int] = []
    assert verify_session(vault, SESSION, on_entry=lambda e: seen.append(e["seq"])).intact
    assert count_forks.started == 1 and seen == list(range(1, 31))
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:  # a child forked from a threaded process could inherit a held lock: no fork then, even if asked
        assert verify_session(vault, SESSION, workers=2).intact and count_forks.started == 1
    finally:
        stop.set()
        other.join()


@pytest.mark.parametrize("size", [100, 1000, 9 << 20, 100_000_000, 1 << 40])
@pytest.mark.parametrize("workers", [2, 3, 16])
def test_range_targets_cover_the_file_in_shrinking_ranges_at_least_one_a_worker(size, workers):
    cuts = verify._range_targets(size, workers)
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, size], strict=True)]
    assert all(n > 0 for n in sizes) and sum(sizes) == size
    assert workers <= len(sizes) <= 255
    if size >= 2 * workers * verify.MIN_RANGE_BYTES:  # rounds of `workers` ranges, each round half of what is left
        assert sizes[:workers] == [size // (2 * workers)] * workers
        assert sizes[:-1] == sorted(sizes[:-1], reverse=True)  # the last one: what is left
        assert sizes[-2] == verify.MIN_RANGE_BYTES


def test_forked_call_returns_the_value_or_none_and_close_stops_the_child():
    assert verify.ForkedCall(lambda: {"a": [1, 2]}).result() == {"a": [1, 2]}

    def fails():
        raise ValueError("no")

    failed = verify.ForkedCall(fails)
    assert failed.result() is None and failed.failure == "ValueError: no"
    slow = verify.ForkedCall(lambda: threading.Event().wait(60))
    pid = slow._pid
    slow.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # killed and reaped: nothing left behind


@pytest.mark.parametrize("forgery", [*sorted(_FORGERIES), "torn"])
def test_a_forged_line_anywhere_is_found_alike_in_one_process_and_in_ranges_of_a_line_or_two(
        tmp_path, monkeypatch, forgery):
    """Each forgery at each line of an 8-line chain, verified in one process and shared between two processes
    in ranges so short that the forged line is some range's first or last line (`_range_targets`)."""
    monkeypatch.setattr(verify, "MIN_RANGE_BYTES", 1)
    base = make_chain(8)
    for i in range(8) if forgery != "torn" else [7]:
        lines = list(base)
        lines[i] = lines[i][: len(lines[i]) // 2] if forgery == "torn" else _FORGERIES[forgery](lines[i])
        if lines[i] == base[i]:
            continue  # an uppercase prev of seq 1: zeros are zeros
        vault = Vault.create(tmp_path / f"{forgery}-{i}")
        vault.session_path("s1").write_bytes(b"".join(lines))
        data = vault.session_path("s1").read_bytes()
        with open(vault.session_path("s1"), "rb") as f:
            cuts = verify._line_starts(f.fileno(), len(data), verify._range_targets(len(data), 2))
        assert len(cuts) >= 4 and all(data[c - 1 : c] == b"\n" for c in cuts)  # no line split between two ranges
        alone = verify.verify_session(vault, "s1", workers=1)
        assert not alone.intact and alone.broken_at_seq in (i, i + 1), (i, alone.as_dict())
        assert alone.kind == "torn_tail" if forgery == "torn" else alone.kind != "torn_tail"
        assert verify.verify_session(vault, "s1", workers=2).as_dict() == alone.as_dict()
