"""mitmproxy addon: record every connector call into the vault (capture "broker").

Runs in stock mitmproxy:

    mitmdump -s addons/connector_journal.py --set vault=./vault --set broker_session=s1

(that file is a shim loading this module) and is what `broker run` embeds. A thin adapter from flows
to the journal package, where every rule (redaction, bodies, spilling, chaining) lives. By default
(`broker_recorder=process`) the recording itself happens in the recording service, a child process
(`broker.proxy.service`, reached through `broker.proxy.link`): the hooks only gather each call's raw
`journal.call.Call`, send its request half when the call goes upstream and the rest when it ends, and
wait for the acknowledgement. mitmproxy's single event-loop thread is left to the proxy. With
`broker_recorder=inline` the same recording runs in this process (the append in a thread).

Identity (`broker.proxy.identity`): proxy credentials (`http://SESSION:AGENT@host:port`), else
`X-Broker-Session`, `X-Broker-Agent`, `X-Broker-Principal` request headers, else the options.
Credentials and these headers are removed before the request goes upstream and are never recorded.

When an entry is written, and how a streamed body is captured and its end held back:
`broker.proxy.streaming`.

No call passes unrecorded when the recording service is gone: a call that finds no live service
is recorded by this process instead (the `inline` path), and a call whose service died while it
waited is recorded here too, unless the dead service's entry for it is already on disk.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import msgspec
from mitmproxy import connection, ctx, exceptions, http
from mitmproxy.net.http import url
from mitmproxy.websocket import WebSocketMessage

from broker.proxy import websocket_relay
from broker.proxy.call_log import recorded_call_line
from broker.proxy.coverage import CoverageCount
from broker.proxy.destination import MISDIRECTED, misdirected
from broker.proxy.h1_request_framing import install as install_request_framing
from broker.proxy.identity import (
    NO_CLAIMS,
    BadProxyCredentials,
    Claims,
    claims_without_credentials,
    parse_proxy_auth,
    take_identity,
)
from broker.proxy.link import ACK_DEADLINE, CallNoted, Recorded, RecorderLink, ServiceLost, ServiceUnavailable
from broker.proxy.passed_hosts import PassedHosts
from broker.proxy.request_url import request_origin, request_url
from broker.proxy.service import call_fields
from broker.proxy.streaming import body_capture, captured_body, feeding, hold_back_the_end, must_stream
from broker.proxy.trailers import install as install_trailers
from broker.proxy.websocket import WebSocketConnection
from broker.proxy.websocket_relay import ControlFrame
from broker.proxy.wire import sendable
from journal.bodies import SPILL_THRESHOLD, BodyCapture
from journal.call import Call, Identity, Request, Response
from journal.checkpoint.autoseal import DEFAULT_ENTRIES, DEFAULT_SECONDS, AutosealConfig
from journal.connectors import OTHER, Registry
from journal.models import MODES as PROMPT_MODES
from journal.models import route_call
from journal.models.capture import StreamHold
from journal.models.linking import links_for
from journal.record import Recorder, RequestHalf, text_pairs
from journal.redact import is_token_exchange, redact_url
from journal.store.url import store_target
from journal.vault import SessionIdError, session_filename
from journal.write_ahead import ID_KEY, WriteAheadLog, recover, write_ahead_log_for
from journal.writer import JournalError

log = logging.getLogger("broker")

ERROR_HEADER = "X-Broker-Error"
_META = "broker"
_WS_META = "broker_websocket"
"""Set on a flow whose WebSocket handshake was recorded: its `WebSocketConnection`."""
PLAYBACK_META = "broker_playback"
"""Set by addons/playback.py on a flow it answers from a recorded session: a dict of extra request keys
(`playback_of`). Such a flow is never streamed (playback needs the whole body, and its answer is made
here, not streamed from upstream)."""
_CACHED_OPTIONS = (
    "broker_session", "broker_agent", "broker_principal", "broker_record_unknown", "broker_on_journal_error",
    "broker_spill_threshold", "broker_recorder", "broker_prompts", "broker_write_ahead",
)
_SEAL_OPTIONS = frozenset({"broker_seal_key", "broker_checkpoint_entries", "broker_checkpoint_seconds",
                           "broker_witness"})
_SESSION_CACHE = 4096
_UNNAMED_CLIENTS = 4096
"""Client addresses already told about on stderr for sending calls that name no session."""
"""Session ids already checked for a vault file name (the check runs once per id, not per call)."""


class _Tracked:
    """What the addon tracks for one recorded flow (kept in flow.metadata)."""

    __slots__ = (
        "session", "agent", "principal", "connector", "url", "req_fields", "req_cap", "resp_cap", "call",
        "sent", "inline", "resp_fields", "prompts", "model_api", "refused", "write_ahead", "effect",
        "effect_ahead", "prepared",
    )

    def __init__(
        self, session: str, agent: str, principal: str | None, connector: str, url: str,
        req_fields: tuple[tuple[bytes, bytes], ...],
    ) -> None:
        self.session, self.agent, self.principal, self.connector = session, agent, principal, connector
        self.url = url
        self.req_fields = req_fields  # as sent upstream (proxy credentials and X-Broker-* removed)
        self.req_cap: BodyCapture | None = None
        self.resp_cap: BodyCapture | StreamHold | None = None
        self.call: Call | None = None  # the request half, once built (handed to the recording service)
        self.sent: tuple[int, int] | None = None  # its handle there
        self.inline = False  # no live recording service when the call went upstream: recorded here
        self.resp_fields: tuple[tuple[bytes, bytes], ...] | None = None  # the upstream's, before re-framing
        self.prompts: str | None = None  # prompt capture on: its mode
        self.model_api: str | None = None  # a model call's API
        self.refused: str | None = None  # answered by the broker itself, never forwarded: why
        self.write_ahead: str | None = None  # a write's durable record, made before it went upstream
        # (connector, effect, effect_basis) as `Recorder.classify` gave them for the request with its whole
        # body, on the event loop (to decide on a write-ahead record): handed to the recorder with the call,
        # which then classifies it no second time. None: not classified here.
        self.effect: tuple[str, str, str] | None = None
        self.effect_ahead: tuple[str, str, str] | None = None  # the same for a streamed request, without its body
        # The request half's entry fields as `Recorder.prepare_request` made them for the write-ahead record
        # (the whole body held): handed to the recorder with the call, which then prepares them no second time.
        self.prepared: dict | None = None


def _autoseal(opts) -> AutosealConfig | None:
    """The checkpoint settings of the broker_seal_* options (the key file's path; never the key)."""
    if not opts.broker_seal_key:
        return None
    return AutosealConfig(
        str(Path(opts.broker_seal_key).resolve()), opts.broker_checkpoint_entries, opts.broker_checkpoint_seconds,
        list(opts.broker_witness),
        vault_dir=str(Path(opts.broker_checkpoint_vault).resolve()) if opts.broker_checkpoint_vault else "",
    )

class ConnectorJournal:
    def __init__(self) -> None:
        self.recorder: Recorder | None = None
        self.link: RecorderLink | None = None
        self.wal: WriteAheadLog | None = None  # write-ahead records (journal/write_ahead.py); None: not kept
        self.registry: Registry = Registry.builtin()
        self.identities: weakref.WeakKeyDictionary[connection.Client, tuple[str, str]] = (
            weakref.WeakKeyDictionary()
        )
        self._opts: dict = {}
        self._sessions_ok: set[str] = set()
        self.recorded = 0
        self.journal_failures = 0
        self.inflight = 0  # recorded calls between requestheaders and their entry
        self.stopping = False  # set by `stop`: no new call goes upstream
        self._restarting: asyncio.Future | None = None
        self._restart_warned = False
        self.coverage = CoverageCount(self._deliver_gaps)  # counts while checkpoints are written
        self.passed = PassedHosts()  # --pass-unknown
        self._unnamed_clients: set[str] = set()
        self.attribute: Callable[[http.HTTPFlow, str], dict | None] | None = None
        """Set by an embedder (the MCP shim's --through-broker): given a flow and its session, the MCP
        request that caused the call, recorded in the entry's `mcp` field; None when it cannot tell."""

    # -- options --------------------------------------------------------------------------------

    def load(self, loader) -> None:
        install_trailers()  # HTTP/1.1 trailers: relayed and recorded instead of a crash (broker.proxy.trailers)
        install_request_framing()  # an HTTP/2 request's body never read upstream as a request of its own
        websocket_relay.install()  # WebSocket messages held until durable, in runs; ping/pong seen
        loader.add_option("vault", str, "./vault", "Vault directory (or postgresql:// store) the journal goes to.")
        loader.add_option("broker_session", str, "default", "Session for calls that name none.")
        loader.add_option("broker_agent", str, "unknown", "Agent for calls that name none.")
        loader.add_option(
            "broker_principal", str, "", "Principal for calls that name none (default: credential fingerprint)."
        )
        loader.add_option("broker_connectors", str, "", "TOML file extending or overriding the connector rules.")
        loader.add_option(
            "broker_record_unknown", bool, True,
            "Record traffic no connector recognises (the default; false is broker_pass_unknown=all).",
        )
        loader.add_option(
            "broker_pass_unknown", Sequence[str], [],
            "Hosts no connector knows that pass unrecorded: host names or globs (*.example.com), or 'all'. "
            "Every other unknown host is recorded (connector 'other').",
        )
        loader.add_option(
            "broker_on_journal_error", str, "block", "block: answer 502 when the journal fails; pass: let it through."
        )
        loader.add_option("broker_spill_threshold", int, SPILL_THRESHOLD, "Spill bodies larger than this (bytes).")
        loader.add_option(
            "broker_ack_deadline", float, ACK_DEADLINE,
            "Seconds a call waits for the recording service's acknowledgement; past it the service is killed "
            "and replaced and the proxy records the waiting calls itself.",
        )
        loader.add_option(
            "broker_write_ahead", bool, True,
            "Make a write's request durable (a write-ahead record) before it goes upstream; off only to "
            "measure what it costs (bench/write_ahead_bench.py).",
        )
        loader.add_option(
            "broker_recorder", str, "process",
            "process: record in a separate recording service process (broker.proxy.service), leaving the proxy's "
            "CPU to the proxy; inline: record in the proxy process.",
        )
        # Checkpoints as the broker records (journal/checkpoint/autoseal.py, docs/checkpoints.md).
        loader.add_option("broker_seal_key", str, "", "Signer key file: write checkpoints while recording.")
        loader.add_option("broker_checkpoint_entries", int, DEFAULT_ENTRIES, "A checkpoint every N entries.")
        loader.add_option("broker_checkpoint_seconds", float, DEFAULT_SECONDS, "A checkpoint every T seconds.")
        loader.add_option("broker_witness", Sequence[str], [], "tlog-witness URL to cosign each checkpoint.")
        loader.add_option(
            "broker_checkpoint_vault", str, "", "Vault directory for checkpoints when the journal is a database store."
        )
        loader.add_option(
            "broker_prompts", str, "off",
            "Prompt capture: off (model API calls pass unrecorded), refs (model calls recorded with every "
            "text replaced by its SHA-256 and size) or full (the same, with the texts in the blob store).",
        )

    def configure(self, updated: set[str]) -> None:
        opts = ctx.options
        # Read once here: every ctx.options read copies the value, and the hooks run per request.
        self._opts = {name: getattr(opts, name) for name in _CACHED_OPTIONS}
        if "broker_on_journal_error" in updated and opts.broker_on_journal_error not in ("block", "pass"):
            raise exceptions.OptionsError("broker_on_journal_error must be 'block' or 'pass'")
        if "broker_recorder" in updated and opts.broker_recorder not in ("process", "inline"):
            raise exceptions.OptionsError("broker_recorder must be 'process' or 'inline'")
        if "broker_ack_deadline" in updated and not opts.broker_ack_deadline > 0:
            raise exceptions.OptionsError("broker_ack_deadline must be a number of seconds above 0")
        if "broker_prompts" in updated and opts.broker_prompts not in PROMPT_MODES:
            raise exceptions.OptionsError(f"broker_prompts must be one of {', '.join(PROMPT_MODES)}")
        if "broker_pass_unknown" in updated:
            try:
                self.passed = PassedHosts(opts.broker_pass_unknown)
            except ValueError as exc:
                raise exceptions.OptionsError(str(exc)) from None
        if "broker_connectors" in updated:
            reg = Registry.builtin()
            try:
                self.registry = reg.with_file(opts.broker_connectors) if opts.broker_connectors else reg
            except ValueError as exc:
                raise exceptions.OptionsError(str(exc)) from None
            if self.recorder is not None:
                self.recorder._registry = self.registry
        sealing = updated & _SEAL_OPTIONS
        self.coverage.on = bool(opts.broker_seal_key)
        if ("vault" in updated or "broker_spill_threshold" in updated or self.recorder is None or sealing
                or "broker_write_ahead" in updated):
            self._close_write_ahead()
            if self.recorder is not None:
                self.recorder.close()
            # In this process the recorder writes streamed bodies' blobs and checks that a session's
            # file can be opened; with broker_recorder=inline it records everything.
            self.recorder = Recorder(
                opts.vault, spill_threshold=opts.broker_spill_threshold, registry=self.registry,
                autoseal=_autoseal(opts) if opts.broker_recorder == "inline" else None,
            )
            self._open_write_ahead(opts.broker_write_ahead)
        if updated & {"vault", "broker_spill_threshold", "broker_connectors", "broker_recorder",
                      "broker_ack_deadline"} or sealing or (
            self.link is None and opts.broker_recorder == "process"
        ):
            if self.link is not None:
                self.link.close()
                self.link = None
            if opts.broker_recorder == "process":
                seal = _autoseal(opts)
                self.link = RecorderLink(
                    store_target(opts.vault), opts.broker_spill_threshold,
                    str(Path(opts.broker_connectors).resolve()) if opts.broker_connectors else "",
                    extra_args=seal.service_args() if seal else [], ack_deadline=opts.broker_ack_deadline,
                )

    async def running(self) -> None:
        # Lazy: the client's request is read before the upstream connection is made, so a call whose
        # upstream cannot be reached still reaches this addon (and gets its entry) instead of
        # failing at CONNECT time unseen.
        if ctx.options.connection_strategy != "lazy":
            log.info("broker: setting connection_strategy=lazy so failed upstream calls are recorded")
            ctx.options.update(connection_strategy="lazy")
        if ctx.options.rawtcp:
            # Otherwise mitmproxy relays whatever does not look like HTTP (a method of raw bytes, `G\xffT`)
            # as raw TCP, with no hook and no entry: parsed as HTTP, it is recorded, or refused by the parser.
            log.info("broker: setting rawtcp=false so nothing passes as raw TCP unrecorded")
            ctx.options.update(rawtcp=False)
        if self.link is not None:
            # Started now rather than on the first call: starting Python takes a CPU for a moment,
            # which should not fall on the first calls.
            try:
                await self.link.connect()
            except JournalError as exc:
                log.error("journal: %s", exc)

    def stop_accepting(self) -> None:
        """The broker is stopping: new calls are refused before upstream (503), and a recording service
        that is not ready yet gets only the acknowledgement deadline for the calls waiting on it."""
        self.stopping = True
        if self.link is not None:
            self.link.hurry()

    async def done(self) -> None:
        summary = self.passed.summary()
        if summary is not None:
            log.warning("%s", summary)
            self.passed.counts.clear()  # said once, though mitmproxy's shutdown and the embedder both call done
        self.stopping = True
        self.coverage.flush()
        if self.link is not None:
            await self.link.aclose()
            self.link = None
        self._close_write_ahead()  # a write cut off by the stop gets its entry now, not at the next start
        if self.recorder is not None:
            self.recorder.close()

    def _open_write_ahead(self, on: bool) -> None:
        """Recover what a dead broker left (journal/write_ahead.py), then keep this process's records."""
        assert self.recorder is not None
        try:
            recover(self.recorder)
        except (JournalError, OSError, ValueError) as exc:
            log.error("journal: write-ahead records not recovered: %s", exc)
        self.wal = write_ahead_log_for(self.recorder) if on else None

    def _close_write_ahead(self) -> None:
        if self.wal is None:
            return
        self.wal.close()
        self.wal = None
        assert self.recorder is not None
        try:
            recover(self.recorder)
        except (JournalError, OSError, ValueError) as exc:
            log.error("journal: write-ahead records not recovered (the next start does it): %s", exc)

    # -- connection-level hooks -----------------------------------------------------------------

    async def http_connect(self, flow: http.HTTPFlow) -> None:
        auth = flow.request.headers.get("proxy-authorization")
        if auth is None:
            return
        try:
            self.identities[flow.client_conn] = parse_proxy_auth(auth)
        except BadProxyCredentials as exc:
            await self._refuse_connect(flow, str(exc))
        else:
            flow.request.headers.pop("proxy-authorization", None)

    async def _refuse_connect(self, flow: http.HTTPFlow, reason: str) -> None:
        """A CONNECT answered 400 for credentials that cannot be read: its entry (mitmproxy calls no
        `response` hook for a refused CONNECT, so it is recorded here)."""
        try:
            fields, claims = claims_without_credentials(flow.request.headers.fields)
            flow.request.headers.fields = fields
            session, agent, principal = self._refusal_identity(claims, None)
            pretty_host, origin = request_origin(flow.request)
            call = _Tracked(session, agent, principal, self.registry.match(pretty_host, "/") or OTHER,
                            request_url(flow.request, origin), fields)
            call.refused = reason
        except Exception:  # noqa: BLE001 - the refusal stands, even when its entry cannot be built
            log.exception("journal: a refused CONNECT could not be recorded")
            self._answer(flow, 400, reason)
            return
        self._answer(flow, 400, reason)
        self.inflight += 1
        try:
            resp = flow.response
            assert resp is not None
            await self._record(call, flow, resp.status_code, resp.headers.fields, resp, None, time.time())
        except Exception as exc:  # noqa: BLE001 - reported; the CONNECT is refused either way
            self.journal_failures += 1
            log.error("journal: refused CONNECT to %s not recorded: %s", redact_url(call.url), exc)
        finally:
            self.inflight -= 1

    def _refusal_identity(self, claims: Claims, connection: tuple[str, str] | None) -> tuple[str, str, str | None]:
        """Who a refused call is recorded under: the session it named, else (none named, or one no vault
        file can be named for) the default one."""
        opts = self._opts
        session, agent, principal = claims.resolve(
            opts["broker_session"], opts["broker_agent"], opts["broker_principal"], connection,
        )
        try:
            session_filename(session)
        except SessionIdError:
            session = opts["broker_session"]
        return session, agent, principal

    def _refuse(self, flow: http.HTTPFlow, call: _Tracked, status: int, reason: str) -> None:
        """Answer the call here, never forwarding it; its entry (`answered_by: capture`, `error`: why) is
        written by the `response` hook, which mitmproxy calls once the request body is read."""
        call.refused = reason
        flow.metadata[_META] = call
        self.inflight += 1
        self._answer(flow, status, reason)

    def _no_session(self, flow: http.HTTPFlow, session: str) -> None:
        """Once per client address: its calls name no session and go to the default one."""
        peer = flow.client_conn.peername
        addr = str(peer[0]) if peer else "?"
        if addr in self._unnamed_clients:
            return
        if len(self._unnamed_clients) >= _UNNAMED_CLIENTS:
            self._unnamed_clients.clear()
        self._unnamed_clients.add(addr)
        log.warning("calls from %s name no session (no proxy credentials, no X-Broker-Session): recorded under "
                    "session %r; `broker env --session S` prints a proxy URL that names one", addr, session)

    # -- request --------------------------------------------------------------------------------

    def requestheaders(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        """(mitmproxy awaits what a hook returns: a write's record is made before its headers go upstream.)"""
        try:
            self._requestheaders(flow)
            call: _Tracked | None = flow.metadata.get(_META)
            if call is not None and call.req_cap is not None and flow.response is None and self._is_write(call, flow):
                # A streamed body goes upstream as it arrives, right after this hook: the record says
                # the body is pending (the entry carries it).
                return self._write_ahead(flow, call, body_pending=True, then=None)
        except Exception:  # noqa: BLE001 - mitmproxy would log it and forward the call unrecorded
            self._failed_closed(flow, "requestheaders")
        return None

    def request(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        """(A write whose body is held whole goes upstream after this hook: its record is made first.)"""
        try:
            call = self._request(flow)
            if call is None:
                return None
            if call.req_cap is None and call.write_ahead is None and self._is_write(call, flow):
                return self._write_ahead(flow, call, body_pending=False, then=self._hand_over)
            self._hand_over(flow, call)
        except Exception:  # noqa: BLE001 - as above
            self._failed_closed(flow, "request")
        return None

    def _is_write(self, call: _Tracked, flow: http.HTTPFlow) -> bool:
        """Whether this call gets a write-ahead record: the connector rules' effect, as the entry's.
        Classified once: with the whole body, the result goes with the call to the recorder (`call.effect`)."""
        if self.wal is None or call.model_api:  # a model call is recorded as a read (its texts referenced)
            return False
        assert self.recorder is not None
        req = flow.request
        streamed = call.req_cap is not None
        cls = self.recorder.classify(req.method, call.url, text_pairs(call.req_fields),
                                     None if streamed else req.raw_content, call.connector)
        # The recorder reads a method or URL that is not ASCII back from its wire form (journal.record.wire_field),
        # which may differ from mitmproxy's text: such a call is classified there again.
        if req.method.isascii() and call.url.isascii():
            if streamed:
                call.effect_ahead = cls
            else:
                call.effect = cls
        return cls[1] == "write"

    async def _write_ahead(self, flow: http.HTTPFlow, call: _Tracked, body_pending: bool,
                           then: Callable[[http.HTTPFlow, _Tracked], None] | None) -> None:
        """Make the write's record durable (group-committed, in a thread), then let it go on (`then`).
        A record that cannot be made keeps the write from the platform (under `block`)."""
        try:
            built = self._request_call(call, flow, with_body=not body_pending)  # a streamed body is still coming
            if body_pending and call.effect_ahead is not None:  # as `_is_write` classified it, without its body
                connector, effect, basis = call.effect_ahead
                built = msgspec.structs.replace(built, connector=connector, effect=effect, effect_basis=basis)
            wal = self.wal
            assert wal is not None and self.recorder is not None
            recorder = self.recorder

            def record() -> tuple[str | None, RequestHalf | None]:
                half = recorder.prepare_request(built)
                if half is None or half.fields["effect"] != "write":
                    return None, half  # a token exchange, or a read after all
                return wal.write(half, body_pending=body_pending, ts=time.time()), half

            call.write_ahead, half = await asyncio.to_thread(record)
            if half is not None and not body_pending:  # the entry's request part, but for the record's id
                call.prepared = half.fields
            if then is not None:
                then(flow, call)
        except Exception as exc:  # noqa: BLE001 - whatever kept the record out, the write must not go unrecorded
            if not isinstance(exc, (JournalError, OSError, ValueError)):
                log.exception("journal: unexpected failure making a write-ahead record")
            if self._opts["broker_on_journal_error"] != "block":
                log.error("journal: %s %s went upstream WITHOUT its write-ahead record: %s", flow.request.method,
                          redact_url(call.url), exc)
                if then is not None:
                    then(flow, call)
                return
            self.journal_failures += 1
            self._drop(flow)
            flow.request.stream = False  # answered here: nothing of it goes upstream
            self._answer(flow, 502, f"call not forwarded: its write-ahead record could not be written ({exc})")

    def _failed_closed(self, flow: http.HTTPFlow, hook: str) -> None:
        """A bug or an input nobody foresaw: under `block` the call is not forwarded unrecorded."""
        log.exception("journal: unexpected failure in the %s hook", hook)
        self.journal_failures += 1
        self._drop(flow)
        if self._opts.get("broker_on_journal_error", "block") == "block":
            self._answer(flow, 502, "call not forwarded: the broker failed to handle it (see its log)")

    def _requestheaders(self, flow: http.HTTPFlow) -> None:
        req = flow.request
        if self.stopping:  # the calls in flight drain; a new one would never end the drain
            self._answer(flow, 503, "the broker is stopping: call not forwarded")
            return
        # One pass over the raw header fields takes out the proxy credentials and X-Broker-* headers
        # (never forwarded, never recorded) and yields the recorded header fields.
        opts = self._opts
        connection = self.identities.get(flow.client_conn)
        try:
            fields, claims = take_identity(req.headers.fields)
        except BadProxyCredentials as exc:  # never another session's call: refused, in the session named else default
            fields, claims = claims_without_credentials(req.headers.fields)
            req.headers.fields = fields
            self._refuse_here(flow, claims, connection, fields, 400, str(exc))
            return
        if claims is not NO_CLAIMS:
            req.headers.fields = fields
        why = misdirected(req, flow.client_conn.sni)
        if why is not None:  # the destination decides: a header naming another host is refused
            self._refuse_here(flow, claims, connection, fields, MISDIRECTED, why)
            return
        session, agent, principal = claims.resolve(
            opts["broker_session"], opts["broker_agent"], opts["broker_principal"], connection,
        )
        pretty_host, origin = request_origin(req)
        call_url = request_url(req, origin)
        path = req.path.split("?", 1)[0]
        connector, model_api = route_call(self.registry, self.registry.match(pretty_host, path), pretty_host, path)
        prompts = opts["broker_prompts"]
        if model_api is not None and prompts == "off":
            return  # model calls pass unrecorded unless prompt capture is on (docs/prompts.md)
        if connector is None:
            token = is_token_exchange(req.method, call_url, text_pairs(fields), None)
            if token or not opts["broker_record_unknown"] or self.passed.passes(pretty_host):
                # a token exchange known by its URL leaves no entry, no blob and no session file
                self.coverage.gap(session, pretty_host, "token" if token else "passed")
                return
            connector = OTHER
        if session not in self._sessions_ok:
            try:
                session_filename(session)
            except SessionIdError as exc:
                self.coverage.gap(session, pretty_host, "refused")
                self._refuse(flow, _Tracked(opts["broker_session"], agent, principal, connector, call_url, fields),
                             400, f"session id cannot be recorded: {exc}")
                return
            if len(self._sessions_ok) >= _SESSION_CACHE:
                self._sessions_ok.clear()
            self._sessions_ok.add(session)
        if not claims.names_session(connection):
            self._no_session(flow, session)
        call = _Tracked(session, agent, principal, connector, call_url, fields)
        if prompts != "off":
            call.prompts, call.model_api = prompts, model_api
        # a model request is held whole (to be referenced), and so is a call playback answers
        threshold = opts["broker_spill_threshold"]
        if must_stream(fields, threshold) and model_api is None and PLAYBACK_META not in flow.metadata:
            # Token exchanges leave no entry and no blob: known by URL here, before a body is captured
            # (one known only by its body is dropped by the recorder, which sees that body).
            if is_token_exchange(req.method, call_url, text_pairs(fields), None):
                self.coverage.gap(session, pretty_host, "token")
                return
            assert self.recorder is not None
            call.req_cap = body_capture(self.recorder.blobs, req.headers, threshold)
            req.stream = feeding(call.req_cap)
        flow.metadata[_META] = call
        self.inflight += 1

    def _refuse_here(self, flow: http.HTTPFlow, claims: Claims, connection: tuple[str, str] | None,
                     fields: tuple, status: int, reason: str) -> None:
        """Refuse a call before anything of it is trusted: recorded under the destination's connector and
        URL (`request.host:port`, where it would have gone), in the session it named, else the default."""
        req = flow.request
        session, agent, principal = self._refusal_identity(claims, connection)
        if not claims.names_session(connection):
            self._no_session(flow, session)
        dest = url.unparse(req.scheme, req.host, req.port, req.path if req.path != "*" else "")
        connector = self.registry.match(req.host, req.path) or OTHER
        self._refuse(flow, _Tracked(session, agent, principal, connector, dest, fields), status, reason)

    def _request(self, flow: http.HTTPFlow) -> _Tracked | None:
        """The tracked call once it may go upstream (None: not recorded, or refused here)."""
        call: _Tracked | None = flow.metadata.get(_META)
        if call is None or flow.response is not None:
            return None
        if self._opts["broker_on_journal_error"] == "block":
            problem = self._journal_problem(call.session)
            if problem:
                self.journal_failures += 1
                self._answer(flow, 502, f"call not forwarded: the journal cannot record it ({problem})")
                self.coverage.gap(call.session, flow.request.pretty_host, "refused")
                self._drop(flow)
                return None
        return call

    def _hand_over(self, flow: http.HTTPFlow, call: _Tracked) -> None:
        """As the call goes upstream: its request half to the recording service, or recorded here."""
        if flow.metadata.get(_META) is not call:
            return  # dropped meanwhile (the client went away)
        if self.link is not None and not self.link.live:
            # No service to hand the call to (it died, and a new one is not started yet): this process
            # records the call itself, so nothing goes upstream without a live recorder.
            call.inline = True
            self._restart_service()
        elif self.link is not None and call.req_cap is None:
            # The request half goes to the recording service now: it is redacted and classified there
            # while the call is upstream, so only the response half is left when the response arrives.
            call.call = self._request_call(call, flow)
            call.sent = self.link.send_request(call.call, call.prepared)

    def _restart_service(self) -> None:
        link = self.link
        if link is None or (self._restarting is not None and not self._restarting.done()):
            return

        async def restart() -> None:
            try:
                await link.connect()
                self._restart_warned = False
            except JournalError as exc:
                if not self._restart_warned:  # once per outage, not once per call
                    log.warning("journal: recording service not restarted yet (%s); recording in the proxy", exc)
                    self._restart_warned = True

        # (mitmproxy may run tasks eagerly: the task can be done before it is assigned)
        self._restarting = asyncio.ensure_future(restart())

    # -- response -------------------------------------------------------------------------------

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        call: _Tracked | None = flow.metadata.get(_META)
        if call is None or flow.response is None:
            return
        threshold = self._opts["broker_spill_threshold"]
        if must_stream(flow.response.headers.fields, threshold) and PLAYBACK_META not in flow.metadata:
            if is_token_exchange(flow.request.method, call.url, text_pairs(call.req_fields), None):
                self._drop(flow)
                return
            assert self.recorder is not None
            call.resp_cap = (StreamHold() if call.model_api
                             else body_capture(self.recorder.blobs, flow.response.headers, threshold))
            call.resp_fields = flow.response.headers.fields
            flow.response.stream = feeding(call.resp_cap)
            hold_back_the_end(flow)

    async def response(self, flow: http.HTTPFlow) -> None:
        call: _Tracked | None = flow.metadata.pop(_META, None)
        if call is None or flow.response is None:
            return
        resp = flow.response
        streamed = call.resp_cap is not None
        try:
            recorded = await self._record(call, flow, resp.status_code, call.resp_fields or resp.headers.fields,
                                          resp, None, resp.timestamp_start or time.time())
            if flow.websocket is not None and isinstance(recorded, Recorded) and resp.status_code == 101:
                assert call.call is not None
                flow.metadata[_WS_META] = WebSocketConnection(
                    call.call.identity, call.connector, call.call.request.url, call.prompts, call.model_api,
                    recorded.hash, recorded.seq)
        except Exception as exc:  # noqa: BLE001 - whatever kept the entry out, the response must not pass unrecorded
            if not isinstance(exc, (JournalError, OSError, ValueError)):
                log.exception("journal: unexpected failure recording a call")
            self._journal_failed(flow, call, exc, streamed)
        finally:
            self.inflight -= 1

    async def error(self, flow: http.HTTPFlow) -> None:
        call: _Tracked | None = flow.metadata.pop(_META, None)
        if call is None:
            return
        msg = flow.error.msg if flow.error else "unknown error"
        if call.resp_cap is not None:
            call.resp_cap.abort()
            call.resp_cap = None
        status = flow.response.status_code if flow.response is not None else None
        headers = (call.resp_fields or flow.response.headers.fields) if flow.response is not None else ()
        try:
            await self._record(call, flow, status, headers, None, msg, time.time(),
                               answered_by="upstream" if flow.response is not None else "none")
        except Exception as exc:  # noqa: BLE001 - reported, whatever it was
            self.journal_failures += 1
            log.error("journal: failed call %s %s not recorded: %s", flow.request.method, redact_url(call.url), exc)
        finally:
            self.inflight -= 1

    # -- WebSocket ------------------------------------------------------------------------------

    def websocket_message(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        """Each message of a recorded WebSocket is an entry, durable before mitmproxy passes the message
        on. With the batching relay (`broker.proxy.websocket_relay`) the message is held until
        `websocket_flush`, so its call goes to the recorder now and the flush waits for it (the
        messages of one read share an fsync); else this hook waits. mitmproxy appends every message to
        `flow.websocket.messages` for the connection's life; the list is emptied here, so a long
        connection holds no history (the relay keeps its own reference to the message it passes on)."""
        data = flow.websocket
        if data is None or not data.messages:
            return None
        message = data.messages[-1]
        data.messages.clear()
        conn: WebSocketConnection | None = flow.metadata.get(_WS_META)
        if conn is None:
            return None
        block = self._opts.get("broker_on_journal_error", "block") == "block"
        return self._hold(conn, flow, self._record_frame(flow, conn.message_call(message, block), message, block))

    def websocket_control(self, frame: ControlFrame) -> Awaitable[None] | None:
        """A ping or pong of a recorded WebSocket is an entry too, held like a message (the relay calls
        this hook; stock mitmproxy relays them unseen)."""
        flow = frame.flow
        conn: WebSocketConnection | None = flow.metadata.get(_WS_META)
        if conn is None:
            return None
        block = self._opts.get("broker_on_journal_error", "block") == "block"
        return self._hold(conn, flow, self._record_frame(flow, conn.control_call(frame, block), frame, block))

    def websocket_flush(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        """The held messages are about to be passed on: wait until every one's entry is durable (or
        the message is dropped, its entry failed)."""
        conn: WebSocketConnection | None = flow.metadata.get(_WS_META)
        if conn is None or not conn.pending:
            return None
        pending, conn.pending = conn.pending, []
        return _all_done(pending)

    def _hold(self, conn: WebSocketConnection, flow: http.HTTPFlow, recording: Coroutine[Any, Any, None],
              ) -> Awaitable[None] | None:
        if not websocket_relay.installed:
            return recording  # the stock relay: the hook itself waits
        if self.link is None and conn.pending:  # recorded in this process (inline): appends run in
            recording = _after(conn.pending[-1], recording)  # threads, so one after the other, in order
        conn.pending.append(asyncio.ensure_future(recording))
        return None

    async def _record_frame(self, flow: http.HTTPFlow, whole: Call, item: WebSocketMessage | ControlFrame,
                            block: bool) -> None:
        try:
            await self._record_message(whole)
        except Exception as exc:  # noqa: BLE001 - whatever kept the entry out, the message must not pass unrecorded
            self.journal_failures += 1
            if not isinstance(exc, (JournalError, OSError, ValueError)):
                log.exception("journal: unexpected failure recording a WebSocket message")
            where = f"WebSocket message on {redact_url(str(flow.request.url))}"
            if block:
                log.error("journal: %s not forwarded, entry could not be written: %s", where, exc)
                item.drop()
            else:
                log.error("journal: %s passed WITHOUT an entry: %s", where, exc)

    async def websocket_end(self, flow: http.HTTPFlow) -> None:
        """The close of a recorded WebSocket is an entry (mitmproxy has relayed the close by now)."""
        conn: WebSocketConnection | None = flow.metadata.pop(_WS_META, None)
        if conn is None or flow.websocket is None:
            return
        try:
            await self._record_message(conn.close_call(flow.websocket, time.time(),
                                                       self._opts.get("broker_on_journal_error") == "block"))
        except Exception as exc:  # noqa: BLE001 - reported, whatever it was
            self.journal_failures += 1
            log.error("journal: close of WebSocket %s not recorded: %s", redact_url(str(flow.request.url)), exc)

    async def _record_message(self, whole: Call) -> None:
        inline = self.link is not None and not self.link.live
        if inline:
            self._restart_service()
        if await self._deliver(whole, None, inline):
            self.recorded += 1

    # -- helpers --------------------------------------------------------------------------------

    async def _record(self, call: _Tracked, flow, status, resp_fields, resp: http.Response | None, error,
                      ts: float, answered_by: str | None = None) -> Recorded | bool:
        """Hand the call's raw material to the recorder and wait until its entry is durable.

        A streamed body's capture ends with a blob commit (an fsync), so it is finished in a thread
        first. With the recording service (the default) the rest happens in that process; inline, the
        entry is built here on the event loop (CPU work that holds the GIL either way) and only the
        durable append waits in a thread.
        """
        assert self.recorder is not None
        response = Response(status, resp_fields, None, error, None, answered_by,
                            trailers=resp.trailers.fields if resp is not None and resp.trailers else ())
        played = flow.metadata.get(PLAYBACK_META) or {}
        if played.get("playback_of") and error is None:  # the broker answered, from a recorded entry
            response.answered_by, response.error = "capture", f"played back from {played['playback_of']}"
        if call.refused is not None:  # the broker answered instead of the platform, and says why
            response.answered_by, response.error = "capture", call.refused

        def bodies() -> None:
            if call.call is None:  # not sent ahead (a streamed request, or no service then)
                call.call = self._request_call(call, flow)
            if resp is not None:
                response.body = captured_body(resp, call.resp_cap)

        if call.req_cap is not None or call.resp_cap is not None:
            await asyncio.to_thread(bodies)
        else:
            bodies()
        assert call.call is not None
        whole = msgspec.structs.replace(
            call.call, response=response, ts=ts,
            mcp=self.attribute(flow, call.session) if self.attribute is not None else None,
        )
        recorded = await self._deliver(whole, call.sent, call.inline, call.prepared)
        if call.write_ahead is not None and self.wal is not None:
            self.wal.settle(call.write_ahead)  # its entry (carrying the record's id) is durable
        if recorded:
            self.recorded += 1
            if log.isEnabledFor(logging.INFO):  # broker run -v: one line per recorded call
                log.info(recorded_call_line(recorded, call.session, call.connector, flow.request.method, status,
                                            call.url))
        return recorded

    async def _deliver(self, whole: Call, sent: tuple[int, int] | None = None, inline: bool = False,
                       prepared: dict | None = None) -> Recorded | bool:
        """Record a whole call and wait until its entry is durable: through the recording service
        (its request half already there when `sent`), or in this process when there is none.
        `prepared`: its request half's entry fields, made here already (`_Tracked.prepared`)."""
        if self.link is None or inline:
            return await self._record_here(whole, dedupe=False, prepared=prepared)
        try:
            return await self.link.finish(sent, whole)  # sends it whole unless sent ahead
        except ServiceUnavailable:
            return await self._record_here(whole, dedupe=False, prepared=prepared)
        except ServiceLost:  # the dead service may have written it before it could say so
            return await self._record_here(whole, dedupe=True, prepared=prepared)

    async def _record_here(self, whole: Call, dedupe: bool, prepared: dict | None = None) -> Recorded | bool:
        """Record one call in this process (broker_recorder=inline, or no live recording service):
        as the service would, including the entry that says a call could not be recorded.
        `Recorded`, or False for a token exchange."""
        assert self.recorder is not None
        try:
            fields = call_fields(self.recorder, whole, prepared)
        except Exception as exc:  # noqa: BLE001 - as in the service: this call fails alone
            why = f"{type(exc).__name__}: {exc}"
            noted = self.recorder.prepare_unrecorded(whole, why)
            if noted is not None:
                entry = await asyncio.to_thread(self.recorder.writer.append, noted, dedupe=dedupe)
                raise CallNoted(f"{why} (entry {entry['seq']} says so)") from None
            raise JournalError(why) from None
        if fields is None:
            return False
        entry = await asyncio.to_thread(self.recorder.writer.append, fields, dedupe=dedupe)
        if "prompt_capture" in entry["request"]:
            links_for(self.recorder).on_recorded(entry)
        return Recorded(entry["seq"], entry["effect"], entry["hash"])

    def _request_call(self, call: _Tracked, flow: http.HTTPFlow, with_body: bool = True) -> Call:
        """The request half of the call's `Call` (its response part comes in `_record`); without its body
        (`with_body` False) before a streamed body has arrived (capturing it is finished only then)."""
        played = flow.metadata.get(PLAYBACK_META)
        extra = dict(played) if played else {}
        if call.write_ahead is not None:
            extra[ID_KEY] = call.write_ahead  # the entry names its write-ahead record (journal/write_ahead.py)
        # classified already (`_is_write`, with the same body: the request is not streamed): not again
        known = call.effect if call.effect is not None and with_body else None
        connector, effect, basis = known if known is not None else (call.connector, None, None)
        return Call(
            Identity(call.session, call.agent, call.principal), connector,
            Request(sendable(flow.request.method), sendable(call.url), call.req_fields,
                    captured_body(flow.request, call.req_cap) if with_body else None, extra or None,
                    trailers=flow.request.trailers.fields if flow.request.trailers else ()),
            effect=effect, effect_basis=basis, prompts=call.prompts, model_api=call.model_api,
            fail_closed=self._opts["broker_on_journal_error"] == "block",
        )

    def _drop(self, flow: http.HTTPFlow) -> None:
        call = flow.metadata.pop(_META, None)
        if call is not None:
            self.inflight -= 1
            if call.sent is not None and self.link is not None:
                self.link.forget(call.sent)
            for cap in (call.req_cap, call.resp_cap):
                if cap is not None:
                    cap.abort()

    def _journal_problem(self, session: str) -> str | None:
        """Why an entry for this session could not be written right now, or None (checked before the
        call goes upstream, so that under `block` an unrecordable call never reaches the platform)."""
        assert self.recorder is not None
        if self.link is not None and session in self.link.stopped:
            return self.link.stopped[session]
        try:
            self.recorder.check_session(session)
        except (JournalError, OSError) as exc:
            return str(exc)
        return None

    def _journal_failed(self, flow: http.HTTPFlow, call: _Tracked, exc: Exception, streamed: bool) -> None:
        self.journal_failures += 1
        where = f"{flow.request.method} {redact_url(call.url)}"
        if self._opts["broker_on_journal_error"] != "block":
            log.error("journal: %s passed WITHOUT a complete entry: %s", where, exc)
        elif streamed:
            # The body is on its way to the client, but not its end: cut the connection, so the client
            # sees a failed response, never a short one presented as complete.
            log.error("journal: %s cut off, entry could not be written: %s", where, exc)
            flow.kill()
        else:
            log.error("journal: %s blocked, entry could not be written: %s", where, exc)
            self._answer(flow, 502, f"response withheld: the journal could not record this call ({exc})")

    def _deliver_gaps(self, gaps: list[tuple[str, str, str, int]]) -> bool:
        if self.link is not None:
            return self.link.send_coverage(gaps)
        if self.recorder is not None:
            for session, host, what, n in gaps:
                self.recorder.note_gap(session, host, what, n)
        return True

    @staticmethod
    def _answer(flow: http.HTTPFlow, status: int, reason: str) -> None:
        reason = redact_url(reason) if "://" in reason else reason
        flow.response = http.Response.make(
            status, (reason + "\n").encode(), {"Content-Type": "text/plain; charset=utf-8", ERROR_HEADER: reason[:200]}
        )




async def _after(previous: asyncio.Future[None], recording: Coroutine[Any, Any, None]) -> None:
    await previous  # (never raises: each recording handles its own failure)
    await recording


async def _all_done(pending: list[asyncio.Future[None]]) -> None:
    """Wait for every recording (each handles its own failure: none raises)."""
    await asyncio.gather(*pending)
