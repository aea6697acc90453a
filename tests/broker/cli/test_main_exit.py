"""`broker` (broker.cli.main.main) exits with the command's code, its objects frozen first: the interpreter's
exit then leaves them out of its garbage collections (about 10 ms of a short command's run)."""

from __future__ import annotations

import gc
import sys

import pytest

from broker.cli.main import main
from journal.vault import Vault


@pytest.mark.parametrize("argv, code", [(["verify"], 0), (["verify", "no-such-session"], 2)])
def test_main_exits_with_the_commands_code_its_objects_frozen(tmp_path, monkeypatch, capsys, argv, code):
    Vault.create(tmp_path / "vault")
    monkeypatch.setattr(sys, "argv", ["broker", *argv, "--vault", str(tmp_path / "vault")])
    gc.unfreeze()
    try:
        with pytest.raises(SystemExit) as exc:
            main()
        assert exc.value.code == code
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    out = capsys.readouterr()
    assert ("no sessions in" in out.out) if code == 0 else out.err.startswith("broker: error:")
