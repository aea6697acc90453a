"""The optional C accelerator of journal/canonical.py (journal/_canonical_speedups.c) against its pure-Python
reference, and the choice between them.

- plain_json: one test per kind of value the msgspec read-back of `_fast` exists to refuse, the nesting bound,
  cycles, and a differential property test (random JSON-like values with tuples, floats, NaN/inf, subclasses,
  enum members, big integers, lone surrogates, keys beyond the BMP and in U+E000..U+FFFF, nesting 200-1000):
  plain_json equals the rule written out in Python, and `_fast_plain` gives what `_fast_read_back` gives;
- jcs_line: hostile lines (truncations, bad UTF-8, escapes JCS does not write, 10^5-deep nesting), and
  differential property tests on canonical lines, orjson's lines and byte mutations of real journal lines:
  a yes is always the canonical form (the `rfc8785` oracle and `_canonical_value_read_back` agree), and every
  float-free canonical line whose keys hold no escape gets a yes;
- BROKER_NO_SPEEDUPS selects the fallback; where a C compiler exists the install built the extension.

test_canonical.py and test_canonical_value.py run whole on both paths (tests/journal/conftest.py).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import decimal
import enum
import json
import os
import shlex
import shutil
import sys
import sysconfig
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import rfc8785
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from journal import canonical
from journal.canonical import MAX_SAFE_INTEGER, _canonical_value_read_back, _fast_read_back, canonical_bytes
from journal.chain import chain_entry
from journal.vault import Vault
from journal.verify import verify_session
from tests.journal.test_canonical import _texts, json_values, poisoned_values
from tests.support.journal_factories import fields, has_float

try:
    from journal import _canonical_speedups as speedups
except ImportError:  # not built: the C tests are skipped, test_the_extension_is_built says why
    speedups = None

needs_c = pytest.mark.skipif(speedups is None, reason="the C accelerator is not built")
SETTINGS = settings(max_examples=400, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DEPTH = 254  # containers orjson still writes (it refuses 255)


def _nested(depth: int, leaf: object = 1, kind: str = "list") -> object:
    value = leaf
    for i in range(depth):
        use_list = kind == "list" or (kind == "mixed" and i % 2)
        value = [value] if use_list else {"k": value}
    return value


# ---------------------------------------------------------------------------------------------
# choosing the implementation


@pytest.fixture(autouse=True, scope="module")
def _c_path() -> Iterator[None]:
    """The functions of canonical.py under test here run on the accelerator, whatever BROKER_NO_SPEEDUPS says
    (the pure-Python ones are called by name: _fast_read_back, _canonical_value_read_back)."""
    was = canonical.SPEEDUPS
    canonical.use_speedups(True)
    yield
    canonical.use_speedups(was)


def test_no_speedups_selects_the_fallback(monkeypatch):
    monkeypatch.setenv("BROKER_NO_SPEEDUPS", "1")
    assert canonical._load_speedups() is None
    monkeypatch.setenv("BROKER_NO_SPEEDUPS", "0")
    assert canonical._load_speedups() is speedups
    monkeypatch.delenv("BROKER_NO_SPEEDUPS")
    assert canonical._load_speedups() is speedups


@needs_c
def test_an_extension_older_than_its_source_is_not_used(tmp_path, monkeypatch):
    """A stale build (journal/_canonical_speedups.c changed by a `git pull` after the in-place build, or a
    rebuild that failed: setup.py's optional=True keeps the old file) may prove what the current rules refuse:
    it is not loaded, and the pure-Python reference runs instead."""
    source = tmp_path / "_canonical_speedups.c"
    source.write_text("/* newer than the build */")
    built = Path(speedups.__file__).stat().st_mtime_ns
    os.utime(source, ns=(built + 10**9, built + 10**9))
    monkeypatch.setattr(canonical, "_SOURCE", str(source), raising=False)
    assert canonical._import_speedups() is None and canonical._load_speedups() is None
    os.utime(source, ns=(built - 10**9, built - 10**9))  # built from it: used
    assert canonical._import_speedups() is speedups
    # an install that ships no source (a wheel): used
    monkeypatch.setattr(canonical, "_SOURCE", str(tmp_path / "absent.c"), raising=False)
    assert canonical._import_speedups() is speedups


def test_use_speedups_switches_every_function():
    try:
        assert canonical.use_speedups(False) is False and canonical.SPEEDUPS is False
        assert canonical._fast is canonical._fast_read_back and canonical._jcs_line is None
        assert canonical.use_speedups(True) is (speedups is not None) is canonical.SPEEDUPS
        if speedups is not None:
            assert canonical._fast is canonical._fast_plain
            assert (canonical._plain_json, canonical._jcs_line) == (speedups.plain_json, speedups.jcs_line)
    finally:
        canonical.use_speedups(True)


def test_the_extension_is_built():
    """`./scripts/setup` (pip's editable install) compiles it wherever a C compiler exists; the install still
    succeeds without one (optional=True), and then this test says how to get it."""
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")[0]
    if shutil.which(cc) is None:
        pytest.skip(f"no C compiler ({cc}): journal/canonical.py runs its pure-Python code")
    headers = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    if not os.path.exists(headers):
        pytest.skip(f"no Python headers ({headers}; Debian: python3-dev): canonical.py runs its pure-Python code")
    assert speedups is not None, (
        "journal/_canonical_speedups.c was not built although a C compiler exists: install Python's headers "
        "(python3-dev) and run `rm .venv/.installed; ./scripts/setup`"
    )
    assert canonical._import_speedups() is speedups, (
        "journal/_canonical_speedups.c changed after it was built, so canonical.py runs its pure-Python code: "
        "run ./scripts/setup (it rebuilds it; if it stays stale, the build failed: `rm .venv/.installed`, run it "
        "again and read pip's output)"
    )


# ---------------------------------------------------------------------------------------------
# plain_json: what the read-back refused, one case at a time


class _Str(str):
    pass


class _Int(int):
    pass


class _Dict(dict):
    pass


class _List(list):
    pass


class _Colour(enum.Enum):
    RED = "red"


class _Name(enum.StrEnum):
    A = "a"


class _Num(enum.IntEnum):
    ONE = 1


@dataclasses.dataclass
class _Point:
    x: int


_NOT_PLAIN = [
    1.5, 0.0, -0.0, 1e16, float("nan"), float("inf"), float("-inf"),  # floats, NaN/inf (orjson writes null)
    (1, 2), (), {"a": (1,)},  # tuples (orjson writes arrays)
    _Colour.RED, _Name.A, _Num.ONE, [_Name.A], {"a": _Num.ONE},  # enum members (the last two read back equal)
    datetime.date(2026, 12, 2), datetime.datetime(2026, 12, 2, 8, 0), datetime.time(8, 0), uuid.UUID(int=7),
    _Point(1),  # orjson writes these as strings / an object
    _Str("a"), _Int(1), _Dict(), _List(), collections.OrderedDict(), collections.defaultdict(list),
    {"a": _Str("x")}, [_Int(2)], {_Str("k"): 1},  # subclasses, also inside and as a key
    MAX_SAFE_INTEGER + 1, -MAX_SAFE_INTEGER - 1, 2**63, 2**64, -(2**64), 10**30, [2**53],  # big integers
    {1: "a"}, {None: "a"}, {True: 1}, {("a",): 1}, {1.5: 1},  # keys that are not strings
    b"x", bytearray(b"x"), memoryview(b"x"), {"a"}, frozenset(), 1 + 2j, decimal.Decimal("1"), object(),
]


@needs_c
@pytest.mark.parametrize("value", _NOT_PLAIN, ids=repr)
def test_plain_json_refuses_what_the_read_back_refused(value):
    assert speedups.plain_json(value) is False
    assert canonical._fast_plain(value) is None
    # The reference declines them too, but for enum members equal to their value (see _fast_plain).
    assert _fast_read_back(value) is None or _holds_enum(value)


_PLAIN = [None, True, False, 0, -1, MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, "", "a\x00\u2028\U0001f600", [], {},
          {"a": [1, "b", None, True, {"c": {}}]}, {"\ue000": 1}, {"\U0001f600": 1}, _nested(DEPTH - 1, 7),
          _nested(DEPTH, 7), _nested(DEPTH, "x", "dict"), _nested(DEPTH, None, "mixed")]


@needs_c
@pytest.mark.parametrize("value", _PLAIN, ids=lambda v: repr(v)[:40])
def test_plain_json_takes_plain_values_that_orjson_writes(value):
    assert speedups.plain_json(value) is True
    assert canonical._fast_plain(value) == orjson.dumps(value, option=orjson.OPT_SORT_KEYS) == rfc8785.dumps(value)


@needs_c
@pytest.mark.parametrize("kind", ["list", "dict", "mixed"])
def test_plain_json_stops_one_container_past_orjsons_limit(kind):
    assert speedups.plain_json(_nested(DEPTH, 1, kind))
    assert not speedups.plain_json(_nested(DEPTH + 1, 1, kind))
    assert not speedups.plain_json(_nested(DEPTH + 1, None, kind))
    assert not speedups.plain_json(_nested(10_000, 1, kind))  # no C stack overflow: the walk stops at the bound


@needs_c
def test_plain_json_ends_cycles():
    a: list = []
    a.append(a)
    d: dict = {}
    d["self"] = d
    assert not speedups.plain_json(a) and not speedups.plain_json(d) and not speedups.plain_json([{"x": a}])
    assert canonical._fast_plain(a) is None


@needs_c
def test_lone_surrogates_pass_plain_json_and_orjson_refuses_them():
    """plain_json does not look into strings; orjson raises on a lone surrogate and _fast declines, as before."""
    for value in ("\ud800", ["\udc00"], {"\udbff": 1}):
        assert speedups.plain_json(value)
        assert canonical._fast_plain(value) is None
        with pytest.raises(canonical.CanonicalError):
            canonical_bytes(value)


@needs_c
def test_the_c_functions_keep_reference_counts():
    key, item, line = "k" + str(id(object())), [1, "x" * 3], b'{"a":[1,"x"]}'
    value = {key: item}
    before = [sys.getrefcount(x) for x in (key, item, value, line)]
    for _ in range(10_000):
        speedups.plain_json(value)
        speedups.plain_json([value, 1.5])
        speedups.jcs_line(line)
        speedups.jcs_line(line[:-1])
    assert [sys.getrefcount(x) for x in (key, item, value, line)] == before


# ---------------------------------------------------------------------------------------------
# plain_json: differential property test


def _plain_reference(v: object, depth: int = 0) -> bool:
    """The rule of plain_json written out in Python."""
    if v is None or v is True or v is False or type(v) is str:
        return True
    if type(v) is int:
        return -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER
    if type(v) is list:
        return depth < DEPTH and all(_plain_reference(x, depth + 1) for x in v)
    if type(v) is dict:
        return depth < DEPTH and all(type(k) is str and _plain_reference(x, depth + 1) for k, x in v.items())
    return False


def _holds_enum(v: object, depth: int = 0) -> bool:
    if isinstance(v, enum.Enum):
        return True
    if depth > DEPTH + 2:
        return False
    if isinstance(v, (list, tuple)):
        return any(_holds_enum(x, depth + 1) for x in v)
    if isinstance(v, dict):
        return any(_holds_enum(x, depth + 1) for x in v.values())
    return False


_lone = st.sampled_from(["\ud800", "x\udfff", "\udbff\U0001f600"])
_odd_scalars = (
    st.floats()  # NaN and infinities included
    | st.integers()  # beyond +-(2^53-1) too
    | st.sampled_from([MAX_SAFE_INTEGER, MAX_SAFE_INTEGER + 1, -MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER - 1, 2**64])
    | st.builds(_Str, _texts) | st.builds(_Int, st.integers(-5, 5))
    | st.sampled_from([_Colour.RED, _Name.A, _Num.ONE, datetime.date(2026, 1, 1), uuid.UUID(int=1), b"b", 1j])
    | _lone
)
_scalars = st.none() | st.booleans() | st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER) | _texts | _odd_scalars
_keys = _texts | _texts | _lone | st.builds(_Str, _texts) | st.integers(-3, 3) | st.none()


def _containers(children: st.SearchStrategy) -> st.SearchStrategy:
    lists = st.lists(children, max_size=4)
    dicts = st.dictionaries(_texts, children, max_size=4)
    return (
        lists | dicts | lists | dicts
        | st.dictionaries(_keys, children, max_size=3)
        | lists.map(tuple) | lists.map(_List) | dicts.map(_Dict) | dicts.map(collections.OrderedDict)
    )


_deep = st.builds(_nested, st.integers(200, 1000), st.none() | st.integers(0, 9) | st.just(1.5),
                  st.sampled_from(["list", "dict", "mixed"]))
json_like = st.recursive(_scalars, _containers, max_leaves=20) | _deep


@needs_c
@SETTINGS
@given(json_like)
def test_plain_json_and_fast_plain_agree_with_the_reference(value):
    assert speedups.plain_json(value) == _plain_reference(value)
    fast = canonical._fast_plain(value)
    if fast is not None:
        assert _plain_reference(value)
        assert fast == canonical_bytes(value)
        if fast.count(b"[") + fast.count(b"{") < 100:  # the oracle recurses in Python
            assert fast == rfc8785.dumps(value)
    if not _holds_enum(value):  # the read-back takes an enum member equal to its value; see _fast_plain
        assert fast == _fast_read_back(value)


@needs_c
@SETTINGS
@given(json_values | poisoned_values)
def test_fast_plain_equals_the_read_back_on_json_values(value):
    assert canonical._fast_plain(value) == _fast_read_back(value)


# ---------------------------------------------------------------------------------------------
# jcs_line: hostile lines


_ENTRY = chain_entry(fields(n=3), 3, "0" * 64)[1][:-1]


def _jcs_yes_is_right(line: bytes) -> None:
    """A yes from jcs_line: the line is the canonical form of a float-free value (oracle), and the pure-Python
    test agrees but where it cannot tell (keys whose code-point order is not their UTF-16 order)."""
    parsed = orjson.loads(line)
    assert not has_float(parsed)
    if line.count(b"[") + line.count(b"{") < 100:  # the oracle recurses in Python
        assert rfc8785.dumps(parsed) == line
    reference = _canonical_value_read_back(line, False)
    assert reference == parsed or (reference is None and canonical.keys_may_sort_differently(line))
    assert canonical.canonical_value(line) == parsed


@needs_c
@pytest.mark.parametrize(
    "line",
    [b'{"a":"\\u001f"}', b'"\\u0000\\u000b\\u001f\\b\\f\\n\\r\\t\\"\\\\"', b'"\x7f\xe2\x80\xa8\xef\xbf\xbf"',
     b'{"\xf0\x9f\x98\x80":1,"\xee\x80\x80":2}', b'{"\xed\x9f\xbf":1,"\xf0\x90\x80\x80":2,"\xef\xbf\xbf":3}',
     b'{"":0,"a":-1,"aa":[],"b":{}}', b"9007199254740991", b"-9007199254740991", b"0", b"null", b"true",
     b"false", b"[]", b"{}", b'""', b'["\xc2\x80\xdf\xbf\xe0\xa0\x80\xf4\x8f\xbf\xbf"]', _ENTRY,
     b"[" * DEPTH + b"]" * DEPTH, b'{"a":' * DEPTH + b"1" + b"}" * DEPTH],
    ids=lambda b: repr(b)[:50],
)
def test_jcs_line_proves_canonical_lines(line):
    assert speedups.jcs_line(line) is True
    _jcs_yes_is_right(line)


@needs_c
@pytest.mark.parametrize(
    "line",
    [
        b"", b" ", b"{", b"}", b"[", b"]", b'"', b"[1,]", b"[,1]", b'{"a":1,}', b'{"a"}', b'{"a":}', b'{1:1}',
        b"tru", b"nul", b"truex", b"[true false]", b"-", b"--1", b"+1", b"01", b"-0", b"00", b"1.0", b"1e3",
        b"1E3", b"1.5", b"[0.1]", b"9007199254740992", b"-9007199254740992", b"99999999999999999999", b"1x",
        b'{"a":1} ', b' {"a":1}', b'{"a": 1}', b'{"a":1}\n', b'{"a":1}{"b":2}', b"[1][2]", b'{"a":1]', b"[1}",
        b'{"b":1,"a":2}', b'{"a":1,"a":1}', b'{"\xee\x80\x80":1,"\xf0\x9f\x98\x80":2}', b'{"aa":1,"a":2}',
        b'"\\/"', b'"\\u0041"', b'"\\u001F"', b'"\\u0008"', b'"\\u000a"', b'"\\u007f"', b'"\\u0020"', b'"\\x41"',
        b'"\\ud800"', b'"\\', b'"\\u00', b'"\\u001', b'"abc', b'"\x01"', b'"\x1f"', b'"\n"',
        b'"\xff"', b'"\x80"', b'"\xc0\x80"', b'"\xc1\xbf"', b'"\xe0\x80\x80"', b'"\xe0\x9f\xbf"', b'"\xed\xa0\x80"',
        b'"\xed\xbf\xbf"', b'"\xf0\x80\x80\x80"', b'"\xf0\x8f\xbf\xbf"', b'"\xf4\x90\x80\x80"', b'"\xf5\x80\x80\x80"',
        b'"\xf8\x88\x80\x80\x80"', b'"\xe2\x82"', b'"\xe2\x82', b'"\xf0\x9f\x98"', b'"\xc3"', b'"\xc3',
        b'{"\\n":1}', b'{"a\\"b":1}',  # a key with an escape is left to the reference, canonical or not
        b"[" * (DEPTH + 1) + b"]" * (DEPTH + 1), b"[" * 100_000, b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 100_000, "[1]".encode("utf-16"), b"\xef\xbb\xbf[1]", b"[1]\x00",
    ],
    ids=lambda b: repr(b)[:50],
)
def test_jcs_line_proves_nothing_else(line):
    assert speedups.jcs_line(line) is False


@needs_c
def test_jcs_line_takes_only_bytes():
    for data in (b"[1]".decode(), bytearray(b"[1]"), memoryview(b"[1]"), None, 1, [b"[1]"]):
        assert speedups.jcs_line(data) is False


@needs_c
def test_jcs_line_proves_no_prefix_of_an_entry():
    """Every cut of a real line ends inside something (an object, a string, a UTF-8 sequence, an escape)."""
    for cut in range(len(_ENTRY)):
        assert speedups.jcs_line(_ENTRY[:cut]) is False


def test_a_hostile_line_nested_100000_deep_is_not_canonical_on_either_path(tmp_path):
    """msgspec answers such a line with RecursionError, not DecodeError: canonical_value must say "cannot
    tell" (the verifier then names the line), not raise (it did before this branch, on both paths)."""
    line = b"[" * 100_000 + b"]" * 100_000
    try:
        for c_path in (True, False):
            canonical.use_speedups(c_path)
            assert canonical.canonical_value(line) is None
            good = chain_entry(fields(n=1), 1, "0" * 64)[1]
            vault = Vault.create(tmp_path / f"v{c_path}")
            vault.session_path("s1").write_bytes(good + line + b"\n")
            report = verify_session(vault, "s1", workers=1)
            assert (report.intact, report.broken_at_seq, report.kind) == (False, 2, "not_canonical")
    finally:
        canonical.use_speedups(True)


# ---------------------------------------------------------------------------------------------
# jcs_line: differential property tests


def _key_needs_escape(v: object) -> bool:
    if type(v) is list:
        return any(_key_needs_escape(x) for x in v)
    if type(v) is dict:
        return any(any(c in '"\\' or c < " " for c in k) or _key_needs_escape(x) for k, x in v.items())
    return False


def _check_line(line: bytes) -> None:
    """jcs_line's yes is right, and it says yes to every float-free canonical line with no escape in a key."""
    if speedups.jcs_line(line):
        _jcs_yes_is_right(line)
        return
    try:
        parsed = orjson.loads(line)
    except orjson.JSONDecodeError:
        return
    assert _canonical_value_read_back(line, False) is None or _key_needs_escape(parsed)
    if has_float(parsed) or _key_needs_escape(parsed):
        return
    try:
        canonical_form = rfc8785.dumps(parsed)
    except rfc8785.CanonicalizationError:  # an integer beyond +-(2^53-1)
        return
    assert canonical_form != line, f"jcs_line declined the canonical line {line!r}"


@needs_c
@SETTINGS
@given(json_values)
def test_jcs_line_on_canonical_lines(value):
    try:
        line = canonical_bytes(value)
    except canonical.CanonicalError:
        return
    _check_line(line)
    if not has_float(value) and not _key_needs_escape(value):
        assert speedups.jcs_line(line)


@needs_c
@SETTINGS
@given(json_values | poisoned_values)
def test_jcs_line_on_orjson_lines(value):
    _check_line(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
    _check_line(orjson.dumps(value))


_VECTORS = json.loads((Path(__file__).resolve().parents[1] / "support" / "vectors" / "canonical.json").read_text())
_REAL_LINES = [_ENTRY, chain_entry(fields(n=70, agent="\U0001f600\ue000 \x1f\"\\"), 70, "f" * 64)[1][:-1]] + [
    v["canonical"].encode() for v in _VECTORS if not v["name"].startswith("float")
]
_BYTES = st.integers(0, 255) | st.sampled_from(list(b'"\\{}[]:,-0123456789.eEtfnu \x00\x1f\x7f\x80\xbf\xc0\xc2'
                                                    b"\xdf\xe0\xed\xee\xef\xf0\xf4\xf5\xff"))


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    line = bytearray(draw(st.sampled_from(_REAL_LINES)))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(line)))
        op = draw(st.sampled_from(["set", "insert", "delete", "cut", "swap"]))
        if op == "set" and at < len(line):
            line[at] = draw(_BYTES)
        elif op == "insert":
            line[at:at] = bytes([draw(_BYTES)])
        elif op == "delete":
            del line[at : at + draw(st.integers(1, 4))]
        elif op == "cut":
            line = line[:at]
        elif op == "swap" and at + 1 < len(line):
            line[at], line[at + 1] = line[at + 1], line[at]
    return bytes(line)


@needs_c
@SETTINGS
@given(_mutated())
def test_jcs_line_on_mutations_of_real_lines(line):
    assume(len(line) < 20_000)
    _check_line(line)


@needs_c
@pytest.mark.parametrize("line", _REAL_LINES, ids=lambda b: repr(b)[:40])
def test_jcs_line_on_real_lines(line):
    _check_line(line)
