"""A line relay (broker/mcp/relay.py) with both ends in memory: the client's and the server's lines as the
tests write them, what each side got back, and the session file read at the end. No process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from broker.mcp.recording import CallJournal, Identity
from broker.mcp.relay import ClientWriter, LineRelay
from journal.record import Recorder
from journal.vault import Vault


class Wire:
    """A relay with both ends in memory (`max_line`: the relay's line limit)."""

    def __init__(self, tmp: Path, max_line: int = 64 << 20) -> None:
        self.vault = tmp / "vault"
        self.journal = CallJournal(Recorder(self.vault), Identity("s1", "a1", "unknown"), url="stdio:server",
                                   fallback="server")
        self.to_client: list[bytes] = []
        self.to_server: list[bytes] = []

        async def write(data: bytes) -> None:
            self.to_client.append(data)

        async def close() -> None:
            return None

        async def upstream(data: bytes) -> None:
            self.to_server.append(data)

        self.relay = LineRelay(self.journal, ClientWriter(write, close), send_upstream=upstream, max_line=max_line)

    async def client(self, msg: dict) -> None:
        await self.relay.client_line(orjson.dumps(msg) + b"\n")

    async def server(self, msg: dict) -> None:
        """One server line, returned once the client has it (an answer waits for its entry)."""
        before = len(self.to_client)
        self.relay.server_line(orjson.dumps(msg) + b"\n")

        async def relayed() -> None:
            while len(self.to_client) == before:
                await asyncio.sleep(0.001)

        await asyncio.wait_for(relayed(), 30)  # a bound against a hang, not a timing assertion

    async def end(self) -> list[dict]:
        self.relay.fail_pending("the test ended", answer_client=False)
        await self.relay.drain()
        self.journal.recorder.close()
        path = Vault(self.vault).session_path("s1")
        return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []
