"""Kill tests for the record's completeness (issue "No gaps"): counts, not timings.

    .venv/bin/python -m bench.gaps_bench [--downloads 500] [--service-kills 25]

1. Large Content-Length downloads while the whole broker (proxy and recording service, one
   process group) is killed with SIGKILL at random moments: every download a client received
   complete must have its entry. Reports completed downloads and how many had no entry.
2. Calls from 8 clients while only the recording service is killed, again and again: every call
   the upstream received must have its entry. Reports calls seen upstream and how many had none.

Both run against the local fake upstreams (tests/support/upstreams), through a real `broker run`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import random
import signal
import ssl
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from journal.reader import iter_entries  # noqa: E402
from journal.vault import Vault  # noqa: E402
from journal.verify import verify_session  # noqa: E402
from tests.support.broker_harness import BrokerProcess  # noqa: E402
from tests.support.upstreams import Upstream  # noqa: E402

GMAIL = "https://gmail.googleapis.com/gmail/v1/users/me"


def _client(b: BrokerProcess, session: str) -> httpx.Client:
    return httpx.Client(proxy=b.proxy_url(session, "bench"), verify=ssl.create_default_context(cafile=b.ca),
                        timeout=30)


def _recorded(vault: Path, session: str, key: str) -> set[str]:
    v = Vault(vault)
    if not v.session_path(session).exists():
        return set()
    return {e["request"]["url"].partition(f"{key}=")[2].partition("&")[0] for e in iter_entries(v, session)}


def downloads_under_kill9(up: Upstream, work: Path, target: int, size: int) -> dict:
    vault = work / "vault-dl"
    completed: list[str] = []
    rounds = 0
    while len(completed) < target:
        rounds += 1
        b = BrokerProcess(work / f"dl-{rounds}", up, vault=vault)
        (work / f"dl-{rounds}").mkdir()
        b.new_session = True
        b.start()
        stop = threading.Event()

        def agent(k: int, b: BrokerProcess = b, stop: threading.Event = stop, r: int = rounds) -> None:
            n = 0
            with _client(b, "s-dl") as c:
                while not stop.is_set():
                    n += 1
                    tag = f"{r}-{k}-{n}"
                    try:
                        with c.stream("GET", "https://gmail.googleapis.com/big",
                                      params={"size": str(size), "dl": tag}) as resp:
                            got = sum(len(x) for x in resp.iter_raw())
                        if resp.status_code == 200 and got == size:
                            completed.append(tag)
                    except httpx.HTTPError:
                        pass

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(agent, k) for k in range(4)]
            time.sleep(random.uniform(0.5, 2.5))
            assert b.proc is not None
            os.killpg(b.proc.pid, signal.SIGKILL)  # proxy and recording service at once
            stop.set()
            for f in futures:
                f.result(60)
        b.proc.wait(10)
    recorded = _recorded(vault, "s-dl", "dl")
    lost = [t for t in completed if t not in recorded]
    return {"rounds": rounds, "completed": len(completed), "lost": len(lost),
            "intact": verify_session(Vault(vault), "s-dl").intact}


def service_kills(up: Upstream, work: Path, kills: int) -> dict:
    up.clear_requests()
    stop = threading.Event()
    (work / "svc").mkdir()
    with BrokerProcess(work / "svc", up) as b:

        def service_pid() -> int:
            assert b.proc is not None
            while True:
                kids = [k for t in Path(f"/proc/{b.proc.pid}/task").iterdir()
                        for k in (t / "children").read_text().split()]
                if kids:
                    return int(kids[0])
                time.sleep(0.02)

        def agent(k: int) -> None:
            n = 0
            with _client(b, "s-svc") as c:
                while not stop.is_set():
                    n += 1
                    try:
                        c.get(f"{GMAIL}/labels", params={"call": f"{k}-{n}"})
                    except httpx.HTTPError:
                        pass

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(agent, k) for k in range(8)]
            for _ in range(kills):
                time.sleep(random.uniform(0.2, 1.5))
                os.kill(service_pid(), signal.SIGKILL)
            time.sleep(1.0)
            stop.set()
            for f in futures:
                f.result(60)
        vault = b.vault
    seen = {r["path"].partition("call=")[2] for r in up.requests if "call=" in r["path"]}
    recorded = _recorded(vault, "s-svc", "call")
    entries = list(iter_entries(Vault(vault), "s-svc"))
    return {"kills": kills, "seen_upstream": len(seen), "unrecorded": len(seen - recorded),
            "entries": len(entries), "recorded_twice": len(entries) - len({e["request"]["url"] for e in entries}),
            "intact": verify_session(Vault(vault), "s-svc").intact}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--downloads", type=int, default=500)
    p.add_argument("--size", type=int, default=(3 << 20) // 2, help="bytes per download (over the spill threshold)")
    p.add_argument("--service-kills", type=int, default=25)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gaps-bench-") as tmp, Upstream(max_records=1_000_000) as up:
        work = Path(tmp)
        svc = service_kills(up, work, args.service_kills)
        print(f"service killed {svc['kills']} times under load: {svc['seen_upstream']} calls reached the upstream, "
              f"{svc['unrecorded']} without an entry, {svc['recorded_twice']} recorded twice, "
              f"chain intact: {svc['intact']}")
        dl = downloads_under_kill9(up, work, args.downloads, args.size)
        print(f"broker killed (SIGKILL, whole process group) {dl['rounds']} times: {dl['completed']} downloads of "
              f"{args.size} bytes completed, {dl['lost']} without an entry, chain intact: {dl['intact']}")
    return 0 if svc["unrecorded"] == 0 and dl["lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
