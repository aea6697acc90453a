"""A real inspector (uvicorn on an ephemeral loopback port) in a thread, for API and browser tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn

from broker.cli.options import bind
from broker.inspector import create_app, sessions
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


@contextmanager
def chromium_browser():
    """Debian's Chromium driven by Playwright (never a downloaded browser), closed at the end."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def browser_page(browser, timeout_ms: int = 20_000, **context_options):
    """A page in a context of its own (1400 x 900 unless told); its uncaught script errors in `page.errors`."""
    context = browser.new_context(**{"viewport": {"width": 1400, "height": 900}, **context_options})
    page = context.new_page()
    page.set_default_timeout(timeout_ms)
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    try:
        yield page
    finally:
        context.close()


class HeldFold:
    """The inspector's replay held after each block it reads until `gate` is set: a fold as slow as the test
    wants, without a clock. `seen` has each fold's keyword arguments, `ended` how each fold ended; `one_ended`
    is released as each fold ends."""

    def __init__(self, monkeypatch) -> None:
        self.gate = threading.Event()
        self.seen: list[dict] = []
        self.ended: list[str] = []
        self.one_ended = threading.Semaphore(0)
        real = sessions.replay_session

        def held(vault, session, progress=None, **kwargs):
            self.seen.append(kwargs)

            def advance(n: int) -> None:
                progress(n)
                self.gate.wait(30)

            try:
                got = real(vault, session, progress=advance, **kwargs)
            except BaseException as exc:
                self.ended.append(type(exc).__name__)
                self.one_ended.release()
                raise
            self.ended.append("done")
            self.one_ended.release()
            return got

        monkeypatch.setattr(sessions, "replay_session", held)
