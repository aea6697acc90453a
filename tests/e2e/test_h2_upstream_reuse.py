"""Issue 30: one HTTP/2 client (curl --http2, the curl default for https) making 20 requests through `broker run`
to an HTTP/1.1 upstream needs one upstream TLS connection, as an HTTP/1.1 client does.

Stock mitmproxy 12 opens a new upstream connection per HTTP/2 stream when the upstream speaks HTTP/1.1 and closes
it after the response (docs/benchmarks.md, "Upstream connections of an HTTP/2 client"); `broker run` changes that
in its own process (broker/proxy/h2_upstream_reuse.py). These tests hold it to HTTP/1's rules with real clients
(curl, httpx) and upstreams on loopback: reuse only when idle, never after a body read until EOF or
`Connection: close`, a new connection for each stream that arrives while the others are busy (and never past
mitmproxy's limit of 5 per destination), a reconnect when the upstream dropped an idle connection, every call
answered with its own response and recorded; and stock behaviour under `mitmdump -s addons/...`.
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import time
from urllib.parse import urlsplit

import httpx
import pytest

from journal.vault import Vault
from journal.verify import verify_session
from tests.support.broker_harness import BrokerProcess
from tests.support.counting_relay import CountingRelay, RelayedUpstream
from tests.support.h1_upstream import HOST as H1_HOST
from tests.support.h1_upstream import H1Upstream, answer_body
from tests.support.upstreams import Upstream

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")]
HOST = "gmail.googleapis.com"
URL = f"https://{HOST}/gmail/v1/users/me/labels"
CALLS = 20


@pytest.fixture(scope="module")
def upstream():
    up = Upstream()
    up.start()
    try:
        yield up
    finally:
        up.stop()


def _upstream_connections(upstream: Upstream, tmp, http_flag: str, flavour: str = "broker") -> int:
    relay = CountingRelay(upstream.port)
    extra = ("--session", "h2reuse") if flavour == "broker" else ()
    try:
        with BrokerProcess(tmp, RelayedUpstream(upstream, relay), *extra, flavour=flavour) as b:
            out = subprocess.run(
                ["curl", "-sS", http_flag, "--proxy", f"http://127.0.0.1:{b.port}", "--cacert", b.ca,
                 "-H", "Authorization: Bearer ya29.h2-reuse-test-token",
                 "-w", "%{http_version} %{http_code}\\n", *(["-o", "/dev/null", URL] * CALLS)],
                capture_output=True, timeout=120, check=True)
            answers = out.stdout.decode().split()
            assert answers[1::2] == ["200"] * CALLS, out.stdout
            assert set(answers[::2]) == {"2" if http_flag == "--http2" else "1.1"}, out.stdout
            return relay.accepted
    finally:
        relay.close()


def test_an_http1_client_uses_one_upstream_connection_for_its_calls(upstream, tmp_path):
    assert _upstream_connections(upstream, tmp_path, "--http1.1") == 1


def test_an_http2_client_uses_one_upstream_connection_for_its_calls(upstream, tmp_path):
    assert _upstream_connections(upstream, tmp_path, "--http2") == 1


def test_stock_mitmdump_loading_the_addons_keeps_mitmproxys_connection_handling(upstream, tmp_path):
    """The change is `broker run`'s alone: someone's own mitmdump with addons/connector_journal.py stays stock."""
    assert _upstream_connections(upstream, tmp_path, "--http2", flavour="mitmdump") == CALLS


# -- HTTP/1's rules, with an upstream whose connection handling each path chooses (tests/support/h1_upstream.py) --

SESSION = "h2rules"


@pytest.fixture
def h1():
    with H1Upstream() as up:
        yield up


def _curl(b: BrokerProcess, paths: list[str], *flags: str) -> dict[str, bytes]:
    """One curl process (one client connection, HTTP/2): each path's body, as curl wrote it."""
    out = b.tmp / "bodies"
    out.mkdir(exist_ok=True)
    args = [a for i, p in enumerate(paths) for a in ("-o", str(out / str(i)), f"https://{H1_HOST}{p}")]
    done = subprocess.run(["curl", "-sS", "--http2", "--max-time", "60", "--proxy", f"http://127.0.0.1:{b.port}",
                           "--cacert", b.ca, "-w", "%{http_version} %{http_code}\\n", *flags, *args],
                          capture_output=True, timeout=120, check=True)
    assert done.stdout.decode().split() == ["2", "200"] * len(paths), done
    return {p: (out / str(i)).read_bytes() for i, p in enumerate(paths)}


def _assert_answered_and_recorded(b: BrokerProcess, up: H1Upstream, bodies: dict[str, bytes],
                                  expected: dict[str, bytes] | None = None) -> None:
    """Every call got its own response (the body is its path, or `expected[path]`), reached the upstream once and has
    an entry whose response is its own (compared where the answer is short text); the session's chain is intact."""
    expected = expected or {p: p.encode() for p in bodies}
    assert bodies == expected
    assert sorted(path for _, path in up.exchanges) == sorted(bodies)
    assert up.errors == []
    got = b.entries(SESSION, len(bodies))
    assert len(got) == len(bodies)
    recorded = {urlsplit(e["request"]["url"]).path: e["response"]["body"] for e in got}
    assert recorded.keys() == expected.keys()
    assert {p: recorded[p] for p, v in expected.items() if len(v) < 200} == \
        {p: v.decode() for p, v in expected.items() if len(v) < 200}
    assert {e["response"]["status"] for e in got} == {200}
    r = verify_session(Vault(b.vault), SESSION)
    assert r.intact and r.entries == len(bodies), r


def test_sequential_calls_share_one_connection_and_each_gets_its_own_answer(h1, tmp_path):
    paths = [f"/keep/{i}" for i in range(CALLS)]
    with BrokerProcess(tmp_path, h1, "--session", SESSION) as b:
        bodies = _curl(b, paths)
        _assert_answered_and_recorded(b, h1, bodies)
    assert h1.accepted == 1
    assert [n for n, _ in h1.exchanges] == [1] * CALLS


def test_parallel_streams_get_their_own_connections_within_the_concurrency(h1, tmp_path):
    """curl multiplexes 20 slow calls, 4 at a time, on one HTTP/2 connection: no upstream connection carries two
    exchanges at once (an HTTP/1 server would answer them in order, mixing up the answers), and once they are
    open the connections are reused: no more of them than calls in flight."""
    paths = [f"/keep/p{i}?ms=150" for i in range(CALLS)]
    with BrokerProcess(tmp_path, h1, "--session", SESSION) as b:
        bodies = _curl(b, paths, "-Z", "--parallel-max", "4")
        _assert_answered_and_recorded(b, h1, {p.split("?")[0]: v for p, v in bodies.items()})
    assert h1.most_in_flight <= 4
    assert 2 <= h1.accepted <= 4, h1.accepted  # the calls overlapped, and no connection was used only once


class _H2First(ssl.SSLContext):
    """httpcore offers ALPN ["http/1.1", "h2"] in a proxy tunnel and mitmproxy honours the client's order, so
    httpx(http2=True) gets HTTP/1.1 through a broker; this context offers h2 first, as curl and browsers do."""

    def set_alpn_protocols(self, alpn_protocols) -> None:
        super().set_alpn_protocols(["h2", "http/1.1"])


def _h2_context(ca: str) -> ssl.SSLContext:
    ctx = _H2First(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(ca)
    return ctx


@pytest.mark.parametrize("client", ["curl", "httpx"])
def test_more_concurrent_streams_than_mitmproxys_connection_limit(h1, tmp_path, client):
    """12 concurrent streams of one HTTP/2 client connection: mitmproxy opens at most 5 upstream connections per
    destination and client connection, and the streams past 5 wait for a slot. A connection kept idle would hold
    that slot forever (the calls would hang); each stream gets its own answer, on at most 5 connections at once."""
    paths = [f"/keep/c{i}" for i in range(12)]
    with BrokerProcess(tmp_path, h1, "--session", SESSION) as b:
        async def calls() -> dict[str, bytes]:
            ctx = _h2_context(b.ca)
            async with httpx.AsyncClient(http2=True, proxy=f"http://127.0.0.1:{b.port}", verify=ctx,
                                         timeout=30) as client:
                # one call first: before its connection is up, httpx would open one connection per call
                first = await client.get(f"https://{H1_HOST}/keep/first")
                answers = await asyncio.gather(*(client.get(f"https://{H1_HOST}{p}?ms=300") for p in paths))
            answers.append(first)
            assert {a.http_version for a in answers} == {"HTTP/2"}
            assert [a.status_code for a in answers] == [200] * len(answers)
            return {p: a.content for p, a in zip([*paths, "/keep/first"], answers, strict=True)}

        if client == "curl":
            got = _curl(b, [f"{p}?ms=300" for p in paths], "-Z", "--parallel-max", "12")
            bodies = {p.split("?")[0]: v for p, v in got.items()}
        else:
            bodies = asyncio.run(asyncio.wait_for(calls(), 60))
        _assert_answered_and_recorded(b, h1, bodies)
    assert h1.most_in_flight == 5  # the streams past 5 waited for a slot, and got one


@pytest.mark.parametrize("kind", ["eof", "close"])
def test_no_reuse_after_a_body_read_until_eof_or_connection_close(h1, tmp_path, kind):
    """`eof`: no length, the body ends with the connection. `close`: `Connection: close`, and this upstream would
    even answer on that connection again: only the proxy's rule keeps it from reuse."""
    paths = [f"/{kind}/{i}" for i in range(5)]
    with BrokerProcess(tmp_path, h1, "--session", SESSION) as b:
        bodies = _curl(b, paths)
        _assert_answered_and_recorded(b, h1, bodies)
    assert h1.accepted == 5
    assert sorted(n for n, _ in h1.exchanges) == [1, 2, 3, 4, 5]


def test_a_connection_the_upstream_dropped_while_idle_is_not_reused(tmp_path):
    """The upstream closes a connection idle for 1 s: the client's next call (same HTTP/2 connection) goes on a
    new one and succeeds."""
    with H1Upstream(idle_close=1.0) as up, BrokerProcess(tmp_path, up, "--session", SESSION) as b:
        ctx = _h2_context(b.ca)
        bodies = {}
        with httpx.Client(http2=True, proxy=f"http://127.0.0.1:{b.port}", verify=ctx, timeout=30) as client:
            for p in ("/keep/a", "/keep/b"):
                r = client.get(f"https://{H1_HOST}{p}")
                assert (r.http_version, r.status_code) == ("HTTP/2", 200)
                bodies[p] = r.content
            deadline = time.monotonic() + 10
            while up.idle_closed < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)  # the proxy has seen the close
            r = client.get(f"https://{H1_HOST}/keep/c")
            assert (r.http_version, r.status_code) == ("HTTP/2", 200)
            bodies["/keep/c"] = r.content
        _assert_answered_and_recorded(b, up, bodies)
    assert up.idle_closed >= 1
    numbers = [n for n, _ in up.exchanges]
    assert numbers[2] > numbers[1] and up.accepted <= 3, numbers


def test_bodies_both_ways_chunked_and_large_on_kept_connections(tmp_path):
    """Sequential calls of one HTTP/2 client with request bodies (small, 2 MiB), chunked answers and a 3 MB answer,
    each answer the right one, on kept connections. The 3 MB answer ends its connection: the broker streams it and
    drops its Content-Length for the client (broker/proxy/streaming.py, `hold_back_the_end`), and mitmproxy's
    `mark_done` judges from those headers that the upstream body was read until EOF (no reuse: the safe side)."""
    upload = bytes(range(256)) * 8192
    calls = [("GET", "/keep/s1?chunked=1", b""), ("GET", "/keep/big?size=3000000", b""), ("POST", "/keep/up", upload),
             ("GET", "/keep/s2?size=100000&chunked=1", b""), ("POST", "/keep/small", b"hello")]
    with H1Upstream() as up, BrokerProcess(tmp_path, up, "--session", SESSION) as b:
        with httpx.Client(http2=True, proxy=f"http://127.0.0.1:{b.port}", verify=_h2_context(b.ca),
                          timeout=60) as client:
            bodies = {}
            for method, target, body in calls:
                r = client.request(method, f"https://{H1_HOST}{target}", content=body or None)
                assert (r.http_version, r.status_code) == ("HTTP/2", 200)
                bodies[target.split("?")[0]] = r.content
        expected = {target.split("?")[0]: answer_body(target.split("?")[0], body, int(target.partition("size=")[2]
                    .split("&")[0] or 0)) for _, target, body in calls}
        _assert_answered_and_recorded(b, up, bodies, expected)
    assert [n for n, _ in up.exchanges] == [1, 1, 2, 2, 2], up.exchanges


def test_a_stream_cancelled_mid_answer_leaves_nothing_for_the_next_call(tmp_path):
    """The client resets a stream while a 4 MB answer trickles in: the rest of that answer must never be read as
    the next call's answer (a connection in the middle of a response is not idle)."""
    with H1Upstream() as up, BrokerProcess(tmp_path, up, "--session", SESSION) as b:

        async def calls() -> list[bytes]:
            async with httpx.AsyncClient(http2=True, proxy=f"http://127.0.0.1:{b.port}", verify=_h2_context(b.ca),
                                         timeout=30) as client:
                assert (await client.get(f"https://{H1_HOST}/keep/first")).content == b"/keep/first"
                async with client.stream("GET", f"https://{H1_HOST}/keep/cut?size=4000000&trickle=1") as r:
                    async for _ in r.aiter_bytes():
                        break  # leaving the block resets the stream
                return [(await client.get(f"https://{H1_HOST}/keep/after{i}")).content for i in range(3)]

        assert asyncio.run(asyncio.wait_for(calls(), 60)) == [f"/keep/after{i}".encode() for i in range(3)]
        got = b.entries(SESSION, 5)
        after = {urlsplit(e["request"]["url"]).path: e["response"]["body"]
                 for e in got if "after" in e["request"]["url"]}
        assert after == {f"/keep/after{i}": f"/keep/after{i}" for i in range(3)}
    assert [p for _, p in up.exchanges] == ["/keep/first", "/keep/cut", "/keep/after0", "/keep/after1", "/keep/after2"]


def test_answers_with_trailers_keep_the_connection_and_each_entry_its_own_trailers(h1, tmp_path):
    """Chunked answers with a trailer field (read by the broker's HTTP/1 trailer support, broker/proxy/trailers.py,
    which wraps the same layer): the connection is reused and each entry holds its own answer's trailer."""
    paths = [f"/keep/t{i}" for i in range(4)]
    with BrokerProcess(tmp_path, h1, "--session", SESSION) as b:
        got = _curl(b, [f"{p}?chunked=1&trailer=1" for p in paths])
        _assert_answered_and_recorded(b, h1, {p.split("?")[0]: v for p, v in got.items()})
        trailers = {urlsplit(e["request"]["url"]).path: e["response"]["trailers"] for e in b.entries(SESSION, 4)}
    assert trailers == {p: [["x-checksum", p]] for p in paths}
    assert h1.accepted == 1


def test_two_clients_never_share_an_upstream_connection(h1, tmp_path):
    """Two HTTP/2 client connections calling in turn: while one's upstream connection is idle the other calls, and
    gets its own (the reuse is per client connection, as mitmproxy's HTTP layer is)."""
    with BrokerProcess(tmp_path, h1, "--session", SESSION) as b:
        proxy, ctx = f"http://127.0.0.1:{b.port}", _h2_context(b.ca)
        with httpx.Client(http2=True, proxy=proxy, verify=ctx, timeout=30) as one, \
                httpx.Client(http2=True, proxy=proxy, verify=ctx, timeout=30) as two:
            bodies = {}
            for i in range(6):
                r = (one, two)[i % 2].get(f"https://{H1_HOST}/keep/turn{i}")
                assert (r.http_version, r.status_code) == ("HTTP/2", 200)
                bodies[f"/keep/turn{i}"] = r.content
        _assert_answered_and_recorded(b, h1, bodies)
    assert [n for n, _ in h1.exchanges] == [1, 2, 1, 2, 1, 2]
