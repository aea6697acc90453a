"""WebSocket messages as calls: what the addon keeps for one recorded WebSocket connection, and the
`journal.call.Call` it hands the recorder for each message and for the close.

Why a call per message: what an agent says and hears over a WebSocket (a Slack RTM post, a model's
answer, a tool call it asks for) is as much a connector call as a request and its response. Each
message becomes one entry (docs/contract.md, "WebSocket messages"): method `WEBSOCKET`, the
handshake's URL (redacted by the recorder like any URL), the payload in `request.body` when the
client sent it and in `response.body` when the server did, and `request.websocket` saying which
connection (the handshake entry's hash and seq), which direction, which kind, and the message's
number on that connection. Status 101 says the message went over the connection the upstream opened.
"""

from __future__ import annotations

import asyncio

from mitmproxy.websocket import WebSocketData, WebSocketMessage
from wsproto.frame_protocol import Opcode

from broker.proxy.websocket_relay import ControlFrame
from journal.call import Call, Identity, Request, Response, WebSocketPayload

METHOD = "WEBSOCKET"
"""The request method of a message entry (no HTTP method is one: a reader tells message entries by it
and by `request.websocket`)."""
CLIENT, SERVER = "client_to_server", "server_to_client"


class WebSocketConnection:
    """One recorded WebSocket connection: who it belongs to and its handshake's entry."""

    __slots__ = ("identity", "connector", "url", "prompts", "model_api", "handshake_hash", "handshake_seq", "count",
                 "pending")

    def __init__(self, identity: Identity, connector: str, url: str | bytes, prompts: str | None,
                 model_api: str | None, handshake_hash: str | None, handshake_seq: int | None) -> None:
        self.identity, self.connector, self.url = identity, connector, url
        self.prompts, self.model_api = prompts, model_api
        self.handshake_hash, self.handshake_seq = handshake_hash, handshake_seq
        self.count = 0  # messages recorded so far (a message's number on its connection)
        self.pending: list[asyncio.Future[None]] = []
        """Recordings of the messages held since the last flush (`broker.proxy.websocket_relay`)."""

    def _meta(self, direction: str, kind: str) -> dict:
        self.count += 1
        return {"handshake": self.handshake_hash, "handshake_seq": self.handshake_seq, "direction": direction,
                "kind": kind, "message": self.count}

    def _call(self, meta: dict, payload: WebSocketPayload | None, ts: float, fail_closed: bool) -> Call:
        sent = meta["direction"] == CLIENT
        return Call(
            self.identity, self.connector,
            Request(METHOD, self.url, (), payload if sent else None, {"websocket": meta}),
            Response(101, (), None if sent else payload, None, None, "upstream"),
            ts=ts, prompts=self.prompts, model_api=self.model_api, fail_closed=fail_closed,
        )

    def message_call(self, message: WebSocketMessage, fail_closed: bool) -> Call:
        """The call of one message (text or binary; mitmproxy hands over whole messages, fragments joined)."""
        text = message.type == Opcode.TEXT
        meta = self._meta(CLIENT if message.from_client else SERVER, "text" if text else "binary")
        if message.injected:
            meta["injected"] = True
        return self._call(meta, WebSocketPayload(bytes(message.content), text), message.timestamp, fail_closed)

    def control_call(self, frame: ControlFrame, fail_closed: bool) -> Call:
        """The call of a ping or pong frame (its payload, binary; no payload is an empty one)."""
        meta = self._meta(CLIENT if frame.from_client else SERVER, frame.kind)
        return self._call(meta, WebSocketPayload(frame.payload, False), frame.timestamp, fail_closed)

    def close_call(self, data: WebSocketData, now: float, fail_closed: bool) -> Call:
        """The call of the connection's close: who closed it, the code and the reason."""
        meta = self._meta(CLIENT if data.closed_by_client else SERVER, "close")
        meta["close_code"] = data.close_code
        meta["close_reason"] = data.close_reason or ""
        return self._call(meta, None, data.timestamp_end or now, fail_closed)
