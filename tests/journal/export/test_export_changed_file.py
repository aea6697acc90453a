"""An export states the verifier's verdict, then reads the session file again (once or twice): whoever can
write the vault can change the file in between. An export must not say "intact" over entries the verifier did
not check (fixture.py `iter_session_entries(verified=...)`); a session that only grew since is exported as
before."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import orjson
import pytest

from broker.cli import cli
from broker.cli.exit_codes import run_cli
from journal.chain import chain_entry
from journal.export import fixture, har, otel, vcr
from journal.export.fixture import SessionChanged
from journal.playback import RecordedSession
from journal.vault import Vault
from tests.support.export_factories import generated_session, http_fields

N = 40


@pytest.fixture
def vault(tmp_path) -> Path:
    generated_session(tmp_path, N)
    return tmp_path


def _path(root: Path) -> Path:
    return Vault(root).session_path("big")


def _edit_in_place(root: Path) -> None:
    """Line 10's body changed, same size, its hash not recomputed."""
    path = _path(root)
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    assert b'"id":10,' in lines[9]
    lines[9] = lines[9].replace(b'"id":10,', b'"id":99,', 1)
    with open(path, "r+b") as f:
        f.write(b"".join(lines))


def _rewrite_chain(root: Path) -> None:
    """Every entry from line 10 on rewritten with its hash recomputed: a chain that holds, not the one verified."""
    path = _path(root)
    lines = path.read_bytes().splitlines(keepends=True)
    prev = orjson.loads(lines[8])["hash"]
    for i in range(9, len(lines)):
        entry = orjson.loads(lines[i])
        fields = {k: v for k, v in entry.items() if k not in ("seq", "prev", "hash")} | {"agent": "someone-else"}
        entry, lines[i] = chain_entry(fields, entry["seq"], prev)
        prev = entry["hash"]
    path.write_bytes(b"".join(lines))


def _append(root: Path) -> None:
    """One more entry chained onto the end: the session grew, nothing verified changed."""
    path = _path(root)
    last = orjson.loads(path.read_bytes().splitlines()[-1])
    with open(path, "ab") as f:
        f.write(chain_entry(http_fields(N + 1), N + 1, last["hash"])[1])


EXPORTS = {
    "fixture": lambda root: fixture.build_fixture(root, "big"),
    "har": lambda root: b"".join(har.har_chunks(root, "big")),
    "otel": lambda root: b"".join(otel.otlp_chunks(root, "big")),
    "vcr-chunks": lambda root: b"".join(vcr.cassette_chunks(root, "big")),
    "vcr": lambda root: vcr.build_cassette(root, "big"),
    "playback": lambda root: RecordedSession.load(str(root), "big"),
}
MODULES = {"fixture": fixture, "har": har, "otel": otel, "vcr-chunks": vcr, "vcr": vcr,
           "playback": importlib.import_module("journal.playback")}


def _after_verify(monkeypatch, module, change) -> None:
    real = module.verify_session

    def verify_then_change(*args, **kwargs):
        report = real(*args, **kwargs)
        change()
        return report

    monkeypatch.setattr(module, "verify_session", verify_then_change)


@pytest.mark.parametrize("kind", sorted(EXPORTS))
@pytest.mark.parametrize("change", [_edit_in_place, _rewrite_chain])
def test_a_file_changed_after_the_verifier_read_it_is_refused(vault, monkeypatch, kind, change):
    EXPORTS[kind](vault)  # the unchanged session exports
    _after_verify(monkeypatch, MODULES[kind], lambda: change(vault))
    with pytest.raises(SessionChanged, match="changed while it was exported"):
        EXPORTS[kind](vault)


@pytest.mark.parametrize("kind", sorted(EXPORTS))
def test_a_session_that_grew_after_the_verifier_read_it_exports(vault, monkeypatch, kind):
    _after_verify(monkeypatch, MODULES[kind], lambda: _append(vault))
    EXPORTS[kind](vault)


def test_the_cli_writes_no_file_and_says_why(vault, monkeypatch, tmp_path, capsys):
    _after_verify(monkeypatch, har, lambda: _edit_in_place(vault))
    out = tmp_path / "s.har"
    monkeypatch.setattr(sys, "argv", ["broker", "export", "big", "--vault", str(vault), "--format", "har",
                                      "--out", str(out)])
    assert run_cli(cli) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("broker: error: session 'big' changed while it was exported")
    assert not out.exists() and not list(tmp_path.glob(".s.har.*"))


def test_otlp_send_delivers_no_span_of_a_file_changed_between_its_passes(tmp_path, monkeypatch):
    """(the attacker, as whoever can write the vault) The session is rewritten with recomputed hashes after the
    pass that checks it against the verifier's head and before the pass that makes the spans sent as it goes."""
    from journal.export.otlp_send import otlp_batches, send_otlp
    from tests.support.otlp_collector import otlp_collector

    generated_session(tmp_path, 1200)  # three batches of 512 spans
    real = otel.iter_session_entries

    def counted_then_changed(*args, **kwargs):
        yield from real(*args, **kwargs)
        _rewrite_chain(tmp_path)  # what an adversary watching the file does when the count pass is done

    monkeypatch.setattr(otel, "iter_session_entries", counted_then_changed)
    with otlp_collector() as collector:
        with pytest.raises(SessionChanged):
            send_otlp(collector.url, otlp_batches(tmp_path, "big"))
    assert not any(b"someone-else" in body for _, _, body in collector.requests), \
        f"{len(collector.requests)} batches of the rewritten chain were delivered as 'intact'"


def test_a_later_pass_holds_back_no_more_than_the_entries_between_two_marks(tmp_path, monkeypatch):
    """The pass after a verified one lets each entry go once the chain reaches the next mark, not at the end:
    memory and the first batch's wait stay bounded whatever the session's size."""
    generated_session(tmp_path, 700)
    vault = Vault(tmp_path)
    report = fixture.verify_session(vault, "big").as_dict()
    tally = fixture.EntryTally()
    assert sum(1 for _ in fixture.iter_session_entries(vault, "big", tally=tally, verified=report)) == 700
    assert [n for n, _ in tally.marks] == [fixture.MARK_EVERY, 2 * fixture.MARK_EVERY]
    read = 0
    real_lines = fixture.session_lines

    def counted_lines(*args, **kwargs):
        nonlocal read
        for line in real_lines(*args, **kwargs):
            read += 1
            yield line

    monkeypatch.setattr(fixture, "session_lines", counted_lines)
    seen = []
    for k, entry in enumerate(fixture.counted_entries(vault, "big", tally, report), 1):
        assert entry["seq"] == k
        seen.append(read - k)  # lines read ahead of the entry handed out
    assert len(seen) == 700
    assert max(seen) < fixture.MARK_EVERY
    assert seen[0] == fixture.MARK_EVERY - 1  # the first entry waits for the first mark


def test_otlp_send_delivers_the_verified_batches_and_nothing_after_a_rewrite_past_them(tmp_path, monkeypatch):
    """Rewritten from entry 700 on, after the count pass: the batches of entries shown to be verified (up to the
    last mark before 700) may go; not one span of the rewritten part does."""
    from journal.export.otlp_send import otlp_batches, send_otlp
    from tests.support.otlp_collector import otlp_collector

    generated_session(tmp_path, 1200)
    real = otel.iter_session_entries

    def counted_then_changed(*args, **kwargs):
        yield from real(*args, **kwargs)
        path = _path(tmp_path)
        lines = path.read_bytes().splitlines(keepends=True)
        prev = orjson.loads(lines[698])["hash"]
        for i in range(699, len(lines)):
            entry = orjson.loads(lines[i])
            fields = {k: v for k, v in entry.items() if k not in ("seq", "prev", "hash")} | {"agent": "someone-else"}
            entry, lines[i] = chain_entry(fields, entry["seq"], prev)
            prev = entry["hash"]
        path.write_bytes(b"".join(lines))

    monkeypatch.setattr(otel, "iter_session_entries", counted_then_changed)
    with otlp_collector() as collector:
        with pytest.raises(SessionChanged):
            send_otlp(collector.url, otlp_batches(tmp_path, "big", max_spans=100))
    assert collector.requests, "the batches of verified entries before the change were held back too"
    assert not any(b"someone-else" in body for _, _, body in collector.requests)
