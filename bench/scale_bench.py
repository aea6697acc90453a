"""Scale benchmark (issue 26): readers on one big session, file vault and PostgreSQL, time against the question.

    python -m bench.scale_bench [--quick] [--sizes 10000,100000] [--million] [--no-postgres] [--json FILE]

One session of N entries (the replay benchmark's call mix, ~1 KB each, chained with the journal's own chain
code: journal/chain.py via bench.write_chained, not through the proxy) in a file vault, and the very same
lines in a PostgreSQL store (a throwaway server, tests/support/postgres_server.py; rows COPYed by the
store's append_lines). Measured for each store, each as a fresh `broker` process (wall seconds; peak RSS
from wait4 for the exports):

- `show --seq N` (the last entry): cold (file: the seq index built in the user's cache) and warm;
- the inspector's first screen (`/api/session/head` + the first 200 timeline rows) and an entry page
  (`/api/session/entry?seq=N`), in-process (starlette TestClient), a fresh inspector each;
- `search --connector slack` (one connector of five);
- `revert-plan --json` (folds the session for the plan alone, writes no view) and `replay --out DIR` (folds
  and writes every view): wall, CPU seconds (the process and the children it forks, from wait4) and peak RSS;
- HAR and OTel exports: wall and peak RSS;
- baseline: `broker --version` (process start-up) and `broker verify` of the session.

N defaults to 10^4 and 10^5 (--quick: 10^4); --million adds 10^6. Between consecutive sizes of one store
the growth exponent log(t2/t1) / log(N2/N1) of revert-plan, replay and verify is printed (1.0: time
proportional to the session; issue 26's goal: at most 1.05), for wall and CPU seconds. Nothing here asserts
a timing.
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

    return write_chained(vault.session_path(SESSION), calls())[1]


def load_postgres(url: str, vault_root: Path) -> float:
    """COPY the session's lines into the store; seconds taken."""
    from journal.store.file_store import FileStore
    from journal.store.postgres_store import PostgresStore

    t = time.perf_counter()
    store = PostgresStore(url)
    try:
        store.append_lines(SESSION, FileStore(vault_root).iter_lines(SESSION))
        with store.connect() as conn:
            conn.execute("ANALYZE journal_entries")
    finally:
        store.close()
    return time.perf_counter() - t


def broker_usage(args: list[str], env: dict) -> tuple[float, float, int, int]:
    """(wall seconds, CPU seconds, peak RSS in MiB, exit code) of one `broker` process, its output discarded.
    CPU and RSS come from wait4: the process and the children it waited for (replay's forked verifier)."""
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "broker.cli", *args], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - t, usage.ru_utime + usage.ru_stime, usage.ru_maxrss // 1024, p.returncode


def broker(args: list[str], env: dict) -> tuple[float, int, int]:
    """(wall seconds, peak RSS in MiB, exit code) of one `broker` process, its output discarded."""
    wall, _, rss, code = broker_usage(args, env)
    return wall, rss, code


def exponent(t1: float, t2: float, n1: int, n2: int) -> float:
    """The growth exponent of a time between session sizes n1 and n2: log(t2/t1) / log(n2/n1)."""
    return math.log(t2 / t1) / math.log(n2 / n1)


def exponents(rows: list[dict]) -> list[dict]:
    """Growth exponents of revert-plan, replay and verify between consecutive sizes of each store."""
    out = []
    for store in dict.fromkeys(r["store"] for r in rows):
        mine = [r for r in rows if r["store"] == store]
        for a, b in zip(mine, mine[1:], strict=False):
            row: dict = {"store": store, "from": a["entries"], "to": b["entries"]}
            for key in ("revert_plan_s", "revert_plan_cpu_s", "replay_s", "replay_cpu_s", "verify_s"):
                if a.get(key) and b.get(key):
                    row[key.removesuffix("_s")] = round(exponent(a[key], b[key], a["entries"], b["entries"]), 3)
            out.append(row)
    return out


def inspector(where: list[str], seq: int, env: dict) -> dict:
    """The inspector's first screen and an entry page, in a child (a fresh inspector, the store as given)."""
    code = (
        "import sys, time, orjson\n"
        "from starlette.testclient import TestClient\n"
        "import click\n"
        "from broker.cli.options import reading_vault\n"
        "from broker.inspector import create_app\n"
        "store, vault_dir, s, n = sys.argv[1] or None, sys.argv[2], sys.argv[3], int(sys.argv[4])\n"
        "with click.Context(click.Command('x')):\n"
        "    c = TestClient(create_app(reading_vault(store, vault_dir)), base_url='http://127.0.0.1')\n"
        "    t = time.perf_counter()\n"
        "    assert c.get(f'/api/session/head?session={s}').status_code == 200\n"
        "    assert len(c.get(f'/api/session/entries?session={s}&from=1&limit=200').json()['rows']) == 200\n"
        "    first = time.perf_counter() - t\n"
        "    t = time.perf_counter()\n"
        "    r = c.get(f'/api/session/entry?session={s}&seq={n}')\n"
        "    assert r.status_code == 200 and r.json()['entry']['seq'] == n, r.text[:200]\n"
        "    entry = time.perf_counter() - t\n"
        "    t = time.perf_counter()\n"
        "    r = c.get(f'/api/session/entry?session={s}&seq={n // 2}')\n"
        "    again = time.perf_counter() - t\n"
        "    from journal.seq_index import line_of_seq\n"
        "    v = reading_vault(store, vault_dir)\n"
        "    t = time.perf_counter()\n"
        "    assert orjson.loads(line_of_seq(v, s, n))['seq'] == n\n"
        "    cold = time.perf_counter() - t\n"
        "    t = time.perf_counter()\n"
        "    assert orjson.loads(line_of_seq(v, s, n - 1))['seq'] == n - 1\n"
        "    warm = time.perf_counter() - t\n"
        "print(orjson.dumps({'first_screen_s': first, 'entry_page_s': entry, 'another_entry_s': again,\n"
        "                   'line_of_seq_last_s': cold, 'line_of_seq_again_s': warm}).decode())\n"
    )
    store = where[1] if where[0] == "--store" else ""
    vault = where[1] if where[0] == "--vault" else str(ROOT / "vault")
    out = subprocess.run([sys.executable, "-c", code, store, vault, SESSION, str(seq)], capture_output=True,
                         text=True, env=env, cwd=ROOT, timeout=3600)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    import orjson

    return orjson.loads(out.stdout)


def measure(label: str, where: list[str], entries: int, env: dict) -> dict:
    row: dict = {"store": label, "entries": entries}
    row["verify_s"] = broker(["verify", *where], env)[0]
    row["show_seq_last_cold_s"] = broker(["show", SESSION, "--seq", str(entries), *where], env)[0]
    row["show_seq_last_warm_s"] = broker(["show", SESSION, "--seq", str(entries), *where], env)[0]
    row.update(inspector(where, entries, env))
    row["search_one_connector_s"] = broker(["search", "--connector", "slack", *where], env)[0]
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
    for fmt in ("har", "otel"):
        wall, rss, code = broker(["export", SESSION, "--format", fmt, *where], env)
        row[f"export_{fmt}_s"], row[f"export_{fmt}_peak_mib"] = wall, rss
        if code:
            row[f"export_{fmt}_exit"] = code
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scale_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10^4 entries only")
    ap.add_argument("--sizes", help="comma-separated session sizes (default 10000,100000)")
    ap.add_argument("--million", action="store_true", help="also 10^6 entries (about 1 GB; minutes)")
    ap.add_argument("--no-postgres", action="store_true", help="the file vault only")
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
    growth: list[dict] = []
    try:
        t = time.perf_counter()
        version = min(broker(["--version"], env)[0] for _ in range(3))
        print(f"broker --version: {version:.3f} s")
        for n in sizes:
            vault = root / f"v{n}"
            t = time.perf_counter()
            size = generate(vault, n)
            print(f"\n{n:,} entries, {size / 1e6:.0f} MB, generated in {time.perf_counter() - t:.1f} s")
            rows.append(measure("file", ["--vault", str(vault)], n, env))
            if server is not None:
                url = create_database(server.admin_url)
                loaded = load_postgres(url, vault)
                print(f"  loaded into PostgreSQL in {loaded:.1f} s")
                row = measure("postgres", ["--store", url], n, env)
                row["load_s"] = loaded
                rows.append(row)
            for row in rows[-2:] if server is not None else rows[-1:]:
                print("  " + "  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
            shutil.rmtree(vault, ignore_errors=True)
        growth = exponents(rows)
        for g in growth:
            print(f"growth exponent {g['store']} {g['from']:,} -> {g['to']:,} entries: "
                  + "  ".join(f"{k}={v}" for k, v in g.items() if k not in ("store", "from", "to")))
    finally:
        if server is not None:
            server.remove()
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        write_json(args.json, "scale", {"machine": machine(), "version_s": version, "rows": rows, "growth": growth})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
