"""A session's checkpoint as the sessions list shows it: what the file claims, from a real sealer and a
real witness, and a clear word when the file is not a checkpoint."""

from __future__ import annotations

from starlette.testclient import TestClient

from broker.inspector.app import create_app
from journal.checkpoint.checkpoint import checkpoint_path
from journal.checkpoint.note import Signer
from journal.checkpoint.witness import WitnessClient
from journal.summary import summarize_session
from journal.vault import Vault
from tests.support.checkpoint_harness import seal_all, witness_server, write_session


def test_no_checkpoint_says_none(tmp_path):
    vault = Vault.create(tmp_path / "v")
    write_session(vault, "s", 2)
    row = summarize_session(vault, "s")
    assert row["checkpoint"] is None and row["sealed"] is None


def test_a_cosigned_checkpoint_shows_its_size_and_signers(tmp_path):
    vault = Vault.create(tmp_path / "v")
    write_session(vault, "s", 3)
    log = Signer.generate("vault.example/log")
    wkey = Signer.generate("witness.example/w1")
    with witness_server(wkey, tmp_path / "wstate", [log.verifier()]) as url:
        seal_all(vault, log, [WitnessClient(url, wkey.cosigner_verifier())])
    write_session(vault, "s", 2, start=4)  # entries after the checkpoint: the claim stays at 3
    row = summarize_session(vault, "s")
    assert row["entries"] == 5
    assert row["checkpoint"] == {"size": 3, "signers": ["vault.example/log", "witness.example/w1"], "error": None}
    api_row = TestClient(create_app(vault), base_url="http://127.0.0.1").get("/api/sessions").json()[0]
    assert api_row["checkpoint"] == row["checkpoint"]


def test_a_file_that_is_not_a_checkpoint_is_named_not_trusted(tmp_path):
    vault = Vault.create(tmp_path / "v")
    write_session(vault, "s", 1)
    seal_all(vault, Signer.generate("vault.example/log"))
    checkpoint_path(vault, "s").write_bytes(b"vault.example/log/s\nnot a size\n")
    status = summarize_session(vault, "s")["checkpoint"]
    assert status["size"] is None and status["signers"] == [] and "malformed" in status["error"]
