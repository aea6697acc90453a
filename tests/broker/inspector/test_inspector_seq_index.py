"""The inspector reads its pages through the session's seq index (journal/seq_index.py): the writer's sidecar
when it checks out, else the user's cache index. A sidecar that lies, a tampered file, a torn last line: the
head and every page still show the file's own lines."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from broker.inspector import create_app
from journal.seq_sidecar import RECORD_SIZE, STRIDE, sidecar_name
from journal.vault import Vault
from journal.writer import JournalWriter
from tests.support.journal_factories import fields

N = 3 * STRIDE + 17


@pytest.fixture
def vault(tmp_path, monkeypatch) -> Vault:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    v = Vault.create(tmp_path / "v")
    with JournalWriter(v, durable=False) as w:
        for k in range(0, N, 40):
            w.append_many([fields("s", n=i) for i in range(k, min(N, k + 40))])
    return v


def _pages(vault: Vault) -> tuple[dict, list[bytes]]:
    c = TestClient(create_app(vault), base_url="http://127.0.0.1")
    head = c.get("/api/session/head", params={"session": "s"}).json()
    got: list[bytes] = []
    for first in range(1, head["lines"] + 1, 100):
        rows = c.get("/api/session/entries", params={"session": "s", "from": first, "limit": 100}).json()["rows"]
        got += [r["raw"].encode() for r in rows]
    for n in (1, STRIDE + 1, head["lines"]):
        assert c.get("/api/session/entry", params={"session": "s", "seq": n}).json()["raw"].encode() == got[n - 1]
    return head, got


def _file_lines(vault: Vault) -> list[bytes]:
    return vault.session_path("s").read_bytes().split(b"\n")[:-1]


def test_pages_through_the_sidecar_are_the_files_lines(vault):
    head, got = _pages(vault)
    assert head["lines"] == N and got == _file_lines(vault)
    assert not (Path(vault.root).parent / "cache").exists()  # answered from the sidecar alone


def test_a_lying_sidecar_and_a_tampered_file_still_show_the_files_lines(vault):
    side = vault.journal_dir / sidecar_name("s.jsonl")
    data = bytearray(side.read_bytes())
    data[RECORD_SIZE * 3 + 8 : RECORD_SIZE * 4] = (17).to_bytes(8, "little")  # record 2 points mid-line
    side.write_bytes(bytes(data))
    head, got = _pages(vault)
    assert head["lines"] == N and got == _file_lines(vault)
    lines = _file_lines(vault)
    del lines[5]  # a line removed: every later line sits one place early
    vault.session_path("s").write_bytes(b"\n".join(lines) + b"\n" + b'{"torn')
    head, got = _pages(vault)
    assert head["lines"] == N - 1 and got == lines
    assert head["complete_bytes"] == head["bytes"] - len(b'{"torn')
