"""The playback matcher's repeat rule and misses, and recorded answers turned back into responses."""

from __future__ import annotations

import json

import pytest

from broker.proxy.playback import recorded_response
from journal.call import Call
from journal.playback import Miss, RecordedSession, match_key
from journal.record import Recorder
from journal.vault import VaultError
from tests.support.export_factories import BIG, GMAIL, PNG, SESSION, record_export_session


def record(root, calls):
    rec = Recorder(root)
    for method, url, body, status in calls:
        rec.record(Call.make(session="s", agent="a", principal="p", connector="gmail", capture="broker", effect="read",
                   method=method, url=url, request_headers=[("Content-Type", "application/json")],
                   request_body=body, status=status, response_headers=[], response_body=None))
    rec.close()


def test_identical_calls_take_recorded_entries_in_seq_order(tmp_path):
    u = GMAIL + "/messages"
    record(tmp_path, [("GET", u, None, 200), ("POST", u, b'{"a": 1}', 200), ("GET", u, None, 503)])
    s = RecordedSession.load(str(tmp_path), "s")
    assert s.answerable == 3
    assert s.take("gmail", "POST", u, {"a": 1})["seq"] == 2  # other keys need not keep their order
    assert s.take("gmail", "GET", u, None)["seq"] == 1
    assert s.take("gmail", "GET", u, None)["seq"] == 3
    miss = s.take("gmail", "GET", u, None)
    assert isinstance(miss, Miss) and "all 2 recorded call(s) like this were already answered" in miss.reason
    assert "differ in request body" in s.take("gmail", "POST", u, {"a": 2}).reason
    assert "no gmail call DELETE" in s.take("gmail", "DELETE", u, None).reason
    assert s.playback_of({"seq": 3}) == "s#3"


def test_match_key_is_the_diff_rule(tmp_path):
    assert match_key("gmail", "get", "u", {"b": 1, "a": 2}) == match_key("gmail", "GET", "u", {"a": 2, "b": 1})


def test_a_broken_session_is_not_played_back(tmp_path):
    record(tmp_path, [("GET", GMAIL + "/messages", None, 200)])
    path = tmp_path / "journal" / "s.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"status":200', b'"status":201'))
    with pytest.raises(VaultError, match="does not verify .*broken at seq 1 .edited.*refusing"):
        RecordedSession.load(str(tmp_path), "s")


def test_recorded_answers_become_consistent_responses(tmp_path):
    record_export_session(tmp_path)
    s = RecordedSession.load(str(tmp_path), SESSION)
    assert s.answerable == 6  # the two gateway entries answer nothing
    url = GMAIL + "/messages?q=is%3Aunread&access_token=[never%20captured]"
    first = recorded_response(s, s.take("gmail", "GET", url, None))
    assert "content-encoding" not in first.headers and first.headers["content-length"] == str(len(first.raw_content))
    assert json.loads(first.raw_content) == {"messages": [{"id": "m1"}]}
    s.take("gmail", "POST", GMAIL + "/messages/m1/modify", {"removeLabelIds": ["UNREAD"]})
    spilled = recorded_response(s, s.take("gmail", "GET", GMAIL + "/messages/m1/attachments/a1", None))
    assert json.loads(spilled.raw_content) == {"size": 300, "data": BIG}
    png = recorded_response(s, s.take("drive", "GET", "https://www.googleapis.com/drive/v3/files/f1?alt=media", None))
    assert png.raw_content == PNG and png.headers["content-type"] == "image/png"
    s.take("drive", "GET", "https://www.googleapis.com/drive/v3/files/f2?alt=media", None)
    unanswered = s.take("slack", "POST", "https://slack.com/api/chat.postMessage", {"channel": "C1", "text": "hi"})
    answer = recorded_response(s, unanswered)
    assert answer.status_code == 502 and b"got no answer (upstream timed out)" in answer.raw_content
