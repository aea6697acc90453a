"""The MCP shim (`broker mcp`): relays the MCP protocol untouched and records each tool call.

- `messages`: reading JSON-RPC lines without changing them;
- `effects`: read or write, from the server's tool annotations, name rules and an override file;
- `recording`: from calls to journal entries (capture "gateway");
- `relay`: the line relay shared by the stdio transports (ordering, holding, failing closed);
- `stdio_relay`: the stdio shim around a child process;
- `http_relay`: streamable HTTP and SSE relays, and a stdio front for an HTTP upstream;
- `attribution`: `--through-broker`, tying the server's own HTTP calls to the tool call.

docs/mcp.md describes the behaviour.
"""
