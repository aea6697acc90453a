"""What a write-ahead record costs a write (issue 21, item 4; journal/write_ahead.py).

    .venv/bin/python -m bench.write_ahead_bench [--quick] [--rounds R] [--calls N] [--json FILE]

Two brokers (the addon in mitmdump, each with its recording service) on one vault folder each, against
the local fake upstreams: one as today's release without write-ahead records
(`broker_write_ahead=false`, the baseline), one with them (the default). Each round sends N
sequential Gmail `messages/send` calls (writes) and N `labels` calls (reads, the control: a read
makes no record) through each broker, alternating the brokers round by round. Reported: p50 and
p90 latency per broker and kind, and the ratios with/without (median over rounds of each round's
p50 ratio). A ratio, never a threshold: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import base64
import ssl
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import machine, scratch_dir, write_json  # noqa: E402
from tests.support.broker_harness import BrokerProcess  # noqa: E402
from tests.support.upstreams import Upstream  # noqa: E402

SEND = "https://gmail.googleapis.com/gmail/v1/users/me/messages/send"
LABELS = "https://gmail.googleapis.com/gmail/v1/users/me/labels"
RAW = base64.urlsafe_b64encode(b"From: a@example.com\r\nTo: b@example.com\r\nSubject: bench\r\n\r\nhello").decode()


def _times(b: BrokerProcess, kind: str, n: int) -> list[float]:
    """Seconds per call, `n` sequential calls on one kept-alive connection (after one warm-up call)."""
    out = []
    with httpx.Client(proxy=b.proxy_url("s-bench", "bench"), verify=ssl.create_default_context(cafile=b.ca),
                      timeout=30) as c:
        for i in range(n + 1):
            t0 = time.perf_counter()
            r = c.post(SEND, json={"raw": RAW}) if kind == "write" else c.get(LABELS)
            dt = time.perf_counter() - t0
            if r.status_code != 200:
                raise RuntimeError(f"{kind} answered {r.status_code}: {r.text[:200]}")
            if i:
                out.append(dt)
    return out


def _pct(vals: list[float], q: float) -> float:
    s = sorted(vals)
    return s[min(len(s) - 1, int(q * len(s)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run")
    ap.add_argument("--rounds", type=int, help="rounds (default 8, --quick 3)")
    ap.add_argument("--calls", type=int, help="calls per kind per broker per round (default 100, --quick 40)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE (key 'write_ahead')")
    args = ap.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 8)
    calls = args.calls or (40 if args.quick else 100)
    work = scratch_dir("write-ahead-")
    samples: dict[str, dict[str, list[float]]] = {t: {"write": [], "read": []} for t in ("baseline", "write_ahead")}
    ratios: dict[str, list[float]] = {"write": [], "read": []}
    with Upstream() as up:
        brokers = {}
        for target, on in (("baseline", "false"), ("write_ahead", "true")):
            (work / target).mkdir()
            brokers[target] = BrokerProcess(work / target, up, "--set", f"broker_write_ahead={on}",
                                            flavour="mitmdump").start()
        try:
            for r in range(rounds):
                order = ("baseline", "write_ahead") if r % 2 == 0 else ("write_ahead", "baseline")
                got: dict[str, dict[str, list[float]]] = {}
                for target in order:
                    got[target] = {kind: _times(brokers[target], kind, calls) for kind in ("write", "read")}
                    for kind, vals in got[target].items():
                        samples[target][kind] += vals
                for kind in ("write", "read"):
                    ratios[kind].append(statistics.median(got["write_ahead"][kind])
                                        / statistics.median(got["baseline"][kind]))
        finally:
            for b in brokers.values():
                b.stop()
        records_left = sorted(p.name for p in (work / "write_ahead" / "vault" / "write-ahead").glob("*.wal"))
    figures: dict = {"machine": machine(), "rounds": rounds, "calls": calls}
    for target, kinds in samples.items():
        for kind, vals in kinds.items():
            figures[f"{target}_{kind}_p50_ms"] = round(_pct(vals, 0.5) * 1e3, 3)
            figures[f"{target}_{kind}_p90_ms"] = round(_pct(vals, 0.9) * 1e3, 3)
    figures["write_ratio_p50"] = round(statistics.median(ratios["write"]), 3)
    figures["read_ratio_p50"] = round(statistics.median(ratios["read"]), 3)
    figures["write_added_ms_p50"] = round(figures["write_ahead_write_p50_ms"] - figures["baseline_write_p50_ms"], 3)
    figures["logs_left_after_stop"] = len(records_left)
    print(f"write-ahead records, {rounds} rounds x {calls} sequential calls per kind and broker:")
    for kind in ("write", "read"):
        print(f"  {kind:5}  baseline p50 {figures[f'baseline_{kind}_p50_ms']:.2f} ms "
              f"p90 {figures[f'baseline_{kind}_p90_ms']:.2f} ms | with records p50 "
              f"{figures[f'write_ahead_{kind}_p50_ms']:.2f} ms p90 {figures[f'write_ahead_{kind}_p90_ms']:.2f} ms"
              f" | ratio {figures[f'{kind}_ratio_p50']:.3f}")
    print(f"  a write takes {figures['write_added_ms_p50']:+.2f} ms at p50 with its record; "
          f"logs left after a clean stop: {figures['logs_left_after_stop']}")
    if args.json:
        write_json(args.json, "write_ahead", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
