"""mitmproxy addon: send a host's traffic to another address while URLs, Host and SNI stay as they are.

    mitmdump -s broker/proxy/upstream_resolve.py --set broker_resolve=gmail.googleapis.com=127.0.0.1:8443

For staging servers and tests (there is no internet here; the fake upstreams answer for the real
API hosts). The connector-journal addon script loads it too, so `broker_resolve` works with either.
"""

from __future__ import annotations

from collections.abc import Sequence

from mitmproxy import ctx, exceptions


def parse_resolve(specs: Sequence[str]) -> dict[str, tuple[str, int]]:
    """{"host": (ip, port)} from HOST=IP:PORT strings; OptionsError names a bad one."""
    out: dict[str, tuple[str, int]] = {}
    for spec in specs:
        host, _, target = spec.partition("=")
        ip, _, port = target.rpartition(":")
        if not host or not ip or not port.isdigit() or not 0 < int(port) < 65536:
            raise exceptions.OptionsError(f"--resolve {spec!r}: expected HOST=IP:PORT")
        out[host.lower()] = (ip.strip("[]"), int(port))
    return out


class UpstreamResolve:
    def __init__(self) -> None:
        self.targets: dict[str, tuple[str, int]] = {}
        self._original: dict[str, tuple[str, int]] = {}  # server connection id -> address before redirect

    def load(self, loader) -> None:
        loader.add_option(
            "broker_resolve", Sequence[str], [], "HOST=IP:PORT: send HOST's traffic there, keep the URL."
        )

    def configure(self, updated: set[str]) -> None:
        if "broker_resolve" in updated:
            self.targets = parse_resolve(ctx.options.broker_resolve)

    def server_connect(self, data) -> None:
        addr = data.server.address
        if addr and self.targets:
            target = self.targets.get(str(addr[0]).lower())
            if target:
                self._original[data.server.id] = addr
                data.server.address = target

    def server_connected(self, data) -> None:
        # Give the connection its original address back once the TCP connection is made, so that
        # mitmproxy reuses it for the next request to the same host: it matches connections by
        # address, and allows at most 5 open connections per address and client, so without this
        # every request would open a new upstream connection and the sixth would wait forever.
        # Server.__setattr__ forbids changing the address of an open connection (a guard against
        # redirecting it); here the destination does not change, only the name it is filed under.
        original = self._original.pop(data.server.id, None)
        if original is not None:
            object.__setattr__(data.server, "address", original)

    def server_connect_error(self, data) -> None:
        self._original.pop(data.server.id, None)


addons = [UpstreamResolve()]
