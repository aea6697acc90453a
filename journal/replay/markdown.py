"""Markdown for the views: one note per resource, an index, timeline pages, the revert plan.

Everything here is deterministic (no clock, sorted keys, stable order). Text that comes from the
journal (ids, titles, message text) is agent- or platform-controlled, so it is written either
inside code spans / fenced blocks or escaped: no journal text can become a link, HTML or a
heading. Links are plain relative Markdown links (`[text](file.md#anchor)`), which Obsidian and
Markdown viewers both follow; anchors are headings whose text is the anchor itself (`seq-4`,
`step-2`), so GitHub-style and Obsidian heading links agree.
"""

from __future__ import annotations

import re

import orjson

from .model import is_ref

_BLOB_REF = re.compile(r"blobs/sha256/([0-9a-f]{2})/\1[0-9a-f]{62}\Z")
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#!|~])")
_BACKTICKS = re.compile(r"`+")
_ESC_NEEDED = re.compile(r"[\\`*_{}\[\]()#!|~&<>\t\n\r\x0b\x0c]|  |^\s|\s$")
_REF_MARK = '"ref":"blobs/sha256/'
CELL_LIMIT = 160
STRING_LIMIT = 300
BODY_LIMIT = 6000


def esc(text: object, limit: int = 200) -> str:
    """Journal text as inert Markdown (escaped, one line, bounded)."""
    s = str(text)
    if len(s) <= limit and _ESC_NEEDED.search(s) is None:
        return s
    s = " ".join(s.split())
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", s)


def code(text: str, in_table: bool = True) -> str:
    """An inline code span that holds any text (backtick runs, pipes in tables, newlines)."""
    cache = _CODE_IN_TABLE if in_table else _CODE_IN_TEXT  # one dict per mode: no key tuple built per call
    out = cache.get(text)
    if out is None:
        out = _code(text, in_table)
        if len(text) <= 48:
            if len(cache) >= 8192:
                cache.clear()
            cache[text] = out
    return out


_CODE_IN_TABLE: dict[str, str] = {}
_CODE_IN_TEXT: dict[str, str] = {}


def _code(text: str, in_table: bool) -> str:
    s = text
    if "\n" in s or "\r" in s:
        s = s.replace("\r", " ").replace("\n", " ")
    if in_table and "|" in s:
        s = s.replace("|", "\\|")
    if "`" not in s and s.strip() == s and s:
        return f"`{s}`"
    runs = [len(m) for m in _BACKTICKS.findall(s)]
    fence = "`" * (max(runs) + 1 if runs else 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s.strip() else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def fence(text: str, lang: str = "") -> str:
    runs = [len(m) for m in _BACKTICKS.findall(text)]
    f = "`" * max(3, (max(runs) + 1) if runs else 3)
    return f"{f}{lang}\n{text}\n{f}"


def dumps(value: object, indent: bool = False) -> str:
    opt = orjson.OPT_SORT_KEYS | (orjson.OPT_INDENT_2 if indent else 0)
    return orjson.dumps(value, option=opt).decode()


def blob_link(ref_obj: dict, prefix: str = "../../") -> str:
    ref = ref_obj.get("ref")
    size = ref_obj.get("size")
    label = f"spilled blob, {human_size(size)}" if isinstance(size, int) else "spilled blob"
    if isinstance(ref, str) and _BLOB_REF.match(ref):
        return f"[{label} {ref[-64:][:12]}…]({prefix}{ref})"
    return f"{label} {code(str(ref))} (not a valid blob reference)"


def human_size(n: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def shorten(value: object) -> object:
    """A copy of a JSON value with long strings cut (for display; views.json keeps everything)."""
    if isinstance(value, str):
        if len(value) > STRING_LIMIT:
            return value[:STRING_LIMIT] + f"… (+{len(value) - STRING_LIMIT} characters)"
        return value
    if isinstance(value, list):
        return [shorten(v) for v in value]
    if isinstance(value, dict):
        return {k: shorten(v) for k, v in value.items()}
    return value


def refs_in(value: object, path: str = "") -> list[tuple[str, dict]]:
    """(field path, ref object) of every spilled value inside a JSON value, in a stable order."""
    out: list[tuple[str, dict]] = []
    if is_ref(value):
        out.append((path or "(body)", value))  # type: ignore[arg-type]
    elif isinstance(value, dict):
        for k in sorted(value):
            out += refs_in(value[k], f"{path}.{k}" if path else k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += refs_in(v, f"{path}[{i}]")
    return out


def cell(value: object, missing: bool = False) -> str:
    """A table cell for a JSON value: blob links for spilled values, else compact JSON in code."""
    if missing:
        return "—"
    refs: list[tuple[str, dict]] = []
    if value is None or isinstance(value, bool | int | float):
        text = dumps(value)
    elif isinstance(value, str):
        text = dumps(value if len(value) <= STRING_LIMIT else shorten(value))
    elif is_ref(value):
        return blob_link(value)  # type: ignore[arg-type]
    else:
        text = dumps(value)
        if _REF_MARK in text:
            refs = refs_in(value)
        if len(text) > STRING_LIMIT:  # only then can a string in it be longer than the limit
            text = dumps(shorten(value))
    if len(text) > CELL_LIMIT:
        text = text[: CELL_LIMIT - 1] + "…"
    out = code(text)
    if refs:
        out += " " + " ".join(blob_link(r) for _, r in refs[:3])
    return out


def body_block(value: object) -> str:
    """A request or response body as a fenced JSON block plus links to any spilled parts."""
    if value is None:
        return "_(no body)_"
    if is_ref(value):
        return "the whole body was spilled: " + blob_link(value)  # type: ignore[arg-type]
    if isinstance(value, str):
        text = value
    else:
        compact = dumps(value)
        text = dumps(shorten(value) if len(compact) > STRING_LIMIT else value, indent=True)
    more = ""
    if len(text) > BODY_LIMIT:
        more = f"\n\n_(cut after {BODY_LIMIT} of {len(text)} characters; views.json has it whole)_"
        text = text[:BODY_LIMIT]
    out = fence(text, "" if isinstance(value, str) else "json") + more
    refs = refs_in(value) if not isinstance(value, str) and _REF_MARK in compact else []
    if refs:
        out += "\n\nSpilled values: " + "; ".join(f"{code(p)} → {blob_link(r)}" for p, r in refs)
    return out


def callout(kind: str, lines: list[str]) -> str:
    """An alert block GitHub and Obsidian both render (`> [!WARNING]`)."""
    return "\n".join([f"> [!{kind}]", *(f"> {line}" for line in lines)])
