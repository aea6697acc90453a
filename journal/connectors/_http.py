"""HTTP-level pieces shared by the connector modules (this module is not a connector).

The registry normalises every request once, here, before any connector function sees it:

- host: lowercase, port and trailing dot removed (``API.GitHub.com:443`` -> ``api.github.com``).
- path: query and fragment removed, percent-decoded (``%40`` -> ``@``) except ``%2F``, which
  stays encoded so an encoded slash can never split or join path segments, and dot segments
  removed as RFC 3986 5.2.4 does (``/a/./b/../c`` -> ``/a/c``), so a call is matched on the path
  the server will act on.

Also here: what an HTTP method means for the effect (GET, HEAD and OPTIONS read; everything
else writes), method-override headers, and `RouteTable`, the path-template matcher the
Google connectors use (literal segments win over ``{placeholders}``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote

READ = "read"
WRITE = "write"
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

# Headers some servers honour to replace the request method. Google honours the first one (see
# `_google`); for every other connector none is known to be honoured, so they can only make a
# call count as a write, never as a read (fail closed).
OVERRIDE_HEADERS = ("x-http-method-override", "x-http-method", "x-method-override")

_METHOD_TOKEN = re.compile(r"[A-Z][A-Z0-9_-]*\Z")
_ENCODED_SLASH = re.compile(r"%2[Ff]")
_DOT_SEGMENT = re.compile(r"(?:^|/)\.\.?(?:/|$)")


def normalise_host(host: str) -> str:
    """Lowercase host name without port or trailing dot. IPv6 literals keep their colons."""
    h = host.strip().lower()
    if h.startswith("["):
        end = h.find("]")
        return h[1:end] if end != -1 else h
    if h.count(":") == 1:
        h = h.partition(":")[0]
    return h.rstrip(".")


def normalise_path(path: str) -> str:
    """The path a connector matches on: see the module docstring."""
    for sep in ("?", "#"):
        cut = path.find(sep)
        if cut != -1:
            path = path[:cut]
    if "%" in path:
        path = unquote(_ENCODED_SLASH.sub("%252F", path))
    if not path.startswith("/"):
        path = "/" + path
    if "." in path and _DOT_SEGMENT.search(path):
        path = _remove_dot_segments(path)
    return path


def _remove_dot_segments(path: str) -> str:
    segments = path.split("/")[1:]
    out: list[str] = []
    for seg in segments:
        if seg == "..":
            if out:
                out.pop()
        elif seg != ".":
            out.append(seg)
    result = "/" + "/".join(out)
    if segments and segments[-1] in (".", "..") and not result.endswith("/"):
        result += "/"
    return result


def parse_query(query: str) -> dict[str, list[str]]:
    """Query string as a dict of value lists (blank values kept)."""
    return parse_qs(query, keep_blank_values=True) if query else {}


class LazyQuery(Mapping[str, list[str]]):
    """`parse_query` of a query string, parsed only when a connector rule first reads it: most rules
    decide on the method and path alone, and parsing costs more than the rest of the decision."""

    __slots__ = ("_parsed", "_query")

    def __init__(self, query: str) -> None:
        self._query = query
        self._parsed: dict[str, list[str]] | None = None

    def _dict(self) -> dict[str, list[str]]:
        if self._parsed is None:
            self._parsed = parse_query(self._query)
        return self._parsed

    def __getitem__(self, key: str) -> list[str]:
        return self._dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())

    def __contains__(self, key: object) -> bool:
        return key in self._dict()


def lower_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Header names lowercased; repeated headers joined with ", " as HTTP allows."""
    out: dict[str, str] = {}
    for name, value in headers:
        key = name.lower()
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out


def method_token(value: str) -> str | None:
    """Uppercased method name, or None when the value is not a plain method token."""
    m = value.strip().upper()
    return m if _METHOD_TOKEN.match(m) else None


def override_forcing_write(headers: dict[str, str], names: tuple[str, ...] = OVERRIDE_HEADERS) -> str | None:
    """If one of the override headers `names` asks for anything but a read method, say which."""
    for name in names:
        value = headers.get(name)
        if value is not None and method_token(value) not in READ_METHODS:
            return f"{name} {value.strip()[:20]}"
    return None


def effect_of_method(method: str, headers: dict[str, str]) -> tuple[str, str]:
    """The default rule: GET/HEAD/OPTIONS read, any other method writes.

    A method-override header naming a write method makes the call a write even though the
    connector is not known to honour it: the evidence must not under-state what happened.
    """
    m = method_token(method)
    if m is None:
        return WRITE, "unrecognised method"
    reason = override_forcing_write(headers)
    if reason is not None:
        return WRITE, f"method {m} with {reason}"
    return (READ if m in READ_METHODS else WRITE), f"method {m}"


@dataclass(frozen=True)
class Route:
    """One API method: HTTP method plus a path template such as ``files/{fileId}/copy``."""

    method: str
    template: str
    name: str  # the API's own method id, e.g. "files.copy"
    effect: str | None  # None: decided by the HTTP method
    segments: tuple[str | None, ...]  # literal segment, or None for a placeholder
    params: tuple[str, ...]  # placeholder names, in order

    def bind(self, segments: list[str]) -> dict[str, str] | None:
        """Placeholder values when `segments` fit this template, else None."""
        if len(segments) != len(self.segments):
            return None
        values = []
        for want, got in zip(self.segments, segments, strict=True):
            if want is None:
                if not got:
                    return None
                values.append(got)
            elif want != got:
                return None
        return dict(zip(self.params, values, strict=True))


class RouteTable:
    """Path templates per HTTP method. Literal segments are tried before placeholders, so
    ``DELETE files/trash`` (emptyTrash) wins over ``DELETE files/{fileId}``."""

    def __init__(self, rows: Iterable[tuple[str, str, str] | tuple[str, str, str, str]]) -> None:
        index: dict[tuple[str, int], list[Route]] = {}
        for row in rows:
            method, template, name = row[0], row[1], row[2]
            effect = row[3] if len(row) > 3 else None
            segs: list[str | None] = []
            params: list[str] = []
            for part in template.split("/"):
                if part.startswith("{") and part.endswith("}"):
                    segs.append(None)
                    params.append(part[1:-1])
                else:
                    segs.append(part)
            route = Route(method, template, name, effect, tuple(segs), tuple(params))
            index.setdefault((method, len(segs)), []).append(route)
        for routes in index.values():
            routes.sort(key=lambda r: tuple(seg is None for seg in r.segments))
        self._index = index
        # What `Route.bind` compares, laid out for `find`: (route, (position, literal) pairs, placeholder
        # positions); a route is left at its first literal that differs (about 3x faster than `bind`,
        # which pairs every segment up first).
        self._plans = {
            key: [(r, tuple((i, s) for i, s in enumerate(r.segments) if s is not None),
                   tuple(i for i, s in enumerate(r.segments) if s is None)) for r in routes]
            for key, routes in index.items()
        }

    def find(self, method: str, path: str) -> tuple[Route, dict[str, str]] | None:
        """The route for `method` and a service-relative `path` (no leading slash), with its
        placeholder values; None when no template fits. The same answer as the first route, in order,
        whose `Route.bind` fits."""
        segments = path.split("/")
        for route, literals, slots in self._plans.get((method, len(segments)), ()):
            for i, want in literals:
                if segments[i] != want:
                    break
            else:
                values = [segments[i] for i in slots]
                if all(values):
                    return route, dict(zip(route.params, values, strict=True))
        return None

    def routes(self) -> list[Route]:
        return [r for routes in self._index.values() for r in routes]
