"""`broker show --seq N` (a process) through the writer's seq sidecar: a sidecar that points at another line,
a sidecar that is a symlink to a forged one, a truncated one, and one beside a tampered session all give the
entry the file holds for seq N, or no entry, exactly as with no sidecar at all (issue 26)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson

from journal.seq_sidecar import RECORD_SIZE, STRIDE, sidecar_name
from journal.vault import Vault
from journal.writer import JournalWriter
from tests.support.journal_factories import fields

ROOT = Path(__file__).resolve().parents[2]


def _show(vault: Path, seq: int, cache: Path) -> tuple[int, str]:
    r = subprocess.run([sys.executable, "-m", "broker.cli", "show", "s", "--seq", str(seq), "--json", "--vault",
                        str(vault)], capture_output=True, text=True, cwd=ROOT, timeout=120,
                       env={**os.environ, "NO_COLOR": "1", "XDG_CACHE_HOME": str(cache)})
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, r.stdout


def test_show_seq_through_hostile_sidecars(tmp_path):
    vault = Vault.create(tmp_path / "v")
    with JournalWriter(vault, durable=False) as w:
        for k in range(0, 2 * STRIDE + 10, 50):
            w.append_many([fields("s", n=i) for i in range(k, min(2 * STRIDE + 10, k + 50))])
    side = vault.journal_dir / sidecar_name("s.jsonl")
    lines = vault.session_path("s").read_bytes().splitlines()
    seq = 2 * STRIDE + 5
    code, out = _show(vault.root, seq, tmp_path / "c0")
    assert code == 0 and orjson.loads(out) == orjson.loads(lines[seq - 1])

    good = side.read_bytes()
    wrong = bytearray(good)
    offset = sum(len(x) + 1 for x in lines[: STRIDE + 5])
    wrong[RECORD_SIZE * 3 + 8 : RECORD_SIZE * 4] = offset.to_bytes(8, "little")
    side.write_bytes(bytes(wrong))  # record 2 (seq 2*STRIDE+1) points at the line of seq STRIDE+6
    assert _show(vault.root, seq, tmp_path / "c1") == (code, out)

    side.write_bytes(good[: RECORD_SIZE * 2 + 5])  # truncated mid-record
    assert _show(vault.root, seq, tmp_path / "c2") == (code, out)

    forged = tmp_path / "forged.seqidx"
    forged.write_bytes(bytes(wrong))
    side.unlink()
    side.symlink_to(forged)  # a link to a forged sidecar outside the vault: not followed
    assert _show(vault.root, seq, tmp_path / "c3") == (code, out)
    side.unlink()
    side.write_bytes(good)

    del lines[STRIDE + 3]  # tampered: a line removed; the sidecar's offsets now point elsewhere
    vault.session_path("s").write_bytes(b"\n".join(lines) + b"\n")
    with_sidecar = _show(vault.root, seq, tmp_path / "c4")
    side.unlink()
    assert with_sidecar == _show(vault.root, seq, tmp_path / "c5")
    assert with_sidecar[0] == 0 and orjson.loads(with_sidecar[1])["seq"] == seq
    assert _show(vault.root, STRIDE + 4, tmp_path / "c6")[0] != 0  # seq STRIDE+4 is nowhere now
