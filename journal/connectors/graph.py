"""Microsoft Graph (mail, calendar and the rest of the API).

Match: ``graph.microsoft.com`` and the national clouds ``graph.microsoft.us``,
``dod-graph.microsoft.us`` and ``microsoftgraph.chinacloudapi.cn``, on any path (these hosts
serve only Graph; calls live under ``/v1.0/`` and ``/beta/``).

Effect: GET, HEAD and OPTIONS read; other methods write, except POST to these actions, which
are documented reads: ``getSchedule``, ``findMeetingTimes``, ``getMailTips``,
``getMemberGroups``, ``getMemberObjects``, ``checkMemberGroups``, ``checkMemberObjects``,
``getByIds`` and ``/search/query``. ``POST /{version}/$batch`` (JSON ``requests[]``) is a
read only when every sub-request reads; a body that is missing or malformed, or a nested
batch, makes it a write.
"""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

from ._http import (
    READ,
    WRITE,
    effect_of_method,
    method_token,
    normalise_path,
    override_forcing_write,
    parse_query,
)

NAME = "graph"

HOSTS = frozenset(
    {"graph.microsoft.com", "graph.microsoft.us", "dod-graph.microsoft.us", "microsoftgraph.chinacloudapi.cn"}
)
READ_ACTIONS = frozenset(
    {
        "getSchedule",
        "findMeetingTimes",
        "getMailTips",
        "getMemberGroups",
        "getMemberObjects",
        "checkMemberGroups",
        "checkMemberObjects",
        "getByIds",
    }
)
_VERSIONED = re.compile(r"/(v1\.0|beta)(/.*)?\Z", re.DOTALL)


def match(host: str, path: str) -> bool:
    """True for a Graph call (host lowercase without port; path normalised)."""
    return host in HOSTS


def classify_effect(
    method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], body: bytes | None
) -> tuple[str, str]:
    """(effect, rule) for one Graph call; see the module docstring."""
    versioned = _VERSIONED.match(path)
    if versioned is None or method_token(method) != "POST" or override_forcing_write(headers) is not None:
        return effect_of_method(method, headers)
    version, rest = versioned.group(1), (versioned.group(2) or "").rstrip("/")
    if rest == "/$batch":
        return classify_batch(version, body)
    action = rest.rpartition("/")[2]
    if action in READ_ACTIONS or rest == "/search/query":
        return READ, f"graph action {action}"
    return effect_of_method(method, headers)


def classify_batch(version: str, body: bytes | None) -> tuple[str, str]:
    """(effect, rule) for a JSON batch: read only if every sub-request reads."""
    if body is None:
        return WRITE, "graph $batch, body not captured"
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return WRITE, "graph $batch, body is not JSON"
    requests = payload.get("requests") if isinstance(payload, dict) else None
    if not isinstance(requests, list) or not requests:
        return WRITE, "graph $batch without requests[]"
    for i, sub in enumerate(requests, 1):
        effect, rule = _classify_sub_request(version, sub)
        if effect != READ:
            return WRITE, f"graph $batch, request {i}: {rule}"
    return READ, f"graph $batch of {len(requests)} reads"


def _classify_sub_request(version: str, sub: object) -> tuple[str, str]:
    if not isinstance(sub, dict):
        return WRITE, "not an object"
    method, url = sub.get("method"), sub.get("url")
    if not isinstance(method, str) or not isinstance(url, str):
        return WRITE, "method or url missing"
    headers = sub.get("headers") or {}
    if not isinstance(headers, dict):
        return WRITE, "headers not an object"
    headers = {str(k).lower(): str(v) for k, v in headers.items()}
    if "://" in url:
        split = urlsplit(url)
        raw_path, query = split.path, split.query
    else:
        raw_path, _, query = url.partition("?")
        raw_path = f"/{version}/{raw_path.lstrip('/')}"
    path = normalise_path(raw_path)
    if path.rstrip("/").endswith("/$batch"):
        return WRITE, "nested $batch"
    sub_body = sub.get("body")
    encoded = None if sub_body is None else json.dumps(sub_body).encode()
    return classify_effect(method, path, parse_query(query), headers, encoded)
