"""The example vault verifies and tells its story; the audit commands behave as documented."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from journal.reader import iter_entries
from journal.vault import Vault
from journal.verify import verify_session
from tests.support.example_vault import ROOT, SESSION, copy_example

SOURCE = ROOT / "vault"  # also where ./scripts/run-broker records by default: a user's calls land here


@pytest.fixture(scope="module")
def EXAMPLE(tmp_path_factory) -> Path:  # noqa: N802 - reads as the constant it replaces
    return copy_example(tmp_path_factory.mktemp("example") / "vault")


def broker(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60
    )


def test_example_vault_is_intact_and_believable(EXAMPLE):  # noqa: N803
    vault = Vault.open_existing(EXAMPLE)
    r = verify_session(vault, SESSION)
    assert r.intact and r.entries == 17, r
    entries = list(iter_entries(vault, SESSION))
    assert {e["connector"] for e in entries} >= {"gmail", "calendar", "drive", "slack"}
    assert {e["capture"] for e in entries} == {"broker", "gateway", "agent"}
    gateway = [e for e in entries if e["capture"] == "gateway"]
    assert gateway and all(e["mcp"] and e["mcp"]["method"] == "tools/call" for e in gateway)
    writes = [e for e in entries if e["effect"] == "write"]
    assert len(writes) >= 6
    # every credential header is redacted, and no token text is anywhere in the vault
    for e in entries:
        for name, value in e["request"]["headers"]:
            if name.lower() == "authorization":
                assert value == "[never captured]"
    raw = b"".join(p.read_bytes() for p in EXAMPLE.rglob("*") if p.is_file())
    for token in (b"ya29.", b"xoxb-"):
        assert token not in raw
    # exactly one blob, over 1 MiB, referenced by the attachment read
    blobs = [p for p in (EXAMPLE / "blobs" / "sha256").rglob("*") if p.is_file()]
    assert len(blobs) == 1 and blobs[0].stat().st_size > 1 << 20
    attachment = entries[2]["response"]["body"]["data"]
    assert attachment["ref"] == str(blobs[0].relative_to(EXAMPLE))
    # a blind write: the trashed draft was never read before
    trashed = next(e for e in writes if "1OldDraftAgreementV2" in e["request"]["url"])
    assert not any("1OldDraftAgreementV2" in e["request"]["url"] for e in entries if e["seq"] < trashed["seq"])
    # a write whose response differs from its request
    patch = next(e for e in writes if e["request"]["method"] == "PATCH" and e["connector"] == "calendar")
    assert patch["request"]["body"]["attendees"] != patch["response"]["body"]["attendees"]


def test_example_vault_generator_is_deterministic(tmp_path, EXAMPLE):  # noqa: N803
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_example_vault.py"), "--vault", str(tmp_path)],
                   check=True, capture_output=True, timeout=120)
    assert (tmp_path / "journal" / f"{SESSION}.jsonl").read_bytes() == (
        EXAMPLE / "journal" / f"{SESSION}.jsonl"
    ).read_bytes()


def test_verify_cli_exit_codes_and_json(tmp_path, EXAMPLE):  # noqa: N803
    shutil.copytree(EXAMPLE, tmp_path / "v")
    ok = broker("verify", "--vault", str(tmp_path / "v"), "--json")
    assert ok.returncode == 0, ok.stderr
    row = orjson.loads(ok.stdout.splitlines()[0])
    assert row["intact"] is True and row["broken_at_seq"] is None and row["entries"] == 17
    path = tmp_path / "v" / "journal" / f"{SESSION}.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[4] = lines[4].replace(b'"status":200', b'"status":201', 1)
    path.write_bytes(b"".join(lines))
    bad = broker("verify", "--vault", str(tmp_path / "v"), "--json")
    assert bad.returncode == 1
    row = orjson.loads(bad.stdout.splitlines()[0])
    assert (row["intact"], row["broken_at_seq"], row["kind"]) == (False, 5, "edited")
    text = broker("verify", "--vault", str(tmp_path / "v"))
    assert "BROKEN at seq 5: edited" in text.stdout


@pytest.mark.parametrize(
    "args,needle",
    [
        (["verify", "--vault", "/nonexistent/vault"], "no vault"),
        (["verify", "--vault", "EXAMPLE", "ghost-session"], "no session"),
        (["show", "--vault", "EXAMPLE", "../../etc/passwd"], "no session"),
        (["show", "--vault", "EXAMPLE", "bad\x01id"], "control characters"),
        (["show", "--vault", "EXAMPLE", SESSION, "--seq", "99"], "no entry with seq 99"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(args, needle, EXAMPLE):  # noqa: N803
    r = broker(*[str(EXAMPLE) if a == "EXAMPLE" else a for a in args])
    assert r.returncode == 2
    assert needle in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_vault_from_environment_variable(tmp_path, EXAMPLE):  # noqa: N803
    import os

    env = dict(os.environ, BROKER_VAULT=str(EXAMPLE))
    r = broker("sessions", "--json", env=env)
    assert r.returncode == 0, r.stderr
    row = orjson.loads(r.stdout.splitlines()[0])
    assert row["session"] == SESSION and row["entries"] == 17 and row["verifies"] is True
    assert row["connectors"] == ["calendar", "drive", "gmail", "slack"] and row["writes"] >= 6


def test_show_timeline_and_json(EXAMPLE):  # noqa: N803
    r = broker("show", "--vault", str(EXAMPLE), SESSION)
    assert r.returncode == 0
    rows = r.stdout.splitlines()
    assert len(rows) == 17 and rows[0].split()[0] == "1" and "gmail" in rows[0]
    assert "+1.282s" in rows[1]
    one = broker("show", "--vault", str(EXAMPLE), SESSION, "--seq", "12", "--json")
    entry = orjson.loads(one.stdout)
    assert entry["seq"] == 12 and entry["capture"] == "gateway"


def test_progress_bar_on_a_terminal_only(tmp_path):
    """Large vaults get a progress bar on stderr when it is a terminal, and nothing when it is not."""
    import os
    import pty

    from journal.chain import chain_entry
    from tests.support.journal_factories import fields

    vault = Vault.create(tmp_path)
    prev, lines = "0" * 64, []
    for i in range(1, 4501):
        f = fields(n=i)
        f["response"]["body"]["pad"] = "x" * 1800
        entry, line = chain_entry(f, i, prev)
        prev = entry["hash"]
        lines.append(line)
    vault.session_path("s1").write_bytes(b"".join(lines))  # about 10 MB: over the 8 MiB threshold
    plain = broker("verify", "--vault", str(tmp_path))
    assert plain.returncode == 0 and "verifying" not in plain.stderr
    pid, fd = pty.fork()
    if pid == 0:  # child: stdout and stderr are the terminal
        os.chdir(ROOT)
        os.execv(sys.executable, [sys.executable, "-m", "broker.cli", "verify", "--vault", str(tmp_path)])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert b"verifying" in out and b"s1: intact (4500 entries)" in out


def test_tests_read_only_the_example_session_whatever_a_user_recorded(tmp_path):
    """./scripts/run-broker records into ./vault: a user's session (sorting first, with its own blob)
    must change nothing the tests above read."""
    user_vault = tmp_path / "user-vault"
    shutil.copytree(SOURCE, user_vault)
    from journal.record import Recorder

    rec = Recorder(user_vault)
    rec.report_call(
        session="a-first-user-session", agent="me", principal="me@example.com", method="GET",
        url="https://gmail.googleapis.com/gmail/v1/users/me/labels", status=200,
        response_headers=[("Content-Type", "application/octet-stream")], response_body=b"\xff" * (2 << 20),
    )
    rec.close()
    copy = copy_example(tmp_path / "copy", source=user_vault)
    assert sorted(p.name for p in (copy / "journal").iterdir()) == [f"{SESSION}.jsonl"]
    assert len([p for p in (copy / "blobs").rglob("*") if p.is_file()]) == 1
    r = broker("sessions", "--json", "--vault", str(copy))
    assert [orjson.loads(line)["session"] for line in r.stdout.splitlines()] == [SESSION]
