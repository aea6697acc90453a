"""The connector registry (journal/connectors): matching calls to connectors, classifying effect.

Table-driven over real request shapes (URLs, headers and bodies as the official clients send
them: google-api-python-client, slack_sdk, PyGithub / gh, msgraph), then the TOML file format
and its errors.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from journal.connectors import BUILTIN_MODULES, Classification, Registry
from journal.connectors._http import normalise_host, normalise_path
from journal.connectors.registry import _Connector

REGISTRY = Registry.builtin()
JSON = [("Content-Type", "application/json")]
FORM = [("Content-Type", "application/x-www-form-urlencoded")]


def _json(value: object) -> bytes:
    return json.dumps(value).encode()


def _gql(query: str, operation_name: str | None = None, **extra: object) -> bytes:
    payload: dict[str, object] = {"query": query, "variables": {}}
    if operation_name is not None:
        payload["operationName"] = operation_name
    payload.update(extra)
    return _json(payload)


def google_batch(*requests: str, boundary: str = "===============7330845974216740156==", crlf: bool = False):
    """A batch body the way google-api-python-client serialises it."""
    parts = []
    for n, request in enumerate(requests):
        parts.append(
            f"--{boundary}\n"
            "Content-Type: application/http\n"
            "Content-Transfer-Encoding: binary\n"
            "MIME-Version: 1.0\n"
            f"Content-ID: <a6a9c6b0-8b4a-4d64-9ad1-5c7b3a9e4c2e+{n}>\n"
            "\n"
            f"{request}\n"
        )
    text = "".join(parts) + f"--{boundary}--\n"
    if crlf:
        text = text.replace("\n", "\r\n")
    headers = [("Content-Type", f'multipart/mixed; boundary="{boundary}"')]
    return headers, text.encode()


def _get(path: str) -> str:
    return (
        f"GET {path} HTTP/1.1\nContent-Type: application/json\nMIME-Version: 1.0\naccept: application/json\n"
        "accept-encoding: gzip, deflate\nuser-agent: (gzip)\n"
        "x-goog-api-client: gdcl/2.108.0 gl-python/3.12.0\n"
    )


def _with_body(method: str, path: str, body: str) -> str:
    return f"{method} {path} HTTP/1.1\nContent-Type: application/json\nMIME-Version: 1.0\n\n{body}"


BATCH_GMAIL_READS = google_batch(
    _get("/gmail/v1/users/me/messages/18c1f2a3b4d5e6f7?format=metadata&alt=json"),
    _get("/gmail/v1/users/me/messages/18c1f2a3b4d5e6f8?format=metadata&alt=json"),
)
BATCH_GMAIL_ONE_DELETE = google_batch(
    _get("/gmail/v1/users/me/messages/18c1f2a3b4d5e6f7?alt=json"),
    "DELETE /gmail/v1/users/me/messages/18c1f2a3b4d5e6f8?alt=json HTTP/1.1\nContent-Length: 0\n",
    crlf=True,
)
BATCH_CALENDAR_FREEBUSY = google_batch(
    _get("/calendar/v3/calendars/alice%40example.com/events?maxResults=5&alt=json"),
    _with_body("POST", "/calendar/v3/freeBusy?alt=json", '{"items": [{"id": "bob@example.com"}]}'),
)
BATCH_DRIVE_EMPTY_TRASH = google_batch(
    _get("/drive/v3/files/1AbCdEf?fields=id%2Cname&alt=json"),
    "DELETE /drive/v3/files/trash HTTP/1.1\n",
)
BATCH_DRIVE_OVERRIDE_GET = google_batch(
    "POST https://www.googleapis.com/drive/v3/files?alt=json HTTP/1.1\nX-HTTP-Method-Override: GET\n",
)
BATCH_TRUNCATED = (BATCH_GMAIL_READS[0], BATCH_GMAIL_READS[1].rsplit(b"--===", 1)[0])
BATCH_NESTED = google_batch(_get("/batch/gmail/v1"))
BATCH_NOT_HTTP_PART = (
    BATCH_GMAIL_READS[0],
    BATCH_GMAIL_READS[1].replace(b"Content-Type: application/http", b"Content-Type: text/plain"),
)
BATCH_GARBAGE_REQUEST_LINE = google_batch("this is not a request line\n")

GRAPH_BATCH_READS = _json(
    {
        "requests": [
            {"id": "1", "method": "GET", "url": "/me/messages?$top=5&$select=subject"},
            {"id": "2", "method": "GET", "url": "/me/events"},
            {
                "id": "3",
                "method": "POST",
                "url": "/me/calendar/getSchedule",
                "body": {"schedules": ["bob@contoso.com"]},
                "headers": {"Content-Type": "application/json"},
            },
        ]
    }
)
GRAPH_BATCH_ONE_WRITE = _json(
    {
        "requests": [
            {"id": "1", "method": "GET", "url": "/me/messages"},
            {
                "id": "2",
                "method": "PATCH",
                "url": "/me/messages/AAMkAGI2",
                "body": {"isRead": True},
                "headers": {"Content-Type": "application/json"},
            },
        ]
    }
)
GRAPH_BATCH_NESTED = _json({"requests": [{"id": "1", "method": "POST", "url": "/$batch", "body": {}}]})

GM = "https://gmail.googleapis.com/gmail/v1/users/me"
GAPI = "https://www.googleapis.com"
CAL = f"{GAPI}/calendar/v3"
DRV = f"{GAPI}/drive/v3"
SL = "https://slack.com/api"
HOOK = "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"
GH = "https://api.github.com"
REPO = f"{GH}/repos/octocat/Hello-World"
GQL = f"{GH}/graphql"
MS = "https://graph.microsoft.com/v1.0"
TWO_OPS = 'query Viewer { viewer { login } }\nmutation Star { addStar(input: {starrableId: "R_1"}) { x } }'
FREEBUSY_BODY = _json(
    {"timeMin": "2024-01-01T00:00:00Z", "timeMax": "2024-01-02T00:00:00Z", "items": [{"id": "primary"}]}
)
ADD_COMMENT = _gql(
    'mutation AddComment($id: ID!) { addComment(input: {subjectId: $id, body: "hi"}) { clientMutationId } }'
)
PERSISTED_QUERY = _json(
    {
        "operationName": "Viewer",
        "variables": {},
        "extensions": {"persistedQuery": {"version": 1, "sha256Hash": "ecf4edb46db40b5132295c0291d62fb6"}},
    }
)
OVERRIDE_GET = [("X-HTTP-Method-Override", "GET")]
OVERRIDE_DELETE = [("X-HTTP-Method-Override", "DELETE")]

# (method, url, headers, body, connector, effect, text the rule must contain)
# fmt: off
CASES = [
    # --- Gmail ---
    ("GET", f"{GM}/messages?q=is%3Aunread&maxResults=10", [], None, "gmail", "read",
     "gmail users.messages.list"),
    ("GET", f"{GAPI}/gmail/v1/users/me/messages/18c1f2a3?format=raw", [], None, "gmail", "read",
     "users.messages.get"),
    ("GET", f"{GM}/messages/18c1/attachments/ANGjdJ8", [], None, "gmail", "read",
     "users.messages.attachments.get"),
    ("GET", "https://content.googleapis.com/gmail/v1/users/alice%40example.com/labels", [], None, "gmail",
     "read", "users.labels.list"),
    ("POST", f"{GM}/messages/send?alt=json", JSON, _json({"raw": "RnJvbTogYUBiLmNvbQ0KDQpoaQ=="}), "gmail",
     "write", "users.messages.send"),
    ("POST", "https://gmail.googleapis.com/upload/gmail/v1/users/me/messages/send?uploadType=multipart",
     [("Content-Type", "multipart/related; boundary=x")], None, "gmail", "write",
     "users.messages.send (upload)"),
    ("POST", f"{GM}/messages/18c1/modify", JSON,
     _json({"addLabelIds": ["STARRED"], "removeLabelIds": ["UNREAD"]}), "gmail", "write",
     "users.messages.modify"),
    ("POST", f"{GM}/messages/batchModify", JSON, _json({"ids": ["a", "b"], "addLabelIds": ["TRASH"]}),
     "gmail", "write", "users.messages.batchModify"),
    ("POST", f"{GM}/messages/18c1/trash", [], b"", "gmail", "write", "users.messages.trash"),
    ("DELETE", f"{GM}/messages/18c1", [], None, "gmail", "write", "users.messages.delete"),
    ("POST", f"{GM}/drafts/send", JSON, _json({"id": "r-123"}), "gmail", "write", "users.drafts.send"),
    ("PUT", f"{GM}/settings/autoForwarding", JSON, _json({"enabled": True, "emailAddress": "x@evil.example"}),
     "gmail", "write", "users.settings.updateAutoForwarding"),
    # Google honours X-HTTP-Method-Override in both directions.
    ("POST", f"{GM}/messages?q=from%3Abob", OVERRIDE_GET, b"", "gmail", "read",
     "users.messages.list via X-HTTP-Method-Override"),
    ("GET", f"{GM}/messages/18c1", OVERRIDE_DELETE, None, "gmail", "write",
     "users.messages.delete via X-HTTP-Method-Override"),
    ("POST", f"{GM}/messages", [("X-HTTP-Method-Override", "G E T")], b"", "gmail", "write",
     "unrecognised method"),
    ("GET", f"{GM}/messages/18c1", [("X-HTTP-Method", "DELETE")], None, "gmail", "write",
     "x-http-method DELETE"),
    ("POST", f"{GAPI}/batch/gmail/v1", *BATCH_GMAIL_READS, "gmail", "read", "google batch of 2 reads"),
    ("POST", "https://gmail.googleapis.com/batch/gmail/v1", *BATCH_GMAIL_ONE_DELETE, "gmail", "write",
     "item 2: gmail users.messages.delete"),
    ("POST", f"{GAPI}/batch/gmail/v1", BATCH_GMAIL_READS[0], None, "gmail", "write", "body not captured"),
    ("POST", f"{GAPI}/batch/gmail/v1", *BATCH_TRUNCATED, "gmail", "write", "unparseable"),
    ("POST", f"{GAPI}/batch/gmail/v1", JSON, BATCH_GMAIL_READS[1], "gmail", "write", "unparseable"),
    ("POST", f"{GAPI}/batch/gmail/v1", *BATCH_NOT_HTTP_PART, "gmail", "write", "unparseable"),
    ("POST", f"{GAPI}/batch/gmail/v1", *BATCH_GARBAGE_REQUEST_LINE, "gmail", "write", "unparseable"),
    ("POST", f"{GAPI}/batch/gmail/v1", *BATCH_NESTED, "gmail", "write", "nested batch"),
    # --- Calendar ---
    ("GET", f"{CAL}/calendars/alice%40example.com/events?timeMin=2024-01-01T00%3A00%3A00Z&singleEvents=true",
     [], None, "calendar", "read", "calendar events.list"),
    ("GET", f"{CAL}/calendars/en.usa%23holiday%40group.v.calendar.google.com/events", [], None, "calendar",
     "read", "events.list"),
    ("GET", f"{CAL}/calendars/primary/events/abc123_20240105T100000Z", [], None, "calendar", "read",
     "events.get"),
    ("POST", f"{CAL}/freeBusy?alt=json", JSON, FREEBUSY_BODY, "calendar", "read", "calendar freebusy.query"),
    ("POST", f"{CAL}/freeBusy", JSON, None, "calendar", "read", "freebusy.query"),
    ("POST", f"{CAL}/calendars/alice%40example.com/events?sendUpdates=all", JSON,
     _json({"summary": "1:1", "start": {"dateTime": "2024-01-05T10:00:00Z"}}), "calendar", "write",
     "events.insert"),
    ("POST", f"{CAL}/calendars/primary/events/quickAdd?text=Lunch%20tomorrow%20noon", [], b"", "calendar",
     "write", "events.quickAdd"),
    ("PATCH", f"{CAL}/calendars/primary/events/abc123", JSON, _json({"status": "confirmed"}), "calendar",
     "write", "events.patch"),
    ("DELETE", f"{CAL}/calendars/alice%40example.com/events/abc123?sendUpdates=all", [], None, "calendar",
     "write", "events.delete"),
    ("POST", f"{CAL}/calendars/primary/events/abc123/move?destination=bob%40example.com", [], b"", "calendar",
     "write", "events.move"),
    ("POST", f"{CAL}/calendars/team%40group.calendar.google.com/clear", [], b"", "calendar", "write",
     "calendars.clear"),
    ("GET", f"{CAL}/users/me/calendarList", [], None, "calendar", "read", "calendarList.list"),
    ("POST", f"{GAPI}/batch/calendar/v3", *BATCH_CALENDAR_FREEBUSY, "calendar", "read",
     "google batch of 2 reads"),
    # --- Drive ---
    ("GET", f"{DRV}/files?q=name%20contains%20%27budget%27&fields=*", [], None, "drive", "read",
     "drive files.list"),
    ("GET", f"{DRV}/files/1AbCdEfGhIjK?alt=media", [], None, "drive", "read", "files.get"),
    ("GET", f"{DRV}/files/1AbC/export?mimeType=application%2Fpdf", [], None, "drive", "read", "files.export"),
    ("GET", f"{DRV}/files/generateIds?count=2", [], None, "drive", "read", "files.generateIds"),
    ("DELETE", f"{DRV}/files/trash", [], None, "drive", "write", "drive files.emptyTrash"),
    ("DELETE", f"{DRV}/files/1AbCdEfGhIjK", [], None, "drive", "write", "drive files.delete"),
    ("PATCH", f"{DRV}/files/1AbC?addParents=0Bx&removeParents=root", JSON, _json({"trashed": True}), "drive",
     "write", "files.update"),
    ("POST", f"{DRV}/files/1AbC/permissions?sendNotificationEmail=false", JSON,
     _json({"type": "user", "role": "writer", "emailAddress": "x@example.com"}), "drive", "write",
     "permissions.create"),
    ("POST", f"{GAPI}/upload/drive/v3/files?uploadType=multipart",
     [("Content-Type", "multipart/related; b=f")], None, "drive", "write", "files.create (upload)"),
    ("PUT", f"{GAPI}/upload/drive/v3/files?uploadType=resumable&upload_id=ADPycdu",
     [("Content-Range", "bytes 0-524287/2000000")], None, "drive", "write", "resumable upload session"),
    ("POST", f"{GAPI}/drive/v2/files/1AbC/trash", [], b"", "drive", "write", "method POST"),
    ("POST", f"{GAPI}/batch/drive/v3", *BATCH_DRIVE_EMPTY_TRASH, "drive", "write",
     "item 2: drive files.emptyTrash"),
    ("POST", f"{GAPI}/batch/drive/v3", *BATCH_DRIVE_OVERRIDE_GET, "drive", "read", "google batch of 1 reads"),
    # --- Slack: by method name, whatever the HTTP method ---
    ("POST", f"{SL}/chat.postMessage", [("Content-Type", "application/json; charset=utf-8")],
     _json({"channel": "C0123", "text": "hi"}), "slack", "write", "slack method chat.postMessage"),
    ("POST", f"{SL}/chat.update", FORM, b"channel=C0123&ts=1712345678.000100&text=edited", "slack", "write",
     "chat.update"),
    ("GET", f"{SL}/dnd.setSnooze?num_minutes=60", [], None, "slack", "write", "dnd.setSnooze"),
    ("GET", f"{SL}/admin.emoji.add?name=party&url=https%3A%2F%2Fx.example%2Fp.png", [], None, "slack",
     "write", "admin.emoji.add"),
    ("GET", f"{SL}/users.deletePhoto", [], None, "slack", "write", "users.deletePhoto"),
    ("GET", f"{SL}/files.remote.share?file=F0123&channels=C0123", [], None, "slack", "write",
     "files.remote.share"),
    ("POST", f"{SL}/conversations.history", FORM, b"channel=C0123&limit=100&token=xoxb-1", "slack", "read",
     "slack method conversations.history"),
    ("POST", f"{SL}/conversations.replies", JSON, _json({"channel": "C0123", "ts": "1712.0001"}), "slack",
     "read", "conversations.replies"),
    ("POST", f"{SL}/conversations.list", FORM, b"types=public_channel", "slack", "read",
     "conversations.list"),
    ("GET", f"{SL}/users.info?user=U0123", [], None, "slack", "read", "users.info"),
    ("GET", f"{SL}/users.lookupByEmail?email=a%40b.com", [], None, "slack", "read", "users.lookupByEmail"),
    ("POST", f"{SL}/auth.test", [], b"", "slack", "read", "auth.test"),
    ("GET", f"{SL}/users.conversations", [], None, "slack", "read", "users.conversations"),
    ("GET", f"{SL}/users.identity", [], None, "slack", "read", "users.identity"),
    ("GET", f"{SL}/users.profile.get", [], None, "slack", "read", "users.profile.get"),
    ("GET", f"{SL}/chat.getPermalink?channel=C1&message_ts=1.2", [], None, "slack", "read",
     "chat.getPermalink"),
    ("GET", f"{SL}/conversations.members?channel=C1", [], None, "slack", "read", "members"),
    ("POST", f"{SL}/openid.connect.userInfo", [], b"", "slack", "read", "openid.connect.userInfo"),
    ("POST", f"{SL}/search.messages", FORM, b"query=invoice", "slack", "read", "search.messages"),
    ("POST", f"{SL}/files.getUploadURLExternal", FORM, b"filename=a.txt&length=3", "slack", "write",
     "starts an upload"),
    ("GET", f"{SL}/rtm.connect", [], None, "slack", "write", "rtm.connect (opens a session)"),
    ("POST", f"{SL}/apps.connections.open", [], b"", "slack", "write", "opens a session"),
    ("POST", f"{SL}/conversations.open", JSON, _json({"users": "U1"}), "slack", "write",
     "conversations.open"),
    ("POST", f"{SL}/reactions.add", FORM, b"channel=C1&timestamp=1.2&name=thumbsup", "slack", "write",
     "reactions.add"),
    ("POST", f"{SL}/made.up", [], b"", "slack", "write", "slack method made.up"),
    ("POST", f"{SL}/", [], b"", "slack", "write", "not recognised"),
    ("GET", f"{SL}/conversations.history/?channel=C1", [], None, "slack", "read", "conversations.history"),
    ("POST", "https://acme.slack.com/api/chat.delete", FORM, b"channel=C1&ts=1.2", "slack", "write",
     "chat.delete"),
    ("POST", "https://acme.enterprise.slack.com/api/conversations.info", FORM, b"channel=C1", "slack", "read",
     "conversations.info"),
    ("POST", "https://slack-gov.com/api/chat.postMessage", JSON, _json({"channel": "C1", "text": "x"}),
     "slack", "write", "chat.postMessage"),
    ("POST", HOOK, JSON, _json({"text": "deploy done"}), "slack", "write", "slack incoming webhook"),
    ("GET", HOOK, [], None, "slack", "write", "slack incoming webhook"),
    ("GET", "https://files.slack.com/files-pri/T0123-F0123/report.pdf", [], None, "slack", "read",
     "method GET"),
    ("POST", "https://files.slack.com/upload/v1/CwABAAAAXApodHRwczovL2Zp", [("Content-Type", "text/plain")],
     b"abc", "slack", "write", "method POST"),
    # --- GitHub REST ---
    ("GET", f"{REPO}/issues?state=open&per_page=100", [], None, "github", "read", "method GET"),
    ("HEAD", REPO, [], None, "github", "read", "method HEAD"),
    ("POST", f"{REPO}/issues", JSON, _json({"title": "Bug", "body": "x"}), "github", "write", "method POST"),
    ("PATCH", f"{REPO}/issues/1347", JSON, _json({"state": "closed"}), "github", "write", "method PATCH"),
    ("PUT", f"{REPO}/pulls/1347/merge", JSON, _json({"merge_method": "squash"}), "github", "write",
     "method PUT"),
    ("DELETE", f"{REPO}/issues/comments/42", [], None, "github", "write", "method DELETE"),
    ("POST", f"{GH}/markdown", JSON, _json({"text": "Hello **world**", "mode": "gfm"}), "github", "read",
     "github markdown render"),
    ("POST", f"{GH}/markdown/raw", [("Content-Type", "text/plain")], b"# Title", "github", "read",
     "markdown"),
    ("POST", f"{GH}/markdown/../repos/o/r/issues", JSON, _json({"title": "x"}), "github", "write",
     "method POST"),
    ("GET", f"{REPO}/issues", OVERRIDE_DELETE, None, "github", "write", "x-http-method-override DELETE"),
    ("POST", "https://uploads.github.com/repos/o/r/releases/1/assets?name=app.zip",
     [("Content-Type", "application/zip")], None, "github", "write", "method POST"),
    ("GET", "https://codeload.github.com/octocat/Hello-World/legacy.zip/refs/heads/main", [], None, "github",
     "read", "method GET"),
    ("GET", "https://raw.githubusercontent.com/octocat/Hello-World/main/README", [], None, "github", "read",
     "method GET"),
    # --- GitHub GraphQL ---
    ("POST", GQL, JSON, _gql("query { viewer { login } }"), "github", "read", "graphql query"),
    ("POST", GQL, JSON, _gql("{ viewer { login repositories(first: 5) { nodes { name } } } }"), "github",
     "read", "graphql query"),
    ("POST", GQL, JSON, ADD_COMMENT, "github", "write", "graphql mutation"),
    ("POST", GQL, JSON, _gql("subscription { issueUpdated { id } }"), "github", "read",
     "graphql subscription"),
    ("POST", GQL, JSON, _gql(TWO_OPS, "Viewer"), "github", "read", "graphql query"),
    ("POST", GQL, JSON, _gql(TWO_OPS, "Star"), "github", "write", "graphql mutation"),
    ("POST", GQL, JSON, _gql(TWO_OPS), "github", "write", "several operations and no operationName"),
    ("POST", GQL, JSON, _gql("query Viewer { viewer { login } }", "Other"), "github", "write",
     "names no single operation"),
    ("POST", GQL, JSON, _gql("# mutation { deleteRepository }\nquery { viewer { login } }"), "github", "read",
     "graphql query"),
    ("POST", GQL, JSON,
     _gql('query { search(query: "mutation { addStar }", type: REPOSITORY, first: 1) { repositoryCount } }'),
     "github", "read", "graphql query"),
    ("POST", GQL, JSON, _gql('query { repository(owner: "o", name: "r") { x(y: """\nmutation {\n""") } }'),
     "github", "read", "graphql query"),
    ("POST", GQL, JSON,
     _gql('fragment F on User { login }\nmutation M { updateIssue(input: {id: "I_1"}) { issue { ...F } } }'),
     "github", "write", "graphql mutation"),
    ("POST", GQL, JSON, PERSISTED_QUERY, "github", "write", "persisted query"),
    ("POST", GQL, JSON, _json([{"query": "{ viewer { login } }"}, {"query": "{ rateLimit { remaining } }"}]),
     "github", "write", "batched array"),
    ("POST", GQL, JSON, b"this is { not json", "github", "write", "not JSON"),
    ("POST", GQL, JSON, _gql("quer { viewer { login } "), "github", "write", "does not parse"),
    ("POST", GQL, JSON, _json({"query": 42}), "github", "write", "not a string"),
    ("POST", GQL, JSON, _json({"variables": {}}), "github", "write", "without query"),
    ("POST", GQL, JSON, _json("{ viewer { login } }"), "github", "write", "not an object"),
    ("POST", GQL, JSON, None, "github", "write", "body not captured"),
    ("POST", GQL, [("Content-Type", "application/graphql")], b"{ viewer { login } }", "github", "read",
     "graphql query"),
    ("GET", f"{GQL}?query=mutation%20%7B%20addStar%20%7D", [], None, "github", "write", "graphql mutation"),
    ("POST", GQL, [("X-HTTP-Method-Override", "PUT")], _gql("{ viewer { login } }"), "github", "write",
     "x-http-method-override PUT"),
    # --- Microsoft Graph ---
    ("GET", f"{MS}/me/messages?$top=10&$select=subject,from", [], None, "graph", "read", "method GET"),
    ("GET", f"{MS}/me/calendarView?startDateTime=2024-01-01&endDateTime=2024-01-02", [], None, "graph",
     "read", "method GET"),
    ("POST", f"{MS}/me/sendMail", JSON,
     _json({"message": {"subject": "Hi", "toRecipients": [{"emailAddress": {"address": "a@b.com"}}]}}),
     "graph", "write", "method POST"),
    ("PATCH", f"{MS}/me/messages/AAMkAGI2THVSAAA%3D", JSON, _json({"isRead": True}), "graph", "write",
     "method PATCH"),
    ("DELETE", "https://graph.microsoft.com/beta/users/alice%40contoso.com/events/AAMkAGI", [], None, "graph",
     "write", "method DELETE"),
    ("POST", f"{MS}/me/messages/AAMk/move", JSON, _json({"destinationId": "deleteditems"}), "graph", "write",
     "method POST"),
    ("POST", f"{MS}/me/calendar/getSchedule", JSON, _json({"schedules": ["bob@contoso.com"]}), "graph",
     "read", "graph action getSchedule"),
    ("POST", f"{MS}/search/query", JSON, _json({"requests": []}), "graph", "read", "graph action query"),
    ("POST", "https://graph.microsoft.us/v1.0/me/events", JSON, _json({"subject": "Sync"}), "graph", "write",
     "method POST"),
    ("GET", "https://dod-graph.microsoft.us/v1.0/me/events", [], None, "graph", "read", "method GET"),
    ("GET", "https://microsoftgraph.chinacloudapi.cn/beta/me/mailFolders/inbox/messages", [], None, "graph",
     "read", "method GET"),
    ("POST", f"{MS}/$batch", JSON, GRAPH_BATCH_READS, "graph", "read", "graph $batch of 3 reads"),
    ("POST", f"{MS}/%24batch", JSON, GRAPH_BATCH_READS, "graph", "read", "graph $batch of 3 reads"),
    ("POST", "https://graph.microsoft.com/beta/$batch", JSON, GRAPH_BATCH_ONE_WRITE, "graph", "write",
     "request 2: method PATCH"),
    ("POST", f"{MS}/$batch", JSON, GRAPH_BATCH_NESTED, "graph", "write", "nested $batch"),
    ("POST", f"{MS}/$batch", JSON, b"{not json", "graph", "write", "not JSON"),
    ("POST", f"{MS}/$batch", JSON, _json({"requests": []}), "graph", "write", "without requests"),
    ("POST", f"{MS}/$batch", JSON, _json({"requests": [{"id": "1", "url": "/me"}]}), "graph", "write",
     "method or url missing"),
    ("POST", f"{MS}/$batch", JSON, None, "graph", "write", "body not captured"),
]
# fmt: on


def _case_id(case: tuple) -> str:
    method, url = case[0], case[1]
    return f"{method} {url[8:70]}"


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_classify(case):
    method, url, headers, body, connector, effect, rule = case
    got = REGISTRY.classify(method, url, headers, body)
    assert got is not None, "call not recognised"
    assert (got.connector, got.effect) == (connector, effect), got.rule
    assert rule in got.rule
    assert isinstance(got, Classification)


def test_every_builtin_connector_has_read_and_write_cases():
    seen = {(c[4], c[5]) for c in CASES}
    for module in BUILTIN_MODULES:
        assert (module.NAME, "read") in seen and (module.NAME, "write") in seen, module.NAME


NOT_CONNECTORS = [
    ("POST", "https://example.com/api/chat.postMessage"),
    ("POST", "https://notslack.com/api/chat.postMessage"),
    ("POST", "https://slack.com.evil.example/api/chat.postMessage"),
    ("GET", "https://slack.com/intl/en-gb/"),
    ("POST", "https://www.googleapis.com/oauth2/v4/token"),
    ("GET", "https://www.googleapis.com/youtube/v3/videos?id=x"),
    ("GET", "https://www.googleapis.com/gmailx/v1/users/me/messages"),
    ("POST", "https://oauth2.googleapis.com/token"),
    ("GET", "https://github.com/octocat/Hello-World"),
    ("POST", "https://login.microsoftonline.com/common/oauth2/v2.0/token"),
    ("GET", "https://graph.microsoft.com.evil.example/v1.0/me"),
]


@pytest.mark.parametrize(("method", "url"), NOT_CONNECTORS)
def test_unknown_calls_are_none(method, url):
    assert REGISTRY.classify(method, url, [], b"") is None
    split = url.split("/", 3)
    assert REGISTRY.match(split[2], "/" + split[3]) is None


MATCHES = [
    ("gmail.googleapis.com", "/gmail/v1/users/me/messages", "gmail"),
    ("GMAIL.GoogleAPIs.com:443", "/gmail/v1/users/me/messages?q=x", "gmail"),
    ("www.googleapis.com", "/upload/gmail/v1/users/me/messages/send?uploadType=media", "gmail"),
    ("www.googleapis.com", "/resumable/upload/gmail/v1/users/me/messages/send", "gmail"),
    ("www.googleapis.com", "/batch/gmail/v1", "gmail"),
    ("www.googleapis.com.", "/calendar/v3/calendars/alice%40example.com/events", "calendar"),
    ("www.googleapis.com", "/batch/calendar/v3", "calendar"),
    ("www.googleapis.com", "/drive/v3/files", "drive"),
    ("www.googleapis.com", "/drive/v2/files/x/trash", "drive"),
    ("www.googleapis.com", "/upload/drive/v3/files?uploadType=resumable", "drive"),
    ("www.googleapis.com", "/batch/drive/v3", "drive"),
    ("www.googleapis.com", "/youtube/v3/../../drive/v3/files", "drive"),
    ("www.googleapis.com", "/%64rive/v3/files", "drive"),
    ("slack.com", "/api/chat.postMessage", "slack"),
    ("acme.slack.com", "/api/chat.postMessage", "slack"),
    ("files.slack.com", "/files-pri/T1-F1/x.png", "slack"),
    ("hooks.slack.com", "/services/T/B/X", "slack"),
    ("slack-gov.com", "/api/auth.test", "slack"),
    ("api.github.com", "/repos/o/r", "github"),
    ("uploads.github.com", "/repos/o/r/releases/1/assets", "github"),
    ("graph.microsoft.com", "/v1.0/me/messages", "graph"),
    ("graph.microsoft.us", "/beta/me", "graph"),
    ("dod-graph.microsoft.us", "/v1.0/me", "graph"),
    ("microsoftgraph.chinacloudapi.cn", "/v1.0/me", "graph"),
]


@pytest.mark.parametrize(("host", "path", "name"), MATCHES)
def test_match(host, path, name):
    assert REGISTRY.match(host, path) == name


def test_host_and_path_normalisation():
    assert normalise_host("API.GitHub.com:8443") == "api.github.com"
    assert normalise_host("[::1]:8080") == "::1"
    assert normalise_host("::1") == "::1"
    assert normalise_path("/calendar/v3/calendars/alice%40example.com/events?x=1#f") == (
        "/calendar/v3/calendars/alice@example.com/events"
    )
    # An encoded slash never becomes a separator.
    assert normalise_path("/drive/v3/files/a%2Fb") == "/drive/v3/files/a%2Fb"
    assert normalise_path("/a/./b/../c/") == "/a/c/"
    assert normalise_path("/a/b/..") == "/a/"
    assert normalise_path("/a/%2e%2e/b") == "/b"
    assert normalise_path("gmail/v1") == "/gmail/v1"


def test_encoded_slash_does_not_turn_a_path_into_a_read():
    got = REGISTRY.classify("POST", "https://www.googleapis.com/calendar/v3/calendars/x%2FfreeBusy", [], b"")
    assert got == Classification("calendar", "write", "method POST")


def test_host_header_used_when_url_has_no_host():
    got = REGISTRY.classify("GET", "/api/dnd.setSnooze?num_minutes=5", [("Host", "slack.com")], None)
    assert got == Classification("slack", "write", "slack method dnd.setSnooze")


def test_malformed_url_is_no_connector_call():
    assert REGISTRY.classify("GET", "https://[::1/x", [], None) is None


def test_connector_modules_follow_the_interface():
    names = [m.NAME for m in BUILTIN_MODULES]
    assert names == REGISTRY.names() == ["gmail", "calendar", "drive", "slack", "github", "graph"]
    for module in BUILTIN_MODULES:
        assert module.NAME == module.NAME.lower()
        assert callable(module.match) and callable(module.classify_effect)
        assert module.__doc__, module.NAME
        effect, rule = module.classify_effect("GET", "/", {}, {"host": "x"}, None)
        assert effect in ("read", "write") and rule


def test_failing_connector_fails_closed():
    def boom(*args):
        raise KeyError("bug")

    module = types.SimpleNamespace(NAME="boom", match=lambda host, path: True, classify_effect=boom)
    got = Registry([_Connector("boom", module)]).classify("GET", "https://x.example/", [], None)
    assert got == Classification("boom", "write", "boom rules failed (KeyError), fail closed")


def test_drive_route_table_prefers_literal_segments():
    from journal.connectors import drive

    route, params = drive.ROUTES.find("DELETE", "files/trash")
    assert route.name == "files.emptyTrash" and params == {}
    route, params = drive.ROUTES.find("DELETE", "files/1AbC")
    assert route.name == "files.delete" and params == {"fileId": "1AbC"}


# --- TOML files -------------------------------------------------------------------------------

JIRA = """
[[connector]]
name = "jira"
hosts = ["*.atlassian.net"]
path_prefixes = ["/rest/api/"]

[[connector.rule]]
methods = ["POST"]
path = "/rest/api/3/search"
effect = "read"

[[connector.rule]]
path_regex = "/rest/api/3/issue/[A-Z]+-[0-9]+/watchers"
effect = "write"
"""


def _file(tmp_path: Path, text: str, name: str = "connectors.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_toml_new_connector(tmp_path):
    registry = REGISTRY.with_file(_file(tmp_path, JIRA))
    assert registry.names()[0] == "jira"
    assert REGISTRY.names() == ["gmail", "calendar", "drive", "slack", "github", "graph"]  # unchanged
    assert registry.match("acme.atlassian.net:443", "/rest/api/3/issue/X-1") == "jira"
    assert registry.match("acme.atlassian.net", "/wiki/spaces") is None
    assert registry.classify(
        "POST", "https://acme.atlassian.net/rest/api/3/search", JSON, b"{}"
    ) == Classification("jira", "read", "connectors.toml rule 1 (POST /rest/api/3/search)")
    got = registry.classify("POST", "https://acme.atlassian.net/rest/api/3/issue", JSON, b"{}")
    assert (got.effect, got.rule) == ("write", "method POST")
    got = registry.classify("GET", "https://acme.atlassian.net/rest/api/3/issue/PROJ-12/watchers", [], None)
    assert (got.effect, got.rule) == (
        "write",
        "connectors.toml rule 2 (any ~/rest/api/3/issue/[A-Z]+-[0-9]+/watchers)",
    )
    got = registry.classify("GET", "https://acme.atlassian.net/rest/api/3/issue/PROJ-12", [], None)
    assert (got.effect, got.rule) == ("read", "method GET")
    # A method override the rule does not allow keeps the rule from deciding (fail closed).
    got = registry.classify(
        "POST", "https://acme.atlassian.net/rest/api/3/search", [("X-HTTP-Method-Override", "DELETE")], b"{}"
    )
    assert got.effect == "write"
    # Built-ins still work.
    assert registry.classify("GET", "https://api.github.com/user", [], None).connector == "github"


def test_toml_override_builtin(tmp_path):
    registry = REGISTRY.with_file(
        _file(
            tmp_path,
            """
            [[connector]]
            name = "slack"
            [[connector.rule]]
            path = "/api/dnd.*"
            effect = "read"
            """,
        )
    )
    assert registry.classify("GET", "https://slack.com/api/dnd.setSnooze", [], None) == Classification(
        "slack", "read", "connectors.toml rule 1 (any /api/dnd.*)"
    )
    assert registry.classify("GET", "https://slack.com/api/chat.delete", [], None).effect == "write"
    # A later file is evaluated before an earlier one.
    later = registry.with_file(
        _file(
            tmp_path,
            '[[connector]]\nname = "slack"\n'
            '[[connector.rule]]\npath = "/api/dnd.setSnooze"\neffect = "write"\n',
            "later.toml",
        )
    )
    assert later.classify("GET", "https://slack.com/api/dnd.setSnooze", [], None).rule.startswith(
        "later.toml"
    )
    assert later.classify("GET", "https://slack.com/api/dnd.endDnd", [], None).effect == "read"


def test_toml_extends_builtin_with_enterprise_host(tmp_path):
    registry = REGISTRY.with_file(
        _file(
            tmp_path,
            """
            [[connector]]
            name = "github"
            hosts = ["github.example.com"]
            path_prefixes = ["/api/v3/", "/api/graphql", "/api/uploads/"]
            """,
        )
    )
    assert registry.names() == REGISTRY.names()
    base = "https://github.example.com"
    got = registry.classify(
        "POST", f"{base}/api/graphql", JSON, _gql("mutation { addStar(input: {}) { x } }")
    )
    assert got == Classification("github", "write", "graphql mutation")
    assert (
        registry.classify("POST", f"{base}/api/graphql", JSON, _gql("{ viewer { login } }")).effect == "read"
    )
    assert registry.classify("POST", f"{base}/api/v3/markdown", JSON, b"{}").effect == "read"
    assert registry.classify("GET", f"{base}/api/v3/repos/o/r", [], None).effect == "read"
    assert registry.classify("DELETE", f"{base}/api/v3/repos/o/r", [], None).effect == "write"
    assert registry.classify("GET", f"{base}/login", [], None) is None


def test_toml_disable_builtin(tmp_path):
    registry = REGISTRY.with_file(_file(tmp_path, '[[connector]]\nname = "graph"\ndisabled = true\n'))
    assert "graph" not in registry.names()
    assert registry.classify("GET", "https://graph.microsoft.com/v1.0/me", [], None) is None
    assert REGISTRY.classify("GET", "https://graph.microsoft.com/v1.0/me", [], None) is not None


BAD_FILES = [
    ('[[connector]\nname = "x"', "not valid TOML"),
    ('[[connector]]\nname = "jira"\nhost = ["*.atlassian.net"]', "unknown key(s) ['host']"),
    ('[[connector]]\nname = "Jira"\nhosts = ["a.example"]', "'name' must be a lowercase name"),
    ('[[connector]]\nhosts = ["a.example"]', "'name' must be a lowercase name"),
    ('[[connector]]\nname = "jira"', "a new connector needs 'hosts'"),
    ('[[connector]]\nname = "jira"\npath_prefixes = ["/rest/"]', "'path_prefixes' needs 'hosts'"),
    ('[[connector]]\nname = "jira"\nhosts = "a.example"', "'hosts' must be a non-empty list"),
    ('[[connector]]\nname = "jira"\nhosts = ["https://a.example/"]', "bare host name"),
    ('[[connector]]\nname = "jira"\nhosts = ["a.example:443"]', "bare host name"),
    ('[[connector]]\nname = "jira"\nhosts = ["a.example"]\npath_prefixes = ["rest/"]', "must start with '/'"),
    ('[[connector]]\nname = "nope"\ndisabled = true', "no connector of that name to disable"),
    ('[[connector]]\nname = "slack"\ndisabled = "yes"', "'disabled' must be true or false"),
    ('[[connector]]\nname = "slack"\ndisabled = true\nhosts = ["x.example"]', "takes no other keys"),
    ('[[connector]]\nname = "slack"\n[[connector]]\nname = "slack"', "defined twice"),
    ('[[connector]]\nname = "slack"\n[[connector.rule]]\neffect = "maybe"', "'effect' must be"),
    ('[[connector]]\nname = "slack"\n[[connector.rule]]\npath = "/api/x"', "'effect' must be"),
    ('[[connector]]\nname = "slack"\n[[connector.rule]]\nmethods = ["P OST"]\neffect = "read"', "'methods'"),
    (
        '[[connector]]\nname = "slack"\n[[connector.rule]]\npath = "api/x"\neffect = "read"',
        "starting with '/'",
    ),
    (
        '[[connector]]\nname = "slack"\n[[connector.rule]]\npath_regex = "(["\neffect = "read"',
        "not a valid regular",
    ),
    (
        '[[connector]]\nname = "slack"\n[[connector.rule]]\npath = "/a"\npath_regex = "/a"\neffect = "read"',
        "not both",
    ),
    ('[[connector]]\nname = "slack"\n[[connector.rule]]\nwhen = "always"\neffect = "read"', "unknown key(s)"),
    ('[connector]\nname = "slack"', "must be an array of tables"),
    ('[[connectors]]\nname = "slack"', "unknown top-level key(s)"),
]


@pytest.mark.parametrize(("text", "problem"), BAD_FILES)
def test_toml_errors_name_the_file_and_the_problem(tmp_path, text, problem):
    path = _file(tmp_path, text, "bad.toml")
    with pytest.raises(ValueError) as info:
        REGISTRY.with_file(path)
    assert str(path) in str(info.value)
    assert problem in str(info.value)


def test_missing_toml_file(tmp_path):
    with pytest.raises(ValueError, match="cannot read connectors file"):
        REGISTRY.with_file(tmp_path / "absent.toml")


def _client_batch(requests: list[tuple[str, str, bytes | None]]) -> tuple[list[tuple[str, str]], bytes]:
    """A batch built with the stdlib email package the way googleapiclient.http.BatchHttpRequest does."""
    from email.generator import Generator
    from email.mime.multipart import MIMEMultipart
    from email.mime.nonmultipart import MIMENonMultipart
    from io import StringIO

    message = MIMEMultipart("mixed")
    message._write_headers = lambda self: None  # the client's own trick: no top-level headers
    for n, (method, uri, body) in enumerate(requests):
        inner = MIMENonMultipart("application", "json")
        inner["Host"] = "www.googleapis.com"
        if body is not None:
            inner.set_payload(body.decode())
            inner["content-length"] = str(len(body))
        out = StringIO()
        Generator(out, maxheaderlen=0).flatten(inner, unixfrom=False)
        part = MIMENonMultipart("application", "http")
        part["Content-Transfer-Encoding"] = "binary"
        part["Content-ID"] = f"<batch-id+{n}>"
        part.set_payload(f"{method} {uri} HTTP/1.1\n{out.getvalue()}")
        message.attach(part)
    out = StringIO()
    Generator(out, mangle_from_=False).flatten(message, unixfrom=False)
    content_type = f'multipart/mixed; boundary="{message.get_boundary()}"'
    return [("content-type", content_type)], out.getvalue().encode()


def test_google_batch_as_the_python_client_builds_it():
    reads = _client_batch(
        [
            ("GET", "/calendar/v3/calendars/alice%40example.com/events?alt=json", None),
            ("POST", "/calendar/v3/freeBusy?alt=json", b'{"items": [{"id": "primary"}]}'),
        ]
    )
    got = REGISTRY.classify("POST", "https://www.googleapis.com/batch/calendar/v3", *reads)
    assert got == Classification("calendar", "read", "google batch of 2 reads")
    writes = _client_batch(
        [
            ("GET", "/calendar/v3/calendars/primary/events/e1?alt=json", None),
            ("PATCH", "/calendar/v3/calendars/primary/events/e1?alt=json", b'{"status": "cancelled"}'),
        ]
    )
    got = REGISTRY.classify("POST", "https://www.googleapis.com/batch/calendar/v3", *writes)
    assert got == Classification("calendar", "write", "google batch, item 2: calendar events.patch")


# -- git's smart HTTP on github.com (issue 21) ----------------------------------------------------

GIT_FORM = [("Content-Type", "application/x-git-upload-pack-request")]


@pytest.mark.parametrize(("method", "url", "headers", "effect"), [
    ("GET", "https://github.com/octo/repo.git/info/refs?service=git-upload-pack", [], "read"),
    ("GET", "https://github.com/octo/repo/info/refs?service=git-upload-pack", [], "read"),
    ("POST", "https://github.com/octo/repo.git/git-upload-pack", GIT_FORM, "read"),
    ("GET", "https://github.com/octo/repo.git/info/refs?service=git-receive-pack", [], "read"),
    ("POST", "https://github.com/octo/repo.git/git-receive-pack", [], "write"),
    ("GET", "https://github.com/octo/repo.git/git-receive-pack", [], "write"),  # push, whatever the method
    ("POST", "https://GitHub.com./octo/repo.git/git-upload-pack", GIT_FORM, "read"),
    ("POST", "https://github.com/octo/repo.git/git-upload-pack", [*GIT_FORM, ("X-HTTP-Method-Override", "DELETE")],
     "write"),
])
def test_git_smart_http_on_github(method, url, headers, effect):
    cls = REGISTRY.classify(method, url, headers, None)
    assert cls is not None and (cls.connector, cls.effect) == ("github", effect)


@pytest.mark.parametrize("path", ["/", "/octo/repo", "/octo/repo/pulls", "/login", "/a/b/c/git-upload-pack"])
def test_other_github_pages_are_no_connector(path):
    assert REGISTRY.match("github.com", path) is None


def test_route_table_find_is_the_first_route_that_binds():
    """`RouteTable.find` compares laid-out literals (journal/connectors/_http.py): for every built-in
    table, on every template filled in, with a placeholder left empty and with each literal changed, it
    gives what trying `Route.bind` on the routes in their order gives."""
    from journal.connectors._http import RouteTable

    tables = [v for m in BUILTIN_MODULES for v in vars(m).values() if isinstance(v, RouteTable)]
    assert len(tables) >= 3

    def by_bind(table: RouteTable, method: str, path: str):
        segments = path.split("/")
        for route in table._index.get((method, len(segments)), ()):
            params = route.bind(segments)
            if params is not None:
                return route, params
        return None

    checked = 0
    for table in tables:
        literals: dict[int, set[str]] = {}  # literal segments by position, to fill placeholders with
        for route in table.routes():
            for i, s in enumerate(route.segments):
                if s is not None:
                    literals.setdefault(i, set()).add(s)
        for route in table.routes():
            filled = [s if s is not None else f"v{i}" for i, s in enumerate(route.segments)]
            paths = ["/".join(filled)]
            for i, s in enumerate(route.segments):
                tries = [s + "x"] if s is not None else ["", *sorted(literals.get(i, ()))[:8]]
                paths += ["/".join(filled[:i] + [t] + filled[i + 1:]) for t in tries]
            for path in paths:
                for method in (route.method, "GET", "POST", "DELETE"):
                    assert table.find(method, path) == by_bind(table, method, path), (method, path)
                    checked += 1
    assert checked > 1000
