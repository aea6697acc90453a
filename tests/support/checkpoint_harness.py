"""Shared pieces of the checkpoint tests: a witness on loopback, a vault with sealed sessions."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from journal.checkpoint.audit import audit_vault, session_tree
from journal.checkpoint.checkpoint import Checkpoint, checkpoint_path
from journal.checkpoint.note import Signer, Verifier, parse_note
from journal.checkpoint.sealer import Sealer
from journal.checkpoint.witness import Witness, WitnessClient, app
from journal.record import Recorder
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


GMAIL = "https://gmail.googleapis.com/gmail/v1/users/me"


def signer_key_file(tmp_path: Path, name: str) -> tuple[Signer, Path]:
    """A new signer and its key file (`broker keygen`'s form) under tmp_path/keys."""
    signer = Signer.generate(f"vault.example/{name}")
    path = tmp_path / "keys" / f"{name}.key"
    path.parent.mkdir()
    path.write_text(signer.key_text() + "\n")
    return signer, path


def record_reads(rec: Recorder, n: int, session: str = "s1", start: int = 1) -> None:
    """n Gmail message reads, numbered from `start`, recorded through `rec`."""
    for i in range(start, start + n):
        rec.report_call(session=session, agent="a", principal="p", method="GET", url=f"{GMAIL}/messages/m{i}",
                        status=200, response_headers=[("Content-Type", "application/json")],
                        response_body=b'{"id": "m%d"}' % i)


def checkpoint_size(vault: Vault, session: str = "s1") -> int:
    """The size the session's checkpoint claims; 0 when it has none."""
    path = checkpoint_path(vault, session)
    return Checkpoint.parse(parse_note(path.read_bytes()).text).size if path.exists() else 0
