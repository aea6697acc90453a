"""Many small sessions shared out among forked processes give the very reports of one process."""

from __future__ import annotations

import os
from dataclasses import asdict

import pytest

from journal import vault_verify
from journal.forked_call import ForkedCall
from journal.vault import Vault
from journal.vault_verify import verify_sessions
from journal.verify import verify_session
from tests.support.checkpoint_harness import write_session

pytestmark = pytest.mark.usefixtures("only_main_thread")


def _vault(tmp_path) -> Vault:
    """Nine sessions: intact ones of different sizes, an edited line, a removed line, a torn tail."""
    vault = Vault.create(tmp_path / "v")
    for i in range(9):
        write_session(vault, f"s{i}", 3 + 7 * i)
    edited = vault.session_path("s2")
    edited.write_bytes(edited.read_bytes().replace(b'"seq":5', b'"seq":6', 1))
    lines = vault.session_path("s5").read_bytes().splitlines(keepends=True)
    vault.session_path("s5").write_bytes(b"".join(lines[:10] + lines[11:]))
    torn = vault.session_path("s7")
    torn.write_bytes(torn.read_bytes()[:-40])
    return vault


class _Counting(ForkedCall):
    started = 0

    def __init__(self, fn) -> None:
        type(self).started += 1
        super().__init__(fn)


@pytest.fixture
def counting(monkeypatch):
    monkeypatch.setattr(vault_verify, "ForkedCall", _Counting)
    _Counting.started = 0
    return _Counting


@pytest.mark.parametrize("workers", [2, 3, 16])
def test_shared_out_reports_equal_one_process(tmp_path, counting, workers):
    vault = _vault(tmp_path)
    names = vault.sessions()
    serial = [asdict(verify_session(vault, s)) for s in names]
    assert [r["intact"] for r in serial].count(False) == 3  # the tampering took
    assert [asdict(r) for r in verify_sessions(vault, names, workers=workers)] == serial
    assert counting.started == min(workers, len(names)) - 1


def test_order_and_repeats_follow_the_caller(tmp_path, counting):
    vault = _vault(tmp_path)
    names = ["s8", "s0", "s8", "s3"]
    assert [r.session for r in verify_sessions(vault, names, workers=2)] == names


def test_a_failing_child_leaves_its_share_to_the_parent(tmp_path, counting, monkeypatch):
    vault = _vault(tmp_path)
    parent = os.getpid()
    real = vault_verify._verify_share

    def fails_in_child(v, share, kw):
        if os.getpid() != parent:
            raise RuntimeError("child failed on purpose")
        return real(v, share, kw)

    monkeypatch.setattr(vault_verify, "_verify_share", fails_in_child)
    names = vault.sessions()
    assert [asdict(r) for r in verify_sessions(vault, names, workers=3)] == [
        asdict(verify_session(vault, s)) for s in names
    ]
    assert counting.started == 2


def test_by_default_small_vaults_and_progress_stay_in_one_process(tmp_path, counting, monkeypatch):
    vault = _vault(tmp_path)
    names = vault.sessions()
    verify_sessions(vault, names)  # far below MIN_WORKER_BYTES in all
    assert counting.started == 0
    monkeypatch.setattr(vault_verify, "MIN_WORKER_BYTES", 1)
    monkeypatch.setattr(vault_verify, "usable_cpus", lambda: 2)
    verify_sessions(vault, names, progress=lambda n: None)  # a child's progress would be lost
    assert counting.started == 0
    verify_sessions(vault, names)
    assert counting.started == 1


def test_a_session_that_is_not_there_gets_the_verifiers_error(tmp_path, counting):
    from journal.vault import VaultError

    vault = _vault(tmp_path)
    with pytest.raises(VaultError) as serial:
        verify_session(vault, "gone")
    with pytest.raises(VaultError) as shared:
        verify_sessions(vault, ["s1", "gone", "s3", "s4"], workers=2)
    assert str(shared.value) == str(serial.value)
