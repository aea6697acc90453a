"""C2SP signed notes (c2sp.org/signed-note) with Ed25519 keys, and Ed25519 cosignatures (cosignature/v1).

A note is UTF-8 text ending in "\\n", a blank line, then signature lines
`— <key name> <base64(4-byte key ID || signature)>\\n` (U+2014 EM DASH, a space). The text is split from
the signatures at the *last* blank line. The key ID is SHA-256(name || "\\n" || type || public key)[:4],
type 0x01 for Ed25519 note signatures and 0x04 for Ed25519 cosignatures (c2sp.org/tlog-cosignature).

Key texts, as golang.org/x/mod/sumdb/note writes them:
- signer key:   `PRIVATE+KEY+<name>+<8 hex key ID>+<base64(0x01 || 32-byte Ed25519 seed)>`
- verifier key: `<name>+<8 hex key ID>+<base64(type || 32-byte Ed25519 public key)>`

A cosigner (a witness) holds a signer key of the same form; its verifier key has type 0x04 and so
another key ID. A cosignature's bytes are key ID || u64 big-endian Unix time || Ed25519 signature over
`cosignature/v1\\ntime <t>\\n` followed by the checkpoint text.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from journal.vault import VaultError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

# cryptography is imported by the code that makes, reads or checks a key or a signature, not here: reading
# what a note claims (`parse_note`: the sessions list, the inspector) takes none of it, and loading it is a
# large share of such a reader's start-up (docs/benchmarks.md, branch `startup26`).

ALG_ED25519 = 0x01
ALG_COSIGNATURE_V1 = 0x04
DASH = "\u2014 "
MAX_SIGNATURES = 100  # as Go's note.Open; the spec asks verifiers to accept at least 16
_PRIVATE_PREFIX = "PRIVATE+KEY+"
_HEX8 = re.compile(r"[0-9a-f]{8}\Z")


class NoteError(VaultError):
    """A note, key or signature that cannot be used; the message says which and why."""


def _b64decode_exact(text: str) -> bytes:
    """Standard base64 that must re-encode to the same text (no stray bits, padding or whitespace)."""
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        raise NoteError(f"{text[:20]!r}... is not base64") from None
    if base64.b64encode(raw).decode() != text:
        raise NoteError(f"{text[:20]!r}... is not canonical base64")
    return raw


def check_key_name(name: str) -> None:
    if not name or "+" in name or any(c.isspace() for c in name) or not name.isprintable():
        raise NoteError(f"key name {name!r} must be non-empty, without spaces or '+'")


def key_id(name: str, alg: int, public: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + bytes([alg]) + public).digest()[:4]


def _raw_public(public: Ed25519PublicKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _key_parts(text: str, what: str) -> tuple[str, str, bytes]:
    """`<name>+<8 hex id>+<base64 of type byte and 32-byte key>` (signer and verifier keys alike):
    the name checked, the id as written, the 33 decoded bytes."""
    parts = text.split("+", 2)
    if len(parts) != 3:
        raise NoteError(f"malformed {what} (expected <name>+<8 hex id>+<base64 key>)")
    name, kid, b64 = parts
    check_key_name(name)
    if not _HEX8.match(kid):
        raise NoteError(f"malformed {what} id")
    raw = _b64decode_exact(b64)
    if len(raw) != 33:
        raise NoteError(f"{what} is not an Ed25519 key (33 bytes with its type)")
    return name, kid, raw


@dataclass(frozen=True)
class Signer:
    """An Ed25519 signer key: signs notes (type 0x01) and, as a witness, cosignatures (type 0x04)."""

    name: str
    private: Ed25519PrivateKey = field(repr=False)

    @property
    def public(self) -> bytes:
        return _raw_public(self.private.public_key())

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, ALG_ED25519, self.public)

    def sign(self, text: bytes) -> bytes:
        return self.private.sign(text)

    def verifier(self) -> Verifier:
        return Verifier(self.name, ALG_ED25519, self.public)

    def cosigner_verifier(self) -> Verifier:
        return Verifier(self.name, ALG_COSIGNATURE_V1, self.public)

    def key_text(self) -> str:
        from cryptography.hazmat.primitives import serialization

        seed = self.private.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
        b64 = base64.b64encode(bytes([ALG_ED25519]) + seed).decode()
        return f"{_PRIVATE_PREFIX}{self.name}+{self.key_id.hex()}+{b64}"

    @classmethod
    def generate(cls, name: str) -> Signer:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        check_key_name(name)
        return cls(name, Ed25519PrivateKey.generate())

    @classmethod
    def from_text(cls, text: str) -> Signer:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        text = text.strip("\n")
        if not text.startswith(_PRIVATE_PREFIX):
            raise NoteError("not a signer key (expected PRIVATE+KEY+<name>+<id>+<key>)")
        name, kid, raw = _key_parts(text[len(_PRIVATE_PREFIX):], "signer key")
        if raw[0] != ALG_ED25519:
            raise NoteError("signer key is not an Ed25519 key")
        signer = cls(name, Ed25519PrivateKey.from_private_bytes(raw[1:]))
        if signer.key_id.hex() != kid:
            raise NoteError("signer key id does not match the key")
        return signer


@dataclass(frozen=True)
class Verifier:
    """A verifier key: (name, type, public key); notes match signatures on (name, key ID)."""

    name: str
    alg: int
    public: bytes

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, self.alg, self.public)

    def vkey(self) -> str:
        return f"{self.name}+{self.key_id.hex()}+{base64.b64encode(bytes([self.alg]) + self.public).decode()}"

    @classmethod
    def from_vkey(cls, text: str) -> Verifier:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        name, kid, raw = _key_parts(text.strip("\n"), "verifier key")
        if raw[0] not in (ALG_ED25519, ALG_COSIGNATURE_V1):
            raise NoteError("verifier key is not an Ed25519 note or cosignature key")
        v = cls(name, raw[0], raw[1:])
        if v.key_id.hex() != kid:
            raise NoteError("verifier key id does not match the key")
        try:
            Ed25519PublicKey.from_public_bytes(v.public)
        except ValueError:
            raise NoteError("verifier key holds no Ed25519 public key") from None
        return v

    def verify(self, text: bytes, sig: bytes) -> int | None:
        """Check the signature bytes (after the key ID) over the note text. Returns None for a note
        signature, the cosignature's timestamp for a cosignature; raises NoteError when it fails."""
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        pub = Ed25519PublicKey.from_public_bytes(self.public)
        try:
            if self.alg == ALG_ED25519:
                if len(sig) != 64:
                    raise InvalidSignature
                pub.verify(sig, text)
                return None
            if len(sig) != 72:
                raise InvalidSignature
            (ts,) = struct.unpack(">Q", sig[:8])
            pub.verify(sig[8:], cosignature_message(text, ts))
            return ts
        except InvalidSignature:
            raise NoteError(f"invalid signature for key {self.name}+{self.key_id.hex()}") from None


def cosignature_message(text: bytes, timestamp: int) -> bytes:
    return b"cosignature/v1\ntime %d\n" % timestamp + text


def read_key_text(value: str | os.PathLike, what: str, *, may_be_text: bool = False) -> str:
    """The text of a key option, read one way for every option (journal/checkpoint/keys.py): the file
    `value` names or, with `may_be_text`, `value` itself when it holds a '+' and names no file. A file
    that cannot be read, or is not UTF-8 text (a .p12, a DER key, any other binary), is one NoteError
    saying what to give instead; nothing of the file is echoed."""
    name = os.fspath(value)
    if may_be_text and "+" in name and not Path(name).is_file():
        return name
    try:
        with open(name, "rb") as f:
            data = f.read(_KEY_FILE_LIMIT + 1)  # never all of /dev/zero or a huge file given by mistake
    except OSError as exc:
        raise NoteError(f"cannot read {what} {name}: {exc.strerror or exc}") from None
    if len(data) > _KEY_FILE_LIMIT:
        raise NoteError(f"{name} is not a {what}: over {_KEY_FILE_LIMIT} bytes; give the "
                        f"{_KEY_FILES.get(what, 'key file')} `broker keygen` wrote")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise NoteError(f"{name} is not a {what}: the file is not text (a .p12 or DER file?); give the "
                        f"{_KEY_FILES.get(what, 'key file')} `broker keygen` wrote") from None


_KEY_FILES = {"signer key": "NAME.key", "verifier key": "NAME.vkey"}
_KEY_FILE_LIMIT = 64 << 10
"""Bytes read of a key option's file at most: a key is under 200, a legacy PEM key under 1,000."""


def signer_from_text(text: str, source: str | os.PathLike) -> Signer:
    """A signer key from its text; `source` (the file) names it in errors."""
    if not text.startswith(_PRIVATE_PREFIX) and "+" in text:
        raise NoteError(f"{source} is a verifier key: give the signer key (NAME.key from `broker keygen`) instead")
    try:
        return Signer.from_text(text)
    except NoteError as exc:
        raise NoteError(f"{source}: {exc}; give the signer key (NAME.key from `broker keygen`)") from None


def verifier_from_text(text: str, source: str) -> Verifier:
    """A verifier key from its text; `source` (the option's value) names it in errors."""
    if text.startswith(_PRIVATE_PREFIX):  # never echo any of it
        raise NoteError(f"{source} is a private signer key: give its verifier key (NAME.vkey) instead, "
                        "and keep the signer key away from the vault")
    try:
        return Verifier.from_vkey(text.strip())
    except NoteError as exc:
        raise NoteError(f"verifier key {source}: {exc}; give the NAME.vkey `broker keygen` wrote, or its text") \
            from None


def load_signer(path: str | os.PathLike) -> Signer:
    """A signer key file (`broker keygen` writes one, mode 0600)."""
    return signer_from_text(read_key_text(path, "signer key"), path)


def load_verifier(value: str) -> Verifier:
    """A verifier key given as its text or as a file holding it."""
    return verifier_from_text(read_key_text(value, "verifier key", may_be_text=True), value)


@dataclass(frozen=True)
class Signature:
    name: str
    key_id: bytes
    b64: str  # base64 of key ID || signature, as on the line

    def line(self) -> str:
        return f"{DASH}{self.name} {self.b64}\n"


@dataclass
class Note:
    text: str
    sigs: list[Signature]

    def to_bytes(self) -> bytes:
        return (self.text + "\n" + "".join(s.line() for s in self.sigs)).encode()


@dataclass
class OpenedNote:
    text: str
    verified: list[tuple[Verifier, Signature, int | None]]  # (key, signature, cosignature time)
    unverified: list[Signature]


def parse_note(msg: bytes) -> Note:
    """Split a signed note into text and signatures, checking its syntax (not its signatures)."""
    try:
        s = msg.decode("utf-8")
    except UnicodeDecodeError:
        raise NoteError("malformed note: not UTF-8") from None
    if any((c < " " and c != "\n") or c == "\x7f" for c in s):
        raise NoteError("malformed note: control characters")
    split = s.rfind("\n\n")
    if split < 0 or not s.endswith("\n"):
        raise NoteError("malformed note: no signature block")
    text, block = s[: split + 1], s[split + 2 :]
    sigs: list[Signature] = []
    for line in block.split("\n")[:-1]:
        if not line.startswith(DASH):
            raise NoteError("malformed note: a signature line does not start with '\u2014 '")
        name, sep, b64 = line[len(DASH):].partition(" ")
        if not sep or " " in b64:
            raise NoteError("malformed note: signature line")
        check_key_name(name)
        raw = _b64decode_exact(b64)
        if len(raw) < 5:
            raise NoteError("malformed note: signature too short")
        sigs.append(Signature(name, raw[:4], b64))
    if not sigs:
        raise NoteError("malformed note: no signatures")
    if len(sigs) > MAX_SIGNATURES:
        raise NoteError("malformed note: too many signatures")
    return Note(text, sigs)


def open_note(msg: bytes, verifiers: list[Verifier]) -> OpenedNote:
    """Verify a note: signatures of unknown keys are kept aside; a known key whose signature fails
    rejects the note; at least one known key must verify (c2sp.org/signed-note)."""
    note = parse_note(msg)
    known = {(v.name, v.key_id): v for v in verifiers}
    verified: list[tuple[Verifier, Signature, int | None]] = []
    unverified: list[Signature] = []
    seen: set[str] = set()
    text = note.text.encode()
    for sig in note.sigs:
        if sig.b64 in seen:
            continue
        seen.add(sig.b64)
        v = known.get((sig.name, sig.key_id))
        if v is None:
            unverified.append(sig)
            continue
        ts = v.verify(text, base64.b64decode(sig.b64)[4:])
        verified.append((v, sig, ts))
    if not verified:
        raise NoteError("note has no verifiable signatures")
    return OpenedNote(note.text, verified, unverified)


def sign_note(text: str, signer: Signer) -> bytes:
    """A note of `text` (non-empty, ending in a newline) signed by `signer`."""
    if not text.endswith("\n") or any((c < " " and c != "\n") for c in text):
        raise NoteError("malformed note text")
    sig = base64.b64encode(signer.key_id + signer.sign(text.encode())).decode()
    return Note(text, [Signature(signer.name, signer.key_id, sig)]).to_bytes()


def cosign(text: str, signer: Signer, timestamp: int) -> Signature:
    """The cosignature/v1 line of a witness holding `signer` over a checkpoint's text."""
    if not 0 < timestamp < 1 << 63:
        raise NoteError("cosignature timestamp out of range")
    kid = key_id(signer.name, ALG_COSIGNATURE_V1, signer.public)
    sig = signer.sign(cosignature_message(text.encode(), timestamp))
    return Signature(signer.name, kid, base64.b64encode(kid + struct.pack(">Q", timestamp) + sig).decode())
