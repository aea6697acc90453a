"""The script the fake model APIs (anthropic.py, openai.py, gemini.py) follow, shared by all three.

Why: an end-to-end test needs a model whose next move is known. The fake reads how many tool
results the request shows, and answers the script's next turn: some text and the tool calls of
that turn, or the final text once the script is done. Events of a stream are `event_delay`
seconds apart (the first is sent at once); a request header `X-Fake-Event-Delay: S` sets it per call
(the benchmarks use it on a fake in another process).
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field
from typing import Any

DEFAULT_SCRIPT: list[dict[str, Any]] = [
    {"text": "I'll look at the unread mail first.",
     "tool_calls": [{"name": "gmail_list_messages", "arguments": {"q": "is:unread", "maxResults": 3}}]},
    {"text": "Now I'll post a summary to Slack.",
     "tool_calls": [{"name": "slack_post_message",
                     "arguments": {"channel": "#general", "text": "Inbox: unread mail listed by the agent"}}]},
    {"text": "Done: I listed the unread mail and posted a summary to #general."},
]


@dataclass
class ModelState:
    """Shared by the three fake model APIs; tests may replace `script` (take `lock`)."""

    script: list[dict[str, Any]] = field(default_factory=lambda: copy.deepcopy(DEFAULT_SCRIPT))
    event_delay: float = 0.0
    lock: threading.RLock = field(default_factory=threading.RLock)
    calls: list[dict[str, Any]] = field(default_factory=list)  # (api, turn, stream) per model call

    def turn_for(self, results_shown: int) -> tuple[int, dict[str, Any]]:
        """The script turn a request showing `results_shown` tool results is answered with."""
        with self.lock:
            seen = 0
            for i, turn in enumerate(self.script):
                calls = len(turn.get("tool_calls") or ())
                if seen >= results_shown or not calls:
                    return i, turn
                seen += calls
            return len(self.script) - 1, self.script[-1]

    def delay(self, headers: list[tuple[str, str]]) -> float:
        """Seconds between stream events for one request."""
        for k, v in headers:
            if k.lower() == "x-fake-event-delay":
                try:
                    return max(0.0, min(10.0, float(v)))
                except ValueError:
                    break
        return self.event_delay

    def note(self, api: str, turn: int, stream: bool) -> None:
        with self.lock:
            self.calls.append({"api": api, "turn": turn, "stream": stream})


def words(text: str) -> list[str]:
    """A text cut into the pieces a stream sends (each word with its trailing space)."""
    out, cur = [], ""
    for ch in text:
        cur += ch
        if ch == " ":
            out.append(cur)
            cur = ""
    return out + ([cur] if cur else [])
