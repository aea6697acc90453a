"""`broker export --format otel --otlp URL` at scale (issue 26): batched requests against the `--out` file export.

    python -m bench.otlp_send_bench [--sizes 10000,100000] [--whole-up-to N] [--json FILE]

The session is scale_bench's synthetic one (the replay benchmark's call mix, ~1 KB an entry). Each run is a
fresh `broker` process (wall and CPU seconds and peak RSS from wait4), sending to a receiver on loopback
in this process that counts requests and bytes and answers 200. Measured per size:
- baseline: `--out FILE` (the streamed OTLP/JSON file export);
- `--otlp URL` with the default batches (512 spans, 4 MiB);
- up to --whole-up-to entries (default 10,000): `--otlp URL --batch-spans 10^9 --batch-bytes 10^12`, one
  request holding every span, as `--otlp` sent before batching (its memory grows with the session).
Ratio = time / baseline time of the same run. Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench import machine, scratch_dir, write_json
from bench.scale_bench import SESSION, broker_usage, generate


class _Receiver:
    """An OTLP/HTTP stand-in on 127.0.0.1: reads each request, counts it, answers 200 (an empty response)."""

    def __init__(self) -> None:
        self.requests = self.bytes = 0
        lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                left = int(self.headers.get("Content-Length", "0"))
                while left:
                    left -= len(self.rfile.read(min(left, 1 << 20)))
                with lock:
                    receiver.requests += 1
                    receiver.bytes += int(self.headers.get("Content-Length", "0"))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def take(self) -> tuple[int, int]:
        got = (self.requests, self.bytes)
        self.requests = self.bytes = 0
        return got

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.otlp_send_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000", help="entries in the session, comma-separated")
    ap.add_argument("--whole-up-to", type=int, default=10_000, help="also send one whole request up to this size")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE (key 'otlp_send')")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    receiver = _Receiver()
    rows: list[dict[str, Any]] = []
    load_start = os.getloadavg()[0]
    try:
        for n in sizes:
            scratch = scratch_dir("otlp-send-")
            try:
                vault = scratch / "vault"
                size = generate(vault, n)
                where = ["--vault", str(vault)]
                runs = {"--out FILE (baseline)": ["--out", str(scratch / "s.json")],
                        "--otlp (batches)": ["--otlp", receiver.url]}
                if n <= args.whole_up_to:
                    runs["--otlp, one request"] = ["--otlp", receiver.url, "--batch-spans", str(10**9),
                                                   "--batch-bytes", str(10**12)]
                for name, extra in runs.items():
                    wall, cpu, rss, code = broker_usage(["export", SESSION, "--format", "otel", *where, *extra], env)
                    requests, sent = receiver.take()
                    if name.startswith("--out"):
                        sent = (scratch / "s.json").stat().st_size
                    rows.append({"entries": n, "session_mb": size / 1e6, "run": name, "wall_s": wall, "cpu_s": cpu,
                                 "peak_rss_mib": rss, "requests": requests, "mb": sent / 1e6, "exit": code})
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
    finally:
        receiver.close()
    print(f"load average (1 min) {load_start:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    print(f"\n{'entries':>8} {'run':<24} {'wall s':>8} {'CPU s':>7} {'x base CPU':>10} {'peak RSS':>9} "
          f"{'requests':>8} {'MB':>8} exit")
    base: dict[int, float] = {}
    for r in rows:
        base.setdefault(r["entries"], r["cpu_s"])
        print(f"{r['entries']:>8,} {r['run']:<24} {r['wall_s']:>8.1f} {r['cpu_s']:>7.1f} "
              f"{r['cpu_s'] / base[r['entries']]:>10.2f} {r['peak_rss_mib']:>6} MiB {r['requests']:>8} "
              f"{r['mb']:>8.1f} {r['exit']}")
    if args.json:
        write_json(args.json, "otlp_send", {"machine": machine(), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
