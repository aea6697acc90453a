"""A session as OCSF API Activity events (class 6003), one JSON line per entry, for a SIEM.

Schema version `OCSF_VERSION`; profiles `ai_operation` (a model call's `ai_model`) and `trace` (the
W3C trace context the call carried) where they apply, listed in `metadata.profiles`. The chain rides
in the event, so a copy kept in a SIEM can be checked on its own (`broker verify-export`):

- `raw_data` is the entry itself, as the canonical JSON (RFC 8785) of the entry without its `hash`:
  exactly the bytes the entry's hash is computed over. So `raw_data_hash` (SHA-256, `algorithm_id`
  3) *is* the entry's `hash`, and `raw_data` holds its `prev` and `seq`: an altered `raw_data` no
  longer hashes to its `raw_data_hash`, and an event whose mapped fields were altered no longer
  equals the event rebuilt from its `raw_data` (`verify_ocsf_event`).
- `metadata.uid` is the hash, `metadata.sequence` the seq, `metadata.correlation_uid` the session.
- `unmapped.broker` (ours) repeats `seq`, `hash`, `prev`, `session`, and says what the export held:
  `session_entries` and `session_head`, so a copy whose last events were dropped is caught too.

Redacted values stay redacted: the export is built from the entries as recorded, and spilled bodies
stay blob references inside `raw_data` (nothing is read from the blob store).
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Iterator
from urllib.parse import urlsplit

import orjson

from journal.canonical import canonical_bytes
from journal.entry import parse_ts
from journal.export.fixture import EntryTally, counted_entries, iter_session_entries
from journal.export.har import is_http_url
from journal.export.model_span import model_call
from journal.export.otel import mcp_protocol_version, mcp_session_id, trace_context
from journal.export.recorded_body import header, http_request_view
from journal.reader import open_vault
from journal.vault import Vault

OCSF_VERSION = "1.8.0"
CLASS_UID, CATEGORY_UID = 6003, 6
PRODUCT = "connector-broker"
_ACTIVITIES = {1: "Create", 2: "Read", 3: "Update", 4: "Delete", 99: "Other"}
_WRITE_ACTIVITY = {"POST": 1, "PUT": 3, "PATCH": 3, "DELETE": 4}
HTTP_METHODS = frozenset({"OPTIONS", "GET", "HEAD", "POST", "PUT", "DELETE", "TRACE", "CONNECT", "PATCH"})
"""The values OCSF's `http_request.http_method` takes (another method's request has none)."""


def _version() -> str:
    try:
        return importlib.metadata.version(PRODUCT)
    except importlib.metadata.PackageNotFoundError:
        return "0"


def _millis(ts: str) -> int:
    """Epoch milliseconds of a recorded `ts`, exactly (no float rounding)."""
    dt = parse_ts(ts)
    return int(dt.timestamp()) * 1000 + dt.microsecond // 1000


def raw_data(entry: dict) -> str:
    """The canonical JSON of the entry without `hash`: what the entry's hash is the SHA-256 of."""
    return canonical_bytes({k: v for k, v in entry.items() if k != "hash"}).decode("utf-8")


def _activity(entry: dict) -> int:
    if entry.get("effect") == "read":
        return 2
    method = str((entry.get("request") or {}).get("method") or "").upper()
    return _WRITE_ACTIVITY.get(method, 99)


def _headers(pairs: object) -> list[dict]:
    return [{"name": str(p[0]), "value": str(p[1])} for p in pairs or () if isinstance(p, list) and len(p) == 2] \
        if isinstance(pairs, list) else []


def _url(url: str) -> dict:
    out: dict = {"url_string": url}
    try:
        parts = urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return out
    out.update({"scheme": parts.scheme, "path": parts.path or "/"})
    if parts.hostname:
        out["hostname"] = parts.hostname
    if port:
        out["port"] = port
    if parts.query:
        out["query_string"] = parts.query
    return out


def _operation(entry: dict) -> str:
    mcp = entry.get("mcp")
    if isinstance(mcp, dict) and isinstance(mcp.get("method"), str):
        return mcp["method"]
    return str((entry.get("request") or {}).get("method"))


def _status(entry: dict) -> tuple[int, str, str | None]:
    """(status_id, status, status_detail): Success, or Failure with the recorded reason."""
    resp = entry.get("response") or {}
    status = resp.get("status")
    error = resp.get("error")
    body = resp.get("body")
    jsonrpc_error = isinstance(body, dict) and isinstance(body.get("error"), dict)
    result = body.get("result") if isinstance(body, dict) else None
    tool_error = isinstance(result, dict) and result.get("isError") is True
    failed = (not isinstance(status, int) or status >= 400 or error is not None or jsonrpc_error or tool_error
              or resp.get("answered_by") not in (None, "upstream"))
    if not failed:
        return 1, "Success", None
    detail = str(error) if error is not None else None
    if detail is None and jsonrpc_error:
        detail = f"JSON-RPC error {body['error'].get('code')}: {body['error'].get('message')}"  # type: ignore[index]
    if detail is None and tool_error:
        detail = "tool error: the result has isError: true"
    return 2, "Failure", detail or (f"HTTP {status}" if isinstance(status, int) else "no answer")


def ocsf_event(entry: dict, *, session_entries: int, session_head: str | None, product_version: str) -> dict:
    """One journal entry as an OCSF API Activity event (see the module docstring). Pure: the same
    entry and export facts give the same event, which is how `verify_ocsf_event` checks one."""
    req, resp = entry.get("request") or {}, entry.get("response") or {}
    url = str(req.get("url"))
    activity = _activity(entry)
    status_id, status, detail = _status(entry)
    code = resp.get("status")
    mcp = entry.get("mcp") if isinstance(entry.get("mcp"), dict) else None
    profiles: list[str] = []
    api: dict = {"operation": _operation(entry), "service": {"name": str(entry.get("connector"))},
                 "request": {"uid": str(mcp["id"]) if mcp is not None and mcp.get("id") is not None
                             else str(entry.get("hash"))}}
    response: dict = {}
    if isinstance(code, int):
        response["code"] = code
    if detail is not None:
        response["error"] = detail
    if response:
        api["response"] = response
    if mcp is not None and (version := mcp_protocol_version(entry)):
        api["version"] = version
    actor: dict = {"app_name": str(entry.get("agent")), "user": {"name": str(entry.get("principal")),
                                                                  "uid": str(entry.get("principal"))},
                   "session": {"uid": str(entry.get("session"))}}
    if mcp is not None and (mcp_session := mcp_session_id(entry)):
        actor["session"]["uid_alt"] = mcp_session
    event: dict = {
        "class_uid": CLASS_UID, "class_name": "API Activity", "category_uid": CATEGORY_UID,
        "category_name": "Application Activity", "activity_id": activity, "activity_name": _ACTIVITIES[activity],
        "type_uid": CLASS_UID * 100 + activity, "type_name": f"API Activity: {_ACTIVITIES[activity]}",
        "severity_id": 1, "severity": "Informational", "time": _millis(str(entry["ts"])),
        "status_id": status_id, "status": status,
        "message": f"{entry.get('connector')} {entry.get('effect')} {_operation(entry)} {url}"
                   + (f" -> {code}" if isinstance(code, int) else " -> no answer"),
        "actor": actor, "api": api, "src_endpoint": {"name": str(entry.get("agent"))},
    }
    if isinstance(code, int):
        event["status_code"] = str(code)
    if detail is not None:
        event["status_detail"] = detail
    if is_http_url(url) and not isinstance(req.get("websocket"), dict):  # a message is no HTTP request
        method = http_request_view(entry)[0]  # an MCP call over HTTP went as a POST
        event["http_request"] = {"url": _url(url), "http_headers": _headers(req.get("headers"))}
        if method in HTTP_METHODS:
            event["http_request"]["http_method"] = method
        user_agent = header(req.get("headers") or [], "user-agent")
        if user_agent:
            event["http_request"]["user_agent"] = user_agent
        if isinstance(code, int):
            event["http_response"] = {"code": code, "http_headers": _headers(resp.get("headers"))}
            content_type = header(resp.get("headers") or [], "content-type")
            if content_type:
                event["http_response"]["content_type"] = content_type
        parts = _url(url)
        if "hostname" in parts:
            event["dst_endpoint"] = {"hostname": parts["hostname"], **({"port": parts["port"]} if "port" in parts
                                                                          else {})}
    if (call := model_call(entry)) is not None:
        event["ai_model"] = {"name": call.request_model or call.api, "ai_provider": call.provider}
        profiles.append("ai_operation")
    if (ctx := trace_context(entry)) is not None:
        event["trace"] = {"uid": ctx[0], "flags": [f"{ctx[2]:02x}"]}  # the W3C trace-flags byte, in hex
        profiles.append("trace")
    raw = raw_data(entry)
    event["metadata"] = {
        "version": OCSF_VERSION, "product": {"name": PRODUCT, "vendor_name": PRODUCT, "version": product_version},
        "uid": str(entry.get("hash")), "sequence": entry.get("seq"), "correlation_uid": str(entry.get("session")),
        "log_name": "connector-journal", "original_time": str(entry.get("ts")), "profiles": profiles,
    }
    event["raw_data"] = raw
    event["raw_data_size"] = len(raw.encode("utf-8"))
    event["raw_data_hash"] = {"algorithm_id": 3, "algorithm": "SHA-256", "value": str(entry.get("hash"))}
    event["unmapped"] = {"broker": {
        "session": entry.get("session"), "seq": entry.get("seq"), "hash": entry.get("hash"), "prev": entry.get("prev"),
        "effect": entry.get("effect"), "capture": entry.get("capture"), "connector": entry.get("connector"),
        "session_entries": session_entries, "session_head": session_head,
    }}
    return event


def iter_ocsf(vault_root: Vault | str | os.PathLike, session: str) -> Iterator[dict]:
    """The events of one session, in seq order (the entries as recorded: a broken chain is exported as
    it is, and `broker verify-export` then names where it breaks). Two streaming passes: one counts the
    entries and finds the head every event states, the next makes each event as its entry is read."""
    vault = open_vault(vault_root)
    tally = EntryTally()
    for _ in iter_session_entries(vault, session, tally=tally):
        pass
    version = _version()
    for e in counted_entries(vault, session, tally):
        yield ocsf_event(e, session_entries=tally.entries, session_head=tally.head,  # type: ignore[arg-type]
                         product_version=version)


def ocsf_chunks(vault_root: Vault | str | os.PathLike, session: str) -> Iterator[bytes]:
    """The events as JSON lines (one event per line, each ending in a newline), a line at a time."""
    for ev in iter_ocsf(vault_root, session):
        yield orjson.dumps(ev) + b"\n"


def ocsf_lines(vault_root: Vault | str | os.PathLike, session: str) -> bytes:
    """The events as JSON lines, held whole (`ocsf_chunks` writes a big session's)."""
    return b"".join(ocsf_chunks(vault_root, session))
