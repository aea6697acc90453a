"""The one value a capture point hands the journal: a `Call`.

Every capture point (the HTTPS broker's addon and its recording service, the MCP shim, playback,
agents reporting their own calls) builds a `Call` and gives it to `journal.record.Recorder`, which
alone turns it into an entry (redaction, bodies, classification, spilling). The parts:

- `identity` (`Identity`): session, agent, principal (None: the credential's fingerprint);
- `request` (`Request`): method, URL, header fields, body, and further request keys (`extra`);
- `response` (`Response`, None while the call is upstream): status, header fields, body, error,
  further response keys, and who answered (`answered_by`, docs/contract.md);
- `connector`, `capture` ("broker", "gateway", "agent");
- `effect` and `effect_basis` when the capture point decided them (MCP, from tool annotations);
  None: the Recorder classifies (the connector rules, then the method's meaning);
- `mcp`, `prompt_ref`, `ts`; for the recording service also `prompts`/`model_api` (prompt capture,
  docs/prompts.md) and `fail_closed` (the capture point answers 502 when the call cannot be recorded).

Header fields are (name, value) pairs of text or raw bytes (raw bytes are decoded by the recorder,
docs/contract.md "Wire text"). A body is raw bytes, a `Prepared` entry value (a capture point that
already streamed it to a blob), a `JsonValue` (MCP params and results) or a `WebSocketPayload`.

These are msgspec Structs so that a capture point that hands its calls to another process can send
the Call itself, encoded as MessagePack: bytes stay bytes, and nothing is pickled.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

Field = Any
"""A method, URL, header name or value: text, or the raw bytes from the wire (msgspec cannot type a
str-or-bytes union, so these are declared Any; `journal.record.wire_field` reads either)."""


class Prepared(msgspec.Struct, frozen=True, tag="prepared"):
    """A body a capture point has already turned into its entry value (e.g. streamed to a blob)."""

    value: Any
    extra: dict = {}


class JsonValue(msgspec.Struct, frozen=True, tag="json"):
    """A body that is already a JSON value (MCP params and results), not bytes."""

    value: Any


class WebSocketPayload(msgspec.Struct, frozen=True, tag="websocket"):
    """A WebSocket message's payload (docs/contract.md, "WebSocket messages"): the bytes and whether the
    message was text. No headers come with a message, so this says what a Content-Type would: a text
    message is recorded as JSON when it parses as JSON, else as text; a binary one as bytes (base64)."""

    data: bytes
    text: bool


Body = bytes | Prepared | JsonValue | WebSocketPayload | None


class Identity(msgspec.Struct, frozen=True):
    """Who made the call: the session it belongs to, the agent, and the account it acted as."""

    session: str
    agent: str
    principal: str | None = None
    """None: the fingerprint of the call's credential (`journal.record.principal_fingerprint`)."""


class Request(msgspec.Struct):
    """The request as the capture point saw it (credentials included: redaction is the Recorder's)."""

    method: Field
    url: Field
    headers: Any = ()
    """(name, value) pairs in order, each text or raw bytes."""
    body: Body = None
    extra: dict | None = None
    """Further request keys of the entry (e.g. `playback_of`)."""
    trailers: Any = ()
    """Trailer fields (HTTP/1.1 chunked or HTTP/2), as `headers`; recorded redacted in `request.trailers`."""


class Response(msgspec.Struct):
    """The answer: status None with an error when none came."""

    status: int | None = None
    headers: Any = ()
    """(name, value) pairs in order, each text or raw bytes."""
    body: Body = None
    error: str | None = None
    extra: dict | None = None
    """Further response keys of the entry (e.g. `stream`, `body_sha256`)."""
    answered_by: str | None = None
    """None: "upstream" when a status came with no error, else "none"; "capture" when the capture
    point answered in the upstream's place (docs/contract.md)."""
    trailers: Any = ()
    """Trailer fields, as `headers`; recorded redacted in `response.trailers`."""


class Call(msgspec.Struct):
    """One call, as a capture point hands it to the journal (see the module docstring)."""

    identity: Identity
    connector: str
    request: Request
    response: Response | None = None
    capture: str = "broker"
    effect: str | None = None
    effect_basis: str | None = None
    mcp: dict | None = None
    prompt_ref: str | None = None
    ts: Any = None
    """When it was answered: a datetime, a recorded ts string, epoch seconds, or None for now
    (epoch seconds on the recording service's wire)."""
    prompts: str | None = None
    model_api: str | None = None
    fail_closed: bool = True

    @classmethod
    def make(
        cls, *, session: str, agent: str, principal: str | None, connector: str, method: Field, url: Field,
        capture: str = "broker", effect: str | None = None, effect_basis: str | None = None,
        request_headers: Any = (), request_body: Body = None, status: int | None = None,
        response_headers: Any = (), response_body: Body = None, error: str | None = None,
        mcp: dict | None = None, prompt_ref: str | None = None, ts: datetime | str | float | None = None,
        request_extra: dict | None = None, response_extra: dict | None = None, answered_by: str | None = None,
    ) -> Call:
        """A whole call written out by hand (scripts, tests, agents): the parts from flat keywords."""
        return cls(
            Identity(session, agent, principal), connector,
            Request(method, url, request_headers, request_body, request_extra),
            Response(status, response_headers, response_body, error, response_extra, answered_by),
            capture=capture, effect=effect, effect_basis=effect_basis, mcp=mcp, prompt_ref=prompt_ref, ts=ts,
        )
