"""VCR.py cassette export: vcrpy (and pytest-recording in `none` mode) play it back to requests and httpx."""

from __future__ import annotations

import json

import httpx
import pytest
import requests
import vcr
import yaml
from vcr.errors import CannotOverwriteExistingCassetteException

from journal.export.vcr import build_cassette, cassette_yaml
from tests.support.export_factories import BIG, GMAIL, PNG, SECRET, SESSION, record_export_session

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
