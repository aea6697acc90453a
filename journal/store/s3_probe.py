"""`broker store probe s3://BUCKET/PREFIX`: what the bucket really refuses, found by trying it on a canary.

A write-once bucket (S3 Object Lock, compliance mode) is how retention rules are met in the field, but
what a given server enforces is a fact to observe, not a setting to trust: emulators (moto) and some
S3-compatible servers accept a shortened retention or a switch to governance mode that AWS refuses.
Each check writes or changes only canary objects under PREFIX/probe/, and reports what the server did.
A compliance-mode canary cannot be removed before its retention ends (`retain_seconds`): that is the point.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from journal.store.s3_blobs import error_code, parse_s3_url


@dataclass(frozen=True)
class Fact:
    """One observation: `question`, whether the bucket `refused` it (None: not applicable), and what it said."""

    question: str
    refused: bool | None
    detail: str

    def line(self) -> str:
        verdict = {True: "refused", False: "ACCEPTED", None: "n/a"}[self.refused]
        return f"{self.question}: {verdict} ({self.detail})"


def _probe_client() -> Any:
    import os

    import boto3
    from botocore.config import Config

    custom = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return boto3.session.Session().client("s3", config=Config(
        connect_timeout=5, retries={"max_attempts": 2}, s3={"addressing_style": "path"} if custom else {}))


def _attempt(call: Any, **kw: Any) -> tuple[bool, str]:
    """(refused, what the server said)."""
    from botocore.exceptions import ClientError

    try:
        call(**kw)
    except ClientError as exc:
        return True, error_code(exc) or str(exc)
    return False, "the server answered success"


def probe(url: str, *, retain_seconds: int = 60, client: Any = None) -> list[Fact]:
    bucket, prefix = parse_s3_url(url)
    s3 = client if client is not None else _probe_client()
    key = f"{prefix}probe/{uuid.uuid4().hex}"
    facts: list[Fact] = []
    s3.put_object(Bucket=bucket, Key=key, Body=b"canary 1", IfNoneMatch="*")
    refused, said = _attempt(s3.put_object, Bucket=bucket, Key=key, Body=b"canary 2", IfNoneMatch="*")
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    facts.append(Fact("a create-only overwrite (If-None-Match: *) of an existing object",
                      refused and body == b"canary 1",
                      f"{said}; the object holds {body!r}"))
    versioning = s3.get_bucket_versioning(Bucket=bucket).get("Status", "never enabled")
    try:
        lock = s3.get_object_lock_configuration(Bucket=bucket)["ObjectLockConfiguration"]
    except Exception as exc:  # ObjectLockConfigurationNotFoundError, or a server without the call
        lock, why = None, error_code(exc) or str(exc)
    else:
        why = "no configuration"
    if not lock or lock.get("ObjectLockEnabled") != "Enabled":
        for q in ("a delete of a locked version", "a shortened retention", "a switch from compliance to governance"):
            facts.append(Fact(q, None, f"Object Lock is not enabled on {bucket} ({why if not lock else lock}); "
                              f"versioning {versioning}: nothing stops a delete"))
        return facts
    until = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=retain_seconds)

    def locked_canary() -> tuple[str, str]:
        k = f"{prefix}probe/{uuid.uuid4().hex}-locked"
        v = s3.put_object(Bucket=bucket, Key=k, Body=b"locked canary", ObjectLockMode="COMPLIANCE",
                          ObjectLockRetainUntilDate=until, ChecksumAlgorithm="SHA256")["VersionId"]
        return k, v

    locked, version = locked_canary()
    refused, said = _attempt(s3.delete_object, Bucket=bucket, Key=locked, VersionId=version)
    still = _retention(s3, bucket, locked, version)
    facts.append(Fact("a delete of a locked version (compliance mode)", refused and still is not None,
                      f"{said}; the version is {'still there' if still else 'GONE'}"))
    if still is None:
        locked, version = locked_canary()
    refused, said = _attempt(s3.put_object_retention, Bucket=bucket, Key=locked, VersionId=version,
                             Retention={"Mode": "COMPLIANCE", "RetainUntilDate": until - timedelta(seconds=30)},
                             ChecksumAlgorithm="SHA256")
    now = _retention(s3, bucket, locked, version)
    facts.append(Fact("a shortened retention (compliance mode)", refused and now is not None and now[1] >= until,
                      f"{said}; retention now {now[0] + ' until ' + now[1].isoformat() if now else 'gone'}"))
    refused, said = _attempt(s3.put_object_retention, Bucket=bucket, Key=locked, VersionId=version,
                             Retention={"Mode": "GOVERNANCE", "RetainUntilDate": until + timedelta(seconds=30)},
                             ChecksumAlgorithm="SHA256")
    now = _retention(s3, bucket, locked, version)
    facts.append(Fact("a switch from compliance to governance mode", refused and now is not None
                      and now[0] == "COMPLIANCE", f"{said}; mode now {now[0] if now else 'gone'}"))
    return facts


def _retention(s3: Any, bucket: str, key: str, version: str) -> tuple[str, datetime] | None:
    """(mode, retain until) of the version as the server reports it; None when it is gone (or not said)."""
    try:  # HEAD of the version (GetObjectRetention fails outright on moto: 500)
        r = s3.head_object(Bucket=bucket, Key=key, VersionId=version)
    except Exception:  # the version was deleted
        return None
    until = r.get("ObjectLockRetainUntilDate")
    if until is None:
        return str(r.get("ObjectLockMode", "none")), datetime.min.replace(tzinfo=UTC)
    return str(r.get("ObjectLockMode", "none")), until if until.tzinfo else until.replace(tzinfo=UTC)
