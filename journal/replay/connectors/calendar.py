"""Google Calendar API v3: events, ACL rules and calendars (anything else: generic REST rules).

Keys: event `(calendarId, eventId)` (`primary` and the principal's own address are the same
calendar: `primary`), ACL rule `(calendarId, ruleId)`, calendar `(calendarId)`. `freeBusy` and
settings reads show no resource.

Inverses (connectors reference, Calendar):
- events.insert / quickAdd / import -> DELETE the event (`sendUpdates=all` when it has attendees,
  so they get cancellations);
- events.patch -> PATCH each top-level key the request set back to its before value (null when
  it had none); events.update -> PUT the before event without its read-only fields;
- events.delete -> PATCH `{"status": "confirmed"}` on the same id (a deleted event stays as
  `cancelled` on the organizer's calendar; re-inserting the id answers 409);
- events.move -> move it back;
- acl.insert -> delete the rule; acl.patch/update -> patch back; acl.delete -> insert it again;
- calendars.insert -> delete; calendars.delete and calendars.clear are irreversible.
"""

from __future__ import annotations

from journal.connectors import calendar as capture

from ..model import (
    CANCELLED,
    CREATED,
    DELETED,
    READ,
    SIDE,
    WRITE,
    Call,
    Inverse,
    Request,
    Touch,
    Write,
    approx,
    exact,
    irreversible,
    no_inverse,
    url,
)
from . import _google

NAME = "calendar"
PREFIXES = (capture.SERVICE_PREFIX,)
READ_ONLY = ("kind", "etag", "id", "created", "updated", "htmlLink", "creator", "iCalUID", "hangoutLink")


def touches(call: Call) -> list[Touch] | None:
    if call.tool is not None:
        return None
    if _google.is_batch(call, capture.BATCH_PATH):
        call.notes.append("Google batch envelope: replay does not split batches into their calls")
        return []
    found = _google.route(call, capture.ROUTES, PREFIXES)
    if found is None:
        return None
    op, params, _ = found
    call.op = op
    if op in ("freebusy.query", "colors.get") or op.startswith(("settings.", "calendarList.", "channels.")):
        return [] if call.effect == READ or op == "freebusy.query" else None
    cal_seg = params.get("calendarId", "")
    cal = _google.same_account(cal_seg, call, "primary")
    res = call.result_dict
    args = call.args
    base = f"{call.origin}/calendar/v3"
    data = {"base": base, "cal": cal_seg, "sendUpdates": call.q("sendUpdates")}

    def ev(ident: str, role: str = WRITE, **kw) -> Touch:
        kw.setdefault("data", data)
        return Touch((NAME, "event", cal, ident), role, op, **kw)

    if op in ("events.list", "events.instances"):
        return [ev(x["id"], READ, state=x) for x in _google.ids(res.get("items"))]
    if op == "events.get":
        return [ev(params["eventId"], READ, state=res or None)]
    if op in ("acl.list",):
        return [Touch((NAME, "acl", cal, x["id"]), READ, op, state=x, data=data) for x in _google.ids(res.get("items"))]
    if op == "acl.get":
        return [Touch((NAME, "acl", cal, params["ruleId"]), READ, op, state=res or None, data=data)]
    if op == "calendars.get":
        return [Touch((NAME, "calendar", cal), READ, op, state=res or None, data=data)]
    if call.effect == READ:
        return []

    if op in ("events.insert", "events.quickAdd", "events.import"):
        if not isinstance(res.get("id"), str):
            call.notes.append(f"{op}: the response names no event id")
            return []
        return [ev(res["id"], state=res, intended=args or None, lifecycle=CREATED)]
    if op in ("events.patch", "events.update"):
        return [ev(params["eventId"], state=res or None, intended=args or None, data=data | {"args": args})]
    if op == "events.delete":
        return [ev(params["eventId"], lifecycle=CANCELLED)]
    if op == "events.move":
        dest = call.q("destination") or ""
        moved = _google.same_account(dest, call, "primary")
        out = [ev(params["eventId"], lifecycle=f"moved to {moved}", data=data | {"destination": dest})]
        if dest:
            out.append(Touch((NAME, "event", moved, params["eventId"]), SIDE, op, state=res or None,
                             lifecycle=f"moved from {cal}", data=data))
        return out
    if op == "acl.insert":
        if not isinstance(res.get("id"), str):
            return []
        return [Touch((NAME, "acl", cal, res["id"]), WRITE, op, state=res, intended=args or None, lifecycle=CREATED,
                      data=data)]
    if op in ("acl.patch", "acl.update"):
        return [Touch((NAME, "acl", cal, params["ruleId"]), WRITE, op, state=res or None, intended=args or None,
                      data=data | {"args": args})]
    if op == "acl.delete":
        return [Touch((NAME, "acl", cal, params["ruleId"]), WRITE, op, lifecycle=DELETED, data=data)]
    if op == "calendars.insert":
        if not isinstance(res.get("id"), str):
            return []
        return [Touch((NAME, "calendar", res["id"]), WRITE, op, state=res, intended=args or None, lifecycle=CREATED,
                      data=data | {"cal": res["id"]})]
    if op in ("calendars.patch", "calendars.update"):
        return [Touch((NAME, "calendar", cal), WRITE, op, state=res or None, intended=args or None,
                      data=data | {"args": args})]
    if op in ("calendars.delete", "calendars.clear"):
        return [Touch((NAME, "calendar", cal), WRITE, op, lifecycle=DELETED if op == "calendars.delete" else "cleared",
                      data=data)]
    return None


def invert(w: Write) -> Inverse:
    t, before, data = w.touch, w.before, w.touch.data
    base, cal, op = data.get("base", ""), data.get("cal", ""), t.op
    ident = t.key[-1]
    notify = {"sendUpdates": data["sendUpdates"]} if data.get("sendUpdates") else None
    seqs = ", ".join(str(s) for s in w.before_seqs) or "?"

    if t.kind == "event":
        target = url(base, "calendars", cal, "events", ident, query=notify)
        if t.lifecycle == CREATED:
            attendees = (t.state or {}).get("attendees")
            return exact(Request("DELETE", url(base, "calendars", cal, "events", ident,
                                               query={"sendUpdates": "all"} if attendees else None)),
                         "delete the created event" + (" and send cancellations to its attendees" if attendees else
                                                       "") + "; invitations already sent cannot be recalled")
        if op == "events.patch":
            args = data.get("args") or {}
            if before is None:
                return no_inverse("blind events.patch: no earlier read captured the event, so its before values "
                                  "are unknown")
            return exact(Request("PATCH", target, {k: before.get(k) for k in sorted(args)}),
                         f"patch each key the request set back to its value seen in seq {seqs} (null if absent)")
        if op == "events.update":
            if before is None:
                return no_inverse("blind events.update: no earlier read captured the event")
            return exact(Request("PUT", target, {k: v for k, v in before.items() if k not in READ_ONLY}),
                         f"put back the event seen in seq {seqs}, without its read-only fields")
        if op == "events.delete":
            status = (before or {}).get("status")
            req = Request("PATCH", target, {"status": status if status in ("confirmed", "tentative") else
                                            "confirmed"})
            why = ("a deleted event stays as status cancelled on the organizer's calendar and can be restored on "
                   "the same id (re-inserting the id answers 409); on an attendee's copy use events.import with "
                   "the iCalUID instead")
            if before is None:
                return approx(req, "blind delete: no earlier read captured the event; " + why, blind=True)
            if status == "cancelled":
                return no_inverse("the event already was cancelled: nothing to undo")
            return exact(req, why)
        if op == "events.move":
            dest = data.get("destination")
            if not dest:
                return no_inverse("events.move without a destination parameter")
            return exact(Request("POST", url(base, "calendars", dest, "events", ident, "move",
                                             query={"destination": cal})),
                         "move the event back (event ids survive a move)")
    if t.kind == "acl":
        target = url(base, "calendars", cal, "acl", ident)
        if t.lifecycle == CREATED:
            return exact(Request("DELETE", target), "delete the ACL rule the write created")
        if op in ("acl.patch", "acl.update"):
            if before is None:
                return no_inverse(f"blind {op}: no earlier read captured the rule")
            return exact(Request("PATCH", target, {k: before.get(k) for k in sorted(data.get("args") or {})}),
                         f"patch the rule back to what seq {seqs} showed")
        if op == "acl.delete":
            if not before or "role" not in before or "scope" not in before:
                return no_inverse("acl.delete: no earlier read captured the rule's role and scope", blind=True)
            return exact(Request("POST", url(base, "calendars", cal, "acl"),
                                 {"role": before["role"], "scope": before["scope"]}),
                         "insert the rule again (a rule's id follows from its scope)")
    if t.kind == "calendar":
        target = url(base, "calendars", ident)
        if t.lifecycle == CREATED:
            return exact(Request("DELETE", target), "delete the calendar the write created")
        if op in ("calendars.delete", "calendars.clear"):
            return irreversible(f"{op} removes every event of the calendar")
        if op in ("calendars.patch", "calendars.update"):
            if before is None:
                return no_inverse(f"blind {op}: no earlier read captured the calendar")
            return exact(Request("PATCH", target, {k: before.get(k) for k in sorted(data.get("args") or {})}),
                         f"patch the calendar back to what seq {seqs} showed")
    return no_inverse(f"no inverse known for calendar {op}")


def describe(kind: str, key: tuple, state: dict) -> str | None:
    if kind in ("event", "calendar"):
        return state.get("summary") if isinstance(state.get("summary"), str) else None
    if kind == "acl":
        scope = state.get("scope")
        if isinstance(scope, dict) and isinstance(state.get("role"), str):
            return f"{state['role']} for {scope.get('type', '?')} {scope.get('value', '')}".strip()
    return None
