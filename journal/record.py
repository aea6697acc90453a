"""The Python API every capture point calls: redact, encode bodies, build the entry, append it.

The broker (mitmproxy addon), the MCP shim and agents reporting their own calls all go through
`Recorder.record` with one `journal.call.Call`, so redaction, spilling and chaining happen one way only.

    from journal.record import Recorder
    rec = Recorder("./vault")
    rec.record(call)   # a `journal.call.Call`, what every capture point builds
    rec.report_call(session="s1", agent="my-agent", principal="me@example.com",
                    method="GET", url="https://gmail.googleapis.com/gmail/v1/users/me/labels",
                    status=200, response_headers=[("Content-Type", "application/json")],
                    response_body=b'{"labels": []}')
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, cast

from journal.bodies import JSON_PARSE_LIMIT, SPILL_THRESHOLD, decoded_prefix, record_body, spill_large_strings
from journal.call import Body, Call, Identity, JsonValue, Prepared, Request, Response, WebSocketPayload
from journal.canonical import CanonicalError, canonical_bytes, check_reads_back
from journal.connectors import Registry, effect_of_method, lower_headers
from journal.entry import ContractError, format_ts
from journal.fingerprint_key import fingerprint_key
from journal.redact import (
    is_token_exchange,
    redact_headers,
    redact_json_value,
    redact_url,
)
from journal.store.url import open_blob_sink, open_writer
from journal.writer import JournalWriter

if TYPE_CHECKING:
    from journal.checkpoint.autoseal import AutosealConfig
    from journal.store.interface import EntryWriter

log = logging.getLogger("journal.record")

Headers = Iterable[tuple[str, str]] | Iterable[list[str]]
ANSWERED_BY = ("upstream", "capture", "none")
EFFECT_BASES = ("rule", "annotations", "override", "default")


def wire_text(raw: bytes) -> str:
    """Bytes from the wire as text: UTF-8 when valid, else Latin-1 (lossless either way). How header
    names and values are recorded (docs/contract.md, "Wire text")."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def wire_field(value: str | bytes) -> tuple[str, bool]:
    """(text, read_as_latin1) for a method, URL or header field, given as raw bytes or as text.

    Text may carry raw bytes as lone surrogates (mitmproxy decodes the request line with
    `surrogateescape`); those bytes are read back. Valid UTF-8 is kept as it is; anything else is
    read as Latin-1 and flagged, so the message's `latin1` list names it and a reader can turn the
    text back into the exact bytes (`text.encode("latin-1")`).
    """
    if isinstance(value, str):
        if value.isascii():
            return value, False
        try:
            value.encode("utf-8")
            return value, False
        except UnicodeEncodeError:
            text = value
            try:
                value = text.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:
                value = text.encode("utf-8", "surrogatepass")
    elif not isinstance(value, bytes | bytearray | memoryview):
        raise TypeError(f"a wire field must be bytes or str, not {type(value).__name__}")
    raw = bytes(value)
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        return raw.decode("latin-1"), True


def text_pairs(fields: Iterable) -> list[tuple[str, str]]:
    """Header fields as text pairs, whether given as text or as raw bytes (decoded by `wire_text`)."""
    return text_pairs_marked(fields)[0]


def _all_utf8(fields: list) -> list[tuple[str, str]] | None:
    """The usual raw case, every field bytes and UTF-8: one decode for the lot (NUL never occurs in a
    header; if it did, the count check sends the fields the slow way). None otherwise."""
    try:
        flat = b"\0".join([b for kv in fields for b in kv]).decode("utf-8").split("\0")
    except (TypeError, UnicodeDecodeError):  # text among them, or not UTF-8
        return None
    if len(flat) != 2 * len(fields):
        return None
    return list(zip(flat[::2], flat[1::2], strict=True))


@dataclass(frozen=True)
class HeaderText:
    """Header fields already decoded by `decode_headers`: a caller that needs them as text before
    `Recorder.prepare_request` does (the recording service, to classify the call) passes this in
    their place, so they are decoded once per call, not twice."""

    pairs: list[tuple[str, str]]
    latin1: list[str]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self.pairs)


def decode_headers(fields: Iterable) -> HeaderText:
    """`text_pairs_marked` of `fields`, kept for a later `prepare_request` (see `HeaderText`)."""
    return HeaderText(*text_pairs_marked(fields))


def text_pairs_marked(fields: Iterable) -> tuple[list[tuple[str, str]], list[str]]:
    """As `text_pairs`, with the JSON pointers (`/headers/I/0` name, `/headers/I/1` value) of the
    fields that were not UTF-8 and are read as Latin-1 (see `wire_field`)."""
    if isinstance(fields, HeaderText):
        return fields.pairs, fields.latin1
    fields = list(fields)
    if not fields:
        return [], []
    fast = _all_utf8(fields)
    if fast is not None:
        return fast, []
    pairs: list[tuple[str, str]] = []
    latin1: list[str] = []
    for i, kv in enumerate(fields):
        if len(kv) != 2:
            raise ValueError(f"header field {i} is not a (name, value) pair")
        k, k_l1 = wire_field(kv[0])
        v, v_l1 = wire_field(kv[1])
        if k_l1:
            latin1.append(f"/headers/{i}/0")
        if v_l1:
            latin1.append(f"/headers/{i}/1")
        pairs.append((k, v))
    return pairs, latin1


_CRED_HEADERS = ("authorization", "x-goog-api-key", "x-api-key", "api-key", "private-token", "x-auth-token")


def principal_fingerprint(headers: list[tuple[str, str]], url: str) -> str:
    """A stable name for the account a call acted as, derived from its credential but not revealing it.

    HMAC-SHA-256 of the credential under the installation's key (journal/fingerprint_key.py, kept
    outside the vault), truncated to 16 hex: equal for one credential across sessions of one
    installation, so calls made as different accounts stay apart, and not testable by guessing for
    whoever holds only the vault (a password in a Basic credential is not high-entropy).
    """
    cred = None
    for k, v in headers:
        lk = k.lower()
        if lk in _CRED_HEADERS and v:
            cred = v.split(" ", 1)[-1] if lk == "authorization" else v
            break
    if cred is None and "token=" in url:
        from urllib.parse import parse_qsl, urlsplit

        for k, v in parse_qsl(urlsplit(url).query):
            if k in ("token", "access_token", "key") and v:
                cred = v
                break
    if cred is None:
        return "anonymous"
    digest = hmac.new(fingerprint_key(), b"connector-broker principal\0" + cred.encode(), hashlib.sha256)
    return "fp:" + digest.hexdigest()[:16]


def session_fingerprint(value: str) -> str:
    """An `Mcp-Session-Id` as an entry keeps it: a keyed fingerprint (as `principal_fingerprint`, under its
    own label). The id is a capability for the session, so it is never kept; the fingerprint is equal for
    every call of one MCP session, so readers (the OTel export's `mcp.session.id`) can group them."""
    digest = hmac.new(fingerprint_key(), b"connector-broker mcp-session\0" + value.encode(), hashlib.sha256)
    return "fp:" + digest.hexdigest()[:16]


def _recorded_headers(headers: list[tuple[str, str]]) -> list[list[str]]:
    """The headers as an entry keeps them: redacted (journal/redact.py), an MCP session id fingerprinted."""
    out = redact_headers(headers)
    for i, (name, value) in enumerate(headers):
        if value and len(name) == 14 and name.lower() == "mcp-session-id":
            out[i][1] = session_fingerprint(value)
    return out


def _content_headers(headers: list[tuple[str, str]]) -> tuple[str | None, str | None]:
    """(Content-Type, Content-Encoding) as `header_value` finds them (the first of each), in one pass."""
    ctype = coding = None
    for k, v in headers:
        if len(k) == 12 and ctype is None and k.lower() == "content-type":
            ctype = v
        elif len(k) == 16 and coding is None and k.lower() == "content-encoding":
            coding = v
    return ctype, coding


@dataclass
class RequestHalf:
    """The request's part of an entry, redacted and encoded, kept while the call is upstream."""

    fields: dict
    request_extra: dict

    @classmethod
    def of(cls, fields: dict, call: Call) -> RequestHalf:
        """The half of `call` whose request fields are `fields`; its further request keys are the call's."""
        return cls(fields, dict(call.request.extra or {}))


class Recorder:
    """One per process and vault; thread-safe (the writer does the locking)."""

    def __init__(
        self, vault: str | os.PathLike | JournalWriter, *, spill_threshold: int = SPILL_THRESHOLD,
        registry: Registry | None = None, durable: bool = True, autoseal: AutosealConfig | None = None,
        blobs: str | None = None,
    ) -> None:
        # `vault`: a directory, a store URL (postgresql://..., journal/store/) or a writer already open
        self.writer: EntryWriter = (
            cast("EntryWriter", vault) if hasattr(vault, "append_many") else open_writer(vault, durable=durable)
        )
        # `blobs`: where spilled bytes go instead of the store's own blobs (s3://BUCKET/PREFIX); default
        # BROKER_BLOBS, which `broker run --blobs` sets, so the recording service and workers it starts use it too
        blobs_url = blobs if blobs is not None else os.environ.get("BROKER_BLOBS", "")
        if blobs_url:
            self.writer.blobs = open_blob_sink(blobs_url)
        self.autosealer = None  # checkpoints as entries are recorded (journal/checkpoint/autoseal.py)
        if autoseal is not None:
            from journal.checkpoint.autoseal import Autosealer

            home = autoseal.home(self.writer.checkpoint_vault())
            self.autosealer = Autosealer(home, autoseal, source=self.writer)
            self.writer.on_durable = self.autosealer.appended
        self.blobs = self.writer.blobs
        self.spill_threshold = spill_threshold
        self._registry = registry

    @property
    def registry(self) -> Registry:
        if self._registry is None:
            self._registry = Registry.builtin()
        return self._registry

    def note_gap(self, session: str, url: str, what: str, n: int = 1) -> None:
        """Declared coverage (docs/checkpoints.md): a call to `url` left unrecorded (`what`: passed,
        token, refused); kept only when checkpoints are written."""
        if self.autosealer is not None:
            from urllib.parse import urlsplit

            self.autosealer.note_gap(session, urlsplit(url).hostname or url, what, n)

    def check_session(self, session: str) -> None:
        """JournalError (or OSError) when an entry for `session` could not be written now: the writer's own
        check, and the blob sink's when it is remote (a bucket that is down), before a call goes upstream."""
        self.writer.check_session(session)
        reachable = getattr(self.writer.blobs, "check_reachable", None)
        if reachable is not None:
            reachable()

    def close(self) -> None:
        self.writer.close()
        if self.autosealer is not None:
            self.autosealer.close()  # the clean stop's checkpoints, after the last append

    # -- the general entry point ------------------------------------------------------------

    def record(self, call: Call) -> dict | None:
        """Append one call's entry; returns it once durable, or None when the call is a token
        exchange (docs/contract.md: those leave no entry and no blob)."""
        fields = self.prepare(call)
        return None if fields is None else self.writer.append(fields)

    def prepare(self, call: Call) -> dict | None:
        """The entry fields for one call, redacted and encoded (large values already spilled to
        blobs), ready for `writer.append`; None for a token exchange. Split from `record` so a
        capture point can do this CPU work where it suits it and only wait for the durable append."""
        half = self.prepare_request(call)
        return None if half is None else self.prepare_response(half, call)

    def classify(
        self, method: str, url: str, headers: list[tuple[str, str]], body: bytes | None, connector: str = "unknown",
    ) -> tuple[str, str, str]:
        """(connector, effect, effect_basis) of a call that brings no effect of its own: the connector
        rules when one knows the call (basis "rule"; an "unknown" connector is then named), else the
        method's meaning, override headers included (basis "default"). The one implementation every
        capture point's calls go through. `body`: the raw request body (decoded here for the rules)."""
        plain = None
        if body:
            plain = decoded_prefix(body, _content_headers(headers)[1], JSON_PARSE_LIMIT)
        cls = self.registry.classify(method, url, headers, plain)
        if cls is not None:
            return (cls.connector if connector in ("unknown", "") else connector), cls.effect, "rule"
        effect, _ = effect_of_method(method, lower_headers(headers))
        return connector, effect, "default"

    def _message_effect(self, method: str, url: str, websocket: dict, body: Body, connector: str,
                        ) -> tuple[str, str, str]:
        """(connector, effect, effect_basis) of a WebSocket message (docs/contract.md, "WebSocket
        messages"): what the agent received, and a close, are reads; what it sent is classified by the
        connector rules with the message as the body (a Slack RTM message that posts is a write), and
        is a write when no rule knows it. A close, ping or pong carries no application data: a read."""
        if websocket.get("direction") != "client_to_server" or websocket.get("kind") in ("close", "ping", "pong"):
            return connector, "read", "rule"
        data = body.data if isinstance(body, WebSocketPayload) else body if isinstance(body, bytes) else None
        return self.classify(method, url, [], data, connector)

    def prepare_request(self, call: Call) -> RequestHalf | None:
        """The request's half of `prepare`, from the call's identity and request part, for a capture
        point that has the request before the response (the broker, while the call is upstream);
        None for a token exchange. A call without an effect is classified here (`classify`).

        Whether a call is a token exchange is decided from the request alone (its URL, or an OAuth
        grant in its body), never from what the response looks like: a call that merely returns a
        credential (a downloaded token file) is recorded, with the credential redacted."""
        req, who = call.request, call.identity
        method, method_l1 = wire_field(req.method)
        url, url_l1 = wire_field(req.url)
        req_headers, latin1 = text_pairs_marked(req.headers)
        request_body = req.body
        raw_req = request_body if isinstance(request_body, bytes) else None
        if is_token_exchange(method, url, req_headers, raw_req):
            self.note_gap(who.session, url, "token")
            return None
        connector, effect, effect_basis = call.connector, call.effect, call.effect_basis or "rule"
        websocket = (req.extra or {}).get("websocket")
        if effect is None and isinstance(websocket, dict):
            connector, effect, effect_basis = self._message_effect(method, url, websocket, request_body, connector)
        elif effect is None:
            connector, effect, effect_basis = self.classify(method, url, req_headers, raw_req, connector)
        elif effect_basis not in EFFECT_BASES:
            raise ContractError(f"effect_basis must be one of {', '.join(EFFECT_BASES)}, not {effect_basis!r}")
        request: dict[str, object] = {"method": method, "url": redact_url(url),
                                      "headers": _recorded_headers(req_headers)}
        request["body"], extra = self._body(request_body, req_headers)
        request.update(extra)
        if req.trailers:
            request["trailers"] = redact_headers(text_pairs(req.trailers))
        request["effect_basis"] = effect_basis
        marks = (["/method"] if method_l1 else []) + (["/url"] if url_l1 else []) + latin1
        if marks:
            request["latin1"] = marks
        fields = {
            "session": who.session, "agent": who.agent,
            "principal": who.principal or principal_fingerprint(req_headers, url), "connector": connector,
            "capture": call.capture, "prompt_ref": call.prompt_ref, "effect": effect, "request": request,
        }
        half = RequestHalf.of(fields, call)
        if isinstance(websocket, dict) and isinstance(websocket.get("close_reason"), str):
            # a close frame's reason is the peer's text like a message's (RFC 6455 lets it carry 123 bytes)
            reason = redact_json_value(websocket["close_reason"])
            half.request_extra["websocket"] = {**websocket, "close_reason": reason}
        return half

    def prepare_response(self, half: RequestHalf, call: Call) -> dict:
        """The entry fields from a request half and the call's response part (with its `ts` and
        `mcp`); a call without a response part is recorded as having had none."""
        resp = call.response or Response(error="no response")
        resp_headers, latin1 = text_pairs_marked(resp.headers)
        request = dict(half.fields["request"])
        request.update(half.request_extra)
        status, error = resp.status, resp.error
        response: dict = {"status": status, "headers": _recorded_headers(resp_headers)}
        response["body"], extra = self._body(resp.body, resp_headers)
        response.update(extra)
        response.update(resp.extra or {})
        if resp.trailers:
            response["trailers"] = redact_headers(text_pairs(resp.trailers))
        if latin1:
            response["latin1"] = latin1
        if error is not None:
            response["error"] = error
        elif status is None:
            response["error"] = "no response"
        answered_by = resp.answered_by
        if answered_by is None:
            answered_by = "upstream" if status is not None and error is None else "none"
        elif answered_by not in ANSWERED_BY:
            raise ContractError(f"answered_by must be one of {', '.join(ANSWERED_BY)}, not {answered_by!r}")
        if answered_by != "upstream" and "error" not in response:
            raise ContractError(f"a response answered by {answered_by!r} must say why in 'error'")
        response["answered_by"] = answered_by
        mcp: object = call.mcp
        if mcp is not None:
            mcp = self.json_value(mcp)
        ts = call.ts
        if isinstance(ts, int | float) and not isinstance(ts, bool):
            ts = datetime.fromtimestamp(ts, UTC)
        f = half.fields
        return {
            "ts": ts if isinstance(ts, str) else format_ts(ts),
            "session": f["session"],
            "agent": f["agent"],
            "principal": f["principal"],
            "connector": f["connector"],
            "capture": f["capture"],
            "prompt_ref": f["prompt_ref"],
            "effect": f["effect"],
            "mcp": mcp,
            "request": request,
            "response": response,
        }

    def prepare_unrecorded(self, call: Call, why: str) -> dict | None:
        """Fields for an entry that says `call` could not be recorded (`why`), built from what of it
        can still be read safely (identity, method, URL, header fields; no bodies); None when not
        even that can be built. The one builder of such entries, for every capture point.

        Under `fail_closed` the client gets 502 from the capture point, which is what the entry says;
        otherwise the upstream's answer passed and the entry says that, with the error."""
        who = call.identity
        if not (isinstance(who.session, str) and isinstance(who.agent, str)):
            return None
        try:
            resp = call.response
            status = resp.status if resp is not None else None
            upstream_status = status if isinstance(status, int) and 100 <= status <= 599 else None
            error = f"the call could not be recorded ({why})"
            if call.fail_closed:
                error = f"response withheld: {error}"
                if upstream_status is not None:
                    error += f"; the upstream answered {upstream_status}"
            if call.fail_closed or upstream_status is None:
                status_out, answered = (502, "capture") if call.fail_closed else (None, "none")
            else:
                status_out, answered = upstream_status, "upstream"
            try:
                req_headers = text_pairs(call.request.headers or ())
            except Exception:  # noqa: BLE001 - unreadable fields: record none rather than nothing at all
                req_headers = []
            decided = call.effect in ("read", "write")
            ts = call.ts
            if not isinstance(ts, int | float | str | datetime) or isinstance(ts, bool):
                ts = None
            noted = Call(
                Identity(who.session, who.agent, who.principal if isinstance(who.principal, str) and who.principal
                         else "anonymous"),
                call.connector if isinstance(call.connector, str) and call.connector else "unknown",
                Request(_safe_wire(call.request.method) or "?", _safe_wire(call.request.url), req_headers),
                Response(status_out, (), None, None, {"error": error}, answered),
                capture=call.capture if call.capture in ("broker", "gateway", "agent") else "broker",
                effect=call.effect if decided else "write",
                effect_basis=(call.effect_basis or "rule") if decided else "default",
                ts=ts if ts is not None else datetime.now(UTC),
            )
            return self.prepare(noted)
        except Exception:  # noqa: BLE001 - the caller then reports the failure without an entry
            log.exception("no entry could be built for a call that failed to record")
            return None

    def _body(self, body: Body, headers: list[tuple[str, str]]) -> tuple[object, dict]:
        if body is None or isinstance(body, bytes):
            if not body:
                return None, {}  # what record_body gives, without looking up the headers
            ctype, coding = _content_headers(headers)
            return record_body(body, ctype, coding, self.blobs, self.spill_threshold)
        if isinstance(body, Prepared):
            return body.value, dict(body.extra)
        if isinstance(body, JsonValue):
            return self.json_value(body.value), {}
        if isinstance(body, WebSocketPayload):
            if not body.data:
                return None, {}
            ctype = "application/json" if body.text else "application/octet-stream"
            return record_body(body.data, ctype, None, self.blobs, self.spill_threshold)
        raise TypeError(f"unsupported body type {type(body).__name__}")

    def json_value(self, value: object) -> object:
        """A JSON value as an entry holds it: redacted, checked to read back the same, large strings
        spilled to blobs (MCP params, results and the `mcp` field; `JsonValue` bodies)."""
        value = redact_json_value(value)
        try:
            size = len(canonical_bytes(value))
            check_reads_back(value)
        except CanonicalError as exc:
            raise ContractError(f"JSON value cannot be recorded: {exc}") from None
        if size <= self.spill_threshold:  # no string's UTF-8 is longer than the whole: none to spill
            return value
        return spill_large_strings(value, self.blobs, self.spill_threshold)

    # -- for agents reporting their own calls -----------------------------------------------

    def report_call(
        self, *, session: str, agent: str, principal: str, method: str, url: str,
        status: int | None, request_headers: Headers = (), request_body: bytes | None = None,
        response_headers: Headers = (), response_body: bytes | None = None, error: str | None = None,
        connector: str | None = None, prompt_ref: str | None = None, ts: datetime | str | None = None,
        answered_by: str | None = None,
    ) -> dict | None:
        """Record a call the agent made itself (capture "agent", the weakest evidence grade).

        The effect comes from the connector rules, never from the caller; a URL no connector
        knows is recorded under `connector` (required then) with the method's effect (`classify`).
        """
        req_headers = text_pairs(request_headers)
        if self.registry.classify(method, url, req_headers, None) is None and not connector:
            raise ContractError(f"no connector recognises {url!r}; pass connector=")
        return self.record(Call.make(
            session=session, agent=agent, principal=principal, connector=connector or "unknown", capture="agent",
            method=method.upper(), url=url, request_headers=req_headers,
            request_body=request_body, status=status, response_headers=response_headers,
            response_body=response_body, error=error, prompt_ref=prompt_ref, ts=ts, answered_by=answered_by,
        ))


def _safe_wire(value: object) -> str:
    """A method or URL as text, whatever it holds (for the entry of a call that could not be recorded)."""
    if isinstance(value, str | bytes):
        return wire_field(value)[0]
    return "" if value is None else repr(value)
