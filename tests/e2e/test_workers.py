"""`broker run --workers N`: several proxy processes on one port, one vault, one chain per session."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import ssl
import time
from pathlib import Path

import httpx
import pytest

from journal.vault import Vault
from journal.verify import verify_session
from tests.support.broker_harness import BrokerProcess
from tests.support.upstreams import Upstream

pytestmark = pytest.mark.e2e
GMAIL = "https://gmail.googleapis.com/gmail/v1/users/me"


def _descendants(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for kid in (task / "children").read_text().split():
            out.append(int(kid))
            out.extend(_descendants(int(kid)))
    return out


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")


def test_two_workers_share_the_port_and_keep_one_chain(tmp_path):
    with Upstream() as up, BrokerProcess(tmp_path, up, "--workers", "2") as b:
        assert b"(2 workers)" in bytes(b.output)
        assert b.proc is not None
        procs = _descendants(b.proc.pid)
        services = [p for p in procs if "broker.proxy.service" in _cmdline(p)]
        workers = [p for p in procs if p not in services and "multiprocessing" in _cmdline(p)
                   and "resource_tracker" not in _cmdline(p)]
        assert len(services) == 2 and len(workers) == 2, [_cmdline(p) for p in procs]
        before = {w: _cpu_ticks(w) for w in workers}

        def call(n: int) -> int:  # a new connection each time, so the kernel can pick either worker
            with httpx.Client(proxy=b.proxy_url("s-workers", "agent-w"), timeout=30,
                              verify=ssl.create_default_context(cafile=b.ca)) as c:
                return c.get(f"{GMAIL}/labels", params={"n": str(n)}).status_code

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            codes = list(pool.map(call, range(120)))
        assert codes == [200] * 120
        assert all(_cpu_ticks(w) - before[w] > 5 for w in workers), "one worker took every connection"
        got = b.entries("s-workers", 120)
        assert len(got) == 120 and len({e["request"]["url"] for e in got}) == 120
        assert verify_session(Vault(b.vault), "s-workers").intact
        os.kill(workers[0], signal.SIGKILL)  # a worker that dies is replaced
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            alive = [p for p in _descendants(b.proc.pid) if "multiprocessing" in _cmdline(p)
                     and "broker.proxy.service" not in _cmdline(p) and "resource_tracker" not in _cmdline(p)]
            if len(alive) == 2 and workers[0] not in alive:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the dead worker was not replaced")
        assert call(999) == 200
    assert b.proc.returncode == 0
