"""What `broker show`, `sessions` and `verify` load, read from the processes themselves (`python -X importtime`
names every module a process imports). tests/test_import_graph.py checks the imports that run at module
level; these also see what the commands' functions import as they run: the seq index, a checkpoint's claims
(the sessions list reads each note), the parse of an entry's time. Start-up is most of what these commands
cost on a small session, and `show --seq N` reads one line whatever N (issue 26)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from journal.checkpoint.note import Signer
from journal.vault import Vault
from tests.support.checkpoint_harness import seal_all, write_session
from tests.test_import_graph import READERS_NEVER_LOAD, SHOW_NEVER_LOADS

ROOT = Path(__file__).resolve().parents[2]
ENTRIES = 300  # past two strides of the writer's seq sidecar (journal/seq_sidecar.py STRIDE 128)


def loaded(python_args: list[str], cache: Path) -> set[str]:
    """The modules a Python process given `python_args` imported."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env["XDG_CACHE_HOME"] = str(cache)  # a reader's own seq index, were one built, goes here
    proc = subprocess.run([sys.executable, "-X", "importtime", *python_args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
            if line.startswith("import time:") and not line.endswith("| imported package")}


def banned(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


@pytest.fixture(scope="module")
def sealed_vault(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file vault with one session of ENTRIES entries, its seq sidecar and a checkpoint."""
    root = tmp_path_factory.mktemp("startup") / "vault"
    vault = Vault.create(root)
    write_session(vault, "s", ENTRIES)
    seal_all(vault, Signer.generate("vault.example/log"))
    return root


def test_the_reading_sees_what_a_process_imports(tmp_path):
    got = loaded(["-c", "import journal.redact"], tmp_path)
    assert "journal.redact" in got and "re" in got
    assert banned(got, ("journal",)) and not banned(got, ("mitmproxy",))


@pytest.mark.parametrize("args", [["--seq", str(ENTRIES)], ["--seq", "1"], [], ["--json"]])
def test_show_loads_no_verifier_no_canonical_form_and_no_strptime(sealed_vault, tmp_path, args):
    got = loaded(["-m", "broker.cli", "show", "s", "--vault", str(sealed_vault), *args], tmp_path)
    assert "journal.reader" in got
    assert banned(got, SHOW_NEVER_LOADS + ("_strptime",)) == []


def test_verify_and_sessions_of_a_sealed_vault_load_no_cryptography(sealed_vault, tmp_path):
    """No key given: the checkpoint is not checked, and the sessions list reads what it claims without
    cryptography (journal/checkpoint/note.py imports it where a key or a signature is used)."""
    for command in ("verify", "sessions"):
        got = loaded(["-m", "broker.cli", command, "--vault", str(sealed_vault)], tmp_path)
        assert "journal.verify" in got
        allowed = ("journal.checkpoint",) if command == "sessions" else ()
        assert banned(got, tuple(n for n in READERS_NEVER_LOAD if n not in allowed)) == [], command
    assert "journal.checkpoint.claims" in got  # the sessions list did read the checkpoint
