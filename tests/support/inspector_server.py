"""A real inspector (uvicorn on an ephemeral loopback port) in a thread, for API and browser tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn

from broker.cli.options import bind
from broker.inspector import create_app
from journal.vault import Vault

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


@contextmanager
def served(vault: Path, token: str | None = None, app=None) -> Iterator[str]:
    """Serve the inspector for `vault` on 127.0.0.1:<ephemeral>; yield its base URL; stop it after."""
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app or create_app(Vault.open_existing(vault), token), log_level="warning",
                                           lifespan="off", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the inspector did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
