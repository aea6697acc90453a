"""The variables a client needs to trust the broker's CA and (when it honours them) use its proxy.

One implementation for `broker env`, `broker exec` and `broker mcp --through-broker`: each runtime
reads its own variable, so every common one is set to the same bundle (system roots + broker CA).
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote

# Who reads which: OpenSSL-based clients (Python's ssl, Ruby, PHP, ...) SSL_CERT_FILE; requests
# REQUESTS_CA_BUNDLE; curl CURL_CA_BUNDLE; Node NODE_EXTRA_CA_CERTS (added to its own roots);
# httplib2 (google-api-python-client) HTTPLIB2_CA_CERTS; git GIT_SSL_CAINFO; pip PIP_CERT;
# AWS SDKs / boto AWS_CA_BUNDLE; Deno DENO_CERT; cargo CARGO_HTTP_CAINFO.
CA_VARIABLES = (
    "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "HTTPLIB2_CA_CERTS",
    "GIT_SSL_CAINFO", "PIP_CERT", "AWS_CA_BUNDLE", "DENO_CERT", "CARGO_HTTP_CAINFO",
)
PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")
# Variables that would send a client around the broker or name another proxy.
CLEARED_VARIABLES = ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy")


def proxy_url(host: str, port: int, session: str | None = None, agent: str | None = None) -> str:
    """The broker's proxy URL; session and agent ride as the proxy user and password."""
    creds = ""
    if session or agent:
        creds = f"{quote(session or 'default', safe='')}:{quote(agent or 'unknown', safe='')}@"
    return f"http://{creds}{host}:{port}"


def ca_variables(bundle: str) -> dict[str, str]:
    return dict.fromkeys(CA_VARIABLES, bundle)


PROXY_COMPANIONS = {"NODE_USE_ENV_PROXY": "1", "GIT_HTTP_PROXY_AUTHMETHOD": "basic"}
"""Set with the proxy variables: Node's built-in fetch ignores HTTPS_PROXY unless NODE_USE_ENV_PROXY is set
(Node >= 24); git sends the proxy URL's user and password (the session and agent) only when told the proxy's
auth method, since it otherwise waits for a 407 the broker never sends."""


def proxy_variables(url: str) -> dict[str, str]:
    return {**dict.fromkeys(PROXY_VARIABLES, url), **PROXY_COMPANIONS}


def client_environment(base: Mapping[str, str], bundle: str, proxy: str | None) -> dict[str, str]:
    """`base` with the CA variables set, and the proxy variables when `proxy` is given (else removed)."""
    env = dict(base)
    for name in CLEARED_VARIABLES:
        env.pop(name, None)
    for name in (*PROXY_VARIABLES, *PROXY_COMPANIONS):
        env.pop(name, None)
    env.update(ca_variables(bundle))
    if proxy:
        env.update(proxy_variables(proxy))
    return env
