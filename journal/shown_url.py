"""A URL as messages and logs show it: without its password (a database's `--store` URL, an OTLP receiver's
`--otlp` URL with Basic auth). A module of its own, importing nothing of the project, so that any module that
names a URL in a message can use it."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def display_url(url: str) -> str:
    """The URL without its password, for messages and logs (a database's, an OTLP receiver's)."""
    try:
        parts = urlsplit(url)
    except ValueError:  # not parsed (a bracket not closed): whatever comes before an @ may be a credential
        head, at, tail = url.rpartition("@")
        return f"{head.split('//', 1)[0]}//***@{tail}" if at else url
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


__all__ = ["display_url"]
