"""Big bodies through `broker run`: a download and an upload of 1 GiB (default), peak memory.

    .venv/bin/python -m bench.bigbody_bench [--mib 1024] [--quick]

Reports, for each direction, the wall time through the broker against the same transfer made
directly to the fake upstream in the same run (the baseline), and the peak resident memory
(VmHWM) of the proxy process and of its recording service. Memory must not grow with the body:
both bodies stream to the blob store. Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import hashlib
import ssl
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.broker_harness import BrokerProcess  # noqa: E402
from tests.support.upstreams import Upstream, big_body_chunks, big_body_sha256  # noqa: E402

DRIVE = "https://www.googleapis.com/drive/v3"
UPLOAD = "https://www.googleapis.com/upload/drive/v3/files"


def _hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _transfer(c: httpx.Client, size: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    h = hashlib.sha256()
    with c.stream("GET", f"{DRIVE}/files/big?alt=media&size={size}&seed=dl") as r:
        for chunk in r.iter_raw():
            h.update(chunk)
    assert h.hexdigest() == big_body_sha256(size, "dl")
    t1 = time.perf_counter()
    r = c.post(f"{UPLOAD}?uploadType=media", content=big_body_chunks(size, "ul"),
               headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 200 and r.json()["sha256Checksum"] == big_body_sha256(size, "ul")
    return t1 - t0, time.perf_counter() - t1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=int, default=1024)
    p.add_argument("--quick", action="store_true", help="200 MiB instead")
    p.add_argument("--json")
    args, _ = p.parse_known_args(argv)
    size = (200 if args.quick else args.mib) << 20
    with tempfile.TemporaryDirectory(prefix="bigbody-") as tmp, Upstream() as up:
        with up.client(timeout=600) as c:
            direct_down, direct_up = _transfer(c, size)
        with BrokerProcess(Path(tmp), up, "--session", "big") as b:
            assert b.proc is not None
            service = int(Path(f"/proc/{b.proc.pid}/task/{b.proc.pid}/children").read_text().split()[0])
            with httpx.Client(proxy=b.proxy_url("big", "bench"), verify=ssl.create_default_context(cafile=b.ca),
                              timeout=600) as c:
                down, upl = _transfer(c, size)
            proxy_mib, service_mib = _hwm_kib(b.proc.pid) / 1024, _hwm_kib(service) / 1024
        entries = b.entries("big", 2)
    assert [e["response"]["status"] for e in entries] == [200, 200]
    print(f"big bodies, {size >> 20} MiB each way through broker run (baseline: the same transfer direct)")
    print(f"download {down:6.1f} s (direct {direct_down:5.1f} s, ratio {down / direct_down:4.2f})   "
          f"upload {upl:6.1f} s (direct {direct_up:5.1f} s, ratio {upl / direct_up:4.2f})")
    print(f"peak RSS: proxy {proxy_mib:.0f} MiB + recording service {service_mib:.0f} MiB "
          f"= {proxy_mib + service_mib:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
