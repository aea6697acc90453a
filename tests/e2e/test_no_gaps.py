"""No gaps in the record: every call that reaches the platform or the agent has its entry.

Unit and property tests of the recording service with arbitrary material, and end-to-end tests
through a real broker: raw bytes in the request line, the recording service killed under load,
streamed Content-Length responses held until their entry is durable, and a full disk.
"""

from __future__ import annotations

import base64
import concurrent.futures
import os
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import httpx
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.proxy.service import Service, serve
from broker.proxy.wire import Completion, RequestAhead, WholeCall, frame, sendable, split_to_proxy, split_to_service
from journal.call import Call, Response
from journal.reader import iter_entries
from journal.record import Recorder
from journal.vault import Vault, session_from_filename
from journal.verify import verify_session
from tests.support.broker_harness import BrokerProcess
from tests.support.upstreams import Upstream, big_body_sha256

GMAIL = "https://gmail.googleapis.com/gmail/v1/users/me"
CANARY = "ya29.NOGAPScanary0NOGAPScanary0NOGAPS"


def material(n: int, **over) -> Call:
    m = {
        "session": "gaps", "agent": "agent-g", "principal": None, "connector": "gmail", "method": "GET",
        "url": f"{GMAIL}/labels?n={n}",
        "request_headers": ((b"Host", b"gmail.googleapis.com"), (b"Authorization", f"Bearer {CANARY}".encode())),
        "request_body": None, "status": 200, "response_headers": ((b"Content-Type", b"application/json"),),
        "response_body": b'{"labels": []}', "error": None, "ts": 1790000000.0 + n, "mcp": None,
    }
    m.update(over)
    return Call.make(**m)


def over_the_wire(*messages) -> list:
    """Messages as the service receives them: framed by the proxy, read back from the bytes."""
    return split_to_service(bytearray(b"".join(frame(m) for m in messages)))[0]


def raw_bytes_of(entry_message: dict, pointer: str, text: str) -> bytes:
    """The wire bytes behind a recorded text field (docs/contract.md, "Wire text")."""
    return text.encode("latin-1") if pointer in entry_message.get("latin1", []) else text.encode("utf-8")


# -- the service: one call's material fails that call alone --------------------------------------


def test_raw_bytes_in_the_request_line_are_recorded_losslessly(tmp_path):
    rec = Recorder(tmp_path)
    svc = Service(rec)
    path = "/gmail/v1/users/me/messages/\udcff\udcfe"  # how mitmproxy hands over raw bytes (surrogateescape)
    odd = material(1, url=sendable("https://gmail.googleapis.com" + path), method=sendable("G\udce9T"),
                   request_headers=((b"X-\xff", b"v\xfe"), (b"Authorization", b"Bearer " + CANARY.encode())))
    acks = svc.handle(over_the_wire(WholeCall(1, odd), WholeCall(2, material(2))))
    assert [a.outcome for a in acks] == ["ok", "ok"]
    rec.close()
    first, second = iter_entries(Vault(tmp_path), "gaps")
    req = first["request"]
    assert raw_bytes_of(req, "/url", req["url"]).endswith(b"/messages/\xff\xfe")
    assert raw_bytes_of(req, "/method", req["method"]) == b"G\xe9T"
    assert raw_bytes_of(req, "/headers/0/0", req["headers"][0][0]) == b"X-\xff"
    assert raw_bytes_of(req, "/headers/0/1", req["headers"][0][1]) == b"v\xfe"
    assert req["headers"][1] == ["Authorization", "[never captured]"]
    assert "latin1" not in second["request"]
    assert verify_session(Vault(tmp_path), "gaps").intact


_field = st.one_of(st.binary(max_size=40), st.text(max_size=40), st.none(), st.integers(-(2**63), 2**64 - 1),
                  st.floats())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    method=_field, url=_field, names=st.lists(st.binary(max_size=12), max_size=4),
    values=st.lists(st.binary(max_size=24), max_size=4), body=st.one_of(st.binary(max_size=200), st.none()),
    status=st.one_of(st.integers(-5, 1000), st.none(), st.text(max_size=3)),  # text: does not decode
    session=st.one_of(st.text(max_size=20), st.binary(max_size=5)),
)
def test_arbitrary_material_through_the_real_service_loop_never_stops_it(
    tmp_path_factory, method, url, names, values, body, status, session
):
    """Arbitrary values in every field go through `serve` (frames over a socket pair, as from the
    proxy; a session or status of the wrong type makes a frame that does not decode); each call is
    answered, and the next ordinary call is recorded by the same loop."""
    vault = tmp_path_factory.mktemp("fuzz")
    rec = Recorder(vault)
    ours, theirs = socket.socketpair()
    loop = threading.Thread(target=serve, args=(theirs, rec), daemon=True)
    loop.start()
    headers = tuple(zip(names, values, strict=False))
    odd = material(1, method=method, url=url, request_headers=headers, request_body=body, response_body=body,
                   status=status, session=session)
    try:
        ahead = msgspec.structs.replace(odd, response=None)
        ours.sendall(frame(RequestAhead(1, ahead)) + frame(Completion(1, Response(status), 1.0)))
        ours.sendall(frame(WholeCall(2, odd)) + frame(WholeCall(3, material(3))))
        acks = _read_acks(ours, 3)
    finally:
        ours.close()
        loop.join(10)
        rec.close()
    assert not loop.is_alive()
    assert sorted(acks) == [1, 2, 3]
    assert acks[3] == "ok"
    for name in os.listdir(vault / "journal"):
        if name.endswith(".jsonl"):
            assert verify_session(Vault(vault), session_from_filename(name)).intact
    on_disk = b"".join(p.read_bytes() for p in vault.rglob("*") if p.is_file())
    assert CANARY.encode() not in on_disk


def _read_acks(sock: socket.socket, count: int) -> dict[int, str]:
    buf, got = bytearray(), {}
    sock.settimeout(20)
    while len(got) < count:
        chunk = sock.recv(1 << 16)
        assert chunk, "the service closed the connection"
        buf += chunk
        batches, used = split_to_proxy(buf)
        del buf[:used]
        for acks in batches:
            for ack in acks:
                got[ack.id] = ack.outcome
    return got


def test_every_entry_says_who_answered_and_how_the_effect_was_decided(tmp_path):
    rec = Recorder(tmp_path)
    svc = Service(rec)
    calls = [
        material(1),
        material(2, status=None, error="upstream refused the connection"),
        material(3, status=502, error="call not forwarded: the journal cannot record it", answered_by="capture"),
        material(4, connector="unknown", url="https://example.org/thing", method="PATCH"),
    ]
    assert [a.outcome for a in svc.handle(over_the_wire(*(WholeCall(i, m) for i, m in enumerate(calls, 1))))] == [
        "ok"] * 4
    rec.close()
    got = list(iter_entries(Vault(tmp_path), "gaps"))
    assert [e["response"]["answered_by"] for e in got] == ["upstream", "none", "capture", "upstream"]
    assert [e["request"]["effect_basis"] for e in got] == ["rule", "rule", "rule", "default"]
    assert got[3]["effect"] == "write"


# -- end to end ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def upstream():
    with Upstream() as up:
        yield up


def _client(b: BrokerProcess, session: str, timeout: float = 60) -> httpx.Client:
    return httpx.Client(proxy=b.proxy_url(session, "agent-gaps"), verify=ssl.create_default_context(cafile=b.ca),
                        timeout=timeout)


def _service_pid(b: BrokerProcess, timeout: float = 10) -> int:
    assert b.proc is not None
    deadline = time.monotonic() + timeout
    while True:
        kids = [k for t in Path(f"/proc/{b.proc.pid}/task").iterdir() for k in (t / "children").read_text().split()]
        if kids:
            return int(kids[0])
        assert time.monotonic() < deadline, "no recording service:\n" + b.output.decode(errors="replace")[-4000:]
        time.sleep(0.05)


def _raw_tunnel_request(b: BrokerProcess, host: str, request: bytes) -> bytes:
    """Send `request` byte for byte inside a CONNECT tunnel through the broker; the raw answer."""
    sock = socket.create_connection(("127.0.0.1", b.port), timeout=30)
    auth = base64.b64encode(b"s-raw:agent-raw").decode()
    sock.sendall(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\nProxy-Authorization: Basic {auth}\r\n\r\n"
                 .encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(4096)
    assert head.startswith(b"HTTP/1.1 200"), head
    tls = ssl.create_default_context(cafile=b.ca).wrap_socket(sock, server_hostname=host)
    tls.sendall(request)
    out = b""
    try:
        while chunk := tls.recv(65536):
            out += chunk
            if b"\r\n\r\n" in out and out.endswith(b"}") or len(out) > 1 << 20:
                break
    except (TimeoutError, ssl.SSLError):
        pass
    tls.close()
    return out


@pytest.mark.e2e
def test_raw_bytes_in_a_path_inside_a_tunnel_are_recorded_and_the_service_lives_on(upstream, tmp_path):
    with BrokerProcess(tmp_path, upstream) as b:
        pid = _service_pid(b)
        answer = _raw_tunnel_request(
            b, "gmail.googleapis.com",
            b"GET /gmail/v1/users/me/messages/\xff\xfe HTTP/1.1\r\nHost: gmail.googleapis.com\r\n"
            b"Authorization: Bearer " + CANARY.encode() + b"\r\nConnection: close\r\n\r\n",
        )
        assert answer.startswith(b"HTTP/1.1 "), answer[:200]
        with _client(b, "s-raw") as c:
            assert c.get(f"{GMAIL}/labels").status_code == 200
        assert _service_pid(b) == pid  # the same service recorded both
    first, second = b.entries("s-raw", 2)
    assert raw_bytes_of(first["request"], "/url", first["request"]["url"]).endswith(b"/messages/\xff\xfe")
    assert second["request"]["url"] == f"{GMAIL}/labels"
    assert verify_session(Vault(b.vault), "s-raw").intact
    assert CANARY.encode() not in b"".join(p.read_bytes() for p in b.vault.rglob("*") if p.is_file())


@pytest.mark.e2e
def test_no_call_reaches_the_upstream_without_an_entry_while_the_service_is_killed(upstream, tmp_path):
    """Four clients call in a loop while the recording service is killed (SIGKILL) again and again:
    every call the upstream received has its entry, whatever the clients were answered."""
    kills = int(os.environ.get("BROKER_TEST_KILLS", "6"))
    upstream.clear_requests()
    stop = threading.Event()
    answered: list[int] = []

    def agent(k: int, b: BrokerProcess) -> None:
        n = 0
        with _client(b, "s-kill", timeout=30) as c:
            while not stop.is_set():
                n += 1
                try:
                    answered.append(c.get(f"{GMAIL}/labels", params={"call": f"{k}-{n}"}).status_code)
                except httpx.HTTPError:
                    answered.append(0)

    with BrokerProcess(tmp_path, upstream) as b:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(agent, k, b) for k in range(4)]
            for _ in range(kills):
                time.sleep(0.4)
                os.kill(_service_pid(b), signal.SIGKILL)
            time.sleep(0.5)
            stop.set()
            for f in futures:
                f.result(60)
        assert b.alive()
    seen = {r["path"].partition("call=")[2] for r in upstream.requests if "call=" in r["path"]}
    recorded = {e["request"]["url"].partition("call=")[2] for e in b.entries("s-kill")}
    assert len(seen) > 20 and answered.count(200) > 20
    assert seen - recorded == set(), f"{len(seen - recorded)} of {len(seen)} calls reached the upstream unrecorded"
    assert verify_session(Vault(b.vault), "s-kill").intact
    got = b.entries("s-kill")
    assert len(got) == len({e["request"]["url"] for e in got})  # no call recorded twice


@pytest.mark.e2e
def test_a_streamed_content_length_response_is_not_complete_before_its_entry(upstream, tmp_path):
    """With the recording service stopped, the client gets the body's bytes but not the end of the
    message; the moment the service runs again, the entry is written and then the response ends."""
    size = 3 << 20
    with BrokerProcess(tmp_path, upstream) as b:
        pid = _service_pid(b)
        with _client(b, "s-hold") as c:
            os.kill(pid, signal.SIGSTOP)
            try:
                with c.stream("GET", "https://gmail.googleapis.com/big", params={"size": str(size)}) as r:
                    assert r.status_code == 200
                    assert "content-length" not in r.headers and r.headers.get("transfer-encoding") == "chunked"
                    it = r.iter_raw()
                    got = 0
                    while got < size:
                        got += len(next(it))
                    done = threading.Event()
                    rest = []

                    def finish() -> None:
                        rest.extend(it)
                        done.set()

                    threading.Thread(target=finish, daemon=True).start()
                    assert not done.wait(1.5)  # every byte is there, the end is not
                    held = Vault(b.vault).session_path("s-hold")
                    assert not held.exists() or held.stat().st_size == 0  # (the proxy opens the file early)
                    os.kill(pid, signal.SIGCONT)
                    assert done.wait(20) and rest == []
                    assert held.stat().st_size > 0  # the entry came first
            finally:
                os.kill(pid, signal.SIGCONT)
        (entry,) = b.entries("s-hold", 1)
    body = entry["response"]["body"]
    assert body["size"] == size and body["sha256"] == big_body_sha256(size)
    assert ["Content-Length", str(size)] in entry["response"]["headers"]  # the upstream's own headers


def _can_mount_tmpfs() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


@pytest.mark.e2e
@pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs root to mount a small tmpfs as a full disk")
def test_a_full_disk_fails_the_call_cleanly_and_recording_resumes_when_space_is_free(upstream, tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)], check=True)
    try:
        vault = disk / "vault"
        with BrokerProcess(tmp_path, upstream, vault=vault) as b:
            with _client(b, "s-full") as c:
                assert c.get(f"{GMAIL}/labels").status_code == 200
                filler = disk / "filler"
                st = os.statvfs(disk)
                with open(filler, "wb") as f:  # leave about 1 MiB free
                    f.write(b"\0" * (st.f_bavail * st.f_frsize - (1 << 20)))
                with pytest.raises(httpx.HTTPError):  # a reset, never a short body presented as complete
                    with c.stream("GET", "https://gmail.googleapis.com/big", params={"size": str(3 << 20)}) as r:
                        for _ in r.iter_raw():
                            pass
                st = os.statvfs(disk)
                assert st.f_bavail * st.f_frsize > 900 << 10  # the partial blob is gone again
                try:
                    with open(disk / "filler2", "wb") as f:  # now not even a line fits
                        while True:
                            f.write(b"\0" * 4096)
                            f.flush()
                except OSError:
                    pass
                # The writer reserves space past the session file's end (journal/preallocation.py: at least
                # RESERVE_MIN, 1 MiB): calls are recorded into it (and answered) until it is used up, then
                # refused, never passed.
                answered = []
                for n in range(4000):
                    r = c.get(f"{GMAIL}/labels", params={"n": f"full{n}"})
                    if r.status_code != 200:
                        break
                    answered.append(f"{GMAIL}/labels?n=full{n}")
                assert r.status_code == 502
                filler.unlink()
                (disk / "filler2").unlink(missing_ok=True)
                r = c.get(f"{GMAIL}/labels", params={"n": "after"})
                assert r.status_code == 200, r.text  # resumed by itself
            assert b.alive()
        out = bytes(b.output)
        assert b"mitmproxy has crashed" not in out and b"Traceback" not in out
        got = [e["request"]["url"] for e in b.entries("s-full")]
        assert got[0] == f"{GMAIL}/labels" and got[-1] == f"{GMAIL}/labels?n=after"
        assert got[1:-1] == answered  # every call answered while the disk was full is in the vault
        assert verify_session(Vault(vault), "s-full").intact
        assert not list((vault / "blobs" / "tmp").glob("*"))  # the partial blob was removed
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
