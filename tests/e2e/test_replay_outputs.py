"""Replay's outputs, byte for byte, on generated sessions: the same bytes whatever path produced them.

The digests in tests/support/vectors/replay_outputs.json were taken from replay before its speed work (the
serial fold behind the verifier, every view written by one process, an 8,192-resource cache).
Each scenario here must give exactly those bytes: with the verifier and part of the views in forked
children or without any fork, with a cache so small that resources go through the serialized cache
and the spill store, after a chain break (edited, removed, an unreadable line), and when a child fails
(the parent then does its work itself).

A deliberate change of the outputs regenerates the file: `python -m tests.e2e.test_replay_outputs --write`.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import orjson
import pytest

from bench.replay_bench import SESSION, build_session
from journal.replay import fold, forked, replay_session, write_outputs
from journal.vault import Vault

pytestmark = pytest.mark.usefixtures("only_main_thread")

VECTORS = Path(__file__).resolve().parents[1] / "support" / "vectors" / "replay_outputs.json"
ENTRIES, RESOURCES = 3000, 300


def _session(root: Path, variant: str) -> Path:
    """The benchmark's synthetic session (3,000 entries over 300 resources per pool), maybe tampered."""
    build_session(root, ENTRIES, RESOURCES)
    path = Vault(root).session_path(SESSION)
    lines = path.read_bytes().splitlines(keepends=True)
    if variant == "edited":  # line 1500's content changed, its hash not: the chain breaks there
        assert b'"bench-agent"' in lines[1499]
        lines[1499] = lines[1499].replace(b'"bench-agent"', b'"bench-agEnt"', 1)
    elif variant == "removed":  # seq 2001 removed, an unreadable line near the end
        lines = lines[:2000] + lines[2001:2990] + [b"garbage\n"] + lines[2990:]
    path.write_bytes(b"".join(lines))
    return root


def _digests(folder: Path) -> dict[str, str]:
    """sha256 of each summary file and one over all resource notes (name and bytes, in name order)."""
    out: dict[str, str] = {}
    notes = hashlib.sha256()
    count = 0
    for p in sorted(folder.iterdir()):
        data = p.read_bytes()
        if p.name.startswith("timeline-") or p.name in ("index.md", "revert-plan.md", "revert-plan.json",
                                                        "views.json"):
            out[p.name] = hashlib.sha256(data).hexdigest()
        else:
            notes.update(p.name.encode() + b"\0" + hashlib.sha256(data).digest())
            count += 1
    out["notes"] = f"{count} {notes.hexdigest()}"
    return out


def _replay(root: Path) -> dict[str, str]:
    vault = Vault.open_existing(root)
    rp = replay_session(vault, SESSION)
    folder, _ = write_outputs(vault, rp)
    rp.close()
    return _digests(folder)


def _expected(variant: str) -> dict[str, str]:
    return orjson.loads(VECTORS.read_bytes())[variant]


def _revert_plan_cli(root: Path, *args: str) -> tuple[int, str, str]:
    """(exit code, sha256 of stdout and stderr, stdout's first line) of `broker revert-plan` on the session, in
    process (any scratch in a cache folder beside the vault)."""
    from click.testing import CliRunner

    from broker.cli.main import cli

    env = {"XDG_CACHE_HOME": str(root.parent / "cache"), "NO_COLOR": "1"}
    result = CliRunner().invoke(cli, ["revert-plan", "--vault", str(root), SESSION, *args], env=env,
                                standalone_mode=False)
    assert result.exception is None, result.exception
    out = result.stdout_bytes
    digest = hashlib.sha256(out + b"\0" + result.stderr_bytes).hexdigest()
    return result.return_value, digest, out.decode().partition("\n")[0][:200]


def _revert_plan_digests(root: Path) -> dict[str, object]:
    """What `broker revert-plan` prints, as JSON and as text, and with --require-intact (refused when broken)."""
    out: dict[str, object] = {}
    for name, args in (("json", ["--json"]), ("text", []), ("require-intact", ["--require-intact", "--json"])):
        code, digest, _ = _revert_plan_cli(root, *args)
        out[name] = [code, digest]
    return out


@pytest.mark.parametrize("variant", ["intact", "edited", "removed"])
def test_outputs_match_the_serial_replay(tmp_path, variant):
    assert _replay(_session(tmp_path / "v", variant)) == _expected(variant)


@pytest.mark.parametrize("variant", ["intact", "edited", "removed"])
def test_revert_plan_prints_the_same_bytes(tmp_path, variant):
    """`broker revert-plan` (which folds for the plan alone, writing no view) prints what it printed when it
    folded every view into the spill store: --json, the text listing, and --require-intact on a broken chain
    (refused, exit 1) as before. The digests were taken from the revision before the plan-only fold."""
    root = _session(tmp_path / "v", variant)
    assert _revert_plan_digests(root) == orjson.loads(VECTORS.read_bytes())["revert-plan"][variant]


def test_without_a_fork_and_with_a_tiny_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(forked, "ENABLED", False)
    monkeypatch.setattr(fold.Folder, "CACHE", 7)  # most resources are folded frozen and thawed again
    assert _replay(_session(tmp_path / "v", "intact")) == _expected("intact")


@pytest.mark.parametrize("variant", ["intact", "edited", "removed"])
def test_the_plan_alone_is_the_plan_of_the_views(tmp_path, variant):
    """A fold for the plan alone (views=False) gives the very plan the full replay gives and writes no entry,
    touch, write or resource row; asking it for views fails with a message instead of giving nothing."""
    from journal.replay import plan_dict
    from journal.replay.plan import plan_json

    root = _session(tmp_path / "v", variant)
    vault = Vault.open_existing(root)
    full = replay_session(vault, SESSION)
    alone = replay_session(vault, SESSION, views=False)
    assert plan_dict(alone) == plan_dict(full) and len(plan_dict(alone)["steps"]) > 500
    assert b"".join(plan_json(alone)) == orjson.dumps(plan_dict(full))
    assert alone.unreadable == full.unreadable and alone.counts.resources == full.counts.resources
    for table in ("entries", "touches", "writes", "lifecycle", "resources"):
        assert alone.store.one(f"SELECT COUNT(*) FROM {table}") == (0,)
    with pytest.raises(ValueError, match="revert plan alone"):
        write_outputs(vault, alone)
    with pytest.raises(ValueError, match="revert plan alone"):
        len(alone.entries)
    full.close()
    alone.close()


def test_failing_children_leave_their_work_to_the_parent(tmp_path, monkeypatch):
    """Each forked child raises before doing anything: the parent folds serially and writes every view."""
    started = []
    real = forked.start

    def failing(work, store=None):
        def fail() -> bytes:
            raise RuntimeError("child failed on purpose")

        child = real(fail, store)
        started.append(child is not None)
        return child

    monkeypatch.setattr(forked, "start", failing)
    assert _replay(_session(tmp_path / "v", "intact")) == _expected("intact")
    # the verifier's child, the fold's partner (split.py) and the views' child all ran (and failed)
    assert started == [True, True, True]


def test_the_forked_path_is_taken(tmp_path, monkeypatch):
    calls = []
    real = forked.start
    monkeypatch.setattr(forked, "start", lambda work, store=None: calls.append(store is not None) or real(work, store))
    _replay(_session(tmp_path / "v", "intact"))
    assert calls == [False, False, True]  # the verifier and the fold's partner (no store), then the views


def test_the_split_fold_is_the_serial_fold(tmp_path, monkeypatch):
    """The fold split by connector between two processes (split.py) gives the serial fold's bytes, and it
    is the path taken: this process passed over the partner's entries."""
    root = _session(tmp_path / "v", "intact")
    passed = []
    real = fold.Folder.pass_over
    monkeypatch.setattr(fold.Folder, "pass_over", lambda self, entry, pos: passed.append(pos) or real(self, entry, pos))
    assert _replay(root) == _expected("intact")
    assert 0 < len(passed) < ENTRIES  # each process folded a share
    monkeypatch.setattr(fold, "SPLIT", False)
    assert _replay(root) == _expected("intact")


def test_the_partners_store_is_removed_once_absorbed(tmp_path, monkeypatch):
    """The partner's share of the fold (a whole SQLite database) is not kept beside the absorbed rows for as long
    as the Replay lives: its folder inside the replay's scratch folder is gone once the fold is done."""
    root = _session(tmp_path / "v", "intact")
    passed = []
    real = fold.Folder.pass_over
    monkeypatch.setattr(fold.Folder, "pass_over", lambda self, entry, pos: passed.append(pos) or real(self, entry, pos))
    rp = replay_session(Vault.open_existing(root), SESSION)
    try:
        assert passed  # the split fold ran
        assert [p.name for p in rp.store.dir.iterdir() if p.is_dir()] == []
    finally:
        rp.close()


def test_shares_that_share_a_resource_fall_back_to_the_serial_fold(tmp_path, monkeypatch):
    """The split's premise is that no resource is touched by both shares. Cut the entries by seq instead of
    by connector (every connector's resources end up in both processes): the store refuses the partner's
    rows and the replay folds serially, with the same bytes, instead of merging two half-folded resources."""
    from journal.replay import split

    def by_parity(self, entry):
        return entry["seq"] % 2 == 0

    monkeypatch.setattr(split.Partition, "here", by_parity)
    folded = []
    real = fold.Folder.finish
    monkeypatch.setattr(fold.Folder, "finish", lambda self, report, partner=None: folded.append(partner is not None)
                        or real(self, report, partner))
    assert _replay(_session(tmp_path / "v", "intact")) == _expected("intact")
    assert folded == [True, False]  # the split fold was refused, then the serial one kept


def test_an_interrupted_replay_leaves_no_child_behind(tmp_path, monkeypatch):
    import os

    root = _session(tmp_path / "v", "intact")
    real = fold.Folder.feed

    def feed(self, entry, pos, trusted=True):
        if pos == 100:
            raise KeyboardInterrupt
        real(self, entry, pos, trusted)

    monkeypatch.setattr(fold.Folder, "feed", feed)
    with pytest.raises(KeyboardInterrupt):
        replay_session(Vault.open_existing(root), SESSION)
    with pytest.raises(ChildProcessError):  # the forked verifier was stopped and reaped
        os.waitpid(-1, os.WNOHANG)
    assert [p.name for p in Vault(root).views_dir.iterdir()] == []  # and the spill store removed


def test_a_second_replay_rewrites_only_what_changed(tmp_path):
    """Into a fresh folder every note is written without looking for an earlier one; into the folder of an
    earlier replay a note that already holds its bytes is left alone (its mtime kept) and one that does
    not (same length, other bytes) is rewritten."""
    import os

    root = _session(tmp_path / "v", "intact")
    first = _replay(root)
    folder = next(Vault(root).views_dir.iterdir())
    notes = sorted(p for p in folder.iterdir() if p.suffix == ".md" and not p.name.startswith(("timeline-", "index",
                                                                                              "revert-plan")))
    kept, edited = notes[0], notes[1]
    os.utime(kept, (1_000_000_000, 1_000_000_000))
    data = edited.read_bytes()
    edited.write_bytes(data[:-2] + b"X\n")
    os.utime(edited, (1_000_000_000, 1_000_000_000))
    assert _replay(root) == first == _expected("intact")
    assert kept.stat().st_mtime == 1_000_000_000
    assert edited.read_bytes() == data and edited.stat().st_mtime != 1_000_000_000


def _write(root: Path) -> None:
    out: dict[str, dict] = {"revert-plan": {}}
    for variant in ("intact", "edited", "removed"):
        out[variant] = _replay(_session(root / variant, variant))
        out["revert-plan"][variant] = _revert_plan_digests(root / variant)
    VECTORS.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.e2e.test_replay_outputs --write")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        _write(Path(tmp))
    print(f"wrote {VECTORS}")
