"""Replay: fold a session's entries into views of the resources touched, and a revert plan.

    from journal.replay import replay_session, write_outputs, plan_dict
    rp = replay_session(vault, "session-2026-09-22")   # one verifying pass over the file
    folder, files = write_outputs(vault, rp)            # views/<session>/ (deterministic)
    plan = plan_dict(rp)                                # {"session", "chain", "steps": [...]}

- `fold.py`: the engine (entries from the verifier; untrusted after a broken seq);
- `store.py`: the spill store the fold writes to and the views stream from (memory stays bounded
  whatever the session's length; `rp.close()` removes it, as does collecting `rp`);
- `connectors/`: one module per connector (resource keys, response -> view, write -> inverse);
- `views.py` / `markdown.py` / `labels.py`: the files under views/<session>/; `plan.py`: the revert plan.

docs/replay.md describes the outputs and how to add a connector. This package imports nothing
from broker/ or addons/ and never executes a call.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from journal.vault import Vault

from .fold import Replay, fold_session
from .plan import plan_dict
from .views import views_dir, write_views

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def replay_session(
    vault: Vault, session: str, *, progress: Callable[[int], None] | None = None, require_intact: bool = False,
    seal_key: Ed25519PublicKey | None = None,
) -> Replay:
    """Verify and fold `session` (checking its seal with `seal_key`, a public key, when given). With
    `require_intact`, a broken chain raises BrokenChainError."""
    rp = fold_session(vault, session, progress=progress, seal_key=seal_key)
    if require_intact and not rp.intact:
        r = rp.report
        raise BrokenChainError(f"session {session!r} is broken at seq {r.broken_at_seq} ({r.kind}): {r.detail}; "
                               "replay refused (without --require-intact it marks the rest untrusted)")
    return rp


def write_outputs(vault: Vault, rp: Replay) -> tuple[Path, list[str]]:
    """Write views, index, timeline, revert plan and views.json; return (folder, file names)."""
    return write_views(vault, rp)


class BrokenChainError(ValueError):
    """Replay was asked to refuse a session whose chain is broken."""


__all__ = ["BrokenChainError", "Replay", "plan_dict", "replay_session", "views_dir", "write_outputs"]
