"""The addresses `--resolve` names resolve to inside the namespace: public to every SSRF guard, never reached.

A `--resolve HOST=IP:PORT` host is served by the broker (which sends its traffic to IP:PORT), so
inside the namespace it must resolve to *some* address whose TCP 80/443 the firewall redirects to
the broker. The namespace's own address (10.253.0.1) would do for the traffic, but it is private:
HTTP clients with SSRF protection (mcp-server-fetch, ssrf-req-filter, guards built on Python's
`ipaddress`) refuse every such name. So each name gets an address of its own from SYNTHETIC_V4:

- `ipaddress` says `is_global` (not private, loopback, link-local, shared or reserved), ipaddr.js
  (Node's guards) says `unicast`, and mcp-server-fetch's own list of special-purpose ranges does
  not hold it: 6.0.0.0/8 is an ordinary unicast allocation (a legacy block held by one organisation),
  not a special-purpose block (every special-purpose block is refused by some guard);
- nothing is ever sent to it: the namespace has no route out at all (its default route is its own
  loopback), TCP to 80/443 of any address is redirected to the broker's transparent listener, and
  everything else is refused by the firewall. The broker connects by *name* (Host header, else SNI:
  `broker.proxy.upstream_name`, `broker.proxy.destination`), so what really lives at these addresses
  is neither reached nor consulted.

The mapping is kept per sandbox: the hosts file and the DNS relay answer each name with its address,
and a transparently captured request that names no host (no Host header, no SNI) to one of these
addresses goes to the name it stood for (`requestheaders`, a mitmproxy hook). The name a request
carries still decides; the address is only the fallback.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from mitmproxy import http
from mitmproxy.proxy.mode_specs import TransparentMode

SYNTHETIC_V4 = ipaddress.IPv4Network("6.253.0.0/16")


class SyntheticNames:
    """name -> address (in SYNTHETIC_V4, one per name, in sorted order) and back."""

    def __init__(self, names: Iterable[str]) -> None:
        ordered = sorted({n.lower().rstrip(".") for n in names if n})
        if len(ordered) > SYNTHETIC_V4.num_addresses - 2:
            raise ValueError(f"--resolve: at most {SYNTHETIC_V4.num_addresses - 2} names")
        # (not `name`: mitmproxy takes an addon's `name` attribute for its name)
        self.by_name: dict[str, str] = {name: str(SYNTHETIC_V4[i + 1]) for i, name in enumerate(ordered)}
        self.by_address: dict[str, str] = {a: n for n, a in self.by_name.items()}

    def address_of(self, name: str) -> str | None:
        return self.by_name.get(name.lower().rstrip("."))

    def name_of(self, address: str) -> str | None:
        return self.by_address.get(address.strip("[]"))

    def hosts_lines(self) -> list[str]:
        """/etc/hosts lines for the namespace (one address per name)."""
        return [f"{address} {name}" for name, address in self.by_name.items()]

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        """A transparent request still addressed to a synthetic address (it named no host): the name."""
        if not isinstance(flow.client_conn.proxy_mode, TransparentMode):
            return
        name = self.name_of(flow.request.host)
        if name is not None:
            flow.request.data.host = name  # not .host: that would write a Host header the client never sent
