"""`broker inspect` as a user starts it: a real process on an ephemeral loopback port."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from broker.cli.inspect import is_loopback, parse_listen

EXAMPLE = Path(__file__).resolve().parents[2] / "vault"
_URL = re.compile(r"at (http://\S+)")


def _start(*args: str) -> tuple[subprocess.Popen, str, str]:
    proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "inspect", "--vault", str(EXAMPLE), *args],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        m = _URL.search(line)
        if m:
            if "?token=" in m.group(1):
                lines.append(proc.stderr.readline())
            return proc, m.group(1), "".join(lines)
    proc.wait(10)
    raise AssertionError("no URL printed: " + "".join(lines))


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(10)


def test_serves_on_loopback_without_a_token():
    proc, url, _ = _start("--listen", "127.0.0.1:0")
    try:
        assert url.startswith("http://127.0.0.1:") and "token" not in url
        r = httpx.get(url + "api/sessions")
        assert r.status_code == 200 and r.json()[0]["session"] == "session-2026-09-22"
        assert httpx.get(url).headers["content-security-policy"].startswith("default-src 'none'")
        assert httpx.delete(url + "api/sessions").status_code == 405
    finally:
        _stop(proc)


def test_a_token_given_is_required_on_every_request():
    proc, url, out = _start("--listen", "127.0.0.1:0", "--token", "t0ken-xyz")
    try:
        assert url.endswith("/?token=t0ken-xyz") and "token: t0ken-xyz" in out
        base = url.split("?")[0]
        assert httpx.get(base + "api/sessions").status_code == 401
        assert httpx.get(base + "api/sessions", headers={"Authorization": "Bearer t0ken-xyz"}).status_code == 200
        assert httpx.get(url).status_code == 200
    finally:
        _stop(proc)


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.0.0.2", True), ("localhost", True), ("::1", True),
    ("0.0.0.0", False), ("::", False), ("192.0.2.7", False), ("example.com", False),
])
def test_what_counts_as_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_listen_is_parsed():
    assert parse_listen("127.0.0.1:8090") == ("127.0.0.1", 8090)
    assert parse_listen("[::1]:0") == ("::1", 0)


def test_bad_listen_is_one_line_exit_2():
    r = subprocess.run([sys.executable, "-m", "broker.cli", "inspect", "--vault", str(EXAMPLE), "--listen", "nope"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "HOST:PORT" in r.stderr and "Traceback" not in r.stderr


def test_off_loopback_a_token_is_generated_and_printed(monkeypatch):
    """Nothing is bound off loopback here: the socket is a loopback one and the server does not run."""
    import uvicorn
    from click.testing import CliRunner

    from broker.cli import inspect as inspect_commands

    seen = {}
    real_bind = inspect_commands.bind
    monkeypatch.setattr(inspect_commands, "bind", lambda host, port: real_bind("127.0.0.1", 0))
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: seen.setdefault("app", self.config.app))
    result = CliRunner().invoke(inspect_commands.inspect, ["--vault", str(EXAMPLE), "--listen", "192.0.2.7:8090"])
    assert result.exit_code == 0, result.output
    token = re.search(r"token: (\S+)", result.output).group(1)
    assert len(token) >= 32 and f"?token={token}" in result.output
    assert seen["app"].token == token
