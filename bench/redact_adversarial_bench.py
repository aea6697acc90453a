"""Redaction of bodies built against the rules (the review of 2026-12-02): is any of them super-linear?

    python -m bench.redact_adversarial_bench [--quick] [--mb MB] [--repeat R] [--json FILE]

Each body repeats one piece made to start a rule and fail it late (the `\\u000a` line break of redact30, `%0A`
after a long parameter, nested `\\\\\\"`, name/value heads, YAML list items, ...) up to MB megabytes. Baseline,
same run, same size: prose (`plain`). Per body, `redact_body` as a capture point calls it, for three content
types: the ratio to the baseline (how much dearer than prose), and the growth from a quarter of the size to the
whole (4.0 is linear: a backtracking rule shows as 16 and more). Then `redact_url` on URLs of a quarter of that
size made of one query parameter repeated, against plain parameters. Thread CPU time, best of R.

Nothing here asserts a timing; the figures are printed (and written with --json).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from bench import machine, write_json
from journal.redact import redact_body, redact_url

CONTENT_TYPES = ("application/json", "text/plain", "application/x-www-form-urlencoded")


def _plain(n: int) -> bytes:
    rng = random.Random(30)
    words = (b"lorem", b"ipsum", b"dolor", b"sit", b"amet", b"data", b"value", b"x1", b"the", b"and")
    out = bytearray()
    while len(out) < n:
        out += rng.choice(words) + (b"\n" if rng.random() < 0.05 else b" ")
    return bytes(out[:n])


def _rep(unit: bytes, head: bytes = b"", tail: bytes = b"") -> Callable[[int], bytes]:
    return lambda n: head + unit * (n // len(unit)) + tail


BODIES: dict[str, Callable[[int], bytes]] = {
    "plain": _plain,
    "u000a": _rep(b"\\u000a", b'{"a": "', b'"'),
    "u000a blanks": _rep(b"\\u000a\\u0020\\u0009", b'{"a": "', b'"'),
    "u000a name": _rep(b"\\u000a- export DB_PASSWOR", b'{"a": "', b'"'),
    "u000a id words": _rep(b"\\u000aa.b.c.", b'{"a": "', b'"'),
    "newline blanks": _rep(b"\n" + b" \t" * 8 + b"\\t" * 4),
    "%0A long names": _rep(b"%0A" + b"a" * 60 + b"_", b"?q="),
    "& long params": _rep(b"&" + b"a" * 60 + b"=" + b"x" * 31 + b"%41"),
    "? value runs": _rep(b"?" + b"n" * 64 + b"=" + (b"y" * 32 + b"%0A") * 90),
    "& %0A runs": _rep(b"&k=" + b"%0A" * 100),
    "%0A blanks": _rep(b"%0A" + b"+" * 40 + b"%20" * 10, b"a=b"),
    "nested backslashes": _rep(b"\\\\\\\\", b'\\\\\\"password\\\\\\": \\\\\\"'),
    "nested quotes": _rep(b'\\\\\\\\\\\\\\"', b'\\\\\\"password\\\\\\": \\\\\\"'),
    "nested heads": _rep(b'\\\\\\"password\\\\\\" : \\\\\\"'),
    "name/value heads": _rep(b'{"name": "password", "value": "'),
    "name/value number heads": _rep(b'{"name": "password", "value": 1'),
    "name/value list heads": _rep(b'{"name": "password", "value": ['),
    "name/value partial": _rep(b'"name" : "a.b.c.password"   ,   "valu'),
    "yaml items": _rep(b"\n- - - - "),
    "escaped quote lines": _rep(b'\\n password: \\\\\\"'),
}


URL_PARAMS = {
    # a component whose decoded text the body rules read (`_decoded_holds_secret`: one redact_body each)
    "plain": "a=b&", "%3D": "a=%3D&", "%22": "q=%22x%22&", "%3C": "q=%3Cx&", "%0A line": "q=x%0Apassword%3A&",
    "long %3D": "q=" + "%3D" * 30 + "&",
}
"""Query parameters repeated into a URL of a quarter of the body size (`redact_url`)."""


def _url_cpu(unit: str, size: int, repeat: int) -> float:
    url = "https://h.example/p?" + unit * (size // len(unit))
    best = float("inf")
    for _ in range(repeat):
        start = time.thread_time()
        redact_url(url)
        best = min(best, time.thread_time() - start)
    return best


def _cpu(body: bytes, content_type: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.thread_time()
        redact_body(body, content_type)
        best = min(best, time.thread_time() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=1.0, help="size of each body in MiB (default 1)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="256 KiB bodies, one round")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    if args.quick:
        args.mb, args.repeat = 0.25, 1
    size = int(args.mb * (1 << 20))
    results: dict = {"machine": machine(), "bytes": size, "types": {}}
    for content_type in CONTENT_TYPES:
        redact_body(b"warm up", content_type)  # the rules compile on first use
        base = _cpu(BODIES["plain"](size), content_type, args.repeat)
        rows = {}
        print(f"{content_type}: plain {size} B {base * 1e3:.1f} ms CPU")
        for name, make in BODIES.items():
            if name == "plain":
                continue
            redact_body(make(4096), content_type)  # a rule variant compiles when first met (journal.redact)
            whole = _cpu(make(size), content_type, args.repeat)
            quarter = _cpu(make(size // 4), content_type, args.repeat)
            rows[name] = {"ratio": whole / base, "growth": whole / quarter, "ms": whole * 1e3}
            print(f"  {name:26s} x plain {whole / base:6.2f}   growth x4 size {whole / quarter:5.2f}   "
                  f"({whole * 1e3:.1f} ms)")
        results["types"][content_type] = {"plain_ms": base * 1e3, "bodies": rows}
    url_size = size // 4
    redact_url("https://h.example/p?a=%3D")
    base = _url_cpu(URL_PARAMS["plain"], url_size, args.repeat)
    print(f"redact_url: plain parameters, {url_size} B {base * 1e3:.1f} ms CPU")
    urls = {}
    for name, unit in URL_PARAMS.items():
        if name == "plain":
            continue
        whole, quarter = _url_cpu(unit, url_size, args.repeat), _url_cpu(unit, url_size // 4, args.repeat)
        urls[name] = {"ratio": whole / base, "growth": whole / quarter, "ms": whole * 1e3}
        print(f"  {name:26s} x plain {whole / base:6.2f}   growth x4 size {whole / quarter:5.2f}   "
              f"({whole * 1e3:.1f} ms)")
    results["urls"] = {"plain_ms": base * 1e3, "params": urls}
    if args.json:
        write_json(args.json, "redact_adversarial", results)


if __name__ == "__main__":
    main()
