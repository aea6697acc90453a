"""chain.link_pieces + chain.link (the writer's split of chaining) give exactly chain_entry's entry and line."""

from __future__ import annotations

import hashlib

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal import chain
from journal.canonical import MAX_SAFE_INTEGER, CanonicalError, canonical_bytes
from journal.chain import GENESIS, chain_entry, entry_hash, link, link_pieces
from tests.support.journal_factories import fields

_chars = st.characters(exclude_categories=("Cs",))
# Characters that make canonical forms differ from orjson's, need escaping, or look like the line's own syntax.
_tricky = st.sampled_from(['"', "\\", "\n", "\x00", "\u2028", "\ue000", "\U0001f600", ",", ":", "}"])
_texts = st.text(_chars, max_size=10) | st.text(_tricky, max_size=5) | st.sampled_from(["hash", "seq", "prev", "mcp"])
_scalars = (
    st.none() | st.booleans() | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15) | _texts
)
_values = st.recursive(
    _scalars, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(_texts, kids, max_size=4), max_leaves=20
)
_hex64 = st.binary(min_size=8, max_size=8).map(lambda b: hashlib.sha256(b).hexdigest())


def _same_as_chain_entry(f: dict, seq: int, prev: str, *, eleven_keys: bool = True) -> None:
    """link's entry and line are the canonical ones; for the contract's fields also chain_entry's."""
    pieces = link_pieces(f)
    assert pieces is not None
    entry, parts = link(f, pieces, seq, prev)
    want = {**f, "seq": seq, "prev": prev}
    want["hash"] = entry_hash(want)
    assert entry == want and list(entry) == list(want)
    assert b"".join(parts) == canonical_bytes(want) + b"\n"
    if eleven_keys:  # chain_entry's splice relies on the contract's keys
        assert (entry, b"".join(parts)) == chain_entry(f, seq, prev)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.integers(min_value=1, max_value=MAX_SAFE_INTEGER), _hex64)
def test_link_gives_chain_entry_bytes_for_any_values(data, seq, prev):
    f = fields(n=seq % 1000)
    f["response"]["body"] = data.draw(_values)
    f["request"]["body"] = data.draw(_values)
    f["mcp"] = data.draw(st.none() | st.dictionaries(_texts, _values, max_size=4))
    f["prompt_ref"] = data.draw(st.none() | _texts)
    f["principal"] = data.draw(_texts.filter(bool))
    _same_as_chain_entry(f, seq, prev)


@given(st.dictionaries(st.text(_chars, min_size=1, max_size=6), _values, max_size=6), _hex64)
def test_link_gives_chain_entry_bytes_for_any_top_level_keys(extra, prev):
    """link_pieces is not tied to the eleven keys: any keys, sorting anywhere around hash/prev/seq."""
    f = {"agent": "a", **{k: v for k, v in extra.items() if k not in ("seq", "prev", "hash")}}
    _same_as_chain_entry(f, 3, prev, eleven_keys=False)


def test_the_line_verifies_and_reads_back(tmp_path):
    f = fields(n=5)
    entry, parts = link(f, link_pieces(f), 1, GENESIS)
    line = b"".join(parts)
    assert line.endswith(b"\n") and orjson.loads(line) == entry
    assert canonical_bytes(entry) + b"\n" == line


def test_fields_holding_the_placeholder_are_left_to_chain_entry():
    f = fields()
    f["response"]["body"] = {"x": chain._SLOT}
    assert link_pieces(f) is None
    f["response"]["body"] = {chain._SLOT: 1}
    assert link_pieces(f) is None


@pytest.mark.parametrize("key", ["seq", "prev", "hash"])
def test_fields_that_already_hold_a_chain_key_are_left_to_chain_entry(key):
    assert link_pieces({**fields(), key: 1}) is None


def test_no_key_before_hash_is_left_to_chain_entry():
    assert link_pieces({"mcp": None, "zeta": 1}) is None


def test_a_prev_that_needs_escaping_goes_through_chain_entry():
    """Only a damaged file gives such a prev; the line must still be canonical."""
    f = fields()
    odd = 'a"' + "0" * 62
    entry, parts = link(f, link_pieces(f), 2, odd)
    assert b"".join(parts) == chain_entry(f, 2, odd)[1]
    assert entry["prev"] == odd


def test_no_canonical_form_raises_like_canonical_bytes():
    f = fields()
    f["response"]["body"] = {"n": 2**60}
    with pytest.raises(CanonicalError):
        link_pieces(f)


try:
    from journal._canonical_speedups import slot_cut as c_slot_cut
except ImportError:  # not built: test_canonical_speedups.py says why
    c_slot_cut = None

needs_c = pytest.mark.skipif(c_slot_cut is None, reason="the C accelerator is not built")
_SLOTS = st.sampled_from([chain._SLOT_B, b"S", b"SS", b'"', b"\x00\x00", b'"prev":"'])
_FRAGMENTS = st.lists(
    st.sampled_from([b',"hash":"', b'"prev":"', b'"seq":"', b'"', b"{", b"}", b",", b"0"]) | st.binary(max_size=6)
    | st.just(b"<slot>"),
    max_size=14,
)


def _joined(fragments: list[bytes], slot: bytes) -> bytes:
    return b"".join(slot if f == b"<slot>" else f for f in fragments)


@needs_c
@settings(max_examples=3000, deadline=None, derandomize=True)
@given(_SLOTS, _FRAGMENTS, st.lists(_FRAGMENTS, min_size=4, max_size=4), st.booleans())
def test_the_c_slot_cut_cuts_any_bytes_as_the_python_one(slot, fragments, around, shaped):
    """journal/_canonical_speedups.c `slot_cut` against chain.slot_cut on bytes made of the pieces it looks for
    (the placeholder, the three keys, quotes, anything), bounds and all; half of them shaped like a line that
    cuts (the three members in order) with anything, more placeholders too, around them."""
    if shaped:
        a, b, c, d = (_joined(f, slot) for f in around)
        data = b"".join((a, b',"hash":"', slot, b'"', b, b'"prev":"', slot, c, b'"seq":"', slot, b'"', d))
    else:
        data = _joined(fragments, slot)
    assert c_slot_cut(data, slot) == chain.slot_cut(data, slot)


@needs_c
@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.data())
def test_link_pieces_is_the_same_with_and_without_the_c_cut(data):
    f = fields(n=5)
    f["response"]["body"] = data.draw(_values | st.just(chain._SLOT))
    slot_or_values = _values | st.just(chain._SLOT)
    f["mcp"] = data.draw(st.none() | st.dictionaries(_texts | st.just("prev"), slot_or_values, max_size=3))
    from journal import canonical

    was = canonical.slot_cut
    try:
        canonical.slot_cut = c_slot_cut
        with_c = link_pieces(f)
        canonical.slot_cut = None
        without = link_pieces(f)
    finally:
        canonical.slot_cut = was
    assert with_c == without


def test_the_c_cut_follows_the_speedups_switch():
    from journal import canonical

    was = canonical.SPEEDUPS
    try:
        assert canonical.use_speedups(False) is False and canonical.slot_cut is None
        f = fields(n=6)
        assert link_pieces(f) is not None  # the Python cut
        if canonical.use_speedups(True):
            assert canonical.slot_cut is c_slot_cut
    finally:
        canonical.use_speedups(was)
