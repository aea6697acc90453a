"""The capture path's fast paths give exactly what the full paths give (bench/capture_bench.py times them).

Each fast path decides, with one cheap scan, that the full path would change nothing (or does the same
work with fewer copies). These tests run both on random inputs with credentials sprinkled in and
compare the results byte for byte.
"""

from __future__ import annotations

import gzip
import json
import random
import zlib
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import journal.redact as redact
from broker.proxy.service import call_fields
from journal.blobstore import BlobStore
from journal.bodies import BodyCapture, record_body
from journal.call import Call
from journal.record import Recorder, decode_headers, text_pairs_marked
from journal.redact import (
    REDACTED,
    StreamingRedactor,
    contains_credential,
    redact_body,
    redact_headers,
    redact_url,
)
from journal.store.memory_store import MemoryWriter
from tests.journal.test_redact import CONTENT_TYPES, TOKENS

SECRETS = [*TOKENS, quote(TOKENS[0], safe=""), TOKENS[3].replace("-", "+"), "s3cr3t", "hunter2"]
_tokens = st.sampled_from(SECRETS)
_word = st.from_regex(r"[A-Za-z0-9._~\-]{0,12}", fullmatch=True)
_encoded = st.from_regex(r"(?:[A-Za-z0-9._~\-]|%[0-9A-Fa-f]{2}|\+){0,12}", fullmatch=True)
_names = st.sampled_from(["q", "pageToken", "alt", "key", "access_token", "Token", "sig", "x-amz-signature",
                          "upload_id", "pass%77ord", "access%5Ftoken", "token+", "client_secret", "code"])  # fmt: skip


# Encoded texts the body rules read once decoded (a URL, JSON or a form held by a parameter), and some
# they leave (branch redact30).
_nested = st.sampled_from(["https://a.test/cb?access_token=s3cr3t", '{"password": "s3cr3t"}', "a=1&token=s3",
                           "https://a.test/cb?page=2", '{"name": "x"}', "a=1&b=2", "cfg\npassword: s3cr3t",
                           "cfg\nname: x"]).map(lambda t: quote(t, safe=""))  # fmt: skip


@st.composite
def _component(draw: st.DrawFn, names: bool = False) -> str:
    if names:
        return draw(st.one_of(_names, _word, _encoded, _tokens, _nested))
    return draw(st.one_of(_word, _word, _encoded, _tokens, _tokens.map(lambda t: quote(t, safe="")), _nested))


@st.composite
def _params(draw: st.DrawFn) -> str:
    parts = []
    for _ in range(draw(st.integers(0, 5))):
        if draw(st.booleans()):
            parts.append(draw(_component(names=True)) + "=" + draw(_component()))
        else:
            parts.append(draw(_component()))  # a part without '='
    return "&".join(parts)


@st.composite
def urls(draw: st.DrawFn) -> str:
    host = draw(st.sampled_from(["gmail.googleapis.com", "slack.com", "hooks.slack.com", "discord.com",
                                 "api.telegram.org", "x.webhook.office.com", "example.com:8443"]))  # fmt: skip
    userinfo = draw(st.sampled_from(["", "", "", "user:pa55@", "@"]))
    authority = draw(st.sampled_from([f"https://{userinfo}{host}", "", "//" + host]))
    path = "".join("/" + draw(_component()) for _ in range(draw(st.integers(0, 4))))
    url = authority + path
    if draw(st.booleans()):
        url += "?" + draw(_params())
    if draw(st.booleans()):
        url += "#" + (draw(_params()) if draw(st.booleans()) else draw(_component()))
    return url


# What the fast path of redact_url used to let through (query parts without '=', parameter names).
@example(url="https://x.com/a?" + TOKENS[0])
@example(url="https://x.com/a?" + TOKENS[3] + "=1")
@example(url="https://x.com/a?b=1&" + TOKENS[3])
@example(url="https://x.com/a?q=in%3Ainbox&" + quote(TOKENS[0], safe=""))
@example(url="https://x.com/a?pass%77ord=1&q=%2B")
@settings(max_examples=1500, deadline=None)
@given(url=urls())
def test_redact_url_fast_path_equals_full_path(url: str) -> None:
    assert redact_url(url) == redact._redact_url_full(url)


@settings(max_examples=500, deadline=None)
@given(parts=st.lists(st.one_of(_word, _tokens, st.text(max_size=20)), max_size=8),
       sep=st.sampled_from(["", " ", "\n", "/", "\t"]))  # fmt: skip
def test_contains_credential_early_out_equals_the_scan(parts: list[str], sep: str) -> None:
    text = sep.join(parts)
    data = text.encode("utf-8", "surrogatepass")
    full = redact._search(redact._value_re(), None, data, 0, len(data)) is not None
    assert contains_credential(text) is full


# -- bodies ---------------------------------------------------------------------------------------

_KEYS = st.sampled_from(["id", "name", "token", "accessToken", "access-token", "PASSWORD", "pass\\u0077ord",
                         "client_secret", "nextPageToken", "code", "key", "authorization", "refresh_token"])
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(10**6), 10**6), st.floats(allow_nan=False,
                     allow_infinity=False), _word, _tokens, _tokens.map(lambda t: f"see {t} here"),
                     _tokens.map(lambda t: f"https://ex.com/cb?a=1&access_token={t}"))  # fmt: skip
_json = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(_KEYS, inner, max_size=4)), max_leaves=12)


def _dumps(value: object, style: int) -> bytes:
    text = json.dumps(value, indent=2 if style == 1 else None, ensure_ascii=style != 2,
                      separators=(",", ":") if style == 3 else None)  # fmt: skip
    # keys written as "pass\\u0077ord" by the strategy are escapes in the JSON text, not backslashes
    text = text.replace("\\\\u0077", "\\u0077")
    return text.encode("utf-8", "surrogatepass")


def _full_redact(body: bytes, content_type: str | None) -> bytes:
    r = StreamingRedactor(content_type)
    return r.feed(body) + r.close()


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=_json, style=st.integers(0, 3), nested=st.booleans(), content_type=st.sampled_from(CONTENT_TYPES),
       noise=st.binary(max_size=40))  # fmt: skip
def test_redact_body_fast_path_equals_full_scan(value: object, style: int, nested: bool, content_type: str | None,
                                                noise: bytes) -> None:  # fmt: skip
    body = _dumps(value, style)
    if nested:  # JSON inside a JSON string (MCP results, webhook payloads)
        body = json.dumps({"result": body.decode("utf-8", "surrogatepass")}).encode()
    for data in (body, noise + body, body + noise):
        full = _full_redact(data, content_type)
        assert redact_body(data, content_type) == full


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300), content_type=st.sampled_from(CONTENT_TYPES))
def test_redact_body_fast_path_on_random_bytes(data: bytes, content_type: str | None) -> None:
    assert redact_body(data, content_type) == _full_redact(data, content_type)


def test_clean_body_is_returned_without_a_copy() -> None:
    body = b'{"messages": [{"id": "18c2f0a1b2c3d4e5"}], "resultSizeEstimate": 1}' * 100
    assert redact_body(body, "application/json") is body


# -- record_body's fast path against BodyCapture ----------------------------------------------------


def _capture(data: bytes, content_type: str | None, encoding: str | None, store, threshold: int):
    """record_body as it was: no body is null, anything else goes through a BodyCapture."""
    if not data:
        return None, {}
    cap = BodyCapture(store, content_type, encoding, threshold)
    cap.feed(data)
    return cap.finish()


_ENCODINGS = [None, "identity", "gzip", "deflate", "br", "gzip, identity", "x-unknown"]


def _encode(data: bytes, encoding: str | None) -> bytes:
    if encoding in ("gzip", "gzip, identity"):
        return gzip.compress(data)
    if encoding == "deflate":
        return zlib.compress(data)
    if encoding == "br":
        import brotli

        return brotli.compress(data)
    return data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=_json, style=st.integers(0, 3), content_type=st.sampled_from([*CONTENT_TYPES, "application/json"]),
       encoding=st.sampled_from(_ENCODINGS), threshold=st.sampled_from([16, 64, 200, 1 << 20]),
       truncate=st.booleans())  # fmt: skip
def test_record_body_equals_body_capture(tmp_path_factory, value: object, style: int, content_type: str | None,
                                         encoding: str | None, threshold: int, truncate: bool) -> None:  # fmt: skip
    store = BlobStore(tmp_path_factory.mktemp("blobs"))
    data = _encode(_dumps(value, style), encoding)
    if truncate and encoding not in (None, "identity"):
        data = data[: len(data) // 2]  # does not decode: recorded as received, with the error
    assert record_body(data, content_type, encoding, store, threshold) == _capture(
        data, content_type, encoding, store, threshold
    )


# -- headers --------------------------------------------------------------------------------------

_header_names = st.sampled_from(["Authorization", "Cookie", "X-Api-Key", "Content-Type", "Location", "Link", "Referer",
                                 "X-Request-Id", "Sec-WebSocket-Key", "X-Note", "User-Agent", "x-goog-upload-url"])
_header_values = st.one_of(_word, _tokens, _tokens.map(lambda t: f"Bearer {t}"), st.text(max_size=20),
                           urls(), urls().map(lambda u: f"<{u}>; rel=next"))  # fmt: skip


def _headers_one_by_one(headers: list[tuple[str, str]]) -> list[list[str]]:
    """redact_headers without its joined pre-scan: each value checked on its own."""
    out = []
    for name, value in headers:
        kind = redact._header_kind(name)
        if kind == redact._H_CREDENTIAL:
            new = REDACTED
        elif kind == redact._H_PLAIN:
            new = REDACTED if contains_credential(value) else value
        else:
            new = redact._redact_url_full(value) if kind == redact._H_URL else redact._LINK_URL_RE.sub(
                lambda m: "<" + redact._redact_url_full(m.group(1)) + ">", value
            )
            if new != REDACTED and contains_credential(new):
                new = REDACTED
        out.append([name, new])
    return out


@settings(max_examples=500, deadline=None)
@given(headers=st.lists(st.tuples(_header_names, _header_values), max_size=8))
def test_redact_headers_equals_one_by_one(headers: list[tuple[str, str]]) -> None:
    assert redact_headers(headers) == _headers_one_by_one(headers)


# -- request headers decoded once --------------------------------------------------------------------


@pytest.mark.parametrize("fields", [
    ((b"Host", b"gmail.googleapis.com"), (b"Authorization", b"Bearer " + TOKENS[0].encode()), (b"X-Odd", b"caf\xe9")),
    (("Host", "slack.com"), ("X-Note", "plain")),
    (),
])  # fmt: skip
def test_decoded_headers_are_read_as_the_raw_fields(fields) -> None:
    assert text_pairs_marked(decode_headers(fields)) == text_pairs_marked(fields)
    rec = Recorder(MemoryWriter())
    m = {"session": "s", "agent": "a", "principal": None, "connector": "gmail", "method": "GET",
         "url": "https://gmail.googleapis.com/gmail/v1/users/me/labels", "request_headers": fields,
         "request_body": None, "status": 200, "response_headers": (), "response_body": None, "error": None,
         "ts": 1796000000.0, "mcp": None}  # fmt: skip
    half = rec.prepare_request(Call.make(**(m | {"principal": "p", "effect": "read",
                                                 "request_headers": decode_headers(fields)})))
    raw = rec.prepare_request(Call.make(**(m | {"principal": "p", "effect": "read"})))
    assert half == raw
    assert call_fields(rec, Call.make(**m))["request"]["headers"] == raw.fields["request"]["headers"]
    rec.close()


# -- long base64url runs: interiors skipped by the trigger scan ---------------------------------------

_B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_IN_RUN = [*TOKENS, "GOCSPX-" + "a1" * 14, "xapp-1-" + "A0123456789b", "github_pat_" + "x" * 30, "AIza" + "B" * 35,
           "ghp_" + "c" * 36, "xoxb-12345-" + "d" * 20, "eyJhbGciOi." + "eyJzdWIiOi" + "e" * 20, "ya29.a0" + "f" * 30,
           "Bearer " + "g1" * 20, "hooks.slack.com/services/T1/B2/" + "h" * 24, "-----BEGIN PRIVATE KEY-----\nMIIE",
           '", "token": "', "&access_token=", "?code=1&key="]  # fmt: skip


@st.composite
def run_bodies(draw: st.DrawFn) -> bytes:
    rnd = random.Random(draw(st.integers(0, 2**32)))
    n = draw(st.integers(4200, 7000))
    run = [rnd.choice(_B64URL) for _ in range(n)]
    for _ in range(draw(st.integers(0, 3))):
        token = draw(st.sampled_from(_IN_RUN))
        where = draw(st.one_of(st.integers(0, 20), st.integers(0, n), st.integers(max(0, n - 2300), n)))
        run[where:where] = token
    if draw(st.booleans()):  # a JWT whose first segment runs from inside the run to its end
        k = draw(st.integers(5, 2100))
        run[n - k : n - k] = "eyJ"
        run.append("." + "eyJzdWIiOiIxMjM0In0" + "." + "sig")
    data = "".join(run)
    wrap = draw(st.sampled_from(['{"data": "%s"}', '{"raw": "%s", "token": "x"}', "%s", "a=%s&b=1", "--%s--"]))
    return (wrap % data).encode()


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(body=run_bodies(), content_type=st.sampled_from(CONTENT_TYPES), cuts=st.lists(st.integers(0, 20000), max_size=4))
def test_run_interiors_skip_nothing_a_full_scan_finds(body: bytes, content_type: str | None, cuts: list[int]) -> None:
    from tests.journal.test_redact import _stream

    full = _stream(body, content_type, [], triggers=False)  # every rule tried at every byte
    assert redact_body(body, content_type) == full
    assert _stream(body, content_type, cuts) == full  # chunked: runs cut at chunk boundaries


def test_run_interiors_are_found_and_skipped() -> None:
    data = ("".join(_B64URL[(i * 7919) % 64] for i in range(20000))).encode()
    body = b'{"data": "' + data + b'"}'
    skips = redact._run_interiors(body, 0)
    assert skips == [(10 + redact._RUN_HEAD, 10 + len(data) - redact._RUN_TAIL)]
    assert redact_body(body, "application/json") is body
    with_literal = body.replace(data[9000:9007], b"GOCSPX-")  # a head made of base64url characters
    assert redact._run_interiors(with_literal, 0) == []
    assert b"GOCSPX-" in with_literal and redact_body(with_literal, "application/json") != with_literal


_CONTENT_NAMES = ["Content-Type", "content-type", "CONTENT-ENCODING", "Content-Encoding", "Content-Length",
                  "X-Content-Type", "content-typ"]


@given(headers=st.lists(st.tuples(st.sampled_from(_CONTENT_NAMES), _word), max_size=6))
def test_content_headers_in_one_pass_equal_header_value(headers: list[tuple[str, str]]) -> None:
    from journal.record import _content_headers
    from journal.redact import header_value

    both = (header_value(headers, "content-type"), header_value(headers, "content-encoding"))
    assert _content_headers(headers) == both


@given(query=_params())
def test_lazy_query_reads_as_the_parsed_query(query: str) -> None:
    from journal.connectors._http import LazyQuery, parse_query

    parsed, lazy = parse_query(query), LazyQuery(query)
    assert dict(lazy) == parsed and len(lazy) == len(parsed)
    for name in ("upload_id", "query", "operationName", *parsed):
        assert (name in lazy) is (name in parsed)
        assert lazy.get(name) == parsed.get(name)


@settings(max_examples=200, deadline=None)
@given(before=st.binary(max_size=9000), after=st.binary(max_size=100), extra=st.integers(0, 50))
def test_a_long_run_is_never_missed_by_the_window_check(before: bytes, after: bytes, extra: int) -> None:
    run = (_B64URL * 100)[: redact._RUN_MIN + extra].encode()
    assert redact._may_hold_run(before + run + after)


@settings(max_examples=800, deadline=None)
@example(text="token=abc")
@example(text="pass\\u0077ord=x")
@example(text='{"pass\\u0077ord": "x"}')
@given(text=st.one_of(_word, _tokens.map(lambda t: f"see {t} here"), st.text(max_size=30),
                      st.builds(lambda k, v: f"{k}={v}", _names, _word),
                      st.builds(lambda k, v: json.dumps({k: v}), _KEYS, _word)))  # fmt: skip
def test_redact_text_fast_path_equals_the_redactor(text: str) -> None:
    from journal.redact import _redact_text

    raw = text.encode("utf-8", "surrogatepass")
    assert _redact_text(text).encode("utf-8", "surrogatepass") == _full_redact(raw, "text/plain")


# -- the gates: the rules' alternation without named groups ----------------------------------------

_FRAGMENTS = st.sampled_from([
    *(t.encode() for t in SECRETS), b"token=", b"&access_token=", b"?code=", b"\\u0026key=", b'"password": ',
    b'"pass\\u0077ord":"', b'\\"token\\": \\"', b"\nexport API_KEY=", b"Bearer ", b"basic ", b"-----BEGIN ",
    b"Content-Disposition: form-data; name=\"token\"\r\n\r\n", b"<password>", b"%0Atoken=", b"&amp;",
    b"https://u:p@h/", b"postgres://", b"=", b"&", b"\"", b"\\", b"\n", b" ", b"a", b"Z", b"0", b"_", b"-",
    b"\\u000a", b"\\u000d\\u000A", b"\\u0009", b"\\u003d", b"\\\"", b"%0A", b"%0d%0a", b"%09", b"API_KEY:",
    b'\\\\\\"token\\\\\\": \\\\\\"', b"\\\\\\\\",
    b"'password': '", b"'", b'{"name": "api_key", "value": "', b"\n  - token: ",
])  # fmt: skip
_gate_inputs = st.lists(st.one_of(_FRAGMENTS, st.binary(max_size=6)), max_size=14).map(b"".join)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(buf=_gate_inputs, at=st.lists(st.integers(0, 400), max_size=6),
       kind=st.sampled_from([redact._BINARY, redact._TEXT, redact._FORM, redact._MULTI]), esc=st.booleans())
def test_gate_matches_exactly_where_the_rules_do(buf: bytes, at: list[int], kind: str, esc: bool) -> None:
    """`_kind_gate` and `_value_gate` only decide whether the named alternation is tried: they must match
    at exactly the positions where it matches, or a secret there would be skipped."""
    for pos in {0, len(buf), *(p % (len(buf) + 1) for p in at)}:
        named = redact._kind_regex(kind, esc).match(buf, pos)
        assert (redact._kind_gate(kind, esc).match(buf, pos) is None) is (named is None)
        assert (redact._value_gate().match(buf, pos) is None) is (redact._value_re().match(buf, pos) is None)


def _reference_json_value(value: object) -> object:
    """redact_json_value with every fast path off: each string through the plain regex scan."""
    StreamingRedactor._use_triggers = False
    try:
        return redact.redact_json_value(value)
    finally:
        StreamingRedactor._use_triggers = True


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(value={"params": {"arguments": {"note": "token=abc", "pass\\u0077ord": "x"}}})
@example(value=["see Bearer abcdefghijklmnop here", {"a": "x\nexport API_KEY=abc123"}])
@given(value=_json)
def test_redact_json_value_equals_the_plain_scan(value: object) -> None:
    """An MCP message's JSON (params, results): the gated, trigger-scanned redaction gives exactly what
    trying every rule at every byte of every string gives."""
    assert redact.redact_json_value(value) == _reference_json_value(value)
