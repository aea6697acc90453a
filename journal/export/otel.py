"""A session as OpenTelemetry spans (OTLP/JSON), after the GenAI and MCP semantic conventions.

- The session is one trace, under a root span `session {id}`; each entry is one span, its span id
  the first 16 hex digits of the entry's hash (stable: exporting twice gives the same ids).
- Gateway entries (MCP): MCP client spans `{mcp.method.name} {target}` (kind CLIENT; target the tool
  or prompt name) with `mcp.method.name`, `mcp.session.id` and `mcp.protocol.version` (when the call
  carried them), `jsonrpc.request.id`, `network.transport`; a `tools/call` adds
  `gen_ai.operation.name=execute_tool` and `gen_ai.tool.name`; on failure `error.type` (the JSON-RPC
  code, or `tool_error` for `isError`) and `rpc.response.status_code`.
- Model calls (prompt capture): GenAI client spans `{gen_ai.operation.name} {gen_ai.request.model}`
  (kind CLIENT) with the provider, models, response id, finish reasons and token counts
  (journal/export/model_span.py).
- WebSocket messages: `websocket send|receive` (INTERNAL), naming their handshake entry.
- Other entries (HTTP): HTTP client spans (kind CLIENT) named by the method, with
  `http.request.method`, `url.full` (as recorded, redactions included), `server.address`,
  `server.port`, `http.response.status_code` and `error.type`.
- Every span: `gen_ai.conversation.id` (the session), `gen_ai.agent.name`, and `broker.*` attributes
  (ours, not the conventions') naming the entry (seq, hash, prev, connector, effect, capture,
  answered_by, principal, prompt_ref), so `broker verify-export` can check the chain in the file.
- Content is off by default: bodies are referenced (`broker.request.body.sha256` is the SHA-256 of the
  recorded body's canonical form; every blob a body spilled to is named: `broker.*.body.ref` for a
  whole body, `broker.*.body.blob_refs` / `.blob_pointers` for strings spilled inside a JSON body).
  `content=True` adds them (`gen_ai.tool.call.arguments` / `.result` for tools, `broker.*.body`
  otherwise), as recorded.
- Trace context: when calls carried W3C trace context (an HTTP `traceparent` header, or MCP
  `params._meta.traceparent`) and all of it names one trace, the session is exported into that
  trace and each such span is the child of the agent's span that made the call. Otherwise the trace
  id is derived from the session id and each span links to the context it carried.
- Times: the journal records when the answer arrived (`ts`), not when the call left, so an entry's
  span starts and ends at `ts`.

OTLP/JSON as the OTLP specification gives it: lowerCamelCase names, trace and span ids in hex,
64-bit integers as strings, enums as numbers. journal/export/otlp_send.py posts the same spans to an
OTLP/HTTP endpoint as binary protobuf (through opentelemetry-proto), the encoding every receiver
accepts, in requests of a bounded size.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import os
import re
from collections.abc import Iterator
from itertools import chain
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlsplit

import orjson

from journal.blobstore import is_ref_object
from journal.canonical import canonical_bytes
from journal.entry import parse_ts
from journal.export.fixture import EntryTally, body_digest, chain_verdict, counted_entries, iter_session_entries
from journal.export.model_span import ModelCall, model_call
from journal.export.recorded_body import header, spilled_refs
from journal.export.streamed_json import ArrayMark, streamed_document
from journal.reader import open_vault
from journal.redact import REDACTED
from journal.vault import Vault
from journal.verify import verify_session

if TYPE_CHECKING:
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

SCOPE = "connector-broker.journal"
KIND_INTERNAL, KIND_CLIENT = 1, 3
STATUS_ERROR = 2
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16
PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"
"""Where a 2026-era MCP request carries its protocol version (`params._meta`; the shim's name for it too)."""


def parse_traceparent(value: object) -> tuple[str, str, int] | None:
    """(trace id, span id, flags) of a W3C `traceparent` value, or None when it is not a valid one."""
    if not isinstance(value, str):
        return None
    m = _TRACEPARENT.fullmatch(value.strip().lower())
    if m is None or m.group(1) == "ff" or m.group(2) == _ZERO_TRACE or m.group(3) == _ZERO_SPAN:
        return None
    return m.group(2), m.group(3), int(m.group(4), 16)


def trace_context(entry: dict) -> tuple[str, str, int, str, str | None] | None:
    """(trace id, span id, flags, where it was found, tracestate) the call carried, or None."""
    mcp = entry.get("mcp")
    meta = mcp.get("params", {}).get("_meta") if isinstance(mcp, dict) and isinstance(mcp.get("params"), dict) else None
    if isinstance(meta, dict) and (ctx := parse_traceparent(meta.get("traceparent"))):
        state = meta.get("tracestate")
        return (*ctx, "mcp.params._meta", state if isinstance(state, str) else None)
    headers = (entry.get("request") or {}).get("headers") or []
    if ctx := parse_traceparent(header(headers, "traceparent")):
        return (*ctx, "http.header", header(headers, "tracestate"))
    return None


def _value(value: object) -> dict:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):  # an integer OTLP's int64 cannot hold (a tampered line's) stays its digits
        return {"intValue": str(value)} if -(1 << 63) <= value < 1 << 63 else {"stringValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [_value(v) for v in value]}}
    return {"stringValue": str(value)}


def _attr(key: str, value: object) -> dict:
    return {"key": key, "value": _value(value)}


def _attrs(pairs: dict) -> list[dict]:
    return [_attr(k, v) for k, v in pairs.items() if v is not None]


def _nanos(ts: str) -> str:
    dt = parse_ts(ts)
    return str(int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1000)


def _body_refs(prefix: str, body: object, content: bool) -> dict:
    """The references to a recorded body: its digest, and every blob it spilled to, a whole body
    (`.ref`) or strings inside a JSON body (`.blob_refs`, with their JSON Pointers in `.blob_pointers`)."""
    out: dict = {f"{prefix}.body.sha256": body_digest(body)}
    refs = spilled_refs(body)
    if is_ref_object(body):
        out[f"{prefix}.body.ref"] = body["ref"]  # type: ignore[index]
    elif refs:
        out[f"{prefix}.body.blob_refs"] = [r["ref"] for _, r in refs]
        out[f"{prefix}.body.blob_pointers"] = [p for p, _ in refs]
    if content and body is not None:
        out[f"{prefix}.body"] = body if isinstance(body, str) else canonical_bytes(body).decode("utf-8")
    return out


def _server(url: str) -> dict:
    try:
        parts = urlsplit(url)
        port = parts.port or {"http": 80, "https": 443, "ws": 80, "wss": 443}.get(parts.scheme)
    except ValueError:
        return {}
    return {"server.address": parts.hostname, "server.port": port} if parts.hostname else {}


def mcp_protocol_version(entry: dict) -> str | None:
    """The MCP protocol version a call was made under: its `MCP-Protocol-Version` header (HTTP), or the
    2026-era `params._meta["io.modelcontextprotocol/protocolVersion"]` the request carried."""
    headers = (entry.get("request") or {}).get("headers") or []
    if (version := header(headers, "mcp-protocol-version")) and version != REDACTED:
        return version
    mcp = entry.get("mcp")
    params = mcp.get("params") if isinstance(mcp, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    value = meta.get(PROTOCOL_VERSION_META) if isinstance(meta, dict) else None
    return value if isinstance(value, str) else None


def mcp_session_id(entry: dict) -> str | None:
    """The MCP session a call belongs to: the `Mcp-Session-Id` header it carried (streamable HTTP before
    the 2026 era; stdio and the 2026 era have no MCP session)."""
    value = header((entry.get("request") or {}).get("headers") or [], "mcp-session-id")
    return value if value and value != REDACTED else None


def _gateway(entry: dict, content: bool) -> tuple[str, int, dict, str | None, str | None]:
    """An MCP call as an MCP client span (`{mcp.method.name} {target}`, CLIENT)."""
    req, resp = entry["request"], entry["response"]
    mcp = got if isinstance(got := entry.get("mcp"), dict) else {}
    method = mcp.get("method") or req.get("method")
    params = got if isinstance(got := mcp.get("params"), dict) else {}
    body = got if isinstance(got := resp.get("body"), dict) else {}
    url = str(req.get("url") or "")
    stdio = url.startswith("stdio:")
    attrs: dict = {"mcp.method.name": method, "network.transport": "pipe" if stdio else "tcp",
                   "mcp.session.id": mcp_session_id(entry), "mcp.protocol.version": mcp_protocol_version(entry)}
    if mcp.get("id") is not None:
        attrs["jsonrpc.request.id"] = str(mcp["id"])
    if isinstance(mcp.get("jsonrpc"), str) and mcp["jsonrpc"] != "2.0":
        attrs["jsonrpc.protocol.version"] = mcp["jsonrpc"]
    if not stdio:
        attrs.update(_server(url))
        attrs["network.protocol.name"] = "http"
    error = message = None
    if isinstance(body.get("error"), dict):
        code = body["error"].get("code")
        error = str(code)
        attrs["rpc.response.status_code"] = str(code)
        if isinstance(body["error"].get("message"), str):
            message = body["error"]["message"]
    elif isinstance(body.get("result"), dict) and body["result"].get("isError") is True:
        error = "tool_error"
    elif resp.get("status") is None or resp.get("error"):
        error = "no_response" if resp.get("status") is None else str(resp.get("status"))
    target = None
    if method == "tools/call":
        target = params.get("name") if isinstance(params.get("name"), str) else None
        attrs.update({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": target})
        if content:
            attrs["gen_ai.tool.call.arguments"] = canonical_bytes(params.get("arguments")).decode()
            if "result" in body:
                attrs["gen_ai.tool.call.result"] = canonical_bytes(body["result"]).decode()
    elif method == "prompts/get" and isinstance(params.get("name"), str):
        target = params["name"]
        attrs["gen_ai.prompt.name"] = target
    if isinstance(params.get("uri"), str):
        attrs["mcp.resource.uri"] = params["uri"]  # never in the name: high cardinality
    attrs.update(_body_refs("broker.request", req.get("body"), content and method != "tools/call"))
    attrs.update(_body_refs("broker.response", resp.get("body"), content and method != "tools/call"))
    return (f"{method} {target}" if target else str(method)), KIND_CLIENT, attrs, error, message


_HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "QUERY"})


def _http(entry: dict, content: bool) -> tuple[str, int, dict, str | None, str | None]:
    """An HTTP exchange as an HTTP client span (named by the method, CLIENT)."""
    req, resp = entry["request"], entry["response"]
    url, status = str(req.get("url")), resp.get("status")
    method = str(req.get("method"))
    known = method in _HTTP_METHODS
    attrs: dict = {"http.request.method": method if known else "_OTHER", "url.full": url,
                   "url.scheme": urlsplit(url).scheme}
    if not known:
        attrs["http.request.method_original"] = method
    attrs.update(_server(url))
    error = None
    if isinstance(status, int):
        attrs["http.response.status_code"] = status
        if status >= 400:
            error = str(status)
    else:
        error = "no_response"
    attrs.update(_body_refs("broker.request", req.get("body"), content))
    attrs.update(_body_refs("broker.response", resp.get("body"), content))
    return (method if known else "HTTP"), KIND_CLIENT, attrs, error, None


def _model(entry: dict, call: ModelCall, content: bool) -> tuple[str, int, dict, str | None, str | None]:
    """A model call as a GenAI client span (`{gen_ai.operation.name} {gen_ai.request.model}`, CLIENT)."""
    req, resp = entry["request"], entry["response"]
    status = resp.get("status")
    attrs: dict = dict(call.attributes)
    attrs.update(_server(str(req.get("url"))))
    error = None
    if not isinstance(status, int):
        error = "no_response"
    elif status >= 400 and not isinstance(req.get("websocket"), dict):
        error = str(status)
    attrs.update(_body_refs("broker.request", req.get("body"), content))
    attrs.update(_body_refs("broker.response", resp.get("body"), content))
    name = f"{call.operation} {call.request_model}" if call.request_model else call.operation
    return name, KIND_CLIENT, attrs, error, None


def _websocket(entry: dict, ws: dict, content: bool) -> tuple[str, int, dict, str | None, str | None]:
    """A WebSocket message (docs/contract.md section 8): `websocket send|receive`, INTERNAL, under the
    connection its handshake opened (`broker.websocket.handshake` is the handshake entry's hash)."""
    req, resp = entry["request"], entry["response"]
    sent = ws.get("direction") == "client_to_server"
    url = str(req.get("url"))
    attrs: dict = {"url.full": url, "network.protocol.name": "websocket", **_server(url),
                   "broker.websocket.handshake": ws.get("handshake"), "broker.websocket.direction": ws.get("direction"),
                   "broker.websocket.kind": ws.get("kind"), "broker.websocket.message": ws.get("message")}
    attrs.update(_body_refs("broker.request", req.get("body"), content))
    attrs.update(_body_refs("broker.response", resp.get("body"), content))
    return f"websocket {'send' if sent else 'receive'}", KIND_INTERNAL, attrs, None, None


def span_shape(entry: dict, content: bool) -> tuple[str, int, dict, str | None, str | None]:
    """(name, kind, attributes, error.type, status message) of an entry's span, by what the entry is."""
    req = entry.get("request") or {}
    ws = req.get("websocket")
    if entry.get("capture") == "gateway":
        return _gateway(entry, content)
    if (call := model_call(entry)) is not None:
        return _model(entry, call, content)
    if req.get("method") == "WEBSOCKET" and isinstance(ws, dict):
        return _websocket(entry, ws, content)
    return _http(entry, content)


def entry_span(entry: dict, trace_id: str, parent: str, ctx: tuple | None, joined: bool, content: bool) -> dict:
    """One entry as an OTLP span (see the module docstring)."""
    name, kind, attrs, error, message = span_shape(entry, content)
    resp = entry.get("response") or {}
    if error is not None:
        attrs["error.type"] = error
    attrs.update({
        "gen_ai.conversation.id": entry.get("session"), "gen_ai.agent.name": entry.get("agent"),
        "broker.session": entry.get("session"), "broker.entry.seq": entry.get("seq"),
        "broker.entry.hash": entry.get("hash"), "broker.entry.prev": entry.get("prev"),
        "broker.connector": entry.get("connector"),
        "broker.effect": entry.get("effect"), "broker.capture": entry.get("capture"),
        "broker.principal": entry.get("principal"), "broker.prompt_ref": entry.get("prompt_ref"),
        "broker.answered_by": resp.get("answered_by"),
        "broker.playback_of": (entry.get("request") or {}).get("playback_of"),
    })
    at = _nanos(entry["ts"])
    span: dict = {
        "traceId": trace_id, "spanId": str(entry["hash"])[:16], "parentSpanId": parent, "name": name, "kind": kind,
        "startTimeUnixNano": at, "endTimeUnixNano": at, "attributes": _attrs(attrs),
    }
    if ctx is not None:
        if joined:
            span["parentSpanId"] = ctx[1]
            if ctx[4]:
                span["traceState"] = ctx[4]
        else:
            link = {"traceId": ctx[0], "spanId": ctx[1], "attributes": _attrs({"broker.trace_context.source": ctx[3]})}
            if ctx[4]:
                link["traceState"] = ctx[4]
            span["links"] = [link]
    if error is not None:
        span["status"] = {"code": STATUS_ERROR, "message": str(message or resp.get("error") or error)}
    return span


def _digest16(label: str, session: str, n: int) -> str:
    return hashlib.sha256(f"connector-broker {label}\n{session}".encode()).hexdigest()[:n]


class SessionTrace(NamedTuple):
    """A session's spans and what every OTLP request carrying them repeats: the resource and the scope."""

    resource: dict
    scope: dict
    entries: int  # spans = entries + 1 (the session span)
    spans: Iterator[dict]  # the session span first, then one per entry, drawn as the entries are read


def session_trace(vault_root: Vault | str | os.PathLike, session: str, *, content: bool = False) -> SessionTrace:
    """The session as OTLP spans (see the module docstring), for the file (`otlp_chunks`) and the OTLP/HTTP
    requests (journal/export/otlp_send.py) alike. Three streaming passes: the chain is verified; the trace
    contexts the calls carried are read (the trace the session joins, and the counts and times of the
    session span, which comes first); then each span is made as its entry is read (the spans iterator).
    Memory holds an entry and at most two trace ids, not the session."""
    vault = open_vault(vault_root)
    report = verify_session(vault, session).as_dict()
    tally = EntryTally()
    agent_traces: set[str] = set()  # the trace ids the calls carried: only whether there is one matters, so two at most
    for e in iter_session_entries(vault, session, tally=tally, verified=report):
        if len(agent_traces) < 2 and (ctx := trace_context(e)) is not None:
            agent_traces.add(ctx[0])
    joined = len(agent_traces) == 1
    trace_id = next(iter(agent_traces)) if joined else _digest16("trace", session, 32)
    root_id = _digest16("session span", session, 16)
    root = {
        "traceId": trace_id, "spanId": root_id, "name": f"session {session}", "kind": KIND_INTERNAL,
        "startTimeUnixNano": _nanos(tally.first_ts) if tally.entries else "0",  # type: ignore[arg-type]
        "endTimeUnixNano": _nanos(tally.last_ts) if tally.entries else "0",  # type: ignore[arg-type]
        "attributes": _attrs({
            "gen_ai.conversation.id": session, "broker.session": session, "broker.entries": tally.entries,
            "broker.chain": chain_verdict(report), "broker.session.head": tally.head if tally.entries else None,
        }),
    }
    if not report["intact"]:
        root["status"] = {"code": STATUS_ERROR, "message": f"chain {chain_verdict(report)}"}
    try:
        version = importlib.metadata.version("connector-broker")
    except importlib.metadata.PackageNotFoundError:
        version = "0"
    items = (entry_span(e, trace_id, root_id, trace_context(e), joined, content)
             for e in counted_entries(vault, session, tally, report))
    return SessionTrace(
        resource={"attributes": _attrs({"service.name": "connector-broker", "broker.session": session})},
        scope={"name": SCOPE, "version": version}, entries=tally.entries, spans=chain([root], items))


def otlp_chunks(vault_root: Vault | str | os.PathLike, session: str, *, content: bool = False) -> Iterator[bytes]:
    """The session's spans as one OTLP/JSON ExportTraceServiceRequest, as the CLI writes it (pretty JSON and
    a newline), a piece at a time (`session_trace`)."""
    trace = session_trace(vault_root, session, content=content)
    spans = ArrayMark("spans")
    document = {"resourceSpans": [{"resource": trace.resource,
                                   "scopeSpans": [{"scope": trace.scope, "spans": spans.value}]}]}
    yield from streamed_document(lambda: document, [(spans, trace.spans)])


def build_otlp(vault_root: Vault | str | os.PathLike, session: str, *, content: bool = False) -> dict:
    """The session's spans as an OTLP/JSON ExportTraceServiceRequest, as a value (held whole: for tests and
    small sessions; `otlp_chunks` writes a big one, journal/export/otlp_send.py sends it in batches)."""
    return orjson.loads(b"".join(otlp_chunks(vault_root, session, content=content)))


def _ids_to_base64(value: object) -> object:
    """OTLP/JSON's hex trace and span ids as the base64 that protobuf's JSON mapping reads for bytes."""
    if isinstance(value, dict):
        return {k: base64.b64encode(bytes.fromhex(v)).decode() if k in ("traceId", "spanId", "parentSpanId")
                and isinstance(v, str) else _ids_to_base64(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ids_to_base64(v) for v in value]
    return value


def otlp_protobuf(otlp: dict) -> bytes:
    """The same request as binary protobuf (ids from hex to bytes, as the OTLP/JSON rules say)."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    message = json_format.ParseDict(_ids_to_base64(otlp), ExportTraceServiceRequest())
    return message.SerializeToString()


_SPAN_KEYS = frozenset({"traceId", "spanId", "parentSpanId", "traceState", "name", "kind", "startTimeUnixNano",
                        "endTimeUnixNano", "attributes", "links", "status"})


def _any_value(value: dict, out: AnyValue) -> None:
    (kind, v), = value.items()
    if kind == "stringValue":
        out.string_value = v
    elif kind == "intValue":
        out.int_value = int(v)
    elif kind == "doubleValue":
        out.double_value = v
    elif kind == "boolValue":
        out.bool_value = v
    elif kind == "arrayValue":
        out.array_value.SetInParent()
        for item in v.get("values", ()):
            _any_value(item, out.array_value.values.add())
    else:
        raise KeyError(kind)


def _attributes(attrs: list[dict], out: object) -> None:
    for attr in attrs:
        kv = out.add()  # type: ignore[attr-defined]
        kv.key = attr["key"]
        _any_value(attr["value"], kv.value)


def span_protobuf(span: dict) -> Span:
    """One OTLP/JSON span (an item of `session_trace`'s spans) as a protobuf Span, by the same rules as
    `otlp_protobuf`. Field by field for the shapes `entry_span` makes (protobuf's generic JSON parser
    took most of an `--otlp` export's time); through that parser for anything else."""
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    if not span.keys() <= _SPAN_KEYS:
        return _span_parsed(span)
    try:
        out = Span(trace_id=bytes.fromhex(span["traceId"]), span_id=bytes.fromhex(span["spanId"]), name=span["name"],
                   kind=span["kind"], start_time_unix_nano=int(span["startTimeUnixNano"]),
                   end_time_unix_nano=int(span["endTimeUnixNano"]))
        if "parentSpanId" in span:
            out.parent_span_id = bytes.fromhex(span["parentSpanId"])
        if "traceState" in span:
            out.trace_state = span["traceState"]
        _attributes(span.get("attributes", ()), out.attributes)
        for link in span.get("links", ()):
            if not link.keys() <= {"traceId", "spanId", "traceState", "attributes"}:
                return _span_parsed(span)
            got = out.links.add(trace_id=bytes.fromhex(link["traceId"]), span_id=bytes.fromhex(link["spanId"]))
            if "traceState" in link:
                got.trace_state = link["traceState"]
            _attributes(link.get("attributes", ()), got.attributes)
        if "status" in span:
            out.status.code = span["status"].get("code", 0)
            out.status.message = span["status"].get("message", "")
    except (KeyError, TypeError, ValueError):
        return _span_parsed(span)
    return out


def _span_parsed(span: dict) -> Span:
    from google.protobuf import json_format
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    return json_format.ParseDict(_ids_to_base64(span), Span())
