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
