"""Where a `broker mcp` round trip spends its time: timestamps per stage, no profiler.

    python -m bench.mcp_stages TRACE_FILE broker-mcp-options... -- COMMAND ...

Runs `broker mcp` (same arguments as the CLI) with timing wrappers around the shim's stages, and writes
every stage's timestamps (`time.perf_counter_ns`, CLOCK_MONOTONIC, so comparable with the client's own
clock in another process) to TRACE_FILE at exit. `bench.mcp_bench --profile` starts the stdio shim
through this module and folds the timestamps into a per-stage table (`stage_table`). The wrappers are
installed here only; the shim's code carries no tracing.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import time

import orjson

EVENTS: list[tuple[str, int]] = []
_ns = time.perf_counter_ns


def _mark(name: str) -> None:
    EVENTS.append((name, _ns()))


def _wrap_sync(owner: object, attr: str, name: str) -> None:
    fn = getattr(owner, attr)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _mark(name + ">")
        try:
            return fn(*args, **kwargs)
        finally:
            _mark(name + "<")

    setattr(owner, attr, wrapper)


def _wrap_async(owner: object, attr: str, name: str) -> None:
    fn = getattr(owner, attr)

    @functools.wraps(fn)
    async def wrapper(*args, **kwargs):
        _mark(name + ">")
        try:
            return await fn(*args, **kwargs)
        finally:
            _mark(name + "<")

    setattr(owner, attr, wrapper)


def install() -> None:
    """Wrap the stages of a call's round trip (each appends `name>` on entry and `name<` on exit)."""
    import journal.record
    import journal.writer
    from broker.mcp import recording, relay, stdio_relay

    _wrap_async(relay.LineRelay, "client_line", "client_line")
    _wrap_sync(relay.LineRelay, "server_line", "server_line")
    _wrap_sync(relay, "parse_line", "parse")
    _wrap_async(recording.CallJournal, "finish", "finish")
    _wrap_sync(recording.CallJournal, "_write", "thread_write")
    _wrap_sync(journal.record.Recorder, "prepare", "prepare")
    _wrap_sync(recording.CallJournal, "start", "start")
    _wrap_sync(recording.CallJournal, "prepare_early", "prepare_early")
    _wrap_sync(recording, "tool_call_prompt_ref", "prompt_ref")
    _wrap_async(stdio_relay.StdioRelay, "_to_child", "to_child")
    _wrap_sync(journal.writer.JournalWriter, "append", "append")
    _wrap_sync(os, "fdatasync", "fdatasync")
    _wrap_async(relay.ClientWriter, "write", "client_write")
    for mod_name in ("broker.mcp.relay", "broker.mcp.stdio_relay", "broker.mcp.http_relay"):
        mod = sys.modules.get(mod_name)
        if mod is not None and hasattr(mod, "finish_answers"):
            _wrap_async(mod, "finish_answers", "finish_answers")


def _dump(path: str) -> None:
    with open(path, "wb") as f:
        f.write(orjson.dumps(EVENTS))


# -- folding ------------------------------------------------------------------------------------

STAGES: list[tuple[str, str, str]] = [
    ("client -> shim (pipe, loop wake-up)", "t0", "client_line>"),
    ("request parsed, tracked, written upstream", "client_line>", "to_child<"),
    ("  request's share of the entry (overlaps)", "prepare_early>", "prepare_early<"),
    ("server (from the write to the answer read)", "to_child<", "server_line>"),
    ("answer parsed, matched", "server_line>", "server_line<"),
    ("-> finish()", "server_line<", "finish>"),
    ("answer's share of the entry (Recorder.prepare)", "prepare>", "prepare<"),
    ("-> append (on the loop, or in the worker)", "prepare<", "append>"),
    ("append before fdatasync", "append>", "fdatasync>"),
    ("fdatasync", "fdatasync>", "fdatasync<"),
    ("append after fdatasync", "fdatasync<", "append<"),
    ("append -> finish() returns", "append<", "finish<"),
    ("finish -> client write", "finish<", "client_write>"),
    ("answer written to the client", "client_write>", "client_write<"),
    ("shim -> client (pipe, loop wake-up)", "client_write<", "t1"),
    ("round trip", "t0", "t1"),
]


def stage_table(trace: list[tuple[str, int]], calls: list[tuple[int, int]]) -> list[tuple[str, float]]:
    """Median µs per stage over `calls` ((t0, t1) ns of each measured shim round trip, client clock).

    Each call's shim events are those between its t0 and t1 from its request on (the bench makes one
    call at a time); a stage runs from its first `start` event to the first `end` event after it."""
    import bisect
    import statistics

    trace = sorted(trace, key=lambda e: e[1])
    times = [t for _, t in trace]
    per: dict[str, list[float]] = {name: [] for name, _, _ in STAGES}
    for t0, t1 in calls:
        lo, hi = bisect.bisect_left(times, t0), bisect.bisect_right(times, t1)
        inside = trace[lo:hi]
        first = next((i for i, (n, _) in enumerate(inside) if n == "client_line>"), 0)
        events = [("t0", t0), *inside[first:], ("t1", t1)]  # before the request: the previous call's end
        for stage, a, b in STAGES:
            start = next((t for n, t in events if n == a), None)
            if start is None:
                continue
            end = next((t for n, t in events if n == b and t >= start), None)
            if end is not None:
                per[stage].append((end - start) / 1e3)
    return [(stage, statistics.median(v) if v else float("nan")) for stage, v in per.items()]


def main() -> int:
    trace_path, argv = sys.argv[1], sys.argv[2:]
    install()
    atexit.register(_dump, trace_path)
    from broker.cli import cli, run_cli

    sys.argv = ["broker", "mcp", *argv]
    code = run_cli(cli)
    _dump(trace_path)
    return code


if __name__ == "__main__":
    sys.exit(main())
