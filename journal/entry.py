"""The fourteen-key entry of docs/contract.md: building the fields a capture point supplies, and validating a
whole entry against the contract.

Capture points never set `seq`, `prev` or `hash`: the writer assigns those (see writer.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime

from journal.errors import BrokerError

KEYS: tuple[str, ...] = (
    "seq", "ts", "session", "agent", "principal", "connector", "capture", "prompt_ref",
    "effect", "mcp", "request", "response", "prev", "hash",
)
CHAINED_KEYS = frozenset({"seq", "prev", "hash"})
"""Keys the writer owns."""
CAPTURES = ("broker", "gateway", "agent")
EFFECTS = ("read", "write")
REQUEST_KEYS = ("method", "url", "headers", "body")
RESPONSE_KEYS = ("status", "headers", "body")
TOOL_ERROR = "tool error: the result has isError: true"
"""`response.error` of an MCP entry whose tool answered with `isError: true`: the server answered
(`answered_by` "upstream", its status kept), and what it answered is a failure (docs/contract.md)."""

_TS_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z\Z", re.ASCII)  # ASCII digits only
_HEX64_RE = re.compile(r"[0-9a-f]{64}\Z")
_CONNECTOR_RE = re.compile(r"[a-z0-9][a-z0-9_.-]*\Z")


class ContractError(BrokerError, ValueError):
    """An entry (or the fields for one) that breaks the contract of docs/contract.md."""


def format_ts(when: datetime | None = None) -> str:
    """UTC time as the contract writes it: YYYY-MM-DDTHH:MM:SS.mmmZ."""
    w = (when or datetime.now(UTC)).astimezone(UTC)
    return (
        f"{w.year:04d}-{w.month:02d}-{w.day:02d}T{w.hour:02d}:{w.minute:02d}:{w.second:02d}"
        f".{w.microsecond // 1000:03d}Z"
    )


def parse_ts(ts: str) -> datetime:
    """Inverse of format_ts (for gaps between entries in timelines, and the exports' times). A time in the
    contract's form is read at its fixed places; anything else (strptime also takes 1 to 6 fraction digits
    and one-digit fields) and any date out of range go through strptime as before, so the result and the
    error are strptime's. Why not always strptime: its first call sets up locale tables, about 7 ms, which
    was the largest single cost of `broker show --seq N` after the imports."""
    if isinstance(ts, str) and _TS_RE.match(ts):
        try:
            return datetime(int(ts[0:4]), int(ts[5:7]), int(ts[8:10]), int(ts[11:13]), int(ts[14:16]),
                            int(ts[17:19]), int(ts[20:23]) * 1000, tzinfo=UTC)
        except ValueError:
            pass  # e.g. month 13: strptime refuses it in its own words
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


_FIELD_KEYS = frozenset(KEYS) - CHAINED_KEYS


def validate_fields(fields: dict) -> None:
    """Check the eleven fields a capture point supplies (everything but seq, prev and hash)."""
    if type(fields) is dict and len(fields) == len(_FIELD_KEYS) and _fields_fast(fields):
        return  # the one-pass check found nothing: the checks below would raise nothing either
    _check_fields(fields)


def use_fields_check(c_check: Callable[[dict], bool] | None) -> None:
    """The one-pass check validate_fields asks first: `_fields_ok`, or the C accelerator's `fields_ok` (the same
    rules for exact types; anything else it leaves, like _fields_ok, to the step-by-step checks). Set by
    journal/canonical.py `use_speedups`, the one switch of the accelerator (BROKER_NO_SPEEDUPS)."""
    global _fields_fast
    _fields_fast = c_check or _fields_ok


def _check_fields(fields: dict) -> None:
    """validate_fields step by step, naming the first thing wrong."""
    expected = set(KEYS) - CHAINED_KEYS
    got = set(fields)
    if got != expected:
        missing, extra = sorted(expected - got), sorted(got - expected)
        raise ContractError(f"entry fields wrong: missing {missing}, unexpected {extra}")
    _check_common(fields)


def _fields_ok(fields: dict) -> bool:
    try:  # _common_ok reads each of the eleven names: with eleven keys, exactly those
        return _common_ok(fields)
    except KeyError:
        return False


_fields_fast: Callable[[dict], bool] = _fields_ok  # see use_fields_check


def validate_entry(entry: object) -> None:
    """Check a complete entry: exactly the fourteen keys with the contract's types."""
    if is_valid_entry(entry):
        return
    _check_entry(entry)


def _check_entry(entry: object) -> None:
    """validate_entry step by step, naming the first thing wrong."""
    if not isinstance(entry, dict):
        raise ContractError(f"entry is a {type(entry).__name__}, not an object")
    got = set(entry)
    if got != set(KEYS):
        missing, extra = sorted(set(KEYS) - got), sorted(got - set(KEYS))
        raise ContractError(f"entry keys wrong: missing {missing}, unexpected {extra}")
    seq = entry["seq"]
    if type(seq) is not int or seq < 1:
        raise ContractError(f"seq must be a positive integer, got {seq!r}")
    for key in ("prev", "hash"):
        if not isinstance(entry[key], str) or not _HEX64_RE.match(entry[key]):
            raise ContractError(f"{key} must be 64 lowercase hex characters")
    _check_common(entry)


def is_valid_entry(entry: object, *, links_known: bool = False) -> bool:
    """True when validate_entry would accept `entry`: the same rules, decided in one pass.

    The verifier asks this of every line, so it is written for speed (exact types, one lookup per
    field, byte translations for the fixed shapes, no error text); validate_entry runs the
    step-by-step checks only to name what is wrong. tests/journal/test_entry_fast.py checks that both agree
    on mutated entries.

    `links_known`: the caller found `prev` and `hash` in the entry, each equal to a string of 64 lowercase hex
    digits it holds (the verifier: `hash` the digest it computed, `prev` the hash of the entry before), so
    their form is not checked again.
    """
    if type(entry) is not dict or len(entry) != len(KEYS):
        return False
    try:  # with fourteen keys, finding each of the fourteen names means exactly those keys
        seq = entry["seq"]
        if not (type(seq) is int and seq >= 1):
            return False
        if not links_known:
            prev, digest = entry["prev"], entry["hash"]
            if not (type(prev) is str and type(digest) is str and len(prev) == 64 and len(digest) == 64):
                return False
            if not _is_lower_hex(prev + digest):
                return False
        return _common_ok(entry)
    except KeyError:
        return False


_HEX_DIGITS = b"0123456789abcdef"
_TS_SHAPE = b"0000-00-00T00:00:00.000Z"
_DIGITS_TO_ZERO = bytes(ord("0") if 48 <= c <= 57 else c for c in range(256))  # ASCII digits to "0"
_connector_ok = _CONNECTOR_RE.match
_GOOD_CONNECTORS: set[str] = set()  # connector names that matched _CONNECTOR_RE (a vault has a few)


def connector_known(connector: str) -> bool:
    """`connector` matches the contract's name rule (_CONNECTOR_RE); the names that did are remembered (a vault
    has a few), so the per-line readers do not run the regex on every line."""
    if connector in _GOOD_CONNECTORS:
        return True
    if _connector_ok(connector) is None:
        return False
    if len(_GOOD_CONNECTORS) < 1024:
        _GOOD_CONNECTORS.add(connector)
    return True


def _is_lower_hex(s: str) -> bool:
    """What _HEX64_RE checks (digits and a-f only), for any length: deleting those characters leaves nothing."""
    return s.isascii() and not s.encode().translate(None, _HEX_DIGITS)


def _common_ok(e: dict) -> bool:
    """True when _check_common(e) would raise nothing; KeyError when e lacks a key it reads.

    Exact `type(...) is str` here against isinstance there: a str subclass takes the slow path, which
    decides (JSON parsers make none). Both read only ASCII digits in `ts`.
    """
    ts, connector, session, agent, principal = e["ts"], e["connector"], e["session"], e["agent"], e["principal"]
    prompt_ref, mcp, req, resp = e["prompt_ref"], e["mcp"], e["request"], e["response"]
    if not (
        type(ts) is str and ts.isascii() and ts.encode().translate(_DIGITS_TO_ZERO) == _TS_SHAPE
        and type(session) is str and session and type(agent) is str and agent
        and type(principal) is str and principal
        and e["capture"] in CAPTURES and e["effect"] in EFFECTS
        and (prompt_ref is None or type(prompt_ref) is str)
        and (mcp is None or type(mcp) is dict)
        and type(req) is dict and type(resp) is dict
        and "method" in req and "url" in req and "body" in req and "body" in resp and "status" in resp
        and type(connector) is str
    ):
        return False
    if not connector_known(connector):
        return False
    method, status = req["method"], resp["status"]
    if not (type(method) is str and method and type(req["url"]) is str):
        return False
    if status is None:
        if "error" not in resp:
            return False
    elif type(status) is not int or not 100 <= status <= 999:
        return False
    for headers in (req.get("headers"), resp.get("headers")):
        if type(headers) is not list:
            return False
        for h in headers:
            if type(h) is not list or len(h) != 2 or type(h[0]) is not str or type(h[1]) is not str:
                return False
    return True


def _check_common(e: dict) -> None:
    if not isinstance(e["ts"], str) or not _TS_RE.match(e["ts"]):
        raise ContractError(f"ts must be YYYY-MM-DDTHH:MM:SS.mmmZ, got {e['ts']!r}")
    for key in ("session", "agent", "principal", "connector"):
        if not isinstance(e[key], str) or not e[key]:
            raise ContractError(f"{key} must be a non-empty string, got {e[key]!r}")
    if not _CONNECTOR_RE.match(e["connector"]):
        raise ContractError(f"connector must be a lowercase name, got {e['connector']!r}")
    if e["capture"] not in CAPTURES:
        raise ContractError(f"capture must be one of {CAPTURES}, got {e['capture']!r}")
    if e["effect"] not in EFFECTS:
        raise ContractError(f"effect must be one of {EFFECTS}, got {e['effect']!r}")
    if e["prompt_ref"] is not None and not isinstance(e["prompt_ref"], str):
        raise ContractError("prompt_ref must be a string or null")
    if e["mcp"] is not None and not isinstance(e["mcp"], dict):
        raise ContractError("mcp must be an object or null")
    _check_message(e["request"], "request", REQUEST_KEYS)
    _check_message(e["response"], "response", RESPONSE_KEYS)
    req, resp = e["request"], e["response"]
    if not isinstance(req["method"], str) or not req["method"]:
        raise ContractError("request.method must be a non-empty string")
    if not isinstance(req["url"], str):
        raise ContractError("request.url must be a string")
    status = resp["status"]
    if status is not None and (type(status) is not int or not 100 <= status <= 999):
        raise ContractError(f"response.status must be an HTTP status or null, got {status!r}")
    if status is None and "error" not in resp:
        raise ContractError("a response with status null must carry an 'error' key (SPEC: a call that got no answer)")


def _check_message(msg: object, name: str, keys: tuple[str, ...]) -> None:
    if not isinstance(msg, dict):
        raise ContractError(f"{name} must be an object")
    missing = [k for k in keys if k not in msg]
    if missing:
        raise ContractError(f"{name} lacks {missing}")
    headers = msg["headers"]
    if type(headers) is not list:
        raise ContractError(f"{name}.headers must be a list of [name, value] string pairs")
    for h in headers:  # a plain loop: this runs for every header of every entry the verifier reads
        if type(h) is not list or len(h) != 2 or type(h[0]) is not str or type(h[1]) is not str:
            raise ContractError(f"{name}.headers must be a list of [name, value] string pairs")
