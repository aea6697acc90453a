"""The MCP shim command: `broker mcp` (see docs/mcp.md)."""

from __future__ import annotations

import asyncio
import sys

import click

from broker.cli.exec import confinement_for, confinement_options
from broker.cli.main import summary
from broker.cli.options import (
    autoseal_config,
    bind,
    parse_listen,
    seal_options,
    store_option,
    store_or_vault,
    vault_option,
)
from broker.cli.terminal_text import one_line
from broker.log_lines import LOG_FORMATS, use_log_format

_CTX = {"ignore_unknown_options": True, "allow_interspersed_args": False}


@click.command(context_settings=_CTX, short_help=summary("mcp"))
@vault_option
@store_option
@click.option("--session", required=True, help="Session the calls are recorded under.")
@click.option("--agent", required=True, help="Agent making the calls.")
@click.option("--principal", default="", help="Account the server acts as (default: unknown on stdio, "
              "a fingerprint of the client's credential over HTTP).")
@click.option("--connector", default="", help="Connector name for the entries (default: the server's own name).")
@click.option("--effects", "effects_file", default="", type=click.Path(dir_okay=False),
              help="TOML file overriding read/write per tool ([tools] name = \"read\"|\"write\").")
@click.option("--listen", default="", metavar="HOST:PORT",
              help="Serve streamable HTTP/SSE here (needs --upstream); stderr names the URL to give the client.")
@click.option("--upstream", default="", metavar="URL", help="HTTP URL of the real MCP server.")
@click.option("--gateway", is_flag=True,
              help="--listen as a shared gateway: each agent's calls in its own session (X-Broker-Session / "
              "X-Broker-Agent headers, /<session>/mcp, else one per MCP session).")
@click.option("--through-broker", is_flag=True,
              help="Run the server's own HTTPS calls through an embedded broker (stdio servers).")
@click.option("--confdir", default="~/.mitmproxy", show_default=True, help="Broker CA directory (--through-broker).")
@click.option("--upstream-ca", type=click.Path(exists=True, dir_okay=False),
              help="--through-broker: trust this CA for the server's upstream TLS.")
@click.option("--upstream-insecure", is_flag=True, help="--through-broker: do not verify upstream TLS.")
@click.option("--resolve", multiple=True, metavar="HOST=IP:PORT",
              help="--through-broker: send HOST's traffic to IP:PORT (tests).")
@confinement_options("the MCP server (--through-broker, where it runs in a namespace)")
@click.option("--call-timeout", type=float, default=None,
              help="Seconds to wait for an answer before the shim answers with an error (default: no limit).")
@click.option("--cancel-grace", type=float, default=2.0, show_default=True,
              help="Seconds to wait for an answer after the client cancels a call before recording it unanswered.")
@click.option("--max-message-mib", type=int, default=64, show_default=True,
              help="Messages up to this size are parsed whole; larger ones are relayed in parts and "
              "recorded from the blob store.")
@click.option("--spill-threshold", type=int, default=None, help="Spill values larger than this many bytes.")
@seal_options
@click.option("--record-tools-list/--no-record-tools-list", default=True, show_default=True,
              help="Record each tools/list answer (effect read): the tool definitions the model reads.")
@click.option("--log-format", type=click.Choice(LOG_FORMATS), default="text", show_default=True,
              help="The shim's own stderr lines: text (`broker mcp: ...`) or json (one JSON object per line).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def mcp(
    vault_dir: str, store: str | None,
    session: str, agent: str, principal: str, connector: str, effects_file: str, listen: str,
    upstream: str, gateway: bool, through_broker: bool, confdir: str, upstream_ca: str | None, upstream_insecure: bool,
    resolve: tuple[str, ...], user: str | None, as_root: bool, binds: tuple[str, ...], call_timeout: float | None,
    cancel_grace: float, max_message_mib: int,
    spill_threshold: int | None, record_tools_list: bool, log_format: str, command: tuple[str, ...],
    seal_key: str | None = None,
    checkpoint_entries: int = 0, checkpoint_seconds: float = 0.0, witness: tuple[str, ...] = (),
) -> int:
    """Record MCP tool calls: relay an MCP server and journal every tools/call and resources/read.

    \b
    stdio server:      broker mcp --session S --agent A [--] COMMAND [ARGS...]
    HTTP server:       broker mcp --session S --agent A --listen 127.0.0.1:8765 --upstream URL
    stdio to HTTP:     broker mcp --session S --agent A --upstream URL
    + server's HTTPS:  broker mcp --session S --agent A --through-broker [--] COMMAND [ARGS...]

    The protocol passes untouched. Each call is recorded (capture "gateway", the JSON-RPC request in
    the entry's "mcp" field, the whole answer in response.body) before its answer reaches the client.
    Read or write comes from the server, never the client, and never from a tool's name: --effects
    FILE first, then the tool's annotations from the server's tools/list (readOnlyHint: true is a
    read, any other annotations a write); a tool the server gives no annotations for is recorded as
    a write, as the MCP specification tells clients to assume. resources/read and prompts/get are
    reads. Credentials in the server's command line (--token=..., ghp_..., Bearer ...) are redacted;
    environment variables are never recorded. The `--` before COMMAND may be left out (everything
    from COMMAND on is the server's). Give COMMAND as an absolute path when the client starts the
    shim with a minimal PATH (desktop apps do). With --listen, the URL to give the MCP client is
    printed on stderr as the shim starts (--listen 127.0.0.1:0 picks a free port).
    """
    from broker.gc_freeze import freeze_startup_objects
    from broker.mcp.effects import EffectRules, EffectsFileError
    from broker.mcp.recording import CallJournal, Identity, connector_name, fallback_connector, stdio_url
    from journal.bodies import SPILL_THRESHOLD
    from journal.record import Recorder
    from journal.redact import compile_for_capture
    from journal.vault import session_filename

    use_log_format(log_format)
    CallJournal.record_tool_lists = record_tools_list  # one shim per process
    checkpoint_home = vault_dir  # a database store's checkpoints go into --vault
    vault_dir = store_or_vault(store, vault_dir)
    argv = list(command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if listen and not upstream:
        raise click.UsageError("--listen needs --upstream URL")
    if gateway and not listen:
        raise click.UsageError("--gateway needs --listen HOST:PORT")
    if upstream and argv:
        raise click.UsageError("give either --upstream URL or a COMMAND to run, not both")
    if not upstream and not argv:
        raise click.UsageError("give the MCP server to run after --, or --upstream URL")
    if through_broker and upstream:
        raise click.UsageError("--through-broker runs a stdio server as a child; it does not apply to --upstream")
    if (user or as_root or binds) and not through_broker:
        raise click.UsageError("--user, --as-root and --bind confine the server --through-broker runs; give it too")
    if upstream and not upstream.startswith(("http://", "https://")):
        raise click.BadParameter(f"{upstream!r}: expected an http:// or https:// URL", param_hint="--upstream")
    if connector and connector_name(connector) != connector:
        raise click.BadParameter(
            f"{connector!r}: use a lowercase name of a-z, 0-9, '_', '.', '-'", param_hint="--connector"
        )
    if max_message_mib < 1:
        raise click.BadParameter("must be at least 1", param_hint="--max-message-mib")
    session_filename(session)  # SessionIdError (a VaultError): a clear error before anything starts
    if not agent:
        raise click.BadParameter("must not be empty", param_hint="--agent")
    try:
        rules = EffectRules.from_file(effects_file or None)
    except EffectsFileError as exc:
        raise click.BadParameter(str(exc), param_hint="--effects") from None
    max_line = max_message_mib << 20
    seal = autoseal_config(seal_key, checkpoint_entries, checkpoint_seconds, witness, store, checkpoint_home)
    if seal is not None and through_broker:
        raise click.UsageError("--seal-key does not apply to --through-broker yet; seal with `broker seal`")
    threshold = spill_threshold if spill_threshold is not None else SPILL_THRESHOLD

    if upstream:
        from urllib.parse import urlsplit

        from broker.mcp import http_relay

        sock = bind(*parse_listen(listen)) if listen else None  # a port in use: one line before anything starts
        recorder = Recorder(vault_dir, spill_threshold=threshold, autoseal=seal)
        # --listen: without --principal each call's principal is a fingerprint of the client's credential
        journal = CallJournal(
            recorder, Identity(session, agent, principal if listen else (principal or "unknown")), url=upstream,
            fallback=connector_name(urlsplit(upstream).hostname or "") or "mcp", connector=connector or None,
            rules=rules,
        )
        compile_for_capture()  # before the first call, not on its event loop (journal.redact)
        freeze_startup_objects()  # (broker.gc_freeze)
        try:
            if sock is not None:
                return asyncio.run(http_relay.serve(journal, upstream, sock, max_line=max_line, gateway=gateway,
                                                   cancel_grace=cancel_grace))
            return asyncio.run(http_relay.run_stdio_front(
                journal, upstream, call_timeout=call_timeout, cancel_grace=cancel_grace, max_line=max_line,
            ))
        finally:
            recorder.close()

    from broker.mcp.stdio_relay import run_stdio_shim

    identity = Identity(session, agent, principal or "unknown")
    kwargs = dict(call_timeout=call_timeout, cancel_grace=cancel_grace, max_line=max_line)
    if through_broker:
        from broker.mcp.attribution import run_through_broker

        try:
            confinement = confinement_for(user, as_root, binds)
            return asyncio.run(run_through_broker(
            vault_dir, identity, argv, principal_option=principal, connector=connector or None, rules=rules,
            confdir=confdir, confinement=confinement,
            upstream_ca=upstream_ca, upstream_insecure=upstream_insecure, resolve=list(resolve),
            spill_threshold=threshold, **kwargs,
            ))
        except OSError as exc:  # the server or the embedded broker could not be started
            click.echo(f"broker: error: {one_line(exc)}", err=True)
            return 2
    recorder = Recorder(vault_dir, spill_threshold=threshold, autoseal=seal)
    journal = CallJournal(
        recorder, identity, url=stdio_url(argv), fallback=fallback_connector(argv), connector=connector or None,
        rules=rules,
    )
    freeze_startup_objects()  # (broker.gc_freeze): full collections skip what start-up made
    try:
        code = asyncio.run(run_stdio_shim(journal, argv, **kwargs))
    except OSError as exc:  # the server could not be started
        click.echo(f"broker: error: {one_line(exc)}", err=True)
        return 2
    finally:
        recorder.close()
    sys.stderr.flush()
    return code


COMMANDS = [mcp]
