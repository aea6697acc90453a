"""mitmproxy addon: answer every call from a recorded session, never forwarding one (`broker run
--playback SESSION`).

Loaded before addons/connector_journal.py (which records the new run as a session of its own):

    mitmdump -s addons/playback.py -s addons/connector_journal.py --set vault=./vault \\
        --set broker_playback=incident-7 --set broker_session=rerun-1

For each call the journal recognises, the request is put in the form the journal records
(redacted URL, encoded body) and matched against the recorded session (journal.playback: connector,
method, URL and request body; identical calls take the recorded entries in seq order). A match is
answered with the recorded status, headers and body (spilled bodies read back from the blob store);
the new entry's `request.playback_of` names it (`<session>#<seq>`). Anything else, a call no
connector recognises included, is answered 502 with the reason in the body and in `X-Broker-Error`.
No call ever goes upstream: every flow gets its answer in the `request` hook. A recorded WebSocket is
played back too, its messages included (`broker.proxy.websocket_playback`).
"""

from __future__ import annotations

import logging

from mitmproxy import ctx, http
from mitmproxy.addonmanager import traverse

from broker.proxy import websocket_relay
from broker.proxy.addon import _META as JOURNAL_META
from broker.proxy.addon import ERROR_HEADER, PLAYBACK_META
from broker.proxy.websocket_playback import SCRIPT, Script, handshake_answer, is_upgrade
from journal.bodies import SPILL_THRESHOLD
from journal.call import Call
from journal.export.recorded_body import body_bytes, header
from journal.playback import Miss, RecordedSession
from journal.record import Recorder
from journal.redact import REDACTED
from journal.vault import VaultError

log = logging.getLogger("broker")
_FRAMING = frozenset({"content-encoding", "content-length", "transfer-encoding"})


def recorded_response(recorded: RecordedSession, entry: dict) -> http.Response:
    """The answer an entry recorded, as bytes again. The body is the decoded one the journal holds, so
    framing headers are dropped and Content-Length set (unless the body was kept encoded because it
    did not decode); headers whose value was never captured are left out."""
    resp = entry["response"]
    status = resp.get("status")
    if not isinstance(status, int):
        reason = f"playback of {recorded.playback_of(entry)}: the recorded call got no answer ({resp.get('error')})"
        return _refusal(reason)
    keep_framing = resp.get("content_encoding_error") is not None
    pairs = [p for p in resp.get("headers") or [] if isinstance(p, list) and len(p) == 2]
    headers = [
        (str(k).encode("utf-8", "surrogateescape"), str(v).encode("utf-8", "surrogateescape"))
        for k, v in pairs if v != REDACTED and (keep_framing or str(k).lower() not in _FRAMING)
    ]
    data = body_bytes(resp.get("body"), header(pairs, "content-type"), recorded.vault)
    answer = http.Response.make(status, b"", headers)
    answer.raw_content = data
    if "transfer-encoding" not in answer.headers:
        answer.headers["content-length"] = str(len(data))
    return answer


def _refusal(reason: str) -> http.Response:
    return http.Response.make(
        502, (reason + "\n").encode(), {"Content-Type": "text/plain; charset=utf-8", ERROR_HEADER: reason[:200]}
    )


class Playback:
    def __init__(self) -> None:
        self.recorded: RecordedSession | None = None
        self.problem: str | None = None  # why playback cannot answer anything (every call gets 502)
        self._recorder: Recorder | None = None
        self.answered = 0
        self.unmatched = 0

    def load(self, loader) -> None:
        loader.add_option(
            "broker_playback", str, "",
            "Answer every call from this recorded session in the vault; never forward a call upstream.",
        )

    @property
    def active(self) -> bool:
        return bool(getattr(ctx.options, "broker_playback", ""))

    def configure(self, updated: set[str]) -> None:
        if updated & {"broker_playback", "vault", "broker_spill_threshold"}:
            self.recorded, self.problem = None, None
            if self._recorder is not None:
                self._recorder.close()
                self._recorder = None

    def running(self) -> None:
        if self.active:
            if ctx.options.connection_strategy != "lazy":
                ctx.options.update(connection_strategy="lazy")  # no upstream connection at CONNECT time
            self.problem = self.problem or self._order_problem()
            self._session()

    def _order_problem(self) -> str | None:
        """The journal must come after this addon (it reads what this one sets); else answer nothing."""
        order = [type(a).__name__ for a in traverse(ctx.master.addons.chain)]
        mine = next(i for i, a in enumerate(traverse(ctx.master.addons.chain)) if a is self)
        if "ConnectorJournal" in order[:mine]:
            problem = "playback: load addons/playback.py before addons/connector_journal.py (every call refused)"
            log.error("%s", problem)
            return problem
        return None

    def done(self) -> None:
        if self._recorder is not None:
            self._recorder.close()

    def _session(self) -> RecordedSession | None:
        if self.recorded is None and self.problem is None:
            vault = getattr(ctx.options, "vault", "./vault")
            try:
                self.recorded = RecordedSession.load(vault, ctx.options.broker_playback)
                threshold = getattr(ctx.options, "broker_spill_threshold", SPILL_THRESHOLD)
                self._recorder = Recorder(vault, spill_threshold=threshold)
            except (VaultError, OSError, ValueError) as exc:
                self.problem = f"playback: {exc}"
                log.error("%s", self.problem)
        return self.recorded

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        if self.active:
            flow.metadata[PLAYBACK_META] = {}  # the journal buffers this flow instead of streaming it

    def request(self, flow: http.HTTPFlow) -> None:
        if not self.active or flow.response is not None:
            return
        try:
            flow.response = self._answer(flow)
        except Exception as exc:  # noqa: BLE001 - whatever failed, the call must not go upstream
            log.exception("playback: failed to answer a call")
            flow.response = _refusal(f"playback: could not answer this call ({type(exc).__name__}: {exc})")

    def _answer(self, flow: http.HTTPFlow) -> http.Response:
        recorded = self._session()
        if recorded is None or self._recorder is None:
            return _refusal(self.problem or "playback: no recorded session")
        call = flow.metadata.get(JOURNAL_META)
        if call is None:
            self.unmatched += 1
            host = flow.request.pretty_host
            return _refusal(f"playback: no connector recognises {host}; nothing recorded answers it")
        if call.session == recorded.session:
            return _refusal(f"playback: the new run must be recorded under another session than {recorded.session!r}")
        fields = self._recorder.prepare(Call.make(
            session=call.session, agent=call.agent, principal="playback", connector=call.connector,
            capture="broker", effect="read", method=flow.request.method, url=call.url,
            request_headers=call.req_fields, request_body=flow.request.raw_content or None,
        ))
        if fields is None:
            self.unmatched += 1
            return _refusal("playback: token exchanges are never recorded, so no recorded call answers one")
        req = fields["request"]
        found = recorded.take(call.connector, req["method"], req["url"], req.get("body"))
        if isinstance(found, Miss):
            self.unmatched += 1
            return _refusal(f"playback: unmatched call: {found.reason}")
        flow.metadata[PLAYBACK_META]["playback_of"] = recorded.playback_of(found)
        self.answered += 1
        if found["response"].get("status") == 101 and is_upgrade(flow):
            if not websocket_relay.installed:
                return _refusal("playback: WebSockets are played back only on mitmproxy 12 (its relay is replaced)")
            return handshake_answer(flow, recorded, found, self._recorder)
        return recorded_response(recorded, found)

    # -- a played-back WebSocket (broker.proxy.websocket_playback) ---------------------------------

    def websocket_start(self, flow: http.HTTPFlow) -> None:
        script: Script | None = flow.metadata.get(SCRIPT)
        if script is not None:
            script.server_turn(flow)

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        script: Script | None = flow.metadata.get(SCRIPT)
        if script is None or flow.websocket is None or not flow.websocket.messages:
            return
        message = flow.websocket.messages[-1]
        if message.from_client and not message.injected:
            script.client_message(flow, message)
            if script.failed is not None:
                self.unmatched += 1

    def websocket_control(self, frame: websocket_relay.ControlFrame) -> None:
        if SCRIPT in frame.flow.metadata:
            if frame.from_client and frame.kind == "ping":
                frame.answer()  # there is no upstream to answer it
            else:
                frame.drop()

