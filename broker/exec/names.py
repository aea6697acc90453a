"""Name resolution inside the namespace: as outside, or as `--resolve` says.

`ip netns exec` bind-mounts /etc/netns/<name>/resolv.conf and hosts over /etc's inside the command's
mount namespace. resolv.conf points at the DNS relay on the namespace's loopback (which asks the
host's own name servers) and keeps the host's search and options lines; hosts is the host's, plus
each `--resolve` host mapped to an address of its own that SSRF guards take for public and that
nothing is ever sent to (`synthetic_names`: its traffic to 80/443 goes to the broker, which sends it
where --resolve says), so tests never need a public address.
"""

from __future__ import annotations

from pathlib import Path

from broker.exec.synthetic_names import SyntheticNames

RELAY_ADDRESS = "127.0.0.1"


def host_nameservers(resolv_conf: str) -> list[str]:
    """The host's name servers (glibc's default, the local one, when there are none)."""
    found = []
    for line in resolv_conf.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            found.append(parts[1].split("%", 1)[0])
    return found or ["127.0.0.1"]


def inner_resolv_conf(resolv_conf: str) -> str:
    kept = [line for line in resolv_conf.splitlines()
            if line.split()[:1] and line.split()[0] in ("search", "domain", "options", "sortlist")]
    return "\n".join([f"nameserver {RELAY_ADDRESS}", *kept, ""])


def inner_hosts(hosts: str, resolved: SyntheticNames) -> str:
    lines = resolved.hosts_lines()
    extra = ["# broker exec --resolve: served by the broker (broker/exec/synthetic_names.py)", *lines] if lines else []
    return "\n".join([hosts.rstrip("\n"), *extra, ""])


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def write(etc_dir: Path, resolved: SyntheticNames) -> list[str]:
    """Write the namespace's resolv.conf and hosts; the host's name servers, for the relay."""
    resolv = _read("/etc/resolv.conf")
    etc_dir.mkdir(parents=True, exist_ok=True)
    (etc_dir / "resolv.conf").write_text(inner_resolv_conf(resolv))
    (etc_dir / "hosts").write_text(inner_hosts(_read("/etc/hosts"), resolved))
    return host_nameservers(resolv)
