"""A recorded WebSocket played back to the client (`broker run --playback`), with no upstream connection.

The handshake is answered like any played-back call (its recorded 101, with a `Sec-WebSocket-Accept`
made for the new client's key and no extension, so nothing is compressed). Then the recorded
messages (docs/contract.md section 8) are replayed in their recorded order: the server's messages
up to the client's first one are sent when the connection opens; each message the client sends is
compared with the next one the client sent in the record (by the body the journal records, the
rule HTTP playback uses) and is never passed on; the server's messages that followed it in the
record are then sent. A client message that differs (or one the record does not have) ends the
playback of that connection: the error says which message and which entry, the client gets no more
recorded messages, and the new run's record holds what the client sent. Pings are answered here
with their pong; a close goes to the client only (`broker.proxy.websocket_relay.UPSTREAMLESS`).
"""

from __future__ import annotations

import base64
import logging

import wsproto.utilities
from mitmproxy import ctx, http
from mitmproxy.websocket import WebSocketMessage
from wsproto.frame_protocol import Opcode

from broker.proxy.websocket_relay import UPSTREAMLESS
from journal.bodies import record_body
from journal.export.fixture import body_digest
from journal.export.recorded_body import body_bytes
from journal.playback import RecordedSession
from journal.record import Recorder
from journal.redact import redact_url

log = logging.getLogger("broker")
SCRIPT = "broker_playback_websocket"
"""`flow.metadata` key of a played-back WebSocket's `Script`."""


def is_upgrade(flow: http.HTTPFlow) -> bool:
    return flow.request.headers.get("upgrade", "").lower() == "websocket"


def handshake_answer(flow: http.HTTPFlow, recorded: RecordedSession, entry: dict, recorder: Recorder) -> http.Response:
    """The recorded 101 for this client (its own accept token), and the flow set up for playback."""
    key = flow.request.headers.get("sec-websocket-key", "")
    answer = http.Response.make(101, b"", {
        "Upgrade": "websocket", "Connection": "Upgrade",
        "Sec-WebSocket-Accept": wsproto.utilities.generate_accept_token(key.encode()).decode(),
    })
    flow.metadata[UPSTREAMLESS] = True
    flow.metadata[SCRIPT] = Script(recorded, recorded.messages_of(entry), recorder, redact_url(flow.request.url))
    return answer


class Script:
    """What is left to play of one recorded WebSocket."""

    def __init__(self, recorded: RecordedSession, messages: list[dict], recorder: Recorder, url: str) -> None:
        self.recorded, self.recorder, self.url = recorded, recorder, url
        self.messages = [m for m in messages if m["request"]["websocket"].get("kind") in ("text", "binary")]
        self.pos = 0
        self.client_messages = 0
        self.failed: str | None = None

    def server_turn(self, flow: http.HTTPFlow) -> None:
        """Send the client the recorded server messages up to the client's next one."""
        while self.failed is None and self.pos < len(self.messages):
            entry = self.messages[self.pos]
            ws = entry["request"]["websocket"]
            if ws.get("direction") == "client_to_server":
                return
            self.pos += 1
            data = body_bytes(entry["response"].get("body"), None, self.recorded.vault)
            if ws.get("kind") == "binary":
                data = _binary(entry["response"].get("body"), data)
            ctx.master.commands.call("inject.websocket", flow, True, data, ws.get("kind") == "text")

    def client_message(self, flow: http.HTTPFlow, message: WebSocketMessage) -> None:
        """Compare a message the client sent with the next recorded one; never pass it on."""
        message.drop()
        self.client_messages += 1
        if self.failed is not None:
            return
        expected = self.messages[self.pos] if self.pos < len(self.messages) else None
        text = message.type == Opcode.TEXT
        got = record_body(bytes(message.content), "application/json" if text else "application/octet-stream", None,
                          self.recorder.blobs, self.recorder.spill_threshold)[0] if message.content else None
        if expected is None:
            self.failed = (f"playback: client message {self.client_messages} on {self.url}: the recorded connection "
                           "has no more client messages")
        elif expected["request"]["websocket"].get("direction") != "client_to_server":  # (server_turn ran first)
            self.failed = f"playback: client message {self.client_messages} on {self.url}: not expected here"
        elif body_digest(got) != body_digest(expected["request"].get("body")):
            self.failed = (f"playback: client message {self.client_messages} on {self.url} differs from the recorded "
                           f"one ({self.recorded.playback_of(expected)}): no more recorded messages are played")
        if self.failed is not None:
            log.error("%s", self.failed)
            return
        self.pos += 1
        self.server_turn(flow)


def _binary(body: object, data: bytes) -> bytes:
    """A binary message's bytes: the journal holds them as `{"base64": ...}` (or spilled)."""
    if isinstance(body, dict) and isinstance(body.get("base64"), str):
        return base64.b64decode(body["base64"])
    return data
