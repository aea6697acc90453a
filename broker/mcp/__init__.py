"""The MCP shim (`broker mcp`): relays the MCP protocol untouched and records each tool call.

- `messages`: reading JSON-RPC lines without changing them;
- `effects`: read or write (and the `effect_basis`), from the server's tool annotations or an
  override file; a write by default;
- `recording`: from calls to journal entries (capture "gateway");
- `relay`: the line relay shared by the stdio transports (ordering, holding, failing closed, the
  shim's own `tools/list`);
- `oversize`: lines over `--max-message-mib`, recorded from the blob store as they stream;
- `stdio_relay`: the stdio shim around a child process;
- `http_relay`: streamable HTTP and SSE relays, and a stdio front for an HTTP upstream;
- `attribution`: `--through-broker`, tying the server's own HTTP calls to the tool call.

docs/mcp.md describes the behaviour.
"""
