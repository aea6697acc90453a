"""Can this machine contain a command? Linux, CAP_NET_ADMIN and CAP_SYS_ADMIN, and the tools used.

Checked before anything is made, so that a machine that cannot do it gets one line and exit 2, and
the command is never run without the namespace around it.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from journal.errors import BrokerError

CAP_NET_ADMIN = 12  # network namespaces' interfaces, routes and firewall rules
CAP_SYS_ADMIN = 21  # creating and entering namespaces (`ip netns add` mounts; setns)
TOOLS = ("ip", "iptables-restore", "iptables-save", "setpriv")


class ExecUnavailable(BrokerError, OSError):
    """This machine cannot run a command contained; the message says what is missing."""


def effective_capabilities(status: str | None = None) -> int:
    text = status if status is not None else Path("/proc/self/status").read_text()
    for line in text.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def has_ipv6() -> bool:
    return Path("/proc/sys/net/ipv6").is_dir()


def missing() -> str | None:
    """Why a command cannot be contained here, or None when it can."""
    if not sys.platform.startswith("linux"):
        return f"broker exec needs Linux (network namespaces and iptables); this is {sys.platform}"
    caps = effective_capabilities()
    lacking = [name for bit, name in ((CAP_NET_ADMIN, "CAP_NET_ADMIN"), (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"))
               if not caps >> bit & 1]
    if lacking:
        return (f"broker exec needs {' and '.join(lacking)} (run it as root, or see docs/exec.md "
                "'Capabilities'); the command was not run")
    tools = [*TOOLS, *(("ip6tables-restore",) if has_ipv6() else ())]
    absent = [t for t in tools if shutil.which(t) is None]
    if absent:
        return (f"broker exec needs {', '.join(absent)} (Debian: apt-get install iptables iproute2 "
                "util-linux); the command was not run")
    if not Path("/proc/self/ns/net").exists():
        return "broker exec needs network namespaces (this kernel has none); the command was not run"
    return None


def require() -> None:
    why = missing()
    if why:
        raise ExecUnavailable(why)
