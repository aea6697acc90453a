"""Shared request/response types, routing and per-provider response flavour.

Why: every fake connector answers in its provider's shape (error envelopes, headers, Content-Type),
so the proxy sees realistic traffic; keeping that in one place keeps the connector modules short.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .wire import BodyReader, BodyTooLarge

JSON_LIMIT = 64 * 1024 * 1024  # largest body a JSON/form endpoint will buffer

GOOGLE_HOSTS = frozenset({"gmail.googleapis.com", "www.googleapis.com", "oauth2.googleapis.com"})
SLACK_HOSTS = frozenset({"slack.com", "files.slack.com"})
GITHUB_HOSTS = frozenset({"api.github.com", "github.com"})
GRAPH_HOSTS = frozenset({"graph.microsoft.com"})
MSLOGIN_HOSTS = frozenset({"login.microsoftonline.com"})
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1"})
MODEL_HOSTS = frozenset({"api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com"})
ALL_HOSTS: list[str] = sorted(
    GOOGLE_HOSTS | SLACK_HOSTS | GITHUB_HOSTS | GRAPH_HOSTS | MSLOGIN_HOSTS | MODEL_HOSTS
) + [
    "localhost",
    "127.0.0.1",
]

GOOGLE_JSON = "application/json; charset=UTF-8"
UTF8_JSON = "application/json; charset=utf-8"
GRAPH_JSON = (
    "application/json;odata.metadata=minimal;odata.streaming=true;IEEE754Compatible=false;charset=utf-8"
)


class HttpError(Exception):
    """Raised by handlers to answer an error in the route's flavour."""

    def __init__(self, status: int, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason


class Request:
    """One parsed request; the body is read lazily through ``BodyReader``."""

    def __init__(
        self,
        method: str,
        target: str,
        host: str,
        headers: list[tuple[str, str]],
        body: BodyReader,
        sni: str | None,
        record: dict[str, Any],
    ) -> None:
        self.method = method
        self.target = target
        self.host = host
        self.headers = headers
        self.body = body
        self.sni = sni
        self.record = record
        parts = urllib.parse.urlsplit(target)
        self.path = parts.path or "/"
        self.query_string = parts.query
        self.query_multi: dict[str, list[str]] = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
        self.query: dict[str, str] = {k: v[0] for k, v in self.query_multi.items()}
        self._cached: bytes | None = None
        self.flavor = "generic"  # set by the dispatcher to the matched route's flavour

    def header(self, name: str, default: str | None = None) -> str | None:
        """First header value with that (case-insensitive) name."""
        lname = name.lower()
        for k, v in self.headers:
            if k.lower() == lname:
                return v
        return default

    @property
    def content_type(self) -> str:
        """The media type, lower-cased, without parameters."""
        return (self.header("content-type") or "").split(";", 1)[0].strip().lower()

    def body_bytes(self, limit: int = JSON_LIMIT) -> bytes:
        """The whole body (small endpoints only); 413 beyond ``limit``."""
        if self._cached is None:
            try:
                self._cached = self.body.read_all(limit)
            except BodyTooLarge as exc:
                raise HttpError(413, str(exc), "uploadTooLarge") from exc
        return self._cached

    def json(self, default: Any = None) -> Any:
        """The body parsed as JSON (``default`` if empty); 400 if malformed."""
        raw = self.body_bytes()
        if not raw.strip():
            return default
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HttpError(400, f"Invalid JSON payload received. {exc}", "parseError") from exc

    def json_object(self) -> dict[str, Any]:
        """The body as a JSON object ({} if empty)."""
        obj = self.json(default={})
        if not isinstance(obj, dict):
            raise HttpError(400, "Invalid JSON payload received. Expected an object.", "parseError")
        return obj

    def form(self) -> dict[str, str]:
        """The body as application/x-www-form-urlencoded (first value per key)."""
        raw = self.body_bytes().decode("utf-8", "replace")
        return {k: v[0] for k, v in urllib.parse.parse_qs(raw, keep_blank_values=True).items()}

    def params(self) -> dict[str, Any]:
        """Query, then form or JSON body, merged (Slack style: any method, any encoding)."""
        merged: dict[str, Any] = dict(self.query)
        ctype = self.content_type
        if ctype == "application/json":
            body = self.json(default={})
            if isinstance(body, dict):
                merged.update(body)
        elif ctype in ("application/x-www-form-urlencoded", "") and self.method in ("POST", "PUT", "PATCH"):
            merged.update(self.form())
        return merged

    def bearer(self) -> str | None:
        """The token from ``Authorization: Bearer`` (or ``token``) if present."""
        auth = self.header("authorization") or ""
        scheme, _, value = auth.partition(" ")
        if scheme.lower() in ("bearer", "token") and value.strip():
            return value.strip()
        return None


@dataclass
class Response:
    """What a handler returns. ``body`` may be an iterable for streaming (``length`` None => chunked)."""

    status: int = 200
    body: bytes | Iterable[bytes] = b""
    content_type: str | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    length: int | None = None
    compressible: bool = False


Handler = Callable[[Request, "re.Match[str]"], Response]


@dataclass(frozen=True)
class Route:
    """A (methods, hosts, path regex) -> handler mapping; ``hosts=None`` means any host."""

    methods: frozenset[str]
    hosts: frozenset[str] | None
    pattern: re.Pattern[str]
    handler: Handler
    flavor: str
    public: bool = False  # True: no credentials needed (token endpoints, generic test endpoints)


def route(
    methods: str,
    hosts: frozenset[str] | None,
    pattern: str,
    handler: Handler,
    flavor: str,
    public: bool = False,
) -> Route:
    """Build a Route; ``pattern`` is anchored and matched against the raw (still %-encoded) path."""
    return Route(frozenset(methods.split()), hosts, re.compile(f"^{pattern}$"), handler, flavor, public)


def flavor_for_host(host: str) -> str:
    """The provider flavour implied by a Host header."""
    if host in GOOGLE_HOSTS or host.endswith(".googleapis.com"):
        return "google"
    if host in SLACK_HOSTS:
        return "slack"
    if host in GITHUB_HOSTS:
        return "github"
    if host in GRAPH_HOSTS:
        return "graph"
    if host in MSLOGIN_HOSTS:
        return "mslogin"
    return "generic"


def json_body(obj: Any, pretty: bool = False) -> bytes:
    """Serialise JSON the way the provider does (Google pretty-prints, others are compact)."""
    if pretty:
        return json.dumps(obj, indent=2, ensure_ascii=False).encode()
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def json_response(
    obj: Any, status: int = 200, flavor: str = "generic", headers: list[tuple[str, str]] | None = None
) -> Response:
    """A compressible JSON response with the flavour's Content-Type."""
    ctype = {"google": GOOGLE_JSON, "graph": GRAPH_JSON, "mslogin": UTF8_JSON}.get(flavor, UTF8_JSON)
    return Response(
        status=status,
        body=json_body(obj, pretty=flavor == "google"),
        content_type=ctype,
        headers=list(headers or []),
        compressible=True,
    )


def empty_response(status: int = 204, headers: list[tuple[str, str]] | None = None) -> Response:
    """An empty response (204, or Graph's 202)."""
    return Response(status=status, body=b"", headers=list(headers or []))


_GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "ALREADY_EXISTS",
    410: "NOT_FOUND",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
_GOOGLE_REASON = {400: "badRequest", 401: "authError", 403: "forbidden", 404: "notFound", 409: "duplicate"}
_GRAPH_CODE = {400: "BadRequest", 401: "InvalidAuthenticationToken", 403: "ErrorAccessDenied"}


def error_response(flavor: str, status: int, message: str, reason: str | None = None) -> Response:
    """An error in the provider's envelope."""
    if flavor == "google":
        obj: Any = {
            "error": {
                "code": status,
                "message": message,
                "errors": [
                    {
                        "message": message,
                        "domain": "global",
                        "reason": reason or _GOOGLE_REASON.get(status, "error"),
                    }
                ],
                "status": _GOOGLE_STATUS.get(status, "UNKNOWN"),
            }
        }
    elif flavor == "slack":
        obj = {"ok": False, "error": reason or message}
    elif flavor == "github":
        obj = {"message": message, "documentation_url": "https://docs.github.com/rest", "status": str(status)}
    elif flavor == "graph":
        obj = {
            "error": {
                "code": reason or _GRAPH_CODE.get(status, "ErrorItemNotFound" if status == 404 else "Error"),
                "message": message,
                "innerError": {"date": rfc3339(millis=False), "request-id": str(uuid.uuid4())},
            }
        }
    elif flavor == "mslogin":
        obj = {"error": reason or "invalid_request", "error_description": f"AADSTS900144: {message}"}
    else:
        obj = {"error": message, "status": status}
    resp = json_response(obj, status=status, flavor=flavor)
    if flavor == "google" and status == 401:
        resp.headers.append(("WWW-Authenticate", 'Bearer realm="https://accounts.google.com/"'))
    return resp


def flavor_headers(flavor: str, request: Request | None) -> list[tuple[str, str]]:
    """Headers the real provider sends on every response (request ids, rate limits, ...)."""
    rid = str(uuid.uuid4())
    out: list[tuple[str, str]] = [("X-Request-Id", rid)]
    if flavor == "google":
        out += [
            ("Server", "ESF"),
            ("Vary", "Origin"),
            ("Vary", "X-Origin"),
            ("Vary", "Referer"),
            ("Cache-Control", "private"),
            ("X-XSS-Protection", "0"),
            ("X-Frame-Options", "SAMEORIGIN"),
            ("X-Content-Type-Options", "nosniff"),
            ("Alt-Svc", 'h3=":443"; ma=2592000,h3-29=":443"; ma=2592000'),
        ]
    elif flavor == "slack":
        out += [
            ("Server", "Apache"),
            ("x-slack-req-id", uuid.uuid4().hex),
            (
                "x-oauth-scopes",
                "channels:history,channels:read,chat:write,reactions:write,users:read,dnd:write",
            ),
            ("x-accepted-oauth-scopes", ""),
            ("x-slack-backend", "r"),
            ("access-control-allow-origin", "*"),
            ("referrer-policy", "no-referrer"),
            ("strict-transport-security", "max-age=31536000; includeSubDomains; preload"),
        ]
    elif flavor == "github":
        reset = int(time.time()) + 3600
        out += [
            ("Server", "github.com"),
            ("X-GitHub-Api-Version-Selected", "2022-11-28"),
            ("X-GitHub-Media-Type", "github.v3; format=json"),
            ("X-RateLimit-Limit", "5000"),
            ("X-RateLimit-Remaining", "4999"),
            ("X-RateLimit-Reset", str(reset)),
            ("X-RateLimit-Used", "1"),
            ("X-RateLimit-Resource", "core"),
            (
                "X-GitHub-Request-Id",
                f"{rid[:4].upper()}:{rid[4:8].upper()}:{rid[9:13].upper()}:{rid[14:18].upper()}",
            ),
            ("X-Content-Type-Options", "nosniff"),
            ("Strict-Transport-Security", "max-age=31536000; includeSubdomains; preload"),
        ]
    elif flavor == "graph":
        client_rid = (request.header("client-request-id") if request else None) or rid
        out += [
            ("Server", "Microsoft-IIS/10.0"),
            ("request-id", rid),
            ("client-request-id", client_rid),
            ("x-ms-ags-diagnostic", '{"ServerInfo":{"DataCenter":"West Europe","Slice":"E","Ring":"5"}}'),
            ("OData-Version", "4.0"),
            ("Strict-Transport-Security", "max-age=31536000"),
        ]
    elif flavor == "mslogin":
        out += [
            ("Server", "Microsoft-IIS/10.0"),
            ("x-ms-request-id", rid),
            ("x-ms-ests-server", "2.1.18874.4 - WEULR1 ProdSlices"),
            ("Cache-Control", "no-store, no-cache"),
            ("Pragma", "no-cache"),
        ]
    else:
        out += [("Server", "upstream-fake/1.0")]
    return out


def rfc3339(ts: float | None = None, millis: bool = True) -> str:
    """UTC timestamp like ``2025-09-22T12:00:00.000Z``."""
    t = dt.datetime.fromtimestamp(time.time() if ts is None else ts, dt.UTC)
    if millis:
        return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def b64url(data: bytes) -> str:
    """URL-safe base64 with padding (what Gmail returns in ``data``/``raw``)."""
    return base64.urlsafe_b64encode(data).decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Decode URL-safe (or standard) base64, padded or not."""
    text = text.strip().replace("+", "-").replace("/", "_")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def unquote(segment: str) -> str:
    """Percent-decode one path segment (calendar ids are e-mail addresses)."""
    return urllib.parse.unquote(segment)


def int_param(req: Request, name: str, default: int, lo: int = 0, hi: int = 1 << 62) -> int:
    """A clamped integer query parameter (400 if not an integer)."""
    raw = req.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        return max(lo, min(hi, int(raw)))
    except ValueError as exc:
        raise HttpError(400, f"Invalid value '{raw}' for {name}", "invalidParameter") from exc


def float_param(req: Request, name: str, default: float, lo: float = 0.0, hi: float = 3600.0) -> float:
    """A clamped float query parameter (400 if not a number)."""
    raw = req.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        return max(lo, min(hi, float(raw)))
    except ValueError as exc:
        raise HttpError(400, f"Invalid value '{raw}' for {name}", "invalidParameter") from exc


def page(
    items: list[Any], req: Request, default: int, hi: int, size_param: str, token_param: str
) -> tuple[list[Any], str | None]:
    """Offset pagination: returns (slice, next page token or None). Tokens are opaque offsets."""
    size = int_param(req, size_param, default, 1, hi)
    token = req.query.get(token_param) or "0"
    try:
        start = int(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()) if token != "0" else 0
    except ValueError as exc:
        raise HttpError(400, f"Invalid {token_param}", "invalidParameter") from exc
    chunk = items[start : start + size]
    nxt = start + size
    token_out = base64.urlsafe_b64encode(str(nxt).encode()).decode().rstrip("=") if nxt < len(items) else None
    return chunk, token_out
