"""`broker env`: the settings a client needs to go through the broker, for the shell it runs in.

Stdout holds only the settings (for `eval`, `| source`, `Invoke-Expression`, or a parser); stderr says,
as `#` comment lines, which client families ignore the proxy variables whatever is set (docs/clients.md
has the table, each row tested in tests/e2e/test_clients.py).
"""

from __future__ import annotations

import shlex

import click

from broker.cli.main import summary
from broker.cli.options import parse_listen
from broker.cli.proxy import confdir_option, listen_option

SHELLS = ("posix", "fish", "powershell")


def _fish_quote(value: str) -> str:
    """A fish single-quoted string: inside it only backslash and the quote are special."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _powershell_quote(value: str) -> str:
    """A PowerShell single-quoted (verbatim) string: only the quote is special, doubled."""
    return "'" + value.replace("'", "''") + "'"


def setting_line(shell: str, name: str, value: str) -> str:
    """One variable set and exported to the programs the shell starts."""
    if shell == "fish":
        return f"set -gx {name} {_fish_quote(value)}"
    if shell == "powershell":
        return f"$env:{name} = {_powershell_quote(value)}"
    return f"export {name}={shlex.quote(value)}"


ENV_LIMITS = (
    "What proxy variables cannot do: these clients ignore them whatever is set, so their calls bypass",
    "the broker and are not recorded, unless set up as docs/clients.md says (or run under `broker exec`):",
    "- Node's built-in fetch (and SDKs on it: Octokit, the openai Node SDK): Node 20 ignores HTTPS_PROXY;",
    "  Node 24 and later honour it with NODE_USE_ENV_PROXY=1 (set here); on Node 20/22 use undici's",
    "  EnvHttpProxyAgent as the dispatcher.",
    "- aiohttp: only ClientSession(trust_env=True) reads them.",
    "- urllib3: PoolManager() never does; ProxyManager(url) sends the URL's user and password only with",
    "  proxy_headers=urllib3.make_headers(proxy_basic_auth='SESSION:AGENT').",
    "- httplib2 (under google-api-python-client) ignores them unless PySocks is installed.",
    "- pycurl (libcurl) reads the proxy variables but not CURL_CA_BUNDLE: set CAINFO to the bundle.",
    "- Java: the JVM reads -Dhttps.proxyHost/-Dhttps.proxyPort, never the variables.",
    "For any program you cannot change, `broker exec` records every call without its cooperation.",
)
"""Printed by `broker env` on stderr as `#` lines (seen when the settings are eval'ed)."""


@click.command(short_help=summary("env"))
@listen_option
@confdir_option
@click.option("--session", default=None, help="Session id to put in the proxy URL.")
@click.option("--agent", default=None, help="Agent name to put in the proxy URL.")
@click.option("--shell", type=click.Choice(SHELLS), default="posix", show_default=True,
              help='The shell to print for: posix (eval "$(broker env)"), fish (broker env --shell fish | '
              "source) or powershell (broker env --shell powershell | Out-String | Invoke-Expression).")
def env(listen: str, confdir: str, session: str | None, agent: str | None, shell: str) -> int:
    """Print the settings a client needs to go through the broker (eval "$(broker env)").

    The proxy variables (HTTPS_PROXY and HTTP_PROXY, both spellings, with SESSION:AGENT as the proxy
    user and password; NODE_USE_ENV_PROXY=1 for Node's fetch; GIT_HTTP_PROXY_AUTHMETHOD=basic so git
    sends them), and every CA variable common clients read (SSL_CERT_FILE, REQUESTS_CA_BUNDLE,
    CURL_CA_BUNDLE, NODE_EXTRA_CA_CERTS, HTTPLIB2_CA_CERTS, GIT_SSL_CAINFO, ...) pointing at a bundle
    of the system roots and the broker's CA. `#` lines on stderr name the clients that ignore proxy
    variables whatever is set: their calls bypass the broker and are not recorded.
    """
    from broker.exec.environment import ca_variables, proxy_url, proxy_variables
    from broker.proxy.runner import write_ca_bundle

    host, port = parse_listen(listen)
    bundle = str(write_ca_bundle(confdir))
    settings = {**proxy_variables(proxy_url(host, port, session, agent)), **ca_variables(bundle)}
    for name, value in settings.items():
        click.echo(setting_line(shell, name, value))
    for line in ENV_LIMITS:  # on stderr: stdout stays settings only, for eval and for parsers
        click.echo(f"# {line}", err=True)
    return 0


COMMANDS = [env]
