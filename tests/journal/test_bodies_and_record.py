"""Bodies as docs/contract.md says (JSON, text, binary, encodings, spilling) and the Recorder API."""

from __future__ import annotations

import base64
import gzip
import hashlib
import zlib

import brotli
import orjson
import pytest

from journal.blobstore import BlobStore
from journal.bodies import BodyCapture, encode_body, parse_json_strict, record_body
from journal.call import Call
from journal.entry import ContractError
from journal.reader import iter_entries
from journal.record import JsonValue, Recorder
from journal.vault import Vault
from journal.verify import verify_session

T = 1 << 20


@pytest.fixture
def store(tmp_path):
    return BlobStore(tmp_path)


@pytest.mark.parametrize(
    "data,ctype,expected",
    [
        (b"", "application/json", None),
        (b'{"id": "m1", "labelIds": ["INBOX"]}', "application/json; charset=UTF-8",
         {"id": "m1", "labelIds": ["INBOX"]}),
        (b'{"a": 1}', "application/vnd.api+json", {"a": 1}),
        (b'{"a": 1, "a": 2}', "application/json", '{"a": 1, "a": 2}'),  # duplicate keys: kept as text
        (b'{"n": 9007199254740993}', "application/json", '{"n": 9007199254740993}'),  # beyond 2^53-1
        (b'{"n": 1e400}', "application/json", '{"n": 1e400}'),  # overflows a double
        (b'{"n": NaN}', "application/json", '{"n": NaN}'),
        (b'{"n": 0.5}', "application/json", {"n": 0.5}),
        (b"not json", "application/json", "not json"),
        (b"hello \xc3\xa9", "text/plain; charset=utf-8", "hello \u00e9"),
        (b"a=1&b=2", "application/x-www-form-urlencoded", "a=1&b=2"),
        (b"\xff\xfe\x00binary", "text/plain", {"base64": base64.b64encode(b"\xff\xfe\x00binary").decode()}),
        (b"PNGDATA", "image/png", {"base64": base64.b64encode(b"PNGDATA").decode()}),
        (b"plain", None, "plain"),
    ],
)
def test_encode_body(store, data, ctype, expected):
    assert encode_body(data, ctype, store, T) == expected


def test_large_json_string_value_is_spilled_and_small_fields_stay(store, tmp_path):
    data = base64.urlsafe_b64encode(b"\x01" * (T + 10)).decode()
    body = orjson.dumps({"size": T + 10, "data": data})
    value = encode_body(body, "application/json", store, T)
    assert value["size"] == T + 10
    ref = value["data"]
    assert ref["size"] == len(data) and (tmp_path / ref["ref"]).read_bytes() == data.encode()


def test_large_text_and_binary_bodies_are_spilled_whole(store, tmp_path):
    text = ("line of text\n" * 100000).encode()
    ref = encode_body(text, "text/plain", store, T)
    assert (tmp_path / ref["ref"]).read_bytes() == text
    blob = bytes(range(256)) * 5000
    ref = encode_body(blob, "application/octet-stream", store, T)
    assert ref["sha256"] == hashlib.sha256(blob).hexdigest()


def test_json_with_many_small_values_over_threshold_is_spilled_whole(store, tmp_path):
    body = orjson.dumps({"messages": [{"id": f"m{i}", "snippet": "x" * 50} for i in range(20000)]})
    ref = encode_body(body, "application/json", store, T)
    assert (tmp_path / ref["ref"]).read_bytes() == body


def test_threshold_is_configurable(store):
    assert encode_body(b"x" * 100, "text/plain", store, 50)["size"] == 100


@pytest.mark.parametrize(
    "encoding,compress",
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("br", brotli.compress),
        ("gzip, br", lambda b: brotli.compress(gzip.compress(b))),
    ],
)
def test_content_encodings_are_decoded(store, encoding, compress):
    raw = b'{"labels": [{"id": "INBOX"}]}'
    value, extra = record_body(compress(raw), "application/json", encoding, store)
    assert value == {"labels": [{"id": "INBOX"}]} and extra == {}


def test_zstd_is_decoded(store):
    from backports import zstd

    value, _ = record_body(zstd.compress(b"hello"), "text/plain", "zstd", store)
    assert value == "hello"


def test_undecodable_body_is_not_kept(store):
    # What cannot be decoded cannot be redacted: the body is left out, the error says why (issue 23).
    value, extra = record_body(b"\xff\x01 not gzip", "text/plain", "gzip", store)
    assert "content_encoding_error" in extra
    assert value is None


def test_streaming_capture_spills_without_holding_the_body(store, tmp_path):
    cap = BodyCapture(store, "application/octet-stream", None, T)
    h = hashlib.sha256()
    for i in range(40):
        chunk = bytes([i]) * (256 << 10)
        h.update(chunk)
        cap.feed(chunk)
        assert len(cap._buf) <= T  # never more than the threshold held
    value, extra = cap.finish()
    assert value["sha256"] == h.hexdigest() and value["size"] == 10 << 20


def test_streaming_gzip_is_decoded_as_it_streams(store, tmp_path):
    raw = b"event: x\ndata: hello\n\n" * 200000
    comp = gzip.compress(raw)
    cap = BodyCapture(store, "text/event-stream", "gzip", T)
    for i in range(0, len(comp), 4096):
        cap.feed(comp[i : i + 4096])
    value, _ = cap.finish()
    assert (tmp_path / value["ref"]).read_bytes() == raw


def test_parse_json_strict_rejects_trailing_garbage():
    assert parse_json_strict(b'{"a":1} x') == (False, None)
    assert parse_json_strict(b' {"a":1}\n') == (True, {"a": 1})


# -- the Recorder -----------------------------------------------------------------------------


def _record(rec: Recorder, **over):
    args = dict(
        session="s1", agent="a", principal="p", connector="gmail", capture="broker", effect="read",
        method="GET", url="https://gmail.googleapis.com/gmail/v1/users/me/labels?key=AIzaSyA1234567890abcdefghijklmnopqrstuv",
        request_headers=[("Authorization", "Bearer ya29.a0AfH6SMBx-secret-token-value"), ("Accept", "*/*")],
        request_body=None, status=200, response_headers=[("Content-Type", "application/json")],
        response_body=b'{"labels": []}',
    )
    args.update(over)
    return rec.record(Call.make(**args))


def test_recorder_redacts_before_anything_reaches_disk(tmp_path):
    rec = Recorder(tmp_path)
    e = _record(rec, request_body=b"client_secret=abc123secret&grant=x",
                request_headers=[("Authorization", "Bearer ya29.a0AfH6SMBx-secret-token-value"),
                                 ("Content-Type", "application/x-www-form-urlencoded")])
    rec.close()
    assert dict(e["request"]["headers"])["Authorization"] == "[never captured]"
    assert "AIza" not in e["request"]["url"]
    everything = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    for secret in (b"ya29.a0AfH6SMBx", b"AIzaSyA1234567890", b"abc123secret"):
        assert secret not in everything


def test_token_exchange_leaves_no_entry_and_no_blob(tmp_path):
    rec = Recorder(tmp_path)
    out = _record(rec, method="POST", url="https://oauth2.googleapis.com/token",
                  request_body=b"grant_type=refresh_token&refresh_token=1//0gabcdef",
                  response_body=b'{"access_token": "ya29.xyz", "expires_in": 3599}' + b" " * (2 << 20))
    assert out is None
    rec.close()
    assert not list(tmp_path.rglob("*.jsonl"))
    assert not [p for p in (tmp_path / "blobs").rglob("*") if p.is_file()]


def test_a_response_that_looks_like_a_token_grant_is_recorded_redacted(tmp_path):
    """Only the request says what a token exchange is: a Gmail GET answering with an access_token
    (or a downloaded token.json) is an ordinary call, recorded with the credential redacted."""
    rec = Recorder(tmp_path)
    out = _record(rec, url="https://example.com/anything", response_body=b'{"id": "m1", "access_token": "ya29.xyz"}')
    assert out is not None and out["response"]["body"] == {"id": "m1", "access_token": "[never captured]"}
    out = _record(rec, url="https://www.googleapis.com/drive/v3/files/F1?alt=media",
                  response_headers=[("Content-Type", "application/json")],
                  response_body=b'{"token": "ya29.file", "refresh_token": "1//0gfile", "client_id": "c"}')
    assert out is not None and out["response"]["body"]["refresh_token"] == "[never captured]"
    rec.close()
    on_disk = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert b"ya29.xyz" not in on_disk and b"1//0gfile" not in on_disk


def test_call_without_answer_gets_an_entry_with_error(tmp_path):
    rec = Recorder(tmp_path)
    e = _record(rec, status=None, response_headers=[], response_body=None, error="upstream refused")
    rec.close()
    assert e["response"]["status"] is None and e["response"]["error"] == "upstream refused"
    assert verify_session(Vault(tmp_path), "s1").intact


def test_mcp_values_are_recorded_redacted_and_spilled(tmp_path):
    rec = Recorder(tmp_path)
    big = "A" * (T + 1)
    mcp = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": "send", "arguments": {"api_key": "sk-live-123", "text": "hi"}}}
    e = _record(rec, capture="gateway", mcp=mcp, method="tools/call", url="stdio:server",
                request_headers=[], request_body=JsonValue(mcp["params"]),
                response_body=JsonValue({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"data": big}]}}))
    rec.close()
    assert e["mcp"]["params"]["arguments"]["api_key"] == "[never captured]"
    assert e["response"]["body"]["result"]["content"][0]["data"]["size"] == T + 1
    with pytest.raises(ContractError):
        Recorder(tmp_path).record(Call.make(
            session="s1", agent="a", principal="p", connector="x", capture="gateway", effect="read", method="m",
            url="u", request_headers=[], request_body=JsonValue({"n": 1e16}), status=200,
            response_headers=[], response_body=None,
        ))


def test_agent_report_takes_effect_from_rules_not_the_agent(tmp_path):
    rec = Recorder(tmp_path)
    e = rec.report_call(
        session="s1", agent="bot", principal="me", method="POST",
        url="https://slack.com/api/conversations.history", status=200,
        request_headers=[("Content-Type", "application/x-www-form-urlencoded")], request_body=b"channel=C1",
    )
    assert (e["capture"], e["connector"], e["effect"]) == ("agent", "slack", "read")
    e = rec.report_call(session="s1", agent="bot", principal="me", method="GET",
                        url="https://slack.com/api/dnd.setSnooze?num_minutes=10", status=200)
    assert e["effect"] == "write"
    with pytest.raises(ContractError, match="connector="):
        rec.report_call(session="s1", agent="bot", principal="me", method="GET", url="https://example.org/x",
                        status=200)
    e = rec.report_call(session="s1", agent="bot", principal="me", method="DELETE", url="https://example.org/x",
                        status=204, connector="example")
    assert (e["connector"], e["effect"]) == ("example", "write")
    rec.close()
    assert [x["seq"] for x in iter_entries(Vault(tmp_path), "s1")] == [1, 2, 3]


def test_gzip_encoded_token_looking_response_is_recorded_with_the_token_redacted(tmp_path):
    rec = Recorder(tmp_path)
    body = gzip.compress(b'{"access_token": "ya29.a0secret", "expires_in": 3599, "token_type": "Bearer"}')
    out = _record(rec, url="https://idp.example.com/custom/exchange", response_body=body,
                  response_headers=[("Content-Type", "application/json"), ("Content-Encoding", "gzip")])
    rec.close()
    assert out["response"]["body"]["access_token"] == "[never captured]"
    assert b"ya29.a0secret" not in b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())


def test_token_exchange_known_only_by_its_body_leaves_no_entry(tmp_path):
    rec = Recorder(tmp_path)
    out = _record(rec, method="POST", url="https://idp.example.com/custom/token",
                  request_headers=[("Content-Type", "application/x-www-form-urlencoded")],
                  request_body=b"grant_type=client_credentials&client_id=abc",
                  response_body=b'{"ok": true}')
    rec.close()
    assert out is None and not list(tmp_path.rglob("*.jsonl"))


def test_recorder_takes_header_fields_as_raw_bytes_or_text(tmp_path):
    """Raw wire bytes are recorded as UTF-8 when valid, else Latin-1 (nothing lost), as text pairs are."""
    from journal.record import text_pairs

    raw = [(b"Content-Type", b"application/json"), (b"X-Odd", b"caf\xe9"), (b"X-Utf8", "é".encode())]
    assert text_pairs(raw) == [("Content-Type", "application/json"), ("X-Odd", "café"), ("X-Utf8", "é")]
    assert text_pairs([(b"A", b"1"), ("B", "2")]) == [("A", "1"), ("B", "2")]  # mixed
    assert text_pairs([(b"A", b"x\x00y")]) == [("A", "x\x00y")]  # a NUL does not shift the pairs
    rec = Recorder(tmp_path)
    f = rec.prepare(Call.make(session="s", agent="a", principal="p", connector="gmail", capture="agent", effect="read",
                    method="GET", url="https://gmail.googleapis.com/x", request_headers=raw[:2], request_body=None,
                    status=200, response_headers=[("Content-Type", "text/plain")], response_body=b"ok"))
    assert f["request"]["headers"] == [["Content-Type", "application/json"], ["X-Odd", "café"]]
    rec.close()


def test_a_blob_that_cannot_be_stored_fails_the_capture_not_the_stream(tmp_path, monkeypatch):
    """A full disk while a body streams: feeding never raises into the proxy, the partial blob is
    removed, and finish() says why (the capture point then fails that call cleanly)."""
    import errno

    from journal.blobstore import BlobError, BlobStore, BlobWriter
    from journal.bodies import BodyCapture

    store = BlobStore(tmp_path)
    real_write = BlobWriter.write
    calls = []

    def full(self, chunk):
        calls.append(len(chunk))
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(self, chunk)

    monkeypatch.setattr(BlobWriter, "write", full)
    cap = BodyCapture(store, "application/octet-stream", None, threshold=1024)
    for _ in range(8):
        cap.feed(b"x" * 4096)  # never raises
    assert cap.failure and "No space left" in cap.failure
    with pytest.raises(BlobError, match="No space left"):
        cap.finish()
    assert not [p for p in (tmp_path / "blobs").rglob("*") if p.is_file()]  # nothing half-written kept
