"""Store benchmark: many broker processes writing into one PostgreSQL, against the file vault.

    python -m bench.store_bench [--quick] [--seconds S] [--writers 1,4,8] [--clients 16] [--json FILE]
    python -m bench.store_bench --facet-cost N [--rounds R]

Each writer process models one broker's recording service: `--clients` threads (the calls in
flight) hand ~2 KB entries (bench.journal_bench's padded Gmail read) to one committer thread, which
takes whatever has arrived and appends it as one batch (`append_many`: one write + fdatasync per
session for the vault, one transaction with synchronous_commit on for PostgreSQL), then wakes the
clients. Every client has its own session (agents do); a further case puts every client of 4
writers on ONE session (the hardest case for the chain: one advisory lock, one head).

Figures per case: entries/s, the latency the journal adds to a call (submit -> durable) p50 and p99,
bytes per entry on disk (vault: file sizes; PostgreSQL: pg_total_relation_size of the journal
tables, WAL not counted), and the sustained rate in rows per hour. Baseline, same run: the file
vault with one writer; `x base` is entries/s over it. The PostgreSQL server is a throwaway cluster
(tests/support/postgres_server.py) on the same machine and disk, fsync and synchronous_commit on, default
settings otherwise. Last, one blob of `--blob-mib` (default 1 GiB) streamed in 64 KiB writes into
each store's blob sink, in a fresh process: MB/s and the process's peak RSS (bounded memory: the
PostgreSQL sink holds one 1 MiB chunk at a time). Nothing is asserted.

`--facet-cost N`: what schema version 3's facet indexes add to an insert (journal/store/postgres_search.py):
N entries appended by one writer in durable groups of 50, then COPYed again, into a version-2 store and a
version-3 store alternately, R rounds; the ratio of the median times.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import threading
import time
from pathlib import Path

from bench import machine, scratch_dir, write_json
from bench.journal_bench import _padded_fields, make_pad


def _writer_proc(backend: str, target: str, clients: int, shared: bool, start_at: float, seconds: float,
                 worker: int, out) -> None:
    from journal.store.url import open_writer

    writer = open_writer(target)
    pad = make_pad()
    cond = threading.Condition()
    queue: list[tuple[dict, list]] = []
    lat_ns: list[int] = []
    done = [0]
    stop_at = start_at + seconds

    def client(k: int) -> None:
        session = "shared" if shared else f"w{worker}-c{k}"
        n = 0
        while time.time() < stop_at:
            box: list = []
            f = _padded_fields(session, n, pad)
            t0 = time.perf_counter_ns()
            with cond:
                queue.append((f, box))
                cond.notify_all()
                while not box:
                    cond.wait()
            if isinstance(box[0], dict):
                lat_ns.append(time.perf_counter_ns() - t0)
            n += 1

    def committer() -> None:
        while True:
            with cond:
                while not queue:
                    if time.time() >= stop_at + 5:
                        return
                    cond.wait(0.05)
                batch, queue[:] = list(queue), []
            results = writer.append_many([f for f, _ in batch])
            with cond:
                for (_, box), r in zip(batch, results, strict=True):
                    box.append(r)
                done[0] += sum(isinstance(r, dict) for r in results)
                cond.notify_all()

    time.sleep(max(0.0, start_at - time.time()))
    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
    ct = threading.Thread(target=committer, daemon=True)
    ct.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.close()
    out.put((worker, done[0], lat_ns[:: max(1, len(lat_ns) // 20000)]))


def _blob_proc(target: str, size: int, out) -> None:
    """Stream `size` bytes into the store's blob sink in 64 KiB pieces (as a proxied body arrives)."""
    import resource

    from journal.store.url import open_writer

    writer = open_writer(target)
    piece = bytes(range(256)) * 256
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    w = writer.blobs.open_writer()
    for _ in range(size // len(piece)):
        w.write(piece)
    ref = w.commit()
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    writer.close()
    out.put({"size": ref["size"], "seconds": seconds, "rss_before_kib": before, "rss_peak_kib": peak})


def run_blob(backend: str, target: str, size: int) -> dict:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_blob_proc, args=(target, size, out))
    p.start()
    got = out.get(timeout=1800)
    p.join(60)
    return {"backend": backend, "mib": got["size"] / (1 << 20), "mb_s": got["size"] / 1e6 / got["seconds"],
            "rss_growth_mib": (got["rss_peak_kib"] - got["rss_before_kib"]) / 1024,
            "rss_peak_mib": got["rss_peak_kib"] / 1024}


def _disk_bytes(backend: str, target: str) -> int:
    if backend == "file":
        return sum(p.stat().st_size for p in Path(target).rglob("*") if p.is_file())
    import psycopg

    with psycopg.connect(target) as conn:
        return int(conn.execute(
            "SELECT sum(pg_total_relation_size(c)) FROM unnest(ARRAY['journal_entries', 'journal_sessions', "
            "'journal_blobs', 'journal_blob_chunks']::regclass[]) AS c"
        ).fetchone()[0])


def run_case(backend: str, target: str, writers: int, clients: int, seconds: float, shared: bool) -> dict:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    start_at = time.time() + 2.0 + 0.3 * writers  # every process imported and connected before the clock
    procs = [ctx.Process(target=_writer_proc, args=(backend, target, clients, shared, start_at, seconds, w, out))
             for w in range(writers)]
    for p in procs:
        p.start()
    got = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join(30)
    entries = sum(g[1] for g in got)
    lat = sorted(x for g in got for x in g[2])
    eps = entries / seconds
    disk = _disk_bytes(backend, target)
    return {
        "backend": backend, "writers": writers, "clients": clients * writers, "shared_session": shared,
        "entries": entries, "entries_s": eps, "p50_ms": _q(lat, 0.50), "p99_ms": _q(lat, 0.99),
        "bytes_per_entry": disk / entries if entries else None, "rows_per_hour": eps * 3600,
    }


def _q(sorted_ns: list[int], q: float) -> float | None:
    if not sorted_ns:
        return None
    return sorted_ns[min(len(sorted_ns) - 1, int(q * len(sorted_ns)))] / 1e6


def format_table(rows: list[dict], base: float) -> str:
    head = (f"{'store':<10} {'writers':>7} {'clients':>7} {'session':<8} {'entries/s':>10} {'x base':>7} "
            f"{'p50 ms':>7} {'p99 ms':>7} {'B/entry':>8} {'rows/hour':>11}")
    out = [head, "-" * len(head)]
    for r in rows:
        out.append(
            f"{r['backend']:<10} {r['writers']:>7} {r['clients']:>7} {'one' if r['shared_session'] else 'each':<8} "
            f"{r['entries_s']:>10.0f} {r['entries_s'] / base:>7.2f} {r['p50_ms'] or 0:>7.2f} {r['p99_ms'] or 0:>7.2f} "
            f"{r['bytes_per_entry'] or 0:>8.0f} {r['rows_per_hour']:>11,.0f}"
        )
    return "\n".join(out)


def _store_at(admin_url: str, version: int) -> str:
    """A fresh database holding the journal schema at `version` (2: no facet indexes; 3: with them)."""
    import psycopg

    from journal.store.postgres_schema import MIGRATIONS
    from tests.support.postgres_server import create_database

    url = create_database(admin_url)
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        for v in range(1, version + 1):
            conn.execute(MIGRATIONS[v])
            conn.execute("INSERT INTO journal_schema (version) VALUES (%s)", (v,))
    return url


def _facet_round(admin_url: str, version: int, entries: int, batch: int) -> dict:
    """One schema version: `entries` appended by a PostgresWriter in groups of `batch` (one durable transaction
    each, the recording path), then the same entries' lines COPYed into a fresh session (append_lines: 500
    rows per transaction, the server's insert cost with little else); seconds, and index bytes per entry."""
    import psycopg

    from bench.journal_bench import _padded_fields
    from journal.store.postgres_store import PostgresStore

    url = _store_at(admin_url, version)
    store = PostgresStore(url)
    pad = make_pad()
    try:
        with store.writer() as w:
            t = time.perf_counter()
            for at in range(0, entries, batch):
                w.append_many([_padded_fields("facets", n, pad) for n in range(at, min(entries, at + batch))])
            appended = time.perf_counter() - t
        lines = list(store.lines_after("facets"))
        t = time.perf_counter()
        store.append_lines("copied", lines)
        copied = time.perf_counter() - t
        with psycopg.connect(url) as conn:
            index_bytes = conn.execute("SELECT pg_indexes_size('journal_entries')").fetchone()[0]
    finally:
        store.close()
    return {"version": version, "append_s": appended, "copy_s": copied, "index_bytes_per_entry":
            index_bytes / (2 * entries)}


def facet_cost(admin_url: str, entries: int, rounds: int, batch: int = 50) -> dict:
    """The insert cost of schema version 3's facet indexes: versions 2 and 3 alternately (3 first in odd
    rounds), `rounds` times; ratios v3 / v2 of the medians."""
    runs: list[dict] = []
    for r in range(rounds):
        for version in ((2, 3) if r % 2 == 0 else (3, 2)):
            runs.append(_facet_round(admin_url, version, entries, batch))
            got = runs[-1]
            print(f"  round {r + 1} v{version}: append {entries / got['append_s']:.0f} entries/s, COPY "
                  f"{entries / got['copy_s']:.0f} rows/s, indexes {got['index_bytes_per_entry']:.0f} B/entry "
                  f"(load {os.getloadavg()[0]:.2f})", flush=True)
    out: dict = {"entries": entries, "batch": batch, "rounds": runs}
    for key in ("append_s", "copy_s"):
        med = {v: statistics.median(x[key] for x in runs if x["version"] == v) for v in (2, 3)}
        out[f"{key}_v2"], out[f"{key}_v3"], out[f"{key}_ratio"] = med[2], med[3], med[3] / med[2]
    out["migrate_rows"], out["migrate_s"] = migrate_time(admin_url, 10 * entries)
    print(f"  `migrate` 2 -> 3 of {out['migrate_rows']:,} rows: {out['migrate_s']:.2f} s "
          f"(load {os.getloadavg()[0]:.2f})", flush=True)
    return out


def migrate_time(admin_url: str, rows: int) -> tuple[int, float]:
    """Seconds `broker store migrate` takes to bring a version-2 store of `rows` entries to version 3."""
    from bench.journal_bench import _padded_fields
    from journal.chain import GENESIS, chain_entry
    from journal.store.postgres_store import PostgresStore

    url = _store_at(admin_url, 2)
    pad = make_pad()
    prev, lines = GENESIS, []
    for seq in range(1, rows + 1):
        entry, line = chain_entry(_padded_fields("m", seq, pad), seq, prev)
        prev = entry["hash"]
        lines.append(line)
    store = PostgresStore(url)
    try:
        store.append_lines("m", lines)
        t = time.perf_counter()
        store.migrate()
        return rows, time.perf_counter() - t
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.store_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short cases (2 s), writers 1,4")
    ap.add_argument("--seconds", type=float, help="length of each case (default 8, --quick 2)")
    ap.add_argument("--writers", help="comma-separated writer process counts (default 1,4,8)")
    ap.add_argument("--clients", type=int, default=16, help="client threads per writer (default 16)")
    ap.add_argument("--blob-mib", type=int, help="size of the streamed blob case (default 1024, --quick 64)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE (key 'store')")
    ap.add_argument("--facet-cost", type=int, metavar="N",
                    help="only the insert cost of schema version 3's facet indexes: N entries per round, v2 against v3")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of --facet-cost (default 3)")
    args = ap.parse_args(argv)
    seconds = args.seconds or (2.0 if args.quick else 8.0)
    counts = [int(x) for x in (args.writers or ("1,4" if args.quick else "1,4,8")).split(",")]

    from tests.support.postgres_server import _bindir, create_database, start_server

    if _bindir() is None:
        print("store_bench: no PostgreSQL (initdb) on this machine; skipped")
        return 0
    if args.facet_cost:
        server = start_server()
        try:
            got = facet_cost(server.admin_url, args.facet_cost, args.rounds)
        finally:
            server.remove()
        print(f"v3 / v2 time: append (groups of {got['batch']}, durable) {got['append_s_ratio']:.3f}, "
              f"COPY {got['copy_s_ratio']:.3f} (medians of {args.rounds}); load {os.getloadavg()}")
        if args.json:
            write_json(args.json, "store_facets", {"machine": machine(), **got})
        return 0
    root = scratch_dir("store-bench-")
    server = start_server()
    rows: list[dict] = []
    blobs: list[dict] = []
    try:
        cases = [(w, False) for w in counts] + [(4 if 4 in counts else counts[-1], True)]
        for writers, shared in cases:
            for backend in ("file", "postgres"):
                if backend == "file":
                    target = str(root / f"vault-{writers}-{shared}")
                else:
                    from journal.store.postgres_store import PostgresStore

                    target = create_database(server.admin_url)
                    PostgresStore(target).migrate()
                rows.append(run_case(backend, target, writers, args.clients, seconds, shared))
                print(format_table(rows[-1:], rows[0]["entries_s"]).splitlines()[-1], flush=True)
        blob_size = (args.blob_mib or (64 if args.quick else 1024)) << 20
        blobs = [run_blob("file", str(root / "blob-vault"), blob_size)]
        from journal.store.postgres_store import PostgresStore

        blob_db = create_database(server.admin_url)
        PostgresStore(blob_db).migrate()
        blobs.append(run_blob("postgres", blob_db, blob_size))
    finally:
        server.remove()
        shutil.rmtree(root, ignore_errors=True)
    base = rows[0]["entries_s"]
    print()
    print(f"baseline: file vault, 1 writer, {args.clients} clients: {base:.0f} entries/s; {seconds:.0f} s per case")
    print(format_table(rows, base))
    pg = [r for r in rows if r["backend"] == "postgres" and not r["shared_session"]]
    if pg:
        best = max(pg, key=lambda r: r["entries_s"])
        print(f"postgres peak here: {best['entries_s']:.0f} entries/s = {best['rows_per_hour']:,.0f} rows/hour "
              f"({best['writers']} writers); p99 at that load {best['p99_ms']:.1f} ms")
    print()
    print(f"one streamed blob of {blobs[0]['mib']:.0f} MiB (64 KiB writes; peak RSS of the writing process):")
    for b in blobs:
        print(f"  {b['backend']:<9} {b['mb_s']:>7.0f} MB/s   RSS growth {b['rss_growth_mib']:>6.1f} MiB   "
              f"peak {b['rss_peak_mib']:.0f} MiB   ({b['mb_s'] / blobs[0]['mb_s']:.2f} x file)")
    if args.json:
        median_p50 = statistics.median(r["p50_ms"] or 0 for r in pg) if pg else None
        write_json(args.json, "store", {"machine": machine(), "seconds": seconds, "rows": rows,
                                        "baseline_entries_s": base, "median_pg_p50_ms": median_p50, "blobs": blobs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
