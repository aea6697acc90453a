"""Journal benchmarks: durable append throughput (with group commit) and verify throughput.

    python -m bench.journal_bench [--quick] [--entries N] [--verify-mb MB] [--threads 1,8,64]
                                  [--repeat R] [--json FILE] [--profile] [--only append|verify]

1. append: `JournalWriter.append` of realistic ~2 KB entries (a Gmail read whose response body is
   padded to about 2 KB), each call returning only once its line is fdatasync'ed. Measured with 1, 8
   and 64 threads appending to ONE session (so group commit can share an fsync among them), and with
   each thread on its own session. Baseline, same run, same directory: a plain loop doing one
   `os.write` of a pre-built 2 KB line and one `os.fdatasync` per line, run before and after every
   case. Ratio = broker entries/s / baseline lines/s around that case (geometric mean of the two),
   median over rounds. For reference, the largest thread count once more without fdatasync
   (durable=False): the rate the CPU work alone allows under the GIL, so a ratio the durable cases
   cannot reach shows as such.
2. verify: `verify_session(check_blobs=True)` of a session file of such entries (~100 MB), against
   `sha256sum` of the same file (warm page cache), in rounds: each round times sha256sum, hashlib,
   verify_session as the CLI runs it (one process per CPU for a file this big) and verify_session in one
   process; then the same lines as 40 small sessions (`verify_sessions`, as `broker verify` runs a vault,
   against one `sha256sum` of the 40 files); ratio = time / that round's sha256sum time, median over
   rounds. hashlib.sha256 over the file
   in this process (OpenSSL; faster than coreutils) is shown for reference.

Nothing here asserts a timing; the figures are printed (and written with --json).
"""

from __future__ import annotations

import argparse
import base64
import cProfile
import functools
import hashlib
import io
import itertools
import math
import os
import pstats
import random
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from bench import machine, scratch_dir, write_chained, write_json
from journal.append_pipeline import Pending
from journal.blobstore import BlobStore
from journal.bodies import fit_entry
from journal.canonical import canonical_bytes, canonical_value
from journal.chain import GENESIS, chain_entry, link, link_pieces
from journal.entry import is_valid_entry, validate_fields
from journal.forked_call import usable_cpus
from journal.vault import Vault
from journal.vault_verify import verify_sessions
from journal.verify import _quick_entry, verify_session
from journal.writer import JournalWriter
from tests.support.journal_factories import fields

LINE_TARGET = 2048
"""Bytes per journal line the entries are padded to."""
SESSION = "bench-session"
MB = 1_000_000


# -- entries -------------------------------------------------------------------------------------


def make_pad(line_target: int = LINE_TARGET) -> str:
    """Base64url text (like Gmail's `payload.body.data`) sized so a chained line is ~line_target bytes."""
    text = base64.urlsafe_b64encode(random.Random(2026).randbytes(line_target)).decode("ascii")
    pad = ""
    for _ in range(3):  # the pad's own size field changes the line length by a digit or two
        _, line = chain_entry(_padded_fields(SESSION, 1000, pad), 1000, GENESIS)
        pad = text[: max(0, len(pad) + line_target - len(line))]
    return pad


def _padded_fields(session: str, n: int, pad: str) -> dict:
    f = fields(session, n)
    shift = n % 61 if pad else 0
    f["response"]["body"]["payload"] = {
        "mimeType": "text/plain",
        "body": {"size": len(pad) * 3 // 4, "data": pad[shift:] + pad[:shift]},
    }
    return f


def prebuilt_line(pad: str) -> bytes:
    """One real journal line (the baseline writes these bytes, so both sides write the same sizes)."""
    _, line = chain_entry(_padded_fields(SESSION, 1000, pad), 1000, GENESIS)
    return line


# -- helpers -------------------------------------------------------------------------------------


def _pct(sorted_ns: list[int], q: float) -> float:
    """q-quantile (nearest rank) of sorted nanosecond samples, in milliseconds."""
    if not sorted_ns:
        return float("nan")
    i = min(len(sorted_ns) - 1, max(0, round(q * len(sorted_ns)) - 1))
    return sorted_ns[i] / 1e6


class _FsyncCounter:
    """Counts os.fdatasync calls while active (how many entries each group commit carried)."""

    def __init__(self) -> None:
        self.calls = 0
        self._orig = os.fdatasync
        self._count = itertools.count()

    def __enter__(self) -> _FsyncCounter:
        orig, counter = self._orig, self._count

        def counting(fd: int) -> None:
            next(counter)  # atomic under the GIL
            orig(fd)

        os.fdatasync = counting
        return self

    def __exit__(self, *exc: object) -> None:
        os.fdatasync = self._orig
        self.calls = next(self._count)


# -- append --------------------------------------------------------------------------------------


def bench_baseline(root: Path, n: int, line: bytes) -> dict:
    """os.write + os.fdatasync per pre-built line, one thread, a file in the same directory."""
    path = root / "baseline.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    lat: list[int] = []
    clock = time.perf_counter_ns
    try:
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        c0, t0 = time.process_time(), clock()
        for _ in range(n):
            a = clock()
            os.write(fd, line)
            os.fdatasync(fd)
            lat.append(clock() - a)
        wall, cpu = (clock() - t0) / 1e9, time.process_time() - c0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    lat.sort()
    return {
        "case": "baseline write+fdatasync", "threads": 1, "sessions": 1, "entries": n,
        "seconds": wall, "per_s": n / wall, "p50_ms": _pct(lat, 0.50), "p99_ms": _pct(lat, 0.99),
        "entries_per_fsync": 1.0, "cpu_us": cpu / n * 1e6, "cores": cpu / wall,
        "switches_per_entry": (r1.ru_nvcsw - r0.ru_nvcsw + r1.ru_nivcsw - r0.ru_nivcsw) / n,
    }


def bench_plain_threads(root: Path, n: int, threads: int, line: bytes) -> dict:
    """The naive peer at `threads` writers: each thread does `os.write` + `os.fdatasync` of a pre-built
    line on ONE shared descriptor (O_APPEND), n lines in all. The kernel coalesces the concurrent syncs
    (one journal commit covers every write before it), which is the group commit users get for free."""
    path = root / f"plain-{threads}.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    start = threading.Barrier(threads + 1)
    lats: list[list[int]] = [[] for _ in range(threads)]

    def worker(t: int) -> None:
        clock, out = time.perf_counter_ns, lats[t]
        start.wait()
        for _ in range(t, n, threads):
            a = clock()
            os.write(fd, line)
            os.fdatasync(fd)
            out.append(clock() - a)

    pool = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(threads)]
    try:
        for th in pool:
            th.start()
        start.wait()
        r0, c0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.process_time(), time.perf_counter_ns()
        for th in pool:
            th.join()
        wall, cpu = (time.perf_counter_ns() - t0) / 1e9, time.process_time() - c0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    lat = sorted(itertools.chain.from_iterable(lats))
    return {
        "case": "peer: plain write+fdatasync, shared fd", "threads": threads, "sessions": 1, "entries": n,
        "seconds": wall, "per_s": n / wall, "p50_ms": _pct(lat, 0.50), "p99_ms": _pct(lat, 0.99),
        "entries_per_fsync": 1.0, "cpu_us": cpu / n * 1e6, "cores": cpu / wall,
        "switches_per_entry": (r1.ru_nvcsw - r0.ru_nvcsw + r1.ru_nivcsw - r0.ru_nivcsw) / n,
    }


def bench_sqlite(root: Path, n: int, threads: int, line: bytes) -> dict:
    """The database peer: SQLite in WAL mode with synchronous=FULL (every commit fsynced), one INSERT
    per commit of the same pre-built line, `threads` threads each on its own connection to one file."""
    path = root / f"peer-{threads}.sqlite"
    setup = sqlite3.connect(path)
    setup.execute("PRAGMA journal_mode=WAL")
    setup.execute("CREATE TABLE log (seq INTEGER PRIMARY KEY, line BLOB NOT NULL)")
    setup.commit()
    setup.close()
    start = threading.Barrier(threads + 1)
    lats: list[list[int]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        db = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA synchronous=FULL")
        clock, out = time.perf_counter_ns, lats[t]
        start.wait()
        try:
            for _ in range(t, n, threads):
                a = clock()
                db.execute("INSERT INTO log (line) VALUES (?)", (line,))  # autocommit: one fsynced commit
                out.append(clock() - a)
        except BaseException as exc:  # noqa: BLE001 - reported after the join
            errors.append(exc)
        finally:
            db.close()

    pool = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(threads)]
    try:
        for th in pool:
            th.start()
        start.wait()
        r0, c0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.process_time(), time.perf_counter_ns()
        for th in pool:
            th.join()
        wall, cpu = (time.perf_counter_ns() - t0) / 1e9, time.process_time() - c0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        if errors:
            raise RuntimeError(f"sqlite peer failed: {errors[0]!r}") from errors[0]
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    lat = sorted(itertools.chain.from_iterable(lats))
    return {
        "case": "peer: SQLite WAL synchronous=FULL", "threads": threads, "sessions": 1, "entries": n,
        "seconds": wall, "per_s": n / wall, "p50_ms": _pct(lat, 0.50), "p99_ms": _pct(lat, 0.99),
        "entries_per_fsync": float("nan"), "cpu_us": cpu / n * 1e6, "cores": cpu / wall,
        "switches_per_entry": (r1.ru_nvcsw - r0.ru_nvcsw + r1.ru_nivcsw - r0.ru_nivcsw) / n,
    }


def bench_append(root: Path, n: int, threads: int, shared: bool, pad: str, durable: bool = True) -> dict:
    """n appends in total, split over `threads` threads, into one session (shared) or one each.
    durable=False (no fdatasync) is a reference only: the rate the CPU work alone allows."""
    vault_dir = Path(tempfile.mkdtemp(prefix=f"append-{threads}-", dir=root))
    sessions = [SESSION if shared else f"{SESSION}-{t}" for t in range(threads)]
    # Fields are built before the clock starts: building them is the capture point's work.
    work = [[_padded_fields(sessions[t], k, pad) for k in range(t, n, threads)] for t in range(threads)]
    lats: list[list[int]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []
    writer = JournalWriter(vault_dir, durable=durable)
    for s in set(sessions):
        writer.head(s)  # open the files before timing
    start = threading.Barrier(threads + 1)

    def worker(t: int) -> None:
        clock = time.perf_counter_ns
        out = lats[t]
        append = writer.append
        start.wait()
        try:
            for f in work[t]:
                a = clock()
                append(f)
                out.append(clock() - a)
        except BaseException as exc:  # noqa: BLE001 - reported after the join
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(threads)]
    for th in pool:
        th.start()
    try:
        with _FsyncCounter() as fsyncs:
            start.wait()
            r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter_ns()
            c0 = time.process_time()
            for th in pool:
                th.join()
            wall, cpu = (time.perf_counter_ns() - t0) / 1e9, time.process_time() - c0
            r1 = resource.getrusage(resource.RUSAGE_SELF)
        if errors:
            raise RuntimeError(f"append failed: {errors[0]!r}") from errors[0]
        written = sum(writer.head(s)[0] for s in set(sessions))
        if written != n:
            raise RuntimeError(f"expected {n} entries in the journal, found {written}")
    finally:
        writer.close()
        shutil.rmtree(vault_dir, ignore_errors=True)
    lat = sorted(itertools.chain.from_iterable(lats))
    case = "broker, one session" if shared else "broker, session per thread"
    return {
        "case": case if durable else f"{case}, no fsync", "durable": durable,
        "threads": threads, "sessions": len(set(sessions)), "entries": n, "seconds": wall,
        "per_s": n / wall, "p50_ms": _pct(lat, 0.50), "p99_ms": _pct(lat, 0.99),
        "entries_per_fsync": n / fsyncs.calls if fsyncs.calls else float("nan"), "cpu_us": cpu / n * 1e6,
        "cores": cpu / wall,
        "switches_per_entry": (r1.ru_nvcsw - r0.ru_nvcsw + r1.ru_nivcsw - r0.ru_nivcsw) / n,
    }


def bench_submit(root: Path, n: int, pad: str) -> dict:
    """One producer thread that does not wait: `JournalWriter.submit` of n entries to one session, each
    settled (its callback called) only after the fdatasync of its group, by the lane's flusher thread.
    What a recording service or an event loop with several entries in flight does; the producer's CPU
    work overlaps the fsyncs, which a blocking caller cannot do."""
    vault_dir = Path(tempfile.mkdtemp(prefix="submit-", dir=root))
    work = [_padded_fields(SESSION, k, pad) for k in range(n)]
    writer = JournalWriter(vault_dir)
    writer.head(SESSION)
    clock = time.perf_counter_ns
    lat: list[int] = []
    errors: list[BaseException] = []
    finished = threading.Event()
    left = [n]

    def settled(p: Pending, t0: int) -> None:  # the flusher thread, once the group is durable
        lat.append(clock() - t0)
        if p.error is not None:
            errors.append(p.error)
        left[0] -= 1
        if not left[0]:
            finished.set()

    try:
        with _FsyncCounter() as fsyncs:
            r0, t0 = resource.getrusage(resource.RUSAGE_SELF), clock()
            c0 = time.process_time()
            for f in work:
                a = clock()
                writer.submit(f, functools.partial(settled, t0=a))
            finished.wait()
            wall, cpu = (clock() - t0) / 1e9, time.process_time() - c0
            r1 = resource.getrusage(resource.RUSAGE_SELF)
        if errors:
            raise RuntimeError(f"submit failed: {errors[0]!r}") from errors[0]
        if writer.head(SESSION)[0] != n:
            raise RuntimeError(f"expected {n} entries in the journal, found {writer.head(SESSION)[0]}")
    finally:
        writer.close()
        shutil.rmtree(vault_dir, ignore_errors=True)
    lat.sort()
    return {
        "case": "broker, 1 producer, submit", "durable": True, "threads": 1, "sessions": 1, "entries": n,
        "seconds": wall, "per_s": n / wall, "p50_ms": _pct(lat, 0.50), "p99_ms": _pct(lat, 0.99),
        "entries_per_fsync": n / fsyncs.calls if fsyncs.calls else float("nan"), "cpu_us": cpu / n * 1e6,
        "cores": cpu / wall,
        "switches_per_entry": (r1.ru_nvcsw - r0.ru_nvcsw + r1.ru_nivcsw - r0.ru_nivcsw) / n,
    }


def _fdatasync_variants(root: Path, line: bytes) -> list[tuple[str, int, Callable[[int], object]]]:
    """The naive loop and its syscall-level variants: (name, descriptor, one durable append). Each has
    its own file in `root`. `pwritev RWF_DSYNC` is write + data sync in one system call (Linux >= 4.7);
    `O_DSYNC` makes every write synchronous; `preallocated` reserves 64 MB past the end with
    fallocate(FALLOC_FL_KEEP_SIZE) first, as the broker's writer reserves space (journal/preallocation.py)."""
    from journal.preallocation import FALLOC_FL_KEEP_SIZE, fallocate

    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC

    def plain(fd: int) -> None:
        os.write(fd, line)
        os.fdatasync(fd)

    out: list[tuple[str, int, Callable[[int], object]]] = [
        ("plain write+fdatasync loop", os.open(root / "v-plain", flags, 0o644), plain)]
    if hasattr(os, "RWF_DSYNC"):
        out.append(("plain loop, pwritev RWF_DSYNC", os.open(root / "v-rwf", flags, 0o644),
                    lambda fd: os.pwritev(fd, [line], -1, os.RWF_DSYNC)))
    if hasattr(os, "O_DSYNC"):
        out.append(("plain loop, O_DSYNC write", os.open(root / "v-odsync", flags | os.O_DSYNC, 0o644),
                    lambda fd: os.write(fd, line)))
    fd = os.open(root / "v-prealloc", flags, 0o644)
    try:
        fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 64 << 20)
        out.append(("plain loop, preallocated (KEEP_SIZE)", fd, plain))
    except OSError:
        os.close(fd)
    return out


_FS_IOC_FIEMAP = 0xC020660B  # _IOWR('f', 11, struct fiemap)


def file_extents(fd: int) -> int | None:
    """How many extents the file's blocks take (the FIEMAP ioctl with no room for them: the kernel counts), None
    where the file system cannot tell. ext4 holds four in the inode; beyond that the extent tree has a block of
    its own, which every append that maps a new block dirties, so an append's fdatasync commits one more block:
    the plain loop's file in this benchmark is in that state or not depending on how its blocks were allocated
    among the other files', which is much of what moves the broker's ratio against it between runs."""
    import fcntl
    import struct

    buf = bytearray(struct.pack("=QQIIII", 0, 2**64 - 1, 0, 0, 0, 0))
    try:
        fcntl.ioctl(fd, _FS_IOC_FIEMAP, buf)
    except OSError:
        return None
    return struct.unpack_from("=QQIIII", buf)[3]


def bench_one_writer_interleaved(root: Path, n: int, pad: str) -> list[dict]:
    """One writer that waits for each entry, against the plain write+fdatasync loop and its variants,
    interleaved operation by operation (each on its own file, the order reversed every round), so a slow
    phase of the shared disk hits every path alike; the broker's writer also once with its space
    reservation switched off. Per path: p50 and mean latency, CPU per entry, and `ratio` = the plain
    loop's mean time per line / this path's (> 1: faster than the loop), `p50 ratio` likewise at p50."""
    line = prebuilt_line(pad)
    work = [_padded_fields(SESSION, k, pad) for k in range(n + 20)]
    dirs = [Path(tempfile.mkdtemp(prefix="one-", dir=root)) for _ in range(2)]
    writers = [JournalWriter(d) for d in dirs]
    for w in writers:
        w.head(SESSION)
    writers[1]._logs[SESSION].reserve.works = False  # the same writer without journal/preallocation.py
    it = [iter(work), iter(work)]
    paths: list[tuple[str, Callable[[], object]]] = [
        ("broker, 1 writer (append)", lambda: writers[0].append(next(it[0]))),
        ("broker, 1 writer, no reservation", lambda: writers[1].append(next(it[1]))),
    ]
    variants = _fdatasync_variants(root, line)
    paths += [(name, functools.partial(fn, fd)) for name, fd, fn in variants]
    lat: list[list[int]] = [[] for _ in paths]
    cpu: list[int] = [0 for _ in paths]
    clock, cpu_clock = time.perf_counter_ns, time.process_time_ns
    try:
        for _ in range(20):  # warm-up: first syncs of a new file are slower
            for _, op in paths:
                op()
        for k in range(n):
            for i in (range(len(paths)) if k % 2 == 0 else range(len(paths) - 1, -1, -1)):
                c, a = cpu_clock(), clock()
                paths[i][1]()
                lat[i].append(clock() - a)
                cpu[i] += cpu_clock() - c
        extents = [file_extents(w._logs[SESSION].fd) for w in writers] + [file_extents(fd) for _, fd, _ in variants]
    finally:
        for w in writers:
            w.close()
        for _, fd, _ in variants:
            os.close(fd)
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
        for name in ("v-plain", "v-rwf", "v-odsync", "v-prealloc"):
            (root / name).unlink(missing_ok=True)
    plain_i = next(i for i, (name, _) in enumerate(paths) if name.startswith("plain write"))
    plain_mean, plain_p50 = statistics.fmean(lat[plain_i]), statistics.median(lat[plain_i])
    rows = []
    for (name, _), ns, c, ext in zip(paths, lat, cpu, extents, strict=True):
        mean = statistics.fmean(ns)
        rows.append({"case": name, "entries": n, "per_s": 1e9 / mean, "p50_ms": statistics.median(ns) / 1e6,
                     "mean_ms": mean / 1e6, "p99_ms": _pct(sorted(ns), 0.99), "cpu_us": c / n / 1e3,
                     "ratio": plain_mean / mean, "p50_ratio": plain_p50 / statistics.median(ns), "extents": ext})
    return rows


def format_interleaved(rows: list[dict], load: tuple[str, str]) -> str:
    out = [f"1 writer that waits for each entry, interleaved op by op with the plain loop and its variants "
           f"({rows[0]['entries']} ops per path; load average {load[0]} -> {load[1]})",
           f"{'path':<38} {'per s':>8} {'p50 ms':>8} {'mean ms':>8} {'p99 ms':>8} {'CPU us':>8} {'ratio':>7} "
           f"{'p50 ratio':>9} {'extents':>7}"]
    for r in rows:
        ext = "?" if r.get("extents") is None else str(r["extents"])
        out.append(f"{r['case']:<38} {r['per_s']:>8.0f} {r['p50_ms']:>8.3f} {r['mean_ms']:>8.3f} {r['p99_ms']:>8.3f} "
                   f"{r['cpu_us']:>8.1f} {r['ratio']:>7.3f} {r['p50_ratio']:>9.3f} {ext:>7}")
    out.append("ratio = the plain write+fdatasync loop's mean time per line / this path's (> 1: faster than the "
               "loop); p50 ratio likewise with medians; CPU us = process CPU per op (user + system)")
    out.append("extents = extents of the path's file at the end (FIEMAP); ext4 keeps 4 in the inode: beyond that "
               "an append that maps a new block also dirties the extent tree's own block (see file_extents)")
    return "\n".join(out)


def _median_run(runs: list[dict], ratios: list[float]) -> dict:
    """The run with the median throughput (keeping its own latencies); ratio = median of the rounds' ratios."""
    ordered = sorted(runs, key=lambda r: r["per_s"])
    row = dict(ordered[len(ordered) // 2])
    row["runs_per_s"] = [r["per_s"] for r in runs]
    row["ratio"] = statistics.median(ratios)
    row["runs_ratio"] = ratios
    return row


def run_append(root: Path, n: int, thread_counts: list[int], repeat: int, pad: str,
               sqlite_entries: int | None = None) -> list[dict]:
    """`repeat` rounds of: baseline, case, baseline, case, ..., baseline.

    Each case's `ratio` is taken against the 1-thread baselines run just before and just after it
    (geometric mean), so a slow phase of a shared machine (another process flushing the disk) hits both
    sides of the ratio; the median over rounds is reported. The peers run in the same rotation: the
    plain loop at every thread count above 1 (threads on one shared descriptor) and SQLite (WAL,
    synchronous=FULL) at 1 thread and the largest count. Each broker row also gets `peer_ratio`: its
    entries/s over the plain loop's at the same thread count in the same round (median over rounds);
    `sqlite_ratio` likewise against SQLite where SQLite ran at that count.
    """
    line = prebuilt_line(pad)
    top = max(thread_counts)
    cases: list[tuple[str, int, bool, bool]] = [("broker", t, True, True) for t in thread_counts]
    cases.insert(1, ("submit", 1, True, True))
    cases += [("broker", t, False, True) for t in thread_counts if t > 1]
    cases.append(("broker", top, True, False))  # reference: the same work without fdatasync
    cases += [("plain", t, True, True) for t in thread_counts if t > 1]
    cases += [("sqlite", t, True, True) for t in sorted({1, top})]
    sq_n = sqlite_entries or n
    bench_baseline(root, min(n, 200), line)  # warm-up: first fsyncs on a new file are slower
    base_runs: list[dict] = []
    case_runs: list[list[dict]] = [[] for _ in cases]
    case_ratios: list[list[float]] = [[] for _ in cases]
    peer_ratios: list[list[float]] = [[] for _ in cases]
    sqlite_ratios: list[list[float]] = [[] for _ in cases]
    for _ in range(repeat):
        before = bench_baseline(root, n, line)
        base_runs.append(before)
        this_round: dict[tuple[str, int], float] = {("plain", 1): before["per_s"]}
        for i, (kind, threads, shared, durable) in enumerate(cases):
            if kind == "plain":
                run = bench_plain_threads(root, n, threads, line)
            elif kind == "submit":
                run = bench_submit(root, n, pad)
            elif kind == "sqlite":
                run = bench_sqlite(root, sq_n, threads, line)
            else:
                run = bench_append(root, n, threads, shared, pad, durable)
            after = bench_baseline(root, n, line)
            base_runs.append(after)
            case_runs[i].append(run)
            case_ratios[i].append(run["per_s"] / math.sqrt(before["per_s"] * after["per_s"]))
            if kind != "broker":
                this_round[(kind, threads)] = run["per_s"]
            before = after
        for i, (kind, threads, shared, durable) in enumerate(cases):
            if kind in ("broker", "submit") and shared and durable:
                mine = case_runs[i][-1]["per_s"]
                peer_ratios[i].append(mine / this_round[("plain", threads)])
                if ("sqlite", threads) in this_round:
                    sqlite_ratios[i].append(mine / this_round[("sqlite", threads)])
    rows = [_median_run(base_runs, [1.0] * len(base_runs))]
    for runs, ratios, peer, sq in zip(case_runs, case_ratios, peer_ratios, sqlite_ratios, strict=True):
        row = _median_run(runs, ratios)
        if peer:
            row["peer_ratio"], row["runs_peer_ratio"] = statistics.median(peer), peer
        if sq:
            row["sqlite_ratio"] = statistics.median(sq)
        rows.append(row)
    return rows


# -- verify --------------------------------------------------------------------------------------


def build_session(vault: Vault, target_bytes: int, pad: str) -> tuple[Path, int]:
    """Write a chained session file of about target_bytes directly (no fsync per line)."""
    path = vault.session_path(SESSION)
    entries, _ = write_chained(path, (_padded_fields(SESSION, n, pad) for n in itertools.count(1)), target_bytes)
    return path, entries


MANY_SESSIONS = 40
"""The verify case of a vault of many small sessions: the big session's lines cut into this many."""


def _split_session(path: Path, vault: Vault, n: int) -> list[str]:
    """Write the entries of `path` again as `n` sessions of consecutive entries, each chained anew."""
    entries = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    per = -(-len(entries) // n)
    names = [f"small-{k:02d}" for k in range(n)]
    for k, name in enumerate(names):
        write_chained(vault.session_path(name), (
            {**{key: v for key, v in e.items() if key not in ("seq", "prev", "hash")}, "session": name}
            for e in entries[k * per : (k + 1) * per]))
    return names


def _timed(fn) -> tuple[float, float]:
    """Wall seconds and CPU seconds (this process and its children, user + system) of fn()."""
    def cpu() -> float:
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

    c0, t0 = cpu(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, cpu() - c0


def run_verify(root: Path, target_bytes: int, pad: str, rounds: int = 5) -> tuple[list[dict], dict]:
    """`rounds` rounds of: sha256sum, hashlib, verify_session (default: one process per CPU for a file
    this big), verify_session in one process. Each case's ratio is taken against the sha256sum of the
    same round, and the median over rounds is reported (with the median time)."""
    vault = Vault.create(root / "verify-vault")
    t0 = time.perf_counter()
    path, entries = build_session(vault, target_bytes, pad)
    build_s = time.perf_counter() - t0
    size = path.stat().st_size
    many = Vault.create(root / "verify-many")  # the same lines cut into MANY_SESSIONS small sessions
    many_names = _split_session(path, many, MANY_SESSIONS)
    many_paths = [str(many.session_path(s)) for s in many_names]
    try:
        def sha() -> None:
            subprocess.run(["sha256sum", str(path)], check=True, stdout=subprocess.DEVNULL)

        def many_sha() -> None:
            subprocess.run(["sha256sum", *many_paths], check=True, stdout=subprocess.DEVNULL)

        def many_verify(workers: int | None) -> None:
            reports = verify_sessions(many, many_names, workers=workers)
            if not all(r.intact for r in reports) or sum(r.entries for r in reports) != entries:
                raise RuntimeError("the bench's small sessions did not verify")

        def verify(workers: int | None) -> None:
            report = verify_session(vault, SESSION, check_blobs=True, workers=workers)
            if not report.intact or report.entries != entries:
                raise RuntimeError(f"bench session did not verify: {report.as_dict()}")

        def py_sha() -> None:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)

        cases = [
            ("sha256sum", sha),
            ("hashlib.sha256 (in-process)", py_sha),
            (f"verify_session ({usable_cpus()} CPUs)", lambda: verify(None)),
            ("verify_session (1 process)", lambda: verify(1)),
            (f"{MANY_SESSIONS} sessions: sha256sum", many_sha),
            (f"{MANY_SESSIONS} sessions: verify_sessions ({usable_cpus()} CPUs)", lambda: many_verify(None)),
            (f"{MANY_SESSIONS} sessions: verify_sessions (1 process)", lambda: many_verify(1)),
        ]
        sha()  # warm the page cache
        many_sha()
        times: dict[str, list[float]] = {name: [] for name, _ in cases}
        cpus: dict[str, list[float]] = {name: [] for name, _ in cases}
        for _ in range(rounds):
            for name, fn in cases:
                wall, cpu = _timed(fn)
                times[name].append(wall)
                cpus[name].append(cpu)
    finally:
        shutil.rmtree(vault.root, ignore_errors=True)
        shutil.rmtree(many.root, ignore_errors=True)
    rows = []
    for name, _ in cases:
        base = f"{MANY_SESSIONS} sessions: sha256sum" if name.startswith(f"{MANY_SESSIONS} sessions") else "sha256sum"
        ratios = [t / b for t, b in zip(times[name], times[base], strict=True)]
        secs = statistics.median(times[name])
        row = {"case": name, "seconds": secs, "mb_s": size / MB / secs, "ratio": statistics.median(ratios),
               "runs_ratio": ratios, "runs_seconds": times[name], "cpu_seconds": statistics.median(cpus[name]),
               "cpu_ratio": statistics.median(c / b for c, b in zip(cpus[name], cpus[base], strict=True))}
        if "verify" in name:
            row["entries_per_s"] = entries / secs
        rows.append(row)
    info = {"bytes": size, "entries": entries, "build_seconds": build_s, "rounds": rounds}
    return rows, info


# -- profiling (--profile) -----------------------------------------------------------------------


def _profile(title: str, fn, top: int = 14) -> str:
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    fn()
    prof.disable()
    wall = time.perf_counter() - t0
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    text = out.getvalue()
    body = text[text.find("   ncalls"):] if "   ncalls" in text else text
    return f"\n== profile: {title} (wall {wall:.2f} s under cProfile, sorted by own time)\n{body.rstrip()}\n"


def run_profile(root: Path, n: int, target_bytes: int, pad: str) -> str:
    parts = []
    vault_dir = Path(tempfile.mkdtemp(prefix="profile-append-", dir=root))
    work = [_padded_fields(SESSION, k, pad) for k in range(n)]
    with JournalWriter(vault_dir) as writer:
        writer.head(SESSION)
        parts.append(_profile(f"{n} appends, 1 thread", lambda: [writer.append(f) for f in work]))
    shutil.rmtree(vault_dir, ignore_errors=True)
    vault = Vault.create(root / "profile-vault")
    build_session(vault, target_bytes, pad)
    verify_session(vault, SESSION)  # warm the page cache
    title = f"verify_session of {target_bytes / MB:.0f} MB"
    parts.append(_profile(title, lambda: verify_session(vault, SESSION)))
    shutil.rmtree(vault.root, ignore_errors=True)
    parts.append(stage_breakdown(root, pad, min(n, 3000)))
    return "".join(parts)


def _per_item_us(fn, items: list, rounds: int = 3, clock=time.perf_counter) -> float:
    """Best-of-rounds time of fn over items, in microseconds per item (no profiler overhead)."""
    best = float("inf")
    for _ in range(rounds):
        t0 = clock()
        for x in items:
            fn(x)
        best = min(best, clock() - t0)
    return best / len(items) * 1e6


def _cpu_us(fn, items: list) -> float:
    """Like _per_item_us in CPU time of this process, best of 5: steadier while other work shares the CPUs."""
    return _per_item_us(fn, items, rounds=5, clock=time.process_time)


def stage_breakdown(root: Path, pad: str, n: int) -> str:
    """Per-entry cost of each stage of verify and append, timed directly.

    cProfile charges its own overhead to every Python-level call, which inflates walks over many
    small values (canonical._orjson_safe) several times; these figures do not have that bias.
    """
    items = [_padded_fields(SESSION, k, pad) for k in range(1, n + 1)]
    lines, prev = [], GENESIS
    for k, f in enumerate(items, 1):
        entry, line = chain_entry(f, k, prev)
        prev = entry["hash"]
        lines.append(line)
    entries = [orjson.loads(line) for line in lines]

    vault = Vault.create(root / "stages-vault")
    path = vault.session_path(SESSION)
    path.write_bytes(b"".join(lines))
    verify_session(vault, SESSION)  # warm
    store = BlobStore(vault.root)
    bare = [line[:-1] for line in lines]
    whole_verify = _cpu_us(lambda _: verify_session(vault, SESSION, workers=1), [None]) / n
    verify_rows = [
        ("the line's own checks (_quick_entry), of which", _cpu_us(lambda d: _quick_entry(d, SESSION, True), bare)),
        ("  canonical_value(line): msgspec parse + orjson compare", _cpu_us(canonical_value, bare)),
        ("    of which orjson.dumps(OPT_SORT_KEYS)",
         _cpu_us(lambda e: orjson.dumps(e, option=orjson.OPT_SORT_KEYS), entries)),
        ("  is_valid_entry(entry)", _cpu_us(is_valid_entry, entries)),
        ("  hashlib.sha256(line)", _cpu_us(lambda b: hashlib.sha256(b).hexdigest(), bare)),
        ("for comparison: orjson.loads(line)", _cpu_us(orjson.loads, lines)),
        ("for comparison: canonical_bytes(entry)", _cpu_us(canonical_bytes, entries)),
        ("verify_session(workers=1), whole, per entry (CPU)", whole_verify),
    ]
    quick = verify_rows[0][1]
    verify_rows.insert(-1, ("rest: reading, blob-reference search, chain bookkeeping", whole_verify - quick))
    writers = {}
    for durable in (False, True):
        wdir = Path(tempfile.mkdtemp(prefix="stages-append-", dir=root))
        with JournalWriter(wdir, durable=durable) as w:
            w.head(SESSION)
            writers[durable] = _per_item_us(w.append, items, rounds=1)
        shutil.rmtree(wdir, ignore_errors=True)
    pieces = [(f, link_pieces(f)) for f in items]
    wdir = Path(tempfile.mkdtemp(prefix="stages-many-", dir=root))
    with JournalWriter(wdir, durable=False) as w:
        batches = [items[i : i + 64] for i in range(0, len(items), 64)]
        t0 = time.perf_counter()
        for b in batches:
            w.append_many(b)
        many_us = (time.perf_counter() - t0) / len(items) * 1e6
    shutil.rmtree(wdir, ignore_errors=True)
    append_rows = [
        ("validate_fields(fields)  [caller's thread]", _per_item_us(validate_fields, items)),
        ("fit_entry(fields) (size check, no spill)", _per_item_us(lambda f: fit_entry(f, store), items)),
        ("link_pieces(fields) (canonical form)", _per_item_us(link_pieces, items)),
        ("  of which canonical_bytes(fields)", _per_item_us(canonical_bytes, items)),
        ("link(fields, pieces, seq, prev)  [leader]", _per_item_us(lambda fp: link(fp[0], fp[1], 7, GENESIS), pieces)),
        ("chain_entry(fields, seq, prev) (reference)", _per_item_us(lambda f: chain_entry(f, 7, GENESIS), items)),
        ("append_many, 64 per call, durable=False", many_us),
        ("append, durable=False (all CPU work)", writers[False]),
        ("append, durable=True, 1 thread (wall)", writers[True]),
    ]
    shutil.rmtree(vault.root, ignore_errors=True)
    out = [f"\n== stage breakdown, {n} entries of ~{len(lines[0])} B, microseconds per entry (no profiler; "
           "verify rows in CPU time, best of 5)"]
    for title, rows in (("verify", verify_rows), ("append", append_rows)):
        total = whole_verify if title == "verify" else writers[False]
        out.append(f"{title:<58} {'us':>8} {'share':>7}")
        for name, us in rows:
            out.append(f"  {name:<56} {us:>8.2f} {us / total:>7.0%}")
    out.append("(share: of `verify_session, whole` for verify, of `append, durable=False` for append)")
    return "\n".join(out) + "\n"


# -- output --------------------------------------------------------------------------------------


def format_tables(append_rows: list[dict], verify_rows: list[dict], params: dict, vinfo: dict) -> str:
    out = []
    if append_rows:
        n = params["entries"]
        out.append(
            f"journal append, durable (fdatasync before append returns), ~{params['line_bytes']} B lines, "
            f"{n} entries per case, median of {params['repeat']} rounds"
        )
        out.append(
            f"{'case':<38} {'threads':>7} {'entries/s':>10} {'p50 ms':>8} {'p99 ms':>8} "
            f"{'entries/fsync':>13} {'CPU us/entry':>12} {'cores':>5} {'cs/entry':>8} {'ratio':>7} {'vs peer':>7} "
            f"{'vs SQLite':>9}"
        )
        for r in append_rows:
            durable = r.get("durable", True)
            fsyncs = (f"{r['entries_per_fsync']:>13.1f}" if durable and r["entries_per_fsync"] == r["entries_per_fsync"]
                      else f"{'-':>13}")
            peer = f"{r['peer_ratio']:>7.2f}" if "peer_ratio" in r else f"{'':>7}"
            sq = f"{r['sqlite_ratio']:>9.2f}" if "sqlite_ratio" in r else f"{'':>9}"
            ratio = f"{r['ratio']:>7.2f}" if durable else f"{'(' + format(r['ratio'], '.2f') + ')':>7}"
            out.append(
                f"{r['case']:<38} {r['threads']:>7} {r['per_s']:>10.0f} {r['p50_ms']:>8.3f} "
                f"{r['p99_ms']:>8.3f} {fsyncs} {r['cpu_us']:>12.1f} {r['cores']:>5.2f} "
                f"{r['switches_per_entry']:>8.2f} {ratio} {peer} {sq}"
            )
        base = append_rows[0]["runs_per_s"]
        spread = max(base) / min(base)
        out.append("ratio = entries/s / baseline lines/s measured just before and after the case (one os.write")
        out.append("        + os.fdatasync per line, same directory), median over rounds")
        out.append("vs peer = broker entries/s / the plain write+fdatasync loop's lines/s at the same thread count")
        out.append("        (threads on one shared descriptor) in the same round; vs SQLite likewise against SQLite")
        out.append("        WAL synchronous=FULL (one INSERT per commit); both medians over rounds")
        out.append(
            f"baseline lines/s over {len(base)} runs: {min(base):.0f} .. {max(base):.0f}"
            + (f"  (spread {spread:.1f}x: the disk or CPUs were busy; figures are noisy)" if spread > 1.5 else "")
        )
        out.append("CPU us/entry = process CPU time (all threads, user + system) / entries; cores = CPU time /")
        out.append("        wall time (1.0: one CPU busy all along); cs/entry = context switches (voluntary +")
        out.append("        involuntary) / entries; `no fsync` (durable=False) is a reference, not a mode the")
        out.append("        broker runs: the rate the CPU work alone allows (its ratio in parentheses)")
    if verify_rows:
        if out:
            out.append("")
        out.append(
            f"journal verify, {vinfo['bytes'] / MB:.1f} MB session file, {vinfo['entries']} entries, "
            f"warm cache, median of {vinfo['rounds']} rounds"
        )
        out.append(f"{'case':<42} {'seconds':>8} {'MB/s':>8} {'entries/s':>10} {'ratio':>7} {'CPU s':>7} "
                   f"{'CPU ratio':>9}")
        for r in verify_rows:
            eps = f"{r['entries_per_s']:>10.0f}" if "entries_per_s" in r else f"{'':>10}"
            out.append(f"{r['case']:<42} {r['seconds']:>8.3f} {r['mb_s']:>8.1f} {eps} {r['ratio']:>7.2f} "
                       f"{r['cpu_seconds']:>7.3f} {r['cpu_ratio']:>9.2f}")
        out.append("ratio = time / sha256sum time on the same file in the same round, median over rounds "
                   "(lower is better)")
        spread = [r["runs_ratio"] for r in verify_rows if r["case"].startswith("verify_session (")][0]
        out.append("ratio of the first verify_session row per round: " + " ".join(f"{x:.2f}" for x in spread))
        out.append("CPU s = CPU time of the process and its children (all cores, user + system); CPU ratio "
                   "against sha256sum's")
        out.append("(when other work keeps the CPUs busy, wall ratios move a lot; the CPU ratio much less)")
    return "\n".join(out)


def _loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.journal_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run (800 entries, 10 MB verify file)")
    ap.add_argument("--entries", type=int, help="appends per case (default 4000, --quick 800)")
    ap.add_argument("--verify-mb", type=float, help="size of the verify file in MB (default 100, --quick 10)")
    ap.add_argument("--threads", default="1,8,64", help="comma-separated thread counts (default 1,8,64)")
    ap.add_argument("--repeat", type=int, help="rounds of append cases, median kept (default 5, --quick 1)")
    ap.add_argument("--sqlite-entries", type=int,
                    help="inserts per SQLite peer case (default: --entries; SQLite is slow at many threads)")
    ap.add_argument("--only", choices=("append", "verify", "one"),
                    help="run only one part (one: the interleaved 1-writer comparison, also run with append)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE (key 'journal')")
    ap.add_argument("--profile", action="store_true", help="also print cProfile hot spots (append, verify)")
    args = ap.parse_args(argv)

    n = args.entries or (800 if args.quick else 4000)
    verify_bytes = int((args.verify_mb or (10 if args.quick else 100)) * MB)
    repeat = args.repeat or (1 if args.quick else 5)
    thread_counts = [int(t) for t in args.threads.split(",") if t.strip()]
    if n < 1 or repeat < 1 or verify_bytes < 1 or not thread_counts or min(thread_counts) < 1:
        ap.error("--entries, --verify-mb, --repeat and --threads must be positive")

    pad = make_pad()
    params = {
        "entries": n, "repeat": repeat, "threads": thread_counts, "verify_bytes_target": verify_bytes,
        "line_bytes": len(prebuilt_line(pad)), "quick": args.quick,
    }
    root = scratch_dir("journal-")
    append_rows: list[dict] = []
    verify_rows: list[dict] = []
    one_rows: list[dict] = []
    vinfo: dict = {}
    t0 = time.perf_counter()
    try:
        if args.only in (None, "append", "one"):
            load0 = _loadavg()
            one_rows = bench_one_writer_interleaved(root, n, pad)
            one_load = (load0, _loadavg())
        if args.only in (None, "append"):
            append_rows = run_append(root, n, thread_counts, repeat, pad, args.sqlite_entries)
        if args.only in (None, "verify"):
            verify_rows, vinfo = run_verify(root, verify_bytes, pad, rounds=3 if args.quick else 5)
        profile = run_profile(root, min(n, 2000), min(verify_bytes, 20 * MB), pad) if args.profile else ""
    finally:
        shutil.rmtree(root, ignore_errors=True)
    total = time.perf_counter() - t0

    if one_rows:
        print(format_interleaved(one_rows, one_load) + "\n")
    print(format_tables(append_rows, verify_rows, params, vinfo))
    print(f"\n(total {total:.1f} s on {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
          f"orjson {orjson.__version__})")
    if profile:
        print(profile)
    if args.json:
        write_json(args.json, "journal", {
            "machine": machine() | {"orjson": orjson.__version__},
            "params": params, "append": append_rows, "verify": verify_rows, "verify_file": vinfo,
            "one_writer_interleaved": one_rows,
            "total_seconds": total,
        })
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
