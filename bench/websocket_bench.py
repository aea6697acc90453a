"""WebSocket messages through `broker run` against stock mitmdump: messages per second, and peak memory over
one long connection.

    .venv/bin/python -m bench.websocket_bench [--messages 100000] [--quick] [--json out.json]

One client sends N text messages (a ~120-byte JSON event each, as a Slack or Realtime client would) over
one connection to the fake WebSocket upstream (tests/support/ws_upstream.py), then a `sync` whose
answer says every message arrived. Targets, in the same run: the upstream directly (context), stock
`mitmdump` with only the redirect addon (no recording: the baseline proxy; it keeps every message of
the connection in memory) and
`broker run`, where each message is an entry, durable before it is passed on. Reported: messages
per second for each, the broker's ratio to mitmdump, and peak resident memory (VmHWM) of each proxy
process (and the broker's recording service): the broker's must stay flat with N (the connection's
messages are dropped from memory once recorded; the issue asks under 150 MB over 100,000). Nothing
here asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from websockets.asyncio.client import connect  # noqa: E402

from bench.broker_bench import PlainMitmdump  # noqa: E402
from tests.support.broker_harness import BrokerProcess  # noqa: E402
from tests.support.ws_upstream import WsUpstream  # noqa: E402

URL = "wss://api.github.com/ws/bench"


def _hwm_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


async def _send(proxy: str | None, ca: str, n: int, port: int = 0, sample=None) -> float:
    """Seconds from the first message sent to the server's answer to `sync` (all n arrived). Without a
    proxy, straight to the upstream on `port` (its certificate names the real host)."""
    ctx = ssl.create_default_context(cafile=ca)
    if proxy:
        opened = connect(URL, proxy=proxy, ssl=ctx, compression=None, max_queue=None, ping_interval=None)
    else:
        opened = connect(f"wss://127.0.0.1:{port}/ws/bench", server_hostname="api.github.com", ssl=ctx,
                         compression=None, max_queue=None, ping_interval=None)
    async with opened as ws:
        t0 = time.perf_counter()
        for i in range(n):
            await ws.send(json.dumps({"type": "message", "channel": "C0BENCH", "seq": i,
                                      "text": "a message of the kind an agent sends, about this long"}))
            if i % 256 == 0:
                await asyncio.sleep(0)  # let the connection's reader run (closes, errors) during a long send
            if sample is not None and i and i % max(n // 10, 1) == 0:
                sample(i)
        await ws.send("sync")
        got = await ws.recv()
        elapsed = time.perf_counter() - t0
    return elapsed if int(got) >= n else float("nan")


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _run(proxy_proc: BrokerProcess, session: str, n: int) -> dict:
    """Messages per second, peak RSS, and at every tenth of the run the messages sent so far with the RSS
    and the peak RSS so far (VmHWM) of the proxy and its children (the recording service) together."""
    assert proxy_proc.proc is not None
    pid = proxy_proc.proc.pid
    samples: list[float] = []
    peaks: dict[int, float] = {}

    def sample(sent: int) -> None:
        procs = [pid, *_children(pid)]
        samples.append(round(sum(_rss_mib(p) for p in procs), 1))
        peaks[sent] = round(sum(_hwm_mib(p) for p in procs), 1)

    elapsed = asyncio.run(_send(proxy_proc.proxy_url(session, "bench"), proxy_proc.ca, n, sample=sample))
    sample(n)
    service = _children(pid)
    return {"seconds": elapsed, "per_second": n / elapsed, "proxy_mib": _hwm_mib(pid),
            "service_mib": _hwm_mib(service[0]) if service else 0.0, "rss_mib_over_the_run": samples,
            "peak_mib_at": peaks}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--quick", action="store_true", help="10,000 messages instead")
    p.add_argument("--broker-only", action="store_true", help="no mitmdump or direct baseline (memory over a long run)")
    p.add_argument("--json")
    args, _ = p.parse_known_args(argv)
    n = 10_000 if args.quick else args.messages
    out: dict = {"messages": n}
    with tempfile.TemporaryDirectory(prefix="ws-bench-") as tmp, WsUpstream() as up:
        root = Path(tmp)
        (root / "m").mkdir()
        (root / "b").mkdir()
        if not args.broker_only:
            direct = asyncio.run(_send(None, up.ca_pem, n, up.port))
            out["direct"] = {"seconds": direct, "per_second": n / direct}
            up.bench_count = 0
            with PlainMitmdump(root / "m", up) as m:
                out["mitmdump"] = _run(m, "bench", n)
            up.bench_count = 0
        with BrokerProcess(root / "b", up) as b:
            out["broker"] = _run(b, "bench", n)
        journal = b.vault / "journal" / "bench.jsonl"
        with journal.open("rb") as f:
            out["entries"] = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    b_ = out["broker"]
    print(f"WebSocket: {n} text messages on one connection (client to server), each an entry through the broker")
    if "mitmdump" in out:
        m_ = out["mitmdump"]
        out["ratio"] = b_["per_second"] / m_["per_second"]
        print(f"direct (no proxy) {out['direct']['per_second']:8.0f} msg/s")
        print(f"mitmdump {m_['per_second']:8.0f} msg/s ({m_['seconds']:.1f} s)   broker {b_['per_second']:8.0f} msg/s "
              f"({b_['seconds']:.1f} s)   ratio {out['ratio']:.2f}")
        print(f"mitmdump RSS over the run (MiB): {m_['rss_mib_over_the_run']}")
    else:
        print(f"broker {b_['per_second']:8.0f} msg/s ({b_['seconds']:.1f} s)")
    print(f"peak RSS: broker proxy {b_['proxy_mib']:.0f} MiB + recording service "
          f"{b_['service_mib']:.0f} MiB = {b_['proxy_mib'] + b_['service_mib']:.0f} MiB; "
          f"over the run (MiB): {b_['rss_mib_over_the_run']}")
    print("broker peak RSS (proxy + service) after N messages: "
          + ", ".join(f"{k:,}: {v:.0f} MiB" for k, v in b_["peak_mib_at"].items()))
    print(f"entries written: {out['entries']} (expected {n + 4}: the handshake, {n} messages, the sync and its "
          "answer, the close)")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
