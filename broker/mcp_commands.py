"""The MCP shim command (`broker mcp`): not built yet."""

from __future__ import annotations

COMMANDS: list = []
