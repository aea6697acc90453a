"""mitmproxy addon for `broker exec`: the broker's listeners inside the namespace are no door to the host.

The proxy listener named in HTTPS_PROXY (and the transparent one) would otherwise tunnel anything
anywhere the broker itself can reach: `CONNECT 127.0.0.1:5432` to the host's database, the
inspector on loopback, a cloud metadata address, with raw TCP passed through. Here a request goes
out only to a host *name* on port 80 or 443 (what a connector or `broker run` records) whose
addresses, as the host resolves them, are all public, or to a name the operator mapped with
`--resolve`. Everything else is answered 403 before anything is sent; a tunnel that carries neither
TLS nor HTTP is closed (never raw TCP passthrough). The address checked is the address connected
to: the connection is pinned to it, so a name that resolves once public and then private (DNS
rebinding) does not get through.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Callable, Iterable

from mitmproxy import http, tcp, udp

from journal.errors import BrokerError

log = logging.getLogger("broker.exec")
ALLOWED_PORTS = (80, 443)


class Refused(BrokerError):
    """Why a destination is refused (the text of the 403 and of the session's entry)."""


def literal_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Globally routable: not loopback, private, link-local, shared, reserved, multicast or unspecified."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


def check_destination(host: str, port: int, mapped: Iterable[str] = ()) -> None:
    """Refused unless `host` is a name (not an address) and `port` is 80 or 443; a name mapped by
    --resolve is the operator's and passes as it is."""
    if port not in ALLOWED_PORTS:
        raise Refused(f"port {port}: only ports 80 and 443 go out, through the broker")
    if literal_address(host) is not None:
        raise Refused(f"{host}: an address, not a host name; only named hosts are reached through the broker")
    if not host or host.lower().rstrip(".") in ("localhost",) or host.lower().endswith(".localhost"):
        raise Refused(f"{host or 'no host'}: not a public host name")


def public_addresses(host: str, port: int) -> list[str]:
    """The host's own resolution of `host`, all of it public, or Refused."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise Refused(f"{host}: does not resolve ({exc})") from None
    found = []
    for *_, sockaddr in infos:
        address = literal_address(str(sockaddr[0]))
        if address is None or not is_public(address):
            raise Refused(f"{host} resolves to {sockaddr[0]}, not a public address")
        found.append(str(address))
    if not found:
        raise Refused(f"{host}: no address")
    return found


def forbidden(flow: http.HTTPFlow, why: str) -> None:
    flow.response = http.Response.make(403, f"broker exec: refused: {why}\n".encode(),
                                       {"content-type": "text/plain", "connection": "close"})


class EgressGuard:
    """Refuse every destination `check_destination` refuses, at the CONNECT, at the request and at the
    upstream connection; close any tunnel that is not TLS or HTTP. `on_refused(host, port, protocol,
    why)` is told of each refusal (the session's record of it)."""

    def __init__(self, mapped: Iterable[str] = (),
                 on_refused: Callable[[str, int | None, str, str], None] | None = None) -> None:
        self.mapped = {h.lower() for h in mapped}
        self.on_refused = on_refused
        self._pinned: dict[str, tuple[str, int]] = {}  # server connection id -> the name it was filed under

    def _refuse(self, host: str, port: int | None, protocol: str, why: str) -> None:
        log.warning("refused %s %s:%s: %s", protocol, host, port, why)
        if self.on_refused is not None:
            self.on_refused(host, port, protocol, why)

    def _check(self, host: str, port: int) -> str | None:
        if host.lower() in self.mapped and port in ALLOWED_PORTS:
            return None
        try:
            check_destination(host, port, self.mapped)
        except Refused as exc:
            return str(exc)
        return None

    def http_connect(self, flow: http.HTTPFlow) -> None:
        why = self._check(flow.request.host, flow.request.port)
        if why:
            self._refuse(flow.request.host, flow.request.port, "connect", why)
            forbidden(flow, why)

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None:
            return
        why = self._check(flow.request.host, flow.request.port)
        if why:
            self._refuse(flow.request.host, flow.request.port, flow.request.scheme, why)
            forbidden(flow, why)

    async def server_connect(self, data) -> None:
        """The last word, on the address actually connected to: resolved here and pinned."""
        host, port = str(data.server.address[0]), int(data.server.address[1])
        if host.lower() in self.mapped and port in ALLOWED_PORTS:
            return
        why = self._check(host, port)
        addresses: list[str] = []
        if not why:
            try:
                addresses = await asyncio.to_thread(public_addresses, host, port)
            except Refused as exc:
                why = str(exc)
        if why:
            self._refuse(host, port, "tcp", why)
            data.server.error = f"broker exec: refused: {why}"
            return
        self._pinned[data.server.id] = (host, port)
        data.server.address = (addresses[0], port)

    def server_connected(self, data) -> None:
        # As upstream_resolve: file the connection under its name again, so mitmproxy reuses it.
        named = self._pinned.pop(data.server.id, None)
        if named is not None:
            object.__setattr__(data.server, "address", named)

    def server_connect_error(self, data) -> None:
        self._pinned.pop(data.server.id, None)

    def tcp_start(self, flow: tcp.TCPFlow) -> None:
        """A tunnel that is neither TLS nor HTTP: closed, never passed through."""
        address = flow.server_conn.address or ("", None)
        self._refuse(str(address[0]), address[1], "tcp", "neither TLS nor HTTP: no raw TCP through the broker")
        flow.kill()

    def udp_start(self, flow: udp.UDPFlow) -> None:
        address = flow.server_conn.address or ("", None)
        self._refuse(str(address[0]), address[1], "udp", "no UDP through the broker")
        flow.kill()
