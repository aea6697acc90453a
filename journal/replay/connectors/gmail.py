"""Gmail API v1: messages, threads, drafts, labels (settings fall back to the generic REST rules).

Keys: message `(user, id)`, thread `(user, id)`, draft `(user, id)`, label `(user, id)`,
attachment `(user, messageId, id)`; `me` and the principal's own address are the same mailbox
(`me`). List answers show each listed object.

Inverses (connectors reference, Gmail):
- messages.modify / batchModify: modify with add = before - after and remove = after - before,
  from the before `labelIds`; blind (no before labels): the swapped call, approximate.
- trash <-> untrash (nothing to undo when the message already was there).
- messages.send, drafts.send: irreversible; the compensation trashes the sent copy.
- messages.delete / batchDelete: irreversible; with a captured `raw`, re-insert it (new id).
- insert / import -> trash the inserted message; drafts.create -> delete the draft;
  drafts.update -> PUT the before `message.raw`; drafts.delete -> create it again (new id).
- labels.create -> delete; labels.patch/update -> patch the changed fields back;
  labels.delete -> create it again from before (new id; which messages had it is lost).
- users.watch -> users.stop.
"""

from __future__ import annotations

from journal.connectors import gmail as capture

from ..model import (
    CREATED,
    DELETED,
    READ,
    SENT,
    SIDE,
    TRASHED,
    UNTRASHED,
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

NAME = "gmail"
PREFIXES = (capture.SERVICE_PREFIX, *capture.UPLOAD_PREFIXES)
_LABEL_FIELDS = ("name", "labelListVisibility", "messageListVisibility", "color", "backgroundColor")


def _labels(value: object) -> list[str] | None:
    return [x for x in value if isinstance(x, str)] if isinstance(value, list) else None


def touches(call: Call) -> list[Touch] | None:
    if call.tool is not None:
        return None
    if _google.is_batch(call, capture.BATCH_PATH):
        call.notes.append("Google batch envelope: replay does not split batches into their calls")
        return []
    found = _google.route(call, capture.ROUTES, PREFIXES)
    if found is None:
        return None
    name, params, _ = found
    op = name.removeprefix("users.")
    call.op = op
    if op.startswith("settings."):
        return None
    user_seg = params.get("userId", "me")
    u = _google.same_account(user_seg, call, "me")
    base = f"{call.origin}/gmail/v1/users/{user_seg}"
    res = call.result_dict
    args = call.args
    data = {"base": base}

    def key(kind: str, *rest: str) -> tuple[str, ...]:
        return (NAME, kind, u, *rest)

    def t(kind: str, ident: str, role: str = WRITE, **kw) -> Touch:
        kw.setdefault("data", data)
        return Touch(key(kind, ident), role, op, **kw)

    kind, _, verb = op.partition(".")
    kind_name = {"messages": "message", "threads": "thread", "drafts": "draft", "labels": "label"}.get(kind, kind)

    if call.effect == READ:
        if op in ("messages.list", "threads.list", "drafts.list", "labels.list"):
            return [t(kind_name, x["id"], READ, state=x) for x in _google.ids(res.get(kind))]
        if op == "messages.attachments.get":
            mid = params["messageId"]
            return [Touch(key("attachment", mid, params["id"]), READ, op, state=res or None,
                          parent=key("message", mid), data=data)]
        if op in ("messages.get", "threads.get", "drafts.get", "labels.get"):
            out = [t(kind_name, params["id"], READ, state=res or None)]
            if op == "threads.get":
                out += [t("message", m["id"], READ, state=m, parent=key("thread", params["id"]))
                        for m in _google.ids(res.get("messages"))]
            return out
        return []

    if op == "watch":
        return [Touch(key("watch", "mailbox"), WRITE, op, state=res or None, data=data)]
    if op == "stop":
        return [Touch(key("watch", "mailbox"), WRITE, op, lifecycle=DELETED, data=data)]
    if op in ("messages.send", "messages.insert", "messages.import", "drafts.create", "labels.create"):
        new = res.get("id")
        if not isinstance(new, str):
            call.notes.append(f"{op}: the response names no id")
            return []
        lifecycle = SENT if op == "messages.send" else CREATED
        intended = {k: v for k, v in args.items() if k in ("threadId", *_LABEL_FIELDS)} or None
        return [t(kind_name, new, state=res, lifecycle=lifecycle, intended=intended)]
    if op == "drafts.send":
        draft = args.get("id")
        out = []
        if isinstance(draft, str):
            out.append(t("draft", draft, lifecycle=SENT, data=data | {"sent": res.get("id")}))
        if isinstance(res.get("id"), str):
            role = SIDE if out else WRITE
            out.append(t("message", res["id"], role, state=res, lifecycle=SENT, data=data | {"sent": res["id"]}))
        return out
    # a thread's answer holds its messages, changed along with it
    side = [t("message", m["id"], SIDE, state=m, parent=key("thread", params["id"]))
            for m in _google.ids(res.get("messages"))] if kind == "threads" and "id" in params else []
    if op in ("messages.modify", "threads.modify"):
        add, remove = _labels(args.get("addLabelIds")) or [], _labels(args.get("removeLabelIds")) or []
        return [t(kind_name, params["id"], state=res or None, differences=_label_diff(add, remove, res),
                  data=data | {"add": add, "remove": remove}), *side]
    if op == "messages.batchModify":
        add, remove = _labels(args.get("addLabelIds")) or [], _labels(args.get("removeLabelIds")) or []
        targets = [i for i in args.get("ids") or [] if isinstance(i, str)]
        if not targets:
            call.notes.append("batchModify without a readable ids list")
        return [t("message", i, intended={"addLabelIds": add, "removeLabelIds": remove}, differences=[],
                  data=data | {"add": add, "remove": remove}) for i in targets]
    if verb in ("trash", "untrash"):
        return [t(kind_name, params["id"], state=res or None, lifecycle=TRASHED if verb == "trash" else UNTRASHED),
                *side]
    if op in ("messages.delete", "threads.delete", "drafts.delete", "labels.delete"):
        return [t(kind_name, params["id"], lifecycle=DELETED)]
    if op == "messages.batchDelete":
        return [t("message", i, lifecycle=DELETED) for i in args.get("ids") or [] if isinstance(i, str)]
    if op in ("drafts.update", "labels.patch", "labels.update"):
        intended = {k: v for k, v in args.items() if k != "id"} or None
        if op == "drafts.update":
            intended = None
        return [t(kind_name, params["id"], state=res or None, intended=intended, data=data | {"args": args})]
    return None


def _label_diff(add: list[str], remove: list[str], res: dict) -> list[dict]:
    after = _labels(res.get("labelIds"))
    if after is None:
        if "messages" in res:  # threads.modify answers the thread; labels live on its messages
            return []
        return [{"field": "labelIds", "kind": "unconfirmed", "intended": {"add": add, "remove": remove},
                 "actual": None, "note": "not in the response"}]
    missing = [x for x in add if x not in after]
    extra = [x for x in remove if x in after]
    if not missing and not extra:
        return []
    return [{"field": "labelIds", "kind": "differs", "intended": {"add": add, "remove": remove}, "actual": after,
             "missing": missing, "extra": extra, "note": "labels asked for are absent, or labels asked away remain"}]


def _thread_labels(state: dict) -> list[str] | None:
    messages = state.get("messages")
    if not isinstance(messages, list):
        return None
    out: list[str] = []
    for m in messages:
        for label in _labels(m.get("labelIds") if isinstance(m, dict) else None) or []:
            if label not in out:
                out.append(label)
    return out


def invert(w: Write) -> Inverse:
    t, before, data = w.touch, w.before, w.touch.data
    base, op, kind = data.get("base", ""), t.op, t.kind
    ident = t.key[-1]

    def at(*segments: str) -> str:
        return url(base, *segments)

    coll = {"message": "messages", "thread": "threads", "draft": "drafts", "label": "labels"}.get(kind, kind)
    if op == "watch":
        return exact(Request("POST", at("stop")), "stop the push notifications the watch started")
    if op == "stop":
        return no_inverse("push notifications stopped; restarting them needs users.watch with the original topic")
    if op == "messages.send":
        return Inverse(Request("POST", at("messages", ident, "trash")), False, True,
                       "irreversible: a sent message cannot be unsent and recipients keep their copy; the "
                       "compensation trashes the sender's copy", blind=False)
    if op == "drafts.send":
        sent = data.get("sent")
        comp = Request("POST", at("messages", sent, "trash")) if sent else None
        return Inverse(comp, False, comp is not None,
                       "irreversible: the draft was sent (and consumed); the compensation trashes the sender's copy",
                       blind=False)
    if t.lifecycle == CREATED:
        if kind == "message":
            return exact(Request("POST", at("messages", ident, "trash")),
                         "trash the inserted message (DELETE messages/{id} would remove it permanently)")
        return exact(Request("DELETE", at(coll, ident)), f"delete the {kind} the write created")
    if op in ("messages.modify", "threads.modify", "messages.batchModify"):
        return _invert_modify(w, at(coll, ident, "modify") if op != "messages.batchModify"
                              else at("messages", ident, "modify"))
    if t.lifecycle in (TRASHED, UNTRASHED):
        undo = "untrash" if t.lifecycle == TRASHED else "trash"
        req = Request("POST", at(coll, ident, undo))
        labels = _labels(before.get("labelIds")) if before else None
        if labels is None and before is not None and kind == "thread":
            labels = _thread_labels(before)
        if labels is None:
            return approx(req, f"blind {op}: no earlier read shows whether the {kind} was in the trash; {undo} is "
                          "the best compensation", blind=True)
        was_in_trash = "TRASH" in labels
        if was_in_trash == (t.lifecycle == TRASHED):
            return no_inverse(f"the {kind} already was {'in' if was_in_trash else 'out of'} the trash: nothing to undo")
        return exact(req, f"{undo} the {kind} (labels before: seq {_seqs(w)})")
    if t.lifecycle == DELETED:
        if kind == "message":
            raw = before.get("raw") if before else None
            if raw is not None:
                body = {"raw": raw}
                for name in ("labelIds", "threadId"):
                    if before and before.get(name) is not None:
                        body[name] = before[name]
                return irreversible("messages.delete cannot be undone; the compensation re-inserts the captured raw "
                                    "message (it gets a new id)", Request("POST", at("messages"), body))
            return irreversible("messages.delete cannot be undone and no raw copy was captured")
        if kind == "thread":
            return irreversible("threads.delete cannot be undone")
        if kind == "draft":
            raw = ((before or {}).get("message") or {}).get("raw") if isinstance((before or {}).get("message"),
                                                                                  dict) else None
            if raw is None:
                return no_inverse("drafts.delete: no earlier drafts.get (format=raw) captured the draft", blind=True)
            return approx(Request("POST", at("drafts"), {"message": {"raw": raw}}),
                          "create the draft again from the captured raw message (it gets a new id)")
        if kind == "label":
            if not before or "name" not in before:
                return no_inverse("labels.delete: no earlier read captured the label", blind=True)
            body = {k: before[k] for k in _LABEL_FIELDS if k in before}
            return approx(Request("POST", at("labels"), body),
                          "create the label again (new id); which messages carried it is lost")
    if op == "drafts.update":
        message = (before or {}).get("message")
        raw = message.get("raw") if isinstance(message, dict) else None
        if raw is None:
            return no_inverse("drafts.update: no earlier drafts.get (format=raw) captured the draft's raw message",
                              blind=True)
        return exact(Request("PUT", at("drafts", ident), {"id": ident, "message": {"raw": raw}}),
                     "put the captured raw message back")
    if op in ("labels.patch", "labels.update"):
        args = {k: v for k, v in (data.get("args") or {}).items() if k != "id"}
        if before is None:
            return no_inverse(f"blind {op}: no earlier read captured the label")
        return exact(Request("PATCH", at("labels", ident), {k: before.get(k) for k in args}),
                     "patch the changed label fields back to their before values")
    return no_inverse(f"no inverse known for gmail {op}")


def _invert_modify(w: Write, target: str) -> Inverse:
    t, before = w.touch, w.before
    add, remove = t.data.get("add", []), t.data.get("remove", [])
    if t.kind == "thread":
        labels_before = _thread_labels(before) if before else None
        labels_after = _thread_labels(t.state or {})
    else:
        labels_before = _labels(before.get("labelIds")) if before else None
        labels_after = _labels((t.state or {}).get("labelIds"))
    if labels_before is None:
        why = "no earlier read of it" if before is None else f"the state seen (seq {_seqs(w)}) has no labelIds"
        return approx(Request("POST", target, {"addLabelIds": remove, "removeLabelIds": add}),
                      f"blind label change ({why}): swapping add and remove is only approximate, a label that was "
                      "already present or absent makes it wrong", blind=True)
    if labels_after is None:
        labels_after = [x for x in labels_before if x not in remove] + [x for x in add if x not in labels_before]
    undo_add = [x for x in labels_before if x not in labels_after]
    undo_remove = [x for x in labels_after if x not in labels_before]
    if not undo_add and not undo_remove:
        return no_inverse("the labels are the same before and after: nothing changed, nothing to undo")
    note = " (labels on a thread's messages may differ; approximate)" if t.kind == "thread" else ""
    inv = exact(Request("POST", target, {"addLabelIds": undo_add, "removeLabelIds": undo_remove}),
                f"restore the labelIds seen in seq {_seqs(w)}{note}")
    if t.kind == "thread":
        inv.revertible, inv.approximate = False, True
    return inv


def _seqs(w: Write) -> str:
    return ", ".join(str(s) for s in w.before_seqs) or "?"


def describe(kind: str, key: tuple, state: dict) -> str | None:
    if kind in ("message", "draft", "thread"):
        msg = state.get("message") if kind == "draft" and isinstance(state.get("message"), dict) else state
        if kind == "thread" and isinstance(state.get("messages"), list) and state["messages"]:
            msg = state["messages"][0] if isinstance(state["messages"][0], dict) else state
        payload = msg.get("payload") if isinstance(msg, dict) else None
        for h in (payload or {}).get("headers") or [] if isinstance(payload, dict) else []:
            if isinstance(h, dict) and str(h.get("name", "")).lower() == "subject" and isinstance(h.get("value"), str):
                return h["value"]
        snippet = (msg or {}).get("snippet") if isinstance(msg, dict) else None
        return snippet if isinstance(snippet, str) and snippet else None
    if kind == "label":
        return state.get("name") if isinstance(state.get("name"), str) else None
    return None
