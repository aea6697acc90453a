"""Verifying several sessions of a vault: small sessions shared out whole among forked processes.

`verify_session` already spreads one big file over every CPU (journal/verify.py, ranges), but a
vault of many small sessions (one per agent run, each under PARALLEL_MIN_BYTES) would be read by one
process. Here such sessions are dealt out to one process per CPU, each running the ordinary
`verify_session` on its share, so every report is exactly what a call in this process gives. A
child that fails in any way leaves its share to this process, which verifies it again (and raises
what the child met, if anything). Big sessions are verified here one after another, each using
every CPU itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from journal.forked_call import ForkedCall, can_fork, usable_cpus
from journal.vault import Vault
from journal.verify import MIN_WORKER_BYTES, PARALLEL_MIN_BYTES, SessionReport, verify_session

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def verify_sessions(
    vault: Vault, sessions: list[str], *, check_blobs: bool = True,
    progress: Callable[[int], None] | None = None, seal_key: Ed25519PublicKey | None = None,
    workers: int | None = None, erasure_keys: Sequence[object] = (), blobs_url: str | None = None,
) -> list[SessionReport]:
    """`verify_session` of each session, the reports in the order of `sessions`.

    `workers`: processes to share the small sessions among (default: one per CPU and per
    MIN_WORKER_BYTES of them, 16 at most, when there is no `progress` callback, since a child's
    progress would not reach it; 1 keeps to this process). No fork where the process has other
    threads (journal/forked_call.py)."""
    kw: dict[str, Any] = {"check_blobs": check_blobs, "seal_key": seal_key, "erasure_keys": list(erasure_keys),
                          "blobs_url": blobs_url}
    sizes = {s: _size(vault, s) for s in sessions}
    small = sorted((s for s in dict.fromkeys(sessions) if 0 < sizes[s] < PARALLEL_MIN_BYTES), key=lambda s: -sizes[s])
    if workers is None:
        workers = min(usable_cpus(), sum(sizes[s] for s in small) // MIN_WORKER_BYTES, 16) if progress is None else 1
    reports: dict[str, SessionReport] = {}
    if workers > 1 and len(small) > 1 and can_fork():
        reports.update(_shared_out(vault, _deal(small, sizes, min(workers, len(small))), kw))
    for s in sessions:
        if s not in reports:
            reports[s] = verify_session(vault, s, progress=progress, **kw)
    return [reports[s] for s in sessions]


def _size(vault: Vault, session: str) -> int:
    try:
        return vault.session_path(session).stat().st_size
    except (OSError, ValueError):
        return 0  # verified here, where verify_session says what is wrong with it


def _deal(sessions: list[str], sizes: dict[str, int], n: int) -> list[list[str]]:
    """`sessions` (largest first) into `n` shares of about equal bytes: each to the lightest share."""
    shares: list[list[str]] = [[] for _ in range(n)]
    loads = [0] * n
    for s in sessions:
        i = loads.index(min(loads))
        shares[i].append(s)
        loads[i] += sizes[s]
    return shares


def _verify_share(vault: Vault, share: list[str], kw: dict) -> dict[str, SessionReport]:
    return {s: verify_session(vault, s, **kw) for s in share}


def _shared_out(vault: Vault, shares: list[list[str]], kw: dict) -> dict[str, SessionReport]:
    """Shares 1.. in forked children, share 0 here; a share whose child failed is not in the result
    (the caller verifies those sessions itself)."""
    children: list[tuple[ForkedCall, list[str]]] = []
    try:
        for share in shares[1:]:
            children.append((ForkedCall(functools.partial(_verify_share, vault, share, kw)), share))
    except OSError:  # no more processes to be had: the caller does the rest
        pass
    try:
        reports = _verify_share(vault, shares[0], kw)
        for child, _share in children:
            got = child.result()
            if isinstance(got, dict):
                reports.update(got)
    finally:
        for child, _share in children:
            child.close()
    return reports
