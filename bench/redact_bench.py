"""Redaction scan speed: `StreamingRedactor` over realistic bodies, fed in 64 KiB chunks.

    python -m bench.redact_bench [--quick] [--mb MB] [--repeat R] [--json FILE]

Bodies (each about MB megabytes, generated with a fixed seed, no credential in them, so the figure is
the scan itself): a Gmail `messages.list`-style JSON document of many small objects, a Gmail
attachment JSON holding one long base64url string, English-like prose with URLs (text/plain), random
bytes (application/octet-stream) and a form body of many short fields. Baseline, same run, same bytes:
`hashlib.sha256` over the body (a fixed per-byte cost, so the ratio follows the machine's load).
Ratio = redaction time / sha256 time (lower is better); best of R rounds for both. Times are the
thread's CPU time (`time.thread_time`), which a machine shared with other work disturbs less than the
wall clock.

Nothing here asserts a timing; the figures are printed (and written with --json).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import random
import sys
import time

import orjson

from bench import machine, write_json
from journal.redact import StreamingRedactor

CHUNK = 64 << 10
MB = 1_000_000

_WORDS = ("the", "meeting", "agenda", "invoice", "quarterly", "report", "attached", "please", "review",
          "before", "friday", "thanks", "budget", "draft", "project", "status", "update", "team", "notes",
          "deadline", "customer", "renewal", "contract", "signed", "shipping", "address", "order")  # fmt: skip


def _gmail_list(rng: random.Random, size: int) -> bytes:
    msgs, n = [], 0
    while n < size:
        m = {
            "id": f"{rng.getrandbits(64):016x}", "threadId": f"{rng.getrandbits(64):016x}",
            "labelIds": ["INBOX", "UNREAD", "CATEGORY_UPDATES"], "snippet": " ".join(rng.choices(_WORDS, k=18)),
            "payload": {"headers": [{"name": "From", "value": "Alice Example <alice@example.com>"},
                                    {"name": "Subject", "value": " ".join(rng.choices(_WORDS, k=6))},
                                    {"name": "Date", "value": "Tue, 22 Sep 2026 09:14:00 +0000"}]},
            "sizeEstimate": rng.randint(1000, 90000), "historyId": str(rng.getrandbits(32)),
        }  # fmt: skip
        msgs.append(m)
        n += 420
    return orjson.dumps({"messages": msgs, "nextPageToken": "0812345", "resultSizeEstimate": len(msgs)})


def _attachment(rng: random.Random, size: int) -> bytes:
    data = base64.urlsafe_b64encode(rng.randbytes(size * 3 // 4)).decode()
    return orjson.dumps({"size": size * 3 // 4, "data": data})


def _prose(rng: random.Random, size: int) -> bytes:
    out, n = [], 0
    while n < size:
        line = " ".join(rng.choices(_WORDS, k=12))
        if rng.random() < 0.2:
            line += f" https://docs.example.com/d/{rng.getrandbits(40):x}/edit?usp=sharing&page={rng.randint(1, 9)}"
        out.append(line.capitalize() + ".\n")
        n += len(out[-1])
    return "".join(out).encode()


def _form(rng: random.Random, size: int) -> bytes:
    parts, n = [], 0
    while n < size:
        parts.append(f"field{len(parts)}={'+'.join(rng.choices(_WORDS, k=3))}")
        n += len(parts[-1]) + 1
    return "&".join(parts).encode()


def bodies(size: int) -> list[tuple[str, str, bytes]]:
    rng = random.Random(20261201)
    return [
        ("Gmail messages.list JSON", "application/json; charset=UTF-8", _gmail_list(rng, size)),
        ("attachment JSON (base64url)", "application/json", _attachment(rng, size)),
        ("prose with URLs", "text/plain; charset=utf-8", _prose(rng, size)),
        ("random bytes", "application/octet-stream", rng.randbytes(size)),
        ("form fields", "application/x-www-form-urlencoded", _form(rng, size)),
    ]


def _redact(body: bytes, content_type: str) -> int:
    r = StreamingRedactor(content_type)
    n = 0
    for i in range(0, len(body), CHUNK):
        n += len(r.feed(body[i : i + CHUNK]))
    return n + len(r.close())


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.thread_time()
        fn()
        best = min(best, time.thread_time() - t)
    return best


def run(size: int, repeat: int) -> list[dict]:
    rows = []
    for name, ctype, body in bodies(size):
        out = _redact(body, ctype)
        base = _best(lambda b=body: hashlib.sha256(b).digest(), repeat)
        t = _best(lambda b=body, c=ctype: _redact(b, c), repeat)
        rows.append({
            "body": name, "content_type": ctype.split(";")[0], "bytes": len(body), "changed": out != len(body),
            "seconds": t, "mb_s": len(body) / t / MB, "sha256_seconds": base, "ratio": t / base,
        })  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.redact_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run (0.5 MB bodies, 3 rounds)")
    ap.add_argument("--mb", type=float, help="size of each body in MB (default 2, --quick 0.5)")
    ap.add_argument("--repeat", type=int, help="rounds, best kept (default 5, --quick 3)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE (key 'redact')")
    args = ap.parse_args(argv)
    size = int((args.mb or (0.5 if args.quick else 2)) * MB)
    repeat = args.repeat or (3 if args.quick else 5)
    if size < 1 or repeat < 1:
        ap.error("--mb and --repeat must be positive")
    rows = run(size, repeat)
    print(f"redaction scan, StreamingRedactor fed {CHUNK >> 10} KiB chunks, best of {repeat}")
    print(f"{'body':<30} {'type':<34} {'MB':>6} {'MB/s':>7} {'ratio':>7}")
    for r in rows:
        print(f"{r['body']:<30} {r['content_type']:<34} {r['bytes'] / MB:>6.2f} {r['mb_s']:>7.1f} {r['ratio']:>7.1f}")
    print("ratio = redaction time / hashlib.sha256 time over the same bytes (lower is better)")
    print(f"(Python {sys.version.split()[0]} on {os.cpu_count()} CPUs)")
    if args.json:
        write_json(args.json, "redact", {"machine": machine(), "chunk": CHUNK, "repeat": repeat, "rows": rows})
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
