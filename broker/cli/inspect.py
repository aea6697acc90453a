"""`broker inspect`: serve the read-only web console over a vault (broker/inspector/)."""

from __future__ import annotations

import ipaddress
import secrets
import webbrowser

import click

from broker.cli.options import bind, parse_listen, reading_vault, store_option, vault_option


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command()
@vault_option
@store_option
@click.option("--listen", default="127.0.0.1:8090", show_default=True,
              help="HOST:PORT to serve on. Anything but loopback requires a token.")
@click.option("--open", "open_browser", is_flag=True, help="Open the page in a web browser.")
@click.option("--token", default=None, envvar="BROKER_INSPECT_TOKEN",
              help="Require this token on every request (generated and printed when off loopback and not given).")
def inspect(vault_dir: str, store: str | None, listen: str, open_browser: bool, token: str | None) -> int:
    """Serve a read-only web console over the vault: sessions, timelines, entries, views, revert
    plans, search, and every hash re-checked in the browser. GET and HEAD only."""
    import uvicorn

    from broker.inspector import create_app

    vault = reading_vault(store, vault_dir)
    host, port = parse_listen(listen)
    if not is_loopback(host) and not token:
        token = secrets.token_urlsafe(24)
        click.echo("not a loopback address: every request needs the token printed below", err=True)
    sock = bind(host, port)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{sock.getsockname()[1]}/" + (f"?token={token}" if token else "")
    click.echo(f"inspector for {getattr(vault, 'label', vault.root)} at {url}  (Ctrl-C to stop)", err=True)
    if token:
        click.echo(f"token: {token}", err=True)
    server = uvicorn.Server(uvicorn.Config(create_app(vault, token), log_level="warning", access_log=False,
                                           lifespan="off", server_header=False))
    if open_browser:
        webbrowser.open(url)
    server.run(sockets=[sock])
    return 0


COMMANDS = [inspect]
