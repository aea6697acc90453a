"""One destination per call: the host the connection goes to decides, never a header.

mitmproxy connects a request to `request.host:port`: the CONNECT target inside a tunnel, the
absolute URL's host for a plain proxied request, the original destination in transparent mode (where
`broker.proxy.upstream_name` names it). Every other name the request carries (each `Host` header,
the absolute-form or HTTP/2 `:authority` target, the TLS SNI the client sent) must name that same
host and port: otherwise the connector, the recorded URL and the upstream connection could follow
different hosts (a tunnel to the platform carrying `Host: evil.example` would pass as an unknown
host, a tunnel to the agent's own server carrying the platform's name would be recorded as the
platform). Such a request is refused before upstream, 421 Misdirected Request (RFC 9110 15.5.20),
with an entry saying why. Case and a trailing dot are spellings of the same host.

In transparent mode the destination is the name `broker.proxy.upstream_name` gives the connection
(the Host header's, else the SNI's; `broker exec` loads it), and the SNI must then name it too.
Without that addon the destination is the original address, and a request naming a host name is
refused: load addons/upstream_name.py with a transparent `mitmdump -s`.
"""

from __future__ import annotations

import ipaddress

from mitmproxy import http
from mitmproxy.net.http import url

MISDIRECTED = 421


def same_host(a: str, b: str) -> bool:
    """Two spellings of one host name: case and one trailing dot do not count; IPv6 brackets neither."""
    return _plain(a) == _plain(b)


def _plain(host: str) -> str:
    return host.strip().strip("[]").lower().removesuffix(".")


def is_address(host: str) -> bool:
    """True for an IP literal (with or without IPv6 brackets)."""
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


_ACCEPTED_CACHE = 1024
_accepted: set[tuple] = set()


def misdirected(req: http.Request, sni: str | None) -> str | None:
    """Why the request names another destination than the one it goes to, or None when every name it
    carries is the destination's (see the module docstring). `sni`: the client's TLS SNI, if any.

    The names a request was let through with are remembered, keyed by everything the verdict is read
    from: reading them costs about 13 us a request, and a keep-alive client sends the same ones every
    time. (Only those: a refused request's names, whatever they hold, are not kept.)
    """
    key = (req.scheme, req.host, req.port, tuple(req.headers.get_all("host")), req.authority, sni)
    if key in _accepted:
        return None
    why = _misdirected(*key)
    if why is None:
        if len(_accepted) >= _ACCEPTED_CACHE:
            _accepted.clear()
        _accepted.add(key)
    return why


def _misdirected(scheme: str, dest_host: str, dest_port: int, hosts: tuple[str, ...], authority: str,
                 sni: str | None) -> str | None:
    default_port = url.default_port(scheme) or dest_port
    named: list[tuple[str, str]] = [("Host header", v) for v in hosts]
    if authority:
        named.append(("request target", authority))
    for what, value in named:
        try:
            host, port = url.parse_authority(value, check=False)
        except ValueError:
            return f"the {what} {value!r} cannot be read as a host; the connection goes to {dest_host}:{dest_port}"
        if not same_host(host, dest_host) or (port or default_port) != dest_port:
            return (f"misdirected request: the {what} names {value!r}, but the connection goes to "
                    f"{dest_host}:{dest_port}; the destination decides, so the call was not forwarded")
    if sni and not is_address(sni) and not same_host(sni, dest_host):
        return (f"misdirected request: TLS SNI names {sni!r}, but the connection goes to "
                f"{dest_host}:{dest_port}; the call was not forwarded")
    return None
