"""The HTTPS capture point: the broker as the agent's proxy (`broker run`, `mitmdump -s addons/...`).

One module per concern, from the top down: `runner` (mitmproxy embedded, the listener, the CA) and
`workers` (N runners on one port); `addon` (the mitmproxy hooks: gather each call, hand it to the
recorder, release the response once the entry is durable); `link` (the proxy's side of the
recording service) and `service` (the recording service process, `python -m broker.proxy.service`);
`playback` (answer calls from a recorded session); `upstream_resolve` (`--resolve`),
`upstream_name` (transparent mode connects to the host the client named), `listener` (listening on
sockets made elsewhere, for `broker exec`); `call_log` (the `-v` line).

Nothing here is imported by `journal/`, which holds the contract in code.
"""
