"""`broker exec`: real clients that ignore proxy variables, run in the namespace, are recorded; the
rest of their egress is refused and counted; nothing is left behind (exit, SIGTERM, a crash).

Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iptables; CI runs as root and runs these. The
fake upstreams listen on the host's loopback; inside the namespace their host names resolve (via
--resolve) to the namespace's own address, so no test traffic can go anywhere else.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from broker.exec import capabilities, cleanup
from broker.exec.synthetic_names import SYNTHETIC_V4
from journal.reader import iter_entries
from journal.vault import Vault
from journal.verify import verify_session
from tests.support.broker_harness import BIN
from tests.support.exec_user import stdlib_python, usable_by_others
from tests.support.upstreams.server import Upstream

WHY_NOT = capabilities.missing()
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(WHY_NOT is not None, reason=f"needs root: {WHY_NOT}")]
GOOGLE_CANARY = "ya29.CANARY1exec1CANARY1exec1CANARY1exec1canary"
SLACK_CANARY = "xoxb-3333333333-4444444444-EXECcanaryEXECcanaryEXEC"
GITHUB_CANARY = "ghp_EXECcanary0EXECcanary0EXECcanary0EXEC1"
RESOLVED = ("gmail.googleapis.com", "slack.com", "api.github.com", "www.googleapis.com", "oauth2.googleapis.com")


# The test environment's Python (its packages: google-api-python-client, ...) when nobody can run it;
# else COMMAND runs as root (--as-root: still no capabilities, in its own namespaces, the evidence hidden).
VENV_PYTHON_OPTIONS: tuple[str, ...] = () if usable_by_others(sys.executable) else ("--as-root",)
# A Python nobody can run, for scripts that need only the standard library.
STDLIB_PYTHON = stdlib_python()


@pytest.fixture(scope="module")
def upstream():
    with Upstream() as up:
        yield up


def exec_argv(tmp: Path, up: Upstream, *options: str, session: str = "s1") -> list[str]:
    """COMMAND runs as nobody with a private /tmp: the test's directory (its scripts) is bound in and
    made readable; the vault and confdir under it stay hidden from COMMAND all the same."""
    resolve = [a for h in RESOLVED for a in ("--resolve", f"{h}=127.0.0.1:{up.port}")]
    tmp.chmod(0o755)
    return [str(BIN / "broker"), "exec", "--vault", str(tmp / "vault"), "--confdir", str(tmp / "mitm"),
            "--session", session, "--agent", "exec-test", "--upstream-ca", up.ca_pem, *resolve,
            "--bind", str(tmp), *options, "--"]


def run_exec(tmp: Path, up: Upstream, command: list[str], *options: str, session: str = "s1",
             timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*exec_argv(tmp, up, *options, session=session), *command], capture_output=True,
                          text=True, timeout=timeout, cwd=tmp)


def entries(tmp: Path, session: str) -> list[dict]:
    """The session's entries, without the MCP shim's records of tools/list answers."""
    vault = Vault(tmp / "vault")
    assert verify_session(vault, session).intact
    return [e for e in iter_entries(vault, session) if e["request"]["method"] != "tools/list"]


def vault_bytes(tmp: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((tmp / "vault").rglob("*")) if p.is_file())


def owned_state(pid: int) -> list[Path]:
    """The state files of the namespaces broker exec process `pid` made."""
    found = []
    for path in cleanup.state_dir().glob(f"{cleanup.NAME_PREFIX}*.json"):
        try:
            if json.loads(path.read_text()).get("pid") == pid:
                found.append(path)
        except (OSError, ValueError):
            continue
    return found


def command_pids(name: str, program: str) -> list[int]:
    """The processes in namespace `name` running `program` (not the set-up's short-lived iptables)."""
    found = []
    for pid in cleanup.namespace_pids(name):
        try:
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        except OSError:
            continue
        if Path(argv0).name == program:
            found.append(pid)
    return found


def wait_for_namespace(pid: int, program: str = "sleep", timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in owned_state(pid):
            name = path.stem
            if command_pids(name, program):  # the command runs in it
                return name
        time.sleep(0.05)
    raise AssertionError(f"broker exec {pid} made no namespace")


def assert_gone(name: str) -> None:
    assert not (cleanup.NETNS_DIR / name).exists()
    assert not (cleanup.ETC_NETNS / name).exists()
    assert not (cleanup.state_dir() / f"{name}.json").exists()


GOOGLE_CLIENT = textwrap.dedent(f"""
    import importlib.util, sys
    assert importlib.util.find_spec("socks") is None, "PySocks is installed"
    from google.oauth2.credentials import Credentials
    from googleapiclient.discovery import build
    gmail = build("gmail", "v1", credentials=Credentials(token="{GOOGLE_CANARY}"), cache_discovery=False)
    print("google", gmail.users().labels().list(userId="me").execute()["labels"][0]["id"])
""")
HTTP_CLIENT = textwrap.dedent(f"""
    import http.client, ssl
    c = http.client.HTTPSConnection("api.github.com", context=ssl.create_default_context())
    c.request("POST", "/repos/acme/widgets/issues", body='{{"title": "from exec"}}',
              headers={{"Authorization": "token {GITHUB_CANARY}", "User-Agent": "t",
                       "Content-Type": "application/json"}})
    print("http.client", c.getresponse().status)
""")
NODE_FETCH = (
    "fetch('https://slack.com/api/chat.postMessage', {method: 'POST', headers: {authorization: 'Bearer "
    + SLACK_CANARY + "', 'content-type': 'application/json'}, body: JSON.stringify({channel: 'C0GENERAL', "
    "text: 'from node'})}).then(r => r.json()).then(j => { console.log('node', j.ok); process.exit(j.ok ? 0 : 1) })"
)


def test_clients_that_ignore_proxy_variables_are_recorded(tmp_path: Path, upstream: Upstream) -> None:
    if shutil.which("node") is None:
        pytest.fail("node is missing (.ci/run installs Debian's nodejs)")
    (tmp_path / "google_client.py").write_text(GOOGLE_CLIENT)
    (tmp_path / "http_client.py").write_text(HTTP_CLIENT)
    script = tmp_path / "agent.sh"
    script.write_text(textwrap.dedent(f"""\
        set -e
        env | grep -i '_proxy=' && exit 90
        curl -sS --fail -o /dev/null -w 'curl %{{http_code}}\\n' -H 'Authorization: Bearer {GOOGLE_CANARY}' \\
          https://gmail.googleapis.com/gmail/v1/users/me/messages/{upstream_msg()}/trash -X POST
        node -e "{NODE_FETCH}"
        {sys.executable} google_client.py
        {sys.executable} http_client.py
        exit 7
    """))
    before = len(upstream.requests)
    r = run_exec(tmp_path, upstream, ["sh", str(script)], "--no-proxy-env", *VENV_PYTHON_OPTIONS)
    assert r.returncode == 7, r.stdout + r.stderr
    assert r.stdout.split("\n")[:4] == ["curl 200", "node true", "google INBOX", "http.client 201"], r.stdout
    got = [(e["connector"], e["effect"], e["request"]["method"], e["request"]["url"].split("?")[0],
            e["response"]["status"]) for e in entries(tmp_path, "s1")]
    assert got == [
        ("gmail", "write", "POST", f"https://gmail.googleapis.com/gmail/v1/users/me/messages/{upstream_msg()}/trash",
         200),
        ("slack", "write", "POST", "https://slack.com/api/chat.postMessage", 200),
        ("gmail", "read", "GET", "https://gmail.googleapis.com/gmail/v1/users/me/labels", 200),
        ("github", "write", "POST", "https://api.github.com/repos/acme/widgets/issues", 201),
    ]
    assert all(e["agent"] == "exec-test" and e["capture"] == "broker" for e in entries(tmp_path, "s1"))
    # the upstream saw each call under its own name (the broker connected to the host named, not an address)
    seen = {(q["host"], q["sni"]) for q in upstream.requests[before:]}
    assert {("gmail.googleapis.com", "gmail.googleapis.com"), ("slack.com", "slack.com"),
            ("api.github.com", "api.github.com")} <= seen
    blob = vault_bytes(tmp_path) + r.stdout.encode() + r.stderr.encode()
    for canary in (GOOGLE_CANARY, SLACK_CANARY, GITHUB_CANARY):
        assert canary.encode() not in blob
    assert "nothing refused" in r.stderr


def upstream_msg() -> str:
    from tests.support.upstreams import gmail

    return gmail.MSG_INVOICE


def test_proxy_variables_for_clients_that_honour_them(tmp_path: Path, upstream: Upstream) -> None:
    """With the proxy variables, curl goes through the broker's proxy listener (session from the URL)."""
    r = run_exec(tmp_path, upstream, ["sh", "-c", "test -n \"$HTTPS_PROXY\" && curl -sS --fail -o /dev/null "
                                      "https://api.github.com/repos/acme/widgets"], session="s-proxy")
    assert r.returncode == 0, r.stderr
    (e,) = entries(tmp_path, "s-proxy")
    assert (e["connector"], e["effect"], e["response"]["status"]) == ("github", "read", 200)


PROBE = textwrap.dedent("""
    import errno, socket, sys, time
    t = time.monotonic()
    try:
        socket.create_connection(("192.0.2.10", 5432), timeout=20)
    except ConnectionRefusedError:
        print("tcp refused")
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.sendto(b"x", ("192.0.2.10", 9999))
    except PermissionError:
        print("udp refused")
    if socket.has_ipv6 and "ipv6" in sys.argv:
        try:
            socket.create_connection(("2001:db8::10", 5432), timeout=20)
        except ConnectionRefusedError:
            print("tcp6 refused")
    print("seconds", time.monotonic() - t < 10)
""")


def test_other_egress_is_refused_at_once_and_counted(tmp_path: Path, upstream: Upstream) -> None:
    (tmp_path / "probe.py").write_text(PROBE)
    ipv6 = capabilities.has_ipv6()
    r = run_exec(tmp_path, upstream, [STDLIB_PYTHON, "probe.py", *(["ipv6"] if ipv6 else [])])
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["tcp", "refused", "udp", "refused", *(["tcp6", "refused"] if ipv6 else []),
                                "seconds", "True"]
    tcp = 2 if ipv6 else 1
    assert f"refused {tcp + 1} packet(s) (tcp {tcp}, udp 1)" in r.stderr
    assert "refused tcp 192.0.2.10:5432" in r.stderr and "refused udp 192.0.2.10:9999" in r.stderr
    if ipv6:
        assert "refused tcp [2001:db8::10]:5432" in r.stderr


def test_the_command_cannot_change_the_rules_or_leave(tmp_path: Path, upstream: Upstream) -> None:
    r = run_exec(tmp_path, upstream, ["sh", "-c", "iptables -F OUTPUT 2>/dev/null && echo flushed; "
                                      "nsenter --net=/proc/1/ns/net true 2>/dev/null && echo escaped; "
                                      "grep CapEff /proc/self/status"])
    assert r.returncode == 0, r.stderr
    assert "flushed" not in r.stdout and "escaped" not in r.stdout
    assert r.stdout.split() == ["CapEff:", "0000000000000000"]


def test_names_resolve_inside_as_outside(tmp_path: Path, upstream: Upstream) -> None:
    name = "deb.debian.org"
    try:
        outside = sorted({a[4][0] for a in socket.getaddrinfo(name, 443, socket.AF_INET, socket.SOCK_STREAM)})
    except OSError:
        pytest.skip(f"{name} does not resolve on this machine, so there is nothing to compare")
    r = run_exec(tmp_path, upstream, ["sh", "-c", f"getent ahostsv4 {name} | awk '{{print $1}}' | sort -u; echo --; "
                                      "getent hosts gmail.googleapis.com"])
    assert r.returncode == 0, r.stderr
    inside, hosts = r.stdout.split("--\n")
    assert inside.split() == outside  # through the DNS relay to the host's name servers
    assert ipaddress.ip_address(hosts.split()[0]) in SYNTHETIC_V4  # --resolve: a synthetic address (public)
    assert "gmail.googleapis.com" in hosts.split()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_is_passed_on_and_everything_is_removed(tmp_path: Path, upstream: Upstream, sig: int) -> None:
    proc = subprocess.Popen([*exec_argv(tmp_path, upstream), "sleep", "60"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        name = wait_for_namespace(proc.pid)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + sig, err  # the command's: sleep was ended by the signal passed on
    assert_gone(name)
    assert "Traceback" not in err


def test_a_crash_is_cleaned_up_at_the_next_start(tmp_path: Path, upstream: Upstream) -> None:
    proc = subprocess.Popen([*exec_argv(tmp_path, upstream), "sleep", "300"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        name = wait_for_namespace(proc.pid)
        (orphan,) = command_pids(name, "sleep")
    finally:
        proc.kill()  # the broker dies; its command lives on in the namespace, with no way out
        proc.wait()
    assert (cleanup.NETNS_DIR / name).exists()
    r = run_exec(tmp_path, upstream, ["true"])
    assert r.returncode == 0, r.stderr
    assert_gone(name)
    assert f"removing namespace {name}" in r.stderr
    deadline = time.monotonic() + 10
    while Path(f"/proc/{orphan}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    status = Path(f"/proc/{orphan}/status")
    assert not status.exists() or "zombie" in status.read_text()


def test_two_at_once(tmp_path: Path, upstream: Upstream) -> None:
    procs = []
    tmp_path.chmod(0o755)
    go = tmp_path / "go"
    for i in range(2):
        d = tmp_path / f"run{i}"
        d.mkdir()
        # each waits until both are inside their namespaces (the test says go: COMMAND writes nothing of the
        # host's, its /tmp is its own), so the two runs overlap
        cmd = ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; "
               "curl -sS --fail -o /dev/null https://api.github.com/repos/acme/widgets; echo $(hostname)"]
        argv = exec_argv(d, upstream, "--no-proxy-env", "--bind", str(tmp_path))
        procs.append((d, subprocess.Popen([*argv, *cmd], cwd=d,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    names = [wait_for_namespace(p.pid, "sh") for _, p in procs]
    assert names[0] != names[1]
    go.touch()
    for d, p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        (e,) = entries(d, "s1")
        assert (e["connector"], e["response"]["status"]) == ("github", 200)
    for name in names:
        assert_gone(name)


def test_fails_closed_without_capabilities(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    r = subprocess.run(["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--",
                        str(BIN / "broker"), "exec", "--vault", str(tmp_path / "vault"), "--",
                        "touch", str(marker)], capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "CAP_NET_ADMIN" in r.stderr and "not run" in r.stderr
    assert not marker.exists()


DIRECT_FETCH_SERVER = textwrap.dedent("""
    import http.client, ssl, urllib.parse
    from mcp.server import MCPServer

    server = MCPServer("direct-fetch")

    @server.tool()
    def fetch(url: str) -> str:
        \"\"\"GET url with http.client, which ignores the proxy variables.\"\"\"
        u = urllib.parse.urlsplit(url)
        c = http.client.HTTPSConnection(u.hostname, context=ssl.create_default_context())
        c.request("GET", u.path)
        return str(c.getresponse().status)

    server.run("stdio")
""")


def test_mcp_through_broker_records_a_server_that_ignores_proxy_variables(tmp_path: Path, upstream: Upstream) -> None:
    import asyncio

    from mcp import Client, StdioServerParameters

    from tests.support.mcp_servers.harness import REPO, WAIT, shim_argv

    server = tmp_path / "direct_fetch.py"
    server.write_text(DIRECT_FETCH_SERVER)
    resolve = [a for h in RESOLVED for a in ("--resolve", f"{h}=127.0.0.1:{upstream.port}")]
    tmp_path.chmod(0o755)  # the server runs as nobody (or --as-root) and sees tmp_path through --bind
    argv = shim_argv(tmp_path / "vault", "--through-broker", "--confdir", str(tmp_path / "mitm"), "--upstream-ca",
                     upstream.ca_pem, *resolve, "--bind", str(tmp_path), *VENV_PYTHON_OPTIONS)

    async def run() -> str:
        params = StdioServerParameters(command=argv[0], args=[*argv[1:], "--", sys.executable, str(server)],
                                       cwd=str(REPO))
        async with Client(params, read_timeout_seconds=WAIT) as c:
            r = await c.call_tool("fetch", {"url": "https://api.github.com/repos/acme/widgets"})
            return r.content[0].text

    assert asyncio.run(run()) == "200"  # http.client: no proxy; so the namespace sent it to the broker
    got = entries(tmp_path, "s1")
    assert [(e["capture"], e["connector"], e["effect"], (e["mcp"] or {}).get("params", {}).get("name"))
            for e in got] == [("broker", "github", "read", "fetch")]

# A Node MCP server (no SDK: JSON-RPC lines on stdio) whose tool calls Node's built-in fetch, which
# ignores HTTPS_PROXY: the case the issue reports as going around the embedded broker.
NODE_MCP_SERVER = r"""
const rl = require('readline').createInterface({input: process.stdin});
const send = (m) => process.stdout.write(JSON.stringify(m) + '\n');
rl.on('line', async (line) => {
  const m = JSON.parse(line);
  if (m.id === undefined) return;
  if (m.method === 'initialize') {
    send({jsonrpc: '2.0', id: m.id, result: {protocolVersion: '2025-11-25', capabilities: {tools: {}},
          serverInfo: {name: 'node-fetch', version: '1'}}});
  } else if (m.method === 'tools/list') {
    send({jsonrpc: '2.0', id: m.id, result: {tools: [{name: 'fetch', inputSchema: {type: 'object',
          properties: {url: {type: 'string'}}, required: ['url']}}]}});
  } else if (m.method === 'tools/call') {
    try {
      const r = await fetch(m.params.arguments.url);
      send({jsonrpc: '2.0', id: m.id, result: {content: [{type: 'text', text: String(r.status)}]}});
    } catch (e) {
      send({jsonrpc: '2.0', id: m.id, result: {isError: true, content: [{type: 'text', text: String(e.cause || e)}]}});
    }
  } else {
    send({jsonrpc: '2.0', id: m.id, error: {code: -32601, message: 'Method not found'}});
  }
});
"""


def test_mcp_through_broker_records_a_node_server_using_builtin_fetch(tmp_path: Path, upstream: Upstream) -> None:
    import asyncio

    from mcp import Client, StdioServerParameters

    from tests.support.mcp_servers.harness import REPO, WAIT, shim_argv

    node = shutil.which("node")
    if node is None:
        pytest.fail("node is missing (.ci/run installs Debian's nodejs)")
    server = tmp_path / "server.js"
    server.write_text(NODE_MCP_SERVER)
    resolve = [a for h in RESOLVED for a in ("--resolve", f"{h}=127.0.0.1:{upstream.port}")]
    tmp_path.chmod(0o755)  # the server runs as nobody (or --as-root) and sees tmp_path through --bind
    argv = shim_argv(tmp_path / "vault", "--through-broker", "--confdir", str(tmp_path / "mitm"), "--upstream-ca",
                     upstream.ca_pem, *resolve, "--bind", str(tmp_path), *VENV_PYTHON_OPTIONS)

    async def run() -> str:
        params = StdioServerParameters(command=argv[0], args=[*argv[1:], "--", node, str(server)], cwd=str(REPO))
        async with Client(params, read_timeout_seconds=WAIT) as c:
            r = await c.call_tool("fetch", {"url": "https://gmail.googleapis.com/gmail/v1/users/me/labels"})
            return r.content[0].text

    assert asyncio.run(run()) == "200"
    got = entries(tmp_path, "s1")
    assert [(e["capture"], e["connector"], e["effect"], (e["mcp"] or {}).get("params", {}).get("name"))
            for e in got] == [("broker", "gmail", "read", "fetch")]


@pytest.mark.skipif(not capabilities.has_ipv6(), reason="this kernel has no IPv6")
def test_ipv6_connections_are_captured_too(tmp_path: Path, upstream: Upstream) -> None:
    r = run_exec(tmp_path, upstream, ["curl", "-sS", "--fail", "-o", "/dev/null", "--connect-to",
                                      "api.github.com:443:[2001:db8::5]:443", "https://api.github.com/user"],
                 "--no-proxy-env", session="s-v6")
    assert r.returncode == 0, r.stderr
    (e,) = entries(tmp_path, "s-v6")
    assert (e["connector"], e["request"]["url"], e["response"]["status"]) == (
        "github", "https://api.github.com/user", 200)


def test_listeners_inside_are_tcp_sockets_so_asyncio_sets_nodelay() -> None:
    """asyncio sets TCP_NODELAY on an accepted socket only when its proto is IPPROTO_TCP; a listener
    made with proto 0 cost every response a delayed ACK (40 ms per call, measured by bench.exec_bench)."""
    import asyncio

    from broker.exec.sandbox import Sandbox

    async def run() -> list[int]:
        sandbox = Sandbox()
        await sandbox.open()
        try:
            from broker.proxy import listener

            return [s.proto for socks in listener._PREMADE.values() for s in socks if s.type == socket.SOCK_STREAM]
        finally:
            await sandbox.close()

    protos = asyncio.run(run())
    assert protos and set(protos) == {socket.IPPROTO_TCP}


def test_user_option_runs_the_command_as_that_user_with_the_ca_readable(tmp_path: Path, upstream: Upstream) -> None:
    tmp_path.chmod(0o755)
    r = run_exec(tmp_path, upstream, ["sh", "-c", "id -u; curl -sS --fail -o /dev/null https://api.github.com/user"],
                 "--user", "nobody", "--no-proxy-env", session="s-user")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(__import__("pwd").getpwnam("nobody").pw_uid)]
    (e,) = entries(tmp_path, "s-user")
    assert (e["connector"], e["response"]["status"]) == ("github", 200)
    r = run_exec(tmp_path, upstream, ["true"], "--user", "no-such-user-here")
    assert r.returncode == 2 and "no such user" in r.stderr and "refused" not in r.stderr
