"""Whether a tool call reads or writes, decided from what the server said, never from the client.

Order (the first that decides wins; see docs/mcp.md):

1. the override file (`--effects FILE`, TOML): the operator's word, exact names or globs;
2. a tool the shim has not seen in a `tools/list` answer from the server is a write;
3. the server's annotations: `readOnlyHint: true` is a read, `readOnlyHint: false` a write;
4. no `readOnlyHint`: the name rule: a tool whose first word is a read verb (get, list, search,
   read, fetch, ...) is a read;
5. anything else is a write.

`resources/read` is a read. The client cannot change any of this: what it sends in `tools/call`
(the tool name) is only looked up; annotations come from the server's own answers.

Override file:

    [tools]
    send_message = "write"
    "get_*" = "read"          # fnmatch globs, tried after exact names, in file order
"""

from __future__ import annotations

import fnmatch
import re
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path

READ, WRITE = "read", "write"
READ_VERBS = frozenset({
    "get", "list", "search", "read", "fetch", "find", "query", "lookup", "describe", "show", "view",
    "retrieve", "count", "browse", "inspect", "preview", "stat",
})  # fmt: skip
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")


class EffectsFileError(ValueError):
    """An override file that cannot be used; the message says why."""


def first_word(tool: str) -> str:
    """First word of a tool name's last segment: `get_note`, `getNote`, `notes.get-note` -> `get`."""
    last = re.split(r"[./]", tool)[-1]
    words = [w for w in _WORD_SPLIT.split(last) if w]
    return words[0].lower() if words else ""


@dataclass(frozen=True)
class Decision:
    effect: str
    rule: str  # short text naming the rule, for logs and docs


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

    def decide_tool(self, tool: object, catalog: ToolCatalog) -> Decision:
        if not isinstance(tool, str):
            return Decision(WRITE, "no tool name")
        override = self._override(tool)
        if override is not None:
            return Decision(override, "override file")
        listed = catalog.get(tool)
        if listed is None:
            return Decision(WRITE, "not listed by the server")
        annotations = listed.get("annotations")
        hint = annotations.get("readOnlyHint") if isinstance(annotations, dict) else None
        if hint is True:
            return Decision(READ, "readOnlyHint true")
        if hint is False:
            return Decision(WRITE, "readOnlyHint false")
        if first_word(tool) in READ_VERBS:
            return Decision(READ, f"name starts with {first_word(tool)!r}")
        return Decision(WRITE, "no readOnlyHint, no read verb")

    def decide(self, method: str, params: object, catalog: ToolCatalog) -> Decision:
        if method in ("resources/read", "tools/list"):
            return Decision(READ, method)
        name = params.get("name") if isinstance(params, dict) else None
        return self.decide_tool(name, catalog)
