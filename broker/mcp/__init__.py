"""The MCP shim (`broker mcp`): relays the MCP protocol untouched and records each tool call.

- `messages`: reading JSON-RPC lines without changing them;
- `effects`: read or write (and the `effect_basis`), from the server's tool annotations or an
  override file; a write by default;
- `recording`: from calls to journal entries (capture "gateway"); the request's share of an entry
  is made while the call is upstream;
- `entry_writer`: the durable appends, in a worker thread that groups what queues (on the event
  loop itself for one call at a time while appends are quick);
- `relay`: the line relay shared by the stdio transports (ordering, holding, failing closed, the
  shim's own `tools/list`);
- `oversize`: lines over `--max-message-mib`, recorded from the blob store as they stream;
- `stdio_relay`: the stdio shim around a child process;
- `http_relay`: streamable HTTP and SSE relays, and a stdio front for an HTTP upstream;
- `upstream`: the HTTP/1.1 client to an upstream server (asyncio, httptools' parser, keep-alive);
- `attribution`: `--through-broker`, tying the server's own HTTP calls to the tool call.

docs/mcp.md describes the behaviour.
"""
