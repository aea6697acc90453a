"""Model-call entries: the bodies of a call to a model API with every text referenced.

Called by the recording service (`broker.proxy.service`) for calls the addon marks with
`model_api` and `prompts` (the mode). Order, as for every body: decoded, redacted, then the texts
are replaced by references (so in `full` mode no credential reaches a blob either).

Request: the JSON body with texts referenced, plus `request.prompt_capture` (the mode) and
`request.model_api`. Response: the JSON body referenced the same way; a streamed response (SSE,
or Gemini's JSON array of chunks) is recorded as the message its events build, in the API's
non-streamed shape, with `response.stream` = `{"format", "events", "sha256", "size"}` describing the
stream as received (hash and size of the decoded bytes; the bytes themselves are not kept).
A body that is not JSON is one reference.

Connector calls recorded while prompt capture is on carry `response.body_sha256`: the SHA-256 of
the decoded, redacted response body, which is what an agent usually shows the model as the tool
result (`journal.trajectory` matches tool results against it).
"""

from __future__ import annotations

import hashlib

from msgspec.structs import replace

from journal.bodies import JSON_PARSE_LIMIT, decoded_prefix, media_type, parse_json_strict
from journal.call import Call, Prepared, Response
from journal.models import APIS
from journal.models.refs import Referencer
from journal.record import Recorder, text_pairs
from journal.redact import header_value, redact_body, redact_json_value

MODEL_BODY_LIMIT = 64 << 20
"""Model bodies are decoded whole up to this size; a larger one is kept as one reference."""


def _plain(body: bytes, headers: list[tuple[str, str]]) -> bytes | None:
    return decoded_prefix(body, header_value(headers, "content-encoding"), MODEL_BODY_LIMIT)


def _opaque(r: Referencer, body: bytes, ctype: str | None) -> object:
    """A body that is not JSON (or too big): one reference over its redacted bytes."""
    return r.raw(redact_body(body, ctype))


def request_material(recorder: Recorder, call: Call) -> Call:
    """A model call with its request body referenced and its effect read."""
    assert call.prompts and call.model_api  # `complete` sends only model calls with prompt capture on
    mode, api = call.prompts, APIS[call.model_api]
    headers = text_pairs(call.request.headers)
    body = call.request.body
    extra = {"prompt_capture": mode, "model_api": api.NAME}

    def out(prepared: Prepared) -> Call:
        return replace(call, effect="read", request=replace(call.request, headers=headers, body=prepared))

    if not isinstance(body, bytes) or not body:
        # The addon never streams a model call's request (it could not be referenced): no body here.
        why = {"body_error": "request body not captured"} if body is not None else {}
        return out(Prepared(None, {**extra, **why}))
    r = Referencer(mode, recorder.blobs)
    ctype = header_value(headers, "content-type")
    plain = _plain(body, headers)
    if plain is None:
        return out(Prepared(_opaque(r, body, ctype), {**extra, "content_encoding_error": "not decoded"}))
    ok, value = parse_json_strict(plain)
    if ok and isinstance(value, dict):
        value = api.reference_request(redact_json_value(value), r)
    else:
        value = _opaque(r, plain, ctype)
    return out(Prepared(value, extra))


def response_material(recorder: Recorder, call: Call) -> Call:
    """A model call with its response body referenced (streams assembled)."""
    assert call.prompts and call.model_api  # `complete` sends only model calls with prompt capture on
    mode, api = call.prompts, APIS[call.model_api]
    resp = call.response or Response()
    headers = text_pairs(resp.headers or ())
    body = resp.body

    def out(prepared: Prepared | None) -> Call:
        return replace(call, response=replace(resp, headers=headers, body=prepared if prepared is not None else body))

    if not isinstance(body, bytes) or not body:
        return out(None)
    r = Referencer(mode, recorder.blobs)
    ctype = header_value(headers, "content-type")
    plain = _plain(body, headers)
    if plain is None:
        return out(Prepared(_opaque(r, body, ctype), {"content_encoding_error": "not decoded"}))
    extra: dict = {}
    value: object = None
    if media_type(ctype) == "text/event-stream":
        assembled = api.assemble_stream(plain)
        extra["stream"] = _stream_info("sse", plain)
        value = assembled
    else:
        ok, parsed = parse_json_strict(plain)
        if ok and isinstance(parsed, list) and api.NAME == "gemini":
            from journal.models.gemini import merge_chunks

            extra["stream"] = _stream_info("json-array", plain, len(parsed))
            value = merge_chunks(parsed)
        elif ok and isinstance(parsed, dict):
            value = parsed
    if isinstance(value, dict):
        return out(Prepared(api.reference_response(redact_json_value(value), r), extra))
    return out(Prepared(_opaque(r, plain, ctype), extra))


def _stream_info(fmt: str, plain: bytes, events: int | None = None) -> dict:
    if events is None:
        from journal.sse import parse_events

        events = len(parse_events(plain))
    return {"format": fmt, "events": events, "sha256": hashlib.sha256(plain).hexdigest(), "size": len(plain)}


def body_digest(response: Response | None) -> dict:
    """`{"body_sha256": ...}` for a connector call's response recorded while prompt capture is on:
    the SHA-256 of its decoded, redacted body (what a tool result shown to the model would hold)."""
    body = response.body if response is not None else None
    if not isinstance(body, bytes) or not body:
        return {}
    assert response is not None  # it held the body
    headers = text_pairs(response.headers or ())
    plain = decoded_prefix(body, header_value(headers, "content-encoding"), JSON_PARSE_LIMIT)
    if plain is None:
        return {}
    return {"body_sha256": hashlib.sha256(redact_body(plain, header_value(headers, "content-type"))).hexdigest()}


def complete(recorder: Recorder, call: Call, *, request: bool) -> Call:
    """The hook the recording service calls on every call (request half, then response half):
    model calls get their bodies referenced; connector calls recorded with prompt capture on get
    `response.body_sha256`. A call without `prompts` is returned as it is."""
    if not call.prompts:
        return call
    if call.model_api:
        from journal.models.websocket import is_message, message_material

        if is_message(call):  # a message of a model WebSocket (Realtime, Gemini Live)
            return message_material(recorder, call, request=request)
        return request_material(recorder, call) if request else response_material(recorder, call)
    if request:
        return call
    digest = body_digest(call.response)
    if not digest:
        return call
    assert call.response is not None
    return replace(call, response=replace(call.response, extra={**(call.response.extra or {}), **digest}))


class StreamHold:
    """A model response streaming through the proxy (SSE): the bytes are held in memory as they pass
    so the entry can reference the assembled message; nothing is written to the blob store (in
    `refs` mode nothing may be). Same `feed` / `abort` as `journal.bodies.BodyCapture`. Beyond
    `limit` bytes only the hash and size of the stream are kept (and the entry says so)."""

    def __init__(self, limit: int = MODEL_BODY_LIMIT) -> None:
        self._buf = bytearray()
        self._hash = hashlib.sha256()
        self._size = 0
        self.limit = limit

    def feed(self, data: bytes) -> None:
        self._hash.update(data)
        self._size += len(data)
        if self._size <= self.limit:
            self._buf += data
        elif self._buf:
            self._buf = bytearray()

    def data(self) -> bytes | Prepared | None:
        """The stream's bytes; past the limit, a `Prepared` reference to them (hash and size, as
        received: possibly content-encoded) with `prompt_capture_error`."""
        if self._size > self.limit:
            return Prepared({"sha256": self._hash.hexdigest(), "size": self._size}, {
                "prompt_capture_error": f"stream over {self.limit} bytes: kept as its hash and size only"})
        return bytes(self._buf) or None

    def abort(self) -> None:
        self._buf = bytearray()
