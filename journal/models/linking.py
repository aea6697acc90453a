"""`prompt_ref`: which model call asked for a connector call (docs/prompts.md, "prompt_ref").

Two rules, one per capture point:

- **Broker (HTTPS), by time.** Per session, the hash of the latest model-call entry is kept. A
  connector call whose request arrives after that entry was written and before the session's next
  model request is tied to it (`PromptLinks`). A model request clears it: calls made while the
  model is thinking, or before the first model call, have no `prompt_ref`.
- **Gateway (MCP), exactly.** A `tools/call` whose name and arguments equal a tool call a model
  response in the same session file asked for is tied to the latest such model entry
  (`ToolCallIndex`, which reads the session file as it grows: the shim needs no option for it).

State lives where entries are built: the recording service and the inline recorder each keep a
`PromptLinks` (`links_for(recorder)`); a fresh one (a restarted service) reads each session's file
once to find its latest model entry.
"""

from __future__ import annotations

import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from journal.canonical import canonical_bytes
from journal.models import APIS
from journal.reader import iter_line_blocks, iter_lines
from journal.redact import redact_json_value
from journal.vault import Vault

if TYPE_CHECKING:
    from journal.call import Call


def is_model_entry(entry: dict) -> bool:
    request = entry.get("request")
    return isinstance(request, dict) and "prompt_capture" in request


def model_api_of(entry: dict) -> str | None:
    request = entry.get("request") or {}
    api = request.get("model_api") or entry.get("connector")
    return api if api in APIS else None


def _latest_model_hash(vault: Vault, session: str) -> str | None:
    path = vault.session_path(session)
    if not path.exists():
        return None
    latest = None
    for line in iter_lines(path):
        if b'"prompt_capture"' not in line.data:
            continue
        try:
            entry = orjson.loads(line.data)
        except orjson.JSONDecodeError:
            continue
        if is_model_entry(entry):
            latest = entry.get("hash")
    return latest


class PromptLinks:
    """Per-session state for the time rule. Not thread-safe on its own: callers hold `lock`."""

    def __init__(self, vault: Vault) -> None:
        self.vault = vault
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
                self._current[session] = None
            elif call.prompt_ref is None:
                if session not in self._current:
                    self._current[session] = _latest_model_hash(self.vault, session)
                call.prompt_ref = self._current[session]

    def on_recorded(self, entry: object) -> None:
        """An appended entry: a model call becomes what the session's next calls follow."""
        if isinstance(entry, dict) and is_model_entry(entry):
            with self.lock:
                self._current[entry["session"]] = entry["hash"]


_links: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_links_lock = threading.Lock()


def links_for(recorder) -> PromptLinks:
    """The `PromptLinks` of a recorder (one per recorder, made on first use)."""
    with _links_lock:
        links = _links.get(recorder)
        if links is None:
            links = _links[recorder] = PromptLinks(recorder.writer.vault)
        return links


def _key(name: str, arguments: object) -> tuple[str, bytes]:
    try:
        return name, canonical_bytes(arguments if arguments is not None else {})
    except Exception:  # noqa: BLE001 - arguments that have no canonical form match nothing
        return name, b"\0unmatchable"


class ToolCallIndex:
    """The tool calls model responses in one session file asked for, read incrementally."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0  # where the next unread line starts
        self._by_key: dict[tuple[str, bytes], str] = {}
        self._by_suffix: dict[tuple[str, bytes], str] = {}
        self.lock = threading.Lock()

    def _refresh(self) -> None:
        """Index the whole lines written since the last call (a line still being written waits)."""
        try:
            for block in iter_line_blocks(self.path, self._offset):
                if block.torn:
                    break
                self._offset += sum(len(line) + 1 for line in block.lines)
                for i in block.lines_holding(b'"prompt_capture"'):
                    self._index(block.lines[i])
        except FileNotFoundError:
            return

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
            key = _key(name, redact_json_value(arguments if arguments is not None else {}))
            return self._by_key.get(key) or self._by_suffix.get(key)


_indexes: dict[tuple[str, str], ToolCallIndex] = {}


def tool_call_prompt_ref(vault: Vault, session: str, method: str, params: object) -> str | None:
    """`prompt_ref` for an MCP call: the exact rule for `tools/call`, None for anything else."""
    if method != "tools/call" or not isinstance(params, dict) or not isinstance(params.get("name"), str):
        return None
    key = (str(vault.root), session)
    with _links_lock:
        index = _indexes.get(key)
        if index is None:
            index = _indexes[key] = ToolCallIndex(vault.session_path(session))
    return index.find(params["name"], params.get("arguments"))
