"""An MCP server written with the SDK (mcp 2.3 `MCPServer`), for the shim's tests and benchmark.

    python -m tests.support.mcp_servers.notes_server                      # stdio
    python -m tests.support.mcp_servers.notes_server http PORT [PATH]     # streamable HTTP on 127.0.0.1:PORT/mcp
    python -m tests.support.mcp_servers.notes_server sse PORT             # legacy SSE on 127.0.0.1:PORT/sse

Tools (the annotations are what the shim must take the effect from):

- `get_note` readOnlyHint=true, `list_notes` (no annotations: a read by name rule),
  `add_note` readOnlyHint=false, `get_and_delete_note` readOnlyHint=false (a write whatever its name),
  `archive_all` (no annotations, no read-like name: a write);
- `fail` raises (an `isError` result), `invalid_args` is called with wrong arguments by tests;
- `image` returns an image of `size` bytes (default 2 MiB);
- `progress` sends `steps` progress notifications before answering;
- `ask_llm` asks the client for sampling, `ask_user` for elicitation, `roots` for its roots (each a
  server-to-client request in the 2025 era, an input-required round trip in the 2026 era);
- `crash` kills the server process mid-call; `sleep` waits; `echo` returns its text;
- `wait_for_file` reports progress, then waits until a file exists (to hold a call open in tests);
- `fetch` makes an HTTP GET through the environment's proxy settings (for --through-broker);
- `auth_digest` returns the SHA-256 of the Authorization header the call came with (HTTP);
- resource `note://{note_id}`; prompt `greet` (argument `who`).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver import Context, Image
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, ListRoots, Resolve, Sample
from mcp.types import CreateMessageResult, ListRootsResult, SamplingMessage, TextContent, ToolAnnotations
from pydantic import BaseModel

SERVER_NAME = "Test Notes"
IMAGE_SIZE = 2 << 20

server = MCPServer(SERVER_NAME, version="1.0")
NOTES: dict[str, str] = {"n1": "buy milk", "n2": "call bob"}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def get_note(note_id: str) -> str:
    """Read one note."""
    return NOTES.get(note_id, "")


@server.tool()
def list_notes() -> list[str]:
    """List note ids (no annotations: the shim's name rules make it a read)."""
    return sorted(NOTES)


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
def add_note(note_id: str, text: str) -> str:
    """Add a note."""
    NOTES[note_id] = text
    return "ok"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def get_and_delete_note(note_id: str) -> str:
    """Read a note and delete it (a write, whatever its name says)."""
    return NOTES.pop(note_id, "")


@server.tool()
def archive_all() -> str:
    """No annotations, no read-like name: a write."""
    return "archived"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def fail(reason: str = "boom") -> str:
    """Always fails (an isError result)."""
    raise ToolError(f"tool failed: {reason}")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def image(size: int = IMAGE_SIZE) -> Image:
    """An image of `size` bytes (PNG header, then filler)."""
    data = b"\x89PNG\r\n\x1a\n" + bytes(i % 251 for i in range(max(0, size - 8)))
    return Image(data=data, format="png")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def progress(steps: int, ctx: Context) -> str:
    """Sends `steps` progress notifications, then answers."""
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"step {i + 1}")
    return f"done {steps}"


def _question(question: str) -> Sample:
    return Sample([SamplingMessage(role="user", content=TextContent(type="text", text=question))], max_tokens=50)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def ask_llm(question: str, answer: Annotated[CreateMessageResult, Resolve(_question)]) -> str:
    """Asks the client's LLM (sampling) and returns what it said."""
    content = answer.content
    return "llm said: " + (content.text if isinstance(content, TextContent) else str(content))


class Confirmation(BaseModel):
    ok: bool


def _confirm(question: str) -> Elicit[Confirmation]:
    return Elicit(question, Confirmation)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def ask_user(question: str, answer: Annotated[Confirmation, Resolve(_confirm)]) -> str:
    """Asks the user (elicitation) and returns the answer."""
    return f"user said ok={answer.ok}"


def _roots() -> ListRoots:
    return ListRoots()


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def roots(found: Annotated[ListRootsResult, Resolve(_roots)]) -> str:
    """Asks the client for its roots and lists them."""
    return ",".join(str(r.uri) for r in found.roots)


@server.tool()
def crash() -> str:
    """Kills the server mid-call."""
    sys.stdout.flush()
    os._exit(3)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def sleep(seconds: float) -> str:
    """Waits, then answers."""
    await asyncio.sleep(seconds)
    return "slept"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def wait_for_file(path: str, ctx: Context) -> str:
    """Reports progress once (so a test knows the call is open), then waits until `path` exists."""
    await ctx.report_progress(1, 2, "waiting")
    for _ in range(1500):
        if os.path.exists(path):
            return "released"
        await asyncio.sleep(0.02)
    return "gave up"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Returns its text."""
    return text


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def fetch(url: str) -> str:
    """GET a URL with the environment's proxy and CA settings; returns status and body."""
    import httpx

    r = httpx.get(url, timeout=30)
    return f"{r.status_code} {r.text}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def auth_digest(ctx: Context) -> str:
    """SHA-256 of the Authorization header this call arrived with (HTTP), so tests can check it got here."""
    import hashlib

    value = (ctx.headers or {}).get("authorization", "")
    return hashlib.sha256(value.encode()).hexdigest() if value else "none"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def header_names(ctx: Context) -> str:
    """The names of the HTTP headers this call arrived with (tests: what a gateway forwarded)."""
    return ",".join(sorted(k.lower() for k in (ctx.headers or {})))


@server.resource("note://{note_id}", mime_type="text/plain")
def note_resource(note_id: str) -> str:
    """A note as a resource."""
    return NOTES.get(note_id, "")


@server.prompt()
def greet(who: str) -> str:
    """A prompt the client's model reads: a greeting for `who`."""
    return f"Say hello to {who}."


def main(argv: list[str]) -> None:
    if not argv or argv[0] == "stdio":
        server.run("stdio")
    elif argv[0] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(argv[1]),
                   streamable_http_path=argv[2] if len(argv) > 2 else "/mcp")
    elif argv[0] == "sse":
        server.run("sse", host="127.0.0.1", port=int(argv[1]))
    else:
        raise SystemExit(f"unknown mode {argv[0]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
