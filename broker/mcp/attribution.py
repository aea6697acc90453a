"""`broker mcp --through-broker`: the server's own HTTPS calls go through an embedded broker, and each
broker entry carries, in `mcp`, the tool call that caused it.

How a call is attributed: the child server gets `HTTPS_PROXY`/`HTTP_PROXY` pointing at the embedded
broker (proxy user = session, password = agent) and the CA variables pointing at a bundle with the
broker's CA. When the broker records an HTTP call, it asks `Attribution.attribute(flow, session)`:
the recorded MCP calls (`tools/call`, `resources/read`) that were open when the HTTP request
started (`flow.request.timestamp_start`) are the candidates. Exactly one candidate: that call's
JSON-RPC request goes into the broker entry's `mcp`, and the call is marked as having broker
entries. None or several (calls running at once): `mcp` is null, since time alone cannot tell
which call caused it, and nothing is marked.

One entry for the tool call and the HTTP calls it made: a tool call with at least one attributed
broker entry gets no `gateway` entry of its own (its broker entries are the stronger evidence and
carry the call); a tool call that made no attributed HTTP call keeps its `gateway` entry.

What cannot be attributed: HTTP calls made while two or more recorded calls are open; calls the
server makes outside any tool call (start-up, background refresh); calls the broker does not record
(hosts no connector knows, token exchanges); traffic that ignores the proxy variables.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque

from broker.exec.confinement import Confinement
from broker.mcp.effects import EffectRules
from broker.mcp.recording import CallJournal, Identity, PendingCall, fallback_connector, stdio_url

RECENT = 256


class Attribution:
    """Open and recently finished MCP calls, shared between the relay (event loop) and the broker's
    recording threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[int, PendingCall] = {}
        self._ended: deque[tuple[PendingCall, float]] = deque(maxlen=RECENT)
        self.attributed = 0
        self.ambiguous = 0
        self.outside = 0

    def started(self, call: PendingCall) -> None:
        with self._lock:
            self._open[id(call)] = call

    def finished(self, call: PendingCall) -> None:
        with self._lock:
            if self._open.pop(id(call), None) is not None:
                self._ended.append((call, time.time()))

    def candidates(self, when: float) -> list[PendingCall]:
        with self._lock:
            found = [c for c in self._open.values() if c.started_wall <= when]
            found += [c for c, ended in self._ended if c.started_wall <= when <= ended]
        return found

    def attribute(self, flow, session: str) -> dict | None:
        """The `ConnectorJournal.attribute` hook: the MCP request that caused this HTTP call, or None."""
        del session  # the embedded broker serves this one shim's session only
        when = getattr(flow.request, "timestamp_start", None) or time.time()
        found = self.candidates(when)
        if len(found) != 1:
            with self._lock:
                if found:
                    self.ambiguous += 1
                else:
                    self.outside += 1
            return None
        (call,) = found
        with self._lock:
            call.broker_entries += 1
            self.attributed += 1
        msg = call.message
        if msg.strict and isinstance(msg.value, dict):
            return msg.value
        return {"unparsed": call.raw.rstrip(b"\r\n").decode("utf-8", "replace")}


def child_environment(proxy_port: int, identity: Identity, bundle: str) -> dict[str, str]:
    """The server's environment: ours, plus the proxy and CA variables (as `broker env` prints them)."""
    from broker.exec.environment import client_environment, proxy_url

    proxy = proxy_url("127.0.0.1", proxy_port, identity.session, identity.agent)
    return client_environment(os.environ, bundle, proxy)


async def run_through_broker(
    vault_dir: str, identity: Identity, argv: list[str], *, principal_option: str = "", connector: str | None,
    rules: EffectRules, confdir: str, upstream_ca: str | None, upstream_insecure: bool, resolve: list[str],
    spill_threshold: int, confinement: Confinement | None = None, **relay_options,
) -> int:
    """Run the server `argv` with its HTTP(S) through an embedded broker; where the machine allows it, in a
    namespace whose only way out is that broker and confined as `broker exec` confines COMMAND (its own PID
    and mount namespaces, nobody by default, the vault and confdir hidden, the broker's code read-only)."""
    from broker.exec.confinement import DEFAULT_USER, command_user
    from broker.exec.sandbox import open_if_possible
    from broker.mcp.relay import say
    from broker.mcp.stdio_relay import run_stdio_shim
    from broker.proxy.runner import EmbeddedProxy, ProxyConfig, write_ca_bundle
    from journal.store import is_database_url

    config = ProxyConfig(
        vault=vault_dir, listen_host="127.0.0.1", listen_port=0, confdir=confdir, session=identity.session,
        agent=identity.agent, principal=principal_option, resolve=resolve, upstream_ca=upstream_ca,
        upstream_insecure=upstream_insecure, spill_threshold=spill_threshold,
    )
    # Where the machine allows it, the server runs in a network namespace whose only way out is the
    # embedded broker (as under `broker exec`), so a server that ignores the proxy variables is recorded too.
    sandbox, why_not = await open_if_possible(argv, resolve)
    proxy = EmbeddedProxy(config, extra_addons=sandbox.contain(config) if sandbox else ())
    try:
        await proxy.start()
    except BaseException:
        if sandbox:
            await sandbox.close()
        raise
    try:
        attribution = Attribution()
        proxy.addon.attribute = attribution.attribute
        recorder = proxy.addon.recorder  # one writer for both kinds of entries: one chain, group commit
        assert recorder is not None
        journal = CallJournal(
            recorder, identity, url=stdio_url(argv), fallback=fallback_connector(argv), connector=connector,
            rules=rules,
        )
        journal.tracker = attribution
        journal.skip_when_broker_recorded = True
        bundle = str(write_ca_bundle(confdir))
        if sandbox:
            if confinement is None:
                confinement = Confinement(*command_user(DEFAULT_USER, False))
            confinement.hide(None if is_database_url(vault_dir) else vault_dir, confdir)
            sandbox.record_egress(proxy, identity.session, identity.agent)
            try:
                inside, env = sandbox.confined(confinement, argv, bundle, (identity.session, identity.agent))
                say(f"the server runs in network namespace {sandbox.name} as uid {confinement.uid}, in its own PID and "
                    "mount namespaces: its TCP to ports 80 and 443 goes through the embedded broker, everything "
                    "else is refused")
                return await run_stdio_shim(journal, inside, env=env, **relay_options)
            finally:
                await sandbox.stop_recording_egress()
        env = child_environment(proxy.port or 0, identity, bundle)
        say(f"the server's HTTP(S) calls go through the embedded broker on 127.0.0.1:{proxy.port} if it honours "
            f"the proxy variables (not contained: {why_not})")
        return await run_stdio_shim(journal, argv, env=env, **relay_options)
    finally:
        await proxy.stop()
        if sandbox:
            await sandbox.close()
            if sandbox.report is not None:
                say(sandbox.report.summary())
