"""Readers trust nothing: what the vault's writer or the recorded agent chose is shown, never obeyed.

A vault is built as an attacker would: URLs, tool names, connectors, headers, bodies, session names and
verifier details holding terminal sequences (clear the screen, set the title), a carriage return, a line
break followed by a forged `hostile: intact` line, bidirectional overrides, the Unicode line separator, C1
controls and rich markup (`[/]` alone makes rich raise MarkupError). Every text (non-JSON) output of the CLI
must print none of them raw (broker/cli/terminal_text.py says the rule): no ESC, no CR, no line of its own,
no crash, and the escaped text still there, spelled out.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import orjson
import pytest
from click.testing import CliRunner

from broker.cli.exit_codes import run_cli
from broker.cli.main import cli
from broker.proxy.service import Service
from broker.proxy.wire import WholeCall
from journal.errors import InputError
from journal.record import Recorder
from journal.vault import Vault
from tests.support.checkpoint_harness import signer_key_file, write_session
from tests.support.export_factories import chained_session, http_fields
from tests.support.prompt_calls import anthropic_call, gmail_call, send_framed
from tests.support.replay_factories import SessionBuilder

FORGED = "hostile: intact (3 entries)"
LIE = ("\x1b[2J\x1b]0;title\x07\r\n" + FORGED + "\u202egnp.exe\u2069\u2066\u2028\u2029\x85\x9b\x7f"
       "[bold red]x[/][/][link=https://evil.example]y")
"""Every kind of character a terminal obeys, and rich markup."""
NAMED = "named\u202e\u2066\x9b\u2028"
"""A session name: a vault file name may stand for C1 controls, bidi marks and U+2028 (never C0: vault.py)."""
BASE = "https://acme.atlassian.net/rest/api/3/issue/"
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""What no text output may hold raw (its own line breaks aside)."""


def _assert_shown_not_obeyed(output: bytes, *, spelled_out: bool = True) -> str:
    text = output.decode("utf-8")
    assert not RAW.search(text), repr(text)
    assert not any(line.startswith(FORGED) for line in text.split("\n")), repr(text)
    if spelled_out:
        assert "\\x1b[2J" in text and "\\r\\n" in text and "\\u202e" in text and "[/][/]" in text, repr(text)
    return text


def _run(*args: str, ok: tuple[int, ...] = (0,)) -> tuple[bytes, bytes]:
    """`broker ARGS` in this process: (stdout, stderr), its exit code (what run_cli returns) one of `ok`."""
    result = CliRunner().invoke(cli, list(args), standalone_mode=False)
    assert result.exception is None, result.exception
    assert (result.return_value or 0) in ok, (result.return_value, result.output)
    return result.stdout_bytes, result.stderr_bytes


@pytest.fixture(scope="module")
def vault(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile") / "v"
    with SessionBuilder(root, "hostile") as s:
        s.get(BASE + "PRJ-1?q=" + LIE, {"key": "PRJ-1", "summary": LIE}, connector="jira",
              headers=[("X-Note" + LIE, LIE)])  # 1
        s.put(BASE + "PRJ-1/" + LIE, {"summary": LIE}, {"key": "PRJ-1", "summary": LIE}, connector="jira")  # 2
        s.delete(BASE + LIE, connector="jira")  # 3
        s.mcp_tool("notes", "delete" + LIE, {"q": LIE}, {"r": LIE}, effect="write")  # 4
    # What no capture point would write, the vault's writer may: a connector, an effect, a capture, an agent.
    forged = {**http_fields(1, url=BASE + LIE), "connector": "c" + LIE, "effect": "e" + LIE, "capture": LIE,
              "agent": LIE}
    forged["request"]["method"] = "M" + LIE
    forged["response"]["status"] = LIE
    chained_session(root, "other", [forged])
    write_session(Vault.open_existing(root), NAMED, 2)
    # A broken session whose verifier detail quotes the writer's lie (a seq that is a string).
    chained_session(root, "broken", [http_fields(n, url=BASE + LIE) for n in (1, 2, 3)])
    path = Vault.open_existing(root).session_path("broken")
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"seq":2', b'"seq":' + orjson.dumps("2" + LIE), 1)
    path.write_bytes(b"".join(lines))
    # A model call asking for a tool whose name and arguments are the lie, then a call carrying nothing out.
    svc = Service(Recorder(root))
    send_framed(svc, WholeCall(1, anthropic_call("model", "full", 1, tool=("t" + LIE, {"q": LIE}))))
    send_framed(svc, WholeCall(2, gmail_call("model", 2, mode="full")))
    return root


def test_show_timeline(vault: Path) -> None:
    out, _ = _run("show", "--vault", str(vault), "hostile")
    text = _assert_shown_not_obeyed(out)
    assert len(text.rstrip("\n").split("\n")) == 4, text  # one line per entry, columns intact


@pytest.mark.parametrize("seq", ["1", "4"])
def test_show_one_entry_keeps_its_json_readable(vault: Path, seq: str) -> None:
    out, _ = _run("show", "--vault", str(vault), "hostile", "--seq", seq)
    text = _assert_shown_not_obeyed(out)
    as_json, _ = _run("show", "--vault", str(vault), "hostile", "--seq", seq, "--json")
    assert orjson.loads(text.split("\n", 1)[1]) == orjson.loads(as_json)  # the entry below its line: the same JSON


def test_search(vault: Path) -> None:
    out, err = _run("search", "--vault", str(vault))
    text = _assert_shown_not_obeyed(out)
    _assert_shown_not_obeyed(err, spelled_out=False)
    assert "\\u202e\\u2066\\x9b\\u2028" in text  # the session name, spelled out


def test_sessions(vault: Path) -> None:
    out, _ = _run("sessions", "--vault", str(vault))
    text = _assert_shown_not_obeyed(out, spelled_out=False)
    assert "\\u202e\\u2066\\x9b\\u2028" in text


def test_revert_plan(vault: Path) -> None:
    out, _ = _run("revert-plan", "--vault", str(vault), "hostile")
    text = _assert_shown_not_obeyed(out)
    assert "revert plan for hostile" in text


def test_revert_plan_and_replay_of_a_broken_chain(vault: Path, tmp_path: Path) -> None:
    out, _ = _run("revert-plan", "--vault", str(vault), "broken", ok=(1,))
    assert "WARNING: chain broken at seq 2" in _assert_shown_not_obeyed(out)
    out, err = _run("replay", "--vault", str(vault), "broken", "--out", str(tmp_path / "views"), ok=(1,))
    assert "WARNING: chain broken at seq 2" in _assert_shown_not_obeyed(out)
    _assert_shown_not_obeyed(err, spelled_out=False)


def test_replay_of_a_session_named_with_bidi_and_c1(vault: Path, tmp_path: Path) -> None:
    out, _ = _run("replay", "--vault", str(vault), NAMED, "--out", str(tmp_path / "views"))
    _assert_shown_not_obeyed(out, spelled_out=False)


def test_trajectory(vault: Path) -> None:
    out, _ = _run("trajectory", "--vault", str(vault), "model")
    text = _assert_shown_not_obeyed(out)
    assert "asked t\\x1b[2J" in text


def test_diff(vault: Path) -> None:
    out, _ = _run("diff", "--vault", str(vault), "hostile", "other", ok=(1,))
    _assert_shown_not_obeyed(out)
    out, _ = _run("diff", "--vault", str(vault), "hostile", NAMED, ok=(1,))
    _assert_shown_not_obeyed(out)


def test_publish_of_a_broken_session(vault: Path, tmp_path: Path) -> None:
    _, key = signer_key_file(tmp_path, "k")
    out, _ = _run("publish", "--vault", str(vault), "broken", "--to", str(tmp_path / "tiles"), "--key", str(key),
                  ok=(1,))
    assert "broken: BROKEN at seq 2" in _assert_shown_not_obeyed(out)


def test_seal_names_sessions_as_they_are_spelled(vault: Path, tmp_path: Path) -> None:
    copy = tmp_path / "v"
    Vault.create(copy)
    write_session(Vault.open_existing(copy), NAMED, 2)
    _, key = signer_key_file(tmp_path, "k")
    out, err = _run("seal", "--vault", str(copy), "--key", str(key))
    assert "checkpoint at 2 entries" in _assert_shown_not_obeyed(out, spelled_out=False)
    _assert_shown_not_obeyed(err, spelled_out=False)


def test_pull_of_a_broken_session(vault: Path, tmp_path: Path) -> None:
    out, _ = _run("pull", "--from", str(vault), "--to", str(tmp_path / "pulled"), "broken", ok=(1,))
    assert "broken: BROKEN at seq 2" in _assert_shown_not_obeyed(out)


def test_reindex_names_sessions_as_they_are_spelled(vault: Path, tmp_path: Path) -> None:
    copy = tmp_path / "v"
    Vault.create(copy)
    write_session(Vault.open_existing(copy), NAMED, 2)
    out, _ = _run("reindex", "--vault", str(copy))
    assert "written (2 lines)" in _assert_shown_not_obeyed(out, spelled_out=False)


def test_verify_export_of_a_forged_otel_file(tmp_path: Path) -> None:
    """An export kept in a SIEM is anyone's to edit: the session it names is quoted in the finding."""
    attrs = [{"key": "broker.entry.seq", "value": {"stringValue": "x"}},
             {"key": "broker.session", "value": {"stringValue": LIE}}]
    path = tmp_path / "spans.json"
    path.write_bytes(orjson.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": attrs}]}]}]}))
    out, _ = _run("verify-export", str(path), ok=(1,))
    assert "NOT intact" in _assert_shown_not_obeyed(out)


def test_an_error_message_is_one_line_whatever_it_quotes(capsys: pytest.CaptureFixture[str]) -> None:
    @click.group()
    def group() -> None:
        pass

    @group.command()
    def boom() -> None:
        raise InputError(f"no such thing as {LIE}")

    import sys

    argv, sys.argv = sys.argv, ["broker", "boom"]
    try:
        assert run_cli(group) == 2
    finally:
        sys.argv = argv
    err = capsys.readouterr().err
    assert err.startswith("broker: error: no such thing as ") and err.count("\n") == 1, repr(err)
    _assert_shown_not_obeyed(err.encode())
