"""Replay: fold a session's entries into views of the resources touched, and a revert plan.

    from journal.replay import replay_session, write_outputs, plan_dict
    rp = replay_session(vault, "session-2026-09-22")   # one verifying pass over the file
    folder, files = write_outputs(vault, rp)            # views/<session>/ (deterministic)
    plan = plan_dict(rp)                                # {"session", "chain", "steps": [...]}

- `fold.py`: the engine (entries from the verifier; untrusted after a broken seq);
- `split.py`: the fold for views on two cores (a forked partner folds some connectors' entries);
- `store.py`: the spill store the fold writes to and the views stream from (memory stays bounded
  whatever the session's length; `rp.close()` removes it, as does collecting `rp`);
- `connectors/`: one module per connector (resource keys, response -> view, write -> inverse);
- `views.py` / `markdown.py` / `labels.py`: the files under views/<session>/; `plan.py`: the revert plan.

docs/replay.md describes the outputs and how to add a connector. This package imports nothing
from broker/ or addons/ and never executes a call.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from journal.checkpoint.audit import check_session_checkpoint
from journal.checkpoint.note import Verifier
from journal.errors import BrokerError
from journal.vault import Vault

from .fold import Replay, SealCheck, fold_session
from .plan import plan_dict
from .views import views_dir, write_views

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def replay_session(
    vault: Vault, session: str, *, progress: Callable[[int], None] | None = None, require_intact: bool = False,
    seal_key: Verifier | Ed25519PublicKey | None = None, views: bool = True,
) -> Replay:
    """Verify and fold `session`. With `seal_key` also check what the chain alone cannot show: a
    checkpoint verifier key (journal/checkpoint/note.py Verifier) checks the session's checkpoint and
    the vault index as `broker verify --seal-key` does; a legacy public key (journal/seal.py) its
    `.seal` file. With `require_intact`, a broken chain raises BrokenChainError. With `views` false the fold
    keeps what the revert plan needs and nothing else (`plan_dict` works; `write_outputs`, `rp.entries` and
    `rp.resources` do not): what `broker revert-plan` and the inspector's plan tab use."""
    seal_check: SealCheck | None = None
    if isinstance(seal_key, Verifier):
        seal_check = partial(check_session_checkpoint, vault, key=seal_key)
        seal_key = None
    rp = fold_session(vault, session, progress=progress, seal_key=seal_key, seal_check=seal_check, views=views)
    if require_intact and not rp.intact:
        r = rp.report
        raise BrokenChainError(f"session {session!r} is broken at seq {r.broken_at_seq} ({r.kind}): {r.detail}; "
                               "replay refused (without --require-intact it marks the rest untrusted)")
    return rp


def write_outputs(vault: Vault, rp: Replay) -> tuple[Path, list[str]]:
    """Write views, index, timeline, revert plan and views.json; return (folder, file names)."""
    return write_views(vault, rp)


class BrokenChainError(BrokerError, ValueError):
    """Replay was asked to refuse a session whose chain is broken."""


__all__ = ["BrokenChainError", "Replay", "plan_dict", "replay_session", "views_dir", "write_outputs"]
