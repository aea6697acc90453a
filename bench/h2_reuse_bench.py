"""Upstream connections and time of an HTTP/2 client's sequential calls to an HTTP/1.1 upstream through `broker run`,
with the connection reuse (broker/proxy/h2_upstream_reuse.py) and without it (the baseline: the same `broker run`
with `apply()` turned off, so stock mitmproxy 12), measured in the same run.

    python -m bench.h2_reuse_bench [--quick] [--calls N] [--repeat K] [--json FILE]

One `curl --http2` process makes N sequential GETs (the fake upstream's Gmail labels, each recorded) on one client
connection, and for scale the same with `--http1.1` through the broker with the reuse; a counting TCP relay in
front of the upstream counts the upstream connections. The time is curl's wall time (process start, CONNECT and
TLS to the broker included, the same for all). Best of K rounds, the brokers interleaved. Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

from bench import machine, scratch_dir, write_json
from tests.support.broker_harness import BrokerProcess
from tests.support.counting_relay import CountingRelay, RelayedUpstream
from tests.support.upstreams import Upstream

URL = "https://gmail.googleapis.com/gmail/v1/users/me/labels"
STOCK = ("import sys; from broker.proxy import h2_upstream_reuse; h2_upstream_reuse.apply = lambda: False; "
         "from broker.cli import main; sys.argv[0] = 'broker'; sys.exit(main())")


class StockBroker(BrokerProcess):
    """`broker run` with the reuse turned off in its process (the baseline)."""

    def command(self) -> list[str]:
        return [sys.executable, "-c", STOCK, *super().command()[1:]]


def calls(b: BrokerProcess, relay: CountingRelay, n: int, http: str = "--http2") -> tuple[float, int]:
    """Seconds for n sequential calls of one curl process, and the upstream connections they opened."""
    before = relay.accepted
    t = time.perf_counter()
    out = subprocess.run(["curl", "-sS", http, "--proxy", f"http://127.0.0.1:{b.port}", "--cacert", b.ca,
                          "-w", "%{http_version} %{http_code}\\n", *(["-o", "/dev/null", URL] * n)],
                         capture_output=True, timeout=300, check=True)
    took = time.perf_counter() - t
    if out.stdout.decode().split() != ["2" if http == "--http2" else "1.1", "200"] * n:
        raise RuntimeError(f"unexpected answers: {out.stdout[:200]!r}")
    time.sleep(0.2)  # a connection accepted just before curl returned is counted
    return took, relay.accepted - before


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.h2_reuse_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run (20 calls, 2 rounds)")
    ap.add_argument("--calls", type=int, help="sequential calls of the curl process (default 100)")
    ap.add_argument("--repeat", type=int, help="rounds, best kept (default 5, --quick 2)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE (key 'h2_reuse')")
    args = ap.parse_args(argv)
    if shutil.which("curl") is None:
        print("skipped: needs curl")
        return 0
    n = args.calls or (20 if args.quick else 100)
    repeat = args.repeat or (2 if args.quick else 5)
    load_start = os.getloadavg()
    best: dict[str, float] = {}
    conns: dict[str, int] = {}
    root = scratch_dir("h2reuse-")
    try:
        with Upstream() as up:
            relays = {v: CountingRelay(up.port) for v in ("reuse", "stock")}
            try:
                (root / "reuse").mkdir()
                (root / "stock").mkdir()
                with BrokerProcess(root / "reuse", RelayedUpstream(up, relays["reuse"]), "--session", "bench") as a, \
                        StockBroker(root / "stock", RelayedUpstream(up, relays["stock"]), "--session", "bench") as s:
                    for _ in range(repeat):
                        for variant, b, http in (("stock", s, "--http2"), ("reuse", a, "--http2"),
                                                 ("http1", a, "--http1.1")):
                            took, opened = calls(b, relays["stock" if b is s else "reuse"], n, http)
                            best[variant] = min(best.get(variant, 1e9), took)
                            conns[variant] = max(conns.get(variant, 0), opened)
            finally:
                for r in relays.values():
                    r.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load_end = os.getloadavg()
    print(f"load average at start {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}, "
          f"at end {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    print(f"{n} sequential calls of one curl --http2 through broker run to an HTTP/1.1 upstream, best of {repeat}")
    print(f"{'broker run':<34} {'upstream conns':>15} {'total ms':>9} {'ms/call':>8} {'x stock':>8}")
    labels = {"stock": "stock mitmproxy (baseline)", "reuse": "with h2_upstream_reuse",
              "http1": "curl --http1.1 (for scale)"}
    for v in ("stock", "reuse", "http1"):
        print(f"{labels[v]:<34} {conns[v]:>15} {best[v] * 1000:>9.0f} {best[v] / n * 1000:>8.2f} "
              f"{best[v] / best['stock']:>8.2f}")
    if args.json:
        write_json(args.json, "h2_reuse", {
            "machine": machine(), "params": {"calls": n, "repeat": repeat},
            "load_average": {"start": load_start, "end": load_end},
            "seconds": best, "upstream_connections": conns, "ratio_to_stock": best["reuse"] / best["stock"],
        })
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
