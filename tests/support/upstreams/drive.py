"""Fake Google Drive v3: files, content (spilled to disk), uploads (media, multipart, resumable), permissions.

Why: Drive is where big bodies live (uploads up to 5 TB, alt=media downloads); the fake consumes and
serves them streaming, computing md5/sha1/sha256 on the fly, so the proxy's spill path is exercised
for real.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import os
import re
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .bigbody import big_body_chunks
from .common import (
    HttpError,
    Request,
    Response,
    Route,
    empty_response,
    json_response,
    page,
    rfc3339,
    route,
    unquote,
)
from .generic import big_response
from .gmail import ME
from .wire import CHUNK, MultipartParser

HOSTS = frozenset({"www.googleapis.com"})
ROOT_ID = "0AFakeRootFolderIdUk9PVA"
FILE_PLAN = "1PlanTxtFakeFileId000000000000001"
FILE_BUDGET = "1BudgetSheetFakeFileId00000000002"
FILE_PHOTO = "1PhotoJpgFakeFileId00000000000003"
FOLDER_SHARED = "1SharedFolderFakeId00000000000004"
FILE_NOTES = "1NotesMdFakeFileId000000000000005"
PHOTO_SIZE = 3 * 1024 * 1024
PHOTO_SEED = "drive-photo"
PLAN_TEXT = b"Project plan\n============\n\n1. Ship the broker\n2. Record every call\n3. Undo mistakes\n"
SPILL_LIMIT = 64 * 1024 * 1024  # uploads above this are hashed but their content is not retained
GOOGLE_APPS = "application/vnd.google-apps."
FOLDER_MIME = "application/vnd.google-apps.folder"
DEFAULT_FIELDS = ("kind", "id", "name", "mimeType")
UPLOAD_FIELDS = DEFAULT_FIELDS + ("size", "md5Checksum", "sha1Checksum", "sha256Checksum")
PERMISSION_FIELDS = ("kind", "id", "type", "role")
ROLES = ("owner", "organizer", "fileOrganizer", "writer", "commenter", "reader")
WRITABLE = (
    "name",
    "description",
    "starred",
    "trashed",
    "mimeType",
    "properties",
    "appProperties",
    "viewersCanCopyContent",
    "writersCanShare",
    "copyRequiresWriterPermission",
    "contentHints",
)


@dataclass
class Blob:
    """Where a file's bytes are: bytes in memory, a spill file, the big-body generator, or nowhere."""

    size: int
    md5: str
    sha1: str
    sha256: str
    data: bytes | None = None
    path: str | None = None
    seed: str | None = None

    def chunks(self) -> Iterator[bytes]:
        """Stream the content."""
        if self.data is not None:
            yield self.data
        elif self.path is not None:
            with open(self.path, "rb") as f:
                while piece := f.read(CHUNK):
                    yield piece
        elif self.seed is not None:
            yield from big_body_chunks(self.size, self.seed)
        else:
            raise HttpError(
                410,
                "Content of this upload was not retained by the fake (over the spill limit)",
                "contentNotRetained",
            )

    @classmethod
    def from_bytes(cls, data: bytes) -> Blob:
        """A small in-memory blob."""
        return cls(
            len(data),
            hashlib.md5(data).hexdigest(),
            hashlib.sha1(data).hexdigest(),
            hashlib.sha256(data).hexdigest(),
            data=data,
        )

    @classmethod
    def generated(cls, size: int, seed: str) -> Blob:
        """A blob backed by bigbody (hashes computed once, streaming)."""
        md5, sha1, sha256 = hashlib.md5(), hashlib.sha1(), hashlib.sha256()
        for piece in big_body_chunks(size, seed, 1 << 20):
            md5.update(piece)
            sha1.update(piece)
            sha256.update(piece)
        return cls(size, md5.hexdigest(), sha1.hexdigest(), sha256.hexdigest(), seed=seed)


class Sink:
    """Consumes upload bytes: hashes them and spills them to disk up to SPILL_LIMIT."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.md5, self.sha1, self.sha256 = hashlib.md5(), hashlib.sha1(), hashlib.sha256()
        self.size = 0
        self._f = open(path, "wb")  # noqa: SIM115 - closed in finish()/drop
        self._kept = True

    def write(self, data: bytes) -> None:
        """Account for (and maybe keep) one piece."""
        self.md5.update(data)
        self.sha1.update(data)
        self.sha256.update(data)
        self.size += len(data)
        if self._kept:
            if self.size > SPILL_LIMIT:
                self._drop()
            else:
                self._f.write(data)

    def _drop(self) -> None:
        self._kept = False
        self._f.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def abort(self) -> None:
        """Forget the upload."""
        if self._kept:
            self._drop()

    def finish(self) -> Blob:
        """Close and describe the content."""
        if self._kept:
            self._f.close()
        return Blob(
            self.size,
            self.md5.hexdigest(),
            self.sha1.hexdigest(),
            self.sha256.hexdigest(),
            path=self.path if self._kept else None,
        )


def permission_id(kind: str, who: str) -> str:
    """Stable permission id per grantee (as in Drive: the id identifies the grantee)."""
    if kind == "anyone":
        return "anyoneWithLink"
    digest = int(hashlib.sha256(who.lower().encode()).hexdigest()[:16], 16)
    return f"{digest:020d}"[:20] + ("k" if kind == "domain" else "")


def parse_fields(spec: str) -> dict[str, Any]:
    """Parse a ``fields=`` selector (``a,b/c,files(id,name)``) into a tree; ``{"*": None}`` = all."""
    pos = 0

    def items() -> dict[str, Any]:
        nonlocal pos
        tree: dict[str, Any] = {}
        while pos < len(spec):
            if spec[pos] in ", ":
                pos += 1
                continue
            if spec[pos] == ")":
                return tree
            m = re.compile(r"[A-Za-z0-9_*.@$-]+(?:/[A-Za-z0-9_*.@$-]+)*").match(spec, pos)
            if not m:
                raise HttpError(400, f"Invalid field selection {spec}", "invalidParameter")
            pos = m.end()
            path = m.group(0).split("/")
            sub: Any = None
            if pos < len(spec) and spec[pos] == "(":
                pos += 1
                sub = items()
                if pos >= len(spec) or spec[pos] != ")":
                    raise HttpError(400, f"Invalid field selection {spec}", "invalidParameter")
                pos += 1
            node: dict[str, Any] | None = tree
            for name in path[:-1]:
                if node is None or (name in node and node[name] is None):
                    node = None  # the parent is already selected whole
                    break
                node = node.setdefault(name, {})
            if node is not None:
                node[path[-1]] = sub
        return tree

    return items()


def apply_fields(obj: Any, tree: dict[str, Any] | None) -> Any:
    """Project ``obj`` onto a parsed field tree."""
    if tree is None or "*" in tree:
        return obj
    if isinstance(obj, list):
        return [apply_fields(x, tree) for x in obj]
    if isinstance(obj, dict):
        return {k: apply_fields(obj[k], sub) for k, sub in tree.items() if k in obj}
    return obj


class DriveState:
    """Files (id -> metadata), their blobs, permissions and open resumable uploads."""

    def __init__(self, spill_dir: str) -> None:
        self.lock = threading.RLock()
        self.spill_dir = spill_dir
        self.files: dict[str, dict[str, Any]] = {}
        self.blobs: dict[str, Blob] = {}
        self.permissions: dict[str, dict[str, dict[str, Any]]] = {}
        self.uploads: dict[str, dict[str, Any]] = {}
        self._ids = itertools.count(1)
        self.add_file({"id": FOLDER_SHARED, "name": "Shared", "mimeType": FOLDER_MIME})
        self.add_file(
            {"id": FILE_PLAN, "name": "Project plan.txt", "mimeType": "text/plain"},
            Blob.from_bytes(PLAN_TEXT),
        )
        self.add_file({"id": FILE_BUDGET, "name": "Budget 2025", "mimeType": GOOGLE_APPS + "spreadsheet"})
        self.add_file(
            {"id": FILE_PHOTO, "name": "offsite.jpg", "mimeType": "image/jpeg"},
            Blob.generated(PHOTO_SIZE, PHOTO_SEED),
        )
        self.add_file(
            {"id": FILE_NOTES, "name": "notes.md", "mimeType": "text/markdown", "parents": [FOLDER_SHARED]},
            Blob.from_bytes(b"# Notes\n\n- remember the milk\n"),
        )

    def new_id(self) -> str:
        """A fresh 33-character file id."""
        digest = hashlib.sha256(f"drive-file-{next(self._ids)}".encode()).hexdigest()
        return "1" + digest[:32]

    def spill_path(self) -> str:
        """A fresh file name in the spill directory."""
        return os.path.join(self.spill_dir, uuid.uuid4().hex)

    def add_file(self, meta: dict[str, Any], blob: Blob | None = None) -> dict[str, Any]:
        """Create a file resource (full metadata) from client metadata and an optional blob."""
        fid = meta.get("id") or self.new_id()
        now = rfc3339()
        mime = meta.get("mimeType") or "application/octet-stream"
        name = meta.get("name") or "Untitled"
        f: dict[str, Any] = {
            "kind": "drive#file",
            "id": fid,
            "name": name,
            "mimeType": mime,
            "starred": False,
            "trashed": False,
            "explicitlyTrashed": False,
            "parents": list(meta.get("parents") or [ROOT_ID]),
            "spaces": ["drive"],
            "version": "1",
            "webViewLink": f"https://drive.google.com/file/d/{fid}/view?usp=drivesdk",
            "iconLink": f"https://drive-thirdparty.googleusercontent.com/16/type/{mime}",
            "hasThumbnail": False,
            "viewedByMe": True,
            "createdTime": now,
            "modifiedTime": now,
            "modifiedByMeTime": now,
            "owners": [_me()],
            "lastModifyingUser": _me(),
            "shared": False,
            "ownedByMe": True,
            "writersCanShare": True,
            "capabilities": {"canEdit": True, "canDelete": True, "canShare": True, "canTrash": True},
            "permissionIds": [permission_id("user", ME)],
        }
        for k in ("description", "properties", "appProperties", "starred"):
            if k in meta:
                f[k] = meta[k]
        if mime.startswith(GOOGLE_APPS):
            f["webViewLink"] = f"https://docs.google.com/{mime.rsplit('.', 1)[-1]}/d/{fid}/edit?usp=drivesdk"
        else:
            f["originalFilename"] = name
            if "." in name:
                f["fileExtension"] = f["fullFileExtension"] = name.rsplit(".", 1)[-1]
            self._set_blob(f, blob or Blob.from_bytes(b""))
        self.files[fid] = f
        self.permissions[fid] = {
            permission_id("user", ME): {
                "kind": "drive#permission",
                "id": permission_id("user", ME),
                "type": "user",
                "role": "owner",
                "emailAddress": ME,
                "displayName": "Alice",
                "deleted": False,
                "pendingOwner": False,
            }
        }
        return f

    def _set_blob(self, f: dict[str, Any], blob: Blob) -> None:
        old = self.blobs.get(f["id"])
        if old is not None and old.path and old.path != blob.path:
            try:
                os.unlink(old.path)
            except OSError:
                pass
        self.blobs[f["id"]] = blob
        f.update(
            size=str(blob.size),
            quotaBytesUsed=str(blob.size),
            md5Checksum=blob.md5,
            sha1Checksum=blob.sha1,
            sha256Checksum=blob.sha256,
            headRevisionId=f"0B{blob.sha256[:30]}",
        )

    def set_content(self, fid: str, blob: Blob) -> None:
        """Replace a file's content (new revision)."""
        f = self.files[fid]
        self._set_blob(f, blob)
        f["version"] = str(int(f["version"]) + 1)
        f["modifiedTime"] = f["modifiedByMeTime"] = rfc3339()

    def remove(self, fid: str) -> None:
        """Delete a file (and, for folders, its descendants) permanently."""
        for child in [x for x, f in self.files.items() if fid in f.get("parents", [])]:
            self.remove(child)
        self.files.pop(fid, None)
        self.permissions.pop(fid, None)
        blob = self.blobs.pop(fid, None)
        if blob is not None and blob.path:
            try:
                os.unlink(blob.path)
            except OSError:
                pass


def _me() -> dict[str, Any]:
    return {
        "kind": "drive#user",
        "displayName": "Alice",
        "me": True,
        "emailAddress": ME,
        "permissionId": permission_id("user", ME),
    }


def _fields(req: Request, default: tuple[str, ...]) -> dict[str, Any]:
    spec = req.query.get("fields")
    if not spec:
        return {k: None for k in default}
    return parse_fields(spec)


_Q_CLAUSE = re.compile(
    r"""\s*(?:(?P<field>name|mimeType|trashed|starred)\s*(?P<op>=|!=|contains)\s*(?P<value>'(?:[^'\\]|\\.)*'|true|false)"""
    r"""|'(?P<parent>[^']+)'\s+in\s+parents)\s*""",
    re.IGNORECASE,
)


def _match_q(f: dict[str, Any], q: str) -> bool:
    for clause in re.split(r"\s+and\s+", q.strip(), flags=re.IGNORECASE):
        m = _Q_CLAUSE.fullmatch(clause)
        if not m:
            continue  # unsupported clauses are ignored (documented)
        if m.group("parent"):
            parent = ROOT_ID if m.group("parent") == "root" else m.group("parent")
            if parent not in f.get("parents", []):
                return False
            continue
        value: Any = m.group("value")
        value = (
            value.lower() == "true" if value.lower() in ("true", "false") else value[1:-1].replace("\\'", "'")
        )
        have = f.get(m.group("field"))
        op = m.group("op").lower()
        if op == "contains":
            ok = isinstance(have, str) and str(value).lower() in have.lower()
        else:
            ok = (have == value) == (op == "=")
        if not ok:
            return False
    return True


class Drive:
    """Route handlers bound to one DriveState."""

    def __init__(self, st: DriveState) -> None:
        self.st = st

    def _file(self, fid: str) -> dict[str, Any]:
        fid = ROOT_ID if fid == "root" else fid
        f = self.st.files.get(fid)
        if f is None:
            raise HttpError(404, f"File not found: {fid}.", "notFound")
        return f

    def list_files(self, req: Request, m: re.Match[str]) -> Response:
        q = req.query.get("q", "")
        with self.st.lock:
            found = [copy.deepcopy(f) for f in self.st.files.values() if not q or _match_q(f, q)]
        found.sort(key=lambda f: (f["mimeType"] != FOLDER_MIME, f["name"].lower()))
        chunk, token = page(found, req, 100, 1000, "pageSize", "pageToken")
        out: dict[str, Any] = {"kind": "drive#fileList", "incompleteSearch": False, "files": chunk}
        if token:
            out["nextPageToken"] = token
        spec = req.query.get("fields")
        tree = (
            parse_fields(spec)
            if spec
            else {
                "kind": None,
                "incompleteSearch": None,
                "nextPageToken": None,
                "files": {k: None for k in DEFAULT_FIELDS},
            }
        )
        return json_response(apply_fields(out, tree), flavor="google")

    def get_file(self, req: Request, m: re.Match[str]) -> Response:
        fid = unquote(m.group("id"))
        if fid == "big":
            return self._big(req)
        with self.st.lock:
            f = copy.deepcopy(self._file(fid))
            blob = self.st.blobs.get(f["id"])
        if req.query.get("alt") == "media":
            if f["mimeType"].startswith(GOOGLE_APPS):
                raise HttpError(
                    403,
                    "Only files with binary content can be downloaded. Use Export with Docs Editors files.",
                    "fileNotDownloadable",
                )
            assert blob is not None
            if blob.data is None and blob.path is None and blob.seed is None:
                raise HttpError(
                    410, "Content of this upload was not retained by the fake", "contentNotRetained"
                )
            return Response(
                status=200,
                body=blob.chunks(),
                length=blob.size,
                content_type=f["mimeType"],
                headers=[
                    ("Content-Disposition", f'attachment; filename="{f["name"]}"'),
                    ("X-GUploader-UploadID", "ABPtcPp" + uuid.uuid4().hex),
                    ("ETag", f'"{blob.md5}"'),
                ],
            )
        return json_response(apply_fields(f, _fields(req, DEFAULT_FIELDS)), flavor="google")

    def _big(self, req: Request) -> Response:
        if req.query.get("alt") == "media":
            return big_response(req)
        size = req.query.get("size", str(10 << 20))
        meta = {
            "kind": "drive#file",
            "id": "big",
            "name": "big.bin",
            "mimeType": "application/octet-stream",
            "size": size,
        }
        return json_response(apply_fields(meta, _fields(req, DEFAULT_FIELDS)), flavor="google")

    def create_metadata(self, req: Request, m: re.Match[str]) -> Response:
        meta = req.json_object()
        with self.st.lock:
            for p in meta.get("parents") or []:
                self._file(p)
            f = self.st.add_file({k: v for k, v in meta.items() if k != "id"})
            return json_response(
                apply_fields(copy.deepcopy(f), _fields(req, DEFAULT_FIELDS)), flavor="google"
            )

    def _apply_patch(self, req: Request, f: dict[str, Any], body: dict[str, Any]) -> None:
        if "parents" in body:
            raise HttpError(
                403,
                "The parents field is not directly writable in update requests. Use the "
                "addParents and removeParents parameters instead.",
                "fieldNotWritable",
            )
        for k, v in body.items():
            if k not in WRITABLE:
                raise HttpError(
                    403,
                    f"The resource body includes fields which are not directly writable. ({k})",
                    "fieldNotWritable",
                )
            f[k] = v
        if "trashed" in body:
            f["explicitlyTrashed"] = bool(body["trashed"])
            if body["trashed"]:
                f["trashedTime"] = rfc3339()
                f["trashingUser"] = _me()
            else:
                f.pop("trashedTime", None)
                f.pop("trashingUser", None)
        for p in (req.query.get("addParents") or "").split(","):
            if p:
                self._file(p)
                if p not in f["parents"]:
                    f["parents"].append(p)
        for p in (req.query.get("removeParents") or "").split(","):
            if p in f["parents"]:
                f["parents"].remove(p)
        f["modifiedTime"] = f["modifiedByMeTime"] = rfc3339()
        f["version"] = str(int(f["version"]) + 1)

    def patch_file(self, req: Request, m: re.Match[str]) -> Response:
        body = req.json_object()
        with self.st.lock:
            f = self._file(unquote(m.group("id")))
            self._apply_patch(req, f, body)
            return json_response(
                apply_fields(copy.deepcopy(f), _fields(req, DEFAULT_FIELDS)), flavor="google"
            )

    def delete_file(self, req: Request, m: re.Match[str]) -> Response:
        with self.st.lock:
            f = self._file(unquote(m.group("id")))
            self.st.remove(f["id"])
        return empty_response(204)

    def empty_trash(self, req: Request, m: re.Match[str]) -> Response:
        with self.st.lock:
            for fid in [x for x, f in self.st.files.items() if f.get("trashed")]:
                self.st.remove(fid)
        return empty_response(204)

    # -- uploads ---------------------------------------------------------------------------------------------

    def _consume_media(self, req: Request) -> Blob:
        sink = Sink(self.st.spill_path())
        try:
            for piece in req.body.iter():
                sink.write(piece)
        except BaseException:
            sink.abort()
            raise
        return sink.finish()

    def _consume_multipart(self, req: Request) -> tuple[dict[str, Any], Blob, str | None]:
        ctype = req.header("content-type") or ""
        m = re.search(r'boundary="?([^";]+)"?', ctype)
        if not req.content_type.startswith("multipart/") or not m:
            raise HttpError(400, "Content-Type must be multipart/related with a boundary", "badContent")
        parser = MultipartParser(m.group(1))
        sink = Sink(self.st.spill_path())
        meta_buf = bytearray()
        part_no = -1
        media_type: str | None = None
        try:
            for piece in req.body.iter():
                for kind, value in parser.feed(piece):
                    if kind == "part":
                        part_no += 1
                        if part_no == 1 and isinstance(value, dict):
                            media_type = value.get("content-type")
                    elif kind == "data":
                        assert isinstance(value, bytes)
                        if part_no == 0:
                            meta_buf += value
                            if len(meta_buf) > 1 << 20:
                                raise HttpError(400, "Metadata part too large", "badContent")
                        elif part_no == 1:
                            sink.write(value)
        except BaseException:
            sink.abort()
            raise
        if not parser.done or part_no < 1:
            sink.abort()
            raise HttpError(400, "Malformed multipart body", "badContent")
        try:
            meta = json.loads(bytes(meta_buf) or b"{}")
        except ValueError as exc:
            sink.abort()
            raise HttpError(400, "Invalid JSON in the metadata part", "parseError") from exc
        return meta if isinstance(meta, dict) else {}, sink.finish(), media_type

    def upload(self, req: Request, m: re.Match[str]) -> Response:
        utype = req.query.get("uploadType", "media")
        if utype == "resumable":
            if req.query.get("upload_id"):
                return self._resumable_chunk(req)
            return self._resumable_start(req, None)
        if utype == "media":
            blob = self._consume_media(req)
            meta: dict[str, Any] = {"mimeType": req.content_type or "application/octet-stream"}
        elif utype == "multipart":
            meta, blob, media_type = self._consume_multipart(req)
            meta.setdefault("mimeType", (media_type or "application/octet-stream").split(";")[0].strip())
        else:
            raise HttpError(400, f"Invalid uploadType {utype}", "invalidParameter")
        with self.st.lock:
            f = self.st.add_file({k: v for k, v in meta.items() if k != "id"}, blob)
            return self._upload_reply(req, f)

    def _upload_reply(self, req: Request, f: dict[str, Any]) -> Response:
        resp = json_response(apply_fields(copy.deepcopy(f), _fields(req, UPLOAD_FIELDS)), flavor="google")
        resp.headers.append(("X-GUploader-UploadID", "ABPtcPp" + uuid.uuid4().hex))
        return resp

    def update_content(self, req: Request, m: re.Match[str]) -> Response:
        fid = unquote(m.group("id"))
        with self.st.lock:
            self._file(fid)
        utype = req.query.get("uploadType", "media")
        if utype == "resumable":
            if req.query.get("upload_id"):
                return self._resumable_chunk(req)
            return self._resumable_start(req, fid)
        if utype == "media":
            blob = self._consume_media(req)
            meta: dict[str, Any] = {}
        elif utype == "multipart":
            meta, blob, _ = self._consume_multipart(req)
        else:
            raise HttpError(400, f"Invalid uploadType {utype}", "invalidParameter")
        with self.st.lock:
            f = self._file(fid)
            self.st.set_content(fid, blob)
            if meta:
                self._apply_patch(req, f, {k: v for k, v in meta.items() if k in WRITABLE})
            return self._upload_reply(req, f)

    def _resumable_start(self, req: Request, fid: str | None) -> Response:
        meta = req.json_object() if req.body_bytes() else {}
        total_raw = req.header("x-upload-content-length")
        upload_id = "ABPtcPo" + uuid.uuid4().hex + uuid.uuid4().hex[:16]
        with self.st.lock:
            self.st.uploads[upload_id] = {
                "meta": meta,
                "file_id": fid,
                "mime": req.header("x-upload-content-type")
                or meta.get("mimeType")
                or "application/octet-stream",
                "total": int(total_raw) if total_raw and total_raw.isdigit() else None,
                "sink": Sink(self.st.spill_path()),
                "lock": threading.Lock(),
            }
        target = (
            f"/upload/drive/v3/files{'/' + fid if fid else ''}?uploadType=resumable&upload_id={upload_id}"
        )
        host = req.header("host") or req.host
        resp = empty_response(200)
        resp.headers += [("Location", f"https://{host}{target}"), ("X-GUploader-UploadID", upload_id)]
        return resp

    def _resumable_chunk(self, req: Request) -> Response:
        upload_id = req.query["upload_id"]
        with self.st.lock:
            up = self.st.uploads.get(upload_id)
        if up is None:
            raise HttpError(404, "Upload session not found or expired", "notFound")
        crange = req.header("content-range")
        sink: Sink = up["sink"]
        with up["lock"]:
            if crange:
                m = re.fullmatch(r"bytes (?:(\d+)-(\d+)|\*)/(\d+|\*)", crange.strip())
                if not m:
                    raise HttpError(400, f"Invalid Content-Range {crange}", "badContent")
                if m.group(3) != "*":
                    up["total"] = int(m.group(3))
                if m.group(1) is not None and int(m.group(1)) != sink.size:
                    raise HttpError(
                        400, f"Content-Range start {m.group(1)} != received {sink.size}", "badContent"
                    )
            for piece in req.body.iter():
                sink.write(piece)
            total = up["total"] if crange else sink.size
            if total is None or sink.size < total:
                resp = empty_response(308)
                if sink.size:
                    resp.headers.append(("Range", f"bytes=0-{sink.size - 1}"))
                resp.headers.append(("X-GUploader-UploadID", upload_id))
                return resp
            if sink.size > total:
                raise HttpError(400, "Received more bytes than the declared total", "badContent")
            blob = sink.finish()
        with self.st.lock:
            self.st.uploads.pop(upload_id, None)
            if up["file_id"]:
                f = self._file(up["file_id"])
                self.st.set_content(up["file_id"], blob)
            else:
                meta = {k: v for k, v in up["meta"].items() if k != "id"}
                meta.setdefault("mimeType", up["mime"])
                f = self.st.add_file(meta, blob)
            return self._upload_reply(req, f)

    # -- permissions -----------------------------------------------------------------------------------------

    def list_permissions(self, req: Request, m: re.Match[str]) -> Response:
        with self.st.lock:
            f = self._file(unquote(m.group("id")))
            perms = copy.deepcopy(list(self.st.permissions[f["id"]].values()))
        spec = req.query.get("fields")
        tree = (
            parse_fields(spec)
            if spec
            else {"kind": None, "permissions": {k: None for k in PERMISSION_FIELDS}}
        )
        return json_response(
            apply_fields({"kind": "drive#permissionList", "permissions": perms}, tree), flavor="google"
        )

    def create_permission(self, req: Request, m: re.Match[str]) -> Response:
        body = req.json_object()
        role, kind = body.get("role"), body.get("type")
        if role not in ROLES:
            raise HttpError(
                400,
                "The permission role field is required." if not role else f"Invalid role {role}",
                "required" if not role else "invalid",
            )
        if kind not in ("user", "group", "domain", "anyone"):
            raise HttpError(400, "The permission type field is required.", "required")
        who = (
            body.get("emailAddress")
            if kind in ("user", "group")
            else body.get("domain")
            if kind == "domain"
            else ""
        )
        if kind != "anyone" and not who:
            raise HttpError(400, "The permission emailAddress/domain field is required.", "required")
        pid = permission_id(kind, str(who))
        perm: dict[str, Any] = {
            "kind": "drive#permission",
            "id": pid,
            "type": kind,
            "role": role,
            "deleted": False,
            "pendingOwner": False,
        }
        if kind in ("user", "group"):
            perm["emailAddress"] = who
            perm["displayName"] = str(who).split("@")[0].title()
        elif kind == "domain":
            perm["domain"] = who
        elif "allowFileDiscovery" in body:
            perm["allowFileDiscovery"] = bool(body["allowFileDiscovery"])
        with self.st.lock:
            f = self._file(unquote(m.group("id")))
            self.st.permissions[f["id"]][pid] = perm
            f["shared"] = True
            if pid not in f["permissionIds"]:
                f["permissionIds"].append(pid)
            return json_response(
                apply_fields(copy.deepcopy(perm), _fields(req, PERMISSION_FIELDS)), flavor="google"
            )

    def _perm(self, m: re.Match[str]) -> tuple[dict[str, Any], dict[str, Any]]:
        f = self._file(unquote(m.group("id")))
        perm = self.st.permissions[f["id"]].get(unquote(m.group("pid")))
        if perm is None:
            raise HttpError(404, f"Permission not found: {m.group('pid')}.", "notFound")
        return f, perm

    def get_permission(self, req: Request, m: re.Match[str]) -> Response:
        with self.st.lock:
            _, perm = self._perm(m)
            return json_response(
                apply_fields(copy.deepcopy(perm), _fields(req, PERMISSION_FIELDS)), flavor="google"
            )

    def update_permission(self, req: Request, m: re.Match[str]) -> Response:
        body = req.json_object()
        with self.st.lock:
            _, perm = self._perm(m)
            if "role" in body:
                if body["role"] not in ROLES:
                    raise HttpError(400, f"Invalid role {body['role']}", "invalid")
                perm["role"] = body["role"]
            return json_response(
                apply_fields(copy.deepcopy(perm), _fields(req, PERMISSION_FIELDS)), flavor="google"
            )

    def delete_permission(self, req: Request, m: re.Match[str]) -> Response:
        with self.st.lock:
            f, perm = self._perm(m)
            if perm["role"] == "owner":
                raise HttpError(403, "The owner of a file cannot be removed.", "cannotRemoveOwner")
            del self.st.permissions[f["id"]][perm["id"]]
            f["permissionIds"] = [p for p in f["permissionIds"] if p != perm["id"]]
            f["shared"] = len(self.st.permissions[f["id"]]) > 1
        return empty_response(204)


def routes(st: DriveState) -> list[Route]:
    """Drive routes on www.googleapis.com."""
    d = Drive(st)
    files = r"/drive/v3/files"
    fid = r"(?P<id>[^/]+)"
    table = [
        ("GET", files, d.list_files),
        ("POST", files, d.create_metadata),
        ("DELETE", files + r"/trash", d.empty_trash),
        ("GET", files + rf"/{fid}/permissions", d.list_permissions),
        ("POST", files + rf"/{fid}/permissions", d.create_permission),
        ("GET", files + rf"/{fid}/permissions/(?P<pid>[^/]+)", d.get_permission),
        ("PATCH", files + rf"/{fid}/permissions/(?P<pid>[^/]+)", d.update_permission),
        ("DELETE", files + rf"/{fid}/permissions/(?P<pid>[^/]+)", d.delete_permission),
        ("GET HEAD", files + rf"/{fid}", d.get_file),
        ("PATCH", files + rf"/{fid}", d.patch_file),
        ("DELETE", files + rf"/{fid}", d.delete_file),
        ("POST PUT", r"/upload" + files, d.upload),
        ("PATCH PUT", r"/upload" + files + rf"/{fid}", d.update_content),
    ]
    return [route(methods, HOSTS, pattern, handler, "google") for methods, pattern, handler in table]
