"""The canonical form of docs/contract.md: RFC 8785 (JCS), the one implementation in the project.

Everything that hashes or writes an entry calls `canonical_bytes`. orjson is used as a
fast path only where its `OPT_SORT_KEYS` output is proven byte-identical to JCS: no float
anywhere, and no mix of characters outside the Basic Multilingual Plane with characters in
U+E000..U+FFFF (orjson sorts keys by code point, JCS by UTF-16 code unit; they differ only
there). See `_fast`; the verifier's test of a line read from a file is `canonical_value`.
`tests/journal/test_canonical.py` holds the proof (vectors plus a differential property test
against the `rfc8785` package).

The per-call proofs have an optional C accelerator, journal/_canonical_speedups.c (`plain_json` for
`_fast`, `jcs_line` for `canonical_value`, `fields_ok` for journal/entry.py's validate_fields and `slot_cut`
for journal/chain.py's link_pieces), chosen here once at import; the pure-Python code stays the reference and
the fallback (no compiler at install time, or BROKER_NO_SPEEDUPS=1). tests/journal/test_canonical_speedups.py,
test_entry_fast.py and test_chain_link.py check one against the other.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from types import ModuleType
from typing import cast

import msgspec
import orjson

from journal.entry import use_fields_check
from journal.errors import BrokerError

MAX_SAFE_INTEGER = 2**53 - 1


_SOURCE = os.path.join(os.path.dirname(__file__), "_canonical_speedups.c")
"""The accelerator's source beside its in-place build (absent from an install that ships no source)."""


def _import_speedups() -> ModuleType | None:
    """The C accelerator of these rules (journal/_canonical_speedups.c), or None when it was not built (it is
    optional: an install without a C compiler still works) or was built before its source last changed.

    Why the age check: the build is a file in the source tree that git ignores, so after a `git pull` that
    changes the source, until ./scripts/setup runs, or after a rebuild that failed (setup.py's optional=True
    keeps the old file and says nothing), the file holds older rules, which may prove lines the current ones
    refuse. The pure-Python reference is then used, as make would rebuild (two stats)."""
    try:
        from journal import _canonical_speedups
    except ImportError:
        return None
    try:
        stale = os.stat(_SOURCE).st_mtime_ns > os.stat(cast("str", _canonical_speedups.__file__)).st_mtime_ns
    except FileNotFoundError:
        stale = False
    return None if stale else _canonical_speedups


def _load_speedups() -> ModuleType | None:
    """What the process runs: the accelerator if built, unless BROKER_NO_SPEEDUPS is set to anything but 0."""
    if os.environ.get("BROKER_NO_SPEEDUPS", "0") not in ("", "0"):
        return None
    return _import_speedups()


SPEEDUPS = False
"""True when the C accelerator is in use; the pure-Python code below is the reference and the fallback."""
_plain_json: Callable[[object], bool] | None = None
_jcs_line: Callable[[bytes], bool] | None = None
slot_cut: Callable[[bytes, bytes], tuple[bytes, bytes, bytes, bytes] | None] | None = None
"""The accelerator's cut of a canonical line at its placeholders, for journal/chain.py `link_pieces` (None: its
Python code, the reference)."""


def use_speedups(on: bool) -> bool:
    """Switch this process to the C accelerator (when built) or to the pure-Python code; True if the accelerator
    is now in use. For the tests and the benchmark that compare the two: everything else runs what was chosen
    at import (BROKER_NO_SPEEDUPS)."""
    global SPEEDUPS, _plain_json, _jcs_line, _fast, slot_cut
    module = _import_speedups() if on else None
    SPEEDUPS = module is not None
    _plain_json = module.plain_json if module else None
    _jcs_line = module.jcs_line if module else None
    slot_cut = module.slot_cut if module else None
    _fast = _fast_plain if module else _fast_read_back
    use_fields_check(module.fields_ok if module else None)
    return SPEEDUPS


class CanonicalError(BrokerError, ValueError):
    """A value that has no canonical form under the contract."""


_FAST_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER | orjson.OPT_PASSTHROUGH_SUBCLASS


def _sorted_by_orjson(value: object) -> bytes | None:
    """orjson's sorted output of `value`, or None when orjson refuses it or its key order may not be JCS's."""
    try:
        data = orjson.dumps(value, option=_FAST_OPTIONS)
    except orjson.JSONEncodeError:
        return None
    return None if keys_may_sort_differently(data) else data


def _fast_read_back(value: object) -> bytes | None:
    """orjson's sorted output when it is provably the canonical form, else None (the pure-Python `_fast`).

    orjson itself refuses integers beyond +-(2^53-1) (OPT_STRICT_INTEGER), non-string keys, subclasses
    (OPT_PASSTHROUGH_SUBCLASS), lone surrogates and very deep nesting; `keys_may_sort_differently`
    rules out key orders that differ from UTF-16 order; and the bytes must read back as the value
    through the decoder that stops at the first float literal: that rules out every float (a finite
    one is written with `.` or `e`, NaN and infinities as null, which reads back as None) and anything
    orjson writes that is not the plain JSON value itself (a tuple, a date, an enum member). One parse
    of the output does the work of the byte scan for float tokens and the read-back it replaced.
    """
    data = _sorted_by_orjson(value)
    if data is None:
        return None
    try:
        if _decode_without_floats(data) != value:
            return None
    except (msgspec.DecodeError, _FloatLiteral):
        return None
    return data


def _fast_plain(value: object) -> bytes | None:
    """`_fast` with the C walk `plain_json` in place of the read-back (2.5 + 0.85 us of a typical entry).

    The read-back rules out what orjson writes but JSON does not hold (floats, NaN and infinities as null,
    tuples, enum members, dates, dataclasses); plain_json admits only exact dict with str keys, list, str,
    int within +-(2^53-1), bool and None, nested no deeper than orjson writes, so none of them. Lone
    surrogates (orjson raises) and key orders (`keys_may_sort_differently`) are checked as in the reference.
    One difference, on the safe side: an enum member whose value equals it (StrEnum, IntEnum) reads back
    equal, so the reference takes it; plain_json does not, and the slow path refuses it as it always did.
    """
    if not _plain_json(value):  # type: ignore[misc]  # set whenever _fast is this function
        return None
    return _sorted_by_orjson(value)


_fast = _fast_read_back
use_speedups(_load_speedups() is not None)  # read once, at import


def orjson_canonical(value: object) -> bytes | None:
    """canonical_bytes(value) when it is orjson's sorted output of `value` (the fast path), else None: then
    canonical_bytes decides (and may raise). A caller that needs to know the bytes are orjson's (their size is
    orjson's size of the value) asks this."""
    return _fast(value)


def canonical_bytes(value: object) -> bytes:
    """Return the RFC 8785 canonical UTF-8 bytes of a JSON value."""
    data = _fast(value)
    if data is not None:
        return data
    parts: list[str] = []
    try:
        _write(value, parts)
    except RecursionError:
        raise CanonicalError("value is nested too deeply") from None
    try:
        return "".join(parts).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalError(f"string holds a lone surrogate and is not valid Unicode: {exc}") from None


def float_reads_back(f: float) -> bool:
    """False for a float JCS writes as an integer outside +-(2^53-1) (e.g. 1e16 -> 10000000000000000).

    Such a line would parse back as an integer the contract forbids, so it could never verify;
    capture points record a body holding such a number as text instead.
    """
    return not (f.is_integer() and MAX_SAFE_INTEGER < abs(f) < 1e21)


def check_reads_back(value: object) -> None:
    """Raise CanonicalError if any float in `value` would not read back (see float_reads_back)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if type(v) is float:
            if not math.isfinite(v) or not float_reads_back(v):
                raise CanonicalError(f"number {v!r} would not read back from its canonical form")
        elif type(v) is dict:
            stack.extend(v.values())
        elif type(v) is list:
            stack.extend(v)


# A float token in canonical JSON text starts right after `:`, `,` or `[`, is made of digits, `-`,
# `+`, `.`, `e`, `E` with at least one `.`/`e`/`E`, and ends right before `,`, `]` or `}`. The text
# is translated so that digits and signs become `0`, `.eE` become `.`, `:,[` become `D`, `]}` become
# `y` and everything else `x`; a float is then `D0+.[0.]*[Dy]`, found by a regex with a literal first
# byte (fast). Inside strings this can give a false alarm (harmless: the exact check runs), never a miss.
def _float_translation() -> bytes:
    table = bytearray(b"x" * 256)
    for ch in b"0123456789-+":
        table[ch] = ord("0")
    for ch in b".eE":
        table[ch] = ord(".")
    for ch in b":,[":
        table[ch] = ord("D")
    for ch in b"]}":
        table[ch] = ord("y")
    return bytes(table)


_FLOAT_SHAPES = _float_translation()
_FLOAT_TOKEN = re.compile(rb"D0+\.[0.]*[Dy]")
_NON_BMP_LEAD = (b"\xf0", b"\xf1", b"\xf2", b"\xf3", b"\xf4")
_HIGH_BMP_LEAD = (b"\xee", b"\xef")  # U+E000..U+FFFF


def _may_differ_from_orjson(data: bytes) -> bool:
    """True when `data` may hold a float token, or keys whose code-point order may differ from their
    UTF-16 order (orjson != JCS there). The orders differ only between a character outside the BMP
    and one in U+E000..U+FFFF, so text with emoji alone keeps the fast path."""
    if keys_may_sort_differently(data):
        return True
    return _FLOAT_TOKEN.search(b"D" + data.translate(_FLOAT_SHAPES) + b"y") is not None


def may_hold_float(data: bytes) -> bool:
    """True when the JSON text `data`, with any whitespace between its tokens, may hold a float literal
    (false alarms inside strings, as above); False only when it holds none, so a value read from it needs
    no `check_reads_back`."""
    return _FLOAT_TOKEN.search(b"D" + data.translate(_FLOAT_SHAPES, b" \t\r\n") + b"y") is not None


def keys_may_sort_differently(data: bytes) -> bool:
    """True when `data` holds both a character outside the BMP and one in U+E000..U+FFFF, the only
    mix whose code-point order (orjson's) differs from UTF-16 order (JCS's). A False for a whole
    block of lines holds for each line in it.

    `find` rather than `in`: CPython's `bytes in bytes` first tries its operand as an integer, building and
    dropping a formatted TypeError every time (more than the scan itself; the writer asks this of every entry,
    the verifier of every line)."""
    return (
        not data.isascii()
        and (data.find(b"\xee") >= 0 or data.find(b"\xef") >= 0)
        and any(data.find(lead) >= 0 for lead in _NON_BMP_LEAD)
    )


class _FloatLiteral(Exception):
    """Raised by the decoder of canonical_value at the first float literal."""


def _refuse_float(text: str) -> object:
    raise _FloatLiteral(text)


_decode_without_floats = msgspec.json.Decoder(float_hook=_refuse_float).decode
_LINE_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER


def canonical_value(data: bytes, *, keys_checked: bool = False) -> object | None:
    """The value `data` is the canonical form of, or None when this quick test cannot tell (then
    is_canonical_line decides, and may still say yes; a line holding just `null` always gets None).

    With the C accelerator, `jcs_line` proves the bytes canonical on its own (one pass over them, no value
    built; see journal/_canonical_speedups.c) and orjson reads the value; what it cannot prove (a float, a
    key with an escape, anything not canonical) goes to the pure-Python test, `_canonical_value_read_back`.
    """
    if proven_canonical(data):
        return orjson.loads(data)
    return _canonical_value_read_back(data, keys_checked)


def proven_canonical(data: bytes) -> bool:
    """True when the C accelerator proves `data` the canonical form of a float-free JSON value (`jcs_line`); False
    when it cannot tell or is not in use. For readers that then decode only what they check."""
    return _jcs_line is not None and _jcs_line(data)


def _canonical_value_read_back(data: bytes, keys_checked: bool) -> object | None:
    """canonical_value in pure Python (the reference of `jcs_line`, and the fallback).

    Why a yes is right: msgspec parses `data` and stops at any float literal (its float_hook), so the
    value holds only objects, arrays, strings, integers, booleans and null; orjson writes that value
    back as exactly `data` (sorted keys, integers within +-(2^53-1)); for such values orjson's output is
    JCS unless keys mix characters outside the BMP with U+E000..U+FFFF (`keys_may_sort_differently`,
    skipped when the caller checked a block holding `data`). orjson reads its own output back as the
    same value, so this is also what `orjson.loads(data)` gives. tests/journal/test_canonical_value.py and
    test_canonical_speedups.py hold the differential tests.
    """
    try:
        value = _decode_without_floats(data)
        if orjson.dumps(value, option=_LINE_OPTIONS) != data:
            return None
    except (msgspec.DecodeError, _FloatLiteral, orjson.JSONEncodeError):
        return None
    except RecursionError:  # msgspec's answer to a hostile line nested thousands deep (not a DecodeError)
        return None
    if not keys_checked and keys_may_sort_differently(data):
        return None
    return value


def is_canonical_line(data: bytes, value: object) -> bool:
    """True when `data` (one line without its newline) is exactly canonical_bytes(value).

    `value` is what `data` parses to. Raises CanonicalError when `value` has no canonical form at
    all (an integer beyond +-(2^53-1), say). The fast path needs no walk of the value: when the bytes hold
    no float token and no character outside the BMP, orjson's sorted output is JCS (proven by the
    tests), and OPT_STRICT_INTEGER refuses integers beyond +-(2^53-1) as the contract does.
    """
    if not _may_differ_from_orjson(data):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER) == data
        except orjson.JSONEncodeError:
            pass
    return canonical_bytes(value) == data


def orjson_matches_jcs(value: object) -> bool:
    """True when orjson's sorted output of `value` is its canonical form (so callers that must
    canonicalise the same value again, with small integer or hex fields added, may use orjson).
    Raises CanonicalError when `value` has no canonical form at all."""
    if _fast(value) is not None:
        return True
    canonical_bytes(value)  # raises for values no canonical form allows
    return False


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_string(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _write(v: object, out: list[str]) -> None:
    t = type(v)
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif t is str:
        out.append(_escape_string(v))  # type: ignore[arg-type]
    elif t is int:
        if not -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER:  # type: ignore[operator]
            raise CanonicalError(f"integer {v} is outside +-(2^53-1)")
        out.append(str(v))
    elif t is float:
        out.append(format_number(v))  # type: ignore[arg-type]
    elif t is list:
        out.append("[")
        for i, item in enumerate(cast("list[object]", v)):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    elif t is dict:
        d = cast("dict[object, object]", v)
        for k in d:
            if type(k) is not str:
                raise CanonicalError(f"object key {k!r} is not a string")
        out.append("{")
        # Every key was checked to be a str just above.
        for i, k in enumerate(sorted(cast("dict[str, object]", d), key=_utf16_key)):
            if i:
                out.append(",")
            out.append(_escape_string(k))
            out.append(":")
            _write(d[k], out)
        out.append("}")
    else:
        raise CanonicalError(f"value of type {t.__name__} has no JSON form")


def _utf16_key(k: str) -> bytes:
    try:
        return k.encode("utf-16-be")
    except UnicodeEncodeError:
        raise CanonicalError(f"object key {k!r} holds a lone surrogate") from None


def format_number(f: float) -> str:
    """Write a float the way ECMAScript's Number.prototype.toString does (RFC 8785 3.2.2.3)."""
    if not math.isfinite(f):
        raise CanonicalError(f"{f} has no JSON form")
    if f == 0:
        return "0"  # also -0.0
    sign = "-" if f < 0 else ""
    # repr gives the shortest digits that round-trip, as ECMAScript requires.
    r = repr(abs(f))
    mantissa, _, exp = r.partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    if frac_part == "0":
        frac_part = ""
    digits = (int_part + frac_part).lstrip("0")
    # n: position of the decimal point relative to the start of `digits`.
    n = len(int_part) + (int(exp) if exp else 0)
    if int_part == "0":
        stripped = frac_part.lstrip("0")
        n = (int(exp) if exp else 0) - (len(frac_part) - len(stripped))
        digits = stripped
    digits = digits.rstrip("0") or "0"
    k = len(digits)
    if k <= n <= 21:
        s = digits + "0" * (n - k)
    elif 0 < n <= 21:
        s = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        s = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        exp_s = f"e+{e}" if e >= 0 else f"e{e}"
        s = digits + exp_s if k == 1 else digits[0] + "." + digits[1:] + exp_s
    return sign + s
