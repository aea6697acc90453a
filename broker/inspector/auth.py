"""Who may talk to the inspector, and the headers every answer carries.

- Read-only: GET and HEAD only, anything else is 405 (before any route is looked at).
- Off loopback a token is required on every request: `Authorization: Bearer TOKEN`, or
  `?token=TOKEN` on the first page load, which also sets a `SameSite=Strict`, `HttpOnly` cookie so
  the page (and its downloads) carry it from then on. Compared in constant time.
- On loopback without a token the `Host` header must name a loopback address: a web page elsewhere
  that re-points its own host name at 127.0.0.1 (DNS rebinding) gets 421, not the vault.
- Every answer: a strict Content-Security-Policy (scripts and styles only from the inspector's own
  files, no inline script, nothing framed), `nosniff`, no referrer (a token may be in the URL).
"""

from __future__ import annotations

import hmac
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

COOKIE = "broker_inspector"
CSP = (
    "default-src 'none'; script-src 'self'; worker-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def _host_name(host: str) -> str:
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0] if ":" in host else host


class Guard:
    """ASGI middleware: methods, token or loopback Host, and the security headers."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        set_cookie: bytes | None = None
        if scope["method"] not in ("GET", "HEAD"):
            await _plain(send, 405, "the inspector is read-only: GET and HEAD only\n", [(b"allow", b"GET, HEAD")])
            return
        if self.token is None:
            if _host_name(headers.get("host", "")) not in LOOPBACK_HOSTS:
                await _plain(send, 421, "this inspector answers only to a loopback Host\n")
                return
        else:
            ok, set_cookie = self._check_token(scope, headers)
            if not ok:
                await _plain(send, 401, "a token is required: open the URL `broker inspect` printed, or send "
                             "Authorization: Bearer TOKEN\n", [(b"www-authenticate", b"Bearer")])
                return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = list(SECURITY_HEADERS)
                if set_cookie is not None:
                    extra.append((b"set-cookie", set_cookie))
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _check_token(self, scope: Scope, headers: dict[str, str]) -> tuple[bool, bytes | None]:
        assert self.token is not None
        want = self.token.encode()
        auth = headers.get("authorization", "")
        if auth.startswith("Bearer ") and hmac.compare_digest(auth[7:].strip().encode(), want):
            return True, None
        for part in headers.get("cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE and hmac.compare_digest(value.encode(), want):
                return True, None
        given = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [""])[0]
        if given and hmac.compare_digest(given.encode(), want):
            return True, f"{COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict".encode()
        return False, None


async def _plain(send: Send, status: int, text: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = text.encode()
    await send({
        "type": "http.response.start", "status": status,
        "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
                    *(headers or []), *SECURITY_HEADERS],
    })
    await send({"type": "http.response.body", "body": body})
