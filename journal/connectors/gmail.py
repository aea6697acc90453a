"""Gmail API v1.

Match: ``gmail.googleapis.com`` (any path), or the shared Google hosts with ``/gmail/v1/``,
``/upload/gmail/v1/``, ``/resumable/upload/gmail/v1/`` or the batch path ``/batch/gmail/v1``.

Effect: by the effective HTTP method (``X-HTTP-Method-Override`` honoured); Gmail has no POST
that reads. Batch envelopes are read only when every embedded request reads. Calls are named
after the discovery document's method ids ("gmail messages.send").
"""

from __future__ import annotations

from . import _google
from ._http import RouteTable

NAME = "gmail"

DEDICATED_HOSTS = frozenset({"gmail.googleapis.com", "gmail.mtls.googleapis.com"})
SERVICE_PREFIX = "/gmail/v1/"
UPLOAD_PREFIXES = ("/upload/gmail/v1/", "/resumable/upload/gmail/v1/")
BATCH_PATH = "/batch/gmail/v1"
_PREFIXES = (SERVICE_PREFIX, *UPLOAD_PREFIXES, BATCH_PATH)

_U = "users/{userId}"
ROUTES = RouteTable(
    [
        ("GET", f"{_U}/profile", "users.getProfile"),
        ("POST", f"{_U}/watch", "users.watch"),
        ("POST", f"{_U}/stop", "users.stop"),
        ("GET", f"{_U}/history", "users.history.list"),
        ("GET", f"{_U}/messages", "users.messages.list"),
        ("GET", f"{_U}/messages/{{id}}", "users.messages.get"),
        ("GET", f"{_U}/messages/{{messageId}}/attachments/{{id}}", "users.messages.attachments.get"),
        ("POST", f"{_U}/messages", "users.messages.insert"),
        ("POST", f"{_U}/messages/send", "users.messages.send"),
        ("POST", f"{_U}/messages/import", "users.messages.import"),
        ("POST", f"{_U}/messages/batchModify", "users.messages.batchModify"),
        ("POST", f"{_U}/messages/batchDelete", "users.messages.batchDelete"),
        ("POST", f"{_U}/messages/{{id}}/modify", "users.messages.modify"),
        ("POST", f"{_U}/messages/{{id}}/trash", "users.messages.trash"),
        ("POST", f"{_U}/messages/{{id}}/untrash", "users.messages.untrash"),
        ("DELETE", f"{_U}/messages/{{id}}", "users.messages.delete"),
        ("GET", f"{_U}/threads", "users.threads.list"),
        ("GET", f"{_U}/threads/{{id}}", "users.threads.get"),
        ("POST", f"{_U}/threads/{{id}}/modify", "users.threads.modify"),
        ("POST", f"{_U}/threads/{{id}}/trash", "users.threads.trash"),
        ("POST", f"{_U}/threads/{{id}}/untrash", "users.threads.untrash"),
        ("DELETE", f"{_U}/threads/{{id}}", "users.threads.delete"),
        ("GET", f"{_U}/drafts", "users.drafts.list"),
        ("GET", f"{_U}/drafts/{{id}}", "users.drafts.get"),
        ("POST", f"{_U}/drafts", "users.drafts.create"),
        ("POST", f"{_U}/drafts/send", "users.drafts.send"),
        ("PUT", f"{_U}/drafts/{{id}}", "users.drafts.update"),
        ("DELETE", f"{_U}/drafts/{{id}}", "users.drafts.delete"),
        ("GET", f"{_U}/labels", "users.labels.list"),
        ("GET", f"{_U}/labels/{{id}}", "users.labels.get"),
        ("POST", f"{_U}/labels", "users.labels.create"),
        ("PATCH", f"{_U}/labels/{{id}}", "users.labels.patch"),
        ("PUT", f"{_U}/labels/{{id}}", "users.labels.update"),
        ("DELETE", f"{_U}/labels/{{id}}", "users.labels.delete"),
        # Settings: every write here can set up forwarding or impersonation (high risk).
        ("PUT", f"{_U}/settings/autoForwarding", "users.settings.updateAutoForwarding"),
        ("PUT", f"{_U}/settings/vacation", "users.settings.updateVacation"),
        ("PUT", f"{_U}/settings/imap", "users.settings.updateImap"),
        ("PUT", f"{_U}/settings/pop", "users.settings.updatePop"),
        ("PUT", f"{_U}/settings/language", "users.settings.updateLanguage"),
        ("POST", f"{_U}/settings/filters", "users.settings.filters.create"),
        ("DELETE", f"{_U}/settings/filters/{{id}}", "users.settings.filters.delete"),
        ("POST", f"{_U}/settings/forwardingAddresses", "users.settings.forwardingAddresses.create"),
        (
            "DELETE",
            f"{_U}/settings/forwardingAddresses/{{forwardingEmail}}",
            "users.settings.forwardingAddresses.delete",
        ),
        ("POST", f"{_U}/settings/delegates", "users.settings.delegates.create"),
        ("DELETE", f"{_U}/settings/delegates/{{delegateEmail}}", "users.settings.delegates.delete"),
        ("POST", f"{_U}/settings/sendAs", "users.settings.sendAs.create"),
        ("PATCH", f"{_U}/settings/sendAs/{{sendAsEmail}}", "users.settings.sendAs.patch"),
        ("PUT", f"{_U}/settings/sendAs/{{sendAsEmail}}", "users.settings.sendAs.update"),
        ("DELETE", f"{_U}/settings/sendAs/{{sendAsEmail}}", "users.settings.sendAs.delete"),
    ]
)


def match(host: str, path: str) -> bool:
    """True for a Gmail API call (host lowercase without port; path normalised)."""
    if host in DEDICATED_HOSTS:
        return True
    return host in _google.SHARED_HOSTS and path.startswith(_PREFIXES)


def classify_effect(
    method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], body: bytes | None
) -> tuple[str, str]:
    """(effect, rule) for one Gmail call; see the module docstring."""
    if path == BATCH_PATH or path.startswith(BATCH_PATH + "/"):
        return _google.classify_batch(body, headers, classify_effect)
    if path.startswith(SERVICE_PREFIX):
        return _google.classify_call(NAME, ROUTES, method, path[len(SERVICE_PREFIX) :], headers)
    for prefix in UPLOAD_PREFIXES:
        if path.startswith(prefix):
            return _google.classify_call(NAME, ROUTES, method, path[len(prefix) :], headers, " (upload)")
    return _google.classify_call(NAME, ROUTES, method, None, headers)
