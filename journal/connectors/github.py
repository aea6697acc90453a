"""GitHub REST and GraphQL APIs.

Match: ``api.github.com`` and ``uploads.github.com`` (release assets), plus the content hosts
``codeload.github.com``, ``raw.githubusercontent.com`` and ``objects.githubusercontent.com``
(archive, raw-file and asset downloads), all on any path; and on ``github.com`` itself, git's smart
HTTP protocol (``/OWNER/REPO[.git]/info/refs``, ``.../git-upload-pack``, ``.../git-receive-pack``), which
is what ``git clone``, ``git fetch`` and ``git push`` speak. Other ``github.com`` pages are no
connector's (recorded as an unknown host unless passed). GitHub Enterprise Server runs on the
customer's own host under ``/api/v3/``, ``/api/graphql`` and ``/api/uploads/``: add that host
with a connectors TOML file (see docs/connectors.md); the rules below strip the ``/api/v3``
prefix, so they apply unchanged.

Effect: GET, HEAD and OPTIONS read; POST, PUT, PATCH and DELETE write, except
``POST /markdown`` and ``POST /markdown/raw`` (rendering, a read) and ``/graphql``, which is
typed by its operation (`journal.connectors.graphql`: mutation writes, query reads, anything
unclear writes). Git: ``info/refs`` discovery and ``git-upload-pack`` (clone, fetch: a POST that only
reads) read; ``git-receive-pack`` (push) writes, whatever its method.
"""

from __future__ import annotations

import re

from . import graphql
from ._http import READ, WRITE, effect_of_method, method_token, override_forcing_write

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
GIT_HOST = "github.com"
_GIT_PATH = re.compile(r"/[^/]+/[^/]+/(info/refs|git-upload-pack|git-receive-pack)")
"""git's smart HTTP endpoints under a repository (`/OWNER/REPO[.git]/...`), query already removed."""


def match(host: str, path: str) -> bool:
    """True for a GitHub call (host lowercase without port; path normalised)."""
    return host in HOSTS or (host == GIT_HOST and _GIT_PATH.fullmatch(path) is not None)


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
    git = _GIT_PATH.fullmatch(path) if headers.get("host") == GIT_HOST else None
    if git is not None and override_forcing_write(headers) is None:
        if git.group(1) == "git-receive-pack":
            return WRITE, "git push (git-receive-pack)"
        if git.group(1) == "git-upload-pack":
            return READ, "git clone/fetch (git-upload-pack)"
        return effect_of_method(method, headers)  # info/refs: ref discovery, a GET
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
