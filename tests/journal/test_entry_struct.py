"""The verifier's typed reading of a proven-canonical line (journal/entry_struct.py) accepts exactly what the
contract's checks accept, and verify reports the same with it as without it, forgeries included."""

from __future__ import annotations

import hashlib

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journal import canonical
from journal import verify as verify_module
from journal.canonical import CanonicalError, canonical_bytes, proven_canonical
from journal.chain import chain_entry
from journal.entry import is_valid_entry, validate_entry
from journal.entry_struct import entry_fields
from journal.vault import Vault
from journal.verify import verify_session
from tests.journal.test_entry_fast import _accepted, _entry, _hex64, _mutations
from tests.journal.test_verify import _rehashed, _rehashed_as_written, make_chain
from tests.support.journal_factories import fields

pytestmark = pytest.mark.skipif(not canonical.SPEEDUPS, reason="the typed reading runs only after the C proof")


@settings(max_examples=4000, deadline=None, derandomize=True)
@given(_mutations(_entry(), [*_entry()]))
def test_the_typed_reading_accepts_exactly_what_the_contract_accepts(entry):
    """Entries mutated every way test_entry_fast.py knows, written in canonical form: where the C proof takes the
    line, the typed reading says yes exactly when the contract's checks do (prev and hash aside, which the
    verifier compares with what it holds: those are given as 64 hex digits here)."""
    if not isinstance(entry, dict):
        entry = {"wrapped": entry}
    try:
        line = canonical_bytes(entry)
    except CanonicalError:
        return
    if not proven_canonical(line):
        return  # floats, escaped keys: the typed reading is never asked
    got = entry_fields(line)
    entry = orjson.loads(line)  # what the line says (200.0 is written 200)
    if _hex64(entry.get("prev")) and _hex64(entry.get("hash")):
        assert (got is not None) == is_valid_entry(entry) == _accepted(validate_entry, entry), line
    elif got is not None:  # accepted although prev or hash is not hex: the verifier's comparison must refuse
        assert type(entry["prev"]) is str and type(entry["hash"]) is str
        assert is_valid_entry(entry, links_known=True)


def test_a_real_entry_is_read_with_its_fields():
    entry = _entry(5)
    got = entry_fields(canonical_bytes(entry))
    assert got is not None
    assert (got.seq, got.ts, got.hash, got.request.method, got.response.status) == (
        5, entry["ts"], entry["hash"], "GET", 200)


@pytest.mark.parametrize("edit", [
    (b'"seq":3', b'"seq":true'), (b'"seq":3', b'"seq":0'), (b'"status":200', b'"status":true'),
    (b'"status":200', b'"status":99'), (b'"status":200', b'"status":null'), (b'"mcp":null', b'"mcp":[]'),
    (b'"mcp":null', b'"mcp":"x"'), (b'"prompt_ref":null', b'"prompt_ref":1'), (b'"effect":"read"', b'"effect":"x"'),
    (b'"capture":"broker"', b'"capture":"Broker"'), (b'"connector":"gmail"', b'"connector":"Gmail"'),
    (b'"agent":"agent-a"', b'"agent":""'), (b'"method":"GET"', b'"method":""'),
    (b'["Accept","application/json"]', b'["Accept","application/json","x"]'),
    (b'["Accept","application/json"]', b'["Accept",1]'), (b'"headers":[[', b'"headers":{"a":[['),
    (b'"ts":"2026-09-22T10:00:03.003Z"', b'"ts":"2026-09-22T10:00:03.003"'),
])
def test_each_kind_of_fault_is_refused(edit):
    line = canonical_bytes(_entry(3))
    assert edit[0] in line
    forged = line.replace(edit[0], edit[1], 1)
    assert entry_fields(forged) is None


def test_a_missing_or_extra_member_is_refused():
    entry = _entry(3)
    for key in entry:
        assert entry_fields(canonical_bytes({k: v for k, v in entry.items() if k != key})) is None, key
    assert entry_fields(canonical_bytes({**entry, "extra": 1})) is None
    assert entry_fields(canonical_bytes({**entry, "request": {**entry["request"], "extra": 1}})) is not None
    no_error = {**entry, "response": {**entry["response"], "status": None}}
    assert entry_fields(canonical_bytes(no_error)) is None
    with_error = {**entry, "response": {**entry["response"], "status": None, "error": "timeout"}}
    assert entry_fields(canonical_bytes(with_error)) is not None


def _both_ways(tmp_path, lines: list[bytes], workers: int | None = 1) -> tuple[dict, dict, int]:
    """The report with the typed reading, the report without it (an `on_entry` turns it off), and how many lines
    the full per-line check was asked for in the first run."""
    vault = Vault.create(tmp_path)
    vault.session_path("s1").write_bytes(b"".join(lines))
    asked = 0
    real = verify_module._quick_entry

    def counting(*args, **kwargs):
        nonlocal asked
        asked += 1
        return real(*args, **kwargs)

    verify_module._quick_entry = counting
    try:
        typed = verify_session(vault, "s1", workers=workers).as_dict()
    finally:
        verify_module._quick_entry = real
    full = verify_session(vault, "s1", workers=workers, on_entry=lambda e: None).as_dict()
    return typed, full, asked


def test_an_intact_chain_is_read_without_a_dict_per_line(tmp_path):
    typed, full, asked = _both_ways(tmp_path, make_chain(12))
    assert typed == full and typed["intact"] and typed["entries"] == 12
    assert asked == 0


@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(2, 10))
def test_forgeries_get_the_same_report_with_and_without_the_typed_reading(tmp_path_factory, data, n):
    lines = make_chain(n)
    i = data.draw(st.integers(0, n - 1))
    how = data.draw(st.sampled_from(["edit-rehash", "prev", "seq", "drop", "swap", "session", "lying-hash",
                                     "gateway", "reorder"]))
    if how == "edit-rehash":
        lines[i] = _rehashed(lines[i], principal="mallory@example.com")
    elif how == "prev":
        lines[i] = _rehashed(lines[i], prev=hashlib.sha256(b"elsewhere").hexdigest())
    elif how == "seq":
        lines[i] = _rehashed(lines[i], seq=orjson.loads(lines[i])["seq"] + 1)
    elif how == "drop":
        del lines[i]
    elif how == "swap" and i + 1 < n:
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
    elif how == "session":
        lines[i] = _rehashed(lines[i], session="s2")
    elif how == "lying-hash":
        at = lines[i].index(b'"hash":"') + 8
        lines[i] = lines[i][:at] + (b"1" if lines[i][at:at + 1] == b"0" else b"0") + lines[i][at + 1:]
    elif how == "gateway":
        e = orjson.loads(lines[i])
        lines[i] = chain_entry({**fields(n=i + 1), "capture": "gateway"}, e["seq"], e["prev"])[1]
    elif how == "reorder":
        lines[i] = _rehashed_as_written(lines[i].replace(b'{"agent":"agent-a","capture":"broker"',
                                                         b'{"capture":"broker","agent":"agent-a"', 1))
    for workers in (1, None):
        typed, full, _ = _both_ways(tmp_path_factory.mktemp("v"), lines, workers)
        assert typed == full, how
