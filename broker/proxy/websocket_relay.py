"""mitmproxy 12's WebSocket relay, holding a run of messages until their entries are durable.

Why: mitmproxy's `WebsocketLayer.relay_messages` runs the `websocket_message` hook for one message,
waits for it, forwards the message, and only then looks at the next one. A hook that waits for its
entry to be durable therefore makes one connection's messages wait one after another for their own
fsync and their own round trip to the recording service: two process hand-offs per message, each
waiting for a CPU on a busy machine (measured: 3 to 35 ms a message, 28 to 130 messages a second on
one connection; docs/benchmarks.md).

`install()` (run when mitmproxy loads the broker's addon) replaces that method with one that does the
same, except that the messages decoded from one read of the socket are handed to the hooks first and
forwarded together after one more hook, `websocket_flush`: the addon's `websocket_message` sends each
message's call to the recording service without waiting, and `websocket_flush` waits until all of
them are durable (the service writes whatever arrived with one fsync). A message is still never
passed on before its entry is durable; a message whose entry failed is dropped at the flush
(under `block`), and nothing is encoded for the peer before then (a permessage-deflate context
never holds a message that was not sent). Order on the wire is kept: anything else the layer sends
(a ping or pong it relays, a close) goes after the held messages, flushed first.

Ping and pong frames, which mitmproxy relays without any hook, get one here: `websocket_control`,
called before the frame is relayed like a message (and held with the messages), so the addon can
record it (`ControlFrame`; docs/contract.md section 8).

Installed only on the mitmproxy it was written against (12.x): on another version the layer is left
as it is and the addon waits in `websocket_message` for each message as before (`installed` says
which).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import wsproto.events
from mitmproxy import http, version, websocket
from mitmproxy.proxy import commands, events, layer
from mitmproxy.proxy.layers import websocket as ws_layer
from mitmproxy.proxy.utils import expect
from wsproto import ConnectionState
from wsproto.frame_protocol import Opcode

log = logging.getLogger("broker")

UPSTREAMLESS = "broker_upstreamless"
"""`flow.metadata` key set on a WebSocket the broker answers itself (`--playback`): nothing is ever sent
to the server side (no upstream connection is opened); only the client gets the close."""

installed = False
"""The relay is replaced: `websocket_flush` follows each run of messages (the addon may defer its waits)."""


class ControlFrame:
    """A ping or pong on its way through the proxy: its WebSocket's flow, which side sent it, its
    payload; `drop()` keeps it from being relayed (its entry could not be written). (mitmproxy hands a
    hook exactly one argument: the frame carries its flow.)"""

    __slots__ = ("flow", "kind", "from_client", "payload", "timestamp", "dropped", "answered")

    def __init__(self, flow: http.HTTPFlow, kind: str, from_client: bool, payload: bytes) -> None:
        self.flow, self.kind, self.from_client, self.payload = flow, kind, from_client, payload
        self.timestamp = time.time()
        self.dropped = False
        self.answered = False

    def drop(self) -> None:
        self.dropped = True

    def answer(self) -> None:
        """Answer a ping here with its pong, instead of relaying it (playback: there is no upstream)."""
        self.dropped = self.answered = True


@dataclass
class WebsocketControlHook(commands.StartHook):
    """A ping or pong frame arrived (`frame`, which names its flow); it is relayed after the next
    `websocket_flush`."""

    frame: ControlFrame


@dataclass
class WebsocketFlushHook(commands.StartHook):
    """The messages and control frames handed to the hooks since the last flush are about to be relayed
    (those not dropped by then): the hook returns once they may go."""

    flow: http.HTTPFlow


_Held = tuple[websocket.WebSocketMessage, ws_layer.Fragmentizer] | tuple[ControlFrame, wsproto.events.Event]


def _flush(flow: http.HTTPFlow, src_ws: ws_layer.WebsocketConnection, dst_ws: ws_layer.WebsocketConnection,
           held: list[_Held]) -> layer.CommandGenerator[None]:
    """Wait for the flush hook, then encode and send what was held and not dropped, in order."""
    if not held:
        return
    yield WebsocketFlushHook(flow)
    for item, how in held:
        if isinstance(item, ControlFrame) and item.answered and item.kind == "ping":
            yield src_ws.send2(wsproto.events.Pong(item.payload))
        if item.dropped:
            continue
        if isinstance(how, ws_layer.Fragmentizer):
            for msg in how(item.content):  # type: ignore[union-attr]  # the message as it is now, in its fragments
                yield dst_ws.send2(msg)
        else:
            yield dst_ws.send2(how)
    held.clear()


@expect(events.DataReceived, events.ConnectionClosed, ws_layer.WebSocketMessageInjected)
def _relay_messages(self: ws_layer.WebsocketLayer, event: events.Event) -> layer.CommandGenerator[None]:
    """mitmproxy 12.3's `relay_messages`, with messages and control frames held until `websocket_flush`."""
    assert self.flow.websocket

    if isinstance(event, events.ConnectionEvent):
        from_client = event.connection == self.context.client
        injected = False
    elif isinstance(event, ws_layer.WebSocketMessageInjected):
        from_client = event.message.from_client
        injected = True
    else:
        raise AssertionError(f"Unexpected event: {event}")

    from_str = "client" if from_client else "server"
    src_ws, dst_ws = (self.client_ws, self.server_ws) if from_client else (self.server_ws, self.client_ws)

    if isinstance(event, events.DataReceived):
        src_ws.receive_data(event.data)
    elif isinstance(event, events.ConnectionClosed):
        src_ws.receive_data(None)
    elif isinstance(event, ws_layer.WebSocketMessageInjected):
        fragmentizer = ws_layer.Fragmentizer([], event.message.type == Opcode.TEXT)
        src_ws._events.extend(fragmentizer(event.message.content))

    held: list[_Held] = []
    for ws_event in src_ws.events():
        if isinstance(ws_event, wsproto.events.Message):
            is_text = isinstance(ws_event.data, str)
            if is_text:
                typ = Opcode.TEXT
                src_ws.frame_buf[-1] += ws_event.data.encode()
            else:
                typ = Opcode.BINARY
                src_ws.frame_buf[-1] += ws_event.data

            if ws_event.message_finished:
                content = b"".join(src_ws.frame_buf)
                fragmentizer = ws_layer.Fragmentizer(src_ws.frame_buf, is_text)
                src_ws.frame_buf = [b""]
                message = websocket.WebSocketMessage(typ, from_client, content, injected=injected)
                self.flow.websocket.messages.append(message)
                yield ws_layer.WebsocketMessageHook(self.flow)
                held.append((message, fragmentizer))
            elif ws_event.frame_finished:
                src_ws.frame_buf.append(b"")

        elif isinstance(ws_event, (wsproto.events.Ping, wsproto.events.Pong)):
            kind = ws_event.__class__.__name__.lower()
            yield commands.Log(f"Received WebSocket {kind} from {from_str} (payload: {bytes(ws_event.payload)!r})")
            frame = ControlFrame(self.flow, kind, from_client, bytes(ws_event.payload))
            yield WebsocketControlHook(frame)
            held.append((frame, ws_event))
        elif isinstance(ws_event, wsproto.events.CloseConnection):
            yield from _flush(self.flow, src_ws, dst_ws, held)
            self.flow.websocket.timestamp_end = time.time()
            self.flow.websocket.closed_by_client = from_client
            self.flow.websocket.close_code = ws_event.code
            self.flow.websocket.close_reason = ws_event.reason

            sides = [self.client_ws] if self.flow.metadata.get(UPSTREAMLESS) else [self.server_ws, self.client_ws]
            for ws in sides:
                if ws.state in {ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING}:
                    # response == original event, so no need to differentiate here.
                    yield ws.send2(ws_event)
                yield commands.CloseConnection(ws.conn)
            yield ws_layer.WebsocketEndHook(self.flow)
            self.flow.live = False
            self._handle_event = self.done
        else:  # pragma: no cover
            raise AssertionError(f"Unexpected WebSocket event: {ws_event}")
    yield from _flush(self.flow, src_ws, dst_ws, held)


def install() -> None:
    """Replace mitmproxy's WebSocket relay once (see the module docstring); on a mitmproxy other than 12.x,
    leave it and say so."""
    global installed
    if installed:
        return
    if not version.VERSION.startswith("12."):
        log.warning("broker: mitmproxy %s: WebSocket messages are recorded one at a time (the batching relay "
                    "was written for 12.x) and ping/pong frames are not recorded", version.VERSION)
        return
    ws_layer.WebsocketLayer.relay_messages = _relay_messages  # type: ignore[method-assign]
    installed = True
