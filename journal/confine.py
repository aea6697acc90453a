"""Resolving a name strictly inside the vault, for readers that face a vault written by someone else.

A vault is evidence handed to people who must not trust whoever wrote it, so every name a reader takes
from it (a blob's `sha256` in an entry, a session file under `journal/`) is hostile input. Here:

- a blob name is 64 lowercase hex digits, nothing else (no `/`, no `..`);
- every directory from the vault root down is opened with O_NOFOLLOW relative to the one above it
  (`dir_fd`), and so is the file itself, so no symlink anywhere below the root is followed;
- what is opened must be a regular file (not a FIFO, device or directory), checked on the open
  descriptor (`fstat`), so what is checked is what is read.

The vault root itself is what the user named and may be a symlink. A name that breaks a rule raises
`NotConfined` (a VaultError); a name that is simply absent raises FileNotFoundError, so callers can tell
"missing" from "refused".
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterator, Sequence
from typing import BinaryIO

from journal.errors import VaultError

_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a FIFO must not hang the open
CHUNK = 1 << 20


class NotConfined(VaultError):
    """A name the vault hands a reader that does not resolve to a regular file strictly inside it."""


def is_blob_name(digest: object) -> bool:
    """True for a blob name a reader may resolve: a SHA-256 as 64 lowercase hex digits."""
    return isinstance(digest, str) and _HEX64.match(digest) is not None


def blob_parts(digest: str) -> tuple[str, ...]:
    """The path of blob `digest` below the vault root, as components; NotConfined for a bad name."""
    if not is_blob_name(digest):
        raise NotConfined(f"{digest!r} is not a blob name (64 lowercase hex digits); not resolved")
    return ("blobs", "sha256", digest[:2], digest)


def open_inside(root: str | os.PathLike | int, parts: Sequence[str]) -> int:
    """A read-only descriptor of the regular file `root/parts[0]/.../parts[-1]`, no link followed below `root`
    (`root` may be a directory descriptor from `open_dir_inside`: it is left open).

    FileNotFoundError when a component is absent; NotConfined when a component is a symlink, `.`/`..`
    or holds a `/`, or the file is not a regular file."""
    shown = _names(parts)
    fd = open_dir_inside(root, parts[:-1], shown=shown)
    try:
        out = _open_at(parts[-1], _FILE_FLAGS, fd, shown)
    finally:
        os.close(fd)
    return _regular_file(out, f"{shown} in the vault")


def open_dir_inside(root: str | os.PathLike | int, parts: Sequence[str], *, shown: str | None = None) -> int:
    """A descriptor of the directory `root/parts[0]/.../parts[-1]` (`root` itself for no parts), no link
    followed below `root`: for a caller that opens or creates more than one file there and must find them all
    in the one folder it checked, whatever is renamed meanwhile (`broker reindex`: a session file and its
    sidecar). Errors as `open_inside`'s (`shown`: the path its messages name)."""
    shown = _names(parts) if shown is None else shown
    fd = os.dup(root) if isinstance(root, int) else os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            nxt = _open_at(part, _DIR_FLAGS, fd, shown)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _names(parts: Sequence[str]) -> str:
    """`parts` joined for messages, once each is checked to be a plain name (NotConfined otherwise)."""
    for part in parts:
        if not part or part in (".", "..") or "/" in part or "\0" in part:
            raise NotConfined(f"{'/'.join(parts)!r} is not a name inside the vault; not resolved")
    return "/".join(parts)


def _open_at(name: str, flags: int, dir_fd: int, shown: str) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):  # O_NOFOLLOW met a symlink (EMLINK on some BSDs)
            raise NotConfined(f"{shown} in the vault goes through a symlink ({name}); links are not followed") from None
        if exc.errno == errno.ENOTDIR:
            if flags & os.O_DIRECTORY:  # a symlink or file where a directory belongs
                raise NotConfined(f"{shown} in the vault: {name} is not a directory; not followed") from None
            raise FileNotFoundError(errno.ENOENT, f"{shown} is not in the vault") from None
        raise


def open_file_inside(root: str | os.PathLike, parts: Sequence[str]) -> BinaryIO:
    """`open_inside` as a binary file object."""
    return os.fdopen(open_inside(root, parts), "rb")


def read_inside(root: str | os.PathLike, parts: Sequence[str]) -> bytes | None:
    """The bytes of a small file read as `open_inside` does; None when it is absent or refused (a symlink or
    anything but a regular file counts as not there: nothing outside the vault is read)."""
    try:
        with open_file_inside(root, parts) as f:
            return f.read()
    except (FileNotFoundError, NotConfined):
        return None


def open_blob(root: str | os.PathLike, digest: str) -> BinaryIO:
    """Blob `digest` of the vault at `root`, opened as `open_inside` does (FileNotFoundError when absent)."""
    return open_file_inside(root, blob_parts(digest))


def read_chunks(f: BinaryIO) -> Iterator[bytes]:
    """The rest of `f` in CHUNK-sized pieces; closes `f` when done."""
    with f:
        while chunk := f.read(CHUNK):
            yield chunk


def open_regular(path: str | os.PathLike) -> int:
    """A read-only descriptor of `path`, refusing a final symlink or anything not a regular file (for readers
    given a path; the directories above it are the caller's to have checked, see `open_inside`)."""
    try:
        fd = os.open(path, _FILE_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise NotConfined(f"{path} is a symlink; links are not followed") from None
        raise
    return _regular_file(fd, str(path))


def _regular_file(fd: int, shown: str) -> int:
    """`fd` (opened non-blocking, so a FIFO could not hang the open) back in blocking mode when it is a
    regular file; closed and NotConfined otherwise."""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotConfined(f"{shown} is not a regular file; not read")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd
