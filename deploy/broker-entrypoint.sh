#!/bin/sh
# The broker container's start: firewall its network namespace (which the agent container shares),
# publish the CA bundle (never the CA key), then run the broker as an unprivileged user.
# Untested here (no docker on the machine this was written on); see docs/exec.md "Containers".
set -eu
BROKER_UID=${BROKER_UID:-10001}
TRANSPARENT_PORT=${TRANSPARENT_PORT:-8081}
PROXY_PORT=${PROXY_PORT:-8080}
CONFDIR=/home/broker/.mitmproxy
install -d -o "$BROKER_UID" -m 700 "$CONFDIR" /vault
install -d -m 755 /ca-public

for ipt in iptables ip6tables; do
  command -v "$ipt" >/dev/null 2>&1 || continue
  lo=127.0.0.0/8; unreach=icmp-port-unreachable; prohib=icmp-admin-prohibited
  if [ "$ipt" = ip6tables ]; then lo=::1/128; unreach=icmp6-port-unreachable; prohib=icmp6-adm-prohibited; fi
  # Appended, not restored: Docker's own rules for its DNS (127.0.0.11) stay in place.
  $ipt -t nat -N BROKER_OUT
  $ipt -t nat -A BROKER_OUT -m owner --uid-owner "$BROKER_UID" -j RETURN   # the broker's own upstream calls
  $ipt -t nat -A BROKER_OUT -d "$lo" -j RETURN
  $ipt -t nat -A BROKER_OUT -p tcp -m multiport --dports 80,443 -j REDIRECT --to-ports "$TRANSPARENT_PORT"
  $ipt -t nat -A OUTPUT -j BROKER_OUT
  $ipt -N BROKER_OUT
  $ipt -A BROKER_OUT -m owner --uid-owner "$BROKER_UID" -j ACCEPT
  $ipt -A BROKER_OUT -d "$lo" -j ACCEPT
  $ipt -A BROKER_OUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
  $ipt -A BROKER_OUT -j NFLOG --nflog-group 1 --nflog-prefix broker-refused
  $ipt -A BROKER_OUT -p tcp -j REJECT --reject-with tcp-reset
  $ipt -A BROKER_OUT -p udp -j REJECT --reject-with "$unreach"
  $ipt -A BROKER_OUT -j REJECT --reject-with "$prohib"
  $ipt -A OUTPUT -j BROKER_OUT
done

# The CA is made as the broker user; the agent gets only the bundle (system roots + broker CA).
setpriv --reuid "$BROKER_UID" --regid "$BROKER_UID" --init-groups -- \
  broker env --confdir "$CONFDIR" >/dev/null
cp "$CONFDIR/broker-ca-bundle.pem" /ca-public/broker-ca-bundle.pem
chmod 644 /ca-public/broker-ca-bundle.pem

# The broker: transparent for the agent's redirected connections, regular for clients that use
# HTTPS_PROXY; no capabilities left (the firewall is already in place and the agent has none).
exec setpriv --reuid "$BROKER_UID" --regid "$BROKER_UID" --init-groups --inh-caps=-all --bounding-set=-all -- \
  mitmdump --set confdir="$CONFDIR" --set flow_detail=0 --set connection_strategy=lazy \
    --mode "transparent@127.0.0.1:$TRANSPARENT_PORT" --mode "regular@127.0.0.1:$PROXY_PORT" \
    -s /app/addons/upstream_name.py -s /app/addons/connector_journal.py \
    --set vault=/vault --set broker_session="${BROKER_SESSION:-default}" --set broker_agent="${BROKER_AGENT:-unknown}"
