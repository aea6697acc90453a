"""Slack Web API, file hosts and incoming webhooks.

Match: ``slack.com``, ``slack-gov.com`` and their subdomains (workspace, enterprise) with
``/api/``; ``files.slack.com`` and ``files.slack-gov.com`` (any path); ``hooks.slack.com`` and
``hooks.slack-gov.com`` (any path).

Effect:
- Web API (``/api/{method}``): by the method name, whatever the HTTP method; Slack accepts
  any method as GET or POST, and slack_sdk sends writes such as ``dnd.setSnooze`` as GET. A
  method is a read when its last dotted segment is ``list*``, ``info``, ``history``,
  ``replies``, ``get*``, ``members``, ``lookup*``, ``test``, ``identity``, ``conversations``
  or ``userInfo``, or when it is in ``search.*``. Exceptions that write:
  ``files.getUploadURLExternal`` (first step of an upload), ``rtm.connect`` and
  ``apps.connections.open`` (open sessions). Everything else writes, including unknown names.
- Incoming webhooks: always write.
- File hosts: by HTTP method (downloads read, uploads to upload URLs write).
- WebSocket hosts (``wss-primary.slack.com``, ``wss-backup.slack.com``, any ``wss-*.slack.com``;
  Socket Mode at ``/link/``, RTM at ``/websocket/``): the handshake reads; a message the app sends
  (method ``WEBSOCKET``, docs/contract.md) is read by what it says: a Socket Mode ack without a
  payload, and RTM ``ping``, ``pong``, ``presence_sub`` and ``presence_query``, read; an ack with a
  payload (it answers as the app), an RTM ``message`` (it posts) and anything else write.
  ``rtm.connect`` and ``apps.connections.open`` are recorded calls (not token exchanges): what
  they open is the session a WebSocket's messages are recorded under.
"""

from __future__ import annotations

import json
import re

from ._http import READ, WRITE, effect_of_method

NAME = "slack"

WEBHOOK_HOSTS = frozenset({"hooks.slack.com", "hooks.slack-gov.com"})
FILE_HOSTS = frozenset({"files.slack.com", "files.slack-gov.com"})
API_DOMAINS = ("slack.com", "slack-gov.com")
_API_SUFFIXES = tuple("." + d for d in API_DOMAINS)
API_PREFIX = "/api/"
_SOCKET_HOST = re.compile(r"wss-[a-z0-9-]+\.slack(?:-gov)?\.com")
_RTM_READ_TYPES = frozenset({"ping", "pong", "presence_sub", "presence_query"})
WEBSOCKET_METHOD = "WEBSOCKET"

_METHOD_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*(?:\.[A-Za-z][A-Za-z0-9_]*)*")
_READ_LAST_SEGMENT = re.compile(
    r"list\w*|info|history|replies|get\w*|members|lookup\w*|test|identity|conversations|userInfo"
)
WRITE_EXCEPTIONS = {
    "files.getUploadURLExternal": "starts an upload",
    "rtm.connect": "opens a session",
    "apps.connections.open": "opens a session",
}


def match(host: str, path: str) -> bool:
    """True for a Slack call (host lowercase without port; path normalised)."""
    if host in WEBHOOK_HOSTS or host in FILE_HOSTS or _SOCKET_HOST.fullmatch(host):
        return True
    return (host in API_DOMAINS or host.endswith(_API_SUFFIXES)) and path.startswith(API_PREFIX)


def method_effect(name: str) -> tuple[str, str]:
    """(effect, rule) for a Web API method name such as ``conversations.history``."""
    if not _METHOD_NAME.fullmatch(name):
        return WRITE, "slack method name not recognised"
    if name in WRITE_EXCEPTIONS:
        return WRITE, f"slack method {name} ({WRITE_EXCEPTIONS[name]})"
    if name.startswith("search.") or _READ_LAST_SEGMENT.fullmatch(name.rpartition(".")[2]):
        return READ, f"slack method {name}"
    return WRITE, f"slack method {name}"


def classify_effect(
    method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], body: bytes | None
) -> tuple[str, str]:
    """(effect, rule) for one Slack call; see the module docstring. Which Slack host the call
    went to comes from ``headers["host"]``, which the registry always sets (normalised)."""
    host = headers.get("host", "")
    if method == WEBSOCKET_METHOD:
        return message_effect(body)
    if host in WEBHOOK_HOSTS:
        return WRITE, "slack incoming webhook"
    if host not in FILE_HOSTS and path.startswith(API_PREFIX):
        return method_effect(path[len(API_PREFIX) :].rstrip("/"))
    return effect_of_method(method, headers)


def message_effect(body: bytes | None) -> tuple[str, str]:
    """(effect, rule) for a message an app sends over Slack's Socket Mode or RTM WebSocket."""
    try:
        msg = json.loads(body) if body else None
    except ValueError:
        msg = None
    if not isinstance(msg, dict):
        return WRITE, "slack websocket message not JSON, fail closed"
    if "envelope_id" in msg:
        if msg.get("payload"):
            return WRITE, "slack socket mode ack with a payload (answers as the app)"
        return READ, "slack socket mode ack"
    kind = msg.get("type")
    if kind in _RTM_READ_TYPES:
        return READ, f"slack rtm {kind}"
    return WRITE, f"slack rtm {kind if isinstance(kind, str) else 'message'}"
