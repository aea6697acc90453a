"""`broker exec` benchmark: what containment costs, against `broker run` measured in the same run.

    python -m bench.exec_bench [--quick] [--calls N] [--repeat K] [--json FILE]

Two figures, each with its baseline:

- start-up and clean-up: wall time of `broker exec -- true` (namespace, rules, listeners, broker,
  the command, drain, namespace deleted), against `broker run` started until it listens and then
  stopped with SIGTERM (the same broker without the namespace);
- per call: one client process makes N sequential keep-alive HTTPS GETs (http.client, to the fake
  upstream's api.github.com, each recorded) (a) under `broker exec`, captured transparently, (b)
  under `broker exec` through the proxy listener inside (CONNECT), (c) through `broker run` as
  its proxy (the baseline), and (d) directly to the upstream (no broker, for scale).

Needs root (like `broker exec`); without it, it says why and exits 0. Best of K rounds, interleaved.
Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

from bench import machine, scratch_dir, write_json
from broker.exec import capabilities
from tests.support.broker_harness import BIN, BrokerProcess
from tests.support.exec_user import stdlib_python
from tests.support.upstreams.server import Upstream

CLIENT = textwrap.dedent("""
    import http.client, os, ssl, sys, time
    n, mode = int(sys.argv[1]), sys.argv[2]
    ctx = ssl.create_default_context(cafile=os.environ["BENCH_CA"])
    if mode == "direct":
        c = http.client.HTTPSConnection("127.0.0.1", int(os.environ["BENCH_PORT"]), context=ctx)
        ctx.check_hostname = False
    elif mode == "proxy":
        host, port = os.environ["BENCH_PROXY"].rsplit(":", 1)
        c = http.client.HTTPSConnection(host, int(port), context=ctx)
        c.set_tunnel("api.github.com", 443)
    else:
        c = http.client.HTTPSConnection("api.github.com", context=ctx)
    def get():
        c.request("GET", "/user", headers={"Host": "api.github.com", "User-Agent": "bench"})
        r = c.getresponse(); r.read()
        assert r.status == 200, r.status
    get()  # connection and TLS set up, not timed
    t = time.perf_counter()
    for _ in range(n):
        get()
    print(time.perf_counter() - t)
""")


PYTHON = stdlib_python()  # the client runs as nobody under broker exec (its default): the same one everywhere


def _exec_argv(tmp, up: Upstream, *extra: str) -> list[str]:
    tmp.chmod(0o755)  # the client script is read by nobody, through --bind (COMMAND's /tmp is its own)
    return [str(BIN / "broker"), "exec", "--vault", str(tmp / "vault"), "--confdir", str(tmp / "mitm"),
            "--session", "bench", "--upstream-ca", up.ca_pem, *up.resolve_args(), "--bind", str(tmp), *extra, "--"]


def exec_startup(tmp, up: Upstream) -> float:
    t = time.perf_counter()
    r = subprocess.run([*_exec_argv(tmp, up), "true"], capture_output=True, text=True, timeout=120)
    took = time.perf_counter() - t
    if r.returncode:
        raise RuntimeError(r.stderr)
    return took


def run_startup(tmp, up: Upstream) -> float:
    t = time.perf_counter()
    b = BrokerProcess(tmp, up, "--session", "bench")
    b.start()
    b.stop(signal.SIGTERM)
    return time.perf_counter() - t


def calls(tmp, up: Upstream, mode: str, n: int) -> float:
    script = tmp / "client.py"
    script.write_text(CLIENT)
    env = dict(os.environ, BENCH_PORT=str(up.port))
    if mode in ("exec-transparent", "exec-proxy"):
        # inside, the bundle the broker exec gives its command holds the broker's CA
        inner = "proxy" if mode == "exec-proxy" else "transparent"
        cmd = ["sh", "-c", f'BENCH_CA="$SSL_CERT_FILE" BENCH_PROXY="${{HTTPS_PROXY##*@}}" '
               f'{PYTHON} {script} {n} {inner}']
        extra = () if mode == "exec-proxy" else ("--no-proxy-env",)
        r = subprocess.run([*_exec_argv(tmp, up, *extra), *cmd], capture_output=True, text=True, env=env, timeout=600)
    elif mode == "run-proxy":
        with BrokerProcess(tmp, up, "--session", "bench") as b:
            env.update(BENCH_CA=b.ca, BENCH_PROXY=f"127.0.0.1:{b.port}")
            r = subprocess.run([PYTHON, str(script), str(n), "proxy"], capture_output=True, text=True,
                               env=env, timeout=600)
    else:
        env["BENCH_CA"] = up.ca_pem
        r = subprocess.run([PYTHON, str(script), str(n), "direct"], capture_output=True, text=True, env=env,
                           timeout=600)
    if r.returncode:
        raise RuntimeError(f"{mode}: {r.stdout}{r.stderr}")
    return float(r.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.exec_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run (100 calls, 1 round)")
    ap.add_argument("--calls", type=int, help="sequential calls per client (default 500)")
    ap.add_argument("--repeat", type=int, help="rounds, best kept (default 3, --quick 1)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE (key 'exec')")
    args = ap.parse_args(argv)
    why = capabilities.missing()
    if why:
        print(f"skipped: {why}")
        return 0
    n = args.calls or (100 if args.quick else 500)
    repeat = args.repeat or (1 if args.quick else 3)
    modes = ("direct", "run-proxy", "exec-transparent", "exec-proxy")
    best: dict[str, float] = {}
    starts: dict[str, float] = {}
    root = scratch_dir("exec-")
    root.chmod(0o755)  # searchable by the client, which runs as nobody under broker exec
    try:
        with Upstream() as up:
            for k in range(repeat):
                tmp = root / f"round{k}"
                tmp.mkdir(mode=0o755)
                (tmp / "run").mkdir()
                starts["run"] = min(starts.get("run", 1e9), run_startup(tmp / "run", up))
                starts["exec"] = min(starts.get("exec", 1e9), exec_startup(tmp, up))
                for mode in modes:
                    d = tmp / mode
                    d.mkdir()
                    best[mode] = min(best.get(mode, 1e9), calls(d, up, mode, n))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    base = best["run-proxy"]
    print(f"start-up + clean-up: broker exec -- true {starts['exec'] * 1000:.0f} ms; broker run start + SIGTERM "
          f"{starts['run'] * 1000:.0f} ms (baseline); ratio {starts['exec'] / starts['run']:.2f}")
    print(f"\n{n} sequential keep-alive HTTPS GETs, best of {repeat}")
    print(f"{'path':<34} {'ms/call':>8} {'x broker run':>13}")
    labels = {"direct": "direct to the upstream (no broker)", "run-proxy": "broker run as proxy (baseline)",
              "exec-transparent": "broker exec, transparent", "exec-proxy": "broker exec, proxy inside"}
    for mode in modes:
        print(f"{labels[mode]:<34} {best[mode] / n * 1000:>8.2f} {best[mode] / base:>13.2f}")
    if args.json:
        write_json(args.json, "exec", {
            "machine": machine(), "params": {"calls": n, "repeat": repeat},
            "startup_seconds": starts, "call_seconds": {m: best[m] / n for m in modes},
            "ratio_to_broker_run": {m: best[m] / base for m in modes},
        })
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
