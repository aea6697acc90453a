"""VCR.py cassette export: vcrpy (and pytest-recording in `none` mode) play it back to requests and httpx."""

from __future__ import annotations

import hashlib
import json
import tracemalloc

import httpx
import pytest
import requests
import vcr
import yaml
from vcr.errors import CannotOverwriteExistingCassetteException

from journal.blobstore import BlobStore
from journal.export import vcr as cassette
from journal.export.recorded_body import BlobUnavailable
from journal.export.vcr import build_cassette, cassette_yaml
from journal.vault import Vault
from tests.support.export_factories import (
    BIG,
    GMAIL,
    PNG,
    SECRET,
    SESSION,
    chained_session,
    http_fields,
    record_export_session,
)

FIRST_URL = GMAIL + "/messages?q=is%3Aunread&access_token=[never%20captured]"


@pytest.fixture(scope="module")
def cassette_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("vault")
    record_export_session(root)
    out = tmp_path_factory.mktemp("cassettes")
    (out / "export.yaml").write_bytes(cassette_yaml(build_cassette(root, SESSION)))
    return out


def test_cassette_shape(cassette_dir):
    text = (cassette_dir / "export.yaml").read_text()
    assert SECRET not in text and "seq 7 (tools/call stdio:notes-server) is no HTTP exchange" in text
    data = yaml.safe_load(text)
    assert data["version"] == 1 and len(data["interactions"]) == 7
    first = data["interactions"][0]
    assert set(first["request"]) == {"method", "uri", "body", "headers"}
    assert first["request"]["headers"]["Authorization"] == ["[never captured]"]
    assert "Content-Encoding" not in first["response"]["headers"]  # the body is the decoded one
    assert data["interactions"][3]["response"]["body"]["string"] == PNG  # bytes as !!binary
    assert data["connector_broker"]["non_http_entries"] == [
        {"seq": 7, "method": "tools/call", "url": "stdio:notes-server"}]


def test_vcrpy_plays_it_back_to_requests_offline(cassette_dir):
    with vcr.VCR(record_mode="none").use_cassette(str(cassette_dir / "export.yaml")) as cass:
        r = requests.get(FIRST_URL, headers={"Authorization": "Bearer other"})
        assert r.status_code == 200 and r.json() == {"messages": [{"id": "m1"}]}
        r = requests.post(GMAIL + "/messages/m1/modify", json={"removeLabelIds": ["UNREAD"]})
        assert r.json() == {"id": "m1", "labelIds": ["INBOX"]}
        r = requests.get(GMAIL + "/messages/m1/attachments/a1")
        assert r.json() == {"size": 300, "data": BIG}  # the spilled string inlined
        assert requests.get("https://www.googleapis.com/drive/v3/files/f1?alt=media").content == PNG
        assert requests.get("https://www.googleapis.com/drive/v3/files/f2?alt=media").text == "x" * 500
        r = requests.post("https://slack.com/api/chat.postMessage", json={"channel": "C1", "text": "hi"})
        assert r.status_code == 502 and r.text == "upstream timed out\n"
        with pytest.raises(CannotOverwriteExistingCassetteException):
            requests.get("https://gmail.googleapis.com/gmail/v1/users/me/labels")
        assert cass.play_count == 6


def test_vcrpy_plays_it_back_to_httpx_offline(cassette_dir):
    with vcr.VCR(record_mode="none").use_cassette(str(cassette_dir / "export.yaml")) as cass:
        with httpx.Client() as client:
            r = client.get(FIRST_URL)
            assert r.status_code == 200 and r.json() == {"messages": [{"id": "m1"}]}
            r = client.post("http://127.0.0.1:9/mcp", json={"jsonrpc": "2.0", "id": 7, "method": "tools/call"})
            assert r.json()["result"]["content"][0]["text"] == "found"
            assert client.get("https://www.googleapis.com/drive/v3/files/f1?alt=media").content == PNG
        assert cass.play_count == 3


@pytest.fixture
def vcr_cassette_dir(cassette_dir):
    return str(cassette_dir)


@pytest.mark.vcr("export.yaml")
@pytest.mark.block_network
def test_pytest_recording_none_mode_plays_the_export(vcr, record_mode):
    assert record_mode == "none" and vcr.record_mode == "none"
    r = httpx.get(FIRST_URL)
    assert r.status_code == 200 and json.loads(r.content) == {"messages": [{"id": "m1"}]}
    r = requests.post(GMAIL + "/messages/m1/modify", json={"removeLabelIds": ["UNREAD"]})
    assert r.json() == {"id": "m1", "labelIds": ["INBOX"]}
    with pytest.raises(CannotOverwriteExistingCassetteException):
        requests.get("https://gmail.googleapis.com/gmail/v1/users/me/labels")


def _big_bodies_session(root) -> tuple[bytes, bytes]:
    """Bodies spilled whole over cassette.BIG_BODY: a UTF-8 text answer (twice: one blob, two bodies), a binary
    upload, each cut at no line of 57 bytes; and a small spilled body, which stays text."""
    Vault.create(root)
    blobs = BlobStore(root)
    text = ("línea de texto, ünïcödé, " * 200_000).encode()[: (3 << 20) + 5]
    binary = bytes(range(256)) * 10_000 + b"\xff\x00"
    ref_text, ref_bin = blobs.put_bytes(text), blobs.put_bytes(binary)
    ref_small = blobs.put_bytes(b"small text body\n")
    fields = []
    for n, (req, resp) in enumerate([(None, ref_text), (ref_bin, ref_text), (None, ref_small)], 1):
        f = http_fields(n, body=resp)
        f["response"]["headers"] = [["Content-Type", "text/plain"]]
        if req is not None:
            f["request"] |= {"method": "POST", "body": req, "headers": [["Content-Type", "application/octet-stream"]]}
        fields.append(f)
    chained_session(root, "bigbodies", fields)
    return text, binary


def test_big_bodies_are_written_a_chunk_at_a_time(tmp_path):
    """The streamed cassette is the whole one's bytes; the big bodies come back byte for byte (as `!!binary`);
    memory holds a piece, not the 7 MB of bodies."""
    text, binary = _big_bodies_session(tmp_path)
    whole = cassette.cassette_yaml(cassette.build_cassette(tmp_path, "bigbodies"))
    tracemalloc.start()
    try:
        size = 0
        streamed = hashlib.sha256()
        for chunk in cassette.cassette_chunks(tmp_path, "bigbodies"):
            streamed.update(chunk)
            size += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert streamed.hexdigest() == hashlib.sha256(whole).hexdigest() and size == len(whole)
    assert peak < 4 << 20, peak  # the bodies' base64 alone is 9.5 MB
    loaded = yaml.safe_load(whole)
    one, two, three = loaded["interactions"]
    assert one["response"]["body"]["string"] == text == two["response"]["body"]["string"]
    assert two["request"]["body"] == binary
    assert two["request"]["headers"]["Content-Length"] == [str(len(binary))]
    assert one["response"]["headers"]["Content-Length"] == [str(len(text))]
    assert three["response"]["body"]["string"] == "small text body\n"
    assert whole.count(b"!!binary") == 3


def test_a_big_blob_changed_after_it_was_checked_stops_the_cassette(tmp_path):
    """The blob is read through (hash checked) before anything is written and read again to be written: bytes
    swapped in between are not handed on as the recorded body."""
    text, _ = _big_bodies_session(tmp_path)
    digest = hashlib.sha256(text).hexdigest()
    path = tmp_path / "blobs" / "sha256" / digest[:2] / digest
    chunks = cassette.cassette_chunks(tmp_path, "bigbodies")
    first = next(chunks)  # the head comments: the interactions are made (and their blobs checked) after it
    assert first.startswith(b"# VCR.py cassette")
    path.chmod(0o644)
    path.write_bytes(text[:-1] + b"!")
    with pytest.raises(BlobUnavailable):
        b"".join(chunks)
