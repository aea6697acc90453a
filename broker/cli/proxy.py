"""Commands operators use to run the proxy: run, env."""

from __future__ import annotations

import asyncio
import logging
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

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


STOPPED_COMPLETE = "broker: stopped; every accepted entry is on disk"
STOPPED_INCOMPLETE = ("broker: stopped; some calls were cut off before their entries were written (see the errors "
                      "above; writes among them are recorded with an unknown outcome)")


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
    # mitmproxy is imported here, not at the top: every other broker command starts faster without it.
    from mitmproxy.exceptions import OptionsError

    from broker.proxy.link import ACK_DEADLINE
    from broker.proxy.runner import ProxyConfig
    from broker.proxy.upstream_resolve import parse_resolve

    if upstream_ca and upstream_insecure:
        raise click.UsageError("--upstream-ca and --upstream-insecure exclude each other")
    host, port = parse_listen(listen)
    try:
        parse_resolve(resolve)
    except OptionsError as exc:
        raise click.BadParameter(str(exc), param_hint="--resolve") from None
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
    )
    if seal is not None:
        config.seal_key, config.witness = str(Path(seal.key_path).resolve()), seal.witnesses
        config.checkpoint_entries, config.checkpoint_seconds = seal.entries, seal.seconds
        config.checkpoint_vault = seal.vault_dir
    return config, shown


@click.command(short_help="Run the broker: an HTTPS proxy that records calls.")
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
@click.option("-v", "--verbose", is_flag=True,
              help="Log one line per recorded call: seq, session, connector, effect, method, status, URL.")
def run(**opts: Any) -> int:
    """Run the broker: an HTTPS proxy that records every connector call into the vault."""
    config, shown = run_settings(opts)
    host, workers, seal, blobs = config.listen_host, opts["workers"], config.seal_key, opts.get("blobs")
    confdir = config.confdir
    # Warnings and errors from everything; with -v, the broker's own lines too (one per recorded call),
    # never mitmproxy's connection events.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LineFormatter())
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    logging.getLogger("broker").setLevel(logging.INFO if opts["verbose"] else logging.WARNING)
    from broker.proxy.runner import ca_cert_path, serve_forever

    def announce_port(bound: int) -> None:
        click.echo(f"broker: listening on http://{host}:{bound}" + (f" ({workers} workers)" if workers > 1 else ""))
        click.echo(f"broker: CA certificate {ca_cert_path(confdir)}")
        click.echo(f"broker: vault {shown}")
        if blobs:
            click.echo(f"broker: blobs {blobs}")
        click.echo("broker: Ctrl-C or SIGTERM stops it; `broker env` prints the client settings", err=False)
        sys.stdout.flush()

    if workers > 1:
        if seal:  # one sealer per vault: several would race to sign the same sessions
            raise click.UsageError("--workers and --seal-key cannot be combined yet; seal with `broker seal` instead")
        from broker.proxy.runner import ensure_ca
        from broker.proxy.workers import serve_workers

        ensure_ca(confdir)  # once, before the workers, so they do not race to create it
        code = serve_workers(config, workers, announce_port)
        click.echo(STOPPED_COMPLETE if code == 0 else STOPPED_INCOMPLETE)
        return code
    complete = asyncio.run(serve_forever(config, lambda proxy: announce_port(proxy.port)))
    click.echo(STOPPED_COMPLETE if complete else STOPPED_INCOMPLETE)
    return 0 if complete else 3


@click.command(short_help="Print the proxy and CA settings a client needs.")
@listen_option
@confdir_option
@click.option("--session", default=None, help="Session id to put in the proxy URL.")
@click.option("--agent", default=None, help="Agent name to put in the proxy URL.")
def env(listen: str, confdir: str, session: str | None, agent: str | None) -> int:
    """Print the shell exports a client needs to go through the broker (eval "$(broker env)").

    The proxy variables, and every CA variable common clients read (SSL_CERT_FILE, REQUESTS_CA_BUNDLE,
    CURL_CA_BUNDLE, NODE_EXTRA_CA_CERTS, HTTPLIB2_CA_CERTS for google-api-python-client) pointing at a
    bundle of the system roots and the broker's CA. `#` lines on stderr say which clients ignore
    proxy variables whatever is set: their calls bypass the broker and are not recorded.
    """
    from broker.exec.environment import ca_variables, proxy_url, proxy_variables
    from broker.proxy.runner import write_ca_bundle
    host, port = parse_listen(listen)
    bundle = str(write_ca_bundle(confdir))
    exports = {**proxy_variables(proxy_url(host, port, session, agent)), **ca_variables(bundle)}
    for k, v in exports.items():
        click.echo(f"export {k}={shlex.quote(v)}")
    for line in ENV_LIMITS:  # on stderr: stdout stays exports only, for eval and for parsers
        click.echo(f"# {line}", err=True)
    return 0


ENV_LIMITS = (
    "What proxy variables cannot do: some clients ignore them whatever is set, and then their calls",
    "bypass the broker and are not recorded. Node 20's built-in fetch ignores HTTPS_PROXY (Node 24 and",
    "later honour it with NODE_USE_ENV_PROXY=1); httplib2, under google-api-python-client, ignores it",
    "unless PySocks is installed. For those, run the program with `broker exec` instead.",
)
"""Printed by `broker env` on stderr as `#` lines (seen when the exports are eval'ed)."""


COMMANDS = [run, env]
