"""Blobs in an S3-compatible bucket (`--blobs s3://BUCKET/PREFIX`): the vault's blob layout as object keys.

The entries stay where they are (a file vault or PostgreSQL); only spilled bytes go to the bucket, under
`PREFIX/blobs/sha256/<hh>/<hex>`, the same path an entry's `ref` names. Endpoint, region and credentials
come from the usual AWS variables and files (AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, AWS_REGION,
AWS_ACCESS_KEY_ID, ~/.aws/config ...): boto3 reads them itself.

Why the write goes the way it does (journal/store/README.md, "Durability protocol, S3", step by step):
an object's name is the SHA-256 of its bytes, known only once the last byte passed. A body that fits in
one part (PART bytes) is held in memory, hashed, and PUT under its name with `If-None-Match: *`. A
bigger one streams into a multipart upload under a staging key (`PREFIX/blobs/tmp/<random>`, two parts
in memory at most), and once its hash is known it is copied server-side to its name, again
create-only; the staging object is then deleted. An object already under the name is a dedupe, never an
overwrite (its size is checked: a different size is a forged or broken object, an error). Only when
the final PUT or copy returned does `commit` return the ref the entry will hold.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from journal.blobstore import CHUNK, BlobError, WriterBackedBlobs, blob_ref, hash_chunks, oversize, ref_object
from journal.confine import is_blob_name
from journal.store.interface import StoreError

SCHEME = "s3://"
PART = 8 << 20
"""Bytes per multipart part (S3's minimum is 5 MiB); also the largest body sent as one PUT."""
COPY_PART = 1 << 30
"""Bytes per server-side copy part when a staged blob is bigger than one CopyObject may copy (5 GiB)."""
COPY_MAX = 5 << 30
CHECK_EVERY = 0.25
"""`check_reachable` asks the bucket (HEAD) when nothing was heard from it for this long."""

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_PREFIX_SEGMENT = re.compile(r"[A-Za-z0-9_.-]+")


def is_s3_url(target: object) -> bool:
    return isinstance(target, str) and target.startswith(SCHEME)


def parse_s3_url(url: str) -> tuple[str, str]:
    """(bucket, prefix) of s3://BUCKET[/PREFIX]; the prefix ends with "/" (or is ""). A prefix segment that is
    empty, "." or ".." or holds other than letters, digits, "_", "." and "-" is refused: keys are names
    the broker builds, never paths a reader could walk out of."""
    if not is_s3_url(url):
        raise StoreError(f"{url!r} is not an s3://BUCKET/PREFIX URL")
    bucket, _, prefix = url[len(SCHEME):].partition("/")
    if not _BUCKET.fullmatch(bucket):
        raise StoreError(f"{url!r}: {bucket!r} is not an S3 bucket name (3-63 lowercase letters, digits, '.', '-')")
    prefix = prefix.rstrip("/")
    if prefix:
        for seg in prefix.split("/"):
            if seg in ("", ".", "..") or not _PREFIX_SEGMENT.fullmatch(seg):
                raise StoreError(f"{url!r}: prefix segment {seg!r} is refused (use letters, digits, '_', '.', '-')")
        prefix += "/"
    return bucket, prefix


def s3_client() -> Any:
    """A boto3 S3 client configured from the environment, failing fast: a bucket that is down makes a call
    fail closed within seconds rather than hang (connect 2 s, 2 attempts)."""
    import boto3
    from botocore.config import Config

    custom = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    config = Config(connect_timeout=2, read_timeout=60, retries={"max_attempts": 2, "mode": "standard"},
                    s3={"addressing_style": "path"} if custom else {},
                    request_checksum_calculation="when_required", response_checksum_validation="when_required")
    return boto3.session.Session().client("s3", config=config)


def error_code(exc: BaseException) -> str:
    """The S3 error code of a botocore ClientError ("" for anything else: a connection that failed)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", "")) or str(
            response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
    return ""


def _botocore_errors() -> tuple[type[BaseException], ...]:
    from botocore.exceptions import BotoCoreError, ClientError

    return (BotoCoreError, ClientError)


class S3Blobs(WriterBackedBlobs):
    """The blob sink and source of one bucket prefix (thread-safe: a boto3 client may be shared by threads)."""

    def __init__(self, url: str, *, client: Any = None) -> None:
        self.bucket, self.prefix = parse_s3_url(url)
        self.url = f"{SCHEME}{self.bucket}/{self.prefix}"
        self.client = client if client is not None else s3_client()
        self.errors = _botocore_errors()
        self._heard = 0.0
        self._lock = threading.Lock()

    def key_for(self, digest: str) -> str:
        if not is_blob_name(digest):
            raise StoreError(f"{str(digest)[:80]!r} is not a blob name (64 lowercase hex digits): not resolved")
        return self.prefix + blob_ref(digest)

    def open_writer(self) -> S3BlobWriter:
        return S3BlobWriter(self)

    def size_of(self, digest: str) -> int | None:
        """The stored object's size; None when there is none. StoreError when the bucket cannot say."""
        key = self.key_for(digest)
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=key)
        except self.errors as exc:
            if error_code(exc) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise StoreError(f"blob store {self.url} cannot be read: {exc}") from None
        self._heard = time.monotonic()
        return int(head["ContentLength"])

    def has_blob(self, digest: str) -> bool:
        return is_blob_name(digest) and self.size_of(digest) is not None

    def put_bytes(self, data: bytes) -> dict:
        """As WriterBackedBlobs.put_bytes, but an object already under the name must have this size."""
        digest = hashlib.sha256(data).hexdigest()
        if self.size_of(digest) is not None:
            return self._dedupe(digest, len(data))
        with self.open_writer() as w:
            w.write(data)
            return w.commit()

    def read_blob(self, digest: str) -> Iterator[bytes]:
        """The blob's bytes in chunks, as stored (the caller hashes them when it must: `check`)."""
        key = self.key_for(digest)  # before any request: a name that is no blob name is never sent
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
        except self.errors as exc:
            if error_code(exc) in ("404", "NoSuchKey", "NotFound"):
                raise StoreError(f"blob {digest} is missing from {self.url}") from None
            raise StoreError(f"blob store {self.url} cannot be read: {exc}") from None
        try:
            yield from body.iter_chunks(CHUNK)
        finally:
            body.close()

    def blob_digests(self) -> Iterator[str]:
        """The blob names in the bucket; a key not of the form blobs/sha256/<hh>/<hex> is skipped."""
        base = self.prefix + "blobs/sha256/"
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=base):
            for obj in page.get("Contents", []):
                rest = obj["Key"][len(base):]
                hh, _, name = rest.partition("/")
                if is_blob_name(name) and hh == name[:2]:
                    yield name

    def check(self, digest: str, size: int | None = None) -> str | None:
        """None when the object is there and its bytes hash to its name (and size); else what is wrong (the
        wording of journal/blobstore.py `BlobStore.check`, which journal/verify.py reads)."""
        try:
            got, n = hash_chunks(self.read_blob(digest), size)
        except StoreError as exc:
            return f"blob {digest} is missing" if "missing" in str(exc) else f"blob {digest} is corrupt: {exc}"
        if size is not None and n > size:
            return oversize(digest, size, f" in {self.url}")
        if got != digest:
            return f"blob {digest} is corrupt (its bytes in {self.url} hash to {got})"
        if size is not None and n != size:
            return f"blob {digest} holds {n} bytes in {self.url}, the entry says {size}"
        return None

    def check_reachable(self) -> None:
        """StoreError when the bucket does not answer (HEAD bucket at most every CHECK_EVERY seconds while it
        does): checked before a call goes upstream, so under `block` a call whose body could not be stored
        never reaches the platform."""
        if time.monotonic() - self._heard < CHECK_EVERY:
            return
        with self._lock:
            try:
                self.client.head_bucket(Bucket=self.bucket)
            except self.errors as exc:
                self._heard = 0.0
                raise StoreError(f"blob store {self.url} is unreachable: {exc}") from None
            self._heard = time.monotonic()

    def _dedupe(self, digest: str, size: int) -> dict:
        """The ref for bytes already stored under their name: the stored size must be this size."""
        stored = self.size_of(digest)
        if stored is None:
            raise BlobError(f"blob {digest}: {self.url} refused the create-only write but holds no such object")
        if stored != size:
            raise BlobError(f"blob {digest}: {self.url} already holds an object of {stored} bytes under this name, "
                            f"not {size}: a forged or broken object (run `broker verify --blobs {self.url}`)")
        return ref_object(digest, size)


class S3BlobWriter:
    """One blob streaming up. A full part is uploaded by a thread of its own while the next one fills, so the
    caller (the proxy's stream hook) waits only when the previous part is still on its way: at most two parts
    (2 x PART bytes) in memory, and a body arrives while the one before it goes up."""

    def __init__(self, blobs: S3Blobs) -> None:
        self._s3 = blobs
        self._hash = hashlib.sha256()
        self._buf = bytearray()
        self.size = 0
        self._staging = f"{blobs.prefix}blobs/tmp/{uuid.uuid4().hex}"
        self._upload: str | None = None
        self._parts: list[dict] = []
        self._done = False
        self._sending: threading.Thread | None = None
        self._send_error: BaseException | None = None

    def write(self, chunk: bytes) -> None:
        if not chunk:
            return
        self._hash.update(chunk)
        self.size += len(chunk)
        self._buf += chunk
        while len(self._buf) >= PART:
            self._send_part(bytes(self._buf[:PART]))
            del self._buf[:PART]

    def _send_part(self, data: bytes) -> None:
        """Hand `data` to a thread that uploads it, once the part before it is up (parts go in order)."""
        self._wait_part()
        self._sending = threading.Thread(target=self._upload_part, args=(data,), name="s3-part", daemon=True)
        self._sending.start()

    def _upload_part(self, data: bytes) -> None:
        s3 = self._s3
        try:
            if self._upload is None:
                self._upload = s3.client.create_multipart_upload(Bucket=s3.bucket, Key=self._staging)["UploadId"]
            number = len(self._parts) + 1
            etag = s3.client.upload_part(Bucket=s3.bucket, Key=self._staging, UploadId=self._upload,
                                         PartNumber=number, Body=data)["ETag"]
            self._parts.append({"ETag": etag, "PartNumber": number})
        except BaseException as exc:  # noqa: BLE001 - handed to the writer's thread, raised there
            self._send_error = exc

    def _join(self) -> BaseException | None:
        if self._sending is not None:
            self._sending.join()
            self._sending = None
        error, self._send_error = self._send_error, None
        return error

    def _wait_part(self) -> None:
        """The part in flight is up; BlobError (the upload aborted) when it failed."""
        error = self._join()
        if error is not None:
            self.abort()
            raise BlobError(f"cannot store blob in {self._s3.url}: {error}") from None

    def commit(self) -> dict:
        """Store the blob under its name (create-only); return its ref once the bucket holds it."""
        if self._done:
            raise BlobError("blob already committed or aborted")
        digest, s3 = self._hash.hexdigest(), self._s3
        key = s3.key_for(digest)
        self._wait_part()
        try:
            if self._upload is None:
                self._done = True
                if s3.size_of(digest) is not None:  # a dedupe: nothing is sent
                    return s3._dedupe(digest, self.size)
                return self._put_whole(key, digest)
            if s3.size_of(digest) is not None:  # dedupe: the staged parts are dropped, never completed
                self.abort()
                return s3._dedupe(digest, self.size)
            if self._buf:
                self._send_part(bytes(self._buf))
                self._buf.clear()
                self._wait_part()
            s3.client.complete_multipart_upload(Bucket=s3.bucket, Key=self._staging, UploadId=self._upload,
                                                MultipartUpload={"Parts": self._parts})
            self._done = True
            try:
                return self._copy_staged(key, digest)
            finally:
                self._delete_staging()
        except s3.errors as exc:
            self.abort()
            raise BlobError(f"cannot store blob {digest} in {s3.url}: {exc}") from None
        except StoreError as exc:
            self.abort()
            raise BlobError(str(exc)) from None

    def _put_whole(self, key: str, digest: str) -> dict:
        s3 = self._s3
        try:
            s3.client.put_object(Bucket=s3.bucket, Key=key, Body=bytes(self._buf), IfNoneMatch="*",
                                 ChecksumSHA256=base64.b64encode(bytes.fromhex(digest)).decode())
        except s3.errors as exc:
            if error_code(exc) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                return s3._dedupe(digest, self.size)
            raise
        finally:
            self._buf = bytearray()
        s3._heard = time.monotonic()
        return ref_object(digest, self.size)

    def _copy_staged(self, key: str, digest: str) -> dict:
        """Server-side copy of the completed staging object to the blob's name, create-only."""
        s3 = self._s3
        source = {"Bucket": s3.bucket, "Key": self._staging}
        try:
            if self.size <= COPY_MAX:
                s3.client.copy_object(Bucket=s3.bucket, Key=key, CopySource=source, IfNoneMatch="*")
            else:
                upload = s3.client.create_multipart_upload(Bucket=s3.bucket, Key=key)["UploadId"]
                parts = []
                for number, start in enumerate(range(0, self.size, COPY_PART), 1):
                    stop = min(start + COPY_PART, self.size) - 1
                    r = s3.client.upload_part_copy(Bucket=s3.bucket, Key=key, UploadId=upload, PartNumber=number,
                                                   CopySource=source, CopySourceRange=f"bytes={start}-{stop}")
                    parts.append({"ETag": r["CopyPartResult"]["ETag"], "PartNumber": number})
                s3.client.complete_multipart_upload(Bucket=s3.bucket, Key=key, UploadId=upload,
                                                    MultipartUpload={"Parts": parts}, IfNoneMatch="*")
        except s3.errors as exc:
            if error_code(exc) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                return s3._dedupe(digest, self.size)
            raise
        s3._heard = time.monotonic()
        return ref_object(digest, self.size)

    def _delete_staging(self) -> None:
        try:
            self._s3.client.delete_object(Bucket=self._s3.bucket, Key=self._staging)
        except self._s3.errors:
            pass  # a leftover under blobs/tmp/ is no blob: a lifecycle rule on that prefix removes it

    def abort(self) -> None:
        if self._done:
            return
        self._done = True
        self._buf = bytearray()
        self._join()  # no part goes up after the abort
        if self._upload is not None:
            try:
                self._s3.client.abort_multipart_upload(Bucket=self._s3.bucket, Key=self._staging,
                                                       UploadId=self._upload)
            except self._s3.errors:
                pass  # an incomplete upload is no object: the bucket's AbortIncompleteMultipartUpload rule ends it

    def __enter__(self) -> S3BlobWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
