"""The inspector in a real browser: Debian's Chromium, headless, driven by Playwright for Python.

No browser is downloaded: the tests use /usr/bin/chromium (`.ci/run` installs Debian's `chromium`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import orjson
import pytest

from journal.canonical import CanonicalError, is_canonical_line
from journal.vault import Vault
from journal.verify import SessionReport, verify_session
from journal.writer import JournalWriter
from tests.support.inspector_server import CHROMIUM, HeldFold, browser_page, chromium_browser, served
from tests.support.journal_factories import fields
from tests.support.replay_factories import SessionBuilder

pytestmark = pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK),
                                reason=f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "vault"
VECTORS = ROOT / "tests" / "support" / "vectors" / "canonical.json"
S = "session-2026-09-22"
TIMEOUT = 20_000


@pytest.fixture(scope="module")
def browser():
    with chromium_browser() as b:
        yield b


@pytest.fixture
def page(browser):
    with browser_page(browser, TIMEOUT, accept_downloads=True) as pg:
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


def wait_verdicts(pg, state: str) -> None:
    pg.wait_for_selector(f'#browser-verdict[data-state="{state}"]')
    pg.wait_for_selector("#server-verdict:not([data-state=checking])")


def test_sessions_list_sorts_and_filters(page, example):
    with SessionBuilder(example, "zz-second") as s:
        s.get("https://slack.com/api/conversations.list", {"ok": True, "channels": []})
    with served(example) as base:
        page.goto(base + "/")
        page.wait_for_selector("#sessions[data-loaded=true]")
        names = lambda: page.eval_on_selector_all("#sessions tbody tr", "rs => rs.map(r => r.dataset.session)")  # noqa: E731
        assert sorted(names()) == [S, "zz-second"]
        page.click('#sessions th[data-key="session"]')
        assert names() == [S, "zz-second"]
        page.click('#sessions th[data-key="session"]')
        assert names() == ["zz-second", S]
        page.fill("#filter", "drive")
        assert names() == [S]
        page.fill("#filter", "")
        page.select_option("#chain-filter", "broken")
        assert names() == []
        page.select_option("#chain-filter", "")
        row = page.inner_text(f'#sessions tr[data-session="{S}"]')
        assert "17" in row and "intact" in row and "calendar, drive, gmail, slack" in row and "broker 15" in row
        page.click(f'#sessions a:text("{S}")')
        page.wait_for_selector("#timeline tbody tr")
        assert page.url.endswith(f"/?session={S}")
    assert page.errors == []


def test_timeline_entry_and_intact_badge(page, example):
    with served(example) as base:
        page.goto(f"{base}/?session={S}")
        wait_verdicts(page, "intact")
        assert page.get_attribute("#server-verdict", "data-state") == "intact"
        assert page.get_attribute("#agreement", "data-agree") == "true"
        assert "intact, 17 entries" in page.inner_text("#browser-verdict")
        assert [w.url.rsplit("/", 1)[-1] for w in page.workers] == ["chain-worker.js"]  # off the main thread
        rows = page.query_selector_all("#timeline tbody tr")
        assert len(rows) == 17
        cells = [c.inner_text() for c in rows[3].query_selector_all("td")]
        assert cells[0] == "4" and cells[1] == "2026-09-22T09:14:09.015Z" and cells[2] == "+2.138s"
        assert cells[3:8] == ["gmail", "write", "broker", "POST", "200"]
        assert cells[8].endswith("/messages/192a5f0c3e1d7b20/modify")
        rows[3].click()
        page.wait_for_selector("#entry-hash-check[data-ok=true]")
        assert "seq=4" in page.url
        meta = page.inner_text("#entry-meta")
        assert "dana@acme.example" in meta and "write" in meta
        entry = orjson.loads((example / "journal" / f"{S}.jsonl").read_bytes().splitlines()[3])
        assert page.inner_text("#entry-hash") == entry["hash"]
        assert page.inner_text("#entry-prev") == entry["prev"]
        assert "matches the recorded hash" in page.inner_text("#entry-hash-check")
        page.wait_for_selector("#entry-hash-check[data-chained=true]")  # once the browser's chain check is done
        assert "[never captured]" in page.inner_text("#entry")  # the redacted header, as recorded
        assert json.loads(page.inner_text("#body-request")) == entry["request"]["body"]
        page.wait_for_selector("#writes .write")
        writes = page.inner_text("#writes")
        assert "before" in writes and "intended" in writes and "actual" in writes
        page.click("#tab-plan")
        page.wait_for_selector("#plan tbody tr")
        page.click("#tab-views")
        page.wait_for_selector(".resource")
    assert page.errors == []


def test_deep_link_opens_the_entry(page, example):
    with served(example) as base:
        page.goto(f"{base}/?session={S}&seq=12")
        page.wait_for_selector("#entry h2:text('Seq 12')")
        assert page.get_attribute('#timeline tr[data-line="12"]', "class").split()[-1] == "selected"
        assert "tools/call" in page.inner_text("#entry-request-line")
    assert page.errors == []


def test_what_a_write_changed_shows_progress_then_the_block(page, example, monkeypatch):
    """Issue 26: the entry page does not wait for the replay. The first answer for what the write changed is a
    202 while the fold runs (held here until the test lets it go, no clock): the block says how far it got;
    once the fold is done the page's next ask gets the block. The views tab then needs no second fold."""
    fold = HeldFold(monkeypatch)
    statuses: list[int] = []
    page.on("response", lambda r: statuses.append(r.status) if "/api/session/writes" in r.url else None)
    with served(example) as base:
        page.goto(f"{base}/?session={S}&seq=4")
        page.wait_for_selector("#writes [role=status]")
        assert "% of the session read" in page.inner_text("#writes [role=status]")
        assert page.query_selector("#writes .write") is None
        assert statuses and set(statuses) == {202}
        fold.gate.set()
        page.wait_for_selector("#writes .write")
        writes = page.inner_text("#writes")
        assert "before" in writes and "intended" in writes and "actual" in writes
        assert statuses[-1] == 200
        page.click("#tab-views")
        page.wait_for_selector(".resource")
    assert fold.seen == [{"views": True}]
    assert page.errors == []


def test_a_grown_session_shows_the_last_replay_marked(page, example, monkeypatch):
    """A session being written: while the replay of the grown file is folded, the block shows the last one,
    saying how far it goes, instead of waiting."""
    fold = HeldFold(monkeypatch)
    fold.gate.set()
    with served(example) as base:
        page.goto(f"{base}/?session={S}&seq=4")
        page.wait_for_selector("#writes .write")
        assert page.query_selector("#writes .as-of") is None
        fold.gate.clear()  # the fold of the grown file is held
        with JournalWriter(Vault.open_existing(example), durable=False) as w:
            w.append(fields(S, 18))
        page.reload()
        page.wait_for_selector("#writes .as-of")
        assert "Replayed as of the first 17 entries" in page.inner_text("#writes .as-of")
        assert page.query_selector("#writes .write") is not None
        fold.gate.set()
    assert page.errors == []


def _edit(path: Path, seq: int, old: bytes, new: bytes) -> None:
    lines = path.read_bytes().split(b"\n")
    assert old in lines[seq - 1] and len(old) == len(new)
    lines[seq - 1] = lines[seq - 1].replace(old, new, 1)
    path.write_bytes(b"\n".join(lines))


def test_badge_after_an_entry_is_edited_on_disk(page, example):
    path = example / "journal" / f"{S}.jsonl"
    with served(example) as base:
        page.goto(f"{base}/?session={S}")
        wait_verdicts(page, "intact")
        _edit(path, 7, b"dana@acme.example", b"eve@acme.example.")
        assert verify_session(Vault.open_existing(example), S).broken_at_seq == 7
        page.reload()
        wait_verdicts(page, "broken")
        assert page.get_attribute("#browser-verdict", "data-seq") == "7"
        assert page.get_attribute("#browser-verdict", "data-kind") == "edited"
        assert page.get_attribute("#server-verdict", "data-seq") == "7"
        assert page.get_attribute("#agreement", "data-agree") == "true"
        assert "Chain broken at seq 7" in page.inner_text("#broken")
        untrusted = page.eval_on_selector_all("#timeline tr.untrusted", "rs => rs.map(r => +r.dataset.line)")
        assert untrusted == list(range(7, 18))
        page.click('#timeline tr[data-line="7"]')
        page.wait_for_selector("#entry-hash-check[data-ok=false]")
        assert "this entry was edited" in page.inner_text("#entry-hash-check")


def test_a_server_that_lies_is_caught(page, example, monkeypatch):
    """The browser's own check disagrees with a server claiming intact: the page says untrusted."""
    _edit(example / "journal" / f"{S}.jsonl", 3, b'"status":200', b'"status":201')
    from broker.inspector import sessions

    monkeypatch.setattr(sessions.SessionIndex, "verdict", lambda self, s: SessionReport(s, entries=17))
    with served(example) as base:
        page.goto(f"{base}/?session={S}")
        wait_verdicts(page, "broken")
        assert page.get_attribute("#browser-verdict", "data-seq") == "3"
        assert page.get_attribute("#server-verdict", "data-state") == "intact"
        assert page.get_attribute("#agreement", "data-agree") == "false"
        assert "Untrusted session" in page.inner_text("#untrusted")


XSS = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


@pytest.mark.parametrize("bypass_csp", [False, True], ids=["with-csp", "without-csp"])
def test_recorded_html_is_shown_as_text_and_never_runs(browser, tmp_path, bypass_csp):
    """Also with the page's CSP switched off: what keeps recorded HTML inert is that it is only ever text."""
    context = browser.new_context(bypass_csp=bypass_csp)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    root = tmp_path / "v"
    with SessionBuilder(root, "xss") as s:
        s.call("GET", "https://slack.com/api/x?q=" + XSS, resp_raw=XSS.encode(), resp_type="text/html",
               connector="slack", effect="read", headers=[("X-Note", XSS)])
        s.post("https://slack.com/api/chat.postMessage", {"text": XSS, XSS: XSS}, {"ok": True, "message": XSS})
    with served(root) as base:
        page.goto(f"{base}/?session=xss&seq=1")
        page.wait_for_selector("#body-response")
        assert page.inner_text("#body-response") == XSS
        assert XSS in page.inner_text("#entry")
        assert XSS in page.inner_text("#timeline")
        page.click('#timeline tr[data-line="2"]')
        page.wait_for_selector("#entry h2:text('Seq 2')")
        page.wait_for_selector("#body-request")
        assert json.loads(page.inner_text("#body-request"))["text"] == XSS
        assert json.loads(page.inner_text("#body-response"))["message"] == XSS
        assert page.evaluate("window.__pwned") is None
        assert page.evaluate("document.querySelectorAll('#main img, #main script').length") == 0
    context.close()
    assert errors == []


def test_fixture_download(page, example):
    with served(example) as base:
        page.goto(f"{base}/?session={S}")
        page.wait_for_selector("#fixture")
        with page.expect_download() as info:
            page.click("#fixture")
        doc = json.loads(Path(info.value.path()).read_bytes())
        assert info.value.suggested_filename == f"{S}.fixture.json"
    assert doc["schema"] == "connector-broker/fixture/1"
    assert doc["entries"] == [orjson.loads(x) for x in (example / "journal" / f"{S}.jsonl").read_bytes().splitlines()]
    assert doc["chain"]["verdict"] == "intact"


def _lines_for_parity() -> list[str]:
    """Lines a verifier must judge: a real entry, and spellings of it that are not canonical."""
    line = (EXAMPLE / "journal" / f"{S}.jsonl").read_bytes().splitlines()[0].decode()
    e = json.loads(line)
    return [
        line,
        line.replace('":', '": ', 1),  # whitespace
        line.replace('"agent":"', '"agent":"\\u0041', 1),  # an escape that is not needed
        line.replace('"seq":1', '"seq":1.0', 1),
        line.replace('"seq":1', '"seq":-0', 1),
        line.replace('"prompt_ref":null', '"prompt_ref":9007199254740992', 1),  # beyond 2^53-1
        line.replace('"prompt_ref":null', '"prompt_ref":9007199254740991', 1),  # within
        line.replace('"prompt_ref":null', '"prompt_ref":1e+21', 1),
        line.replace('"prompt_ref":null', '"prompt_ref":"\\ud800"', 1),  # a lone surrogate
        line.replace('"prompt_ref":null', '"prompt_ref":"\\ud83d\\ude00"', 1),
        line.replace('"prompt_ref":null', '"prompt_ref":"\U0001f600"', 1),
        line.replace('"prompt_ref":null', '"prompt_ref":"\\u007f"', 1),
        "\ufeff" + line,  # a byte order mark
        json.dumps(e, separators=(",", ":")),  # key order as written, not sorted
    ]


def _python_says(line: str) -> bool:
    try:
        data = line.encode("utf-8", errors="surrogatepass")
        return is_canonical_line(data, orjson.loads(data))
    except (CanonicalError, orjson.JSONDecodeError):
        return False


def test_canonical_vectors_and_line_checks_in_the_browser(page, example):
    vectors = json.loads(VECTORS.read_text())
    lines = _lines_for_parity()
    with served(example) as base:
        page.goto(f"{base}/")
        wait_until(page, "window.Canonical !== undefined")
        assert page.evaluate("Canonical.hasCrypto()") is True
        failures = page.evaluate("""async (vectors) => {
            const bad = [];
            for (const v of vectors) {
                const c = Canonical.canonicalize(JSON.parse(v.value_json));
                const h = await Canonical.sha256Hex(c);
                if (c !== v.canonical || h !== v.sha256) bad.push([v.name, c, h]);
            }
            return bad;
        }""", vectors)
        verdicts = page.evaluate("""async (lines) => {
            const out = [];
            for (const text of lines) {
                const enc = new TextEncoder().encode(text);
                const session = JSON.parse(text.replace(/^\\ufeff/, "")).session;
                try { await Canonical.checkLine(enc, session); out.push(true); }
                catch (err) { out.push(err.kind === "edited" ? "edited" : false); }
            }
            return out;
        }""", lines)
    assert len(vectors) >= 70 and failures == []
    python = [_python_says(x) for x in lines]
    # The browser refuses exactly the lines the Python verifier refuses (a changed value that is still
    # canonical is caught by its hash: "edited").
    browser = [v in (True, "edited") for v in verdicts]
    assert list(zip(lines, browser, strict=True)) == list(zip(lines, python, strict=True))
    assert python[0] is True and not any(python[1:6])


def test_a_session_being_written_grows_on_the_page(page, tmp_path):
    vault = Vault.create(tmp_path / "v")
    w = JournalWriter(vault, durable=False)
    for n in range(3):
        w.append(fields("live", n))
    with served(vault.root) as base:
        page.goto(f"{base}/?session=live")
        wait_verdicts(page, "intact")
        assert len(page.query_selector_all("#timeline tbody tr")) == 3
        for n in range(3, 6):
            w.append(fields("live", n))
        w.close()
        wait_until(page, "document.querySelectorAll('#timeline tbody tr').length === 6")
        wait_until(page, "document.getElementById('browser-verdict').textContent.includes('6 entries')")
        assert page.get_attribute("#browser-verdict", "data-state") == "intact"


def test_empty_vault_unknown_session_and_no_web_crypto(page, tmp_path, example):
    Vault.create(tmp_path / "empty")
    with served(tmp_path / "empty") as base:
        page.goto(base + "/")
        assert "no sessions yet" in page.inner_text("#empty")
        r = page.goto(base + "/?session=nope")
        assert r.status == 404 and "There is no session 'nope'" in page.inner_text("main")
    with served(example) as base:
        page.add_init_script("Object.defineProperty(Crypto.prototype, 'subtle', { get() { return undefined; } });")
        page.goto(f"{base}/?session={S}")
        page.wait_for_selector("#server-verdict[data-state=intact]")
        assert page.get_attribute("#browser-verdict", "data-state") == "unavailable"
        assert "server verdict only" in page.inner_text("#browser-verdict")


def test_token_on_first_load_then_carried_by_the_page(page, example):
    with served(example, token="tok-123") as base:
        assert page.goto(base + "/").status == 401
        page.goto(base + "/?token=tok-123")
        page.wait_for_selector("#sessions tbody tr")
        assert "token" not in page.url
        page.goto(f"{base}/?session={S}&seq=2")  # a new load: the cookie the first load set carries it
        page.wait_for_selector("#entry-hash-check[data-ok=true]")


def test_a_long_timeline_pages(page, tmp_path):
    vault = Vault.create(tmp_path / "v")
    w = JournalWriter(vault, durable=False)
    for n in range(1, 1001):
        w.append(fields("long", n))
    w.close()
    with served(vault.root) as base:
        page.goto(f"{base}/?session=long")
        page.wait_for_selector("#timeline tbody tr")
        assert len(page.query_selector_all("#timeline tbody tr")) == 200
        assert page.inner_text("#range") == "1–200 of 1,000"
        page.click("text=next ›")
        page.wait_for_selector('#timeline tr[data-line="201"]')
        page.fill("#jump", "950")
        page.click("text=open")
        page.wait_for_selector("#entry h2:text('Seq 950')")
        assert page.inner_text("#range") == "801–1,000 of 1,000"
        wait_verdicts(page, "intact")
        assert "1,000 entries" in page.inner_text("#browser-verdict")


def _remove(lines: list[bytes]) -> list[bytes]:
    return lines[:4] + lines[5:]


def _swap(lines: list[bytes]) -> list[bytes]:
    return lines[:4] + [lines[5], lines[4]] + lines[6:]


def _duplicate(lines: list[bytes]) -> list[bytes]:
    return lines[:9] + [lines[8]] + lines[9:]


def _spaced(lines: list[bytes]) -> list[bytes]:
    return lines[:2] + [lines[2].replace(b'":', b'": ', 1)] + lines[3:]


def _other_session(lines: list[bytes]) -> list[bytes]:
    e = orjson.loads(lines[0])
    e["session"] = "someone-else"
    from journal.chain import chain_entry

    _, line = chain_entry({k: v for k, v in e.items() if k not in ("seq", "prev", "hash")}, 1, e["prev"])
    return [line.rstrip(b"\n")] + lines[1:]


@pytest.mark.parametrize("tamper", [_remove, _swap, _duplicate, _spaced, _other_session, "torn"],
                         ids=["removed", "reordered", "inserted", "not_canonical", "contract_violation", "torn_tail"])
def test_the_browser_finds_the_verifiers_break(page, example, tamper):
    path = example / "journal" / f"{S}.jsonl"
    if tamper == "torn":
        path.write_bytes(path.read_bytes()[:-40])
    else:
        lines = path.read_bytes().split(b"\n")[:-1]
        path.write_bytes(b"\n".join(tamper(lines)) + b"\n")
    report = verify_session(Vault.open_existing(example), S)
    assert not report.intact
    with served(example) as base:
        page.goto(f"{base}/?session={S}")
        wait_verdicts(page, "broken")
        assert page.get_attribute("#browser-verdict", "data-seq") == str(report.broken_at_seq)
        assert page.get_attribute("#browser-verdict", "data-kind") == report.kind
        assert page.get_attribute("#agreement", "data-agree") == "true"


def test_answered_by_and_effect_basis_are_shown_when_present(page, tmp_path):
    vault = Vault.create(tmp_path / "v")
    w = JournalWriter(vault, durable=False)
    w.append(fields("new", 1))  # an entry written before 2026-12: neither key
    f = fields("new", 2)
    f["request"]["effect_basis"] = "default"
    f["response"] = {"status": 502, "headers": [], "body": None, "answered_by": "capture",
                     "error": "journal unavailable (fail closed)"}
    w.append(f)
    w.close()
    with served(vault.root) as base:
        page.goto(f"{base}/?session=new&seq=2")
        page.wait_for_selector("#entry h2:text('Seq 2')")
        cells = [c.inner_text() for c in page.query_selector_all('#timeline tr[data-line="2"] td')]
        assert cells[7] == "502" and cells[9] == "capture: journal unavailable (fail closed)"
        assert page.inner_text('#entry-meta dd[data-field="answered by"]') == "capture"
        assert page.inner_text('#entry-meta dd[data-field="effect basis"]') == "default"
        assert [c.inner_text() for c in page.query_selector_all('#timeline tr[data-line="1"] td')][9] == ""
        page.click('#timeline tr[data-line="1"]')
        page.wait_for_selector("#entry h2:text('Seq 1')")
        assert page.query_selector('#entry-meta dd[data-field="answered by"]') is None
        assert page.query_selector('#entry-meta dd[data-field="effect basis"]') is None


def test_the_seal_column_shows_what_the_checkpoint_claims(page, example):
    from journal.checkpoint.note import Signer
    from tests.support.checkpoint_harness import seal_all

    seal_all(Vault(example), Signer.generate("vault.example/log"))
    with served(example) as base:
        page.goto(base + "/")
        page.wait_for_selector("#sessions[data-loaded=true]")
        row = page.inner_text(f'#sessions tr[data-session="{S}"]')
        assert "checkpoint claims 17" in row and "cosigned" not in row
    assert page.errors == []
