"""Export benchmark: each `broker export` format and `broker diff` against `broker verify` of the same session.

    python -m bench.export_bench [--quick] [--entries N] [--repeat K] [--json FILE]

The session is replay_bench's synthetic mix of five connectors (default 20,000 entries, --quick
2,000), chained with the real chain code. Each export runs in this process as the CLI does it
(the streamed writer, its pieces counted, not kept) and includes the chain check every export makes;
`broker diff` compares the session with itself. Best of K rounds (default 3, --quick 1); ratio =
time / verify time of the same run. Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator

from bench import machine, scratch_dir, write_json
from bench.replay_bench import SESSION, build_session


def operations(root: str) -> dict[str, Callable[[], int]]:
    """name -> a callable doing the operation and returning the bytes it produced."""
    from journal.diff import diff_sessions, render
    from journal.export.fixture import fixture_chunks
    from journal.export.har import har_chunks
    from journal.export.ocsf import ocsf_chunks
    from journal.export.otel import otlp_chunks
    from journal.export.otlp_send import otlp_batches
    from journal.export.vcr import cassette_chunks
    from journal.vault import Vault
    from journal.verify import verify_session

    def written(chunks: Iterator[bytes]) -> int:
        return sum(len(c) for c in chunks)

    return {
        "verify (baseline)": lambda: verify_session(Vault.open_existing(root), SESSION).bytes,
        "fixture": lambda: written(fixture_chunks(root, SESSION)),
        "har": lambda: written(har_chunks(root, SESSION)),
        "vcr": lambda: written(cassette_chunks(root, SESSION)),
        "ocsf": lambda: written(ocsf_chunks(root, SESSION)),
        "otel (OTLP/JSON)": lambda: written(otlp_chunks(root, SESSION)),
        "otel (protobuf, --otlp)": lambda: sum(len(b.body) for b in otlp_batches(root, SESSION)),
        "diff (session vs itself)": lambda: len(render(diff_sessions(root, SESSION, SESSION))),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.export_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run (2,000 entries, 1 repeat)")
    ap.add_argument("--entries", type=int, help="entries in the session (default 20,000)")
    ap.add_argument("--repeat", type=int, help="runs per measurement, best kept (default 3, --quick 1)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE (key 'export')")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    entries = args.entries or (2_000 if args.quick else 20_000)
    repeat = args.repeat or (1 if args.quick else 3)
    if entries < 1 or repeat < 1:
        ap.error("--entries and --repeat must be positive")
    root = scratch_dir("export-") / "vault"
    try:
        _, size = build_session(root, entries, max(1, entries // 20))
        ops = operations(str(root))
        best: dict[str, tuple[float, int]] = {}
        for _ in range(repeat):
            for name, op in ops.items():
                t0 = time.perf_counter()
                produced = op()
                took = time.perf_counter() - t0
                if name not in best or took < best[name][0]:
                    best[name] = (took, produced)
    finally:
        shutil.rmtree(root.parent, ignore_errors=True)
    base = best["verify (baseline)"][0]
    print(f"session: {entries:,} entries, {size / 1e6:.1f} MB; best of {repeat}")
    print(f"\n{'operation':<26} {'best s':>8} {'entries/s':>10} {'output MB':>10} {'x verify':>9}")
    for name, (took, produced) in best.items():
        print(f"{name:<26} {took:>8.2f} {entries / took:>10,.0f} {produced / 1e6:>10.1f} {took / base:>9.2f}")
    print(f"\n{os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    if args.json:
        write_json(args.json, "export", {
            "machine": machine(), "params": {"entries": entries, "repeat": repeat, "session_bytes": size},
            "results": {k: {"seconds": t, "output_bytes": b, "x_verify": t / base} for k, (t, b) in best.items()},
        })
    return 0


if __name__ == "__main__":
    sys.exit(main())
