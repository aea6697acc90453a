"""The test-fixture export: entries exactly as recorded, the chain's verdict, the expected calls."""

from __future__ import annotations

import hashlib

import orjson
import pytest

from journal.call import Call
from journal.canonical import canonical_bytes
from journal.chain import GENESIS
from journal.export.fixture import SCHEMA, build_fixture, expected_call, fixture_bytes
from journal.record import Recorder
from journal.vault import VaultError

GMAIL = "https://gmail.googleapis.com/gmail/v1/users/me"
SECRET = "ya29.secret-token-never-on-disk"


def record_session(root, session: str = "incident-7") -> list[dict]:
    rec = Recorder(root, spill_threshold=64)
    out = []
    try:
        out.append(rec.record(Call.make(
            session=session, agent="bot", principal="alice@example.com", connector="gmail", capture="broker",
            effect="read", method="GET", url=GMAIL + "/messages?access_token=" + SECRET,
            request_headers=[("Authorization", "Bearer " + SECRET)], request_body=None,
            status=200, response_headers=[("Content-Type", "application/json")],
            response_body=orjson.dumps({"messages": [{"id": "m1"}], "note": "x" * 100}),
        )))
        out.append(rec.record(Call.make(
            session=session, agent="bot", principal="alice@example.com", connector="gmail", capture="broker",
            effect="write", method="POST", url="https://gmail.googleapis.com/gmail/v1/users/me/messages/m1/modify",
            request_headers=[("Content-Type", "application/json")], request_body=b'{"removeLabelIds": ["UNREAD"]}',
            status=None, response_headers=[], response_body=None, error="upstream timed out",
        )))
    finally:
        rec.close()
    return out


def test_fixture_holds_entries_as_recorded_and_the_expected_calls(tmp_path):
    recorded = record_session(tmp_path)
    fx = build_fixture(tmp_path, "incident-7")
    assert fx["schema"] == SCHEMA and SCHEMA.endswith("/1")
    lines = (tmp_path / "journal" / "incident-7.jsonl").read_bytes().splitlines()
    assert fx["entries"] == [orjson.loads(line) for line in lines] == recorded
    assert fx["source"] == {
        "session": "incident-7", "file": "journal/incident-7.jsonl", "vault_format": "connector-journal/1",
        "entries": 2, "head": recorded[-1]["hash"], "unparsed_lines": [],
    }
    assert fx["chain"]["verdict"] == "intact" and fx["chain"]["intact"] is True and fx["chain"]["entries"] == 2
    assert fx["expected"] == [
        {"seq": 1, "connector": "gmail", "effect": "read", "method": "GET",
         "url": "https://gmail.googleapis.com/gmail/v1/users/me/messages?access_token=[never%20captured]",
         "request_body_sha256": hashlib.sha256(b"null").hexdigest(), "status": 200},
        {"seq": 2, "connector": "gmail", "effect": "write", "method": "POST",
         "url": "https://gmail.googleapis.com/gmail/v1/users/me/messages/m1/modify",
         "request_body_sha256": hashlib.sha256(b'{"removeLabelIds":["UNREAD"]}').hexdigest(), "status": None},
    ]
    # Spilled values stay references, exactly as on disk.
    assert set(fx["entries"][0]["response"]["body"]) == {"sha256", "size", "ref"}


def test_a_test_can_reverify_the_chain_from_the_fixture_alone(tmp_path):
    record_session(tmp_path)
    fx = orjson.loads(fixture_bytes(build_fixture(tmp_path, "incident-7")))
    prev = GENESIS
    for i, entry in enumerate(fx["entries"], 1):
        body = {k: v for k, v in entry.items() if k != "hash"}
        assert entry["seq"] == i and entry["prev"] == prev
        assert hashlib.sha256(canonical_bytes(body)).hexdigest() == entry["hash"]
        prev = entry["hash"]
    assert [expected_call(e) for e in fx["entries"]] == fx["expected"]


def test_fixture_is_redacted_and_deterministic(tmp_path):
    record_session(tmp_path)
    data = fixture_bytes(build_fixture(tmp_path, "incident-7"))
    assert SECRET.encode() not in data and b"[never captured]" in data
    assert fixture_bytes(build_fixture(tmp_path, "incident-7")) == data
    assert str(tmp_path).encode() not in data  # no machine path in a fixture meant to be committed


def test_broken_chain_is_exported_with_its_verdict(tmp_path):
    record_session(tmp_path)
    path = tmp_path / "journal" / "incident-7.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"POST"', b'"PUT"')
    path.write_bytes(b"".join(lines) + b'{"torn')
    fx = build_fixture(tmp_path, "incident-7")
    assert fx["chain"]["verdict"] == "broken at seq 2 (edited)"
    assert fx["chain"]["intact"] is False and fx["chain"]["broken_at_seq"] == 2
    assert [e["request"]["method"] for e in fx["entries"]] == ["GET", "PUT"]
    assert fx["source"]["unparsed_lines"] == [3]


def test_unknown_session_is_a_clear_error(tmp_path):
    record_session(tmp_path)
    with pytest.raises(VaultError, match="no session 'nope'"):
        build_fixture(tmp_path, "nope")
