"""What the Google replay modules (gmail, calendar, drive) share; not a connector itself.

Routes come from the capture-time route tables (`journal.connectors.<api>.ROUTES`, built from the
discovery documents), so replay and capture name calls the same way. Google honours
`X-HTTP-Method-Override`, so the effective method comes from that header when present.
"""

from __future__ import annotations

from functools import lru_cache

from journal.connectors import _google as capture_google
from journal.connectors._http import RouteTable

from ..model import Call


def method(call: Call) -> str:
    m, _ = capture_google.effective_method(call.method, call.headers)
    return m or call.method


def route(call: Call, routes: RouteTable, prefixes: tuple[str, ...]) -> tuple[str, dict[str, str], str] | None:
    """(API method id, path parameters, prefix matched) for a call, or None when no route fits.
    The parameters dict is shared between calls with the same path: treat it as read-only."""
    return _route(routes, prefixes, method(call), call.path)


@lru_cache(maxsize=1 << 12)
def _route(routes: RouteTable, prefixes: tuple[str, ...], m: str, path: str) -> tuple[str, dict[str, str], str] | None:
    for prefix in prefixes:
        if path.startswith(prefix):
            found = routes.find(m, path[len(prefix) :].rstrip("/"))
            if found is not None:
                return found[0].name, found[1], prefix
            return None
    return None


def is_batch(call: Call, batch_path: str) -> bool:
    return call.path == batch_path or call.path.startswith(batch_path + "/")


def same_account(value: str, call: Call, alias: str) -> str:
    """`alias` ("me", "primary") for the alias itself and for the principal's own address."""
    if value == alias or (call.principal and value.lower() == call.principal.lower()):
        return alias
    return value


def ids(items: object, name: str = "id") -> list[dict]:
    """The objects in a list that carry a string `name` (list responses)."""
    if not isinstance(items, list):
        return []
    return [x for x in items if isinstance(x, dict) and isinstance(x.get(name), str) and x[name]]
