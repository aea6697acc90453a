"""``python -m tests.support.upstreams``: run the fake upstreams until SIGINT/SIGTERM.

Why: the README demo and the benchmarks need the fake in its own process; they read the port, the CA
path and the ``--resolve`` arguments from stdout (also written as JSON with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import threading

from .server import Upstream


def main(argv: list[str] | None = None) -> int:
    """Start, print how to reach it, serve until a signal."""
    ap = argparse.ArgumentParser(prog="python -m tests.support.upstreams", description=__doc__)
    ap.add_argument(
        "--require-auth",
        action="store_true",
        help="answer 401 when Google/GitHub/Graph calls carry no credentials",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON line instead of text")
    ap.add_argument("--max-records", type=int, default=10_000, help="bound on remembered requests")
    args = ap.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with Upstream(require_auth=args.require_auth, max_records=args.max_records) as up:
        if args.json:
            print(
                json.dumps(
                    {
                        "port": up.port,
                        "ca_pem": up.ca_pem,
                        "hosts": up.hosts,
                        "resolve_args": up.resolve_args(),
                    }
                ),
                flush=True,
            )
        else:
            print(f"port: {up.port}")
            print(f"ca: {up.ca_pem}")
            print(f"resolve: {shlex.join(up.resolve_args())}")
            print(
                f"curl: curl {shlex.join(up.curl_args())} https://gmail.googleapis.com/gmail/v1/users/me/labels",
                flush=True,
            )
        while not stop.wait(0.5):
            pass
    print("stopped", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
