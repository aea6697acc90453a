"""Whether a tool call reads or writes, decided from what the server said, never from the client.

Order (the first that decides wins; see docs/mcp.md), with the `effect_basis` each gives:

1. the override file (`--effects FILE`, TOML): the operator's word, exact names or globs ("override");
2. the server's annotations for the tool: `readOnlyHint: true` is a read; an annotations object
   without `readOnlyHint: true` is a write, the hint's default in the MCP specification ("annotations");
3. a tool the server lists without annotations, or does not list, or a call naming no tool: a
   write, as the MCP specification tells clients to assume ("default").

The shim asks the server itself (`tools/list`) before it decides for a tool it has no listing for
(relay.py), so a first call made before the client listed tools is decided by annotations too.
`resources/read`, `prompts/get` and the server's own requests to the client (`sampling/createMessage`,
`elicitation/create`, `roots/list`) are reads by the protocol's own definition ("rule"): they fetch what the model
or the user reads, or ask them; a tool call the model makes after it is an entry of its own. A
`tasks/*` request about a task has the effect of the call that created the task (recording.py).
The client cannot change any of this: what it sends in `tools/call` (the tool name) is only looked
up; annotations come from the server's own answers.

Override file:

    [tools]
    send_message = "write"
    "get_*" = "read"          # fnmatch globs, tried after exact names, in file order
"""

from __future__ import annotations

import fnmatch
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path

from journal.errors import BrokerError

READ, WRITE = "read", "write"
ANNOTATIONS, OVERRIDE, DEFAULT, RULE = "annotations", "override", "default", "rule"
"""The values of `request.effect_basis` (SPEC additions of 2026-12)."""


READ_METHODS = frozenset({
    "resources/read", "tools/list", "prompts/get", "sampling/createMessage", "elicitation/create", "roots/list",
})
"""Methods that are reads by the protocol's definition."""


class EffectsFileError(BrokerError, ValueError):
    """An override file that cannot be used; the message says why."""


@dataclass(frozen=True)
class Decision:
    effect: str
    rule: str  # short text naming the rule, for logs and docs
    basis: str  # request.effect_basis: annotations, override, default or rule


class ToolCatalog:
    """What the server said about its tools in its `tools/list` answers (thread-safe)."""

    def __init__(self) -> None:
        self._tools: dict[str, dict] = {}
        self._lock = threading.Lock()

    def update_from_list_result(self, result: object) -> int:
        """Take in a `tools/list` result; returns how many tools it listed."""
        tools = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(tools, list):
            return 0
        n = 0
        with self._lock:
            for tool in tools:
                if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                    self._tools[tool["name"]] = tool
                    n += 1
        return n

    def get(self, name: str) -> dict | None:
        with self._lock:
            return self._tools.get(name)

    def clear(self) -> None:
        """The server said its tools changed: what it listed before is no longer its word."""
        with self._lock:
            self._tools.clear()

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)


class EffectRules:
    def __init__(self, overrides: list[tuple[str, str]] | None = None) -> None:
        self.exact: dict[str, str] = {}
        self.globs: list[tuple[str, str]] = []
        for pattern, effect in overrides or []:
            if any(c in pattern for c in "*?["):
                self.globs.append((pattern, effect))
            else:
                self.exact[pattern] = effect

    @classmethod
    def from_file(cls, path: str | None) -> EffectRules:
        if not path:
            return cls()
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise EffectsFileError(f"cannot read effects file {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise EffectsFileError(f"effects file {path} is not valid TOML: {exc}") from None
        unknown = set(data) - {"tools"}
        if unknown:
            raise EffectsFileError(f"effects file {path}: unknown table(s) {sorted(unknown)}; expected [tools]")
        tools = data.get("tools", {})
        if not isinstance(tools, dict):
            raise EffectsFileError(f"effects file {path}: [tools] must be a table of name = \"read\"|\"write\"")
        overrides = []
        for name, effect in tools.items():
            if effect not in (READ, WRITE):
                raise EffectsFileError(f"effects file {path}: tool {name!r} has effect {effect!r}; use read or write")
            overrides.append((name, effect))
        return cls(overrides)

    def _override(self, tool: str) -> str | None:
        if tool in self.exact:
            return self.exact[tool]
        for pattern, effect in self.globs:
            if fnmatch.fnmatchcase(tool, pattern):
                return effect
        return None

    def overrides(self, tool: object) -> bool:
        """True when the override file decides this tool (nothing needs to be asked of the server)."""
        return isinstance(tool, str) and self._override(tool) is not None

    def decide_tool(self, tool: object, catalog: ToolCatalog) -> Decision:
        if not isinstance(tool, str):
            return Decision(WRITE, "no tool name", DEFAULT)
        override = self._override(tool)
        if override is not None:
            return Decision(override, "override file", OVERRIDE)
        listed = catalog.get(tool)
        if listed is None:
            return Decision(WRITE, "not listed by the server", DEFAULT)
        annotations = listed.get("annotations")
        if not isinstance(annotations, dict):
            return Decision(WRITE, "listed without annotations", DEFAULT)
        if annotations.get("readOnlyHint") is True:
            return Decision(READ, "readOnlyHint true", ANNOTATIONS)
        return Decision(WRITE, "annotations without readOnlyHint true", ANNOTATIONS)

    def decide(self, method: str, params: object, catalog: ToolCatalog) -> Decision:
        if method in READ_METHODS:
            return Decision(READ, method, RULE)
        name = params.get("name") if isinstance(params, dict) else None
        return self.decide_tool(name, catalog)
