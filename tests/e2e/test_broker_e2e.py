"""End to end: real clients (curl, httpx, requests) -> a real broker subprocess (and stock mitmdump -s)
-> local TLS servers that answer like Gmail, Calendar, Drive and Slack (reached with --resolve)."""

from __future__ import annotations

import base64
import concurrent.futures
import hashlib
import json
import os
import socket
import ssl
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import requests

from journal.vault import Vault
from journal.verify import verify_session
from tests.support.broker_harness import BrokerProcess
from tests.support.upstreams import Upstream, big_body_sha256
from tests.support.upstreams.gmail import ATTACHMENT_ID, ATTACHMENT_SEED, ATTACHMENT_SIZE, MSG_INVOICE

pytestmark = pytest.mark.e2e
GMAIL = "https://gmail.googleapis.com/gmail/v1/users/me"
CAL = "https://www.googleapis.com/calendar/v3"
DRIVE = "https://www.googleapis.com/drive/v3"
SLACK = "https://slack.com/api"
UPLOAD = "https://www.googleapis.com/upload/drive/v3/files"
CANARY = "ya29.CANARY0canary0CANARY0canary0CANARY0canary"
SLACK_CANARY = "xoxb-1111111111-2222222222-CANARYcanaryCANARYcanary"


@pytest.fixture(scope="module")
def upstream():
    with Upstream() as up:
        yield up


@pytest.fixture(scope="module")
def broker(upstream, tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker"), upstream, "--session", "cli-default") as b:
        yield b


def client(b: BrokerProcess, session: str | None = "s-httpx", agent: str = "agent-httpx", **kw) -> httpx.Client:
    return httpx.Client(proxy=b.proxy_url(session, agent), verify=ssl.create_default_context(cafile=b.ca),
                        timeout=60, **kw)


def entries(b: BrokerProcess, session: str, count: int | None = None) -> list[dict]:
    return b.entries(session, count)


def curl(b: BrokerProcess, *args: str, session: str = "s-curl", agent: str = "agent-curl"):
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    return subprocess.run(
        ["curl", "-sS", "--proxy", b.proxy_url(session, agent), "--cacert", b.ca, *args],
        capture_output=True, timeout=120, env=env,
    )


def test_each_client_gets_connector_effect_session_agent_principal(broker):
    with client(broker) as c:
        r = c.get(f"{GMAIL}/messages", params={"maxResults": 3}, headers={"Authorization": "Bearer ya29.alice-token-1"})
        assert r.status_code == 200
        r = c.post(f"{CAL}/freeBusy", json={"timeMin": "2026-09-22T00:00:00Z", "timeMax": "2026-09-23T00:00:00Z",
                                            "items": [{"id": "primary"}]},
                   headers={"Authorization": "Bearer ya29.alice-token-1"})
        assert r.status_code == 200
        r = c.get(f"{SLACK}/dnd.setSnooze", params={"num_minutes": 5}, headers={"Authorization": "Bearer xoxb-bob-2"})
        assert r.status_code == 200
    got = entries(broker, "s-httpx")
    assert [(e["connector"], e["effect"], e["capture"]) for e in got] == [
        ("gmail", "read", "broker"), ("calendar", "read", "broker"), ("slack", "write", "broker")]
    assert {e["agent"] for e in got} == {"agent-httpx"}
    assert got[0]["principal"] == got[1]["principal"] != got[2]["principal"]
    assert got[0]["principal"].startswith("fp:")
    assert got[0]["request"]["url"] == f"{GMAIL}/messages?maxResults=3"
    assert got[0]["response"]["body"]["messages"]

    r = curl(broker, "-X", "POST", "-H", "Authorization: Bearer xoxb-curl-3", "--data", "channel=C0GENERAL&text=hello",
             f"{SLACK}/chat.postMessage")
    assert json.loads(r.stdout)["ok"] is True
    (e,) = entries(broker, "s-curl")
    assert (e["connector"], e["effect"], e["agent"]) == ("slack", "write", "agent-curl")
    assert e["request"]["body"] == "channel=C0GENERAL&text=hello"
    assert e["response"]["body"]["channel"] == "C0GENERAL"

    proxies = {"https": broker.proxy_url("s-requests", "agent-requests")}
    r = requests.get(f"{DRIVE}/files", proxies=proxies, verify=broker.ca, timeout=30,
                     headers={"Authorization": "Bearer ya29.carol-4"})
    assert r.status_code == 200
    (e,) = entries(broker, "s-requests")
    assert (e["connector"], e["effect"], e["agent"]) == ("drive", "read", "agent-requests")


def test_identity_from_headers_then_defaults_and_never_forwarded(broker, upstream):
    with client(broker, session=None) as c:
        c.get(f"{GMAIL}/labels", headers={"X-Broker-Session": "hdr-session", "X-Broker-Agent": "hdr-agent",
                                          "X-Broker-Principal": "alice@example.com"})
        c.get(f"{GMAIL}/labels?probe=default")
    (e,) = entries(broker, "hdr-session")
    assert (e["agent"], e["principal"]) == ("hdr-agent", "alice@example.com")
    assert not any(k.lower().startswith("x-broker") for k, _ in e["request"]["headers"])
    (d,) = [x for x in entries(broker, "cli-default") if "probe=default" in x["request"]["url"]]
    assert d["principal"] == "anonymous"
    seen = upstream.find(path_prefix="/gmail/v1/users/me/labels")
    assert seen
    for rec in seen:
        names = {k.lower() for k, _ in rec["headers"]}
        assert not names & {"x-broker-session", "x-broker-agent", "x-broker-principal", "proxy-authorization"}


def test_canary_credentials_reach_nothing_on_disk_or_in_output(broker):
    with client(broker, session="s-canary") as c:
        c.post(f"{SLACK}/chat.postMessage?token={SLACK_CANARY}",
               headers={"Authorization": f"Bearer {CANARY}", "X-Api-Key": CANARY, "Cookie": f"sid={CANARY}"},
               data={"channel": "C0GENERAL", "text": "canary", "token": SLACK_CANARY})
        c.post(f"{GMAIL}/messages/send", headers={"Authorization": f"Bearer {CANARY}"},
               json={"raw": base64.urlsafe_b64encode(b"Subject: x\r\n\r\nhello").decode(), "access_token": CANARY})
        c.get(f"{DRIVE}/files?key=AIzaSyD-CANARYcanaryCANARYcanaryCANARY12&access_token={CANARY}")
    got = entries(broker, "s-canary")
    assert len(got) == 3
    headers = dict(got[0]["request"]["headers"])
    assert headers["Authorization"] == headers["X-Api-Key"] == headers["Cookie"] == "[never captured]"
    for secret in (CANARY.encode(), SLACK_CANARY.encode(), b"CANARYcanaryCANARY"):
        for path in broker.vault.rglob("*"):
            if path.is_file():
                assert secret not in path.read_bytes(), path
        assert secret not in bytes(broker.output)


def test_token_exchange_leaves_no_trace(broker, upstream):
    before = {p for p in broker.vault.rglob("*") if p.is_file()}
    with client(broker, session="s-oauth") as c:
        r = c.post("https://oauth2.googleapis.com/token",
                   data={"grant_type": "refresh_token", "refresh_token": "1//0gREFRESH", "client_id": "x",
                         "client_secret": "shh"})
        assert r.status_code == 200 and "access_token" in r.json()
        r = c.post("https://github.com/login/oauth/access_token", data={"code": "abc", "client_secret": "shh"},
                   headers={"Accept": "application/json"})
        assert r.status_code == 200
    after = {p for p in broker.vault.rglob("*") if p.is_file()}
    assert after == before
    assert not Vault(broker.vault).session_path("s-oauth").exists()
    assert upstream.find(host="oauth2.googleapis.com")


def test_attachment_over_threshold_is_spilled_with_exact_bytes(broker):
    with client(broker, session="s-attach") as c:
        r = c.get(f"{GMAIL}/messages/{MSG_INVOICE}/attachments/{ATTACHMENT_ID}")
        assert r.status_code == 200
        data = r.json()["data"]
        r2 = c.get(f"{DRIVE}/files/big?alt=media&size={3 << 20}&seed=drive3")
        assert hashlib.sha256(r2.content).hexdigest() == big_body_sha256(3 << 20, "drive3")
    (att, raw) = entries(broker, "s-attach", 2)
    body = att["response"]["body"]
    assert body["size"] == ATTACHMENT_SIZE
    blob = broker.vault / body["data"]["ref"]
    assert blob.read_bytes() == data.encode()
    expected = big_body_sha256(ATTACHMENT_SIZE, ATTACHMENT_SEED)
    assert hashlib.sha256(base64.urlsafe_b64decode(data)).hexdigest() == expected
    ref = raw["response"]["body"]
    assert ref["size"] == 3 << 20 and ref["sha256"] == big_body_sha256(3 << 20, "drive3")
    assert hashlib.sha256((broker.vault / ref["ref"]).read_bytes()).hexdigest() == ref["sha256"]
    assert verify_session(Vault(broker.vault), "s-attach").intact


def test_concurrent_calls_from_several_sessions_give_intact_chains(broker):
    sessions = [f"s-conc-{i}" for i in range(5)]

    def call(i: int) -> int:
        with client(broker, session=sessions[i % 5], agent=f"a{i % 3}") as c:
            return c.get(f"{GMAIL}/labels", params={"i": i}).status_code

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        codes = list(pool.map(call, range(200)))
    assert codes == [200] * 200
    seen = set()
    for s in sessions:
        r = verify_session(Vault(broker.vault), s)
        assert r.intact and r.entries == 40, r
        got = entries(broker, s)
        assert [e["seq"] for e in got] == list(range(1, 41))
        seen |= {int(e["request"]["url"].rsplit("=", 1)[1]) for e in got}
    assert seen == set(range(200))


def test_event_stream_reaches_the_client_before_it_ends(broker):
    with client(broker, session="s-sse") as c:
        t0 = time.monotonic()
        with c.stream("GET", "https://gmail.googleapis.com/sse?events=4&interval=0.5") as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            first = None
            chunks = []
            for chunk in r.iter_raw():
                if first is None and b"data:" in chunk:
                    first = time.monotonic() - t0
                chunks.append(chunk)
            total = time.monotonic() - t0
    assert first is not None and first < total - 1.0  # the first event came well before the last
    (e,) = entries(broker, "s-sse")
    assert e["response"]["body"].count("data:") == 4


def test_call_that_got_no_answer_still_gets_an_entry(broker, upstream):
    with client(broker, session="s-fail") as c:
        r = c.get(f"{GMAIL}/labels", headers={"Host": "gmail.googleapis.com"})
        assert r.status_code == 200
    # a connector host that resolves nowhere: the broker answers 502 and records the failure
    with httpx.Client(proxy=broker.proxy_url("s-fail", "a"), verify=ssl.create_default_context(cafile=broker.ca),
                      timeout=30) as c:
        r = c.get("https://graph.microsoft.us/v1.0/me/messages")
    assert r.status_code == 502
    got = entries(broker, "s-fail")
    assert got[-1]["response"]["status"] is None and got[-1]["response"]["error"]
    assert got[-1]["connector"] == "graph"


def test_bad_input_leaves_the_broker_running(broker):
    # a malformed request line
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        s.sendall(b"THIS IS NOT HTTP\r\n\r\n")
        s.recv(4096)
    # a non-UTF-8 body and a 64 KiB header
    with client(broker, session="s-bad") as c:
        r = c.post(f"{UPLOAD}?uploadType=media", content=b"\xff\xfe\x80 binary \x00",
                   headers={"Content-Type": "text/plain"})
        assert r.status_code == 200
        r = c.get(f"{GMAIL}/labels", headers={"X-Huge": "h" * (64 << 10)})
        huge_status = r.status_code
    # unreadable proxy credentials are refused, not filed under the default session
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        bad = base64.b64encode(b"\xff\xfe:agent").decode()
        s.sendall(f"CONNECT gmail.googleapis.com:443 HTTP/1.1\r\nHost: gmail.googleapis.com:443\r\n"
                  f"Proxy-Authorization: Basic {bad}\r\n\r\n".encode())
        assert s.recv(4096).startswith(b"HTTP/1.1 400")
    # an unmappable session id is refused clearly, never rewritten into another session
    with client(broker, session="bad\x01session") as c:
        r = c.get(f"{GMAIL}/labels")
    assert r.status_code == 400 and "session" in r.text
    assert broker.alive()
    with client(broker, session="s-bad") as c:
        assert c.get(f"{GMAIL}/labels").status_code == 200
    got = entries(broker, "s-bad")
    assert got[0]["request"]["body"] == {"base64": base64.b64encode(b"\xff\xfe\x80 binary \x00").decode()}
    # the 64 KiB header went upstream (the fake answers 431 to it, as real servers do) and the call is
    # recorded with the header whole and the status the client got
    (huge,) = [e for e in got if any(k == "X-Huge" for k, _ in e["request"]["headers"])]
    assert huge["response"]["status"] == huge_status
    assert dict(huge["request"]["headers"])["X-Huge"] == "h" * (64 << 10)
    assert verify_session(Vault(broker.vault), "s-bad").intact


def test_unwritable_vault_blocks_with_502_before_the_call_goes_upstream(upstream, tmp_path):
    with BrokerProcess(tmp_path, upstream) as b:
        with client(b, session="s-ok") as c:
            assert c.get(f"{GMAIL}/labels").status_code == 200
        journal = b.vault / "journal"
        journal.rename(b.vault / "journal-moved")
        journal.write_bytes(b"")  # a file where the journal directory was: nothing can be created (even as root)
        upstream.clear_requests()
        with client(b, session="s-new") as c:
            r = c.post(f"{SLACK}/chat.postMessage", data={"channel": "C0GENERAL", "text": "must not be sent"})
        assert r.status_code == 502 and "journal" in r.text
        assert r.headers["X-Broker-Error"]
        assert not upstream.find(path_prefix="/api/chat.postMessage")  # never reached the platform
        assert b.alive()


def test_journal_failure_blocks_and_pass_lets_through(upstream, tmp_path):
    """A session whose file cannot be written: block answers 502, pass forwards and logs."""
    for mode, expected in (("block", 502), ("pass", 200)):
        d = tmp_path / mode
        d.mkdir()
        vault = d / "vault"
        (vault / "journal").mkdir(parents=True)
        (vault / "journal" / "s-fail.jsonl").mkdir()  # the session file is a directory: open fails
        with BrokerProcess(d, upstream, "--on-journal-error", mode, vault=vault) as b:
            with client(b, session="s-fail") as c:
                r = c.get(f"{GMAIL}/labels")
            assert r.status_code == expected, (mode, r.text)
            assert b.alive()
            if mode == "pass":
                deadline = time.monotonic() + 10  # the log line may reach the reader a moment later
                while b"WITHOUT a complete entry" not in bytes(b.output) and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert b"WITHOUT a complete entry" in bytes(b.output)


def test_sigterm_stops_cleanly_with_entries_on_disk(upstream, tmp_path):
    b = BrokerProcess(tmp_path, upstream).start()
    with client(b, session="s-stop") as c:
        for i in range(20):
            assert c.get(f"{GMAIL}/labels", params={"i": i}).status_code == 200
    assert b.stop() == 0
    assert b"stopped" in bytes(b.output)
    assert b"Traceback" not in bytes(b.output) and b"Warning" not in bytes(b.output), bytes(b.output)
    r = verify_session(Vault(b.vault), "s-stop")
    assert r.intact and r.entries == 20


def test_large_download_and_upload_stream_with_bounded_memory(upstream, tmp_path):
    size = 200 << 20
    with BrokerProcess(tmp_path, upstream) as b:
        with client(b, session="s-big") as c:
            h = hashlib.sha256()
            with c.stream("GET", f"{DRIVE}/files/big?alt=media&size={size}&seed=dl") as r:
                for chunk in r.iter_raw():
                    h.update(chunk)
            assert h.hexdigest() == big_body_sha256(size, "dl")

            from tests.support.upstreams import big_body_chunks

            r = c.post(f"{UPLOAD}?uploadType=media", content=big_body_chunks(size, "ul"),
                       headers={"Content-Type": "application/octet-stream"})
            assert r.status_code == 200 and r.json()["sha256Checksum"] == big_body_sha256(size, "ul")
        peak_mib = b.peak_rss_kib() / 1024
    down, up = b.entries("s-big", 2)
    assert down["response"]["body"]["sha256"] == big_body_sha256(size, "dl")
    assert up["request"]["body"]["sha256"] == big_body_sha256(size, "ul")
    assert peak_mib < 150, f"broker peak RSS {peak_mib:.0f} MiB for a 200 MiB body"


@pytest.mark.parametrize("recorder", ["process", "inline"])
def test_stock_mitmdump_runs_the_same_addon(upstream, tmp_path, recorder):
    with BrokerProcess(tmp_path, upstream, "--set", "broker_session=md-default", "--set", f"broker_recorder={recorder}",
                       flavour="mitmdump") as b:
        with client(b, session="md-s", agent="md-agent") as c:
            r = c.post(f"{SLACK}/conversations.history", data={"channel": "C0GENERAL"},
                       headers={"Authorization": "Bearer xoxb-md-1"})
            assert r.status_code == 200
        with client(b, session=None) as c:
            assert c.get(f"{GMAIL}/labels").status_code == 200
        children = Path(f"/proc/{b.proc.pid}/task/{b.proc.pid}/children").read_text().split()
        assert len(children) == (1 if recorder == "process" else 0)  # the recording service, or none
    (e,) = entries(b, "md-s")
    assert (e["connector"], e["effect"], e["agent"], e["capture"]) == ("slack", "read", "md-agent", "broker")
    assert len(entries(b, "md-default")) == 1
    assert verify_session(Vault(b.vault), "md-s").intact


def test_broker_env_prints_client_settings(tmp_path):
    from tests.support.broker_harness import BIN

    r = subprocess.run([str(BIN / "broker"), "env", "--listen", "127.0.0.1:9999", "--confdir", str(tmp_path),
                        "--session", "s 1", "--agent", "bot"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = dict(line.removeprefix("export ").split("=", 1) for line in r.stdout.splitlines())
    assert lines["HTTPS_PROXY"] == "http://s%201:bot@127.0.0.1:9999"
    bundle = Path(lines["SSL_CERT_FILE"])
    assert lines["REQUESTS_CA_BUNDLE"] == lines["CURL_CA_BUNDLE"] == lines["NODE_EXTRA_CA_CERTS"] == str(bundle)
    text = bundle.read_text()
    assert (tmp_path / "mitmproxy-ca-cert.pem").read_text().strip() in text
    assert text.count("BEGIN CERTIFICATE") > 10  # the system roots are there too


def test_connectors_file_and_record_unknown(upstream, tmp_path):
    toml = tmp_path / "connectors.toml"
    toml.write_text(
        '[[connector]]\nname = "internal"\nhosts = ["localhost"]\n\n'
        '[[connector.rule]]\nmethods = ["POST"]\npath = "/echo"\neffect = "read"\n'
    )
    with BrokerProcess(tmp_path, upstream, "--connectors", str(toml), "--record-unknown") as b:
        with client(b, session="s-toml") as c:
            assert c.post("https://localhost/echo", json={"q": "search"}).status_code == 200
            assert c.delete("https://localhost/echo").status_code == 200
            assert c.get("https://127.0.0.1/status/204").status_code == 204
        got = b.entries("s-toml", 3)
    assert [(e["connector"], e["effect"]) for e in got] == [("internal", "read"), ("internal", "write"),
                                                            ("other", "read")]


def test_unknown_traffic_is_recorded_by_default(broker):
    """Issue 21: a host no connector knows is recorded (connector `other`, effect by the method rule),
    unless the operator passes it with --pass-unknown (tests/e2e/test_broker_evasion.py)."""
    with client(broker, session="s-unknown") as c:
        assert c.get("https://127.0.0.1/status/200").status_code == 200
        assert c.delete("https://127.0.0.1/status/204").status_code == 204
    got = entries(broker, "s-unknown", 2)
    assert [(e["connector"], e["effect"], e["request"]["effect_basis"]) for e in got] == [
        ("other", "read", "default"), ("other", "write", "default")]


def test_pass_unknown_all_passes_unknown_traffic_unrecorded(upstream, tmp_path):
    with BrokerProcess(tmp_path, upstream, "--pass-unknown", "all") as b:
        with client(b, session="s-pass-all") as c:
            assert c.get("https://127.0.0.1/status/200").status_code == 200
            assert c.get(f"{GMAIL}/labels").status_code == 200
        assert [e["connector"] for e in b.entries("s-pass-all", 1)] == ["gmail"]


def test_bad_connectors_file_is_one_clear_line(upstream, tmp_path):
    toml = tmp_path / "bad.toml"
    toml.write_text("[[connector]]\nname = 'x'\nhosts = 'not-a-list'\n")
    r = subprocess.run([str(Path(os.sys.executable).parent / "broker"), "run", "--vault", str(tmp_path / "v"),
                        "--listen", "127.0.0.1:0", "--confdir", str(tmp_path / "c"), "--connectors", str(toml)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "bad.toml" in r.stderr and "Traceback" not in r.stderr


def test_content_encoding_is_decoded_for_the_record_and_untouched_for_the_client(broker):
    with client(broker, session="s-gzip") as c:
        with c.stream("GET", f"{GMAIL}/labels", headers={"Accept-Encoding": "gzip"}) as r:
            raw = b"".join(r.iter_raw())
            assert r.headers["content-encoding"] == "gzip"
    assert raw[:2] == b"\x1f\x8b"  # the client got the gzip bytes as the server sent them
    (e,) = entries(broker, "s-gzip", 1)
    assert ["Content-Encoding", "gzip"] in e["response"]["headers"]
    import gzip as _gzip

    assert e["response"]["body"] == json.loads(_gzip.decompress(raw))


def test_readme_demo_agent_runs_end_to_end(tmp_path):
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([os.sys.executable, str(root / "scripts" / "demo_agent.py"), "--vault", str(tmp_path / "v")],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "demo: intact (4 entries)" in r.stdout
    assert b"ya29.demo" not in b"".join(p.read_bytes() for p in (tmp_path / "v").rglob("*") if p.is_file())


def test_port_in_use_is_one_clear_line(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run([str(Path(os.sys.executable).parent / "broker"), "run", "--vault", str(tmp_path / "v"),
                            "--listen", f"127.0.0.1:{port}", "--confdir", str(tmp_path / "c")],
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in r.stderr and "Traceback" not in r.stderr


def _service_pid(b: BrokerProcess) -> int:
    assert b.proc is not None
    (pid,) = Path(f"/proc/{b.proc.pid}/task/{b.proc.pid}/children").read_text().split()
    return int(pid)


def test_recording_service_death_loses_no_call_and_a_new_one_takes_over(upstream, tmp_path):
    """A call waiting on a service that dies is recorded by the proxy itself (its entry was not on
    disk yet), calls made before a new service runs are recorded in the proxy, and then the new
    service takes over, the chain intact throughout."""
    import signal

    with BrokerProcess(tmp_path, upstream) as b:
        with client(b, session="s-svc") as c:
            assert c.get(f"{GMAIL}/labels").status_code == 200
            first = _service_pid(b)
            os.kill(first, signal.SIGSTOP)  # takes the next call, never answers it
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                waiting = pool.submit(c.get, f"{GMAIL}/labels", params={"n": "waiting"})
                time.sleep(1.5)
                assert not waiting.done()  # held: the response waits for its entry
                os.kill(first, signal.SIGKILL)
                r = waiting.result(30)
            assert r.status_code == 200, r.text
            assert c.get(f"{GMAIL}/labels", params={"n": "at-once"}).status_code == 200  # no back-off gap
            time.sleep(1.2)  # past the restart interval
            assert c.get(f"{GMAIL}/labels", params={"n": "after"}).status_code == 200
            assert _service_pid(b) != first
        assert b.alive()
    got = entries(b, "s-svc")
    assert [e["request"]["url"] for e in got] == [
        f"{GMAIL}/labels", f"{GMAIL}/labels?n=waiting", f"{GMAIL}/labels?n=at-once", f"{GMAIL}/labels?n=after"
    ]
    assert verify_session(Vault(b.vault), "s-svc").intact


def test_broker_run_records_inline_when_asked(upstream, tmp_path):
    with BrokerProcess(tmp_path, upstream, "--recorder", "inline") as b:
        with client(b, session="s-inline") as c:
            assert c.get(f"{GMAIL}/labels").status_code == 200
        assert not Path(f"/proc/{b.proc.pid}/task/{b.proc.pid}/children").read_text().split()  # no service
    (e,) = entries(b, "s-inline")
    assert (e["connector"], e["effect"]) == ("gmail", "read")


def test_ctrl_c_to_the_process_group_stops_cleanly_with_every_answered_call_recorded(upstream, tmp_path):
    """A terminal's Ctrl-C reaches the broker and its recording service alike: the service must still
    record what the proxy hands it while stopping, then exit."""
    import signal

    b = BrokerProcess(tmp_path, upstream)
    b.new_session = True
    b.start()
    service = _service_pid(b)
    answered = []

    def agent() -> None:
        with client(b, session="s-ctrl-c") as c:
            for i in range(400):
                try:
                    r = c.get(f"{GMAIL}/labels", params={"i": i})
                except httpx.HTTPError:
                    return
                if r.status_code == 200:
                    answered.append(i)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        running = pool.submit(agent)
        deadline = time.monotonic() + 30
        while len(answered) < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        os.killpg(b.proc.pid, signal.SIGINT)
        assert b.proc.wait(30) == 0
        running.result(60)
    assert not Path(f"/proc/{service}").exists() or "zombie" in Path(f"/proc/{service}/status").read_text()
    got = {e["request"]["url"].rpartition("=")[2] for e in entries(b, "s-ctrl-c")}
    assert {str(i) for i in answered} <= got  # every answered call has its entry
    assert verify_session(Vault(b.vault), "s-ctrl-c").intact
