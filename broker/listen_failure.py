"""The one message for an address a command cannot listen on, whichever server failed to bind it.

`broker run` (mitmproxy binds), `broker run --workers N` (the parent holds the port), `broker mcp
--listen`, `broker inspect` and `broker witness` (broker/cli/options.py `bind`) all say it the same way:
`broker: error: cannot listen on HOST:PORT: ...; choose another with --listen HOST:PORT`, exit 2.
"""

from __future__ import annotations

import errno

from journal.errors import BrokerError


class ListenError(BrokerError, OSError):
    """The address given to --listen cannot be listened on (an OSError too: what the machine refused)."""


def listen_error(host: str, port: int, reason: OSError | str) -> ListenError:
    """The error for (host, port); `reason` is the OSError of the bind, or the text a server logged about it."""
    if isinstance(reason, OSError):
        in_use = reason.errno == errno.EADDRINUSE
        detail = reason.strerror or str(reason)
    else:
        in_use = "in use" in reason or f"[Errno {errno.EADDRINUSE}]" in reason
        detail = reason
    if in_use:
        detail = "the address is already in use (another broker or program holds it)"
    shown = f"[{host}]" if ":" in host else host
    return ListenError(f"cannot listen on {shown}:{port}: {detail}; choose another with --listen HOST:PORT")
