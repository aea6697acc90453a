"""Every reader works on a vault mounted read-only, and writes nothing into a vault it can write (issue 26).

The tests run as root, for whom `chmod -R a-w` changes nothing: the vault is made read-only for real with a
read-only bind mount in a private mount namespace (`unshare -m`), where a write fails with EROFS whoever
makes it. Each reader runs inside that namespace; what it derives (views, seq indexes, replay's scratch)
goes to the user's cache (XDG_CACHE_HOME) or --out.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from journal.seq_sidecar import rebuild as rebuild_sidecar
from journal.vault import Vault
from tests.support.example_vault import SESSION, copy_example

ROOT = Path(__file__).resolve().parents[2]


def _can_mount_read_only(tmp_path: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    (tmp_path / "probe-src").mkdir()
    (tmp_path / "probe-dst").mkdir()
    script = (f"mount --bind {tmp_path / 'probe-src'} {tmp_path / 'probe-dst'} && "
              f"mount -o remount,bind,ro {tmp_path / 'probe-dst'} && ! touch {tmp_path / 'probe-dst' / 'x'}")
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], capture_output=True)
    return r.returncode == 0


@pytest.fixture
def ro_vault(tmp_path: Path) -> tuple[Path, Path]:
    """(source vault, the path where it is mounted read-only inside each reader's namespace)."""
    if not _can_mount_read_only(tmp_path):
        pytest.skip("no private mount namespace here (needs unshare -m and CAP_SYS_ADMIN)")
    src = copy_example(tmp_path / "vault")
    rebuild_sidecar(Vault.open_existing(src), SESSION)  # the writer's seq sidecar, read (never written) by readers
    keys = subprocess.run([sys.executable, "-m", "broker.cli", "keygen", "--out", str(tmp_path / "keys")],
                          capture_output=True, text=True, cwd=ROOT)
    assert keys.returncode == 0, keys.stderr
    sealed = subprocess.run([sys.executable, "-m", "broker.cli", "seal", "--vault", str(src), "--key",
                             str(tmp_path / "keys" / "seal-key.key")], capture_output=True, text=True, cwd=ROOT)
    assert sealed.returncode == 0, sealed.stderr
    mount = tmp_path / "ro"
    mount.mkdir()
    return src, mount


def _in_read_only(src: Path, mount: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = shlex.join([sys.executable, "-m", "broker.cli", *args])
    script = f"mount --bind {shlex.quote(str(src))} {shlex.quote(str(mount))} && " \
             f"mount -o remount,bind,ro {shlex.quote(str(mount))} && exec {cmd}"
    env = {**os.environ, "NO_COLOR": "1", "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=300)


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


READERS = [
    ("verify",), ("verify", "--seal-key", "{vkey}"), ("sessions",), ("show", SESSION), ("show", SESSION, "--seq", "9"),
    ("search", "--connector", "gmail"), ("replay", SESSION), ("replay", SESSION, "--out", "{out}"),
    ("revert-plan", SESSION), ("trajectory", SESSION), ("diff", SESSION, SESSION),
    ("export", SESSION, "--format", "har"), ("export", SESSION, "--format", "otel"),
    ("export", SESSION, "--format", "vcr"), ("export", SESSION, "--format", "fixture"),
    ("prove", SESSION, "3"),
]


@pytest.mark.parametrize("args", READERS, ids=lambda a: "-".join(a[:3]))
def test_every_reader_works_on_a_read_only_mount(ro_vault, tmp_path, args):
    src, mount = ro_vault
    before = _tree(src)
    filled = [a.format(vkey=tmp_path / "keys" / "seal-key.vkey", out=tmp_path / "out") for a in args]
    r = _in_read_only(src, mount, tmp_path, *filled, "--vault", str(mount))
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    assert "Errno 30" not in r.stderr and "Read-only" not in r.stderr
    assert _tree(src) == before  # and nothing was written through another path either
    if args[0] == "replay":
        out = tmp_path / "out" if "--out" in args else tmp_path / "cache" / "broker" / "views"
        assert list(out.rglob("index.md")), r.stderr
        if "--out" not in args:
            assert "views go to" in r.stderr


def test_the_inspector_answers_on_a_read_only_mount(ro_vault, tmp_path):
    """The inspector's pages, entry, verdict, views and revert-plan tab on a read-only vault."""
    src, mount = ro_vault
    script = (
        "import sys\n"
        "from starlette.testclient import TestClient\n"
        "from broker.inspector import create_app\n"
        "from journal.vault import Vault\n"
        f"c = TestClient(create_app(Vault.open_existing({str(mount)!r})), base_url='http://127.0.0.1')\n"
        f"s = {SESSION!r}\n"
        "for path in ('/api/sessions', f'/api/session/entries?session={s}&from=1&limit=5',\n"
        "             f'/api/session/entry?session={s}&seq=9', f'/api/session/verdict?session={s}',\n"
        "             f'/api/session/revert-plan?session={s}', f'/api/session/views?session={s}'):\n"
        "    r = c.get(path)\n"
        "    for _ in range(120):  # a replay is folded in the background: 202 until it is done\n"
        "        if r.status_code != 202:\n"
        "            break\n"
        "        r = c.get(path)\n"
        "    assert r.status_code == 200, (path, r.status_code, r.text[:300])\n"
        "print('ok')\n"
    )
    r = _in_read_only(src, mount, tmp_path, "--version")  # the namespace works for a plain command
    assert r.returncode == 0, r.stderr
    cmd = shlex.join([sys.executable, "-c", script])
    sh = f"mount --bind {shlex.quote(str(src))} {shlex.quote(str(mount))} && " \
         f"mount -o remount,bind,ro {shlex.quote(str(mount))} && exec {cmd}"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", sh], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr
