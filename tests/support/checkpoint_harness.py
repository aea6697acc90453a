"""Shared pieces of the checkpoint tests: a witness on loopback, a vault with sealed sessions."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from journal.checkpoint.audit import audit_vault, session_tree
from journal.checkpoint.note import Signer, Verifier
from journal.checkpoint.sealer import Sealer
from journal.checkpoint.witness import Witness, WitnessClient, app
from journal.vault import Vault
from journal.writer import JournalWriter
from tests.support.journal_factories import fields


@contextmanager
def witness_server(signer: Signer, state: Path, log_keys: list[Verifier]) -> Iterator[str]:
    """A real tlog-witness (uvicorn, port 0) in a thread; yields its URL and stops it."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app(Witness(signer, state, log_keys)), host="127.0.0.1", port=0,
                                           log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("witness did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def write_session(vault: Vault, session: str, n: int, start: int = 1) -> None:
    with JournalWriter(vault, durable=False) as w:
        for i in range(start, start + n):
            w.append(fields(session=session, n=i))


def seal_all(vault: Vault, signer: Signer, witnesses: list[WitnessClient] | None = None):
    trees = {}
    for s in vault.sessions():
        report, tree = session_tree(vault, s)
        assert report.intact, report
        trees[s] = tree
    return Sealer(vault, signer, witnesses).seal(trees)


def audit(vault: Vault, key: Verifier, **kwargs):
    checked = {s: session_tree(vault, s) for s in vault.sessions()}
    return audit_vault(vault, checked, key, **kwargs)


def report_of(result, session: str):
    return next(r for r in result.reports if r.session == session)
