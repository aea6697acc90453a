"""Direct tests of the fake upstreams (no proxy): TLS names, API shapes, state, streaming, gzip, SSE.

Why: every end-to-end test of the broker trusts these fakes; if a fake drifts from the real API shape
or buffers a big body, the broker tests would prove nothing.
"""

from __future__ import annotations

import asyncio
import base64
import email
import email.policy
import gzip
import hashlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import tracemalloc
import types
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import requests

from tests.support.upstreams import Upstream, big_body_chunks, big_body_sha256
from tests.support.upstreams import drive as fdrive
from tests.support.upstreams import gcalendar as fcal
from tests.support.upstreams import gmail as fgmail
from tests.support.upstreams import graph as fgraph
from tests.support.upstreams import slack as fslack
from tests.support.upstreams.wire import MultipartParser

ROOT = Path(__file__).resolve().parents[2]
GMAIL = "https://gmail.googleapis.com/gmail/v1/users/me"
CAL = "https://www.googleapis.com/calendar/v3"
DRIVE = "https://www.googleapis.com/drive/v3"
UPLOAD = "https://www.googleapis.com/upload/drive/v3/files"
SLACK = "https://slack.com/api"
GH = "https://api.github.com"
GRAPH = "https://graph.microsoft.com/v1.0"
AUTH = {"Authorization": "Bearer ya29.test-token"}
SLACK_AUTH = {"Authorization": "Bearer xoxb-test-token"}
MiB = 1 << 20


@pytest.fixture
def up() -> Iterator[Upstream]:
    """A fresh fake (fresh state) per test; asserts no handler crashed."""
    with Upstream() as u:
        yield u
        assert u.errors == []


@pytest.fixture
def c(up: Upstream) -> Iterator[httpx.Client]:
    """httpx client whose TCP goes to the fake while SNI/Host stay the real API names."""
    with up.client() as client:
        yield client


def independent_big_sha256(size: int, seed: str = "big") -> str:
    """Re-implementation of the documented generator (not importing it), to pin the spec."""
    base = b"".join(
        hashlib.sha256(b"upstream-big:" + seed.encode() + j.to_bytes(4, "big")).digest() for j in range(32768)
    )
    h = hashlib.sha256()
    k = 0
    left = size
    while left > 0:
        block = (k.to_bytes(8, "big") + base[8:])[:left]
        h.update(block)
        left -= len(block)
        k += 1
    return h.hexdigest()


# -- TLS, routing, records -------------------------------------------------------------------------


def test_certificate_covers_every_host_and_resolve_args(up: Upstream) -> None:
    assert os.path.isfile(up.ca_pem)
    expected = {
        "gmail.googleapis.com",
        "www.googleapis.com",
        "oauth2.googleapis.com",
        "slack.com",
        "files.slack.com",
        "api.github.com",
        "github.com",
        "graph.microsoft.com",
        "login.microsoftonline.com",
        "api.anthropic.com",
        "api.openai.com",
        "generativelanguage.googleapis.com",
        "localhost",
        "127.0.0.1",
    }
    assert set(up.hosts) == expected
    args = up.resolve_args()
    assert args[0::2] == ["--resolve"] * len(up.hosts)
    assert f"gmail.googleapis.com=127.0.0.1:{up.port}" in args
    ctx = up.ssl_context()
    for host in up.hosts:
        with socket.create_connection(("127.0.0.1", up.port)) as raw:
            sni = None if host == "127.0.0.1" else host
            with ctx.wrap_socket(raw, server_hostname=sni or "127.0.0.1") as tls:
                assert tls.version() in ("TLSv1.2", "TLSv1.3")
    with socket.create_connection(("127.0.0.1", up.port)) as raw:
        with pytest.raises(ssl.SSLCertVerificationError):
            ctx.wrap_socket(raw, server_hostname="evil.example.com")


def test_host_and_sni_are_recorded_with_bounded_body(up: Upstream, c: httpx.Client) -> None:
    body = os.urandom(10_000)
    r = c.post("https://www.googleapis.com/echo?x=1", content=body, headers={"X-Test": "yes"})
    assert r.status_code == 200
    rec = up.wait_for(lambda r: r["path"].startswith("/echo"))
    assert rec["host"] == "www.googleapis.com" and rec["sni"] == "www.googleapis.com"
    assert rec["method"] == "POST" and rec["path"] == "/echo?x=1" and rec["status"] == 200
    assert ("X-Test", "yes") in rec["headers"]
    assert rec["body_size"] == len(body) and rec["body_sha256"] == hashlib.sha256(body).hexdigest()
    assert rec["body_head"] == body[:4096]
    assert up.find(method="POST", host="www.googleapis.com", path_prefix="/echo") == [rec]


def test_keep_alive_reuses_one_connection(up: Upstream, c: httpx.Client) -> None:
    for _ in range(5):
        assert c.get(f"{GMAIL}/labels").status_code == 200
    assert len({r["connection"] for r in up.requests}) == 1


def test_requests_library_with_host_header(up: Upstream) -> None:
    r = requests.get(
        up.url("slack.com", "/api/auth.test"),
        headers={"Host": "slack.com", **SLACK_AUTH},
        verify=up.ca_pem,
        timeout=10,
    )
    assert r.status_code == 200 and r.json()["ok"] is True and r.json()["bot_id"] == "B0BOT"
    assert r.headers["Content-Type"] == "application/json; charset=utf-8"
    assert up.requests[-1]["host"] == "slack.com" and up.requests[-1]["sni"] is None  # no SNI for an IP


def test_curl_connect_to_keeps_sni(up: Upstream) -> None:
    out = subprocess.run(
        ["/usr/bin/curl", "-sS", "--fail", *up.curl_args(), f"{GMAIL}/labels"],
        capture_output=True,
        timeout=20,
        check=True,
    )
    assert any(lb["id"] == "INBOX" for lb in json.loads(out.stdout)["labels"])
    assert up.requests[-1]["sni"] == "gmail.googleapis.com"


def test_unknown_path_and_wrong_method_answer_in_flavour(c: httpx.Client) -> None:
    r = c.get("https://gmail.googleapis.com/nope")
    assert r.status_code == 404 and r.json()["error"]["status"] == "NOT_FOUND"
    r = c.get(f"{GH}/nope")
    assert r.status_code == 404 and r.json()["message"] == "Not Found"
    r = c.put(f"{GMAIL}/messages/send", json={})
    assert r.status_code == 405


def test_common_headers(c: httpx.Client) -> None:
    for url, server in [
        (f"{GMAIL}/profile", "ESF"),
        (f"{GH}/user", "github.com"),
        (f"{GRAPH}/me/messages", "Microsoft-IIS/10.0"),
        (f"{SLACK}/api.test", "Apache"),
    ]:
        r = c.get(url, headers=AUTH)
        assert r.status_code == 200, url
        assert r.headers["server"] == server and r.headers["date"] and r.headers["x-request-id"]
        assert "charset" in r.headers["content-type"].lower()
    assert c.get(f"{GH}/user").headers["x-github-request-id"]
    assert (
        c.get(f"{GRAPH}/me/messages", headers={"client-request-id": "abc"}).headers["client-request-id"]
        == "abc"
    )


# -- Gmail -----------------------------------------------------------------------------------------


def test_gmail_list_and_get_formats(c: httpx.Client) -> None:
    listing = c.get(f"{GMAIL}/messages", params={"maxResults": 2}).json()
    assert len(listing["messages"]) == 2 and "nextPageToken" in listing and listing["resultSizeEstimate"] == 5
    nxt = c.get(f"{GMAIL}/messages", params={"maxResults": 2, "pageToken": listing["nextPageToken"]}).json()
    assert {m["id"] for m in nxt["messages"]}.isdisjoint({m["id"] for m in listing["messages"]})
    unread = c.get(f"{GMAIL}/messages", params={"q": "is:unread"}).json()["messages"]
    assert {m["id"] for m in unread} == {fgmail.MSG_INVOICE, fgmail.MSG_NEWSLETTER}
    mid = fgmail.MSG_QUARTERLY
    full = c.get(f"{GMAIL}/messages/{mid}").json()
    assert full["threadId"] == mid and "INBOX" in full["labelIds"]
    assert base64.urlsafe_b64decode(full["payload"]["body"]["data"]).startswith(b"Hi Alice")
    meta = c.get(
        f"{GMAIL}/messages/{mid}", params={"format": "metadata", "metadataHeaders": "Subject"}
    ).json()
    assert meta["payload"]["headers"] == [{"name": "Subject", "value": "Quarterly report"}]
    minimal = c.get(f"{GMAIL}/messages/{mid}", params={"format": "minimal"}).json()
    assert "payload" not in minimal and minimal["labelIds"] == full["labelIds"]
    raw = c.get(f"{GMAIL}/messages/{mid}", params={"format": "raw"}).json()
    parsed = email.message_from_bytes(base64.urlsafe_b64decode(raw["raw"]), policy=email.policy.default)
    assert parsed["Subject"] == "Quarterly report"
    assert c.get(f"{GMAIL}/messages/ffff").status_code == 404
    assert c.get("https://gmail.googleapis.com/gmail/v1/users/bob@example.com/messages").status_code == 403


def test_gmail_modify_returns_post_state(c: httpx.Client) -> None:
    mid = fgmail.MSG_INVOICE
    r = c.post(
        f"{GMAIL}/messages/{mid}/modify", json={"addLabelIds": ["STARRED"], "removeLabelIds": ["UNREAD"]}
    )
    assert r.status_code == 200
    assert r.json() == {
        "id": mid,
        "threadId": mid,
        "labelIds": ["CATEGORY_UPDATES", "INBOX", "Label_1", "STARRED"],
    }
    assert (
        c.get(f"{GMAIL}/messages/{mid}", params={"format": "minimal"}).json()["labelIds"]
        == r.json()["labelIds"]
    )
    bad = c.post(f"{GMAIL}/messages/{mid}/modify", json={"addLabelIds": ["NOPE"]})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == 400


def test_gmail_send_trash_untrash_delete(c: httpx.Client) -> None:
    raw = (
        b"From: alice@example.com\r\nTo: bob@example.com\r\nSubject: Re: Quarterly report\r\n"
        b"In-Reply-To: <18f1c0a0b0000001@mail.example.com>\r\n\r\nSounds good.\r\n"
    )
    sent = c.post(f"{GMAIL}/messages/send", json={"raw": base64.urlsafe_b64encode(raw).decode()}).json()
    assert sent["labelIds"] == ["SENT"] and sent["threadId"] == fgmail.MSG_QUARTERLY and sent["id"]
    thread = c.get(f"https://gmail.googleapis.com/gmail/v1/users/me/threads/{fgmail.MSG_QUARTERLY}").json()
    assert [m["id"] for m in thread["messages"]][-1] == sent["id"] and len(thread["messages"]) == 3
    upload = c.post(
        "https://gmail.googleapis.com/upload/gmail/v1/users/me/messages/send?uploadType=media",
        content=b"To: carol@example.com\r\nSubject: hi\r\n\r\nhello\r\n",
        headers={"Content-Type": "message/rfc822"},
    )
    assert upload.status_code == 200 and upload.json()["threadId"] == upload.json()["id"]
    assert c.post(f"{GMAIL}/messages/send", json={}).status_code == 400
    mid = sent["id"]
    trashed = c.post(f"{GMAIL}/messages/{mid}/trash").json()
    assert "TRASH" in trashed["labelIds"]
    assert mid not in {m["id"] for m in c.get(f"{GMAIL}/messages").json()["messages"]}
    assert "TRASH" not in c.post(f"{GMAIL}/messages/{mid}/untrash").json()["labelIds"]
    r = c.delete(f"{GMAIL}/messages/{mid}")
    assert r.status_code == 204 and r.content == b""
    assert c.get(f"{GMAIL}/messages/{mid}").status_code == 404


def test_gmail_labels(c: httpx.Client) -> None:
    labels = c.get(f"{GMAIL}/labels").json()["labels"]
    assert {"INBOX", "SENT", "TRASH", "Label_1"} <= {lb["id"] for lb in labels}
    created = c.post(f"{GMAIL}/labels", json={"name": "Travel"}).json()
    assert created["id"].startswith("Label_") and created["type"] == "user" and created["name"] == "Travel"
    assert c.post(f"{GMAIL}/labels", json={"name": "travel"}).status_code == 409
    got = c.get(f"{GMAIL}/labels/{created['id']}").json()
    assert got["messagesTotal"] == 0
    assert c.delete(f"{GMAIL}/labels/{created['id']}").status_code == 204


def test_gmail_big_attachment(c: httpx.Client) -> None:
    full = c.get(f"{GMAIL}/messages/{fgmail.MSG_INVOICE}").json()
    part = full["payload"]["parts"][1]
    assert part["filename"] == "invoice-4411.pdf" and part["body"]["size"] == fgmail.ATTACHMENT_SIZE
    r = c.get(f"{GMAIL}/messages/{fgmail.MSG_INVOICE}/attachments/{part['body']['attachmentId']}")
    assert r.status_code == 200 and len(r.content) > MiB
    att = r.json()
    data = base64.urlsafe_b64decode(att["data"])
    assert att["size"] == len(data) == fgmail.ATTACHMENT_SIZE
    assert hashlib.sha256(data).hexdigest() == big_body_sha256(fgmail.ATTACHMENT_SIZE, fgmail.ATTACHMENT_SEED)


# -- Calendar --------------------------------------------------------------------------------------


def test_calendar_crud_cancel_and_restore(c: httpx.Client) -> None:
    enc = urllib.parse.quote(fgmail.ME, safe="")
    events = c.get(f"{CAL}/calendars/{enc}/events").json()
    assert events["kind"] == "calendar#events" and {e["id"] for e in events["items"]} >= {fcal.EVENT_STANDUP}
    body = {
        "summary": "1:1",
        "start": {"dateTime": "2030-01-02T10:00:00Z"},
        "end": {"dateTime": "2030-01-02T10:30:00Z"},
    }
    ev = c.post(f"{CAL}/calendars/primary/events", json=body).json()
    assert ev["status"] == "confirmed" and ev["iCalUID"] == f"{ev['id']}@google.com" and ev["etag"]
    patched = c.patch(f"{CAL}/calendars/primary/events/{ev['id']}", json={"location": "Room 1"}).json()
    assert (
        patched["location"] == "Room 1" and patched["summary"] == "1:1" and patched["start"] == body["start"]
    )
    updated = c.put(f"{CAL}/calendars/{enc}/events/{ev['id']}", json=body | {"summary": "1:1 (moved)"}).json()
    assert updated["summary"] == "1:1 (moved)" and "location" not in updated
    r = c.delete(f"{CAL}/calendars/primary/events/{ev['id']}")
    assert r.status_code == 204 and r.content == b""
    assert c.get(f"{CAL}/calendars/primary/events/{ev['id']}").json()["status"] == "cancelled"
    assert ev["id"] not in {e["id"] for e in c.get(f"{CAL}/calendars/primary/events").json()["items"]}
    shown = c.get(f"{CAL}/calendars/primary/events", params={"showDeleted": "true"}).json()["items"]
    assert ev["id"] in {e["id"] for e in shown}
    assert c.delete(f"{CAL}/calendars/primary/events/{ev['id']}").status_code == 410
    dup = c.post(f"{CAL}/calendars/primary/events", json=body | {"id": ev["id"]})
    assert dup.status_code == 409 and dup.json()["error"]["errors"][0]["reason"] == "duplicate"
    restored = c.patch(f"{CAL}/calendars/primary/events/{ev['id']}", json={"status": "confirmed"}).json()
    assert restored["status"] == "confirmed" and restored["id"] == ev["id"]
    assert c.get(f"{CAL}/calendars/nobody%40example.com/events").status_code == 404


def test_calendar_freebusy(c: httpx.Client) -> None:
    c.post(
        f"{CAL}/calendars/primary/events",
        json={
            "start": {"dateTime": "2031-05-01T09:00:00Z"},
            "end": {"dateTime": "2031-05-01T10:00:00+00:00"},
        },
    )
    r = c.post(
        f"{CAL}/freeBusy",
        json={
            "timeMin": "2031-05-01T00:00:00Z",
            "timeMax": "2031-05-02T00:00:00Z",
            "items": [{"id": "primary"}, {"id": "ghost@example.com"}],
        },
    )
    out = r.json()
    assert out["kind"] == "calendar#freeBusy"
    assert out["calendars"]["primary"]["busy"] == [
        {"start": "2031-05-01T09:00:00Z", "end": "2031-05-01T10:00:00Z"}
    ]
    assert out["calendars"]["ghost@example.com"]["errors"][0]["reason"] == "notFound"


# -- Drive -----------------------------------------------------------------------------------------


def test_drive_list_get_fields_and_media(c: httpx.Client) -> None:
    files = c.get(f"{DRIVE}/files").json()
    assert files["kind"] == "drive#fileList"
    assert all(set(f) == {"kind", "id", "name", "mimeType"} for f in files["files"])
    sel = c.get(f"{DRIVE}/files", params={"fields": "files(id,size)", "q": "name contains 'plan'"}).json()
    assert sel == {"files": [{"id": fdrive.FILE_PLAN, "size": str(len(fdrive.PLAN_TEXT))}]}
    default = c.get(f"{DRIVE}/files/{fdrive.FILE_PLAN}").json()
    assert set(default) == {"kind", "id", "name", "mimeType"}
    full = c.get(f"{DRIVE}/files/{fdrive.FILE_PLAN}", params={"fields": "*"}).json()
    assert full["md5Checksum"] == hashlib.md5(fdrive.PLAN_TEXT).hexdigest() and full["trashed"] is False
    media = c.get(f"{DRIVE}/files/{fdrive.FILE_PLAN}", params={"alt": "media"})
    assert media.content == fdrive.PLAN_TEXT and media.headers["content-type"] == "text/plain"
    photo = c.get(f"{DRIVE}/files/{fdrive.FILE_PHOTO}", params={"alt": "media"})
    assert hashlib.sha256(photo.content).hexdigest() == big_body_sha256(fdrive.PHOTO_SIZE, fdrive.PHOTO_SEED)
    doc = c.get(f"{DRIVE}/files/{fdrive.FILE_BUDGET}", params={"alt": "media"})
    assert doc.status_code == 403 and doc.json()["error"]["errors"][0]["reason"] == "fileNotDownloadable"


def test_drive_patch_trash_delete_and_permissions(c: httpx.Client) -> None:
    fid = fdrive.FILE_NOTES
    r = c.patch(f"{DRIVE}/files/{fid}", params={"fields": "id,trashed,name"}, json={"trashed": True})
    assert r.json() == {"id": fid, "trashed": True, "name": "notes.md"}
    assert c.patch(f"{DRIVE}/files/{fid}", json={"parents": ["x"]}).status_code == 403
    perm = c.post(
        f"{DRIVE}/files/{fid}/permissions",
        json={"type": "user", "role": "reader", "emailAddress": "bob@example.com"},
    ).json()
    assert perm["kind"] == "drive#permission" and perm["role"] == "reader" and perm["id"]
    again = c.post(
        f"{DRIVE}/files/{fid}/permissions",
        json={"type": "user", "role": "writer", "emailAddress": "bob@example.com"},
    ).json()
    assert again["id"] == perm["id"]  # a permission id names the grantee
    listed = c.get(f"{DRIVE}/files/{fid}/permissions").json()["permissions"]
    assert {p["role"] for p in listed} == {"owner", "writer"}
    assert c.delete(f"{DRIVE}/files/{fid}/permissions/{perm['id']}").status_code == 204
    assert c.delete(f"{DRIVE}/files/{fid}").status_code == 204
    assert c.get(f"{DRIVE}/files/{fid}").status_code == 404


def test_drive_uploads_media_multipart_resumable(c: httpx.Client) -> None:
    data = os.urandom(3 * MiB + 7)
    r = c.post(UPLOAD, params={"uploadType": "media"}, content=data, headers={"Content-Type": "image/png"})
    f = r.json()
    assert r.status_code == 200 and f["mimeType"] == "image/png" and f["size"] == str(len(data))
    assert (
        f["sha256Checksum"] == hashlib.sha256(data).hexdigest()
        and f["md5Checksum"] == hashlib.md5(data).hexdigest()
    )
    assert c.get(f"{DRIVE}/files/{f['id']}", params={"alt": "media"}).content == data

    boundary = "foo_bar_baz"
    meta = json.dumps({"name": "report.csv", "mimeType": "text/csv"}).encode()
    payload = os.urandom(MiB) + b"\r\n--foo_bar_ba"  # a near-boundary inside the media must not split it
    body = (
        f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode()
        + meta
        + f"\r\n--{boundary}\r\nContent-Type: text/csv\r\n\r\n".encode()
        + payload
        + f"\r\n--{boundary}--\r\n".encode()
    )
    r = c.post(
        UPLOAD,
        params={"uploadType": "multipart"},
        content=body,
        headers={"Content-Type": f"multipart/related; boundary={boundary}"},
    )
    f = r.json()
    assert f["name"] == "report.csv" and f["size"] == str(len(payload))
    assert f["sha256Checksum"] == hashlib.sha256(payload).hexdigest()

    start = c.post(
        UPLOAD,
        params={"uploadType": "resumable"},
        json={"name": "big.bin"},
        headers={"X-Upload-Content-Length": str(len(data))},
    )
    assert start.status_code == 200
    session = start.headers["location"]
    assert "upload_id=" in session and session.startswith("https://www.googleapis.com/upload/drive/v3/files?")
    half = 2 * MiB
    r1 = c.put(session, content=data[:half], headers={"Content-Range": f"bytes 0-{half - 1}/{len(data)}"})
    assert r1.status_code == 308 and r1.headers["range"] == f"bytes=0-{half - 1}"
    r2 = c.put(
        session, content=data[half:], headers={"Content-Range": f"bytes {half}-{len(data) - 1}/{len(data)}"}
    )
    assert r2.status_code == 200 and r2.json()["sha256Checksum"] == hashlib.sha256(data).hexdigest()
    assert r2.json()["name"] == "big.bin"


def test_multipart_parser_byte_by_byte() -> None:
    body = b"pre\r\n--b\r\nA: 1\r\n\r\nhello\r\n--b\r\n\r\nwor\r\nld\r\n--b--\r\n"
    p = MultipartParser("b")
    events = []
    for i in range(len(body)):
        events += p.feed(body[i : i + 1])
    parts: list[bytes] = []
    for kind, value in events:
        if kind == "part":
            parts.append(b"")
        elif kind == "data":
            assert isinstance(value, bytes)
            parts[-1] += value
    assert parts == [b"hello", b"wor\r\nld"] and p.done


# -- big bodies ------------------------------------------------------------------------------------


def test_big_generator_is_lazy_and_matches_spec() -> None:
    gen = big_body_chunks(1 << 40)  # a terabyte: only lazy generation can return at once
    assert isinstance(gen, types.GeneratorType)
    first = next(gen)
    assert len(first) == 64 * 1024 and first[:8] == bytes(8)
    assert big_body_sha256(3 * MiB + 5, "s") == independent_big_sha256(3 * MiB + 5, "s")
    tracemalloc.start()
    try:
        n = sum(len(x) for x in big_body_chunks(20 * MiB))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n == 20 * MiB and peak < 4 * MiB


@pytest.mark.parametrize("chunked", [False, True])
def test_big_download_streams_50mib(c: httpx.Client, chunked: bool) -> None:
    size = 50 * MiB + 3
    params = {"alt": "media", "size": str(size)} | ({"chunked": "1"} if chunked else {})
    h = hashlib.sha256()
    n = 0
    tracemalloc.start()
    try:
        with c.stream("GET", f"{DRIVE}/files/big", params=params) as r:
            assert r.status_code == 200
            assert ("content-length" in r.headers) is not chunked
            assert (r.headers.get("transfer-encoding") == "chunked") is chunked
            for piece in r.iter_raw():
                h.update(piece)
                n += len(piece)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n == size
    assert h.hexdigest() == independent_big_sha256(size)
    assert peak < 8 * MiB, f"server or client buffered the body: peak {peak}"


def test_generic_big_endpoint_any_host(c: httpx.Client) -> None:
    r = c.get("https://files.slack.com/big", params={"size": "1000", "seed": "x"})
    assert r.content == b"".join(big_body_chunks(1000, "x"))


# -- echo uploads ----------------------------------------------------------------------------------


def test_echo_content_length_and_chunked(up: Upstream, c: httpx.Client) -> None:
    data = os.urandom(5 * MiB)
    r = c.put("https://api.github.com/echo", params={"a": "b"}, content=data)
    out = r.json()
    assert out["sha256"] == hashlib.sha256(data).hexdigest() and out["size"] == len(data)
    assert out["chunked"] is False and out["query"] == {"a": "b"} and out["host"] == "api.github.com"
    assert ["content-length", str(len(data))] in [[k.lower(), v] for k, v in out["headers"]]

    def gen() -> Iterator[bytes]:
        for i in range(40):
            yield bytes([i]) * 100_000

    expected = hashlib.sha256(b"".join(gen())).hexdigest()
    out = c.post("https://www.googleapis.com/echo", content=gen()).json()
    assert out["chunked"] is True and out["sha256"] == expected and out["size"] == 4_000_000
    rec = up.requests[-1]
    assert rec["body_size"] == 4_000_000 and len(rec["body_head"]) == 4096


def test_echo_chunked_with_curl(up: Upstream, tmp_path: Path) -> None:
    data = os.urandom(2 * MiB + 1)
    out = subprocess.run(
        [
            "/usr/bin/curl",
            "-sS",
            "--fail",
            *up.curl_args(),
            "-H",
            "Transfer-Encoding: chunked",
            "--data-binary",
            "@-",
            "https://www.googleapis.com/echo",
        ],
        input=data,
        capture_output=True,
        timeout=20,
        check=True,
    )
    got = json.loads(out.stdout)
    assert got["chunked"] is True and got["sha256"] == hashlib.sha256(data).hexdigest()


# -- SSE, slow, status, gzip -----------------------------------------------------------------------


def test_sse_events_arrive_as_sent(c: httpx.Client) -> None:
    t0 = time.monotonic()
    arrivals: list[tuple[float, str]] = []
    with c.stream("GET", "https://api.github.com/sse", params={"events": "3", "interval": "0.3"}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["transfer-encoding"] == "chunked"
        for line in r.iter_lines():
            if line.startswith("data: "):
                arrivals.append((time.monotonic() - t0, line))
    assert [json.loads(x[6:])["n"] for _, x in arrivals] == [1, 2, 3]
    total = time.monotonic() - t0
    assert total >= 0.55
    # the first event is delivered when sent, not when the stream closes 0.6 s later
    assert arrivals[0][0] < 0.5 and total - arrivals[0][0] >= 0.45
    assert arrivals[1][0] - arrivals[0][0] > 0.15 and arrivals[2][0] - arrivals[1][0] > 0.15


def test_slow_and_status(c: httpx.Client) -> None:
    with pytest.raises(httpx.ReadTimeout):
        c.get("https://www.googleapis.com/slow", params={"seconds": "1"}, timeout=0.2)
    assert c.get("https://slack.com/slow", params={"seconds": "0.05"}).json() == {"slept": 0.05}
    r = c.get("https://www.googleapis.com/status/503")
    assert r.status_code == 503 and r.headers["retry-after"] == "1" and r.json()["error"]["code"] == 503
    r = c.get("https://api.github.com/status/404")
    assert r.status_code == 404 and r.json()["status"] == "404"
    assert c.post("https://graph.microsoft.com/status/204").status_code == 204
    r = c.get("https://slack.com/status/302", follow_redirects=False)
    assert r.status_code == 302 and r.headers["location"] == "/echo"


def test_gzip_negotiation(c: httpx.Client) -> None:
    url = f"{GMAIL}/labels"
    r = c.get(url, headers={"Accept-Encoding": "gzip"})
    assert r.headers["content-encoding"] == "gzip" and r.json()["labels"]
    raw = c.get(url, headers={"Accept-Encoding": "gzip"}).read()  # httpx decodes; check wire bytes below
    assert raw
    with c.stream("GET", url, headers={"Accept-Encoding": "gzip"}) as s:
        wire = b"".join(s.iter_raw())
    assert json.loads(gzip.decompress(wire))["labels"]
    assert "content-encoding" not in c.get(url, headers={"Accept-Encoding": "identity"}).headers
    forced = c.get(url, params={"gzip": "1"}, headers={"Accept-Encoding": "identity"})
    assert forced.headers["content-encoding"] == "gzip"
    small = c.get(f"{SLACK}/auth.test", headers={"Accept-Encoding": "gzip"})
    assert "content-encoding" not in small.headers  # under ~1 KB stays plain


# -- Slack -----------------------------------------------------------------------------------------


def test_slack_tokens_everywhere(c: httpx.Client) -> None:
    assert c.post(f"{SLACK}/auth.test").json() == {"ok": False, "error": "not_authed"}
    assert c.post(f"{SLACK}/auth.test").status_code == 200
    assert c.get(f"{SLACK}/auth.test", headers=SLACK_AUTH).json()["ok"] is True
    assert c.post(f"{SLACK}/auth.test", data={"token": "xoxb-1"}).json()["ok"] is True
    assert c.get(f"{SLACK}/auth.test", params={"token": "xoxp-1"}).json()["user_id"] == "U0ALICE"
    bad = c.post(f"{SLACK}/auth.test", json={}, headers={"Authorization": "Bearer nope"}).json()
    assert bad["error"] == "invalid_auth"
    assert c.get(f"{SLACK}/no.such", headers=SLACK_AUTH).json()["error"] == "unknown_method"


def test_slack_messages_reactions_and_reads(c: httpx.Client) -> None:
    hist = c.get(
        f"{SLACK}/conversations.history", params={"channel": fslack.CHANNEL_GENERAL}, headers=SLACK_AUTH
    ).json()
    assert [m["ts"] for m in hist["messages"]] == [fslack.TS_LUNCH, fslack.TS_RELEASE, fslack.TS_MORNING]
    replies = c.get(
        f"{SLACK}/conversations.replies",
        params={"channel": "C0GENERAL", "ts": fslack.TS_RELEASE},
        headers=SLACK_AUTH,
    ).json()
    assert [m["ts"] for m in replies["messages"]] == [fslack.TS_RELEASE, fslack.TS_RELEASE_REPLY]
    chans = c.post(f"{SLACK}/conversations.list", headers=SLACK_AUTH).json()["channels"]
    assert {ch["id"] for ch in chans} == {"C0GENERAL", "C0RANDOM"}

    posted = c.post(
        f"{SLACK}/chat.postMessage", json={"channel": "#general", "text": "deploy done"}, headers=SLACK_AUTH
    ).json()
    assert posted["ok"] and posted["channel"] == "C0GENERAL" and isinstance(posted["ts"], str)
    assert len(posted["ts"].split(".")[1]) == 6 and posted["message"]["text"] == "deploy done"
    ts = posted["ts"]
    upd = c.post(
        f"{SLACK}/chat.update", data={"token": "xoxb-1", "channel": "C0GENERAL", "ts": ts, "text": "v2"}
    )
    assert upd.json()["message"]["text"] == "v2"
    react = {"channel": "C0GENERAL", "timestamp": ts, "name": "eyes"}
    assert c.post(f"{SLACK}/reactions.add", data=react, headers=SLACK_AUTH).json() == {"ok": True}
    assert (
        c.post(f"{SLACK}/reactions.add", data=react, headers=SLACK_AUTH).json()["error"] == "already_reacted"
    )
    got = c.get(
        f"{SLACK}/conversations.history", params={"channel": "C0GENERAL", "limit": 1}, headers=SLACK_AUTH
    ).json()
    assert got["messages"][0]["reactions"] == [{"name": "eyes", "users": ["U0BOT"], "count": 1}]
    assert got["has_more"] is True and got["response_metadata"]["next_cursor"]
    assert c.post(f"{SLACK}/reactions.remove", data=react, headers=SLACK_AUTH).json() == {"ok": True}
    deleted = c.post(
        f"{SLACK}/chat.delete", json={"channel": "C0GENERAL", "ts": ts}, headers=SLACK_AUTH
    ).json()
    assert deleted == {"ok": True, "channel": "C0GENERAL", "ts": ts}
    again = c.post(f"{SLACK}/chat.delete", json={"channel": "C0GENERAL", "ts": ts}, headers=SLACK_AUTH).json()
    assert again["error"] == "message_not_found"
    thread = c.post(
        f"{SLACK}/chat.postMessage",
        headers=SLACK_AUTH,
        data={"channel": "C0GENERAL", "text": "+1", "thread_ts": fslack.TS_RELEASE},
    ).json()
    assert thread["message"]["thread_ts"] == fslack.TS_RELEASE
    assert (
        c.post(
            f"{SLACK}/chat.postMessage", data={"channel": "#nope", "text": "x"}, headers=SLACK_AUTH
        ).json()["error"]
        == "channel_not_found"
    )


def test_slack_users_dnd_oauth(c: httpx.Client) -> None:
    u = c.get(f"{SLACK}/users.info", params={"user": "U0BOB"}, headers=SLACK_AUTH).json()
    assert u["user"]["name"] == "bob"
    snooze = c.get(f"{SLACK}/dnd.setSnooze", params={"num_minutes": "30", "token": "xoxp-1"}).json()
    assert snooze["ok"] and snooze["snooze_enabled"] and snooze["snooze_remaining"] == 1800
    grant = c.post(
        f"{SLACK}/oauth.v2.access", data={"code": "c1", "client_id": "1", "client_secret": "s"}
    ).json()
    assert grant["ok"] and grant["access_token"].startswith("xoxb-") and grant["token_type"] == "bot"
    assert grant["incoming_webhook"]["url"].startswith("https://hooks.slack.com/services/")


def test_slack_file_upload_and_download(c: httpx.Client) -> None:
    data = os.urandom(300_000)
    step1 = c.post(
        f"{SLACK}/files.getUploadURLExternal",
        data={"filename": "a.bin", "length": str(len(data))},
        headers=SLACK_AUTH,
    ).json()
    assert step1["upload_url"].startswith("https://files.slack.com/upload/v1/")
    assert c.post(step1["upload_url"], content=data).text == f"OK - {len(data)}"
    done = c.post(
        f"{SLACK}/files.completeUploadExternal",
        headers=SLACK_AUTH,
        json={"files": [{"id": step1["file_id"], "title": "A"}], "channel_id": "C0GENERAL"},
    ).json()
    url = done["files"][0]["url_private"]
    assert c.get(url, headers=SLACK_AUTH).content == data
    seeded = c.get(
        f"https://files.slack.com/files-pri/T0FAKE-{fslack.FILE_SEEDED}/report.bin", headers=SLACK_AUTH
    )
    assert hashlib.sha256(seeded.content).hexdigest() == big_body_sha256(
        fslack.FILE_SEEDED_SIZE, fslack.FILE_SEEDED
    )


# -- GitHub ----------------------------------------------------------------------------------------


def test_github_rest_issues_and_comments(c: httpx.Client) -> None:
    issues = c.get(f"{GH}/repos/acme/widgets/issues").json()
    assert [i["number"] for i in issues] == [2, 1]
    created = c.post(f"{GH}/repos/acme/widgets/issues", json={"title": "New bug", "labels": ["bug"]})
    assert created.status_code == 201 and created.headers["location"].endswith("/issues/3")
    issue = created.json()
    assert issue["number"] == 3 and issue["node_id"] and issue["labels"][0]["name"] == "bug"
    closed = c.patch(
        f"{GH}/repos/acme/widgets/issues/3", json={"state": "closed", "state_reason": "not_planned"}
    )
    assert closed.json()["state"] == "closed" and closed.json()["state_reason"] == "not_planned"
    assert 3 not in [i["number"] for i in c.get(f"{GH}/repos/acme/widgets/issues").json()]
    com = c.post(f"{GH}/repos/acme/widgets/issues/3/comments", json={"body": "closing"})
    assert com.status_code == 201 and com.json()["body"] == "closing" and "_repo" not in com.json()
    assert c.get(f"{GH}/repos/acme/widgets/issues/3").json()["comments"] == 1
    assert c.delete(f"{GH}/repos/acme/widgets/issues/comments/{com.json()['id']}").status_code == 204
    bad = c.post(f"{GH}/repos/acme/widgets/issues", json={})
    assert bad.status_code == 422 and bad.json()["message"] == "Validation Failed"
    assert c.get(f"{GH}/repos/acme/nope/issues").status_code == 404


def test_github_graphql_query_and_mutation(c: httpx.Client) -> None:
    q = """
    # a comment mentioning mutation
    query Issues($owner: String!) {
      repository(owner: $owner, name: "widgets") { id issue(number: 1) { id title ...F } }
    }
    fragment F on Issue { state comments(first: 5) { totalCount nodes { body } } }
    """
    data = c.post(f"{GH}/graphql", json={"query": q, "variables": {"owner": "acme"}}).json()["data"]
    issue = data["repository"]["issue"]
    assert issue["state"] == "OPEN" and issue["comments"]["totalCount"] == 1
    m = (
        'mutation($id: ID!) { addComment(input: {subjectId: $id, body: "via gql"}) '
        "{ commentEdge { node { id } } } }"
    )
    out = c.post(f"{GH}/graphql", json={"query": m, "variables": {"id": issue["id"]}}).json()
    assert out["data"]["addComment"]["commentEdge"]["node"]["id"].startswith("IC_")
    assert [x["body"] for x in c.get(f"{GH}/repos/acme/widgets/issues/1/comments").json()][-1] == "via gql"
    close_q = f'mutation {{ closeIssue(input: {{issueId: "{issue["id"]}"}}) {{ issue {{ state }} }} }}'
    closed = c.post(f"{GH}/graphql", json={"query": close_q}).json()
    assert closed["data"]["closeIssue"]["issue"]["state"] == "CLOSED"
    bad = c.post(f"{GH}/graphql", json={"query": "query {"}).json()
    assert "data" not in bad and bad["errors"][0]["message"]
    missing = c.post(f"{GH}/graphql", json={"query": '{ repository(owner: "x", name: "y") { id } }'}).json()
    assert missing["data"]["repository"] is None and missing["errors"][0]["type"] == "NOT_FOUND"


def test_github_oauth_access_token(c: httpx.Client) -> None:
    r = c.post(
        "https://github.com/login/oauth/access_token",
        data={"client_id": "i", "client_secret": "s", "code": "c"},
        headers={"Accept": "application/json"},
    )
    assert r.json()["access_token"].startswith("gho_") and r.json()["token_type"] == "bearer"
    form = c.post("https://github.com/login/oauth/access_token", params={"client_id": "i", "code": "c"})
    assert form.headers["content-type"].startswith("application/x-www-form-urlencoded")
    assert urllib.parse.parse_qs(form.text)["token_type"] == ["bearer"]


# -- Graph and OAuth -------------------------------------------------------------------------------


def test_graph_messages_and_send_mail(c: httpx.Client) -> None:
    msgs = c.get(f"{GRAPH}/me/messages", params={"$select": "subject,isRead"}).json()
    assert msgs["@odata.context"].startswith("https://graph.microsoft.com/v1.0/$metadata")
    assert {m["subject"] for m in msgs["value"]} == {"Welcome to Contoso", "Budget review"}
    assert c.get(f"{GRAPH}/me/messages/{fgraph.MSG_WELCOME}").json()["isRead"] is False
    mail = {
        "message": {
            "subject": "Hello",
            "body": {"contentType": "Text", "content": "Hi Megan"},
            "toRecipients": [{"emailAddress": {"address": "meganb@contoso.example"}}],
        }
    }
    r = c.post(f"{GRAPH}/me/sendMail", json=mail)
    assert r.status_code == 202 and r.content == b""
    sent = c.get(f"{GRAPH}/me/mailFolders/sentitems/messages").json()["value"]
    assert [m["subject"] for m in sent] == ["Hello"]
    assert c.post(f"{GRAPH}/me/sendMail", json={"message": {}}).status_code == 400


def test_oauth_token_endpoints(c: httpx.Client) -> None:
    r = c.post(
        "https://oauth2.googleapis.com/token",
        data={"grant_type": "refresh_token", "refresh_token": "1//x", "client_id": "c", "client_secret": "s"},
    )
    tok = r.json()
    assert r.status_code == 200 and tok["access_token"].startswith("ya29.") and tok["expires_in"] == 3599
    assert tok["token_type"] == "Bearer"
    bad = c.post(
        "https://oauth2.googleapis.com/token",
        data={"grant_type": "refresh_token", "refresh_token": "invalid"},
    )
    assert bad.status_code == 400 and bad.json()["error"] == "invalid_grant"
    ms = c.post(
        "https://login.microsoftonline.com/common/oauth2/v2.0/token",
        data={"grant_type": "refresh_token", "refresh_token": "r", "client_id": "c"},
    ).json()
    assert ms["token_type"] == "Bearer" and ms["expires_in"] == 3599 and ms["access_token"].startswith("eyJ")


def test_require_auth_and_method_override() -> None:
    with Upstream(require_auth=True) as up, up.client() as c:
        assert c.get(f"{GMAIL}/labels").status_code == 401
        assert c.get(f"{GMAIL}/labels", headers=AUTH).status_code == 200
        assert c.get(f"{GMAIL}/labels", params={"access_token": "ya29.x"}).status_code == 200
        assert c.get(f"{GH}/user").json()["message"] == "Requires authentication"
        assert c.get(f"{GRAPH}/me/messages").json()["error"]["code"] == "InvalidAuthenticationToken"
        assert (
            c.post(
                "https://oauth2.googleapis.com/token",
                data={"grant_type": "refresh_token", "refresh_token": "x"},
            ).status_code
            == 200
        )
        mid = fgmail.MSG_STARRED
        r = c.post(f"{GMAIL}/messages/{mid}", headers=AUTH | {"X-HTTP-Method-Override": "DELETE"})
        assert r.status_code == 204
        assert up.requests[-1]["method"] == "POST" and up.requests[-1]["effective_method"] == "DELETE"
        assert up.errors == []
    with Upstream() as up2, up2.client() as c2:
        assert c2.get(f"{GMAIL}/labels", headers={"Authorization": "Bearer ya29.expired"}).status_code == 401


# -- concurrency and the CLI -----------------------------------------------------------------------


def test_200_concurrent_requests(up: Upstream) -> None:
    async def run() -> list[int]:
        async with up.async_client() as ac:
            coros = [
                ac.get("https://www.googleapis.com/slow", params={"seconds": "0.5", "i": str(i)})
                for i in range(200)
            ]
            return [r.status_code for r in await asyncio.gather(*coros)]

    t0 = time.monotonic()
    codes = asyncio.run(run())
    elapsed = time.monotonic() - t0
    assert codes == [200] * 200
    assert elapsed < 8, f"requests were not served concurrently ({elapsed:.1f}s)"
    assert len({r["connection"] for r in up.requests}) >= 100


def test_threads_hammer_state(up: Upstream) -> None:
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            with up.client() as cl:
                for i in range(10):
                    r = cl.post(
                        f"{SLACK}/chat.postMessage",
                        headers=SLACK_AUTH,
                        json={"channel": "C0RANDOM", "text": f"{n}-{i}"},
                    )
                    assert r.json()["ok"]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert up.state is not None and len(up.state.slack.messages["C0RANDOM"]) == 101


def test_main_module_serves_until_sigterm() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.upstreams", "--json"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        assert info["resolve_args"][1] == f"{info['hosts'][0]}=127.0.0.1:{info['port']}"
        ctx = ssl.create_default_context(cafile=info["ca_pem"])
        with httpx.Client(verify=ctx, trust_env=False) as cl:
            r = cl.get(f"https://127.0.0.1:{info['port']}/status/200", headers={"Host": "api.github.com"})
        assert r.status_code == 200 and r.headers["server"] == "github.com"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert not os.path.exists(info["ca_pem"])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
