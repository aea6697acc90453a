"""Helpers the shim's tests share: start `broker mcp` as a process, talk raw lines, read the vault."""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson

from journal.vault import Vault
from journal.verify import verify_session

REPO = Path(__file__).resolve().parents[3]
PY = sys.executable
NOTES_SERVER = [PY, "-m", "tests.support.mcp_servers.notes_server"]
WAIT = 30.0  # a bound so a broken shim fails the test instead of hanging it; not a timing assertion


def shim_argv(vault: Path, *options: str, session: str = "s1", agent: str = "agent-1") -> list[str]:
    return [PY, "-m", "broker.cli", "mcp", "--vault", str(vault), "--session", session, "--agent", agent, *options]


SERVER_ASKS = ("sampling/createMessage", "elicitation/create", "roots/list")
"""Server-to-client requests the shim records (their entries hold the client's answers)."""


def entries(vault: Path, session: str = "s1", *, tool_lists: bool = False, asks: bool = False) -> list[dict]:
    """The session's entries; without `tool_lists`, not the `tools/list` answers the shim records,
    without `asks`, not the server's own requests to the client (tests about calls count the calls)."""
    path = Vault(vault).session_path(session)
    if not path.exists():
        return []
    data = path.read_bytes()
    # Only whole lines: the shim may be appending another call's entry while this reads (a call still in flight
    # when the caller's own answer came), and a read beside a write can see part of it. `assert_intact` is
    # where a torn line is a finding.
    got = [orjson.loads(line) for line in data[: data.rfind(b"\n") + 1].splitlines()]
    skip = ({"tools/list"} if not tool_lists else set()) | (set(SERVER_ASKS) if not asks else set())
    return [e for e in got if e["request"]["method"] not in skip]


def assert_intact(vault: Path, session: str = "s1") -> None:
    report = verify_session(Vault(vault), session)
    assert report.intact, f"{report.kind} at seq {report.broken_at_seq}: {report.detail}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {port}")


class RawShim:
    """`broker mcp` around a server, driven with raw lines on its stdin and stdout."""

    def __init__(self, tmp: Path, *options: str, server: list[str] | None = None) -> None:
        self.vault = tmp / "vault"
        self.server_log = tmp / "server-received.log"
        server = server or [PY, "-m", "tests.support.mcp_servers.raw_server", str(self.server_log)]
        self.proc = subprocess.Popen(
            [*shim_argv(self.vault, *options), "--", *server], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, cwd=REPO,
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.stderr_chunks: list[bytes] = []
        threading.Thread(target=self._read_stdout, daemon=True).start()
        self._stderr_thread = threading.Thread(target=self._read_stderr, daemon=True)
        self._stderr_thread.start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, b""):
            self.lines.put(line)
        self.lines.put(None)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for chunk in iter(lambda: self.proc.stderr.read1(65536), b""):
            self.stderr_chunks.append(chunk)

    @property
    def stderr(self) -> str:
        return b"".join(self.stderr_chunks).decode("utf-8", "replace")

    def send(self, data: bytes | dict) -> bytes:
        if isinstance(data, dict):
            data = json.dumps(data).encode() + b"\n"
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()
        return data

    def recv(self) -> bytes | None:
        """The next line from the shim (None at EOF)."""
        return self.lines.get(timeout=WAIT)

    def recv_json(self) -> dict:
        line = self.recv()
        assert line is not None, f"shim closed stdout; stderr:\n{self.stderr}"
        return json.loads(line)

    def handshake(self) -> None:
        self.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}})
        assert self.recv_json()["result"]["serverInfo"]["name"] == "Raw Server"
        self.send({"jsonrpc": "2.0", "id": "list", "method": "tools/list"})
        assert self.recv_json()["id"] == "list"

    def call(self, rid: object, tool: str, **arguments: object) -> bytes:
        return self.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                          "params": {"name": tool, "arguments": arguments}})

    def close(self) -> int:
        """Close stdin and wait for the shim to exit; returns its exit code."""
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            code = self.proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self._stderr_thread.join(timeout=WAIT)
            raise AssertionError(f"the shim did not exit after its stdin closed; its stderr:\n{self.stderr}") from None
        self._stderr_thread.join(timeout=WAIT)
        return code

    def received_by_server(self) -> list[bytes]:
        return self.server_log.read_bytes().splitlines(keepends=True) if self.server_log.exists() else []

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env
