"""Replay commands (`broker replay`, `broker revert-plan`): not built yet."""

from __future__ import annotations

COMMANDS: list = []
