"""Google Drive API v3 (and legacy v2).

Match: the shared Google hosts with ``/drive/v3/``, ``/drive/v2/``, ``/upload/drive/v3/``,
``/upload/drive/v2/`` or the batch path ``/batch/drive/v3``. (Downloads that redirect to
``*.googleusercontent.com`` are not matched: that domain serves many Google products.)

Effect: by the effective HTTP method (``X-HTTP-Method-Override`` honoured). Drive has no POST
that reads. Calls are named after the discovery document's method ids, literal segments first:
``DELETE files/trash`` is files.emptyTrash, not files.delete of a file called "trash". Chunks
of a resumable upload (``PUT ...?upload_id=``) are named as such. Batch envelopes are read only
when every embedded request reads.
"""

from __future__ import annotations

from . import _google
from ._http import RouteTable

NAME = "drive"

SERVICE_PREFIX = "/drive/v3/"
UPLOAD_PREFIX = "/upload/drive/v3/"
LEGACY_PREFIXES = ("/drive/v2/", "/upload/drive/v2/")
BATCH_PATH = "/batch/drive/v3"
_PREFIXES = (SERVICE_PREFIX, UPLOAD_PREFIX, *LEGACY_PREFIXES, BATCH_PATH)

_F = "files/{fileId}"
ROUTES = RouteTable(
    [
        ("GET", "about", "about.get"),
        ("GET", "changes", "changes.list"),
        ("GET", "changes/startPageToken", "changes.getStartPageToken"),
        ("POST", "changes/watch", "changes.watch"),
        ("POST", "channels/stop", "channels.stop"),
        ("GET", "drives", "drives.list"),
        ("POST", "drives", "drives.create"),
        ("GET", "drives/{driveId}", "drives.get"),
        ("PATCH", "drives/{driveId}", "drives.update"),
        ("DELETE", "drives/{driveId}", "drives.delete"),
        ("POST", "drives/{driveId}/hide", "drives.hide"),
        ("POST", "drives/{driveId}/unhide", "drives.unhide"),
        ("GET", "files", "files.list"),
        ("POST", "files", "files.create"),
        ("GET", "files/generateIds", "files.generateIds"),
        ("DELETE", "files/trash", "files.emptyTrash"),
        ("GET", _F, "files.get"),
        ("PATCH", _F, "files.update"),
        ("DELETE", _F, "files.delete"),
        ("POST", f"{_F}/copy", "files.copy"),
        ("GET", f"{_F}/export", "files.export"),
        ("POST", f"{_F}/download", "files.download"),
        ("POST", f"{_F}/watch", "files.watch"),
        ("GET", f"{_F}/listLabels", "files.listLabels"),
        ("POST", f"{_F}/modifyLabels", "files.modifyLabels"),
        ("GET", f"{_F}/permissions", "permissions.list"),
        ("POST", f"{_F}/permissions", "permissions.create"),
        ("GET", f"{_F}/permissions/{{permissionId}}", "permissions.get"),
        ("PATCH", f"{_F}/permissions/{{permissionId}}", "permissions.update"),
        ("DELETE", f"{_F}/permissions/{{permissionId}}", "permissions.delete"),
        ("GET", f"{_F}/revisions", "revisions.list"),
        ("GET", f"{_F}/revisions/{{revisionId}}", "revisions.get"),
        ("PATCH", f"{_F}/revisions/{{revisionId}}", "revisions.update"),
        ("DELETE", f"{_F}/revisions/{{revisionId}}", "revisions.delete"),
        ("GET", f"{_F}/comments", "comments.list"),
        ("POST", f"{_F}/comments", "comments.create"),
        ("GET", f"{_F}/comments/{{commentId}}", "comments.get"),
        ("PATCH", f"{_F}/comments/{{commentId}}", "comments.update"),
        ("DELETE", f"{_F}/comments/{{commentId}}", "comments.delete"),
        ("GET", f"{_F}/comments/{{commentId}}/replies", "replies.list"),
        ("POST", f"{_F}/comments/{{commentId}}/replies", "replies.create"),
        ("GET", f"{_F}/comments/{{commentId}}/replies/{{replyId}}", "replies.get"),
        ("PATCH", f"{_F}/comments/{{commentId}}/replies/{{replyId}}", "replies.update"),
        ("DELETE", f"{_F}/comments/{{commentId}}/replies/{{replyId}}", "replies.delete"),
    ]
)


def match(host: str, path: str) -> bool:
    """True for a Drive API call (host lowercase without port; path normalised)."""
    return host in _google.SHARED_HOSTS and path.startswith(_PREFIXES)


def classify_effect(
    method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], body: bytes | None
) -> tuple[str, str]:
    """(effect, rule) for one Drive call; see the module docstring."""
    if path == BATCH_PATH or path.startswith(BATCH_PATH + "/"):
        return _google.classify_batch(body, headers, classify_effect)
    if path.startswith(UPLOAD_PREFIX):
        if "upload_id" in query:
            effect, rule = _google.classify_call(NAME, ROUTES, method, None, headers)
            return effect, f"drive resumable upload session, {rule}"
        return _google.classify_call(NAME, ROUTES, method, path[len(UPLOAD_PREFIX) :], headers, " (upload)")
    relative = path[len(SERVICE_PREFIX) :] if path.startswith(SERVICE_PREFIX) else None
    return _google.classify_call(NAME, ROUTES, method, relative, headers)
