"""The checkpoint commands end to end: keygen, a real `broker witness` process, seal, verify, prove."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from journal.checkpoint.note import Signer, Verifier
from journal.vault import Vault
from tests.support.checkpoint_harness import write_session

ROOT = Path(__file__).resolve().parents[2]


def broker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=60)


@pytest.fixture
def witness_proc(tmp_path):
    keys = tmp_path / "keys"
    assert broker("keygen", "--name", "vault.example/v1", "--out", str(keys)).returncode == 0
    out = broker("keygen", "--name", "witness.example/w1", "--cosigner", "--out", str(keys))
    assert out.returncode == 0
    wvkey = out.stdout.strip()
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker.cli", "witness", "--listen", "127.0.0.1:0", "--key",
         str(keys / "witness.example_w1.key"), "--state", str(tmp_path / "wstate"), "--log-key",
         str(keys / "vault.example_v1.vkey")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    try:
        line = proc.stdout.readline()
        assert "listening on http://127.0.0.1:" in line, line + proc.stderr.read()
        url = line.split()[-1]
        assert wvkey in proc.stdout.readline()
        yield keys, url, wvkey
    finally:
        proc.terminate()
        proc.wait(10)


def test_keygen_writes_note_key_texts(tmp_path):
    out = broker("keygen", "--name", "example.com/log", "--out", str(tmp_path))
    assert out.returncode == 0
    key = (tmp_path / "example.com_log.key").read_text().strip()
    assert key.startswith("PRIVATE+KEY+example.com/log+")
    assert (tmp_path / "example.com_log.key").stat().st_mode & 0o777 == 0o600
    vkey = out.stdout.strip()
    assert (tmp_path / "example.com_log.vkey").read_text().strip() == vkey
    assert Signer.from_text(key).verifier() == Verifier.from_vkey(vkey)
    assert broker("keygen", "--name", "example.com/log", "--out", str(tmp_path)).returncode == 2  # no overwrite


def test_seal_with_a_witness_verify_prove(tmp_path, witness_proc):
    keys, url, wvkey = witness_proc
    vault = Vault.create(tmp_path / "v")
    write_session(vault, "s1", 6)
    v = str(vault.root)
    key, vkey = str(keys / "vault.example_v1.key"), str(keys / "vault.example_v1.vkey")
    out = broker("seal", "--vault", v, "--key", key, "--witness", url, "--witness-key", wvkey)
    assert out.returncode == 0, out.stderr
    assert "s1: checkpoint at 6 entries, cosigned by witness.example/w1" in out.stdout
    out = broker("verify", "--vault", v, "--seal-key", vkey, "--witness-key", wvkey, "--witness", url)
    assert out.returncode == 0 and "cosigned by witness.example/w1" in out.stdout, out.stdout
    write_session(vault, "s1", 2, start=7)
    out = broker("seal", "--vault", v, "--key", key, "--witness", url, "--witness-key", wvkey)
    assert out.returncode == 0 and "checkpoint at 8 entries, cosigned" in out.stdout
    # a proof of seq 5 that a third party checks with the two verifier keys alone
    bundle = tmp_path / "p.json"
    assert broker("prove", "--vault", v, "s1", "5", "--out", str(bundle)).returncode == 0
    out = broker("verify-proof", str(bundle), "--seal-key", vkey, "--witness-key", wvkey)
    assert out.returncode == 0 and "s1 seq 5 is entry 5 of 8" in out.stdout
    data = json.loads(bundle.read_text())
    data["seq"] = 4
    bundle.write_text(json.dumps(data))
    assert broker("verify-proof", str(bundle), "--seal-key", vkey).returncode == 1
    # cut the last two entries and put back nothing: the vault's checkpoint catches it
    path = vault.session_path("s1")
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:6]))
    out = broker("verify", "--vault", v, "--seal-key", vkey, "--witness", url, "--json")
    assert out.returncode == 1
    assert orjson.loads(out.stdout.splitlines()[0])["kind"] == "seal_mismatch"
    # the sealer will not sign the cut file, and says why
    out = broker("seal", "--vault", v, "--key", key, "--witness", url, "--witness-key", wvkey)
    assert out.returncode == 1 and "covers 8 entries, the file holds 6" in out.stderr


def test_verify_usage_errors(tmp_path):
    vault = Vault.create(tmp_path / "v")
    write_session(vault, "s1", 1)
    assert broker("verify", "--vault", str(vault.root), "--require-sealed").returncode == 2
    assert broker("verify", "--vault", str(vault.root), "--seal-key", "nope+00000000+AAAA").returncode == 2
    out = broker("verify", "--vault", str(vault.root), "--seal-key", str(tmp_path / "missing.vkey"))
    assert out.returncode == 2 and "cannot read verifier key" in out.stderr
