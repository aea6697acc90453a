"""A session's spans sent to an OTLP/HTTP endpoint in requests of a bounded size (issue 26).

One giant request would hold the whole session in memory and be refused by a real receiver (collectors
cap a request's size: 4 MiB for gRPC by default, a configurable limit over HTTP). So the spans of
`session_trace` (journal/export/otel.py: the very spans `--out` writes) are cut into batches of at most
`max_spans` spans and `max_bytes` bytes of binary protobuf; each batch is a complete
ExportTraceServiceRequest with the session's resource and scope, posted as `application/x-protobuf` to
the URL as given (an OTLP/HTTP traces endpoint ends in `/v1/traces`). Memory holds a batch, not the
session. A single span bigger than `max_bytes` (bodies put on the spans with `--content`) goes alone.

Answers are treated as the OTLP specification (protocol/otlp.md, "OTLP/HTTP Response") has a client
treat them:
- 2xx: the batch is delivered. A `partial_success` in the ExportTraceServiceResponse (the receiver
  dropped some spans and asks that they not be sent again) is reported, and the export goes on.
- 429, 502, 503, 504, or no answer at all (connection refused or dropped, a timeout): the same request
  again, at most `retries` times per batch, after the `Retry-After` the answer gave (seconds or an HTTP
  date), or else after an exponential backoff with jitter. A `Retry-After` over MAX_RETRY_AFTER ends it.
- Any other answer (400 Bad Request, 401, 404, 413 ...) is final: the export stops.
A stop is one PeerError naming the batch, what was sent before it and what was not.

The receiver is not trusted to be well-behaved: an answer's body must be complete `timeout` seconds after the
request (one that trickles in without end is a timeout, as no answer is; httpx's own limit is per read; the
headers are bounded by its parser's size limit) and at most MAX_ANSWER_BYTES of its body (a Status or an
ExportTraceServiceResponse is small; a longer body is not read), and a password in the URL (Basic auth, as
`https://user:token@host/v1/traces` sends it) is never shown: messages name the URL without it.
"""

from __future__ import annotations

import email.utils
import functools
import os
import random
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, cast
from urllib.parse import unquote, urlsplit

import orjson

from journal.errors import InputError, PeerError
from journal.export.otel import otlp_protobuf, session_trace, span_protobuf
from journal.shown_url import display_url
from journal.vault import Vault

if TYPE_CHECKING:
    import httpx
    from google.protobuf.message import Message
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

DEFAULT_BATCH_SPANS = 512
DEFAULT_BATCH_BYTES = 4 << 20  # a collector's gRPC limit by default, and under its HTTP one
DEFAULT_RETRIES = 5
MAX_RETRY_AFTER = 120.0  # seconds: a receiver asking for a longer wait is taken as refusing
RETRYABLE = frozenset({429, 502, 503, 504})
_BACKOFF_FIRST, _BACKOFF_MAX = 0.5, 30.0
_ENVELOPE_SLACK = 10  # how much the ResourceSpans and ScopeSpans length prefixes can grow (5 bytes each)
_PROTOBUF = "application/x-protobuf"
COMPRESSIONS = ("none", "gzip")
_HEADER_ENV = ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS")  # the second wins per name
_COMPRESSION_ENV = ("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION")  # the first wins
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_OURS = frozenset({"content-type", "content-length", "content-encoding", "transfer-encoding", "host", "connection"})
MAX_ANSWER_BYTES = 1 << 20
"""The most of an answer's body read (see the module docstring)."""


@dataclass
class OtlpBatch:
    """One request: its protobuf body and which of the session's spans it carries."""

    index: int  # 1-based
    body: bytes
    spans: int
    first_span: int  # 0-based position of its first span in the session's spans
    total_spans: int  # the session's spans, all batches together
    first_seq: int | None = None  # the entry seqs of its first and last entry spans
    last_seq: int | None = None

    @property
    def root(self) -> bool:
        """Whether it carries the session span (always the first span)."""
        return self.first_span == 0

    def describe(self) -> str:
        """What the batch carries, for a message: `batch 3 (512 spans, seqs 1024-1535)`."""
        return f"batch {self.index} ({_spans_text(self.spans, self.root, self.first_seq, self.last_seq)})"


def _spans_text(spans: int, root: bool, first_seq: int | None, last_seq: int | None) -> str:
    what = [f"{spans} span{'' if spans == 1 else 's'}"]
    if root:
        what.append("the session span")
    if first_seq is not None:
        what.append(f"seq {first_seq}" if first_seq == last_seq else f"seqs {first_seq}-{last_seq}")
    return ", ".join(what)


def _varint_len(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


def _seq(span: dict) -> int | None:
    """The entry seq a span names (`broker.entry.seq`), or None (the session span; an entry without one)."""
    for attr in span.get("attributes", ()):
        if attr.get("key") == "broker.entry.seq":
            value = attr.get("value", {}).get("intValue")
            try:
                return int(value)
            except (TypeError, ValueError):
                return None
    return None


def otlp_batches(vault_root: Vault | str | os.PathLike, session: str, *, content: bool = False,
                 max_spans: int = DEFAULT_BATCH_SPANS, max_bytes: int = DEFAULT_BATCH_BYTES,
                 from_seq: int | None = None) -> Iterator[OtlpBatch]:
    """The session's spans (`session_trace`) as ExportTraceServiceRequest bodies of at most `max_spans`
    spans and `max_bytes` bytes each (a bigger span alone), in order, each built as its entries are read.
    `from_seq`: the rest of an export that stopped (its message names the seq): the spans from the first
    entry span of that seq or later on, without the session span, which the stopped export delivered."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    if max_spans < 1 or max_bytes < 1:
        raise ValueError("a batch holds at least one span and one byte")
    trace = session_trace(vault_root, session, content=content)
    envelope = ExportTraceServiceRequest.FromString(otlp_protobuf(
        {"resourceSpans": [{"resource": trace.resource, "scopeSpans": [{"scope": trace.scope, "spans": []}]}]}))
    empty = envelope.ByteSize() + _ENVELOPE_SLACK
    total = trace.entries + 1
    pending: list[Span] = []
    seqs: list[int] = []  # the first and the last entry seq in `pending`
    size, index, first = empty, 0, 0

    def batch() -> OtlpBatch:
        request = ExportTraceServiceRequest()
        request.CopyFrom(envelope)
        request.resource_spans[0].scope_spans[0].spans.extend(pending)
        return OtlpBatch(index=index, body=request.SerializeToString(), spans=len(pending), first_span=first,
                         total_spans=total, first_seq=seqs[0] if seqs else None, last_seq=seqs[-1] if seqs else None)

    skipping = from_seq is not None
    for span in trace.spans:
        if skipping:
            seq = _seq(span)
            if seq is None or seq < cast(int, from_seq):
                first += 1
                continue
            skipping = False
        message = span_protobuf(span)
        length = message.ByteSize()
        grows = 1 + _varint_len(length) + length  # the field's tag, its length, the span
        if pending and (len(pending) >= max_spans or size + grows > max_bytes):
            index += 1
            yield batch()
            first += len(pending)
            pending, seqs, size = [], [], empty
        pending.append(message)
        size += grows
        if (seq := _seq(span)) is not None:
            seqs = [seqs[0] if seqs else seq, seq]
    if pending:
        index += 1
        yield batch()


@dataclass
class SendReport:
    """What reached the receiver: batches and spans delivered, spans it said it rejected."""

    batches: int = 0
    spans: int = 0
    rejected: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    root: bool = False  # the session span was among them

    def delivered(self, batch: OtlpBatch) -> None:
        self.batches += 1
        self.spans += batch.spans
        self.root = self.root or batch.root
        if self.first_seq is None:
            self.first_seq = batch.first_seq
        if batch.last_seq is not None:
            self.last_seq = batch.last_seq


def retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """The wait a `Retry-After` header asks for, in seconds (delay-seconds or an HTTP date), or None."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # str.isdigit also takes "²" and other digits float() refuses
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def _backoff(attempt: int) -> float:
    """Exponential backoff with jitter (the specification asks for both), for an answer with no Retry-After."""
    return min(_BACKOFF_MAX, _BACKOFF_FIRST * 2 ** attempt) * random.uniform(0.5, 1.0)


def _one_line(text: str, limit: int = 200) -> str:
    return " ".join(text.split())[:limit]


@functools.cache
def _rpc_status() -> type[Message]:
    """google.rpc.Status's code and message (the body of an OTLP/HTTP failure), defined here: the module
    that ships it (googleapis-common-protos) is no dependency of the broker. Its details stay unread."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(name="broker/rpc_status.proto", package="broker.rpc", syntax="proto3")
    status = proto.message_type.add(name="Status")
    status.field.add(name="code", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
                     label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    status.field.add(name="message", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                     label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("broker.rpc.Status"))


@dataclass(frozen=True)
class Answer:
    """What a receiver answered a request: its status, content type, Retry-After and body (None: longer than
    MAX_ANSWER_BYTES, not read)."""

    status: int
    ctype: str
    retry_after: str | None
    body: bytes | None


def otlp_headers(given: Iterable[str], environ: Mapping[str, str]) -> dict[str, str]:
    """The headers every request carries besides the exporter's own (a receiver's API key, a tenant): those of
    OTEL_EXPORTER_OTLP_HEADERS, then OTEL_EXPORTER_OTLP_TRACES_HEADERS (`name=value,name=value`, values
    percent-decoded, as the OpenTelemetry specification has exporters read them), then each `--otlp-header
    NAME=VALUE`; a later one replaces an earlier one of the same name. An entry that is no `NAME=VALUE`, a
    name that is no HTTP token or one the exporter sets, or a value holding a line break, another control
    character or a character outside ASCII is refused, naming
    where it came from and never its value (it is often a credential)."""
    out: dict[str, tuple[str, str]] = {}  # lower-case name -> (name, value)

    def add(name: str, value: str, where: str) -> None:
        name, value = name.strip(), value.strip()
        if not _TOKEN.fullmatch(name):
            raise InputError(f"{where}: {name!r} is no HTTP header name (NAME=VALUE)")
        if name.lower() in _OURS:
            raise InputError(f"{where}: {name} is set by the exporter itself")
        if not all(" " <= c <= "~" or c == "\t" for c in value):  # what an HTTP/1.1 client can send as it is
            raise InputError(f"{where}: the value of {name} holds a line break, a control character or a "
                             "character outside ASCII")
        out[name.lower()] = (name, value)

    for var in _HEADER_ENV:
        for i, item in enumerate(environ.get(var, "").split(","), 1):
            if not item.strip():
                continue
            name, eq, value = item.partition("=")
            if not eq:
                raise InputError(f"{var}: entry {i} is no name=value pair")
            add(name, unquote(value), var)
    for item in given:
        name, eq, value = item.partition("=")
        if not eq:
            raise InputError(f"--otlp-header wants NAME=VALUE, not a bare {name.strip()[:40]!r}")
        add(name, value, "--otlp-header")
    return dict(out.values())


def otlp_compression(given: str | None, environ: Mapping[str, str]) -> str:
    """`--otlp-compression`, else OTEL_EXPORTER_OTLP_TRACES_COMPRESSION, else OTEL_EXPORTER_OTLP_COMPRESSION,
    else none (the specification's default): `gzip` or `none`."""
    where, value = "--otlp-compression", given
    for var in _COMPRESSION_ENV:
        if value is None and environ.get(var):
            where, value = var, environ[var]
    value = (value or "none").strip().lower()
    if value not in COMPRESSIONS:
        raise InputError(f"{where}: {value!r} is no OTLP compression (use gzip or none)")
    return value


def _post(client: httpx.Client, url: str, batch: OtlpBatch, timeout: float,
          compressed: bytes | None = None, headers: Mapping[str, str] | None = None) -> Answer:
    """POST one batch and read its answer within `timeout` seconds in all and MAX_ANSWER_BYTES of body (httpx's
    own timeout is per read: a body trickling in a byte at a time, or without end, would hold the export for
    ever or fill its memory). The body is a one-item iterator of known length: httpx's Response and its stream
    form a cycle that keeps the request (and a body given as bytes) until a full garbage collection; a drained
    iterator holds nothing, so memory stays one batch, not the batches since the last one."""
    import httpx

    payload = batch.body if compressed is None else compressed  # its Content-Encoding is in `headers`
    deadline = time.monotonic() + timeout
    with client.stream("POST", url, content=iter((payload,)), headers={
            **(headers or {}), "Content-Type": _PROTOBUF, "Content-Length": str(len(payload))}) as resp:
        body = bytearray()
        for chunk in resp.iter_bytes():
            if time.monotonic() > deadline:
                raise httpx.ReadTimeout(f"the answer did not end within {timeout:g} s")
            body += chunk
            if len(body) > MAX_ANSWER_BYTES:
                break
        return Answer(resp.status_code, resp.headers.get("content-type", ""), resp.headers.get("retry-after"),
                      None if len(body) > MAX_ANSWER_BYTES else bytes(body))


def _failure_detail(answer: Answer) -> str:
    """What a refusing receiver said: google.rpc.Status's message (protobuf or JSON), else its text."""
    ctype, content = answer.ctype, answer.body
    if content is None:
        return f"an answer of more than {MAX_ANSWER_BYTES >> 20} MiB, not read"
    if ctype.startswith(_PROTOBUF) and content:
        from google.protobuf.message import DecodeError

        try:
            return _one_line(_rpc_status().FromString(content).message)
        except DecodeError:
            return "(an unreadable protobuf Status)"
    if "json" in ctype:
        try:
            body = orjson.loads(content)
        except orjson.JSONDecodeError:
            body = None
        if isinstance(body, dict) and isinstance(body.get("message"), str):
            return _one_line(body["message"])
    return _one_line(content.decode("utf-8", "replace"))


def partial_success(answer: Answer) -> tuple[int, str]:
    """(rejected spans, error message) of a 2xx answer's ExportTraceServiceResponse, protobuf or JSON
    (an empty, unread or unreadable body is a full success: the status said so)."""
    content = answer.body
    if not content:
        return 0, ""
    if "json" in answer.ctype:
        try:
            body = orjson.loads(content)
        except orjson.JSONDecodeError:
            return 0, ""
        partial = body.get("partialSuccess") if isinstance(body, dict) else None
        if not isinstance(partial, dict):
            return 0, ""
        try:
            rejected = int(partial.get("rejectedSpans") or 0)
        except (TypeError, ValueError):
            rejected = 0
        message = partial.get("errorMessage")
        return rejected, _one_line(message) if isinstance(message, str) else ""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    try:
        got = ExportTraceServiceResponse.FromString(content)
    except DecodeError:
        return 0, ""
    return got.partial_success.rejected_spans, _one_line(got.partial_success.error_message)


def _stopped(problem: str, batch: OtlpBatch, report: SendReport) -> PeerError:
    """The one line a stop is: why, at which batch, what was sent before it, what was not."""
    what = _spans_text(report.spans, report.root, report.first_seq, report.last_seq)
    sent = (f"sent {report.spans} of {batch.total_spans} spans in {report.batches} request"
            f"{'' if report.batches == 1 else 's'} before it" + (f" ({what})" if report.spans else ""))
    unsent = batch.total_spans - batch.first_span
    rest = f"not sent: {unsent} span{'' if unsent == 1 else 's'}"
    if batch.first_seq is not None:
        rest += f" (seq {batch.first_seq} on)"
        if not batch.root:  # the session span went: the rest can follow it
            rest += f"; to send them: --otlp-from-seq {batch.first_seq}"
    return PeerError(f"{problem}; stopped at {batch.describe()}: {sent}; {rest}")


def send_otlp(url: str, batches: Iterable[OtlpBatch], *, retries: int = DEFAULT_RETRIES, timeout: float = 30.0,
              warn: Callable[[str], None] = lambda _: None,
              sleep: Callable[[float], None] = time.sleep, headers: Mapping[str, str] | None = None,
              compression: str = "none") -> SendReport:
    """POST each batch to an OTLP/HTTP traces endpoint in turn (one connection, kept alive), as the module
    docstring says; what was delivered. A stop raises PeerError naming how far it got. `headers` go on every
    request (`otlp_headers`); `compression` gzip sends each batch gzipped (`Content-Encoding: gzip`; the
    batch limits count the bytes before compression)."""
    import gzip

    import httpx

    if compression not in COMPRESSIONS:
        raise InputError(f"{compression!r} is no OTLP compression (use gzip or none)")
    extra = dict(headers or {})
    if compression == "gzip":
        extra["Content-Encoding"] = "gzip"

    shown = display_url(url)
    try:
        parts = urlsplit(url)
        usable = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a port out of range, a bracket not closed
        usable = False
    if not usable:
        raise InputError(f"--otlp wants an OTLP/HTTP URL such as http://127.0.0.1:4318/v1/traces, not {shown!r}")
    report = SendReport()
    with httpx.Client(timeout=timeout) as client:
        for batch in batches:
            attempt = 0
            compressed = gzip.compress(batch.body, mtime=0) if compression == "gzip" else None
            while True:
                wait: float | None = None
                try:
                    answer = _post(client, url, batch, timeout, compressed, extra)
                except httpx.RequestError as exc:  # no answer, or none readable (a body that does not decode)
                    problem = f"cannot send spans to {shown}: {exc}; is the OTLP receiver running there?"
                    retryable = True
                else:
                    if 200 <= answer.status < 300:
                        break
                    detail = _failure_detail(answer)
                    problem = f"OTLP endpoint {shown} answered {answer.status}" + (f" ({detail})" if detail else "")
                    retryable = answer.status in RETRYABLE
                    wait = retry_after(answer.retry_after)
                if not retryable:
                    raise _stopped(problem + ", which is final", batch, report)
                if attempt >= retries:
                    tried = f"after {attempt} retr{'y' if attempt == 1 else 'ies'}" if attempt else "not retried"
                    raise _stopped(f"{problem}, {tried}", batch, report)
                if wait is not None and wait > MAX_RETRY_AFTER:
                    raise _stopped(f"{problem}, asking to wait {wait:.0f} s (more than {MAX_RETRY_AFTER:.0f})",
                                   batch, report)
                sleep(_backoff(attempt) if wait is None else wait)
                attempt += 1
            report.delivered(batch)
            rejected, message = partial_success(answer)
            if rejected or message:
                report.rejected += rejected
                warn(f"OTLP endpoint {shown} rejected {rejected} of the spans of {batch.describe()}"
                     + (f": {message}" if message else ""))
    return report
