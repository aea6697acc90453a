"""Sealing as the broker records: the Python API, the recording service, `broker run --seal-key`."""

from __future__ import annotations

import base64
import signal
import ssl
import time
from pathlib import Path

import httpx
import pytest

from journal.checkpoint.autoseal import AutosealConfig
from journal.checkpoint.note import Signer
from journal.checkpoint.witness import WitnessClient
from journal.record import Recorder
from journal.vault import Vault
from tests.support.broker_harness import BrokerProcess
from tests.support.checkpoint_harness import (
    audit,
    checkpoint_size,
    record_reads,
    report_of,
    signer_key_file,
    witness_server,
)
from tests.support.upstreams import Upstream

GMAIL = "https://gmail.googleapis.com/gmail/v1/users/me"


@pytest.fixture
def key(tmp_path):
    return signer_key_file(tmp_path, "auto")


@pytest.fixture
def recorders():
    """Recorders made by a test, closed after it even when it fails: an autoseal thread left running
    would stop the forking tests that come later from forking."""
    made: list[Recorder] = []

    def make(root: Path, config: AutosealConfig) -> Recorder:
        made.append(Recorder(root, autoseal=config, durable=False))
        return made[-1]

    yield make
    for rec in made:
        rec.close()


def _wait_for(predicate, timeout: float = 20, rec: Recorder | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            seen = f": {rec.autosealer.rounds} rounds, problems {rec.autosealer.problems}" if rec else ""
            raise AssertionError(f"condition not reached in {timeout} s{seen}")
        time.sleep(0.02)


def _secrets(signer: Signer) -> list[bytes]:
    seed = base64.b64decode(signer.key_text().split("+", 4)[4])[1:]
    return [signer.key_text().encode(), seed, base64.b64encode(seed)[:20]]


def _assert_key_nowhere(root: Path, signer: Signer) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for s in _secrets(signer):
                assert s not in data, f"signer key material in {path}"


def test_every_n_entries_and_at_close(tmp_path, key, recorders):
    signer, path = key
    vault = Vault.create(tmp_path / "vault")
    rec = recorders(vault.root, AutosealConfig(str(path), entries=3, seconds=3600))
    record_reads(rec, 7)
    _wait_for(lambda: checkpoint_size(vault) >= 6, rec=rec)
    rec.close()
    assert checkpoint_size(vault) == 7  # the clean stop's checkpoint
    result = audit(vault, signer.verifier())
    r = report_of(result, "s1")
    assert r.intact and "checkpoint checked: 7 entries" in r.notes
    _assert_key_nowhere(vault.root, signer)


def test_every_t_seconds_and_a_second_process_continues(tmp_path, key, recorders):
    signer, path = key
    vault = Vault.create(tmp_path / "vault")
    rec = recorders(vault.root, AutosealConfig(str(path), entries=1000, seconds=0.2))
    record_reads(rec, 2)
    _wait_for(lambda: checkpoint_size(vault) == 2, rec=rec)
    rec.close()
    rec = recorders(vault.root, AutosealConfig(str(path), entries=1000, seconds=3600))
    record_reads(rec, 3, start=3)
    rec.close()
    assert checkpoint_size(vault) == 5
    assert report_of(audit(vault, signer.verifier(), require_sealed=True), "s1").intact


def test_a_tampered_session_is_not_resealed(tmp_path, key, recorders):
    signer, path = key
    vault = Vault.create(tmp_path / "vault")
    rec = recorders(vault.root, AutosealConfig(str(path), entries=1000, seconds=3600))
    record_reads(rec, 4)
    rec.close()
    lines = vault.session_path("s1").read_bytes().splitlines(keepends=True)
    vault.session_path("s1").write_bytes(b"".join(lines[:2]))  # cut
    rec = recorders(vault.root, AutosealConfig(str(path), entries=1000, seconds=3600))
    record_reads(rec, 1, start=3)
    rec.close()
    assert checkpoint_size(vault) == 4 and rec.autosealer.problems  # the old checkpoint stands; the refusal is reported
    assert report_of(audit(vault, signer.verifier()), "s1").kind == "seal_mismatch"


@pytest.mark.e2e
@pytest.mark.parametrize("recorder", ["process", "inline"])
def test_broker_run_seals_as_it_records_and_a_witness_cosigns(tmp_path, key, recorder):
    signer, path = key
    wkey = Signer.generate("witness.example/w1")
    with Upstream() as up, witness_server(wkey, tmp_path / "wstate", [signer.verifier()]) as url:
        b = BrokerProcess(tmp_path, up, "--session", "run", "--seal-key", str(path), "--checkpoint-entries", "2",
                          "--checkpoint-seconds", "3600", "--witness", url, "--recorder", recorder,
                          "--pass-unknown", "www.googleapis.com")  # its unknown paths pass, declared
        with b:
            with httpx.Client(proxy=b.proxy_url("sealed", "agent"), verify=ssl.create_default_context(cafile=b.ca),
                              timeout=60) as c:
                for _ in range(3):
                    assert c.get(f"{GMAIL}/labels", headers={"Authorization": "Bearer t"}).status_code == 200
                # left unrecorded, and declared: a call no connector knows to a passed host, and a token exchange
                c.get("https://www.googleapis.com/nothing-known/v1/x")
                grant = {"grant_type": "refresh_token", "refresh_token": "1//0gREFRESH", "client_id": "x"}
                assert c.post("https://oauth2.googleapis.com/token", data=grant).status_code == 200
            vault = Vault(b.vault)
            _wait_for(lambda: checkpoint_size(vault, "sealed") >= 2)
            assert b.stop(signal.SIGTERM) == 0
        assert checkpoint_size(vault, "sealed") == 3
        result = audit(vault, signer.verifier(), witness_keys=[wkey.cosigner_verifier()],
                       witnesses=[WitnessClient(url)], require_sealed=True)
        r = report_of(result, "sealed")
        assert r.intact and any("cosigned by witness.example/w1" in n for n in r.notes), r
        assert "sealed: www.googleapis.com: 1 passed" in result.coverage, result.coverage
        assert "sealed: oauth2.googleapis.com: 1 token" in result.coverage, result.coverage
    _assert_key_nowhere(b.vault, signer)
    for s in _secrets(signer):
        assert s not in bytes(b.output)


def test_declared_coverage_from_the_api_and_the_service_frame(tmp_path, key):
    from broker.proxy.service import Service
    from broker.proxy.wire import Coverage, frame, split_to_service

    signer, path = key
    vault = Vault.create(tmp_path / "vault")
    rec = Recorder(vault.root, autoseal=AutosealConfig(str(path), entries=1000, seconds=3600), durable=False)
    record_reads(rec, 1)
    assert rec.report_call(session="s1", agent="a", principal="p", method="POST",
                           url="https://oauth2.googleapis.com/token", status=200, connector="google",
                           request_body=b"grant_type=refresh_token&refresh_token=x") is None
    gaps = [("s1", "unknown.example", "passed", 3), ("s2", "api.example", "refused", 1)]
    messages, _ = split_to_service(frame(Coverage(gaps)))
    assert Service(rec).handle(messages) == []  # never acknowledged
    rec.close()
    result = audit(vault, signer.verifier())
    assert result.coverage == ["s1: oauth2.googleapis.com: 1 token", "s1: unknown.example: 3 passed",
                               "s2: api.example: 1 refused"]
    text = (vault.seals_dir / "vault-index.note").read_text()
    assert "coverage s1 unknown.example passed 3\n" in text


@pytest.mark.e2e
def test_broker_mcp_seals_at_a_clean_stop(tmp_path, key):
    import json

    from tests.support.mcp_servers.harness import RawShim

    signer, path = key
    shim = RawShim(tmp_path, "--seal-key", str(path), "--checkpoint-entries", "100")
    try:
        shim.send(b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}\n')
        shim.recv()
        for i in (1, 2):
            shim.send(b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo",'
                      b'"arguments":{"text":"x"}}}\n' % i)
            assert json.loads(shim.recv())["id"] == i
        assert shim.close() == 0
    finally:
        shim.kill()
    vault = Vault(shim.vault)
    assert checkpoint_size(vault) == 2
    assert report_of(audit(vault, signer.verifier(), require_sealed=True), "s1").intact
