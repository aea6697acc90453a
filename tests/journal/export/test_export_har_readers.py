"""The HAR export read by the HAR readers people use, for every kind of session: mitmproxy's HAR reader,
haralyzer and har2requests (its parser; its CLI, which starts `black`, runs in tests/e2e)."""

from __future__ import annotations

import base64
import io
import json
import warnings
from urllib.parse import urlsplit

import pytest
from har2requests.request import Request as Har2Request
from haralyzer import HarPage, HarParser
from mitmproxy.io import FlowReader

from journal.export.har import build_har
from tests.journal.export.test_export_har import har_validator
from tests.support.export_factories import (
    ALL_KINDS,
    KINDS_HTTP,
    KINDS_MODEL,
    KINDS_STDIO,
    KINDS_WS,
    SECRET,
    SESSION,
)

ALL = ALL_KINDS


# every property of haralyzer's HarPage, less those read from browser page timings (`pages`, which a
# session has not: haralyzer puts the entries in its "unknown" page) and the methods that take arguments
PAGE_PROPERTIES = [n for n in dir(HarPage) if not n.startswith("_") and n not in (
    "actual_page", "content_load_time", "page_load_time", "filter_entries", "get_load_time", "get_total_size",
    "get_total_size_trans")]


def mitmproxy_flows(har: dict) -> list:
    return list(FlowReader(io.BytesIO(json.dumps(har).encode())).stream())


def haralyzer_read(har: dict) -> list[dict]:
    """Everything haralyzer offers on every page and entry (its properties index the HAR as browsers write it)."""
    parser = HarParser(har)
    seen = []
    for page in parser.pages:
        assert isinstance(page, HarPage)
        for name in PAGE_PROPERTIES:
            getattr(page, name)
        for entry in page.entries:
            req, resp = entry.request, entry.response
            seen.append({"method": req.method, "url": req.url, "status": resp.status, "text": resp.text,
                         "mime": resp.mimeType, "request_text": req.text, "headers": req.headers,
                         "size": resp.bodySize, "started": entry.startTime, "timings": entry.timings})
    return seen


def har2requests_read(har: dict) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a reader's warning is a failure here too
        return [Har2Request.from_json(e["request"], e["response"], e["startedDateTime"], False)
                for e in har["log"]["entries"]]


@pytest.mark.parametrize("inline", [False, True])
@pytest.mark.parametrize("session", ALL)
def test_every_reader_reads_every_kind(vault, session, inline):
    har = build_har(vault, session, inline_blobs=inline)
    assert sorted(har_validator().iter_errors(har), key=str) == []
    entries = har["log"]["entries"]
    assert entries, "an export with no entry shows nothing in any reader"
    flows = mitmproxy_flows(har)
    read = haralyzer_read(har)
    parsed = har2requests_read(har) if inline else None  # not inlined: size > 0 with empty text warns
    assert len(flows) == len(read) == len(entries)
    if parsed is not None:
        assert len(parsed) == len(entries)
    for e, flow, r in zip(entries, flows, read, strict=True):
        url = urlsplit(e["request"]["url"])
        assert (flow.request.scheme, flow.request.host, flow.request.path.split("?")[0]) == (
            url.scheme, url.hostname, url.path)  # mitmproxy adds port 80 to a scheme it does not know
        assert r["url"] == e["request"]["url"]
        assert flow.response.status_code == e["response"]["status"] == r["status"]
        assert isinstance(r["text"], str)  # haralyzer's KeyError: 'text' on an empty body
    assert SECRET not in json.dumps(har)


def test_mcp_stdio_session_is_entries_on_a_synthetic_url(vault):
    har = build_har(vault, KINDS_STDIO, inline_blobs=True)
    entries = har["log"]["entries"]
    assert [e["request"]["url"] for e in entries] == ["mcp+stdio://notes/tools/call"] * 4 + [
        "mcp+stdio://notes/resources/read"]
    assert all(e["_journal"]["url"] == "stdio:python -m notes_server" for e in entries)
    assert len(har["log"]["_nonHttpEntries"]) == 5
    flows = mitmproxy_flows(har)
    first = flows[0]
    assert first.request.method == "POST" and first.request.scheme == "mcp+stdio" and first.request.host == "notes"
    assert json.loads(first.request.get_content())["params"]["name"] == "search_notes"
    assert json.loads(first.response.get_content())["result"]["content"][0]["text"] == "found"
    unanswered = flows[3]
    assert unanswered.response.status_code == 0 and entries[3]["response"]["_error"] == "the server exited"
    assert json.loads(entries[3]["request"]["postData"]["text"])["params"]["arguments"]["big"] == "A" * 300
    parsed = har2requests_read(har)
    assert parsed[0].method == "POST" and parsed[0].responseData["id"] == 1


def test_empty_bodies_and_non_json_under_a_json_type(vault):
    har = build_har(vault, KINDS_HTTP)
    no_body, not_json, redirect, unanswered = har["log"]["entries"]
    assert no_body["response"]["content"]["text"] == "" and no_body["request"]["bodySize"] == 0
    assert "postData" not in no_body["request"]
    assert not_json["response"]["content"]["mimeType"] == "text/plain; charset=utf-8"
    assert {"name": "Content-Type", "value": "application/json"} in not_json["response"]["headers"]
    assert redirect["response"]["redirectURL"].endswith("/messages")
    assert unanswered["response"]["status"] == 0
    parsed = har2requests_read(har)
    assert parsed[1].responseText == "{not json" and parsed[1].responseData is None
    assert parsed[3].postData == {"text": "x"}


def test_spilled_body_not_inlined_has_empty_text_and_names_its_blob(vault):
    har = build_har(vault, SESSION)
    whole = har["log"]["entries"][4]["response"]["content"]
    assert whole["text"] == "" and whole["_blob"]["size"] == 500 and "spilled" in whole["comment"]
    assert haralyzer_read(har)[4]["text"] == ""


def test_websocket_messages_ride_on_their_handshake(vault):
    har = build_har(vault, KINDS_WS)
    (shake,) = har["log"]["entries"]
    messages = shake["_webSocketMessages"]
    assert [m["type"] for m in messages] == ["send", "receive", "send"]
    assert json.loads(messages[0]["data"]) == {"msg": "hello"}
    assert base64.b64decode(messages[2]["data"]) == b"\x00\x01\xff" and messages[2]["opcode"] == 2
    assert [m["_journal"]["seq"] for m in messages] == [2, 3, 4]
    assert messages[0]["_journal"]["prev"] == shake["_journal"]["hash"]
    (flow,) = mitmproxy_flows(har)
    assert flow.response.status_code == 101


def test_model_call_keeps_texts_referenced(vault):
    har = build_har(vault, KINDS_MODEL)
    (call,) = har["log"]["entries"]
    body = json.loads(call["request"]["postData"]["text"])
    assert body["model"] == "gpt-4o" and "Z" * 300 not in call["request"]["postData"]["text"]
    (flow,) = mitmproxy_flows(har)
    assert json.loads(flow.response.get_content())["choices"][0]["finish_reason"] == "tool_calls"
    assert {"name": "Authorization", "value": "[never captured]"} in call["request"]["headers"]


def test_a_json_type_on_a_spilled_body_that_is_no_json(tmp_path):
    """A body over the spill threshold is spilled whole as it streams, unparsed: inlined, it is handed to
    readers as text/plain when it is not JSON (har2requests would json.loads a JSON-typed text)."""
    from journal.call import Call
    from journal.record import Recorder

    rec = Recorder(tmp_path, spill_threshold=200)
    for body in (b"<html>" + b"x" * 500, b'{"a": "' + b"y" * 500 + b'"}'):
        rec.record(Call.make(session="s", agent="a", principal="p", connector="other", method="GET",
                             url="https://api.example.com/x", status=200,
                             response_headers=[("Content-Type", "application/json")], response_body=body))
    rec.close()
    har = build_har(tmp_path, "s", inline_blobs=True)
    not_json, big_json = (e["response"]["content"] for e in har["log"]["entries"])
    assert not_json["mimeType"] == "text/plain; charset=utf-8" and not_json["text"].startswith("<html>")
    assert big_json["mimeType"] == "application/json"
    parsed = har2requests_read(har)
    assert parsed[0].responseData is None and parsed[1].responseData == {"a": "y" * 500}
    assert len(mitmproxy_flows(har)) == 2 and len(haralyzer_read(har)) == 2
