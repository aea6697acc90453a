"""Rebuild the example vault: one invented agent session across Gmail, Calendar, Drive and Slack.

    .venv/bin/python scripts/make_example_vault.py [--vault vault]

Seventeen entries, written through the same Recorder the broker uses (so credentials in the
invented headers are redacted and the attachment is spilled exactly as in real capture). The
output is deterministic: running it twice gives the same bytes.

The story: an ops assistant triages Dana's unread mail, reads a vendor's contract attachment,
marks the mail read, moves a calendar meeting, shares the contract folder with the vendor, trashes
an old draft it never looked at (a blind write), posts a summary to Slack through an MCP server,
reacts and edits it, sends a reply (irreversible) and reports one call of its own.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from journal.call import Call
from journal.record import JsonValue, Recorder  # noqa: E402
from journal.vault import Vault  # noqa: E402

SESSION = "session-2026-09-22"
AGENT = "ops-assistant/1.4"
PRINCIPAL = "dana@acme.example"
GMAIL = "https://gmail.googleapis.com/gmail/v1/users/me"
CAL = "https://www.googleapis.com/calendar/v3"
DRIVE = "https://www.googleapis.com/drive/v3"
SLACK = "https://slack.com/api"
GOOGLE_AUTH = ("Authorization", "Bearer ya29.a0AfB_byExampleExampleExampleExampleExample0123456789")
SLACK_AUTH = ("Authorization", "Bearer xoxb-2041-1111111111-ExampleExampleExample1")
JSON_REQ = ("Content-Type", "application/json")
JSON_RESP = [("Content-Type", "application/json; charset=UTF-8"), ("Vary", "Origin, X-Origin, Referer")]


def attachment_bytes(size: int = 1_100_000) -> bytes:
    """A deterministic stand-in for a PDF attachment (a PDF header, then SHA-256 counter blocks)."""
    out = bytearray(b"%PDF-1.7\n% invented contract for the example vault\n")
    i = 0
    while len(out) < size:
        out += hashlib.sha256(i.to_bytes(8, "big")).digest()
        i += 1
    return bytes(out[:size])


def j(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def ts(second: float) -> str:
    minutes, sec = divmod(second, 60)
    return f"2026-09-22T09:{14 + int(minutes):02d}:{sec:06.3f}Z"


def build(vault_dir: Path) -> None:
    vault = Vault.create(vault_dir)
    path = vault.session_path(SESSION)
    path.unlink(missing_ok=True)
    rec = Recorder(vault_dir)
    calls = 0

    def http(
        t: float, connector: str, effect: str, method: str, url: str, status: int, resp: object,
        req: object = None, auth: tuple[str, str] = GOOGLE_AUTH, capture: str = "broker",
    ) -> None:
        nonlocal calls
        req_headers = [auth, ("User-Agent", "ops-assistant/1.4 google-api-python-client/2.202.0")]
        if req is not None:
            req_headers.append(JSON_REQ)
        rec.record(Call.make(
            session=SESSION, agent=AGENT, principal=PRINCIPAL, connector=connector, capture=capture,
            effect=effect, method=method, url=url, request_headers=req_headers,
            request_body=j(req) if req is not None else None, status=status,
            response_headers=JSON_RESP if resp is not None else [("Content-Length", "0")],
            response_body=j(resp) if resp is not None else None, ts=ts(t),
        ))
        calls += 1

    # 1-4: Gmail: find the vendor's mail, read it and its attachment, mark it read.
    http(3.120, "gmail", "read", "GET", f"{GMAIL}/messages?q=is%3Aunread%20newer_than%3A1d&maxResults=10", 200,
         {"messages": [{"id": "192a5f0c3e1d7b20", "threadId": "192a5f0c3e1d7b20"},
                       {"id": "192a4e88a0c2f911", "threadId": "192a4e88a0c2f911"}], "resultSizeEstimate": 2})
    http(4.402, "gmail", "read", "GET", f"{GMAIL}/messages/192a5f0c3e1d7b20?format=full", 200,
         {"id": "192a5f0c3e1d7b20", "threadId": "192a5f0c3e1d7b20",
          "labelIds": ["INBOX", "UNREAD", "IMPORTANT", "CATEGORY_UPDATES"],
          "snippet": "Hi Dana, attached is the revised services agreement. Could we move Thursday's sync?",
          "payload": {"mimeType": "multipart/mixed", "headers": [
              {"name": "From", "value": "Priya Raman <priya@northwind.example>"},
              {"name": "Subject", "value": "Revised services agreement + Thursday sync"},
              {"name": "Message-ID", "value": "<CA+nw-7731@mail.northwind.example>"}],
              "parts": [{"partId": "1", "mimeType": "application/pdf", "filename": "services-agreement-v3.pdf",
                         "body": {"attachmentId": "ANGjdJ8vQ3", "size": 1100000}}]},
          "sizeEstimate": 1512344, "historyId": "8812734", "internalDate": "1758528421000"})
    data = base64.urlsafe_b64encode(attachment_bytes()).decode()
    http(6.877, "gmail", "read", "GET", f"{GMAIL}/messages/192a5f0c3e1d7b20/attachments/ANGjdJ8vQ3", 200,
         {"size": 1100000, "data": data})
    http(9.015, "gmail", "write", "POST", f"{GMAIL}/messages/192a5f0c3e1d7b20/modify", 200,
         {"id": "192a5f0c3e1d7b20", "threadId": "192a5f0c3e1d7b20",
          "labelIds": ["INBOX", "IMPORTANT", "CATEGORY_UPDATES"]},
         req={"removeLabelIds": ["UNREAD"], "addLabelIds": []})

    # 5-7: Calendar: read the week, check free/busy, move the meeting (the response differs:
    # the invalid third attendee was dropped by the platform).
    event = {"kind": "calendar#event", "id": "7kq2v0d1lf9mbm3cfd2a3n5u8c", "status": "confirmed",
             "summary": "Northwind weekly sync", "etag": "\"3421876543210000\"",
             "start": {"dateTime": "2026-09-24T10:00:00+02:00", "timeZone": "Europe/Berlin"},
             "end": {"dateTime": "2026-09-24T10:30:00+02:00", "timeZone": "Europe/Berlin"},
             "attendees": [{"email": "dana@acme.example", "responseStatus": "accepted"},
                           {"email": "priya@northwind.example", "responseStatus": "needsAction"}],
             "iCalUID": "7kq2v0d1lf9mbm3cfd2a3n5u8c@google.com"}
    http(11.230, "calendar", "read", "GET",
         f"{CAL}/calendars/primary/events?timeMin=2026-09-22T00%3A00%3A00Z&timeMax=2026-09-29T00%3A00%3A00Z"
         "&singleEvents=true", 200,
         {"kind": "calendar#events", "summary": "dana@acme.example", "timeZone": "Europe/Berlin", "items": [event]})
    http(12.004, "calendar", "read", "POST", f"{CAL}/freeBusy", 200,
         {"kind": "calendar#freeBusy", "timeMin": "2026-09-24T00:00:00.000Z", "timeMax": "2026-09-26T00:00:00.000Z",
          "calendars": {"dana@acme.example": {
              "busy": [{"start": "2026-09-25T07:00:00Z", "end": "2026-09-25T09:00:00Z"}]}}},
         req={"timeMin": "2026-09-24T00:00:00Z", "timeMax": "2026-09-26T00:00:00Z", "items": [{"id": "primary"}]})
    moved = dict(event, etag="\"3421876599990000\"",
                 start={"dateTime": "2026-09-25T14:00:00+02:00", "timeZone": "Europe/Berlin"},
                 end={"dateTime": "2026-09-25T14:30:00+02:00", "timeZone": "Europe/Berlin"},
                 attendees=event["attendees"] + [{"email": "legal@northwind.example", "responseStatus": "needsAction"}])
    http(14.662, "calendar", "write", "PATCH", f"{CAL}/calendars/primary/events/7kq2v0d1lf9mbm3cfd2a3n5u8c"
         "?sendUpdates=all", 200, moved,
         req={"start": moved["start"], "end": moved["end"],
              "attendees": moved["attendees"] + [{"email": "legal@northwind"}]})

    # 8-11: Drive: find the contract folder, read its sharing, share it, trash an old draft unseen.
    http(17.310, "drive", "read", "GET",
         f"{DRIVE}/files?q=name%20contains%20%27Northwind%27&fields=files(id,name,mimeType)", 200,
         {"files": [{"id": "1NwContractsF0lder", "name": "Northwind contracts",
                     "mimeType": "application/vnd.google-apps.folder"}]})
    http(18.095, "drive", "read", "GET", f"{DRIVE}/files/1NwContractsF0lder?fields=*", 200,
         {"kind": "drive#file", "id": "1NwContractsF0lder", "name": "Northwind contracts",
          "mimeType": "application/vnd.google-apps.folder", "trashed": False, "shared": False,
          "permissions": [{"id": "06128374655", "type": "user", "role": "owner", "emailAddress": "dana@acme.example"}]})
    http(19.877, "drive", "write", "POST", f"{DRIVE}/files/1NwContractsF0lder/permissions?sendNotificationEmail=false",
         200, {"kind": "drive#permission", "id": "13370000424242", "type": "user", "role": "writer"},
         req={"type": "user", "role": "writer", "emailAddress": "priya@northwind.example"})
    http(21.003, "drive", "write", "PATCH", f"{DRIVE}/files/1OldDraftAgreementV2", 200,
         {"kind": "drive#file", "id": "1OldDraftAgreementV2", "name": "services-agreement-v2 (draft).docx",
          "mimeType": "application/vnd.openxmlformats-officedocument.wordprocessingml.document", "trashed": True},
         req={"trashed": True})

    # 12: Slack through an MCP server (capture "gateway"): read the channel.
    mcp_history = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                   "params": {"name": "conversations_history", "arguments": {"channel": "C07OPSDESK", "limit": 5}}}
    history = {"ok": True, "messages": [
        {"type": "message", "user": "U04DANA", "text": "Anyone heard from Northwind?", "ts": "1758525012.004100"}],
        "has_more": False}
    rec.record(Call.make(
        session=SESSION, agent=AGENT, principal=PRINCIPAL, connector="slack", capture="gateway", effect="read",
        method="tools/call", url="stdio:slack-mcp-server", request_headers=[],
        request_body=JsonValue(mcp_history["params"]), status=200, response_headers=[],
        response_body=JsonValue({"jsonrpc": "2.0", "id": 7, "result": {
            "content": [{"type": "text", "text": json.dumps(history)}], "isError": False}}),
        mcp=mcp_history, ts=ts(24.550), effect_basis="annotations",  # the tool is annotated readOnlyHint
    ))

    # 13-15: Slack over HTTPS: post a summary, react, edit it.
    posted_ts = "1758532468.009300"
    msg = "Northwind sent contract v3; sync moved to Thu 14:00; folder shared with Priya."
    http(28.114, "slack", "write", "POST", f"{SLACK}/chat.postMessage", 200,
         {"ok": True, "channel": "C07OPSDESK", "ts": posted_ts,
          "message": {"type": "message", "user": "U07OPSBOT", "text": msg, "ts": posted_ts}},
         req={"channel": "#ops-desk", "text": msg}, auth=SLACK_AUTH)
    http(29.020, "slack", "write", "POST", f"{SLACK}/reactions.add", 200, {"ok": True},
         req={"channel": "C07OPSDESK", "timestamp": posted_ts, "name": "white_check_mark"}, auth=SLACK_AUTH)
    edited = msg.replace("Thu 14:00", "Thu 25 Sep 14:00 CEST")
    http(31.448, "slack", "write", "POST", f"{SLACK}/chat.update", 200,
         {"ok": True, "channel": "C07OPSDESK", "ts": posted_ts, "text": edited,
          "message": {"type": "message", "user": "U07OPSBOT", "text": edited, "edited": {"user": "U07OPSBOT",
                      "ts": "1758532471.000000"}}},
         req={"channel": "C07OPSDESK", "ts": posted_ts, "text": edited}, auth=SLACK_AUTH)

    # 16: Gmail: send the reply (irreversible).
    raw = base64.urlsafe_b64encode(
        b"To: priya@northwind.example\r\nSubject: Re: Revised services agreement + Thursday sync\r\n"
        b"In-Reply-To: <CA+nw-7731@mail.northwind.example>\r\n\r\nThanks Priya, moved to Thursday 14:00.\r\n"
    ).decode()
    http(35.902, "gmail", "write", "POST", f"{GMAIL}/messages/send", 200,
         {"id": "192a61b7d40c0e55", "threadId": "192a5f0c3e1d7b20", "labelIds": ["SENT"]},
         req={"raw": raw, "threadId": "192a5f0c3e1d7b20"})

    # 17: the agent reports a call it made outside the proxy (capture "agent", weakest grade).
    rec.report_call(
        session=SESSION, agent=AGENT, principal=PRINCIPAL, method="GET",
        url=f"{CAL}/calendars/primary/events/7kq2v0d1lf9mbm3cfd2a3n5u8c", status=200,
        request_headers=[GOOGLE_AUTH], response_headers=JSON_RESP, response_body=j(moved), ts=ts(40.015),
    )
    calls += 2
    rec.close()
    print(f"wrote {calls} entries to {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vault", default=str(Path(__file__).resolve().parent.parent / "vault"))
    build(Path(ap.parse_args().vault))


if __name__ == "__main__":
    main()
