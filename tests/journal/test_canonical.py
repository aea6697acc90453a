"""The proof behind journal/canonical.py (docs/contract.md "Canonical form and hash").

- every vector of tests/support/vectors/canonical.json (generated from the `rfc8785` oracle);
- values with no canonical form raise CanonicalError;
- differential property test: canonical_bytes == rfc8785.dumps for generated JSON values;
- fast-path proof: for values with no float and only BMP keys, orjson's OPT_SORT_KEYS output
  equals JCS, and the fast path (`_fast`) never returns bytes that differ from JCS: it declines
  every value holding a float, NaN or infinity, and keys whose code-point order could differ from
  their UTF-16 order;
- line property: a canonical line parses back to a value with the same canonical bytes.

Each test runs twice: with the C accelerator (journal/_canonical_speedups.c) and with the pure-Python code.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import hashlib
import importlib.util
import json
import math
import uuid
from pathlib import Path

import orjson
import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal import canonical
from journal.canonical import MAX_SAFE_INTEGER, CanonicalError, canonical_bytes, format_number

# Every test here runs on the C accelerator and on the pure-Python fallback (tests/journal/conftest.py).
pytestmark = pytest.mark.usefixtures("both_canonical_paths")


def _fast(value: object) -> bytes | None:
    """The fast path in use (looked up at each call: the fixture switches it)."""
    return canonical._fast(value)


VECTOR_DIR = Path(__file__).resolve().parents[1] / "support" / "vectors"
VECTORS = json.loads((VECTOR_DIR / "canonical.json").read_text(encoding="utf-8"))

PROPERTY_SETTINGS = settings(
    max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


# ---------------------------------------------------------------------------------------------
# (a) vectors


def _load_generator():
    spec = importlib.util.spec_from_file_location("make_vectors", VECTOR_DIR / "make_vectors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_vector_file_is_up_to_date():
    assert (VECTOR_DIR / "canonical.json").read_text(encoding="utf-8") == _load_generator().render()


def test_vectors_cover_the_required_cases():
    names = {v["name"] for v in VECTORS}
    assert len(names) == len(VECTORS), "vector names must be unique"
    sources = {v["value_json"] for v in VECTORS}
    for required in ("1.0", "1e16", "1e-7", "-0.0", "0.1", "1e21", "1e-6", "5e-324", "1.7976931348623157e308",
                     "9007199254740991", "-9007199254740991", "0", "-1", "{}", "[]", '""'):
        assert required in sources, required
    # A journal entry with exactly the fourteen keys of the contract.
    entry = json.loads(next(v["value_json"] for v in VECTORS if v["name"] == "journal entry seq 1"))
    assert len(entry) == 14


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_vector(vector):
    value = json.loads(vector["value_json"])
    expected = vector["canonical"].encode("utf-8")
    got = canonical_bytes(value)
    assert got == expected
    assert hashlib.sha256(got).hexdigest() == vector["sha256"]
    # The oracle agrees (guards against a hand-edited vector file).
    assert rfc8785.dumps(value) == expected
    # The convenience `value` field means the same thing (floats may come back as ints, which
    # write the same).
    assert canonical_bytes(vector["value"]) == expected


@pytest.mark.parametrize(
    ("value_json", "expected_type"),
    [("1.0", float), ("-0.0", float), ("1e16", float), ("123456789012345680000.0", float), ("1", int)],
)
def test_vector_value_json_keeps_floats_floats(value_json, expected_type):
    assert type(json.loads(value_json)) is expected_type
    assert any(v["value_json"] == value_json for v in VECTORS)


def test_vector_float_is_a_float():
    vec = {v["name"]: v for v in VECTORS}
    negzero = json.loads(vec["float -0.0"]["value_json"])
    assert type(negzero) is float and math.copysign(1.0, negzero) == -1.0


def test_journal_vectors_form_a_chain():
    vec = {v["name"]: v for v in VECTORS}
    prev = "0" * 64
    for n in (1, 2):
        entry = json.loads(vec[f"journal entry seq {n}"]["value_json"])
        without = json.loads(vec[f"journal entry seq {n} without hash"]["value_json"])
        assert {k: v for k, v in entry.items() if k != "hash"} == without
        assert entry["prev"] == prev
        assert entry["hash"] == hashlib.sha256(canonical_bytes(without)).hexdigest()
        assert entry["hash"] == vec[f"journal entry seq {n} without hash"]["sha256"]
        prev = entry["hash"]


def test_emoji_key_sorts_before_private_use_key():
    # Code-point order would put U+E000 first; UTF-16 order puts the surrogate pair D83D first.
    value = {"\ue000": 1, "\U0001f600": 2}
    assert canonical_bytes(value) == '{"\U0001f600":2,"\ue000":1}'.encode()
    assert orjson.dumps(value, option=orjson.OPT_SORT_KEYS) != canonical_bytes(value)


# ---------------------------------------------------------------------------------------------
# (b) values with no canonical form


class _Str(str):
    pass


@pytest.mark.parametrize(
    "value",
    [
        MAX_SAFE_INTEGER + 1,
        -MAX_SAFE_INTEGER - 1,
        2**63,
        2**64,
        -(2**63),
        10**30,
        [1, 2, MAX_SAFE_INTEGER + 1],
        {"a": {"b": -(2**53)}},
        [1.5, MAX_SAFE_INTEGER + 1],  # slow path (a float is present)
        float("nan"),
        float("inf"),
        float("-inf"),
        [float("nan")],
        {"a": float("inf")},
        {1: "a"},
        {None: "a"},
        {True: "a"},
        {1.5: "a"},
        {("a",): 1},
        {"a": {2: "b"}},
        {"a": 1.5, 3: "b"},  # slow path
        {"a", "b"},
        frozenset(),
        [{"a"}],
        b"bytes",
        bytearray(b"x"),
        {"a": b"x"},
        (1, 2),
        1 + 2j,
        object(),
        ["\ud800", 1.5],  # lone surrogate on the slow path
        {"\ud800": 1.5},
        {"\udc00": 1, "\U0001f600": 2},  # non-BMP key forces the slow path
        ["\udfff", {"\U0001f600": 1}],
    ],
    ids=repr,
)
def test_no_canonical_form_raises(value):
    with pytest.raises(CanonicalError):
        canonical_bytes(value)


@pytest.mark.parametrize(
    "value", ["\ud800", ["\udc00"], {"a": "\ud800"}, {"\ud800": 1}, {"\udbff": "x"}], ids=repr
)
def test_lone_surrogate_on_fast_path_raises_canonical_error(value):
    with pytest.raises(CanonicalError):
        canonical_bytes(value)


def test_deep_nesting_on_fast_path():
    value: list = []
    for _ in range(300):
        value = [value]
    assert canonical_bytes(value) == rfc8785.dumps(value)


def test_deep_nesting_within_orjson_limit():
    value: list = []
    for _ in range(200):
        value = [value]
    assert canonical_bytes(value) == rfc8785.dumps(value)


def test_str_subclass_and_subclassed_containers_are_refused():
    class D(dict):
        pass

    class L(list):
        pass

    for value in (D(a=1), L([1]), {"a": D()}, [L()]):
        with pytest.raises(CanonicalError):
            canonical_bytes(value)


def test_bool_is_not_an_integer():
    assert canonical_bytes([True, False, 1, 0]) == b"[true,false,1,0]"
    assert canonical_bytes([True, 1.5]) == b"[true,1.5]"


def test_format_number_refuses_non_finite():
    for f in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(CanonicalError):
            format_number(f)


# ---------------------------------------------------------------------------------------------
# strategies

# Scalar values of a string: everything but lone surrogates (category Cs). Includes control
# characters (Cc), U+2028, U+E000..U+FFFF and everything beyond the BMP.
_chars = st.characters(exclude_categories=("Cs",))
# Characters where code-point and UTF-16 order disagree, plus neighbours, weighted in so
# hypothesis hits the interesting key orders often.
_tricky_chars = st.sampled_from(
    ["a", "z", "\x00", "\x1f", "\x7f", "\u2028", "\ud7ff", "\ue000", "\uf8ff", "\ufb33", "\uffff",
     "\U00010000", "\U0001f600", "\U0001f680", "\U0010ffff", '"', "\\", "/", "\u00e9"]
)
_texts = st.text(_chars, max_size=12) | st.text(_tricky_chars, max_size=4)
_bmp_chars = st.characters(exclude_categories=("Cs",), max_codepoint=0xFFFF)
_bmp_texts = st.text(_bmp_chars, max_size=12) | st.text(
    _tricky_chars.filter(lambda c: ord(c) <= 0xFFFF), max_size=4
)

_safe_ints = st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
_edge_ints = st.sampled_from([0, -1, 1, MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 2**31, -(2**31), 2**32])
_ints = _safe_ints | _edge_ints
_finite_floats = st.floats(allow_nan=False, allow_infinity=False)
_edge_floats = st.sampled_from(
    [0.0, -0.0, 1.0, -1.0, 0.1, 1e16, 1e21, 1e-6, 1e-7, 5e-324, 1.7976931348623157e308, 1.2345678901234568e20,
     9007199254740992.0, 1e20, 1e-5, 123.0, 0.5]
)
_floats = _finite_floats | _edge_floats


def _json(scalars: st.SearchStrategy, keys: st.SearchStrategy) -> st.SearchStrategy:
    return st.recursive(
        scalars,
        lambda children: st.lists(children, max_size=5) | st.dictionaries(keys, children, max_size=5),
        max_leaves=15,
    )


json_values = _json(st.none() | st.booleans() | _ints | _floats | _texts, _texts)
# No float anywhere, no key beyond the BMP (string values may hold any scalar value).
fast_path_values = _json(st.none() | st.booleans() | _ints | _texts, _bmp_texts)
_fast_path_scalars = st.none() | st.booleans() | _ints | _texts


def _has_float_or_non_bmp_key(v: object) -> bool:
    if type(v) is float:
        return True
    if type(v) is list:
        return any(_has_float_or_non_bmp_key(x) for x in v)
    if type(v) is dict:
        return any(any(ord(c) > 0xFFFF for c in k) for k in v) or any(
            _has_float_or_non_bmp_key(x) for x in v.values()
        )
    return False


# A value that surely holds a float or a non-BMP key somewhere, at any depth.
_non_bmp_key = st.text(_chars, max_size=4).flatmap(
    lambda s: st.sampled_from(["\U00010000", "\U0001f600", "\U0010ffff"]).map(lambda c: s + c)
)
_poison = _floats | st.builds(lambda k, v: {k: v}, _non_bmp_key, _fast_path_scalars)


def _embed(children: st.SearchStrategy) -> st.SearchStrategy:
    in_list = st.builds(
        lambda before, child, after: [*before, child, *after],
        st.lists(_fast_path_scalars, max_size=2),
        children,
        st.lists(_fast_path_scalars, max_size=2),
    )
    in_dict = st.builds(
        lambda others, key, child: {**others, key: child},
        st.dictionaries(_bmp_texts, _fast_path_scalars, max_size=3),
        _bmp_texts,
        children,
    )
    return in_list | in_dict


poisoned_values = st.recursive(_poison, _embed, max_leaves=6)


# ---------------------------------------------------------------------------------------------
# (c) differential test against the oracle


@PROPERTY_SETTINGS
@given(json_values)
def test_canonical_bytes_equals_rfc8785(value):
    assert canonical_bytes(value) == rfc8785.dumps(value)
    # (d) the fast path is taken whenever there is no float and no non-BMP key, and is never wrong.
    fast = _fast(value)
    assert fast is None or fast == rfc8785.dumps(value)
    if not _has_float_or_non_bmp_key(value) and not _mixes_non_bmp_and_high_bmp(value):
        assert fast is not None


@PROPERTY_SETTINGS
@given(st.dictionaries(_texts, _ints | st.none(), min_size=2, max_size=12))
def test_key_order_equals_rfc8785(value):
    assert canonical_bytes(value) == rfc8785.dumps(value)


@settings(max_examples=1000, deadline=None, derandomize=True)
@given(_floats)
def test_format_number_equals_rfc8785(f):
    assert format_number(f).encode() == rfc8785.dumps(f)
    assert canonical_bytes(f) == rfc8785.dumps(f)
    assert canonical_bytes([f]) == b"[" + rfc8785.dumps(f) + b"]"


@PROPERTY_SETTINGS
@given(st.integers())
def test_integers_outside_the_safe_range_raise(n):
    if -MAX_SAFE_INTEGER <= n <= MAX_SAFE_INTEGER:
        assert canonical_bytes(n) == str(n).encode() == rfc8785.dumps(n)
    else:
        with pytest.raises(CanonicalError):
            canonical_bytes(n)
        with pytest.raises(CanonicalError):
            canonical_bytes([n, 1.5])


# ---------------------------------------------------------------------------------------------
# (d) the fast path is justified


@PROPERTY_SETTINGS
@given(fast_path_values)
def test_orjson_sorted_equals_jcs_without_floats_and_non_bmp_keys(value):
    assert orjson.dumps(value, option=orjson.OPT_SORT_KEYS) == rfc8785.dumps(value)
    assert _fast(value) == (None if _mixes_non_bmp_and_high_bmp(value) else rfc8785.dumps(value))
    assert canonical_bytes(value) == rfc8785.dumps(value)


def _mixes_non_bmp_and_high_bmp(value: object) -> bool:
    """The fast path declines (conservatively) when the text holds both kinds of character anywhere."""
    data = orjson.dumps(value)
    return any(b in data for b in (b"\xf0", b"\xf1", b"\xf2", b"\xf3", b"\xf4")) and (
        b"\xee" in data or b"\xef" in data
    )


@PROPERTY_SETTINGS
@given(poisoned_values)
def test_fast_path_is_never_wrong_for_floats_and_non_bmp_keys(value):
    assert _has_float_or_non_bmp_key(value)
    fast = _fast(value)
    assert fast is None or fast == rfc8785.dumps(value)
    assert canonical_bytes(value) == rfc8785.dumps(value)


@pytest.mark.parametrize(
    "value",
    [1.0, [0.0], {"a": [1, {"b": -0.0}]}, {"\U0001f600": 1, "\ue000": 2}, [float("nan")], {"a": float("inf")},
     [[{"x\U0010ffff": 1, "x\uffff": 2}]]],
    ids=repr,
)
def test_fast_path_declines_floats_and_differing_key_orders(value):
    assert _fast(value) is None


# ---------------------------------------------------------------------------------------------
# (e) each line is itself in canonical form

# An integral float with 2^53 <= |f| < 1e21 writes as an integer literal (1e16 ->
# 10000000000000000) that parses back as an int outside +-(2^53-1) (json.loads always, orjson
# below 2^64); see the xfail below.
def _reparses_as_unsafe_int(v: object) -> bool:
    if type(v) is float:
        return v.is_integer() and MAX_SAFE_INTEGER < abs(v) < 1e21
    if type(v) is list:
        return any(_reparses_as_unsafe_int(x) for x in v)
    if type(v) is dict:
        return any(_reparses_as_unsafe_int(x) for x in v.values())
    return False


@PROPERTY_SETTINGS
@given(json_values.filter(lambda v: not _reparses_as_unsafe_int(v)))
def test_canonical_line_reparses_to_same_bytes(value):
    line = canonical_bytes(value)
    assert canonical_bytes(orjson.loads(line)) == line
    assert canonical_bytes(json.loads(line)) == line


@pytest.mark.parametrize("value", [1e16, 9007199254740992.0, -1e16, 1e19, 1e20], ids=repr)
def test_big_integral_float_is_kept_out_of_entries(value):
    """JCS writes these as integer literals beyond 2^53-1 that cannot be read back, so the
    journal never lets one into an entry: a JSON body holding one is recorded as text."""
    from journal.bodies import parse_json_strict
    from journal.canonical import check_reads_back

    with pytest.raises(CanonicalError):
        check_reads_back({"x": [value]})
    text = json.dumps({"x": value}).encode()
    assert parse_json_strict(text) == (False, None)
    assert parse_json_strict(b'{"x": 1.5e3}') == (True, {"x": 1500.0})


def test_entry_line_is_canonical():
    vec = {v["name"]: v for v in VECTORS}
    line = vec["journal entry seq 2"]["canonical"].encode() + b"\n"
    assert line.endswith(b"\n") and b"\n" not in line[:-1]
    assert canonical_bytes(orjson.loads(line)) == line[:-1]


@pytest.mark.parametrize(
    "line",
    [b'{"a": 1}', b'{"b":1,"a":2}', b'{"a":"\\u0041"}', b'{"a":1.0}', b'{"a":1e16}', b'{"a":"\\/"}',
     b'{"a":-0}', b'{"a":1E2}', b'{"\xee\x80\x80":1,"\xf0\x9f\x98\x80":2}', b'{"a":1,"a":1}'],
)
def test_non_canonical_lines_are_detected(line):
    # A verifier compares the raw bytes with the canonical form of what they parse to.
    assert canonical_bytes(orjson.loads(line)) != line


# ---------------------------------------------------------------------------------------------
# (f) the verifier's line check agrees with canonical_bytes


@PROPERTY_SETTINGS
@given(json_values.filter(lambda v: not _reparses_as_unsafe_int(v)))
def test_is_canonical_line_accepts_canonical_lines(value):
    from journal.canonical import is_canonical_line

    line = canonical_bytes(value)
    assert is_canonical_line(line, orjson.loads(line))


@PROPERTY_SETTINGS
@given(json_values)
def test_is_canonical_line_rejects_orjson_lines_that_differ(value):
    from journal.canonical import is_canonical_line

    line = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    parsed = orjson.loads(line)
    try:
        expected = canonical_bytes(parsed) == line
    except CanonicalError:
        with pytest.raises(CanonicalError):
            is_canonical_line(line, parsed)
        return
    assert is_canonical_line(line, parsed) == expected


@pytest.mark.parametrize(
    "line", [b'{"a":1.0}', b'{"a":1e+16}', b'{"a":[1e21]}', b'{"\xee\x80\x80":1,"\xf0\x9f\x98\x80":2}',
             b'{"a":9007199254740992}', b'{"a":-0.0}']
)
def test_is_canonical_line_examples(line):
    from journal.canonical import is_canonical_line

    parsed = orjson.loads(line)
    try:
        assert not is_canonical_line(line, parsed)
    except CanonicalError:
        pass  # no canonical form at all: rejected too



class _Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class _Point:
    x: int


@pytest.mark.parametrize(
    "value",
    [(1, 2), {"a": (1,)}, datetime.date(2026, 12, 2), {"t": datetime.datetime(2026, 12, 2, 8, 0)},
     uuid.UUID(int=7), [_Colour.RED], _Point(1), {"n": float("nan")}, [float("-inf")]],
    ids=repr,
)
def test_fast_path_declines_what_orjson_writes_but_json_does_not_hold(value):
    """orjson writes these (a tuple as an array, a date, a UUID or an enum member as a string, a dataclass as an
    object, NaN as null); reading its bytes back through the float-refusing decoder tells them from the value,
    and the slow path says they have no canonical form."""
    assert _fast(value) is None
    with pytest.raises(CanonicalError):
        canonical_bytes(value)


@pytest.mark.parametrize("value", [{"a": [1, 2.5]}, [0.1], {"x": 1e16}, -0.0, {"a": {"b": [1, {"c": 1e-7}]}}], ids=repr)
def test_fast_path_declines_finite_floats_that_the_slow_path_writes(value):
    assert _fast(value) is None
    assert canonical_bytes(value) == rfc8785.dumps(value)
