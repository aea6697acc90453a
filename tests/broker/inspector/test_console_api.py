"""The endpoints behind the inspector's conversation, diff and evidence views (issue 28): the same
readers as the command line, no way out of the vault, nothing written, a forged note read as a claim."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import orjson
import pytest
from starlette.testclient import TestClient

from broker.inspector import create_app
from journal.checkpoint.checkpoint import checkpoint_path
from journal.checkpoint.note import Signer, cosign, sign_note
from journal.diff import diff_sessions
from journal.vault import Vault

EXAMPLE = Path(__file__).resolve().parents[3] / "vault"
S = "session-2026-09-22"


@pytest.fixture
def vault(tmp_path) -> Path:
    root = tmp_path / "vault"
    shutil.copytree(EXAMPLE, root)
    return root


def client(root: Path) -> TestClient:
    return TestClient(create_app(Vault.open_existing(root)), base_url="http://127.0.0.1")


def test_diff_is_broker_diffs_comparison(vault):
    got = client(vault).get("/api/diff", params={"a": S, "b": S}).json()
    assert got["same"] is True and got["differences"] == [] and len(got["a_calls"]) == 17
    assert got["differences"] == diff_sessions(vault, S, S).differences


@pytest.mark.parametrize("bad", ["../journal/x", "/etc/passwd", "a\x00b", "nope", ""])
def test_no_session_parameter_reaches_outside_the_vault(vault, bad):
    c = client(vault)
    assert c.get("/api/diff", params={"a": S, "b": bad}).status_code in (400, 404)
    for path in ("/api/session/trajectory", "/api/session/evidence"):
        assert c.get(path, params={"session": bad}).status_code in (400, 404)
    assert c.get("/api/session/prove", params={"session": bad, "seq": 1}).status_code in (400, 404)


def test_the_read_only_rule_holds_on_the_new_paths(vault):
    c = client(vault)
    for path in ("/api/diff", "/api/session/trajectory", "/api/session/evidence", "/api/session/prove"):
        assert c.post(path, params={"session": S}).status_code == 405


def test_trajectory_without_prompt_capture_says_so(vault):
    got = client(vault).get("/api/session/trajectory", params={"session": S}).json()
    assert got["turns"] == [] and got["findings"] == [] and "no model calls" in got["notes"][0]


def test_no_checkpoint_no_proof(vault):
    c = client(vault)
    ev = c.get("/api/session/evidence", params={"session": S}).json()
    assert ev["checkpoint"] is None and ev["index"] is None and ev["checked_here"] is False
    assert ev["unsealed"] == {"from_seq": 1, "entries": 17}
    r = c.get("/api/session/prove", params={"session": S, "seq": 3})
    assert r.status_code == 409 and "broker seal" in r.json()["error"]


def test_a_forged_checkpoint_is_shown_as_a_claim_and_no_proof_is_made(vault):
    """Anyone who can write seals/ can write a note naming any signer and any witness time: the page
    shows what it claims (labelled so), and `prove` refuses a checkpoint the file does not match."""
    v = Vault.open_existing(vault)
    forger = Signer.generate("vault.example/log")
    witness = Signer.generate("witness.example/w1")
    text = f"vault.example/log/{S}\n17\n{base64.b64encode(bytes(32)).decode()}\n"
    note = sign_note(text, forger) + cosign(text, witness, 1_700_000_000).line().encode()
    checkpoint_path(v, S).parent.mkdir(parents=True, exist_ok=True)
    checkpoint_path(v, S).write_bytes(note)
    c = client(vault)
    ev = c.get("/api/session/evidence", params={"session": S}).json()
    cp = ev["checkpoint"]
    assert cp["size"] == 17 and cp["signer"]["name"] == "vault.example/log" and ev["unsealed"] is None
    assert cp["witnesses"] == [{"name": "witness.example/w1", "key_id": witness.cosigner_verifier().key_id.hex(),
                                "cosigned_at": 1_700_000_000}]
    r = c.get("/api/session/prove", params={"session": S, "seq": 3})
    assert r.status_code == 409 and "no longer matches its checkpoint" in r.json()["error"]
    checkpoint_path(v, S).write_bytes(b"not a note")
    assert c.get("/api/session/evidence", params={"session": S}).json()["checkpoint"]["error"]


def test_prove_gives_broker_proves_bytes(vault):
    from journal.checkpoint.proof_bundle import make_bundle
    from tests.support.checkpoint_harness import seal_all

    v = Vault(vault)
    seal_all(v, Signer.generate("vault.example/log"))
    r = client(vault).get("/api/session/prove", params={"session": S, "seq": 5})
    assert r.status_code == 200 and "attachment" in r.headers["content-disposition"]
    assert r.content == orjson.dumps(make_bundle(v, S, 5), option=orjson.OPT_INDENT_2) + b"\n"
    assert client(vault).get("/api/session/prove", params={"session": S, "seq": 18}).status_code == 409
