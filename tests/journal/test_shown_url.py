"""What a message or log line shows of a URL (journal/shown_url.py): no credential in any of the places a URL
carries one, everything else kept so the user can tell which server is meant."""

from __future__ import annotations

import pytest

from journal.shown_url import display_url

SECRET = "s3cr3t-T0KEN"


@pytest.mark.parametrize(("url", "shown"), [
    (f"postgresql://broker:{SECRET}@db.internal:5432/journal", "postgresql://broker:***@db.internal:5432/journal"),
    ("postgresql://broker@db.internal/journal", "postgresql://broker@db.internal/journal"),
    (f"postgresql://broker@db/journal?sslmode=require&password={SECRET}",
     "postgresql://broker@db/journal?sslmode=require&password=***"),
    (f"https://agent:{SECRET}@otel.example.com/v1/traces", "https://agent:***@otel.example.com/v1/traces"),
    (f"https://{SECRET}@otel.example.com/v1/traces", "https://***@otel.example.com/v1/traces"),
    (f"https://otel.example.com/v1/traces?api_key={SECRET}&tenant=a",
     "https://otel.example.com/v1/traces?api_key=***&tenant=a"),
    (f"https://otel.example.com/v1/traces?X-Amz-Signature={SECRET}", "https://otel.example.com/v1/traces?X-Amz-Signature=***"),
    (f"https://otel.example.com/v1/traces?access_token={SECRET}", "https://otel.example.com/v1/traces?access_token=***"),
    ("http://127.0.0.1:4318/v1/traces", "http://127.0.0.1:4318/v1/traces"),
])
def test_a_credential_is_not_shown_and_the_rest_is(url, shown):
    assert display_url(url) == shown


@pytest.mark.parametrize("url", [
    f"https://agent:{SECRET}@[::1/v1/traces",  # a bracket not closed: not parsed
    f"https://agent:{SECRET}@host:99999/v1/traces",  # a port out of range
    f"https://agent:{SECRET}@host:port/v1/traces?token={SECRET}",
    f"https://host:port/v1/traces?token={SECRET}",
])
def test_a_url_that_does_not_parse_shows_no_credential(url):
    assert SECRET not in display_url(url)
