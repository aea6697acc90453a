"""mitmproxy listening on sockets made inside the namespace.

mitmproxy binds its listeners itself (`AsyncioServerInstance.listen`, from a mode spec such as
`transparent@127.0.0.1:PORT`). For `broker exec` the listening socket must live in the command's
namespace, where the REDIRECT happens (SO_ORIGINAL_DST looks the connection up in the socket's own
namespace), while the rest of mitmproxy, and so every upstream connection, stays in the broker's.
So `listen` is wrapped once per process: a mode spec whose (host, port) has sockets registered here
is served on those sockets; any other spec binds as mitmproxy always does.
"""

from __future__ import annotations

import asyncio
import socket

from mitmproxy.proxy import mode_servers

_PREMADE: dict[tuple[str, str, int], list[socket.socket]] = {}
_original_listen = mode_servers.AsyncioServerInstance.listen


async def _listen(self, host: str, port: int):
    socks = _PREMADE.get((self.mode.type_name, host, port))
    if socks is None:
        return await _original_listen(self, host, port)
    return [await asyncio.start_server(self.handle_stream, sock=s) for s in socks]


def install() -> None:
    if mode_servers.AsyncioServerInstance.listen is not _listen:
        # Replacing mitmproxy's method is this module's purpose (see the docstring); mypy forbids it by default.
        mode_servers.AsyncioServerInstance.listen = _listen  # type: ignore[method-assign]


def register(mode: str, socks: list[socket.socket]) -> str:
    """Serve mitmproxy mode `mode` (e.g. "transparent") on `socks`; the mode spec to give mitmproxy."""
    install()
    host, port = socks[0].getsockname()[:2]
    _PREMADE[(mode, host, port)] = socks
    return f"{mode}@{host}:{port}"


def unregister(spec: str) -> None:
    mode, _, addr = spec.partition("@")
    host, _, port = addr.rpartition(":")
    for s in _PREMADE.pop((mode, host, int(port)), []):
        s.close()
