"""The fair baseline for the broker: mitmproxy with exactly the addons `broker run` loads, no recording.

    python -m bench.lean_proxy --listen 127.0.0.1:0 --confdir DIR [--upstream-ca PEM] [--resolve HOST=IP:PORT ...]

Stock mitmdump loads all of mitmproxy's default addons, and mitmproxy offers every hook of every
flow to each of them, so it is slower than the broker's own proxy before any recording happens.
This process runs the broker's lean addon set (broker.proxy.runner.proxy_addons) plus the
`--resolve` redirect, so `broker / lean` is what recording itself costs.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mitmproxy import options  # noqa: E402
from mitmproxy.master import Master  # noqa: E402

from broker.proxy.runner import ensure_ca, proxy_addons  # noqa: E402
from broker.proxy.upstream_resolve import UpstreamResolve  # noqa: E402


class _Ready:
    def __init__(self) -> None:
        self.event = asyncio.Event()

    def running(self) -> None:
        self.event.set()


async def serve(args: argparse.Namespace) -> None:
    host, _, port = args.listen.rpartition(":")
    ensure_ca(args.confdir)
    master = Master(options.Options(listen_host=host, listen_port=int(port), confdir=args.confdir))
    ready = _Ready()
    master.addons.add(*proxy_addons(), ready, UpstreamResolve())
    update: dict = {"connection_strategy": "lazy", "broker_resolve": list(args.resolve)}
    if args.upstream_ca:
        update["ssl_verify_upstream_trusted_ca"] = args.upstream_ca
    master.options.update(**update)
    task = asyncio.create_task(master.run())
    await ready.event.wait()
    bound = master.addons.get("proxyserver").listen_addrs()[0][1]
    print(f"lean proxy: listening on http://{host}:{bound}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    master.shutdown()
    await task


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--listen", default="127.0.0.1:0")
    p.add_argument("--confdir", required=True)
    p.add_argument("--upstream-ca")
    p.add_argument("--resolve", action="append", default=[])
    asyncio.run(serve(p.parse_args()))


if __name__ == "__main__":
    main()
