"""Object keys are names the broker builds: an s3:// URL with `..`, an empty or odd segment, or a blob name
that is not 64 hex digits never becomes a key (no server needed: refused before any request)."""

from __future__ import annotations

import pytest

from journal.store.interface import StoreError
from journal.store.s3_blobs import S3Blobs, parse_s3_url


@pytest.mark.parametrize("url", [
    "s3://bucket/../other", "s3://bucket/a/../../b", "s3://bucket/a//b", "s3://bucket/./a", "s3://Bucket/a",
    "s3://b/a", "s3://bucket/a b", "s3://bucket/a%2F..", "s3://bucket/\u00e9", "s3:///a", "file:///tmp/x",
])
def test_odd_urls_are_refused(url):
    with pytest.raises(StoreError):
        parse_s3_url(url)


def test_a_good_url_gives_bucket_and_prefix():
    assert parse_s3_url("s3://my-bucket") == ("my-bucket", "")
    assert parse_s3_url("s3://my-bucket/team_a/v1.2/") == ("my-bucket", "team_a/v1.2/")


@pytest.mark.parametrize("name", ["../../etc/passwd", "A" * 64, "0" * 63, "0" * 64 + "/x", "", "0" * 63 + "\n"])
def test_a_blob_name_that_is_not_64_hex_is_never_a_key(name):
    blobs = S3Blobs("s3://bucket/p", client=object())  # no request is made: the client is never called
    with pytest.raises(StoreError, match="not a blob name"):
        blobs.key_for(name)
    assert blobs.has_blob(name) is False
    assert "missing" in (blobs.check(name) or "") or "corrupt" in (blobs.check(name) or "")
