"""Prompt capture: what a 100-turn conversation costs to store, and whether streams still stream.

1. **Storage.** A 100-turn agent conversation in the Anthropic Messages shape (each turn: the model's
   text and one tool call, then the tool's result, about 1.5 KB of JSON; every request resends the
   whole history, as the API requires) is recorded three ways through the recording service's own
   code (`broker.proxy.service.Service`, durable appends, one vault each):
   `refs` (texts replaced by hashes), `full` (texts in the content-addressed blob store) and
   `whole` (the same calls recorded as ordinary entries, bodies whole: what it would take without
   references). Reported: bytes on disk (journal + blobs) and ratios against `whole`; the bytes the
   requests carried on the wire for scale.
2. **Time to first byte of a streamed model response** (`"stream": true`, SSE, events 50 ms apart)
   through `broker run --prompts refs` against plain mitmdump (only the redirect addon; by default
   mitmproxy holds a response whole before sending it on), plain mitmdump with
   `stream_large_bodies=1` (it passes every body on as it arrives) and direct, interleaved round by
   round: p50 time to the first event and to the end of the stream. A proxy that held the stream back
   shows a first-byte time close to the end time.

Nothing here asserts a timing; figures are printed (and written with --json, key 'prompts').
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

import httpx

from bench import machine, scratch_dir, write_json
from bench.broker_bench import PlainMitmdump, Target, UpstreamProcess
from broker.proxy.service import Service
from journal.record import Recorder
from tests.support.broker_harness import BrokerProcess

MODEL_URL = "https://api.anthropic.com/v1/messages"
EVENT_DELAY = 0.05


def _tool_result(turn: int) -> str:
    messages = [{"id": f"18c{turn:03d}{k}", "threadId": f"t{turn}{k}", "snippet": f"Invoice {turn}-{k} from "
                 f"supplier {k}: payment due on the {k + 1}th, please confirm the amount and the account."}
                for k in range(8)]
    return json.dumps({"messages": messages, "resultSizeEstimate": 8})


def conversation(turns: int) -> list[tuple[bytes, bytes]]:
    """(request body, response body) of each model call of the conversation."""
    history: list[dict] = [{"role": "user", "content": "Go through my invoices one by one and file each."}]
    calls = []
    for t in range(turns):
        reply = {"id": f"msg_{t}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                 "content": [{"type": "text", "text": f"Turn {t}: I will look at the next invoice batch now, "
                              "then decide where each one goes."},
                             {"type": "tool_use", "id": f"toolu_{t:04d}", "name": "gmail_list_messages",
                              "input": {"q": f"label:invoices page:{t}", "maxResults": 8}}],
                 "stop_reason": "tool_use", "usage": {"input_tokens": 100 * (t + 1), "output_tokens": 40}}
        request = {"model": "claude-sonnet-4-5", "max_tokens": 2048, "system": "You file invoices carefully.",
                   "messages": history, "tools": [{"name": "gmail_list_messages", "description": "List mail.",
                                                   "input_schema": {"type": "object"}}]}
        calls.append((json.dumps(request).encode(), json.dumps(reply).encode()))
        history = history + [{"role": "assistant", "content": reply["content"]},
                             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{t:04d}",
                                                           "content": _tool_result(t)}]}]
    return calls


def _material(n: int, request: bytes, response: bytes, mode: str | None) -> dict:
    m = {"session": "conv", "agent": "bench", "principal": "bench", "connector": "anthropic", "method": "POST",
         "url": MODEL_URL, "request_headers": ((b"Content-Type", b"application/json"), (b"x-api-key", b"sk-ant-x")),
         "request_body": request, "status": 200, "response_headers": ((b"Content-Type", b"application/json"),),
         "response_body": response, "error": None, "ts": 1790000000.0 + n, "mcp": None}
    if mode is None:
        m["effect"] = "read"
    else:
        m.update(prompts=mode, model_api="anthropic")
    return m


def _disk_bytes(vault: Path) -> dict:
    journal = sum(p.stat().st_size for p in (vault / "journal").glob("*.jsonl"))
    blobs = sum(p.stat().st_size for p in (vault / "blobs").rglob("*") if p.is_file()) if (
        vault / "blobs").exists() else 0
    count = sum(1 for p in (vault / "blobs" / "sha256").rglob("*") if p.is_file()) if (
        vault / "blobs" / "sha256").exists() else 0
    return {"journal_bytes": journal, "blob_bytes": blobs, "blobs": count, "total_bytes": journal + blobs}


def storage(root: Path, turns: int) -> dict:
    """Bytes on disk for the conversation recorded three ways, and for its first half (growth)."""
    out = _storage(root / "all", turns)
    half = _storage(root / "half", turns // 2)
    for name in ("whole", "refs", "full"):
        out[name]["growth_from_half"] = out[name]["total_bytes"] / half[name]["total_bytes"]
    return out


def _storage(root: Path, turns: int) -> dict:
    calls = conversation(turns)
    out: dict = {"turns": turns, "wire_request_bytes": sum(len(q) for q, _ in calls),
                 "wire_response_bytes": sum(len(r) for _, r in calls)}
    for name, mode in (("whole", None), ("refs", "refs"), ("full", "full")):
        vault = root / f"storage-{name}"
        rec = Recorder(vault)
        svc = Service(rec)
        t0 = time.perf_counter()
        for n, (q, r) in enumerate(calls):
            acks = svc.handle([("call", n, _material(n, q, r, mode))])
            assert acks[0][1] == "ok", acks
        out[name] = {**_disk_bytes(vault), "record_ms_per_call": (time.perf_counter() - t0) * 1000 / turns}
        rec.close()
    for name in ("refs", "full"):
        out[f"{name}/whole"] = out[name]["total_bytes"] / out["whole"]["total_bytes"]
    return out


class StreamingMitmdump(PlainMitmdump):
    """Plain mitmdump that streams every body (`stream_large_bodies=1`)."""

    def command(self) -> list[str]:
        return [*super().command(), "--set", "stream_large_bodies=1"]


def _one_stream(c: httpx.Client, turn_body: dict) -> tuple[float, float]:
    headers = {"x-api-key": "sk-ant-bench", "X-Fake-Event-Delay": str(EVENT_DELAY)}
    t0 = time.perf_counter()
    first = None
    with c.stream("POST", MODEL_URL, json=turn_body, headers=headers) as r:
        r.raise_for_status()
        for chunk in r.iter_raw():
            if chunk and first is None:
                first = time.perf_counter() - t0
    return first if first is not None else float("nan"), time.perf_counter() - t0


def ttfb(root: Path, rounds: int, log) -> dict:
    upstream = UpstreamProcess().start()
    procs: list[BrokerProcess] = []
    try:
        for name in ("mitmdump", "mitmdump-stream", "broker"):
            (root / name).mkdir()
        mitm = PlainMitmdump(root / "mitmdump", upstream.info, flavour="mitmdump")
        mitm_stream = StreamingMitmdump(root / "mitmdump-stream", upstream.info, flavour="mitmdump")
        broker = BrokerProcess(root / "broker", upstream.info, "--prompts", "refs", "--session", "ttfb")
        procs += [mitm, mitm_stream, broker]
        for p in procs:
            p.start()
        targets = {"direct": Target("direct", upstream, None), "mitmdump": Target("mitmdump", upstream, mitm),
                   "mitmdump-stream": Target("mitmdump-stream", upstream, mitm_stream),
                   "broker": Target("broker", upstream, broker)}
        body = {"model": "claude-sonnet-4-5", "max_tokens": 256, "stream": True,
                "messages": [{"role": "user", "content": "List the unread mail."}]}
        clients = {name: t.client() for name, t in targets.items()}
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in targets}
        try:
            for c in clients.values():  # warm-up: certificates, connections
                _one_stream(c, body)
            names = list(targets)
            for r in range(rounds):
                order = names[r % len(names):] + names[: r % len(names)]
                for name in order:
                    samples[name].append(_one_stream(clients[name], body))
            log(f"ttfb: {rounds} rounds done")
        finally:
            for c in clients.values():
                c.close()
        entries = broker.entries("ttfb", rounds + 1)
    finally:
        for p in procs:
            p.stop()
        upstream.stop()
    out: dict = {"rounds": rounds, "event_delay_s": EVENT_DELAY, "broker_entries": len(entries),
                 "broker_entries_streamed": sum(1 for e in entries if "stream" in e["response"])}
    for name, rows in samples.items():
        out[name] = {"ttfb_p50_ms": statistics.median(f for f, _ in rows) * 1000,
                     "total_p50_ms": statistics.median(t for _, t in rows) * 1000}
    for base in ("mitmdump", "mitmdump-stream"):
        out[f"broker_minus_{base}_ttfb_ms"] = out["broker"]["ttfb_p50_ms"] - out[base]["ttfb_p50_ms"]
        out[f"broker/{base}_ttfb"] = out["broker"]["ttfb_p50_ms"] / out[base]["ttfb_p50_ms"]
    return out


def format_report(s: dict, t: dict) -> str:
    kib = 1024
    lines = [f"storage of a {s['turns']}-turn conversation (Anthropic Messages, history resent every turn; "
             f"requests carried {s['wire_request_bytes'] / kib:,.0f} KiB on the wire):",
             f"{'recorded as':<12} {'journal KiB':>12} {'blobs KiB':>10} {'blobs':>6} {'total KiB':>10} "
             f"{'vs whole':>9} {'x from ' + str(s['turns'] // 2):>10} {'ms/call':>8}"]
    for name in ("whole", "refs", "full"):
        row = s[name]
        ratio = "1.00" if name == "whole" else f"{s[f'{name}/whole']:.3f}"
        lines.append(f"{name:<12} {row['journal_bytes'] / kib:>12,.0f} {row['blob_bytes'] / kib:>10,.0f} "
                     f"{row['blobs']:>6} {row['total_bytes'] / kib:>10,.0f} {ratio:>9} "
                     f"{row['growth_from_half']:>10.2f} {row['record_ms_per_call']:>8.2f}")
    lines += ["", f"streamed model response (SSE, events {t['event_delay_s'] * 1000:.0f} ms apart), p50 over "
              f"{t['rounds']} interleaved rounds:", f"{'target':<16} {'first byte ms':>14} {'last byte ms':>13}"]
    for name in ("direct", "mitmdump", "mitmdump-stream", "broker"):
        lines.append(f"{name:<16} {t[name]['ttfb_p50_ms']:>14.1f} {t[name]['total_p50_ms']:>13.1f}")
    lines.append(f"broker (--prompts refs) first byte: {t['broker_minus_mitmdump-stream_ttfb_ms']:+.1f} ms vs "
                 f"mitmdump streaming (ratio {t['broker/mitmdump-stream_ttfb']:.2f}), "
                 f"{t['broker_minus_mitmdump_ttfb_ms']:+.1f} ms vs default mitmdump; "
                 f"{t['broker_entries_streamed']} of {t['broker_entries']} model entries recorded from the stream")
    lines.insert(len(lines) - 7, f"(x from {s['turns'] // 2}: total bytes over those of the first "
                 f"{s['turns'] // 2} turns; 2 is linear growth, 4 quadratic)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.prompt_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run")
    ap.add_argument("--turns", type=int, default=100, help="turns of the stored conversation (default 100)")
    ap.add_argument("--rounds", type=int, help="streamed calls per target (default 40, --quick 10)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE (key 'prompts')")
    args = ap.parse_args(argv)
    rounds = args.rounds or (10 if args.quick else 40)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    root = scratch_dir("prompts-")
    try:
        s = storage(root, args.turns)
        t = ttfb(root, rounds, log)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(format_report(s, t))
    if args.json:
        write_json(args.json, "prompts", {"machine": machine(), "storage": s, "ttfb": t})
    return 0


if __name__ == "__main__":
    sys.exit(main())
