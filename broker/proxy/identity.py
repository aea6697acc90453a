"""Who makes a call: session, agent and principal, from what the request says and the options.

One implementation for every capture point that reads them (the HTTPS addon, the MCP gateway):

- proxy credentials, `http://SESSION:AGENT@host:port` (`Proxy-Authorization: Basic ...`, on the
  request or on the CONNECT that opened its tunnel);
- the `X-Broker-Session`, `X-Broker-Agent`, `X-Broker-Principal` request headers;
- else the options (`broker_session`, `broker_agent`, `broker_principal`; the gateway's own).

Credentials win over headers (they are what the operator handed the agent), headers over options;
of a header sent twice the first counts. These fields are taken out of the request before it goes
upstream and are never recorded. Unreadable credentials are refused, never replaced by another
session: the caller answers 400 (`BadProxyCredentials`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass

from journal.errors import InputError
from journal.record import wire_text

SESSION_HEADER = "x-broker-session"
AGENT_HEADER = "x-broker-agent"
PRINCIPAL_HEADER = "x-broker-principal"
PROXY_AUTHORIZATION = "proxy-authorization"
IDENTITY_HEADERS = frozenset({SESSION_HEADER, AGENT_HEADER, PRINCIPAL_HEADER})
"""The X-Broker-* request headers (lower case), read and never forwarded."""
BAD_PROXY_AUTH = "proxy credentials unreadable: expected Basic base64(SESSION:AGENT) in UTF-8"

_WITH_AUTH = IDENTITY_HEADERS | {PROXY_AUTHORIZATION}
_NAMES = {n: n for n in _WITH_AUTH} | {n.encode(): n for n in _WITH_AUTH}
_NAMES_NO_AUTH = {n: n for n in IDENTITY_HEADERS} | {n.encode(): n for n in IDENTITY_HEADERS}

class BadProxyCredentials(InputError):
    """Proxy credentials that cannot be read: the call is refused (400), never given a default session."""

    def __init__(self) -> None:
        super().__init__(BAD_PROXY_AUTH)


def parse_proxy_auth(value: str) -> tuple[str, str]:
    """(session, agent) of a `Proxy-Authorization: Basic base64(SESSION:AGENT)` value; either may be
    empty (then the next source names it). BadProxyCredentials for any other scheme, a missing or
    bad base64 token, or one that is not UTF-8."""
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "basic" or not token.strip():  # no token at all is not an empty user either
        raise BadProxyCredentials()
    try:
        user, _, password = base64.b64decode(token.strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise BadProxyCredentials() from None
    return user, password


@dataclass(frozen=True, slots=True)
class Claims:
    """What a request says about who makes it (None: it does not say)."""

    session: str | None = None
    agent: str | None = None
    principal: str | None = None
    credentials: tuple[str, str] | None = None
    """(session, agent) of its proxy credentials."""

    def resolve(
        self, session: str, agent: str, principal: str | None = None, connection: tuple[str, str] | None = None,
    ) -> tuple[str, str, str | None]:
        """(session, agent, principal): these claims, else the credentials of the connection (the
        CONNECT of its tunnel), else the given defaults (the options). An empty part counts as unsaid.
        A principal None means the credential's fingerprint (`journal.record.principal_fingerprint`)."""
        creds = self.credentials or connection
        return (
            (creds[0] if creds and creds[0] else None) or self.session or session,
            (creds[1] if creds and creds[1] else None) or self.agent or agent or "unknown",
            self.principal or principal or None,
        )


    def names_session(self, connection: tuple[str, str] | None = None) -> bool:
        """True when the call names its session (credentials on it or its tunnel, or the header); False
        when `resolve` gives it the default one (a client that never sends proxy credentials)."""
        creds = self.credentials or connection
        return bool((creds and creds[0]) or self.session)


NO_CLAIMS = Claims()


def take_identity[F: Sequence](fields: F, proxy_auth: bool = True) -> tuple[F | tuple, Claims]:
    """The header fields without the identity fields, and what those said. `fields` are (name,
    value) pairs of raw bytes (mitmproxy) or text (the MCP gateway); a request that names nobody
    gets its own fields back (one pass, nothing copied). `proxy_auth`: Proxy-Authorization is an
    identity field too (the proxy; the gateway leaves it to its hop-by-hop rule). BadProxyCredentials
    when the credentials cannot be read."""
    names = _NAMES if proxy_auth else _NAMES_NO_AUTH
    found: dict[str, str | bytes] = {}
    for k, v in fields:
        name = names.get(k.lower())
        if name is not None and name not in found:
            found[name] = v
    if not found:
        return fields, NO_CLAIMS
    kept = tuple(kv for kv in fields if kv[0].lower() not in names)

    def text(name: str) -> str | None:
        v = found.get(name)
        return None if v is None else (wire_text(v) if isinstance(v, bytes) else v)

    auth = text(PROXY_AUTHORIZATION)
    return kept, Claims(
        text(SESSION_HEADER), text(AGENT_HEADER), text(PRINCIPAL_HEADER),
        parse_proxy_auth(auth) if auth is not None else None,
    )


def claims_without_credentials[F: Sequence](fields: F) -> tuple[F | tuple, Claims]:
    """For a call refused because its credentials cannot be read: its fields without any identity field,
    and what its X-Broker-* headers say (the session its refusal is recorded in; else the default)."""
    auth_names = (PROXY_AUTHORIZATION, PROXY_AUTHORIZATION.encode())
    return take_identity(tuple(kv for kv in fields if kv[0].lower() not in auth_names), proxy_auth=False)
