"""`broker exec`: run a command whose only way to the network is the broker (see docs/exec.md).

One module per concern: `capabilities` (can this machine do it), `netns` (the namespace and the
sockets the broker makes inside it), `firewall` (the rules: 80/443 to the broker, the rest refused),
`refusals` (the refused packets, from the kernel's NFLOG), `names` (resolv.conf and hosts inside),
`dns_relay` (name look-ups inside answered by the resolvers outside), `cleanup` (the state
directory: what was made, removed at exit and after a crash), `environment` (the CA and proxy
variables) and `sandbox` (all of it, in order). Listening inside the namespace and connecting to the
host the client named are the proxy's (`broker.proxy.listener`, `broker.proxy.upstream_name`).
"""
