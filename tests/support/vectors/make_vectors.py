"""Generate tests/support/vectors/canonical.json: canonical-form test vectors
(docs/contract.md "Canonical form and hash").

The oracle is the `rfc8785` package, never journal/canonical.py: the vectors are what every
implementation (the Python writer, the verifier, browser code) must reproduce.

Each vector is {"name", "value_json", "value", "canonical", "sha256"}:

- `value_json` is authoritative: the JSON text of the value exactly as written here, so that
  `1.0`, `-0.0` and `1e16` stay floats when parsed (a consumer parses it with its own JSON
  parser instead of trusting how the vector file happens to write numbers).
- `value` is the same value embedded for convenience; do not rely on it for float vectors.
- `canonical` is the canonical text, `sha256` the lowercase hex SHA-256 of its UTF-8 bytes.

The output is deterministic (ASCII only, fixed order). Run from anywhere:

    .venv/bin/python tests/support/vectors/make_vectors.py          # rewrite canonical.json
    .venv/bin/python tests/support/vectors/make_vectors.py --check  # exit 1 if canonical.json is stale
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import rfc8785

OUT = Path(__file__).with_name("canonical.json")

ZERO_HASH = "0" * 64
TEXT = "Rechnung erhalten \u2705 \U0001f4e8 \u00fcber \u20ac120"  # emoji, umlaut, euro sign

# (name, JSON text of the value). The JSON text is parsed with json.loads, so every escape
# below is a JSON escape, and `1.0` / `-0.0` / `1e16` are floats.
SOURCES: list[tuple[str, str]] = [
    # --- literals and empties
    ("null", "null"),
    ("true", "true"),
    ("false", "false"),
    ("empty object", "{}"),
    ("empty array", "[]"),
    ("empty string", '""'),
    ("object with empty key and empty values", '{"": "", "a": {}, "b": []}'),
    # --- integers
    ("integer 0", "0"),
    ("integer -1", "-1"),
    ("integer 1", "1"),
    ("integer 2^53-1", "9007199254740991"),
    ("integer -(2^53-1)", "-9007199254740991"),
    ("integers in array", "[0, -1, 1, 42, -42, 1000000, 9007199254740991, -9007199254740991]"),
    # --- floats (ECMAScript Number.prototype.toString)
    ("float 1.0", "1.0"),
    ("float -1.0", "-1.0"),
    ("float 1e16", "1e16"),
    ("float 1e-7", "1e-7"),
    ("float -0.0", "-0.0"),
    ("float 0.0", "0.0"),
    ("float 0.1", "0.1"),
    ("float 1e21", "1e21"),
    ("float 1e20", "1e20"),
    ("float 1e-6", "1e-6"),
    ("float -1e-7", "-1e-7"),
    ("float 5e-324 (smallest subnormal)", "5e-324"),
    ("float -5e-324", "-5e-324"),
    ("float 1.7976931348623157e308 (largest double)", "1.7976931348623157e308"),
    ("float -1.7976931348623157e308", "-1.7976931348623157e308"),
    ("float 123456789012345680000", "123456789012345680000.0"),
    ("float 2^53 as 9007199254740992.0", "9007199254740992.0"),
    ("float 0.000001234", "0.000001234"),
    ("float 1.5e-7", "1.5e-7"),
    ("float 1e23", "1e23"),
    ("float 1.0000000000000002", "1.0000000000000002"),
    ("float 333333333.33333329", "333333333.33333329"),
    ("float 4.5", "4.50"),
    ("float 2e-3", "2e-3"),
    ("float 1e30", "1E30"),
    ("float 1e-27", "0.000000000000000000000000001"),
    ("float -123.456", "-123.456"),
    ("floats and integers mixed", "[1, 1.0, 1.5, -0.0, 0, 100, 100.0, 1e2]"),
    # --- strings and escapes
    ("string ascii", '"hello world"'),
    ("string quote and backslash", '"say \\"hi\\" \\\\ back\\\\slash"'),
    ("string short escapes", '"\\b\\f\\n\\r\\t"'),
    (
        "string all control characters U+0000..U+001F",
        '"' + "".join(f"\\u{c:04x}" for c in range(0x20)) + '"',
    ),
    ("string U+007F DEL written as itself", '"a\\u007fb"'),
    ("string U+2028 U+2029 written as themselves", '"x\\u2028y\\u2029z"'),
    ("string solidus not escaped", '"a/b\\/c"'),
    ("string non-ASCII written as itself", '"caf\\u00e9 \\u20ac \\u65e5\\u672c \\u00f6"'),
    ("string non-BMP written as itself", '"\\ud83d\\ude00 \\ud800\\udc00 \\udbff\\udfff"'),
    ("string U+E000 and U+FFFF", '"\\ue000\\uffff"'),
    ("string BOM U+FEFF", '"\\ufeffbom"'),
    ("string unicode escape of ASCII letter", '"\\u0041\\u0042"'),
    (
        "RFC 8785 3.2.2 example",
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        ' "literals": [null, true, false]}',
    ),
    # --- key order: UTF-16 code units, not code points
    ("keys ascii order", '{"b": 1, "a": 2, "B": 3, "aa": 4, "": 5, "A": 6, "_": 7, "1": 8}'),
    ("keys emoji vs U+E000 (UTF-16 puts emoji first)", '{"\\ue000": 1, "\\ud83d\\ude00": 2}'),
    (
        "keys U+FFFF vs U+10000 vs U+D7FF",
        '{"\\uffff": "ffff", "\\ud800\\udc00": "10000", "\\ud7ff": "d7ff", "\\ue000": "e000"}',
    ),
    (
        "keys U+FB33 vs U+1F600 vs U+10FFFF",
        '{"\\ufb33": 1, "\\ud83d\\ude00": 2, "\\udbff\\udfff": 3, "\\uff01": 4, "z": 5}',
    ),
    (
        "RFC 8785 3.2.3 sorting example",
        '{"\\u20ac": "Euro Sign", "\\r": "Carriage Return", "\\ufb33": "Hebrew Letter Dalet With Dagesh",'
        ' "1": "One", "\\ud83d\\ude00": "Emoji: Grinning Face", "\\u0080": "Control",'
        ' "\\u00f6": "Latin Small Letter O With Diaeresis"}',
    ),
    ("keys prefix order", '{"abc": 1, "ab": 2, "a": 3, "abcd": 4, "b": 5}'),
    ("keys with escapes", '{"a\\"b": 1, "a\\\\b": 2, "a\\nb": 3, "a\\u0000b": 4, "a/b": 5}'),
    ("duplicate-free nested keys sorted at every depth", '{"z": {"y": {"x": 1, "w": 2}, "v": 3}, "u": 4}'),
    (
        "nested emoji vs private-use keys at depth",
        '{"outer": [{"\\ue001": 1, "\\ud83d\\ude80": 2, "a": 3}], "\\uf8ff": {"\\ud83d\\ude00": null}}',
    ),
    # --- nesting
    ("nested arrays", "[[], [[]], [[[]]], [1, [2, [3, [4]]]]]"),
    (
        "nested objects and arrays",
        '{"b": [1, {"d": true, "c": null}], "a": {"z": {}, "y": []}, "c": [{"b": 2, "a": 1}, "x"]}',
    ),
    ("array order kept", '[3, 1, 2, "b", "a", null, false, true]'),
    ("deep nesting 64 levels", "[" * 64 + "0" + "]" * 64),
    ("whitespace in source dropped", '{ "a" : [ 1 , 2 ] ,\n\t"b" : { } }'),
]


def _entry_1() -> dict:
    return {
        "seq": 1,
        "ts": "2025-03-14T09:26:53.589Z",
        "session": "sess-2025-03-14-7f3a",
        "agent": "claude-desktop",
        "principal": "alice@example.com",
        "connector": "gmail",
        "capture": "broker",
        "prompt_ref": None,
        "effect": "read",
        "mcp": None,
        "request": {
            "method": "GET",
            "url": (
                "https://gmail.googleapis.com/gmail/v1/users/me/messages"
                "?q=invoice&access_token=[never captured]"
            ),
            "headers": {
                "Authorization": "[never captured]",
                "Accept": "application/json",
                "User-Agent": "agent/1.0",
            },
            "body": None,
        },
        "response": {
            "status": 200,
            "headers": {"Content-Type": "application/json; charset=UTF-8", "Vary": "Origin"},
            "body": {
                "messages": [
                    {"id": "18e3b2c9a1f0d4e7", "threadId": "18e3b2c9a1f0d4e7"},
                    {"id": "18e3a0f5c2b1e9d8", "threadId": "18e39f00aa11bb22"},
                ],
                "resultSizeEstimate": 2,
            },
            "body_sha256": hashlib.sha256(b"(raw body bytes)").hexdigest(),
            "body_size": 161,
        },
        "prev": ZERO_HASH,
    }


def _entry_2(prev: str) -> dict:
    return {
        "seq": 2,
        "ts": "2025-03-14T09:26:55.012Z",
        "session": "sess-2025-03-14-7f3a",
        "agent": "claude-desktop",
        "principal": "alice@example.com",
        "connector": "slack",
        "capture": "gateway",
        "prompt_ref": "prompts/sha256/3f/3f9a" + "0" * 60,
        "effect": "write",
        "mcp": {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {
                "name": "slack_post_message",
                "arguments": {"channel": "C024BE91L", "text": TEXT},
            },
        },
        "request": {
            "method": "POST",
            "url": "https://slack.com/api/chat.postMessage",
            "headers": {"Content-Type": "application/json", "Authorization": "[never captured]"},
            "body": {"channel": "C024BE91L", "text": TEXT},
        },
        "response": {
            "status": 200,
            "headers": {"Content-Type": "application/json"},
            "body": {
                "ok": True,
                "channel": "C024BE91L",
                "ts": "1710408415.000200",
                "message": {"text": TEXT, "\ue000x": 1, "\U0001f600": 2},
            },
        },
        "prev": prev,
    }


def _sha256(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _journal_sources() -> list[tuple[str, str]]:
    """A two-entry chain whose `hash` and `prev` fields are computed with the oracle."""
    out: list[tuple[str, str]] = []
    prev = ZERO_HASH
    for n, make in ((1, lambda p: _entry_1()), (2, _entry_2)):
        entry = make(prev)
        out.append((f"journal entry seq {n} without hash", json.dumps(entry, ensure_ascii=False)))
        entry["hash"] = _sha256(rfc8785.dumps(entry))
        out.append((f"journal entry seq {n}", json.dumps(entry, ensure_ascii=False)))
        prev = entry["hash"]
    return out


def build() -> list[dict]:
    vectors = []
    seen = set()
    for name, value_json in SOURCES + _journal_sources():
        assert name not in seen, f"duplicate vector name {name!r}"
        seen.add(name)
        value = json.loads(value_json)
        canonical = rfc8785.dumps(value)
        vectors.append(
            {
                "name": name,
                "value_json": value_json,
                "value": value,
                "canonical": canonical.decode("utf-8"),
                "sha256": _sha256(canonical),
            }
        )
    return vectors


def render() -> str:
    return json.dumps(build(), ensure_ascii=True, indent=1) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is stale; run {Path(__file__).name} to regenerate", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {len(build())} vectors to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
