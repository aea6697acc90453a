"""The bytes the writer puts in a session file, pinned: the same fields give the same lines whatever path
of the append pipeline wrote them (a lone `append`, `append_many` in one group, `submit` in groups a flusher leads), and
the same lines as before the lone writer's path was added (the digests were taken with main at 3f07f46)."""

from __future__ import annotations

import hashlib
import threading

from journal.vault import Vault
from journal.writer import JournalWriter
from tests.support.journal_factories import fields


def _shapes() -> list[dict]:
    """Entries of every shape the canonical form treats apart: plain ones, floats (JCS's own number
    form), keys that sort differently in UTF-16 than in code points, text that looks like a chain
    member, an MCP call, a call that got no answer, a prompt_ref."""
    out = [fields("pin", n) for n in range(1, 30)]
    out.append(fields("pin", 30, response={"status": 200, "headers": [], "body": {"f": [1.5, 1e21, -0.0, 0.1]}}))
    out.append(fields("pin", 31, response={"status": 200, "headers": [], "body": {"\ue000": 1, "\U0001f600": 2}}))
    out.append(fields("pin", 32, agent='a,"mcp":{"x":1},"hash":"0"'))
    out.append(fields("pin", 33, mcp={"method": "tools/call", "id": 7, "params": {"name": "search"}}))
    out.append(fields("pin", 34, response={"status": None, "headers": [], "body": None, "error": "timeout"}))
    out.append(fields("pin", 35, prompt_ref="sha256:" + "ab" * 32))
    return out


# SHA-256 of the session file after the 35 entries of _shapes(), as main at 3f07f46 writes them.
PINNED = "41217ae6ab49e459e22bd7151be92f696653701f99cd583da13c91ed2367fd4f"


def _digest(root) -> str:
    return hashlib.sha256(Vault(root).session_path("pin").read_bytes()).hexdigest()


def test_lone_appends_write_the_pinned_bytes(tmp_path):
    with JournalWriter(tmp_path) as w:
        for f in _shapes():
            w.append(f)
    assert _digest(tmp_path) == PINNED


def test_one_group_writes_the_pinned_bytes(tmp_path):
    with JournalWriter(tmp_path) as w:
        results = w.append_many(_shapes())
    assert all(isinstance(r, dict) for r in results)
    assert _digest(tmp_path) == PINNED


def test_submitted_groups_write_the_pinned_bytes(tmp_path):
    """`submit` from one thread: groups of any size led by the lane's flusher, in order."""
    done = threading.Semaphore(0)
    shapes = _shapes()
    with JournalWriter(tmp_path) as w:
        for f in shapes:
            w.submit(f, lambda p: done.release())
        for _ in shapes:
            assert done.acquire(timeout=60)
    assert _digest(tmp_path) == PINNED
