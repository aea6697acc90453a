"""Synthetic sessions for replay tests: real request shapes, recorded through the real Recorder.

    with SessionBuilder(tmp_path / "v", "gmail-s") as s:
        s.get(GMAIL + "/messages/m1", {"id": "m1", "labelIds": ["INBOX"]})
        s.post(GMAIL + "/messages/m1/modify", {"removeLabelIds": ["INBOX"]}, {"id": "m1", "labelIds": []})

The effect comes from the connector registry, as at capture time (pass `effect=` to override).
Timestamps are synthetic and deterministic, so two builds give the same bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

from journal.call import Call
from journal.connectors import Registry
from journal.record import JsonValue, Recorder

GMAIL = "https://gmail.googleapis.com/gmail/v1/users/me"
CAL = "https://www.googleapis.com/calendar/v3"
DRIVE = "https://www.googleapis.com/drive/v3"
SLACK = "https://slack.com/api"
GITHUB = "https://api.github.com"
JSON_TYPE = ("Content-Type", "application/json")
FORM_TYPE = ("Content-Type", "application/x-www-form-urlencoded")
_REGISTRY = Registry.builtin()


def j(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


class SessionBuilder:
    """Append calls to one session of a vault (created if needed)."""

    def __init__(self, vault: Path, session: str = "s1", principal: str = "alice@example.com",
                 agent: str = "test-agent", spill_threshold: int | None = None) -> None:
        self.vault = Path(vault)
        self.session = session
        self.principal = principal
        self.agent = agent
        kw = {"spill_threshold": spill_threshold} if spill_threshold else {}
        self.rec = Recorder(self.vault, durable=False, **kw)
        self.n = 0

    def __enter__(self) -> SessionBuilder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.rec.close()

    def ts(self) -> str:
        self.n += 1
        return f"2026-09-22T10:{self.n // 60 % 60:02d}:{self.n % 60:02d}.{self.n % 1000:03d}Z"

    def call(
        self, method: str, url: str, resp: object = None, req: object = None, *, status: int | None = 200,
        connector: str | None = None, effect: str | None = None, capture: str = "broker", form: str | None = None,
        resp_raw: bytes | None = None, resp_type: str = "application/json", error: str | None = None,
        headers: list[tuple[str, str]] | None = None,
    ) -> dict:
        req_headers = [("Authorization", "Bearer test-token"), *(headers or [])]
        body = None
        if req is not None:
            req_headers.append(JSON_TYPE)
            body = j(req)
        elif form is not None:
            req_headers.append(FORM_TYPE)
            body = form.encode()
        if connector is None or effect is None:
            cls = _REGISTRY.classify(method, url, req_headers, body)
            if cls is not None:
                connector = connector or cls.connector
                effect = effect or cls.effect
        if connector is None:
            raise ValueError(f"no connector for {url}; pass connector=")
        if effect is None:
            effect = "read" if method in ("GET", "HEAD") else "write"
        if resp_raw is not None:
            resp_body: bytes | None = resp_raw
        else:
            resp_body = j(resp) if resp is not None else None
        resp_headers = [("Content-Type", resp_type)] if resp_body is not None else [("Content-Length", "0")]
        entry = self.rec.record(Call.make(
            session=self.session, agent=self.agent, principal=self.principal, connector=connector, capture=capture,
            effect=effect, method=method, url=url, request_headers=req_headers, request_body=body, status=status,
            response_headers=resp_headers if status is not None else [], response_body=resp_body, error=error,
            ts=self.ts(),
        ))
        assert entry is not None
        return entry

    def get(self, url: str, resp: object = None, **kw) -> dict:
        return self.call("GET", url, resp, **kw)

    def post(self, url: str, req: object = None, resp: object = None, **kw) -> dict:
        return self.call("POST", url, resp, req, **kw)

    def patch(self, url: str, req: object = None, resp: object = None, **kw) -> dict:
        return self.call("PATCH", url, resp, req, **kw)

    def put(self, url: str, req: object = None, resp: object = None, **kw) -> dict:
        return self.call("PUT", url, resp, req, **kw)

    def delete(self, url: str, resp: object = None, **kw) -> dict:
        kw.setdefault("status", 204)
        return self.call("DELETE", url, resp, **kw)

    def mcp_tool(self, connector: str, tool: str, arguments: dict, result: object, *, effect: str,
                 is_error: bool = False, server: str = "stdio:test-mcp-server") -> dict:
        """An MCP tools/call as a gateway records it (result as JSON text content)."""
        request = {"jsonrpc": "2.0", "id": self.n + 1, "method": "tools/call",
                   "params": {"name": tool, "arguments": arguments}}
        response = {"jsonrpc": "2.0", "id": self.n + 1, "result": {
            "content": [{"type": "text", "text": json.dumps(result)}], "isError": is_error}}
        entry = self.rec.record(Call.make(
            session=self.session, agent=self.agent, principal=self.principal, connector=connector, capture="gateway",
            effect=effect, method="tools/call", url=server, request_headers=[],
            request_body=JsonValue(request["params"]), status=200, response_headers=[],
            response_body=JsonValue(response), mcp=request, ts=self.ts(),
        ))
        assert entry is not None
        return entry


# -- one synthetic session per connector ----------------------------------------------------------


def gmail_session(vault: Path, session: str = "gmail") -> None:
    """Label changes (read first, blind), trash (read first and blind), insert, label create/patch/delete,
    send (irreversible), a failed modify, and a modify whose response differs from the request."""
    with SessionBuilder(vault, session) as s:
        s.get(f"{GMAIL}/messages/m1?format=metadata", {"id": "m1", "threadId": "t1", "labelIds": ["INBOX", "UNREAD"],
                                                       "snippet": "quarterly numbers"})  # 1
        s.post(f"{GMAIL}/messages/m1/modify", {"addLabelIds": ["STARRED"], "removeLabelIds": ["UNREAD"]},
               {"id": "m1", "threadId": "t1", "labelIds": ["INBOX", "STARRED"]})  # 2
        s.post(f"{GMAIL}/messages/m2/modify", {"addLabelIds": ["Label_7"], "removeLabelIds": ["INBOX"]},
               {"id": "m2", "threadId": "t2", "labelIds": ["Label_7"]})  # 3 blind
        s.post(f"{GMAIL}/messages/m1/trash", None, {"id": "m1", "labelIds": ["TRASH", "STARRED"]})  # 4
        s.post(f"{GMAIL}/messages/m3/trash", None, {"id": "m3", "labelIds": ["TRASH"]})  # 5 blind trash
        s.post(f"{GMAIL}/messages", {"raw": "VG86IGEK", "labelIds": ["INBOX"]},
               {"id": "m4", "threadId": "t4", "labelIds": ["INBOX"]})  # 6 insert
        s.post(f"{GMAIL}/labels", {"name": "Vendors", "labelListVisibility": "labelShow"},
               {"id": "Label_9", "name": "Vendors", "type": "user"})  # 7 label create
        s.get(f"{GMAIL}/labels/Label_3", {"id": "Label_3", "name": "Old", "type": "user",
                                          "messageListVisibility": "show"})  # 8
        s.patch(f"{GMAIL}/labels/Label_3", {"name": "Archive 2025"}, {"id": "Label_3", "name": "Archive 2025"})  # 9
        s.delete(f"{GMAIL}/labels/Label_3")  # 10 label delete (before: seq 8/9)
        s.post(f"{GMAIL}/messages/send", {"raw": "VG86IGIK"},
               {"id": "m5", "threadId": "t1", "labelIds": ["SENT"]})  # 11
        s.post(f"{GMAIL}/messages/m9/modify", {"addLabelIds": ["X"]},
               {"error": {"code": 404, "message": "Requested entity was not found."}}, status=404)  # 12 failed
        s.post(f"{GMAIL}/messages/m1/modify", {"addLabelIds": ["IMPORTANT"]},
               {"id": "m1", "labelIds": ["TRASH", "STARRED"]})  # 13 differs: IMPORTANT absent
        s.delete(f"{GMAIL}/messages/m4")  # 14 permanent delete
        s.get(f"{GMAIL}/threads/t7", {"id": "t7", "messages": [{"id": "m7", "threadId": "t7",
                                                                 "labelIds": ["INBOX", "UNREAD"]}]})  # 15
        s.post(f"{GMAIL}/threads/t7/modify", {"removeLabelIds": ["INBOX"]},
               {"id": "t7", "messages": [{"id": "m7", "threadId": "t7", "labelIds": ["UNREAD"]}]})  # 16


def calendar_session(vault: Path, session: str = "calendar") -> None:
    event = {"id": "ev1", "status": "confirmed", "summary": "Sync", "location": "Room 1",
             "start": {"dateTime": "2026-09-24T10:00:00Z"}, "end": {"dateTime": "2026-09-24T10:30:00Z"},
             "etag": "\"1\"", "iCalUID": "ev1@google.com", "htmlLink": "https://calendar.google.com/x"}
    with SessionBuilder(vault, session) as s:
        s.get(f"{CAL}/calendars/primary/events/ev1", event)  # 1
        s.patch(f"{CAL}/calendars/alice%40example.com/events/ev1", {"summary": "Sync (moved)", "colorId": "5"},
                dict(event, summary="Sync (moved)", colorId="5", etag="\"2\""))  # 2 alias of primary
        s.post(f"{CAL}/calendars/primary/events?sendUpdates=all",
               {"summary": "Kickoff", "attendees": [{"email": "bob@example.com"}],
                "start": {"dateTime": "2026-09-25T09:00:00Z"}, "end": {"dateTime": "2026-09-25T10:00:00Z"}},
               {"id": "ev2", "status": "confirmed", "summary": "Kickoff", "attendees": [{"email": "bob@example.com",
                "responseStatus": "needsAction"}], "start": {"dateTime": "2026-09-25T09:00:00Z"},
                "end": {"dateTime": "2026-09-25T10:00:00Z"}})  # 3 create
        s.delete(f"{CAL}/calendars/primary/events/ev1")  # 4 delete (before known)
        s.delete(f"{CAL}/calendars/primary/events/ev9")  # 5 blind delete
        s.put(f"{CAL}/calendars/primary/events/ev2", {"summary": "Kickoff v2", "start": {"dateTime":
              "2026-09-25T09:00:00Z"}, "end": {"dateTime": "2026-09-25T10:00:00Z"}},
              {"id": "ev2", "status": "confirmed", "summary": "Kickoff v2", "etag": "\"9\""})  # 6 update
        s.patch(f"{CAL}/calendars/primary/events/ev7", {"summary": "x"}, {"error": {"code": 403}}, status=403)  # 7
        s.post(f"{CAL}/freeBusy", {"items": [{"id": "primary"}]}, {"calendars": {}})  # 8 read via POST
        s.patch(f"{CAL}/calendars/primary/events/ev2", {"attendees": [{"email": "bob@example.com"},
                                                                      {"email": "not-an-address"}]},
                {"id": "ev2", "summary": "Kickoff v2", "attendees": [{"email": "bob@example.com"}]})  # 9 differs
        s.post(f"{CAL}/calendars/primary/events/ev2/move?destination=team%40group.calendar.google.com", None,
               {"id": "ev2", "summary": "Kickoff v2"})  # 10 move
        s.delete(f"{CAL}/calendars/team%40group.calendar.google.com")  # 11 calendars.delete: irreversible


def drive_session(vault: Path, session: str = "drive") -> None:
    with SessionBuilder(vault, session) as s:
        s.get(f"{DRIVE}/files/f1?fields=*", {"id": "f1", "name": "Plan.docx", "trashed": False,
                                             "description": "draft", "permissions": [
                                                 {"id": "p1", "type": "user", "role": "reader",
                                                  "emailAddress": "carol@example.com"}]})  # 1
        s.patch(f"{DRIVE}/files/f1", {"trashed": True}, {"id": "f1", "trashed": True})  # 2 trash, before known
        s.patch(f"{DRIVE}/files/f2", {"trashed": True}, {"id": "f2", "trashed": True})  # 3 blind trash
        s.delete(f"{DRIVE}/files/f3")  # 4 permanent delete
        s.post(f"{DRIVE}/files", {"name": "Notes", "mimeType": "application/vnd.google-apps.document"},
               {"id": "f4", "name": "Notes", "mimeType": "application/vnd.google-apps.document"})  # 5 create
        s.patch(f"{DRIVE}/files/f1?addParents=folderB&removeParents=folderA", {"description": "final"},
                {"id": "f1", "description": "final", "parents": ["folderB"]})  # 6 move + metadata
        s.delete(f"{DRIVE}/files/f1/permissions/p1")  # 7 permission delete (before from seq 1)
        s.post(f"{DRIVE}/files/f1/permissions?sendNotificationEmail=true",
               {"type": "user", "role": "writer", "emailAddress": "dave@example.com"},
               {"id": "p2", "type": "user", "role": "writer"})  # 8 permission create, email sent
        s.patch(f"{DRIVE}/files/f1/permissions/p2", {"role": "commenter"}, {"id": "p2", "role": "reader"})  # 9 differs
        s.delete(f"{DRIVE}/files/trash")  # 10 empty trash
        s.delete(f"{DRIVE}/files/f5", {"error": {"code": 404}}, status=404)  # 11 failed


def slack_session(vault: Path, session: str = "slack") -> None:
    with SessionBuilder(vault, session) as s:
        s.post(f"{SLACK}/chat.postMessage", None, {"ok": True, "channel": "C1", "ts": "1700000000.000100",
                                                   "message": {"text": "hello", "ts": "1700000000.000100"}},
               form="channel=%23general&text=hello")  # 1 post, channel named, form body
        s.post(f"{SLACK}/reactions.add", {"channel": "#general", "timestamp": "1700000000.000100", "name": "eyes"},
               {"ok": True})  # 2 react via channel name (resolved from seq 1)
        s.post(f"{SLACK}/chat.update", {"channel": "C1", "ts": "1700000000.000100", "text": "hello all"},
               {"ok": True, "channel": "C1", "ts": "1700000000.000100", "text": "hello all"})  # 3
        s.post(f"{SLACK}/chat.update", {"channel": "C2", "ts": "1700000000.000900", "text": "edited"},
               {"ok": True, "channel": "C2", "ts": "1700000000.000900", "text": "edited"})  # 4 blind update
        s.get(f"{SLACK}/conversations.history?channel=C3", {"ok": True, "messages": [
            {"ts": "1690000000.000200", "text": "keep me", "user": "U1"}]})  # 5
        s.post(f"{SLACK}/chat.delete", {"channel": "C3", "ts": "1690000000.000200"},
               {"ok": True, "channel": "C3", "ts": "1690000000.000200"})  # 6 delete: irreversible
        s.post(f"{SLACK}/chat.postMessage", {"channel": "C404", "text": "x"},
               {"ok": False, "error": "channel_not_found"})  # 7 failed with HTTP 200
        s.post(f"{SLACK}/reactions.remove", {"channel": "C1", "timestamp": "1700000000.000100", "name": "eyes"},
               {"ok": True})  # 8
        s.mcp_tool("slack", "slack_post_message", {"channel_id": "C1", "text": "via mcp"},
                   {"ok": True, "channel": "C1", "ts": "1700000000.000500",
                    "message": {"text": "via mcp", "ts": "1700000000.000500"}}, effect="write")  # 9


def github_session(vault: Path, session: str = "github") -> None:
    repo = f"{GITHUB}/repos/acme/widgets"
    with SessionBuilder(vault, session) as s:
        s.get(f"{repo}/issues/7", {"number": 7, "title": "Crash on start", "state": "open", "body": "trace",
                                   "labels": [{"name": "bug"}], "assignees": [{"login": "erin"}],
                                   "node_id": "I_7"})  # 1
        s.patch(f"{repo}/issues/7", {"state": "closed", "title": "Crash on start (fixed)"},
                {"number": 7, "title": "Crash on start (fixed)", "state": "closed", "labels": [{"name": "bug"}]})  # 2
        s.post(f"{repo}/issues", {"title": "New idea"}, {"number": 8, "title": "New idea", "state": "open"},
               status=201)  # 3 create
        s.post(f"{repo}/issues/7/comments", {"body": "Fixed in #9"},
               {"id": 501, "body": "Fixed in #9", "issue_url": f"{repo}/issues/7"}, status=201)  # 4
        s.post(f"{repo}/issues/7/labels", {"labels": ["wontfix"]}, [{"name": "bug"}, {"name": "wontfix"}])  # 5
        s.post(f"{repo}/issues/9/labels", {"labels": ["triage"]}, [{"name": "triage"}, {"name": "p1"}])  # 6 blind
        s.post(f"{repo}/issues/7/reactions", {"content": "+1"}, {"id": 900, "content": "+1"}, status=201)  # 7
        s.get(f"{repo}/issues/comments/300", {"id": 300, "body": "old text", "issue_url": f"{repo}/issues/5"})  # 8
        s.patch(f"{repo}/issues/comments/300", {"body": "new text"}, {"id": 300, "body": "new text"})  # 9
        s.delete(f"{repo}/issues/comments/300")  # 10 delete: compensation re-post
        s.put(f"{repo}/pulls/12/merge", {"merge_method": "squash"}, {"merged": True, "sha": "abc123"})  # 11
        s.patch(f"{repo}/issues/99", {"state": "closed"}, {"message": "Not Found"}, status=404)  # 12 failed
        s.post(f"{GITHUB}/graphql", {"query": "mutation($input: AddReactionInput!) { addReaction(input: $input) "
                                              "{ reaction { content } } }",
                                     "variables": {"input": {"subjectId": "I_7", "content": "HEART"}}},
               {"data": {"addReaction": {"reaction": {"content": "HEART"}}}})  # 13
        s.post(f"{repo}/issues/7/reactions", {"content": "+1"}, {"id": 900, "content": "+1"}, status=200)  # 14 no-op
        s.patch(f"{repo}/issues/8", {"title": "Renamed", "state": "closed"},
                {"number": 8, "title": "Renamed", "state": "open"})  # 15 differs: still open


def generic_session(vault: Path, session: str = "jira") -> None:
    base = "https://acme.atlassian.net/rest/api/3"
    with SessionBuilder(vault, session) as s:
        s.get(f"{base}/issue/PRJ-1", {"id": "10001", "key": "PRJ-1", "fields": {"summary": "Old"}},
              connector="jira")  # 1
        s.put(f"{base}/issue/PRJ-1", {"fields": {"summary": "New"}}, {"id": "10001", "fields": {"summary": "New"}},
              connector="jira")  # 2
        s.post(f"{base}/issue", {"fields": {"summary": "Created"}}, {"id": "10002", "key": "PRJ-2"},
               connector="jira", status=201)  # 3 create child
        s.patch(f"{base}/issue/PRJ-1", {"priority": "High"}, {"id": "10001", "priority": "Low"},
                connector="jira")  # 4 differs
        s.delete(f"{base}/issue/PRJ-1", connector="jira")  # 5 delete with before
        s.delete(f"{base}/issue/PRJ-3", connector="jira")  # 6 blind delete
        s.post(f"{base}/issue/PRJ-2/transitions", {"transition": {"id": "31"}}, None, connector="jira",
               status=204)  # 7 action: no id
        s.put(f"{base}/issue/PRJ-4", {"x": 1}, {"errorMessages": ["nope"]}, connector="jira", status=400)  # 8
