"""Scale benchmark (issue 26): readers on one big session, file vault and PostgreSQL, time against the question.

    python -m bench.scale_bench [--quick] [--sizes 10000,100000] [--million] [--no-postgres] [--readers]
                                [--exports-only]
                                [--json FILE]

One session of N entries (the replay benchmark's call mix, ~1 KB each, chained with the journal's own chain
code: journal/chain.py via bench.write_chained, not through the proxy) in a file vault, and the very same
lines in a PostgreSQL store (a throwaway server, tests/support/postgres_server.py; rows COPYed by the
store's append_lines). Measured for each store, each as a fresh `broker` process (wall seconds; peak RSS
from wait4 for the exports):

- `show --seq N` (the last entry): cold (file: the seq index built in the user's cache) and warm;
- the inspector's first screen (`/api/session/head` + the first 200 timeline rows) and an entry page
  (`/api/session/entry?seq=N`), in-process (starlette TestClient), a fresh inspector each;
- `search --connector slack` (one connector of five);
- a fleet: the same N entries in ten sessions of N/10 (each one connector, each its own day, generated beside
  the big session): `search --connector slack` (two sessions of ten hold slack) and a one-day `--since/--until`
  search (one of ten), as processes and in-process, cold (file: the search summaries built in the user's
  cache) and warm (summaries reused), and in-process against a full read of every session (no summaries);
- `show --seq N` in-process (`line_of_seq`) through the writer's seq sidecar (built as the writer keeps it:
  journal/seq_sidecar.py) and through the user's cache index (sidecar removed), and the inspector's first
  screen both ways;
- `revert-plan --json` (folds the session for the plan alone, writes no view) and `replay --out DIR` (folds
  and writes every view): wall, CPU seconds (the process and the children it forks, from wait4) and peak RSS;
- HAR, OTel and OCSF exports (streamed: issue 26 item 3): wall, CPU seconds and peak RSS, and `verify-export`
  of the HAR written; between consecutive sizes, each one's growth exponent log(t2/t1)/log(N2/N1) (from CPU
  seconds, which hold on a loaded machine better than wall time);
- baseline: `broker --version` (process start-up) and `broker verify` of the session.

N defaults to 10^4 and 10^5 (--quick: 10^4); --million adds 10^6. `--readers`: only the questions of
issue 26 item 3 (show, inspector, search; no verify, revert-plan or export); `--exports-only`: the exports
(and verify-export) alone; `--search-only`: the searches alone (on PostgreSQL the in-process "full read" is
the search with its facet indexes left unused: every row filtered on the server, as before schema version 3).
Between consecutive sizes of one store the growth exponent of every time is printed (wall and CPU). Nothing
here asserts a timing.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench import machine, scratch_dir, write_chained, write_json
from bench.replay_bench import make_call
from journal.seq_sidecar import rebuild as rebuild_sidecar
from journal.vault import Vault

SESSION = "scale-bench"
ROOT = Path(__file__).resolve().parents[1]


def generate(vault_root: Path, entries: int) -> int:
    vault = Vault.create(vault_root)
    rng = random.Random(26)

    def calls():
        for seq in range(1, entries + 1):
            fields = make_call(seq, rng, 5000)
            fields["session"] = SESSION
            yield fields

    size = write_chained(vault.session_path(SESSION), calls())[1]
    rebuild_sidecar(vault, SESSION)  # what the journal writer keeps beside the file as it appends
    return size


FLEET = 10
CONNECTORS = ("gmail", "calendar", "drive", "slack", "github")


def generate_fleet(vault_root: Path, entries: int) -> int:
    """`entries` entries in FLEET sessions: session k calls one connector (k % 5) on day k + 1 of October."""
    vault = Vault.create(vault_root)
    rng = random.Random(27)
    total = 0
    for k in range(FLEET):
        session = f"fleet-{k:02d}-{CONNECTORS[k % 5]}"

        def calls(k: int = k, session: str = session):
            for i in range(1, entries // FLEET + 1):
                fields = make_call(i * 5 + k % 5, rng, 5000)
                fields["session"] = session
                fields["ts"] = f"2026-10-{k + 1:02d}" + fields["ts"][10:]
                yield fields

        total += write_chained(vault.session_path(session), calls())[1]
        rebuild_sidecar(vault, session)
    return total


FLEET_DAY = "2026-10-04"  # fleet-03-slack's day


def load_postgres(url: str, vault_root: Path) -> float:
    """COPY the vault's sessions' lines into the store; seconds taken."""
    from journal.store.file_store import FileStore
    from journal.store.postgres_store import PostgresStore

    t = time.perf_counter()
    store = PostgresStore(url)
    try:
        files = FileStore(vault_root)
        for session in Vault(vault_root).sessions():
            store.append_lines(session, files.iter_lines(session))
        with store.connect() as conn:
            conn.execute("ANALYZE journal_entries")
    finally:
        store.close()
    return time.perf_counter() - t


def broker(args: list[str], env: dict) -> tuple[float, int, int]:
    """(wall seconds, peak RSS in MiB, exit code) of one `broker` process, its output discarded."""
    wall, _, rss, code = broker_usage(args, env)
    return wall, rss, code


def exponent(t1: float, t2: float, n1: int, n2: int) -> float:
    """The growth exponent of a time between session sizes n1 and n2: log(t2/t1) / log(n2/n1)."""
    return math.log(t2 / t1) / math.log(n2 / n1)


def broker_usage(args: list[str], env: dict, out: Path | None = None) -> tuple[float, float, int, int]:
    """(wall seconds, CPU seconds, peak RSS in MiB, exit code) of one `broker` process, its output to `out`
    (or discarded). CPU and RSS come from wait4: the process and the children it waited for (replay's forked
    verifier)."""
    t = time.perf_counter()
    sink = open(out, "wb") if out is not None else subprocess.DEVNULL  # noqa: SIM115 (closed below)
    try:
        p = subprocess.Popen([sys.executable, "-m", "broker.cli", *args], stdout=sink, stderr=subprocess.DEVNULL,
                             env=env, cwd=ROOT)
        _, status, usage = os.wait4(p.pid, 0)
    finally:
        if out is not None:
            sink.close()  # type: ignore[union-attr]
    p.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - t, usage.ru_utime + usage.ru_stime, usage.ru_maxrss // 1024, p.returncode


EXPORTS = ("har", "otel", "ocsf")


def measure_exports(where: list[str], env: dict, scratch: Path) -> dict:
    """Each streamed export (wall, CPU, peak RSS, output size) and `verify-export` of the HAR it wrote."""
    row: dict = {}
    for fmt in EXPORTS:
        out = scratch / f"export.{fmt}"
        wall, cpu, rss, code = broker_usage(["export", SESSION, "--format", fmt, *where], env, out)
        row[f"export_{fmt}_s"], row[f"export_{fmt}_cpu_s"], row[f"export_{fmt}_peak_mib"] = wall, cpu, rss
        row[f"export_{fmt}_mb"] = out.stat().st_size / 1e6
        if code:
            row[f"export_{fmt}_exit"] = code
        if fmt == "har":
            wall, cpu, rss, code = broker_usage(["verify-export", str(out)], env)
            row["verify_export_har_s"], row["verify_export_har_cpu_s"] = wall, cpu
            row["verify_export_har_peak_mib"] = rss
            if code:
                row["verify_export_har_exit"] = code
        out.unlink()
    return row


def growth(rows: list[dict]) -> list[dict]:
    """Per store, between consecutive sizes: the growth exponent of every time measured (wall `*_s` and CPU
    `*_cpu_s`; 1.0 is time proportional to the session, issue 26's goal at most 1.05)."""
    out = []
    for store in sorted({r["store"] for r in rows}):
        mine = sorted((r for r in rows if r["store"] == store), key=lambda r: r["entries"])
        for a, b in zip(mine, mine[1:], strict=False):
            row: dict = {"store": store, "from": a["entries"], "to": b["entries"]}
            for key in [k for k in a if k.endswith("_s") and isinstance(a[k], float)]:
                if a[key] > 0 and isinstance(b.get(key), float) and b[key] > 0:
                    row[key.removesuffix("_s") + "_exponent"] = round(
                        exponent(a[key], b[key], a["entries"], b["entries"]), 3)
            out.append(row)
    return out


def inspector(where: list[str], seq: int, env: dict) -> dict:
    """The inspector's first screen (head + the first 200 rows), its last page, two entry pages and the seq
    lookup, in a child (a fresh inspector, the store as given)."""
    code = (
        "import sys, time, orjson\n"
        "from starlette.testclient import TestClient\n"
        "import click\n"
        "from broker.cli.options import reading_vault\n"
        "from broker.inspector import create_app\n"
        "store, vault_dir, s, n = sys.argv[1] or None, sys.argv[2], sys.argv[3], int(sys.argv[4])\n"
        "def timed(f):\n"
        "    t = time.perf_counter(); f(); return time.perf_counter() - t\n"
        "with click.Context(click.Command('x')):\n"
        "    c = TestClient(create_app(reading_vault(store, vault_dir)), base_url='http://127.0.0.1')\n"
        "    def first():\n"
        "        assert c.get(f'/api/session/head?session={s}').json()['lines'] == n\n"
        "        assert len(c.get(f'/api/session/entries?session={s}&from=1&limit=200').json()['rows']) == 200\n"
        "    def last():\n"
        "        rows = c.get(f'/api/session/entries?session={s}&from={n - 199}&limit=200').json()['rows']\n"
        "        assert len(rows) == 200 and rows[-1]['line'] == n\n"
        "    def entry(k):\n"
        "        r = c.get(f'/api/session/entry?session={s}&seq={k}')\n"
        "        assert r.status_code == 200 and r.json()['entry']['seq'] == k, r.text[:200]\n"
        "    out = {'first_screen_s': timed(first), 'first_screen_again_s': timed(first), 'last_page_s': timed(last),\n"
        "           'entry_page_s': timed(lambda: entry(n)), 'another_entry_s': timed(lambda: entry(n // 2))}\n"
        "    from journal.seq_index import line_of_seq\n"
        "    v = reading_vault(store, vault_dir)\n"
        "    def look(k):\n"
        "        assert orjson.loads(line_of_seq(v, s, k))['seq'] == k\n"
        "    out['line_of_seq_last_s'] = timed(lambda: look(n))\n"
        "    out['line_of_seq_again_s'] = timed(lambda: look(n - 1))\n"
        "print(orjson.dumps(out).decode())\n"
    )
    return _child(code, where, [SESSION, str(seq)], env)


def _child(code: str, where: list[str], args: list[str], env: dict) -> dict:
    store = where[1] if where[0] == "--store" else ""
    vault = where[1] if where[0] == "--vault" else str(ROOT / "vault")
    out = subprocess.run([sys.executable, "-c", code, store, vault, *args], capture_output=True,
                         text=True, env=env, cwd=ROOT, timeout=3600)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    import orjson

    return orjson.loads(out.stdout)


def searches_in_process(where: list[str], env: dict) -> dict:
    """`search` over the fleet in-process: by connector and by one day, cold and warm (file: summaries built,
    then reused; PostgreSQL: the facet indexes checked, then used), and with no summaries or indexes (every
    session read, every row filtered on the server: what search did before them)."""
    code = (
        "import sys, time, orjson, click\n"
        "from broker.cli.options import reading_vault\n"
        "from journal import search as sm\n"
        "store, vault_dir, day = sys.argv[1] or None, sys.argv[2], sys.argv[3]\n"
        "out = {}\n"
        "with click.Context(click.Command('x')):\n"
        "    v = reading_vault(store, vault_dir)\n"
        "    facets = sm._facets\n"
        "    for name, q in (('connector', sm.Query(connector='slack')), ('day', sm.Query(since=day, until=day))):\n"
        "        got = []\n"
        "        for run in ('cold', 'warm', 'full_read'):\n"
        "            if run == 'full_read':\n"
        "                sm._SUMMARIZED = ()\n"
        "                sm._facets = lambda q: sm.Facets()  # PostgreSQL: no index, every row filtered\n"
        "            skipped = []\n"
        "            t, c = time.perf_counter(), time.process_time()\n"
        "            got.append([(m.session, m.line) for m in sm.search(v, q, skipped)])\n"
        "            out[f'search_{name}_{run}_s'] = time.perf_counter() - t\n"
        "            out[f'search_{name}_{run}_cpu_s'] = time.process_time() - c\n"
        "            out[f'search_{name}_{run}_skipped'] = len(skipped)\n"
        "        sm._SUMMARIZED = ('connector', 'effect', 'agent', 'since', 'until')\n"
        "        sm._facets = facets\n"
        "        assert got[0] == got[1] == got[2] and got[0], name\n"
        "        out[f'search_{name}_found'] = len(got[0])\n"
        "print(orjson.dumps(out).decode())\n"
    )
    return _child(code, where, [FLEET_DAY], env)


def _searches(row: dict, where: list[str], fleet: list[str], env: dict) -> dict:
    row["search_one_connector_s"] = broker(["search", "--connector", "slack", *where], env)[0]
    row["fleet_search_connector_cold_s"] = broker(["search", "--connector", "slack", *fleet], env)[0]
    row["fleet_search_connector_warm_s"] = broker(["search", "--connector", "slack", *fleet], env)[0]
    row["fleet_search_day_s"] = broker(["search", "--since", FLEET_DAY, "--until", FLEET_DAY, *fleet], env)[0]
    row.update(searches_in_process(fleet, {**env, "XDG_CACHE_HOME": env["XDG_CACHE_HOME"] + "-inproc"}))
    row["loadavg"] = open("/proc/loadavg").read().split()[0]
    return row


def measure(label: str, where: list[str], fleet: list[str], entries: int, env: dict, scratch: Path, *,
            readers: bool, exports_only: bool, search_only: bool = False) -> dict:
    row: dict = {"store": label, "entries": entries}
    if exports_only:
        row.update(measure_exports(where, env, scratch))
        return row
    if search_only:
        return _searches(row, where, fleet, env)
    if not readers:
        row["verify_s"] = broker(["verify", *where], env)[0]
    row["show_seq_last_cold_s"] = broker(["show", SESSION, "--seq", str(entries), *where], env)[0]
    row["show_seq_last_warm_s"] = broker(["show", SESSION, "--seq", str(entries), *where], env)[0]
    row.update(inspector(where, entries, env))
    if label == "file":  # the same without the writer's sidecar: the index in the user's cache, cold then warm
        sidecar = Path(where[1]) / "journal" / f"{SESSION}.seqidx"
        sidecar.rename(sidecar.with_suffix(".away"))
        try:
            for k, v in inspector(where, entries, env).items():
                row[f"nosidecar_{k}"] = v
            for k, v in inspector(where, entries, env).items():
                row[f"nosidecar_warm_{k}"] = v
        finally:
            sidecar.with_suffix(".away").rename(sidecar)
    _searches(row, where, fleet, env)
    if readers:
        return row
    load = os.getloadavg()[0]
    wall, cpu, rss, code = broker_usage(["revert-plan", SESSION, "--json", *where], env)
    row.update(revert_plan_s=wall, revert_plan_cpu_s=cpu, revert_plan_peak_mib=rss, revert_plan_load=load)
    out = scratch_dir("scale-views-")
    load = os.getloadavg()[0]
    wall, cpu, rss, code = broker_usage(["replay", SESSION, "--out", str(out), *where], env)
    row.update(replay_s=wall, replay_cpu_s=cpu, replay_peak_mib=rss, replay_load=load)
    shutil.rmtree(out, ignore_errors=True)
    if code:
        row["replay_exit"] = code
    row.update(measure_exports(where, env, scratch))
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scale_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10^4 entries only")
    ap.add_argument("--sizes", help="comma-separated session sizes (default 10000,100000)")
    ap.add_argument("--million", action="store_true", help="also 10^6 entries (about 1 GB; minutes)")
    ap.add_argument("--no-postgres", action="store_true", help="the file vault only")
    ap.add_argument("--exports-only", action="store_true", help="measure the exports (and verify-export) alone")
    ap.add_argument("--readers", action="store_true", help="only show, inspector and search (issue 26 item 3)")
    ap.add_argument("--search-only", action="store_true",
                    help="only the searches (issue 26: PostgreSQL's facet indexes against its full scan)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE (key 'scale')")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in (args.sizes or ("10000" if args.quick else "10000,100000")).split(",")]
    if args.million:
        sizes.append(1_000_000)
    root = scratch_dir("scale-bench-")
    env = {**os.environ, "XDG_CACHE_HOME": str(root / "cache"), "NO_COLOR": "1"}
    server = None
    if not args.no_postgres:
        from tests.support.postgres_server import _bindir, create_database, start_server

        if _bindir() is None:
            print("scale_bench: no PostgreSQL (initdb) on this machine; the file vault only")
        else:
            server = start_server()
    rows: list[dict] = []
    exponents: list[dict] = []
    try:
        t = time.perf_counter()
        version = min(broker(["--version"], env)[0] for _ in range(3))
        print(f"broker --version: {version:.3f} s")
        for n in sizes:
            vault = root / f"v{n}"
            t = time.perf_counter()
            size = generate(vault, n)
            print(f"\n{n:,} entries, {size / 1e6:.0f} MB, generated in {time.perf_counter() - t:.1f} s")
            fleet = root / f"f{n}"
            if not args.exports_only:
                t = time.perf_counter()
                size = generate_fleet(fleet, n)
                took = time.perf_counter() - t
                print(f"fleet: {FLEET} sessions, {n:,} entries, {size / 1e6:.0f} MB, in {took:.1f} s")
            rows.append(measure("file", ["--vault", str(vault)], ["--vault", str(fleet)], n, env, root,
                                readers=args.readers, exports_only=args.exports_only, search_only=args.search_only))
            if server is not None:
                url, fleet_url = create_database(server.admin_url), create_database(server.admin_url)
                loaded = load_postgres(url, vault)
                if not args.exports_only:
                    load_postgres(fleet_url, fleet)
                print(f"  loaded into PostgreSQL in {loaded:.1f} s")
                row = measure("postgres", ["--store", url], ["--store", fleet_url], n, env, root,
                              readers=args.readers, exports_only=args.exports_only, search_only=args.search_only)
                row["load_s"] = loaded
                rows.append(row)
            for row in rows[-2:] if server is not None else rows[-1:]:
                print("  " + "  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
            shutil.rmtree(vault, ignore_errors=True)
            shutil.rmtree(fleet, ignore_errors=True)
        exponents = growth(rows)
        for row in exponents:
            print("  growth " + "  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                          for k, v in row.items()))
    finally:
        if server is not None:
            server.remove()
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        write_json(args.json, "scale", {"machine": machine(), "version_s": version, "rows": rows,
                                        "growth": exponents, "loadavg": Path("/proc/loadavg").read_text().split()[:3]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
