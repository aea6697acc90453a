"""`parse_json_strict`'s fast path (`_orjson_written`: JSON as orjson writes it, compact or indented by two
spaces) gives exactly what the strict parser (`_strict`) gives, for such JSON and for everything the strict
parser refuses."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journal import bodies
from journal.bodies import _NOT_ORJSON_WRITTEN, _orjson_written, _strict, parse_json_strict
from journal.canonical import may_hold_float

BIG = 2**53


def _same(data: bytes) -> None:
    got, want = parse_json_strict(data), _strict(data)
    assert got == want
    assert repr(got) == repr(want)  # -0.0 against 0.0, 1 against 1.0, key order


CASES = [
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}',
    b'{"a":1,"a":2}',  # duplicate key: orjson keeps the last, the journal refuses
    b'{"a":{"b":1,"b":1}}',
    b"[9007199254740991]", b"[9007199254740992]", b"[-9007199254740992]", b"[18446744073709551616]",
    b"[1e16]", b"[1e+16]", b"[1.5e+16]", b"[1e+22]",
    b"[1.0e16]", b"[10000000000000000.0]", b"[1.5]", b"[-0.0]", b"[-0]", b"[0.1]", b"[1E2]",
    b"[1e400]", b"[-1e400]", b"[NaN]", b"[Infinity]", b"[5e-324]", b"[1.7976931348623157e308]",
    b'["\\ud800"]', b'["\\udc00x"]', b'["\\ud83d\\ude00"]', b'["\xf0\x9f\x98\x80"]', b'["\\u001f"]', b'["\\/"]',
    b'["\\u00e9"]', b'["\xc3\xa9"]', b'["\xff"]', b'["\xed\xa0\x80"]', b'["a\tb"]', b'["a\\tb"]',
    b'{"a": 1}', b' {"a":1}', b'{"a":1} ', b'{"a":1}x', b'{"a":1}{"b":2}', b"\xef\xbb\xbf{}",
    b'"x"', b"1", b"null", b"true", b"[]", b"{}", b"", b"[", b"[1,]", b"{'a':1}", b"01", b"[1.]",
    # indented by two spaces, as orjson (OPT_INDENT_2), Google's APIs and json.dumps(indent=2) write it
    b'{\n  "a": 1\n}', b'{\n  "a": 1\n}\n', b'{\n  "a": 1\n}\n\n', b'{\n  "a": 1\n}\r\n', b'{\n  "a": 1\n} ',
    b'{\n  "a": 1,\n  "a": 2\n}', b'{\n  "a": [\n    9007199254740992\n  ]\n}', b'[\n  1e+16\n]', b'[\n  1e16\n]',
    b'{\n  "a": [],\n  "b": {}\n}', b'{\n    "a": 1\n}', b'{\n\t"a": 1\n}', b'{\n  "a":1\n}', b'{\n  "a" : 1\n}',
    b'[\n  "\\ud800"\n]', b'[\n  "\xc3\xa9"\n]', b'[\n  "\\u00e9"\n]', b'[\n  NaN\n]', b'1\n', b'"x"\n',
]


@pytest.mark.parametrize("data", CASES)
def test_cases(data: bytes) -> None:
    _same(data)


@pytest.mark.parametrize("depth", [1, 100, 254, 255, 256, 900, 1000, 1024, 1025, 3000])
def test_nesting(depth: int) -> None:
    _same(b"[" * depth + b"]" * depth)
    _same(b'{"a":' * depth + b"1" + b"}" * depth)


def test_compact_is_taken_for_sdk_lines() -> None:
    """Lines as the MCP SDKs write them take the fast path (else it would save nothing)."""
    assert _orjson_written(CASES[0]) is not _NOT_ORJSON_WRITTEN
    assert _orjson_written(b'{"a": 1}') is _NOT_ORJSON_WRITTEN  # the strict parser reads that one


def test_two_space_indentation_is_taken_for_googles_answers() -> None:
    """A Google API answer (indented by two spaces, a newline at the end) takes the fast path too."""
    answer = b'{\n  "labels": [\n    {\n      "id": "INBOX",\n      "type": "system"\n    }\n  ]\n}\n'
    assert _orjson_written(answer) == {"labels": [{"id": "INBOX", "type": "system"}]}
    assert _orjson_written(b'{\n    "a": 1\n}') is _NOT_ORJSON_WRITTEN  # four spaces: the strict parser reads it


def test_a_fast_path_that_skipped_a_check_would_be_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bodies, "check_reads_back", lambda value: None)
    assert parse_json_strict(b"[1e+16]") != _strict(b"[1e+16]")
    assert parse_json_strict(b"[\n  1e+16\n]") != _strict(b"[\n  1e+16\n]")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=600, deadline=None)
@given(json_values, st.sampled_from(["orjson", "compact", "spaced", "ascii", "orjson indented", "indent=2"]),
       st.sampled_from([b"", b"\n", b" ", b"\n\n"]))
def test_any_value_written_any_way(value: object, how: str, after: bytes) -> None:
    try:
        if how.startswith("orjson"):
            data = orjson.dumps(value, option=orjson.OPT_INDENT_2 if how == "orjson indented" else None)
        elif how == "indent=2":
            data = json.dumps(value, indent=2, ensure_ascii=False, allow_nan=True).encode("utf-8", "surrogatepass")
        else:
            data = json.dumps(value, separators=(",", ":") if how == "compact" else (", ", ": "),
                              ensure_ascii=how == "ascii", allow_nan=True).encode("utf-8", "surrogatepass")
    except (TypeError, ValueError, orjson.JSONEncodeError):
        return
    _same(data + after)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=40), st.sampled_from([b"", b'{"a":', b"[", b'["']))
def test_any_bytes(data: bytes, prefix: bytes) -> None:
    _same(prefix + data)


def _has_float(value: object) -> bool:
    if isinstance(value, dict):
        return any(_has_float(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_float(v) for v in value)
    return type(value) is float


@settings(max_examples=600, deadline=None)
@given(json_values, st.sampled_from([None, orjson.OPT_INDENT_2]))
def test_the_float_scan_of_the_fast_path_misses_no_float(value: object, option: int | None) -> None:
    """`_orjson_written` checks that floats read back only when `may_hold_float` finds one in the text."""
    try:
        data = orjson.dumps(value, option=option)
    except orjson.JSONEncodeError:
        return
    if _has_float(orjson.loads(data)):
        assert may_hold_float(data)
