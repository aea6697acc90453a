"""Name look-ups from inside the namespace, answered by the host's name servers.

A UDP socket on the namespace's loopback port 53 (made inside). A datagram that is a well-formed
query of a usual type (`dns_query.parse_query`) for a name the policy allows is sent on, byte for
byte, from a socket in the broker's own namespace to the host's name servers in turn, and the first
answer goes back: the addresses the host itself resolves. A name the policy refuses gets REFUSED;
anything else is dropped. A `--resolve` name is answered here with its synthetic address
(`synthetic_names`), never asked of a name server. Each is handed to `on_query(name, type, why)`
(why None: answered), the session's record of it. (TCP look-ups, used only for answers too big for
UDP, are refused inside like any other port.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable

from broker.exec.dns_query import DnsPolicy, NotAQuery, parse_query, refused_answer, synthetic_answer
from broker.exec.synthetic_names import SyntheticNames

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


OnQuery = Callable[[str, str, "str | None"], None]


class _Relay(asyncio.DatagramProtocol):
    def __init__(self, nameservers: list[str], port: int, policy: DnsPolicy, on_query: OnQuery | None,
                 synthetic: SyntheticNames | None = None) -> None:
        self.nameservers = nameservers
        self.synthetic = synthetic
        self.port = port
        self.policy = policy
        self.on_query = on_query
        self.transport: asyncio.DatagramTransport | None = None
        self.tasks: set[asyncio.Task] = set()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def _tell(self, name: str, qtype: str, why: str | None) -> None:
        if self.on_query is not None:
            self.on_query(name, qtype, why)

    def datagram_received(self, data: bytes, addr) -> None:
        try:
            query = parse_query(data)
        except NotAQuery as exc:
            log.warning("DNS relay: dropped a datagram: %s", exc)
            self._tell("", "", f"dropped: {exc}")
            return
        mapped = self.synthetic.address_of(query.name) if self.synthetic is not None else None
        why = None if mapped else self.policy.refusal(query.name)
        self._tell(query.name, query.qtype, why)
        if mapped:  # a --resolve name: answered here, never asked of a name server
            if self.transport is not None:
                self.transport.sendto(synthetic_answer(data, query.qtype, mapped), addr)
            return
        if why:
            if self.transport is not None:
                self.transport.sendto(refused_answer(data), addr)
            return
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
    def __init__(self, inside: socket.socket, nameservers: list[str], port: int = 53,
                 policy: DnsPolicy | None = None, on_query: OnQuery | None = None,
                 synthetic: SyntheticNames | None = None) -> None:
        self.inside = inside
        self.synthetic = synthetic
        self.nameservers = nameservers
        self.port = port
        self.policy = policy or DnsPolicy("relay")
        self.on_query = on_query
        self._transport: asyncio.DatagramTransport | None = None
        self._relay: _Relay | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._transport, self._relay = await loop.create_datagram_endpoint(
            lambda: _Relay(self.nameservers, self.port, self.policy, self.on_query, self.synthetic), sock=self.inside)

    async def stop(self) -> None:
        if self._relay is not None:
            for task in list(self._relay.tasks):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self._transport is not None:
            self._transport.close()
