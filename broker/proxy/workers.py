"""`broker run --workers N`: N proxy processes on one listening port, sharing the vault.

mitmproxy runs every flow on one event-loop thread, so one broker uses one core for the proxy
(its recording service takes part of another). With N workers the kernel spreads incoming
connections over N processes that each listen on the same port (SO_REUSEPORT), each with its own
recording service. They share the vault the way separate brokers do: every append takes the
session file's lock and continues the chain from the file (journal/writer.py), so one session
served by several workers keeps one intact chain.

The parent only holds the port (a bound, never listening socket when the port was 0, so no other
program takes it meanwhile), starts the workers, prints where they listen once all of them do,
restarts a worker that dies, and passes SIGINT/SIGTERM on; each worker stops as `broker run`
does, every accepted entry on disk.

What is per worker: the proxy-credential identities of a connection (a connection stays on one
worker), and prompt capture's per-session state (`prompt_ref` ties the calls a worker carries to
the model responses that worker saw).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import replace

from broker.listen_failure import listen_error
from broker.log_lines import stderr_handler
from broker.proxy.runner import ProxyConfig

log = logging.getLogger("broker")
RESPAWN_DELAY = 1.0


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port) with SO_REUSEPORT that never listens: it keeps the port (a
    free one when `port` is 0) for the workers without taking any connection itself."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise listen_error(host, port, exc) from None
    return sock


def _listen_with_reuse_port() -> None:
    """Make mitmproxy's TCP listeners in this process bind with SO_REUSEPORT (it offers no option)."""
    import mitmproxy.proxy.mode_servers as mode_servers

    real = asyncio

    class _Asyncio:
        def __getattr__(self, name: str):
            return getattr(real, name)

        @staticmethod
        async def start_server(*args, **kwargs):
            kwargs.setdefault("reuse_port", True)
            return await real.start_server(*args, **kwargs)

    mode_servers.asyncio = _Asyncio()  # type: ignore[assignment]


def _worker(config: ProxyConfig, index: int, ready) -> None:
    """One worker process: `broker run`'s proxy with its own recording service (SIGINT and SIGTERM
    are blocked until serve_forever handles them)."""
    from broker.proxy.runner import serve_forever

    logging.basicConfig(level=logging.WARNING, handlers=[
        stderr_handler(f"broker[{index}]", logging.Formatter(f"broker[{index}]: %(levelname)s: %(message)s"))])
    _listen_with_reuse_port()
    try:
        complete = asyncio.run(serve_forever(config, lambda proxy: ready.put((index, proxy.port, None))))
    except OSError as exc:
        ready.put((index, None, str(exc)))
        sys.exit(2)
    if not complete:
        sys.exit(INCOMPLETE)


INCOMPLETE = 3
"""A worker's exit code when calls were cut off at its stop before their entries were written."""


def serve_workers(config: ProxyConfig, workers: int, announce: Callable[[int], None]) -> int:
    """Run `workers` proxies on config's port until SIGINT/SIGTERM; the exit code."""
    held = reserve_port(config.listen_host, config.listen_port)
    port = held.getsockname()[1]
    config = replace(config, listen_port=port)
    mp = multiprocessing.get_context("spawn")
    ready = mp.Queue()
    procs: dict[int, multiprocessing.process.BaseProcess] = {}

    def start(i: int) -> None:
        p = mp.Process(target=_worker, args=(config, i, ready), name=f"broker-worker-{i}", daemon=False)
        # Born with SIGINT/SIGTERM blocked (the mask survives exec): a stop while the worker is still
        # starting waits until serve_forever can drain, instead of killing it half way.
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            p.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        procs[i] = p

    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for p in procs.values():
            if p.is_alive():
                p.terminate()  # each worker drains and stops as `broker run` does

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    for i in range(workers):
        start(i)
    up = 0
    while up < workers and not stopping:
        try:
            _index, _port, error = ready.get(timeout=60)
        except Exception:  # noqa: BLE001 - queue.Empty: a worker that never said anything
            error = "a worker did not start within 60 s"
        if error:
            stopping = True
            for p in procs.values():
                p.terminate()
            held.close()
            raise OSError(error)
        up += 1
    if not stopping:
        announce(port)
    while not stopping:
        time.sleep(0.2)
        for i, p in list(procs.items()):
            if not p.is_alive() and not stopping:
                log.error("worker %d exited (code %s); starting a new one", i, p.exitcode)
                time.sleep(RESPAWN_DELAY)
                start(i)
    code = 0
    for i, p in procs.items():
        p.join()
        if p.exitcode:
            log.error("worker %d stopped with exit code %s", i, p.exitcode)
        code = code or (p.exitcode or 0)
    held.close()
    return code
