"""`broker run`: the HTTPS proxy that records calls (`broker env`, the client settings, is broker/cli/env.py)."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from broker.cli.main import summary
from broker.cli.options import (
    ack_deadline_option,
    autoseal_config,
    blobs_option,
    checked_blobs,
    parse_listen,
    seal_options,
    store_option,
    store_or_vault,
    unknown_host_options,
    vault_option,
)
from broker.log_lines import LOG_FORMATS, json_line, json_logs, stderr_handler, use_log_format
from journal.connectors import Registry
from journal.store.url import check_store

if TYPE_CHECKING:
    from broker.proxy.runner import ProxyConfig

confdir_option = click.option(
    "--confdir", default="~/.mitmproxy", show_default=True,
    help="mitmproxy configuration directory; the CA is <confdir>/mitmproxy-ca-cert.pem.",
)
listen_option = click.option(
    "--listen", default="127.0.0.1:8080", show_default=True, help="Address the proxy listens on (HOST:PORT)."
)


STOPPED_COMPLETE = "stopped; every accepted entry is on disk"
STOPPED_INCOMPLETE = ("stopped; some calls were cut off before their entries were written (see the errors "
                      "above; writes among them are recorded with an unknown outcome)")
log_format_option = click.option(
    "--log-format", type=click.Choice(LOG_FORMATS), default="text", show_default=True,
    help="text: lines for a person; json: one JSON object per line (ts, level, source, logger, message) for a "
    "log shipper, from every process the command starts.",
)


def say(text: str) -> None:
    """A line of `broker run`'s own on stdout (where it listens, that it stopped): `broker: TEXT`, or a JSON
    object with --log-format json."""
    click.echo(json_line("broker", "INFO", text) if json_logs() else f"broker: {text}")


class _LineFormatter(logging.Formatter):
    """`broker: recorded seq=...` for the -v lines, `broker: WARNING: ...` for the rest."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return f"broker: {text}" if record.levelno == logging.INFO else f"broker: {record.levelname}: {text}"


def run_settings(opts: Mapping[str, Any]) -> tuple[ProxyConfig, str]:
    """Every option of `broker run` checked and turned into a ProxyConfig (and the store as shown): the one
    reading of them, which `broker exec` uses too, so an option added to `run` reaches `exec` as well."""
    (vault_dir, store, listen, confdir, session, agent, principal, connectors_file, resolve, upstream_ca,
     upstream_insecure, on_journal_error, spill_threshold, recorder, prompts) = (
        opts["vault_dir"], opts["store"], opts["listen"], opts["confdir"], opts["session"], opts["agent"],
        opts["principal"], opts["connectors_file"], opts["resolve"], opts["upstream_ca"], opts["upstream_insecure"],
        opts["on_journal_error"], opts["spill_threshold"], opts["recorder"], opts["prompts"])
    seal_key, checkpoint_entries, checkpoint_seconds = opts.get("seal_key"), opts.get("checkpoint_entries", 0), \
        opts.get("checkpoint_seconds", 0.0)
    witness, playback = opts.get("witness", ()), opts.get("playback", "")
    mitmproxy_sets = list(opts.get("mitmproxy_sets") or ())
    # mitmproxy is imported here, not at the top: every other broker command starts faster without it.
    from mitmproxy.exceptions import OptionsError

    from broker.proxy.link import ACK_DEADLINE
    from broker.proxy.runner import ProxyConfig, check_mitmproxy_sets
    from broker.proxy.upstream_resolve import parse_resolve

    if upstream_ca and upstream_insecure:
        raise click.UsageError("--upstream-ca and --upstream-insecure exclude each other")
    host, port = parse_listen(listen)
    try:
        parse_resolve(resolve)
    except OptionsError as exc:
        raise click.BadParameter(str(exc), param_hint="--resolve") from None
    check_mitmproxy_sets(mitmproxy_sets)  # an option the broker owns, or a bad value: one line before listening
    if connectors_file:
        Registry.builtin().with_file(connectors_file)  # a bad file is one clear error, before listening
    seal = autoseal_config(seal_key, checkpoint_entries, checkpoint_seconds, witness, store, vault_dir)
    vault_dir = store_or_vault(store, vault_dir)
    shown = check_store(vault_dir)  # an unusable store is one clear error, before listening
    checked_blobs(opts.get("blobs"))  # so is a blob bucket that does not answer
    if playback:
        from journal.playback import RecordedSession

        if playback == session:
            raise click.UsageError("--playback SESSION: record the new run under another --session")
        RecordedSession.load(vault_dir, playback)  # missing or broken: one clear error before listening
    config = ProxyConfig(
        vault=vault_dir, listen_host=host, listen_port=port, confdir=confdir, session=session, agent=agent,
        principal=principal, connectors=connectors_file, resolve=list(resolve), upstream_ca=upstream_ca,
        upstream_insecure=upstream_insecure, on_journal_error=on_journal_error,
        pass_unknown=list(opts.get("pass_unknown") or ()), spill_threshold=spill_threshold, recorder=recorder,
        prompts=prompts, playback=playback, ack_deadline=opts.get("ack_deadline") or ACK_DEADLINE,
        mitmproxy_sets=mitmproxy_sets,
    )
    if seal is not None:
        config.seal_key, config.witness = str(Path(seal.key_path).resolve()), seal.witnesses
        config.checkpoint_entries, config.checkpoint_seconds = seal.entries, seal.seconds
        config.checkpoint_vault = seal.vault_dir
    return config, shown


@click.command(short_help=summary("run"))
@vault_option
@store_option
@listen_option
@confdir_option
@click.option("--session", default="default", show_default=True, help="Session for calls that name none.")
@click.option("--agent", default="unknown", show_default=True, help="Agent for calls that name none.")
@click.option("--principal", default="", help="Principal for calls that name none (default: credential fingerprint).")
@click.option("--connectors", "connectors_file", default="", help="TOML file extending or overriding connector rules.")
@click.option("--resolve", multiple=True, metavar="HOST=IP:PORT", help="Send HOST's traffic to IP:PORT; URLs stay.")
@click.option("--upstream-ca", type=click.Path(exists=True, dir_okay=False), help="Trust this CA for upstream TLS.")
@click.option("--upstream-insecure", is_flag=True, help="Do not verify upstream TLS certificates.")
@click.option(
    "--on-journal-error", type=click.Choice(["block", "pass"]), default="block", show_default=True,
    help="block: answer 502 instead of letting an unrecorded call through; pass: let it through, log it.",
)
@unknown_host_options
@click.option("--spill-threshold", type=int, default=None, help="Spill bodies larger than this many bytes.")
@click.option(
    "--recorder", type=click.Choice(["process", "inline"]), default="process", show_default=True,
    help="process: record in a recording service child process, leaving the proxy's CPU to the proxy; "
    "inline: record in the proxy process.",
)
@click.option(
    "--workers", type=click.IntRange(1, 64), default=1, show_default=True,
    help="Proxy processes on the one port (SO_REUSEPORT), each with its own recording service, sharing the vault.",
)
@seal_options
@blobs_option
@click.option(
    "--prompts", type=click.Choice(["off", "refs", "full"]), default="off", show_default=True,
    help="Prompt capture: off (model API calls pass unrecorded), refs (model calls recorded, every text "
    "replaced by its SHA-256 and size), full (the same, texts in the blob store). docs/prompts.md.",
)
@click.option(
    "--playback", default="", metavar="SESSION",
    help="Answer every call from this recorded session (never reaching the platform); unmatched calls get 502. "
    "The run is recorded as its own session.",
)
@ack_deadline_option
@click.option(
    "--set", "mitmproxy_sets", multiple=True, metavar="KEY=VALUE",
    help="Set a mitmproxy option, as `mitmdump --set` does (repeatable), e.g. --set body_size_limit=50m. "
    "Options the broker sets itself (listen address, mode, confdir, upstream TLS trust, vault, broker_*) and "
    "options that would let calls around the recording (ignore_hosts, allow_hosts, ...) are refused.",
)
@log_format_option
@click.option("-v", "--verbose", is_flag=True,
              help="Log one line per recorded call: seq, session, connector, effect, method, status, URL.")
def run(**opts: Any) -> int:
    """Run the broker: an HTTPS proxy that records every connector call into the vault."""
    use_log_format(opts["log_format"])  # before anything logs, and for the processes it starts
    config, shown = run_settings(opts)
    host, workers, seal, blobs = config.listen_host, opts["workers"], config.seal_key, opts.get("blobs")
    confdir = config.confdir
    # Warnings and errors from everything; with -v, the broker's own lines too (one per recorded call),
    # never mitmproxy's connection events.
    logging.basicConfig(level=logging.WARNING, handlers=[stderr_handler("broker", _LineFormatter())])
    logging.getLogger("broker").setLevel(logging.INFO if opts["verbose"] else logging.WARNING)
    from broker.proxy.runner import ca_cert_path, serve_forever

    def announce_port(bound: int) -> None:
        say(f"listening on http://{host}:{bound}" + (f" ({workers} workers)" if workers > 1 else ""))
        say(f"CA certificate {ca_cert_path(confdir)}")
        say(f"vault {shown}")
        if blobs:
            say(f"blobs {blobs}")
        say("Ctrl-C or SIGTERM stops it; `broker env` prints the client settings")
        sys.stdout.flush()

    if workers > 1:
        if seal:  # one sealer per vault: several would race to sign the same sessions
            raise click.UsageError("--workers and --seal-key cannot be combined yet; seal with `broker seal` instead")
        from broker.proxy.runner import ensure_ca
        from broker.proxy.workers import serve_workers

        ensure_ca(confdir)  # once, before the workers, so they do not race to create it
        code = serve_workers(config, workers, announce_port)
        say(STOPPED_COMPLETE if code == 0 else STOPPED_INCOMPLETE)
        return code
    complete = asyncio.run(serve_forever(config, lambda proxy: announce_port(proxy.port)))
    say(STOPPED_COMPLETE if complete else STOPPED_INCOMPLETE)
    return 0 if complete else 3


COMMANDS = [run]
