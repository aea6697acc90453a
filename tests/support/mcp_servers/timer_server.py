"""A stdio MCP server that will not stop by itself, for the shim's no-orphans tests.

    python -m tests.support.mcp_servers.timer_server PIDFILE

Like a Node server with a `setInterval`: a timer thread keeps it alive after its stdin closes, and
it ignores SIGTERM and SIGINT, so only SIGKILL (or the shim's parent-death signal) ends it. It writes
its pid and that of a grandchild (`sleep`, in the server's process group) to PIDFILE first, so a test
can check that the server's own children go too. It answers `initialize` and never a `tools/call`
(so a call is in flight when the shim is stopped).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time


def tick() -> None:
    while True:
        time.sleep(0.05)


def main() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    grandchild = subprocess.Popen(["sleep", "600"])  # noqa: S607 - a test helper
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {grandchild.pid}\n")
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    threading.Thread(target=tick, daemon=False).start()
    for line in sys.stdin.buffer:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if not isinstance(msg, dict) or "id" not in msg:
            continue
        if msg.get("method") == "initialize":
            result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                      "serverInfo": {"name": "Timer Server", "version": "1"}}
            sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
            sys.stdout.flush()
    # stdin closed: the timer thread keeps the process alive


if __name__ == "__main__":
    main()
