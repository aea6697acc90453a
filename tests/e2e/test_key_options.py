"""One key parser for every key option (journal/checkpoint/keys.py, broker/cli/options.py).

Regressions: `broker replay --seal-key` and `revert-plan --seal-key` refused the NAME.vkey that
`broker keygen` writes (exit 2) while `broker verify` took it. And a file that is not a key, for any
key option of any command, is one clear line and exit 2, never a traceback.
"""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from journal.chain import chain_entry
from tests.support.example_vault import ROOT, SESSION, copy_example


def broker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def _sealed(tmp_path):
    v, k = tmp_path / "v", tmp_path / "k"
    copy_example(v)
    assert broker("keygen", "--out", str(k)).returncode == 0
    r = broker("seal", "--vault", str(v), "--key", str(k / "seal-key.key"))
    assert r.returncode == 0, r.stderr
    return v, k


@pytest.fixture
def sealed(tmp_path):
    """The example session sealed with a key from `broker keygen`: (vault dir, keys dir), for a test to alter."""
    return _sealed(tmp_path)


@pytest.fixture(scope="module")
def sealed_once(tmp_path_factory):
    """The same, shared by the tests that only read it."""
    return _sealed(tmp_path_factory.mktemp("sealed"))


def _rewrite_with_hashes_recomputed(path, from_line: int) -> None:
    """What someone who can write the vault but never held the key can do: change an entry and rechain
    every later one, so that the hash chain holds."""
    lines = path.read_bytes().splitlines(keepends=True)
    entries = [orjson.loads(line) for line in lines]
    entries[from_line]["request"]["url"] += "?changed=1"
    prev, out = entries[from_line - 1]["hash"], lines[:from_line]
    for e in entries[from_line:]:
        chained, line = chain_entry({k: v for k, v in e.items() if k not in ("seq", "prev", "hash")}, e["seq"], prev)
        prev = chained["hash"]
        out.append(line)
    path.write_bytes(b"".join(out))


@pytest.mark.parametrize("command", ["replay", "revert-plan"])
def test_replay_and_revert_plan_take_the_vkey_keygen_writes(sealed_once, command):
    v, k = sealed_once
    r = broker(command, "--vault", str(v), SESSION, "--seal-key", str(k / "seal-key.vkey"), "--json")
    assert r.returncode == 0, r.stderr
    vkey_text = (k / "seal-key.vkey").read_text().strip()
    r = broker(command, "--vault", str(v), SESSION, "--seal-key", vkey_text)  # the key's text works as well
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("command", ["replay", "revert-plan"])
def test_replay_with_the_vkey_sees_a_rewrite_the_chain_cannot(sealed, command):
    v, k = sealed
    _rewrite_with_hashes_recomputed(v / "journal" / f"{SESSION}.jsonl", 10)
    assert broker(command, "--vault", str(v), SESSION, "--json").returncode == 0  # without the key: nothing shows
    r = broker(command, "--vault", str(v), SESSION, "--seal-key", str(k / "seal-key.vkey"), "--json")
    assert r.returncode == 1, r.stderr
    out = orjson.loads(r.stdout)
    kind = out["chain"]["kind"] if command == "revert-plan" else out["kind"]
    assert kind == "seal_mismatch"


def test_replay_with_the_vkey_marks_entries_after_the_changed_one_untrusted(sealed):
    from journal.checkpoint.note import load_verifier
    from journal.replay import replay_session
    from journal.vault import Vault

    v, k = sealed
    _rewrite_with_hashes_recomputed(v / "journal" / f"{SESSION}.jsonl", 10)
    rp = replay_session(Vault.open_existing(v), SESSION, seal_key=load_verifier(str(k / "seal-key.vkey")))
    assert not rp.intact and rp.report.kind == "seal_mismatch"
    assert [e.pos for e in rp.entries if not e.trusted] == list(range(rp.untrusted_from, 18))
    assert rp.untrusted_from <= 11


def test_replay_with_the_vkey_sees_entries_cut_off(sealed):
    v, k = sealed
    path = v / "journal" / f"{SESSION}.jsonl"
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:15]))
    r = broker("replay", "--vault", str(v), SESSION, "--seal-key", str(k / "seal-key.vkey"), "--json")
    assert r.returncode == 1 and orjson.loads(r.stdout)["kind"] == "seal_mismatch", r.stdout + r.stderr


def test_replay_with_another_vaults_key_is_broken(sealed, tmp_path):
    v, _ = sealed
    assert broker("keygen", "--out", str(tmp_path / "other")).returncode == 0
    r = broker("replay", "--vault", str(v), SESSION, "--seal-key", str(tmp_path / "other" / "seal-key.vkey"))
    assert r.returncode == 1 and "seal_mismatch" in r.stdout, r.stdout + r.stderr


# Every key option of every command, with what makes the rest of its command line valid.
KEY_OPTIONS = [
    ("verify", ["--vault", "{v}", "--seal-key", "{bad}"]),
    ("verify --witness-key", ["--vault", "{v}", "--seal-key", "{k}/seal-key.vkey", "--witness-key", "{bad}"]),
    ("replay", ["--vault", "{v}", SESSION, "--seal-key", "{bad}"]),
    ("revert-plan", ["--vault", "{v}", SESSION, "--seal-key", "{bad}"]),
    ("seal", ["--vault", "{v}", "--key", "{bad}"]),
    ("seal --witness-key", ["--vault", "{v}", "--key", "{k}/seal-key.key", "--witness", "http://127.0.0.1:9",
                            "--witness-key", "{bad}"]),
    ("verify-proof", ["{v}/VAULT.json", "--seal-key", "{bad}"]),
    ("verify-proof --witness-key", ["{v}/VAULT.json", "--seal-key", "{k}/seal-key.vkey", "--witness-key", "{bad}"]),
    ("witness", ["--listen", "127.0.0.1:0", "--state", "{tmp}/w", "--log-key", "{k}/seal-key.vkey", "--key", "{bad}"]),
    ("witness --log-key", ["--listen", "127.0.0.1:0", "--state", "{tmp}/w", "--key", "{k}/seal-key.key",
                           "--log-key", "{bad}"]),
    ("run", ["--vault", "{v}", "--listen", "127.0.0.1:0", "--seal-key", "{bad}"]),
    ("mcp", ["--vault", "{v}", "--seal-key", "{bad}", "--", sys.executable, "-c", "pass"]),
]
NOT_KEYS = {
    "p12": bytes(range(256)) * 4,  # binary: not UTF-8 (a .p12, a DER key)
    "garbage": b"hello, this is not a key\n",
}


@pytest.mark.parametrize("not_key", sorted(NOT_KEYS))
@pytest.mark.parametrize(("label", "args"), KEY_OPTIONS, ids=[label for label, _ in KEY_OPTIONS])
def test_a_file_that_is_not_a_key_is_one_line_and_exit_2(sealed_once, tmp_path, label, args, not_key):
    v, k = sealed_once
    bad = tmp_path / f"not-a-key.{not_key}"
    bad.write_bytes(NOT_KEYS[not_key])
    argv = [a.format(v=v, k=k, bad=bad, tmp=tmp_path) for a in args]
    r = broker(label.split()[0], *argv)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("broker: error: ") and str(bad) in lines[0]
    assert "listening" not in r.stdout  # refused before anything started


def test_the_other_half_of_the_pair_is_named(sealed_once):
    v, k = sealed_once
    r = broker("replay", "--vault", str(v), SESSION, "--seal-key", str(k / "seal-key.key"))
    assert r.returncode == 2 and "private signer key" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    secret = (k / "seal-key.key").read_text().strip().rsplit("+", 1)[-1]
    assert secret not in r.stderr
    r = broker("witness", "--state", str(k / "w"), "--key", str(k / "seal-key.vkey"), "--log-key",
               str(k / "seal-key.vkey"))
    assert r.returncode == 2 and "is a verifier key" in r.stderr


def test_a_legacy_public_key_still_checks_old_seals_in_replay(tmp_path):
    from journal.seal import generate_keypair

    v = copy_example(tmp_path / "v")
    generate_keypair(tmp_path / "seal.pem", tmp_path / "seal.pub")
    assert broker("seal", "--vault", str(v), "--key", str(tmp_path / "seal.pem")).returncode == 0
    r = broker("replay", "--vault", str(v), SESSION, "--seal-key", str(tmp_path / "seal.pub"))
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("content", [b"", b"\xff\xfe\x00binary", b"PRIVATE+KEY+x+00000000+AAAA\n", b"a+b+c\n"])
def test_the_parser_refuses_what_is_not_a_key_with_a_note_error(tmp_path, content):
    """The library side of the same rule: every loader raises NoteError (a BrokerError), nothing else."""
    from journal.checkpoint.keys import any_signer, any_verifier, load_signer, load_verifier
    from journal.errors import BrokerError

    path = tmp_path / "k"
    path.write_bytes(content)
    for parse in (any_signer, any_verifier, load_signer, load_verifier):
        with pytest.raises(BrokerError) as caught:
            parse(str(path))
        assert "\n" not in str(caught.value) and str(path) in str(caught.value)
