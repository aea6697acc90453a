"""Broker vs plain mitmdump vs direct (and the addon in stock mitmdump): throughput and latency over TLS.

    python -m bench.broker_bench [--quick] [--rounds R] [--seq N] [--conc N] [--clients C]
                                 [--json FILE] [--profile]

One run starts, each in its own process:

- the fake upstreams (`python -m tests.support.upstreams`, TLS on 127.0.0.1, certificates for the real host names);
- plain `mitmdump` with no recording addon, only `-s broker/proxy/upstream_resolve.py` (the redirect addon that
  `broker run` itself loads for `--resolve`, so upstream connections are redirected and reused the same
  way), plus `ssl_verify_upstream_trusted_ca` and `connection_strategy=lazy` like the broker;
- stock `mitmdump -s addons/connector_journal.py` (target `addon`): the same addon in stock mitmproxy, with
  all of mitmdump's default addons loaded, and its own vault;
- `broker run` with a vault in a temporary directory under bench/results/ (durable: fdatasync before
  each response is released, as in production). It records through its recording service, a child
  process; the CPU of child processes is counted with the proxy's.

and measures, from this process, four targets: `direct` (the client connects straight to the fake with
SNI and Host of the real API), `mitmdump`, `addon` and `broker` (the client uses them as its HTTPS proxy
and trusts their CA). Scenarios:

- `seq GET`: one client, keep-alive, GET https://gmail.googleapis.com/gmail/v1/users/me/labels;
- `seq mix`: the same, but every 4th call is a write: POST https://slack.com/api/chat.postMessage (JSON);
- `16x GET`, `16x mix`: 16 concurrent clients (asyncio, each its own httpx.AsyncClient and connections).

The machine is shared and noisy, so targets are interleaved finely: within a scenario every target keeps
its client(s) and keep-alive connections open (warmed up first), and each round gives every target a
slice of calls (--seq / --conc per target), in an order that rotates every round. A slow phase of the
machine then hits all targets of a round alike. Figures pool the slices (req/s = calls / time spent on
that target, p50/p99 over all its calls); throughput ratios are medians of the within-round ratios
(with their interquartile range). Process CPU time (user + system, all threads, from /proc) per call is
reported for the proxy (with its child processes), the fake and the client: it moves less than the wall
clock on a busy machine. At the end the broker and the addon target are stopped and each vault must hold
exactly one entry per call sent through it (warm-ups included) and verify intact.

Then two scenarios with curl --parallel as the client (when curl is installed; --no-curl skips them) for
`lean`, `broker` and `broker2`: a C client costs a fraction of the Python client's CPU per call, which
leaves more of the two cores to the proxies; CPU per call of every process (curl from its rusage) and
calls per CPU-second say how `--workers 2` scales when the cores are the limit. `16 sess.` spreads the
calls over 16 sessions (X-Broker-Session), so the two workers do not take turns on one session file.

The client runs in this process, alone: one thread for the sequential scenarios (sync httpx.Client), one
asyncio event loop for the concurrent ones, so it never competes with itself for the GIL (16 threads of
sync clients would, and would add GIL hand-off delays to the latencies). More client processes would not
help on 2 cores: the proxy, the fake and the client already share them; the `client CPU` column shows
what the client costs. The client is the same for all targets.

--profile adds, while the fake and mitmdump still run: (1) a py-spy sampling profile (--gil) of the broker's
proxy process and of mitmdump under the 16-client load, when py-spy is installed in the venv; (2) the
recording service's stages timed in this process on the benchmark's real request/response material,
thread CPU time per call, no profiler.

Nothing here asserts a timing; the figures are printed (and written with --json).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import httpx

from bench import machine, scratch_dir, write_json
from bench.load import busy_load
from tests.support.broker_harness import BIN, ROOT, BrokerProcess
from tests.support.upstreams.client import _AsyncMappedBackend, _MappedBackend

SESSION = "bench"
TARGETS = ("direct", "mitmdump", "mitmdump-w", "lean", "addon", "broker", "broker2")
"""lean: mitmproxy with broker run's own addon set and no recording (bench/lean_proxy.py), the fair
baseline for what recording costs; mitmdump-w: stock mitmdump writing every flow to a file (`-w`, mitmproxy's
own recording, which never fsyncs); broker2: `broker run --workers 2`."""
GET_URL = "https://gmail.googleapis.com/gmail/v1/users/me/labels"
POST_URL = "https://slack.com/api/chat.postMessage"
GET_HEADERS = {"Authorization": "Bearer ya29.bench-access-token", "Accept": "application/json"}
POST_HEADERS = {"Authorization": "Bearer xoxb-bench-bot-token"}
WRITE_EVERY = 4
"""In the `mix` workload, call k (k = 1, 2, ...) is a write when k % WRITE_EVERY == 0."""
_CLK_TCK = os.sysconf("SC_CLK_TCK")

# -- processes -----------------------------------------------------------------------------------


class UpstreamProcess:
    """`python -m tests.support.upstreams --json` in its own process."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.info = SimpleNamespace(port=0, ca_pem="", hosts=[])

    def start(self, timeout: float = 30) -> UpstreamProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.upstreams", "--json", "--max-records", "1000"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )
        assert self.proc.stdout is not None
        line = _readline_with_timeout(self.proc.stdout, timeout)
        if not line:
            self.stop()
            raise RuntimeError("fake upstreams did not start")
        data = json.loads(line)
        # what tests.support.broker_harness.BrokerProcess reads from an Upstream
        self.info = SimpleNamespace(port=data["port"], ca_pem=data["ca_pem"], hosts=data["hosts"],
                                    resolve_args=lambda: list(data["resolve_args"]))
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def resolve_map(self) -> dict[str, tuple[str, int]]:
        return {h: ("127.0.0.1", self.info.port) for h in self.info.hosts}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def _readline_with_timeout(stream, timeout: float) -> bytes:
    out: list[bytes] = []
    t = threading.Thread(target=lambda: out.append(stream.readline()), daemon=True)
    t.start()
    t.join(timeout)
    return out[0] if out else b""


class PlainMitmdump(BrokerProcess):
    """Stock mitmdump with only broker/proxy/upstream_resolve.py (no recording): the baseline proxy. That addon
    is the very redirect `broker run` loads for --resolve, so upstream connections are redirected and
    reused identically."""

    def command(self) -> list[str]:
        sets = [
            "flow_detail=0", f"confdir={self.confdir}", f"ssl_verify_upstream_trusted_ca={self.upstream.ca_pem}",
            "connection_strategy=lazy",
        ]
        sets += [f"broker_resolve={h}=127.0.0.1:{self.upstream.port}" for h in self.upstream.hosts]
        cmd = [str(BIN / "mitmdump"), "-s", str(ROOT / "broker" / "proxy" / "upstream_resolve.py"),
               "--listen-host", "127.0.0.1", "--listen-port", "0"]
        for s in sets:
            cmd += ["--set", s]
        return cmd + list(self.extra)


class LeanProxy(BrokerProcess):
    """bench/lean_proxy.py: mitmproxy with exactly broker run's addons (and --resolve), no recording."""

    def command(self) -> list[str]:
        cmd = [sys.executable, str(ROOT / "bench" / "lean_proxy.py"), "--listen", "127.0.0.1:0",
               "--confdir", str(self.confdir), "--upstream-ca", self.upstream.ca_pem]
        for h in self.upstream.hosts:
            cmd += ["--resolve", f"{h}=127.0.0.1:{self.upstream.port}"]
        return cmd


def fdatasync_latencies(directory: Path, n: int = 300) -> list[int]:
    """Nanoseconds of `os.write` of a 2 KB line + `os.fdatasync`, n times, in `directory` (the vault's
    filesystem): the floor of a durable entry, measured in the same run as the latencies it is taken from."""
    path = directory / "fdatasync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    line = b"x" * 2047 + b"\n"
    out = []
    try:
        for _ in range(n):
            t0 = time.perf_counter_ns()
            os.write(fd, line)
            os.fdatasync(fd)
            out.append(time.perf_counter_ns() - t0)
    finally:
        os.close(fd)
        path.unlink()
    return sorted(out)


def goal_rows(ratios: list[dict], fsync_p50_ms: float, clients: int) -> list[dict]:
    """The rows of issue 30's table this benchmark measures, from the summaries of one run."""
    by = {s["scenario"]: s for s in ratios}
    out = []
    for name in ("seq GET", "seq mix"):
        s = by.get(name)
        if s is None:
            continue
        out.append({"row": f"{name}: added p50 over mitmdump - fdatasync p50 (ms)", "goal": "<= 0.2",
                    "value": s["added_p50_broker_ms"] - fsync_p50_ms})
        out.append({"row": f"{name}: p99 broker / p99 mitmdump", "goal": "<= 1.3", "value": s["p99_broker/mitmdump"]})
    for name in (f"{clients}x GET", f"{clients}x mix"):
        s = by.get(name)
        if s is None:
            continue
        out.append({"row": f"{name}: req/s broker / mitmdump -w", "goal": ">= 1.5", "value": s["broker/mitmdump-w"]})
        out.append({"row": f"{name}: req/s broker / lean mitmproxy", "goal": ">= 0.9", "value": s["broker/lean"]})
    return out


def format_goals(rows: list[dict], fsync: list[int], load: tuple) -> str:
    out = ["", f"issue 30 rows (fdatasync of a 2 KB line in the vault's directory, same run: p50 "
           f"{_pct(fsync, 0.5):.3f} ms, p99 {_pct(fsync, 0.99):.3f} ms; load average {load[0][0]:.1f} at the start, "
           f"{load[1][0]:.1f} at the end)"]
    for r in rows:
        out.append(f"  {r['row']:<58} {r['value']:>7.2f}   goal {r['goal']}")
    return "\n".join(out)


def _own_cpu(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def _descendants(pid: int) -> list[int]:
    """The running descendants of a process (children first, then theirs)."""
    try:
        children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    return [d for c in children for d in (c, *_descendants(c))]


def _cpu_of(pids: list[int], keep=lambda pid: True) -> float:
    total = 0.0
    for pid in pids:
        try:
            total += _own_cpu(pid) if keep(pid) else 0.0
        except OSError:
            pass  # exited meanwhile
    return total


def children_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process's running child processes, with theirs (the broker's recording service)."""
    return _cpu_of(_descendants(pid))


def service_cpu_seconds(pid: int) -> float:
    """CPU seconds of the recording services (`python -m broker.proxy.service`) among a process's
    descendants: the broker's child, or with --workers each worker's child."""
    return _cpu_of(_descendants(pid), lambda p: b"broker.proxy.service" in Path(f"/proc/{p}/cmdline").read_bytes())


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads) and of its running child processes, in seconds."""
    return _own_cpu(pid) + children_cpu_seconds(pid)


# -- clients -------------------------------------------------------------------------------------


class Target:
    """How to reach one target: client factories (sync and async) and the proxy process, if any."""

    def __init__(self, name: str, upstream: UpstreamProcess, proxy: BrokerProcess | None) -> None:
        self.name = name
        self.upstream = upstream
        self.proxy = proxy
        ca = proxy.ca if proxy is not None else upstream.info.ca_pem
        self.ssl = ssl.create_default_context(cafile=ca)
        self.sent = 0  # calls answered through this target (warm-ups included), in session SESSION
        self.sent_other: dict[str, int] = {}  # and in other sessions (the curl scenario with several)

    @property
    def pid(self) -> int | None:
        return self.proxy.proc.pid if self.proxy is not None and self.proxy.proc is not None else None

    def client(self) -> httpx.Client:
        limits = httpx.Limits(max_connections=4, max_keepalive_connections=4)
        if self.proxy is not None:
            return httpx.Client(proxy=self.proxy.proxy_url(), verify=self.ssl, limits=limits, trust_env=False,
                                timeout=30)
        transport = httpx.HTTPTransport(verify=self.ssl, limits=limits, trust_env=False)
        transport._pool._network_backend = _MappedBackend(self.upstream.resolve_map())
        return httpx.Client(transport=transport, trust_env=False, timeout=30)

    def async_client(self) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=4, max_keepalive_connections=4)
        if self.proxy is not None:
            return httpx.AsyncClient(proxy=self.proxy.proxy_url(), verify=self.ssl, limits=limits,
                                     trust_env=False, timeout=30)
        transport = httpx.AsyncHTTPTransport(verify=self.ssl, limits=limits, trust_env=False)
        transport._pool._network_backend = _AsyncMappedBackend(self.upstream.resolve_map())
        return httpx.AsyncClient(transport=transport, trust_env=False, timeout=30)


def _request_args(k: int, mix: bool) -> tuple[str, str, dict, bytes | None]:
    if mix and k % WRITE_EVERY == 0:
        body = json.dumps({"channel": "#general", "text": f"bench message {k}"}).encode()
        headers = POST_HEADERS | {"Content-Type": "application/json; charset=utf-8"}
        return "POST", POST_URL, headers, body
    return "GET", GET_URL, GET_HEADERS, None


def _check(resp: httpx.Response) -> None:
    if resp.status_code != 200:
        raise RuntimeError(f"{resp.request.method} {resp.request.url} answered {resp.status_code}: {resp.text[:300]}")


class _Slice:
    """CPU and wall clock around one slice of calls to one target."""

    def __init__(self, target: Target, upstream: UpstreamProcess) -> None:
        self.pids = {"proxy": target.pid, "upstream": upstream.pid}

    def _read(self) -> dict[str, float]:
        out = {k: cpu_seconds(p) for k, p in self.pids.items() if p is not None}
        if self.pids["proxy"] is not None:
            out["service"] = service_cpu_seconds(self.pids["proxy"])
        return out

    def __enter__(self) -> _Slice:
        self.before = self._read()
        self.c0 = time.process_time()
        self.t0 = time.perf_counter_ns()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = (time.perf_counter_ns() - self.t0) / 1e9
        self.client_cpu = time.process_time() - self.c0
        self.cpu = {k: v - self.before[k] for k, v in self._read().items()}

    def row(self, target: Target, lat: list[int]) -> dict:
        n = len(lat)
        return {
            "target": target.name, "requests": n, "seconds": self.seconds, "req_s": n / self.seconds,
            "client_cpu": self.client_cpu, "upstream_cpu": self.cpu["upstream"], "proxy_cpu": self.cpu.get("proxy"),
            "service_cpu": self.cpu.get("service"), "lat_ns": lat,
        }


def _seq_calls(c: httpx.Client, ks: range, mix: bool, lat: list[int] | None) -> None:
    clock = time.perf_counter_ns
    for k in ks:
        method, url, headers, body = _request_args(k, mix)
        a = clock()
        resp = c.request(method, url, headers=headers, content=body)
        if lat is not None:
            lat.append(clock() - a)
        _check(resp)


def run_sequential(targets: dict[str, Target], upstream: UpstreamProcess, scen: dict, rounds: int,
                   log: Callable[[str], None]) -> list[dict]:
    """One client per target, each with its own keep-alive connection(s), open for the whole scenario;
    round after round every target gets a slice of scen["n"] calls, in a rotating order."""
    rows: list[dict] = []
    clients = {name: t.client() for name, t in targets.items()}
    count = dict.fromkeys(targets, 0)  # calls made per target: keeps the mix pattern going across slices
    try:
        for name, c in clients.items():
            _seq_calls(c, range(1, scen["warm"] + 1), scen["mix"], None)
            targets[name].sent += scen["warm"]
        order = list(targets)
        for r in range(rounds):
            for name in order:
                t, lat = targets[name], []
                with _Slice(t, upstream) as sl:
                    _seq_calls(clients[name], range(count[name] + 1, count[name] + scen["n"] + 1), scen["mix"], lat)
                count[name] += scen["n"]
                t.sent += scen["n"]
                rows.append(sl.row(t, lat) | {"scenario": scen["name"], "round": r + 1})
            order = order[1:] + order[:1]
            _log_round(log, scen, r, rows[-len(order):])
    finally:
        for c in clients.values():
            c.close()
    return rows


async def _run_concurrent(targets: dict[str, Target], upstream: UpstreamProcess, scen: dict, rounds: int,
                          log: Callable[[str], None]) -> list[dict]:
    """scen["clients"] clients per target (each its own httpx.AsyncClient and connections), open for the
    whole scenario; every round each target gets a slice of scen["n"] calls shared by its clients."""
    width, per_client = scen["clients"], max(1, scen["n"] // scen["clients"])
    rows: list[dict] = []
    pools = {name: [t.async_client() for _ in range(width)] for name, t in targets.items()}
    count = {name: [0] * width for name in targets}
    clock = time.perf_counter_ns

    async def worker(name: str, i: int, calls: int, lat: list[int] | None) -> None:
        c = pools[name][i]
        for _ in range(calls):
            count[name][i] += 1
            method, url, headers, body = _request_args(count[name][i] + i, scen["mix"])  # each client: the mix
            a = clock()
            resp = await c.request(method, url, headers=headers, content=body)
            if lat is not None:
                lat.append(clock() - a)
            _check(resp)

    try:
        for name, t in targets.items():
            await asyncio.gather(*(worker(name, i, scen["warm"], None) for i in range(width)))
            t.sent += scen["warm"] * width
        order = list(targets)
        for r in range(rounds):
            for name in order:
                t, lat = targets[name], []
                with _Slice(t, upstream) as sl:
                    await asyncio.gather(*(worker(name, i, per_client, lat) for i in range(width)))
                t.sent += per_client * width
                rows.append(sl.row(t, lat) | {"scenario": scen["name"], "round": r + 1})
            order = order[1:] + order[:1]
            _log_round(log, scen, r, rows[-len(order):])
    finally:
        await asyncio.gather(*(c.aclose() for pool in pools.values() for c in pool), return_exceptions=True)
    return rows


# -- a C load generator (curl) -------------------------------------------------------------------

CURL_TARGETS = ("lean", "broker", "broker2")
"""The targets of the curl scenarios: what `--workers 2` scales, against one worker and the lean baseline."""


def _curl_config(path: Path, proxy: BrokerProcess, n: int, sessions: int) -> None:
    """A curl config: n GETs through `proxy`, in `sessions` sections (each its own X-Broker-Session
    and connections, so with several sessions the workers do not share one session file)."""
    common = (f'proxy = "{proxy.proxy_url()}"\ncacert = "{proxy.ca}"\nhttp1.1\nsilent\n'
              f'header = "Authorization: {GET_HEADERS["Authorization"]}"\n'
              'write-out = "%{http_code} %{time_total}\\n"\n')
    sections = []
    for j in range(sessions):
        head = common + (f'header = "X-Broker-Session: {SESSION}-{j}"\n' if sessions > 1 else "")
        count = n // sessions + (1 if j < n % sessions else 0)
        sections.append(head + "".join(f'url = "{GET_URL}"\noutput = "/dev/null"\n' for _ in range(count)))
    path.write_text("next\n".join(sections))


def _curl_slice(curl: str, target: Target, upstream: UpstreamProcess, scen: dict, cfg: Path) -> dict:
    """One `curl --parallel` run of scen["n"] calls; curl's CPU from its rusage (a child of this process)."""
    assert target.proxy is not None
    pids = {"proxy": target.pid, "upstream": upstream.pid}
    before = {k: cpu_seconds(p) for k, p in pids.items() if p is not None}
    svc0 = service_cpu_seconds(pids["proxy"]) if pids["proxy"] else 0.0
    ru0 = os.times()
    t0 = time.perf_counter_ns()
    out = subprocess.run([curl, "--parallel", "--parallel-immediate", "--parallel-max", str(scen["clients"]),
                          "-K", str(cfg)], capture_output=True, text=True, timeout=600)
    seconds = (time.perf_counter_ns() - t0) / 1e9
    ru1 = os.times()
    lines = [ln.split() for ln in out.stdout.splitlines() if ln.strip()]
    bad = [ln for ln in lines if ln[0] != "200"]
    if len(lines) != scen["n"] or bad:
        raise RuntimeError(f"curl through {target.name}: {len(lines)} answers, {len(bad)} not 200: "
                           f"{bad[:3]} {out.stderr[-300:]}")
    lat = [int(float(ln[1]) * 1e9) for ln in lines]
    cpu = {k: cpu_seconds(p) - before[k] for k, p in pids.items() if p is not None}
    return {
        "target": target.name, "requests": len(lat), "seconds": seconds, "req_s": len(lat) / seconds,
        "client_cpu": (ru1.children_user + ru1.children_system) - (ru0.children_user + ru0.children_system),
        "upstream_cpu": cpu["upstream"], "proxy_cpu": cpu.get("proxy"),
        "service_cpu": service_cpu_seconds(pids["proxy"]) - svc0 if pids["proxy"] else None, "lat_ns": lat,
    }


def run_curl(curl: str, targets: dict[str, Target], upstream: UpstreamProcess, scen: dict, rounds: int,
             root: Path, log: Callable[[str], None]) -> list[dict]:
    """curl --parallel (C, HTTP/1.1 keep-alive, scen["clients"] connections) as the load generator: it
    costs a fraction of the Python client's CPU per call, so more of the two cores is left to the proxies."""
    rows: list[dict] = []
    names = [t for t in CURL_TARGETS if t in targets]
    cfgs = {}
    for name in names:
        cfgs[name] = root / f"curl-{name}-{scen['sessions']}.cfg"
        _curl_config(cfgs[name], targets[name].proxy, scen["n"], scen["sessions"])

    def sent(t: Target) -> None:
        if scen["sessions"] == 1:
            t.sent += scen["n"]
            return
        for j in range(scen["sessions"]):
            key = f"{SESSION}-{j}"
            t.sent_other[key] = t.sent_other.get(key, 0) + scen["n"] // scen["sessions"] + (
                1 if j < scen["n"] % scen["sessions"] else 0)

    for name in names:  # warm-up: connections, certificates
        _curl_slice(curl, targets[name], upstream, scen, cfgs[name])
        sent(targets[name])
    order = list(names)
    for r in range(rounds):
        for name in order:
            row = _curl_slice(curl, targets[name], upstream, scen, cfgs[name])
            sent(targets[name])
            rows.append(row | {"scenario": scen["name"], "round": r + 1})
        order = order[1:] + order[:1]
        _log_round(log, scen, r, rows[-len(order):])
    return rows


def summarise_curl(rows: list[dict], scens: list[dict]) -> tuple[list[dict], list[dict]]:
    """Per (scenario, target): pooled figures, with the CPU of every process per call (proxy with its
    recording services, fake upstream, curl) and calls per CPU-second; per scenario: medians of the
    within-round ratios."""
    table, ratios = [], []
    for scen in scens:
        mine = [r for r in rows if r["scenario"] == scen["name"]]
        names = [t for t in CURL_TARGETS if any(r["target"] == t for r in mine)]
        for t in names:
            p = pooled([r for r in mine if r["target"] == t])
            total = p["proxy_cpu_us"] + p["upstream_cpu_us"] + p["client_cpu_us"]
            table.append(p | {"scenario": scen["name"], "target": t, "total_cpu_us": total,
                              "calls_per_cpu_s": 1e6 / total, "proxy_calls_per_cpu_s": 1e6 / p["proxy_cpu_us"]})
        by_round: dict[int, dict[str, dict]] = {}
        for r in mine:
            by_round.setdefault(r["round"], {})[r["target"]] = r
        summary: dict = {"scenario": scen["name"]}
        for num, den in (("broker", "lean"), ("broker2", "broker")):
            if num in names and den in names:
                summary[f"{num}/{den}"] = statistics.median(
                    rr[num]["req_s"] / rr[den]["req_s"] for rr in by_round.values())
                summary[f"{num}/{den} runs"] = sorted(
                    round(rr[num]["req_s"] / rr[den]["req_s"], 3) for rr in by_round.values())
        ratios.append(summary)
    return table, ratios


def format_curl(table: list[dict], ratios: list[dict]) -> str:
    out = [
        "\ncurl --parallel as the load generator (C client, HTTP/1.1 keep-alive), GET; broker2 = --workers 2",
        f"{'scenario':<24} {'target':<8} {'req/s':>6} {'p50 ms':>7} {'proxy CPU':>10} {'of it svc':>10} "
        f"{'upstr CPU':>10} {'curl CPU':>9} {'all CPU':>8} {'calls/CPU-s':>12} {'proxy calls/CPU-s':>18}",
    ]
    for r in table:
        out.append(
            f"{r['scenario']:<24} {r['target']:<8} {r['req_s']:>6.0f} {r['p50_ms']:>7.2f} {r['proxy_cpu_us']:>10.0f} "
            f"{r['service_cpu_us']:>10.0f} {r['upstream_cpu_us']:>10.0f} {r['client_cpu_us']:>9.0f} "
            f"{r['total_cpu_us']:>8.0f} {r['calls_per_cpu_s']:>12.0f} {r['proxy_calls_per_cpu_s']:>18.0f}"
        )
    out.append("CPU columns: microseconds per call (proxy with its child processes: for broker2 both workers and")
    out.append("their recording services; `of it svc`: the recording services); calls/CPU-s: calls per second")
    out.append("of CPU of all processes (proxy, fake, curl); proxy calls/CPU-s: of the proxy's processes alone.")
    out.append("On 2 cores shared with the fake and the client, N workers cannot exceed (2 cores / all CPU per")
    out.append("call) calls per second.")
    for s in ratios:
        parts = [f"{k} {s[k]:.2f} ({_quartiles(s[k + ' runs'])})" for k in ("broker/lean", "broker2/broker") if k in s]
        out.append(f"{s['scenario']:<24} " + "   ".join(parts))
    return "\n".join(out)


def _log_round(log: Callable[[str], None], scen: dict, r: int, rows: list[dict]) -> None:
    log(f"  {scen['name']:<8} round {r + 1:>2}: " + "  ".join(f"{x['target']} {x['req_s']:.0f}/s" for x in rows))


def run_scenario(targets: dict[str, Target], upstream: UpstreamProcess, scen: dict, rounds: int,
                 log: Callable[[str], None]) -> list[dict]:
    if scen["clients"] == 1:
        return run_sequential(targets, upstream, scen, rounds, log)
    return asyncio.run(_run_concurrent(targets, upstream, scen, rounds, log))


def _pct(sorted_ns: list[int], q: float) -> float:
    """q-quantile (nearest rank) of sorted nanosecond samples, in milliseconds."""
    i = min(len(sorted_ns) - 1, max(0, round(q * len(sorted_ns)) - 1))
    return sorted_ns[i] / 1e6


def measure(target: Target, upstream: UpstreamProcess, scen: dict) -> dict:
    """One target alone: fresh clients, scen["warm"] untimed calls each, then one slice of scen["n"] calls."""
    rows = run_scenario({target.name: target}, upstream, scen, 1, lambda _msg: None)
    return pooled(rows)


def pooled(rows: list[dict]) -> dict:
    """Slices of one target pooled: calls / time, percentiles over all calls, CPU per call."""
    lat = sorted(x for r in rows for x in r["lat_ns"])
    n, seconds = len(lat), sum(r["seconds"] for r in rows)
    proxy = [r["proxy_cpu"] for r in rows if r["proxy_cpu"] is not None]
    return {
        "requests": n, "seconds": seconds, "req_s": n / seconds, "p50_ms": _pct(lat, 0.50),
        "p99_ms": _pct(lat, 0.99), "mean_ms": sum(lat) / n / 1e6,
        "client_cpu_us": sum(r["client_cpu"] for r in rows) / n * 1e6,
        "upstream_cpu_us": sum(r["upstream_cpu"] for r in rows) / n * 1e6,
        "proxy_cpu_us": sum(proxy) / n * 1e6 if proxy else None,
        "service_cpu_us": sum(r["service_cpu"] or 0.0 for r in rows) / n * 1e6 if proxy else None,
    }


# -- the run -------------------------------------------------------------------------------------


def scenarios(seq: int, conc: int, clients: int) -> list[dict]:
    return [
        {"name": "seq GET", "clients": 1, "n": seq, "warm": 20, "mix": False},
        {"name": "seq mix", "clients": 1, "n": seq, "warm": 20, "mix": True},
        {"name": f"{clients}x GET", "clients": clients, "n": conc, "warm": 4, "mix": False},
        {"name": f"{clients}x mix", "clients": clients, "n": conc, "warm": 4, "mix": True},
    ]


def summarise(rows: list[dict], scens: list[dict], names: tuple[str, ...] = TARGETS,
              base: str = "mitmdump") -> tuple[list[dict], list[dict]]:
    """Per (scenario, target): slices pooled. Per scenario: medians of the per-round ratios (each round's
    slices ran back to back, so a slow phase of the machine hits both sides of a ratio)."""
    table: list[dict] = []
    ratios: list[dict] = []
    for scen in scens:
        mine = [r for r in rows if r["scenario"] == scen["name"]]
        by_round: dict[int, dict[str, dict]] = {}
        for r in mine:
            by_round.setdefault(r["round"], {})[r["target"]] = r
        pooled_rows = {}
        for t in names:
            p = pooled([r for r in mine if r["target"] == t])
            p |= {"scenario": scen["name"], "target": t, "rounds": len(by_round),
                  "runs_req_s": [by_round[k][t]["req_s"] for k in sorted(by_round)]}
            pooled_rows[t] = p
            table.append(p)
        per_round = [{f"{t}/{base}": rr[t]["req_s"] / rr[base]["req_s"] for t in names} for rr in by_round.values()]
        summary: dict = {"scenario": scen["name"]}
        for t in names:
            if t != base:
                vals = sorted(p[f"{t}/{base}"] for p in per_round)
                summary[f"{t}/{base}"] = statistics.median(vals)
                summary[f"{t}/{base} runs"] = [round(v, 3) for v in vals]
                summary[f"{t}/{base} pooled"] = pooled_rows[t]["req_s"] / pooled_rows[base]["req_s"]
        for num, den in (("broker", "lean"), ("broker2", "broker"), ("broker", "mitmdump-w")):
            if num in names and den in names:
                summary[f"{num}/{den}"] = statistics.median(
                    rr[num]["req_s"] / rr[den]["req_s"] for rr in by_round.values())
        if "broker" in names and base in names:
            summary[f"p99_broker/{base}"] = pooled_rows["broker"]["p99_ms"] / pooled_rows[base]["p99_ms"]
        if "direct" in names and "broker" in names:
            b, m, d = pooled_rows["broker"], pooled_rows["mitmdump"], pooled_rows["direct"]
            summary["broker/direct"] = statistics.median(
                rr["broker"]["req_s"] / rr["direct"]["req_s"] for rr in by_round.values())
            summary["mitmdump/direct"] = statistics.median(
                rr["mitmdump"]["req_s"] / rr["direct"]["req_s"] for rr in by_round.values())
            summary |= {
                "added_p50_broker_ms": b["p50_ms"] - m["p50_ms"], "added_p99_broker_ms": b["p99_ms"] - m["p99_ms"],
                "added_p50_mitmdump_ms": m["p50_ms"] - d["p50_ms"],
                "added_p99_mitmdump_ms": m["p99_ms"] - d["p99_ms"],
                "added_cpu_broker_us": b["proxy_cpu_us"] - m["proxy_cpu_us"],
                "cpu_ratio": m["proxy_cpu_us"] / b["proxy_cpu_us"],
            }
        ratios.append(summary)
    return table, ratios


def _quartiles(vals: list[float]) -> str:
    if len(vals) < 4:
        return " ".join(f"{v:.2f}" for v in vals)
    q = statistics.quantiles(vals, n=4)
    return f"{q[0]:.2f}..{q[2]:.2f}"


def format_tables(table: list[dict], ratios: list[dict], params: dict, check: dict) -> str:
    out = [
        f"broker vs mitmdump vs direct: HTTPS, HTTP/1.1 keep-alive; {params['rounds']} rounds, each a slice of "
        f"{params['seq']} (seq) or {params['conc']} ({params['clients']}x) calls per target, targets interleaved",
        f"{'scenario':<9} {'target':<9} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'proxy CPU':>10} {'of it svc':>10} {'upstr CPU':>10} {'client CPU':>10}",
    ]
    for r in table:
        proxy = f"{r['proxy_cpu_us']:>10.0f}" if r["proxy_cpu_us"] is not None else f"{'-':>10}"
        svc = f"{r['service_cpu_us']:>10.0f}" if r.get("service_cpu_us") else f"{'-':>10}"
        out.append(
            f"{r['scenario']:<9} {r['target']:<9} {r['req_s']:>7.0f} {r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f} "
            f"{proxy} {svc} {r['upstream_cpu_us']:>10.0f} {r['client_cpu_us']:>10.0f}"
        )
    out.append("req/s: calls / time over all rounds; p50/p99: over all calls; CPU columns: microseconds of process")
    out.append("CPU (user + system, all threads) per call; proxy CPU includes its child processes, `of it svc`")
    out.append("is the recording services' (broker2: both workers' services)")
    out.append("")
    out.append(
        f"{'scenario':<9} {'broker/mitmdump':>15} {'(IQR)':>11} {'addon/':>9} {'broker/':>8} {'mitmdump/':>9}   "
        f"{'added by broker ms':>18}  {'added by mitmdump':>17}  {'broker CPU':>10} {'CPU':>6}"
    )
    out.append(
        f"{'':<9} {'':>15} {'':>11} {'mitmdump':>9} {'direct':>8} {'direct':>9}   {'p50':>8} {'p99':>9}  {'p50':>8} "
        f"{'p99':>8}  {'+us/call':>10} {'ratio':>6}"
    )
    for s in ratios:
        out.append(
            f"{s['scenario']:<9} {s['broker/mitmdump']:>15.2f} {_quartiles(s['broker/mitmdump runs']):>11} "
            f"{s['addon/mitmdump']:>9.2f} {s['broker/direct']:>8.2f} {s['mitmdump/direct']:>9.2f}"
            f"   {s['added_p50_broker_ms']:>+8.2f} {s['added_p99_broker_ms']:>+9.2f}"
            f"  {s['added_p50_mitmdump_ms']:>+8.2f} {s['added_p99_mitmdump_ms']:>+8.2f}"
            f"  {s['added_cpu_broker_us']:>+10.0f} {s['cpu_ratio']:>6.2f}"
        )
    for s in ratios:
        if "broker/lean" in s:
            out.append(f"{s['scenario']:<9} broker/lean {s['broker/lean']:.2f}   "
                       f"broker --workers 2 / broker {s['broker2/broker']:.2f}")
    out.append("throughput ratios: median over rounds of the ratio within the round (IQR: its spread); addon:")
    out.append("stock mitmdump -s addons/connector_journal.py (all of mitmdump's default addons loaded);")
    out.append("added latency: broker - mitmdump, mitmdump - direct, from the pooled p50/p99; broker CPU: proxy")
    out.append("CPU/call over mitmdump's; CPU ratio = mitmdump CPU/call / broker CPU/call (the throughput ratio")
    out.append("to expect when the proxy's CPU is the limit)")
    out.append("")
    for name, c in check.items():
        out.append(
            f"vault check ({name}): {c['entries']} entries in session {SESSION!r} (expected {c['expected']}), "
            f"verify_session intact={c['intact']}"
            + (f"; {c['other_entries']} in {c['other_sessions']} other sessions" if c.get("other_sessions") else "")
            + ("" if c["ok"] else f"  <-- MISMATCH {c['detail']}")
        )
    return "\n".join(out)


def verify_vault(vault_dir: Path, expected: int, others: dict[str, int] | None = None) -> dict:
    """Session SESSION holds `expected` entries and every session of `others` its count, all intact."""
    from journal.vault import Vault
    from journal.verify import verify_session

    report = verify_session(Vault(vault_dir), SESSION, check_blobs=True)
    ok = report.intact and report.entries == expected
    out = {"entries": report.entries, "expected": expected, "intact": report.intact, "ok": ok,
           "detail": report.detail}
    for session, n in (others or {}).items():
        r = verify_session(Vault(vault_dir), session, check_blobs=True)
        if not (r.intact and r.entries == n):
            out["ok"] = False
            out["detail"] = f"session {session}: {r.entries} entries (expected {n}), intact={r.intact}: {r.detail}"
    if others:
        out["other_sessions"] = len(others)
        out["other_entries"] = sum(others.values())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.broker_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run (under a minute)")
    ap.add_argument("--rounds", type=int, help="rounds per scenario (default 15, --quick 4)")
    ap.add_argument("--seq", type=int, help="calls per target per round, sequential (default 60, --quick 40)")
    ap.add_argument("--conc", type=int, help="calls per target per round, concurrent (default 160, --quick 96)")
    ap.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    ap.add_argument("--no-curl", action="store_true",
                    help="skip the curl scenarios (lean, broker, --workers 2 with curl --parallel as the client)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE (key 'broker')")
    ap.add_argument("--load", type=int, default=0, metavar="N",
                    help="N busy processes (bench/load.py) during the scenarios: the 'under a load of N' rows")
    ap.add_argument("--profile", action="store_true",
                    help="also run broker what-if variants, py-spy (if installed) and an addon stage breakdown")
    args = ap.parse_args(argv)
    rounds = args.rounds or (4 if args.quick else 15)
    seq = args.seq or (40 if args.quick else 60)
    conc = args.conc or (96 if args.quick else 160)
    if min(rounds, seq, conc, args.clients) < 1:
        ap.error("--rounds, --seq, --conc and --clients must be positive")
    scens = scenarios(seq, conc, args.clients)
    curl = None if args.no_curl else shutil.which("curl")
    # each slice is one curl process, so its connections (and TLS handshakes) are new: slices of 5x
    # the concurrent slice keep that a small part of the CPU per call
    curl_scens = [{"name": f"curl {args.clients}x GET, 1 session", "clients": args.clients, "n": conc * 5,
                   "sessions": 1},
                  {"name": f"curl {args.clients}x GET, {args.clients} sess.", "clients": args.clients,
                   "n": conc * 5, "sessions": args.clients}]
    curl_rounds = max(3, rounds // 3)
    load_start = os.getloadavg()
    params = {"rounds": rounds, "seq": seq, "conc": conc, "clients": args.clients, "write_every": WRITE_EVERY,
              "quick": args.quick, "get_url": GET_URL, "post_url": POST_URL}

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    root = scratch_dir("broker-")
    upstream = UpstreamProcess()
    procs: list[BrokerProcess] = []
    revision = _revision()
    t0 = time.perf_counter()
    try:
        upstream.start()
        for name in ("mitmdump", "mitmdump-w", "lean", "addon", "broker", "broker2"):
            (root / name).mkdir()
        mitm = PlainMitmdump(root / "mitmdump", upstream.info, flavour="mitmdump")
        mitm_w = PlainMitmdump(root / "mitmdump-w", upstream.info, "-w", str(root / "mitmdump-w" / "flows"),
                               flavour="mitmdump")
        lean = LeanProxy(root / "lean", upstream.info)
        addon = BrokerProcess(root / "addon", upstream.info, "--set", f"broker_session={SESSION}", flavour="mitmdump")
        broker = BrokerProcess(root / "broker", upstream.info, "--session", SESSION)
        broker2 = BrokerProcess(root / "broker2", upstream.info, "--session", SESSION, "--workers", "2")
        procs += [mitm, mitm_w, lean, addon, broker, broker2]
        for p in procs:
            p.start(timeout=180)  # six proxies starting at once on a shared, busy machine
        targets = {"direct": Target("direct", upstream, None), "mitmdump": Target("mitmdump", upstream, mitm),
                   "mitmdump-w": Target("mitmdump-w", upstream, mitm_w),
                   "lean": Target("lean", upstream, lean), "addon": Target("addon", upstream, addon),
                   "broker": Target("broker", upstream, broker), "broker2": Target("broker2", upstream, broker2)}
        log(f"processes: upstream pid {upstream.pid}, mitmdump pid {mitm.proc.pid}, mitmdump -s addon pid "
            f"{addon.proc.pid}, broker pid {broker.proc.pid}")
        for t in targets.values():  # first calls: certificates generated, code paths warmed
            measure(t, upstream, {"name": "warm-up", "clients": 1, "n": 100, "warm": 0, "mix": True})
            measure(t, upstream, {"name": "warm-up", "clients": args.clients, "n": args.clients * 5, "warm": 0,
                                  "mix": True})
        with busy_load(args.load):
            fsync = fdatasync_latencies(broker.vault)
            rows = [row for scen in scens for row in run_scenario(targets, upstream, scen, rounds, log)]
            fsync = sorted(fsync + fdatasync_latencies(broker.vault))
            curl_rows = [row for scen in curl_scens
                         for row in run_curl(curl, targets, upstream, scen, curl_rounds, root, log)] if curl else []
        check = {}
        for name, proc in (("broker", broker), ("broker2", broker2), ("addon", addon)):
            code = proc.stop()
            if code != 0:
                raise RuntimeError(f"{name} exited with {code}:\n{proc.output.decode(errors='replace')[-2000:]}")
            check[name] = verify_vault(proc.vault, targets[name].sent, targets[name].sent_other)
        bench_seconds = time.perf_counter() - t0
        profile, profile_figures = run_profile(root, args.quick, upstream, mitm, args.clients, log) if args.profile \
            else ("", {})
    finally:
        for p in procs:
            p.stop()
        upstream.stop()
        shutil.rmtree(root, ignore_errors=True)
    total = time.perf_counter() - t0
    table, ratios = summarise(rows, scens)
    print(format_tables(table, ratios, params, check))
    curl_table, curl_ratios = summarise_curl(curl_rows, curl_scens) if curl_rows else ([], [])
    if curl_rows:
        print(format_curl(curl_table, curl_ratios))
    elif not args.no_curl:
        print("\n(curl not found: the curl scenarios were skipped)")
    load = (load_start, os.getloadavg())
    goals = goal_rows(ratios, _pct(fsync, 0.5), args.clients)
    print(format_goals(goals, fsync, load) + (f" [with {args.load} busy processes]" if args.load else ""))
    print(f"\n(benchmark {bench_seconds:.1f} s, total {total:.1f} s, on {os.cpu_count()} CPUs, "
          f"Python {sys.version.split()[0]}, httpx {httpx.__version__}, mitmproxy {_mitmproxy_version()}, "
          f"revision {revision}; load average {load[0][0]:.1f} at the start, {load[1][0]:.1f} at the end)")
    if profile:
        print(profile)
    if args.json:
        write_json(args.json, "broker", {
            "machine": machine() | {"mitmproxy": _mitmproxy_version(), "httpx": httpx.__version__},
            "revision": revision,
            "params": params, "table": table, "ratios": ratios, "runs": _without_latencies(rows),
            "curl_table": curl_table, "curl_ratios": curl_ratios, "curl_runs": _without_latencies(curl_rows),
            "load_average": load, "busy_processes": args.load,
            "fdatasync_p50_ms": _pct(fsync, 0.5), "fdatasync_p99_ms": _pct(fsync, 0.99), "goals": goals,
            "vault_check": check,
            "bench_seconds": bench_seconds, "total_seconds": total, "profile": profile_figures,
        })
        print(f"figures written to {args.json}")
    return 0 if all(c["ok"] for c in check.values()) else 1


def _revision() -> str:
    """The checkout measured: commit, plus '+changes' when addons/, journal/ or broker/ differ from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "addons", "journal", "broker"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def _without_latencies(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "lat_ns"} for r in rows]


def _mitmproxy_version() -> str:
    from mitmproxy.version import VERSION

    return VERSION


# -- profiling (--profile) -----------------------------------------------------------------------


def _sample_materials() -> list[dict]:
    """What the recording service receives for the benchmark's two calls: the headers httpx 0.28 sends and
    the headers and (encoded) bodies the fake upstream really answers, fetched from an in-process fake."""
    from mitmproxy import http

    from tests.support.upstreams import Upstream

    base = [("Host", ""), ("Accept", "*/*"), ("Accept-Encoding", "gzip, deflate, br"), ("Connection", "keep-alive"),
            ("User-Agent", f"python-httpx/{httpx.__version__}")]
    out = []
    with Upstream(max_records=100) as up, up.client() as c:
        for method, url, headers, body in (_request_args(1, False), _request_args(WRITE_EVERY, True)):
            resp = c.request(method, url, headers=headers, content=body)
            _check(resp)
            host = httpx.URL(url).host
            req_headers = [(k, host if k == "Host" else headers.get(k, v)) for k, v in base]
            req_headers += [(k, v) for k, v in headers.items() if k not in dict(base)]
            if body:
                req_headers.append(("Content-Length", str(len(body))))
            raw = http.Response.make(resp.status_code, resp.content,
                                     [(k.encode(), v.encode()) for k, v in resp.headers.multi_items()])
            out.append({
                "session": SESSION, "agent": "bench", "principal": None,
                "connector": "gmail" if "gmail" in url else "slack", "method": method, "url": url,
                "request_headers": tuple((k.encode(), v.encode()) for k, v in req_headers),
                "request_body": body or None, "status": resp.status_code,
                "response_headers": raw.headers.fields, "response_body": raw.raw_content, "error": None,
                "ts": time.time(), "mcp": None,
            })
    return out


def service_breakdown(root: Path, n: int, rounds: int = 3) -> list[tuple[str, float]]:
    """The recording service's work per call, stage by stage, timed in this process on the benchmark's
    two calls in turn (thread CPU time, best of `rounds` after a warm-up; no profiler)."""
    from bench.capture_bench import to_call
    from broker.proxy.service import call_fields
    from journal.bodies import JSON_PARSE_LIMIT, decoded_prefix, fit_entry, record_body
    from journal.canonical import orjson_matches_jcs
    from journal.chain import GENESIS, chain_entry
    from journal.entry import validate_fields
    from journal.record import Recorder, principal_fingerprint, text_pairs
    from journal.redact import header_value, is_token_exchange, redact_headers, redact_url

    samples = _sample_materials()
    fast = Recorder(root / "stages-nosync", durable=False)
    durable = Recorder(root / "stages-durable")
    clock = time.thread_time_ns

    def stages(m: dict) -> dict[str, object]:
        rh, sh = text_pairs(m["request_headers"]), text_pairs(m["response_headers"])
        body, resp = m["request_body"], m["response_body"]
        return {
            "header pairs as text": lambda: (text_pairs(m["request_headers"]), text_pairs(m["response_headers"])),
            "token exchange check": lambda: is_token_exchange(m["method"], m["url"], rh, body),
            "effect rules (registry.classify)": lambda: fast.registry.classify(
                m["method"], m["url"], rh, decoded_prefix(body, None, JSON_PARSE_LIMIT) if body else None),
            "principal fingerprint": lambda: principal_fingerprint(rh, m["url"]),
            "redact_url": lambda: redact_url(m["url"]),
            "redact_headers (request + response)": lambda: (redact_headers(rh), redact_headers(sh)),
            "request body (record_body)": lambda: record_body(
                body, header_value(rh, "content-type"), header_value(rh, "content-encoding"), fast.blobs),
            "response body (decode, redact, parse)": lambda: record_body(
                resp, header_value(sh, "content-type"), header_value(sh, "content-encoding"), fast.blobs),
        }

    calls = [to_call(m) for m in samples]
    fields = [call_fields(fast, c) for c in calls]
    whole = {
        "call_fields, whole (the above and the entry dict)": lambda k: call_fields(fast, calls[k % 2]),
        "validate_fields": lambda k: validate_fields(fields[k % 2]),
        "fit_entry (size check)": lambda k: fit_entry(fields[k % 2], fast.blobs),
        "orjson_matches_jcs + chain_entry (canonical form, SHA-256)": lambda k: chain_entry(
            fields[k % 2], k + 1, GENESIS, orjson_ok=orjson_matches_jcs(fields[k % 2])),
        "append_many, batches of 1, no fsync": lambda k: fast.writer.append_many([fields[k % 2]]),
    }
    per_sample = [stages(m) for m in samples]
    best: dict[str, float] = {}
    for r in range(rounds + 1):
        got: dict[str, int] = {}
        for k in range(n):
            for label, fn in per_sample[k % 2].items():
                a = clock()
                fn()
                got[label] = got.get(label, 0) + clock() - a
            for label, fn in whole.items():
                a = clock()
                fn(k)
                got[label] = got.get(label, 0) + clock() - a
        a = clock()
        for k in range(0, n, 16):
            fast.writer.append_many([fields[j % 2] for j in range(k, min(n, k + 16))])
        got["append_many, batches of 16, no fsync, per entry"] = clock() - a
        if r:
            for label, ns in got.items():
                best[label] = min(best.get(label, ns), ns)
    m = min(n, 300)
    t0 = time.perf_counter_ns()
    for k in range(m):
        durable.writer.append_many([fields[k % 2]])
    out = [(label, ns / n / 1e3) for label, ns in best.items()]
    out.append(("append_many, batches of 1, fdatasync (wall)", (time.perf_counter_ns() - t0) / m / 1e3))
    fast.close()
    durable.close()
    return out


def _spy_category(stack: str) -> str:
    frames = stack.split(";")
    thread = frames[0].partition(": ")[2] or frames[0]
    names = [f.split(" (", 1)[0] for f in frames[1:]]
    if thread != "MainThread":
        return f"other thread ({thread})"
    if any(n.startswith("RecorderLink.") or n.startswith("_Acks.") for n in names):
        return "event loop: link to the recording service (send, acknowledgements)"
    for hook in ("requestheaders", "request", "responseheaders", "response", "error"):
        if f"ConnectorJournal.{hook}" in names:
            return f"event loop: addon hook {hook}"
    if any(n.startswith("ConnectorJournal.") for n in names):
        return "event loop: addon, other"
    if any("UpstreamResolve." in n for n in names):
        return "event loop: redirect addon"
    return "event loop: mitmproxy + asyncio (TLS, HTTP, hook dispatch, ...)"


def spy_profile(root: Path, upstream: UpstreamProcess, proxy: BrokerProcess, name: str, clients: int, n: int,
                rate: int = 250) -> tuple[dict[str, float], dict]:
    """Sample `proxy` with py-spy (--gil: the thread holding the GIL, i.e. running Python) while `clients`
    clients make n GETs; returns {category: us per call} and the measurement row."""
    assert proxy.proc is not None
    out = root / f"spy-{name}.txt"
    target = Target(name, upstream, proxy)
    measure(target, upstream, {"name": "warm-up", "clients": clients, "n": clients * 3, "warm": 0, "mix": False})
    spy = subprocess.Popen(
        [str(BIN / "py-spy"), "record", "--pid", str(proxy.proc.pid), "--rate", str(rate), "--format", "raw",
         "--gil", "--threads", "--nonblocking", "-o", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    time.sleep(1.5)  # py-spy attaches
    row = measure(target, upstream, {"name": "py-spy", "clients": clients, "n": n, "warm": 2, "mix": False})
    spy.send_signal(signal.SIGINT)
    _, err = spy.communicate(timeout=60)
    if not out.exists():
        raise RuntimeError(f"py-spy wrote nothing: {err.decode(errors='replace')[-500:]}")
    cats: dict[str, int] = {}
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            cat = _spy_category(stack)
            cats[cat] = cats.get(cat, 0) + int(count)
    # py-spy keeps sampling for the 1.5 s before the calls and while it stops; those samples are idle
    # ones mostly (no GIL holder), so dividing by the calls made is a fair per-call figure.
    per_call = {k: v / rate / row["requests"] * 1e6 for k, v in sorted(cats.items(), key=lambda kv: -kv[1])}
    return per_call, row


def run_profile(root: Path, quick: bool, upstream: UpstreamProcess, mitm: BrokerProcess, clients: int,
                log: Callable[[str], None]) -> tuple[str, dict]:
    figures: dict = {}
    out: list[str] = []
    if (BIN / "py-spy").exists():
        log("profile: py-spy")
        n = 480 if quick else 1280
        tmp = root / "spy-broker"
        tmp.mkdir()
        broker = BrokerProcess(tmp, upstream.info, "--session", SESSION).start()
        try:
            bcats, brow = spy_profile(root, upstream, broker, "broker", clients, n)
        finally:
            broker.stop()
        mcats, mrow = spy_profile(root, upstream, mitm, "mitmdump", clients, n)
        figures["py_spy"] = {"broker": bcats, "mitmdump": mcats, "broker_row": brow, "mitmdump_row": mrow}
        out.append(f"\n== py-spy --gil of the proxy process (samples of the thread running Python), {clients}x GET, "
                   f"{n} calls, us per call")
        for title, cats, row in (("broker (proxy process; the recording service is not sampled)", bcats, brow),
                                 ("mitmdump", mcats, mrow)):
            total = sum(cats.values())
            out.append(f"{title}: {row['req_s']:.0f} req/s; sampled {total:.0f} us/call, "
                       f"CPU {row['proxy_cpu_us']:.0f} us/call (with its child processes)")
            for cat, us in cats.items():
                if us >= 1:
                    out.append(f"  {cat:<76} {us:>7.0f} {us / total:>6.0%}")
    else:
        out.append("\n(py-spy not installed in the venv: `.venv/bin/pip install py-spy` adds a sampling profile)")

    log("profile: recording service stages")
    n = 300 if quick else 2000
    rows = service_breakdown(root, n)
    figures["service_stages_us"] = dict(rows)
    out.append(f"\n== the recording service's work, in-process, {n} calls (mix: Gmail labels GET / Slack "
               "chat.postMessage alternating), us per call: thread CPU time, best of 3 rounds, no profiler")
    for label, us in rows:
        out.append(f"  {label:<70} {us:>8.1f}")
    return "\n".join(out) + "\n", figures


if __name__ == "__main__":
    sys.exit(main())
