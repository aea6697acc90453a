"""MCP shim benchmark: `tools/call` round trips through `broker mcp` against the same server direct.

    python -m bench.mcp_bench [--quick] [--calls N] [--only stdio|http] [--compare CHECKOUT] [--profile]
                              [--json FILE]

Two transports, each measured in the same run against its own baseline:

1. stdio: a minimal JSON-RPC client (asyncio pipes, one line per message) drives two copies of the
   SDK test server (`tests/support/mcp_servers/notes_server.py`): one started directly, one started by
   `broker mcp -- ...`. Legacy handshake, `tools/list`, then N `tools/call echo` round trips,
   alternating direct and shim call by call (the order swapped every call) so drift hits both alike.
2. streamable HTTP: one SDK test server on 127.0.0.1 (`MCPServer.run("streamable-http")`), and
   `broker mcp --listen ... --upstream` in front of it. A keep-alive httpx client POSTs 2026-era
   `tools/call` requests (application/json answers), alternating direct and shim.

Every shim round trip includes writing its journal entry durably (fdatasync) before the answer is
released. Reported: p50 and p99 per path, the added p50/p99 (shim minus direct), and each process's
CPU per call (the steadier figure on a loaded machine). `--compare CHECKOUT` adds the shim of another
checkout (run from there with this interpreter) to the same rotation, so two versions meet the same
noise; `--profile` runs the stdio shim under `bench.mcp_stages` and prints the median time of each
stage of its round trip. Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson

from bench import machine, scratch_dir, write_json
from tests.support.mcp_servers.harness import NOTES_SERVER, REPO, free_port, shim_argv, wait_for_port

WARMUP = 20
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "mcp-bench", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary(direct: list[float], shim: list[float]) -> dict:
    d50, d99, s50, s99 = (percentile(direct, 0.5), percentile(direct, 0.99), percentile(shim, 0.5),
                          percentile(shim, 0.99))
    return {
        "calls": len(direct), "direct_p50_ms": d50 * 1e3, "direct_p99_ms": d99 * 1e3, "shim_p50_ms": s50 * 1e3,
        "shim_p99_ms": s99 * 1e3, "added_p50_ms": (s50 - d50) * 1e3, "added_p99_ms": (s99 - d99) * 1e3,
        "direct_mean_ms": statistics.fmean(direct) * 1e3, "shim_mean_ms": statistics.fmean(shim) * 1e3,
    }


# -- stdio ----------------------------------------------------------------------------------------


class LineClient:
    def __init__(self, argv: list[str], cwd: Path = REPO) -> None:
        self.argv = argv
        self.cwd = cwd
        self.proc: asyncio.subprocess.Process | None = None
        self.next_id = 0
        self.spans: list[tuple[int, int]] = []  # (t0, t1) perf_counter_ns of each call (--profile)

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, cwd=self.cwd, limit=1 << 24,
        )
        await self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                          "clientInfo": {"name": "mcp-bench", "version": "1"}})
        await self.notify("notifications/initialized")
        await self.request("tools/list", {})

    def cpu_seconds(self) -> float:
        """CPU time (user + system, all its threads) of the process this client started (a shim without
        its server child, or the direct server); Linux only, NaN elsewhere."""
        return _cpu_seconds(self.proc.pid if self.proc else None)

    async def notify(self, method: str) -> None:
        assert self.proc and self.proc.stdin
        self.proc.stdin.write(orjson.dumps({"jsonrpc": "2.0", "method": method}) + b"\n")
        await self.proc.stdin.drain()

    async def request(self, method: str, params: dict) -> dict:
        assert self.proc and self.proc.stdin and self.proc.stdout
        self.next_id += 1
        rid = self.next_id
        self.proc.stdin.write(orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}) + b"\n")
        await self.proc.stdin.drain()
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.argv[0]} closed its output")
            msg = orjson.loads(line)
            if msg.get("id") == rid and "method" not in msg:
                return msg

    async def call(self, text: str) -> float:
        t0 = time.perf_counter_ns()
        msg = await self.request("tools/call", {"name": "echo", "arguments": {"text": text}})
        t1 = time.perf_counter_ns()
        if "result" not in msg:
            raise RuntimeError(f"tools/call failed: {msg}")
        self.spans.append((t0, t1))
        return (t1 - t0) / 1e9

    async def stop(self) -> None:
        if self.proc is None:
            return
        assert self.proc.stdin
        self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


def _cpu_seconds(pid: int | None) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError, TypeError):
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def _rotations(names: list[str], calls: int):
    """Call i visits every path, starting one further along each time, so drift hits them all alike."""
    for i in range(calls):
        k = i % len(names)
        yield i, names[k:] + names[:k]


def _with_other(figures: dict, times: dict[str, list[float]]) -> dict:
    """--compare: the other checkout's shim against the same direct baseline, and this one's against it."""
    if "other" in times:
        other = summary(times["direct"], times["other"])
        figures["other"] = other
        figures["vs_other_p50_ms"] = figures["shim_p50_ms"] - other["shim_p50_ms"]
    return figures


async def bench_stdio(vault: Path, calls: int, trace: Path | None = None, other: Path | None = None) -> dict:
    """`trace`: run the shim under `bench.mcp_stages`, and add its per-stage medians to the figures.
    `other`: a second shim from another checkout (its own code, same interpreter), in the same rotation."""
    argv = [*shim_argv(vault, session="bench-stdio", agent="bench"), "--", *NOTES_SERVER]
    if trace is not None:
        argv = [sys.executable, "-m", "bench.mcp_stages", str(trace), *argv[argv.index("mcp") + 1 :]]
    clients = {"direct": LineClient(NOTES_SERVER), "shim": LineClient(argv),
               "audit": LineClient([sys.executable, "-m", "bench.mcp_audit_peer", str(vault.parent / "audit.jsonl"),
                                    "--", *NOTES_SERVER])}
    vault.mkdir(parents=True, exist_ok=True)
    fsyncs: list[float] = []
    if other is not None:
        clients["other"] = LineClient([*shim_argv(vault, session="bench-stdio-other", agent="bench"), "--",
                                       *NOTES_SERVER], cwd=other)
    for client in clients.values():
        await client.start()
    times: dict[str, list[float]] = {name: [] for name in clients}
    cpu: dict[str, float] = {}
    try:
        for i in range(WARMUP):
            for client in clients.values():
                await client.call(f"warm {i}")
        clients["shim"].spans.clear()
        cpu = {name: -client.cpu_seconds() for name, client in clients.items()}
        for i, order in _rotations(list(clients), calls):
            for name in order:
                times[name].append(await clients[name].call(f"call {i}"))
            fsyncs.append(fsync_probe(vault))
        cpu = {name: (cpu[name] + client.cpu_seconds()) / calls * 1e6 for name, client in clients.items()}
    finally:
        for client in clients.values():
            await client.stop()
    figures = _with_other(summary(times["direct"], times["shim"]), times)
    figures["cpu_us_per_call"] = cpu  # the shim process alone (not its server); direct: the server
    figures["fsync_p50_ms"] = percentile(fsyncs, 0.5) * 1e3
    figures["added_p50_minus_fsync_ms"] = figures["added_p50_ms"] - figures["fsync_p50_ms"]
    audit = summary(times["direct"], times["audit"])
    figures["audit_peer"] = {"p50_ms": audit["shim_p50_ms"], "added_p50_ms": audit["added_p50_ms"]}
    if trace is not None:
        from bench.mcp_stages import stage_table

        figures["stages_us"] = dict(stage_table(orjson.loads(trace.read_bytes()), clients["shim"].spans))
    return figures


# -- stdio, calls in flight -----------------------------------------------------------------------

RAW_SERVER = [sys.executable, "-m", "tests.support.mcp_servers.raw_server", os.devnull]
"""A fast stdio server (synchronous, hand-written answers): with several calls in flight the relay,
not the server, sets the pace."""


class PipeClient:
    """A JSON-RPC client over a child's stdio that keeps several calls in flight (answers matched by id)."""

    def __init__(self, argv: list[str], cwd: Path = REPO) -> None:
        self.argv, self.cwd = argv, cwd
        self.proc: asyncio.subprocess.Process | None = None
        self.next_id = 0
        self.waiting: dict[int, asyncio.Future] = {}
        self.reader: asyncio.Task | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, cwd=self.cwd, limit=1 << 24)
        self.reader = asyncio.create_task(self._read())
        await self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                          "clientInfo": {"name": "mcp-bench", "version": "1"}})
        assert self.proc.stdin
        self.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        await self.request("tools/list", {})

    async def _read(self) -> None:
        assert self.proc and self.proc.stdout
        while line := await self.proc.stdout.readline():
            msg = orjson.loads(line)
            fut = self.waiting.pop(msg.get("id"), None) if "method" not in msg else None
            if fut is not None and not fut.done():
                fut.set_result(msg)
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(RuntimeError(f"{self.argv[0]} closed its output"))

    async def request(self, method: str, params: dict) -> dict:
        assert self.proc and self.proc.stdin
        self.next_id += 1
        rid = self.next_id
        fut = self.waiting[rid] = asyncio.get_running_loop().create_future()
        self.proc.stdin.write(orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}) + b"\n")
        await self.proc.stdin.drain()
        return await fut

    async def run(self, calls: int, inflight: int) -> float:
        """`calls` tools/call echo in all, `inflight` at a time; calls per second."""
        left = [calls]

        async def lane() -> None:
            while left[0] > 0:
                left[0] -= 1
                msg = await self.request("tools/call", {"name": "echo", "arguments": {"text": f"c{left[0]}"}})
                if "result" not in msg:
                    raise RuntimeError(f"tools/call failed: {msg}")

        t0 = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(inflight)))
        return calls / (time.perf_counter() - t0)

    def cpu_seconds(self) -> float:
        return _cpu_seconds(self.proc.pid if self.proc else None)

    async def stop(self) -> None:
        if self.proc is None:
            return
        assert self.proc.stdin
        self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        if self.reader is not None:
            self.reader.cancel()


def peer_argvs(work: Path, server: list[str]) -> dict[str, list[str]]:
    """The paths raced in the stdio benchmarks, each in front of `server`: direct, the shim, the
    unsynced audit wrapper (bench/mcp_audit_peer.py), and the installed peers of bench/peers/ (see
    `installed_peers`)."""
    argvs = {
        "direct": server,
        "shim": [*shim_argv(work / "vault", session="bench-stdio", agent="bench"), "--", *server],
        "audit peer (no fsync)": [sys.executable, "-m", "bench.mcp_audit_peer", str(work / "audit.jsonl"), "--",
                                  *server],
    }
    for name, make in installed_peers().items():
        argvs[name] = make(work, server)
    return argvs


PEERS_DIR = REPO / "bench" / "peers"


def installed_peers() -> dict:
    """Stdio peers installed in their own virtual environments under bench/peers/ by `bench/peers/install`.
    mcp-recorder is installed but fronts a stdio server with an HTTP proxy only (no stdio-to-stdio mode),
    so it is no peer for these rows; lasso's mcp-gateway installs (with `mcp<2` and xetrack) but exposes
    the proxied tools only through its own dynamic registration, not wired here yet (docs/benchmarks.md)."""
    return {}


async def bench_inflight(work: Path, calls: int, inflight: int, rounds: int, other: Path | None = None) -> dict:
    """Throughput with `inflight` calls at a time, each path in front of the same fast server, in
    `rounds` rounds (paths in a rotating order); ratio = throughput / direct in the same round, median."""
    argvs = peer_argvs(work, RAW_SERVER)
    cwds = {name: REPO for name in argvs}
    if other is not None:  # --compare: the other checkout's shim (its own code, this interpreter)
        argvs["shim (--compare checkout)"] = [*shim_argv(work / "vault", session="bench-stdio-other", agent="bench"),
                                              "--", *RAW_SERVER]
        cwds["shim (--compare checkout)"] = other
    per_s: dict[str, list[float]] = {name: [] for name in argvs}
    cpu_us: dict[str, list[float]] = {name: [] for name in argvs}
    failed: dict[str, str] = {}
    for r in range(rounds):
        names = list(argvs)
        names = names[r % len(names):] + names[: r % len(names)]
        for name in names:
            if name in failed:
                continue
            client = PipeClient(argvs[name], cwds[name])
            try:
                await asyncio.wait_for(client.start(), 30)
                await client.run(min(calls, 200), inflight)  # warm-up
                c0 = client.cpu_seconds()
                per_s[name].append(await asyncio.wait_for(client.run(calls, inflight), 120))
                cpu_us[name].append((client.cpu_seconds() - c0) / calls * 1e6)
            except Exception as exc:  # noqa: BLE001 - a peer that does not run is reported, not fatal
                failed[name] = f"{type(exc).__name__}: {exc}"[:200]
            finally:
                await client.stop()
    out: dict = {"inflight": inflight, "calls": calls, "rounds": rounds, "paths": {}, "failed": failed}
    direct = per_s["direct"]
    for name, runs in per_s.items():
        if not runs:
            continue
        ratios = [x / d for x, d in zip(runs, direct, strict=False)]
        out["paths"][name] = {"calls_per_s": statistics.median(runs), "runs": runs,
                              "ratio": statistics.median(ratios), "cpu_us_per_call": statistics.median(cpu_us[name])}
    return out


def fsync_probe(directory: Path, size: int = 1500) -> float:
    """One `os.write` + `os.fdatasync` of a `size`-byte line in `directory` (the vault's disk); seconds."""
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        t0 = time.perf_counter()
        os.write(fd, b"x" * (size - 1) + b"\n")
        os.fdatasync(fd)
        return time.perf_counter() - t0
    finally:
        os.close(fd)


# -- streamable HTTP ------------------------------------------------------------------------------


def bench_http(vault: Path, calls: int, other: Path | None = None) -> dict:
    up_port = free_port()
    upstream = subprocess.Popen([*NOTES_SERVER, "http", str(up_port)], cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    shims: dict[str, tuple[subprocess.Popen, int]] = {}
    try:
        wait_for_port(up_port, upstream)
        for name, cwd in (("shim", REPO), ("other", other)):
            if cwd is None:
                continue
            port = free_port()
            shims[name] = (subprocess.Popen(
                [*shim_argv(vault, session=f"bench-http-{name}", agent="bench"), "--listen", f"127.0.0.1:{port}",
                 "--upstream", f"http://127.0.0.1:{up_port}/mcp"], cwd=cwd, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            ), port)
        for proc, port in shims.values():
            wait_for_port(port, proc)
        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json",
                   "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "echo"}
        urls = {"direct": f"http://127.0.0.1:{up_port}/mcp"}
        urls.update({name: f"http://127.0.0.1:{port}/mcp" for name, (_, port) in shims.items()})
        times: dict[str, list[float]] = {name: [] for name in urls}
        with httpx.Client(timeout=30) as client:
            def call(which: str, i: int, keep: bool) -> None:
                body = orjson.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                                     "params": {"name": "echo", "arguments": {"text": f"call {i}"}, "_meta": META}})
                t0 = time.perf_counter()
                r = client.post(urls[which], content=body, headers=headers)
                dt = time.perf_counter() - t0
                if r.status_code != 200 or b'"result"' not in r.content:
                    raise RuntimeError(f"{which} tools/call failed: {r.status_code} {r.text[:200]}")
                if keep:
                    times[which].append(dt)

            for i in range(WARMUP):
                for name in urls:
                    call(name, i, False)
            pids = {"direct": upstream.pid, **{name: proc.pid for name, (proc, _) in shims.items()}}
            cpu = {name: -_cpu_seconds(pid) for name, pid in pids.items()}
            for i, order in _rotations(list(urls), calls):
                for name in order:
                    call(name, i, True)
            cpu = {name: (cpu[name] + _cpu_seconds(pid)) / calls * 1e6 for name, pid in pids.items()}
        figures = _with_other(summary(times["direct"], times["shim"]), times)
        figures["cpu_us_per_call"] = cpu  # direct: the upstream server, over all its calls (direct and relayed)
        return figures
    finally:
        for proc in [*(p for p, _ in shims.values()), upstream]:
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()


def _print(name: str, f: dict) -> None:
    print(f"{name}: {f['calls']} tools/call round trips each")
    print(f"  direct  p50 {f['direct_p50_ms']:7.2f} ms   p99 {f['direct_p99_ms']:7.2f} ms")
    print(f"  shim    p50 {f['shim_p50_ms']:7.2f} ms   p99 {f['shim_p99_ms']:7.2f} ms")
    print(f"  added   p50 {f['added_p50_ms']:+7.2f} ms   p99 {f['added_p99_ms']:+7.2f} ms")
    if "other" in f:
        o = f["other"]
        print(f"  --compare checkout's shim p50 {o['shim_p50_ms']:7.2f} ms (added {o['added_p50_ms']:+.2f} ms); "
              f"this one {f['vs_other_p50_ms']:+.2f} ms against it")
    if "cpu_us_per_call" in f:
        print("  CPU per call: " + ", ".join(f"{name} {us:.0f} µs" for name, us in f["cpu_us_per_call"].items())
              + " (shims without their server)")
    if "fsync_p50_ms" in f:
        print(f"  one write+fdatasync p50 {f['fsync_p50_ms']:.3f} ms (same run, same disk): shim added p50 minus it "
              f"{f['added_p50_minus_fsync_ms']:+.3f} ms")
        audit = f["audit_peer"]
        print(f"  audit peer (no fsync) p50 {audit['p50_ms']:.2f} ms, added {audit['added_p50_ms']:+.3f} ms")
    for stage, us in f.get("stages_us", {}).items():
        print(f"    {stage:<42} {us:9.1f} µs (median)")


def _print_inflight(f: dict) -> None:
    print(f"stdio, {f['inflight']} calls in flight, {f['calls']} calls per path and round, median of {f['rounds']} "
          f"rounds (load average now {os.getloadavg()[0]:.2f})")
    for name, p in f["paths"].items():
        print(f"  {name:<28} {p['calls_per_s']:9.0f} calls/s   ratio to direct {p['ratio']:5.2f}   "
              f"CPU {p['cpu_us_per_call']:6.0f} µs/call (the relay process alone)")
    for name, why in f["failed"].items():
        print(f"  {name:<28} did not run: {why}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.mcp_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run (100 calls per path)")
    ap.add_argument("--calls", type=int, help="measured round trips per path and transport (default 1000)")
    ap.add_argument("--only", choices=("stdio", "inflight", "http"), help="run only one part")
    ap.add_argument("--inflight", type=int, default=8, help="calls in flight for the throughput part (default 8)")
    ap.add_argument("--inflight-calls", type=int, help="calls per path and round there (default 3000, --quick 500)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds of the throughput part, median kept (default 3)")
    ap.add_argument("--profile", action="store_true",
                    help="stdio: run the shim under bench.mcp_stages and print the median time of each stage")
    ap.add_argument("--compare", metavar="CHECKOUT", type=Path,
                    help="also run the shim of another checkout (e.g. the main branch) in the same rotation")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE (key 'mcp')")
    args = ap.parse_args(argv)
    calls = args.calls or (100 if args.quick else 1000)
    work = scratch_dir("mcp-")
    figures: dict = {"machine": machine()}
    try:
        if args.only in (None, "stdio"):
            print(f"load average at start: {os.getloadavg()[0]:.2f}")
            trace = work / "stages.json" if args.profile else None
            figures["stdio"] = asyncio.run(bench_stdio(work / "vault", calls, trace, args.compare))
            _print("stdio", figures["stdio"])
        if args.only in (None, "stdio", "inflight"):
            n = args.inflight_calls or (500 if args.quick else 3000)
            figures["stdio_inflight"] = asyncio.run(bench_inflight(work, n, args.inflight, args.repeat,
                                                                         args.compare))
            _print_inflight(figures["stdio_inflight"])
        if args.only in (None, "http"):
            figures["streamable_http"] = bench_http(work / "vault", calls, args.compare)
            _print("streamable HTTP", figures["streamable_http"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        write_json(args.json, "mcp", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
