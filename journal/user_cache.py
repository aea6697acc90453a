"""Where readers keep what they derive (seq indexes, replay's views and scratch): a folder the user owns,
never the vault or the store, which a reader only reads (an auditor mounts it read-only)."""

from __future__ import annotations

import os
from pathlib import Path

from journal.vault import Vault


def cache_home() -> Path:
    """The user's cache folder for the broker: $XDG_CACHE_HOME/broker, else ~/.cache/broker."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "broker"


def views_home(vault: Vault) -> Path:
    """The default folder of a vault's (or database store's) replay views, one per vault or store, named by
    a hash of its path or URL (the URL's password is not part of the name: the shown URL is)."""
    import hashlib  # here: `show --seq` reads this module for `cache_home` and hashes nothing

    where = str(getattr(vault, "label", vault.root))
    return cache_home() / "views" / hashlib.sha256(where.encode("utf-8", "surrogateescape")).hexdigest()[:16]
