"""How resources and plan steps are named in the outputs: note file names, titles, links, step flags.

Shared by the fold (which labels a resource when it writes it to the spill store, so the views can
link it without loading its state again) and the views.
"""

from __future__ import annotations

import hashlib
import re

import orjson

from . import connectors
from .markdown import code, esc

PAGE = 500
"""Entries per timeline page."""
TITLES = {"gmail": "Gmail", "calendar": "Calendar", "drive": "Drive", "slack": "Slack", "github": "GitHub",
          "graph": "Microsoft Graph"}
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def note_name(key: tuple) -> str:
    readable = _UNSAFE.sub("_", "-".join(key)).strip("._-")[:80].rstrip("._-") or "resource"
    digest = hashlib.sha256(orjson.dumps(list(key))).hexdigest()[:10]
    return f"{readable}-{digest}.md"


def resource_id(key: tuple | None) -> str | None:
    return "/".join(key) if key else None


def title(key: tuple) -> str:
    return f"{TITLES.get(key[0], key[0])} {key[1]} {'/'.join(key[2:])}"


def describe(handler: str, key: tuple, state: dict) -> str | None:
    """The connector's short title for a resource (None when it has none, or its rules fail)."""
    module = connectors.modules().get(handler)
    fn = getattr(module, "describe", None)
    if fn is None or not state:
        return None
    try:
        text = fn(key[1], key, state)
    except Exception:  # noqa: BLE001 - a title is never worth failing a replay
        return None
    return " ".join(text.split())[:120] if isinstance(text, str) and text.strip() else None


def link(key: tuple, name: str, description: str | None) -> str:
    """The Markdown link to a resource's note."""
    return f"[{esc(title(key))}]({name})" + (f" ({esc(description, 60)})" if description else "")


def unknown_link(key: tuple) -> str:
    """How a resource without a note (a parent never touched itself) is named."""
    return code("/".join(key))


def step_flags(revertible: bool, blind: bool, approximate: bool, has_call: bool) -> str:
    flags = ["revertible" if revertible else "**not revertible**"]
    if blind:
        flags.append("**blind**")
    if approximate:
        flags.append("approximate")
    if not has_call:
        flags.append("no call")
    return ", ".join(flags)


__all__ = ["PAGE", "TITLES", "describe", "link", "note_name", "resource_id", "step_flags", "title", "unknown_link"]
