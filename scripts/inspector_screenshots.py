"""Take the README's screenshots of the inspector (docs/img/inspector-*.png) with Debian's Chromium.

    .venv/bin/python scripts/inspector_screenshots.py

Serves a copy of the example vault with synthetic sessions added (one with an entry edited on disk, a
conversation with prompt capture, a re-run that differs; the example session sealed with a witness's
cosignature) on loopback and photographs, at 1280 x 800: the sessions list, a filtered timeline, a write
opened with "copy as curl", the keys, the conversation, the revert plan, the diff, the evidence, a search,
the tampered session's badges and the timeline in dark mode. The input is fixed; times of the
checkpoint's cosignature and the key IDs change with each run.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from playwright.sync_api import Page, ViewportSize, sync_playwright  # noqa: E402

from journal.checkpoint.note import Signer  # noqa: E402
from tests.support.checkpoint_harness import witness_server  # noqa: E402
from tests.support.inspector_scenes import record_conversation, rerun, seal_with_witness  # noqa: E402
from tests.support.inspector_server import CHROMIUM, CHROMIUM_ARGS, served  # noqa: E402
from tests.support.replay_factories import drive_session, gmail_session, slack_session  # noqa: E402

S = "session-2026-09-22"
OUT = ROOT / "docs" / "img"
VIEWPORT: ViewportSize = {"width": 1280, "height": 800}


def _filter(page) -> None:
    page.fill("#timeline-filter", "~e write & !~c drive")


def _copy_curl(page) -> None:
    page.click('#copy-entry button[data-tool="curl"]')
    page.eval_on_selector("#copy-entry", "e => { document.getElementById('entry').scrollTop = e.offsetTop - 260; }")


def _keys(page) -> None:
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("?")


TIMELINE = ["#agreement", '#timeline tr[data-chain="trusted"]']
Shot = tuple[str, str, list[str], Literal["light", "dark"], Callable[[Page], None] | None]
SHOTS: list[Shot] = [  # name, page, selectors to wait for, colour scheme, what to do before the picture
    ("sessions", "/", ["#sessions[data-loaded=true]"], "light", None),
    ("timeline", f"/?session={S}", TIMELINE, "light", _filter),
    ("entry", f"/?session={S}&seq=7", [*TIMELINE, "#writes .write", "#entry-hash-check[data-chained=true]"], "light",
     _copy_curl),
    ("keys", f"/?session={S}", TIMELINE, "light", _keys),
    ("conversation", "/?session=agent-conversation&tab=conversation", [".turn tr[data-chain=trusted]"], "light", None),
    ("revert-plan", f"/?session={S}&tab=plan", ["#plan tbody tr"], "light", None),
    ("diff", f"/?view=diff&a={S}&b={S}-rerun", ["#diff-table"], "light", None),
    ("evidence", f"/?session={S}&tab=evidence", ["#checkpoint"], "light", None),
    ("search", "/?view=search&effect=write&connector=slack", ["#search-table tbody tr"], "light", None),
    ("broken", "/?session=drive-cleanup", ["#browser-verdict[data-state=broken]", "#server-verdict[data-state=broken]"],
     "light", None),
    ("dark", f"/?session={S}&seq=13", [*TIMELINE, "#entry-hash-check[data-chained=true]"], "dark", None),
]


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
        record_conversation(vault, "agent-conversation")
        rerun(vault, S, "session-2026-09-22-rerun")
        signer, witness = Signer.generate("vault.example/log"), Signer.generate("witness.example/w1")
        with witness_server(witness, Path(tmp) / "witness", [signer.verifier()]) as url:
            seal_with_witness(vault, S, signer, url, {("metadata.google.internal", "passed"): 3,
                                                      ("oauth2.googleapis.com", "token"): 2})
        with sync_playwright() as p, served(vault) as base:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for name, url, ready, scheme, then in SHOTS:
                page = browser.new_page(viewport=VIEWPORT, color_scheme=scheme)
                page.goto(base + url)
                for selector in ready:
                    page.wait_for_selector(selector)
                if then:
                    then(page)
                page.screenshot(path=OUT / f"inspector-{name}.png")
                page.close()
            browser.close()
    for f in sorted(OUT.glob("inspector-*.png")):
        print(f.relative_to(ROOT))


if __name__ == "__main__":
    main()
