"""What `broker exec`'s DNS relay answers: well-formed queries of the usual types, for names the policy allows.

A datagram to the relay is answered only when it is one standard query (QR 0, opcode QUERY, one
question of class IN, no answer or authority records, at most the one EDNS OPT record) for an
address-like type (`USUAL_TYPES`) whose name is made of ordinary labels (letters, digits, `-`,
`_`). Anything else (not DNS at all, TXT, NULL, ANY, several questions, an update) is dropped, so
the relay is no general channel: TXT answers are the usual way back for a DNS tunnel.

The policy (`--dns`): `relay` (the default) answers any such name from the host's own name servers,
because an agent may reach any HTTPS host through the broker (recorded or passed as `broker run`
would) and needs the name resolved for it; every name asked is on the record. `connectors` answers
only names a connector knows, `--resolve` names and `--dns-allow` names (what else COMMAND asks for
is refused and recorded), closing names as a channel out. `none` answers nothing (only /etc/hosts
inside: the --resolve names).
"""

from __future__ import annotations

import ipaddress
import re
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from journal.errors import PeerError

USUAL_TYPES = {1: "A", 28: "AAAA", 5: "CNAME", 12: "PTR", 33: "SRV", 64: "SVCB", 65: "HTTPS"}
CLASS_IN = 1
TYPE_OPT = 41
MODES = ("relay", "connectors", "none")
_LABEL = re.compile(rb"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")


class NotAQuery(PeerError):
    """The datagram is not a query the relay answers; the message says why (recorded)."""


@dataclass(frozen=True)
class Query:
    name: str
    qtype: str


def parse_query(data: bytes) -> Query:
    """The one question of a well-formed standard query of a usual type, or NotAQuery."""
    if len(data) < 12:
        raise NotAQuery("not DNS: shorter than a header")
    _id, flags, qd, an, ns, ar = struct.unpack("!HHHHHH", data[:12])
    if flags & 0x8000 or (flags >> 11) & 0xF or flags & 0x000F:
        raise NotAQuery("not a standard query (a response, another opcode or an rcode set)")
    if qd != 1 or an or ns or ar > 1:
        raise NotAQuery("not one question alone")
    pos, labels = 12, []
    while True:
        if pos >= len(data):
            raise NotAQuery("truncated name")
        n = data[pos]
        pos += 1
        if n == 0:
            break
        if n > 63 or not _LABEL.fullmatch(data[pos:pos + n]):
            raise NotAQuery("a name label that is not letters, digits, '-' or '_'")
        labels.append(data[pos:pos + n].decode("ascii").lower())
        pos += n
    name = ".".join(labels)
    if not labels or len(name) > 253:
        raise NotAQuery("an empty or over-long name")
    if pos + 4 > len(data):
        raise NotAQuery("truncated question")
    qtype, qclass = struct.unpack("!HH", data[pos:pos + 4])
    pos += 4
    if qclass != CLASS_IN:
        raise NotAQuery(f"class {qclass}, not IN")
    if qtype not in USUAL_TYPES:
        raise NotAQuery(f"type {qtype} ({'TXT' if qtype == 16 else 'ANY' if qtype == 255 else 'unusual'}) "
                        f"for {name}: only {', '.join(USUAL_TYPES.values())} are answered")
    if ar:  # the EDNS OPT pseudo-record: root name, type OPT, then class/ttl/rdlength and its options
        if data[pos:pos + 3] != b"\x00" + struct.pack("!H", TYPE_OPT):
            raise NotAQuery("an additional record that is not EDNS OPT")
        if pos + 11 > len(data):
            raise NotAQuery("truncated EDNS OPT record")
        rdlength = struct.unpack("!H", data[pos + 9:pos + 11])[0]
        pos += 11 + rdlength
    if pos != len(data):
        raise NotAQuery("trailing bytes after the question")
    return Query(name, USUAL_TYPES[qtype])


class DnsPolicy:
    """Which names are answered (see the module docstring); `refusal(name)` says why not, or None."""

    def __init__(self, mode: str, allowed: Iterable[str] = (), known: Callable[[str], bool] | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"--dns {mode!r}: give one of {', '.join(MODES)}")
        self.mode = mode
        self.allowed = {a.lower().rstrip(".") for a in allowed}
        self.known = known

    def refusal(self, name: str) -> str | None:
        if self.mode == "relay":
            return None
        if self.mode == "none":
            return f"{name}: --dns none answers no name"
        if name in self.allowed:
            return None
        if self.known is not None and self.known(name):
            return None
        return f"{name}: --dns connectors answers only names a connector knows, --resolve and --dns-allow names"


def _question(query: bytes) -> bytes:
    """The question of a well-formed query, without its EDNS record."""
    end = 12
    while query[end]:
        end += query[end] + 1
    return query[12:end + 5]


def _answer(query: bytes, rcode: int, records: bytes = b"", count: int = 0) -> bytes:
    flags = struct.unpack("!H", query[2:4])[0]
    answer_flags = 0x8000 | (flags & 0x0100) | 0x0080 | rcode  # QR, RD copied, RA, rcode
    return query[:2] + struct.pack("!HHHHH", answer_flags, 1, count, 0, 0) + _question(query) + records


def refused_answer(query: bytes) -> bytes:
    """The REFUSED answer to a well-formed query (its question kept), so the client fails at once."""
    return _answer(query, 5)


def synthetic_answer(query: bytes, qtype: str, address: str) -> bytes:
    """The answer to a well-formed query for a `--resolve` name (broker/exec/synthetic_names.py): its one
    IPv4 address for A, no record (NODATA) for any other type, never a question to a name server."""
    if qtype != "A":
        return _answer(query, 0)
    record = struct.pack("!HHHIH", 0xC00C, 1, CLASS_IN, 60, 4) + ipaddress.IPv4Address(address).packed
    return _answer(query, 0, record, 1)
