"""A small tool-using agent loop against the model APIs (the fake ones in tests/support/upstreams, or real ones).

Why: the end-to-end prompt-capture test and `scripts/demo_agent.py --prompts` need an agent that does
what real agents do: ask the model, carry out the tool calls it asks for against Gmail and Slack,
show it the results (the response text, as most agents do), and stop when it answers without a tool
call. `fabricate` names tools whose result the agent makes up instead of calling them: the case
`broker trajectory` must catch.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from journal.models import anthropic, gemini, openai

GMAIL = "https://gmail.googleapis.com/gmail/v1/users/me"
SLACK = "https://slack.com/api"
TASK = "Triage my inbox: list the unread mail, then post a one-line summary to #general on Slack."
SYSTEM = "You are a careful assistant. Use the tools; never invent a tool result."
FAKE_RESULT = '{"messages": [{"id": "made-up-by-the-agent"}], "ok": true}'
KEYS = {"anthropic": "sk-ant-api03-agent-key-never-recorded", "openai": "sk-proj-agent-key-never-recorded",
        "gemini": "AIzaSyAgentKeyNeverRecorded0123456789"}
TOOLS = [
    ("gmail_list_messages", "List Gmail messages matching a query.",
     {"type": "object", "properties": {"q": {"type": "string"}, "maxResults": {"type": "integer"}}}),
    ("slack_post_message", "Post a message to a Slack channel.",
     {"type": "object", "properties": {"channel": {"type": "string"}, "text": {"type": "string"}},
      "required": ["channel", "text"]}),
]
APIS = ("anthropic", "openai.chat", "openai.responses", "gemini")


def run_tool(c: httpx.Client, name: str, args: dict[str, Any]) -> str:
    """Carry out one tool call; the result the model is shown is the response text."""
    if name == "gmail_list_messages":
        r = c.get(f"{GMAIL}/messages", params={k: v for k, v in args.items() if v is not None},
                  headers={"Authorization": "Bearer ya29.agent-gmail-token-never-recorded"})
    elif name == "slack_post_message":
        r = c.post(f"{SLACK}/chat.postMessage", json=args,
                   headers={"Authorization": "Bearer xoxb-agent-slack-token-never-recorded-1"})
    else:
        return json.dumps({"error": f"unknown tool {name}"})
    return r.text


class Conversation:
    """One API's request shape: the growing history, the tools, how results are appended."""

    def __init__(self, api: str, stream: bool, model_host: str | None = None) -> None:
        self.api, self.stream = api, stream
        self.host = model_host
        self.history: list[Any] = []
        if api == "anthropic":
            self.history = [{"role": "user", "content": TASK}]
        elif api == "openai.chat":
            self.history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
        elif api == "openai.responses":
            self.history = [{"role": "user", "content": [{"type": "input_text", "text": TASK}]}]
        elif api == "gemini":
            self.history = [{"role": "user", "parts": [{"text": TASK}]}]
        else:
            raise ValueError(f"unknown api {api!r}; one of {APIS}")

    def request(self) -> tuple[str, dict[str, str], dict[str, Any]]:
        if self.api == "anthropic":
            body: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "system": SYSTEM,
                                    "messages": self.history, "stream": self.stream,
                                    "tools": [{"name": n, "description": d, "input_schema": s} for n, d, s in TOOLS]}
            return (f"https://{self.host or 'api.anthropic.com'}/v1/messages",
                    {"x-api-key": KEYS["anthropic"], "anthropic-version": "2023-06-01"}, body)
        if self.api.startswith("openai"):
            auth = {"Authorization": f"Bearer {KEYS['openai']}"}
            base = f"https://{self.host or 'api.openai.com'}/v1"
            if self.api == "openai.chat":
                tools = [{"type": "function", "function": {"name": n, "description": d, "parameters": s}}
                         for n, d, s in TOOLS]
                return f"{base}/chat/completions", auth, {"model": "gpt-4.1", "messages": self.history,
                                                          "tools": tools, "stream": self.stream}
            tools = [{"type": "function", "name": n, "description": d, "parameters": s} for n, d, s in TOOLS]
            return f"{base}/responses", auth, {"model": "gpt-4.1", "instructions": SYSTEM, "input": self.history,
                                               "tools": tools, "stream": self.stream}
        # the key in a header when streaming, in the query (?key=) otherwise: agents use both
        method = "streamGenerateContent?alt=sse" if self.stream else f"generateContent?key={KEYS['gemini']}"
        return (f"https://{self.host or 'generativelanguage.googleapis.com'}/v1beta/models/gemini-2.5-flash:{method}",
                {"x-goog-api-key": KEYS["gemini"]} if self.stream else {},
                {"contents": self.history, "systemInstruction": {"parts": [{"text": SYSTEM}]},
                 "tools": [{"functionDeclarations": [{"name": n, "description": d, "parameters": s}
                                                     for n, d, s in TOOLS]}]})

    def answer(self, r: httpx.Response) -> Any:
        r.raise_for_status()
        module = {"anthropic": anthropic, "gemini": gemini}.get(self.api, openai)
        return module.assemble_stream(r.content) if self.stream else r.json()

    def step(self, message: Any, run: Any) -> bool:
        """Append the model's message and the results of its tool calls; False when it asked for none."""
        if self.api == "anthropic":
            self.history.append({"role": "assistant", "content": message["content"]})
            calls = [(b["id"], b["name"], b["input"]) for b in message["content"] if b["type"] == "tool_use"]
            if calls:
                self.history.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": i, "content": run(n, a)} for i, n, a in calls]})
        elif self.api == "openai.chat":
            msg = message["choices"][0]["message"]
            self.history.append({k: v for k, v in msg.items() if v is not None})
            calls = [(t["id"], t["function"]["name"], json.loads(t["function"]["arguments"]))
                     for t in msg.get("tool_calls") or ()]
            self.history += [{"role": "tool", "tool_call_id": i, "content": run(n, a)} for i, n, a in calls]
        elif self.api == "openai.responses":
            self.history += message["output"]
            calls = [(o["call_id"], o["name"], json.loads(o["arguments"])) for o in message["output"]
                     if o["type"] == "function_call"]
            self.history += [{"type": "function_call_output", "call_id": i, "output": run(n, a)}
                             for i, n, a in calls]
        else:
            content = message["candidates"][0]["content"]
            self.history.append(content)
            calls = [(None, p["functionCall"]["name"], p["functionCall"].get("args") or {})
                     for p in content["parts"] if "functionCall" in p]
            if calls:
                self.history.append({"role": "user", "parts": [
                    {"functionResponse": {"name": n, "response": {"result": json.loads(run(n, a))}}}
                    for _, n, a in calls]})
        return bool(calls)


def run_agent(c: httpx.Client, api: str, *, stream: bool = False, fabricate: frozenset[str] = frozenset(),
              max_turns: int = 8, model_host: str | None = None) -> list[str]:
    """Run the loop to its end; returns the tool names carried out (or made up), in order."""
    conv = Conversation(api, stream, model_host)
    done: list[str] = []

    def run(name: str, args: dict[str, Any]) -> str:
        done.append(name)
        return FAKE_RESULT if name in fabricate else run_tool(c, name, args)

    for _ in range(max_turns):
        url, headers, body = conv.request()
        if not conv.step(conv.answer(c.post(url, json=body, headers=headers)), run):
            return done
    raise RuntimeError(f"the model still asked for tools after {max_turns} turns")
