"""Fake Microsoft Graph mail (``/v1.0/me/messages``, ``sendMail``) and the Entra ID token endpoint.

Why: Graph's ``sendMail`` answers 202 with no body and no id, a shape the broker must record without
an id to key on; the token endpoint's body must never reach the journal.
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
from typing import Any

from .common import (
    GRAPH_HOSTS,
    MSLOGIN_HOSTS,
    HttpError,
    Request,
    Response,
    Route,
    empty_response,
    error_response,
    int_param,
    json_response,
    rfc3339,
    route,
    unquote,
)

ME_UPN = "alice@contoso.example"
ME_ID = "48d31887-5fad-4d73-a9f5-3c356e68a038"
MSG_WELCOME = (
    "AAMkAGVmMDEzMTM4LTZmYWUtNDdkNC1hMDZiLTU1OGY5OTZhYmY4OABGAAAAAAAiQ8W967B7TKBjgx9rVEURBwAiIsqMbYjsT5e-"
    "T7KzowPTAAAAAAEMAAAiIsqMbYjsT5e-T7KzowPTAAAYNKvwAAA="
)


def _recipient(addr: str, name: str | None = None) -> dict[str, Any]:
    return {"emailAddress": {"name": name or addr.split("@")[0].title(), "address": addr}}


class GraphState:
    """Alice's mailbox: messages (id -> message) and what sendMail sent."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._ids = itertools.count(2)
        self.messages: dict[str, dict[str, Any]] = {}
        self.sent: list[dict[str, Any]] = []
        self._add(
            MSG_WELCOME,
            "Welcome to Contoso",
            "Megan Bowen",
            "meganb@contoso.example",
            "Hi Alice, welcome aboard!",
            "inbox",
            is_read=False,
        )
        self._add(
            self.new_id(),
            "Budget review",
            "Adele Vance",
            "adelev@contoso.example",
            "Can we move the budget review to Thursday?",
            "inbox",
            is_read=True,
        )

    def new_id(self) -> str:
        """A long opaque Exchange-style id."""
        raw = f"fake-graph-message-{next(self._ids):08d}-{uuid.uuid4().hex}".encode()
        return "AAMkAG" + base64.urlsafe_b64encode(raw).decode().rstrip("=") + "AAA="

    def _add(
        self,
        mid: str,
        subject: str,
        name: str,
        addr: str,
        text: str,
        folder: str,
        is_read: bool,
        to: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        now = rfc3339(millis=False)
        msg = {
            "@odata.etag": f'W/"CQAAABYAAAAiIsqMbYjsT5e+T7KzowPTAAAY{uuid.uuid4().hex[:8]}"',
            "id": mid,
            "createdDateTime": now,
            "lastModifiedDateTime": now,
            "changeKey": uuid.uuid4().hex[:24],
            "categories": [],
            "receivedDateTime": now,
            "sentDateTime": now,
            "hasAttachments": False,
            "internetMessageId": f"<{uuid.uuid4().hex}@contoso.example>",
            "subject": subject,
            "bodyPreview": text[:255],
            "importance": "normal",
            "parentFolderId": folder,
            "conversationId": "AAQkAG" + uuid.uuid4().hex,
            "isDeliveryReceiptRequested": False,
            "isReadReceiptRequested": False,
            "isRead": is_read,
            "isDraft": False,
            "webLink": f"https://outlook.office365.com/owa/?ItemID={mid}&exvsurl=1&viewmodel=ReadMessageItem",
            "inferenceClassification": "focused",
            "body": {"contentType": "text", "content": text},
            "sender": _recipient(addr, name),
            "from": _recipient(addr, name),
            "toRecipients": to or [_recipient(ME_UPN, "Alice")],
            "ccRecipients": [],
            "bccRecipients": [],
            "replyTo": [],
            "flag": {"flagStatus": "notFlagged"},
        }
        self.messages[mid] = msg
        return msg


def _check_user(m: re.Match[str]) -> None:
    who = m.group("who")
    if who != "me" and who.lower() not in (f"users/{ME_UPN}", f"users/{ME_ID}"):
        raise HttpError(404, f"User not found: {who}", "ErrorInvalidUser")


class Graph:
    """Graph handlers bound to one GraphState."""

    def __init__(self, st: GraphState) -> None:
        self.st = st

    def _select(self, req: Request, msg: dict[str, Any]) -> dict[str, Any]:
        sel = req.query.get("$select")
        if not sel:
            return copy.deepcopy(msg)
        keep = {x.strip() for x in sel.split(",")} | {"id", "@odata.etag"}
        return {k: copy.deepcopy(v) for k, v in msg.items() if k in keep}

    def list_messages(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        top = int_param(req, "$top", 10, 1, 1000)
        skip = int_param(req, "$skip", 0, 0)
        folder = m.group("folder")
        with self.st.lock:
            msgs = sorted(
                (x for x in self.st.messages.values() if folder is None or x["parentFolderId"] == folder),
                key=lambda x: x["receivedDateTime"],
                reverse=True,
            )
            chunk = [self._select(req, x) for x in msgs[skip : skip + top]]
        ctx = "https://graph.microsoft.com/v1.0/$metadata#users('" + ME_ID + "')/messages"
        out: dict[str, Any] = {"@odata.context": ctx, "value": chunk}
        if skip + top < len(msgs):
            out["@odata.nextLink"] = (
                f"https://graph.microsoft.com/v1.0/me/messages?$top={top}&$skip={skip + top}"
            )
        return json_response(out, flavor="graph")

    def _msg(self, mid: str) -> dict[str, Any]:
        msg = self.st.messages.get(mid)
        if msg is None:
            raise HttpError(404, "The specified object was not found in the store.", "ErrorItemNotFound")
        return msg

    def get_message(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        with self.st.lock:
            msg = self._select(req, self._msg(unquote(m.group("id"))))
        msg["@odata.context"] = (
            f"https://graph.microsoft.com/v1.0/$metadata#users('{ME_ID}')/messages/$entity"
        )
        return json_response(msg, flavor="graph")

    def patch_message(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        body = req.json_object()
        with self.st.lock:
            msg = self._msg(unquote(m.group("id")))
            for k in ("isRead", "categories", "flag", "importance", "subject", "inferenceClassification"):
                if k in body:
                    msg[k] = body[k]
            msg["lastModifiedDateTime"] = rfc3339(millis=False)
            return json_response(copy.deepcopy(msg), flavor="graph")

    def delete_message(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        with self.st.lock:
            self._msg(unquote(m.group("id")))
            msg = self.st.messages.pop(unquote(m.group("id")))
            msg["parentFolderId"] = "recoverableitemsdeletions"
        return empty_response(204)

    def send_mail(self, req: Request, m: re.Match[str]) -> Response:
        _check_user(m)
        body = req.json_object()
        message = body.get("message")
        if not isinstance(message, dict) or not message.get("toRecipients"):
            raise HttpError(
                400, "At least one recipient is required, but none were found.", "ErrorInvalidRecipients"
            )
        with self.st.lock:
            self.st.sent.append(message)
            if body.get("saveToSentItems", True) not in (False, "false"):
                text = str((message.get("body") or {}).get("content", ""))
                self.st._add(
                    self.st.new_id(),
                    str(message.get("subject", "")),
                    "Alice",
                    ME_UPN,
                    text,
                    "sentitems",
                    is_read=True,
                    to=message.get("toRecipients"),
                )
        return empty_response(202)


def _jwt_like(claims: dict[str, Any]) -> str:
    def enc(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{enc({'typ': 'JWT', 'alg': 'RS256', 'kid': 'fake'})}.{enc(claims)}.{uuid.uuid4().hex}"


def ms_token(req: Request, m: re.Match[str]) -> Response:
    """POST login.microsoftonline.com/{tenant}/oauth2/v2.0/token (form)."""
    form = req.form()
    grant = form.get("grant_type")
    if grant not in (
        "refresh_token",
        "authorization_code",
        "client_credentials",
        "password",
        "urn:ietf:params:oauth:grant-type:device_code",
    ):
        return error_response(
            "mslogin",
            400,
            "The request body must contain the following parameter: 'grant_type'.",
            "invalid_request",
        )
    if not form.get("client_id"):
        return error_response(
            "mslogin",
            400,
            "The request body must contain the following parameter: 'client_id'.",
            "invalid_request",
        )
    if grant == "refresh_token" and (not form.get("refresh_token") or "invalid" in form["refresh_token"]):
        return error_response(
            "mslogin",
            400,
            "The provided value for the input parameter 'refresh_token' is not valid.",
            "invalid_grant",
        )
    now = int(time.time())
    claims = {
        "aud": "https://graph.microsoft.com",
        "iss": f"https://sts.windows.net/{m.group('tenant')}/",
        "iat": now,
        "nbf": now,
        "exp": now + 3599,
        "upn": ME_UPN,
        "oid": ME_ID,
        "scp": form.get("scope", "Mail.ReadWrite Mail.Send"),
    }
    out = {
        "token_type": "Bearer",
        "scope": form.get("scope", "https://graph.microsoft.com/Mail.ReadWrite"),
        "expires_in": 3599,
        "ext_expires_in": 3599,
        "access_token": _jwt_like(claims),
    }
    if grant != "client_credentials":
        out["refresh_token"] = "1.AQ" + base64.urlsafe_b64encode(uuid.uuid4().bytes * 4).decode().rstrip("=")
    return json_response(out, flavor="mslogin")


def routes(st: GraphState) -> list[Route]:
    """Graph routes on graph.microsoft.com and the token endpoint on login.microsoftonline.com."""
    g = Graph(st)
    who = r"/(?:v1\.0|beta)/(?P<who>me|users/[^/]+)"
    folder = r"(?:/mailFolders/(?P<folder>[^/]+))?"
    table = [
        ("GET", who + folder + r"/messages", g.list_messages),
        ("GET", who + r"/messages/(?P<id>[^/]+)", g.get_message),
        ("PATCH", who + r"/messages/(?P<id>[^/]+)", g.patch_message),
        ("DELETE", who + r"/messages/(?P<id>[^/]+)", g.delete_message),
        ("POST", who + r"/sendMail", g.send_mail),
    ]
    out = [route(methods, GRAPH_HOSTS, pattern, handler, "graph") for methods, pattern, handler in table]
    out.append(
        route(
            "POST",
            MSLOGIN_HOSTS,
            r"/(?P<tenant>[^/]+)/oauth2(?:/v2\.0)?/token",
            ms_token,
            "mslogin",
            public=True,
        )
    )
    return out
