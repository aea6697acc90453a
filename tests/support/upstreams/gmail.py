"""Fake Gmail API v1: a small stateful mailbox.

Why: the broker derives views, before-states and inverses (modify, trash, send) from Gmail traffic,
so writes here must really change what later reads return.
"""

from __future__ import annotations

import base64
import email
import email.policy
import email.utils
import hashlib
import html
import itertools
import re
import threading
import time
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any

from .bigbody import big_body_bytes
from .common import (
    GOOGLE_HOSTS,
    HttpError,
    Request,
    Response,
    Route,
    b64url,
    b64url_decode,
    empty_response,
    json_response,
    page,
    route,
    unquote,
)

ME = "alice@example.com"
HOSTS = frozenset({"gmail.googleapis.com", "www.googleapis.com"}) & GOOGLE_HOSTS
SYSTEM_LABELS = [
    "INBOX",
    "SENT",
    "TRASH",
    "SPAM",
    "DRAFT",
    "UNREAD",
    "STARRED",
    "IMPORTANT",
    "CHAT",
    "CATEGORY_PERSONAL",
    "CATEGORY_SOCIAL",
    "CATEGORY_PROMOTIONS",
    "CATEGORY_UPDATES",
    "CATEGORY_FORUMS",
]

# Seeded ids, exported so tests need not list the mailbox first.
MSG_QUARTERLY = "18f1c0a0b0000001"
MSG_QUARTERLY_REPLY = "18f1c0a0b0000002"
MSG_INVOICE = "18f1c0a0b0000003"
MSG_NEWSLETTER = "18f1c0a0b0000004"
MSG_STARRED = "18f1c0a0b0000005"
ATTACHMENT_ID = "ANGjdJ8fakeInvoiceAttachment0000000000000000000000000000000001"
ATTACHMENT_SIZE = 3 * 1024 * 1024 + 123
ATTACHMENT_SEED = "gmail-invoice"
LABEL_RECEIPTS = "Label_1"


@dataclass
class Attachment:
    """An attachment; seeded ones are generated (bigbody) rather than stored."""

    id: str
    filename: str
    mime: str
    size: int
    data: bytes | None = None
    seed: str | None = None

    def content(self) -> bytes:
        """The attachment bytes (regenerated for generated ones)."""
        if self.data is not None:
            return self.data
        return big_body_bytes(self.size, self.seed or self.id)


@dataclass
class Message:
    """One message in the fake mailbox."""

    id: str
    thread_id: str
    labels: list[str]
    headers: list[tuple[str, str]]
    text: str
    internal_date: int
    history_id: int
    attachments: list[Attachment] = field(default_factory=list)
    raw: bytes | None = None

    def header(self, name: str) -> str:
        """First header value (case-insensitive) or ''."""
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return ""

    def snippet(self) -> str:
        """Gmail-style snippet: whitespace collapsed, HTML-escaped, ~100 chars."""
        text = " ".join(self.text.split())[:100]
        return html.escape(text).replace("&#x27;", "&#39;")


class GmailState:
    """The mailbox; every access goes through ``lock``."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.messages: dict[str, Message] = {}
        self.labels: dict[str, dict[str, Any]] = {}
        self.history = itertools.count(100001)
        self._ids = itertools.count(0x18F1C0A0B0001000)
        self._labels = itertools.count(2)
        self.last_history_id = 100000
        for name in SYSTEM_LABELS:
            self.labels[name] = {"id": name, "name": name, "type": "system"}
        self.labels[LABEL_RECEIPTS] = _user_label(LABEL_RECEIPTS, "Receipts")
        self._seed()

    def next_id(self) -> str:
        """A fresh 16-hex-digit message id."""
        return f"{next(self._ids):016x}"

    def bump(self) -> int:
        """Advance and return the mailbox historyId."""
        self.last_history_id = next(self.history)
        return self.last_history_id

    def _add(
        self,
        mid: str,
        tid: str,
        labels: list[str],
        frm: str,
        to: str,
        subject: str,
        text: str,
        minutes_ago: int,
        attachments: list[Attachment] | None = None,
    ) -> None:
        ts = int(time.time() * 1000) - minutes_ago * 60000
        headers = [
            ("Delivered-To", ME),
            ("MIME-Version", "1.0"),
            ("Date", email.utils.formatdate(ts / 1000, localtime=False)),
            ("Message-ID", f"<{mid}@mail.example.com>"),
            ("Subject", subject),
            ("From", frm),
            ("To", to),
        ]
        self.messages[mid] = Message(mid, tid, labels, headers, text, ts, self.bump(), attachments or [])

    def _seed(self) -> None:
        self._add(
            MSG_QUARTERLY,
            MSG_QUARTERLY,
            ["IMPORTANT", "CATEGORY_PERSONAL", "INBOX"],
            "Bob Builder <bob@example.com>",
            ME,
            "Quarterly report",
            "Hi Alice,\n\nPlease find the Q3 numbers below. Revenue is up 12%.\n\nBob",
            600,
        )
        self._add(
            MSG_QUARTERLY_REPLY,
            MSG_QUARTERLY,
            ["SENT"],
            f"Alice <{ME}>",
            "bob@example.com",
            "Re: Quarterly report",
            "Thanks Bob, looks great!",
            540,
        )
        self._add(
            MSG_INVOICE,
            MSG_INVOICE,
            ["UNREAD", "CATEGORY_UPDATES", "INBOX", LABEL_RECEIPTS],
            "Billing <billing@vendor.example>",
            ME,
            "Invoice #4411 attached",
            "Your invoice for September is attached. Amount due: $1,250.00",
            300,
            [
                Attachment(
                    ATTACHMENT_ID,
                    "invoice-4411.pdf",
                    "application/pdf",
                    ATTACHMENT_SIZE,
                    seed=ATTACHMENT_SEED,
                )
            ],
        )
        self._add(
            MSG_NEWSLETTER,
            MSG_NEWSLETTER,
            ["UNREAD", "CATEGORY_PROMOTIONS", "INBOX"],
            "Deals <news@shop.example>",
            ME,
            "This week's deals",
            "50% off everything. Don't miss it!",
            120,
        )
        self._add(
            MSG_STARRED,
            MSG_STARRED,
            ["STARRED", "CATEGORY_PERSONAL", "INBOX"],
            "Carol <carol@example.com>",
            ME,
            "Lunch on Friday?",
            "Are we still on for lunch on Friday?",
            30,
        )


def _user_label(lid: str, name: str, **extra: Any) -> dict[str, Any]:
    label = {
        "id": lid,
        "name": name,
        "messageListVisibility": "show",
        "labelListVisibility": "labelShow",
        "type": "user",
    }
    label.update(extra)
    return label


def _check_user(m: re.Match[str]) -> None:
    user = unquote(m.group("u"))
    if user not in ("me", ME):
        raise HttpError(403, f"Delegation denied for {ME}", "forbidden")


def _mime_part(m: Message) -> tuple[str, list[tuple[str, str]]]:
    if m.attachments:
        boundary = f"000000000000{m.id}"
        return "multipart/mixed", [("Content-Type", f'multipart/mixed; boundary="{boundary}"')]
    return "text/plain", [("Content-Type", 'text/plain; charset="UTF-8"')]


def build_raw(m: Message) -> bytes:
    """The RFC 2822 source (stored for sent/inserted messages, built for seeded ones)."""
    if m.raw is not None:
        return m.raw
    _, ctype_hdr = _mime_part(m)
    lines = [f"{k}: {v}" for k, v in m.headers + ctype_hdr]
    if not m.attachments:
        return ("\r\n".join(lines) + "\r\n\r\n" + m.text.replace("\n", "\r\n") + "\r\n").encode()
    boundary = f"000000000000{m.id}"
    out = [
        "\r\n".join(lines),
        "",
        f"--{boundary}",
        'Content-Type: text/plain; charset="UTF-8"',
        "",
        m.text.replace("\n", "\r\n"),
    ]
    for a in m.attachments:
        encoded = base64.encodebytes(a.content()).decode().replace("\n", "\r\n")
        out += [
            f"--{boundary}",
            f'Content-Type: {a.mime}; name="{a.filename}"',
            f'Content-Disposition: attachment; filename="{a.filename}"',
            "Content-Transfer-Encoding: base64",
            f"X-Attachment-Id: {a.id[:16]}",
            "",
            encoded,
        ]
    out.append(f"--{boundary}--\r\n")
    return "\r\n".join(out).encode()


def _size_estimate(m: Message) -> int:
    if m.raw is not None:
        return len(m.raw)
    return 400 + len(m.text.encode()) + sum(a.size * 4 // 3 + 300 for a in m.attachments)


def render(m: Message, fmt: str, metadata_headers: list[str] | None = None) -> dict[str, Any]:
    """A Message resource in the requested ``format``."""
    out: dict[str, Any] = {
        "id": m.id,
        "threadId": m.thread_id,
        "labelIds": list(m.labels),
        "snippet": m.snippet(),
        "sizeEstimate": _size_estimate(m),
        "historyId": str(m.history_id),
        "internalDate": str(m.internal_date),
    }
    mime, ctype_hdr = _mime_part(m)
    headers = [{"name": k, "value": v} for k, v in m.headers + ctype_hdr]
    if fmt == "minimal":
        return out
    if fmt == "raw":
        raw = build_raw(m)
        out["sizeEstimate"] = len(raw)
        out["raw"] = b64url(raw)
        return out
    if fmt == "metadata":
        if metadata_headers:
            wanted = {h.lower() for h in metadata_headers}
            headers = [h for h in headers if h["name"].lower() in wanted]
        out["payload"] = {"partId": "", "mimeType": mime, "filename": "", "headers": headers}
        return out
    text = m.text.encode()
    text_body = {"size": len(text), "data": b64url(text)}
    if not m.attachments:
        out["payload"] = {
            "partId": "",
            "mimeType": mime,
            "filename": "",
            "headers": headers,
            "body": text_body,
        }
        return out
    parts: list[dict[str, Any]] = [
        {
            "partId": "0",
            "mimeType": "text/plain",
            "filename": "",
            "headers": [{"name": "Content-Type", "value": 'text/plain; charset="UTF-8"'}],
            "body": text_body,
        }
    ]
    for i, a in enumerate(m.attachments, start=1):
        parts.append(
            {
                "partId": str(i),
                "mimeType": a.mime,
                "filename": a.filename,
                "headers": [
                    {"name": "Content-Type", "value": f'{a.mime}; name="{a.filename}"'},
                    {"name": "Content-Disposition", "value": f'attachment; filename="{a.filename}"'},
                    {"name": "Content-Transfer-Encoding", "value": "base64"},
                    {"name": "X-Attachment-Id", "value": a.id[:16]},
                ],
                "body": {"attachmentId": a.id, "size": a.size},
            }
        )
    out["payload"] = {
        "partId": "",
        "mimeType": mime,
        "filename": "",
        "headers": headers,
        "body": {"size": 0},
        "parts": parts,
    }
    return out


def _fmt(req: Request) -> str:
    fmt = (req.query.get("format") or "full").lower()
    if fmt not in ("full", "metadata", "minimal", "raw"):
        raise HttpError(400, f"Invalid value at 'format' ({fmt})", "invalidArgument")
    return fmt


def _matches_q(m: Message, q: str) -> bool:
    for term in q.split():
        neg = term.startswith("-")
        term = term.lstrip("-").lower()
        if term.startswith("is:"):
            ok = term[3:].upper() in m.labels
        elif term.startswith("in:"):
            ok = term[3:].upper() in m.labels
        elif term.startswith("label:"):
            ok = any(term[6:] in (lid.lower(), lid.lower().replace("_", "-")) for lid in m.labels)
        elif term.startswith("from:"):
            ok = term[5:] in m.header("From").lower()
        elif term.startswith("to:"):
            ok = term[3:] in m.header("To").lower()
        elif term.startswith("subject:"):
            ok = term[8:] in m.header("Subject").lower()
        elif term == "has:attachment":
            ok = bool(m.attachments)
        else:
            ok = term in (m.header("Subject") + " " + m.text).lower()
        if ok == neg:
            return False
    return True


class Gmail:
    """Route handlers bound to one GmailState."""

    def __init__(self, st: GmailState) -> None:
        self.st = st

    def _get(self, mid: str) -> Message:
        msg = self.st.messages.get(mid)
        if msg is None:
            raise HttpError(404, "Requested entity was not found.", "notFound")
        return msg

    def _visible(self, req: Request) -> list[Message]:
        label_ids = req.query_multi.get("labelIds", [])
        include_spam_trash = req.query.get("includeSpamTrash", "false").lower() == "true"
        q = req.query.get("q", "")
        out = []
        for m in sorted(self.st.messages.values(), key=lambda m: (m.internal_date, m.id), reverse=True):
            if (
                not include_spam_trash
                and ({"TRASH", "SPAM"} & set(m.labels))
                and not ({"TRASH", "SPAM"} & set(label_ids))
            ):
                continue
            if any(lid not in m.labels for lid in label_ids):
                continue
            if q and not _matches_q(m, q):
                continue
            out.append(m)
        return out

    def profile(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        with self.st.lock:
            msgs = self.st.messages.values()
            return json_response(
                {
                    "emailAddress": ME,
                    "messagesTotal": len(msgs),
                    "threadsTotal": len({x.thread_id for x in msgs}),
                    "historyId": str(self.st.last_history_id),
                },
                flavor="google",
            )

    def list_messages(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        with self.st.lock:
            found = self._visible(req)
            chunk, token = page(found, req, 100, 500, "maxResults", "pageToken")
            out: dict[str, Any] = {}
            if chunk:
                out["messages"] = [{"id": x.id, "threadId": x.thread_id} for x in chunk]
            if token:
                out["nextPageToken"] = token
            out["resultSizeEstimate"] = len(found)
        return json_response(out, flavor="google")

    def get_message(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        fmt = _fmt(req)
        with self.st.lock:
            msg = self._get(m.group("id"))
            return json_response(render(msg, fmt, req.query_multi.get("metadataHeaders")), flavor="google")

    def delete_message(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        with self.st.lock:
            self._get(m.group("id"))
            del self.st.messages[m.group("id")]
            self.st.bump()
        return empty_response(204)

    def _apply_labels(self, msg: Message, add: list[str], remove: list[str]) -> None:
        for lid in list(add) + list(remove):
            if lid not in self.st.labels:
                raise HttpError(400, f"Invalid label: {lid}", "invalidArgument")
        for lid in remove:
            if lid in msg.labels:
                msg.labels.remove(lid)
        for lid in add:
            if lid not in msg.labels:
                msg.labels.append(lid)
        msg.history_id = self.st.bump()

    def modify(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        body = req.json_object()
        with self.st.lock:
            msg = self._get(m.group("id"))
            self._apply_labels(msg, body.get("addLabelIds") or [], body.get("removeLabelIds") or [])
            return json_response(_short(msg), flavor="google")

    def batch_modify(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        body = req.json_object()
        with self.st.lock:
            for mid in body.get("ids") or []:
                msg = self.st.messages.get(mid)
                if msg is not None:
                    self._apply_labels(msg, body.get("addLabelIds") or [], body.get("removeLabelIds") or [])
        return empty_response(204)

    def batch_delete(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        body = req.json_object()
        with self.st.lock:
            for mid in body.get("ids") or []:
                self.st.messages.pop(mid, None)
            self.st.bump()
        return empty_response(204)

    def trash(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        with self.st.lock:
            msg = self._get(m.group("id"))
            if m.group("op") == "trash":
                self._apply_labels(msg, ["TRASH"], [])
            else:
                self._apply_labels(msg, [], ["TRASH"])
            return json_response(_short(msg), flavor="google")

    def _thread_for(self, thread_id: str | None, in_reply_to: str) -> str | None:
        if thread_id:
            if any(x.thread_id == thread_id for x in self.st.messages.values()):
                return thread_id
            raise HttpError(404, "Requested entity was not found.", "notFound")
        if in_reply_to:
            for x in self.st.messages.values():
                if x.header("Message-ID") and x.header("Message-ID") in in_reply_to:
                    return x.thread_id
        return None

    def _ingest(self, req: Request, raw: bytes, labels: list[str], thread_id: str | None) -> Message:
        parsed: EmailMessage = email.message_from_bytes(raw, policy=email.policy.default)  # type: ignore[assignment]
        headers = [(k, str(v)) for k, v in parsed.items() if k.lower() not in ("content-type",)]
        body = parsed.get_body(preferencelist=("plain", "html"))
        text = body.get_content() if body is not None else ""
        attachments = []
        for part in parsed.iter_attachments():
            data = part.get_payload(decode=True) or b""
            aid = "ANGjdJ" + hashlib.sha256(data + raw[:64]).hexdigest()[:48]
            keep = data if len(data) <= 1 << 20 else None
            attachments.append(
                Attachment(
                    aid,
                    part.get_filename() or "attachment",
                    part.get_content_type(),
                    len(data),
                    keep,
                    seed=aid,
                )
            )
        with self.st.lock:
            mid = self.st.next_id()
            tid = self._thread_for(
                thread_id, str(parsed.get("In-Reply-To", "")) + str(parsed.get("References", ""))
            )
            if not parsed.get("Message-ID"):
                headers.append(("Message-ID", f"<{mid}@mail.example.com>"))
            msg = Message(
                mid,
                tid or mid,
                labels,
                headers,
                text,
                int(time.time() * 1000),
                self.st.bump(),
                attachments,
                raw if len(raw) <= 4 << 20 else None,
            )
            self.st.messages[mid] = msg
        return msg

    def send(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        raw, body = self._raw_from(req)
        msg = self._ingest(req, raw, ["SENT"], body.get("threadId"))
        return json_response({"id": msg.id, "threadId": msg.thread_id, "labelIds": ["SENT"]}, flavor="google")

    def insert(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        raw, body = self._raw_from(req)
        labels = [x for x in (body.get("labelIds") or []) if isinstance(x, str)]
        with self.st.lock:
            for lid in labels:
                if lid not in self.st.labels:
                    raise HttpError(400, f"Invalid label: {lid}", "invalidArgument")
        msg = self._ingest(req, raw, labels, body.get("threadId"))
        return json_response({"id": msg.id, "threadId": msg.thread_id, "labelIds": labels}, flavor="google")

    def _raw_from(self, req: Request) -> tuple[bytes, dict[str, Any]]:
        if req.path.startswith("/upload/"):
            utype = req.query.get("uploadType", "media")
            if utype != "media":
                raise HttpError(400, f"uploadType={utype} is not supported by the fake", "badRequest")
            return req.body_bytes(), {}
        body = req.json_object()
        raw = body.get("raw")
        if not isinstance(raw, str) or not raw:
            raise HttpError(
                400,
                "'raw' RFC822 payload message string or uploading message via /upload/* URL required",
                "invalidArgument",
            )
        try:
            return b64url_decode(raw), body
        except ValueError as exc:
            raise HttpError(400, "Invalid value for ByteString", "invalidArgument") from exc

    def attachment(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        with self.st.lock:
            msg = self._get(m.group("id"))
            att = next((a for a in msg.attachments if a.id == m.group("aid")), None)
            if att is None:
                raise HttpError(404, "Requested entity was not found.", "notFound")
        data = att.content()
        return json_response(
            {"attachmentId": att.id, "size": len(data), "data": b64url(data)}, flavor="google"
        )

    def list_labels(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        with self.st.lock:
            return json_response({"labels": list(self.st.labels.values())}, flavor="google")

    def _label_counts(self, lid: str) -> dict[str, int]:
        msgs = [x for x in self.st.messages.values() if lid in x.labels]
        unread = [x for x in msgs if "UNREAD" in x.labels]
        return {
            "messagesTotal": len(msgs),
            "messagesUnread": len(unread),
            "threadsTotal": len({x.thread_id for x in msgs}),
            "threadsUnread": len({x.thread_id for x in unread}),
        }

    def get_label(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        with self.st.lock:
            label = self.st.labels.get(unquote(m.group("id")))
            if label is None:
                raise HttpError(404, "Requested entity was not found.", "notFound")
            return json_response(label | self._label_counts(label["id"]), flavor="google")

    def create_label(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        body = req.json_object()
        name = body.get("name")
        if not isinstance(name, str) or not name.strip():
            raise HttpError(400, "Invalid label name", "invalidArgument")
        with self.st.lock:
            if any(lb["name"].lower() == name.lower() for lb in self.st.labels.values()):
                raise HttpError(409, "Label name exists or conflicts", "duplicate")
            lid = f"Label_{next(self.st._labels)}"
            extra = {
                k: v
                for k, v in body.items()
                if k in ("messageListVisibility", "labelListVisibility", "color")
            }
            label = _user_label(lid, name, **extra)
            self.st.labels[lid] = label
            self.st.bump()
        return json_response(label, flavor="google")

    def update_label(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        body = req.json_object()
        with self.st.lock:
            lid = unquote(m.group("id"))
            label = self.st.labels.get(lid)
            if label is None:
                raise HttpError(404, "Requested entity was not found.", "notFound")
            if label["type"] == "system":
                raise HttpError(400, "Invalid update request", "invalidArgument")
            for k in ("name", "messageListVisibility", "labelListVisibility", "color"):
                if k in body:
                    label[k] = body[k]
            self.st.bump()
            return json_response(label, flavor="google")

    def delete_label(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        with self.st.lock:
            lid = unquote(m.group("id"))
            label = self.st.labels.get(lid)
            if label is None:
                raise HttpError(404, "Requested entity was not found.", "notFound")
            if label["type"] == "system":
                raise HttpError(400, "Invalid delete request", "invalidArgument")
            del self.st.labels[lid]
            for msg in self.st.messages.values():
                if lid in msg.labels:
                    msg.labels.remove(lid)
            self.st.bump()
        return empty_response(204)

    def _thread(self, tid: str) -> list[Message]:
        msgs = sorted(
            (x for x in self.st.messages.values() if x.thread_id == tid), key=lambda x: x.internal_date
        )
        if not msgs:
            raise HttpError(404, "Requested entity was not found.", "notFound")
        return msgs

    def list_threads(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        with self.st.lock:
            seen: dict[str, Message] = {}
            for x in self._visible(req):
                seen.setdefault(x.thread_id, x)
            threads = list(seen.values())
            chunk, token = page(threads, req, 100, 500, "maxResults", "pageToken")
            out: dict[str, Any] = {}
            if chunk:
                out["threads"] = [
                    {"id": x.thread_id, "snippet": x.snippet(), "historyId": str(x.history_id)} for x in chunk
                ]
            if token:
                out["nextPageToken"] = token
            out["resultSizeEstimate"] = len(threads)
        return json_response(out, flavor="google")

    def get_thread(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        fmt = _fmt(req)
        with self.st.lock:
            msgs = self._thread(m.group("id"))
            return json_response(
                {
                    "id": m.group("id"),
                    "historyId": str(max(x.history_id for x in msgs)),
                    "messages": [render(x, fmt, req.query_multi.get("metadataHeaders")) for x in msgs],
                },
                flavor="google",
            )

    def thread_op(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        op = m.group("op")
        body = req.json_object() if op == "modify" else {}
        with self.st.lock:
            msgs = self._thread(m.group("id"))
            for msg in msgs:
                if op == "modify":
                    self._apply_labels(msg, body.get("addLabelIds") or [], body.get("removeLabelIds") or [])
                elif op == "trash":
                    self._apply_labels(msg, ["TRASH"], [])
                else:
                    self._apply_labels(msg, [], ["TRASH"])
            return json_response(
                {
                    "id": m.group("id"),
                    "historyId": str(self.st.last_history_id),
                    "messages": [_short(x) for x in msgs],
                },
                flavor="google",
            )

    def delete_thread(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        with self.st.lock:
            for msg in self._thread(m.group("id")):
                del self.st.messages[msg.id]
            self.st.bump()
        return empty_response(204)


def _short(msg: Message) -> dict[str, Any]:
    return {"id": msg.id, "threadId": msg.thread_id, "labelIds": list(msg.labels)}


def routes(st: GmailState) -> list[Route]:
    """Gmail routes on gmail.googleapis.com and the legacy www.googleapis.com."""
    g = Gmail(st)
    u = r"/gmail/v1/users/(?P<u>[^/]+)"
    mid = r"(?P<id>[A-Za-z0-9_-]+)"
    table = [
        ("GET", u + r"/profile", g.profile),
        ("GET", u + r"/messages", g.list_messages),
        ("POST", u + r"/messages", g.insert),
        ("POST", r"/upload" + u + r"/messages", g.insert),
        ("POST", u + r"/messages/send", g.send),
        ("POST", r"/upload" + u + r"/messages/send", g.send),
        ("POST", u + r"/messages/batchModify", g.batch_modify),
        ("POST", u + r"/messages/batchDelete", g.batch_delete),
        ("GET", u + r"/messages/(?P<id>[A-Za-z0-9_-]+)/attachments/(?P<aid>[A-Za-z0-9_-]+)", g.attachment),
        ("POST", u + rf"/messages/{mid}/modify", g.modify),
        ("POST", u + rf"/messages/{mid}/(?P<op>trash|untrash)", g.trash),
        ("GET", u + rf"/messages/{mid}", g.get_message),
        ("DELETE", u + rf"/messages/{mid}", g.delete_message),
        ("GET", u + r"/labels", g.list_labels),
        ("POST", u + r"/labels", g.create_label),
        ("GET", u + r"/labels/(?P<id>[^/]+)", g.get_label),
        ("PATCH PUT", u + r"/labels/(?P<id>[^/]+)", g.update_label),
        ("DELETE", u + r"/labels/(?P<id>[^/]+)", g.delete_label),
        ("GET", u + r"/threads", g.list_threads),
        ("POST", u + rf"/threads/{mid}/(?P<op>modify|trash|untrash)", g.thread_op),
        ("GET", u + rf"/threads/{mid}", g.get_thread),
        ("DELETE", u + rf"/threads/{mid}", g.delete_thread),
    ]
    return [route(methods, HOSTS, pattern, handler, "google") for methods, pattern, handler in table]
