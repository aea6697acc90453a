"""A request's host and URL as mitmproxy spells them (`pretty_host`, `pretty_url`), computed once per
origin: what a call is matched against the connectors by and recorded under."""

from __future__ import annotations

from mitmproxy import http
from mitmproxy.net.http import url

_ORIGIN_CACHE = 1024
_origins: dict[tuple, tuple[str, str]] = {}


def request_origin(req: http.Request) -> tuple[str, str]:
    """(pretty_host, URL up to the path) of a request, as `pretty_host` and `pretty_url` give them.

    Cached by what they are computed from: mitmproxy parses the Host header again on every access,
    which cost about 28 us per request, and a keep-alive client sends the same Host every time.
    """
    host_header = req.host_header
    key = (req.first_line_format, req.scheme, host_header, req.host, req.port)
    hit = _origins.get(key)
    if hit is None:
        if req.first_line_format == "authority":
            hit = (req.pretty_host, req.pretty_url)
        else:
            pretty_host = req.pretty_host
            if host_header:
                _, port = url.parse_authority(host_header, check=False)
                port = port or url.default_port(req.scheme) or 443
            else:
                pretty_host, port = req.host, req.port
            hit = (pretty_host, url.unparse(req.scheme, pretty_host, port, ""))
        if len(_origins) >= _ORIGIN_CACHE:
            _origins.clear()
        _origins[key] = hit
    return hit


def request_url(req: http.Request, origin: str) -> str:
    """The request's URL (`pretty_url`) from its `request_origin`."""
    if req.first_line_format == "authority":
        return origin
    return origin + (req.path if req.path != "*" else "")
