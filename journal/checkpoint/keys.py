"""One parser for every key option (`--seal-key`, `--witness-key`, `--log-key`, `--key`), whatever the command.

A key option takes a file holding the key text or, for verifier keys, the text itself
(docs/checkpoints.md). Each is read by note.read_key_text, so a file that is not a key (not UTF-8,
garbage, the other half of the pair) is one clear error for every option. Then:

- a verifier key (`verify`, `replay`, `revert-plan`): the C2SP note key `broker keygen` writes
  (NAME.vkey), or a legacy `connector-journal-seal-key/1` public key (checks the old `.seal` files);
- a checkpoint verifier key (`verify-proof --seal-key`, every `--witness-key` and `--log-key`): NAME.vkey only;
- a signer key (`seal --key`): NAME.key, or a legacy PEM private key (writes the old `.seal` files);
- a checkpoint signer key (`run`/`mcp --seal-key`, `witness --key`): NAME.key only.
"""

from __future__ import annotations

import os

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from journal.checkpoint.note import (
    Signer,
    Verifier,
    load_signer,
    load_verifier,
    read_key_text,
    signer_from_text,
    verifier_from_text,
)
from journal.seal import KEY_FORMAT, parse_private_key, parse_public_key

__all__ = ["any_signer", "any_verifier", "load_signer", "load_verifier"]


def any_verifier(value: str) -> Verifier | Ed25519PublicKey:
    """A verifier key, or a legacy seal public key (an Ed25519PublicKey), from its text or its file."""
    text = read_key_text(value, "verifier key", may_be_text=True)
    if text.startswith(KEY_FORMAT):
        return parse_public_key(text, value)
    return verifier_from_text(text, value)


def any_signer(path: str | os.PathLike) -> Signer | Ed25519PrivateKey:
    """A signer key, or a legacy PEM private key (an Ed25519PrivateKey), from its file."""
    text = read_key_text(path, "signer key")
    if text.startswith("-----BEGIN"):
        return parse_private_key(text.encode(), path)
    return signer_from_text(text, path)
