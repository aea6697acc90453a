"""canonical.canonical_value, the verifier's quick test of a line: when it returns a value, the line is the
RFC 8785 form of that value (checked against the `rfc8785` oracle) and the value is what orjson parses;
it never says yes to a line with a float, a key order orjson and JCS disagree on, or any other difference."""

from __future__ import annotations

import orjson
import pytest
import rfc8785
from hypothesis import given

from journal.canonical import (
    CanonicalError,
    canonical_bytes,
    canonical_value,
    is_canonical_line,
    keys_may_sort_differently,
)
from tests.journal.test_canonical import PROPERTY_SETTINGS, _reparses_as_unsafe_int, json_values, poisoned_values
from tests.support.journal_factories import has_float

# Every test here runs on the C accelerator and on the pure-Python fallback (tests/journal/conftest.py).
pytestmark = pytest.mark.usefixtures("both_canonical_paths")


def _check_yes(line: bytes, value: object) -> None:
    assert not has_float(value)
    assert rfc8785.dumps(value) == line
    assert orjson.loads(line) == value and type(orjson.loads(line)) is type(value)


@PROPERTY_SETTINGS
@given(json_values)
def test_a_yes_for_orjson_output_is_always_the_canonical_form(value):
    line = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    got = canonical_value(line)
    if got is not None:
        _check_yes(line, got)
    else:  # undecided: the exact check decides (and agrees with the oracle)
        parsed = orjson.loads(line)
        try:
            assert is_canonical_line(line, parsed) == (rfc8785.dumps(parsed) == line)
        except CanonicalError:
            pass


@PROPERTY_SETTINGS
@given(poisoned_values)
def test_floats_and_differing_key_orders_are_never_a_wrong_yes(value):
    line = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    got = canonical_value(line)
    assert got is None or rfc8785.dumps(got) == line
    assert canonical_value(line, keys_checked=False) is None or not has_float(orjson.loads(line))


@PROPERTY_SETTINGS
@given(json_values.filter(lambda v: not _reparses_as_unsafe_int(v)))
def test_canonical_lines_without_floats_are_recognised(value):
    line = canonical_bytes(value)
    got = canonical_value(line)
    parsed = orjson.loads(line)
    if got is not None:
        _check_yes(line, got)
    elif parsed is not None and not has_float(parsed):
        # A float-free canonical line is declined only where orjson's key order may not be JCS's.
        assert keys_may_sort_differently(line)


@pytest.mark.parametrize(
    "line",
    [b'{"a": 1}', b'{"b":1,"a":2}', b'{"a":"\\u0041"}', b'{"a":1.0}', b'{"a":1e16}', b'{"a":1e+16}', b'{"a":"\\/"}',
     b'{"a":-0}', b'{"a":1E2}', b'{"a":1.5}', b'{"a":[0.1]}', b'{"\xee\x80\x80":1,"\xf0\x9f\x98\x80":2}',
     b'{"a":1,"a":1}', b'{"a":9007199254740992}', b'{"a":-9007199254740992}', b'{"a":NaN}', b'{"a":"\\ud800"}',
     b'{"a":"\xff"}', b'{"a":1}\n', b' {"a":1}', b'{"a":1} ', b'', b'{"a":1}{"b":2}', b'{"a":"\x01"}',
     b'{"a":"\\u001F"}', b'{"a":true,"b":01}'],
)
def test_lines_that_are_not_canonical_or_not_decidable_get_no_yes(line):
    assert canonical_value(line) is None


def test_a_canonical_entry_line_is_recognised():
    assert canonical_value(b'{"a":"\\u001f"}') == {"a": "\x1f"}
    line = (b'{"a":[1,-2,"\\u001f\\n\\"\\\\",true,false,null],"b":{"\xf0\x9f\x98\x80":"\xe2\x80\xa8"},'
            b'"c":9007199254740991}')
    assert canonical_value(line) == orjson.loads(line)
    assert rfc8785.dumps(orjson.loads(line)) == line
