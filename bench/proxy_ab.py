"""This tree's `broker run` against another install's (an A/B of a change to the proxy path), interleaved.

    python -m bench.proxy_ab --other /work/main/.venv/bin/broker [--only seq|conc] [--rounds R]
                             [--seq N] [--conc N] [--clients C] [--json FILE]

`bench.broker_bench` measures one tree, so an A/B is two runs at two moments of a shared machine, whose
load moves between them by more than most changes are worth. Here both brokers run at once, against the
same fake upstreams, with stock mitmdump and `mitmdump -w` as the baselines, and every round gives each
target a slice of calls in a rotating order (`broker_bench`'s own scenario runner): a slow phase of the
machine hits A and B alike. Per target: req/s, p50 and p99, and the CPU per call of the proxy process alone
and of its recording service (from /proc, pooled over the rounds: it moves far less than wall-clock time on
a busy machine); per scenario, issue 30's rows for both (sequential: added p50 over mitmdump minus the
fdatasync p50 measured in the same run; concurrent: req/s / `mitmdump -w`, median of the rounds' ratios).
Both vaults must hold one entry per call and verify intact. Nothing is asserted about timings.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys

from bench import scratch_dir, write_json
from bench.broker_bench import (
    SESSION,
    PlainMitmdump,
    Target,
    UpstreamProcess,
    _pct,
    fdatasync_latencies,
    measure,
    run_scenario,
    scenarios,
    summarise,
    verify_vault,
)
from tests.support.broker_harness import BrokerProcess

NAMES = ("mitmdump", "mitmdump-w", "this", "other")


class OtherBroker(BrokerProcess):
    """`broker run` of another install (its own console script, so its own code and venv)."""

    script = ""

    def command(self) -> list[str]:
        return [self.script, *super().command()[1:]]


def report(table: list[dict], ratios: list[dict], fsync_p50: float) -> str:
    out = [f"{'scenario':<9} {'target':<10} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'proxy CPU':>10} "
           f"{'service CPU':>12}   (CPU: us per call, the proxy process alone and its recording service)"]
    for r in table:
        proxy, svc = r["proxy_cpu_us"], r["service_cpu_us"]
        own = f"{proxy - (svc or 0):>10.0f}" if proxy is not None else f"{'-':>10}"
        svc_text = f"{svc:>12.0f}" if svc else f"{'-':>12}"
        out.append(f"{r['scenario']:<9} {r['target']:<10} {r['req_s']:>7.0f} {r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f} "
                   f"{own} {svc_text}")
    out.append("")
    pooled = {(r["scenario"], r["target"]): r for r in table}
    for s in ratios:
        name = s["scenario"]
        if name.startswith("seq"):
            base = pooled[(name, "mitmdump")]["p50_ms"]
            cells = [f"{t} {pooled[(name, t)]['p50_ms'] - base - fsync_p50:+.2f}" for t in ("this", "other")]
            out.append(f"{name}: added p50 over mitmdump - fdatasync p50 (ms, goal <= 0.2): {', '.join(cells)}")
        else:
            base_runs = pooled[(name, "mitmdump-w")]["runs_req_s"]
            cells = []
            for t in ("this", "other"):
                runs = sorted(a / b for a, b in zip(pooled[(name, t)]["runs_req_s"], base_runs, strict=True))
                cells.append(f"{t} {statistics.median(runs):.2f} ({' '.join(f'{v:.2f}' for v in runs)})")
            out.append(f"{name}: req/s / mitmdump -w (goal >= 1.5), median (rounds): {'; '.join(cells)}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.proxy_ab", description=__doc__.split("\n\n")[0])
    ap.add_argument("--other", required=True, metavar="SCRIPT",
                    help="another install's `broker` console script (e.g. /work/main/.venv/bin/broker)")
    ap.add_argument("--only", choices=("seq", "conc", "all"), default="all", help="which scenarios (default all)")
    ap.add_argument("--rounds", type=int, default=8, help="rounds per scenario (default 8)")
    ap.add_argument("--seq", type=int, default=100, help="calls per target per round, sequential (default 100)")
    ap.add_argument("--conc", type=int, default=192, help="calls per target per round, concurrent (default 192)")
    ap.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE (key 'proxy_ab')")
    args = ap.parse_args(argv)
    if min(args.rounds, args.seq, args.conc, args.clients) < 1:
        ap.error("--rounds, --seq, --conc and --clients must be positive")
    if not os.access(args.other, os.X_OK):
        ap.error(f"--other {args.other}: not an executable")
    scens = [s for s in scenarios(args.seq, args.conc, args.clients)
             if args.only == "all" or (s["clients"] == 1) == (args.only == "seq")]

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    load_start = os.getloadavg()
    root = scratch_dir("proxy-ab-")
    upstream = UpstreamProcess()
    procs: list[BrokerProcess] = []
    try:
        upstream.start()
        for name in NAMES:
            (root / name).mkdir()
        OtherBroker.script = args.other
        procs = [PlainMitmdump(root / "mitmdump", upstream.info, flavour="mitmdump"),
                 PlainMitmdump(root / "mitmdump-w", upstream.info, "-w", str(root / "mitmdump-w" / "flows"),
                               flavour="mitmdump"),
                 BrokerProcess(root / "this", upstream.info, "--session", SESSION),
                 OtherBroker(root / "other", upstream.info, "--session", SESSION)]
        for p in procs:
            p.start(timeout=180)
        targets = {name: Target(name, upstream, p) for name, p in zip(NAMES, procs, strict=True)}
        for t in targets.values():  # certificates generated, code paths warmed
            measure(t, upstream, {"name": "warm-up", "clients": 1, "n": 100, "warm": 0, "mix": True})
        fsync = fdatasync_latencies(procs[2].vault)
        rows = [row for scen in scens for row in run_scenario(targets, upstream, scen, args.rounds, log)]
        fsync = sorted(fsync + fdatasync_latencies(procs[2].vault))
        check = {}
        for name, proc in (("this", procs[2]), ("other", procs[3])):
            code = proc.stop()
            if code != 0:
                raise RuntimeError(f"{name} exited with {code}:\n{proc.output.decode(errors='replace')[-2000:]}")
            check[name] = verify_vault(proc.vault, targets[name].sent)
    finally:
        for p in procs:
            p.stop()
        upstream.stop()
        shutil.rmtree(root, ignore_errors=True)
    table, ratios = summarise(rows, scens, NAMES)
    load = (load_start, os.getloadavg())
    print(report(table, ratios, _pct(fsync, 0.5)))
    print(f"fdatasync p50 {_pct(fsync, 0.5):.3f} ms, p99 {_pct(fsync, 0.99):.3f} ms (2 KB line, the vault's "
          f"directory, same run); load average {load[0][0]:.2f} at the start, {load[1][0]:.2f} at the end; "
          f"{args.rounds} rounds of {args.seq} (seq) / {args.conc} ({args.clients}x) calls per target; other: "
          f"{args.other}")
    for name, c in check.items():
        print(f"vault check ({name}): {c['entries']} entries (expected {c['expected']}), intact={c['intact']}"
              + ("" if c["ok"] else f"  <-- MISMATCH {c['detail']}"))
    if args.json:
        write_json(args.json, "proxy_ab", {
            "other": args.other, "table": table, "ratios": ratios, "load_average": load,
            "fdatasync_p50_ms": _pct(fsync, 0.5), "vault_check": check,
            "proxy_cpu_us": {f"{r['scenario']} {r['target']}": r["proxy_cpu_us"] for r in table},
            "median_req_s": {f"{r['scenario']} {r['target']}": statistics.median(r["runs_req_s"]) for r in table},
        })
    return 0 if all(c["ok"] for c in check.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
