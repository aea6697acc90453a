"""`prompt_ref`: which model call asked for a connector call (docs/prompts.md, "prompt_ref").

Two rules, one per capture point:

- **Broker (HTTPS), by time.** Per session, the hash of the latest model-call entry is kept. A
  connector call whose request arrives after that entry was written and before the session's next
  model request is tied to it (`PromptLinks`). A model request clears it: calls made while the
  model is thinking, or before the first model call, have no `prompt_ref`. Over a model WebSocket
  (Realtime, Gemini Live: one entry per message) the message that asked for tool calls is the
  model call they follow; the session's other messages neither set nor clear the link.
- **Gateway (MCP), exactly.** A `tools/call` whose name and arguments equal a tool call a model
  response in the same session file asked for is tied to the latest such model entry
  (`ToolCallIndex`, which reads the session file as it grows: the shim needs no option for it).

State lives where entries are built: the recording service and the inline recorder each keep a
`PromptLinks` (`links_for(recorder)`); a fresh one (a restarted service) reads each session once to
find its latest model entry. Both rules read sessions through the store protocol's `lines_after`
(journal/store/interface.py), so they work the same on a file vault and on a database store.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

import orjson

from journal.canonical import canonical_bytes
from journal.models import APIS
from journal.redact import redact_json_value
from journal.store.interface import SessionLines

if TYPE_CHECKING:
    from journal.call import Call


def is_model_entry(entry: dict) -> bool:
    request = entry.get("request")
    return isinstance(request, dict) and "prompt_capture" in request


def asks_for_tools(entry: dict) -> bool:
    """A model-call entry a later connector call can follow: any model call, except a WebSocket message
    (docs/contract.md section 8) whose body asks for no tool call."""
    request = entry.get("request") or {}
    if not isinstance(request.get("websocket"), dict):
        return True
    api = model_api_of(entry)
    body = (entry.get("response") or {}).get("body")
    return api is not None and bool(APIS[api].tool_calls(body))


def model_api_of(entry: dict) -> str | None:
    request = entry.get("request") or {}
    api = request.get("model_api") or entry.get("connector")
    return api if api in APIS else None


def _latest_model_hash(source: SessionLines, session: str) -> str | None:
    latest = None
    for line in source.lines_after(session):
        if b'"prompt_capture"' not in line:
            continue
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if is_model_entry(entry) and asks_for_tools(entry):
            latest = entry.get("hash")
    return latest


class PromptLinks:
    """Per-session state for the time rule. Not thread-safe on its own: callers hold `lock`."""

    def __init__(self, source: SessionLines) -> None:
        self.source = source  # the sessions being recorded (a writer, or a store)
        self.lock = threading.Lock()
        self._current: dict[str, str | None] = {}

    def on_request(self, call: Call) -> None:
        """A call (`journal.call.Call`) as it arrives: a model request clears the session's link; a
        connector call gets `prompt_ref` (unless it already has one)."""
        if not call.prompts:
            return
        session = call.identity.session
        with self.lock:
            if call.model_api:
                if not isinstance((call.request.extra or {}).get("websocket"), dict):
                    self._current[session] = None
            elif call.prompt_ref is None:
                if session not in self._current:
                    self._current[session] = _latest_model_hash(self.source, session)
                call.prompt_ref = self._current[session]

    def on_recorded(self, entry: object) -> None:
        """An appended entry: a model call becomes what the session's next calls follow."""
        if isinstance(entry, dict) and is_model_entry(entry) and asks_for_tools(entry):
            with self.lock:
                self._current[entry["session"]] = entry["hash"]


_links: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_links_lock = threading.Lock()


def links_for(recorder) -> PromptLinks:
    """The `PromptLinks` of a recorder (one per recorder, made on first use)."""
    with _links_lock:
        links = _links.get(recorder)
        if links is None:
            links = _links[recorder] = PromptLinks(recorder.writer)
        return links


def _key(name: str, arguments: object) -> tuple[str, bytes]:
    try:
        return name, canonical_bytes(arguments if arguments is not None else {})
    except Exception:  # noqa: BLE001 - arguments that have no canonical form match nothing
        return name, b"\0unmatchable"


class ToolCallIndex:
    """The tool calls model responses in one session asked for, read incrementally."""

    def __init__(self, source: SessionLines, session: str) -> None:
        self.source, self.session = source, session
        self._seq = 0  # the last entry indexed
        self._by_key: dict[tuple[str, bytes], str] = {}
        self._by_suffix: dict[tuple[str, bytes], str] = {}
        self.lock = threading.Lock()

    def _refresh(self) -> None:
        """Index the entries written since the last call (a line still being written waits)."""
        for line in self.source.lines_after(self.session, self._seq):
            self._seq += 1
            if b'"prompt_capture"' in line:
                self._index(line)

    def _index(self, line: bytes) -> None:
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            return
        api = model_api_of(entry) if is_model_entry(entry) else None
        if api is None:
            return
        for call in APIS[api].tool_calls((entry.get("response") or {}).get("body")):
            key = _key(call.name, call.arguments)
            self._by_key[key] = entry["hash"]
            if "__" in call.name:  # clients prefix MCP tools: mcp__server__tool
                self._by_suffix[_key(call.name.rsplit("__", 1)[1], call.arguments)] = entry["hash"]

    def find(self, name: str, arguments: object) -> str | None:
        """The hash of the latest model entry that asked for this exact tool call, or None."""
        with self.lock:
            self._refresh()
            if not self._by_key and not self._by_suffix:  # no model entry asked for a tool: nothing to match
                return None
            key = _key(name, redact_json_value(arguments if arguments is not None else {}))
            return self._by_key.get(key) or self._by_suffix.get(key)


_indexes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # source -> {session: ToolCallIndex}


def tool_call_prompt_ref(source: SessionLines, session: str, method: str, params: object) -> str | None:
    """`prompt_ref` for an MCP call: the exact rule for `tools/call`, None for anything else. `source`: the
    sessions being recorded (the recorder's writer)."""
    if method != "tools/call" or not isinstance(params, dict) or not isinstance(params.get("name"), str):
        return None
    with _links_lock:
        per_session = _indexes.setdefault(source, {})
        index = per_session.get(session)
        if index is None:
            index = per_session[session] = ToolCallIndex(source, session)
    return index.find(params["name"], params.get("arguments"))
