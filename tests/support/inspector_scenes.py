"""Sessions the inspector's console tests and its screenshots (scripts/inspector_screenshots.py) share:
a conversation with prompt capture, a re-run of the example session that differs, and a sealed session
with a witness's cosignature, declared coverage and an unsealed tail."""

from __future__ import annotations

from pathlib import Path

import orjson

from journal.vault import Vault
from journal.writer import JournalWriter
from tests.support.journal_factories import fields


def record_conversation(root: Path, session: str = "s") -> None:
    """A session with prompt capture, recorded through the recording service as tests/e2e/test_prompts.py
    does: a model call that asks for a gmail tool call (carried out at seq 2), a gmail call while the model
    thinks (asked for by nobody), a second model call that asks for nothing, and a gmail call after it."""
    from broker.proxy.service import Service
    from broker.proxy.wire import WholeCall
    from journal.record import Recorder
    from tests.support.prompt_calls import anthropic_call, completion_of, gmail_call, request_ahead, send_framed

    svc = Service(Recorder(root))
    send_framed(svc, WholeCall(1, anthropic_call(session, "refs", 1, tool=("gmail", {"q": "unread"}))))
    send_framed(svc, request_ahead(2, gmail_call(session, 2)))
    svc.prepare_pending()
    send_framed(svc, completion_of(2, gmail_call(session, 2)))
    send_framed(svc, request_ahead(3, anthropic_call(session, "refs", 3, tool=None, results=[("toolu_1", "x")])))
    send_framed(svc, WholeCall(4, gmail_call(session, 4)))
    send_framed(svc, completion_of(3, anthropic_call(session, "refs", 3, tool=None, results=[("toolu_1", "x")])))
    send_framed(svc, WholeCall(5, gmail_call(session, 5)))


def rerun(root: Path, source: str, session: str, *, skip: int = 6, status_429_at: int = 13) -> None:
    """`source` recorded again as `session`, without the entry at seq `skip` and with seq `status_429_at`
    answered 429: what `broker diff` shows as one call removed and one status changed."""
    lines = (root / "journal" / f"{source}.jsonl").read_bytes().splitlines()
    with JournalWriter(Vault(root), durable=False) as w:
        for seq, line in enumerate(lines, 1):
            if seq == skip:
                continue
            e = orjson.loads(line)
            f = {k: e[k] for k in ("ts", "agent", "principal", "connector", "effect", "capture", "request",
                                   "response", "mcp", "prompt_ref")}
            f["session"] = session
            if seq == status_429_at:
                f["response"] = {**f["response"], "status": 429}
            w.append(f)


def seal_with_witness(root: Path, session: str, signer, witness_url: str, coverage: dict, tail: int = 2) -> None:
    """Seal `session` (a checkpoint cosigned by the witness at `witness_url`, the index with `coverage`
    {(host, what): count}), then append `tail` entries the checkpoint does not cover."""
    from journal.checkpoint.audit import session_tree
    from journal.checkpoint.checkpoint import session_stem
    from journal.checkpoint.sealer import Sealer
    from journal.checkpoint.witness import WitnessClient

    vault = Vault(root)
    stem = session_stem(session)
    Sealer(vault, signer, [WitnessClient(witness_url)]).seal(
        {session: session_tree(vault, session)[1]},
        coverage={(stem, host, what): n for (host, what), n in coverage.items()})
    with JournalWriter(vault, durable=False) as w:
        first = sum(1 for _ in (root / "journal" / f"{session}.jsonl").open("rb")) + 1
        for n in range(first, first + tail):
            w.append(fields(session, n))
