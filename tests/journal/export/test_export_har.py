"""HAR 1.2 export: valid against the published HAR schema, readable by mitmproxy, nothing cut."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from jsonschema import Draft6Validator
from mitmproxy.io import FlowReader
from referencing import Registry, Resource

from broker.cli import cli
from journal.export.har import build_har
from tests.support.export_factories import BIG, GMAIL, PNG, SECRET, SESSION, record_export_session

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "support" / "vectors" / "har-schema"


def har_validator() -> Draft6Validator:
    resources = []
    for path in SCHEMA_DIR.glob("*.json"):
        schema = json.loads(path.read_text())
        resources.append((schema["$id"], Resource.from_contents(schema)))
    registry = Registry().with_resources(resources)
    return Draft6Validator(json.loads((SCHEMA_DIR / "har.json").read_text()), registry=registry,
                           format_checker=Draft6Validator.FORMAT_CHECKER)


@pytest.fixture
def vault(tmp_path):
    record_export_session(tmp_path)
    return tmp_path


@pytest.mark.parametrize("inline", [False, True])
def test_har_validates_against_the_har_1_2_schema(vault, inline):
    har = build_har(vault, SESSION, inline_blobs=inline)
    errors = sorted(har_validator().iter_errors(har), key=str)
    assert errors == []
    log = har["log"]
    assert log["version"] == "1.2" and len(log["entries"]) == 8  # the MCP stdio call too, on mcp+stdio://
    for e in log["entries"]:
        assert all(v >= 0 for v in e["timings"].values()) and e["time"] == 0
        assert all(k.startswith("_") or k in ("startedDateTime", "time", "request", "response", "cache", "timings",
                                              "comment") for k in e)


def test_schema_rejects_a_broken_har(vault):
    har = build_har(vault, SESSION)
    del har["log"]["entries"][0]["response"]["status"]
    assert any("status" in e.message for e in har_validator().iter_errors(har))


def test_har_keeps_redactions_and_names_spilled_bodies(vault):
    har = build_har(vault, SESSION)
    data = json.dumps(har)
    assert SECRET not in data
    first = har["log"]["entries"][0]
    assert {"name": "Authorization", "value": "[never captured]"} in first["request"]["headers"]
    assert {"name": "access_token", "value": "[never captured]"} in first["request"]["queryString"]
    assert first["_journal"]["seq"] == 1 and len(first["_journal"]["hash"]) == 64
    attachment = har["log"]["entries"][2]["response"]["content"]
    assert attachment["_blobs"][0]["path"] == "/data" and attachment["_blobs"][0]["size"] == 300
    assert BIG not in attachment["text"] and "spilled" in attachment["comment"]
    whole = har["log"]["entries"][4]["response"]["content"]
    assert whole["text"] == "" and whole["_blob"]["size"] == 500 and whole["size"] == 500
    png = har["log"]["entries"][3]["response"]["content"]
    assert png["encoding"] == "base64" and base64.b64decode(png["text"]) == PNG
    unanswered = har["log"]["entries"][5]["response"]
    assert unanswered["status"] == 0 and unanswered["_error"] == "upstream timed out"
    stdio = har["log"]["entries"][6]
    assert stdio["request"]["url"] == "mcp+stdio://notes/tools/call"
    assert stdio["_journal"]["url"] == "stdio:notes-server"
    mcp_http = har["log"]["entries"][7]
    assert mcp_http["request"]["method"] == "POST" and json.loads(mcp_http["request"]["postData"]["text"])["id"] == 7
    assert har["log"]["_nonHttpEntries"] == [{"seq": 7, "hash": har["log"]["_nonHttpEntries"][0]["hash"],
                                              "capture": "gateway", "connector": "notes", "method": "tools/call",
                                              "url": "stdio:notes-server"}]
    assert "_nonHttpEntries" in har["log"]["comment"] and har["log"]["_chain"]["verdict"] == "intact"


def test_inline_blobs_puts_every_body_in_the_file(vault):
    har = build_har(vault, SESSION, inline_blobs=True)
    entries = har["log"]["entries"]
    assert json.loads(entries[2]["response"]["content"]["text"])["data"] == BIG
    assert entries[4]["response"]["content"]["text"] == "x" * 500
    assert "_blob" not in entries[4]["response"]["content"]


def test_mitmproxy_reads_the_har(vault, tmp_path):
    out = tmp_path / "s.har"
    assert cli.main(["export", SESSION, "--vault", str(vault), "--format", "har", "--inline-blobs", "--out", str(out)],
                    standalone_mode=False) == 0
    with out.open("rb") as f:
        flows = list(FlowReader(f).stream())
    assert len(flows) == 8
    first, post, attachment, png, whole, unanswered, stdio, mcp = flows
    assert stdio.request.scheme == "mcp+stdio" and json.loads(stdio.response.get_content())["id"] == 7
    assert first.request.url.startswith(GMAIL + "/messages?q=is%3Aunread")
    assert first.request.headers["authorization"] == "[never captured]"
    assert json.loads(first.response.get_content()) == {"messages": [{"id": "m1"}]}
    assert post.request.method == "POST" and json.loads(post.request.get_content()) == {"removeLabelIds": ["UNREAD"]}
    assert json.loads(attachment.response.get_content())["data"] == BIG
    assert png.response.get_content() == PNG and whole.response.get_content() == b"x" * 500
    assert unanswered.response.status_code == 0
    assert mcp.request.url == "http://127.0.0.1:9/mcp" and json.loads(mcp.response.get_content())["id"] == 7
