"""GitHub REST and GraphQL APIs.

Match: ``api.github.com`` and ``uploads.github.com`` (release assets), plus the content hosts
``codeload.github.com``, ``raw.githubusercontent.com`` and ``objects.githubusercontent.com``
(archive, raw-file and asset downloads), all on any path. GitHub Enterprise Server runs on the
customer's own host under ``/api/v3/``, ``/api/graphql`` and ``/api/uploads/``: add that host
with a connectors TOML file (see docs/connectors.md); the rules below strip the ``/api/v3``
prefix, so they apply unchanged.

Effect: GET, HEAD and OPTIONS read; POST, PUT, PATCH and DELETE write, except
``POST /markdown`` and ``POST /markdown/raw`` (rendering, a read) and ``/graphql``, which is
typed by its operation (`journal.connectors.graphql`: mutation writes, query reads, anything
unclear writes).
"""

from __future__ import annotations

from . import graphql
from ._http import READ, effect_of_method, method_token, override_forcing_write

NAME = "github"

HOSTS = frozenset(
    {
        "api.github.com",
        "uploads.github.com",
        "codeload.github.com",
        "raw.githubusercontent.com",
        "objects.githubusercontent.com",
    }
)
GHES_REST_PREFIX = "/api/v3"
GHES_GRAPHQL_PATH = "/api/graphql"
GRAPHQL_PATH = "/graphql"
MARKDOWN_PATHS = frozenset({"/markdown", "/markdown/raw"})


def match(host: str, path: str) -> bool:
    """True for a GitHub call (host lowercase without port; path normalised)."""
    return host in HOSTS


def api_path(path: str) -> str:
    """The REST path as on api.github.com: GHES's ``/api/v3`` prefix removed."""
    if path.startswith(GHES_REST_PREFIX + "/"):
        return path[len(GHES_REST_PREFIX) :]
    if path == GHES_GRAPHQL_PATH or path == GHES_GRAPHQL_PATH + "/":
        return GRAPHQL_PATH
    return path


def classify_effect(
    method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], body: bytes | None
) -> tuple[str, str]:
    """(effect, rule) for one GitHub call; see the module docstring."""
    path = api_path(path)
    m = method_token(method)
    if path in (GRAPHQL_PATH, GRAPHQL_PATH + "/") and override_forcing_write(headers) is None:
        if m == "POST":
            return graphql.classify_body(body, headers.get("content-type", ""))
        if m in ("GET", "HEAD"):
            typed = graphql.classify_query_string(query)
            if typed is not None:
                return typed
    elif m == "POST" and path in MARKDOWN_PATHS and override_forcing_write(headers) is None:
        return READ, "github markdown render"
    return effect_of_method(method, headers)
