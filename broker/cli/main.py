"""The `broker` click group: each command family lives in its own module of this package.

The group imports a command's module only when that command runs (or its own help is asked for):
`broker --version` and `broker --help` import click and this file, not the journal library and its
redaction rules, which take most of a second to load. `COMMANDS` says where each command lives and
its one-line summary: the one copy of it, which a command whose help opens with another text takes as
its `short_help` (`summary`); tests/broker/cli/test_lazy_commands.py checks the table against the
modules (a command whose docstring is its summary repeats it there: its own `--help` opens with it).
"""

from __future__ import annotations

import gc
import importlib
import sys

import click

from broker.cli.exit_codes import run_cli

# name -> (module under broker.cli, summary shown by `broker --help`), listed by `--help` in name order.
COMMANDS: dict[str, tuple[str, str]] = {
    "verify": ("audit", "Check every session's chain, contract, blobs and seal."),
    "sessions": ("audit", "List sessions: entries, times, writes, connectors."),
    "show": ("show", "A session's timeline, or one entry in full."),
    "keygen": ("seal", "Create an Ed25519 key pair for sealing."),
    "seal": ("seal", "Sign each intact session's length and head."),
    "witness": ("checkpoint", "Serve the C2SP tlog-witness protocol: POST /add-checkpoint, GET /<origin "
                              "hash>/checkpoint."),
    "prove": ("checkpoint", "Write a self-contained proof of one entry: its line, its inclusion proof and the "
                            "signed checkpoint."),
    "verify-proof": ("checkpoint", "Check a `broker prove` bundle with nothing but the keys."),
    "run": ("proxy", "Run the broker: an HTTPS proxy that records calls."),
    "env": ("env", "Print the proxy and CA settings a client needs."),
    "exec": ("exec", "Run COMMAND in its own network namespace, where TCP to ports 80 and 443 of any address "
                     "goes through the broker and every other connection is refused (Linux, root or "
                     "CAP_NET_ADMIN and CAP_SYS_ADMIN)."),
    "mcp": ("mcp", "Relay an MCP server and record its tool calls."),
    "reindex": ("reindex", "Write the seq sidecar of sessions already recorded, as the writer keeps it (the only "
                           "command besides the writer that writes it)."),
    "replay": ("replay", "Rebuild views of the resources a session touched."),
    "revert-plan": ("replay", "The inverse call for each write of a session."),
    "trajectory": ("trajectory", "Replay a session turn by turn: model call, the tool calls it asked for, the "
                                 "entries that carried them out, the tool results the model was shown next."),
    "search": ("search", "Find entries across every session; the filters given must all hold."),
    "inspect": ("inspect", "Serve a read-only web console over the vault: sessions, timelines, entries, views, "
                           "revert plans, search, and every hash re-checked in the browser."),
    "export": ("export", "Write SESSION as a test fixture, HAR 1.2, a VCR.py cassette, OpenTelemetry spans "
                         "(OTLP/JSON) or OCSF API Activity events (JSON lines)."),
    "verify-export": ("verify_export", "Re-check the chain inside an export (OCSF, HAR or OTel): exit 1 naming the "
                                       "first dropped, reordered, repeated or altered event."),
    "diff": ("diff", "Compare the ordered calls (connector, effect, method, URL, request body hash) and "
                     "statuses of two sessions."),
    "pull": ("store", "Copy a store (a PostgreSQL journal or a vault) into a file vault, byte for byte, and "
                      "verify the result."),
    "publish": ("publish", "Publish a session's Merkle tree as C2SP tlog-tiles (entry hashes only)."),
    "push": ("store", "Migrate a file vault into a store."),
    "store": ("store", "Maintain a store: a PostgreSQL schema and its roles; probe an S3 bucket's retention."),
    "erase": ("store", "Delete a blob's bytes and leave a tombstone (sha256, when, by whom, why); the chain "
                       "still verifies."),
}


def summary(name: str) -> str:
    """Command `name`'s one-line summary from the table, for its `short_help` (importing this module
    imports no command module)."""
    return COMMANDS[name][1]


class _LazyCommands(click.Group):
    """Commands imported on first use; `broker --help` lists each with its whole summary (wrapped),
    never cut with "...", as click's default would at the terminal width."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module = importlib.import_module(f"broker.cli.{COMMANDS[cmd_name][0]}")
        return next((c for c in module.COMMANDS if c.name == cmd_name), None)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_LazyCommands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="connector-broker")
def cli() -> None:
    """Evidence-grade record of every connector call an AI agent makes."""


def main() -> None:
    code = run_cli(cli)
    # The interpreter's exit collects garbage over every object still tracked: tens of thousands made by the
    # imports, none of them garbage, about 10 ms of a short command's run (`broker verify`, `show`). Frozen,
    # they are left out of those collections. atexit, weakref.finalize, flushing and closing run as before; what
    # no longer runs is the collection of a reference cycle left at exit (its __del__, a suspended generator's
    # finally), which Python never promised. Nothing here relies on it: files, the journal writer and its
    # reservation, temporary files and sockets are closed by explicit code (review3 checked each).
    gc.freeze()
    sys.exit(code)
