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
from tests.support.inspector_scenes import record_conversation, rerun, seal_with_witness
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


def test_the_filter_narrows_a_live_timeline_as_rows_arrive(page, tmp_path):
    vault = Vault.create(tmp_path / "v")
    w = JournalWriter(vault, durable=False)
    w.append(fields("live", 1))
    w.append(fields("live", 2, effect="write", request={**fields()["request"], "method": "POST"}))
    with served(vault.root) as base:
        page.goto(f"{base}/?session=live")
        page.wait_for_selector('#timeline tr[data-line="2"]')
        page.fill("#timeline-filter", "~e write")
        assert shown_lines(page) == [2]
        w.append(fields("live", 3))
        w.append(fields("live", 4, effect="write", request={**fields()["request"], "method": "DELETE"}))
        w.close()
        page.wait_for_selector('#timeline tr[data-line="4"]')
        assert shown_lines(page) == [2, 4]
        assert page.inner_text("#filter-note") == "2 of 4 rows on this page match"
        assert page.input_value("#timeline-filter") == "~e write"
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


# -- 3. the conversation view -------------------------------------------------------------------------------

def test_the_conversation_shows_turns_their_tool_calls_entries_and_findings(page, tmp_path):
    from journal.trajectory import trajectory

    root = tmp_path / "v"
    record_conversation(root)
    report = trajectory(Vault(root), "s")
    assert [t["seq"] for t in report["turns"]] == [1, 4]
    with served(root) as base:
        page.goto(f"{base}/?session=s&tab=conversation")
        page.wait_for_selector(".turn[data-seq='4']")
        turn1 = page.inner_text(".turn[data-seq='1']")
        assert "Turn 1: model call at seq 1" in turn1 and "anthropic" in turn1
        assert page.inner_text(".turn[data-seq='1'] .asked li[data-tool='gmail']").count("carried out by seq 2") == 1
        # the entries beneath each turn are the ones tied to it by prompt_ref
        tied = {t["seq"]: t["calls"] for t in report["turns"]}
        for seq, calls in tied.items():
            got = page.eval_on_selector_all(f".turn[data-seq='{seq}'] .turn-entries:not(.turn-model) tbody tr",
                                            "rs => rs.map(r => Number(r.dataset.line))")
            assert got == calls
        # every finding is flagged at the seq where it occurs
        flagged = page.eval_on_selector_all(".finding", "fs => fs.map(f => [f.dataset.kind, Number(f.dataset.seq)])")
        assert sorted(map(tuple, flagged)) == sorted((f["kind"], f["seq"]) for f in report["findings"])
        assert report["findings"]
        # the rows are drawn from their own lines and marked by this browser's chain check
        page.wait_for_selector('#browser-verdict[data-state="intact"]')
        wait_until(page, "[...document.querySelectorAll('.turn tr[data-line]')]"
                         ".every(r => r.dataset.chain === 'trusted')")
    assert page.errors == []


def test_a_session_without_prompt_capture_says_so(page, example):
    with served(example) as base:
        page.goto(f"{base}/?session={S}&tab=conversation")
        page.wait_for_selector(".notes")
        assert "no model calls in this session" in page.inner_text(".notes")
    assert page.errors == []


# -- 4. the diff of two sessions ------------------------------------------------------------------------------

def test_the_diff_of_two_sessions_is_broker_diffs_side_by_side(page, example):
    from journal.diff import diff_sessions

    rerun(example, S, "rerun")  # seq 6 left out, seq 13 answered 429
    expected = diff_sessions(example, S, "rerun")
    assert not expected.same
    with served(example) as base:
        page.goto(f"{base}/?session={S}")
        page.click("#compare")
        page.wait_for_selector("#diff-form")
        assert page.input_value("#diff-a") == S
        page.select_option("#diff-b", "rerun")
        page.click("#diff-form button[type=submit]")
        page.wait_for_selector("#diff-table")
        assert f"a={S}" in page.url and "b=rerun" in page.url
        assert page.get_attribute("#diff-summary", "data-differences") == str(len(expected.differences))
        rows = page.query_selector_all("#diff-table tbody tr")
        assert [r.get_attribute("data-op") for r in rows] == [d["op"] for d in expected.differences]
        for r, d in zip(rows, expected.differences, strict=True):
            cells = [c.inner_text() for c in r.query_selector_all("td")]
            assert cells[1] == (str(d["a"]["seq"]) if "a" in d else "")
            assert cells[3] == (str(d["b"]["seq"]) if "b" in d else "")
        changed = page.query_selector("#diff-table tr[data-op=changed] .changed.add")
        assert changed.inner_text() == "429"
        page.goto(f"{base}/?view=diff&a={S}&b={S}")
        page.wait_for_selector("#diff-summary")
        assert page.get_attribute("#diff-summary", "data-same") == "true"
        page.goto(f"{base}/?view=diff&a={S}&b=..%2Fescape")
        page.wait_for_selector("#diff-result .error")
    assert page.errors == []


# -- 5. evidence at a glance ------------------------------------------------------------------------------------

def test_evidence_checkpoint_witness_unsealed_tail_coverage_and_the_proof(page, example, tmp_path):
    from journal.checkpoint.note import Signer
    from journal.checkpoint.proof_bundle import check_bundle
    from tests.support.checkpoint_harness import witness_server

    signer, wkey = Signer.generate("vault.example/log"), Signer.generate("witness.example/w1")
    before = time.time()
    with witness_server(wkey, tmp_path / "wstate", [signer.verifier()]) as url:
        seal_with_witness(example, S, signer, url, {("metadata.google.internal", "passed"): 3,
                                                    ("oauth2.googleapis.com", "token"): 2})
    with served(example) as base:
        page.goto(f"{base}/?session={S}&tab=evidence")
        page.wait_for_selector("#checkpoint[data-state=claimed]")
        assert page.get_attribute("#checkpoint", "data-size") == "17"
        assert page.inner_text('#checkpoint dd[data-field="signer"]').startswith("vault.example/log (key ")
        row = [c.inner_text() for c in page.query_selector_all("#witnesses tbody tr td")]
        assert row[0] == "witness.example/w1" and row[1] == wkey.cosigner_verifier().key_id.hex()
        cosigned = time.mktime(time.strptime(row[2], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
        assert before - 5 <= cosigned <= time.time() + 5
        assert page.get_attribute("#unsealed", "data-entries") == "2" and "seq 18–19" in page.inner_text("#unsealed")
        cov = {r.get_attribute("data-kind"): r.inner_text() for r in page.query_selector_all("#coverage tbody tr")}
        assert "metadata.google.internal" in cov["passed"] and "3" in cov["passed"]
        assert "oauth2.googleapis.com" in cov["token"] and "none declared" in cov["refused"]
        assert "not checked here" in page.inner_text("main")
        page.goto(f"{base}/?session={S}&seq=4")
        page.wait_for_selector("#proof-download")
        with page.expect_download() as info:
            page.click("#proof-download")
        bundle = orjson.loads(Path(info.value.path()).read_bytes())
        checked = check_bundle(bundle, signer.verifier(), [wkey.cosigner_verifier()])
        assert checked.seq == 4 and checked.cosigned_by == ["witness.example/w1"]
        page.goto(f"{base}/?session={S}&seq=18")  # past the checkpoint: no bundle offered
        page.wait_for_selector("#proof span")
        assert page.query_selector("#proof-download") is None
        assert "Not covered by the checkpoint" in page.inner_text("#proof")
    assert page.errors == []


def test_evidence_of_an_unsealed_session(page, example):
    with served(example) as base:
        page.goto(f"{base}/?session={S}&tab=evidence")
        page.wait_for_selector("#checkpoint[data-state=none]")
        assert page.get_attribute("#unsealed", "data-entries") == "17"
        assert "No vault index" in page.inner_text("#coverage")
    assert page.errors == []


# -- 6. the live sessions list ----------------------------------------------------------------------------------

def test_the_sessions_list_is_live(page, tmp_path):
    vault = Vault.create(tmp_path / "v")
    with served(vault.root) as base:
        page.goto(base + "/")
        page.wait_for_selector("#empty")
        w = JournalWriter(vault, durable=False)
        for n in (1, 2):
            w.append(fields("first", n))
        page.wait_for_selector('#sessions tr[data-session="first"]:not([data-pending])')
        cells = lambda s: [c.inner_text() for c in page.query_selector_all(f'#sessions tr[data-session="{s}"] td')]  # noqa: E731
        count = "document.querySelector('#sessions tr[data-session=\"first\"] td:nth-child(2)').textContent"
        wait_until(page, count + " === '2'")
        w.append(fields("first", 3))
        wait_until(page, count + " === '3'")
        w2 = JournalWriter(vault, durable=False)
        w2.append(fields("second", 1))
        page.wait_for_selector('#sessions tr[data-session="second"]:not([data-pending])')
        assert cells("second")[7] == "intact" and cells("first")[7] == "intact"
        w.close()
        w2.close()
    assert page.errors == []


# -- 7. accessibility: axe-core on every page ---------------------------------------------------------------------

A11Y_PAGES = [  # page, a selector that says it is drawn, colour scheme
    ("/", "#sessions[data-loaded=true]", "light"),
    (f"/?session={S}", '#timeline tr[data-chain="trusted"]', "light"),
    (f"/?session={S}&seq=4", "#entry-hash-check[data-chained=true]", "light"),
    (f"/?session={S}&seq=4", "#entry-hash-check[data-chained=true]", "dark"),
    ("/?session=s&tab=conversation", ".turn tr[data-chain=trusted]", "light"),
    (f"/?session={S}&tab=plan", "#plan tbody tr", "light"),
    (f"/?session={S}&tab=views", ".resource", "light"),
    (f"/?session={S}&tab=evidence", "#checkpoint", "light"),
    (f"/?view=diff&a={S}&b=rerun", "#diff-table", "light"),
    ("/?view=search&effect=write", "#search-table tbody tr", "light"),
]


def test_no_accessibility_violation_on_any_page(browser, example):
    """axe-core's rules, every impact (minor to critical): none is found on any page."""
    axe_playwright = pytest.importorskip("axe_playwright_python.sync_playwright",
                                         reason="axe-playwright-python (axe-core) is not installed")
    record_conversation(example, "s")
    rerun(example, S, "rerun")
    axe = axe_playwright.Axe()
    found = {}
    with served(example) as base:
        for url, ready, scheme in A11Y_PAGES:
            with browser_page(browser, TIMEOUT, viewport=SMALL, color_scheme=scheme) as pg:
                pg.goto(base + url)
                pg.wait_for_selector(ready)
                if url == f"/?session={S}&seq=4":
                    pg.click('#copy-entry button[data-tool="curl"]')
                    pg.keyboard.press("?")
                violations = axe.run(pg).response["violations"]
                bad = [(v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3]) for v in violations]
                if bad:
                    found[f"{url} ({scheme})"] = bad
    assert found == {}


# -- the new views keep recorded HTML inert --------------------------------------------------------------------

XSS = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


@pytest.mark.parametrize("bypass_csp", [False, True], ids=["csp", "no-csp"])
def test_recorded_html_stays_text_in_the_new_views(browser, tmp_path, bypass_csp):
    from tests.support.replay_factories import SessionBuilder

    root = tmp_path / "v"
    with SessionBuilder(root, "xss") as s:
        s.call("GET", "https://slack.com/api/x?q=" + XSS, resp_raw=XSS.encode(), resp_type="text/html",
               connector="slack", effect="read", headers=[("X-Note", XSS)])
        s.post("https://slack.com/api/chat.postMessage", {"text": XSS}, {"ok": True, "message": XSS})
    with browser_page(browser, TIMEOUT, viewport=SMALL, bypass_csp=bypass_csp) as pg, served(root) as base:
        pg.goto(f"{base}/?session=xss&seq=1")
        pg.wait_for_selector("#copy-entry")
        pg.fill("#timeline-filter", "onerror")
        for tool in ("curl", "httpie", "python"):
            pg.click(f'#copy-entry button[data-tool="{tool}"]')
            assert "onerror" in pg.inner_text("#copy-entry pre.copy-text")
        for url, ready in (("/?view=diff&a=xss&b=xss", "#diff-summary"), ("/?session=xss&tab=conversation", ".notes"),
                           ("/?session=xss&tab=evidence", "#checkpoint"), ("/?session=xss&tab=plan", "#plan, main p")):
            pg.goto(base + url)
            pg.wait_for_selector(ready)
        pg.goto(f"{base}/?session=xss&tab=plan")
        pg.wait_for_selector("#plan tbody tr")
        for box in pg.query_selector_all("#plan .copy-as"):
            box.query_selector('button[data-tool="curl"]').click()
        assert pg.evaluate("window.__pwned") is None
        assert pg.evaluate("document.querySelectorAll('#main img, #main script').length") == 0
        assert pg.errors == []
