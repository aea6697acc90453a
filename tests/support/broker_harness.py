"""Start a real broker (`broker run` or stock `mitmdump -s`) as a subprocess for end-to-end tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
_LISTEN_RE = re.compile(rb"listening (?:on http://|at )([\d.]+):(\d+)")


class BrokerProcess:
    """A broker subprocess with its own vault and confdir; stdout and stderr are collected."""

    def __init__(self, tmp: Path, upstream, *extra: str, flavour: str = "broker", vault: Path | None = None) -> None:
        self.tmp = tmp
        self.vault = vault or tmp / "vault"
        self.confdir = tmp / "mitmconf"
        self.upstream = upstream
        self.extra = list(extra)
        self.flavour = flavour
        self.new_session = False  # own process group, for a Ctrl-C sent to the whole group
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.output = bytearray()
        self._reader: threading.Thread | None = None

    @property
    def ca(self) -> str:
        return str(self.confdir / "mitmproxy-ca-cert.pem")

    def command(self) -> list[str]:
        if self.flavour == "broker":
            return [
                str(BIN / "broker"), "run", "--vault", str(self.vault), "--listen", "127.0.0.1:0",
                "--confdir", str(self.confdir), "--upstream-ca", self.upstream.ca_pem,
                *self.upstream.resolve_args(), *self.extra,
            ]
        sets = [f"vault={self.vault}", f"confdir={self.confdir}",
                f"ssl_verify_upstream_trusted_ca={self.upstream.ca_pem}"]
        sets += [f"broker_resolve={h}=127.0.0.1:{self.upstream.port}" for h in self.upstream.hosts]
        cmd = [str(BIN / "mitmdump"), "--set", "flow_detail=0", "-s", str(ROOT / "addons" / "connector_journal.py"),
               "--listen-host", "127.0.0.1", "--listen-port", "0"]
        for s in sets:
            cmd += ["--set", s]
        return [*cmd, *self.extra]

    def start(self, timeout: float = 30) -> BrokerProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("PYTHONPATH", None)  # the addon must find the journal package by itself
        self.proc = subprocess.Popen(
            self.command(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=self.tmp, env=env,
            start_new_session=self.new_session,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = _LISTEN_RE.search(bytes(self.output))
            if m:
                self.port = int(m.group(2))
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"broker did not start:\n{self.output.decode(errors='replace')}")

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, b""):
            self.output += line

    def proxy_url(self, session: str | None = None, agent: str | None = None) -> str:
        if session is None:
            return f"http://127.0.0.1:{self.port}"
        return f"http://{quote(session, safe='')}:{quote(agent or 'agent', safe='')}@127.0.0.1:{self.port}"

    def entries(self, session: str, count: int | None = None, timeout: float = 20) -> list[dict]:
        """The session's entries; with `count`, wait for that many (a streamed response's entry is
        written when its stream ends, which a Content-Length client may not wait for)."""
        from journal.reader import iter_entries
        from journal.vault import Vault

        deadline = time.monotonic() + timeout
        while True:
            vault = Vault(self.vault)
            got = list(iter_entries(vault, session)) if vault.session_path(session).exists() else []
            if count is None or len(got) >= count or time.monotonic() > deadline:
                return got
            time.sleep(0.05)

    def service_pid(self, timeout: float = 10) -> int:
        """The pid of the broker's recording service (`python -m broker.proxy.service`), once it runs."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            kids = [k for t in Path(f"/proc/{self.proc.pid}/task").iterdir()
                    for k in (t / "children").read_text().split()]
            if kids:
                return int(kids[0])
            if time.monotonic() > deadline:
                raise RuntimeError("no recording service:\n" + self.output.decode(errors="replace")[-4000:])
            time.sleep(0.05)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def peak_rss_kib(self) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise RuntimeError("no VmHWM")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._reader is not None:
            self._reader.join(5)
        return self.proc.returncode

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
