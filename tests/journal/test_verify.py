"""The verifier: every single tampering of a chain is reported at the right seq with the right kind."""

from __future__ import annotations

import hashlib

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal.blobstore import BlobStore
from journal.canonical import canonical_bytes
from journal.chain import chain_entry
from journal.vault import Vault
from journal.verify import _quick_entry, verify_session
from journal.writer import JournalWriter
from tests.support.journal_factories import fields

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def make_chain(n: int) -> list[bytes]:
    lines, prev = [], "0" * 64
    for i in range(1, n + 1):
        entry, line = chain_entry(fields(n=i), i, prev)
        prev = entry["hash"]
        lines.append(line)
    return lines


def check(tmp_path, lines: list[bytes]):
    vault = Vault.create(tmp_path)
    vault.session_path("s1").write_bytes(b"".join(lines))
    return verify_session(vault, "s1")


@pytest.fixture
def vdir(tmp_path_factory):
    return tmp_path_factory.mktemp("v")


@SETTINGS
@given(n=st.integers(1, 12))
def test_untouched_chain_is_intact(vdir, n):
    r = check(vdir, make_chain(n))
    assert (r.intact, r.entries, r.broken_at_seq, r.kind) == (True, n, None, None)


@SETTINGS
@given(data=st.data(), n=st.integers(1, 12))
def test_edit_is_reported(vdir, data, n):
    lines = make_chain(n)
    i = data.draw(st.integers(0, n - 1))
    entry = orjson.loads(lines[i])
    key = data.draw(st.sampled_from(["ts", "agent", "principal", "effect", "request", "response", "seq", "prev"]))
    if key == "effect":
        entry[key] = "write"
    elif key == "request":
        entry[key]["url"] += "?x=1"
    elif key == "response":
        entry[key]["status"] = 500
    elif key == "seq":
        entry[key] += 1
    elif key == "prev":
        entry[key] = hashlib.sha256(b"x").hexdigest()
    else:
        entry[key] = entry[key] + "!"
    lines[i] = canonical_bytes(entry) + b"\n"
    r = check(vdir, lines)
    assert (r.intact, r.broken_at_seq, r.kind) == (False, i + 1, "edited")


@SETTINGS
@given(data=st.data(), n=st.integers(2, 12))
def test_removal_is_reported(vdir, data, n):
    lines = make_chain(n)
    i = data.draw(st.integers(0, n - 2))  # removing the last line needs a seal (docs/contract.md)
    del lines[i]
    r = check(vdir, lines)
    assert (r.intact, r.broken_at_seq, r.kind) == (False, i + 1, "removed")


@SETTINGS
@given(data=st.data(), n=st.integers(1, 12))
def test_insertion_of_a_forged_entry_is_reported(vdir, data, n):
    lines = make_chain(n)
    i = data.draw(st.integers(0, n))
    # At the very end, a forged entry claiming a later seq looks exactly like a removal: both leave a gap.
    claimed_seq = data.draw(st.integers(1, n + 1 if i == n else n + 2))
    forged, line = chain_entry(fields(n=99, agent="mallory"), claimed_seq, hashlib.sha256(b"fake").hexdigest())
    lines.insert(i, line)
    r = check(vdir, lines)
    if i == n and claimed_seq == n + 1:
        # A last line with the right seq and a wrong prev is also what seq n edited and rehashed leaves:
        # the file cannot tell the two apart, so the earlier seq is named (entries before it are genuine).
        assert (r.intact, r.broken_at_seq, r.kind) == (False, n, "edited")
    else:
        assert (r.intact, r.broken_at_seq, r.kind) == (False, i + 1, "inserted")


@SETTINGS
@given(data=st.data(), n=st.integers(1, 12))
def test_duplication_is_reported(vdir, data, n):
    lines = make_chain(n)
    i = data.draw(st.integers(0, n - 1))
    lines.insert(i + 1, lines[i])
    r = check(vdir, lines)
    assert (r.intact, r.broken_at_seq, r.kind) == (False, i + 2, "inserted")


@SETTINGS
@given(data=st.data(), n=st.integers(2, 12))
def test_swap_is_reported(vdir, data, n):
    lines = make_chain(n)
    i = data.draw(st.integers(0, n - 2))
    j = data.draw(st.integers(i + 1, n - 1))
    lines[i], lines[j] = lines[j], lines[i]
    r = check(vdir, lines)
    assert (r.intact, r.broken_at_seq, r.kind) == (False, i + 1, "reordered")


@SETTINGS
@given(data=st.data(), n=st.integers(1, 12))
def test_truncation_inside_a_line_is_a_torn_tail(vdir, data, n):
    lines = make_chain(n)
    cut = data.draw(st.integers(1, len(lines[-1]) - 1))
    lines[-1] = lines[-1][:cut]
    r = check(vdir, lines)
    assert (r.intact, r.broken_at_seq, r.kind) == (False, n, "torn_tail")


@SETTINGS
@given(n=st.integers(2, 12), data=st.data())
def test_truncation_at_a_line_boundary_is_not_visible_without_a_seal(vdir, n, data):
    keep = data.draw(st.integers(1, n - 1))
    r = check(vdir, make_chain(n)[:keep])
    assert r.intact and r.entries == keep


@pytest.mark.parametrize(
    "mangle",
    [
        lambda b: b.replace(b'{"agent"', b'{ "agent"', 1),
        lambda b: b.replace(b'"status":200', b'"status":200.0', 1),
        lambda b: b.replace(b'"method":"GET"', b'"method":"\\u0047ET"', 1),
        lambda b: b"{" + b'"agent":"x",' + b[1:],  # duplicate key
        lambda b: b"this is not json\n",
    ],
    ids=["whitespace", "float", "escape", "duplicate-key", "not-json"],
)
def test_non_canonical_line_is_reported(tmp_path, mangle):
    lines = make_chain(3)
    lines[1] = mangle(lines[1])
    r = check(tmp_path, lines)
    assert (r.intact, r.broken_at_seq, r.kind) == (False, 2, "not_canonical")


def test_contract_violation_is_reported(tmp_path):
    lines = make_chain(2)
    extra = fields(n=3)
    extra["extra_key"] = 1
    entry, _ = chain_entry(extra, 3, orjson.loads(lines[1])["hash"])
    lines.append(canonical_bytes(entry) + b"\n")
    r = check(tmp_path, lines)
    assert (r.intact, r.broken_at_seq, r.kind) == (False, 3, "contract_violation")


def test_entry_of_another_session_is_a_contract_violation(tmp_path):
    lines = make_chain(1)
    vault = Vault.create(tmp_path)
    vault.session_path("s2").write_bytes(lines[0])
    r = verify_session(vault, "s2")
    assert (r.kind, r.broken_at_seq) == ("contract_violation", 1)


def test_missing_and_corrupt_blobs_are_reported(tmp_path):
    vault = Vault.create(tmp_path)
    blobs = BlobStore(tmp_path)
    ref = blobs.put_bytes(b"attachment bytes" * 1000)
    f = fields()
    f["response"]["body"] = {"data": ref, "size": 16000}
    with JournalWriter(vault) as w:
        w.append(fields(n=1))
        w.append(f)
    assert verify_session(vault, "s1").intact
    path = blobs.path_for(ref["sha256"])
    path.chmod(0o644)
    path.write_bytes(b"tampered")
    r = verify_session(vault, "s1")
    assert (r.broken_at_seq, r.kind) == (2, "blob_corrupt")
    path.unlink()
    r = verify_session(vault, "s1")
    assert (r.broken_at_seq, r.kind) == (2, "blob_missing")
    assert verify_session(vault, "s1", check_blobs=False).intact


# -- an entry changed and its hash recomputed: only the next line's prev shows it ------------------


def _rehashed(line: bytes, **changes) -> bytes:
    """The line's entry with `changes` applied and its own hash recomputed (as a forger would)."""
    entry = orjson.loads(line)
    entry.pop("hash")
    entry.update(changes)
    return chain_entry({k: v for k, v in entry.items() if k not in ("seq", "prev")}, entry["seq"], entry["prev"])[1]


@SETTINGS
@given(data=st.data(), n=st.integers(2, 12))
def test_edit_and_rehash_is_reported_at_the_edited_seq(vdir, data, n):
    lines = make_chain(n)
    i = data.draw(st.integers(0, n - 2))  # the last entry rehashed is a valid chain: only a seal shows it
    key = data.draw(st.sampled_from(["agent", "effect", "principal"]))
    lines[i] = _rehashed(lines[i], **{key: "write" if key == "effect" else "mallory"})
    r = check(vdir, lines)
    assert (r.intact, r.broken_at_seq, r.kind, r.entries) == (False, i + 1, "edited", i)


def test_edit_and_rehash_of_seq_7_of_10_is_edited_at_7_not_inserted_at_8(tmp_path):
    lines = make_chain(10)
    lines[6] = _rehashed(lines[6], principal="mallory@example.com")
    r = check(tmp_path, lines)
    assert (r.broken_at_seq, r.kind) == (7, "edited")
    assert "seq 7 was changed and its hash recomputed" in r.detail


@SETTINGS
@given(data=st.data(), n=st.integers(2, 12))
def test_prev_changed_and_rehashed_is_edited_at_that_seq(vdir, data, n):
    lines = make_chain(n)
    i = data.draw(st.integers(0, n - 2))
    lines[i] = _rehashed(lines[i], prev=hashlib.sha256(b"elsewhere").hexdigest())
    r = check(vdir, lines)
    assert (r.broken_at_seq, r.kind) == (i + 1, "edited")


@SETTINGS
@given(data=st.data(), n=st.integers(2, 12))
def test_seq_changed_and_rehashed_is_edited_not_removed(vdir, data, n):
    lines = make_chain(n)
    i = data.draw(st.integers(0, n - 2))
    lines[i] = _rehashed(lines[i], seq=orjson.loads(lines[i])["seq"] + 1)
    r = check(vdir, lines)
    assert (r.broken_at_seq, r.kind) == (i + 1, "edited")


@SETTINGS
@given(data=st.data(), n=st.integers(1, 12))
def test_forged_entry_with_the_right_seq_and_prev_is_inserted_at_its_place(vdir, data, n):
    """A forger who reads the chain can give the forged entry the right seq and prev: it stands where
    it was put, and the genuine entry that follows claims the same seq."""
    lines = make_chain(n)
    i = data.draw(st.integers(0, n - 1))
    prev = orjson.loads(lines[i])["prev"]
    _, line = chain_entry(fields(n=99, agent="mallory"), i + 1, prev)
    lines.insert(i, line)
    r = check(vdir, lines)
    assert (r.intact, r.broken_at_seq, r.kind) == (False, i + 1, "inserted")


def test_every_tampering_kind_names_its_own_seq(tmp_path):
    """One table of the cases: what was done to a 10-entry chain, the seq and kind reported."""
    base = make_chain(10)

    def edit(ls):
        ls[4] = ls[4].replace(b'"agent":"', b'"agent":"x', 1)

    def rehash(ls):
        ls[4] = _rehashed(ls[4], agent="x")

    def remove(ls):
        del ls[4]

    def insert(ls):
        ls.insert(4, chain_entry(fields(n=50), 5, hashlib.sha256(b"f").hexdigest())[1])

    def swap(ls):
        ls[4], ls[7] = ls[7], ls[4]

    def duplicate(ls):
        ls.insert(5, ls[4])

    cases = [(edit, 5, "edited"), (rehash, 5, "edited"), (remove, 5, "removed"), (insert, 5, "inserted"),
             (swap, 5, "reordered"), (duplicate, 6, "inserted")]
    for n, (tamper, seq, kind) in enumerate(cases):
        lines = list(base)
        tamper(lines)
        r = check(tmp_path / str(n), lines)
        assert (tamper.__name__, r.broken_at_seq, r.kind) == (tamper.__name__, seq, kind)


def _rehashed_as_written(line: bytes) -> bytes:
    """`line` (with its newline) with its hash recomputed over its own bytes, as an attacker who rewrites a
    line would do: only the canonical-form check can then refuse it."""
    old = orjson.loads(line)["hash"]
    member = b',"hash":"' + old.encode() + b'"'
    body = line.rstrip(b"\n").replace(member, b"", 1)
    return line.replace(old.encode(), hashlib.sha256(body).hexdigest().encode(), 1)


def _swap_first_members(line: bytes) -> bytes:
    agent_end = line.index(b',"capture":')
    capture_end = line.index(b',"connector":')
    return b"{" + line[agent_end + 1 : capture_end] + b"," + line[1:agent_end] + line[capture_end:]


@pytest.mark.parametrize(
    "mangle",
    [
        lambda b: b.replace(b'{"agent"', b'{ "agent"', 1),
        lambda b: b.replace(b'"agent":', b'"agent" :', 1),
        lambda b: b[:-1] + b" \n",  # trailing space
        lambda b: b[:-1] + b"\r\n",  # CRLF
        _swap_first_members,  # key order
        lambda b: b.replace(b'"method":"GET"', b'"method":"\\u0047ET"', 1),  # escape of a plain character
        lambda b: b.replace(b"https://", b"https:\\/\\/", 1),  # escaped solidus
        lambda b: b.replace("é".encode(), b"\\u00e9", 1),  # non-ASCII written as an escape
        lambda b: b.replace(b'"agent":', b'"agent":"x","agent":', 1),  # duplicated key, the last one wins
        lambda b: b.replace(b'"status":200', b'"status":2e2', 1),  # a float for an integer
        lambda b: b.replace(b'"status":200', b'"status":200.0', 1),
    ],
    ids=["space-after-brace", "space-before-colon", "trailing-space", "crlf", "key-order", "unicode-escape",
         "escaped-solidus", "escaped-non-ascii", "duplicate-key", "float-exponent", "float-point"],
)
@pytest.mark.parametrize("workers", [1, None])
def test_a_rehashed_non_canonical_line_is_refused_by_the_fast_path_too(tmp_path, mangle, workers):
    """The attacker rewrites the last line in a form JSON parsers read as the same entry and recomputes its hash
    over the new bytes: the hash holds, so only the canonical-form check stands between it and `intact`. The
    one-pass check (`_quick_entry`) must refuse it exactly as the step-by-step checks do."""
    lines = make_chain(3)
    mangled = _rehashed_as_written(mangle(lines[2]))
    assert mangled != lines[2]
    lines[2] = mangled
    assert _quick_entry(mangled.rstrip(b"\n"), "s1", True) is None
    vault = Vault.create(tmp_path)
    vault.session_path("s1").write_bytes(b"".join(lines))
    r = verify_session(vault, "s1", workers=workers)
    assert (r.intact, r.broken_at_seq, r.kind) == (False, 3, "not_canonical"), r.as_dict()


def test_the_fast_path_takes_exactly_the_line_the_writer_wrote(tmp_path):
    lines = make_chain(3)
    assert _quick_entry(lines[2].rstrip(b"\n"), "s1", True) == orjson.loads(lines[2])
    assert _quick_entry(lines[2].rstrip(b"\n"), "another-session", True) is None


def _lying_hash(line: bytes) -> bytes:
    """Another entry's hash (well formed) put in place of the line's own."""
    entry = orjson.loads(line)
    return line.replace(entry["hash"].encode(), hashlib.sha256(b"another").hexdigest().encode(), 1)


_FORGERIES = {
    "lying-hash": _lying_hash,
    "edited-stale-hash": lambda b: b.replace(b'"agent":"', b'"agent":"x', 1),
    "other-prev-rehashed": lambda b: _rehashed(b, prev=hashlib.sha256(b"elsewhere").hexdigest()),
    "uppercase-prev-rehashed": lambda b: _rehashed(b, prev=orjson.loads(b)["prev"].upper()),
    "wrong-seq-rehashed": lambda b: _rehashed(b, seq=orjson.loads(b)["seq"] + 1),
    "reordered-keys-rehashed": lambda b: _rehashed_as_written(_swap_first_members(b)),
    # no `hash` member at all: the digest spliced out of the line (None) equalled the absent hash (None)
    "hash-key-renamed": lambda b: b.replace(b',"hash":', b',"h":', 1),
}


@pytest.mark.parametrize("forgery", sorted(_FORGERIES))
def test_the_fast_path_given_the_expected_prev_refuses_a_forged_line(forgery):
    """`_quick_entry(..., prev)` as the walk calls it: a forged line is left to the step-by-step checks (a wrong
    seq is the chain check's to find: the line itself holds)."""
    lines = make_chain(3)
    expected_prev = orjson.loads(lines[1])["hash"]
    assert _quick_entry(lines[2].rstrip(b"\n"), "s1", True, expected_prev) == orjson.loads(lines[2])
    forged = _FORGERIES[forgery](lines[2]).rstrip(b"\n")
    got = _quick_entry(forged, "s1", True, expected_prev)
    assert got is None or (forgery == "wrong-seq-rehashed" and got["seq"] == 4)
    assert (_quick_entry(forged, "s1", True) is not None) == (forgery in ("other-prev-rehashed", "wrong-seq-rehashed"))



@pytest.mark.parametrize("workers", [1, None])
def test_keys_in_code_point_order_where_utf16_order_differs_are_refused(tmp_path, both_canonical_paths, workers):
    """JCS sorts keys by UTF-16 code unit, orjson (and a naive forger) by code point; the two differ only between
    a character beyond the BMP and one in U+E000..U+FFFF. A line whose keys are rewritten into code-point order
    and rehashed reads as the same entry: on either implementation, and whether or not the block-wide key check
    is skipped (it is with the C accelerator), the verifier must call it not canonical."""
    body = {"\U0001f600": 1, "\ue000": 2}
    lines, prev = [], "0" * 64
    for i in range(1, 4):
        f = fields(n=i)
        f["response"] = {**f["response"], "body": body}
        entry, line = chain_entry(f, i, prev)
        prev = entry["hash"]
        lines.append(line)
    utf16_order = '{"\U0001f600":1,"\ue000":2}'.encode()
    assert utf16_order in lines[2]  # what the writer wrote
    forged = _rehashed_as_written(lines[2].replace(utf16_order, '{"\ue000":2,"\U0001f600":1}'.encode(), 1))
    assert orjson.loads(forged) != orjson.loads(lines[2]) and orjson.loads(forged)["response"] == orjson.loads(
        lines[2]
    )["response"]
    lines[2] = forged
    vault = Vault.create(tmp_path)
    vault.session_path("s1").write_bytes(b"".join(lines))
    r = verify_session(vault, "s1", workers=workers)
    assert (r.intact, r.broken_at_seq, r.kind) == (False, 3, "not_canonical"), r.as_dict()
