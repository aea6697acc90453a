"""What every model API module reads out of a recorded model call, in one shape for all of them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model asked for (in clear in the entry: it is the instruction)."""

    id: str | None
    name: str
    arguments: object  # parsed JSON where the API sends a JSON string


@dataclass(frozen=True)
class ToolResult:
    """A tool result the client showed the model, as recorded: references (or text, if not referenced)."""

    call_id: str | None
    name: str | None
    parts: list = field(default_factory=list)  # each a reference object, or a JSON value left in clear


@dataclass(frozen=True)
class ToolDef:
    """A tool definition the model was given."""

    name: str
    description: object
    schema: object
