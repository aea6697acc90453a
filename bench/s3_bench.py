"""Object-storage benchmark: blobs to a local S3 server against the file vault, the broker with and without
`--blobs s3://`, and C2SP tile publication.

    python -m bench.s3_bench [--quick] [--blob-mib N] [--calls N] [--json FILE]

The S3 server is moto's (`moto[server]`, the test extra) on 127.0.0.1, a Python process on the same
machine: its figures bound what the broker's S3 path costs, not what AWS S3 would give. Baselines in
the same run: the file vault's blob store for the blob figures, `broker run` without --blobs for the
broker figure. Cases:

- one blob of --blob-mib (default 256, --quick 64) streamed in 64 KiB writes into each sink, then read
  back from S3: MB/s;
- --calls (default 300, --quick 60) POSTs of 8 KiB through `broker run --spill-threshold 1024` (each
  body spilled: one blob per call), one client: calls/s with and without --blobs;
- `broker publish`'s writer (journal/checkpoint/tiles.py) for 10^5 entries into a directory and into the
  bucket: seconds per 10^5 entries (first publication, then 10^3 more entries incrementally).
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import ssl
import sys
import time
from pathlib import Path

from bench import machine, scratch_dir, write_json


def _stream(sink: object, size: int) -> dict:
    piece = hashlib.sha256(b"bench").digest() * 2048  # 64 KiB
    t = time.perf_counter()
    with sink.open_writer() as w:  # type: ignore[attr-defined]
        for i in range(size // len(piece)):
            w.write(piece[:-8] + i.to_bytes(8, "big"))
        ref = w.commit()
    return {"seconds": time.perf_counter() - t, "ref": ref}


def blob_case(bucket_url: str, root: Path, size: int) -> dict:
    from journal.blobstore import BlobStore
    from journal.store.s3_blobs import S3Blobs

    file_up = _stream(BlobStore(root / "vault"), size)
    s3 = S3Blobs(bucket_url)
    s3_up = _stream(s3, size)
    t = time.perf_counter()
    n = sum(len(c) for c in s3.read_blob(s3_up["ref"]["sha256"]))
    down = time.perf_counter() - t
    assert n == size
    mb = size / 1e6
    return {"mib": size >> 20, "file_mb_s": mb / file_up["seconds"], "s3_up_mb_s": mb / s3_up["seconds"],
            "s3_down_mb_s": mb / down}


def broker_case(root: Path, calls: int, blobs_url: str | None) -> float:
    import httpx

    from tests.support.broker_harness import BrokerProcess
    from tests.support.upstreams import Upstream

    root.mkdir(parents=True, exist_ok=True)
    extra = ["--spill-threshold", "1024", *(["--blobs", blobs_url] if blobs_url else [])]
    body = {"channel": "C1", "text": "x" * 8192}
    with Upstream() as up, BrokerProcess(root, up, *extra) as b:
        with httpx.Client(proxy=b.proxy_url("bench", "bench"), verify=ssl.create_default_context(cafile=b.ca),
                          timeout=60) as c:
            for _ in range(10):  # warm up
                c.post("https://slack.com/api/chat.postMessage", data=body)
            t = time.perf_counter()
            for _ in range(calls):
                r = c.post("https://slack.com/api/chat.postMessage", data=body)
                assert r.status_code == 200, r.text
            return calls / (time.perf_counter() - t)


def tiles_case(bucket_url: str, root: Path) -> dict:
    from journal.checkpoint.note import Signer
    from journal.checkpoint.tiles import DirectoryTarget, S3Target, publish

    signer = Signer.generate("bench.example/tiles")
    hashes = [hashlib.sha256(i.to_bytes(8, "big")).digest() for i in range(101_000)]
    out = {}
    for name, target in (("dir", DirectoryTarget(root / "tiles")), ("s3", S3Target(bucket_url + "/tiles"))):
        t = time.perf_counter()
        publish(target, "bench.example/tiles/s", hashes[:100_000], signer)
        first = time.perf_counter() - t
        t = time.perf_counter()
        publish(target, "bench.example/tiles/s", hashes, signer)
        out[name] = {"first_s_per_1e5": first, "next_1e3_s": time.perf_counter() - t}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--blob-mib", type=int)
    ap.add_argument("--calls", type=int)
    ap.add_argument("--json")
    args, _ = ap.parse_known_args(argv)
    try:
        from tests.support.s3_server import S3Server
    except ImportError:
        print("s3_bench: skipped (tests/support not importable)")
        return 0
    size = (args.blob_mib or (64 if args.quick else 256)) << 20
    calls = args.calls or (60 if args.quick else 300)
    server = S3Server()
    server.start()
    saved = dict(os.environ)
    os.environ.update(server.env)
    root = scratch_dir("s3-")
    try:
        bucket = server.new_bucket()
        url = f"s3://{bucket}/bench"
        blobs = blob_case(url, root, size)
        plain = broker_case(root / "plain", calls, None)
        with_s3 = broker_case(root / "s3", calls, url)
        tiles = tiles_case(url, root)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"one blob of {blobs['mib']} MiB, 64 KiB writes (S3: moto on loopback)")
    print(f"  file vault {blobs['file_mb_s']:7.1f} MB/s   S3 up {blobs['s3_up_mb_s']:7.1f} MB/s "
          f"({blobs['s3_up_mb_s'] / blobs['file_mb_s']:.2f} x file)   S3 down {blobs['s3_down_mb_s']:7.1f} MB/s")
    print(f"broker run, {calls} POSTs of 8 KiB each spilled: {plain:6.1f} calls/s without --blobs, "
          f"{with_s3:6.1f} with --blobs s3:// ({with_s3 / plain:.2f} x)")
    for name, t in tiles.items():
        print(f"tiles to {name:3}: {t['first_s_per_1e5']:6.2f} s per 10^5 entries (first publication), "
              f"{t['next_1e3_s']:.3f} s for 10^3 more")
    if args.json:
        write_json(args.json, "s3_bench", {"machine": machine(), "blobs": blobs, "broker_calls_s": plain,
                                           "broker_calls_s_blobs_s3": with_s3, "tiles": tiles})
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
