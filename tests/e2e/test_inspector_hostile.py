"""The inspector in Chromium against a lying or slow server: it shows only what it checked.

Every timeline row is drawn from its raw line and tied to the chain the browser verified (the hash
recomputed from the row's line must be the chain's at that seq); while the check runs the page says
it is checking, with progress, and draws no verdict, partial or not, until the whole file is read.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from pathlib import Path

import orjson
import pytest
from starlette.responses import StreamingResponse

from broker.inspector import api as inspector_api
from broker.inspector import sessions
from journal.canonical import canonical_bytes
from tests.support.inspector_server import CHROMIUM, browser_page, chromium_browser, served

pytestmark = pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason=f"no Chromium at {CHROMIUM}")

ROOT = Path(__file__).resolve().parents[2]
S = "session-2026-09-22"
TIMEOUT = 20_000


@pytest.fixture(scope="module")
def browser():
    with chromium_browser() as b:
        yield b


@pytest.fixture
def page(browser):
    with browser_page(browser, TIMEOUT) as pg:
        yield pg


@pytest.fixture
def example(tmp_path) -> Path:
    root = tmp_path / "vault"
    shutil.copytree(ROOT / "vault", root)
    return root


def _rehashed(line: bytes, **change) -> bytes:
    """`line` with fields changed and its hash recomputed: consistent in itself, not the chain's entry."""
    entry = orjson.loads(line)
    entry["request"] = {**entry["request"], **change}
    body = {k: v for k, v in entry.items() if k != "hash"}
    return canonical_bytes({**body, "hash": hashlib.sha256(canonical_bytes(body)).hexdigest()})


def test_a_server_lying_consistently_in_the_timeline_is_caught(page, example, monkeypatch):
    """The raw stream (what the browser checks) is the true file; the timeline and the entry endpoint show
    another seq 3, whose own hash holds. Both verdicts say intact; the row and the entry are marked."""
    real = sessions.SessionIndex.lines

    def lying(self, session, first, count):
        total, got = real(self, session, first, count)
        return total, [_rehashed(d, url="https://evil.example/") if first + i == 3 else d for i, d in enumerate(got)]

    monkeypatch.setattr(sessions.SessionIndex, "lines", lying)
    with served(example) as base:
        page.goto(f"{base}/?session={S}")
        page.wait_for_selector('#browser-verdict[data-state="intact"]')
        page.wait_for_selector('#timeline tr[data-line="3"][data-chain="untrusted"]')
        states = page.eval_on_selector_all("#timeline tbody tr", "rs => rs.map(r => r.dataset.chain)")
        assert states == ["trusted", "trusted", "untrusted"] + ["trusted"] * 14
        assert "evil.example" in page.inner_text('#timeline tr[data-line="3"]')
        page.click('#timeline tr[data-line="3"]')
        page.wait_for_selector('#entry-hash-check[data-untrusted="true"]')
        assert "not the recorded entry" in page.inner_text("#entry-hash-check")
    assert page.errors == []


def test_no_verdict_is_drawn_until_the_whole_session_is_read(page, example, monkeypatch):
    """The raw stream stops halfway (mid-line) until released: the page says checking, with progress, and
    shows no verdict, no disagreement and no banner; once the rest arrives, intact."""
    data = (example / "journal" / f"{S}.jsonl").read_bytes()
    half = len(data) // 2
    release = threading.Event()
    real_raw = inspector_api.Api.raw

    def slow_raw(self, request):
        if request.query_params.get("offset", "0") != "0":
            return real_raw(self, request)

        def chunks():
            yield data[:half]
            release.wait(TIMEOUT / 1000)
            yield data[half:]

        return StreamingResponse(chunks(), media_type="application/octet-stream",
                                 headers={"cache-control": "no-store", "x-file-bytes": str(len(data))})

    monkeypatch.setattr(inspector_api.Api, "raw", slow_raw)
    with served(example) as base:
        page.goto(f"{base}/?session={S}")
        page.wait_for_selector("#server-verdict:not([data-state=checking])")
        page.wait_for_selector(f'#browser-verdict[data-state="checking"][data-bytes="{half}"]')
        badge = page.inner_text("#browser-verdict")
        assert "checking" in badge and "% of" in badge
        assert page.query_selector("#agreement") is None and page.query_selector("#untrusted") is None
        assert page.query_selector("#broken") is None
        checked = data[:half].count(b"\n")
        states = page.eval_on_selector_all("#timeline tbody tr", "rs => rs.map(r => r.dataset.chain)")
        assert states == ["trusted"] * checked + ["unchecked"] * (17 - checked)
        release.set()
        page.wait_for_selector('#browser-verdict[data-state="intact"]')
        assert page.get_attribute("#agreement", "data-agree") == "true"
        assert page.eval_on_selector_all("#timeline tbody tr", "rs => rs.map(r => r.dataset.chain)") == ["trusted"] * 17
    assert page.errors == []
