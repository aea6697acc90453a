"""The one-pass contract checks (entry.is_valid_entry, the fast path of validate_fields) accept exactly
what the step-by-step checks accept, on entries and fields mutated every way a file or a capture point
could get them wrong."""

from __future__ import annotations

import copy

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journal.chain import GENESIS, chain_entry
from journal.entry import (
    KEYS,
    ContractError,
    _check_entry,
    _check_fields,
    _fields_ok,
    is_valid_entry,
    validate_entry,
    validate_fields,
)
from tests.support.journal_factories import fields


class _Str(str):
    pass


_VALUES = [
    None, "", "x", " ", 0, -1, 1, 99, 100, 200, 999, 1000, True, False, 1.5, 200.0, [], {}, [[]], [["a", "b"]],
    [["a"]], [["a", 1]], [("a", "b")], [["a", "b", "c"]], {"error": "x"},
    "2026-09-22T10:00:01.001Z", "2026-09-22T10:00:01.001", "2026-09-22T10:00:01.001Zx", "2026-09-22 10:00:01.001Z",
    "\u0662026-09-22T10:00:01.001Z", "2026-09-22T10:00:01.0010Z", "2026-9-22T10:00:01.001Z",
    "0" * 64, "a" * 64, "A" * 64, "0" * 63, "0" * 65, "g" * 64, "0" * 63 + "\u00e9", "\u0660" * 64,
    "gmail", "Gmail", "g mail", "-gmail", "gmail.v1", "g_m-a.i9", "\u00e9", _Str("gmail"), _Str("x"),
    "broker", "gateway", "agent", "read", "write", "GET", "https://x", _Str("read"),
]
_TOP = [*KEYS]
_MESSAGE_KEYS = ["method", "url", "headers", "body", "status", "error"]


def _entry(n: int = 3) -> dict:
    entry, _ = chain_entry(fields(n=n), n, GENESIS)
    return orjson.loads(orjson.dumps(entry))


@st.composite
def _mutations(draw, base: dict, top_keys: list[str]) -> dict:
    e = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["top", "request", "response", "header", "delete", "extra", "wrap"]))
        value = draw(st.sampled_from(_VALUES))
        if where == "top":
            e[draw(st.sampled_from(top_keys))] = copy.deepcopy(value)
        elif where in ("request", "response") and isinstance(e.get(where), dict):
            e[where][draw(st.sampled_from(_MESSAGE_KEYS))] = copy.deepcopy(value)
        elif where == "header":
            msg = e.get(draw(st.sampled_from(["request", "response"])))
            if isinstance(msg, dict) and isinstance(msg.get("headers"), list) and msg["headers"]:
                h = msg["headers"][draw(st.integers(0, len(msg["headers"]) - 1))]
                if isinstance(h, list) and h:
                    h[draw(st.integers(0, len(h) - 1))] = copy.deepcopy(value)
        elif where == "delete":
            target = draw(st.sampled_from(["top", "request", "response"]))
            holder = e if target == "top" else e.get(target)
            if isinstance(holder, dict) and holder:
                del holder[draw(st.sampled_from(sorted(holder)))]
        elif where == "extra":
            e[draw(st.sampled_from(["extra", "Seq", "hash ", *top_keys]))] = copy.deepcopy(value)
        else:
            e = draw(st.sampled_from([[e], "entry", None, 7]))
            break
    return e


def _plain(v: object) -> bool:
    """No str subclass and no digit outside ASCII: where the one-pass check may say no and leave the
    decision to the step-by-step checks (which accept both; JSON parsers make neither)."""
    if isinstance(v, str):
        return type(v) is str and not any(c.isdigit() and not c.isascii() for c in v)
    if isinstance(v, dict):
        return all(_plain(k) and _plain(x) for k, x in v.items())
    if isinstance(v, list | tuple):
        return all(_plain(x) for x in v)
    return True


def _accepted(check, value) -> bool:
    try:
        check(value)
    except ContractError:
        return False
    return True


@settings(max_examples=3000, deadline=None, derandomize=True)
@given(_mutations(_entry(), _TOP))
def test_is_valid_entry_agrees_with_the_step_by_step_checks(entry):
    accepted = _accepted(_check_entry, entry)
    if _plain(entry):
        assert is_valid_entry(entry) == accepted
    else:
        assert accepted or not is_valid_entry(entry)
    assert _accepted(validate_entry, entry) == accepted


def _hex64(v: object) -> bool:
    return type(v) is str and len(v) == 64 and all(c in "0123456789abcdef" for c in v)


@settings(max_examples=3000, deadline=None, derandomize=True)
@given(_mutations(_entry(), _TOP))
def test_links_known_decides_as_the_whole_check_where_prev_and_hash_are_hex(entry):
    """The verifier's `links_known` (it found `hash` equal to its digest and `prev` to the hash before, both
    64 lowercase hex digits): the answer is the whole check's, for every entry holding such a prev and hash."""
    if isinstance(entry, dict) and _hex64(entry.get("prev")) and _hex64(entry.get("hash")):
        assert is_valid_entry(entry, links_known=True) == is_valid_entry(entry)


_FIELD_TOP = [k for k in KEYS if k not in ("seq", "prev", "hash")]


@settings(max_examples=3000, deadline=None, derandomize=True)
@given(_mutations(fields(n=4), _FIELD_TOP))
def test_validate_fields_fast_path_agrees_with_the_step_by_step_checks(f):
    if not isinstance(f, dict):
        return  # capture points pass dicts; the step-by-step checks do not take other types either
    assert _accepted(validate_fields, f) == _accepted(_check_fields, f)
    if _plain(f):  # and the fast path alone decides plain fields
        fast = type(f) is dict and len(f) == len(_FIELD_TOP) and _fields_ok(f)
        assert fast == _accepted(_check_fields, f)


def test_a_real_entry_and_fields_pass_and_each_kind_of_fault_fails():
    e = _entry()
    assert is_valid_entry(e)
    validate_fields(fields(n=1))
    for key, value in [("seq", 0), ("seq", True), ("prev", "A" * 64), ("hash", "0" * 63), ("ts", "2026-09-22"),
                       ("connector", "Gmail"), ("capture", "proxy"), ("session", ""), ("mcp", [])]:
        bad = dict(e, **{key: value})
        assert not is_valid_entry(bad), key
        with pytest.raises(ContractError):
            validate_entry(bad)
    assert not is_valid_entry({k: v for k, v in e.items() if k != "ts"} | {"tss": e["ts"]})
    with pytest.raises(ContractError, match="keys wrong"):
        validate_entry({k: v for k, v in e.items() if k != "ts"} | {"tss": e["ts"]})


def test_a_timestamp_with_another_scripts_digits_is_refused():
    entry = _entry()
    entry["ts"] = "\u0662026-09-22T10:00:01.001Z"  # ARABIC-INDIC DIGIT TWO: `\d` without re.ASCII took it
    assert not _accepted(validate_entry, entry) and not is_valid_entry(entry)


try:
    from journal._canonical_speedups import fields_ok as c_fields_ok
except ImportError:  # not built: test_canonical_speedups.py says why
    c_fields_ok = None

needs_c = pytest.mark.skipif(c_fields_ok is None, reason="the C accelerator is not built")


class _Key(str):
    """A key subclass whose __eq__ runs Python code (the C check must not look into its dict)."""

    def __eq__(self, other: object) -> bool:
        return str.__eq__(self, other)

    def __hash__(self) -> int:
        return str.__hash__(self)


@needs_c
@settings(max_examples=3000, deadline=None, derandomize=True)
@given(_mutations(fields(n=4), _FIELD_TOP))
def test_the_c_fields_check_says_yes_only_where_the_python_one_does(f):
    """journal/_canonical_speedups.c `fields_ok` against `_fields_ok`: never a yes the Python check does not give
    (a yes skips the step-by-step checks), and the same answer on plain fields (else it would only be slower)."""
    c = c_fields_ok(f)
    py = type(f) is dict and len(f) == len(_FIELD_TOP) and _fields_ok(f)
    assert py or not c
    if _plain(f):
        assert c == py


@needs_c
@pytest.mark.parametrize("where", ["top", "request", "response"])
def test_the_c_fields_check_leaves_dicts_with_odd_keys_to_python(where):
    f = fields(n=5)
    holder = f if where == "top" else f[where]
    key = next(iter(holder))
    holder[_Key(key)] = holder.pop(key)
    assert _fields_ok(f) and not c_fields_ok(f)
    validate_fields(f)  # the step-by-step checks accept it


@needs_c
def test_validate_fields_uses_the_c_check_unless_speedups_are_off():
    from journal import canonical, entry

    was = canonical.SPEEDUPS
    try:
        canonical.use_speedups(True)
        assert entry._fields_fast is c_fields_ok
        canonical.use_speedups(False)
        assert entry._fields_fast is _fields_ok
        with pytest.raises(ContractError):
            validate_fields(fields(n=1, connector="Gmail"))
    finally:
        canonical.use_speedups(was)


@needs_c
@pytest.mark.parametrize(("key", "value"), [
    ("ts", "2026-09-22T10:00:01.001z"), ("ts", "2026-09-22T10:00:01.01Z"), ("ts", "2026-09-22T10:00:0a.001Z"),
    ("connector", "_gmail"), ("connector", "gmail!"), ("connector", "gmail\u00e9"), ("connector", "gm.a_i-l9"),
    ("capture", "brokers"), ("capture", "agen"), ("effect", "Read"), ("prompt_ref", 7), ("mcp", []),
    ("session", ""), ("principal", None), ("agent", "a"),
])
def test_the_c_fields_check_on_each_top_level_rule(key, value):
    f = dict(fields(n=6), **{key: value})
    assert c_fields_ok(f) == _fields_ok(f)


@needs_c
@pytest.mark.parametrize("status", [99, 100, 999, 1000, -1, 2**70, True, None, 200.0, "200"])
def test_the_c_fields_check_on_statuses(status):
    f = fields(n=7)
    f["response"]["status"] = status
    assert c_fields_ok(f) == _fields_ok(f)
    f["response"]["error"] = "x"
    assert c_fields_ok(f) == _fields_ok(f)
