"""`broker exec` runs COMMAND as nobody by default: which Python such a COMMAND can run here."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def usable_by_others(path: str) -> bool:
    """Whether a user other than root can run `path` (every directory on the way searchable by others):
    an interpreter under /root (pyenv) is out of nobody's reach."""
    real = Path(path).resolve()
    return all(p.stat().st_mode & 0o001 for p in [*real.parents, real])


def stdlib_python() -> str:
    """A Python nobody can run, for scripts that need only the standard library: this one when it can,
    else the system's."""
    if usable_by_others(sys.executable):
        return sys.executable
    return shutil.which("python3", path="/usr/bin:/bin") or sys.executable
