"""`broker` (broker.cli.main.main) exits with the command's code, its objects frozen first: the interpreter's
exit then leaves them out of its garbage collections (about 10 ms of a short command's run)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from journal.vault import Vault

_RUN = ("import atexit, gc, sys; at_start = gc.get_freeze_count(); from broker.cli.main import main; "
        "atexit.register(lambda: print('frozen', gc.get_freeze_count() > at_start + 1000, file=sys.stderr)); main()")
"""The interpreter starts with a few hundred objects frozen; the imports of any command make tens of thousands."""


@pytest.mark.parametrize("argv, code", [(["verify"], 0), (["verify", "no-such-session"], 2)])
def test_main_exits_with_the_commands_code_its_objects_frozen(tmp_path, argv, code):
    Vault.create(tmp_path / "vault")
    proc = subprocess.run([sys.executable, "-c", _RUN, *argv, "--vault", str(tmp_path / "vault")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == code
    assert proc.stderr.splitlines()[-1] == "frozen True"
    assert ("no sessions in" in proc.stdout) if code == 0 else proc.stderr.startswith("broker: error:")
