"""`broker exec`: run a command whose only way to the network is the broker (docs/exec.md)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

import click

from broker.cli.proxy import run as run_command

_CTX = {"ignore_unknown_options": True, "allow_interspersed_args": False}
_SHARED = {"listen"}  # run options that do not apply: the listeners are made inside the namespace


@click.command("exec", context_settings=_CTX)
@click.option("--user", default=None, metavar="USER", help="Run COMMAND as this user (default: as the caller, "
              "with no capabilities).")
@click.option("--proxy-env/--no-proxy-env", default=True, show_default=True,
              help="Also give COMMAND the proxy variables (for the runtimes that honour them); "
              "the rest is captured transparently either way.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def exec_(ctx: click.Context, user: str | None, proxy_env: bool, command: tuple[str, ...], **run_opts) -> int:
    """Run COMMAND in its own network namespace, where TCP to ports 80 and 443 of any address goes
    through the broker and every other connection is refused (Linux, root or CAP_NET_ADMIN and
    CAP_SYS_ADMIN).

    \b
    broker exec --vault ./vault --session s1 --agent bot -- python agent.py

    The exit code is COMMAND's; every entry is on disk before broker exec returns.
    """
    from broker.exec import capabilities

    argv = list(command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise click.UsageError("give the command to run after --")
    if user:
        from broker.exec.netns import user_ids

        user_ids(user)  # an unknown user is one clear error before anything is made
    why = capabilities.missing()
    if why:
        click.echo(f"broker: error: {why}", err=True)
        return 2
    config = _proxy_config(run_opts)
    logging.basicConfig(
        level=logging.INFO if run_opts["verbose"] else logging.WARNING, format="broker: %(message)s",
        stream=sys.stderr,
    )
    return asyncio.run(run_contained(config, argv, user=user, proxy_env=proxy_env))


def _proxy_config(opts: dict):
    """The run options checked as `broker run` checks them, as a ProxyConfig."""
    from mitmproxy.exceptions import OptionsError

    from broker.proxy.runner import ProxyConfig
    from broker.proxy.upstream_resolve import parse_resolve
    from journal.connectors import Registry
    from journal.vault import Vault, session_filename

    if opts["upstream_ca"] and opts["upstream_insecure"]:
        raise click.UsageError("--upstream-ca and --upstream-insecure exclude each other")
    try:
        parse_resolve(opts["resolve"])
    except OptionsError as exc:
        raise click.BadParameter(str(exc), param_hint="--resolve") from None
    if opts["connectors_file"]:
        Registry.builtin().with_file(opts["connectors_file"])
    session_filename(opts["session"])
    Vault.create(opts["vault_dir"])
    return ProxyConfig(
        vault=opts["vault_dir"], listen_port=0, confdir=opts["confdir"], session=opts["session"],
        agent=opts["agent"], principal=opts["principal"], connectors=opts["connectors_file"],
        resolve=list(opts["resolve"]), upstream_ca=opts["upstream_ca"], upstream_insecure=opts["upstream_insecure"],
        on_journal_error=opts["on_journal_error"], pass_unknown=list(opts.get("pass_unknown") or ()),
        spill_threshold=opts["spill_threshold"], recorder=opts["recorder"],
    )


def exit_code(returncode: int) -> int:
    """A shell's convention: killed by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


async def run_contained(config, argv: list[str], *, user: str | None = None, proxy_env: bool = True) -> int:
    """Make the namespace, start the broker on its listeners, run COMMAND, stop the broker (every
    entry on disk), remove the namespace; COMMAND's exit code."""
    from broker.exec.environment import client_environment, proxy_url
    from broker.exec.sandbox import Sandbox
    from broker.proxy.runner import EmbeddedProxy, write_ca_bundle
    from broker.proxy.upstream_resolve import parse_resolve

    signals = Signals()  # from the start: a signal during set-up stops it cleanly, the command never starts
    sandbox = Sandbox(parse_resolve(config.resolve))
    try:
        await sandbox.open()
        broker = EmbeddedProxy(config, extra_addons=sandbox.contain(config))
        await broker.start()
        try:
            bundle = sandbox.publish_bundle(str(write_ca_bundle(config.confdir)))
            url = proxy_url("127.0.0.1", sandbox.proxy_port, config.session, config.agent) if proxy_env else None
            env = client_environment(os.environ, bundle, url)
            if signals.received:
                return 128 + signals.received[0]
            proc = await asyncio.create_subprocess_exec(*sandbox.command(argv, user), env=env)
            signals.child = proc
            return exit_code(await proc.wait())
        finally:
            await broker.stop()
    finally:
        signals.remove()
        await sandbox.close()
        if sandbox.report is not None:
            click.echo(f"broker: exec: {sandbox.report.summary()}", err=True)


class Signals:
    """SIGINT, SIGTERM and SIGHUP: passed on to the command once it runs; before, remembered."""

    HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.child: asyncio.subprocess.Process | None = None
        self.received: list[int] = []
        for sig in self.HANDLED:
            self.loop.add_signal_handler(sig, self._on, sig)

    def _on(self, sig: int) -> None:
        self.received.append(sig)
        if self.child is not None and self.child.returncode is None:
            self.child.send_signal(sig)

    def remove(self) -> None:
        for sig in self.HANDLED:
            self.loop.remove_signal_handler(sig)


exec_.params[:0] = [p for p in run_command.params if p.name not in _SHARED]
COMMANDS = [exec_]
