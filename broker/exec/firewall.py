"""The namespace's firewall: TCP to ports 80 and 443 of any address goes to the broker's transparent
listener; loopback stays loopback; everything else is refused at once and logged.

The rules live in the namespace's own tables, so deleting the namespace deletes them: nothing is
added to the host's firewall. Loaded with `iptables-restore` (one atomic load per family).
Refusals are REJECTs, not DROPs, so that a client fails at once (TCP: a reset, "connection
refused"; UDP and the rest: an ICMP error; a send() in the namespace gets EPERM), and each refused
packet first goes to NFLOG group `NFLOG_GROUP` (read by `refusals`) and is counted by its rule
(read back at exit by `counts`).
"""

from __future__ import annotations

import re
import subprocess

from broker.exec.netns import Namespace

NFLOG_GROUP = 1  # the namespace's own nfnetlink_log instance: no clash with other namespaces
REDIRECTED_PORTS = (80, 443)
COMMENT = "broker-exec-refused-"
KINDS = ("tcp", "udp", "other")


def ruleset(ipv6: bool, transparent_port: int) -> str:
    loopback = "::1/128" if ipv6 else "127.0.0.0/8"
    unreachable = "icmp6-port-unreachable" if ipv6 else "icmp-port-unreachable"
    prohibited = "icmp6-adm-prohibited" if ipv6 else "icmp-admin-prohibited"
    ports = ",".join(map(str, REDIRECTED_PORTS))
    return "\n".join([
        "*nat",
        ":PREROUTING ACCEPT [0:0]", ":INPUT ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]", ":POSTROUTING ACCEPT [0:0]",
        f"-A OUTPUT -d {loopback} -j RETURN",
        f"-A OUTPUT -p tcp -m multiport --dports {ports} -j REDIRECT --to-ports {transparent_port}",
        "COMMIT",
        "*filter",
        ":INPUT ACCEPT [0:0]", ":FORWARD DROP [0:0]", ":OUTPUT ACCEPT [0:0]",
        # after NAT: a redirected connection's packets go to the broker's listener on loopback
        f"-A OUTPUT -d {loopback} -j ACCEPT",
        "-A OUTPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
        f"-A OUTPUT -j NFLOG --nflog-group {NFLOG_GROUP} --nflog-prefix broker-exec --nflog-size 128",
        f"-A OUTPUT -p tcp -m comment --comment {COMMENT}tcp -j REJECT --reject-with tcp-reset",
        f"-A OUTPUT -p udp -m comment --comment {COMMENT}udp -j REJECT --reject-with {unreachable}",
        f"-A OUTPUT -m comment --comment {COMMENT}other -j REJECT --reject-with {prohibited}",
        "COMMIT",
        "",
    ])


def _tool(ipv6: bool, what: str) -> str:
    return f"ip6tables-{what}" if ipv6 else f"iptables-{what}"


def apply(ns: Namespace, transparent_port: int, transparent_port_v6: int | None) -> None:
    """Load both families' rules. Without IPv6 listener every IPv6 packet is refused."""
    families = [(False, transparent_port)]
    if transparent_port_v6 is not None:
        families.append((True, transparent_port_v6))
    for ipv6, port in families:
        r = subprocess.run(["ip", "netns", "exec", ns.name, _tool(ipv6, "restore")], input=ruleset(ipv6, port),
                           capture_output=True, text=True, check=False)
        if r.returncode:
            raise OSError(f"{_tool(ipv6, 'restore')} in {ns.name}: {r.stderr.strip() or 'failed'}")


_COUNTER = re.compile(r"^\[(\d+):\d+\] -A OUTPUT .*--comment \"?" + COMMENT + r"(\w+)")


def counts(ns: Namespace, ipv6: bool) -> dict[str, int]:
    """Packets refused so far, by kind, from the REJECT rules' counters (both families)."""
    total = dict.fromkeys(KINDS, 0)
    for family in (False, True) if ipv6 else (False,):
        r = subprocess.run(["ip", "netns", "exec", ns.name, _tool(family, "save"), "-c", "-t", "filter"],
                           capture_output=True, text=True, check=False)
        for line in r.stdout.splitlines():
            m = _COUNTER.match(line)
            if m and m.group(2) in total:
                total[m.group(2)] += int(m.group(1))
    return total
