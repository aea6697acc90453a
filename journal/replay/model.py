"""What replay works with: a `Call` (one entry, normalised), the `Touch`es a connector finds in it,
and the `Inverse` a connector derives for a write. Connector modules use only this module.

The connector interface (see `journal/replay/connectors/__init__.py` and docs/replay.md):

    NAME = "gmail"                                  # equals the entries' `connector` field
    def touches(call: Call) -> list[Touch] | None   # None: "not mine, use the generic REST rules"
    def invert(write: Write) -> Inverse             # for each write Touch this module produced
    def failure(call: Call) -> str | None           # optional: why a 2xx call still failed
    def describe(kind, key, state) -> str | None    # optional: a short title for a resource

Replay never executes a call; an `Inverse` only describes one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from urllib.parse import parse_qsl, quote, urlencode

import orjson

from journal.blobstore import is_ref_object
from journal.connectors._http import lower_headers

READ = "read"
WRITE = "write"
SIDE = "side"
"""A resource changed as a side effect of a write whose inverse is planned on another touch."""
ROLES = (READ, WRITE, SIDE)

CREATED = "created"
DELETED = "deleted"
TRASHED = "trashed"
UNTRASHED = "untrashed"
SENT = "sent"
CANCELLED = "cancelled"
"""Lifecycle marks a touch may carry (free text is allowed too; these are the common ones)."""

GONE = frozenset({DELETED, CANCELLED})
_JSON_LIMIT = 8 << 20
_SEGMENT_SAFE = "@:%!$&'()*+,;=-._~"


# -- bodies ---------------------------------------------------------------------------------------


def is_ref(value: object) -> bool:
    """A spilled value: `{"sha256", "size", "ref"}` pointing into the vault's blobs/."""
    return is_ref_object(value)


def is_base64(value: object) -> bool:
    return isinstance(value, dict) and set(value) == {"base64"} and isinstance(value["base64"], str)


def json_value(body: object) -> object:
    """The body as a JSON value when it is one: parsed JSON stays; a string that holds JSON (a JSON
    body recorded as text) is parsed; spilled, base64 and other bodies give None. Never opens a blob."""
    if body is None or is_ref(body) or is_base64(body):
        return None
    if isinstance(body, str):
        text = body.lstrip()
        if text[:1] in ("{", "[") and len(body) <= _JSON_LIMIT:
            try:
                return orjson.loads(body)
            except orjson.JSONDecodeError:
                return None
        return None
    return body


def as_dict(value: object) -> dict:
    return value if isinstance(value, dict) and not is_ref(value) and not is_base64(value) else {}


def form_or_json(body: object) -> dict:
    """Request arguments from a JSON object body or a form-encoded string (last value of a name wins)."""
    value = json_value(body)
    if isinstance(value, dict):
        return value
    if isinstance(body, str) and "=" in body and not body.lstrip().startswith(("{", "[")):
        return dict(parse_qsl(body, keep_blank_values=True))
    return {}


# -- the call -------------------------------------------------------------------------------------


@dataclass
class Call:
    """One journal entry as replay sees it. Built by the engine; connectors only read it.

    `host` is lowercase without port and `path` is normalised the way the capture-time registry
    normalises it (percent-decoded except %2F, dot segments removed); `origin` is the request's
    own `scheme://host[:port]` for building calls back to the same server.
    """

    pos: int  # 1-based line of the session file (equals seq for every trusted entry)
    seq: int | None  # what the entry says
    ts: str
    connector: str
    effect: str
    capture: str
    principal: str
    trusted: bool
    method: str
    url: str
    origin: str
    host: str
    path: str
    query: dict[str, list[str]]
    raw_headers: list  # request headers as recorded: [[name, value], ...]
    request_body: object
    status: int | None
    response_body: object
    error: str | None = None
    tool: str | None = None  # MCP tools/call: the tool name
    tool_args: dict | None = None  # MCP tools/call: its arguments
    tool_result: object = None  # MCP tools/call: the result's JSON payload, when there is one
    tool_error: bool = False  # MCP tools/call: the result said isError, or JSON-RPC answered an error
    memo: dict = field(default_factory=dict)  # per session and connector scratch (e.g. channel names)
    op: str | None = None  # the API method, when a connector names it (shown when no resource is found)
    notes: list[str] = field(default_factory=list)  # what a connector wants said about this call

    @cached_property
    def headers(self) -> dict[str, str]:
        """Request headers with lowercased names (repeated ones joined with ", ")."""
        return lower_headers((h[0], h[1]) for h in self.raw_headers if isinstance(h, list) and len(h) == 2)

    def q(self, name: str) -> str | None:
        """The first value of a query parameter."""
        values = self.query.get(name)
        return values[0] if values else None

    @property
    def args(self) -> dict:
        """Request arguments: the JSON object body, a parsed form body, or the MCP tool arguments."""
        if self.tool is not None:
            return self.tool_args or {}
        return form_or_json(self.request_body)

    @property
    def result(self) -> object:
        """The response as a JSON value (the MCP tool's JSON payload for tool calls), or None."""
        if self.tool is not None:
            return self.tool_result
        return json_value(self.response_body)

    @property
    def result_dict(self) -> dict:
        return as_dict(self.result)

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300 and not self.tool_error


# -- what a connector finds in a call ---------------------------------------------------------------


Key = tuple[str, ...]


@dataclass
class Touch:
    """One resource a call read or changed.

    `key` is (connector, kind, id parts...), all strings; it names the resource across the session.
    `state` holds the response-derived fields to merge into the view (top-level, field by field);
    `intended` what the request asked those fields to become (for the intended/actual comparison);
    `differences` a connector's own comparison (None: the engine compares `intended` with `state`).
    `data` carries connector-private facts `invert` needs (request arguments, query parameters).
    """

    key: Key
    role: str  # READ, WRITE or SIDE
    op: str  # the API method, e.g. "messages.modify"
    state: dict | None = None
    intended: dict | None = None
    differences: list | None = None
    lifecycle: str | None = None
    parent: Key | None = None
    title: str | None = None
    data: dict = field(default_factory=dict)
    handler: str = ""  # set by the engine: NAME of the module that produced the touch

    @property
    def connector(self) -> str:
        return self.key[0]

    @property
    def kind(self) -> str:
        return self.key[1]


@dataclass(frozen=True)
class Request:
    """A call a revert plan proposes (never executed). `body` is a JSON value or None."""

    method: str
    url: str
    body: object = None

    def as_dict(self) -> dict:
        return {"method": self.method, "url": self.url, "body": self.body}


@dataclass
class Write:
    """What `invert` gets: the write, the touch, and the state before it (None: never observed)."""

    call: Call
    touch: Touch
    before: dict | None
    before_seqs: list[int]


@dataclass
class Inverse:
    """How to undo one write touch, or why it cannot be undone.

    revertible: `call` restores the captured before-state (within what the API allows).
    approximate: `call` is a best-effort compensation, not an exact inverse.
    blind: None lets the engine decide (no earlier entry observed the resource and the write did not
    create it); a connector sets True when the state it saw lacks what the inverse needs.
    """

    call: Request | None
    revertible: bool
    approximate: bool = False
    reason: str = ""
    blind: bool | None = None


def exact(call: Request, reason: str) -> Inverse:
    return Inverse(call, True, False, reason)


def approx(call: Request | None, reason: str, blind: bool | None = None) -> Inverse:
    return Inverse(call, False, call is not None, reason, blind)


def irreversible(reason: str, compensation: Request | None = None) -> Inverse:
    return Inverse(compensation, False, compensation is not None, "irreversible: " + reason)


def no_inverse(reason: str, blind: bool | None = None) -> Inverse:
    return Inverse(None, False, False, reason, blind)


# -- helpers for connectors -------------------------------------------------------------------------


def url(origin: str, *segments: str, query: dict | None = None) -> str:
    """`origin` + "/" + percent-encoded segments (a segment may hold "/" only if already encoded)."""
    path = "/".join(quote(s, safe=_SEGMENT_SAFE) for s in segments)
    out = f"{origin}/{path}"
    if query:
        out += "?" + urlencode(query)
    return out


def changed_back(fields: dict, before: dict, absent: object = None) -> dict:
    """For each key a PATCH set, the before value (`absent` when the before-state lacks it)."""
    return {k: before.get(k, absent) for k in fields}


def diff(intended: dict, actual: dict) -> list[dict]:
    """Every field where what was asked differs from what the platform answered.

    Objects are compared field by field; lists and scalars as wholes (for lists, the items asked
    for but missing and the items present but not asked for are listed). A field the response does
    not hold is reported as unconfirmed: partial responses are common, so absence is not a change.
    """
    out: list[dict] = []
    for k in sorted(intended):
        _walk(out, k, k, intended[k], actual)
    return out


def _walk(out: list[dict], path: str, name: str, want: object, holder: dict) -> None:
    """One field of `diff` (a module function, not a closure: a recursive closure is a reference cycle,
    which replay's fold, running with the cyclic collector paused, would never free)."""
    if name not in holder:
        out.append({"field": path, "kind": "unconfirmed", "intended": want, "actual": None,
                    "note": "not in the response"})
        return
    got = holder[name]
    if isinstance(want, dict) and isinstance(got, dict) and not is_ref(want):
        for k in sorted(want):
            _walk(out, f"{path}.{k}", k, want[k], got)
        return
    if want == got:
        return
    d = {"field": path, "kind": "differs", "intended": want, "actual": got}
    if isinstance(want, list) and isinstance(got, list):
        d["missing"] = [x for x in want if x not in got]
        d["extra"] = [x for x in got if x not in want]
    out.append(d)


def first(*values: object) -> object:
    for v in values:
        if v is not None and v != "":
            return v
    return None
