"""The canonical form's per-call proofs with the C accelerator and with the pure-Python fallback, in one process.

    python -m bench.canonical_bench [--quick] [--entries N] [--rounds R] [--json FILE]

journal/canonical.py picks journal/_canonical_speedups.c at import unless BROKER_NO_SPEEDUPS is set; here both
run in the same process, switched the way tests/journal/conftest.py switches them, rounds interleaved:

1. hot CPU per call on the journal benchmark's ~2 KB entries (bench/journal_bench.py `_padded_fields`):
   `canonical_bytes(fields)` (the writer's, via `link_pieces`), `canonical_value(line)` with and without
   `keys_checked` (the verifier's quick test of a line), and the C functions alone;
2. `verify_session(workers=1)` of a session of N such entries (default 20,000, about 40 MB), CPU per entry.

Ratio = pure Python / C (> 1: the accelerator is faster), median over rounds. The load average is printed
with the figures. Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from bench import machine, scratch_dir, write_json
from bench.journal_bench import SESSION, _padded_fields, make_pad
from bench.load import load_average
from journal import canonical
from journal.chain import GENESIS, chain_entry
from journal.vault import Vault
from journal.verify import verify_session


@contextmanager
def _path(name: str) -> Iterator[None]:
    """canonical.py's functions switched to the C accelerator ("c") or to the pure-Python code ("python")."""
    was = canonical.SPEEDUPS
    canonical.use_speedups(name == "c")
    try:
        yield
    finally:
        canonical.use_speedups(was)


def _cpu_us(fn: Callable[[Any], object], items: list) -> float:
    """Best of 5 passes over items, CPU microseconds per item."""
    best = float("inf")
    for _ in range(5):
        t0 = time.process_time()
        for x in items:
            fn(x)
        best = min(best, time.process_time() - t0)
    return best / len(items) * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.canonical_bench", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small run (2000 entries, 1 round)")
    ap.add_argument("--entries", type=int, help="entries of the verified session (default 20000, --quick 2000)")
    ap.add_argument("--rounds", type=int, help="interleaved rounds of each path (default 3, --quick 1)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE (key 'canonical')")
    args = ap.parse_args(argv)
    args.entries = args.entries or (2000 if args.quick else 20_000)
    args.rounds = args.rounds or (1 if args.quick else 3)
    if not canonical.SPEEDUPS:
        print("skipped: the C accelerator is not in use (not built, or BROKER_NO_SPEEDUPS set)")
        return 0
    load_before = load_average()
    pad = make_pad()
    items = [_padded_fields(SESSION, k, pad) for k in range(1, args.entries + 1)]
    lines, prev = [], GENESIS
    for k, f in enumerate(items, 1):
        entry, line = chain_entry(f, k, prev)
        prev = entry["hash"]
        lines.append(line)
    bare = [line[:-1] for line in lines]
    root = scratch_dir("canonical-")
    try:
        vault = Vault.create(root / "vault")
        vault.session_path(SESSION).write_bytes(b"".join(lines))
        hot = items[:2000]
        cases: list[tuple[str, Callable[[], float]]] = [
            ("canonical_bytes(fields)", lambda: _cpu_us(canonical.canonical_bytes, hot)),
            ("canonical_value(line)", lambda: _cpu_us(canonical.canonical_value, bare[:2000])),
            ("canonical_value(line, keys_checked=True)",
             lambda: _cpu_us(lambda d: canonical.canonical_value(d, keys_checked=True), bare[:2000])),
            ("verify_session(workers=1), per entry",
             lambda: _cpu_us(lambda _: verify_session(vault, SESSION, workers=1), [None]) / len(lines)),
        ]
        figures: dict[str, dict[str, list[float]]] = {name: {"c": [], "python": []} for name, _ in cases}
        verify_session(vault, SESSION, workers=1)  # warm the page cache
        for _ in range(args.rounds):
            for path in ("c", "python"):
                with _path(path):
                    for name, run in cases:
                        figures[name][path].append(run())
        from journal import _canonical_speedups as accelerator

        alone = {"plain_json(fields)": _cpu_us(accelerator.plain_json, hot),
                 "jcs_line(line)": _cpu_us(accelerator.jcs_line, bare[:2000])}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load_after = load_average()
    print(f"canonical form, C accelerator against pure Python, CPU us per call, median of {args.rounds} rounds "
          f"(~{len(bare[0])} B lines; load average {load_before[0]:.2f} -> {load_after[0]:.2f})")
    print(f"{'case':44} {'C us':>8} {'Python us':>10} {'ratio':>6}")
    rows = {}
    for name, by_path in figures.items():
        c, py = statistics.median(by_path["c"]), statistics.median(by_path["python"])
        rows[name] = {"c_us": c, "python_us": py, "ratio": py / c}
        print(f"{name:44} {c:8.2f} {py:10.2f} {py / c:6.2f}")
    for name, us in alone.items():
        print(f"  C alone: {name:33} {us:8.2f}")
    print("ratio = pure Python / C (> 1: the accelerator is faster)")
    if args.json:
        write_json(args.json, "canonical", {"machine": machine(), "rows": rows, "alone": alone,
                                            "load": [load_before, load_after], "entries": args.entries})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
