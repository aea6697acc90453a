"""`broker exec`: run a command whose only way to the network is the broker (docs/exec.md)."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import click

from broker.cli.proxy import run as run_command
from broker.log_lines import stderr_handler

if TYPE_CHECKING:
    from broker.exec.confinement import Confinement

F = TypeVar("F", bound=Callable)

_CTX = {"ignore_unknown_options": True, "allow_interspersed_args": False}
_SHARED = {"listen"}  # run options that do not apply: the listeners are made inside the namespace
# (--workers is offered and refused above 1 with one line, in _proxy_config)


def confinement_options(what: str) -> Callable[[F], F]:
    """--user, --as-root and --bind: who `what` (COMMAND, or the MCP server under --through-broker) runs as and
    what it may see; one definition for `broker exec` and `broker mcp` (broker/exec/confinement.py)."""

    def apply(f: F) -> F:
        for option in reversed([
            click.option("--user", default=None, metavar="USER", help=f"Run {what} as this user (default: nobody), "
                         "with no capabilities; root only with --as-root."),
            click.option("--as-root", is_flag=True, help=f"Run {what} as root (still with no capabilities and the "
                         "evidence hidden; warned about: uid 0 owns every root-owned file the sandbox does not "
                         "cover)."),
            click.option("--bind", "binds", multiple=True, metavar="PATH", type=click.Path(exists=True),
                         help=f"Make this host path visible to {what}, read-only, at the same place (its /tmp and "
                         "/run are private; repeatable). Never uncovers the vault, confdir or keys."),
        ]):
            f = option(f)
        return f

    return apply


def confinement_for(user: str | None, as_root: bool, binds: tuple[str, ...]) -> Confinement:
    """The Confinement --user, --as-root and --bind ask for (a usage error for root without --as-root or an
    unknown user, before anything is made); --as-root warned about on stderr."""
    from broker.exec.confinement import Confinement, RootRefused, command_user

    try:
        uid, gid = command_user(user, as_root)
    except RootRefused as exc:
        raise click.UsageError(str(exc)) from None
    except OSError as exc:  # no such user
        raise click.UsageError(str(exc)) from None
    if as_root:
        click.echo("broker: WARNING: --as-root: the command runs as uid 0 (no capabilities, the evidence hidden, "
                   "but every other root-owned file is its own)", err=True)
    return Confinement(uid, gid, binds=list(binds))


@click.command("exec", context_settings=_CTX)
@confinement_options("COMMAND")
@click.option("--dns", "dns_mode", type=click.Choice(["relay", "connectors", "none"]), default="relay",
              show_default=True, help="Name look-ups inside: relay (any name, from the host's name servers), "
              "connectors (only names a connector knows, --resolve and --dns-allow names), none. Only usual "
              "query types are answered, and every name asked is recorded (docs/exec.md).")
@click.option("--dns-allow", multiple=True, metavar="NAME", help="With --dns connectors: also answer NAME.")
@click.option("--proxy-env/--no-proxy-env", default=True, show_default=True,
              help="Also give COMMAND the proxy variables (for the runtimes that honour them); "
              "the rest is captured transparently either way.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def exec_(ctx: click.Context, user: str | None, as_root: bool, binds: tuple[str, ...], dns_mode: str,
          dns_allow: tuple[str, ...], proxy_env: bool, command: tuple[str, ...], **run_opts) -> int:
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
    confinement = confinement_for(user, as_root, binds)  # a clear error before anything is made
    why = capabilities.missing()
    if why:
        click.echo(f"broker: error: {why}", err=True)
        return 2
    config = _proxy_config(run_opts)
    logging.basicConfig(
        level=logging.INFO if run_opts["verbose"] else logging.WARNING,
        handlers=[stderr_handler("broker", logging.Formatter("broker: %(message)s"))],
    )
    confinement.hide(config.vault if not _is_database(config.vault) else None, config.confdir, config.seal_key,
                     config.checkpoint_vault)
    dns = dns_policy(config, dns_mode, dns_allow)
    return asyncio.run(run_contained(config, argv, confinement=confinement, proxy_env=proxy_env, dns=dns))


def dns_policy(config, mode: str, allow: tuple[str, ...]):
    """--dns and --dns-allow: the names the relay answers (broker/exec/dns_query.py)."""
    from broker.exec.dns_query import DnsPolicy
    from broker.proxy.upstream_resolve import parse_resolve
    from journal.connectors import Registry

    registry = Registry.builtin().with_file(config.connectors) if config.connectors else Registry.builtin()
    return DnsPolicy(mode, [*allow, *parse_resolve(config.resolve)],
                     known=lambda name: registry.match(name, "/") is not None)


def _is_database(store: str) -> bool:
    from journal.store import is_database_url

    return is_database_url(store)


def _proxy_config(opts: dict):
    """The run options read exactly as `broker run` reads them (one function: an option added to `run`
    reaches `exec`); those that cannot apply inside one namespace refused with one line."""
    from broker.cli.proxy import run_settings
    from journal.vault import Vault

    if opts.get("workers", 1) != 1:
        raise click.UsageError("--workers: broker exec serves its one namespace with one proxy process; drop it")
    config, _ = run_settings({**opts, "listen": "127.0.0.1:0"})
    if not _is_database(config.vault):
        Vault.create(config.vault)
    return config


def exit_code(returncode: int) -> int:
    """A shell's convention: killed by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


async def run_contained(config, argv: list[str], *, confinement=None, proxy_env: bool = True, dns=None) -> int:
    """Make the namespace, start the broker on its listeners, run COMMAND confined (broker/exec/confine.py),
    stop the broker (every entry on disk), remove the namespace; COMMAND's exit code."""
    from broker.exec.confinement import DEFAULT_USER, Confinement, command_user
    from broker.exec.sandbox import Sandbox
    from broker.proxy.runner import EmbeddedProxy, write_ca_bundle
    from broker.proxy.upstream_resolve import parse_resolve

    if confinement is None:
        confinement = Confinement(*command_user(DEFAULT_USER, False))
    signals = Signals()  # from the start: a signal during set-up stops it cleanly, the command never starts
    sandbox = Sandbox(parse_resolve(config.resolve))
    if dns is not None:
        sandbox.dns_policy = dns
    try:
        await sandbox.open()
        broker = EmbeddedProxy(config, extra_addons=sandbox.contain(config))
        await broker.start()
        sandbox.record_egress(broker, config.session, config.agent)
        try:
            inside, env = sandbox.confined(confinement, argv, str(write_ca_bundle(config.confdir)),
                                           (config.session, config.agent) if proxy_env else None)
            if signals.received:
                return 128 + signals.received[0]
            proc = await asyncio.create_subprocess_exec(*inside, env=env)
            signals.child = proc
            return exit_code(await proc.wait())
        finally:
            await sandbox.stop_recording_egress()  # every refusal an entry before the recorder closes
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
