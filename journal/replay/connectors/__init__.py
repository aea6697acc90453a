"""Replay rules, one module per connector. Adding a connector is adding one file here.

A module is picked when its `NAME` equals an entry's `connector`; entries of any other connector
(for example one defined in a connectors TOML file) use `generic`, the REST fallback. A module:

    NAME: str                                          # the entries' connector name
    touches(call: Call) -> list[Touch] | None          # resources the call read or changed;
                                                       # None: let the generic REST rules decide
    invert(write: Write) -> Inverse                    # undo one write Touch this module produced

and optionally:

    failure(call: Call) -> str | None                  # why a call with a 2xx status still failed
                                                       # (Slack's {"ok": false}); None: it did not
    describe(kind: str, key: tuple, state: dict) -> str | None   # a short human title

`Call`, `Touch`, `Write`, `Inverse` and helpers are in `journal.replay.model`. Rules:

- keys are tuples of strings `(NAME, kind, id...)`; canonicalise aliases (Gmail `me`, Calendar
  `primary`) so every call on one resource yields the same key;
- `Touch.state` is built from the response only (the platform's answer), never from the request;
- never open a blob: spilled values (`{"sha256","size","ref"}`) stay as they are, views link them;
- `invert` never executes anything and must not raise for odd input (the engine turns an
  exception into a step that says the rules failed).

Modules whose name starts with `_` are helpers, not connectors.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from . import generic

_MODULES: dict[str, ModuleType] | None = None


def modules() -> dict[str, ModuleType]:
    """NAME -> module for every connector module in this package (generic included)."""
    global _MODULES
    if _MODULES is None:
        found: dict[str, ModuleType] = {}
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
            if info.name.startswith("_"):
                continue
            mod = importlib.import_module(f"{__name__}.{info.name}")
            name = getattr(mod, "NAME", None)
            if isinstance(name, str) and callable(getattr(mod, "touches", None)) and callable(
                getattr(mod, "invert", None)
            ):
                found[name] = mod
        _MODULES = found
    return _MODULES


def for_connector(name: str) -> ModuleType:
    """The module replaying entries of connector `name` (generic when none is specific)."""
    return modules().get(name, generic)


__all__ = ["for_connector", "generic", "modules"]
