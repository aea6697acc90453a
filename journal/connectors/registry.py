"""The connector registry: which connector a call belongs to, and whether it reads or writes.

The built-in connectors are the modules listed in `BUILTIN_MODULES`, one file each. A module
provides::

    NAME: str                                         # lowercase connector name
    match(host, path) -> bool                         # host: lowercase, no port; path: normalised
    classify_effect(method, path, query, headers, body) -> (effect, rule)

where ``query`` is ``dict[str, list[str]]``, ``headers`` has lowercased names and always
carries ``host`` (the normalised host the call went to), and ``body`` is the decoded request
body or None when it was not captured. See `journal.connectors._http` for how host and path
are normalised before a module sees them.

A TOML file (`Registry.with_file`, format in docs/connectors.md) can add connectors, extend
or override built-in ones with extra hosts and rules, or switch one off. Registries are
immutable: `with_file` returns a new one.
"""

from __future__ import annotations

import fnmatch
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from urllib.parse import urlsplit

from journal.errors import InputError

from . import calendar, drive, github, gmail, graph, slack
from ._http import (
    OVERRIDE_HEADERS,
    READ,
    WRITE,
    LazyQuery,
    effect_of_method,
    lower_headers,
    method_token,
    normalise_host,
    normalise_path,
)

# The one place that lists the built-in connectors. Order is match order.
BUILTIN_MODULES: tuple[ModuleType, ...] = (gmail, calendar, drive, slack, github, graph)

EFFECTS = (READ, WRITE)
_NAME = re.compile(r"[a-z][a-z0-9_-]*\Z")


@dataclass(frozen=True)
class Classification:
    """What the registry decided about one call."""

    connector: str  # lowercase connector name
    effect: str  # "read" or "write"
    rule: str  # short human text naming the rule that decided


@dataclass(frozen=True)
class _Rule:
    """One ``[[connector.rule]]`` from a TOML file."""

    methods: frozenset[str] | None  # None: any method
    path: re.Pattern[str] | None  # None: any path
    effect: str
    text: str

    def applies(self, method: str, headers: dict[str, str], path: str) -> bool:
        if self.methods is not None:
            if method_token(method) not in self.methods:
                return False
            # A method override must be allowed by the rule as well (fail closed).
            for name in OVERRIDE_HEADERS:
                value = headers.get(name)
                if value is not None and method_token(value) not in self.methods:
                    return False
        return self.path is None or self.path.fullmatch(path) is not None


@dataclass(frozen=True)
class _Connector:
    name: str
    module: ModuleType | None  # built-in behaviour; None for a connector defined only in TOML
    extra_match: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = ()  # (hosts regex, path prefixes)
    rules: tuple[_Rule, ...] = field(default=())
    model_api: str | None = None  # "anthropic", "openai" or "gemini": a model API (journal.models)

    def matches(self, host: str, path: str) -> bool:
        if self.module is not None and self.module.match(host, path):
            return True
        for hosts, prefixes in self.extra_match:
            if hosts.fullmatch(host) and (not prefixes or path.startswith(prefixes)):
                return True
        return False


class Registry:
    """Recognises connector calls and classifies their effect. Immutable."""

    __slots__ = ("_connectors", "_model_apis")

    def __init__(self, connectors: Sequence[_Connector] = ()) -> None:
        self._connectors: tuple[_Connector, ...] = tuple(connectors)
        self._model_apis = {c.name: c.model_api for c in self._connectors if c.model_api}

    @classmethod
    def builtin(cls) -> Registry:
        """The registry of the built-in connectors (`BUILTIN_MODULES`)."""
        return cls(tuple(_Connector(m.NAME, m) for m in BUILTIN_MODULES))

    def with_file(self, path: str | os.PathLike[str]) -> Registry:
        """A new registry with the connectors TOML file at `path` applied on top of this one.

        Raises InputError (a ValueError) naming the file and the problem when it cannot be read or is wrong."""
        return Registry(_apply_file(self._connectors, Path(path)))

    def names(self) -> list[str]:
        """Connector names, in match order."""
        return [c.name for c in self._connectors]

    def match(self, host: str, path: str) -> str | None:
        """Name of the connector a call to `host` (port allowed) and `path` (query allowed)
        belongs to, or None."""
        connector = self._find(normalise_host(host), normalise_path(path))
        return connector.name if connector is not None else None

    def classify(
        self, method: str, url: str, headers: Iterable[tuple[str, str]], body: bytes | None
    ) -> Classification | None:
        """None when the call belongs to no connector. `body` is the decoded request body, or
        None when it was not available (streamed upload): rules needing the body then fail
        closed to write."""
        try:
            split = urlsplit(url)
            url_host = split.hostname
        except ValueError:  # e.g. a malformed IPv6 literal: no host to recognise
            return None
        hdrs = lower_headers(headers)
        raw_host = url_host or hdrs.get("host") or hdrs.get(":authority") or ""
        host = normalise_host(raw_host)
        path = normalise_path(split.path)
        connector = self._find(host, path)
        if connector is None:
            return None
        hdrs["host"] = host
        for rule in connector.rules:
            if rule.applies(method, hdrs, path):
                return Classification(connector.name, rule.effect, rule.text)
        if connector.module is None:
            effect, text = effect_of_method(method, hdrs)
        else:
            try:
                effect, text = connector.module.classify_effect(
                    method, path, LazyQuery(split.query), hdrs, body
                )
            except Exception as exc:  # a connector bug must not crash capture or under-state a write
                effect, text = WRITE, f"{connector.name} rules failed ({type(exc).__name__}), fail closed"
        if effect not in EFFECTS:
            effect, text = WRITE, f"{connector.name} rules gave no effect, fail closed"
        return Classification(connector.name, effect, text)

    def _find(self, host: str, path: str) -> _Connector | None:
        for connector in self._connectors:
            if connector.matches(host, path):
                return connector
        return None

    def model_api(self, name: str) -> str | None:
        """The model API a connector speaks (`model_api` in a connectors file), or None."""
        return self._model_apis.get(name)

    def __repr__(self) -> str:
        return f"Registry({self.names()})"


# --- TOML files -------------------------------------------------------------------------------

_CONNECTOR_KEYS = frozenset({"name", "hosts", "path_prefixes", "rule", "disabled", "model_api"})
MODEL_APIS = ("anthropic", "openai", "gemini")
_RULE_KEYS = frozenset({"methods", "path", "path_regex", "effect"})
_Fail = Callable[[str], InputError]


def _apply_file(current: tuple[_Connector, ...], path: Path) -> tuple[_Connector, ...]:
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise InputError(f"{path}: cannot read connectors file: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML: {exc}") from None

    def fail(problem: str) -> InputError:
        return InputError(f"{path}: {problem}")

    unknown = set(data) - {"connector"}
    if unknown:
        raise fail(f"unknown top-level key(s) {sorted(unknown)}; expected [[connector]] tables")
    entries = data.get("connector", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise fail("'connector' must be an array of tables ([[connector]])")

    connectors = list(current)
    added: list[_Connector] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries, 1):
        where = f"connector #{i}"
        name = entry.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise fail(f"{where}: 'name' must be a lowercase name like \"jira\" (letters, digits, - and _)")
        where = f"connector #{i} ({name!r})"
        if name in seen:
            raise fail(f"{where}: defined twice in this file")
        seen.add(name)
        unknown = set(entry) - _CONNECTOR_KEYS
        if unknown:
            raise fail(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(_CONNECTOR_KEYS)}")
        existing = next((k for k, c in enumerate(connectors) if c.name == name), None)

        disabled = entry.get("disabled", False)
        if not isinstance(disabled, bool):
            raise fail(f"{where}: 'disabled' must be true or false")
        if disabled:
            if set(entry) - {"name", "disabled"}:
                raise fail(f"{where}: a disabled connector takes no other keys")
            if existing is None:
                raise fail(f"{where}: no connector of that name to disable")
            del connectors[existing]
            continue

        extra = _parse_match(entry, fail, where)
        model_api = entry.get("model_api")
        if model_api is not None and model_api not in MODEL_APIS:
            raise fail(f"{where}: 'model_api' must be one of {list(MODEL_APIS)}")
        rules = tuple(
            _parse_rule(rule, fail, f"{where} rule #{n}", f"{path.name} rule {n}")
            for n, rule in enumerate(_rule_list(entry, fail, where), 1)
        )
        if existing is None:
            if not extra:
                raise fail(f"{where}: a new connector needs 'hosts'")
            added.append(_Connector(name, None, extra, rules, model_api))
        else:
            old = connectors[existing]
            connectors[existing] = replace(
                old, extra_match=old.extra_match + extra, rules=rules + old.rules, model_api=model_api or old.model_api
            )
    return tuple(added) + tuple(connectors)


def _string_list(entry: dict, key: str, fail: _Fail, where: str) -> list[str] | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise fail(f"{where}: '{key}' must be a non-empty list of non-empty strings")
    return value


def _parse_match(entry: dict, fail: _Fail, where: str) -> tuple[tuple[re.Pattern[str], tuple[str, ...]], ...]:
    hosts = _string_list(entry, "hosts", fail, where)
    prefixes = _string_list(entry, "path_prefixes", fail, where)
    if hosts is None:
        if prefixes is not None:
            raise fail(f"{where}: 'path_prefixes' needs 'hosts' in the same table")
        return ()
    for host in hosts:
        if "/" in host or host.count(":") == 1 or host != host.strip():
            raise fail(f"{where}: host {host!r} must be a bare host name or glob (no scheme, port or path)")
    for prefix in prefixes or ():
        if not prefix.startswith("/"):
            raise fail(f"{where}: path prefix {prefix!r} must start with '/'")
    pattern = re.compile("|".join(f"(?:{fnmatch.translate(h.lower().rstrip('.'))})" for h in hosts))
    return ((pattern, tuple(normalise_path(p) for p in prefixes or ())),)


def _rule_list(entry: dict, fail: _Fail, where: str) -> list[dict]:
    rules = entry.get("rule", [])
    if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
        raise fail(f"{where}: 'rule' must be an array of tables ([[connector.rule]])")
    return rules


def _parse_rule(rule: dict, fail: _Fail, where: str, text: str) -> _Rule:
    unknown = set(rule) - _RULE_KEYS
    if unknown:
        raise fail(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(_RULE_KEYS)}")
    effect = rule.get("effect")
    if effect not in EFFECTS:
        raise fail(f'{where}: \'effect\' must be "read" or "write"')
    methods = _string_list(rule, "methods", fail, where)
    method_set = None
    if methods is not None:
        tokens = [method_token(m) for m in methods]
        if None in tokens:
            raise fail(f"{where}: 'methods' must hold HTTP method names like \"POST\"")
        method_set = frozenset(t for t in tokens if t is not None)
    if "path" in rule and "path_regex" in rule:
        raise fail(f"{where}: give 'path' (glob) or 'path_regex', not both")
    pattern = None
    shown = "*"
    if "path" in rule:
        glob = rule["path"]
        if not isinstance(glob, str) or not glob.startswith("/"):
            raise fail(f"{where}: 'path' must be a glob starting with '/'")
        pattern = re.compile(fnmatch.translate(glob))
        shown = glob
    elif "path_regex" in rule:
        regex = rule["path_regex"]
        if not isinstance(regex, str):
            raise fail(f"{where}: 'path_regex' must be a string")
        try:
            pattern = re.compile(regex)
        except re.error as exc:
            raise fail(f"{where}: 'path_regex' is not a valid regular expression: {exc}") from None
        shown = f"~{regex}"
    methods_shown = ",".join(sorted(method_set)) if method_set else "any"
    return _Rule(method_set, pattern, effect, f"{text} ({methods_shown} {shown})")
