"""Inspector benchmark: time to the first screen of a 100,000-entry session in headless Chromium.

    python -m bench.inspector_bench [--quick] [--entries N] [--repeat R] [--json FILE]

One session (default 100,000 entries, ~1 KB each, the replay benchmark's call mix, real chain
code) is served by the inspector on loopback and opened in Debian's Chromium (/usr/bin/chromium)
through Playwright. Measured, best of R (default 3, --quick 1), each in a fresh browser context
and a fresh inspector (so the server's line index is built cold every time):

- baseline: `verify_session` over the file (what `broker verify` does for this session);
- first screen: from navigation to `/?session=S` until the first timeline rows are on the page;
- deep link: `/?session=S&seq=N-1` until that entry is open;
- browser chain check: until the page's own RFC 8785 + SHA-256 check of every line is done;
- server verdict: until the server's verify verdict is shown;
- what a write changed (issue 26): on a fresh inspector, the first answer of `/api/session/writes` (202 with
  the fold's progress while the replay is folded in the background) and the time until it is the block
  (asked again as the page asks); beside them the fold alone (`replay_session` with views), what that first
  answer used to wait for.

ratio = time / baseline of the same run. Skipped (with a message) when Chromium is absent.
Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench import machine, scratch_dir, write_chained, write_json
from bench.replay_bench import make_call
from journal.replay import replay_session
from journal.vault import Vault
from journal.verify import verify_session

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
SESSION = "inspector-bench"


def generate(root: Path, entries: int) -> int:
    vault = Vault.create(root)
    rng = random.Random(11)

    def calls():
        for seq in range(1, entries + 1):
            fields = make_call(seq, rng, 5000)
            fields["session"] = SESSION
            yield fields

    return write_chained(vault.session_path(SESSION), calls())[1]


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.inspector_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run (10,000 entries, 1 repeat)")
    ap.add_argument("--entries", type=int, help="entries in the session (default 100,000)")
    ap.add_argument("--repeat", type=int, help="runs per measurement, best kept (default 3, --quick 1)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE (key 'inspector')")
    args = ap.parse_args()
    if not os.access(CHROMIUM, os.X_OK):
        print(f"skipped: no Chromium at {CHROMIUM} (apt-get install chromium)")
        return
    from playwright.sync_api import sync_playwright

    from tests.support.inspector_server import served

    n = args.entries or (10_000 if args.quick else 100_000)
    repeat = args.repeat or (1 if args.quick else 3)
    scratch = scratch_dir("inspector-")
    try:
        size = generate(scratch / "vault", n)
        vault = Vault.open_existing(scratch / "vault")
        print(f"session: {n:,} entries, {size / (1 << 20):,.0f} MB")
        base = min(_timed(lambda: verify_session(vault, SESSION)) for _ in range(repeat))
        print(f"baseline (verify_session): {base:.2f} s")
        figures: dict[str, list[float]] = {k: [] for k in ("first_screen", "deep_link", "browser_check",
                                                            "server_verdict")}
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            for _ in range(repeat):
                with served(vault.root) as url:
                    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
                    page = ctx.new_page()
                    page.set_default_timeout(600_000)
                    t0 = time.perf_counter()
                    page.goto(f"{url}/?session={SESSION}")
                    page.wait_for_selector("#timeline tbody tr")
                    figures["first_screen"].append(time.perf_counter() - t0)
                    page.wait_for_selector("#server-verdict[data-state=intact]")
                    figures["server_verdict"].append(time.perf_counter() - t0)
                    page.wait_for_selector("#browser-verdict[data-state=intact]")
                    figures["browser_check"].append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    page.goto(f"{url}/?session={SESSION}&seq={n - 1}")
                    page.wait_for_selector(f"#entry h2:text('Seq {n - 1}')")
                    figures["deep_link"].append(time.perf_counter() - t0)
                    ctx.close()
                    _settle(url)
            browser.close()
        figures.update({k: [] for k in ("writes_first_answer", "writes_block", "fold")})
        for _ in range(repeat):
            with served(vault.root) as url:
                first, block = _writes_answers(url, n - 1)
                _settle(url)
            figures["writes_first_answer"].append(first)
            figures["writes_block"].append(block)
            vault.views_dir = scratch / "views"  # the fold's scratch: never the benchmark's vault
            figures["fold"].append(_timed(lambda: replay_session(vault, SESSION)))
        best = {k: min(v) for k, v in figures.items()}
        labels = (("first_screen", "first screen (timeline rows shown)"), ("deep_link", f"deep link to seq {n - 1}"),
                  ("server_verdict", "server verdict shown"), ("browser_check", "browser chain check done"),
                  ("writes_first_answer", "what a write changed: first answer"),
                  ("writes_block", "what a write changed: block ready"),
                  ("fold", "the fold alone (the old first answer)"))
        for k, label in labels:
            print(f"{label:<40} {best[k]:>7.2f} s  ratio {best[k] / base:>5.2f}")
        if args.json:
            write_json(args.json, "inspector", {"machine": machine(), "entries": n, "bytes": size,
                                                "baseline_verify_seconds": round(base, 3),
                                                **{k: round(v, 3) for k, v in best.items()}})
            print(f"figures written to {args.json}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _settle(url: str) -> None:
    """Wait until the work the page started in the inspector's worker threads is done (the session's summary,
    verdict and replay: a second request for each waits for the build in progress, then gets it cached; the
    replay is folded in the background and answers 202 until it is done, so that one is asked again).

    Why: the page asks for the replay of the session (its writes) as it loads; for 100,000 entries that runs
    for minutes in a worker thread of this process after the measurements are taken. Leaving `served()` and
    removing the vault under it made the fold fail on its closed store, and a process that exits while a
    daemon thread is inside sqlite3 or forking can crash in the interpreter's finalization: the likely cause
    of the intermittent segmentation fault of this benchmark in bench/run (docs/benchmarks.md)."""
    for name in ("summary", "verdict", "writes"):
        try:
            status = 202
            while status == 202:  # the server holds each ask up to a second while the fold runs
                with urllib.request.urlopen(f"{url}/api/session/{name}?session={SESSION}&seq=1",
                                            timeout=3600) as resp:
                    resp.read()
                    status = resp.status
        except urllib.error.HTTPError as exc:  # answered: whatever it was, the work behind it has ended
            print(f"(inspector /api/session/{name} answered {exc.code} after the measurements)")


def _writes_answers(url: str, seq: int) -> tuple[float, float]:
    """(seconds to the first answer of /api/session/writes, seconds until the answer is the block), asking
    again while it is 202 as the page does."""
    t0 = time.perf_counter()
    first = -1.0
    status = 202
    while status == 202:
        with urllib.request.urlopen(f"{url}/api/session/writes?session={SESSION}&seq={seq}", timeout=3600) as resp:
            resp.read()
            status = resp.status
        first = time.perf_counter() - t0 if first < 0 else first
    return first, time.perf_counter() - t0


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
