"""httpx clients that connect every fake host to the local server while keeping SNI and Host.

Why: tests talk to ``https://gmail.googleapis.com/...`` exactly as an agent would; only the TCP
destination changes (like the proxy's ``--resolve``), so certificate checks and Host routing are real.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpcore
import httpx

if TYPE_CHECKING:
    from .server import Upstream


class _MappedBackend(httpcore.NetworkBackend):
    """Sync backend rewriting (host, port) for the fake hosts to 127.0.0.1:PORT."""

    def __init__(self, mapping: dict[str, tuple[str, int]]) -> None:
        self._mapping = mapping
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        host, port = self._mapping.get(host, (host, port))
        return self._inner.connect_tcp(
            host, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.NetworkStream:
        return self._inner.connect_unix_socket(path, timeout=timeout, socket_options=socket_options)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _AsyncMappedBackend(httpcore.AsyncNetworkBackend):
    """Async counterpart of _MappedBackend."""

    def __init__(self, mapping: dict[str, tuple[str, int]]) -> None:
        self._mapping = mapping
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        host, port = self._mapping.get(host, (host, port))
        return await self._inner.connect_tcp(
            host, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.AsyncNetworkStream:
        return await self._inner.connect_unix_socket(path, timeout=timeout, socket_options=socket_options)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def mapped_client(up: Upstream, **kwargs: Any) -> httpx.Client:
    """``httpx.Client`` trusting the fake CA, ignoring env proxies, with hosts mapped to the server."""
    limits = kwargs.pop("limits", httpx.Limits(max_connections=256, max_keepalive_connections=64))
    transport = httpx.HTTPTransport(verify=up.ssl_context(), limits=limits, trust_env=False)
    transport._pool._network_backend = _MappedBackend(
        up.resolve_map()
    )  # httpcore has no public resolver hook
    kwargs.setdefault("timeout", 30.0)
    return httpx.Client(transport=transport, trust_env=False, **kwargs)


def mapped_async_client(up: Upstream, **kwargs: Any) -> httpx.AsyncClient:
    """``httpx.AsyncClient`` counterpart of mapped_client."""
    limits = kwargs.pop("limits", httpx.Limits(max_connections=256, max_keepalive_connections=64))
    transport = httpx.AsyncHTTPTransport(verify=up.ssl_context(), limits=limits, trust_env=False)
    transport._pool._network_backend = _AsyncMappedBackend(up.resolve_map())
    kwargs.setdefault("timeout", 30.0)
    return httpx.AsyncClient(transport=transport, trust_env=False, **kwargs)
