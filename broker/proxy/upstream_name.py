"""mitmproxy addon: a transparently captured request goes to the host the client named.

In transparent mode mitmproxy would connect to the original destination address. The broker
connects to the host the request names instead (its Host header, else the TLS SNI), as a forward
proxy does: the
host recorded is the host the call went to, upstream TLS is verified for that name, and
`--resolve` (which matches host names) applies. A request that names no host goes to the original
destination.
"""

from __future__ import annotations

import ipaddress

from mitmproxy import http
from mitmproxy.net.http import url
from mitmproxy.proxy.mode_specs import TransparentMode


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


class UpstreamName:
    def requestheaders(self, flow: http.HTTPFlow) -> None:
        if not isinstance(flow.client_conn.proxy_mode, TransparentMode):
            return
        name = ""
        if flow.request.host_header:
            try:
                name = url.parse_authority(flow.request.host_header, check=True)[0]
            except ValueError:
                name = ""
        name = (name or flow.client_conn.sni or "").lower()
        if name and not _is_address(name) and name != flow.request.host:
            flow.request.data.host = name  # not .host: that would rewrite the Host header too

