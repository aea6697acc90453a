"""Commands operators use to run the proxy: run, env."""

from __future__ import annotations

import asyncio
import logging
import shlex
import sys
from urllib.parse import quote

import click

from broker.audit_commands import vault_option
from broker.store_options import store_option, store_or_vault
from journal.connectors import Registry
from journal.store.url import check_store

confdir_option = click.option(
    "--confdir", default="~/.mitmproxy", show_default=True,
    help="mitmproxy configuration directory; the CA is <confdir>/mitmproxy-ca-cert.pem.",
)
listen_option = click.option(
    "--listen", default="127.0.0.1:8080", show_default=True, help="Address the proxy listens on (HOST:PORT)."
)


def parse_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"{listen!r}: expected HOST:PORT", param_hint="--listen")
    return host.strip("[]"), int(port)


@click.command()
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
@click.option("--record-unknown", is_flag=True, help="Also record traffic no connector recognises.")
@click.option("--spill-threshold", type=int, default=None, help="Spill bodies larger than this many bytes.")
@click.option(
    "--recorder", type=click.Choice(["process", "inline"]), default="process", show_default=True,
    help="process: record in a recording service child process, leaving the proxy's CPU to the proxy; "
    "inline: record in the proxy process.",
)
@click.option("-v", "--verbose", is_flag=True, help="Log every recorded call.")
def run(
    vault_dir: str, store: str | None,
    listen: str, confdir: str, session: str, agent: str, principal: str, connectors_file: str,
    resolve: tuple[str, ...], upstream_ca: str | None, upstream_insecure: bool, on_journal_error: str,
    record_unknown: bool, spill_threshold: int | None, recorder: str, verbose: bool,
) -> int:
    """Run the broker: an HTTPS proxy that records every connector call into the vault."""
    # mitmproxy is imported here, not at the top: every other broker command starts faster without it.
    from mitmproxy.exceptions import OptionsError

    from addons.upstream_resolve import parse_resolve
    from broker.proxy_runner import ProxyConfig, ca_cert_path, serve_forever
    if upstream_ca and upstream_insecure:
        raise click.UsageError("--upstream-ca and --upstream-insecure exclude each other")
    host, port = parse_listen(listen)
    try:
        parse_resolve(resolve)
    except OptionsError as exc:
        raise click.BadParameter(str(exc), param_hint="--resolve") from None
    if connectors_file:
        Registry.builtin().with_file(connectors_file)  # a bad file is one clear error, before listening
    vault_dir = store_or_vault(store, vault_dir)
    shown = check_store(vault_dir)  # an unusable store is one clear error, before listening
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="broker: %(levelname)s: %(message)s",
        stream=sys.stderr,
    )
    config = ProxyConfig(
        vault=vault_dir, listen_host=host, listen_port=port, confdir=confdir, session=session, agent=agent,
        principal=principal, connectors=connectors_file, resolve=list(resolve), upstream_ca=upstream_ca,
        upstream_insecure=upstream_insecure, on_journal_error=on_journal_error, record_unknown=record_unknown,
        spill_threshold=spill_threshold, recorder=recorder,
    )

    def announce(proxy) -> None:
        click.echo(f"broker: listening on http://{host}:{proxy.port}")
        click.echo(f"broker: CA certificate {ca_cert_path(confdir)}")
        click.echo(f"broker: vault {shown}")
        click.echo("broker: Ctrl-C or SIGTERM stops it; `broker env` prints the client settings", err=False)
        sys.stdout.flush()

    asyncio.run(serve_forever(config, announce))
    click.echo("broker: stopped; every accepted entry is on disk")
    return 0


@click.command()
@listen_option
@confdir_option
@click.option("--session", default=None, help="Session id to put in the proxy URL.")
@click.option("--agent", default=None, help="Agent name to put in the proxy URL.")
def env(listen: str, confdir: str, session: str | None, agent: str | None) -> int:
    """Print the shell exports a client needs to go through the broker (eval "$(broker env)")."""
    from broker.proxy_runner import write_ca_bundle
    host, port = parse_listen(listen)
    creds = ""
    if session or agent:
        creds = f"{quote(session or 'default', safe='')}:{quote(agent or 'unknown', safe='')}@"
    proxy = f"http://{creds}{host}:{port}"
    bundle = str(write_ca_bundle(confdir))
    exports = {
        "HTTPS_PROXY": proxy, "HTTP_PROXY": proxy, "https_proxy": proxy, "http_proxy": proxy,
        "SSL_CERT_FILE": bundle, "REQUESTS_CA_BUNDLE": bundle, "CURL_CA_BUNDLE": bundle,
        "NODE_EXTRA_CA_CERTS": bundle,
    }
    for k, v in exports.items():
        click.echo(f"export {k}={shlex.quote(v)}")
    return 0


COMMANDS = [run, env]
