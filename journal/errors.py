"""The root of every error a user can cause or fix, so that one `except` tells them from bugs.

The `broker` command (broker/cli/exit_codes.py) prints a `BrokerError` as one line,
`broker: error: <message>`, and exits 2; anything else is a bug and shows its traceback (exit 1).
So every message says what is wrong and what to do about it.

The areas keep their own classes where they were (each derives from `BrokerError`):
- here: `VaultError` (a vault, a session, a seal, a checkpoint, a key: reading the record;
  journal/vault.py re-exports it);
  `SessionIdError`, journal/seal.py `SealError`, journal/checkpoint/note.py `NoteError`,
  journal/checkpoint/sealer.py `SealRefused`, journal/checkpoint/proof_bundle.py `BundleError`,
  journal/export/recorded_body.py `BlobUnavailable` derive from it;
- here: `JournalError` (recording refused or stopped); journal/store/interface.py
  `StoreError`, `BlobErased` and the recording service link's errors derive from it;
- journal/entry.py `ContractError`, journal/canonical.py `CanonicalError`, journal/checkpoint/merkle.py
  `ProofError`, journal/replay `BrokenChainError` (each also a ValueError, as callers catch);
- journal/blobstore.py `BlobError` and broker/exec, broker/mcp's `ExecUnavailable`, `UpstreamError`
  (each also an OSError);
- here: `InputError` for a value or file the user gave that cannot be used, `PeerError` for another
  program (an OTLP endpoint, a witness) that refused or could not be reached.

Library code raises these, never a bare ValueError, for anything a user can fix.
"""

from __future__ import annotations


class BrokerError(Exception):
    """Something the user can fix; the message says what and how (the CLI shows it as one line, exit 2)."""


class InputError(BrokerError, ValueError):
    """An option value, or a file the user named, that cannot be used (a ValueError too, for old callers)."""


class PeerError(BrokerError, ValueError):
    """Another program the user pointed us at refused or could not be reached (a ValueError, as before)."""


class JournalError(BrokerError):
    """The journal could not take an entry; the message says why (journal/writer.py re-exports it)."""


class VaultError(BrokerError):
    """A vault that is missing, not a vault, or not usable; the message says what to do."""
