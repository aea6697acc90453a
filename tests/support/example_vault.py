"""The example vault as tests read it: a private copy of the example session only.

`./vault` is also where `./scripts/run-broker` records by default, so a user's own calls land beside
the example session; tests copy the example out of it (manifest, session file, the blobs it references)
and never read `./vault` itself.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "vault"
SESSION = "session-2026-09-22"
_REF = re.compile(rb'"ref":"(blobs/sha256/[0-9a-f]{2}/[0-9a-f]{64})"')


def copy_example(dest: Path, source: Path = SOURCE) -> Path:
    """Copy the example session out of `source` into the new vault `dest`; return `dest`."""
    (dest / "journal").mkdir(parents=True)
    shutil.copy2(source / "VAULT.json", dest / "VAULT.json")
    name = f"{SESSION}.jsonl"
    shutil.copy2(source / "journal" / name, dest / "journal" / name)
    for ref in set(_REF.findall((dest / "journal" / name).read_bytes())):
        target = dest / ref.decode()
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / ref.decode(), target)
    return dest
