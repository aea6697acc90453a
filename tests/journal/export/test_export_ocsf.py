"""OCSF export: API Activity events valid against the OCSF schema as published (the schema export
packaged in `ocsf-json-schema`, turned into JSON Schema by that package), each carrying its entry and
chain; and `broker verify-export` catching a copy that dropped, reordered, repeated or altered events,
in OCSF, HAR and OTLP alike."""

from __future__ import annotations

import hashlib
import json

import orjson
import pytest
from jsonschema import Draft202012Validator
from ocsf_json_schema import OcsfJsonSchemaEmbedded, get_ocsf_schema, get_packaged_versions

from broker.cli import cli
from journal.chain import GENESIS
from journal.export.har import build_har
from journal.export.ocsf import OCSF_VERSION, iter_ocsf, ocsf_lines
from journal.export.otel import build_otlp
from journal.export.verify_export import ExportUnreadable, verify_export
from tests.support.export_factories import (
    ALL_KINDS,
    KINDS_MCP_HTTP,
    KINDS_MODEL,
    KINDS_STDIO,
    KINDS_WS,
    MCP_SESSION_ID,
    SECRET,
    SESSION,
)

ALL = ALL_KINDS
_validators: dict[tuple[str, ...], Draft202012Validator] = {}


def ocsf_validator(profiles: list[str]) -> Draft202012Validator:
    key = tuple(sorted(profiles))
    if key not in _validators:
        schema = OcsfJsonSchemaEmbedded(get_ocsf_schema(OCSF_VERSION)).get_class_schema("api_activity", list(key))
        _validators[key] = Draft202012Validator(schema)
    return _validators[key]


def test_we_write_the_newest_packaged_ocsf_version():
    newest = max((v for v in get_packaged_versions() if "rc" not in v), key=lambda v: tuple(map(int, v.split("."))))
    assert OCSF_VERSION == newest


@pytest.mark.parametrize("session", ALL)
def test_events_validate_against_the_ocsf_schema(vault, session):
    events = list(iter_ocsf(vault, session))
    assert events
    for ev in events:
        errors = sorted(ocsf_validator(ev["metadata"]["profiles"]).iter_errors(ev), key=str)
        assert errors == [], [e.message for e in errors][:5]
        assert ev["class_uid"] == 6003 and ev["type_uid"] == 600300 + ev["activity_id"]
        digest = hashlib.sha256(ev["raw_data"].encode()).hexdigest()
        assert digest == ev["raw_data_hash"]["value"] == ev["metadata"]["uid"] == ev["unmapped"]["broker"]["hash"]
    assert SECRET not in json.dumps(events)


def test_schema_rejects_a_broken_event(vault):
    ev = next(iter_ocsf(vault, SESSION))
    del ev["api"]["operation"]
    ev["activity_id"] = 7
    messages = [e.message for e in ocsf_validator(ev["metadata"]["profiles"]).iter_errors(ev)]
    assert any("operation" in m for m in messages) and any("7" in m for m in messages)


def test_event_fields(vault):
    first, post, *_ = iter_ocsf(vault, SESSION)
    assert first["activity_name"] == "Read" and first["status"] == "Success" and first["http_response"]["code"] == 200
    assert f"{first['time'] % 1000:03d}" == first["metadata"]["original_time"][-4:-1]  # the milliseconds, exactly
    assert first["actor"] == {"app_name": "bot/1", "user": {"name": "alice@example.com", "uid": "alice@example.com"},
                              "session": {"uid": SESSION}}
    assert first["http_request"]["url"]["hostname"] == "gmail.googleapis.com"
    assert first["trace"]["uid"] == "4bf92f3577b34da6a3ce929d0e0e4736" and first["metadata"]["profiles"] == ["trace"]
    broker = first["unmapped"]["broker"]
    assert broker["seq"] == 1 and broker["prev"] == GENESIS and broker["session_entries"] == 8
    assert post["api"]["operation"] == "POST" and post["activity_name"] == "Create"
    assert post["unmapped"]["broker"]["prev"] == broker["hash"]
    unanswered = list(iter_ocsf(vault, SESSION))[5]
    assert unanswered["status"] == "Failure" and unanswered["status_detail"] == "upstream timed out"
    (prompt,) = iter_ocsf(vault, KINDS_MCP_HTTP)
    assert prompt["api"]["operation"] == "prompts/get" and prompt["api"]["version"] == "2025-11-25"
    assert prompt["api"]["request"]["uid"] == "p1"
    # the recorder keeps no Mcp-Session-Id in clear, only its keyed fingerprint (journal/record.py)
    assert prompt["actor"]["session"]["uid_alt"].startswith("fp:")
    assert MCP_SESSION_ID not in json.dumps(prompt)
    (model,) = iter_ocsf(vault, KINDS_MODEL)
    assert model["ai_model"] == {"name": "gpt-4o", "ai_provider": "openai"}
    assert model["metadata"]["profiles"] == ["ai_operation"]
    stdio = list(iter_ocsf(vault, KINDS_STDIO))
    assert stdio[2]["status"] == "Failure" and "-32602" in stdio[2]["status_detail"]
    assert stdio[1]["status"] == "Failure" and "isError" in stdio[1]["status_detail"]


def test_cli_writes_json_lines(vault, tmp_path):
    out = tmp_path / "siem" / "s.jsonl"
    out.parent.mkdir()
    assert cli.main(["export", SESSION, "--vault", str(vault), "--format", "ocsf", "--out", str(out)],
                    standalone_mode=False) == 0
    lines = out.read_bytes().splitlines()
    assert len(lines) == 8 and all(orjson.loads(x)["class_uid"] == 6003 for x in lines)


# --- broker verify-export -------------------------------------------------------------------------

def _write(tmp_path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _ocsf(vault, tmp_path, edit=None, name="s.jsonl", session=SESSION):
    lines = ocsf_lines(vault, session).splitlines()
    if edit:
        lines = edit(lines)
    return _write(tmp_path, name, b"\n".join(lines) + b"\n")


@pytest.fixture(autouse=True)
def _capsys(capsys):
    global _CAPTURE
    _CAPTURE = capsys


_CAPTURE = None


def _run(path) -> tuple[int, str]:
    """`broker verify-export PATH` as the `broker` entry point runs it: its exit code and output."""
    _CAPTURE.readouterr()
    code = cli.main(["verify-export", str(path)], standalone_mode=False)
    return code, _CAPTURE.readouterr().out


@pytest.mark.parametrize("session", ALL)
def test_intact_exports_verify(vault, tmp_path, session):
    for path in (_ocsf(vault, tmp_path, session=session),
                 _write(tmp_path, "s.har", orjson.dumps(build_har(vault, session))),
                 _write(tmp_path, "s.json", orjson.dumps(build_otlp(vault, session)))):
        code, out = _run(path)
        assert code == 0 and "every chain intact" in out, out


def test_two_sessions_in_one_siem_file_verify(vault, tmp_path):
    data = ocsf_lines(vault, SESSION) + ocsf_lines(vault, KINDS_STDIO)
    verdict = verify_export(_write(tmp_path, "both.jsonl", data))
    assert verdict.ok and verdict.sessions == 2 and verdict.events == 13


def _altered_status(lines):
    ev = orjson.loads(lines[2])
    ev["http_response"]["code"] = 500
    return [*lines[:2], orjson.dumps(ev), *lines[3:]]


def _altered_raw(lines):
    ev = orjson.loads(lines[2])
    ev["raw_data"] = ev["raw_data"].replace('"effect":"read"', '"effect":"write"')
    return [*lines[:2], orjson.dumps(ev), *lines[3:]]


def _rehashed(lines):
    """An attacker who changes the entry and recomputes its hash: the next event's prev gives it away."""
    ev = orjson.loads(lines[2])
    entry = orjson.loads(ev["raw_data"])
    entry["response"]["status"] = 500
    from journal.chain import entry_hash
    from journal.export.ocsf import ocsf_event

    entry["hash"] = entry_hash(entry)
    b = ev["unmapped"]["broker"]
    forged = ocsf_event(entry, session_entries=b["session_entries"], session_head=b["session_head"],
                        product_version=ev["metadata"]["product"]["version"])
    return [*lines[:2], orjson.dumps(forged), *lines[3:]]


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda ls: ls[:3] + ls[4:], "line 4: session export-1 seq 5: dropped: seq 4 missing"),
    (lambda ls: ls[1:], "line 1: session export-1 seq 2: dropped: seq 1 missing"),
    (lambda ls: ls[:-1], "ends at seq 7 but the export held 8 entries: dropped at the end"),
    (lambda ls: [ls[0], ls[2], ls[1], *ls[3:]], "line 2: session export-1 seq 3 before seq 2: reordered"),
    (lambda ls: [ls[0], ls[1], ls[3], ls[2], *ls[4:]], "line 3: session export-1 seq 4 before seq 3: reordered"),
    (lambda ls: [*ls[1:], ls[0]], "line 1: session export-1 seq 2 before seq 1: reordered"),
    (lambda ls: [*ls[:3], ls[2], *ls[3:]], "line 4: session export-1 seq 3: repeated"),
    (_altered_status, "line 3: altered: http_response differ from the entry in raw_data (seq 3)"),
    (_altered_raw, "line 3: altered: raw_data does not hash to the event's hash"),
    (_rehashed, "line 4: session export-1 seq 4: prev is not the hash of seq 3: altered"),
])
def test_verify_export_catches_a_bad_ocsf_copy(vault, tmp_path, edit, expected):
    code, out = _run(_ocsf(vault, tmp_path, edit))
    assert code == 1 and "NOT intact" in out, out
    assert expected in out, out


def _har_edit(har: dict, edit) -> dict:
    har["log"]["entries"] = edit(har["log"]["entries"])
    return har


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda es: es[:2] + es[3:], "seq 4: dropped: seq 3 missing"),
    (lambda es: [es[1], es[0], *es[2:]], "entry 2: seq 1 after seq 2: reordered or repeated"),
    (lambda es: [*es, es[-1]], "entry 9: seq 8 after seq 8: reordered or repeated"),
    (lambda es: es[:-1], "dropped at the end"),
])
def test_verify_export_catches_a_bad_har_copy(vault, tmp_path, edit, expected):
    har = _har_edit(build_har(vault, SESSION), edit)
    code, out = _run(_write(tmp_path, "s.har", orjson.dumps(har)))
    assert code == 1 and expected in out, out


def test_verify_export_catches_a_dropped_websocket_message(vault, tmp_path):
    har = build_har(vault, KINDS_WS)
    del har["log"]["entries"][0]["_webSocketMessages"][1]
    code, out = _run(_write(tmp_path, "ws.har", orjson.dumps(har)))
    assert code == 1 and "seq 4: dropped: seq 3 missing" in out, out


def test_verify_export_catches_reordered_and_repeated_websocket_messages(vault, tmp_path):
    """Messages sit inside their handshake's entry and the links are sorted by seq before the chain is
    followed: their order in the file is checked before that, or a swap would pass."""
    har = build_har(vault, KINDS_WS)
    msgs = har["log"]["entries"][0]["_webSocketMessages"]
    msgs[0], msgs[1] = msgs[1], msgs[0]
    code, out = _run(_write(tmp_path, "ws.har", orjson.dumps(har)))
    assert code == 1 and "entry 1 message 2: seq 2 after seq 3: reordered or repeated" in out, out
    har = build_har(vault, KINDS_WS)
    har["log"]["entries"][0]["_webSocketMessages"].insert(1, har["log"]["entries"][0]["_webSocketMessages"][0])
    code, out = _run(_write(tmp_path, "ws.har", orjson.dumps(har)))
    assert code == 1 and "entry 1 message 2: seq 2 after seq 2: reordered or repeated" in out, out


def test_verify_export_catches_a_bad_otel_copy(vault, tmp_path):
    otlp = build_otlp(vault, SESSION)
    spans = otlp["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans[2], spans[3] = spans[3], spans[2]
    code, out = _run(_write(tmp_path, "s.json", orjson.dumps(otlp)))
    assert code == 1 and "span 3: session export-1 seq 3 before seq 2: reordered" in out, out
    otlp = build_otlp(vault, SESSION)
    for a in otlp["resourceSpans"][0]["scopeSpans"][0]["spans"][3]["attributes"]:
        if a["key"] == "broker.entry.prev":
            a["value"]["stringValue"] = "f" * 64
    code, out = _run(_write(tmp_path, "s.json", orjson.dumps(otlp)))
    assert code == 1 and "seq 3: prev is not the hash of seq 2: altered" in out, out


def test_verify_export_refuses_what_is_no_export(tmp_path):
    with pytest.raises(ExportUnreadable):
        verify_export(_write(tmp_path, "x.json", b"[1, 2]"))
    code, out = _run(_write(tmp_path, "y.jsonl", b'{"class_uid": 6003}\n'))
    assert code == 1 and "line 1: no raw_data" in out


def _forged_raw(lines):
    """A raw_data no export writes, with every hash made to match it: reported, never a traceback."""
    ev = orjson.loads(lines[0])
    raw = '{"request": [], "seq": 1, "prev": "' + GENESIS + '"}'
    digest = hashlib.sha256(raw.encode()).hexdigest()
    ev["raw_data"], ev["raw_data_hash"]["value"], ev["unmapped"]["broker"]["hash"] = raw, digest, digest
    return [orjson.dumps(ev), *lines[1:]]


def _one_head_changed(lines):
    ev = orjson.loads(lines[3])
    ev["unmapped"]["broker"]["session_entries"] = 4
    return [*lines[:3], orjson.dumps(ev), *lines[4:]]


@pytest.mark.parametrize(("edit", "expected"), [
    (_forged_raw, "line 1: altered: raw_data is not an entry the export can map"),
    (_one_head_changed, "line 4: session export-1 seq 4: states 4 entries and head"),
    (lambda ls: [b'{"class_uid": 6003, "unmapped": [], "raw_data": 5}', *ls], "line 1: no raw_data"),
    (lambda ls: [*ls[:2], b"not json", *ls[2:]], "line 3: not JSON"),
])
def test_verify_export_reports_a_hostile_ocsf_file(vault, tmp_path, edit, expected):
    code, out = _run(_ocsf(vault, tmp_path, edit))
    assert code == 1 and expected in out, out


@pytest.mark.parametrize("doc", [
    {"log": {"entries": "x"}},
    {"log": {"entries": [{"_journal": {"seq": 1, "hash": "a", "prev": GENESIS}, "_webSocketMessages": 7}]}},
    {"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": ["x"]}]}]}]},
    {"resourceSpans": [{"scopeSpans": "x"}]},
])
def test_verify_export_reports_a_malformed_har_or_otlp(tmp_path, doc):
    code, out = _run(_write(tmp_path, "x.json", orjson.dumps(doc)))
    assert code == 1 and "NOT intact" in out, out


# -- a copy cut short (issue 26): named as what it begins as, not taken for JSON lines ---------------------------


def _cuts(data: bytes, start: bytes) -> list[int]:
    """Where to cut: just after the opening key, inside the first entry, halfway, inside a string, one byte
    before the end."""
    first = data.index(start) + len(start)
    inside_string = data.index(b'"', len(data) // 3) + 3
    return [first, first + 1, first + (len(data) - first) // 5, len(data) // 2, inside_string, len(data) - 1]


@pytest.mark.parametrize(("fmt", "build", "name", "start", "begins"), [
    ("har", build_har, "cut.har", b'"log":', 'a HAR (`{"log": {...`)'),
    ("otel", build_otlp, "cut.json", b'"resourceSpans":', 'an OTLP/JSON export (`{"resourceSpans": [...`)'),
])
@pytest.mark.parametrize("indent", [False, True])
def test_a_har_or_otlp_export_cut_short_is_named_as_such_not_ocsf(vault, tmp_path, indent, fmt, build, name, start,
                                                                  begins):
    data = orjson.dumps(build(vault, SESSION), option=orjson.OPT_INDENT_2 if indent else 0)
    for cut in _cuts(data, start):
        code, out = _run(_write(tmp_path, name, data[:cut]))
        assert code == 1, (cut, out)
        assert f": {fmt}: NOT intact: not one complete JSON document: it begins as {begins} but is not JSON to its " \
            "end, so it was cut short or damaged\n" in out, (cut, out)
        assert ": ocsf:" not in out and "line 1" not in out, (cut, out)
    assert _run(_write(tmp_path, "whole-" + name, data))[0] == 0


def test_an_ocsf_file_cut_mid_line_says_where(vault, tmp_path):
    data = _ocsf(vault, tmp_path).read_bytes()
    lines = data.splitlines(keepends=True)
    for n in (1, 3, len(lines)):
        at = sum(map(len, lines[: n - 1])) + len(lines[n - 1]) // 2
        code, out = _run(_write(tmp_path, "cut.jsonl", data[:at]))
        assert code == 1 and f": ocsf: NOT intact: line {n}: not JSON, and the file ends inside it" in out, (n, out)
        assert "cut short" in out
    at = sum(map(len, lines[:3]))  # cut at a line end: the lines kept are whole, the chain shows the loss
    code, out = _run(_write(tmp_path, "cut.jsonl", data[:at]))
    assert code == 1 and "dropped at the end" in out, out
