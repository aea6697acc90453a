"""An HTTP/2 client's calls to an HTTP/1.1 upstream reuse an idle upstream connection (issue 30).

Why: mitmproxy 12 gives every stream of an HTTP/2 client its own upstream connection when the upstream speaks
HTTP/1.1 and closes it after the response, so 20 calls of one `curl --http2` (curl's default for https) cost 20
TCP and TLS handshakes where an HTTP/1.1 client needs one. No addon hook chooses or keeps the server connection,
so this module changes two methods of mitmproxy's HTTP layer, in `broker run`'s proxy process only
(`broker.proxy.runner.serve_forever` calls `apply()`; `mitmdump -s addons/...` never imports this module):

- `Http1Client.mark_done` (stock: the inherited `Http1Connection.mark_done`): after the exchange of an HTTP/2
  request, the upstream connection is closed only when HTTP/1 says so (the response was read until EOF, either
  side said `Connection: close`, in any letter case) or it becomes a tunnel (101, CONNECT: unchanged), instead
  of always. One more case closes it: a stream of the same client connection waits for a new upstream
  connection while this client connection already has `MAX_CONNS` upstream connections (mitmproxy's
  per-destination limit: a kept connection would hold the slot the waiting stream needs; this is the
  throttling stock mitmproxy relies on).
- `HttpLayer.get_connection`: for an HTTP/2 client, a stream may take an upstream HTTP/1 connection of the same
  client connection (mitmproxy's `HttpLayer` is per client connection: two clients never share one) and the same
  destination whose `Http1Client` is idle: no exchange in flight, nothing buffered, open in both directions, not
  errored. Otherwise stock: a stream that arrives while the connections are busy gets a new one.

HTTP/1 requests are untouched (`mark_done` delegates to stock for them). The same change as a patch against
mitmproxy, to offer upstream, is docs/upstream/mitmproxy-h2-to-h1-reuse.diff. `apply()` refuses (one log line;
mitmproxy stays stock) unless mitmproxy is 12.x and every method this module replaces or relies on has the
source it was written against (`SHAPES`, sha256 of `inspect.getsource`).

Left as in stock mitmproxy with HTTP/1.1 clients: an upstream that closes an idle connection just as the next
request is sent on it fails that request (502); one whose close has arrived is not reused. Whether a body was
read until EOF is judged from the response's headers, as mitmproxy does, after the addons: a response the broker
streams loses its Content-Length for the client (`streaming.hold_back_the_end`), so its connection is closed
(the safe side). A client connection's idle connections to other destinations are not closed to make room for
a new one: in `broker run` a tunnel's requests all go to its own host (others are answered 421 by the addon,
h2c is refused), so one destination.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
from collections.abc import Callable
from typing import Any

from mitmproxy import version
from mitmproxy.connection import Connection, ConnectionState, Server
from mitmproxy.net.http import http1
from mitmproxy.net.http.http1.read import get_header_tokens
from mitmproxy.proxy import commands, events, layer
from mitmproxy.proxy.layers.http import GetHttpConnection, GetHttpConnectionCompleted, HttpLayer
from mitmproxy.proxy.layers.http._http1 import Http1Client, Http1Connection, should_make_pipe
from mitmproxy.proxy.server import ConnectionHandler

log = logging.getLogger("broker")

MAX_CONNS = 5
"""Upstream connections per destination and client connection (`ConnectionHandler.max_conns`, in SHAPES)."""

_MARK_DONE = "dc5ed395ce4f07634f7a4dcd710d8130d0c036c1a03cbccd74fb69783c6f8787"
SHAPES: dict[str, str] = {
    "Http1Connection.mark_done": _MARK_DONE,
    "Http1Client.mark_done": _MARK_DONE,  # inherited, not overridden
    "Http1Client.send": "35d961e20d4812046b21ccbb4e616b38f2898780b32363b943a0b31fa499f871",
    "Http1Client.read_headers": "415454c5fa8b598177bdf456581a30f54c4af591bc3c3dd68ea774b5cd178977",
    "HttpLayer.get_connection": "1aa1c63e3175766c1a2340e2b763423ce54d7baa62f7febb7ec912deec80d93a",
    "HttpLayer.register_connection": "deed6282affc431f64a88b4b6bf181c69fba41d60125438f0d8c3ef954b73786",
    "ConnectionHandler.__init__": "ffb8e6c9e6c6d0207ce1b32773e84eef70922ac7c33d311c07092862e05162d4",
}
"""What this module was written against (mitmproxy 12.3.1): a name -> the sha256 of its source."""

_OWNERS: dict[str, type] = {
    "Http1Connection": Http1Connection, "Http1Client": Http1Client, "HttpLayer": HttpLayer,
    "ConnectionHandler": ConnectionHandler,
}
_stock: dict[str, Callable[..., Any]] = {}  # what apply() replaced, for remove()


def installed_sources() -> dict[str, str | None]:
    """The source of every method in SHAPES as installed (None where Python cannot show it)."""
    out: dict[str, str | None] = {}
    for name in SHAPES:
        owner, attr = name.split(".")
        try:
            out[name] = inspect.getsource(getattr(_OWNERS[owner], attr))
        except (OSError, TypeError, AttributeError):
            out[name] = None
    return out


def refusal(mitmproxy_version: str, sources: dict[str, str | None]) -> str | None:
    """Why the change must not be made to this mitmproxy; None when it matches what it was written against."""
    if mitmproxy_version.split(".")[0] != "12":
        return f"mitmproxy {mitmproxy_version} is not 12.x"
    for name, digest in SHAPES.items():
        source = sources.get(name)
        if source is None:
            return f"the source of mitmproxy's {name} cannot be read"
        if hashlib.sha256(source.encode()).hexdigest() != digest:
            return f"mitmproxy {mitmproxy_version}'s {name} differs from 12.3.1's"
    return None


def apply() -> bool:
    """Make the change in this process, once; False (and one warning) when this mitmproxy is not the expected one."""
    if _stock:
        return True
    why = refusal(version.VERSION, installed_sources())
    if why is not None:
        log.warning("HTTP/2 upstream connection reuse not applied: %s; each HTTP/2 call to an HTTP/1.1 upstream "
                    "gets its own upstream connection, as in stock mitmproxy", why)
        return False
    _stock["mark_done"] = Http1Connection.mark_done
    _stock["get_connection"] = HttpLayer.get_connection
    setattr(Http1Client, "mark_done", _mark_done)  # noqa: B010 - mypy refuses assigning to a method
    setattr(HttpLayer, "get_connection", _get_connection)  # noqa: B010
    return True


def remove() -> None:
    """Undo apply() (for tests, which share one process)."""
    if not _stock:
        return
    delattr(Http1Client, "mark_done")
    setattr(HttpLayer, "get_connection", _stock["get_connection"])  # noqa: B010
    _stock.clear()


def applied() -> bool:
    return bool(_stock)


def closes_after(request: Any, response: Any) -> bool:
    """HTTP/1's rule: the connection ends with this exchange (a body read until EOF, or `Connection: close`).

    mitmproxy's `connection_close` plus the `close` option in any case (RFC 9110 7.6.1: connection options are
    case-insensitive; mitmproxy 12 compares `close` case-sensitively and lets `keep-alive` win over `Close`). And
    an interim answer (1xx; 101 never gets here) ends it: mitmproxy 12 takes one for the final answer, and the real
    one that follows on the connection must never be read as the next stream's."""
    if 100 <= response.status_code < 200:
        return True
    try:
        until_eof = http1.expected_http_body_size(request, response) == -1
    except ValueError:  # invalid headers an addon set: no reuse
        return True
    return (until_eof or http1.connection_close(request.http_version, request.headers)
            or http1.connection_close(response.http_version, response.headers)
            or any("close" in (t.lower() for t in get_header_tokens(m.headers, "connection"))
                   for m in (request, response)))


def _http_layer(client: Http1Client) -> HttpLayer | None:
    """The HttpLayer (of the client connection) that owns this upstream connection."""
    return next((x for x in reversed(client.context.layers) if isinstance(x, HttpLayer)), None)


def _someone_may_wait_for_a_slot(http: HttpLayer) -> bool:
    """Whether a stream waits for a new upstream connection while the client connection holds MAX_CONNS."""
    if not http.waiting_for_establishment:
        return False
    held = sum(1 for c in http.connections if isinstance(c, Server) and c.state is not ConnectionState.CLOSED)
    return held >= MAX_CONNS


def _mark_done(self: Http1Client, *, request: bool = False, response: bool = False) -> layer.CommandGenerator[None]:
    """Stock for an HTTP/1 request; for an HTTP/2 one, stock minus "close after one request": the connection
    stays open for the next stream unless HTTP/1 ends it (or a waiting stream needs its slot)."""
    if self.request is None or not self.request.is_http2:
        yield from _stock["mark_done"](self, request=request, response=response)
        return
    if request:
        self.request_done = True
    if response:
        self.response_done = True
    if not (self.request_done and self.response_done):
        return
    assert self.response is not None
    if should_make_pipe(self.request, self.response):
        yield from self.make_pipe()
        return
    http = _http_layer(self)
    if http is None or closes_after(self.request, self.response) or _someone_may_wait_for_a_slot(http):
        yield commands.CloseConnection(self.conn)
        self.state = self.done
        return
    self.request_done = self.response_done = False
    self.request = self.response = None
    self.stream_id = None
    self.state = self.read_headers
    if self.buf:  # bytes the server sent after the response: read_headers closes the connection
        yield from self.state(events.DataReceived(self.conn, b""))


def is_idle(handler: Any, connection: Connection) -> bool:
    """Whether the HTTP/1 client at the end of `handler`'s layer stack is between exchanges on `connection`."""
    client = handler.context.layers[-1] if isinstance(handler, layer.Layer) else None
    return (isinstance(client, Http1Client) and client.conn is connection and client.stream_id is None
            and client.request is None and not client.request_done and not client.response_done
            and client.state == client.read_headers and not client.buf)


def idle_connection(http: HttpLayer, event: GetHttpConnection) -> Connection | None:
    """An upstream HTTP/1 connection of this client connection to the event's destination that is idle."""
    for connection, handler in http.connections.items():
        if (event.connection_spec_matches(connection) and connection.connected and not connection.error
                and connection not in http.waiting_for_establishment and connection.alpn != b"h2"
                and is_idle(handler, connection)):
            return connection
    return None


def _get_connection(self: HttpLayer, event: GetHttpConnection, *, reuse: bool = True) -> layer.CommandGenerator[None]:
    """Stock, except that an HTTP/2 client's stream takes an idle HTTP/1 connection to its destination."""
    found = idle_connection(self, event) if reuse and self.context.client.alpn == b"h2" else None
    if found is None:
        yield from _stock["get_connection"](self, event, reuse=reuse)
        return
    stream = self.command_sources.pop(event)
    yield from self.event_to_child(stream, GetHttpConnectionCompleted(event, (found, None)))
