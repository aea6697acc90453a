"""Slack Web API (over HTTPS or through an MCP server's tool calls).

The method comes from the path (`/api/chat.postMessage`) or, for an MCP `tools/call`, from the
tool name (`conversations_history` -> `conversations.history`, `slack_post_message` ->
`chat.postMessage`). Arguments are the JSON or form body, the query string, or the tool's
arguments. HTTP 200 with `{"ok": false}` is a failure.

Keys: message `(channel ID, ts)`, `ts` kept as a string and the channel taken from the response
(a request may name `#general`; names seen resolved to an id are remembered for the session);
channel `(channel ID)`; membership `(channel ID, user)`; file `(file id)`; scheduled message
`(channel ID, scheduled_message_id)`.

Inverses (connectors reference, Slack): chat.postMessage / meMessage -> chat.delete; chat.update ->
chat.update with the before text and blocks; chat.delete and chat.postEphemeral are irreversible
(the compensation for a delete re-posts: new ts, new time); reactions, pins and stars add <->
remove (Slack refuses to add what is already there, so these need no before-state);
chat.scheduleMessage -> chat.deleteScheduledMessage; conversations.create -> archive (deleting a
channel needs an admin); archive <-> unarchive; rename / setTopic / setPurpose -> set the before
value; invite <-> kick (per user); join <-> leave; file uploads -> files.delete.
"""

from __future__ import annotations

from journal.connectors import slack as capture

from ..model import (
    CREATED,
    DELETED,
    READ,
    SENT,
    WRITE,
    Call,
    Inverse,
    Request,
    Touch,
    Write,
    approx,
    diff,
    exact,
    irreversible,
    no_inverse,
)

NAME = "slack"
DEFAULT_ORIGIN = "https://slack.com"
TOOL_METHODS = {
    "slack_post_message": "chat.postMessage",
    "slack_reply_to_thread": "chat.postMessage",
    "slack_add_reaction": "reactions.add",
    "slack_get_channel_history": "conversations.history",
    "slack_get_thread_replies": "conversations.replies",
    "slack_list_channels": "conversations.list",
    "slack_get_users": "users.list",
    "slack_get_user_profile": "users.profile.get",
}
ARG_ALIASES = {"channel_id": "channel", "reaction": "name", "message_ts": "ts"}
SWAPS = {
    "reactions.add": "reactions.remove", "reactions.remove": "reactions.add",
    "pins.add": "pins.remove", "pins.remove": "pins.add",
    "stars.add": "stars.remove", "stars.remove": "stars.add",
}
_MESSAGE_FIELDS = ("text", "blocks", "attachments")


def method_of(call: Call) -> str | None:
    if call.tool is not None:
        name = call.tool
        if name in TOOL_METHODS:
            return TOOL_METHODS[name]
        parts = name.removeprefix("slack_").split("_")
        if len(parts) < 2:
            return None
        return parts[0] + "." + parts[1] + "".join(p[:1].upper() + p[1:] for p in parts[2:])
    if call.host in capture.WEBHOOK_HOSTS:
        return "incoming-webhook"
    if call.path.startswith(capture.API_PREFIX):
        return call.path[len(capture.API_PREFIX) :].rstrip("/")
    return None


def _args(call: Call) -> dict:
    out = {k: v[0] for k, v in call.query.items() if v}
    out.update(call.args)
    for alias, name in ARG_ALIASES.items():
        if alias in out and name not in out:
            out[name] = out[alias]
    return out


def failure(call: Call) -> str | None:
    res = call.result
    if isinstance(res, dict) and res.get("ok") is False:
        return f"Slack error: {res.get('error', 'ok: false')}"
    return None


def _channel(call: Call, value: object) -> str:
    name = str(value) if value is not None else ""
    return call.memo.get("channels", {}).get(name, name)


def _remember(call: Call, asked: object, got: object) -> None:
    if isinstance(asked, str) and isinstance(got, str) and asked and got and asked != got:
        names = call.memo.setdefault("channels", {})
        names[asked] = got
        names[asked.lstrip("#")] = got
        names["#" + asked.lstrip("#")] = got


def _message_state(msg: object, channel: str, ts: str) -> dict:
    state = dict(msg) if isinstance(msg, dict) else {}
    state["channel"] = channel
    state.setdefault("ts", ts)
    return state


def touches(call: Call) -> list[Touch] | None:
    method = method_of(call)
    if method is None:
        call.notes.append("not a Slack Web API call replay knows")
        return []
    if method == "incoming-webhook":
        call.notes.append("incoming webhook: the answer names no message, so it cannot be keyed or deleted")
        return []
    call.op = method
    args, res = _args(call), call.result_dict
    base = (call.origin or DEFAULT_ORIGIN) + "/api/"
    data = {"base": base, "method": method}

    def msg_key(ch: str, ts: str) -> tuple[str, ...]:
        return (NAME, "message", ch, ts)

    if call.effect == READ:
        if method in ("conversations.history", "conversations.replies"):
            ch = _channel(call, args.get("channel"))
            return [Touch(msg_key(ch, m["ts"]), READ, method, state=_message_state(m, ch, m["ts"]),
                          parent=(NAME, "channel", ch), data=data)
                    for m in res.get("messages") or [] if isinstance(m, dict) and isinstance(m.get("ts"), str)]
        if method == "conversations.info" and isinstance(res.get("channel"), dict):
            c = res["channel"]
            return [Touch((NAME, "channel", str(c.get("id") or _channel(call, args.get("channel")))), READ, method,
                          state=c, data=data)]
        if method == "conversations.list":
            out = []
            for c in res.get("channels") or []:
                if isinstance(c, dict) and isinstance(c.get("id"), str):
                    if isinstance(c.get("name"), str):
                        _remember(call, "#" + c["name"], c["id"])
                    out.append(Touch((NAME, "channel", c["id"]), READ, method, state=c, data=data))
            return out
        return []

    if method in ("chat.postMessage", "chat.meMessage"):
        if not isinstance(res.get("channel"), str) or not isinstance(res.get("ts"), str):
            call.notes.append(f"{method}: the response names no channel and ts")
            return []
        ch, ts = res["channel"], res["ts"]
        _remember(call, args.get("channel"), ch)
        state = _message_state(res.get("message"), ch, ts)
        intended = {k: args[k] for k in ("channel", *_MESSAGE_FIELDS, "thread_ts") if k in args}
        diffs = _annotate(diff(intended, state), args.get("channel"), ch)
        return [Touch(msg_key(ch, ts), WRITE, method, state=state, intended=intended, differences=diffs,
                      lifecycle=CREATED, parent=(NAME, "channel", ch), data=data)]
    if method == "chat.postEphemeral":
        ch = _channel(call, args.get("channel"))
        ts = res.get("message_ts")
        if not isinstance(ts, str):
            return []
        return [Touch((NAME, "ephemeral", ch, ts), WRITE, method, lifecycle=SENT, data=data)]
    if method in ("chat.update", "chat.delete"):
        ch = got if isinstance(got := res.get("channel"), str) else _channel(call, args.get("channel"))
        ts = got if isinstance(got := res.get("ts"), str) else str(args.get("ts", ""))
        _remember(call, args.get("channel"), ch)
        if method == "chat.delete":
            return [Touch(msg_key(ch, ts), WRITE, method, lifecycle=DELETED, parent=(NAME, "channel", ch), data=data)]
        state = _message_state(res.get("message"), ch, ts)
        if "text" in res:
            state["text"] = res["text"]
        intended = {k: args[k] for k in _MESSAGE_FIELDS if k in args}
        return [Touch(msg_key(ch, ts), WRITE, method, state=state, intended=intended or None,
                      differences=diff(intended, state), parent=(NAME, "channel", ch), data=data)]
    if method in SWAPS:
        ch = _channel(call, args.get("channel"))
        ts = str(args.get("timestamp") or args.get("ts") or "")
        if not ts:
            if method.startswith("stars.") and args.get("file"):
                return [Touch((NAME, "file", str(args["file"])), WRITE, method, data=data | {"args": args})]
            call.notes.append(f"{method} without a message timestamp")
            return []
        return [Touch(msg_key(ch, ts), WRITE, method, differences=[], parent=(NAME, "channel", ch),
                      data=data | {"args": {k: v for k, v in args.items() if k in ("channel", "timestamp", "name")}
                                   | {"channel": ch, "timestamp": ts}})]
    if method == "chat.scheduleMessage":
        ident, ch = res.get("scheduled_message_id"), res.get("channel") or _channel(call, args.get("channel"))
        if not isinstance(ident, str):
            return []
        return [Touch((NAME, "scheduled", str(ch), ident), WRITE, method, state=res, lifecycle=CREATED, data=data)]
    if method == "chat.deleteScheduledMessage":
        ch = _channel(call, args.get("channel"))
        return [Touch((NAME, "scheduled", ch, str(args.get("scheduled_message_id", ""))), WRITE, method,
                      lifecycle=DELETED, data=data)]
    if method.startswith("conversations."):
        return _conversation_touches(call, method, args, res, data)
    if method in ("files.upload", "files.completeUploadExternal"):
        files = [res["file"]] if isinstance(res.get("file"), dict) else res.get("files") or []
        return [Touch((NAME, "file", f["id"]), WRITE, method, state=f, lifecycle=CREATED, data=data)
                for f in files if isinstance(f, dict) and isinstance(f.get("id"), str)]
    if method == "files.delete":
        return [Touch((NAME, "file", str(args.get("file", ""))), WRITE, method, lifecycle=DELETED, data=data)]
    call.notes.append(f"slack {method}: replay knows no resource or inverse for this method")
    return []


def _conversation_touches(call: Call, method: str, args: dict, res: dict, data: dict) -> list[Touch]:
    verb = method.partition(".")[2]
    channel = res.get("channel") if isinstance(res.get("channel"), dict) else None
    ch = str((channel or {}).get("id") or _channel(call, args.get("channel")))
    key = (NAME, "channel", ch)
    if verb == "create":
        if channel is None or not ch:
            return []
        return [Touch(key, WRITE, method, state=channel, intended={"name": args.get("name")}, lifecycle=CREATED,
                      data=data)]
    if verb in ("archive", "unarchive"):
        return [Touch(key, WRITE, method, lifecycle="archived" if verb == "archive" else "unarchived", data=data)]
    if verb in ("rename", "setTopic", "setPurpose"):
        field = {"rename": "name", "setTopic": "topic", "setPurpose": "purpose"}[verb]
        return [Touch(key, WRITE, method, state=channel, intended={field: args.get(field)} if channel else None,
                      differences=None if channel else [], data=data | {"field": field})]
    if verb in ("invite", "kick"):
        users = args.get("users") if verb == "invite" else args.get("user")
        ids = [u.strip() for u in str(users or "").split(",") if u.strip()]
        return [Touch((NAME, "membership", ch, u), WRITE, method, lifecycle=CREATED if verb == "invite" else DELETED,
                      parent=key, data=data) for u in ids]
    if verb in ("join", "leave"):
        return [Touch((NAME, "membership", ch, "(the caller)"), WRITE, method,
                      lifecycle=CREATED if verb == "join" else DELETED, parent=key, data=data)]
    call.notes.append(f"slack {method}: replay knows no resource or inverse for this method")
    return []


def _annotate(diffs: list[dict], asked: object, got: str) -> list[dict]:
    for d in diffs:
        if d["field"] == "channel" and isinstance(asked, str) and not asked.startswith(("C", "G", "D")):
            d["note"] = "the request named the channel; the platform answered with its id"
    return diffs


def invert(w: Write) -> Inverse:
    t, before, data = w.touch, w.before, w.touch.data
    base, method = data.get("base", DEFAULT_ORIGIN + "/api/"), data.get("method", t.op)
    seqs = ", ".join(str(s) for s in w.before_seqs) or "?"

    def call(name: str, body: dict) -> Request:
        return Request("POST", base + name, body)

    if t.kind == "message":
        ch, ts = t.key[2], t.key[3]
        if method in ("chat.postMessage", "chat.meMessage"):
            return exact(call("chat.delete", {"channel": ch, "ts": ts}), "delete the posted message")
        if method == "chat.update":
            if before is None or not any(k in before for k in _MESSAGE_FIELDS):
                return no_inverse("blind chat.update: no earlier read (conversations.history or replies including "
                                  "this ts) captured the text it had", blind=True)
            body = {"channel": ch, "ts": ts} | {k: before[k] for k in _MESSAGE_FIELDS if k in before}
            return exact(call("chat.update", body), f"put back the text and blocks seen in seq {seqs}")
        if method == "chat.delete":
            if before is None or "text" not in before:
                return irreversible("a deleted message cannot be restored, and its text was never read")
            body = {"channel": ch} | {k: before[k] for k in _MESSAGE_FIELDS if k in before}
            if before.get("thread_ts") and before.get("thread_ts") != ts:
                body["thread_ts"] = before["thread_ts"]
            return irreversible("a deleted message cannot be restored; the compensation posts its text again "
                                "(new ts, new time, posted by the caller)", call("chat.postMessage", body))
        if method in SWAPS:
            args = data.get("args") or {}
            return exact(call(SWAPS[method], args),
                         f"{SWAPS[method]} with the same arguments (Slack refuses a {method} that would change "
                         "nothing, so its success needs no before-state)")
    if t.kind == "ephemeral":
        return irreversible("ephemeral messages cannot be deleted")
    if t.kind == "scheduled":
        ch, ident = t.key[2], t.key[3]
        if t.lifecycle == CREATED:
            return exact(call("chat.deleteScheduledMessage", {"channel": ch, "scheduled_message_id": ident}),
                         "delete the scheduled message before it is sent")
        if before and before.get("post_at") and isinstance(before.get("message"), dict):
            msg = before["message"]
            body = {"channel": ch, "post_at": before["post_at"]} | {k: msg[k] for k in _MESSAGE_FIELDS if k in msg}
            return approx(call("chat.scheduleMessage", body), "schedule it again (new id)")
        return no_inverse("the scheduled message's text and time were never read", blind=True)
    if t.kind == "channel":
        ch = t.key[2]
        if t.lifecycle == CREATED:
            return approx(call("conversations.archive", {"channel": ch}),
                          "archive the created channel (deleting a channel needs an admin)")
        if t.lifecycle in ("archived", "unarchived"):
            undo = "conversations.unarchive" if t.lifecycle == "archived" else "conversations.archive"
            return exact(call(undo, {"channel": ch}), f"{undo.partition('.')[2]} the channel again")
        field = data.get("field")
        if field:
            value = (before or {}).get(field)
            if isinstance(value, dict):
                value = value.get("value")
            if value is None:
                return no_inverse(f"blind {method}: no earlier conversations.info captured the {field}", blind=True)
            name = {"name": "conversations.rename", "topic": "conversations.setTopic",
                    "purpose": "conversations.setPurpose"}[field]
            return exact(call(name, {"channel": ch, field: value}), f"set the {field} seen in seq {seqs} again")
    if t.kind == "membership":
        ch, user = t.key[2], t.key[3]
        if method == "conversations.invite":
            return exact(call("conversations.kick", {"channel": ch, "user": user}), "remove the invited member")
        if method == "conversations.kick":
            return exact(call("conversations.invite", {"channel": ch, "users": user}), "invite the member again")
        if method == "conversations.join":
            return exact(call("conversations.leave", {"channel": ch}), "leave the channel again")
        if method == "conversations.leave":
            return exact(call("conversations.join", {"channel": ch}), "join the channel again")
    if t.kind == "file":
        if t.lifecycle == CREATED:
            return exact(call("files.delete", {"file": t.key[2]}), "delete the uploaded file")
        if t.lifecycle == DELETED:
            return irreversible("files.delete cannot be undone")
        if method in SWAPS:
            return exact(call(SWAPS[method], data.get("args") or {}), "swap the star back")
    return no_inverse(f"no inverse known for slack {method}")


def describe(kind: str, key: tuple, state: dict) -> str | None:
    if kind == "message" and isinstance(state.get("text"), str):
        return state["text"]
    if kind == "channel" and isinstance(state.get("name"), str):
        return "#" + state["name"]
    if kind == "file":
        return state.get("name") or state.get("title")
    return None
