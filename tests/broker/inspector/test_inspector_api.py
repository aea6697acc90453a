"""The inspector's HTTP side: read-only, guarded, answers from the journal's own readers."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import httpx
import orjson
import pytest
from starlette.testclient import TestClient

from broker.inspector import create_app
from journal.vault import Vault
from journal.writer import JournalWriter
from tests.support.inspector_server import HeldFold, served
from tests.support.journal_factories import fields
from tests.support.replay_factories import GMAIL, SessionBuilder, gmail_session

EXAMPLE = Path(__file__).resolve().parents[3] / "vault"
S = "session-2026-09-22"


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(Vault.open_existing(EXAMPLE)), base_url="http://127.0.0.1")


def test_sessions_list_comes_from_the_verifier(client):
    rows = client.get("/api/sessions").json()
    assert [r["session"] for r in rows] == [S]
    row = rows[0]
    assert row["entries"] == 17 and row["verifies"] is True and row["writes"] == 8
    assert row["connectors"] == ["calendar", "drive", "gmail", "slack"]
    assert row["captures"] == {"agent": 1, "broker": 15, "gateway": 1}
    assert row["sealed"] is None
    names = client.get("/api/sessions", params={"names": 1}).json()
    assert names == [{"session": S, "bytes": row["bytes"]}]


def test_timeline_pages_carry_the_previous_time_for_the_gap(client):
    page = client.get("/api/session/entries", params={"session": S, "from": 5, "limit": 3}).json()
    assert page["total"] == 17
    assert [r["line"] for r in page["rows"]] == [5, 6, 7]
    first = client.get("/api/session/entries", params={"session": S, "from": 4, "limit": 1}).json()["rows"][0]
    assert page["prev_ts"] == first["ts"]
    assert page["rows"][0]["connector"] == "calendar"
    last = client.get("/api/session/entries", params={"session": S, "from": 17, "limit": 200}).json()
    assert [r["line"] for r in last["rows"]] == [17]


def test_an_entry_comes_with_its_raw_line(client):
    got = client.get("/api/session/entry", params={"session": S, "seq": 4}).json()
    line = (EXAMPLE / "journal" / f"{S}.jsonl").read_bytes().split(b"\n")[3]
    assert got["raw"].encode() == line
    assert got["entry"] == orjson.loads(line)
    assert client.get("/api/session/entry", params={"session": S, "seq": 99}).status_code == 404


def test_raw_lines_from_an_offset(client):
    data = (EXAMPLE / "journal" / f"{S}.jsonl").read_bytes()
    whole = client.get("/api/session/raw", params={"session": S})
    assert whole.content == data
    cut = data.index(b"\n") + 1
    rest = client.get("/api/session/raw", params={"session": S, "offset": cut})
    assert rest.content == data[cut:]


def test_verdict_views_and_revert_plan(client):
    v = client.get("/api/session/verdict", params={"session": S}).json()
    assert v["intact"] is True and v["entries"] == 17
    views = _until_ready(client, "/api/session/views", session=S).json()
    assert views["chain"]["intact"] is True and views["resources"]
    plan = _until_ready(client, "/api/session/revert-plan", session=S).json()
    assert plan["executed"] is False and len(plan["steps"]) >= 1
    writes = _until_ready(client, "/api/session/writes", session=S, seq=4).json()["writes"]
    assert writes and {"before", "intended", "actual", "differences"} <= set(writes[0])


def _until_ready(c: TestClient, path: str, **params) -> httpx.Response:
    """Ask as the page does while the answer is 202 (the server holds each request up to a second)."""
    for _ in range(120):
        r = c.get(path, params=params)
        if r.status_code != 202:
            return r
        assert r.json()["pending"] is True
    raise AssertionError(f"{path} still pending")


def test_the_revert_plan_is_folded_in_the_background_and_says_how_far_it_got(monkeypatch, tmp_path):
    """A long session's plan takes a while: the first requests answer 202 with the bytes read so far (the page
    shows them) instead of holding the request; then the plan, the same as a full replay's."""
    from journal.replay import forked, plan_dict, replay_session

    fold = HeldFold(monkeypatch)
    c = TestClient(create_app(Vault.open_existing(EXAMPLE)), base_url="http://127.0.0.1")
    size = (EXAMPLE / "journal" / f"{S}.jsonl").stat().st_size
    first = c.get("/api/session/revert-plan", params={"session": S})
    assert first.status_code == 202
    got = first.json()
    assert got["pending"] is True and got["total"] == size and 0 < got["done"] <= size
    assert c.get("/api/session/revert-plan", params={"session": S}).status_code == 202  # the same fold, once
    fold.gate.set()
    r = _until_ready(c, "/api/session/revert-plan", session=S)
    assert r.status_code == 200 and fold.seen == [{"views": False}]  # one fold, for the plan alone
    monkeypatch.setattr(forked, "ENABLED", False)  # a unit test starts no process
    vault = Vault.open_existing(EXAMPLE)
    vault.views_dir = tmp_path  # the replay's scratch: never inside the example vault
    assert r.json() == plan_dict(replay_session(vault, S)) | {"current": True}


def test_what_a_write_changed_is_folded_in_the_background(monkeypatch):
    """Issue 26: the entry page's "what the write changed" block and the views tab used to hold the request for
    a whole replay with views (a minute on a 10^5-entry session). The first request now answers 202 while the
    fold has not finished (here it cannot: it is held), with the bytes read so far; the views tab and every
    write's block share that one fold, and so does the revert plan asked for meanwhile; once it is done the
    writes and the plan come from it."""
    fold = HeldFold(monkeypatch)
    c = TestClient(create_app(Vault.open_existing(EXAMPLE)), base_url="http://127.0.0.1")
    size = (EXAMPLE / "journal" / f"{S}.jsonl").stat().st_size
    first = c.get("/api/session/writes", params={"session": S, "seq": 4})
    assert first.status_code == 202
    got = first.json()
    assert got["pending"] is True and got["total"] == size and 0 < got["done"] <= size
    assert c.get("/api/session/views", params={"session": S}).status_code == 202
    assert c.get("/api/session/writes", params={"session": S, "seq": 6}).status_code == 202
    assert c.get("/api/session/revert-plan", params={"session": S}).status_code == 202  # from the same fold
    fold.gate.set()
    writes = _until_ready(c, "/api/session/writes", session=S, seq=4)
    assert writes.status_code == 200
    w = writes.json()["writes"]
    assert w and {"before", "intended", "actual", "differences"} <= set(w[0])
    views = _until_ready(c, "/api/session/views", session=S)
    assert views.status_code == 200 and views.json()["resources"]
    assert _until_ready(c, "/api/session/revert-plan", session=S).status_code == 200
    assert fold.seen == [{"views": True}] and fold.ended == ["done"]  # one fold with views served all of it


def _grow(root: Path) -> None:
    w = JournalWriter(Vault.open_existing(root), durable=False)
    w.append(fields(S, 18))
    w.close()


def test_a_file_replaced_while_its_fold_runs_is_folded_again(monkeypatch, tmp_path):
    """The fold's result is filed under the file's stamp taken before it read a byte: when the session file
    is replaced (or edited in place) while it runs, the next request stops that fold and starts one of the
    file as it is now; the old file's replay is never the answer."""
    root = tmp_path / "vault"
    shutil.copytree(EXAMPLE, root)
    path = root / "journal" / f"{S}.jsonl"
    fold = HeldFold(monkeypatch)
    c = TestClient(create_app(Vault.open_existing(root)), base_url="http://127.0.0.1")
    assert c.get("/api/session/views", params={"session": S}).status_code == 202
    (tmp_path / "new").write_bytes(path.read_bytes().replace(b"dana@acme.example", b"eve@acme.example.", 1))
    os.replace(tmp_path / "new", path)
    assert c.get("/api/session/views", params={"session": S}).status_code == 202  # the new file's fold
    assert len(fold.seen) == 2
    fold.gate.set()
    r = _until_ready(c, "/api/session/views", session=S)
    assert r.status_code == 200 and r.json()["current"] is True and r.json()["chain"]["intact"] is False
    assert fold.one_ended.acquire(timeout=30) and fold.one_ended.acquire(timeout=30)
    assert sorted(fold.ended) == ["_Superseded", "done"]  # the first fold stopped at its next block


def _until_current(c: TestClient, path: str, **params) -> httpx.Response:
    for _ in range(120):
        r = c.get(path, params=params)
        if r.status_code == 200 and r.json()["current"]:
            return r
    raise AssertionError(f"{path} never current")


def test_a_session_that_grows_while_its_fold_runs_is_answered_marked(monkeypatch, tmp_path):
    """A session being written grows under every fold: a fold of a file that only grew runs to its end (not
    stopped), and the last replay is answered marked not current (with how much it read) while the fold of
    the grown file runs, so the page is never left waiting on a live session; a write beyond what it read
    waits for that fold. A file replaced by a longer one gets no such answer."""
    root = tmp_path / "vault"
    shutil.copytree(EXAMPLE, root)
    fold = HeldFold(monkeypatch)
    c = TestClient(create_app(Vault.open_existing(root)), base_url="http://127.0.0.1")
    assert c.get("/api/session/views", params={"session": S}).status_code == 202
    _grow(root)
    assert c.get("/api/session/views", params={"session": S}).status_code == 202  # the same fold goes on
    assert len(fold.seen) == 1
    fold.gate.set()
    assert _until_current(c, "/api/session/views", session=S).json()["chain"]["verified_entries"] == 18
    assert "_Superseded" not in fold.ended

    fold.gate.clear()  # the next fold is held
    _grow(root)
    views = c.get("/api/session/views", params={"session": S})
    assert views.status_code == 200
    got = views.json()
    assert got["current"] is False and got["replay_of"]["entries"] == 18 and got["chain"]["verified_entries"] == 18
    w = c.get("/api/session/writes", params={"session": S, "seq": 4})
    assert w.status_code == 200 and w.json()["current"] is False and w.json()["writes"]
    assert c.get("/api/session/writes", params={"session": S, "seq": 19}).status_code == 202  # not in it
    plan = c.get("/api/session/revert-plan", params={"session": S})
    assert plan.status_code == 200 and plan.json()["current"] is False
    folds = len(fold.seen)
    fold.gate.set()
    r = _until_current(c, "/api/session/views", session=S)
    assert r.json()["chain"]["verified_entries"] == 19 and "replay_of" not in r.json() and len(fold.seen) == folds

    path = root / "journal" / f"{S}.jsonl"
    fold.gate.clear()
    (tmp_path / "new").write_bytes(path.read_bytes() + path.read_bytes().splitlines(keepends=True)[-1])
    os.replace(tmp_path / "new", path)  # longer, but another file: nothing of the old one is answered
    assert c.get("/api/session/views", params={"session": S}).status_code == 202
    fold.gate.set()


def test_a_broken_session_that_grows_is_answered_with_every_line_its_replay_read(monkeypatch, tmp_path):
    """A session with a line tampered with at seq 2 is replayed to its end (untrusted from there on), so the
    replay shown while the grown file's fold runs covers all 17 lines, not the one that verified: the page's
    "as of the first N entries" says 17, and a write at seq 7 is answered from it instead of waiting."""
    root = tmp_path / "vault"
    shutil.copytree(EXAMPLE, root)
    path = root / "journal" / f"{S}.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b"dana@acme.example", b"eve@acme.example.", 1)
    path.write_bytes(b"".join(lines))
    fold = HeldFold(monkeypatch)
    fold.gate.set()
    c = TestClient(create_app(Vault.open_existing(root)), base_url="http://127.0.0.1")
    chain = _until_current(c, "/api/session/views", session=S).json()["chain"]
    assert chain["intact"] is False and chain["verified_entries"] == 1
    fold.gate.clear()  # the grown file's fold is held
    with open(path, "ab") as f:  # grows in place (a line that does not chain: it is untrusted anyway)
        f.write(lines[-1])
    try:
        views = c.get("/api/session/views", params={"session": S})
        assert views.status_code == 200 and views.json()["current"] is False
        assert views.json()["replay_of"]["entries"] == 17
        w = c.get("/api/session/writes", params={"session": S, "seq": 7})
        assert w.status_code == 200 and w.json()["current"] is False and w.json()["writes"]
        assert c.get("/api/session/writes", params={"session": S, "seq": 18}).status_code == 202
    finally:
        fold.gate.set()
    assert _until_current(c, "/api/session/views", session=S).json()["chain"]["intact"] is False


def test_an_edit_that_keeps_size_and_mtime_is_seen(tmp_path):
    """An adversary rewrites a line with one of the same length and puts the mtime back: the cached verdict
    and replay must not outlive it (the stamp has the inode and ctime too)."""
    root = tmp_path / "vault"
    shutil.copytree(EXAMPLE, root)
    path = root / "journal" / f"{S}.jsonl"
    c = TestClient(create_app(Vault.open_existing(root)), base_url="http://127.0.0.1")
    assert c.get("/api/session/verdict", params={"session": S}).json()["intact"] is True
    assert _until_ready(c, "/api/session/views", session=S).json()["chain"]["intact"] is True
    st = path.stat()
    data = path.read_bytes()
    edited = data.replace(b"dana@acme.example", b"eve@acme.example.", 1)
    assert edited != data and len(edited) == len(data)
    (tmp_path / "edited").write_bytes(edited)
    os.replace(tmp_path / "edited", path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    assert c.get("/api/session/verdict", params={"session": S}).json()["intact"] is False
    assert _until_ready(c, "/api/session/views", session=S).json()["chain"]["intact"] is False


def test_fixture_download_is_the_exporters_output(client):
    r = client.get("/api/session/fixture", params={"session": S})
    assert r.status_code == 200
    assert r.headers["content-disposition"].startswith("attachment")
    doc = r.json()
    assert doc["schema"] == "connector-broker/fixture/1"
    assert len(doc["entries"]) == 17 and doc["chain"]["verdict"] == "intact"


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_read_only(client, method):
    for path in ("/", "/api/sessions", "/nowhere"):
        r = client.request(method, path)
        assert r.status_code == 405
        assert r.headers["allow"] == "GET, HEAD"


def test_head_is_answered(client):
    assert client.head("/api/sessions").status_code == 200


def test_every_answer_has_a_strict_policy(client):
    for path in ("/", "/static/app.js", "/api/sessions", "/nowhere", "/api/session/entries?session=nope"):
        r = client.get(path)
        csp = r.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert r.headers["x-content-type-options"] == "nosniff"
    page = client.get("/").text
    assert "<script src=" in page and "<script>" not in page  # no inline script


@pytest.mark.parametrize("sid", ["nope", "../../etc/passwd", "..", "a/../../VAULT", "%2e%2e", "x\x00y", "\x01"])
def test_unknown_or_hostile_sessions_stay_inside_the_vault(client, sid):
    page = client.get("/", params={"session": sid})
    assert page.status_code == 404
    assert "Not found" in page.text and "<script" not in page.text
    for path in ("/api/session/entries", "/api/session/raw", "/api/session/entry", "/api/session/summary"):
        r = client.get(path, params={"session": sid, "seq": 1})
        assert r.status_code == 404, path
        assert "root:" not in r.text


def test_unknown_page_is_a_404_page(client):
    r = client.get("/etc/passwd")
    assert r.status_code == 404 and "Not found" in r.text
    assert client.get("/static/../pyproject.toml").status_code == 404


def test_dns_rebinding_is_refused_on_loopback():
    app = create_app(Vault.open_existing(EXAMPLE))
    evil = TestClient(app, base_url="http://attacker.example:8090")
    assert evil.get("/api/sessions").status_code == 421
    assert TestClient(app, base_url="http://localhost:8090").get("/api/sessions").status_code == 200


def test_token_required_on_every_request():
    app = create_app(Vault.open_existing(EXAMPLE), token="s3cret-token")
    c = TestClient(app, base_url="http://192.0.2.10:8090")
    assert c.get("/").status_code == 401
    assert c.get("/api/sessions").status_code == 401
    assert c.get("/api/sessions", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert c.get("/api/sessions", headers={"Authorization": "Bearer s3cret-token"}).status_code == 200
    first = c.get("/", params={"token": "s3cret-token"})
    assert first.status_code == 200
    cookie = first.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert c.get("/api/sessions").status_code == 200  # the cookie carries it now
    c.cookies.clear()
    assert c.get("/api/sessions").status_code == 401


def test_blobs_and_bodies_are_attachments(tmp_path):
    with SessionBuilder(tmp_path / "v", "blobby", spill_threshold=64) as s:
        s.get(f"{GMAIL}/messages/m1/attachments/a1", {"data": "Q" * 200, "size": 150})
        s.call("GET", "https://www.googleapis.com/drive/v3/files/f1?alt=media", resp_raw=b"\x89PNG\x00\x01binary",
               resp_type="image/png", connector="drive", effect="read")
    c = TestClient(create_app(Vault.open_existing(tmp_path / "v")), base_url="http://127.0.0.1")
    entry = c.get("/api/session/entry", params={"session": "blobby", "seq": 1}).json()["entry"]
    body = entry["response"]["body"]
    ref = body if "ref" in body else body["data"]
    assert set(ref) == {"sha256", "size", "ref"}
    r = c.get("/api/blob", params={"sha256": ref["sha256"]})
    assert r.status_code == 200 and hashlib.sha256(r.content).hexdigest() == ref["sha256"]
    assert r.headers["content-disposition"].startswith("attachment")
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert c.get("/api/blob", params={"sha256": "../../VAULT.json"}).status_code == 400
    assert c.get("/api/blob", params={"sha256": "0" * 64}).status_code == 404
    body = c.get("/api/session/body", params={"session": "blobby", "seq": 2, "part": "response"})
    assert body.content == b"\x89PNG\x00\x01binary"
    assert body.headers["content-disposition"] == 'attachment; filename="seq-2-response.bin"'
    assert body.headers["x-body-sha256"] == hashlib.sha256(b"\x89PNG\x00\x01binary").hexdigest()


def test_body_downloads_use_the_one_body_decoder(tmp_path):
    """The inspector decodes bodies as the exports do (journal/export/recorded_body.py): a JSON API's
    `{"base64": ...}` value is JSON, not bytes to decode; a whole-body blob comes back as its bytes; a
    base64 body that does not decode (an edited entry) is refused, not guessed at."""
    json_type = [["Content-Type", "application/json"]]
    w = JournalWriter(tmp_path / "v", durable=False)
    w.append(fields("b", 1, response={"status": 200, "headers": json_type, "body": {"base64": "aGk="}}))
    ref = w.blobs.put_bytes(b"\x00whole body\xff")
    w.append(fields("b", 2, response={"status": 200, "headers": [["Content-Type", "image/png"]], "body": ref}))
    w.append(fields("b", 3, response={"status": 200, "headers": [], "body": {"base64": "not base64!"}}))
    w.close()
    c = TestClient(create_app(Vault.open_existing(tmp_path / "v")), base_url="http://127.0.0.1")

    def get(seq: int) -> httpx.Response:
        return c.get("/api/session/body", params={"session": "b", "seq": seq, "part": "response"})

    assert orjson.loads(get(1).content) == {"base64": "aGk="}
    assert get(1).headers["content-disposition"].endswith('.json"')
    assert get(2).content == b"\x00whole body\xff" and get(2).headers["content-disposition"].endswith('.bin"')
    assert get(3).status_code == 422


def test_a_growing_file_is_indexed_incrementally(tmp_path):
    vault = Vault.create(tmp_path / "v")
    w = JournalWriter(vault, durable=False)
    for n in range(3):
        w.append(fields("live", n))
    c = TestClient(create_app(vault), base_url="http://127.0.0.1")
    assert c.get("/api/session/head", params={"session": "live"}).json()["lines"] == 3
    for n in range(3, 5):
        w.append(fields("live", n))
    w.close()
    page = c.get("/api/session/entries", params={"session": "live", "from": 1, "limit": 10}).json()
    assert page["total"] == 5 and [r["line"] for r in page["rows"]] == [1, 2, 3, 4, 5]
    assert c.get("/api/session/verdict", params={"session": "live"}).json()["entries"] == 5
    # rewritten before the indexed end: indexed again from the start
    path = vault.session_path("live")
    lines = path.read_bytes().split(b"\n")[:2]
    path.write_bytes(b"\n".join(lines) + b"\n")
    page = c.get("/api/session/entries", params={"session": "live", "from": 1, "limit": 10}).json()
    assert page["total"] == 2


def test_search_api_and_a_real_server(tmp_path):
    gmail_session(tmp_path / "v", "g1")
    with served(tmp_path / "v") as base:
        got = httpx.get(f"{base}/api/search", params={"status": "404"}).json()
        assert [(r["session"], r["line"]) for r in got["rows"]] == [("g1", 12)]
        assert httpx.get(f"{base}/api/search", params={"bogus": "1"}).status_code == 400
        assert httpx.post(f"{base}/api/search").status_code == 405
