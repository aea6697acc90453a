"""`broker exec`: run a command whose only way to the network is the broker (see docs/exec.md).

One module per concern: `capabilities` (can this machine do it), `netns` (the namespace and the
sockets the broker makes inside it), `firewall` (the rules: 80/443 to the broker, the rest refused),
`refusals` (the refused packets, from the kernel's NFLOG), `names` (resolv.conf and hosts inside),
`dns_relay` (name look-ups inside answered by the resolvers outside), `cleanup` (the state directory:
what was made, removed at exit and after a crash), `listener` (mitmproxy listening on sockets made
inside the namespace), `upstream_name` (the broker connects to the host the client named),
`environment` (the CA and proxy variables) and `sandbox` (all of it, in order).
"""
