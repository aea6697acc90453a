"""Sealing catches what the chain alone cannot: a cut at a line boundary and a re-hashed rewrite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from journal.chain import GENESIS, chain_entry
from journal.seal import SealError, generate_keypair, load_private_key, load_public_key, read_seal, write_seal
from journal.vault import Vault
from journal.verify import verify_session
from journal.writer import JournalWriter
from tests.support.journal_factories import fields


@pytest.fixture
def sealed(tmp_path):
    keys = tmp_path / "keys"
    keys.mkdir()
    generate_keypair(keys / "k.pem", keys / "k.pub")
    vault = Vault.create(tmp_path / "vault")
    with JournalWriter(vault) as w:
        for i in range(1, 6):
            last = w.append(fields(n=i))
    write_seal(vault, "s1", 5, last["hash"], load_private_key(keys / "k.pem"))
    return vault, load_public_key(keys / "k.pub"), keys


def lines(vault: Vault) -> list[bytes]:
    return vault.session_path("s1").read_bytes().splitlines(keepends=True)


def test_sealed_session_checks_out_and_may_grow(sealed):
    vault, pub, _ = sealed
    r = verify_session(vault, "s1", seal_key=pub)
    assert r.intact and any("seal checked" in n for n in r.notes)
    with JournalWriter(vault) as w:
        w.append(fields(n=6))
    assert verify_session(vault, "s1", seal_key=pub).intact
    assert any("not checked" in n for n in verify_session(vault, "s1").notes)


def test_cut_at_a_line_boundary_is_caught(sealed):
    vault, pub, _ = sealed
    vault.session_path("s1").write_bytes(b"".join(lines(vault)[:3]))
    assert verify_session(vault, "s1").intact  # the chain alone cannot see it
    r = verify_session(vault, "s1", seal_key=pub)
    assert (r.intact, r.kind, r.broken_at_seq) == (False, "seal_mismatch", 4)
    assert "cut off" in r.detail


def test_rewrite_with_recomputed_hashes_is_caught(sealed):
    vault, pub, _ = sealed
    prev, out = GENESIS, []
    for i, line in enumerate(lines(vault), start=1):
        entry = orjson.loads(line)
        f = {k: v for k, v in entry.items() if k not in ("seq", "prev", "hash")}
        if i == 2:
            f["agent"] = "someone-else"
        new, data = chain_entry(f, i, prev)
        prev = new["hash"]
        out.append(data)
    vault.session_path("s1").write_bytes(b"".join(out))
    assert verify_session(vault, "s1").intact
    r = verify_session(vault, "s1", seal_key=pub)
    assert (r.intact, r.kind, r.broken_at_seq) == (False, "seal_mismatch", 5)
    assert "rewritten" in r.detail


def test_seal_from_another_key_or_tampered_is_rejected(sealed, tmp_path):
    vault, pub, keys = sealed
    generate_keypair(tmp_path / "other.pem", tmp_path / "other.pub")
    r = verify_session(vault, "s1", seal_key=load_public_key(tmp_path / "other.pub"))
    assert r.kind == "seal_mismatch" and "not by the given key" in r.detail
    seal = read_seal(vault, "s1")
    path = vault.seals_dir / "s1.jsonl.seal"
    d = orjson.loads(path.read_bytes())
    d["entries"] = 3  # claim fewer entries, to hide a later cut
    path.write_bytes(orjson.dumps(d))
    r = verify_session(vault, "s1", seal_key=pub)
    assert r.kind == "seal_mismatch" and "signature" in r.detail
    assert seal.entries == 5


def test_key_files_are_checked(tmp_path):
    generate_keypair(tmp_path / "k.pem", tmp_path / "k.pub")
    with pytest.raises(SealError, match="refusing to overwrite"):
        generate_keypair(tmp_path / "k.pem", tmp_path / "x.pub")
    assert (tmp_path / "k.pem").stat().st_mode & 0o777 == 0o600
    (tmp_path / "bad.pub").write_text("something else\n")
    with pytest.raises(SealError):
        load_public_key(tmp_path / "bad.pub")
    with pytest.raises(SealError):
        load_private_key(tmp_path / "k.pub")


def test_cli_keygen_seal_verify(tmp_path):
    root = Path(__file__).resolve().parents[2]

    def broker(*args):
        return subprocess.run([sys.executable, "-m", "broker.cli", *args], capture_output=True, text=True,
                              cwd=root, timeout=60)

    vault = tmp_path / "v"
    with JournalWriter(vault) as w:
        for i in range(3):
            w.append(fields(n=i))
    (tmp_path / "keys").mkdir()  # a legacy key pair: `broker keygen` writes note keys now (checkpoints)
    generate_keypair(tmp_path / "keys" / "seal-key.pem", tmp_path / "keys" / "seal-key.pub")
    r = broker("seal", "--vault", str(vault), "--key", str(tmp_path / "keys" / "seal-key.pem"))
    assert r.returncode == 0 and "sealed at 3 entries" in r.stdout
    pub = str(tmp_path / "keys" / "seal-key.pub")
    assert broker("verify", "--vault", str(vault), "--seal-key", pub).returncode == 0
    path = Vault(vault).session_path("s1")
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:2]))
    r = broker("verify", "--vault", str(vault), "--seal-key", pub, "--json")
    assert r.returncode == 1 and orjson.loads(r.stdout)["kind"] == "seal_mismatch"
    assert broker("verify", "--vault", str(vault), "--seal-key", str(tmp_path / "nope.pub")).returncode == 2
