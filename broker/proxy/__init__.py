"""The HTTPS capture point: the broker as the agent's proxy (`broker run`, `mitmdump -s addons/...`).

One module per concern, from the top down: `runner` (mitmproxy embedded, the listener, the CA) and
`workers` (N runners on one port); `playback` (answer calls from a recorded session); `addon` (the
mitmproxy hooks: gather each call as a `journal.call.Call`, hand it to the recorder, release the
response once the entry is durable), which uses `identity` (proxy credentials, `X-Broker-*` headers,
options -> session, agent, principal; the MCP gateway reads the same), `request_url` (host and URL
as mitmproxy spells them), `streaming` (which bodies stream, their capture, holding back the end),
`coverage` (calls left unrecorded, counted for the checkpoints) and `call_log` (the `-v` line);
`link` (the proxy's side of the recording service) and `service` (the recording service process,
`python -m broker.proxy.service`), which speak `wire` (MessagePack-encoded Calls and
acknowledgements); `upstream_resolve` (`--resolve`), `upstream_name` (transparent mode connects to
the host the client named), `listener` (listening on sockets made elsewhere, for `broker exec`).

Nothing here is imported by `journal/`, which holds the contract in code.
"""
