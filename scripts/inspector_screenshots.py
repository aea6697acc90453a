"""Take the README's screenshots of the inspector (docs/img/inspector-*.png) with Debian's Chromium.

    .venv/bin/python scripts/inspector_screenshots.py

Serves a copy of the example vault with three synthetic sessions added (one with an entry edited on
disk) on loopback and photographs the sessions list, a timeline with a write opened, the revert
plan, a search and the badges of the tampered session. Deterministic input; the pictures change only when the page does.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from tests.support.inspector_server import CHROMIUM, CHROMIUM_ARGS, served  # noqa: E402
from tests.support.replay_factories import drive_session, gmail_session, slack_session  # noqa: E402

S = "session-2026-09-22"
OUT = ROOT / "docs" / "img"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        vault = Path(tmp) / "vault"
        shutil.copytree(ROOT / "vault", vault)
        gmail_session(vault, "nightly-triage")
        slack_session(vault, "standup-bot")
        drive_session(vault, "drive-cleanup")
        path = vault / "journal" / "drive-cleanup.jsonl"
        lines = path.read_bytes().split(b"\n")
        lines[2] = lines[2].replace(b'"status":200', b'"status":201', 1)  # edited on disk
        path.write_bytes(b"\n".join(lines))
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            with served(vault) as base:
                page.goto(base + "/")
                page.wait_for_selector("#sessions[data-loaded=true]")
                page.screenshot(path=OUT / "inspector-sessions.png")
                page.goto(f"{base}/?session={S}&seq=7")
                page.wait_for_selector("#agreement")
                page.wait_for_selector("#writes .write")
                page.wait_for_selector("#entry-hash-check[data-chained=true]")
                page.screenshot(path=OUT / "inspector-entry.png")
                page.goto(f"{base}/?session={S}&tab=plan")
                page.wait_for_selector("#plan tbody tr")
                page.screenshot(path=OUT / "inspector-revert-plan.png")
                page.goto(f"{base}/?view=search&effect=write&connector=slack")
                page.wait_for_selector("#search-table tbody tr")
                page.screenshot(path=OUT / "inspector-search.png")
                page.goto(f"{base}/?session=drive-cleanup")
                page.wait_for_selector("#browser-verdict[data-state=broken]")
                page.wait_for_selector("#server-verdict[data-state=broken]")
                page.screenshot(path=OUT / "inspector-broken.png")
            browser.close()
    for f in sorted(OUT.glob("inspector-*.png")):
        print(f.relative_to(ROOT))


if __name__ == "__main__":
    main()
