"""Fake Slack Web API: ``slack.com/api/{method}`` plus file upload/download on ``files.slack.com``.

Why: Slack is the odd one out (any HTTP method, token in header/form/query, HTTP 200 with
``ok:false``), so the broker's classification must be tested against exactly that behaviour.
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from .common import SLACK_HOSTS, Request, Response, Route, json_response, route
from .drive import Blob, Sink

TEAM_ID = "T0FAKE"
TEAM_DOMAIN = "acme"
CHANNEL_GENERAL = "C0GENERAL"
CHANNEL_RANDOM = "C0RANDOM"
BOT_USER = "U0BOT"
BOT_ID = "B0BOT"
APP_ID = "A0FAKEAPP"
TS_MORNING = "1758540000.000100"
TS_RELEASE = "1758540060.000200"
TS_RELEASE_REPLY = "1758540120.000300"
TS_LUNCH = "1758540300.000400"
FILE_SEEDED = "F0SEEDED01"
FILE_SEEDED_SIZE = 1 << 20
PUBLIC_METHODS = frozenset({"oauth.v2.access", "oauth.access", "oauth.v2.exchange", "api.test"})

Params = dict[str, Any]


class SlackError(Exception):
    """An ``ok:false`` answer."""

    def __init__(self, error: str, **extra: Any) -> None:
        super().__init__(error)
        self.error = error
        self.extra = extra


class SlackState:
    """Workspace: users, channels, messages (channel -> ts -> message), reactions, files, dnd."""

    def __init__(self, spill_dir: str) -> None:
        self.lock = threading.RLock()
        self.spill_dir = spill_dir
        self._seq = itertools.count(1)
        self.users: dict[str, dict[str, Any]] = {}
        for uid, name, real, bot in [
            ("U0ALICE", "alice", "Alice Example", False),
            ("U0BOB", "bob", "Bob Builder", False),
            ("U0CAROL", "carol", "Carol Singer", False),
            (BOT_USER, "broker-bot", "Broker Bot", True),
        ]:
            self.users[uid] = {
                "id": uid,
                "team_id": TEAM_ID,
                "name": name,
                "deleted": False,
                "real_name": real,
                "tz": "Europe/Berlin",
                "tz_label": "Central European Summer Time",
                "tz_offset": 7200,
                "profile": {
                    "real_name": real,
                    "display_name": name,
                    "email": f"{name}@example.com",
                    "image_72": f"https://avatars.slack-edge.com/{uid}_72.png",
                    "team": TEAM_ID,
                },
                "is_admin": uid == "U0ALICE",
                "is_owner": uid == "U0ALICE",
                "is_bot": bot,
                "is_app_user": False,
                "updated": 1758000000,
            }
        self.channels: dict[str, dict[str, Any]] = {}
        for cid, name, purpose in [
            (CHANNEL_GENERAL, "general", "Company-wide announcements"),
            (CHANNEL_RANDOM, "random", "Non-work banter"),
        ]:
            self.channels[cid] = {
                "id": cid,
                "name": name,
                "is_channel": True,
                "is_group": False,
                "is_im": False,
                "is_private": False,
                "is_archived": False,
                "is_general": name == "general",
                "is_member": True,
                "created": 1700000000,
                "creator": "U0ALICE",
                "name_normalized": name,
                "num_members": 4,
                "topic": {"value": "", "creator": "", "last_set": 0},
                "purpose": {"value": purpose, "creator": "U0ALICE", "last_set": 1700000000},
            }
        self.messages: dict[str, dict[str, dict[str, Any]]] = {cid: {} for cid in self.channels}
        self._msg(CHANNEL_GENERAL, TS_MORNING, "U0BOB", "Morning all! Standup in 10.")
        self._msg(CHANNEL_GENERAL, TS_RELEASE, "U0CAROL", "Release notes for v2.3 are up :tada:")
        self._msg(CHANNEL_GENERAL, TS_RELEASE_REPLY, "U0ALICE", "Thanks, looks good", thread_ts=TS_RELEASE)
        self._msg(CHANNEL_GENERAL, TS_LUNCH, "U0ALICE", "Lunch at 12?")
        self.messages[CHANNEL_GENERAL][TS_LUNCH]["reactions"] = [
            {"name": "thumbsup", "users": ["U0BOB"], "count": 1}
        ]
        self._msg(CHANNEL_RANDOM, "1758539000.000050", "U0BOB", "Anyone seen my stapler?")
        self.files: dict[str, dict[str, Any]] = {}
        self.blobs: dict[str, Blob] = {}
        self.pending_uploads: dict[str, dict[str, Any]] = {}
        self.files[FILE_SEEDED] = self._file_obj(FILE_SEEDED, "report.bin", FILE_SEEDED_SIZE)
        self.blobs[FILE_SEEDED] = Blob.generated(FILE_SEEDED_SIZE, FILE_SEEDED)
        self.dnd: dict[str, Any] = {"snooze_enabled": False}

    def _msg(self, cid: str, ts: str, user: str, text: str, thread_ts: str | None = None) -> dict[str, Any]:
        msg: dict[str, Any] = {
            "type": "message",
            "user": user,
            "text": text,
            "ts": ts,
            "team": TEAM_ID,
            "blocks": _blocks(text),
        }
        if thread_ts:
            parent = self.messages[cid].get(thread_ts)
            if parent is not None:
                msg["thread_ts"] = thread_ts
                msg["parent_user_id"] = parent.get("user", "")
                parent["thread_ts"] = thread_ts
                parent["reply_count"] = parent.get("reply_count", 0) + 1
                users = parent.setdefault("reply_users", [])
                if user not in users:
                    users.append(user)
                parent["reply_users_count"] = len(users)
                parent["latest_reply"] = ts
        self.messages[cid][ts] = msg
        return msg

    def new_ts(self) -> str:
        """A fresh message ts, kept as a string ("1758543210.000200")."""
        return f"{int(time.time())}.{next(self._seq) * 100 % 1000000:06d}"

    def _file_obj(self, fid: str, name: str, size: int, title: str | None = None) -> dict[str, Any]:
        url = f"https://files.slack.com/files-pri/{TEAM_ID}-{fid}/{name}"
        return {
            "id": fid,
            "created": int(time.time()),
            "timestamp": int(time.time()),
            "name": name,
            "title": title or name,
            "mimetype": "application/octet-stream",
            "filetype": "binary",
            "user": BOT_USER,
            "size": size,
            "url_private": url,
            "url_private_download": url + "?download=1",
            "permalink": f"https://{TEAM_DOMAIN}.slack.com/files/{BOT_USER}/{fid}/{name}",
            "is_public": False,
        }


def _blocks(text: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "rich_text",
            "block_id": uuid.uuid5(uuid.NAMESPACE_OID, text).hex[:5],
            "elements": [{"type": "rich_text_section", "elements": [{"type": "text", "text": text}]}],
        }
    ]


def _int(params: Params, name: str, default: int) -> int:
    try:
        return int(str(params.get(name, default)))
    except ValueError as exc:
        raise SlackError("invalid_arguments") from exc


class Slack:
    """Method implementations bound to one SlackState."""

    def __init__(self, st: SlackState) -> None:
        self.st = st
        self.methods: dict[str, Callable[[Params, str], dict[str, Any]]] = {
            "api.test": lambda p, t: {"args": {k: v for k, v in p.items() if k != "token"}},
            "auth.test": self.auth_test,
            "conversations.history": self.history,
            "conversations.replies": self.replies,
            "conversations.list": self.conv_list,
            "conversations.info": self.conv_info,
            "chat.postMessage": self.post_message,
            "chat.update": self.update,
            "chat.delete": self.delete,
            "reactions.add": self.react_add,
            "reactions.remove": self.react_remove,
            "reactions.get": self.react_get,
            "users.info": self.users_info,
            "users.list": self.users_list,
            "dnd.setSnooze": self.set_snooze,
            "dnd.endSnooze": self.end_snooze,
            "dnd.info": self.dnd_info,
            "oauth.v2.access": self.oauth_access,
            "oauth.access": self.oauth_access,
            "files.getUploadURLExternal": self.upload_url,
            "files.completeUploadExternal": self.complete_upload,
            "files.info": self.file_info,
            "files.delete": self.file_delete,
        }

    def _channel(self, params: Params, key: str = "channel") -> str:
        raw = str(params.get(key) or "")
        if not raw:
            raise SlackError("channel_not_found")
        if raw in self.st.channels:
            return raw
        name = raw.lstrip("#")
        for cid, ch in self.st.channels.items():
            if ch["name"] == name:
                return cid
        raise SlackError("channel_not_found")

    def _message(self, cid: str, ts: Any) -> dict[str, Any]:
        msg = self.st.messages[cid].get(str(ts or ""))
        if msg is None:
            raise SlackError("message_not_found")
        return msg

    def auth_test(self, p: Params, token: str) -> dict[str, Any]:
        user = self.st.users["U0ALICE" if token.startswith("xoxp") else BOT_USER]
        out = {
            "url": f"https://{TEAM_DOMAIN}.slack.com/",
            "team": "Acme",
            "user": user["name"],
            "team_id": TEAM_ID,
            "user_id": user["id"],
            "is_enterprise_install": False,
        }
        if token.startswith("xoxb"):
            out["bot_id"] = BOT_ID
        return out

    def _page(self, items: list[Any], p: Params, default: int) -> tuple[list[Any], str]:
        limit = max(1, min(1000, _int(p, "limit", default)))
        cursor = str(p.get("cursor") or "")
        try:
            start = int(base64.b64decode(cursor).decode().split(":", 1)[1]) if cursor else 0
        except (ValueError, IndexError) as exc:
            raise SlackError("invalid_cursor") from exc
        nxt = start + limit
        token = base64.b64encode(f"next_ts:{nxt}".encode()).decode() if nxt < len(items) else ""
        return items[start:nxt], token

    def history(self, p: Params, token: str) -> dict[str, Any]:
        cid = self._channel(p)
        oldest, latest = float(p.get("oldest") or 0), float(p.get("latest") or 9e12)
        inclusive = str(p.get("inclusive", "")).lower() in ("1", "true")
        msgs = []
        for ts, msg in sorted(self.st.messages[cid].items(), key=lambda kv: float(kv[0]), reverse=True):
            if msg.get("thread_ts") not in (None, ts) and msg.get("subtype") != "thread_broadcast":
                continue
            t = float(ts)
            if t < oldest or t > latest or (not inclusive and t in (oldest, latest)):
                continue
            msgs.append(copy.deepcopy(msg))
        chunk, nxt = self._page(msgs, p, 100)
        return {
            "messages": chunk,
            "has_more": bool(nxt),
            "pin_count": 0,
            "channel_actions_ts": None,
            "channel_actions_count": 0,
            "response_metadata": {"next_cursor": nxt},
        }

    def replies(self, p: Params, token: str) -> dict[str, Any]:
        cid = self._channel(p)
        ts = str(p.get("ts") or "")
        if ts not in self.st.messages[cid]:
            raise SlackError("thread_not_found")
        parent = self.st.messages[cid][ts]
        root = parent.get("thread_ts", ts)
        msgs = [
            copy.deepcopy(m)
            for t, m in sorted(self.st.messages[cid].items(), key=lambda kv: float(kv[0]))
            if t == root or m.get("thread_ts") == root
        ]
        chunk, nxt = self._page(msgs, p, 1000)
        return {"messages": chunk, "has_more": bool(nxt), "response_metadata": {"next_cursor": nxt}}

    def conv_list(self, p: Params, token: str) -> dict[str, Any]:
        chans = [
            copy.deepcopy(c)
            for c in self.st.channels.values()
            if str(p.get("exclude_archived", "")).lower() not in ("1", "true") or not c["is_archived"]
        ]
        chunk, nxt = self._page(chans, p, 100)
        return {"channels": chunk, "response_metadata": {"next_cursor": nxt}}

    def conv_info(self, p: Params, token: str) -> dict[str, Any]:
        return {"channel": copy.deepcopy(self.st.channels[self._channel(p)])}

    def _bot_message(self, text: str, ts: str) -> dict[str, Any]:
        return {
            "user": BOT_USER,
            "type": "message",
            "ts": ts,
            "bot_id": BOT_ID,
            "app_id": APP_ID,
            "text": text,
            "team": TEAM_ID,
            "bot_profile": {
                "id": BOT_ID,
                "app_id": APP_ID,
                "name": "Broker Bot",
                "deleted": False,
                "team_id": TEAM_ID,
            },
            "blocks": _blocks(text),
        }

    def post_message(self, p: Params, token: str) -> dict[str, Any]:
        cid = self._channel(p)
        text = str(p.get("text") or "")
        if not text and not p.get("blocks") and not p.get("attachments"):
            raise SlackError("no_text")
        thread_ts = p.get("thread_ts")
        if thread_ts and str(thread_ts) not in self.st.messages[cid]:
            raise SlackError("thread_not_found")
        ts = self.st.new_ts()
        msg = self._bot_message(text, ts)
        if thread_ts:
            threaded = self.st._msg(cid, ts, BOT_USER, text, thread_ts=str(thread_ts))  # updates the parent
            msg |= {k: v for k, v in threaded.items() if k in ("thread_ts", "parent_user_id")}
        self.st.messages[cid][ts] = msg
        return {"channel": cid, "ts": ts, "message": copy.deepcopy(msg)}

    def update(self, p: Params, token: str) -> dict[str, Any]:
        cid = self._channel(p)
        msg = self._message(cid, p.get("ts"))
        if msg.get("user") != BOT_USER and not token.startswith("xoxp"):
            raise SlackError("cant_update_message")
        text = str(p.get("text") or "")
        msg["text"] = text
        msg["blocks"] = _blocks(text)
        msg["edited"] = {"user": BOT_USER, "ts": self.st.new_ts()}
        return {"channel": cid, "ts": msg["ts"], "text": text, "message": copy.deepcopy(msg)}

    def delete(self, p: Params, token: str) -> dict[str, Any]:
        cid = self._channel(p)
        msg = self._message(cid, p.get("ts"))
        if msg.get("user") != BOT_USER and not token.startswith("xoxp"):
            raise SlackError("cant_delete_message")
        del self.st.messages[cid][msg["ts"]]
        return {"channel": cid, "ts": msg["ts"]}

    def _reaction_target(self, p: Params) -> tuple[dict[str, Any], str]:
        cid = self._channel(p)
        msg = self._message(cid, p.get("timestamp"))
        name = str(p.get("name") or "").strip(":")
        if not name:
            raise SlackError("invalid_name")
        return msg, name

    def react_add(self, p: Params, token: str) -> dict[str, Any]:
        msg, name = self._reaction_target(p)
        reactions = msg.setdefault("reactions", [])
        r = next((x for x in reactions if x["name"] == name), None)
        if r is None:
            r = {"name": name, "users": [], "count": 0}
            reactions.append(r)
        if BOT_USER in r["users"]:
            raise SlackError("already_reacted")
        r["users"].append(BOT_USER)
        r["count"] += 1
        return {}

    def react_remove(self, p: Params, token: str) -> dict[str, Any]:
        msg, name = self._reaction_target(p)
        reactions = msg.get("reactions", [])
        r = next((x for x in reactions if x["name"] == name), None)
        if r is None or BOT_USER not in r["users"]:
            raise SlackError("no_reaction")
        r["users"].remove(BOT_USER)
        r["count"] -= 1
        if not r["users"]:
            reactions.remove(r)
        if not reactions:
            msg.pop("reactions", None)
        return {}

    def react_get(self, p: Params, token: str) -> dict[str, Any]:
        cid = self._channel(p)
        msg = self._message(cid, p.get("timestamp"))
        return {"type": "message", "channel": cid, "message": copy.deepcopy(msg)}

    def users_info(self, p: Params, token: str) -> dict[str, Any]:
        user = self.st.users.get(str(p.get("user") or ""))
        if user is None:
            raise SlackError("user_not_found")
        return {"user": copy.deepcopy(user)}

    def users_list(self, p: Params, token: str) -> dict[str, Any]:
        chunk, nxt = self._page([copy.deepcopy(u) for u in self.st.users.values()], p, 100)
        return {"members": chunk, "cache_ts": int(time.time()), "response_metadata": {"next_cursor": nxt}}

    def set_snooze(self, p: Params, token: str) -> dict[str, Any]:
        if "num_minutes" not in p:
            raise SlackError("invalid_arguments")
        minutes = _int(p, "num_minutes", 0)
        end = int(time.time()) + minutes * 60
        self.st.dnd = {
            "snooze_enabled": True,
            "snooze_endtime": end,
            "snooze_remaining": minutes * 60,
            "snooze_is_indefinite": False,
        }
        return dict(self.st.dnd)

    def end_snooze(self, p: Params, token: str) -> dict[str, Any]:
        if not self.st.dnd.get("snooze_enabled"):
            raise SlackError("snooze_not_active")
        self.st.dnd = {"snooze_enabled": False}
        return {"dnd_enabled": False, "next_dnd_start_ts": 1, "next_dnd_end_ts": 1, "snooze_enabled": False}

    def dnd_info(self, p: Params, token: str) -> dict[str, Any]:
        return {"dnd_enabled": False, "next_dnd_start_ts": 1, "next_dnd_end_ts": 1} | self.st.dnd

    def oauth_access(self, p: Params, token: str) -> dict[str, Any]:
        if not p.get("client_id") and not token:
            raise SlackError("invalid_client_id")
        if not p.get("code") and p.get("grant_type") != "refresh_token":
            raise SlackError("invalid_code")
        n = uuid.uuid4().hex
        return {
            "app_id": APP_ID,
            "authed_user": {
                "id": "U0ALICE",
                "scope": "chat:write",
                "access_token": f"xoxp-1-{n[:24]}",
                "token_type": "user",
            },
            "scope": "channels:history,chat:write,reactions:write,users:read",
            "token_type": "bot",
            "access_token": f"xoxb-17653672481-19874698323-{n[:24]}",
            "bot_user_id": BOT_USER,
            "team": {"id": TEAM_ID, "name": "Acme"},
            "enterprise": None,
            "is_enterprise_install": False,
            "incoming_webhook": {
                "channel": "#general",
                "channel_id": CHANNEL_GENERAL,
                "configuration_url": f"https://{TEAM_DOMAIN}.slack.com/services/B0HOOK",
                "url": f"https://hooks.slack.com/services/{TEAM_ID}/B0HOOK/{n[:24]}",
            },
        }

    def upload_url(self, p: Params, token: str) -> dict[str, Any]:
        name = str(p.get("filename") or "")
        if not name or "length" not in p:
            raise SlackError("invalid_arguments")
        fid = "F0" + uuid.uuid4().hex[:9].upper()
        key = uuid.uuid4().hex
        self.st.pending_uploads[key] = {"file_id": fid, "name": name, "length": _int(p, "length", 0)}
        return {"upload_url": f"https://files.slack.com/upload/v1/{key}", "file_id": fid}

    def complete_upload(self, p: Params, token: str) -> dict[str, Any]:
        files = p.get("files")
        if isinstance(files, str):
            try:
                files = json.loads(files)
            except ValueError as exc:
                raise SlackError("invalid_arguments") from exc
        out = []
        for item in files or []:
            fid = str((item or {}).get("id", ""))
            if fid not in self.st.files:
                raise SlackError("file_not_found")
            f = self.st.files[fid]
            if item.get("title"):
                f["title"] = item["title"]
            out.append(copy.deepcopy(f))
        if not out:
            raise SlackError("invalid_arguments")
        return {"files": out}

    def file_info(self, p: Params, token: str) -> dict[str, Any]:
        f = self.st.files.get(str(p.get("file") or ""))
        if f is None:
            raise SlackError("file_not_found")
        return {"file": copy.deepcopy(f)}

    def file_delete(self, p: Params, token: str) -> dict[str, Any]:
        fid = str(p.get("file") or "")
        if fid not in self.st.files:
            raise SlackError("file_not_found")
        del self.st.files[fid]
        self.st.blobs.pop(fid, None)
        return {}

    # -- HTTP entry points -----------------------------------------------------------------------------------

    def api(self, req: Request, m: re.Match[str]) -> Response:
        method = m.group("method")
        try:
            params = req.params()
        except Exception:  # noqa: BLE001 - Slack answers bad bodies with ok:false too
            return json_response({"ok": False, "error": "invalid_form_data"}, flavor="slack")
        token = req.bearer() or str(params.get("token") or "")
        if method not in PUBLIC_METHODS:
            if not token:
                return json_response({"ok": False, "error": "not_authed"}, flavor="slack")
            if not token.startswith("xox") or "invalid" in token or "revoked" in token:
                return json_response({"ok": False, "error": "invalid_auth"}, flavor="slack")
        fn = self.methods.get(method)
        if fn is None:
            return json_response(
                {"ok": False, "error": "unknown_method", "req_method": method}, flavor="slack"
            )
        try:
            with self.st.lock:
                result = fn(params, token)
        except SlackError as exc:
            return json_response({"ok": False, "error": exc.error, **exc.extra}, flavor="slack")
        except (ValueError, TypeError, AttributeError):  # malformed argument values
            return json_response({"ok": False, "error": "invalid_arguments"}, flavor="slack")
        return json_response({"ok": True, **result}, flavor="slack")

    def upload(self, req: Request, m: re.Match[str]) -> Response:
        with self.st.lock:
            pending = self.st.pending_uploads.pop(m.group("key"), None)
        if pending is None:
            for _ in req.body.iter():
                pass
            return Response(status=404, body=b"Not Found", content_type="text/plain; charset=utf-8")
        sink = Sink(f"{self.st.spill_dir}/{uuid.uuid4().hex}")
        for piece in req.body.iter():
            sink.write(piece)
        blob = sink.finish()
        with self.st.lock:
            fid = pending["file_id"]
            self.st.files[fid] = self.st._file_obj(fid, pending["name"], blob.size)
            self.st.blobs[fid] = blob
        return Response(
            status=200, body=f"OK - {blob.size}".encode(), content_type="text/plain; charset=utf-8"
        )

    def download(self, req: Request, m: re.Match[str]) -> Response:
        fid = m.group("fid")
        with self.st.lock:
            f = self.st.files.get(fid)
            blob = self.st.blobs.get(fid)
        if f is None or blob is None or (req.bearer() is None and "token" not in req.query):
            return Response(
                status=404 if f is None else 302,
                body=b"",
                headers=[]
                if f is None
                else [("Location", f"https://{TEAM_DOMAIN}.slack.com/?redir=%2Ffiles-pri%2F{TEAM_ID}-{fid}")],
            )
        return Response(
            status=200,
            body=blob.chunks(),
            length=blob.size,
            content_type=f["mimetype"],
            headers=[("Content-Disposition", f'attachment; filename="{f["name"]}"')],
        )


def routes(st: SlackState) -> list[Route]:
    """Slack routes on slack.com (Web API) and files.slack.com (uploads/downloads)."""
    s = Slack(st)
    files_host = frozenset({"files.slack.com"})
    return [
        route("GET POST", SLACK_HOSTS, r"/api/(?P<method>[A-Za-z0-9_.]+)", s.api, "slack", public=True),
        route("POST PUT", files_host, r"/upload/v1/(?P<key>[0-9a-f]+)", s.upload, "slack", public=True),
        route(
            "GET HEAD",
            files_host,
            rf"/files-pri/{TEAM_ID}-(?P<fid>F[0-9A-Z]+)/(?P<name>[^/]+)",
            s.download,
            "slack",
            public=True,
        ),
    ]
