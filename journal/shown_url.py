"""A URL as messages and logs show it: without what may be a credential in it (a database's `--store` URL, an
OTLP receiver's `--otlp` URL). A module of its own, importing nothing of the project, so that any module that
names a URL in a message can use it.

Hidden: the password of the user info; the whole user info of a web URL that has no password (`https://TOKEN@host`:
services take a token as the user name); the value of every query parameter whose name says credential
(`?password=`, `api_key=`, `access_token=`, `sig=`...: PostgreSQL URLs take `password=` there too). Kept: a
database URL's user name (a role, not a secret), the host, the path and every other parameter."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

_WEB = frozenset({"http", "https", "ws", "wss"})
_SECRET_NAME = re.compile(r"pass|pwd|secret|token|key|auth|sig|credential|session", re.IGNORECASE)


def display_url(url: str) -> str:
    """The URL without what may be a credential in it, for messages and logs."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:  # not parsed (a bracket not closed): whatever comes before an @ may be a credential
        head, at, tail = url.rpartition("@")
        return f"{head.split('//', 1)[0]}//***@{tail.split('?', 1)[0]}" if at else url.split("?", 1)[0]
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user, colon, _password = userinfo.partition(":")
        if colon:
            netloc = f"{user}:***@{host}"
        elif parts.scheme.lower() in _WEB:
            netloc = f"***@{host}"
    query = "&".join(_shown_param(p) for p in parts.query.split("&")) if parts.query else parts.query
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _shown_param(param: str) -> str:
    name, eq, _value = param.partition("=")
    return f"{name}=***" if eq and _SECRET_NAME.search(name) else param


__all__ = ["display_url"]
