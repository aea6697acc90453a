"""Embedding mitmproxy with the connector-journal addon (what `broker run` starts).

A plain `Master` rather than `DumpMaster`: DumpMaster's ErrorCheck calls sys.exit on a startup
error, which an embedding program cannot handle; here a failed bind is reported as an OSError.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from mitmproxy import options
from mitmproxy.addons import block, core, disable_h2c, dns_resolver, next_layer, proxyserver, tlsconfig
from mitmproxy.certs import CertStore
from mitmproxy.master import Master

from broker.gc_freeze import freeze_startup_objects
from broker.listen_failure import listen_error
from broker.proxy.addon import ConnectorJournal
from broker.proxy.link import ACK_DEADLINE
from broker.proxy.upstream_resolve import UpstreamResolve
from journal.redact import compile_for_capture

CA_BASENAME = "mitmproxy"


def proxy_addons() -> list:
    """The mitmproxy addons a broker needs: the proxy itself (server, layers, TLS, DNS resolution for
    upstream names), `block` (refuses clients from other hosts unless told otherwise) and `disable_h2c`.

    Not the rest of `mitmproxy.addons.default_addons()` (playback, map/modify, save, anticache,
    sticky cookies, proxyauth: the broker reads the proxy credentials itself, ...): the broker
    exposes none of their options, and mitmproxy offers every hook of every flow to every loaded
    addon, so each one costs CPU on every call even when idle (about a fifth of mitmdump's CPU per
    call goes to that dispatch; see docs/benchmarks.md).
    """
    return [
        core.Core(), block.Block(), disable_h2c.DisableH2C(), proxyserver.Proxyserver(),
        dns_resolver.DnsResolver(), next_layer.NextLayer(), tlsconfig.TlsConfig(),
    ]
DRAIN_SECONDS = 10.0


@dataclass
class ProxyConfig:
    vault: str = "./vault"
    listen_host: str = "127.0.0.1"
    listen_port: int = 8080
    confdir: str = "~/.mitmproxy"
    session: str = "default"
    agent: str = "unknown"
    principal: str = ""
    connectors: str = ""
    resolve: list[str] = field(default_factory=list)
    upstream_ca: str | None = None
    upstream_insecure: bool = False
    on_journal_error: str = "block"
    record_unknown: bool = True  # False: as pass_unknown=["all"]
    pass_unknown: list[str] = field(default_factory=list)  # hosts no connector knows, passed unrecorded
    spill_threshold: int | None = None
    recorder: str = "process"
    mode: list[str] = field(default_factory=list)  # mitmproxy mode specs; empty: regular at listen_host:port
    seal_key: str = ""  # checkpoints while recording (journal/checkpoint/autoseal.py)
    checkpoint_entries: int | None = None
    checkpoint_seconds: float | None = None
    checkpoint_vault: str = ""  # where checkpoints go when the journal is a database store
    witness: list[str] = field(default_factory=list)
    prompts: str = "off"
    playback: str = ""  # a recorded session that answers every call (addons/playback.py); "" for none
    ack_deadline: float = ACK_DEADLINE  # seconds to wait for the recording service (broker/proxy/link.py)
    write_ahead: bool = True  # writes' request halves durable before upstream (journal/write_ahead.py)
    mitmproxy_sets: list[str] = field(default_factory=list)  # `--set KEY=VALUE`, checked by check_mitmproxy_sets


BROKER_OWNED_OPTIONS: dict[str, str] = {
    "listen_host": "use --listen HOST:PORT", "listen_port": "use --listen HOST:PORT",
    "mode": "the broker runs as a regular proxy (`broker exec` captures without proxy settings)",
    "confdir": "use --confdir", "vault": "use --vault or --store",
    "ssl_insecure": "use --upstream-insecure", "ssl_verify_upstream_trusted_ca": "use --upstream-ca",
    "ssl_verify_upstream_trusted_confdir": "use --upstream-ca", "connect_addr": "use --resolve HOST=IP:PORT",
    "connection_strategy": "the broker sets it itself",
    "ignore_hosts": "it would let calls pass unrecorded and uncounted; use --pass-unknown HOST_PATTERN",
    "allow_hosts": "it would let calls pass unrecorded and uncounted; use --pass-unknown HOST_PATTERN",
    "tcp_hosts": "it would let calls pass unrecorded; use --pass-unknown HOST_PATTERN",
    "udp_hosts": "it would let calls pass unrecorded; use --pass-unknown HOST_PATTERN",
    "rawtcp": "the broker sets it itself", "server": "the broker sets it itself",
    "websocket": "turning it off would relay WebSocket messages unrecorded",
    "stream_large_bodies": "the broker streams bodies itself and records them whole",
    "store_streamed_bodies": "the broker streams bodies itself and records them whole",
    "validate_inbound_headers": "without it a request framed two ways (Content-Length and Transfer-Encoding) "
                                "could carry a call upstream that has no entry of its own",
}
"""mitmproxy options `broker run --set` refuses (and every `broker_*` option): the broker sets them from its
own options, or they would let calls around the recording. What to use instead."""


def check_mitmproxy_sets(specs: list[str]) -> None:
    """Refuse, in one line each, a `--set` spec that is not KEY=VALUE, names an option the broker owns, or that
    mitmproxy would not take (an unknown name, a value of the wrong type): before anything listens."""
    from mitmproxy.exceptions import OptionsError

    from journal.errors import InputError

    for spec in specs:
        key, sep, _ = spec.partition("=")
        if not sep or not key:
            raise InputError(f"--set {spec!r}: give KEY=VALUE, as mitmdump --set takes it (--set body_size_limit=50m)")
        if key in BROKER_OWNED_OPTIONS or key.startswith("broker_"):
            why = BROKER_OWNED_OPTIONS.get(key, "it is set from `broker run`'s own options (see broker run --help)")
            raise InputError(f"--set {key}: the broker owns this mitmproxy option; {why}")
    if not specs:
        return

    async def try_them() -> None:
        master = Master(options.Options())
        master.addons.add(*proxy_addons(), UpstreamResolve(), ConnectorJournal())
        master.options.set(*specs)

    try:
        asyncio.run(try_them())
    except OptionsError as exc:
        raise InputError(f"--set: {exc}") from None


def ca_cert_path(confdir: str) -> Path:
    return Path(confdir).expanduser() / f"{CA_BASENAME}-ca-cert.pem"


def ensure_ca(confdir: str) -> Path:
    """Create mitmproxy's CA in `confdir` if it is not there yet (as stock mitmproxy would)."""
    CertStore.from_store(Path(confdir).expanduser(), CA_BASENAME, 2048)
    return ca_cert_path(confdir)


def write_ca_bundle(confdir: str) -> Path:
    """A PEM bundle holding the system roots and the broker's CA, for clients' CA variables."""
    ca = ensure_ca(confdir)
    bundle = Path(confdir).expanduser() / "broker-ca-bundle.pem"
    paths = ssl.get_default_verify_paths()
    parts = []
    for candidate in (paths.cafile, paths.openssl_cafile, "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            parts.append(Path(candidate).read_text(errors="replace"))
            break
    else:
        try:
            import certifi

            parts.append(Path(certifi.where()).read_text())
        except ImportError:
            pass
    parts.append(ca.read_text())
    tmp = bundle.with_suffix(".tmp")
    tmp.write_text("\n".join(p.rstrip("\n") + "\n" for p in parts))
    tmp.replace(bundle)
    return bundle


class _Ready:
    """Fires once mitmproxy has bound its listeners."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def running(self) -> None:
        self.event.set()


class _ListenErrors(logging.Filter):
    """Holds back mitmproxy's own log line about a failed bind (it suggests `--mode regular@PORT`, an
    option the broker does not have) so that the broker says it once, in its own terms."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and "failed to listen" in record.getMessage():
            self.messages.append(record.getMessage())
            return False
        return True

    def error(self, host: str, port: int) -> OSError:
        text = " ".join(self.messages)
        detail = text.split(" with ", 1)[-1].splitlines()[0] if text else "address in use or not permitted"
        return listen_error(host, port, detail)


class EmbeddedProxy:
    """mitmproxy plus the addon in this process; `start` binds, `stop` drains and shuts down."""

    def __init__(self, config: ProxyConfig, extra_addons: tuple = ()) -> None:
        self.config = config
        self.extra_addons = extra_addons  # run before the resolve and journal addons
        self.addon = ConnectorJournal()
        self.master: Master | None = None
        self._task: asyncio.Task | None = None
        self.port: int | None = None

    async def start(self) -> None:
        c = self.config
        ensure_ca(c.confdir)
        opts = options.Options(
            listen_host=c.listen_host, listen_port=c.listen_port, confdir=str(Path(c.confdir).expanduser())
        )
        self.master = Master(opts)
        ready = _Ready()
        self.master.addons.add(*proxy_addons(), ready, *self.extra_addons, UpstreamResolve(), *self._playback(),
                               self.addon)
        update: dict = {
            "vault": c.vault, "broker_session": c.session, "broker_agent": c.agent,
            "broker_principal": c.principal, "broker_connectors": c.connectors,
            "broker_resolve": list(c.resolve), "broker_on_journal_error": c.on_journal_error,
            "broker_record_unknown": c.record_unknown, "connection_strategy": "lazy", "broker_recorder": c.recorder,
            "broker_prompts": c.prompts, "broker_pass_unknown": list(c.pass_unknown),
            "broker_ack_deadline": c.ack_deadline, "broker_write_ahead": c.write_ahead,
        }
        if c.mode:
            update["mode"] = list(c.mode)
        if c.spill_threshold is not None:
            update["broker_spill_threshold"] = c.spill_threshold
        if c.seal_key:
            update["broker_seal_key"] = c.seal_key
            update["broker_witness"] = list(c.witness)
            if c.checkpoint_entries is not None:
                update["broker_checkpoint_entries"] = c.checkpoint_entries
            if c.checkpoint_seconds is not None:
                update["broker_checkpoint_seconds"] = c.checkpoint_seconds
            if c.checkpoint_vault:
                update["broker_checkpoint_vault"] = c.checkpoint_vault
        if c.playback:
            update["broker_playback"] = c.playback
        if c.upstream_ca:
            update["ssl_verify_upstream_trusted_ca"] = c.upstream_ca
        if c.upstream_insecure:
            update["ssl_insecure"] = True
        self.master.options.update(**update)
        if c.mitmproxy_sets:
            self.master.options.set(*c.mitmproxy_sets)  # checked by check_mitmproxy_sets
        listen_errors = _ListenErrors()
        server_log = logging.getLogger("mitmproxy.addons.proxyserver")
        server_log.addFilter(listen_errors)
        try:
            self._task = asyncio.create_task(self.master.run())
            waiter = asyncio.create_task(ready.event.wait())
            await asyncio.wait({waiter, self._task}, timeout=15, return_when=asyncio.FIRST_COMPLETED)
        finally:
            server_log.removeFilter(listen_errors)
        if self._task.done():
            waiter.cancel()
            exc = self._task.exception()
            raise OSError(f"proxy failed to start: {exc}")
        addrs = self.master.addons.get("proxyserver").listen_addrs()
        if not addrs:
            self.master.shutdown()
            await self._task
            raise listen_errors.error(c.listen_host, c.listen_port)
        self.port = addrs[0][1]

    def _playback(self) -> list:
        """The playback addon when playing a session back: before the journal, which it tells what to record."""
        if not self.config.playback:
            return []
        from broker.proxy.playback import Playback

        return [Playback()]

    async def stop(self, drain_seconds: float = DRAIN_SECONDS) -> bool:
        """Drain and shut down; whether every call accepted got its entry (False: some were cut off, the log
        says which; a write among them is recorded from its write-ahead record)."""
        if self.master is None or self._task is None:
            return True
        loop = asyncio.get_running_loop()
        # A call waiting on a stalled recording service is recorded here once its deadline passes:
        # the drain gives it that long.
        deadline = loop.time() + max(drain_seconds, 2 * self.config.ack_deadline + 1)
        self.addon.stop_accepting()
        # Calls in flight finish and get their entries; idle keep-alive connections are not waited for.
        while self.addon.inflight and loop.time() < deadline:
            await asyncio.sleep(0.05)
        cut = self.addon.inflight
        if cut:
            logging.getLogger("broker").error("stopping: %d calls still in flight after the drain are cut off", cut)
        self.master.shutdown()
        await self._task
        await self.addon.done()  # mitmproxy's shutdown already ran it; a second call finds nothing left to close
        return cut == 0 and self.addon.inflight <= 0


async def serve_forever(config: ProxyConfig, announce) -> bool:
    """Run until SIGINT or SIGTERM, then stop; whether every accepted call has its entry on disk."""
    from broker.proxy import h2_upstream_reuse

    h2_upstream_reuse.apply()  # this process is the broker's own proxy (see the module)
    proxy = EmbeddedProxy(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # before listening: a signal during start-up still drains
        loop.add_signal_handler(sig, stop.set)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})  # see broker.proxy.workers
    await proxy.start()
    compile_for_capture()  # before the first call, not on its event loop (journal.redact)
    freeze_startup_objects()  # (broker.gc_freeze)
    announce(proxy)
    await stop.wait()
    logging.getLogger("broker").info("stopping: draining open connections")
    return await proxy.stop()
