"""The per-installation key of principal fingerprints (`fp:`), kept outside the vault.

Why: a fingerprint that is a plain hash of the credential can be inverted by guessing (a Basic
`alice:Summer2024!` falls to a short word list in milliseconds). Keyed with a secret that never
enters the vault, the `fp:` values in a journal tell calls of one account apart and stay equal across
sessions of one installation, but whoever holds only the vault cannot test a guess against them.

The key file is `$BROKER_FINGERPRINT_KEY_FILE` if set, else `$XDG_CONFIG_HOME/connector-broker/
fingerprint.key` (`~/.config/...` without XDG_CONFIG_HOME). It is created on first use: 32 random
bytes, hex, mode 0600. Losing it only means later fingerprints differ from earlier ones.
"""

from __future__ import annotations

import functools
import os
import secrets
import stat
from pathlib import Path

from journal.errors import BrokerError

__all__ = ["KEY_FILE_ENV", "FingerprintKeyError", "fingerprint_key", "fingerprint_key_path"]

KEY_FILE_ENV = "BROKER_FINGERPRINT_KEY_FILE"


class FingerprintKeyError(BrokerError, RuntimeError):
    """The key file cannot be read or created."""


def fingerprint_key_path() -> Path:
    """Where the key is kept: the environment's choice, else the user's config directory."""
    chosen = os.environ.get(KEY_FILE_ENV)
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "connector-broker" / "fingerprint.key"


def fingerprint_key() -> bytes:
    """The installation's key (created 0600 on first use); read once per process and path."""
    env = os.environ
    return _key_at(env.get(KEY_FILE_ENV), env.get("XDG_CONFIG_HOME"), env.get("HOME"))


@functools.lru_cache(maxsize=16)
def _key_at(_chosen: str | None, _xdg: str | None, _home: str | None) -> bytes:
    """The key for these values of the variables `fingerprint_key_path` reads: the path is worked out
    once per set of values, not on every fingerprint (it cost about 9 us a call, every entry has one)."""
    return _load(str(fingerprint_key_path()))


@functools.cache
def _load(path: str) -> bytes:
    p = Path(path)
    try:
        return _read(p)
    except FileNotFoundError:
        pass
    try:
        p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Written whole under a temporary name, then linked into place: a second process starting at the
        # same moment either wins the link or reads the winner's complete file.
        tmp = p.with_name(f".{p.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, secrets.token_hex(32).encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, p)
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
        return _read(p)
    except OSError as exc:
        raise FingerprintKeyError(
            f"cannot create the fingerprint key {p}: {exc.strerror or exc}; make its folder writable, or set "
            f"{KEY_FILE_ENV} to a file you can write"
        ) from exc


def _read(p: Path) -> bytes:
    mode = p.stat().st_mode
    if not stat.S_ISREG(mode):  # a FIFO would block the recorder; a device is no key
        raise FingerprintKeyError(f"the fingerprint key {p} is not a regular file: remove it and a new one is made")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise FingerprintKeyError(f"the fingerprint key {p} is readable by others: run `chmod 600 {p}`")
    try:
        key = bytes.fromhex(p.read_bytes().decode("ascii").strip())
    except ValueError:  # not ASCII (UnicodeDecodeError is one) or not hex
        key = b""
    if len(key) < 16:
        raise FingerprintKeyError(
            f"the fingerprint key {p} is not 32 hex-encoded random bytes: remove it and a new one is made "
            "(fingerprints made with the old key will then differ)"
        )
    return key
