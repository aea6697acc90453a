"""From MCP calls to journal entries (capture "gateway"), through `journal.record.Recorder`.

One entry per `tools/call` and per `resources/read` the client sends:

- `mcp`: the JSON-RPC request exactly as the client sent it (parsed strictly); a request line
  that is not strict JSON is kept as `{"unparsed": "<the line as text>"}`;
- `request`: `method` = the JSON-RPC method, `url` = the upstream (HTTP URL, or
  `stdio:<command> <args...>`), `headers` = [] on stdio or the client's HTTP request headers
  (redacted by the Recorder), `body` = the params;
- `response`: `status` = the HTTP status (HTTP upstreams) or 200 when a JSON-RPC response came
  back on stdio, null when none did (then `error` says why); `headers` = the upstream's HTTP
  response headers or []; `body` = the JSON-RPC response object (result, error, isError alike).

Entries are written in a worker thread (`asyncio.to_thread`): the event loop keeps relaying other
traffic while one response waits for its entry.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shlex
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import PurePath

from broker.mcp.effects import EffectRules, ToolCatalog
from broker.mcp.messages import Message, server_name
from journal.entry import ContractError
from journal.record import JsonValue, Recorder
from journal.redact import REDACTED, contains_credential, redact_json_value
from journal.writer import JournalError

log = logging.getLogger("broker.mcp")

JOURNAL_ERROR_CODE = -32603
STDIO_STATUS = 200
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
    return bool(name) and flag.startswith("-") and redact_json_value({name: "x"}).get(name) == REDACTED


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


@dataclass
class PendingCall:
    """A recorded-kind request that has been forwarded and not yet answered."""

    request_id: object
    method: str
    message: Message
    raw: bytes
    effect: str
    rule: str
    url: str
    request_headers: list[tuple[str, str]] = field(default_factory=list)
    principal: str | None = None
    started: float = field(default_factory=time.monotonic)
    started_wall: float = field(default_factory=time.time)
    cancelled: bool = False
    closed: bool = False  # its entry is written (or being written): no second one
    broker_entries: int = 0  # --through-broker: HTTP calls of this tool call recorded by the broker
    session: str | None = None  # a shared gateway's per-agent session and agent (else the journal's identity)
    agent: str | None = None

    @property
    def tool(self) -> str | None:
        params = self.message.params
        name = params.get("name") if isinstance(params, dict) else None
        return name if isinstance(name, str) else None


class CallJournal:
    """Builds and writes the entries of one relay (one upstream)."""

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
        self.tracker = None  # --through-broker: an attribution.Attribution told when calls open and close

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

    def start(
        self, message: Message, raw: bytes, *, url: str | None = None,
        request_headers: list[tuple[str, str]] | None = None, principal: str | None = None,
    ) -> PendingCall:
        method = message.method or "?"
        decision = self.rules.decide(method, message.params, self.catalog)
        call = PendingCall(
            request_id=message.id, method=method, message=message, raw=raw, effect=decision.effect,
            rule=decision.rule, url=url or self.url, request_headers=list(request_headers or []), principal=principal,
        )
        if self.tracker is not None:
            self.tracker.started(call)
        return call

    async def finish(
        self, call: PendingCall, *, status: int | None, response: Message | None = None,
        response_text: str | None = None, response_headers: list[tuple[str, str]] | None = None,
        error: str | None = None,
    ) -> dict | None:
        """Write the call's entry (once). Raises JournalError/ContractError/OSError when it cannot."""
        if call.closed:
            return None
        call.closed = True
        received = datetime.now(UTC)
        if self.tracker is not None:
            self.tracker.finished(call)
        if self.skip_when_broker_recorded and call.broker_entries:
            self.skipped_for_broker += 1
            return None
        try:
            entry = await asyncio.to_thread(
                self._write, call, status, response, response_text, response_headers or [], error, received
            )
        except (JournalError, ContractError, OSError, ValueError):
            self.failures += 1
            raise
        self.recorded += 1
        return entry

    def _write(
        self, call: PendingCall, status: int | None, response: Message | None, response_text: str | None,
        response_headers: list[tuple[str, str]], error: str | None, received: datetime,
    ) -> dict | None:
        msg = call.message
        if msg.strict and isinstance(msg.value, dict):
            mcp: dict = msg.value
            params = msg.value.get("params")
            req_body = JsonValue(params) if params is not None else None
            request_extra = None
        else:
            text = call.raw.rstrip(b"\r\n").decode("utf-8", "replace")
            mcp = {"unparsed": text}
            req_body = JsonValue(text)
            request_extra = {"body_error": "the request line is not strict JSON; body and mcp hold it as text"}
        if response is not None and response.strict:
            resp_body = JsonValue(response.value)
            response_extra = None
        elif response is not None or response_text is not None:
            text = response_text if response_text is not None else ""
            resp_body = JsonValue(text)
            response_extra = {"body_error": "the response is not strict JSON; body holds it as text"}
        else:
            resp_body = None
            response_extra = None
        return self.recorder.record(
            session=call.session or self.identity.session, agent=call.agent or self.identity.agent,
            principal=call.principal or self.identity.principal, connector=self.connector, capture="gateway",
            effect=call.effect, method=call.method, url=call.url, request_headers=call.request_headers,
            request_body=req_body, status=status, response_headers=response_headers, response_body=resp_body,
            error=error, mcp=mcp, ts=received, request_extra=request_extra, response_extra=response_extra,
        )
