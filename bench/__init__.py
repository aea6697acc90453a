"""Benchmarks. Each is a module runnable as `python -m bench.<name>`; `bench/run` runs them all.

Conventions every benchmark follows:

- it measures its own baseline in the same run and prints ratios, never asserts timings;
- scratch files go under `bench/results/` (gitignored), in a temporary directory removed afterwards;
- `--quick` makes a small run, `--json FILE` writes the figures under the benchmark's own key.
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import orjson

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def scratch_dir(prefix: str) -> Path:
    """A fresh temporary directory under bench/results/ (same filesystem as the checkout)."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=RESULTS_DIR))


def machine() -> dict:
    """What the figures were measured on."""
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }


def write_json(path: str | os.PathLike, name: str, figures: dict) -> None:
    """Write `figures` under key `name` in the JSON file at `path`, keeping other benchmarks' keys.

    `bench/run --json FILE` hands the same FILE to every benchmark; each one owns its key.
    """
    p = Path(path)
    data: dict = {}
    if p.exists():
        try:
            loaded = orjson.loads(p.read_bytes())
            if isinstance(loaded, dict):
                data = loaded
        except orjson.JSONDecodeError:
            data = {}
    data[name] = figures
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    os.replace(tmp, p)


def write_chained(path: Path, fields: Iterator[dict], max_bytes: int | None = None) -> tuple[int, int]:
    """Chain synthetic entry fields (seq 1, 2, ...) into a new session file with the real chain code,
    in large writes, until `fields` ends or the file holds `max_bytes`; return (entries, bytes).
    Benchmarks that need a big session build it this way rather than through the Recorder, which
    would dominate their run."""
    from journal.canonical import orjson_matches_jcs
    from journal.chain import GENESIS, chain_entry

    prev, seq, size, buf = GENESIS, 0, 0, []
    with open(path, "wb") as f:
        for seq, item in enumerate(fields, 1):
            entry, line = chain_entry(item, seq, prev, orjson_ok=orjson_matches_jcs(item))
            prev = entry["hash"]
            buf.append(line)
            size += len(line)
            if len(buf) >= 4096:
                f.write(b"".join(buf))
                buf.clear()
            if max_bytes is not None and size >= max_bytes:
                break
        f.write(b"".join(buf))
    return seq, size
