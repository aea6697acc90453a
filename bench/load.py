"""A load generator for the "under a load of N" rows: N busy processes, each spinning on the CPU.

    python -m bench.load [--procs N] [--seconds S]     # stand-alone (Ctrl-C stops it)

    with busy_load(4):                                  # from a benchmark
        ... measure ...

Each process is a plain `while True` loop of integer arithmetic (no I/O, no memory growth), started at
nice 0 so it competes with the benchmark as another user's work would. N busy processes keep the
1-minute load average at about N above what the machine had (it takes ~1 minute for the average itself
to climb; the run queue is N more at once). The processes die with the parent: each watches its
parent's pid and exits when it changes.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import time
from collections.abc import Iterator


def _spin(parent: int) -> None:
    """Burn CPU until the parent is gone (checked every ~50 ms of work)."""
    x = 0
    while True:
        for _ in range(200_000):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        if os.getppid() != parent:
            return


@contextlib.contextmanager
def busy_load(procs: int) -> Iterator[list[int]]:
    """`procs` busy processes for the duration of the block; yields their pids. procs=0: no load."""
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_spin, args=(os.getpid(),), daemon=True) for _ in range(procs)]
    for w in workers:
        w.start()
    try:
        yield [w.pid for w in workers if w.pid is not None]
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.join(5)


def load_average() -> tuple[float, float, float]:
    """The 1, 5 and 15-minute load averages (what the figures were measured under)."""
    return os.getloadavg()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, default=4, help="busy processes (default 4)")
    ap.add_argument("--seconds", type=float, default=0, help="stop after S seconds (default: until Ctrl-C)")
    args = ap.parse_args(argv)
    with busy_load(args.procs) as pids:
        print(f"{len(pids)} busy processes: {' '.join(map(str, pids))}", flush=True)
        deadline = time.monotonic() + args.seconds if args.seconds > 0 else None
        try:
            while deadline is None or time.monotonic() < deadline:
                time.sleep(5)
                one, five, fifteen = load_average()
                print(f"load average {one:.2f} {five:.2f} {fifteen:.2f}", flush=True)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
