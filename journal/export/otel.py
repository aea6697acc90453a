"""A session as OpenTelemetry spans (OTLP/JSON), after the GenAI and MCP semantic conventions.

- The session is one trace, under a root span `session {id}`; each entry is one span, its span id
  the first 16 hex digits of the entry's hash (stable: exporting twice gives the same ids).
- Gateway entries (MCP): a `tools/call` is `execute_tool {gen_ai.tool.name}` (kind INTERNAL) with
  `gen_ai.operation.name=execute_tool`, `mcp.method.name`, `jsonrpc.request.id`, `network.transport`
  and, on failure, `error.type` (the JSON-RPC code, or `tool_error` for `isError`); other MCP methods
  are `{mcp.method.name} {target}` (kind CLIENT).
- Broker and agent entries (HTTP): HTTP client spans (kind CLIENT) named by the method, with
  `http.request.method`, `url.full` (as recorded, redactions included), `server.address`,
  `server.port`, `http.response.status_code` and `error.type`.
- Every span: `gen_ai.conversation.id` (the session), `gen_ai.agent.name`, and `broker.*` attributes
  naming the entry (seq, hash, connector, effect, capture, answered_by, principal, prompt_ref).
- Content is off by default: bodies are referenced (`broker.request.body.sha256` is the SHA-256 of the
  recorded body's canonical form, `broker.*.body.ref` the blob of a spilled body). `content=True`
  adds them (`gen_ai.tool.call.arguments` / `.result` for tools, `broker.*.body` for HTTP), as recorded.
- Trace context: when calls carried W3C trace context (an HTTP `traceparent` header, or MCP
  `params._meta.traceparent`) and all of it names one trace, the session is exported into that
  trace and each such span is the child of the agent's span that made the call. Otherwise the trace
  id is derived from the session id and each span links to the context it carried.
- Times: the journal records when the answer arrived (`ts`), not when the call left, so an entry's
  span starts and ends at `ts`.

OTLP/JSON as the OTLP specification gives it: lowerCamelCase names, trace and span ids in hex,
64-bit integers as strings, enums as numbers. `send_otlp` posts it to an OTLP/HTTP endpoint as
binary protobuf (through opentelemetry-proto), the encoding every receiver accepts.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import os
import re
from urllib.parse import urlsplit

from journal.blobstore import is_ref_object
from journal.canonical import canonical_bytes
from journal.entry import parse_ts
from journal.errors import PeerError
from journal.export.fixture import body_digest, chain_verdict, read_entries
from journal.export.recorded_body import header
from journal.reader import open_vault
from journal.vault import Vault
from journal.verify import verify_session

SCOPE = "connector-broker.journal"
KIND_INTERNAL, KIND_CLIENT = 1, 3
STATUS_ERROR = 2
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16


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


def _attr(key: str, value: object) -> dict:
    if isinstance(value, bool):
        v: dict = {"boolValue": value}
    elif isinstance(value, int):
        v = {"intValue": str(value)}
    elif isinstance(value, float):
        v = {"doubleValue": value}
    else:
        v = {"stringValue": str(value)}
    return {"key": key, "value": v}


def _attrs(pairs: dict) -> list[dict]:
    return [_attr(k, v) for k, v in pairs.items() if v is not None]


def _nanos(ts: str) -> str:
    dt = parse_ts(ts)
    return str(int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1000)


def _body_refs(prefix: str, body: object, content: bool) -> dict:
    out: dict = {f"{prefix}.body.sha256": body_digest(body)}
    if is_ref_object(body):
        out[f"{prefix}.body.ref"] = body["ref"]  # type: ignore[index]
    if content and body is not None:
        out[f"{prefix}.body"] = body if isinstance(body, str) else canonical_bytes(body).decode("utf-8")
    return out


def _server(url: str) -> dict:
    try:
        parts = urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return {}
    return {"server.address": parts.hostname, "server.port": port} if parts.hostname else {}


def _gateway(entry: dict, content: bool) -> tuple[str, int, dict, str | None]:
    req, resp = entry["request"], entry["response"]
    mcp = got if isinstance(got := entry.get("mcp"), dict) else {}
    method = mcp.get("method") or req.get("method")
    params = got if isinstance(got := mcp.get("params"), dict) else {}
    body = got if isinstance(got := resp.get("body"), dict) else {}
    url = str(req.get("url") or "")
    attrs: dict = {"mcp.method.name": method, "network.transport": "pipe" if url.startswith("stdio:") else "tcp"}
    if mcp.get("id") is not None:
        attrs["jsonrpc.request.id"] = str(mcp["id"])
    if not url.startswith("stdio:"):
        attrs.update(_server(url))
    error = None
    if isinstance(body.get("error"), dict):
        code = body["error"].get("code")
        error = str(code)
        attrs["rpc.response.status_code"] = str(code)
    elif isinstance(body.get("result"), dict) and body["result"].get("isError") is True:
        error = "tool_error"
    elif resp.get("status") is None or resp.get("error"):
        error = "no_response" if resp.get("status") is None else str(resp.get("status"))
    if method == "tools/call":
        tool = params.get("name")
        attrs.update({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool})
        if content:
            attrs["gen_ai.tool.call.arguments"] = canonical_bytes(params.get("arguments")).decode()
            if "result" in body:
                attrs["gen_ai.tool.call.result"] = canonical_bytes(body["result"]).decode()
        name, kind = f"execute_tool {tool}", KIND_INTERNAL
    else:
        target = params.get("name") or params.get("uri")
        if params.get("uri"):
            attrs["mcp.resource.uri"] = params["uri"]
        if method == "prompts/get" and params.get("name"):
            attrs["gen_ai.prompt.name"] = params["name"]
        name, kind = f"{method} {target}" if target else str(method), KIND_CLIENT
    attrs.update(_body_refs("broker.request", req.get("body"), content and method != "tools/call"))
    attrs.update(_body_refs("broker.response", resp.get("body"), content and method != "tools/call"))
    return name, kind, attrs, error


def _http(entry: dict, content: bool) -> tuple[str, int, dict, str | None]:
    req, resp = entry["request"], entry["response"]
    url, status = str(req.get("url")), resp.get("status")
    attrs: dict = {"http.request.method": req.get("method"), "url.full": url, "url.scheme": urlsplit(url).scheme}
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
    return str(req.get("method")), KIND_CLIENT, attrs, error


def entry_span(entry: dict, trace_id: str, parent: str, ctx: tuple | None, joined: bool, content: bool) -> dict:
    """One entry as an OTLP span (see the module docstring)."""
    build = _gateway if entry.get("capture") == "gateway" else _http
    name, kind, attrs, error = build(entry, content)
    resp = entry.get("response") or {}
    if error is not None:
        attrs["error.type"] = error
    attrs.update({
        "gen_ai.conversation.id": entry.get("session"), "gen_ai.agent.name": entry.get("agent"),
        "broker.session": entry.get("session"), "broker.entry.seq": entry.get("seq"),
        "broker.entry.hash": entry.get("hash"), "broker.connector": entry.get("connector"),
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
        span["status"] = {"code": STATUS_ERROR, "message": str(resp.get("error") or error)}
    return span


def _digest16(label: str, session: str, n: int) -> str:
    return hashlib.sha256(f"connector-broker {label}\n{session}".encode()).hexdigest()[:n]


def build_otlp(vault_root: Vault | str | os.PathLike, session: str, *, content: bool = False) -> dict:
    """The session's spans as an OTLP/JSON ExportTraceServiceRequest (see the module docstring)."""
    vault = open_vault(vault_root)
    report = verify_session(vault, session).as_dict()
    entries, _ = read_entries(vault, session)
    contexts = [trace_context(e) for e in entries]
    agent_traces = {c[0] for c in contexts if c is not None}
    joined = len(agent_traces) == 1
    trace_id = next(iter(agent_traces)) if joined else _digest16("trace", session, 32)
    root_id = _digest16("session span", session, 16)
    spans = [entry_span(e, trace_id, root_id, c, joined, content) for e, c in zip(entries, contexts, strict=True)]
    first = _nanos(entries[0]["ts"]) if entries else "0"
    last = _nanos(entries[-1]["ts"]) if entries else "0"
    root = {
        "traceId": trace_id, "spanId": root_id, "name": f"session {session}", "kind": KIND_INTERNAL,
        "startTimeUnixNano": first, "endTimeUnixNano": last,
        "attributes": _attrs({
            "gen_ai.conversation.id": session, "broker.session": session, "broker.entries": len(entries),
            "broker.chain": chain_verdict(report),
        }),
    }
    if not report["intact"]:
        root["status"] = {"code": STATUS_ERROR, "message": f"chain {chain_verdict(report)}"}
    try:
        version = importlib.metadata.version("connector-broker")
    except importlib.metadata.PackageNotFoundError:
        version = "0"
    return {"resourceSpans": [{
        "resource": {"attributes": _attrs({"service.name": "connector-broker", "broker.session": session})},
        "scopeSpans": [{"scope": {"name": SCOPE, "version": version}, "spans": [root, *spans]}],
    }]}


def otlp_protobuf(otlp: dict) -> bytes:
    """The same request as binary protobuf (ids from hex to bytes, as the OTLP/JSON rules say)."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    def ids_to_base64(value: object) -> object:
        if isinstance(value, dict):
            return {k: base64.b64encode(bytes.fromhex(v)).decode() if k in ("traceId", "spanId", "parentSpanId")
                    and isinstance(v, str) else ids_to_base64(v) for k, v in value.items()}
        if isinstance(value, list):
            return [ids_to_base64(v) for v in value]
        return value

    message = json_format.ParseDict(ids_to_base64(otlp), ExportTraceServiceRequest())
    return message.SerializeToString()


def send_otlp(url: str, otlp: dict, timeout: float = 30.0) -> int:
    """POST the spans to an OTLP/HTTP traces endpoint (e.g. http://127.0.0.1:4318/v1/traces); the
    HTTP status. A refused connection or a non-2xx answer raises PeerError with the reason."""
    import httpx

    try:
        resp = httpx.post(url, content=otlp_protobuf(otlp), headers={"Content-Type": "application/x-protobuf"},
                          timeout=timeout)
    except httpx.HTTPError as exc:
        raise PeerError(f"cannot send spans to {url}: {exc}; is the OTLP receiver running there?") from None
    if not 200 <= resp.status_code < 300:
        raise PeerError(f"OTLP endpoint {url} answered {resp.status_code}: {resp.text[:200]}")
    return resp.status_code
