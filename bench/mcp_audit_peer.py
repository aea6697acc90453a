"""The unsynced audit-wrapper peer of the MCP benchmark: what a user would otherwise put in front of a
stdio MCP server to log its calls.

    python -m bench.mcp_audit_peer LOGFILE -- COMMAND ...

Relays lines between its standard streams and the server's, like `broker mcp`, and for each answer to
a request appends one JSON line (request, answer, time) to LOGFILE after the answer has gone to the
client, with a plain `write` and never an fsync: the cheapest honest recording a wrapper can do, and
no durability (a crash loses what the page cache held). The benchmark races the shim against it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

import orjson


async def _relay(argv: list[str], log_fd: int) -> int:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=1 << 24)
    assert proc.stdin and proc.stdout
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = sys.stdout.buffer
    asked: dict[object, dict] = {}

    async def upward() -> None:
        assert proc.stdin
        while line := await reader.readline():
            try:
                msg = orjson.loads(line)
            except orjson.JSONDecodeError:
                msg = None
            if isinstance(msg, dict) and "id" in msg and "method" in msg:
                asked[msg["id"]] = msg
            proc.stdin.write(line)
            await proc.stdin.drain()
        proc.stdin.close()

    async def downward() -> None:
        assert proc.stdout
        while line := await proc.stdout.readline():
            out.write(line)
            out.flush()
            try:
                msg = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(msg, dict) and "method" not in msg and msg.get("id") in asked:
                record = {"ts": time.time(), "request": asked.pop(msg["id"]), "response": msg}
                os.write(log_fd, orjson.dumps(record) + b"\n")  # after the answer; no fsync

    await asyncio.gather(upward(), downward())
    return await proc.wait()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m bench.mcp_audit_peer LOGFILE -- COMMAND ...", file=sys.stderr)
        return 2
    fd = os.open(args[0], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        return asyncio.run(_relay(args[2:], fd))
    finally:
        os.close(fd)


if __name__ == "__main__":
    sys.exit(main())
