"""Sealing: a signed statement of a session's length and head, kept in `<vault>/seals/`.

A hash chain cannot show that its last entries were cut off, or that a whole file was rewritten
with every hash recomputed (docs/contract.md, Verifying). A seal can, as long as the signing key is held by
someone who cannot write the journal: the seal names how many entries the session had and the
hash of the last one, signed with Ed25519.

- Seal file: `seals/<session file name>.seal`, one canonical JSON object:
  `{"format": "connector-journal-seal/1", "session", "entries", "head", "key_id", "sealed_at",
  "signature"}`; the signature covers the canonical form of the object without `signature`.
- Keys: `broker keygen` writes a private key (PEM, mode 0600) and a public key file holding one
  line `connector-journal-seal-key/1 <key_id> <base64 raw public key>`. `key_id` is the first 16
  hex digits of the SHA-256 of the raw public key.
- Checking needs the public key from outside the vault (a key found next to the seal proves
  nothing: whoever rewrote the file could have re-signed it).
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from journal.canonical import canonical_bytes
from journal.confine import NotConfined, open_file_inside
from journal.entry import format_ts
from journal.vault import Vault, VaultError, session_filename, write_atomically

if TYPE_CHECKING:  # cryptography is imported where a key is used: `broker verify` without a key never loads it
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

SEAL_FORMAT = "connector-journal-seal/1"
KEY_FORMAT = "connector-journal-seal-key/1"


class SealError(VaultError):
    """A key or seal that cannot be read or used; the message says what to do."""


@dataclass(frozen=True)
class Seal:
    session: str
    entries: int
    head: str
    key_id: str
    sealed_at: str
    signature: str

    def signed_part(self) -> dict:
        return {"format": SEAL_FORMAT, "session": self.session, "entries": self.entries, "head": self.head,
                "key_id": self.key_id, "sealed_at": self.sealed_at}


def key_id(public: Ed25519PublicKey) -> str:
    from cryptography.hazmat.primitives import serialization

    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def generate_keypair(private_path: str | os.PathLike, public_path: str | os.PathLike) -> str:
    """Write a new Ed25519 key pair; return its key id. Refuses to overwrite an existing key."""
    private_path, public_path = Path(private_path), Path(public_path)
    for p in (private_path, public_path):
        if p.exists():
            raise SealError(f"{p} exists; refusing to overwrite a key")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    public = key.public_key()
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    public_path.write_text(f"{KEY_FORMAT} {key_id(public)} {base64.b64encode(raw).decode()}\n")
    return key_id(public)


def load_private_key(path: str | os.PathLike) -> Ed25519PrivateKey:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SealError(f"cannot read private seal key {path}: {exc.strerror or exc}") from None
    return parse_private_key(data, path)


def parse_private_key(data: bytes, source: str | os.PathLike) -> Ed25519PrivateKey:
    """A legacy PEM private key from the file's bytes; `source` names it in errors."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    if data.startswith(KEY_FORMAT.encode()):
        raise SealError(f"{source} is a public seal key; sealing takes the private key (the .pem file "
                        "`broker keygen` wrote beside it)")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise SealError(f"cannot read private seal key {source}: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SealError(f"{source} is not an Ed25519 private key")
    return key


def load_public_key(path: str | os.PathLike) -> Ed25519PublicKey:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        raise SealError(f"cannot read public seal key {path}: {exc.strerror or exc}") from None
    return parse_public_key(text, path)


def parse_public_key(text: str, source: str | os.PathLike) -> Ed25519PublicKey:
    """A legacy `connector-journal-seal-key/1` public key from its text; `source` names it in errors."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    words = text.split()
    if "PRIVATE" in words and any(w.startswith("-----BEGIN") for w in words):
        raise SealError(f"{source} is a private key; checking a seal takes the public key (the .pub file "
                        "`broker keygen` wrote beside it); keep the private key away from the vault")
    try:
        if len(words) != 3:
            raise ValueError(f"not a seal public key: expected one line '{KEY_FORMAT} <key id> <base64 key>'")
        fmt, kid, b64 = words
        if fmt != KEY_FORMAT:
            raise ValueError(f"format {fmt!r}, expected {KEY_FORMAT!r}")
        public = Ed25519PublicKey.from_public_bytes(base64.b64decode(b64, validate=True))
    except ValueError as exc:
        raise SealError(f"cannot read public seal key {source}: {exc}") from None
    if key_id(public) != kid:
        raise SealError(f"{source}: key id {kid} does not match the key")
    return public


def seal_path(vault: Vault, session: str) -> Path:
    return vault.seals_dir / (session_filename(session) + ".seal")


def write_seal(vault: Vault, session: str, entries: int, head: str, key: Ed25519PrivateKey) -> Seal:
    """Sign (entries, head) for the session and replace its seal atomically."""
    unsigned = Seal(session, entries, head, key_id(key.public_key()), format_ts(), "")
    signature = base64.b64encode(key.sign(canonical_bytes(unsigned.signed_part()))).decode()
    seal = Seal(session, entries, head, unsigned.key_id, unsigned.sealed_at, signature)
    vault.seals_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(seal_path(vault, session), canonical_bytes({**seal.signed_part(), "signature": signature}) + b"\n")
    return seal


def read_seal(vault: Vault, session: str) -> Seal | None:
    path = seal_path(vault, session)
    try:
        with open_file_inside(vault.root, ("seals", path.name)) as f:
            d = orjson.loads(f.read())
    except FileNotFoundError:
        return None
    except (NotConfined, OSError, orjson.JSONDecodeError) as exc:
        raise SealError(f"seal {path} is unreadable: {exc}") from None
    try:
        if d.get("format") != SEAL_FORMAT:
            raise ValueError(f"format {d.get('format')!r}")
        return Seal(d["session"], int(d["entries"]), d["head"], d["key_id"], d["sealed_at"], d["signature"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SealError(f"seal {path} is unreadable: {exc}") from None


def check_signature(seal: Seal, public: Ed25519PublicKey) -> str | None:
    """None when the seal was signed by `public`; else what is wrong."""
    from cryptography.exceptions import InvalidSignature

    if seal.key_id != key_id(public):
        return f"seal was signed by key {seal.key_id}, not by the given key {key_id(public)}"
    try:
        public.verify(base64.b64decode(seal.signature), canonical_bytes(seal.signed_part()))
    except (InvalidSignature, ValueError):
        return "seal signature does not verify"
    return None
