"""What a new user meets first (issue 27 item 5): every mistake is one `broker: error:` line and exit 2,
a port in use reads the same from every command that listens, values outside their choices are refused,
`--out` makes its folders, `--set` reaches mitmproxy (never the options the broker owns), `--log-format
json` gives JSON lines, and `-v` shows the entry's own effect."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.broker_harness import BrokerProcess
from tests.support.example_vault import ROOT, SESSION, copy_example
from tests.support.upstreams import Upstream

pytestmark = pytest.mark.e2e


def broker(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)


def one_error_line(r: subprocess.CompletedProcess) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("broker: error: "), r.stderr
    assert "Traceback" not in r.stderr and "Usage:" not in r.stderr
    return lines[0]


@pytest.mark.parametrize(("option", "value", "needle"), [
    ("--effect", "banana", "'read', 'write'"),
    ("--capture", "proxy", "'broker', 'gateway', 'agent'"),
    ("--answered-by", "me", "'upstream', 'capture', 'none'"),
    ("--since", "yesterday", "1h, 2d"),
    ("--until", "2026-02-30", "1h, 2d"),
    ("--status", "abc", "4xx"),
])
def test_search_refuses_values_outside_the_choices(tmp_path, option, value, needle):
    vault = copy_example(tmp_path / "v")
    line = one_error_line(broker("search", "--vault", str(vault), option, value))
    assert value in line and needle in line


def test_search_takes_iso_and_relative_times(tmp_path):
    vault = copy_example(tmp_path / "v")
    every = broker("search", "--vault", str(vault), "--since", "2026-09-22")
    assert every.returncode == 0 and every.stderr.strip().endswith("entries"), every.stderr
    count = every.stderr.strip().split()[0]
    shifted = broker("search", "--vault", str(vault), "--since", "2026-09-22T02:00+02:00")  # = 00:00 UTC
    assert shifted.returncode == 0 and shifted.stderr.strip().split()[0] == count
    assert broker("search", "--vault", str(vault), "--since", "2d").returncode == 1  # a 2026-09 session: none
    assert broker("search", "--vault", str(vault), "--until", "1h").stderr.strip().split()[0] == count


def test_unknown_options_and_commands_are_one_line(tmp_path):
    assert "--nope" in one_error_line(broker("show", "--nope"))
    assert "nosuch" in one_error_line(broker("nosuch"))
    assert "--format" in one_error_line(broker("export", "s", "--format", "pdf"))


def test_export_out_makes_its_folders(tmp_path):
    vault = copy_example(tmp_path / "v")
    out = tmp_path / "cassettes" / "deep" / "s.yaml"
    r = broker("export", "--vault", str(vault), SESSION, "--format", "vcr", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "interactions:" in out.read_text()


def _taken_port() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s, s.getsockname()[1]


def test_a_port_in_use_reads_the_same_from_every_command(tmp_path):
    vault = copy_example(tmp_path / "v")
    held, port = _taken_port()
    with held:
        listen = f"127.0.0.1:{port}"
        runs = {
            "run": ("run", "--vault", str(vault), "--confdir", str(tmp_path / "c"), "--listen", listen),
            "run --workers": ("run", "--vault", str(vault), "--confdir", str(tmp_path / "c"), "--workers", "2",
                              "--listen", listen),
            "mcp": ("mcp", "--vault", str(vault), "--session", "s", "--agent", "a", "--listen", listen,
                    "--upstream", "http://127.0.0.1:9/mcp"),
            "inspect": ("inspect", "--vault", str(vault), "--listen", listen),
        }
        lines = {name: one_error_line(broker(*args)) for name, args in runs.items()}
    expected = (f"broker: error: cannot listen on {listen}: the address is already in use (another broker or "
                "program holds it); choose another with --listen HOST:PORT")
    assert lines == dict.fromkeys(runs, expected)


@pytest.mark.parametrize(("spec", "needle"), [
    ("ignore_hosts=.*", "--pass-unknown"),
    ("allow_hosts=example.com", "--pass-unknown"),
    ("listen_port=1", "--listen"),
    ("mode=transparent", "broker exec"),
    ("ssl_insecure=true", "--upstream-insecure"),
    ("broker_session=x", "broker run --help"),
    ("vault=/tmp/elsewhere", "--vault"),
    ("stream_large_bodies=1", "records them whole"),
    ("validate_inbound_headers=false", "no entry of its own"),
    ("body_size_limit", "KEY=VALUE"),
    ("no_such_option=1", "no_such_option"),
    ("body_size_limit=lots", "body_size_limit"),
])
def test_set_refuses_what_the_broker_owns_and_what_mitmproxy_would_not_take(tmp_path, spec, needle):
    held, port = _taken_port()  # refused before it would even try to listen
    with held:
        line = one_error_line(broker("run", "--vault", str(tmp_path / "v"), "--confdir", str(tmp_path / "c"),
                                     "--listen", f"127.0.0.1:{port}", "--set", spec))
    assert "--set" in line and needle in line


def _client(b: BrokerProcess, session: str) -> httpx.Client:
    return httpx.Client(proxy=b.proxy_url(session, "me"), verify=ssl.create_default_context(cafile=b.ca),
                        timeout=60)


def test_set_reaches_mitmproxy(tmp_path):
    """body_size_limit is mitmproxy's: a body over it is refused by the proxy, one under it passes."""
    with Upstream() as up, BrokerProcess(tmp_path, up, "--set", "body_size_limit=2k") as b, _client(b, "s") as c:
        small = c.post("https://slack.com/api/chat.postMessage", json={"channel": "C1", "text": "hi"})
        assert small.status_code == 200
        big = c.post("https://slack.com/api/chat.postMessage", json={"channel": "C1", "text": "x" * 10_000})
        assert big.status_code == 413
        assert len(b.entries("s", 1)) >= 1


def test_json_logs_and_verbose_shows_the_entrys_effect_for_a_model_call(tmp_path):
    """A model call is recorded `read` (--prompts refs): the -v line says read, as the entry does; with
    --log-format json every line on both streams is a JSON object."""
    with Upstream() as up, BrokerProcess(tmp_path, up, "-v", "--prompts", "refs", "--log-format", "json") as b, \
            _client(b, "m") as c:
        r = c.post("https://api.openai.com/v1/chat/completions", headers={"Authorization": "Bearer sk-test-0"},
                   json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]})
        assert r.status_code == 200
        entries = b.entries("m", 1)
        b.stop()
        out = b.output.decode(errors="replace")
    assert entries[0]["effect"] == "read" and entries[0]["request"]["method"] == "POST"
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert all({"ts", "level", "source", "message"} <= set(e) for e in events)
    recorded = [e["message"] for e in events if e["message"].startswith("recorded seq=")]
    assert recorded == ["recorded seq=1 session=m connector=openai effect=read POST 200 "
                        "https://api.openai.com/v1/chat/completions"]
    assert any(e["message"].startswith("listening on http://127.0.0.1:") for e in events)
    assert "sk-test-0" not in out


def test_mcp_listen_says_the_url_to_give_a_client_and_logs_json(tmp_path):
    """`broker mcp --listen 127.0.0.1:0` picks a port and prints, on stderr, the URL a client is given (the
    relay's address with the upstream's path), as a JSON line with --log-format json."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker.cli", "mcp", "--vault", str(tmp_path / "v"), "--session", "s", "--agent", "a",
         "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9/some/mcp?x=1", "--log-format", "json"],
        cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        event = json.loads(proc.stderr.readline())
    finally:
        proc.terminate()
        proc.wait(30)
    assert event["source"] == "broker mcp"
    url = event["message"].split("URL ", 1)[1].split(" ", 1)[0]
    assert url.startswith("http://127.0.0.1:") and url.endswith("/some/mcp?x=1")
    assert int(url.split(":")[2].split("/")[0]) > 0


def test_pip_install_gives_a_runtime_without_test_tools():
    """The runtime dependency list holds none of the test extras (so `pip install .` brings no playwright,
    no vendor SDK, no pytest); what it does hold is enough to import every command (checked by importing
    them with the test-only packages hidden)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    name = lambda spec: spec.split(">")[0].split("[")[0].split("=")[0].strip().lower()  # noqa: E731
    runtime = {name(d) for d in project["dependencies"]}
    test_only = {name(d) for d in project["optional-dependencies"]["test"]} - runtime
    assert {"playwright", "openai", "anthropic", "pytest", "google-genai"} <= test_only
    hidden = sorted({t.replace("-", "_") for t in test_only} | {"googleapiclient", "google.genai", "slack_sdk"})
    probe = (
        "import sys, importlib\n"
        f"for m in {hidden!r}: sys.modules[m] = None\n"
        "from broker.cli.main import COMMANDS\n"
        "for module, _ in set(COMMANDS.values()): importlib.import_module('broker.cli.' + module)\n"
        "import broker.proxy.runner, broker.proxy.service, broker.mcp.http_relay, broker.inspector.app\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.stdout.strip() == "ok", r.stderr


def test_dockerignore_keeps_venvs_vaults_keys_and_caches_out_of_the_image():
    import fnmatch

    patterns = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]

    def ignored(path: str) -> bool:
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        for p in patterns:
            bare = p.removeprefix("**/")
            for prefix in prefixes:
                if fnmatch.fnmatch(prefix, p) or (p != bare and fnmatch.fnmatch(prefix.rsplit("/", 1)[-1], bare)):
                    return True
        return False

    for path in (".venv/bin/python", ".venv-phoenix/x", "vault/journal/s.jsonl", "deploy/vault/journal/s.jsonl",
                 "broker/__pycache__/x.pyc", ".git/HEAD", ".pytest_cache/v", ".mypy_cache/x", ".ruff_cache/x",
                 ".hypothesis/x", "keys/seal-key.key", "tests/e2e/test_x.py", "node_modules/undici/index.js"):
        assert ignored(path), path
    for path in ("pyproject.toml", "README.md", "broker/cli/main.py", "journal/vault.py", "addons/connector_journal.py",
                 "deploy/broker-entrypoint.sh", "broker/inspector/static/app.js"):
        assert not ignored(path), path
        assert (ROOT / path).exists() or path.endswith("app.js"), path
    assert Path(ROOT / "deploy" / "Dockerfile").read_text().count("COPY . /app") == 1
