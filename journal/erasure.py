"""Erasure in the file vault: a blob's bytes deleted on purpose, a tombstone left in their place.

docs/contract.md, "Erasure": a tombstone names the blob's SHA-256, when, by whom and why. In a vault it is
`blobs/erased/<64 hex>.json` (canonical JSON, written atomically). The tombstone is written and
made durable before the bytes are deleted, so a crash in between leaves a blob with a tombstone
(erase again), never a blob gone without one. Entries hold the blob's hash, not its bytes, so the
chain verifies unchanged; the verifier reports the blob as erased instead of missing.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from journal.canonical import canonical_bytes
from journal.confine import NotConfined, is_blob_name, open_file_inside
from journal.vault import VaultError, fsync_dir, write_atomically


def tombstone_path(vault_root: str | os.PathLike, digest: str) -> Path:
    if not is_blob_name(digest):
        raise VaultError(f"{digest!r} is not a SHA-256 (64 lowercase hex digits)")
    return Path(vault_root) / "blobs" / "erased" / f"{digest}.json"


def read_tombstone(vault_root: str | os.PathLike, digest: str) -> dict | None:
    """The tombstone of an erased blob, or None when it was never erased."""
    path = tombstone_path(vault_root, digest)
    try:
        with open_file_inside(vault_root, ("blobs", "erased", path.name)) as f:
            data = orjson.loads(f.read())
    except FileNotFoundError:
        return None
    except NotConfined as exc:
        raise VaultError(f"tombstone {path} is unreadable ({exc})") from None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise VaultError(f"tombstone {path} is unreadable ({exc})") from None
    if not isinstance(data, dict):
        return None
    problem = tombstone_problem(data, digest)
    if problem is not None:
        raise VaultError(f"tombstone {path} is not read: {problem}")
    return data


def tombstone_problem(data: dict, digest: str) -> str | None:
    """What makes `data` no tombstone of blob `digest` (None when it is one): it must name that blob (a signed
    tombstone of another blob copied under this one's name would otherwise verify), with the fields a
    tombstone has (docs/contract.md, "Erasure")."""
    if data.get("sha256") != digest:
        return f"it names blob {str(data.get('sha256'))[:80]!r}, not {digest}"
    for key in ("erased_at", "erased_by", "reason"):
        if not isinstance(data.get(key), str):
            return f"its {key} is not a string"
    size = data.get("size")
    if size is not None and (type(size) is not int or size < 0):
        return "its size is not a byte count"
    note = data.get("note")
    if note is not None and not isinstance(note, str):
        return "its note is not a string"
    return None


def write_tombstone(vault_root: str | os.PathLike, tombstone: dict) -> Path:
    path = tombstone_path(vault_root, tombstone["sha256"])
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, canonical_bytes(tombstone) + b"\n")
    return path


def erase_file_blob(vault_root: str | os.PathLike, tombstone: dict) -> None:
    """Write the tombstone, then delete the bytes (and make the deletion durable)."""
    write_tombstone(vault_root, tombstone)
    digest = tombstone["sha256"]
    blob = Path(vault_root) / "blobs" / "sha256" / digest[:2] / digest
    try:
        blob.unlink()
    except FileNotFoundError:
        return
    fsync_dir(blob.parent)
