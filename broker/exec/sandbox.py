"""A namespace whose only way out is the broker: everything `broker exec` makes, in order, and
removed again whatever happens (see cleanup for after a crash).

Order matters for failing closed: the rules are loaded, the broker's listeners exist and the
names are written before the command can start, so there is no moment at which it could reach the
network unrecorded; `close` stops the relay, reads the refusal counters and deletes the namespace.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from broker.exec import capabilities, cleanup, firewall, names
from broker.exec.confinement import Confinement
from broker.exec.dns_query import DnsPolicy
from broker.exec.dns_relay import DnsRelay
from broker.exec.egress_record import EgressRecord
from broker.exec.netns import Namespace
from broker.exec.refusals import Refusal, RefusalLog
from broker.exec.synthetic_names import SyntheticNames
from broker.proxy import listener

log = logging.getLogger("broker.exec")


@dataclass
class RefusalReport:
    counts: dict[str, int]
    seen: list[Refusal] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        if not self.total:
            return "nothing refused"
        kinds = ", ".join(f"{k} {n}" for k, n in self.counts.items() if n)
        distinct = sorted({str(r) for r in self.seen})
        shown = "; ".join(distinct[:10]) + (f"; and {len(distinct) - 10} more" if len(distinct) > 10 else "")
        return f"refused {self.total} packet(s) ({kinds})" + (f": {shown}" if shown else "")


class Sandbox:
    def __init__(self, resolved_hosts: Iterable[str] = ()) -> None:
        self.resolved_hosts = list(resolved_hosts)
        self.synthetic = SyntheticNames(self.resolved_hosts)  # what --resolve names resolve to inside
        self.claim: cleanup.Claim | None = None
        self.ns: Namespace | None = None
        self.ipv6 = False
        self.specs: list[str] = []
        self.proxy_port = 0
        self.transparent_port = 0
        self.dns: DnsRelay | None = None
        self.refusals: RefusalLog | None = None
        self.report: RefusalReport | None = None
        # told of each destination the broker's listeners refuse (host, port, protocol, why)
        self.on_refused: Callable[[str, int | None, str, str], None] | None = None
        self.dns_policy = DnsPolicy("relay")  # --dns (dns_query)
        self.on_dns: Callable[[str, str, str | None], None] | None = None  # each name asked (egress_record)
        self.egress: EgressRecord | None = None

    @property
    def name(self) -> str:
        assert self.claim is not None
        return self.claim.name

    async def open(self) -> None:
        capabilities.require()
        self.claim = cleanup.allocate()
        try:
            await self._make()
        except BaseException:
            await self.close()
            raise

    async def _make(self) -> None:
        assert self.claim is not None
        ns = self.ns = Namespace(self.claim.name)
        self.ipv6 = capabilities.has_ipv6()
        ns.create(self.ipv6)
        transparent = [ns.socket_inside(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 0))]
        if self.ipv6:
            transparent.append(ns.socket_inside(socket.AF_INET6, socket.SOCK_STREAM, ("::1", 0)))
        ports = [s.getsockname()[1] for s in transparent]
        self.transparent_port = ports[0]
        self.specs.append(listener.register("transparent", transparent))
        regular = ns.socket_inside(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 0))
        self.proxy_port = regular.getsockname()[1]
        self.specs.append(listener.register("regular", [regular]))
        firewall.apply(ns, ports[0], ports[1] if self.ipv6 else None)
        nameservers = names.write(self.claim.etc_dir, self.synthetic)
        self.dns = DnsRelay(ns.socket_inside(socket.AF_INET, socket.SOCK_DGRAM, (names.RELAY_ADDRESS, 53)),
                            nameservers, policy=self.dns_policy, on_query=self._asked,
                            synthetic=self.synthetic)
        await self.dns.start()
        self.refusals = RefusalLog(ns, on_refusal=self._firewall_refused)
        self.refusals.start()
        log.info("namespace %s: TCP 80/443 to the broker on 127.0.0.1:%d inside, the rest refused",
                 ns.name, self.transparent_port)

    def _refused(self, host: str, port: int | None, protocol: str, why: str) -> None:
        if self.on_refused is not None:
            self.on_refused(host, port, protocol, why)

    def _asked(self, name: str, qtype: str, why: str | None) -> None:
        if self.on_dns is not None:
            self.on_dns(name, qtype, why)

    def _firewall_refused(self, refusal: Refusal) -> None:
        self._refused(refusal.destination, refusal.port, refusal.protocol,
                      "refused by the namespace's firewall: only TCP to ports 80 and 443 goes out, through the broker")

    def stop_refusals(self) -> None:
        """Stop reading refusals (every one the command caused has been handed on)."""
        if self.refusals is not None:
            self.refusals.stop()

    def publish_bundle(self, bundle: str) -> str:
        """A copy of the CA bundle (public certificates only) that COMMAND can read as any user."""
        assert self.claim is not None
        target = self.claim.ca_bundle
        target.parent.mkdir(mode=0o755, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        shutil.copyfile(bundle, tmp)
        tmp.chmod(0o644)
        tmp.replace(target)
        return str(target)

    def record_egress(self, proxy, session: str, agent: str) -> None:
        """Every refusal and every name asked, from now on an entry of `session` written by `proxy`'s recorder
        (egress_record), and counted in its declared coverage; `stop_recording_egress` writes the last."""
        from broker.exec.egress_record import EgressRecord

        loop = asyncio.get_running_loop()
        self.egress = EgressRecord(lambda: proxy.addon.recorder, session, agent,
                                   gap=lambda *gap: loop.call_soon_threadsafe(proxy.addon.coverage.gap, *gap))
        self.on_refused, self.on_dns = self.egress.refused, self.egress.looked_up

    async def stop_recording_egress(self) -> None:
        """Every refusal the command caused is an entry (call before the broker's recorder closes)."""
        self.stop_refusals()
        self.on_refused = self.on_dns = None
        if self.egress is not None:
            await asyncio.to_thread(self.egress.close)
            self.egress = None

    def confined(self, confinement: Confinement, argv: list[str], bundle: str,
                 proxy: tuple[str, str] | None) -> tuple[list[str], dict[str, str]]:
        """The command line and environment that run `argv` inside, confined (confine.py, as `confinement`
        says): a public copy of the CA `bundle` with every CA variable pointing at it, and, given (session,
        agent), the proxy variables pointing at the proxy listener inside."""
        from broker.exec.environment import client_environment, proxy_url

        public = self.publish_bundle(bundle)
        confinement.put_back.append(public)
        url = proxy_url("127.0.0.1", self.proxy_port, *proxy) if proxy else None
        return self.enter(confinement.argv(argv)), confinement.environment(client_environment(os.environ, public, url))

    def contain(self, config) -> tuple:
        """Point a ProxyConfig at the listeners inside; the addons a contained broker needs."""
        from broker.exec.egress_guard import EgressGuard
        from broker.proxy.upstream_name import UpstreamName
        from broker.proxy.upstream_resolve import parse_resolve

        config.mode = list(self.specs)
        return (UpstreamName(), self.synthetic, EgressGuard(parse_resolve(config.resolve), on_refused=self._refused))

    def enter(self, argv: list[str]) -> list[str]:
        """argv run inside the namespace as it is (`confined` confines it first: confinement.py)."""
        assert self.ns is not None
        return ["ip", "netns", "exec", self.ns.name, *argv]

    async def close(self) -> None:
        """Stop the relay and the refusal log, count the refusals, delete the namespace. Idempotent."""
        if self.refusals is not None:
            self.refusals.stop()
        if self.dns is not None:
            await self.dns.stop()
            self.dns = None
        if self.ns is not None and self.ns.exists() and self.report is None:
            seen = self.refusals.seen if self.refusals else []
            self.report = RefusalReport(firewall.counts(self.ns, self.ipv6), list(seen))
        for spec in self.specs:
            listener.unregister(spec)
        self.specs = []
        if self.claim is not None:
            cleanup.release(self.claim)
            self.claim = None


async def open_if_possible(argv: list[str], resolve: list[str]) -> tuple[Sandbox | None, str | None]:
    """A sandbox for running argv, or None and why this machine cannot make one (`broker mcp
    --through-broker`, which then falls back to the proxy variables)."""
    from broker.proxy.upstream_resolve import parse_resolve

    why = capabilities.missing()
    if why:
        return None, why.split(" (", 1)[0].split("; ", 1)[0]
    if argv and shutil.which(argv[0]) is None:  # the same error as without a namespace, not ip's
        raise OSError(f"cannot start the MCP server {argv[0]!r}: No such file or directory")
    sandbox = Sandbox(parse_resolve(resolve))
    await sandbox.open()
    return sandbox, None
