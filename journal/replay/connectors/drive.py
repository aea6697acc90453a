"""Google Drive API v3: files, permissions, comments (anything else: generic REST rules).

Keys: file `(fileId)`; permission `(fileId, permissionId)` (a permission id is stable for its
grantee) with the file as parent; comment `(fileId, commentId)`. A file read that lists
`permissions` also shows each permission. `files.get?alt=media` shows the content as the
file's `content` field (a blob link when it was spilled).

Trash vs delete (connectors reference, Drive): trashing is `PATCH files/{id} {"trashed": true}`
and is undone by `{"trashed": false}`; `DELETE files/{id}` deletes permanently, skipping the
trash (a folder's descendants too), and `DELETE files/trash` empties the trash: both are
irreversible.

Other inverses: files.create / copy -> trash the new file; metadata PATCH -> PATCH the changed
fields back (addParents and removeParents swapped); content upload -> re-upload the content an
earlier `alt=media` read captured, else restore the before `headRevisionId`;
permissions.create -> DELETE the permission (a notification email already sent cannot be
recalled); permissions.update -> PATCH the role back; permissions.delete -> create it again from
the before `{type, role, emailAddress|domain}` with `sendNotificationEmail=false`; comments:
create -> delete, update -> patch back, delete -> create again (new id).
"""

from __future__ import annotations

from journal.connectors import drive as capture

from ..model import (
    CREATED,
    DELETED,
    READ,
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
    is_ref,
    no_inverse,
    url,
)
from . import _google

NAME = "drive"
PREFIXES = (capture.SERVICE_PREFIX, capture.UPLOAD_PREFIX)
_GRANTEE = ("emailAddress", "domain")


def _file(ident: str) -> tuple[str, ...]:
    return (NAME, "file", ident)


def _permission_touches(file_id: str, items: object, op: str, data: dict) -> list[Touch]:
    return [Touch((NAME, "permission", file_id, p["id"]), READ, op, state=p, parent=_file(file_id), data=data)
            for p in _google.ids(items)]


def touches(call: Call) -> list[Touch] | None:
    if call.tool is not None:
        return None
    if _google.is_batch(call, capture.BATCH_PATH):
        call.notes.append("Google batch envelope: replay does not split batches into their calls")
        return []
    data = {"base": f"{call.origin}/drive/v3", "upload": f"{call.origin}/upload/drive/v3"}
    res = call.result_dict
    args = call.args
    if call.path.startswith(capture.UPLOAD_PREFIX) and "upload_id" in call.query:
        return _resumable_chunk(call, res, data)
    found = _google.route(call, capture.ROUTES, PREFIXES)
    if found is None:
        return None
    op, params, prefix = found
    call.op = op
    upload = prefix == capture.UPLOAD_PREFIX
    if upload and call.q("uploadType") == "resumable":
        pending = call.memo.setdefault("resumable", [])
        pending.append(("create", None) if op == "files.create" else ("update", params.get("fileId")))
        call.notes.append("starts a resumable upload: the file changes with the upload's final chunk")
        return []
    fid = params.get("fileId", "")

    if op == "files.list":
        out = []
        for f in _google.ids(res.get("files")):
            out.append(Touch(_file(f["id"]), READ, op, state=f, data=data))
            out += _permission_touches(f["id"], f.get("permissions"), op, data)
        return out
    if op == "files.get":
        if call.q("alt") == "media":
            return [Touch(_file(fid), READ, "files.get (content)", state={"content": call.response_body}, data=data)]
        return [Touch(_file(fid), READ, op, state=res or None, data=data),
                *_permission_touches(fid, res.get("permissions"), op, data)]
    if op == "files.export":
        return [Touch(_file(fid), READ, op, state={f"export ({call.q('mimeType') or '?'})": call.response_body},
                      data=data)]
    if op == "permissions.list":
        return _permission_touches(fid, res.get("permissions"), op, data)
    if op == "permissions.get":
        return [Touch((NAME, "permission", fid, params["permissionId"]), READ, op, state=res or None,
                      parent=_file(fid), data=data)]
    if op in ("comments.list", "comments.get"):
        items = _google.ids(res.get("comments")) if op == "comments.list" else ([res] if res.get("id") else [])
        return [Touch((NAME, "comment", fid, c["id"]), READ, op, state=c, parent=_file(fid), data=data)
                for c in items]
    if call.effect == READ:
        return []

    if op in ("files.create", "files.copy"):
        if not isinstance(res.get("id"), str):
            call.notes.append(f"{op}: the response names no file id")
            return []
        meta = {k: v for k, v in args.items()} if not upload else {}
        return [Touch(_file(res["id"]), WRITE, op + (" (upload)" if upload else ""), state=res,
                      intended=meta or None, lifecycle=CREATED, data=data | {"source": fid})]
    if op == "files.update":
        if upload:
            return [Touch(_file(fid), WRITE, "files.update (content)", state=res or None,
                          data=data | {"content": True})]
        trashed = args.get("trashed")
        lifecycle = TRASHED if trashed is True else UNTRASHED if trashed is False else None
        parents = {"addParents": call.q("addParents"), "removeParents": call.q("removeParents")}
        intended = {k: v for k, v in args.items()} or None
        return [Touch(_file(fid), WRITE, op + (" (trash)" if trashed is True else " (untrash)" if trashed is False
                                               else ""),
                      state=res or None, intended=intended, lifecycle=lifecycle,
                      data=data | {"args": args, "parents": {k: v for k, v in parents.items() if v}})]
    if op == "files.delete":
        return [Touch(_file(fid), WRITE, op, lifecycle=DELETED, data=data)]
    if op == "files.emptyTrash":
        return [Touch((NAME, "trash", call.principal or "me"), WRITE, op, lifecycle="emptied", data=data)]
    if op == "permissions.create":
        if not isinstance(res.get("id"), str):
            call.notes.append("permissions.create: the response names no permission id")
            return []
        flags = {"notify": call.q("sendNotificationEmail"), "transfer": call.q("transferOwnership")}
        return [Touch((NAME, "permission", fid, res["id"]), WRITE, op, state=res, intended=args or None,
                      lifecycle=CREATED, parent=_file(fid), data=data | flags | {"grantee": args})]
    if op == "permissions.update":
        return [Touch((NAME, "permission", fid, params["permissionId"]), WRITE, op, state=res or None,
                      intended=args or None, parent=_file(fid), data=data | {"args": args})]
    if op == "permissions.delete":
        return [Touch((NAME, "permission", fid, params["permissionId"]), WRITE, op, lifecycle=DELETED,
                      parent=_file(fid), data=data)]
    if op == "comments.create":
        if not isinstance(res.get("id"), str):
            return []
        return [Touch((NAME, "comment", fid, res["id"]), WRITE, op, state=res, intended=args or None,
                      lifecycle=CREATED, parent=_file(fid), data=data)]
    if op == "comments.update":
        return [Touch((NAME, "comment", fid, params["commentId"]), WRITE, op, state=res or None,
                      intended=args or None, parent=_file(fid), data=data | {"args": args})]
    if op == "comments.delete":
        return [Touch((NAME, "comment", fid, params["commentId"]), WRITE, op, lifecycle=DELETED, parent=_file(fid),
                      data=data)]
    return None


def _resumable_chunk(call: Call, res: dict, data: dict) -> list[Touch]:
    if call.status == 308 or not isinstance(res.get("id"), str):
        call.notes.append("a chunk of a resumable upload: the file changes with the final chunk")
        return []
    pending = call.memo.get("resumable") or []
    how, _ = pending.pop(0) if pending else ("create" if call.status == 201 else "update", None)
    if how == "create":
        return [Touch(_file(res["id"]), WRITE, "files.create (resumable upload)", state=res, lifecycle=CREATED,
                      data=data)]
    return [Touch(_file(res["id"]), WRITE, "files.update (resumable upload)", state=res, data=data | {"content": True})]


def invert(w: Write) -> Inverse:
    t, before, data = w.touch, w.before, w.touch.data
    base = data.get("base", "")
    seqs = ", ".join(str(s) for s in w.before_seqs) or "?"
    if t.kind == "file":
        fid = t.key[2]
        target = url(base, "files", fid)
        if t.lifecycle == CREATED:
            return exact(Request("PATCH", target, {"trashed": True}),
                         "trash the new file (DELETE files/{id} would delete it permanently)")
        if t.lifecycle == DELETED:
            return irreversible("files.delete deletes permanently and skips the trash (a folder's descendants "
                                "too); only Drive support or an admin restore can bring it back")
        if data.get("content"):
            content = (before or {}).get("content")
            if content is not None:
                ref = " (the body is the spilled blob it names: send those bytes)" if is_ref(content) else ""
                return exact(Request("PATCH", url(data.get("upload", ""), "files", fid, query={"uploadType": "media"}),
                                     content),
                             f"re-upload the content seen in seq {seqs}; this adds a new revision{ref}")
            rev = (before or {}).get("headRevisionId")
            if isinstance(rev, str):
                return no_inverse(f"restore revision {rev}: GET files/{fid}/revisions/{rev}?alt=media, then "
                                  "re-upload it (binary files only; old revisions are purged after 30 days unless "
                                  "keepForever is set)")
            return no_inverse("blind content upload: no earlier read captured the content or its headRevisionId",
                              blind=True)
        args = data.get("args") or {}
        query = {}
        parents = data.get("parents") or {}
        if parents.get("addParents"):
            query["removeParents"] = parents["addParents"]
        if parents.get("removeParents"):
            query["addParents"] = parents["removeParents"]
        req_url = url(base, "files", fid, query=query or None)
        if t.lifecycle in (TRASHED, UNTRASHED):
            was = before.get("trashed") if before else None
            now = t.lifecycle == TRASHED
            body = {"trashed": not now} | {k: (before or {}).get(k) for k in args if k != "trashed"}
            if was is None:
                why = "no earlier read of it" if before is None else f"the state seen in seq {seqs} lacks `trashed`"
                return approx(Request("PATCH", req_url, body),
                              f"blind {'trash' if now else 'untrash'} ({why}): "
                              f"{'untrashing' if now else 'trashing'} it again is the best compensation, wrong if it "
                              f"already was {'in' if now else 'out of'} the trash", blind=True)
            if was == now:
                return no_inverse(f"the file already was {'in' if now else 'out of'} the trash: nothing to undo")
            return exact(Request("PATCH", req_url, body), f"{'untrash' if now else 'trash'} it again (read in "
                                                          f"seq {seqs})")
        if before is None:
            if query:
                return approx(Request("PATCH", req_url, {}), "blind move: swapping addParents and removeParents "
                              "moves it back; other changed fields have no captured before value", blind=True)
            return no_inverse("blind files.update: no earlier read captured the file's metadata")
        return exact(Request("PATCH", req_url, {k: before.get(k) for k in sorted(args)}),
                     f"patch the changed fields back to what seq {seqs} showed" +
                     ("; addParents and removeParents swapped" if query else ""))
    if t.kind == "permission":
        fid, pid = t.key[2], t.key[3]
        target = url(base, "files", fid, "permissions", pid)
        if t.lifecycle == CREATED:
            if str(data.get("transfer")).lower() == "true":
                return no_inverse("ownership was transferred: only the new owner can transfer it back")
            grantee = data.get("grantee") or {}
            note = ""
            if str(data.get("notify")).lower() != "false" and grantee.get("type") in ("user", "group"):
                note = "; the notification email already sent cannot be recalled"
            return exact(Request("DELETE", target), "delete the permission the write created" + note)
        if t.op == "permissions.update":
            if before is None:
                return no_inverse("blind permissions.update: no earlier read captured the role it had")
            args = data.get("args") or {}
            return exact(Request("PATCH", target, {k: before.get(k) for k in sorted(args)}),
                         f"patch the permission back to what seq {seqs} showed")
        if t.lifecycle == DELETED:
            if not before or not before.get("type") or not before.get("role"):
                return no_inverse("blind permissions.delete: who had access, and with what role, was never read",
                                  blind=True)
            body = {k: before[k] for k in ("type", "role", *_GRANTEE) if before.get(k) is not None}
            return exact(Request("POST", url(base, "files", fid, "permissions",
                                             query={"sendNotificationEmail": "false"}), body),
                         f"create the permission again from seq {seqs}, without a notification email")
    if t.kind == "comment":
        fid, cid = t.key[2], t.key[3]
        target = url(base, "files", fid, "comments", cid)
        if t.lifecycle == CREATED:
            return exact(Request("DELETE", target), "delete the comment the write created")
        if t.lifecycle == DELETED:
            if not before or "content" not in before:
                return no_inverse("blind comments.delete: the comment's content was never read", blind=True)
            return approx(Request("POST", url(base, "files", fid, "comments"), {"content": before["content"]}),
                          "create the comment again (new id, new time, current author)")
        if before is None:
            return no_inverse("blind comments.update: the comment's content was never read")
        return exact(Request("PATCH", target, {k: before.get(k) for k in sorted(data.get("args") or {})}),
                     f"patch the comment back to what seq {seqs} showed")
    if t.kind == "trash":
        return irreversible("files.emptyTrash deletes every trashed file permanently")
    return no_inverse(f"no inverse known for drive {t.op}")


def describe(kind: str, key: tuple, state: dict) -> str | None:
    if kind == "file":
        return state.get("name") if isinstance(state.get("name"), str) else None
    if kind == "permission":
        who = state.get("emailAddress") or state.get("domain") or state.get("type")
        return f"{state.get('role', '?')} for {who}" if who or state.get("role") else None
    if kind == "comment":
        return state.get("content") if isinstance(state.get("content"), str) else None
    return None
