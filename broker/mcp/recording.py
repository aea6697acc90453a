"""From MCP calls to journal entries (capture "gateway"), through `journal.record.Recorder`.

One entry per `tools/call`, `resources/read`, `prompts/get`, `tasks/result` and `tasks/cancel` the
client sends, per `tasks/get` whose answer ends the task (a poll that says "working" is not one), and
per `sampling/createMessage` and `elicitation/create` the server sends the client (then `mcp` is the
server's request, the response the client's answer, `answered_by` "upstream" when the client answered):

- `mcp`: the JSON-RPC request exactly as the client sent it (parsed strictly); a request line
  that is not strict JSON (an id beyond +-(2^53-1), invalid UTF-8, duplicate keys, not JSON at all)
  or is over `--max-message-mib` is kept as `{"unparsed": V}`, V being the line as the contract
  encodes a body: its text, `{"base64": ...}` when it is not UTF-8, or the blob ref of its bytes
  when large (`line_value`);
- `request`: `method` = the JSON-RPC method, `url` = the upstream (HTTP URL, or
  `stdio:<command> <args...>`), `headers` = [] on stdio or the client's HTTP request headers
  (redacted by the Recorder), `body` = the params;
- `response`: `status` = the HTTP status (HTTP upstreams) or 200 when a JSON-RPC response came
  back on stdio, null when none did (then `error` says why); `headers` = the upstream's HTTP
  response headers or []; `body` = the JSON-RPC response object (result, error, isError alike);
  `answered_by` = "upstream" when the server's answer came back, "capture" when the shim answered
  the client instead (its timeout), "none" when no answer came (server gone, client gone, cancelled).
- `request.effect_basis`: how the effect was decided (effects.py);
- `request.task_of`: on a `tasks/*` entry, `<session>#<seq>` of the entry of the task-based call that
  created the task (its effect and basis are that call's too);
- `response.error` = `CANCELLED_ANSWERED` when the client cancelled the call and the server answered
  all the same (many answer with a JSON-RPC error saying so); a cancelled call that got no answer says
  `CANCELLED` first, then what ended it (the grace ran out, the client left, the server died);
- `response.error` = `TOOL_ERROR` when the tool's result has `isError: true` (status and
  `answered_by` stay those of the answer: the server did answer).

Where the time goes (bench.mcp_bench --profile): the request's share of the entry (its redacted
`mcp` value and body, `prompt_ref`) is worked out as soon as the request has gone upstream
(`prepare_early`), while the server works; when the answer comes, only its own share is left (on the
event loop for answers up to `INLINE_LIMIT`), and the durable append runs in the journal writer's
flusher thread (`entry_writer.EntryWriter`, grouping the entries of concurrent answers into one
fdatasync): the event loop never waits on the disk and keeps relaying other traffic while one response
waits for its entry.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import PurePath
from typing import Protocol

from broker.mcp.effects import EffectRules, ToolCatalog
from broker.mcp.entry_writer import EntryWriter
from broker.mcp.messages import (
    RECORDED_METHODS,
    SERVER_RECORDED_METHODS,
    TASK_ENDED,
    TASK_METHODS,
    TOOL_ERROR,
    Message,
    created_task,
    is_tool_error,
    server_name,
    task_id,
    task_status,
)
from broker.mcp.oversize import OversizeLine
from journal.bodies import encode_body
from journal.call import Call, JsonValue, Prepared
from journal.entry import ContractError
from journal.models.linking import tool_call_prompt_ref
from journal.record import Recorder
from journal.redact import REDACTED, contains_credential, redact_body, redact_escaped_json, redact_json_value
from journal.writer import JournalError

log = logging.getLogger("broker.mcp")

JOURNAL_ERROR_CODE = -32603
STDIO_STATUS = 200
CANCELLED = "cancelled by the client (notifications/cancelled)"
"""How `response.error` begins for every call the client cancelled, whatever ended it after the cancel."""
CANCELLED_ANSWERED = f"{CANCELLED}; the server answered all the same"
"""`response.error` of a call the client cancelled whose answer still came (`answered_by` upstream)."""
LOOKUP_WAIT = 10.0
"""How long an entry waits for the shim's own `tools/list` (asked for a tool it had no listing for)."""
INLINE_LIMIT = 64 << 10
"""Calls whose request and answer are at most this many bytes have their entry's fields made on the
event loop (no thread hand-off before the write); larger ones in the worker thread, so redacting a
10 MiB result does not hold the loop."""
_CONNECTOR_BAD = re.compile(r"[^a-z0-9_.-]+")
_INTERPRETERS = frozenset({
    "python", "python3", "node", "npx", "uv", "uvx", "deno", "bun", "bunx", "sh", "bash", "pipx", "docker",
})  # fmt: skip
_FLAG_WITH_VALUE = re.compile(r"^--?(?P<name>[A-Za-z0-9_.-]+)(?P<eq>=)(?P<value>.*)$", re.S)


def connector_name(name: str | None) -> str | None:
    """A server's name as a connector name (lowercase, [a-z0-9_.-], starting alphanumeric)."""
    if not name:
        return None
    out = _CONNECTOR_BAD.sub("-", name.strip().lower()).strip("-._")
    return out[:64] or None


def fallback_connector(argv: list[str]) -> str:
    """A connector name from a command line, until the server names itself."""
    words = list(argv)
    while words:
        base = PurePath(words[0]).name
        stem = re.sub(r"\.(py|js|mjs|ts|exe)$", "", base)
        if re.sub(r"[\d.]+$", "", stem).lower() not in _INTERPRETERS:
            return connector_name(stem) or "mcp"
        words = words[1:]
        while words and words[0].startswith("-"):
            flag = words.pop(0)
            if flag == "-m" and words:
                return connector_name(words[0].rsplit(".", 1)[-1].replace("_", "-")) or "mcp"
    return "mcp"


def _is_secret_flag(flag: str) -> bool:
    name = flag.lstrip("-")
    # A credential name is one whose JSON string value the journal's redaction removes.
    redacted = redact_json_value({name: "x"})  # a dict in, a dict out
    return bool(name) and flag.startswith("-") and isinstance(redacted, dict) and redacted.get(name) == REDACTED


def redact_argv(argv: list[str]) -> list[str]:
    """Command line words with credentials replaced by `[never captured]`.

    A word holding a credential value pattern (journal.redact), the value of `--token=...` style
    flags with a credential name, and the word after such a flag (`--api-key VALUE`).
    """
    out: list[str] = []
    hide_next = False
    for word in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        m = _FLAG_WITH_VALUE.match(word)
        if m and _is_secret_flag("--" + m["name"]):
            out.append(word[: m.start("value")] + REDACTED)
        elif contains_credential(word):
            out.append(REDACTED)
        else:
            out.append(word)
            hide_next = _is_secret_flag(word) and "=" not in word
    return out


def stdio_url(argv: list[str]) -> str:
    """`stdio:` + the command line as a shell would quote it, credentials removed."""
    return "stdio:" + shlex.join(redact_argv(argv))


@dataclass
class Identity:
    session: str
    agent: str
    principal: str


_NOT_A_PART = object()


def _part(made: object, key: str, value: object) -> object:
    """`Recorder.json_value(value)` read off `made = Recorder.json_value(whole)`, where `value = whole[key]`.

    Redaction maps an object's values one by one (a key that is not a credential name keeps the
    redaction of its value), and the canonical-form check and spilling hold for every part of a
    value, so the part of the whole's result is the part's result. When the key did not come through
    as itself with a value of the same JSON type (it was a credential name), `_NOT_A_PART`: the caller
    makes the part on its own."""
    got = made.get(key, _NOT_A_PART) if isinstance(made, dict) else _NOT_A_PART
    if type(got) is not type(value) or not isinstance(value, dict | list):
        return _NOT_A_PART
    return got


@dataclass
class EarlyRequest:
    """The request's share of an entry, made while the call is upstream (`CallJournal.prepare_early`):
    exactly what `Recorder.prepare` makes of the same request at the end (`Recorder.json_value`: redacted,
    checked for the canonical form, large strings spilled), only sooner."""

    mcp: object  # the entry's `mcp`: the JSON-RPC request
    body: object  # `request.body`: its params (None when it has none)
    has_params: bool
    prompt_ref: str | None


@dataclass
class PendingCall:
    """A recorded-kind request that has been forwarded and not yet answered."""

    request_id: object
    method: str
    message: Message
    raw: bytes
    effect: str
    rule: str
    basis: str
    url: str
    request_headers: list[tuple[str, str]] = field(default_factory=list)
    principal: str | None = None
    started: float = field(default_factory=time.monotonic)
    started_wall: float = field(default_factory=time.time)
    cancelled: bool = False
    closed: bool = False  # its entry is written (or being written): no second one
    broker_entries: int = 0  # --through-broker: HTTP calls of this tool call recorded by the broker
    oversize: OversizeLine | None = None  # the request line was over the limit: its bytes are in a blob
    lookup: asyncio.Future | None = None  # the shim's own tools/list, asked because the tool was unknown
    session: str | None = None  # a shared gateway's per-agent session and agent (else the journal's identity)
    agent: str | None = None
    early: EarlyRequest | None = None  # the request's share of the entry, made while the call was upstream
    request_extra: dict | None = None  # further request keys (`task_of`)

    @property
    def tool(self) -> str | None:
        params = self.message.params
        name = params.get("name") if isinstance(params, dict) else None
        return name if isinstance(name, str) else None


@dataclass(frozen=True)
class TaskOrigin:
    """The call that created a task: its entry (`<session>#<seq>`), effect and effect basis."""

    entry: str
    effect: str
    basis: str


def _merged(first: dict | None, second: dict | None) -> dict | None:
    if not first:
        return second
    return {**first, **(second or {})}


class CallTracker(Protocol):
    """Told when each call opens and closes (broker/mcp/attribution.py's Attribution, under --through-broker)."""

    def started(self, call: PendingCall) -> None: ...

    def finished(self, call: PendingCall) -> None: ...


class CallJournal:
    """Builds and writes the entries of one relay (one upstream)."""

    record_tool_lists = False
    """Whether the client's `tools/list` answers (the tool definitions the model will read) are entries
    too, effect read, so `broker trajectory` can report definitions that change (docs/prompts.md).
    `broker mcp` turns it on unless --no-record-tools-list; embedders choose."""

    def records(self, method: str | None) -> bool:
        """Whether a client request of this method becomes an entry."""
        return method in RECORDED_METHODS or (self.record_tool_lists and method == "tools/list")

    @staticmethod
    def records_server_request(method: str | None) -> bool:
        """Whether a server-to-client request of this method becomes an entry (with the client's answer)."""
        return method in SERVER_RECORDED_METHODS

    def __init__(
        self, recorder: Recorder, identity: Identity, *, url: str, fallback: str, connector: str | None = None,
        rules: EffectRules | None = None, catalog: ToolCatalog | None = None,
    ) -> None:
        self.recorder = recorder
        self.identity = identity
        self.url = url
        self.fallback = fallback
        self.connector_override = connector
        self.server_connector: str | None = None
        self.rules = rules or EffectRules()
        self.catalog = catalog or ToolCatalog()
        self.recorded = 0
        self.failures = 0
        self.skipped_for_broker = 0
        self.skip_when_broker_recorded = False  # --through-broker: one entry per tool call + its HTTP calls
        self.tracker: CallTracker | None = None  # --through-broker: told when calls open and close
        # The relay's way to ask the server for its tools (its own tools/list); a future done when answered.
        self.ask_tools: Callable[[Message], asyncio.Future] | None = None
        self.lookup_wait = LOOKUP_WAIT
        self.entries = EntryWriter(recorder.writer)
        self.open_calls = 0  # started and not yet finished
        self.tasks: dict[str, TaskOrigin] = {}  # task id -> the call that created it (its entry, its effect)

    @property
    def connector(self) -> str:
        return self.connector_override or self.server_connector or self.fallback

    # -- what the server says -------------------------------------------------------------------

    def observe_response(self, request_method: str | None, response: Message) -> None:
        """Learn the server's name and its tools from its answers."""
        if not isinstance(response.value, dict):
            return
        result = response.value.get("result")
        name = connector_name(server_name(result))
        if name:
            self.server_connector = name
        if request_method == "tools/list" and isinstance(result, dict):
            self.catalog.update_from_list_result(result)

    # -- calls ----------------------------------------------------------------------------------

    def problem(self, session: str | None = None) -> str | None:
        """Why an entry for the session could not be written now, or None: checked before a recorded
        request goes upstream (as `broker run` does), so a journal that is down stops the call rather than
        only withholding its result after the server ran it."""
        try:
            self.recorder.check_session(session or self.identity.session)
        except (JournalError, OSError) as exc:
            return str(exc)
        return None

    def start(
        self, message: Message, raw: bytes, *, url: str | None = None,
        request_headers: list[tuple[str, str]] | None = None, principal: str | None = None,
        oversize: OversizeLine | None = None, ask_tools: Callable[[Message], asyncio.Future] | None = None,
    ) -> PendingCall:
        method = message.method or "?"
        decision = self.rules.decide(method, message.params, self.catalog)
        call = PendingCall(
            request_id=message.id, method=method, message=message, raw=raw, effect=decision.effect,
            rule=decision.rule, basis=decision.basis, url=url or self.url,
            request_headers=list(request_headers or []), principal=principal, oversize=oversize,
        )
        origin = self.tasks.get(task_id(message.params) or "") if method in TASK_METHODS else None
        if origin is not None:  # about a task: as much a read or write as the call that created it
            call.effect, call.rule, call.basis = origin.effect, "the task's call", origin.basis
            call.request_extra = {"task_of": origin.entry}
        tool = call.tool
        ask = ask_tools or self.ask_tools
        if (method == "tools/call" and tool is not None and ask is not None
                and not self.rules.overrides(tool) and tool not in self.catalog):
            call.lookup = ask(message)
        if self.tracker is not None and method not in SERVER_RECORDED_METHODS:  # asks cause no HTTP call
            self.tracker.started(call)
        self.open_calls += 1
        return call

    def prepare_early(self, call: PendingCall) -> None:
        """Make the request's share of the entry now (a relay calls this once the request has gone
        upstream, so the work overlaps the server's). Best effort: when it cannot be made here (a
        value the canonical form cannot hold, say), `finish` makes the entry as it always did."""
        msg = call.message
        if (call.early is not None or call.closed or call.oversize is not None or self.skip_when_broker_recorded
                or not msg.strict or not isinstance(msg.value, dict) or len(call.raw) > INLINE_LIMIT):
            return
        try:
            params = msg.value.get("params")
            mcp = self.recorder.json_value(msg.value)  # the one implementation, as `prepare` calls it
            body = None if params is None else _part(mcp, "params", params)
            if body is _NOT_A_PART:
                body = self.recorder.json_value(params)
            prompt_ref = self._prompt_ref(call)
        except Exception:  # noqa: BLE001 - the entry is made at the end instead, with its fallbacks
            return
        call.early = EarlyRequest(mcp, body, params is not None, prompt_ref)

    async def finish(
        self, call: PendingCall, *, status: int | None, response: Message | None = None,
        response_raw: bytes | None = None, response_line: OversizeLine | None = None,
        response_headers: list[tuple[str, str]] | None = None, error: str | None = None,
        answered_by: str | None = None, size: int = 0,
    ) -> dict | None:
        """Write the call's entry (once). Raises JournalError/ContractError/OSError when it cannot.

        `response_raw` is the answer's line as received (kept as text when it is not strict JSON);
        `response_line` an answer over the limit, already in the blob store; `size` the answer's
        bytes (where the entry's fields are made: `INLINE_LIMIT`)."""
        if call.closed:
            return None
        call.closed = True
        self.open_calls -= 1
        received = datetime.now(UTC)
        if self.tracker is not None:
            self.tracker.finished(call)
        polled = task_status(response) if call.method == "tasks/get" else None
        if polled is not None and polled not in TASK_ENDED:
            return None  # a poll while the task runs: nothing happened yet (docs/mcp.md)
        if call.cancelled and error is None:
            error, answered_by = CANCELLED_ANSWERED, answered_by or "upstream"  # the server did answer
        elif call.cancelled and error is not None and not error.startswith(CANCELLED):
            # The cancel was read first: the client leaving (or the server dying) before the grace ran
            # out does not make it any less a cancelled call (a race with --cancel-grace otherwise).
            error = f"{CANCELLED}; {error}"
        elif error is None and is_tool_error(response):
            error, answered_by = TOOL_ERROR, answered_by or "upstream"  # the server did answer
        if self.skip_when_broker_recorded and call.broker_entries:
            self.skipped_for_broker += 1
            return None
        if call.lookup is not None:
            await self._settle_effect(call)
        args = (call, status, response, response_raw, response_line, response_headers or [], error, answered_by,
                received)
        fields = None
        if (size <= INLINE_LIMIT and len(call.raw) <= INLINE_LIMIT and call.oversize is None
                and response_line is None):
            try:  # on the loop: the worker thread only appends
                fields = self._fields(*args, as_text=False)
            except (ValueError, TypeError, RecursionError):
                fields = None  # the worker's `_write` makes them, with its fallback to text
        write = functools.partial(self._write, *args)
        try:
            entry = await self.entries.submit(fields, write)  # never on the loop: its flusher fsyncs
        except (JournalError, ContractError, OSError, ValueError):
            self.failures += 1
            raise
        self.recorded += 1
        self._note_task(call, response, entry)
        return entry

    def _note_task(self, call: PendingCall, response: Message | None, entry: dict | None) -> None:
        """A task-based call's answer created a task: later tasks/* entries name this entry."""
        created = created_task(response) if call.method == "tools/call" else None
        if created is None or not isinstance(entry, dict):
            return
        self.tasks[created] = TaskOrigin(f"{entry.get('session')}#{entry.get('seq')}", call.effect, call.basis)

    async def _settle_effect(self, call: PendingCall) -> None:
        """The shim asked the server for its tools: decide again once it answered (or gave up)."""
        assert call.lookup is not None
        try:
            await asyncio.wait_for(asyncio.shield(call.lookup), self.lookup_wait)
        except TimeoutError:
            log.info("no tools/list answer within %s s; %s decided without it", self.lookup_wait, call.tool)
        decision = self.rules.decide(call.method, call.message.params, self.catalog)
        call.effect, call.rule, call.basis = decision.effect, decision.rule, decision.basis

    def line_value(self, raw: bytes) -> object:
        """A line the journal cannot hold as parsed JSON, as the contract encodes a body: redacted
        (JSON rules), then its text, or `{"base64": ...}` when it is not UTF-8, spilled when large."""
        data = redact_escaped_json(redact_body(raw.rstrip(b"\r\n"), "application/json"))  # as record_body
        return encode_body(data, "text/plain", self.recorder.blobs, self.recorder.spill_threshold)

    def _write(
        self, call: PendingCall, status: int | None, response: Message | None, response_raw: bytes | None,
        response_line: OversizeLine | None, response_headers: list[tuple[str, str]], error: str | None,
        answered_by: str | None, received: datetime, fields: dict | None = None,
    ) -> dict | None:
        """Append the entry (in the worker thread); `fields` when `finish` made them already."""
        try:
            if fields is None:
                fields = self._fields(call, status, response, response_raw, response_line, response_headers, error,
                                      answered_by, received, as_text=False)
            return None if fields is None else self.recorder.writer.append(fields)
        except (ValueError, TypeError, RecursionError) as exc:
            # The parsed values cannot go into an entry (nested too deeply for the canonical form or the
            # writer, say; the writer checks before it writes anything): keep the lines as text.
            log.info("recording %s as text: %s", call.method, exc)
        fields = self._fields(call, status, response, response_raw, response_line, response_headers, error,
                              answered_by, received, as_text=True)
        return None if fields is None else self.recorder.writer.append(fields)

    def _fields(
        self, call: PendingCall, status: int | None, response: Message | None, response_raw: bytes | None,
        response_line: OversizeLine | None, response_headers: list[tuple[str, str]], error: str | None,
        answered_by: str | None, received: datetime, *, as_text: bool,
    ) -> dict | None:
        msg = call.message
        request_extra = None
        early = call.early if not as_text else None
        mcp_made = None
        if call.oversize is not None:
            ref = call.oversize.commit()
            mcp: dict | None = {"unparsed": ref}
            req_body: Prepared | JsonValue | None = Prepared(ref)
            request_extra = {"body_error": f"the request line ({call.oversize.size} bytes) is over the shim's "
                                           "--max-message-mib: body and mcp.unparsed are the whole line, redacted, "
                                           "in the blob store"}
        elif early is not None:
            mcp, mcp_made = None, early.mcp  # `prepare` would make exactly this of msg.value
            req_body = Prepared(early.body) if early.has_params else None
        elif msg.strict and isinstance(msg.value, dict) and not as_text:
            mcp = msg.value
            params = msg.value.get("params")
            req_body = JsonValue(params) if params is not None else None
        else:
            value = self.line_value(call.raw)
            mcp = {"unparsed": value}
            req_body = Prepared(value)
            request_extra = {"body_error": "the request line is not JSON the journal can hold exactly; body and "
                                           "mcp.unparsed hold the line as received"}
        response_extra = None
        if response_line is not None:
            resp_body: Prepared | JsonValue | None = Prepared(response_line.commit())
            response_extra = {"body_error": f"the answer ({response_line.size} bytes) is over the shim's "
                                            "--max-message-mib: body is the whole line, redacted, in the blob store"}
        elif response is not None and response.strict and not as_text:
            resp_body = JsonValue(response.value)
        elif response is not None or response_raw is not None:
            resp_body = Prepared(self.line_value(response_raw or b""))
            response_extra = {"body_error": "the response is not JSON the journal can hold exactly; body holds "
                                            "the line as received"}
        else:
            resp_body = None
        prompt_ref = call.early.prompt_ref if call.early is not None else self._prompt_ref(call)
        fields = self.recorder.prepare(Call.make(
            session=call.session or self.identity.session, agent=call.agent or self.identity.agent,
            prompt_ref=prompt_ref,
            principal=call.principal or self.identity.principal, connector=self.connector, capture="gateway",
            effect=call.effect, method=call.method, url=call.url, request_headers=call.request_headers,
            request_body=req_body, status=status, response_headers=response_headers, response_body=resp_body,
            error=error, mcp=mcp, ts=received, request_extra=_merged(call.request_extra, request_extra),
            response_extra=response_extra,
            effect_basis=call.basis, answered_by=answered_by,
        ))
        if fields is not None and mcp_made is not None:
            fields["mcp"] = mcp_made
        return fields

    def _prompt_ref(self, call: PendingCall) -> str | None:
        msg = call.message
        return tool_call_prompt_ref(  # docs/prompts.md: asked for, exactly (any store: its writer reads it)
            self.recorder.writer, call.session or self.identity.session, call.method,
            msg.value.get("params") if msg.strict and isinstance(msg.value, dict) else None,
        )
