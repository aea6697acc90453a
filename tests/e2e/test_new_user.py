"""What a new user hits on a fresh clone or a pip install: the docs they are sent to exist, and the
command line's mistakes are one clear line each."""

from __future__ import annotations

import ast
import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from journal.entry import KEYS

ROOT = Path(__file__).resolve().parents[2]
USER_FACING = ["README.md", "docs", "broker", "addons", "scripts", "journal", "bench"]


def broker(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)


def _texts(*tops: str):
    for top in tops:
        path = ROOT / top
        for p in [path] if path.is_file() else sorted(path.rglob("*")):
            if p.is_file() and p.suffix in (".md", ".py", ".toml", "") and "__pycache__" not in p.parts:
                try:
                    yield p, p.read_text()
                except UnicodeDecodeError:
                    continue


def test_nothing_points_outside_the_clone():
    """A clone has no ../shared: the contract the project follows is its own docs/contract.md."""
    bad = [str(p.relative_to(ROOT)) for p, text in _texts(*USER_FACING) if "../shared" in text]
    assert bad == []
    bad = [str(p.relative_to(ROOT)) for p, text in _texts("README.md", "docs", "broker", "addons", "scripts")
           if "SPEC.md" in text]
    assert bad == []
    readme = (ROOT / "README.md").read_text()
    assert "](docs/contract.md)" in readme


def test_the_contract_is_in_the_tree_with_the_2026_12_additions():
    text = (ROOT / "docs" / "contract.md").read_text()
    for key in KEYS:
        assert f"| `{key}` |" in text, key
    for needle in ("answered_by", "effect_basis", "prompt_ref", "prompt_capture", "tlog-checkpoint", "tombstone",
                   "RFC 8785", "[never captured]", "HARMLESS_HEADER_NAMES", "latin1", "torn-<ns>",
                   "Sec-WebSocket-Key", "discord.com/api/webhooks", "grant_type="):
        assert needle in text, needle
    # every document it names exists in the tree
    for ref in re.findall(r"`((?:docs|journal|tests)/[\w./-]+)`", text):
        assert (ROOT / ref).exists(), ref


def test_mcp_help_says_it_inline_and_points_to_no_file():
    r = broker("mcp", "--help")
    assert r.returncode == 0
    assert ".md" not in r.stdout and "docs/" not in r.stdout
    for needle in ("readOnlyHint", "--effects", "absolute path", "recorded"):
        assert needle in r.stdout, needle


@pytest.mark.parametrize("doc", ["README.md", "docs/mcp.md"])
def test_mcp_client_examples_use_absolute_paths(doc):
    text = (ROOT / doc).read_text()
    blocks = [b for b in re.findall(r"```json\n(.*?)```", text, re.S) if "mcpServers" in b or '"servers"' in b]
    assert blocks
    for block in blocks:
        config = json.loads(block)
        for server in (config.get("mcpServers") or config["servers"]).values():
            if "url" in server:
                continue
            assert server["command"].startswith("/")
            args = server["args"]
            first = args.index("--") + 1 if "--" in args else next(i for i, a in enumerate(args) if a.startswith("/")
                                                                   and args[i - 1] not in ("--vault",))
            assert args[first].startswith("/"), args


def test_a_port_in_use_is_one_broker_line(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = broker("run", "--vault", str(tmp_path / "v"), "--confdir", str(tmp_path / "conf"),
                   "--listen", f"127.0.0.1:{port}")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert f"127.0.0.1:{port}" in lines[0] and "already in use" in lines[0] and "--listen" in lines[0]
    assert "--mode" not in r.stderr and "Traceback" not in r.stderr


def test_the_wrong_seal_key_is_one_clear_line(tmp_path):
    r = broker("keygen", "--out", str(tmp_path / "k"))
    assert r.returncode == 0
    secret = (tmp_path / "k" / "seal-key.key").read_text().strip()
    (tmp_path / "v" / "journal").mkdir(parents=True)
    r = broker("verify", "--vault", str(tmp_path / "v"), "--seal-key", str(tmp_path / "k" / "seal-key.key"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "private signer key" in r.stderr and "vkey" in r.stderr and "unpack" not in r.stderr
    assert secret not in r.stderr and secret.rsplit("+", 1)[-1] not in r.stderr  # nothing of the key itself
    r = broker("seal", "--vault", str(tmp_path / "v"), "--key", str(tmp_path / "k" / "seal-key.vkey"))
    assert r.returncode == 2 and "is a verifier key" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    (tmp_path / "junk.vkey").write_text("one two\n")
    r = broker("verify", "--vault", str(tmp_path / "v"), "--seal-key", str(tmp_path / "junk.vkey"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "unpack" not in r.stderr


@pytest.mark.e2e
def test_run_verbose_prints_one_line_per_recorded_call(tmp_path):
    import ssl

    import httpx

    from tests.support.broker_harness import BrokerProcess
    from tests.support.upstreams import Upstream

    with Upstream() as up, BrokerProcess(tmp_path, up, "-v", "--session", "watch") as b:
        with httpx.Client(proxy=b.proxy_url("watch", "me"), verify=ssl.create_default_context(cafile=b.ca),
                          timeout=60) as c:
            assert c.get("https://gmail.googleapis.com/gmail/v1/users/me/labels",
                         headers={"Authorization": "Bearer ya29.secret-token-0"}).status_code == 200
            assert c.post("https://slack.com/api/chat.postMessage", json={"channel": "C1", "text": "hi"},
                          params={"token": "xoxb-1-2-secret"}).status_code == 200
        b.entries("watch", 2)
        b.stop()
        out = b.output.decode(errors="replace")
    lines = [line for line in out.splitlines() if "recorded seq=" in line]
    assert lines == [
        "broker: recorded seq=1 session=watch connector=gmail effect=read GET 200 "
        "https://gmail.googleapis.com/gmail/v1/users/me/labels",
        "broker: recorded seq=2 session=watch connector=slack effect=write POST 200 "
        "https://slack.com/api/chat.postMessage?token=[never%20captured]",
    ], out
    assert "secret" not in out
    # mitmproxy's connection events are not what -v prints
    assert not any(w in out.lower() for w in ("client connect", "server connect", "client disconnect"))


def test_show_columns_follow_its_help_and_stay_aligned(tmp_path):
    from journal.record import Recorder

    rec = Recorder(tmp_path / "v")
    for url, connector in (("https://gmail.googleapis.com/gmail/v1/users/me/labels", None),
                           ("https://tools.example.com/v1/items", "a-very-long-connector-name-indeed"),
                           ("https://gmail.googleapis.com/gmail/v1/users/me/messages/1/trash", None)):
        method = "POST" if url.endswith("trash") else "GET"
        rec.report_call(session="s", agent="a", principal="p", method=method, url=url, status=200,
                        connector=connector)
    rec.close()
    r = broker("show", "--vault", str(tmp_path / "v"), "s")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3
    assert len({line.index("https://") for line in lines}) == 1  # every column padded to its widest value
    help_text = " ".join(broker("show", "--help").stdout.split())
    assert "seq, time, gap, connector, effect, capture, method, status, URL" in help_text
    cols = [re.split(r"\s{2,}", line.strip()) for line in lines]
    assert [c[0] for c in cols] == ["1", "2", "3"]
    assert [c[3:] for c in cols] == [
        ["gmail", "read", "agent", "GET", "200", "https://gmail.googleapis.com/gmail/v1/users/me/labels"],
        ["a-very-long-connector-name-indeed", "read", "agent", "GET", "200", "https://tools.example.com/v1/items"],
        ["gmail", "write", "agent", "POST", "200", "https://gmail.googleapis.com/gmail/v1/users/me/messages/1/trash"],
    ]


def test_top_level_help_summaries_are_whole():
    r = broker("--help")
    commands = r.stdout.split("Commands:", 1)[1]
    assert "..." not in commands
    names = {line.split()[0] for line in commands.splitlines() if line.startswith("  ") and line.split()}
    assert {"run", "env", "mcp", "verify", "sessions", "show", "replay", "revert-plan", "seal", "keygen"} <= names


@pytest.mark.e2e
def test_demo_agent_leaves_no_ca_key_in_the_temp_folder(tmp_path):
    """Every run of scripts/demo_agent.py (and so of the test suite) removes its broker-demo-* folder,
    which holds a CA private key, also when the demo fails."""
    import os

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    demo = [sys.executable, str(ROOT / "scripts" / "demo_agent.py")]
    ok = subprocess.run(demo, capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "demo: intact (4 entries)" in ok.stdout
    assert list(tmp.glob("broker-demo-*")) == []
    (tmp_path / "not-a-dir").write_text("x")
    bad = subprocess.run([*demo, "--vault", str(tmp_path / "not-a-dir")], capture_output=True, text=True,
                         timeout=180, env=env, cwd=tmp_path)
    assert bad.returncode != 0
    assert list(tmp.glob("broker-demo-*")) == []


def test_env_prints_httplib2_ca_and_says_what_proxy_variables_cannot_do(tmp_path):
    r = broker("env", "--listen", "127.0.0.1:9999", "--confdir", str(tmp_path), "--session", "s", "--agent", "a")
    assert r.returncode == 0, r.stderr
    exports = dict(line.removeprefix("export ").split("=", 1) for line in r.stdout.splitlines())
    assert exports["HTTPLIB2_CA_CERTS"] == exports["SSL_CERT_FILE"]  # google-api-python-client reads this one
    note = " ".join(line.lstrip("# ") for line in r.stderr.splitlines())
    assert all(line.startswith("# ") for line in r.stderr.splitlines())
    for needle in ("Node 20", "fetch", "httplib2", "PySocks", "broker exec"):
        assert needle in note, needle
    # the output still evals in a POSIX shell
    shell = subprocess.run(["sh", "-c", 'eval "$(cat)"; printf %s "$HTTPLIB2_CA_CERTS"'], input=r.stdout,
                           capture_output=True, text=True, timeout=30)
    assert shell.stdout == exports["HTTPLIB2_CA_CERTS"]


def test_mcp_doc_does_not_promise_node_20_fetch_goes_through_the_proxy():
    text = " ".join((ROOT / "docs" / "mcp.md").read_text().split())
    assert "NODE_USE_ENV_PROXY=1` makes Node's built-in `fetch` use the proxy)" not in text
    assert "Node 20" in text and "Node 24" in text


def test_version_and_help_load_no_command_module():
    """`broker --version` and `broker --help` import the group alone, not the journal library."""
    probe = ("import sys; from click.testing import CliRunner; from broker.cli import cli; "
             "r = [CliRunner().invoke(cli, a) for a in (['--version'], ['--help'])]; "
             "assert all(x.exit_code == 0 for x in r), [x.output for x in r]; "
             "print(sorted(m for m in sys.modules if m.startswith(('journal', 'mitmproxy', 'mcp'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    assert set(ast.literal_eval(out.stdout)) <= {"journal", "journal.errors"}  # the error types exit_codes maps
