"""Start-up and whole-process verify: what a user waits for at the shell, against the peers.

    python -m bench.startup_bench [--quick] [--verify-mb MB] [--show-sizes N,N] [--runs R] [--repeat R]
                                  [--load N] [--json FILE]

1. Wall time of the whole process (the console script in the project's venv) of `broker --version`,
   `broker --help`, and the small readers: `broker show SESSION --seq N` (the last entry of a session of
   N entries, default 10^4 and 10^6, --quick 10^4: the scale benchmark's sessions, bench/scale_bench.py
   `generate`, with the writer's seq sidecar), and `broker sessions` and `broker verify` of a vault holding
   one session of 100 entries. Against `python -c pass` of the same interpreter (the floor no Python
   command goes under; ratio = time / its time, medians) measured in the same rounds, with `python -S -c
   pass` (no site: the interpreter alone) and `python -c "import click"` (the floor of any click command
   line: what no change to the broker's code can remove) beside it. Bytecode caches are written once
   before timing (a first run after an install compiles every module; `PYTHONDONTWRITEBYTECODE`, set in
   some shells, would make every run pay that).
2. `broker verify --vault V` (the whole process: start-up, imports, the check of every line, the
   report) of a vault holding one session of about 100 MB (the journal benchmark's ~2 KB entries), against
   `sha256sum` and `openssl dgst -sha256` of the same file, warm page cache. Ratio = broker's time / the
   same round's `sha256sum` time, median over the rounds (each round runs every command once, in turn).
   `--other-broker SCRIPT` times another install's `broker verify` in the same rounds (an A/B, e.g. main's
   console script beside a branch's, on a machine others share).

With `--load N`, N busy processes (bench/load.py) run during the measurements. The load average is
printed with the figures. Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench import machine, scratch_dir, write_json
from bench.load import busy_load, load_average

VENV_BIN = Path(sys.executable).parent


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's shell writes the caches: so does this bench
    return env


CPU: dict[str, list[float]] = {}
"""CPU seconds (user + system, the process and its children) of every command timed, by command line: on a
shared machine the wall time moves with the others' load, the CPU time much less."""


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _wall(cmd: list[str], env: dict[str, str]) -> float:
    c0, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-400:]}")
    CPU.setdefault(" ".join(cmd), []).append(_children_cpu() - c0)
    return took


def _cpu(cmd: list[str]) -> float:
    return statistics.median(CPU[" ".join(cmd)])


def _broker() -> list[str]:
    script = VENV_BIN / "broker"
    return [str(script)] if script.exists() else [sys.executable, "-m", "broker.cli"]


def run_startup(repeat: int, env: dict[str, str], readers: dict[str, list[str]] | None = None) -> list[dict]:
    """Every case once per round, in turn; `readers`: further broker cases (name -> arguments)."""
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -S -c pass": [sys.executable, "-S", "-c", "pass"],
        "python -c 'import click'": [sys.executable, "-c", "import click"],
        "broker --version": [*_broker(), "--version"],
        "broker --help": [*_broker(), "--help"],
    }
    cases.update({name: [*_broker(), *args] for name, args in (readers or {}).items()})
    for cmd in cases.values():  # bytecode caches written, files in the page cache
        _wall(cmd, env)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name, cmd in cases.items():
            times[name].append(_wall(cmd, env))
    floor = statistics.median(times["python -c pass"])
    floor_cpu = _cpu(cases["python -c pass"])
    return [{"case": name, "median_s": statistics.median(ts), "min_s": min(ts), "max_s": max(ts),
             "over_python_s": statistics.median(ts) - floor, "ratio": statistics.median(ts) / floor,
             "runs": len(ts), "cpu_s": _cpu(cases[name]), "cpu_ratio": _cpu(cases[name]) / floor_cpu}
            for name, ts in times.items()]


SMALL_ENTRIES = 100


def build_readers(root: Path, show_sizes: list[int]) -> dict[str, list[str]]:
    """The reader cases: `show --seq N` of the last entry of a session of N entries each (in a vault of its
    own), `sessions` and `verify` of a vault of one SMALL_ENTRIES session."""
    from bench.scale_bench import SESSION, generate

    cases: dict[str, list[str]] = {}
    for n in show_sizes:
        vault = root / f"show-{n}"
        generate(vault, n)
        cases[f"broker show --seq (N={n:,})"] = ["show", SESSION, "--vault", str(vault), "--seq", str(n)]
    small = root / "small"
    generate(small, SMALL_ENTRIES)
    cases[f"broker sessions ({SMALL_ENTRIES} entries)"] = ["sessions", "--vault", str(small)]
    cases[f"broker verify ({SMALL_ENTRIES} entries)"] = ["verify", "--vault", str(small)]
    return cases


def build_vault(root: Path, megabytes: float) -> tuple[Path, Path, int]:
    """A vault with one session file of about `megabytes` MB of the journal benchmark's entries."""
    from bench.journal_bench import build_session, make_pad
    from journal.vault import Vault

    vault = Vault.create(root / "vault")
    path, entries = build_session(vault, int(megabytes * 1_000_000), make_pad())
    return root / "vault", path, entries


def run_verify(vault_dir: Path, path: Path, repeat: int, env: dict[str, str],
               other: str | None = None) -> tuple[list[dict], list[float]]:
    """`other`: another install's `broker` script (say main's, beside a branch's), timed in the same rounds."""
    cases: dict[str, list[str]] = {"sha256sum": ["sha256sum", str(path)]}
    openssl = shutil.which("openssl")
    if openssl:
        cases["openssl dgst -sha256"] = [openssl, "dgst", "-sha256", str(path)]
    cases["broker verify"] = [*_broker(), "verify", "--vault", str(vault_dir)]
    if other:
        cases["other broker verify"] = [other, "verify", "--vault", str(vault_dir)]
    for cmd in cases.values():  # warm: page cache, bytecode caches
        _wall(cmd, env)
    times: dict[str, list[float]] = {name: [] for name in cases}
    ratios: list[float] = []
    for _ in range(repeat):
        for name, cmd in cases.items():
            times[name].append(_wall(cmd, env))
        ratios.append(times["broker verify"][-1] / times["sha256sum"][-1])
    size = path.stat().st_size
    rows = []
    for name, ts in times.items():
        round_ratios = [t / s for t, s in zip(ts, times["sha256sum"], strict=True)]
        rows.append({"case": name, "median_s": statistics.median(ts), "mb_per_s": size / 1e6 / statistics.median(ts),
                     "ratio": statistics.median(round_ratios), "min_ratio": min(round_ratios),
                     "cpu_s": _cpu(cases[name]), "cpu_ratio": _cpu(cases[name]) / _cpu(cases["sha256sum"])})
    return rows, ratios


def format_tables(start: list[dict], verify: list[dict], info: dict) -> str:
    out = [f"start-up, whole process, median of {start[0]['runs']} runs (load average {info['load_before']})",
           f"{'case':<34}{'median s':>10}{'min s':>9}{'max s':>9}{'over python':>13}{'ratio':>7}{'CPU s':>8}"
           f"{'CPU ratio':>10}"]
    for r in start:
        out.append(f"{r['case']:<34}{r['median_s']:>10.3f}{r['min_s']:>9.3f}{r['max_s']:>9.3f}"
                   f"{r['over_python_s']:>13.3f}{r['ratio']:>7.2f}{r['cpu_s']:>8.3f}{r['cpu_ratio']:>10.2f}")
    out.append("ratio, CPU ratio: against `python -c pass` of the same rounds (medians)")
    out.append("")
    out.append(f"whole-process verify of a {info['verify_mb']:.1f} MB session ({info['entries']} entries), warm cache, "
               f"median of {info['repeat']} rounds")
    out.append(f"{'case':<26}{'median s':>10}{'MB/s':>9}{'ratio':>8}{'min':>7}{'CPU s':>8}{'CPU ratio':>10}")
    for r in verify:
        out.append(f"{r['case']:<26}{r['median_s']:>10.3f}{r['mb_per_s']:>9.1f}{r['ratio']:>8.2f}{r['min_ratio']:>7.2f}"
                   f"{r['cpu_s']:>8.3f}{r['cpu_ratio']:>10.2f}")
    out.append("CPU s: median CPU seconds (user + system, with children); CPU ratio: against sha256sum's")
    out.append("ratio = time / sha256sum time of the same round, median (min) over rounds; broker verify per round: "
               + " ".join(f"{x:.2f}" for x in info["verify_ratios"]))
    out.append(f"load average before/after: {info['load_before']} / {info['load_after']}"
               + (f" (with {info['load']} busy processes)" if info["load"] else ""))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.startup_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run (10 MB, 3 rounds)")
    ap.add_argument("--verify-mb", type=float, help="session size for the verify case (default 100)")
    ap.add_argument("--show-sizes", help="entries of each `show --seq` session, comma-separated "
                    "(default 10000,1000000; --quick 10000)")
    ap.add_argument("--runs", type=int, help="start-up rounds (default 20, --quick 10)")
    ap.add_argument("--repeat", type=int, help="verify rounds (default 7, --quick 3)")
    ap.add_argument("--load", type=int, default=0, help="busy processes during the measurement (bench/load.py)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE (key 'startup')")
    ap.add_argument("--other-broker", metavar="SCRIPT", help="another install's `broker` console script (e.g. "
                    "main's .venv/bin/broker), its verify timed in the same rounds: an A/B on a shared machine")
    args = ap.parse_args(argv)
    mb = args.verify_mb or (10 if args.quick else 100)
    repeat = args.repeat or (3 if args.quick else 7)
    runs = args.runs or (10 if args.quick else 20)
    show_sizes = [int(n) for n in (args.show_sizes or ("10000" if args.quick else "10000,1000000")).split(",")]
    env = _env()
    root = scratch_dir("startup-")
    env["XDG_CACHE_HOME"] = str(root / "cache")  # a reader's own index, were one built, is not the user's
    try:
        readers = build_readers(root, show_sizes)
        vault_dir, path, entries = build_vault(root, mb)
        fmt = "%.2f %.2f %.2f"
        info: dict = {"verify_mb": path.stat().st_size / 1e6, "entries": entries, "repeat": repeat, "load": args.load,
                      "show_sizes": show_sizes, "load_before": fmt % load_average()}
        with busy_load(args.load):
            start = run_startup(runs, env, readers)
            verify, ratios = run_verify(vault_dir, path, repeat, env, args.other_broker)
        info["load_after"] = fmt % load_average()
        info["verify_ratios"] = ratios
        print(format_tables(start, verify, info))
        if args.json:
            write_json(args.json, "startup", {"machine": machine(), "params": info, "startup": start,
                                              "verify": verify})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
