"""Rules shared by the Google connectors (gmail, calendar, drive); not a connector itself.

- Google honours ``X-HTTP-Method-Override``: the effective method is that header's value.
- Calls are named by a `RouteTable` built from the API's discovery document (service-relative
  templates such as ``users/{userId}/messages/send``), so the rule reads "gmail messages.send".
- Batch envelopes (``POST /batch/<api>/<version>``, multipart/mixed whose parts are embedded
  HTTP requests) are a read only when every embedded request is a read. A body that is
  missing or does not parse makes the whole envelope a write (fail closed).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import urlsplit

from ._http import (
    READ,
    READ_METHODS,
    WRITE,
    RouteTable,
    method_token,
    normalise_path,
    override_forcing_write,
    parse_query,
)

METHOD_OVERRIDE = "x-http-method-override"
# Override headers Google does not honour: they can only push a call towards write.
_UNHONOURED_OVERRIDES = ("x-http-method", "x-method-override")

# Hosts that serve every Google API by path (the discovery documents' rootUrl and aliases).
SHARED_HOSTS = frozenset({"www.googleapis.com", "www.mtls.googleapis.com", "content.googleapis.com"})

ClassifyOne = Callable[[str, str, dict[str, list[str]], dict[str, str], bytes | None], tuple[str, str]]


def effective_method(method: str, headers: dict[str, str]) -> tuple[str | None, str]:
    """(method Google will run or None if unusable, suffix for the rule text)."""
    override = headers.get(METHOD_OVERRIDE)
    if override is None:
        return method_token(method), ""
    return method_token(override), " via X-HTTP-Method-Override"


def classify_call(
    connector: str,
    routes: RouteTable,
    method: str,
    relative_path: str | None,
    headers: dict[str, str],
    suffix: str = "",
) -> tuple[str, str]:
    """Effect of one (non-batch) call. `relative_path` is the path after the service prefix
    (``users/me/messages/send``), or None when the path has none of the connector's prefixes."""
    m, via = effective_method(method, headers)
    if m is None:
        return WRITE, "unrecognised method" + via
    reason = override_forcing_write(headers, _UNHONOURED_OVERRIDES)
    if reason is not None:
        return WRITE, f"method {m} with {reason}"
    found = routes.find(m, relative_path) if relative_path is not None else None
    if found is not None:
        route = found[0]
        effect = route.effect or (READ if m in READ_METHODS else WRITE)
        return effect, f"{connector} {route.name}{suffix}{via}"
    return (READ if m in READ_METHODS else WRITE), f"method {m}{via}"


def classify_batch(body: bytes | None, headers: dict[str, str], classify_one: ClassifyOne) -> tuple[str, str]:
    """Effect of a Google batch envelope: read only if every embedded request reads."""
    if body is None:
        return WRITE, "google batch, body not captured"
    requests = parse_batch(body, headers.get("content-type", ""))
    if requests is None:
        return WRITE, "google batch, unparseable"
    for i, (method, path, query, sub_headers, sub_body) in enumerate(requests, 1):
        if path.startswith("/batch/") or path == "/batch":
            return WRITE, f"google batch, item {i} is a nested batch"
        effect, rule = classify_one(method, path, query, sub_headers, sub_body)
        if effect != READ:
            return WRITE, f"google batch, item {i}: {rule}"
    return READ, f"google batch of {len(requests)} reads"


SubRequest = tuple[str, str, dict[str, list[str]], dict[str, str], bytes]

_BOUNDARY = re.compile(r'boundary\s*=\s*(?:"([^"]+)"|([^;\s]+))', re.IGNORECASE)
_REQUEST_LINE = re.compile(r"([A-Za-z][A-Za-z0-9_-]*) +(\S+)(?: +HTTP/\d(?:\.\d)?)?")
_BLANK_LINE = re.compile(rb"\r?\n\r?\n")


def parse_batch(body: bytes, content_type: str) -> list[SubRequest] | None:
    """Embedded requests of a multipart/mixed batch body as (method, normalised path, query,
    lowercased headers, body); None when the envelope is not well formed."""
    if not content_type.lower().lstrip().startswith("multipart/mixed"):
        return None
    found = _BOUNDARY.search(content_type)
    if found is None:
        return None
    boundary = (found.group(1) or found.group(2)).encode("latin-1", "replace")
    parts = _split_multipart(body, boundary)
    if not parts:
        return None
    requests = []
    for part in parts:
        sub = _parse_part(part)
        if sub is None:
            return None
        requests.append(sub)
    return requests


def _split_multipart(body: bytes, boundary: bytes) -> list[bytes] | None:
    delimiter = re.compile(rb"(?:\A|\r?\n)--" + re.escape(boundary) + rb"(--)?[ \t]*(?:\r?\n|\Z)")
    parts: list[bytes] = []
    start: int | None = None
    for m in delimiter.finditer(body):
        if start is not None:
            parts.append(body[start : m.start()])
        if m.group(1):
            return parts
        start = m.end()
    return None  # no closing delimiter: truncated or not multipart


def _split_head(data: bytes) -> tuple[bytes, bytes]:
    """(header block, rest) split at the first blank line; no headers if it starts blank."""
    if data.startswith(b"\r\n"):
        return b"", data[2:]
    if data.startswith(b"\n"):
        return b"", data[1:]
    m = _BLANK_LINE.search(data)
    if m is None:
        return data, b""
    return data[: m.start()], data[m.end() :]


def _header_dict(block: bytes) -> dict[str, str] | None:
    headers: dict[str, str] = {}
    for line in block.decode("latin-1").splitlines():
        if not line.strip():
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            return None
        key = name.strip().lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


def _parse_part(part: bytes) -> SubRequest | None:
    part_head, http = _split_head(part)
    part_headers = _header_dict(part_head)
    if part_headers is None or not part_headers.get("content-type", "").lower().startswith(
        "application/http"
    ):
        return None
    head, sub_body = _split_head(http.lstrip(b"\r\n"))
    lines = head.decode("latin-1").splitlines()
    if not lines:
        return None
    request_line = _REQUEST_LINE.fullmatch(lines[0].strip())
    if request_line is None:
        return None
    sub_headers = _header_dict("\n".join(lines[1:]).encode("latin-1"))
    if sub_headers is None:
        return None
    target = request_line.group(2)
    if "://" in target:
        split = urlsplit(target)
        raw_path, query = split.path, split.query
    else:
        raw_path, _, query = target.partition("?")
    return request_line.group(1), normalise_path(raw_path), parse_query(query), sub_headers, sub_body
