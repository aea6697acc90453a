"""Every option of `broker run` reaches `broker exec`, read the same way (one function, `run_settings`),
or is refused there with one line: walked from the commands' own definitions and help, so an option
added to `run` later is covered without touching this test."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from broker.cli.exec import _proxy_config, exec_
from broker.cli.proxy import run, run_settings
from journal.checkpoint.note import Signer

NOT_FOR_EXEC = {"--listen"}  # the listeners are made inside the namespace
REFUSED_IN_EXEC = {"--workers"}  # offered, refused above 1 with one line


def run_params(params: dict) -> dict:
    """An exec command line's parameters without exec's own (--user, --dns, ...): the run options."""
    own = {p.name for p in exec_.params} - {p.name for p in run.params}
    return {k: v for k, v in params.items() if k not in own}


def options(command: click.Command) -> set[str]:
    return {o for p in command.params if isinstance(p, click.Option) for o in p.opts}


def help_options(command: click.Command) -> set[str]:
    text = CliRunner().invoke(command, ["--help"], terminal_width=200).output
    return {word.rstrip(",") for line in text.splitlines() for word in line.split()[:3] if word.startswith("--")}


def test_every_run_option_is_an_exec_option() -> None:
    missing = options(run) - options(exec_) - NOT_FOR_EXEC
    assert not missing, f"broker exec lacks {sorted(missing)}"
    shown = help_options(run) - help_options(exec_) - NOT_FOR_EXEC
    assert not shown, f"`broker exec --help` does not show {sorted(shown)}"


def _non_default_args(tmp_path: Path) -> list[str]:
    """A value other than its default for every run option this test knows how to give one; an option
    it does not know gets its default (still compared below)."""
    key = tmp_path / "seal.key"
    key.write_text(Signer.generate("exec-test").key_text())
    return ["--vault", str(tmp_path / "vault"), "--confdir", str(tmp_path / "mitm"), "--session", "s-new",
            "--agent", "a", "--principal", "p", "--resolve", "x.example=127.0.0.1:9", "--upstream-insecure",
            "--on-journal-error", "pass", "--record-unknown", "--spill-threshold", "1000", "--recorder", "inline",
            "--prompts", "refs", "--seal-key", str(key), "--checkpoint-entries", "7", "--checkpoint-seconds", "3"]


def test_exec_reads_every_option_as_run_does(tmp_path: Path) -> None:
    args = _non_default_args(tmp_path)
    with run.make_context("run", list(args)) as ctx:
        expected, _ = run_settings(ctx.params)
    with exec_.make_context("exec", [*args, "--", "true"]) as ctx:
        got = _proxy_config(run_params(ctx.params))
    differing = {f.name for f in dataclasses.fields(expected)
                 if getattr(expected, f.name) != getattr(got, f.name)} - {"listen_host", "listen_port"}
    assert not differing, f"broker exec reads {sorted(differing)} differently from broker run"
    assert (got.prompts, got.seal_key, got.checkpoint_entries, got.record_unknown) == (
        "refs", str((tmp_path / "seal.key").resolve()), 7, True)


def test_workers_are_refused_in_one_line(tmp_path: Path) -> None:
    with exec_.make_context("exec", ["--vault", str(tmp_path / "v"), "--workers", "2", "--", "true"]) as ctx:
        params = run_params(ctx.params)
    with pytest.raises(click.UsageError, match="--workers"):
        _proxy_config(params)


def test_mcp_through_broker_takes_the_same_confinement_options(tmp_path: Path) -> None:
    """--user, --as-root and --bind are one definition for `broker exec` and `broker mcp`; given without
    --through-broker, or naming root without --as-root, or no such user, they are one clear error before
    anything starts."""
    from broker.cli.mcp import mcp

    confinement = {"--user", "--as-root", "--bind"}
    assert confinement <= options(exec_) and confinement <= options(mcp)
    base = ["--vault", str(tmp_path / "v"), "--session", "s", "--agent", "a"]
    for extra, why in ((["--user", "nobody"], "--through-broker"),
                       (["--through-broker", "--user", "root"], "--as-root"),
                       (["--through-broker", "--user", "no-such-user-here"], "no such user"),
                       (["--through-broker", "--as-root", "--user", "nobody"], "exclude each other")):
        r = CliRunner().invoke(mcp, [*base, *extra, "--", "true"])
        assert r.exit_code == 2 and why in r.output, (extra, r.output)
    assert not (tmp_path / "v").exists()  # nothing was made
