"""The inspector as a daily console (issue 28), in Debian's Chromium: the timeline's filter and keys,
columns at 1280 px and dark mode; copy as curl/HTTPie/Python; the conversation view; the diff of two
sessions; evidence at a glance; the live sessions list. Fixtures are the ones the other inspector
browser tests use (tests/support/inspector_server.py)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import orjson
import pytest

from journal.vault import Vault
from journal.writer import JournalWriter
from tests.support.inspector_server import CHROMIUM, browser_page, chromium_browser, served
from tests.support.journal_factories import fields

pytestmark = pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK),
                                reason=f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "vault"
S = "session-2026-09-22"
TIMEOUT = 20_000
SMALL = {"width": 1280, "height": 800}


@pytest.fixture(scope="module")
def browser():
    with chromium_browser() as b:
        yield b


@pytest.fixture
def page(browser):
    with browser_page(browser, TIMEOUT, accept_downloads=True, viewport=SMALL) as pg:
        yield pg


@pytest.fixture
def example(tmp_path) -> Path:
    root = tmp_path / "vault"
    shutil.copytree(EXAMPLE, root)
    return root


def wait_until(pg, expression: str) -> None:
    """Poll a JS expression from outside the page (the page's CSP forbids the eval wait_for_function uses)."""
    deadline = time.monotonic() + TIMEOUT / 1000
    while not pg.evaluate(expression):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {expression}")
        time.sleep(0.1)


def entries(root: Path, session: str = S) -> list[dict]:
    return [orjson.loads(line) for line in (root / "journal" / f"{session}.jsonl").read_bytes().splitlines()]


def shown_lines(pg) -> list[int]:
    return pg.eval_on_selector_all("#timeline tbody tr[data-line]",
                                   "rs => rs.filter(r => !r.hidden).map(r => Number(r.dataset.line))")


# -- 1. the timeline: filter, keys, columns, dark mode -------------------------------------------------

def test_the_filter_narrows_the_timeline_as_the_expression_says(page, example):
    es = entries(example)

    def expect(pred) -> list[int]:
        return [e["seq"] for e in es if pred(e)]

    cases = {
        "~c gmail & ~e write": lambda e: e["connector"] == "gmail" and e["effect"] == "write",
        "~c gmail ~e write": lambda e: e["connector"] == "gmail" and e["effect"] == "write",
        "~m patch | ~m tools": lambda e: e["request"]["method"] in ("PATCH", "tools/call"),
        "!~e read": lambda e: e["effect"] != "read",
        "~h slack.com": lambda e: e["request"]["url"].startswith("https://slack.com/"),
        "~t conversations": lambda e: e["seq"] == 12,
        "~s 2xx & !(~c gmail | ~c drive)": lambda e: e["connector"] not in ("gmail", "drive"),
        "~s 404": lambda e: False,
        "freebusy": lambda e: "freeBusy" in e["request"]["url"],
        '"chat.update"': lambda e: "chat.update" in e["request"]["url"],
    }
    with served(example) as base:
        page.goto(f"{base}/?session={S}")
        page.wait_for_selector('#timeline tr[data-line="17"]')
        for text, pred in cases.items():
            page.fill("#timeline-filter", text)
            assert shown_lines(page) == expect(pred), text
        page.fill("#timeline-filter", "~x nope")  # refused with a reason; a filter that does not parse hides nothing
        assert page.get_attribute("#timeline-filter", "aria-invalid") == "true"
        assert "unknown filter ~x" in page.inner_text("#filter-note")
        assert len(shown_lines(page)) == 17
        page.fill("#timeline-filter", "(~c gmail")
        assert '")" expected' in page.inner_text("#filter-note")
        page.fill("#timeline-filter", "")
        assert len(shown_lines(page)) == 17
    assert page.errors == []


def test_the_tool_name_is_on_every_mcp_row(page, example):
    with served(example) as base:
        page.goto(f"{base}/?session={S}")
        page.wait_for_selector('#timeline tr[data-line="12"]')
        cells = [c.inner_text() for c in page.query_selector_all('#timeline tr[data-line="12"] td')]
        assert cells[6] == "tools/call conversations_history"


def test_keys_move_open_filter_and_list_themselves(page, example):
    with served(example) as base:
        page.goto(f"{base}/?session={S}")
        page.wait_for_selector('#timeline tr[data-line="17"]')
        page.keyboard.press("j")
        page.keyboard.press("j")
        page.keyboard.press("ArrowDown")
        page.keyboard.press("k")
        assert page.get_attribute("#timeline tr.cursor", "data-line") == "2"
        page.keyboard.press("Enter")
        page.wait_for_selector("#entry h2:text('Seq 2')")
        assert "seq=2" in page.url
        page.keyboard.press("/")
        assert page.evaluate("document.activeElement.id") == "timeline-filter"
        page.keyboard.type("~c slack")
        page.keyboard.press("Enter")  # leaves the filter, keeps it
        assert shown_lines(page) == [12, 13, 14, 15]
        page.keyboard.press("j")  # the cursor skips rows the filter hides
        assert page.get_attribute("#timeline tr.cursor", "data-line") == "12"
        page.keyboard.press("?")
        assert "open the row" in page.inner_text("#key-help")
        page.keyboard.press("Escape")
        assert page.query_selector("#key-help") is None
    assert page.errors == []


def test_columns_fit_at_1280_px(page, example):
    with served(example) as base:
        page.goto(f"{base}/?session={S}")
        page.wait_for_selector('#timeline tr[data-line="17"]')
        last = page.query_selector("#timeline thead th:last-child")
        assert last.inner_text().startswith("Answered by")
        box = last.bounding_box()
        assert box["x"] + box["width"] <= SMALL["width"]
        assert page.evaluate("document.documentElement.scrollWidth") <= SMALL["width"]
        page.click('#timeline tr[data-line="4"]')  # with an entry open too
        page.wait_for_selector("#entry h2:text('Seq 4')")
        assert page.evaluate("document.documentElement.scrollWidth") <= SMALL["width"]


def _luminance(rgb: str) -> float:
    r, g, b = (int(x) for x in rgb[rgb.index("(") + 1:rgb.index(")")].split(",")[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_colours_follow_the_system_setting(browser, example, scheme):
    with browser_page(browser, TIMEOUT, viewport=SMALL, color_scheme=scheme) as pg, served(example) as base:
        pg.goto(f"{base}/?session={S}")
        pg.wait_for_selector('#timeline tr[data-line="17"]')
        bg = _luminance(pg.evaluate("getComputedStyle(document.body).backgroundColor"))
        fg = _luminance(pg.evaluate("getComputedStyle(document.body).color"))
        head = _luminance(pg.evaluate("getComputedStyle(document.querySelector('#timeline th')).backgroundColor"))
        if scheme == "dark":
            assert bg < 0.2 and fg > 0.8 and head < 0.25
        else:
            assert bg > 0.9 and fg < 0.3 and head > 0.85


# -- 2. copy as curl / HTTPie / Python --------------------------------------------------------------------

def _copy(pg, box: str, tool: str) -> tuple[str, str]:
    pg.click(f'{box} button[data-tool="{tool}"]')
    text = pg.inner_text(f"{box} pre.copy-text")
    note = pg.inner_text(f"{box} .copy-note") if pg.is_visible(f"{box} .copy-note") else ""
    return text, note


def test_copy_an_entry_keeps_redacted_values_and_says_so(page, example):
    e = entries(example)[3]  # seq 4: a gmail write with a redacted Authorization header
    redacted = [h[0] for h in e["request"]["headers"] if "[never captured]" in h[1]]
    assert redacted
    with served(example) as base:
        page.goto(f"{base}/?session={S}&seq=4")
        page.wait_for_selector("#copy-entry")
        curl, note = _copy(page, "#copy-entry", "curl")
        assert curl.startswith("curl -X 'POST' 'https://gmail.googleapis.com/") and "[never captured]" in curl
        assert f"header {redacted[0]}" in note and "redacted" in note
        body = curl.split("--data-raw ", 1)[1]
        assert orjson.loads(body.strip("'")) == e["request"]["body"]
        httpie, note2 = _copy(page, "#copy-entry", "httpie")
        assert httpie.startswith("http --ignore-stdin 'POST' 'https://gmail") and "--raw" in httpie and note2 == note
        python, _ = _copy(page, "#copy-entry", "python")
        assert python.startswith("import requests") and "requests.request(\"POST\"" in python
        namespace: dict = {}
        exec(python.split("response = ")[0].replace("import requests", ""), namespace)  # the literals only, no call
        assert namespace["payload"] == e["request"]["body"]
        assert namespace["headers"][redacted[0]] == "[never captured]"
        page.click('#timeline tr[data-line="12"]')  # an MCP call over stdio: no HTTP command to copy
        page.wait_for_selector("#entry h2:text('Seq 12')")
        page.click('#copy-entry button[data-tool="curl"]')
        assert "not an HTTP call" in page.inner_text("#copy-entry .copy-note")
    assert page.errors == []


def test_a_hostile_url_or_header_is_quoted_for_the_shell(page, tmp_path):
    vault = Vault.create(tmp_path / "v")
    w = JournalWriter(vault, durable=False)
    f = fields("h", 1)
    f["request"]["url"] = "https://x.example/a?q=';touch /tmp/pwned;'$(id)`id`"
    f["request"]["headers"] = [["X-Evil", "a'b\"c$(id)"]]
    f["request"]["body"] = "line1\n'; rm -rf / #"
    w.append(f)
    w.close()
    with served(vault.root) as base:
        page.goto(f"{base}/?session=h&seq=1")
        page.wait_for_selector("#copy-entry")
        curl, _ = _copy(page, "#copy-entry", "curl")
    import shlex

    words = shlex.split(curl.replace("\\\n", " "))
    assert words[words.index("-X") + 2] == f["request"]["url"]
    assert "X-Evil: a'b\"c$(id)" in words and f["request"]["body"] in words


def test_copy_each_inverse_call_of_the_revert_plan(page, example):
    with served(example) as base:
        page.goto(f"{base}/?session={S}&tab=plan")
        page.wait_for_selector("#plan tbody tr")
        boxes = page.query_selector_all("#plan .copy-as")
        assert boxes
        plan = page.evaluate("fetch('/api/session/revert-plan?session=" + S + "').then(r => r.json())")
        at, first = next((i, s) for i, s in enumerate(plan["steps"], 1) if s["call"])
        assert len(boxes) == sum(1 for s in plan["steps"] if s["call"])
        curl, _ = _copy(page, f"#copy-step-{at}", "curl")
        assert f"-X '{first['call']['method']}'" in curl and first["call"]["url"] in curl
    assert page.errors == []
