"""The vault layout of docs/contract.md and the session id -> file name rule.

Session ids come from outside (proxy user names, headers, agents) and are untrusted. The rule,
fixed and reversible:

- the id must be non-empty valid Unicode without control characters (U+0000-U+001F, U+007F);
- each UTF-8 byte outside `A-Z a-z 0-9 - _ .` is written as `%XX` (upper-case hex), and so is a
  leading `.` (so `.` and `..` and hidden files cannot happen);
- the encoded name may be at most 200 bytes (file names are limited to 255, and the
  `.jsonl` suffix and quarantine suffixes need room);
- the file is `journal/<encoded>.jsonl`.

No encoded name contains `/` or NUL, and decoding the file name gives the id back exactly. An id
that cannot be mapped raises SessionIdError; it is never rewritten into another id.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import orjson

from journal.confine import open_inside
from journal.errors import VaultError

FORMAT = "connector-journal/1"
MAX_ENCODED_SESSION = 200
SESSION_SUFFIX = ".jsonl"
_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_ENCODED_RE = re.compile(r"(?:[A-Za-z0-9_\-]|%[0-9A-F]{2})(?:[A-Za-z0-9_.\-]|%[0-9A-F]{2})*\Z")


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename or create in `path` durable (a rename is durable only once its directory is synced)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | bytearray) -> None:
    """Write all of `data` at `fd` (os.write may write less than it was given: a signal, a full pipe)."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    finally:
        view.release()  # a bytearray's caller may resize it next


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a reader sees the old or the new bytes, never a mix, even
    after a crash: temp file beside it, fsync, rename, directory fsync. (tempfile, and shutil and random
    with it, is imported here: the readers, which import this module and never write, do not load it.)"""
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # unique: writers may race
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


class SessionIdError(VaultError):
    """A session id that cannot be mapped to a file name."""


def session_filename(session: str) -> str:
    """The file name (without directory) for a session id, or SessionIdError."""
    if not isinstance(session, str) or not session:
        raise SessionIdError("session id is empty")
    if _CONTROL_RE.search(session):
        raise SessionIdError(f"session id {session!r} holds control characters")
    try:
        raw = session.encode("utf-8")
    except UnicodeEncodeError:
        raise SessionIdError(f"session id {session!r} is not valid Unicode") from None
    out = []
    for i, b in enumerate(raw):
        if b in _SAFE and not (i == 0 and b == 0x2E):
            out.append(chr(b))
        else:
            out.append(f"%{b:02X}")
    encoded = "".join(out)
    if len(encoded) > MAX_ENCODED_SESSION:
        raise SessionIdError(
            f"session id is too long ({len(encoded)} bytes encoded, at most {MAX_ENCODED_SESSION})"
        )
    return encoded + SESSION_SUFFIX


def session_from_filename(name: str) -> str:
    """The session id a journal file name stands for (inverse of session_filename)."""
    if not name.endswith(SESSION_SUFFIX):
        raise SessionIdError(f"{name!r} is not a session file name")
    encoded = name[: -len(SESSION_SUFFIX)]
    if not _ENCODED_RE.match(encoded):
        raise SessionIdError(f"{name!r} does not follow the session file name rule")
    raw = bytearray()
    i = 0
    while i < len(encoded):
        if encoded[i] == "%":
            raw.append(int(encoded[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.append(ord(encoded[i]))
            i += 1
    try:
        session = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SessionIdError(f"{name!r} does not decode to UTF-8") from None
    if session_filename(session) != name:
        raise SessionIdError(f"{name!r} is not the canonical encoding of its session id")
    return session


class Vault:
    """Paths inside one vault directory. Creating the layout is explicit (`create`)."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root).absolute()
        self.journal_dir = self.root / "journal"
        self.blobs_dir = self.root / "blobs"
        self.seals_dir = self.root / "seals"
        self.views_dir = self.root / "views"

    @classmethod
    def create(cls, root: str | os.PathLike) -> Vault:
        """Open a vault, creating its directories and manifest if they are not there yet."""
        vault = cls(root)
        if vault.root.exists() and not vault.root.is_dir():
            raise VaultError(f"vault path {vault.root} exists and is not a directory")
        try:
            vault.journal_dir.mkdir(parents=True, exist_ok=True)
            (vault.blobs_dir / "sha256").mkdir(parents=True, exist_ok=True)
            manifest = vault.root / "VAULT.json"
            if not manifest.exists():
                write_atomically(manifest, orjson.dumps({"format": FORMAT}, option=orjson.OPT_SORT_KEYS) + b"\n")
        except OSError as exc:
            raise VaultError(f"cannot create vault at {vault.root}: {exc.strerror}") from None
        vault.check_format()
        return vault

    @classmethod
    def open_existing(cls, root: str | os.PathLike) -> Vault:
        """Open a vault for reading; it must exist."""
        vault = cls(root)
        if not vault.root.is_dir():
            raise VaultError(f"no vault at {vault.root} (use --vault DIR or BROKER_VAULT)")
        if not vault.journal_dir.is_dir():
            raise VaultError(f"{vault.root} is not a vault: it has no journal/ directory")
        vault.check_format()
        return vault

    def check_format(self) -> None:
        manifest = self.root / "VAULT.json"
        if not manifest.exists():
            return
        try:
            fmt = orjson.loads(manifest.read_bytes()).get("format")
        except (orjson.JSONDecodeError, AttributeError, OSError):
            raise VaultError(f"{manifest} is not a valid vault manifest") from None
        if fmt != FORMAT:
            raise VaultError(f"{self.root} holds format {fmt!r}; this tool reads {FORMAT!r}")

    def origin(self, *, create: bool = False, prefix: str = "connector-broker.vault") -> str | None:
        """The vault's origin (`"origin"` in VAULT.json), the prefix of every checkpoint origin
        (docs/checkpoints.md). Generated once, `<prefix>/vault-<16 hex>`, when `create` and there is none."""
        manifest = self.root / "VAULT.json"
        try:
            data = orjson.loads(manifest.read_bytes()) if manifest.exists() else {"format": FORMAT}
        except (orjson.JSONDecodeError, OSError):
            raise VaultError(f"{manifest} is not a valid vault manifest") from None
        origin = data.get("origin")
        if isinstance(origin, str) or not create:
            return origin if isinstance(origin, str) else None
        data["origin"] = f"{prefix}/vault-{os.urandom(8).hex()}"
        write_atomically(manifest, orjson.dumps(data, option=orjson.OPT_SORT_KEYS) + b"\n")
        return data["origin"]

    def session_path(self, session: str) -> Path:
        return self.journal_dir / session_filename(session)

    def sessions(self) -> list[str]:
        """Session ids with a journal file, sorted by file name."""
        out = []
        for path in sorted(self.journal_dir.glob("*" + SESSION_SUFFIX)):
            try:
                out.append(session_from_filename(path.name))
            except SessionIdError:
                continue
        return out

    def require_session(self, session: str) -> Path:
        """The session's file, checked to be a regular file inside the vault reached through no symlink
        (journal/confine.py: NotConfined otherwise; VaultError when there is no such session)."""
        os.close(self.open_session(session))
        return self.session_path(session)

    def open_session(self, session: str) -> int:
        """A read-only descriptor of the session's file, opened as journal/confine.py's `open_inside` does."""

        name = session_filename(session)
        try:
            return open_inside(self.root, ("journal", name))
        except FileNotFoundError:
            raise VaultError(f"no session {session!r} in {self.root}") from None

    def blob_path(self, ref: str) -> Path:
        """Absolute path of a blob `ref` (relative to the vault root), refusing anything else."""
        if not re.fullmatch(r"blobs/sha256/[0-9a-f]{2}/[0-9a-f]{64}", ref) or ref[13:15] != ref[16:18]:
            raise VaultError(f"{ref!r} is not a blob reference")
        return self.root / ref
