"""SSRF-guarded clients under `broker exec` and `broker mcp --through-broker`: a `--resolve` name resolves
inside to a synthetic address that such a guard takes for public (broker/exec/synthetic_names.py), and
the traffic to it lands on the broker, is recorded, and cannot leave the namespace.

Test traffic never goes to a public address: the namespace has no route out but the broker, whose
upstream for every name here is the fake upstream on the host's loopback (--resolve). Needs root, like
tests/e2e/test_exec.py.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from broker.exec.synthetic_names import SYNTHETIC_V4
from tests.e2e.test_exec import RESOLVED, STDLIB_PYTHON, VENV_PYTHON_OPTIONS, WHY_NOT, entries, run_exec
from tests.support.upstreams.server import Upstream

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(WHY_NOT is not None, reason=f"needs root: {WHY_NOT}")]


@pytest.fixture(scope="module")
def upstream():
    with Upstream() as up:
        yield up


# An SSRF-guarded client as such libraries write it (advocate, mcp-server-fetch, gradio's safehttpx): resolve
# the name, refuse unless every address is public by Python's ipaddress, then connect to the address checked.
# Then the same address without a name (HTTP/1.0, no Host), another port of it, its route, and the DNS relay.
GUARDED_CLIENT = textwrap.dedent("""
    import http.client, ipaddress, json, socket, ssl, struct, subprocess, sys
    def public_or_refuse(name, port):
        addresses = sorted({a[4][0] for a in socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)})
        for a in addresses:
            ip = ipaddress.ip_address(a)
            if ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_reserved or not ip.is_global:
                raise PermissionError(f"{name} resolves to {a}: not a public address")
        return addresses[0]
    out = {}
    for name in ("api.github.com", "localhost"):
        try:
            out[name] = public_or_refuse(name, 443)
        except PermissionError as exc:
            out[name] = "refused: " + str(exc)
    address = out["api.github.com"]
    class Pinned(http.client.HTTPSConnection):  # connect to the address checked, SNI and Host the name
        def connect(self):
            raw = socket.create_connection((address, 443), timeout=20)
            self.sock = self._context.wrap_socket(raw, server_hostname=self.host)
    c = Pinned("api.github.com", context=ssl.create_default_context())
    c.request("GET", "/repos/acme/widgets")
    out["guarded"] = c.getresponse().status
    s = socket.create_connection((address, 80), timeout=20)  # no Host header: the address alone names it
    s.sendall(b"GET /nameless HTTP/1.0\\r\\n\\r\\n")
    out["nameless"] = s.recv(200).split(b"\\r\\n")[0].decode(errors="replace")
    s.close()
    try:
        socket.create_connection((address, 5432), timeout=20)
        out["5432"] = "CONNECTED"
    except OSError as exc:
        out["5432"] = type(exc).__name__
    out["route"] = subprocess.run(["ip", "route", "get", address], capture_output=True, text=True).stdout.strip()
    q = struct.pack("!HHHHHH", 9, 0x0100, 1, 0, 0, 0) + b"\\x03api\\x06github\\x03com\\x00" + struct.pack("!HH", 1, 1)
    d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    d.settimeout(5)
    d.sendto(q, ("127.0.0.1", 53))
    answer = d.recv(512)
    out["dns"] = socket.inet_ntoa(answer[-4:]) if struct.unpack("!H", answer[6:8])[0] == 1 else "no answer"
    print(json.dumps(out))
""")


def test_a_guarded_client_reaches_a_synthetic_address_which_lands_on_the_broker(tmp_path: Path,
                                                                                  upstream: Upstream) -> None:
    import ipaddress

    before = len(upstream.requests)
    r = run_exec(tmp_path, upstream, [STDLIB_PYTHON, "-c", GUARDED_CLIENT], "--no-proxy-env", session="s-ssrf")
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    address = ipaddress.ip_address(out["api.github.com"])
    assert address in SYNTHETIC_V4 and address.is_global  # public to the guard ...
    assert out["localhost"].startswith("refused: ")  # ... which is a real one
    assert out["guarded"] == 200
    assert out["dns"] == str(address)  # the relay answers the name itself, no name server asked
    assert " dev lo " in f" {out['route']} "  # the only route there is: the namespace's own loopback
    assert out["5432"] == "ConnectionRefusedError"  # not 80/443: refused, never sent
    got = entries(tmp_path, "s-ssrf")
    urls = [(e["connector"], e["request"]["method"], e["request"]["url"]) for e in got]
    assert ("github", "GET", "https://api.github.com/repos/acme/widgets") in urls, urls
    # the address alone (no Host, no SNI) stood for its name: the broker went there, by name
    assert ("github", "GET", "http://api.github.com/nameless") in urls, urls
    assert ("egress", "TCP", f"tcp://{address}:5432") in urls, urls
    assert ("dns", "DNS", "dns://api.github.com/?type=A") in urls, urls
    # landed on the broker, which sent it by name to the fake upstream (on the host's loopback)
    seen = [q for q in upstream.requests[before:] if q["path"].startswith("/repos/acme/widgets")]
    assert [(q["host"], q["sni"]) for q in seen] == [("api.github.com", "api.github.com")]


# ssrf-req-filter (npm): an http(s).Agent that refuses any address ipaddr.js does not call `unicast`.
NODE_GUARDED = textwrap.dedent("""
    const https = require('https');
    const ssrfFilter = require('ssrf-req-filter');
    const get = (url) => new Promise((resolve) => {
      https.get(url, {agent: ssrfFilter(url)}, (res) => {
        res.resume();
        res.on('end', () => resolve(String(res.statusCode)));
      }).on('error', (e) => resolve('error: ' + e.message));
    });
    (async () => {
      const lookup = await require('dns').promises.lookup('api.github.com');
      console.log(JSON.stringify({address: lookup.address,
        guarded: await get('https://api.github.com/repos/acme/widgets'),
        loopback: await get('https://localhost/')}));
    })();
""")


def _node_ssrf_filter() -> Path:
    """ssrf-req-filter installed once into a cache ($BROKER_NODE_CACHE, as tests/e2e/test_mcp_node_sdk.py)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node or npm is not installed")
    cache = Path(os.environ.get("BROKER_NODE_CACHE", Path.home() / ".cache" / "broker-node-mcp"))
    module = cache / "node_modules" / "ssrf-req-filter"
    if not module.exists():
        cache.mkdir(parents=True, exist_ok=True)
        if not (cache / "package.json").exists():
            (cache / "package.json").write_text('{"name": "broker-node-mcp", "private": true}\n')
        r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "ssrf-req-filter@1"], cwd=cache,
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0 or not module.exists():
            pytest.skip(f"npm install of ssrf-req-filter failed (no registry?): {r.stderr[-500:]}")
    return cache / "node_modules"


def test_a_node_client_with_an_ssrf_guard_is_recorded(tmp_path: Path, upstream: Upstream) -> None:
    modules = _node_ssrf_filter()
    for package in ("ssrf-req-filter", "ipaddr.js"):  # a copy COMMAND (nobody) can read, beside the script
        shutil.copytree(modules / package, tmp_path / "node_modules" / package)
    (tmp_path / "guarded.js").write_text(NODE_GUARDED)
    r = run_exec(tmp_path, upstream, ["node", str(tmp_path / "guarded.js")], "--no-proxy-env", session="s-node")
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["address"] in {str(a) for a in list(SYNTHETIC_V4)[:16]}
    assert out["guarded"] == "200", out
    assert out["loopback"].startswith("error: Call to 127.0.0.1 is blocked"), out  # the guard is on
    got = [(e["connector"], e["request"]["url"], e["response"]["status"]) for e in entries(tmp_path, "s-node")]
    assert ("github", "https://api.github.com/repos/acme/widgets", 200) in got, got


FETCHED = "https://api.github.com/repos/acme/widgets"


@pytest.mark.skipif(importlib.util.find_spec("mcp_server_fetch") is None,
                    reason="mcp-server-fetch is not installed (a test extra: pip install -e '.[test]')")
def test_mcp_server_fetch_through_the_broker_fetches_and_is_recorded(tmp_path: Path, upstream: Upstream) -> None:
    """mcp-server-fetch refuses a name that resolves to a private address (its own guard, on by default):
    under --through-broker, with no extra flag, its fetches succeed and each is a broker entry."""
    from mcp import Client, StdioServerParameters

    from tests.support.mcp_servers.harness import REPO, WAIT, shim_argv

    tmp_path.chmod(0o755)
    resolve = [a for h in RESOLVED for a in ("--resolve", f"{h}=127.0.0.1:{upstream.port}")]
    argv = shim_argv(tmp_path / "vault", "--through-broker", "--confdir", str(tmp_path / "mitm"), "--upstream-ca",
                     upstream.ca_pem, *resolve, *VENV_PYTHON_OPTIONS)
    urls = [FETCHED, "https://api.github.com/repos/acme/widgets/issues", "https://api.github.com/user"]
    before = len(upstream.requests)

    async def run() -> list[str]:
        params = StdioServerParameters(command=argv[0], args=[*argv[1:], "--", sys.executable, "-m",
                                                              "mcp_server_fetch"], cwd=str(REPO))
        texts = []
        async with Client(params, read_timeout_seconds=WAIT) as c:
            for url in urls:
                r = await c.call_tool("fetch", {"url": url, "raw": True})
                texts.append(("ERROR " if r.is_error else "") + r.content[0].text)
            r = await c.call_tool("fetch", {"url": "https://localhost/", "raw": True})  # its guard is on
            guarded = r.content[0].text
        assert r.is_error and "not a public address" in guarded, guarded
        return texts

    texts = asyncio.run(run())
    assert not [t for t in texts if t.startswith("ERROR")], texts
    assert '"acme"' in texts[0] or "widgets" in texts[0], texts[0]
    made = [q for q in upstream.requests[before:]]
    got = [e for e in entries(tmp_path, "s1") if e["capture"] == "broker"]
    pages = [e for e in got if not e["request"]["url"].endswith("/robots.txt")]
    assert [e["request"]["url"] for e in pages] == urls
    assert all((e["mcp"] or {}).get("params", {}).get("name") == "fetch" for e in pages)
    print(f"mcp-server-fetch under --through-broker: {len(got)} calls recorded / {len(made)} made "
          f"({len(pages)} pages, {len(got) - len(pages)} robots.txt)")
    assert len(got) == len(made)
