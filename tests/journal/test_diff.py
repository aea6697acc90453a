"""broker diff: behaviour compared as ordered calls and statuses."""

from __future__ import annotations

from broker.cli import cli
from journal.call import Call
from journal.diff import diff_calls, diff_sessions, render
from journal.record import Recorder


def call(seq, url, status=200, body="b"):
    return {"seq": seq, "connector": "gmail", "effect": "read", "method": "GET", "url": url,
            "request_body_sha256": body * 64, "status": status}


def test_alignment_names_each_difference():
    a = [call(1, "u1"), call(2, "u2"), call(3, "u3"), call(4, "u4")]
    b = [call(1, "u1"), call(2, "u2", status=500), call(3, "u9"), call(4, "u3"), call(5, "u4", body="c")]
    d = diff_calls(a, b)
    assert [(x["op"], x.get("fields")) for x in d] == [
        ("changed", ["status"]), ("added", None), ("changed", ["request_body_sha256"])]
    assert diff_calls(a, [dict(c, seq=c["seq"] + 10) for c in a]) == []  # seq is not behaviour


def test_removed_and_added(tmp_path):
    a = [call(1, "u1"), call(2, "u2")]
    assert [x["op"] for x in diff_calls(a, a[:1])] == ["removed"]
    assert [x["op"] for x in diff_calls(a[:1], a)] == ["added"]


def test_cli_exit_codes_and_text(tmp_path, capsys):
    rec = Recorder(tmp_path)
    for session, status in (("a", 200), ("b", 200), ("c", 404)):
        rec.record(Call.make(session=session, agent="x", principal="p", connector="gmail", capture="broker",
                   effect="read", method="GET", url="https://gmail.googleapis.com/gmail/v1/users/me/labels",
                   request_headers=[], request_body=None, status=status, response_headers=[], response_body=None))
    rec.close()
    assert cli.main(["diff", "a", "b", "--vault", str(tmp_path)], standalone_mode=False) == 0
    assert cli.main(["diff", "a", "c", "--vault", str(tmp_path)], standalone_mode=False) == 1
    out = capsys.readouterr().out
    assert "a (1 calls) vs b (1 calls): same calls, same statuses" in out
    assert "~ seq 1 / seq 1: status differ" in out and "-> 200" in out and "-> 404" in out
    assert render(diff_sessions(tmp_path, "a", "c")).count("\n") == 4
