"""Name look-ups from inside the namespace, answered by the host's name servers.

A UDP socket on the namespace's loopback port 53 (made inside); each query is sent on, byte for
byte, from a socket in the broker's own namespace to the host's name servers in turn, and the first
answer goes back. No parsing: the relay neither sees nor changes what is asked. (TCP look-ups, used
only for answers too big for UDP, are refused inside like any other port.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket

log = logging.getLogger("broker.exec")
QUERY_TIMEOUT = 3.0


class _Answer(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def datagram_received(self, data: bytes, addr) -> None:
        if not self.future.done():
            self.future.set_result(data)

    def error_received(self, exc: Exception) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


async def ask(nameserver: str, query: bytes, port: int = 53, timeout: float = QUERY_TIMEOUT) -> bytes:
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in nameserver else socket.AF_INET
    transport, proto = await loop.create_datagram_endpoint(_Answer, remote_addr=(nameserver, port), family=family)
    try:
        transport.sendto(query)
        return await asyncio.wait_for(proto.future, timeout)
    finally:
        transport.close()


class _Relay(asyncio.DatagramProtocol):
    def __init__(self, nameservers: list[str], port: int) -> None:
        self.nameservers = nameservers
        self.port = port
        self.transport: asyncio.DatagramTransport | None = None
        self.tasks: set[asyncio.Task] = set()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        task = asyncio.get_running_loop().create_task(self._answer(data, addr))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _answer(self, query: bytes, addr) -> None:
        for server in self.nameservers:
            try:
                answer = await ask(server, query, self.port)
            except (OSError, TimeoutError) as exc:
                log.info("name server %s: %s", server, exc or "no answer")
                continue
            if self.transport is not None:
                self.transport.sendto(answer, addr)
            return


class DnsRelay:
    def __init__(self, inside: socket.socket, nameservers: list[str], port: int = 53) -> None:
        self.inside = inside
        self.nameservers = nameservers
        self.port = port
        self._transport: asyncio.DatagramTransport | None = None
        self._relay: _Relay | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._transport, self._relay = await loop.create_datagram_endpoint(
            lambda: _Relay(self.nameservers, self.port), sock=self.inside)

    async def stop(self) -> None:
        if self._relay is not None:
            for task in list(self._relay.tasks):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self._transport is not None:
            self._transport.close()
