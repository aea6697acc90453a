"""`broker export --format otel --otlp URL` (issue 26): the session goes as a sequence of bounded OTLP/HTTP
requests whose spans, together, are exactly the `--out` document's; answers are treated as the OTLP
specification says (retry 429/502/503/504 after Retry-After, stop on anything else saying how far it got,
report a partial success). A stand-in receiver on loopback (tests/support/otlp_collector.py) collects."""

from __future__ import annotations

import sys
import tracemalloc
from datetime import UTC, datetime

import orjson
import pytest
from google.protobuf.any_pb2 import Any
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from broker.cli import cli
from broker.cli.exit_codes import run_cli
from journal.errors import PeerError
from journal.export import otlp_send
from journal.export.otel import otlp_protobuf
from journal.export.otlp_send import otlp_batches, retry_after, send_otlp
from tests.support.export_factories import (
    ALL_KINDS,
    SESSION,
    chained_session,
    generated_session,
    http_fields,
)
from tests.support.otlp_collector import Answer, otlp_collector

ALL = ALL_KINDS
PROTOBUF = {"Content-Type": "application/x-protobuf"}


def _export(vault, session: str, url: str, *extra: str) -> int:
    return cli.main(["export", session, "--vault", str(vault), "--format", "otel", "--otlp", url, *extra],
                    standalone_mode=False)


def _out_request(path) -> ExportTraceServiceRequest:
    """The `--out` document as the protobuf request it stands for."""
    return ExportTraceServiceRequest.FromString(otlp_protobuf(orjson.loads(path.read_bytes())))


def _spans(request: ExportTraceServiceRequest) -> list:
    (resource_spans,) = request.resource_spans
    (scope_spans,) = resource_spans.scope_spans
    return list(scope_spans.spans)


def _assert_union_is_the_document(collector, document: ExportTraceServiceRequest, max_spans: int) -> None:
    """Every request is a whole ExportTraceServiceRequest with the document's resource and scope, at most
    `max_spans` spans, to /v1/traces as protobuf; their spans in order are exactly the document's."""
    got = []
    for path, ctype, _ in collector.requests:
        assert path == "/v1/traces" and ctype == "application/x-protobuf"
    for request in collector.accepted():
        assert request.resource_spans[0].resource == document.resource_spans[0].resource
        assert request.resource_spans[0].scope_spans[0].scope == document.resource_spans[0].scope_spans[0].scope
        assert 1 <= len(_spans(request)) <= max_spans
        got.extend(_spans(request))
    assert got == _spans(document)


@pytest.mark.parametrize("session", ALL)
@pytest.mark.parametrize("content", [False, True])
def test_the_requests_spans_are_the_out_documents_spans(vault, tmp_path, session, content):
    """HTTP, MCP over stdio and HTTP, model calls, a WebSocket: batches of 2 spans, content or not."""
    out = tmp_path / "s.json"
    flags = ["--batch-spans", "2", "--out", str(out)] + (["--content"] if content else [])
    with otlp_collector() as collector:
        assert _export(vault, session, collector.url, *flags) == 0
    document = _out_request(out)
    assert len(collector.requests) == (len(_spans(document)) + 1) // 2
    _assert_union_is_the_document(collector, document, 2)


def test_a_session_larger_than_a_batch_goes_in_bounded_requests(tmp_path, capsys):
    """1,200 entries with the default batch (512 spans): three requests, each under the byte cap; with a
    byte cap of 64 KiB, more requests, each within it; the union is the document either way."""
    session = generated_session(tmp_path, 1200)
    out = tmp_path / "s.json"
    with otlp_collector() as collector:
        assert _export(tmp_path, session, collector.url, "--out", str(out)) == 0
    document = _out_request(out)
    assert [len(_spans(r)) for r in collector.accepted()] == [512, 512, 177]
    _assert_union_is_the_document(collector, document, 512)
    assert f"sent {session} to {collector.url}: 1201 spans in 3 requests" in capsys.readouterr().err
    with otlp_collector() as collector:
        assert _export(tmp_path, session, collector.url, "--batch-bytes", str(64 << 10)) == 0
    assert len(collector.requests) > 3
    assert all(len(body) <= 64 << 10 for _, _, body in collector.requests)
    _assert_union_is_the_document(collector, document, 512)


def test_a_span_over_the_byte_cap_goes_alone(tmp_path):
    """With --content a body of 30 KB is on its span: over a 4 KiB cap, it is sent in a request of its own."""
    fields = [http_fields(i) for i in range(1, 6)]
    fields[2]["response"]["body"] = {"big": "y" * 30_000}
    chained_session(tmp_path, "bigspan", fields)
    with otlp_collector() as collector:
        assert _export(tmp_path, "bigspan", collector.url, "--content", "--batch-bytes", "4096") == 0
    sizes = [(len(_spans(r)), len(r.SerializeToString())) for r in collector.accepted()]
    assert (1, max(size for _, size in sizes)) in sizes and max(size for _, size in sizes) > 30_000
    assert all(size <= 4096 for n, size in sizes if size < 30_000)
    assert sum(n for n, _ in sizes) == 6


def test_503_then_200_is_retried_after_retry_after(vault, tmp_path, capsys):
    """Batch 2 meets a 503 (Retry-After: 0), then a 429: the same request goes again until it is taken."""
    out = tmp_path / "s.json"
    script = [Answer(), Answer(503, {"Retry-After": "0"}), Answer(429, {"Retry-After": "0"})]
    with otlp_collector(script) as collector:
        assert _export(vault, SESSION, collector.url, "--batch-spans", "4", "--out", str(out)) == 0
    assert collector.answered == [200, 503, 429, 200, 200]
    assert collector.requests[1][2] == collector.requests[2][2] == collector.requests[3][2]
    _assert_union_is_the_document(collector, _out_request(out), 4)
    assert f"sent {SESSION} to {collector.url}: 9 spans in 3 requests" in capsys.readouterr().err


def test_the_wait_is_the_retry_after_asked_else_a_backoff(vault):
    """Retry-After in seconds and as an HTTP date is waited; without it, a growing backoff with jitter."""
    when = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
    assert retry_after("7") == 7.0
    assert retry_after("Wed, 02 Dec 2026 12:00:30 GMT", now=when) == 30.0
    assert retry_after("Wed, 02 Dec 2026 11:00:00 GMT", now=when) == 0.0
    assert retry_after("soon") is None and retry_after(None) is None
    waits: list[float] = []
    script = [Answer(429, {"Retry-After": "7"}), Answer(502), Answer(504), Answer(503)]
    with otlp_collector(script) as collector:
        report = send_otlp(collector.url, otlp_batches(vault, SESSION), sleep=waits.append)
    assert report.batches == 1 and report.spans == 9 and collector.answered == [429, 502, 504, 503, 200]
    assert waits[0] == 7.0
    assert 0.5 <= waits[1] <= 1.0 and 1.0 <= waits[2] <= 2.0 and 2.0 <= waits[3] <= 4.0  # 0.5 s doubling, jittered


def test_retries_are_bounded(vault):
    waits: list[float] = []
    with otlp_collector([Answer(503, {"Retry-After": "1"})] * 10) as collector:
        with pytest.raises(PeerError, match=r"answered 503, after 2 retries; stopped at batch 1 \(9 spans"):
            send_otlp(collector.url, otlp_batches(vault, SESSION), retries=2, sleep=waits.append)
    assert waits == [1.0, 1.0] and len(collector.requests) == 3
    with otlp_collector([Answer(429, {"Retry-After": "3600"})]) as collector:
        with pytest.raises(PeerError, match="asking to wait 3600 s"):
            send_otlp(collector.url, otlp_batches(vault, SESSION), sleep=waits.append)
    assert len(collector.requests) == 1


def test_a_400_stops_with_one_line_saying_how_far_it_got(vault, monkeypatch, capsys):
    """Batch 3 of 5 is refused (a protobuf google.rpc.Status saying why): nothing more is sent, the CLI
    prints one error line naming the batch, the spans and seqs sent before it and those not sent, exit 2."""
    status = Status(code=3, message="span 7 has a bad trace id", details=[Any(type_url="x/y", value=b"z")])
    status = status.SerializeToString()
    monkeypatch.setitem(sys.modules, "google.rpc.status_pb2", None)  # a test tool's module: no runtime dependency
    with otlp_collector([Answer(), Answer(), Answer(400, PROTOBUF, status)]) as collector:
        monkeypatch.setattr(sys, "argv", ["broker", "export", SESSION, "--vault", str(vault), "--format", "otel",
                                          "--otlp", collector.url, "--batch-spans", "2"])
        assert run_cli(cli) == 2
    assert collector.answered == [200, 200, 400]
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (f"broker: error: OTLP endpoint {collector.url} answered 400 (span 7 has a bad trace id), which "
                    "is final; stopped at batch 3 (2 spans, seqs 4-5): sent 4 of 9 spans in 2 requests before it "
                    "(4 spans, the session span, seqs 1-3); not sent: 5 spans (seq 4 on); to send them: "
                    "--otlp-from-seq 4")


def test_a_refusal_on_the_first_batch_says_nothing_was_sent(vault):
    with otlp_collector([Answer(413, {"Content-Type": "text/plain"}, b"request\nentity too large")]) as collector:
        with pytest.raises(PeerError) as err:
            send_otlp(collector.url, otlp_batches(vault, SESSION, max_spans=5))
    assert str(err.value) == (f"OTLP endpoint {collector.url} answered 413 (request entity too large), which is final; "
                              "stopped at batch 1 (5 spans, the session span, seqs 1-4): sent 0 of 9 spans in 0 "
                              "requests before it; not sent: 9 spans (seq 1 on)")


def test_an_unreachable_receiver_is_retried_then_named(vault, tmp_path):
    from tests.e2e.test_export_otel_receiver import free_port

    url = f"http://127.0.0.1:{free_port()}/v1/traces"
    waits: list[float] = []
    with pytest.raises(PeerError, match=r"cannot send spans to .*receiver running there\?, after 3 retries"):
        send_otlp(url, otlp_batches(vault, SESSION), retries=3, sleep=waits.append)
    assert len(waits) == 3


@pytest.mark.parametrize("json_answer", [False, True])
def test_a_partial_success_is_reported_and_the_export_goes_on(vault, capsys, json_answer):
    partial = ExportTraceServiceResponse()
    partial.partial_success.rejected_spans = 2
    partial.partial_success.error_message = "2 spans too old"
    answer = (Answer(200, {"Content-Type": "application/json"},
                     b'{"partialSuccess": {"rejectedSpans": "2", "errorMessage": "2 spans too old"}}') if json_answer
              else Answer(200, PROTOBUF, partial.SerializeToString()))
    with otlp_collector([Answer(), answer]) as collector:
        assert _export(vault, SESSION, collector.url, "--batch-spans", "4") == 0
    assert collector.answered == [200, 200, 200]
    err = capsys.readouterr().err
    assert (f"broker: warning: OTLP endpoint {collector.url} rejected 2 of the spans of batch 2 (4 spans, seqs 4-7): "
            "2 spans too old") in err
    assert "9 spans in 3 requests, 2 of them rejected by the receiver" in err


def test_memory_is_bounded_by_the_batch_not_the_session(vault, tmp_path):
    """20,000 entries sent in batches: the peak allocated while building and sending them is a small
    fraction of the bytes sent (the whole request held took several times its size: a ratio, not a timing)."""
    chained_session(tmp_path, "big", [http_fields(i) for i in range(1, 20_001)])
    session = "big"
    with otlp_collector(keep=False) as collector:  # the receiver runs in this process: it keeps no body
        send_otlp(collector.url, otlp_batches(vault, SESSION))  # what a first send imports is not the session's
        tracemalloc.start()
        try:
            report = send_otlp(collector.url, otlp_batches(tmp_path, session))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    sent = sum(collector.sizes)
    assert report.spans == 20_001 and report.batches == 40 and collector.answered == [200] * 41
    assert sent > 15_000_000
    assert peak < sent / 4, (peak, sent)


def test_batches_are_cut_from_the_stream(tmp_path, monkeypatch):
    """The first request is built when few entries have been read (the passes that verify and count aside)."""
    from journal.export import fixture, otel

    session = generated_session(tmp_path, 1200)
    drawn = 0
    real = fixture.iter_session_entries

    def counted(*args, **kwargs):
        nonlocal drawn
        for e in real(*args, **kwargs):
            drawn += 1
            yield e

    monkeypatch.setattr(otel, "iter_session_entries", counted)
    monkeypatch.setattr(fixture, "iter_session_entries", counted)
    batches = otlp_batches(tmp_path, session)
    next(batches)
    assert drawn < 1200 + 600, drawn  # the count pass and about a batch of the span pass
    batches.close()


def test_the_batch_bounds_must_be_positive(vault):
    with pytest.raises(ValueError):
        next(otlp_batches(vault, SESSION, max_spans=0))
    assert otlp_send.DEFAULT_BATCH_SPANS == 512


@pytest.mark.parametrize("content", [False, True])
def test_spans_convert_as_protobufs_json_parser_reads_them(vault, tmp_path, content):
    """The field-by-field conversion gives what protobuf's JSON parser gives, for every kind of session, a
    joined and a linked trace context, a broken chain, and shapes it does not know (then the parser does)."""
    from google.protobuf import json_format
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    from journal.export.otel import _ids_to_base64, session_trace, span_protobuf

    spans = [span for session in ALL for span in session_trace(vault, session, content=content).spans]
    odd = dict(spans[1], droppedAttributesCount=3)
    odd_value = dict(spans[1], attributes=[{"key": "k", "value": {"bytesValue": "AAE="}},
                                           {"key": "e", "value": {"arrayValue": {"values": []}}}])
    for span in [*spans, odd, odd_value]:
        assert span_protobuf(span) == json_format.ParseDict(_ids_to_base64(span), Span()), span["name"]
    assert any(s.get("links") for s in spans) and any(s.get("status") for s in spans)
    assert span_protobuf(odd).dropped_attributes_count == 3


def test_a_tampered_line_with_an_integer_past_int64_is_sent_not_a_crash(tmp_path):
    """Whoever writes the vault can put 2^63+5 where a status goes (the chain then says broken): OTLP's
    int64 cannot hold it, so the attribute is its digits as a string, in the file and in the requests alike."""
    from journal.vault import Vault

    chained_session(tmp_path, "tampered", [http_fields(1), http_fields(2), http_fields(3)])
    path = Vault.open_existing(tmp_path).session_path("tampered")
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"status":200', b'"status":%d' % (2**63 + 5))
    path.write_bytes(b"".join(lines))
    out = tmp_path / "s.json"
    with otlp_collector() as collector:
        assert _export(tmp_path, "tampered", collector.url, "--out", str(out)) == 0
    document = _out_request(out)
    _assert_union_is_the_document(collector, document, 512)
    status = {a.key: a.value for a in _spans(document)[2].attributes}["http.response.status_code"]
    assert status.string_value == str(2**63 + 5)
    assert "chain broken at seq 2" in _spans(document)[0].status.message


@pytest.mark.parametrize("url", ["localhost:4318/v1/traces", "ftp://127.0.0.1/v1/traces", "http:///v1/traces",
                                 "http://127.0.0.1:99999/v1/traces", "http://[::1/v1/traces"])
def test_a_url_that_is_no_http_url_is_refused_before_anything_is_read(vault, url):
    from journal.errors import InputError

    with pytest.raises(InputError, match="--otlp wants an OTLP/HTTP URL"):
        send_otlp(url, otlp_batches(vault, SESSION), sleep=pytest.fail)


def test_a_retry_after_of_other_digits_is_no_wait_not_a_crash(vault):
    """`Retry-After: ²` (one Latin-1 byte, a digit to str.isdigit, not to float): the backoff, not a ValueError."""
    assert retry_after("\u00b2") is None and retry_after("\u0663") is None and retry_after("-5") is None
    waits: list[float] = []
    with otlp_collector([Answer(503, {"Retry-After": "\u00b2"})]) as collector:
        report = send_otlp(collector.url, otlp_batches(vault, SESSION), sleep=waits.append)
    assert report.spans == 9 and collector.answered == [503, 200]
    assert len(waits) == 1 and 0.25 <= waits[0] <= 0.5


def test_a_password_in_the_url_is_never_shown(vault, capsys):
    """Basic auth in the URL (how a receiver without header options is given a token): the stop, the warning
    and the CLI's summary name the URL without the password."""
    refused = Answer(400, {"Content-Type": "text/plain"}, b"no")
    partial = Answer(200, {"Content-Type": "application/json"},
                     b'{"partialSuccess": {"rejectedSpans": "1", "errorMessage": "late"}}')
    with otlp_collector([partial, refused]) as collector:
        url = collector.url.replace("http://", "http://agent:s3cret-token@")
        with pytest.raises(PeerError) as err:
            send_otlp(url, otlp_batches(vault, SESSION, max_spans=5),
                      warn=lambda message: print(message, file=sys.stderr))
        assert _export(vault, SESSION, url) == 0
    shown = collector.url.replace("http://", "http://agent:***@")
    said = str(err.value) + capsys.readouterr().err
    assert "s3cret" not in said
    assert f"OTLP endpoint {shown} answered 400" in said and f"OTLP endpoint {shown} rejected 1" in said
    assert f"to {shown}: 9 spans in 1 request" in said


def _trickled(pieces: int, every: float, piece: bytes = b"x"):
    import time

    for _ in range(pieces):
        time.sleep(every)
        yield piece


def test_an_answer_that_trickles_without_end_is_a_timeout_not_a_hang(vault):
    """200 and its headers at once, then a body of one byte every 50 ms (never a whole `timeout` without a byte,
    httpx's per-read limit): the answer is given up `timeout` after the request, as no answer would be, and
    retried within the bound. Without the overall limit the export waited for the whole trickle (and took it)."""
    slow = [Answer(200, stream=_trickled(100, 0.05), length=100) for _ in range(2)]
    with otlp_collector(slow) as collector:
        with pytest.raises(PeerError, match=r"the answer did not end within 0.5 s.*after 1 retry; stopped at batch 1"):
            send_otlp(collector.url, otlp_batches(vault, SESSION), retries=1, timeout=0.5, sleep=lambda _: None)
    assert collector.answered == [200, 200]


def test_an_endless_answer_is_not_read_into_memory(vault):
    """A receiver answering 200 with 64 MiB (a stream it never ends, as far as the exporter can tell): at most
    MAX_ANSWER_BYTES of it is read, the status counts (the batch is delivered) and the rest is left unread."""
    def huge() -> Answer:
        return Answer(200, {"Content-Type": "application/x-protobuf"}, stream=(b"\0" * (1 << 20) for _ in range(64)),
                      length=64 << 20)

    with otlp_collector([huge()]) as collector:
        send_otlp(collector.url, otlp_batches(vault, SESSION, max_spans=5))  # imports: not the answer's memory
    with otlp_collector([Answer(), huge()]) as collector:
        tracemalloc.start()
        try:
            report = send_otlp(collector.url, otlp_batches(vault, SESSION, max_spans=5))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert report.batches == 2 and report.spans == 9
    assert peak < 8 << 20, peak  # about 3 MiB: an answer chunk on each side, the 1 MiB read


def test_headers_and_gzip_as_an_otel_exporter_takes_them(vault, monkeypatch, capsys):
    """A receiver's API key from OTEL_EXPORTER_OTLP_HEADERS (percent-decoded), overridden per name by
    --otlp-header; gzip from the environment: every request carries them, and the spans are the same."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-honeycomb-team=env%20key,x-tenant=acme")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    with otlp_collector() as plain:
        assert _export(vault, SESSION, plain.url, "--otlp-compression", "none") == 0
    with otlp_collector() as collector:
        assert _export(vault, SESSION, collector.url, "--otlp-header", "X-Honeycomb-Team=cli-key",
                       "--batch-spans", "4") == 0
    assert len(collector.headers) == 3
    for seen in collector.headers:
        assert seen["x-honeycomb-team"] == "cli-key" and seen["x-tenant"] == "acme"
        assert seen["content-encoding"] == "gzip" and seen["content-type"] == "application/x-protobuf"
    assert all("content-encoding" not in seen for seen in plain.headers)
    assert [s for r in collector.accepted() for s in _spans(r)] == [s for r in plain.accepted() for s in _spans(r)]
    assert sum(collector.sizes) < sum(plain.sizes)
    assert "cli-key" not in capsys.readouterr().err


@pytest.mark.parametrize(("env", "args", "message"), [
    ({}, ["--otlp-header", "no-equals-sign"], "--otlp-header wants NAME=VALUE"),
    ({}, ["--otlp-header", "Content-Type=text/plain"], "Content-Type is set by the exporter itself"),
    ({}, ["--otlp-header", "bad name=secret-value"], "is no HTTP header name"),
    ({}, ["--otlp-header", "X-Key=secret-value\r\nX-Injected: 1"], "holds a line break"),
    ({"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-key=secret-value,broken"}, [], "entry 2 is no name=value pair"),
    ({"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-key=secret%0d%0aX-Injected: 1"}, [], "holds a line break"),
    ({}, ["--otlp-header", "X-Key=secret-café"], "outside ASCII"),  # httpx could not encode it: a traceback
    ({"OTEL_EXPORTER_OTLP_HEADERS": "x-key=secret%C3%A9"}, [], "outside ASCII"),
    ({}, ["--otlp-header", "X-Key=secret\x7f"], "a control character"),
    ({"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}, [], "'zstd' is no OTLP compression"),
])
def test_bad_headers_and_compressions_are_refused_before_anything_is_sent(vault, monkeypatch, capsys, env, args,
                                                                          message):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with otlp_collector() as collector:
        monkeypatch.setattr(sys, "argv", ["broker", "export", SESSION, "--vault", str(vault), "--format", "otel",
                                          "--otlp", collector.url, *args])
        assert run_cli(cli) == 2
    assert collector.requests == []
    (line,) = capsys.readouterr().err.splitlines()
    assert message in line and "secret" not in line


def test_the_rest_of_a_stopped_export_is_sent_from_the_seq_it_names(vault, monkeypatch, capsys):
    """A 400 at batch 3 names the seq to go on from; sent again with --otlp-from-seq, the receiver gets exactly
    the spans it did not get (no session span again), and the two runs together are the whole document."""
    with otlp_collector() as whole:
        assert _export(vault, SESSION, whole.url, "--batch-spans", "2") == 0
    everything = [s for r in whole.accepted() for s in _spans(r)]
    with otlp_collector([Answer(), Answer(), Answer(400)]) as collector:
        monkeypatch.setattr(sys, "argv", ["broker", "export", SESSION, "--vault", str(vault), "--format", "otel",
                                          "--otlp", collector.url, "--batch-spans", "2"])
        assert run_cli(cli) == 2
        err = capsys.readouterr().err
        assert "to send them: --otlp-from-seq 4" in err
        assert _export(vault, SESSION, collector.url, "--batch-spans", "2", "--otlp-from-seq", "4") == 0
    sent = [s for r in collector.accepted() for s in _spans(r)]
    assert sent == everything and len(sent) == 9
    assert "sent export-1 to" in capsys.readouterr().err


def test_a_refusal_of_the_first_batch_names_no_seq_to_go_on_from(vault, monkeypatch, capsys):
    with otlp_collector([Answer(401)]) as collector:
        monkeypatch.setattr(sys, "argv", ["broker", "export", SESSION, "--vault", str(vault), "--format", "otel",
                                          "--otlp", collector.url, "--batch-spans", "2"])
        assert run_cli(cli) == 2
    assert "--otlp-from-seq" not in capsys.readouterr().err
