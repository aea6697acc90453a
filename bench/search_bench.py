"""Search benchmark: `broker search` over a ~1 GB vault against a plain read of every line.

    python -m bench.search_bench [--quick] [--mb MB] [--sessions K] [--repeat R] [--json FILE]

The vault (default ~1 GB in 8 sessions, ~1 KB entries, --quick ~64 MB) is generated in a scratch
directory with the replay benchmark's call mix (five connectors, reads and writes) and the real
chain code; half the sessions carry the 2026-12 keys (`answered_by`, `effect_basis`), one call in
500 is a 404 and one in 2,000 got no answer. Each query runs R times (default 3), best kept:

- baseline: every line of every session file read (`for line in file`), nothing parsed: the
  least any search that reads the journal must do;
- each query: `journal.search.search` (what `broker search` runs), matches counted.

ratio = query time / baseline time of the same run. Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import itertools
import random
import shutil
import time
from pathlib import Path

from bench import machine, scratch_dir, write_chained, write_json
from bench.replay_bench import make_call
from journal.search import Query, search
from journal.vault import Vault

QUERIES: list[tuple[str, dict]] = [
    ("--connector slack --effect write", {"connector": "slack", "effect": "write"}),
    ("--status 404", {"status": "404"}),
    ("--status none", {"status": "none"}),
    ("--answered-by none", {"answered_by": "none"}),
    ("--url /issues/17", {"url": "/issues/17"}),
    ("--text 'Northwind invoice'", {"text": "northwind invoice"}),
    ("--session bench-03 --since T --until T (1 s)",
     {"session": "bench-03", "since": "2026-09-22T10:00:05", "until": "2026-09-22T10:00:05"}),
    ("--since T --until T (1 s, every session)", {"since": "2026-09-22T10:00:05", "until": "2026-09-22T10:00:05"}),
    ("--connector gmail --effect read --text budget", {"connector": "gmail", "effect": "read", "text": "budget"}),
]


def generate(root: Path, total_bytes: int, sessions: int, seed: int = 7) -> tuple[int, int]:
    """Write `sessions` session files totalling about `total_bytes`; return (entries, bytes)."""
    vault = Vault.create(root)
    rng = random.Random(seed)
    entries = written = 0
    for k in range(sessions):
        sid = f"bench-{k:02d}"
        new_keys = k % 2 == 0  # half the sessions carry the 2026-12 keys

        def calls(sid: str = sid, new_keys: bool = new_keys):
            for seq in itertools.count(1):
                fields = make_call(seq, rng, 5000)
                fields["session"] = sid
                if seq % 500 == 0:
                    fields["response"]["status"] = 404
                if seq % 2000 == 1:
                    fields["response"] = {"status": None, "headers": [], "body": None, "error": "upstream timed out"}
                if new_keys:
                    fields["request"]["effect_basis"] = "rule"
                    fields["response"]["answered_by"] = "none" if fields["response"]["status"] is None else "upstream"
                yield fields

        n, size = write_chained(vault.session_path(sid), calls(), max_bytes=total_bytes // sessions)
        entries += n
        written += size
    return entries, written


def baseline(vault: Vault) -> int:
    n = 0
    for s in vault.sessions():
        with open(vault.session_path(s), "rb") as f:
            for _ in f:
                n += 1
    return n


def best(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.search_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run (~64 MB, 1 repeat)")
    ap.add_argument("--mb", type=int, help="vault size in MB (default 1024)")
    ap.add_argument("--sessions", type=int, default=8, help="session files (default 8)")
    ap.add_argument("--repeat", type=int, help="runs per query, best kept (default 3, --quick 1)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE (key 'search')")
    args = ap.parse_args()
    mb = args.mb or (64 if args.quick else 1024)
    repeat = args.repeat or (1 if args.quick else 3)
    scratch = scratch_dir("search-")
    try:
        t0 = time.perf_counter()
        entries, size = generate(scratch / "vault", mb << 20, args.sessions)
        gen = time.perf_counter() - t0
        vault = Vault.open_existing(scratch / "vault")
        print(f"vault: {size / (1 << 20):,.0f} MB, {entries:,} entries in {args.sessions} sessions "
              f"(generated in {gen:.1f} s)")
        base_s, lines = best(lambda: baseline(vault), repeat)
        print(f"baseline (read every line, no parsing): {base_s:.2f} s for {lines:,} lines")
        print(f"{'query':<48} {'matches':>9} {'seconds':>8} {'ratio':>6}")
        rows = []
        for label, q in QUERIES:
            query = Query(**q)
            secs, n = best(lambda query=query: sum(1 for _ in search(vault, query)), repeat)
            rows.append({"query": label, "matches": n, "seconds": round(secs, 3), "ratio": round(secs / base_s, 2)})
            print(f"{label:<48} {n:>9,} {secs:>8.2f} {secs / base_s:>6.2f}")
        if args.json:
            write_json(args.json, "search", {"machine": machine(), "vault_bytes": size, "entries": entries,
                                             "sessions": args.sessions, "baseline_seconds": round(base_s, 3),
                                             "queries": rows})
            print(f"figures written to {args.json}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
