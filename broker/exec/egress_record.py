"""Refused egress is evidence: each refusal `broker exec` makes becomes an entry in the session.

The firewall's refusals (other TCP ports, UDP, IPv6 and any other protocol, read from NFLOG by
`refusals`), the listeners' refusals (`egress_guard`: a CONNECT or request to an address, to
loopback or a private network, to another port) and the name look-ups refused by policy
(`dns_relay`) are each handed here, from whatever thread saw them, and recorded through the one
path (`Recorder.record` on a `Call`) on a thread of their own, in the order seen. The shape
(docs/contract.md "Refused egress"): `connector: "egress"`, `request.method` the protocol in capitals
(`TCP`, `UDP`, `CONNECT`, `HTTP`, `DNS`, ...), `request.url` `<protocol>://<destination>[:<port>]`,
`response.status` null, `response.answered_by: "capture"`, `response.error` why. Each is also counted
in declared coverage as `refused` for its host. At most KEPT are recorded one by one; the rest are
counted, and one last entry says how many were not written out.

Each name COMMAND looks up through the DNS relay is recorded once per name and type:
`connector: "dns"`, `request.method` `DNS`, `request.url` `dns://<name>/?type=<A|AAAA|...>`,
`answered_by: "capture"` (the relay answered, with what the host's name servers said). A look-up the
policy refuses is a refused egress (`connector: "egress"`, the same method and URL).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from journal.call import Call
from journal.record import Recorder

log = logging.getLogger("broker.exec")
CONNECTOR = "egress"
DNS_CONNECTOR = "dns"
KEPT = 1000


def egress_url(protocol: str, host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"{protocol.lower()}://{shown}" + (f":{port}" if port is not None else "")


def dns_url(name: str, qtype: str) -> str:
    return f"dns://{name}/?type={qtype}"


def egress_call(session: str, agent: str, protocol: str, host: str, port: int | None, why: str) -> Call:
    return Call.make(
        session=session, agent=agent, principal="", connector=CONNECTOR, method=protocol.upper(),
        url=egress_url(protocol, host, port), error=why, answered_by="capture",
    )


class EgressRecord:
    """Records refusals for one session; `refused` may be called from any thread."""

    def __init__(self, recorder: Callable[[], Recorder | None], session: str, agent: str,
                 gap: Callable[[str, str, str], object] | None = None) -> None:
        self.recorder = recorder  # the broker's recorder, looked up when writing (it is made at start)
        self.session, self.agent = session, agent
        self.gap = gap
        self.seen = 0
        self.recorded = 0
        self._asked: set[tuple[str, str]] = set()
        self._queue: queue.Queue[Call | None] = queue.Queue()
        self._thread = threading.Thread(target=self._write, name="egress-record", daemon=True)
        self._thread.start()

    def refused(self, host: str, port: int | None, protocol: str, why: str) -> None:
        self.seen += 1
        if self.seen <= KEPT:
            self._queue.put(egress_call(self.session, self.agent, protocol, host, port, why))

    def looked_up(self, name: str, qtype: str, why: str | None) -> None:
        """A name COMMAND asked for: answered (`connector: "dns"`, once per name and type) or refused."""
        if why is not None:
            if not name:  # not a query at all
                self.refused("127.0.0.1", 53, "udp", f"DNS relay {why}")
                return
            self.seen += 1
            if self.seen <= KEPT:
                self._queue.put(Call.make(session=self.session, agent=self.agent, principal="", connector=CONNECTOR,
                                          method="DNS", url=dns_url(name, qtype), error=why, answered_by="capture"))
            return
        if (name, qtype) in self._asked or len(self._asked) >= KEPT:
            return
        self._asked.add((name, qtype))
        self._queue.put(Call.make(
            session=self.session, agent=self.agent, principal="", connector=DNS_CONNECTOR, method="DNS",
            url=dns_url(name, qtype), answered_by="capture",
            error="name look-up answered by broker exec's DNS relay (the host's name servers' answer, or a --resolve "
                  "name's synthetic address)"))

    def _write(self) -> None:
        while (call := self._queue.get()) is not None:
            recorder = self.recorder()
            if recorder is None:
                log.error("refused egress not recorded (no recorder): %s", call.request.url)
                continue
            try:
                recorder.record(call)
                self.recorded += 1
            except Exception as exc:  # noqa: BLE001 - reported; the next refusal is tried on its own
                log.error("refused egress not recorded: %s: %s", call.request.url, exc)
                continue
            if self.gap is not None:
                from urllib.parse import urlsplit

                self.gap(self.session, urlsplit(call.request.url).hostname or call.request.url, "refused")

    def close(self) -> None:
        """Write what is queued (and, past KEPT, one entry counting the rest); then stop."""
        if self.seen > KEPT:
            self._queue.put(egress_call(self.session, self.agent, "other", "unlisted", None,
                                        f"{self.seen - KEPT} more refusals, counted but not listed"))
        self._queue.put(None)
        self._thread.join(30)
