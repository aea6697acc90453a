"""Google Calendar API v3.

Match: the shared Google hosts with ``/calendar/v3/`` or the batch path ``/batch/calendar/v3``.
Calendar ids in paths are email addresses; the registry has already decoded ``%40``.

Effect: by the effective HTTP method (``X-HTTP-Method-Override`` honoured), except
``POST freeBusy`` (freebusy.query), which reads. Batch envelopes are read only when every
embedded request reads. Calls are named after the discovery document's method ids.
"""

from __future__ import annotations

from . import _google
from ._http import READ, RouteTable

NAME = "calendar"

SERVICE_PREFIX = "/calendar/v3/"
BATCH_PATH = "/batch/calendar/v3"
_PREFIXES = (SERVICE_PREFIX, BATCH_PATH)

_C = "calendars/{calendarId}"
_L = "users/me/calendarList"
ROUTES = RouteTable(
    [
        ("POST", "freeBusy", "freebusy.query", READ),
        ("GET", "colors", "colors.get"),
        ("POST", "channels/stop", "channels.stop"),
        ("GET", _L, "calendarList.list"),
        ("POST", _L, "calendarList.insert"),
        ("POST", f"{_L}/watch", "calendarList.watch"),
        ("GET", f"{_L}/{{calendarId}}", "calendarList.get"),
        ("PATCH", f"{_L}/{{calendarId}}", "calendarList.patch"),
        ("PUT", f"{_L}/{{calendarId}}", "calendarList.update"),
        ("DELETE", f"{_L}/{{calendarId}}", "calendarList.delete"),
        ("GET", "users/me/settings", "settings.list"),
        ("POST", "users/me/settings/watch", "settings.watch"),
        ("GET", "users/me/settings/{setting}", "settings.get"),
        ("POST", "calendars", "calendars.insert"),
        ("GET", _C, "calendars.get"),
        ("PATCH", _C, "calendars.patch"),
        ("PUT", _C, "calendars.update"),
        ("DELETE", _C, "calendars.delete"),
        ("POST", f"{_C}/clear", "calendars.clear"),
        ("GET", f"{_C}/events", "events.list"),
        ("POST", f"{_C}/events", "events.insert"),
        ("POST", f"{_C}/events/quickAdd", "events.quickAdd"),
        ("POST", f"{_C}/events/import", "events.import"),
        ("POST", f"{_C}/events/watch", "events.watch"),
        ("GET", f"{_C}/events/{{eventId}}", "events.get"),
        ("GET", f"{_C}/events/{{eventId}}/instances", "events.instances"),
        ("PATCH", f"{_C}/events/{{eventId}}", "events.patch"),
        ("PUT", f"{_C}/events/{{eventId}}", "events.update"),
        ("DELETE", f"{_C}/events/{{eventId}}", "events.delete"),
        ("POST", f"{_C}/events/{{eventId}}/move", "events.move"),
        ("GET", f"{_C}/acl", "acl.list"),
        ("POST", f"{_C}/acl", "acl.insert"),
        ("POST", f"{_C}/acl/watch", "acl.watch"),
        ("GET", f"{_C}/acl/{{ruleId}}", "acl.get"),
        ("PATCH", f"{_C}/acl/{{ruleId}}", "acl.patch"),
        ("PUT", f"{_C}/acl/{{ruleId}}", "acl.update"),
        ("DELETE", f"{_C}/acl/{{ruleId}}", "acl.delete"),
    ]
)


def match(host: str, path: str) -> bool:
    """True for a Calendar API call (host lowercase without port; path normalised)."""
    return host in _google.SHARED_HOSTS and path.startswith(_PREFIXES)


def classify_effect(
    method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], body: bytes | None
) -> tuple[str, str]:
    """(effect, rule) for one Calendar call; see the module docstring."""
    if path == BATCH_PATH or path.startswith(BATCH_PATH + "/"):
        return _google.classify_batch(body, headers, classify_effect)
    relative = path[len(SERVICE_PREFIX) :] if path.startswith(SERVICE_PREFIX) else None
    return _google.classify_call(NAME, ROUTES, method, relative, headers)
