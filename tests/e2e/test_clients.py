"""docs/clients.md, row by row: each client runs for real, with exactly the settings `broker env` prints (plus
the one the row names), through a real `broker run`, and the test checks the row's claim.

- A row with a setting: with it, the call is recorded (under the session the proxy URL names, when the row
  says the client sends the proxy credentials).
- A row that says the client ignores the proxy variables: without the setting, the call reaches a plain
  HTTP server on loopback directly and the broker records nothing. A control (`requests`, which honours
  the variables) sends the same kind of call and is recorded, so the negative rows cannot pass by accident.

Node packages (undici, @octokit/rest, openai) are installed once into a cache outside the repository
($BROKER_NODE_CLIENTS, default ~/.cache/broker-node-clients); their rows are skipped, saying why, when node,
npm or the registry is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from broker.exec.environment import client_environment
from tests.support.broker_harness import BrokerProcess
from tests.support.upstreams import Upstream

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
NODE_PACKAGES = ["undici@7", "@octokit/rest@22", "openai@6"]


class _Direct(BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        type(self).seen.append(self.path)
        body = b'{"data": [], "login": "direct"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Iterator[dict]:
    tmp = tmp_path_factory.mktemp("clients")
    direct = ThreadingHTTPServer(("127.0.0.1", 0), _Direct)
    thread = threading.Thread(target=direct.serve_forever, daemon=True)
    thread.start()
    with Upstream() as up, BrokerProcess(tmp, up) as b:
        r = subprocess.run([str(Path(sys.executable).parent / "broker"), "env", "--listen", f"127.0.0.1:{b.port}",
                            "--confdir", str(b.confdir)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        exported = dict(line.removeprefix("export ").split("=", 1) for line in r.stdout.splitlines())
        bundle = exported["SSL_CERT_FILE"].strip("'")
        yield {"broker": b, "up": up, "bundle": bundle, "tmp": tmp, "direct": f"http://127.0.0.1:{direct.server_port}",
               "stderr": r.stderr}
    direct.shutdown()


def env_for(setup: dict, session: str) -> dict[str, str]:
    """What `eval "$(broker env --session SESSION --agent clients-test)"` gives the client."""
    b = setup["broker"]
    return client_environment(os.environ, setup["bundle"], b.proxy_url(session, "clients-test"))


def recorded(setup: dict, session: str, count: int = 1) -> list[dict]:
    return setup["broker"].entries(session, count)


def all_urls(setup: dict) -> list[str]:
    from journal.reader import iter_entries
    from journal.vault import Vault

    vault = Vault(setup["broker"].vault)
    return [e["request"]["url"] for s in vault.sessions() for e in iter_entries(vault, s)]


def run_python(setup: dict, session: str, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                          env=env_for(setup, session), cwd=setup["tmp"])


def assert_direct_and_unrecorded(setup: dict, path: str, r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 0, r.stdout + r.stderr
    assert path in _Direct.seen, (path, r.stdout, r.stderr)  # the call was made, straight to the server
    assert not [u for u in all_urls(setup) if path in u]  # and the broker never saw it


# -- Python -------------------------------------------------------------------------------------------------


def test_control_requests_honours_the_variables_for_the_same_kind_of_call(setup):
    url = f"{setup['direct']}/control"
    r = run_python(setup, "py-control", f"import requests; print(requests.get({url!r}).status_code)")
    assert r.returncode == 0, r.stderr
    assert [e["request"]["url"] for e in recorded(setup, "py-control")] == [f"{setup['direct']}/control"]


@pytest.mark.parametrize(("client", "code"), [
    ("requests", "import requests; print(requests.get(URL).status_code)"),
    ("httpx", "import httpx; print(httpx.get(URL).status_code)"),
    ("urllib", """
        import urllib.error, urllib.request
        try:
            print(urllib.request.urlopen(URL).status)
        except urllib.error.HTTPError as answer:  # the fake GitHub has no such path: recorded all the same
            print(answer.code)
     """),
    ("aiohttp-trust-env", """
        import asyncio, aiohttp
        async def main():
            async with aiohttp.ClientSession(trust_env=True) as s, s.get(URL) as r:
                print(r.status)
        asyncio.run(main())
     """),
    ("urllib3-proxymanager-auth", """
        import os, urllib.parse, urllib3
        proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
        pm = urllib3.ProxyManager(os.environ["HTTPS_PROXY"],
                                  proxy_headers=urllib3.make_headers(proxy_basic_auth=f"{proxy.username}:{proxy.password}"))
        print(pm.request("GET", URL).status)
     """),
    ("pycurl-cainfo", """
        import io, os, pycurl
        c = pycurl.Curl(); buf = io.BytesIO()
        c.setopt(pycurl.URL, URL); c.setopt(pycurl.WRITEDATA, buf)
        c.setopt(pycurl.CAINFO, os.environ["SSL_CERT_FILE"])
        c.setopt(pycurl.PROXYAUTH, pycurl.HTTPAUTH_BASIC)
        c.perform(); print(c.getinfo(pycurl.RESPONSE_CODE))
     """),
])
def test_python_clients_with_the_documented_setting_are_recorded(setup, client, code):
    url = f"https://api.github.com/clients/{client}"
    r = run_python(setup, client, f"URL = {url!r}\n" + textwrap.dedent(code))
    assert r.returncode == 0, r.stdout + r.stderr
    (e,) = recorded(setup, client)
    assert e["request"]["url"] == url and e["agent"] == "clients-test"  # the proxy URL's credentials were sent


def test_urllib3_proxymanager_without_proxy_headers_does_not_send_the_credentials(setup):
    url = "https://api.github.com/clients/urllib3-noauth"
    r = run_python(setup, "urllib3-noauth", f"""
        import os, urllib3
        print(urllib3.ProxyManager(os.environ["HTTPS_PROXY"]).request("GET", {url!r}).status)
    """)
    assert r.returncode == 0, r.stderr
    assert recorded(setup, "urllib3-noauth", 0) == []
    (e,) = [e for e in recorded(setup, "default", 0) if e["request"]["url"] == url]  # recorded, but unnamed
    assert e["agent"] == "unknown"


def test_pycurl_without_cainfo_fails_on_the_ca(setup):
    r = run_python(setup, "pycurl-plain", """
        import io, pycurl
        c = pycurl.Curl(); c.setopt(pycurl.URL, "https://api.github.com/clients/pycurl-plain")
        c.setopt(pycurl.WRITEDATA, io.BytesIO())
        try:
            c.perform(); print("passed")
        except pycurl.error as exc:
            print("error", exc.args[0])
    """)
    assert r.stdout.split() == ["error", str(60)], r.stdout + r.stderr  # CURLE_PEER_FAILED_VERIFICATION


@pytest.mark.parametrize(("client", "code"), [
    ("aiohttp-default", """
        import asyncio, aiohttp
        async def main():
            async with aiohttp.ClientSession() as s, s.get(URL) as r:
                print(r.status)
        asyncio.run(main())
     """),
    ("urllib3-poolmanager", "import urllib3; print(urllib3.PoolManager().request('GET', URL).status)"),
])
def test_python_clients_that_ignore_the_variables(setup, client, code):
    path = f"/ignored/{client}"
    r = run_python(setup, client, f"URL = {setup['direct'] + path!r}\n" + textwrap.dedent(code))
    assert_direct_and_unrecorded(setup, path, r)


# -- command-line clients -----------------------------------------------------------------------------------


def test_curl_with_the_variables(setup):
    url = "https://api.github.com/clients/curl"
    r = subprocess.run(["curl", "-sS", "-o", "/dev/null", url], capture_output=True, text=True, timeout=60,
                       env=env_for(setup, "curl"))
    assert r.returncode == 0, r.stderr
    assert [e["request"]["url"] for e in recorded(setup, "curl")] == [url]


def test_git_with_the_variables_sends_the_session(setup):
    """git reads HTTPS_PROXY and GIT_SSL_CAINFO; GIT_HTTP_PROXY_AUTHMETHOD=basic (exported by broker env) makes
    it send the proxy URL's credentials, so the call lands in the named session."""
    env = env_for(setup, "git")
    assert env["GIT_HTTP_PROXY_AUTHMETHOD"] == "basic"
    subprocess.run(["git", "ls-remote", "https://github.com/acme/widgets.git"], capture_output=True, timeout=60,
                   env={**env, "GIT_TERMINAL_PROMPT": "0"}, cwd=setup["tmp"])
    got = recorded(setup, "git")
    assert got and got[0]["request"]["url"].startswith("https://github.com/acme/widgets.git/info/refs")


def test_java_httpclient_ignores_the_variables(setup, tmp_path):
    if shutil.which("java") is None:
        pytest.skip("java is not installed")
    path = "/ignored/java"
    source = tmp_path / "Get.java"
    source.write_text(textwrap.dedent("""
        import java.net.URI; import java.net.http.*;
        public class Get { public static void main(String[] a) throws Exception {
            var r = HttpClient.newHttpClient().send(HttpRequest.newBuilder(URI.create(a[0])).build(),
                                                    HttpResponse.BodyHandlers.ofString());
            System.out.println(r.statusCode()); } }
    """))
    r = subprocess.run(["java", str(source), setup["direct"] + path], capture_output=True, text=True, timeout=180,
                       env=env_for(setup, "java"))
    assert_direct_and_unrecorded(setup, path, r)


# -- Node ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node_dir() -> Path:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node or npm is not installed")
    cache = Path(os.environ.get("BROKER_NODE_CLIENTS", Path.home() / ".cache" / "broker-node-clients"))
    if not all((cache / "node_modules" / name.rsplit("@", 1)[0]).is_dir() for name in NODE_PACKAGES):
        cache.mkdir(parents=True, exist_ok=True)
        if not (cache / "package.json").exists():
            (cache / "package.json").write_text('{"name": "broker-node-clients", "private": true}\n')
        r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", *NODE_PACKAGES], cwd=cache,
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            pytest.skip(f"npm install of {' '.join(NODE_PACKAGES)} failed (no registry?): {r.stderr[-500:]}")
    shutil.copy2(ROOT / "tests" / "support" / "node" / "clients.mjs", cache / "clients.mjs")
    return cache


def run_node(setup: dict, node_dir: Path, session: str, client: str, mode: str, url: str) -> dict:
    r = subprocess.run(["node", "clients.mjs", client, mode, url], capture_output=True, text=True, timeout=120,
                       cwd=node_dir, env=env_for(setup, session))
    assert r.returncode == 0 and r.stdout.strip(), r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def node_major() -> int:
    return int(subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip().lstrip("v")
               .split(".")[0])


@pytest.mark.parametrize(("client", "url", "path"), [
    ("fetch", "https://api.github.com/clients/node-fetch", "/clients/node-fetch"),
    ("octokit", "https://api.github.com", "/user"),
    ("openai", "https://api.openai.com/v1", "/v1/models"),
])
def test_node_clients_with_undici_envhttpproxyagent_are_recorded(setup, node_dir, client, url, path):
    session = f"node-{client}"
    got = run_node(setup, node_dir, session, client, "configured", url)
    assert got["status"] is not None or got["ok"], got
    (e,) = recorded(setup, session)
    assert e["request"]["url"].split("?")[0].endswith(path) and e["agent"] == "clients-test"


@pytest.mark.parametrize(("client", "suffix"), [("fetch", "/ignored/node-fetch"), ("octokit", "/ignored/octokit"),
                                               ("openai", "/ignored/openai/v1")])
def test_node_clients_as_their_readmes_show_them_ignore_the_variables_before_node_24(setup, node_dir, client, suffix):
    """NODE_USE_ENV_PROXY=1 is exported, but Node before 24 ignores it: the default fetch goes around the broker
    (Octokit and the openai SDK call it underneath)."""
    if node_major() >= 24:
        pytest.skip("Node >= 24 honours NODE_USE_ENV_PROXY: this row is about older Node")
    before = set(_Direct.seen)
    got = run_node(setup, node_dir, f"node-plain-{client}", client, "plain", setup["direct"] + suffix)
    new = set(_Direct.seen) - before
    assert new and all(p.startswith(suffix) for p in new), (got, new)  # reached the server directly
    assert not [u for u in all_urls(setup) if suffix in u]


def test_broker_env_names_every_family_that_ignores_the_variables(setup):
    note = " ".join(line.lstrip("# ") for line in setup["stderr"].splitlines())
    for family in ("Node", "Octokit", "openai Node SDK", "aiohttp", "trust_env=True", "urllib3", "PoolManager",
                   "ProxyManager", "proxy_basic_auth", "httplib2", "PySocks", "pycurl", "CAINFO", "Java",
                   "EnvHttpProxyAgent", "broker exec"):
        assert family in note, family
