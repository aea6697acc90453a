"""Each refused packet, as the kernel's NFLOG hands it over (nfnetlink_log, read on a netlink socket
made inside the namespace): protocol, destination address and port, logged as it happens.

The REJECT rules' counters (`firewall.counts`) are the totals reported at exit; this log says what
was refused. The netlink socket is bound to the namespace's own NFLOG group, and the command inside
has no CAP_NET_ADMIN, so it can neither read nor silence it.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass

from broker.exec.firewall import NFLOG_GROUP
from broker.exec.netns import Namespace

log = logging.getLogger("broker.exec")
NETLINK_NETFILTER = 12
NFNL_SUBSYS_ULOG = 4
NFULNL_MSG_PACKET = 0
NFULNL_MSG_CONFIG = 1
NFULA_CFG_CMD = 1
NFULA_CFG_MODE = 2
NFULA_CFG_TIMEOUT = 3
NFULA_CFG_QTHRESH = 4
NFULNL_CFG_CMD_BIND = 1
NFULNL_COPY_PACKET = 2
NFULA_PAYLOAD = 9
NLM_F_REQUEST = 1
NLM_F_ACK = 4
NLMSG_ERROR = 2
PROTOCOLS = {6: "tcp", 17: "udp", 1: "icmp", 58: "icmpv6"}
KEPT = 1000  # refusals logged and kept for the summary; the counters count them all


@dataclass(frozen=True)
class Refusal:
    protocol: str
    destination: str
    port: int | None

    def __str__(self) -> str:
        host = f"[{self.destination}]" if ":" in self.destination else self.destination
        return f"{self.protocol} {host}:{self.port}" if self.port is not None else f"{self.protocol} {host}"


def _attr(kind: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


def _config_message(seq: int, attrs: bytes) -> bytes:
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(NFLOG_GROUP)) + attrs
    head = struct.pack("=IHHII", 16 + len(body), NFNL_SUBSYS_ULOG << 8 | NFULNL_MSG_CONFIG,
                       NLM_F_REQUEST | NLM_F_ACK, seq, 0)
    return head + body


def parse_packet(payload: bytes) -> Refusal | None:
    """The protocol and destination of an IPv4 or IPv6 packet (its first bytes suffice)."""
    if not payload:
        return None
    version = payload[0] >> 4
    if version == 4 and len(payload) >= 20:
        ihl = (payload[0] & 0x0F) * 4
        proto = payload[9]
        dst = str(ipaddress.IPv4Address(payload[16:20]))
        transport = payload[ihl:]
    elif version == 6 and len(payload) >= 40:
        proto = payload[6]
        dst = str(ipaddress.IPv6Address(payload[24:40]))
        transport = payload[40:]
    else:
        return None
    port = struct.unpack("!H", transport[2:4])[0] if proto in (6, 17) and len(transport) >= 4 else None
    return Refusal(PROTOCOLS.get(proto, f"ip-proto-{proto}"), dst, port)


def parse_messages(data: bytes) -> list[Refusal]:
    """The refusals in one netlink datagram (which may hold several messages)."""
    found = []
    offset = 0
    while offset + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, offset)
        if length < 16:
            break
        if kind == NFNL_SUBSYS_ULOG << 8 | NFULNL_MSG_PACKET:
            pos = offset + 16 + 4  # netlink header, nfgenmsg
            end = offset + length
            while pos + 4 <= end:
                alen, atype = struct.unpack_from("=HH", data, pos)
                if alen < 4:
                    break
                if atype & 0x7FFF == NFULA_PAYLOAD:
                    refusal = parse_packet(data[pos + 4:pos + alen])
                    if refusal:
                        found.append(refusal)
                pos += alen + (-alen % 4)
        offset += length + (-length % 4)
    return found


class RefusalLog:
    """Reads the namespace's NFLOG group on a thread until `stop`."""

    def __init__(self, ns: Namespace, on_refusal: Callable[[Refusal], None] | None = None) -> None:
        self.ns = ns
        self.on_refusal = on_refusal  # each refusal, as read (the session's record of it: egress_record)
        self.seen: list[Refusal] = []
        self.total = 0
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False

    def start(self) -> None:
        def make() -> socket.socket:
            s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
            s.bind((0, 0))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            cmd = _attr(NFULA_CFG_CMD, struct.pack("=B", NFULNL_CFG_CMD_BIND))
            mode = _attr(NFULA_CFG_MODE, struct.pack("!IBB", 128, NFULNL_COPY_PACKET, 0))
            # each packet handed over at once, not batched for up to a second
            flush = _attr(NFULA_CFG_QTHRESH, struct.pack("!I", 1)) + _attr(NFULA_CFG_TIMEOUT, struct.pack("!I", 0))
            for seq, attrs in ((1, cmd), (2, mode + flush)):
                s.send(_config_message(seq, attrs))
                reply = s.recv(65536)
                if len(reply) >= 20 and struct.unpack_from("=H", reply, 4)[0] == NLMSG_ERROR:
                    err = struct.unpack_from("=i", reply, 16)[0]
                    if err:
                        s.close()
                        raise OSError(-err, f"NFLOG group {NFLOG_GROUP} in {self.ns.name}: configuring failed")
            s.settimeout(0.2)
            return s

        self._sock = self.ns.run_inside(make)
        self._thread = threading.Thread(target=self._read, name="refusal-log", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._sock is not None
        while True:
            try:
                data = self._sock.recv(65536)
            except TimeoutError:
                if self._stopping:  # nothing left to read
                    return
                continue
            except OSError as exc:  # ENOBUFS: messages lost (the counters still count them)
                if self._stopping:
                    return
                log.warning("refusal log: %s", exc)
                continue
            for refusal in parse_messages(data):
                self.total += 1
                if self.on_refusal is not None:
                    self.on_refusal(refusal)
                if len(self.seen) < KEPT:
                    self.seen.append(refusal)
                    log.warning("refused %s (only TCP to ports 80 and 443 goes out, through the broker)", refusal)
                elif self.total == KEPT + 1:
                    log.warning("more refusals: counted, no longer logged one by one")

    def stop(self) -> None:
        """Read what the kernel still holds (it hands each packet over at once), then stop. Idempotent."""
        self._stopping = True
        if self._thread is not None:
            # The reader stops at its first empty read after this (0.2 s); a loaded machine can keep it from
            # running for longer than that, and closing the socket under it loses what it had not read yet.
            self._thread.join(10)
        if self._sock is not None:
            self._sock.close()
