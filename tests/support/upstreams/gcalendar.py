"""Fake Google Calendar v3: calendars with events that insert/patch/update/delete really change.

Why: the broker's calendar inverses (PATCH status back to confirmed, re-insert, 409 on duplicate ids)
need an upstream that keeps cancelled events and answers like the real one.
"""

from __future__ import annotations

import copy
import datetime as dt
import itertools
import re
import threading
import time
from typing import Any

from .common import (
    HttpError,
    Request,
    Response,
    Route,
    empty_response,
    json_response,
    page,
    rfc3339,
    route,
    unquote,
)
from .gmail import ME

HOSTS = frozenset({"www.googleapis.com"})
TEAM_CAL = "team@group.calendar.google.com"
EVENT_STANDUP = "standup0001"
EVENT_REVIEW = "review0002"
EVENT_OFFSITE = "offsite0003"
READ_ONLY = (
    "kind",
    "etag",
    "id",
    "htmlLink",
    "created",
    "updated",
    "creator",
    "organizer",
    "iCalUID",
    "sequence",
)
_ID_RE = re.compile(r"^[a-v0-9]{5,1024}$")


class CalendarState:
    """Calendars (id -> meta) and their events (id -> Event resource)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.calendars: dict[str, dict[str, Any]] = {
            ME: {"summary": ME, "timeZone": "Europe/Berlin", "primary": True, "accessRole": "owner"},
            TEAM_CAL: {
                "summary": "Team",
                "timeZone": "Europe/Berlin",
                "primary": False,
                "accessRole": "writer",
            },
        }
        self.events: dict[str, dict[str, dict[str, Any]]] = {ME: {}, TEAM_CAL: {}}
        self._ids = itertools.count(1)
        self._etag = itertools.count(int(time.time() * 1000) * 1000)
        today = dt.datetime.now(dt.UTC).replace(hour=9, minute=0, second=0, microsecond=0) + dt.timedelta(
            days=1
        )
        self._seed(ME, EVENT_STANDUP, "Daily standup", today, 15, attendees=["bob@example.com"])
        self._seed(
            ME,
            EVENT_REVIEW,
            "Design review",
            today + dt.timedelta(hours=4),
            60,
            attendees=["bob@example.com", "carol@example.com"],
        )
        self._seed(TEAM_CAL, EVENT_OFFSITE, "Team offsite", today + dt.timedelta(days=7), 480)

    def new_id(self) -> str:
        """A fresh base32hex-style event id."""
        return f"evt{next(self._ids):08d}"

    def etag(self) -> str:
        """A fresh quoted etag."""
        return f'"{next(self._etag)}"'

    def _seed(
        self,
        cal: str,
        eid: str,
        summary: str,
        start: dt.datetime,
        minutes: int,
        attendees: list[str] | None = None,
    ) -> None:
        ev = {
            "summary": summary,
            "start": {"dateTime": start.strftime("%Y-%m-%dT%H:%M:%SZ"), "timeZone": "UTC"},
            "end": {
                "dateTime": (start + dt.timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "timeZone": "UTC",
            },
        }
        if attendees:
            ev["attendees"] = [{"email": a, "responseStatus": "needsAction"} for a in attendees]
        self.events[cal][eid] = self.complete(cal, eid, ev)

    def complete(
        self, cal: str, eid: str, body: dict[str, Any], old: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Fill in the server-owned fields of an Event."""
        now = rfc3339()
        ev: dict[str, Any] = {
            "kind": "calendar#event",
            "etag": self.etag(),
            "id": eid,
            "status": "confirmed",
            "htmlLink": f"https://www.google.com/calendar/event?eid={eid}",
            "created": old["created"] if old else now,
            "updated": now,
            "creator": {"email": ME, "self": True},
            "organizer": {"email": cal, "self": cal == ME} | ({} if cal == ME else {"displayName": "Team"}),
            "iCalUID": old["iCalUID"] if old else f"{eid}@google.com",
            "sequence": (old.get("sequence", 0) + 1) if old else 0,
            "reminders": {"useDefault": True},
            "eventType": "default",
        }
        for k, v in body.items():
            if k not in READ_ONLY or k == "iCalUID" and not old:
                ev[k] = v
        return ev


def _parse_time(value: Any) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def _event_bounds(ev: dict[str, Any]) -> tuple[dt.datetime | None, dt.datetime | None]:
    start = ev.get("start") or {}
    end = ev.get("end") or {}
    return (
        _parse_time(start.get("dateTime") or start.get("date")),
        _parse_time(end.get("dateTime") or end.get("date")),
    )


class Calendar:
    """Route handlers bound to one CalendarState."""

    def __init__(self, st: CalendarState) -> None:
        self.st = st

    def _cal(self, m: re.Match[str]) -> str:
        cid = unquote(m.group("c"))
        if cid == "primary":
            cid = ME
        if cid not in self.st.calendars:
            raise HttpError(404, "Not Found", "notFound")
        return cid

    def _event(self, cal: str, eid: str) -> dict[str, Any]:
        ev = self.st.events[cal].get(eid)
        if ev is None:
            raise HttpError(404, "Not Found", "notFound")
        return ev

    def calendar_list(self, req: Request, m: re.Match[str]) -> Response:
        with self.st.lock:
            items = [
                {
                    "kind": "calendar#calendarListEntry",
                    "etag": '"1"',
                    "id": cid,
                    "summary": meta["summary"],
                    "timeZone": meta["timeZone"],
                    "accessRole": meta["accessRole"],
                    "primary": meta["primary"],
                }
                for cid, meta in self.st.calendars.items()
            ]
        return json_response(
            {"kind": "calendar#calendarList", "etag": '"p1"', "items": items}, flavor="google"
        )

    def list_events(self, req: Request, m: re.Match[str]) -> Response:
        with self.st.lock:
            cal = self._cal(m)
            show_deleted = req.query.get("showDeleted", "false").lower() == "true"
            tmin, tmax = _parse_time(req.query.get("timeMin")), _parse_time(req.query.get("timeMax"))
            q = (req.query.get("q") or "").lower()
            items = []
            for ev in self.st.events[cal].values():
                if ev.get("status") == "cancelled" and not show_deleted:
                    continue
                start, end = _event_bounds(ev)
                if tmin and end and end <= tmin or tmax and start and start >= tmax:
                    continue
                if q and q not in (str(ev.get("summary", "")) + " " + str(ev.get("description", ""))).lower():
                    continue
                items.append(copy.deepcopy(ev))
            items.sort(key=lambda e: (_event_bounds(e)[0] or dt.datetime.min.replace(tzinfo=dt.UTC), e["id"]))
            chunk, token = page(items, req, 250, 2500, "maxResults", "pageToken")
            meta = self.st.calendars[cal]
            out: dict[str, Any] = {
                "kind": "calendar#events",
                "etag": self.st.etag(),
                "summary": meta["summary"],
                "description": "",
                "updated": rfc3339(),
                "timeZone": meta["timeZone"],
                "accessRole": meta["accessRole"],
                "defaultReminders": [{"method": "popup", "minutes": 10}],
                "items": chunk,
            }
            if token:
                out["nextPageToken"] = token
            else:
                out["nextSyncToken"] = "CPjx-fake-sync-token"
        return json_response(out, flavor="google")

    def get_event(self, req: Request, m: re.Match[str]) -> Response:
        with self.st.lock:
            cal = self._cal(m)
            return json_response(copy.deepcopy(self._event(cal, unquote(m.group("e")))), flavor="google")

    def insert(self, req: Request, m: re.Match[str]) -> Response:
        body = req.json_object()
        with self.st.lock:
            cal = self._cal(m)
            if "end" not in body:
                raise HttpError(400, "Missing end time.", "required")
            if "start" not in body:
                raise HttpError(400, "Missing start time.", "required")
            eid = body.get("id")
            if eid is not None:
                if not isinstance(eid, str) or not _ID_RE.match(eid):
                    raise HttpError(400, "Invalid resource id value.", "invalid")
                if eid in self.st.events[cal]:
                    raise HttpError(409, "The requested identifier already exists.", "duplicate")
            else:
                eid = self.st.new_id()
            ev = self.st.complete(cal, eid, {k: v for k, v in body.items() if k != "id"})
            self.st.events[cal][eid] = ev
            return json_response(copy.deepcopy(ev), flavor="google")

    def patch(self, req: Request, m: re.Match[str]) -> Response:
        body = req.json_object()
        with self.st.lock:
            cal = self._cal(m)
            eid = unquote(m.group("e"))
            old = self._event(cal, eid)
            merged = {k: v for k, v in old.items() if k not in READ_ONLY or k == "iCalUID"}
            for k, v in body.items():
                if k in READ_ONLY:
                    continue
                if v is None:
                    merged.pop(k, None)
                else:
                    merged[k] = v
            ev = self.st.complete(cal, eid, merged, old)
            self.st.events[cal][eid] = ev
            return json_response(copy.deepcopy(ev), flavor="google")

    def update(self, req: Request, m: re.Match[str]) -> Response:
        body = req.json_object()
        with self.st.lock:
            cal = self._cal(m)
            eid = unquote(m.group("e"))
            old = self._event(cal, eid)
            if "start" not in body or "end" not in body:
                raise HttpError(
                    400, "Missing end time." if "end" not in body else "Missing start time.", "required"
                )
            ev = self.st.complete(cal, eid, {k: v for k, v in body.items() if k not in READ_ONLY}, old)
            self.st.events[cal][eid] = ev
            return json_response(copy.deepcopy(ev), flavor="google")

    def delete(self, req: Request, m: re.Match[str]) -> Response:
        with self.st.lock:
            cal = self._cal(m)
            eid = unquote(m.group("e"))
            ev = self._event(cal, eid)
            if ev.get("status") == "cancelled":
                raise HttpError(410, "Resource has been deleted", "deleted")
            ev["status"] = "cancelled"
            ev["updated"] = rfc3339()
            ev["etag"] = self.st.etag()
        return empty_response(204)

    def move(self, req: Request, m: re.Match[str]) -> Response:
        with self.st.lock:
            cal = self._cal(m)
            eid = unquote(m.group("e"))
            ev = self._event(cal, eid)
            dest = unquote(req.query.get("destination", ""))
            dest = ME if dest == "primary" else dest
            if dest not in self.st.calendars:
                raise HttpError(404, "Not Found", "notFound")
            del self.st.events[cal][eid]
            ev = self.st.complete(
                dest, eid, {k: v for k, v in ev.items() if k not in READ_ONLY or k == "iCalUID"}, ev
            )
            self.st.events[dest][eid] = ev
            return json_response(copy.deepcopy(ev), flavor="google")

    def freebusy(self, req: Request, m: re.Match[str]) -> Response:
        body = req.json_object()
        tmin, tmax = _parse_time(body.get("timeMin")), _parse_time(body.get("timeMax"))
        if tmin is None or tmax is None:
            raise HttpError(400, "Missing timeMin or timeMax parameter.", "required")
        cals: dict[str, Any] = {}
        with self.st.lock:
            for item in body.get("items") or []:
                raw_id = str((item or {}).get("id", ""))
                cid = ME if raw_id == "primary" else raw_id
                if cid not in self.st.calendars:
                    cals[raw_id] = {"errors": [{"domain": "global", "reason": "notFound"}], "busy": []}
                    continue
                busy = []
                for ev in self.st.events[cid].values():
                    if ev.get("status") == "cancelled" or ev.get("transparency") == "transparent":
                        continue
                    start, end = _event_bounds(ev)
                    if start and end and start < tmax and end > tmin:
                        busy.append((start, end))
                busy.sort()
                cals[raw_id] = {
                    "busy": [
                        {"start": s.strftime("%Y-%m-%dT%H:%M:%SZ"), "end": e.strftime("%Y-%m-%dT%H:%M:%SZ")}
                        for s, e in busy
                    ]
                }
        return json_response(
            {
                "kind": "calendar#freeBusy",
                "timeMin": body["timeMin"],
                "timeMax": body["timeMax"],
                "calendars": cals,
            },
            flavor="google",
        )


def routes(st: CalendarState) -> list[Route]:
    """Calendar routes on www.googleapis.com."""
    c = Calendar(st)
    base = r"/calendar/v3"
    ev = base + r"/calendars/(?P<c>[^/]+)/events"
    table = [
        ("GET", base + r"/users/me/calendarList", c.calendar_list),
        ("POST", base + r"/freeBusy", c.freebusy),
        ("GET", ev, c.list_events),
        ("POST", ev, c.insert),
        ("POST", ev + r"/(?P<e>[^/]+)/move", c.move),
        ("GET", ev + r"/(?P<e>[^/]+)", c.get_event),
        ("PATCH", ev + r"/(?P<e>[^/]+)", c.patch),
        ("PUT", ev + r"/(?P<e>[^/]+)", c.update),
        ("DELETE", ev + r"/(?P<e>[^/]+)", c.delete),
    ]
    return [route(methods, HOSTS, pattern, handler, "google") for methods, pattern, handler in table]
