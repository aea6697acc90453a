"""Tests for journal.redact with the real header, URL and body shapes of Google, Slack, GitHub and Microsoft.

Every credential below is synthetic: the right shape (prefix, alphabet, length), never a live secret.
"""

from __future__ import annotations

import base64
import gzip
import json
import random
import re
from urllib.parse import quote

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from journal import redact
from journal.redact import (
    REDACTED,
    REDACTED_URL,
    StreamingRedactor,
    contains_credential,
    is_token_exchange,
    redact_body,
    redact_headers,
    redact_json_value,
    redact_url,
)


def _b64url_json(obj: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).rstrip(b"=").decode()


def _fake(alphabet: str, n: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(n))


ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
B64URL = ALNUM + "-_"

# Google
GOOGLE_ACCESS = "ya29.a0AfB_byC" + _fake(B64URL, 180, 1) + "0171"
GOOGLE_SA_ACCESS = "ya29.c.b0Aaekm1K" + _fake(B64URL, 60, 2) + "." + _fake(B64URL, 40, 3)
GOOGLE_REFRESH = "1//0gFakeRefCgYIARAAGBASNwF-L9Ir" + _fake(B64URL, 70, 4)
GOOGLE_API_KEY = "AIzaSy" + _fake(B64URL, 33, 5)
GOOGLE_CLIENT_SECRET = "GOCSPX-" + _fake(B64URL, 28, 6)
# Slack
SLACK_BOT = "xoxb-1234567890123-2345678901234-" + _fake(ALNUM, 24, 7)
SLACK_USER = "xoxp-1234567890123-2345678901234-3456789012345-" + _fake("0123456789abcdef", 32, 8)
SLACK_ROTATING = "xoxe.xoxp-1-Mi0yLTEyMzQ1Njc4OTAxMjMt" + _fake(ALNUM, 40, 9)
SLACK_REFRESH = "xoxe-1-My0xLTEyMzQ1Njc4OTAxMjMt" + _fake(ALNUM, 40, 10)
SLACK_APP = "xapp-1-A0123456789-1234567890123-" + _fake("0123456789abcdef", 64, 11)
SLACK_WEBHOOK = "https://hooks.slack.com/services/T0123ABCD/B0456EFGH/" + _fake(ALNUM, 24, 12)
# GitHub
GITHUB_CLASSIC = "ghp_" + _fake(ALNUM, 36, 13)
GITHUB_INSTALLATION = "ghs_" + _fake(ALNUM, 36, 14)
GITHUB_OAUTH = "gho_" + _fake(ALNUM, 36, 15)
GITHUB_FINE = "github_pat_11ABCDEFG0" + _fake(ALNUM, 12, 16) + "_" + _fake(ALNUM, 59, 17)
# Microsoft: an Entra ID access token for Graph (RS256 JWT), a subscription key, a SAS signature
MS_JWT = ".".join(
    (
        _b64url_json({"typ": "JWT", "nonce": "fakeNonce", "alg": "RS256", "x5t": "fakeX5t", "kid": "k"}),
        _b64url_json(
            {
                "aud": "https://graph.microsoft.com",
                "iss": "https://sts.windows.net/00000000-0000-0000-0000-000000000000/",
                "iat": 1712345678,
                "exp": 1712349278,
                "scp": "Mail.ReadWrite Calendars.ReadWrite Files.ReadWrite",
                "upn": "agent@contoso.com",
            }
        ),
        _fake(B64URL, 342, 18),
    )
)
JWT_HS256 = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2"
    "MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
MS_SUBSCRIPTION_KEY = _fake("0123456789abcdef", 32, 19)
SAS_SIG = "AbCdEf%2BGhIjKlMnOpQrStUvWxYz0123456789%2Fab%3D"
PEM_KEY = (
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"
    + _fake(ALNUM + "+/", 64, 20)
    + "\n"
    + _fake(ALNUM + "+/", 64, 21)
    + "==\n-----END PRIVATE KEY-----\n"
)

DISCORD_WEBHOOK = "https://discord.com/api/webhooks/1234567890123456789/" + _fake(B64URL, 68, 90)
TEAMS_WEBHOOK = (
    "https://contoso.webhook.office.com/webhookb2/1f0e2d3c-4b5a-6978-8796-a5b4c3d2e1f0@9a8b7c6d-5e4f-3a2b-1c0d"
    "-e9f8a7b6c5d4/IncomingWebhook/" + _fake("0123456789abcdef", 32, 91) + "/0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d"
)

TOKENS = [
    GOOGLE_ACCESS, GOOGLE_SA_ACCESS, GOOGLE_REFRESH, GOOGLE_API_KEY, GOOGLE_CLIENT_SECRET,
    SLACK_BOT, SLACK_USER, SLACK_ROTATING, SLACK_REFRESH, SLACK_APP, SLACK_WEBHOOK, DISCORD_WEBHOOK, TEAMS_WEBHOOK,
    GITHUB_CLASSIC, GITHUB_INSTALLATION, GITHUB_OAUTH, GITHUB_FINE, MS_JWT, JWT_HS256,
    "Bearer " + MS_JWT, "bearer " + _fake(ALNUM, 40, 22),
]  # fmt: skip

RU = REDACTED_URL


def _ids(values: list) -> list[str]:
    return [str(i) for i in range(len(values))]


def _urls(cases: list) -> list[str]:
    return [f"{i}-{c[1][:60]}" for i, c in enumerate(cases)]


# ---------------------------------------------------------------------------------------------
# Value patterns
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("token", TOKENS)
def test_every_token_shape_is_a_credential(token: str) -> None:
    assert contains_credential(token)
    assert contains_credential(token.encode())
    for ct in (None, "application/json", "text/plain", "application/octet-stream", "image/png"):
        assert redact_body(token.encode(), ct) != token.encode()
        assert not contains_credential(redact_body(token.encode(), ct))


def _random_base64(n: int, seed: int, urlsafe: bool = False, wrap: bool = False) -> bytes:
    data = random.Random(seed).randbytes(n)
    enc = base64.urlsafe_b64encode(data) if urlsafe else base64.b64encode(data)
    if wrap:  # MIME: lines of 76 characters
        enc = b"\r\n".join(enc[i : i + 76] for i in range(0, len(enc), 76))
    return enc


NOT_CREDENTIALS = [
    "18c2f1a3b4d5e6f7",  # Gmail message id
    "1aBcD_eFgHiJkLmNoPqRsTuVwXyZ012345678",  # Drive file id
    "AAMkAGI2TG93AAA=",  # Graph message id
    "1712345678.123456",  # Slack ts
    "C0123456789",  # Slack channel
    "e0d123e5f316bef78bfdf5a008837577e0d123e5",  # git sha
    "I_kwDOABCD5c5xYzAb",  # GitHub node id
    "CiAKGjBpNDd2Nmp2Zml2cXRwYjBpOXA0ZjM5ZmoSAggB",  # Calendar nextPageToken
    "~!!~AI9FV7Qx" + "a" * 40,  # Drive nextPageToken
    "eyJsYXN0X2lkIjoxMjM0NTY3ODl9",  # base64 JSON cursor (no dots)
    "dXNlcjpVMDYxTkZUVDI=",  # Slack next_cursor
    "The bearer of bad news arrived with 2 letters.",
    "Bearer token rotation is documented in section 12.",
    "xoxo-gossip-girl-forever",
    "see hooks.slack.com for details",
    "ya29 is the prefix of Google access tokens",
    "AIza is the prefix of Google API keys",
    "ghp_ is the prefix of GitHub classic PATs",
    "eyJhbGciOiJIUzI1NiJ9 alone is only a JWT header",
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END PUBLIC KEY-----",
    "https://www.googleapis.com/drive/v3/files?pageToken=abc&fields=nextPageToken",
]


@pytest.mark.parametrize("text", NOT_CREDENTIALS)
def test_ordinary_values_are_not_credentials(text: str) -> None:
    assert not contains_credential(text)
    for ct in (None, "application/json", "text/plain"):
        assert redact_body(text.encode(), ct) == text.encode()


@pytest.mark.parametrize(
    "data",
    [
        _random_base64(300_000, 1),
        _random_base64(300_000, 2, urlsafe=True),
        _random_base64(300_000, 3, wrap=True),
        _random_base64(300_000, 4, urlsafe=True, wrap=True),
    ],
    ids=["std", "urlsafe", "mime", "urlsafe-wrapped"],
)
def test_base64_attachment_data_is_left_alone(data: bytes) -> None:
    """Gmail `raw`/`data`, Graph `contentBytes`, GitHub `content`: no pattern may eat into them."""
    assert not contains_credential(data)
    body = b'{"id":"18c2f1a3b4d5e6f7","data":"' + data + b'"}'
    for ct in ("application/json", "text/plain", None, "application/octet-stream"):
        assert redact_body(body, ct) == body
    mime = b"--b1\r\nContent-Type: image/png\r\nContent-Transfer-Encoding: base64\r\n\r\n"
    mime += data + b"\r\n--b1--"
    assert redact_body(mime, "multipart/mixed; boundary=b1") == mime


def test_random_binary_is_left_alone() -> None:
    data = random.Random(7).randbytes(2_000_000)
    assert redact_body(data, "application/octet-stream") == data
    assert redact_body(data, "image/jpeg") == data


# ---------------------------------------------------------------------------------------------
# Headers
# ---------------------------------------------------------------------------------------------

CREDENTIAL_HEADERS = [
    ("Authorization", f"Bearer {GOOGLE_ACCESS}"),
    ("authorization", f"Bearer {MS_JWT}"),
    ("Authorization", f"token {GITHUB_CLASSIC}"),
    ("Authorization", f"Bearer {SLACK_BOT}"),
    ("Authorization", "Basic dXNlcjpwYXNzd29yZA=="),
    ("Proxy-Authorization", "Basic bWNwLXNlc3MtNzp4"),
    ("Cookie", "d=xoxd-abc%2Bdef; d-s=1712345678; lc=1712345678"),
    ("Set-Cookie", "__Host-GAPS=1:AbCdEf; Path=/; Expires=Fri, 01 Jan 2027 00:00:00 GMT; Secure; HttpOnly"),
    ("x-goog-api-key", GOOGLE_API_KEY),
    ("X-Goog-Iam-Authorization-Token", GOOGLE_ACCESS),
    ("X-Api-Key", "abc123"),
    ("Api-Key", "abc123"),
    ("X-Auth-Token", "abc123"),
    ("X-Access-Token", "abc123"),
    ("X-Refresh-Token", "abc123"),
    ("X-CSRF-Token", "abc123"),
    ("X-XSRF-TOKEN", "abc123"),
    ("X-GitHub-OTP", "123456"),
    ("X-Amz-Security-Token", "FwoGZXIvYXdzEBYaDFakeSessionToken"),
    ("Ocp-Apim-Subscription-Key", MS_SUBSCRIPTION_KEY),
    ("PRIVATE-TOKEN", "glpat-abcdefghijklmnopqrst"),
    ("X-Hub-Signature", "sha1=" + _fake("0123456789abcdef", 40, 30)),
    ("X-Hub-Signature-256", "sha256=" + _fake("0123456789abcdef", 64, 31)),
    ("X-Slack-Signature", "v0=" + _fake("0123456789abcdef", 64, 32)),
    ("X-GUploader-UploadID", "ADPycdv" + _fake(B64URL, 60, 33)),
    # catch-all name pattern
    ("WWW-Authenticate", 'Bearer realm="", error="invalid_token"'),
    ("X-OAuth-Scopes", "repo, read:org"),
    ("Mcp-Session-Id", "4f1c2a9e-session"),
    ("X-My-Secret", "s"),
    ("X-Client-Credential", "c"),
    ("X-Apikey", "k"),
    ("X-Password", "p"),
    # value pattern in an innocent-looking header
    ("X-Debug", f"token={SLACK_BOT}"),
    ("X-Forwarded-Authz", f"Bearer {JWT_HS256}"),
    ("X-Note", GITHUB_FINE),
    ("Refresh", f"0; url=https://x.example/?next={GOOGLE_API_KEY}"),
]


@pytest.mark.parametrize(("name", "value"), CREDENTIAL_HEADERS, ids=[h[0] for h in CREDENTIAL_HEADERS])
def test_credential_headers_lose_their_value(name: str, value: str) -> None:
    assert redact_headers([(name, value)]) == [[name, REDACTED]]


PLAIN_HEADERS = [
    ("Content-Type", "application/json; charset=UTF-8"),
    ("X-Request-Id", "3f2b9c1e-7d4a-4e0b-9a51-0c8d6e2f1a3b"),
    ("X-GitHub-Request-Id", "CA1E:2B3F:1C2D3E4:1D2E3F4:66112233"),
    ("X-Slack-Req-Id", "a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6"),
    ("X-Slack-Request-Timestamp", "1531420618"),
    ("request-id", "00000000-0000-0000-0000-000000000000"),
    ("client-request-id", "11111111-1111-1111-1111-111111111111"),
    ("X-RateLimit-Remaining", "4999"),
    ("ETag", 'W/"a1b2c3"'),
    ("Date", "Mon, 01 Jan 2026 00:00:00 GMT"),
    ("User-Agent", "google-api-python-client/2.202.0 gdcl/2.202.0 gl-python/3.12.1"),
    ("X-Goog-Upload-Status", "active"),
    ("X-Goog-Upload-Protocol", "resumable"),
    ("Content-Range", "bytes 0-524287/2000000"),
    ("Link", '<https://api.github.com/repositories/1/issues?page=2>; rel="next", '
             '<https://api.github.com/repositories/1/issues?page=5>; rel="last"'),
    ("Location", "https://www.googleapis.com/drive/v3/files/1aBcD_eFgHiJkLmNoPqRsTuVwXyZ012345678"),
    ("Location", "/v1.0/me/messages/AAMkAGI2TG93AAA="),
    ("Accept", "application/vnd.github+json"),
    ("X-GitHub-Api-Version", "2022-11-28"),
    ("X-HTTP-Method-Override", "PATCH"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "value"), PLAIN_HEADERS, ids=[h[0] for h in PLAIN_HEADERS])
def test_plain_headers_stay_byte_for_byte(name: str, value: str) -> None:
    assert redact_headers([(name, value)]) == [[name, value]]


LOCATION_CASES = [
    # Google resumable upload session URI (Drive, Gmail): upload_id is the capability
    ("Location",
     "https://www.googleapis.com/upload/drive/v3/files?uploadType=resumable&upload_id=ADPycdv"
     + _fake(B64URL, 60, 40),
     f"https://www.googleapis.com/upload/drive/v3/files?uploadType=resumable&upload_id={RU}"),
    ("X-Goog-Upload-URL",
     "https://www.googleapis.com/upload/gmail/v1/users/me/messages/send?upload_id=ADPyc123&upload_protocol=resumable",
     f"https://www.googleapis.com/upload/gmail/v1/users/me/messages/send?upload_id={RU}&upload_protocol=resumable"),
    # GitHub release asset / archive redirects to pre-signed storage
    ("Location",
     "https://objects.githubusercontent.com/github-production-release-asset/1/2?X-Amz-Algorithm=AWS4-HMAC-SHA256"
     "&X-Amz-Credential=AKIAFAKE%2F20260101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20260101T000000Z"
     "&X-Amz-Expires=300&X-Amz-Signature=" + _fake("0123456789abcdef", 64, 41) + "&X-Amz-SignedHeaders=host",
     "https://objects.githubusercontent.com/github-production-release-asset/1/2?X-Amz-Algorithm=AWS4-HMAC-SHA256"
     f"&X-Amz-Credential={RU}&X-Amz-Date=20260101T000000Z&X-Amz-Expires=300&X-Amz-Signature={RU}"
     "&X-Amz-SignedHeaders=host"),
    ("Location",
     "https://codeload.github.com/o/r/legacy.zip/refs/heads/main?token=AABCDEFGHIJKLMNOPQRSTUVWXYZ234567",
     f"https://codeload.github.com/o/r/legacy.zip/refs/heads/main?token={RU}"),
    # OneDrive / SharePoint pre-authenticated download, Azure blob SAS
    ("Location",
     "https://contoso-my.sharepoint.com/personal/u/_layouts/15/download.aspx?UniqueId=1234&Translate=false"
     f"&tempauth=v1.{JWT_HS256}&ApiVersion=2.0",
     "https://contoso-my.sharepoint.com/personal/u/_layouts/15/download.aspx?UniqueId=1234&Translate=false"
     f"&tempauth={RU}&ApiVersion=2.0"),
    ("Location",
     f"https://acct.blob.core.windows.net/c/b.txt?sv=2022-11-02&sp=r&se=2026-01-01T00%3A00%3A00Z&sig={SAS_SIG}",
     f"https://acct.blob.core.windows.net/c/b.txt?sv=2022-11-02&sp=r&se=2026-01-01T00%3A00%3A00Z&sig={RU}"),
    ("Location", SLACK_WEBHOOK, f"https://hooks.slack.com/services/{RU}"),
    # an OAuth redirect back to the app carries the authorization code
    ("Location", "https://app.example.com/callback?state=xyz&code=4/0AX4XfWh" + _fake(B64URL, 40, 42),
     f"https://app.example.com/callback?state=xyz&code={RU}"),
    ("Link", f'<https://api.github.com/repos/o/r/issues?page=2&access_token={GITHUB_OAUTH}>; rel="next"',
     f'<https://api.github.com/repos/o/r/issues?page=2&access_token={RU}>; rel="next"'),
]  # fmt: skip


@pytest.mark.parametrize(("name", "value", "expected"), LOCATION_CASES, ids=_ids(LOCATION_CASES))
def test_capability_urls_in_headers(name: str, value: str, expected: str) -> None:
    assert redact_headers([(name, value)]) == [[name, expected]]


def test_redact_headers_keeps_order_names_and_duplicates() -> None:
    headers = [
        ("Host", "gmail.googleapis.com"),
        ("Authorization", f"Bearer {GOOGLE_ACCESS}"),
        ("Set-Cookie", "a=1"),
        ("Set-Cookie", "b=2"),
        ("content-type", "application/json"),
        ("X-Goog-Api-Key", GOOGLE_API_KEY),
    ]
    assert redact_headers(headers) == [
        ["Host", "gmail.googleapis.com"],
        ["Authorization", REDACTED],
        ["Set-Cookie", REDACTED],
        ["Set-Cookie", REDACTED],
        ["content-type", "application/json"],
        ["X-Goog-Api-Key", REDACTED],
    ]
    assert redact_headers(iter(headers)) == redact_headers(headers)  # any iterable
    assert redact_headers([]) == []


# ---------------------------------------------------------------------------------------------
# URLs
# ---------------------------------------------------------------------------------------------

URL_CASES = [
    # Google: key / access_token / oauth_token are global parameters; pageToken, syncToken are cursors
    (f"https://gmail.googleapis.com/gmail/v1/users/me/messages?key={GOOGLE_API_KEY}&pageToken=09876543210&maxResults=10",
     f"https://gmail.googleapis.com/gmail/v1/users/me/messages?key={RU}&pageToken=09876543210&maxResults=10"),
    (f"https://www.googleapis.com/calendar/v3/calendars/primary/events?syncToken=CPDAlvWDx70CEPDAlvWDx70CGAU%3D"
     f"&access_token={GOOGLE_ACCESS}",
     f"https://www.googleapis.com/calendar/v3/calendars/primary/events?syncToken=CPDAlvWDx70CEPDAlvWDx70CGAU%3D"
     f"&access_token={RU}"),
    (f"https://www.googleapis.com/drive/v3/files?oauth_token={GOOGLE_ACCESS}&fields=nextPageToken%2Cfiles(id%2Cname)",
     f"https://www.googleapis.com/drive/v3/files?oauth_token={RU}&fields=nextPageToken%2Cfiles(id%2Cname)"),
    (f"https://www.googleapis.com/drive/v3/files?KEY={GOOGLE_API_KEY}", f"https://www.googleapis.com/drive/v3/files?KEY={RU}"),
    # Slack: token= on the query; cursor is pagination
    (f"https://slack.com/api/conversations.history?token={SLACK_USER}&channel=C0123&cursor=dXNlcjpVMDYxTkZUVDI%3D",
     f"https://slack.com/api/conversations.history?token={RU}&channel=C0123&cursor=dXNlcjpVMDYxTkZUVDI%3D"),
    (SLACK_WEBHOOK, f"https://hooks.slack.com/services/{RU}"),
    ("https://hooks.slack.com/actions/T0123ABCD/1234567890123/" + _fake(ALNUM, 24, 50),
     f"https://hooks.slack.com/actions/{RU}"),
    ("https://files.slack.com/files-pri/T0123-F0456/report.pdf?pub_secret=abc123def",
     f"https://files.slack.com/files-pri/T0123-F0456/report.pdf?pub_secret={RU}"),
    ("wss://wss-primary.slack.com/link/?ticket=12345678-1234-1234-1234-123456789012&app_id=A0123",
     f"wss://wss-primary.slack.com/link/?ticket={RU}&app_id=A0123"),
    # GitHub: raw URLs with token=, userinfo in clone URLs
    ("https://raw.githubusercontent.com/o/r/main/README.md?token=GHSAT0AAAAAACFAKEFAKEFAKEFAKEFAKE",
     f"https://raw.githubusercontent.com/o/r/main/README.md?token={RU}"),
    (f"https://x-access-token:{GITHUB_INSTALLATION}@github.com/o/r.git", "https://github.com/o/r.git"),
    ("https://user:pa%40ss@example.com:8443/p?q=1", "https://example.com:8443/p?q=1"),
    # Microsoft: SAS sig, tempauth, Graph skiptoken/deltatoken (cursors) stay
    (f"https://acct.blob.core.windows.net/c/b?sv=2022-11-02&ss=b&srt=o&sp=r&se=2026-01-01&sig={SAS_SIG}",
     f"https://acct.blob.core.windows.net/c/b?sv=2022-11-02&ss=b&srt=o&sp=r&se=2026-01-01&sig={RU}"),
    ("https://graph.microsoft.com/v1.0/me/messages?$top=10&$skiptoken=X%274453707402000100%27",
     "https://graph.microsoft.com/v1.0/me/messages?$top=10&$skiptoken=X%274453707402000100%27"),
    ("https://graph.microsoft.com/v1.0/me/calendarView/delta?$deltatoken=R0usmcCM996atia_s",
     "https://graph.microsoft.com/v1.0/me/calendarView/delta?$deltatoken=R0usmcCM996atia_s"),
    # signed storage URLs
    ("https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential=sa%40p.iam"
     "&X-Goog-Date=20260101T000000Z&X-Goog-Signature=0a1b2c",
     f"https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential={RU}"
     f"&X-Goog-Date=20260101T000000Z&X-Goog-Signature={RU}"),
    # OAuth redirect (query and implicit-flow fragment)
    ("https://app.example.com/cb?code=4%2F0AX4XfWh&state=abc&scope=email",
     f"https://app.example.com/cb?code={RU}&state=abc&scope=email"),
    (f"https://app.example.com/cb#access_token={GOOGLE_ACCESS}&token_type=Bearer&expires_in=3599",
     f"https://app.example.com/cb#access_token={RU}&token_type=Bearer&expires_in=3599"),
    ("https://example.com/login?user=bob&password=hunter2&Client_Secret=s&api-key=k&apiKey=k2",
     f"https://example.com/login?user=bob&password={RU}&Client_Secret={RU}&api-key={RU}&apiKey={RU}"),
    # any parameter whose value is a credential, a credential in the path
    (f"https://example.com/r?state={SLACK_BOT}&x=1", f"https://example.com/r?state={RU}&x=1"),
    (f"https://example.com/r?next=Bearer%20{JWT_HS256}", f"https://example.com/r?next={RU}"),
    (f"https://example.com/hooks/{GITHUB_CLASSIC}/run?x=1", f"https://example.com/hooks/{RU}/run?x=1"),
    # empty / odd shapes survive byte for byte
    ("https://example.com/p?a=1&&b&c=&token=", f"https://example.com/p?a=1&&b&c=&token={RU}"),
    ("https://example.com/p?", "https://example.com/p?"),
    ("/relative/path?key=abc#frag", f"/relative/path?key={RU}#frag"),
    ("https://www.googleapis.com/drive/v3/files?q=name%20contains%20%27token%27&orderBy=modifiedTime%20desc",
     "https://www.googleapis.com/drive/v3/files?q=name%20contains%20%27token%27&orderBy=modifiedTime%20desc"),
]  # fmt: skip


@pytest.mark.parametrize(("url", "expected"), URL_CASES, ids=_ids(URL_CASES))
def test_redact_url(url: str, expected: str) -> None:
    assert redact_url(url) == expected
    assert redact_url(expected) == expected  # stable


ORDINARY_URLS = [
    "https://gmail.googleapis.com/gmail/v1/users/me/messages?q=is%3Aunread&maxResults=50&pageToken=12345",
    "https://www.googleapis.com/calendar/v3/calendars/alice%40example.com/events?timeMin=2026-01-01T00:00:00Z",
    "https://www.googleapis.com/upload/drive/v3/files?uploadType=multipart&supportsAllDrives=true",
    "https://slack.com/api/chat.postMessage",
    "https://api.github.com/repos/octo/hello/issues?state=open&per_page=100&page=2",
    "https://graph.microsoft.com/v1.0/me/messages?$select=subject,from&$filter=isRead%20eq%20false",
    "https://example.com/a;b=c/d?e=f+g&h=%20#section-2",
]


@pytest.mark.parametrize("url", ORDINARY_URLS)
def test_ordinary_urls_are_unchanged(url: str) -> None:
    assert redact_url(url) == url


_param_names = st.from_regex(r"[A-Za-z$_][A-Za-z0-9_.\-]{0,15}", fullmatch=True)
_param_values = st.from_regex(r"[A-Za-z0-9%._~:,'()*\-]{0,30}", fullmatch=True)


@settings(max_examples=300, deadline=None)
@given(
    host=st.from_regex(r"[a-z0-9]{1,10}(\.[a-z0-9]{1,10}){1,3}", fullmatch=True),
    path=st.from_regex(r"(/[A-Za-z0-9._~%\-]{0,12}){0,5}", fullmatch=True),
    params=st.lists(st.tuples(_param_names, _param_values), max_size=8),
    secret=st.sampled_from(["key", "access_token", "Token", "client_secret", "sig", "X-Amz-Signature"]),
    where=st.integers(0, 8),
)
def test_url_property(host: str, path: str, params: list[tuple[str, str]], secret: str, where: int) -> None:
    """Only credential parameters change; every other byte (order, encoding, empty values) stays."""
    plain = [(n, v) for n, v in params if not redact._url_name_re().fullmatch(n)]
    query = "&".join(f"{n}={v}" for n, v in plain)
    url = f"https://{host}{path}?{query}"
    assume(not contains_credential(url))
    assert redact_url(url) == url
    with_secret = [*plain]
    with_secret.insert(min(where, len(plain)), (secret, "s3cr3t-value"))
    url2 = f"https://{host}{path}?" + "&".join(f"{n}={v}" for n, v in with_secret)
    expected = f"https://{host}{path}?" + "&".join(
        f"{n}={RU if n == secret else v}" for n, v in with_secret
    )
    assert redact_url(url2) == expected


# ---------------------------------------------------------------------------------------------
# Bodies
# ---------------------------------------------------------------------------------------------

BOUNDARY = "----WebKitFormBoundary7MA4YWxkTrZu0gW"
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + random.Random(60).randbytes(3000) + b"IEND\xaeB`\x82"
SLACK_UPLOAD = (
    f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="token"\r\n\r\n{SLACK_BOT}\r\n'
    f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="channels"\r\n\r\nC0123\r\n'
    f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="chart.png"\r\n'
    "Content-Type: image/png\r\n\r\n"
).encode() + PNG + f"\r\n--{BOUNDARY}--\r\n".encode()
SLACK_UPLOAD_REDACTED = (
    f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="token"\r\n\r\n{REDACTED}\r\n'
    f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="channels"\r\n\r\nC0123\r\n'
    f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="chart.png"\r\n'
    "Content-Type: image/png\r\n\r\n"
).encode() + PNG + f"\r\n--{BOUNDARY}--\r\n".encode()

DRIVE_MULTIPART = (
    b"--foo_bar_baz\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n"
    b'{"name": "report.pdf", "parents": ["1aBcD_eFgHiJkLmNoPqRsTuVwXyZ012345678"]}\r\n'
    b"--foo_bar_baz\r\nContent-Type: application/pdf\r\n\r\n%PDF-1.7\n" + random.Random(61).randbytes(2000)
    + b"\r\n--foo_bar_baz--"
)  # fmt: skip

GOOGLE_BATCH = (
    "--batch_foobarbaz\r\nContent-Type: application/http\r\nContent-ID: <item1>\r\n\r\n"
    "GET /gmail/v1/users/me/messages/18c2f1a3b4d5e6f7?format=metadata\r\n"
    f"Authorization: Bearer {GOOGLE_ACCESS}\r\n\r\n--batch_foobarbaz--"
)

BODY_CASES = [
    # --- Google
    ("application/json", '{"raw": "RnJvbTogYWxpY2VAZXhhbXBsZS5jb20NClN1YmplY3Q6IGhpDQoNCmhlbGxv"}', None),
    ("application/json",
     f'{{"credentials": {{"access_token": "{GOOGLE_ACCESS}", "expiry": 3599,'
     f' "refresh_token": "{GOOGLE_REFRESH}"}}}}',
     f'{{"credentials": {{"access_token": "{REDACTED}", "expiry": 3599, "refresh_token": "{REDACTED}"}}}}'),
    ("application/json",
     '{"kind": "drive#fileList", "nextPageToken": "~!!~AI9FV7QxYz", "incompleteSearch": false,'
     ' "files": []}', None),
    ("application/json",
     '{"items": [], "nextSyncToken": "CPDAlvWDx70CEPDAlvWDx70CGAU=", "nextPageToken": "x"}', None),
    ("application/json",
     '{"error": {"code": 401, "message": "Request had invalid authentication credentials.",'
     ' "status": "UNAUTHENTICATED"}}', None),
    ("multipart/mixed; boundary=batch_foobarbaz", GOOGLE_BATCH,
     GOOGLE_BATCH.replace(GOOGLE_ACCESS, REDACTED)),
    ("multipart/related; boundary=foo_bar_baz", DRIVE_MULTIPART, None),
    ("application/json",
     f'{{"type": "service_account", "private_key_id": "abc123", "private_key": {json.dumps(PEM_KEY)},'
     ' "client_email": "sa@p.iam.gserviceaccount.com", "client_id": "123"}',
     f'{{"type": "service_account", "private_key_id": "abc123", "private_key": "{REDACTED}",'
     ' "client_email": "sa@p.iam.gserviceaccount.com", "client_id": "123"}'),
    ("text/plain", f"key:\n{PEM_KEY}",
     f"key:\n-----BEGIN PRIVATE KEY-----{REDACTED}-----END PRIVATE KEY-----\n"),
    # --- Slack
    ("application/x-www-form-urlencoded", f"token={SLACK_BOT}&channel=C0123&text=Hello%20world",
     f"token={RU}&channel=C0123&text=Hello%20world"),
    ("application/x-www-form-urlencoded; charset=utf-8",
     f"channel=C0123&text=see+Bearer+{JWT_HS256}&token={SLACK_USER}&as_user=true",
     f"channel=C0123&text=see+Bearer+{RU}&token={RU}&as_user=true"),
    ("application/x-www-form-urlencoded", "client_id=123.456&client_secret=abcdef&code=123.456.abc",
     f"client_id=123.456&client_secret={RU}&code={RU}"),
    ("application/json; charset=utf-8",
     '{"channel": "C0123", "text": "Deploy done :rocket:", "blocks": [{"type": "section",'
     ' "text": {"type": "mrkdwn", "text": "*done*"}}]}', None),
    (f"multipart/form-data; boundary={BOUNDARY}", SLACK_UPLOAD, SLACK_UPLOAD_REDACTED),
    ("application/json",
     f'{{"ok": true, "response_metadata": {{"next_cursor": "dXNlcjpVMDYxTkZUVDI="}},'
     f' "url": "{SLACK_WEBHOOK}"}}',
     f'{{"ok": true, "response_metadata": {{"next_cursor": "dXNlcjpVMDYxTkZUVDI="}},'
     f' "url": "https://hooks.slack.com/services/{REDACTED}"}}'),
    ("application/json",
     '{"response_url": "https:\\/\\/hooks.slack.com\\/actions\\/T0\\/1\\/abcdefABCDEF0123456789xy"}',
     f'{{"response_url": "{REDACTED}"}}'),
    ("application/json",
     '{"text": "post to https:\\/\\/hooks.slack.com\\/services\\/T0\\/B0\\/abcdefABCDEF0123456789xy"}',
     f'{{"text": "post to https:\\/\\/hooks.slack.com\\/services\\/{REDACTED}"}}'),
    # --- GitHub
    ("application/json",
     '{"title": "Found a bug", "body": "Steps:\\n1. run `make`\\n2. see error", "labels": ["bug"]}', None),
    ("application/json", f'{{"body": "my token is {GITHUB_CLASSIC}, oops"}}',
     f'{{"body": "my token is {REDACTED}, oops"}}'),
    ("application/json", f'{{"token": "{GITHUB_INSTALLATION}", "expires_at": "2026-01-01T00:00:00Z"}}',
     f'{{"token": "{REDACTED}", "expires_at": "2026-01-01T00:00:00Z"}}'),
    ("application/json", '{"sha": "e0d123e5f316bef78bfdf5a008837577e0d123e5", "content": "SGVsbG8=",'
                         ' "encoding": "base64", "license": {"key": "mit"}}', None),
    ("application/json", '{"download_url": "https://raw.githubusercontent.com/o/r/main/f?token=AABCDEFG"}',
     f'{{"download_url": "https://raw.githubusercontent.com/o/r/main/f?token={RU}"}}'),
    ("application/json",
     '{"errors": [{"resource": "Issue", "field": "title", "code": "missing_field"}]}', None),
    ("text/plain", f"export GH_TOKEN={GITHUB_FINE}\n", f"export GH_TOKEN={REDACTED}\n"),
    # --- Microsoft
    ("application/json",
     f'{{"requests": [{{"id": "1", "method": "GET", "url": "/me/messages",'
     f' "headers": {{"Authorization": "Bearer {MS_JWT}", "ConsistencyLevel": "eventual"}}}}]}}',
     f'{{"requests": [{{"id": "1", "method": "GET", "url": "/me/messages",'
     f' "headers": {{"Authorization": "{REDACTED}", "ConsistencyLevel": "eventual"}}}}]}}'),
    ("application/json",
     f'{{"uploadUrl": "https://contoso-my.sharepoint.com/_api/v2.0/drive/items/01X/uploadSession?guid=abc'
     f'&tempauth={JWT_HS256}", "expirationDateTime": "2026-01-01T00:00:00Z"}}',
     f'{{"uploadUrl": "{REDACTED}", "expirationDateTime": "2026-01-01T00:00:00Z"}}'),
    ("application/json",
     '{"id": "01ABC", "name": "a.docx", "@microsoft.graph.downloadUrl": "https://public.dm.files.1drv.com/y4mXyz"}',
     f'{{"id": "01ABC", "name": "a.docx", "@microsoft.graph.downloadUrl": "{REDACTED}"}}'),
    ("application/json",
     '{"error": {"code": "InvalidAuthenticationToken", "message": "Access token has expired."}}', None),
    ("application/json",
     '{"subject": "Lunch?", "body": {"contentType": "html", "content": "<p>Noon?</p>"},'
     ' "@odata.nextLink": "https://graph.microsoft.com/v1.0/me/messages?$skiptoken=abc"}', None),
    ("text/html", f'<a href="https://acct.blob.core.windows.net/c/b?sv=1&amp;sig={SAS_SIG}&amp;se=2">x</a>',
     f'<a href="https://acct.blob.core.windows.net/c/b?sv=1&amp;sig={RU}&amp;se=2">x</a>'),
    ("application/json", '{"mediaLink": "https://storage.googleapis.com/b/o?generation=1\\u0026X-Goog-Signature=00ff"}',
     f'{{"mediaLink": "https://storage.googleapis.com/b/o?generation=1\\u0026X-Goog-Signature={RU}"}}'),
    # --- JSON details: escaped quotes, non-string values, camelCase, whitespace, JSON inside a JSON string
    ("application/json", '{"password": "a\\"b\\\\\\"c", "next": 1}',
     f'{{"password": "{REDACTED}", "next": 1}}'),
    # everything under a credential key goes, whatever the value; true, false and null stay
    ("application/json", '{"token": 12345, "password": null, "secret": true, "api_key": {"v": "x"}}',
     f'{{"token": "{REDACTED}", "password": null, "secret": true, "api_key": "{REDACTED}"}}'),
    ("application/json", '{\n  "clientSecret" :\n    "abc",\n  "refreshToken":"def", "ACCESS-TOKEN": ""\n}',
     f'{{\n  "clientSecret" :\n    "{REDACTED}",\n  "refreshToken":"{REDACTED}",'
     f' "ACCESS-TOKEN": "{REDACTED}"\n}}'),
    ("application/json",
     '{"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text",'
     ' "text": "{\\"access_token\\": \\"abc\\\\\\"def\\", \\"expires_in\\": 3599}"}]}}',
     '{"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text",'
     f' "text": "{{\\"access_token\\": \\"{REDACTED}\\", \\"expires_in\\": 3599}}"}}]}}}}'),
    # --- any content type, binary included: value patterns only, byte-level
    ("image/png", PNG[:100] + GITHUB_CLASSIC.encode() + PNG[100:], PNG[:100] + REDACTED.encode() + PNG[100:]),
    # a binary type gets the key and form rules too (octet-stream is often JSON or form text)
    ("application/octet-stream", b'\x00\x01"token": "abc"\xff', b'\x00\x01"token": "[never captured]"\xff'),
    (None, f'{{"access_token": "{GOOGLE_ACCESS}"}}', f'{{"access_token": "{REDACTED}"}}'),
    ("text/plain", "", None),
]  # fmt: skip


def _b(x: str | bytes) -> bytes:
    return x.encode() if isinstance(x, str) else x


@pytest.mark.parametrize(("content_type", "body", "expected"), BODY_CASES, ids=_ids(BODY_CASES))
def test_redact_body(content_type: str | None, body: str | bytes, expected: str | bytes | None) -> None:
    want = _b(body) if expected is None else _b(expected)
    got = redact_body(_b(body), content_type)
    assert got == want
    assert not contains_credential(got)
    assert redact_body(got, content_type) == got  # idempotent
    if content_type and "json" in content_type and not want.startswith(b"\x00"):
        json.loads(got)  # still valid JSON


def test_redacted_json_keeps_everything_else() -> None:
    body = {
        "id": "18c2f1a3b4d5e6f7",
        "threadId": "18c2f1a3b4d5e6f7",
        "labelIds": ["INBOX", "UNREAD"],
        "nextPageToken": "09876543210",
        "access_token": GOOGLE_ACCESS,
        "snippet": "Hi \u00e9\u00e8 \U0001f600 \\ \" /",
        "n": 1.5e300,
    }
    raw = json.dumps(body, ensure_ascii=False, indent=1).encode()
    got = json.loads(redact_body(raw, "application/json"))
    assert got == {**body, "access_token": REDACTED}


# ---------------------------------------------------------------------------------------------
# Parsed JSON (MCP params)
# ---------------------------------------------------------------------------------------------


def test_redact_json_value() -> None:
    params = {
        "name": "gmail_send",
        "arguments": {
            "to": "bob@example.com",
            "access_token": GOOGLE_ACCESS,
            "refreshToken": GOOGLE_REFRESH,
            "clientSecret": "s3cr3t",
            "apiKey": "abc",
            "body": f"Hi! my slack token is {SLACK_BOT} and the page is https://x.example/?token=abc",
            "pageToken": "09876",
            "nested": [{"password": "hunter2"}, ("tuple", GITHUB_CLASSIC), 3, None, True],
            "token": 42,
        },
    }
    original = json.loads(json.dumps(params))
    got = redact_json_value(params)
    assert got == {
        "name": "gmail_send",
        "arguments": {
            "to": "bob@example.com",
            "access_token": REDACTED,
            "refreshToken": REDACTED,
            "clientSecret": REDACTED,
            "apiKey": REDACTED,
            "body": f"Hi! my slack token is {REDACTED} and the page is https://x.example/?token={RU}",
            "pageToken": "09876",
            "nested": [{"password": REDACTED}, ["tuple", REDACTED], 3, None, True],
            "token": REDACTED,  # whatever sits under a credential key goes
        },
    }
    assert json.loads(json.dumps(params)) == original  # input not modified
    assert redact_json_value("\ud800 lone surrogate stays") == "\ud800 lone surrogate stays"
    assert redact_json_value(1.5) == 1.5


# ---------------------------------------------------------------------------------------------
# Token exchanges and token responses: no entry at all
# ---------------------------------------------------------------------------------------------

FORM = [("Content-Type", "application/x-www-form-urlencoded")]
REFRESH_FORM = (
    b"client_id=1.apps.googleusercontent.com&client_secret=x&refresh_token=1%2F%2F0abc"
    b"&grant_type=refresh_token"
)

TOKEN_EXCHANGES = [
    # Google
    ("POST", "https://oauth2.googleapis.com/token", FORM, REFRESH_FORM),
    ("POST", "https://oauth2.googleapis.com/revoke?token=ya29.x", FORM, b""),
    ("GET", "https://oauth2.googleapis.com/tokeninfo?access_token=ya29.x", [], None),
    ("POST", "https://oauth2.googleapis.com/device/code", FORM, b"client_id=1&scope=email"),
    ("POST", "https://accounts.google.com/o/oauth2/token", FORM, REFRESH_FORM),
    ("GET", "https://accounts.google.com/o/oauth2/v2/auth?client_id=1&response_type=code", [], None),
    ("GET", "https://accounts.google.com/o/oauth2/revoke?token=x", [], None),
    ("POST", "https://www.googleapis.com/oauth2/v4/token", FORM, REFRESH_FORM),
    ("POST", "https://www.googleapis.com/oauth2/v3/token", FORM, REFRESH_FORM),
    ("GET", "https://www.googleapis.com/oauth2/v3/tokeninfo?id_token=x", [], None),
    ("POST", "https://sts.googleapis.com/v1/token", [("Content-Type", "application/json")], b"{}"),
    ("POST", "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/sa@p.iam.gserviceaccount.com"
             ":generateAccessToken", [], b'{"scope": ["https://www.googleapis.com/auth/cloud-platform"]}'),
    ("POST", "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/sa%40p.iam.gserviceaccount.com"
             ":signJwt", [], b"{}"),
    ("POST", "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/a:generateIdToken",
     [], None),
    ("POST", "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/x:signBlob", [], b"{}"),
    ("GET", "http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token",
     [("Metadata-Flavor", "Google")], None),
    ("GET", "http://169.254.169.254/computeMetadata/v1/instance/service-accounts/sa@p.iam.gserviceaccount.com/token",
     [], None),
    # Slack
    ("POST", "https://slack.com/api/oauth.v2.access", FORM, b"code=1.2.abc&client_id=1&client_secret=x"),
    ("POST", "https://slack.com/api/oauth.access", FORM, b"code=x"),
    ("POST", "https://slack.com/api/oauth.v2.exchange", FORM, b"token=xoxb-1"),
    ("POST", "https://slack.com/api/openid.connect.token", FORM, b"code=x"),
    ("POST", "https://slack.com/api/tooling.tokens.rotate", FORM, b"refresh_token=xoxe-1-x"),
    ("POST", "https://slack.com/api/auth.revoke", FORM, b"token=xoxp-1"),
    ("POST", "https://myteam.slack.com/api/oauth.v2.access", FORM, b"code=x"),
    ("POST", "https://slack.com/api/oauth%2Ev2.access", FORM, b"code=x"),
    # GitHub
    ("POST", "https://github.com/login/oauth/access_token", [("Accept", "application/json")], b"code=x"),
    ("POST", "https://github.com/login/oauth/access_token/", [], b"{}"),
    ("POST", "https://github.com/login/device/code", [], b"client_id=1"),
    ("POST", "https://api.github.com/app/installations/12345/access_tokens", [], b""),
    ("POST", "https://api.github.com/applications/Iv1.8a61f9b3a7aba766/token", [], b'{"access_token": "x"}'),
    ("PATCH", "https://api.github.com/applications/Iv1.8a61f9b3a7aba766/token", [], b"{}"),
    ("POST", "https://api.github.com/applications/Iv1.8a61f9b3a7aba766/token/scoped", [], b"{}"),
    ("DELETE", "https://api.github.com/applications/Iv1.8a61f9b3a7aba766/grant", [], b"{}"),
    ("POST", "https://api.github.com/repos/octo/hello/actions/runners/registration-token", [], None),
    ("POST", "https://api.github.com/orgs/octo/actions/runners/remove-token", [], None),
    ("POST", "https://api.github.com/enterprises/acme/actions/runners/registration-token", [], None),
    ("POST", "https://api.github.com/repos/octo/hello/actions/runners/generate-jitconfig", [], b"{}"),
    ("POST", "https://ghe.example.com/api/v3/app/installations/1/access_tokens", [], None),
    # Microsoft
    ("POST", "https://login.microsoftonline.com/common/oauth2/v2.0/token", FORM, b"grant_type=refresh_token"),
    ("POST", "https://login.microsoftonline.com/00000000-0000-0000-0000-000000000000/oauth2/token", [], b""),
    ("POST", "https://login.microsoftonline.com/organizations/oauth2/v2.0/devicecode", FORM, b"client_id=1"),
    ("POST", "https://login.windows.net/contoso.onmicrosoft.com/oauth2/token", FORM, b""),
    ("POST", "https://login.microsoftonline.us/contoso/oauth2/v2.0/token", FORM, b""),
    ("POST", "https://login.chinacloudapi.cn/contoso/oauth2/v2.0/token", FORM, b""),
    ("POST", "https://login.live.com/oauth20_token.srf", FORM, b""),
    ("GET", "http://169.254.169.254/metadata/identity/oauth2/token?api-version=2018-02-01"
            "&resource=https://graph.microsoft.com", [("Metadata", "true")], None),
    # Generic and AWS
    ("POST", "https://auth.example.com/oauth/token", FORM, b"grant_type=client_credentials"),
    ("POST", "https://auth.example.com/oauth2/v1/token", FORM, b""),
    ("POST", "https://auth.example.com/oauth2/introspect", FORM, b"token=x"),
    ("POST", "https://id.example.com/connect/token", FORM, b""),
    ("POST", "https://kc.example.com/realms/acme/protocol/openid-connect/token", FORM, b""),
    ("POST", "https://dev-123.okta.com/oauth2/default/v1/revoke", FORM, b""),
    ("POST", "https://api.example.com/v1/token", FORM, b"grant_type=client_credentials&scope=read"),
    ("POST", "https://api.example.com/v1/token", [("Content-Type", "application/json")],
     b'{"grant_type": "client_credentials"}'),
    ("POST", "https://sts.amazonaws.com/", FORM, b"Action=AssumeRoleWithWebIdentity&Version=2011-06-15"),
    ("GET", "https://sts.us-east-1.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15", [], None),
    ("POST", "https://sts-fips.us-gov-west-1.amazonaws.com/", FORM, b""),
    # path-only URL (reverse proxy), case and encoding tricks
    ("POST", "/token", [("Host", "oauth2.googleapis.com")], REFRESH_FORM),
    ("POST", "https://OAUTH2.GoogleAPIs.com/TOKEN", FORM, REFRESH_FORM),
    ("POST", "https://oauth2.googleapis.com:443//token", FORM, REFRESH_FORM),
]  # fmt: skip

ORDINARY_CALLS = [
    ("GET", "https://gmail.googleapis.com/gmail/v1/users/me/messages?q=is%3Aunread&pageToken=123", [], None),
    ("POST", "https://gmail.googleapis.com/gmail/v1/users/me/messages/send", [], b'{"raw": "RnJvbTo="}'),
    ("POST", "https://www.googleapis.com/calendar/v3/calendars/primary/events", [], b'{"summary": "x"}'),
    ("POST", "https://www.googleapis.com/upload/drive/v3/files?uploadType=multipart",
     [("Content-Type", "multipart/related; boundary=foo_bar_baz")], DRIVE_MULTIPART),
    ("PUT", "https://www.googleapis.com/upload/drive/v3/files?uploadType=resumable&upload_id=ADPyc",
     [("Content-Type", "application/pdf")], b"%PDF-1.7"),
    ("GET", "https://www.googleapis.com/oauth2/v2/userinfo", [], None),
    ("POST", "https://slack.com/api/chat.postMessage", [("Content-Type", "application/json")],
     b'{"channel": "C0123", "text": "hi"}'),
    ("POST", "https://slack.com/api/auth.test", FORM, b"token=xoxb-1"),
    ("POST", "https://slack.com/api/files.upload", [], SLACK_UPLOAD),
    ("GET", "https://slack.com/api/users.profile.get", [], None),
    # they open the Socket Mode / RTM WebSocket whose messages are recorded: recorded too (issue 25)
    ("POST", "https://slack.com/api/apps.connections.open", [("Authorization", "Bearer xapp-1-x")], b""),
    ("GET", "https://slack.com/api/rtm.connect", [], None),
    ("GET", "https://slack.com/api/rtm.start", [], None),
    ("POST", "https://api.github.com/repos/octo/hello/issues", [], b'{"title": "bug"}'),
    ("GET", "https://api.github.com/repos/octo/hello/contents/README.md", [], None),
    ("GET", "https://api.github.com/repos/octo/hello/actions/secrets/public-key", [], None),
    ("GET", "https://api.github.com/user/installations", [], None),
    ("GET", "https://graph.microsoft.com/v1.0/me/messages?$top=10", [], None),
    ("POST", "https://graph.microsoft.com/v1.0/me/sendMail", [], b'{"message": {}}'),
    ("POST", "https://graph.microsoft.com/v1.0/me/drive/items/01ABC/createUploadSession", [], b"{}"),
    ("POST", "https://graph.microsoft.com/v1.0/$batch", [], b'{"requests": []}'),
    ("GET", "https://api.example.com/items/token", [], None),
    ("POST", "https://api.example.com/items/token", FORM, b"name=x&value=y"),
    ("GET", "https://notsts.amazonaws.com/", [], None),
    ("GET", "https://s3.amazonaws.com/bucket/key", [], None),
]  # fmt: skip


@pytest.mark.parametrize(("method", "url", "headers", "body"), TOKEN_EXCHANGES, ids=_urls(TOKEN_EXCHANGES))
def test_token_exchanges_are_recognised(method: str, url: str, headers: list, body: bytes | None) -> None:
    assert is_token_exchange(method, url, headers, body)


@pytest.mark.parametrize(("method", "url", "headers", "body"), ORDINARY_CALLS, ids=_urls(ORDINARY_CALLS))
def test_ordinary_calls_are_not_token_exchanges(
    method: str, url: str, headers: list, body: bytes | None
) -> None:
    assert not is_token_exchange(method, url, headers, body)


JSON_CT = [("Content-Type", "application/json; charset=utf-8")]
TOKEN_RESPONSES = [
    (JSON_CT, {"access_token": GOOGLE_ACCESS, "expires_in": 3599, "scope": "openid", "token_type": "Bearer"}),
    (JSON_CT, {"refresh_token": GOOGLE_REFRESH}),
    (JSON_CT, {"id_token": JWT_HS256, "token_type": "Bearer"}),
    (JSON_CT, {"ok": True, "app_id": "A0123", "access_token": SLACK_BOT, "token_type": "bot",
               "incoming_webhook": {"url": SLACK_WEBHOOK}}),
    (JSON_CT, {"ok": True, "token": SLACK_ROTATING, "refresh_token": SLACK_REFRESH, "exp": 1712345678}),
    (JSON_CT, {"token": GITHUB_INSTALLATION, "expires_at": "2026-01-01T00:00:00Z",
               "permissions": {"issues": "write"}}),
    (JSON_CT, {"accessToken": GOOGLE_ACCESS, "expireTime": "2026-01-01T00:00:00Z"}),
    (JSON_CT, {"token_type": "Bearer", "scope": "Mail.Read", "expires_in": 3599, "ext_expires_in": 3599,
               "access_token": MS_JWT}),
    ([("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")],
     f"access_token={GITHUB_OAUTH}&scope=repo&token_type=bearer"),
    ([], f"access_token={GITHUB_OAUTH}&scope=repo&token_type=bearer"),
]  # fmt: skip

NOT_TOKEN_RESPONSES = [
    (JSON_CT, {"messages": [{"id": "18c2f1a3b4d5e6f7", "threadId": "18c2f1a3b4d5e6f7"}],
               "nextPageToken": "1"}),
    (JSON_CT, {"ok": True, "channel": "C0123", "ts": "1712345678.123456", "message": {"text": "hi"}}),
    (JSON_CT, {"id": 1, "number": 42, "title": "bug", "state": "open"}),
    (JSON_CT, {"data": {"access_token": "nested is not a grant (the body redaction still removes it)"}}),
    (JSON_CT, {"token": "abc"}),
    (JSON_CT, [{"access_token": "x"}]),
    (JSON_CT, {"value": [], "@odata.nextLink": "https://graph.microsoft.com/v1.0/me/messages?$skiptoken=1"}),
    (JSON_CT, "not json {"),
    ([("Content-Type", "text/html")], "<p>see access_token=abc in the docs</p>"),
    ([("Content-Type", "image/png")], b"access_token=x"),
    (JSON_CT, b""),
    (JSON_CT, None),
]  # fmt: skip


def _resp_body(body: object) -> bytes | None:
    if body is None or isinstance(body, bytes):
        return body
    return body.encode() if isinstance(body, str) else json.dumps(body).encode()


@pytest.mark.parametrize(("headers", "body"), TOKEN_RESPONSES, ids=_ids(TOKEN_RESPONSES))
def test_token_grant_bodies_are_redacted_when_recorded(headers: list, body: object) -> None:
    """A response is never a reason to drop a call (only the request says what a token exchange
    is), so a body that looks like a grant is recorded, and its credentials are redacted."""
    raw = _resp_body(body)
    ctype = next((v for k, v in headers if k.lower() == "content-type"), None)
    out = redact_body(raw, ctype or "application/x-www-form-urlencoded")
    for secret in (GOOGLE_ACCESS, GOOGLE_REFRESH, JWT_HS256, SLACK_BOT, SLACK_REFRESH, MS_JWT, GITHUB_OAUTH):
        assert secret.encode() not in out


# ---------------------------------------------------------------------------------------------
# Streaming
# ---------------------------------------------------------------------------------------------

CONTENT_TYPES = [
    None,
    "application/json",
    "text/plain; charset=utf-8",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=BOUNDARY",
    "multipart/mixed; boundary=\"BOUNDARY\"",
    "application/octet-stream",
    "image/png",
]

FRAGMENTS = [t.encode() for t in TOKENS] + [
    t.encode()[: len(t) // 2] for t in TOKENS
] + [
    b'"token": "', b'"access_token":"', b'"Authorization" : "', b'\\"token\\": \\"', b'"', b"\\", b'\\"',
    b"\\\\", b"&token=", b"?key=", b"\\u0026sig=", b"token=", b"&", b"?", b"=", b" ", b"\r\n", b"\n", b".",
    b"Bearer ", b"bearer+", b"Bearer%20",
    b'Content-Disposition: form-data; name="token"\r\n\r\n',
    b'Content-Disposition: form-data; name="file"; filename="a.png"\r\nContent-Type: image/png\r\n\r\n',
    b"\r\n--BOUNDARY\r\n", b"\r\n--BOUNDARY--", b"--BOUNDARY", b"\r\n--BOUN",
    b"-----BEGIN PRIVATE KEY-----", b"-----END PRIVATE KEY-----", b"-----END",
    b"eyJhbGciOiJIUzI1NiJ9", b"eyJzdWIiOiIxIn0", b"ya29.", b"1//0", b"1%2F%2F0", b"AIza", b"xoxb-", b"xoxe.",
    b"ghp_",
    b"github_pat_", b"GOCSPX-", b"xapp-1-", b"hooks.slack.com/services/", b"hooks.slack.com\\/services\\/",
    # JSON values under credential keys, escaped keys, JSON inside JSON, form at the start, webhooks
    b'"client_secret": [', b'"token": {', b'"password": -12', b'"pass\\u0077ord": "', b'"\\u0074oken": [',
    b'\\"secret\\": [', b'\\"pass\\\\u0077ord\\": \\"', b"[", b"]", b"{", b"}", b"123", b"\\u0077",
    b"password=", b"discord.com/api/webhooks/", b"1234567890123456789/", b"webhook.office.com/webhookb2/",
    b"outlook.office.com/webhook/", b"hooks.zapier.com/hooks/",
    # line assignments with their breaks, blanks and quotes written as JSON or URL escapes
    b"\\u000a", b"\\u000D\\u000A", b"\\u0009", b"\\u0020", b"\\t", b"\\u003d", b"\\u0022", b"API_KEY", b"export ",
    b"%0A", b"%0d%0a", b"%09", b"+", b"%3D", b"%3a", b"%22",
    # a credential key two JSON levels down, and the 3, 4, 7, 8 backslash runs of its string
    b'\\\\\\"password\\\\\\": \\\\\\"', b'\\\\\\"', b"\\\\\\\\", b'\\\\\\\\\\\\\\"', b"\\\\\\\\\\\\\\\\",
    b"'password': '", b"'token':\"", b"'", b"\"name\": \"DB_PASSWORD\", \"value\": \"", b"- ",
    b"A" * 40, b"0123456789" * 3, b"x" * 7,
    # branch redact31: flags, env assignments, header lines, inline passwords, any scheme's userinfo, lone CR
    b"--password ", b"--api-key=", b"-e ", b"--set ", b"-Dx.", b"env ", b"DB_PASSWORD=", b" password=", b";Pwd=",
    b"dbPassword=", b"Authorization: ", b"Token ", b"Cookie:", b"redis://", b"amqp:\\/\\/", b"ftp%3A%2F%2F",
    b"u:pw@", b"u%3Apw%40", b"\r", b"%0D", b"\\r", b"$TOKEN",
]  # fmt: skip

_content_types = st.sampled_from(CONTENT_TYPES)
_bodies = st.lists(
    st.one_of(
        st.sampled_from(FRAGMENTS),
        st.binary(max_size=24),
        st.integers(min_value=0, max_value=5000).map(lambda n: b"a" * n),
        st.integers(min_value=0, max_value=5000).map(lambda n: b" " * n),
    ),
    max_size=30,
).map(b"".join)


def _chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def _stream(data: bytes, content_type: str | None, cuts: list[int], triggers: bool = True) -> bytes:
    r = StreamingRedactor(content_type)
    if not triggers:
        r._use_triggers = False
    out = [r.feed(chunk) for chunk in _chunked(data, cuts)]
    out.append(r.close())
    return b"".join(out)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=_bodies, content_type=_content_types, cuts=st.lists(st.integers(0, 20000), max_size=12))
def test_streaming_equals_whole_body_for_any_chunking(
    body: bytes, content_type: str | None, cuts: list[int]
) -> None:
    whole = redact_body(body, content_type)
    assert _stream(body, content_type, cuts) == whole
    assert not contains_credential(whole)
    assert redact_body(whole, content_type) == whole


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=_bodies, content_type=_content_types, cuts=st.lists(st.integers(0, 20000), max_size=6))
def test_trigger_scan_equals_plain_regex_scan(body: bytes, content_type: str | None, cuts: list[int]) -> None:
    """The trigger pre-scan is an optimisation only: same result as trying every rule at every byte."""
    assert _stream(body, content_type, cuts) == _stream(body, content_type, [], triggers=False)


_LINE_STARTS = [b"", b" ", b"\t", b" \t ", b"export ", b"export\t\t", b"  export  ", b"API_KEY", b"  api_key",
                b"password", b"token ", b"x", b"-", b".", b"\"key\"", b"=", b":", b" = ", b"\\n", b"\\r\\n"]
_LINE_ENDS = [b"=", b":", b" = v", b"\t: v", b"=sk_live_" + b"4eC39HqLyjWDarjtT1zdp7dc", b"", b" x", b"\n"]


@pytest.mark.parametrize("content_type", [None, "application/json", "text/plain", "application/x-www-form-urlencoded"])
def test_indented_assignments_trigger_and_redact_as_without_the_possessive_indent(content_type):
    """`_ASSIGN_LOOK` takes the indentation possessively (journal/redact.py): its trigger fires at exactly
    the positions the backtracking spelling did, for any indentation up to past its limit of 16, and the
    redacted bodies are those of the plain scan that tries every rule at every byte."""
    kind = redact._kind(content_type)[0]
    for esc in (False, True):
        now = redact._kind_triggers(kind, esc)
        assert b"{0,16}+" in now.pattern
        before = re.compile(now.pattern.replace(b"{0,16}+", b"{0,16}"))
        for blanks in (0, 1, 4, 16, 17, 40):
            for start in _LINE_STARTS:
                for end in _LINE_ENDS:
                    for indent in (b" " * blanks, b" \t" * (blanks // 2)):
                        body = b'{\n  "a": 1,\n' + indent + start + end + b"\n" + indent + b'"b": 2\n}'
                        got = [m.span() for m in now.finditer(body)]
                        assert got == [m.span() for m in before.finditer(body)], body
                        if not esc:
                            assert redact_body(body, content_type) == _stream(body, content_type, [], triggers=False)


@pytest.mark.parametrize("indent", ["\t", "\t\t", " \t"])
def test_assignment_indented_with_a_tab_inside_a_json_string_is_redacted(indent):
    """Found by branch proxy30: inside a JSON string a tab is written `\\t`, which the indentation of a line
    assignment did not take (spaces and a raw tab it did), so the secret was kept."""
    for line in ("password: hunter2-secret", "API_KEY=hunter2-secret"):
        body = json.dumps({"note": "config\n" + indent + line}).encode()
        assert b"hunter2" not in redact_body(body, "application/json"), body


# A line assignment inside a JSON string whose break, blanks, '=' / ':' or quotes an encoder wrote as
# `\uXXXX` escapes (or `\t`, `\"`): each was read as a line assignment only in its `\n` spelling.
_JSON_LINE_FORMS = {
    "break \\u000a": "cfg\\u000apassword: hunter2-secret",
    "break \\u000A": "cfg\\u000AAPI_KEY=hunter2-secret",
    "break \\u000d\\u000a": "cfg\\u000d\\u000aexport TOKEN=hunter2-secret",
    "break \\r\\u000a": "cfg\\r\\u000aDB_PASSWORD = hunter2-secret",
    "indent \\u0009": "cfg\\n\\u0009password: hunter2-secret",
    "indent \\u0020 after \\u000a": "cfg\\u000a\\u0020\\u0020api_key: hunter2-secret",
    "export \\u0009": "cfg\\nexport\\u0009TOKEN=hunter2-secret",
    "blank \\t after ':'": "cfg\\npassword:\\thunter2-secret",
    "blank \\u0009 before '='": "cfg\\nAPI_KEY\\u0009=\\u0009hunter2-secret",
    "'=' as \\u003d": "cfg\\nAPI_KEY\\u003dhunter2-secret",
    "':' as \\u003A": "cfg\\npassword\\u003A hunter2-secret",
    "value quoted \\\"": 'cfg\\npassword: \\"hunter2-secret\\"',
    "value quoted \\u0022": "cfg\\nAPI_KEY=\\u0022hunter2-secret\\u0022",
    "value quoted \\u0027": "cfg\\u000aAPI_KEY=\\u0027hunter2-secret\\u0027",
}


@pytest.mark.parametrize("form", list(_JSON_LINE_FORMS))
@pytest.mark.parametrize("content_type", ["application/json", None, "application/octet-stream"])
def test_line_assignment_with_json_escaped_break_blank_or_quote_is_redacted(form, content_type):
    text = _JSON_LINE_FORMS[form]
    for body in (f'{{"note": "{text}", "n": 1}}'.encode(), json.dumps({"a": f'{{"note": "{text}"}}'}).encode()):
        out = redact_body(body, content_type)
        assert b"hunter2" not in out, (form, body, out)
        assert REDACTED.encode() in out
        assert json.loads(out).keys() == json.loads(body).keys()  # the JSON around the value stays JSON
        assert _stream(body, content_type, [], triggers=False) == out
        assert redact_json_value(json.loads(body)) == json.loads(out)


def test_line_assignment_escapes_keep_what_is_no_assignment():
    for text in ("cfg\\u000apassword_hint: see the wiki", "cfg\\u000aname: hunter", "a\\u0009password",
                 "cfg\\npassword: true", "cfg\\u000apasswords are long"):
        body = f'{{"note": "{text}"}}'.encode()
        assert redact_body(body, "application/json") == body


# A line assignment inside a URL-encoded value (a query parameter, a form field) after an encoded break:
# read as one in a form body only when '=' / ':' were encoded too, and nowhere else (a URL in a JSON or
# text body, a form sent as text). Outside a parameter (after '?', '&', at the body's start) it is not
# looked for: a trigger at every '%' cost every body's scan some 8%.
_PCT_LINE_FORMS = {
    "form, '=' as written": ("x=cfg%0Apassword=hunter2-secret&y=1", "application/x-www-form-urlencoded"),
    "form, ':' as written": ("x=cfg%0d%0aAPI_KEY:+hunter2-secret&y=1", "application/x-www-form-urlencoded"),
    "form sent as text": ("x=cfg%0Apassword%3Dhunter2-secret&y=1", "text/plain"),
    "URL in text": ("see https://h.test/a?x=cfg%0apassword%3Dhunter2-secret&y=1 now", "text/plain"),
    "URL in JSON": ('{"u": "https://h.test/a?x=cfg%0D%0A%09export+TOKEN%3Dhunter2-secret", "n": 1}',
                    "application/json"),
    "URL in JSON, %0A only": ('{"u": "https://h.test/a?x=cfg%0Apassword=hunter2-secret"}', "application/json"),
    "octet-stream": ("x=cfg%0AAPI_KEY%3A%22hunter2-secret%22&y=1", "application/octet-stream"),
}


@pytest.mark.parametrize("form", list(_PCT_LINE_FORMS))
def test_line_assignment_after_a_url_encoded_break_is_redacted_in_every_body(form):
    text, content_type = _PCT_LINE_FORMS[form]
    body = text.encode()
    out = redact_body(body, content_type)
    assert b"hunter2" not in out, (form, out)
    assert REDACTED_URL.encode() in out
    assert _stream(body, content_type, [], triggers=False) == out
    if content_type == "application/json":  # the value ends at the string's end: the JSON stays
        assert json.loads(out)


def test_url_encoded_assignment_in_text_keeps_the_url_around_it():
    body = b'{"u": "https://h.test/a?x=cfg%0Apassword%3Dhunter2-secret&y=1#f", "v": "q=a%0Aname%3Dz"}'
    assert redact_body(body, "application/json") == (
        b'{"u": "https://h.test/a?x=cfg%0Apassword%3D[never%20captured]&y=1#f", "v": "q=a%0Aname%3Dz"}')


@pytest.mark.parametrize("value", ["hunter2-secret", 'a\\b"c\nd\te\u00e9\u2028', "ends with \\", '"'])
@pytest.mark.parametrize("indent", [None, 2])
def test_credential_string_in_json_held_by_a_json_string_held_by_a_json_string_is_redacted(value, indent):
    """The key rules read JSON in a JSON string (`\"token\": \"...\"`); one level deeper (a tool result
    quoting a payload that holds JSON) the quotes are \\\" and the value kept its secret. Exactly the
    value goes: every level still parses, with the other keys as they were."""
    inner = {"password": value, "after": "kept \\ \" here", "n": [1, {"client_secret": value}]}
    body = json.dumps({"a": json.dumps({"b": json.dumps(inner, indent=indent)}), "z": 1}).encode()
    for content_type in ("application/json", None, "application/octet-stream"):
        out = redact_body(body, content_type)
        got = json.loads(json.loads(json.loads(out)["a"])["b"])
        assert got == {**inner, "password": REDACTED, "n": [1, {"client_secret": REDACTED}]}
        assert _stream(body, content_type, [], triggers=False) == out
        for cut in range(0, len(body), 5):
            assert _stream(body, content_type, [cut]) == out


@pytest.mark.parametrize("content_type", ["application/json", None])
def test_name_value_pair_naming_a_credential_loses_its_value(content_type):
    """Kubernetes / ECS `env`, HAR headers, SSM parameters: the credential's name is a value, its secret the
    "value" beside it. Other pairs, and a value not given as a string under the name, stay."""
    doc = {"env": [{"name": "DB_PASSWORD", "value": "hunter2-a"}, {"name": "HOME", "value": "/root"},
                   {"Name": "spring.datasource.password", "Value": "hunter2-b"},
                   {"key": "api-key", "value": "hunter2-c"}, {"name": "token", "valueFrom": {"k": "v"}}],
           "headers": [{"name": "Authorization", "value": "Token hunter2-d"}, {"name": "Accept", "value": "*/*"}]}
    for indent in (None, 2):
        body = json.dumps(doc, indent=indent).encode()
        out = redact_body(body, content_type)
        assert b"hunter2" not in out
        got = json.loads(out)
        assert [e.get("value", e.get("Value")) for e in got["env"]] == [REDACTED, "/root", REDACTED, REDACTED, None]
        assert got["env"][4] == doc["env"][4] and got["headers"][1] == doc["headers"][1]
        assert _stream(body, content_type, [], triggers=False) == out
    # the same parsed (MCP arguments and results)
    red = redact_json_value(doc)
    assert "hunter2" not in json.dumps(red)
    assert red["env"][1] == doc["env"][1] and red["headers"][1] == doc["headers"][1]


@pytest.mark.parametrize("value", [123456, -1.5e3, ["hunter2-a", 5], {"pin": "hunter2-b"}, None, True])
@pytest.mark.parametrize("content_type", ["application/json", None])
def test_a_name_value_pairs_value_that_is_no_string_goes_as_the_parsed_path_drops_it(value, content_type):
    """(found by the review of 2026-12-02) The body rule read only a string beside a credential's name, so a
    number, list or object stayed in an HTTP body ({"name": "password", "value": 123456}) while the parsed
    MCP path and the key rule ({"password": 123456}) drop it: the body now does as they do (true, false and
    null stay)."""
    doc = [{"name": "DB_PASSWORD", "value": value, "after": 1}, {"name": "HOME", "value": value}]
    for indent in (None, 2):
        body = json.dumps(doc, indent=indent).encode()
        out = redact_body(body, content_type)
        assert json.loads(out) == redact_json_value(doc)
        assert _stream(body, content_type, [], triggers=False) == out
        for cut in range(0, len(body), 7):
            assert _stream(body, content_type, [cut]) == out
    assert redact_json_value(doc)[0]["value"] == (value if value is None or value is True else REDACTED)


@pytest.mark.parametrize("text", ["env:\n  - password: hunter2-secret\n",
                                  "environment:\n  - DB_PASSWORD=hunter2-secret\n",
                                  "x:\n- api_key: 'hunter2-secret'\n"])
def test_yaml_list_item_assignment_is_redacted(text):
    for body, content_type in ((text.encode(), "text/yaml"), (json.dumps({"f": text}).encode(), "application/json"),
                               (b"f=" + quote(text, safe="").encode(), "application/x-www-form-urlencoded")):
        out = redact_body(body, content_type)
        assert b"hunter2" not in out, out
        assert _stream(body, content_type, [], triggers=False) == out
    assert redact_body(b"- name: x\n- password_hint: y\n", "text/yaml") == b"- name: x\n- password_hint: y\n"


@pytest.mark.parametrize("url", [
    "https://h.test/login?next=https%3A%2F%2Fa.test%2Fcb%3Faccess_token%3Dhunter2-secret&x=1",
    "https://h.test/?q=%7B%22password%22%3A%22hunter2-secret%22%7D",
    "https://h.test/?state=a%3D1%26client_secret%3Dhunter2-secret",
    "https://h.test/cb#state=x&next=%2Fhome%3Ftoken%3Dhunter2-secret",
    "https://h.test/a/%7B%22api_key%22%3A%20%22hunter2-secret%22%7D/b",
    "https://h.test/?x-api-key=hunter2-secret", "https://h.test/?JSESSIONID=hunter2-secret",
    "https://h.test/?PHPSESSID=hunter2-secret",
])
def test_url_component_whose_decoded_text_names_a_credential_is_redacted(url):
    """A parameter holding a URL, JSON or a form (a redirect, OAuth state): the decoded text was read with
    the value patterns only, so a credential named by its parameter or key stayed."""
    out = redact_url(url)
    assert "hunter2" not in out and REDACTED_URL in out, out
    assert out == redact._redact_url_full(url)
    assert redact_url("https://h.test/?next=%2Fhome%3Fpage%3D2&q=hello%20world%21") == (
        "https://h.test/?next=%2Fhome%3Fpage%3D2&q=hello%20world%21")


# Spellings tried as the attacker on branch redact30 that the rules already covered: pinned here.
_COVERED_BODIES = [
    ('{"pass\\u0077ord": "hunter2-secret"}', "application/json"),
    ('{"PASSWORD": "hunter2-secret", "Access-Token": "hunter2-secret"}', "application/json"),
    ('{"u": "https:\\/\\/user:hunter2-secret@h.test\\/"}', "application/json"),
    ("u=https%3A%2F%2Fuser%3Ahunter2-secret%40h.test%2F", "application/x-www-form-urlencoded"),
    ('{"u": "https://h.test/cb?a=1\\u0026access_token=hunter2-secret"}', "application/json"),
    ("see https://h.test/cb#state=1&access_token=hunter2-secret ok", "text/plain"),
    ('{"headers": {"Cookie": "sid=hunter2-secret", "set-cookie": "a=hunter2-secret"}}', "application/json"),
    ("Set-Cookie: sid=hunter2-secret; Path=/\nCookie: a=hunter2-secret\n", "text/plain"),
    ("--b\r\nContent-Disposition: form-data; NAME=Password\r\n\r\nhunter2-secret\r\n--b--\r\n",
     "multipart/form-data; boundary=b"),
    (json.dumps({"a": json.dumps({"n": "cfg\npassword: hunter2-secret"})}), "application/json"),
]


@pytest.mark.parametrize(("body", "content_type"), _COVERED_BODIES)
def test_attacker_spellings_already_covered_in_bodies(body, content_type):
    assert b"hunter2" not in redact_body(body.encode(), content_type)


def test_attacker_spellings_already_covered_in_urls_and_headers():
    for url in ("https://user:hunter2-secret@h.test/", "https://h.test/?ACCESS_TOKEN=hunter2-secret",
                "https://h.test/?access%5Ftoken=hunter2-secret", "https://h.test/#access_token=hunter2-secret&x=1",
                "https://h.test/?x=Basic%20dXNlcjpodW50ZXIyLXNlY3JldA%3D%3D",
                "https://h.test/?x=cfg%0D%0Apassword%3Dhunter2-secret"):
        assert "hunter2" not in redact_url(url) and "dXNlcjpodW50" not in redact_url(url), url
    for name in ("AUTHORIZATION ", "authorization", "Proxy-Authorization", "X-Forwarded-Authorization",
                 "Authorization-Token", "Cookie2", "X-Session"):
        assert redact_headers([(name, "hunter2-secret")]) == [[name, REDACTED]]


_GLUE = re.compile(rb"[A-Za-z0-9+/_\-]{8}")


@settings(max_examples=400, deadline=None)
@given(
    prefix=st.binary(max_size=300),
    suffix=st.binary(max_size=300),
    token=st.sampled_from(TOKENS),
    content_type=_content_types,
    cuts=st.lists(st.integers(0, 1000), max_size=8),
)
def test_inserted_token_never_survives(
    prefix: bytes, suffix: bytes, token: str, content_type: str | None, cuts: list[int]
) -> None:
    # A token glued to 8+ base64 characters on its left is indistinguishable from base64 attachment data
    # and is deliberately left alone (see redact._LB); real credentials are always delimited.
    assume(not _GLUE.fullmatch(prefix[-8:]))
    tok = token.encode()
    body = prefix + tok + suffix
    for out in (redact_body(body, content_type), _stream(body, content_type, cuts)):
        assert tok not in out
        assert tok[-16:] not in out
        assert not contains_credential(out)


@pytest.mark.parametrize("content_type", CONTENT_TYPES)
def test_token_split_at_every_position(content_type: str | None) -> None:
    body = f'{{"a": "x", "note": "Authorization: Bearer {MS_JWT}", "k": "{GOOGLE_API_KEY}"}}'.encode()
    body = b" " * 5000 + body + b" " * 5000
    whole = redact_body(body, content_type)
    assert MS_JWT.encode() not in whole and GOOGLE_API_KEY.encode() not in whole
    for cut in range(4900, len(body) - 4900, 7):
        assert _stream(body, content_type, [cut]) == whole
        assert _stream(body, content_type, [cut - 4096, cut, cut + 1]) == whole


@pytest.mark.parametrize("chunk", [1, 7, 4095, 4096, 4097, 100_000])
def test_longest_heads_survive_any_chunk_size(chunk: int) -> None:
    """A JWT with a 2 KiB header segment and a multipart part header block near its bound."""
    long_jwt = "eyJ" + _fake(B64URL, 2040, 70) + ".eyJ" + _fake(B64URL, 3000, 71)
    long_jwt += "." + _fake(B64URL, 300, 72)
    extra_headers = "".join(f"X-H{i}: {'v' * 240}\r\n" for i in range(4))
    body = (
        ("z" * 3000 + " " + long_jwt + " tail\r\n").encode()
        + f'--BOUNDARY\r\nContent-Disposition: form-data; {"p" * 200}; name="client_secret"; '.encode()
        + b"q" * 200
        + b"\r\n"
        + extra_headers.encode()
        + b"\r\n"
        + b"S" * 10_000
        + b"\r\n--BOUNDARY--\r\n"
    )
    ct = "multipart/form-data; boundary=BOUNDARY"
    whole = redact_body(body, ct)
    assert long_jwt.encode() not in whole and b"S" * 20 not in whole
    assert whole.endswith(REDACTED.encode() + b"\r\n--BOUNDARY--\r\n")
    assert _stream(body, ct, list(range(chunk, len(body), chunk))) == whole


@pytest.mark.parametrize(
    ("content_type", "head", "filler", "end"),
    [
        ("application/octet-stream", b"", b"\x00" * 65536, b""),
        ("application/json", b'{"data": "', _random_base64(49152, 80), b'"}'),
        ("application/json", b'{"password": "', b"p" * 65536, b'", "x": 1}'),  # tail in progress
        ("application/json", b'{"password": "', b'\\"' * 32768, b'", "x": 1}'),
        ("text/plain", b"Bearer ", b"abc123" * 10000, b" end"),
        ("application/x-www-form-urlencoded", b"token=", b"v" * 65536, b"&x=1"),
        ("multipart/form-data; boundary=B", b'--B\r\nContent-Disposition: form-data; name="token"\r\n\r\n',
         b"\r\n-" * 20000, b"\r\n--B--"),
        ("text/plain", b"-----BEGIN RSA PRIVATE KEY-----", b"MIIE\n" * 12000, b"-----END RSA"),
    ],
)
def test_memory_stays_bounded(content_type: str, head: bytes, filler: bytes, end: bytes) -> None:
    r = StreamingRedactor(content_type)
    fed = emitted = 0
    out = [r.feed(head)]
    for _ in range(64):  # 3-4 MiB in 64 KiB chunks
        out.append(r.feed(filler))
        fed += len(filler)
        emitted += len(out[-1])
        assert len(r._buf) <= 4096 + 64  # the held tail: a few KiB, whatever the body size
    out.append(r.feed(end))
    out.append(r.close())
    assert b"".join(out) == redact_body(head + filler * 64 + end, content_type)


def test_streaming_emits_as_it_goes() -> None:
    r = StreamingRedactor("application/octet-stream")
    data = random.Random(9).randbytes(1 << 20)
    first = r.feed(data)
    assert len(first) >= len(data) - 4096
    assert first + r.close() == data


def test_streaming_lifecycle() -> None:
    r = StreamingRedactor("application/json")
    assert r.feed(b"") == b""
    assert r.feed(b'{"token": "abc"}') == b""  # short bodies are held until close
    assert r.close() == f'{{"token": "{REDACTED}"}}'.encode()
    assert r.close() == b""
    with pytest.raises(ValueError):
        r.feed(b"x")
    empty = StreamingRedactor(None)
    assert empty.close() == b""
    assert StreamingRedactor("text/plain").feed(memoryview(b"abc")) == b""


def test_replacement_forms_are_fixed() -> None:
    assert REDACTED == "[never captured]"
    assert REDACTED_URL == "[never%20captured]"
    assert redact.REDACTED_URL.replace("%20", " ") == REDACTED


# ---------------------------------------------------------------------------------------------
# Edges: header names by pattern, escaped JSON keys, any value under a credential key, form text
# under any content type, webhook URLs, URL-valued headers
# ---------------------------------------------------------------------------------------------

PATTERN_CREDENTIAL_HEADERS = [
    "X-Access-Key", "X-Private-Key", "X-Client-Key", "X-Amz-Server-Side-Encryption-Customer-Key",
    "X-Webhook-Secret", "X-Upload-Token", "X-Request-Signature", "X-Admin-Password", "X-Service-Credentials",
    "X-Sig", "X-Db-Pwd", "X-Key-Passphrase", "X-Bearer", "X-JWT-Assertion", "X-Private", "Apikey", "Key",
    "x_access_key", "X-Shopify-Hmac-Sha256",
]  # fmt: skip


@pytest.mark.parametrize("name", PATTERN_CREDENTIAL_HEADERS)
def test_credential_header_names_by_pattern(name: str) -> None:
    assert redact_headers([(name, "AKIAIOSFODNN7EXAMPLE-plain-looking")]) == [[name, REDACTED]]


# Real headers the connectors and their client libraries send or receive, which must stay readable.
HARMLESS_HEADERS = [
    ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ("Sec-WebSocket-Accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
    ("Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324"),
    ("X-Idempotency-Key", "req-2026-12-01-0001"),
    ("Cache-Key", "v1:/gmail/v1/users/me/labels"),
    ("Public-Key-Pins", 'pin-sha256="d6qzRu9zOECb90Uez27xWltNsj0e1Md7GkYYkVoZWmM="; max-age=5184000'),
    ("Access-Control-Allow-Credentials", "true"),
    ("Access-Control-Allow-Private-Network", "true"),
    ("Keep-Alive", "timeout=5, max=1000"),
    ("X-Goog-Upload-Command", "upload, finalize"),
    ("X-Goog-Upload-Offset", "0"),
    ("X-Goog-Upload-Header-Content-Length", "2000000"),
    ("X-Goog-Upload-Header-Content-Type", "image/png"),
    ("X-Goog-Upload-Chunk-Granularity", "262144"),
    ("X-Goog-Upload-Size-Received", "524288"),
    ("X-Goog-Api-Client", "gl-python/3.12.1 grpc/1.62.0 gax/2.17.1 gdcl/2.202.0"),
    ("X-Goog-User-Project", "my-project"),
    ("X-Accepted-GitHub-Permissions", "issues=write"),
    ("X-GitHub-Media-Type", "github.v3; format=json"),
    ("X-Slack-Unique-Id", "ZxYwVuTsRqPoNmLk"),
    ("x-ms-ags-diagnostic", '{"ServerInfo":{"DataCenter":"West Europe"}}'),
    ("Referer", "https://mail.google.com/mail/u/0/"),
    ("Content-Location", "https://graph.microsoft.com/v1.0/me/messages/AAMkAGI2"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "value"), HARMLESS_HEADERS, ids=[h[0] for h in HARMLESS_HEADERS])
def test_harmless_headers_stay(name: str, value: str) -> None:
    assert redact_headers([(name, value)]) == [[name, value]]


def test_every_documented_harmless_name_is_one_the_pattern_would_catch() -> None:
    """The list exists only to undo the pattern: an entry the pattern does not catch is noise."""
    for name in redact.HARMLESS_HEADER_NAMES:
        assert redact._HEADER_NAME_RE.search(name), name
    # and a harmless name still loses a credential value
    assert redact_headers([("Idempotency-Key", GITHUB_CLASSIC)]) == [["Idempotency-Key", REDACTED]]


URL_HEADER_CASES = [
    ("Referer", f"https://app.example.com/callback?state=s&code=4/0AX4Xf{'q' * 30}",
     f"https://app.example.com/callback?state=s&code={RU}"),
    ("Referer", f"https://x.example/page?access_token={GOOGLE_ACCESS}#top",
     f"https://x.example/page?access_token={RU}#top"),
    ("Content-Location", "https://api.example.com/v1/files/7?sig=abcdef0123&sv=1",
     f"https://api.example.com/v1/files/7?sig={RU}&sv=1"),
    ("Location", DISCORD_WEBHOOK, f"https://discord.com/api/webhooks/{RU}"),
    ("Location", "https://user:hunter2@example.com/a", "https://example.com/a"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "value", "expected"), URL_HEADER_CASES, ids=_ids(URL_HEADER_CASES))
def test_url_valued_headers_go_through_redact_url(name: str, value: str, expected: str) -> None:
    assert redact_headers([(name, value)]) == [[name, expected]]


WEBHOOK_URLS = [
    (SLACK_WEBHOOK, f"https://hooks.slack.com/services/{RU}"),
    (DISCORD_WEBHOOK, f"https://discord.com/api/webhooks/{RU}"),
    ("https://discordapp.com/api/webhooks/98765432109876543/" + _fake(B64URL, 68, 92),
     f"https://discordapp.com/api/webhooks/{RU}"),
    ("https://ptb.discord.com/api/v10/webhooks/123456789012345678/" + _fake(B64URL, 68, 93) + "/slack?wait=true",
     f"https://ptb.discord.com/api/v10/webhooks/{RU}?wait=true"),
    (TEAMS_WEBHOOK, f"https://contoso.webhook.office.com/webhookb2/{RU}"),
    ("https://outlook.office.com/webhook/1f0e2d3c@9a8b/IncomingWebhook/abc/def",
     f"https://outlook.office.com/webhook/{RU}"),
    ("https://outlook.office365.com/webhook/1f0e2d3c@9a8b/IncomingWebhook/abc/def",
     f"https://outlook.office365.com/webhook/{RU}"),
    ("https://hooks.zapier.com/hooks/catch/123456/abcdef/", f"https://hooks.zapier.com/hooks/{RU}"),
    ("https://api.telegram.org/bot123456789:AAEhBP0av28Rq3yQ5xQ8ZfLd1yN5wA3xZtc/sendMessage",
     f"https://api.telegram.org/bot{RU}"),
]  # fmt: skip


@pytest.mark.parametrize(("url", "expected"), WEBHOOK_URLS, ids=_ids(WEBHOOK_URLS))
def test_webhook_url_paths_are_redacted(url: str, expected: str) -> None:
    assert redact_url(url) == expected
    assert redact_url(expected) == expected


@pytest.mark.parametrize("url", [
    "https://discord.com/channels/123/456", "https://discord.com/api/v10/users/@me",
    "https://contoso.webhook.office.com/", "https://outlook.office.com/mail/inbox",
    "https://hooks.slack.com/services", "https://api.telegram.org/", "https://zapier.com/apps",
])  # fmt: skip
def test_webhook_hosts_without_a_secret_path_stay(url: str) -> None:
    assert redact_url(url) == url


@pytest.mark.parametrize("content_type", [None, "application/json", "text/plain", "application/octet-stream"])
@pytest.mark.parametrize("escaped", [False, True])
@pytest.mark.parametrize(("url", "expected"), WEBHOOK_URLS[:7], ids=_ids(WEBHOOK_URLS[:7]))
def test_webhook_urls_in_bodies(url: str, expected: str, content_type: str | None, escaped: bool) -> None:
    text = f'{{"text": "post to {url} now"}}'
    want = f'{{"text": "post to {expected.replace(RU, REDACTED)} now"}}'
    if escaped:
        text, want = text.replace("/", "\\/"), want.replace("/", "\\/")
    got = redact_body(text.encode(), content_type).decode()
    assert got == want


JSON_KEY_CASES = [
    # escapes in keys: compared as the key reads once parsed
    ('{"pass\\u0077ord": "hunter2", "a": 1}', f'{{"pass\\u0077ord": "{REDACTED}", "a": 1}}'),
    ('{"\\u0074oken": "abc"}', f'{{"\\u0074oken": "{REDACTED}"}}'),
    ('{"CLIENT\\u005FSECRET": "abc"}', f'{{"CLIENT\\u005FSECRET": "{REDACTED}"}}'),
    ('{"\\u0061\\u0063\\u0063\\u0065\\u0073\\u0073_token": "abc"}',
     f'{{"\\u0061\\u0063\\u0063\\u0065\\u0073\\u0073_token": "{REDACTED}"}}'),
    ('{"pass\\u0077ort": "x", "caf\\u00e9": "y", "id\\u0026": "z"}', None),  # not credential names
    # everything under a credential key, whatever the value
    ('{"client_secret": ["abc", "def"]}', f'{{"client_secret": "{REDACTED}"}}'),
    ('{"client_secret": [{"a": "]}\\"["}, [1, [2]]], "n": 2}', f'{{"client_secret": "{REDACTED}", "n": 2}}'),
    ('{"credentials": {"x": 1}, "token": {"value": "s", "nested": {"deep": ["t"]}}}',
     f'{{"credentials": {{"x": 1}}, "token": "{REDACTED}"}}'),
    ('{"password": 123456, "pin": 1, "secret": -1.5e3}',
     f'{{"password": "{REDACTED}", "pin": 1, "secret": "{REDACTED}"}}'),
    ('{"password": null, "token": true, "secret": false}', None),
    ('{"pass\\u0077ord": [1, 2]}', f'{{"pass\\u0077ord": "{REDACTED}"}}'),
    # JSON inside a JSON string
    ('{"text": "{\\"client_secret\\": [\\"a\\", \\"b\\\\\\"]\\"], \\"x\\": 1}"}',
     f'{{"text": "{{\\"client_secret\\": \\"{REDACTED}\\", \\"x\\": 1}}"}}'),
    ('{"text": "{\\"pass\\\\u0077ord\\": \\"abc\\"}"}', f'{{"text": "{{\\"pass\\\\u0077ord\\": \\"{REDACTED}\\"}}"}}'),
    ('{"text": "{\\"token\\": 42}"}', f'{{"text": "{{\\"token\\": \\"{REDACTED}\\"}}"}}'),
    # an inner string ending in an escaped backslash; an inner string cut off by the outer string's end
    ('{"text": "{\\"secret\\": [\\"a\\\\\\\\\\", \\"b\\"]}", "n": 1}',
     f'{{"text": "{{\\"secret\\": \\"{REDACTED}\\"}}", "n": 1}}'),
    ('{"text": "{\\"secret\\": [\\"a\\\\", "keep": "me"}',
     f'{{"text": "{{\\"secret\\": \\"{REDACTED}\\"", "keep": "me"}}'),
    # an array that never closes inside its string stops at the string's end
    ('{"text": "\\"token\\": [1, 2", "keep": "me"}', f'{{"text": "\\"token\\": \\"{REDACTED}\\"", "keep": "me"}}'),
]  # fmt: skip


@pytest.mark.parametrize("content_type", ["application/json", "text/plain", None, "application/octet-stream"])
@pytest.mark.parametrize(("body", "expected"), JSON_KEY_CASES, ids=_ids(JSON_KEY_CASES))
def test_json_credential_keys(body: str, expected: str | None, content_type: str | None) -> None:
    want = (body if expected is None else expected).encode()
    got = redact_body(body.encode(), content_type)
    assert got == want
    json.loads(got)
    assert redact_body(got, content_type) == got
    for cut in range(1, len(body), 3):
        assert _stream(body.encode(), content_type, [cut]) == got


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/octet-stream", "application/json",
                                          "image/png", "application/x-www-form-urlencoded"])
def test_form_credentials_whatever_the_content_type(content_type: str | None) -> None:
    assert redact_body(b"password=hunter2&user=bob", content_type) == f"password={RU}&user=bob".encode()
    assert redact_body(b"user=bob&client_secret=s3&x=1", content_type) == f"user=bob&client_secret={RU}&x=1".encode()
    assert redact_body(b"nothing=here&x=1", content_type) == b"nothing=here&x=1"


def test_redact_json_value_redacts_whatever_is_under_a_credential_key() -> None:
    got = redact_json_value({"client_secret": ["a"], "token": {"v": "x"}, "password": 7, "secret": None,
                             "api_key": True, "keep": [1, {"n": "x"}]})  # fmt: skip
    assert got == {"client_secret": REDACTED, "token": REDACTED, "password": REDACTED, "secret": None,
                   "api_key": True, "keep": [1, {"n": "x"}]}  # fmt: skip


@pytest.mark.parametrize("kind", ["list", "object"])
def test_memory_stays_bounded_under_a_credential_key(kind: str) -> None:
    head, filler, end = (b'{"token": [', b'"abc", ' * 9000, b'"z"], "x": 1}') if kind == "list" else (
        b'{"token": {', b'"k": "v\\"}", ' * 6000, b'"z": 1}, "x": 1}')
    r = StreamingRedactor("application/json")
    out = [r.feed(head)]
    for _ in range(48):
        out.append(r.feed(filler))
        assert len(r._buf) <= 4096 + 64
    out.append(r.feed(end))
    out.append(r.close())
    assert b"".join(out) == f'{{"token": "{REDACTED}", "x": 1}}'.encode()


# -- Credential files and token-looking responses are recorded now: every body path redacts them ------

SERVICE_ACCOUNT_KEY = {
    "type": "service_account", "project_id": "demo-project", "private_key_id": "0123456789abcdef0123",
    "private_key": PEM_KEY, "client_email": "sa@demo-project.iam.gserviceaccount.com", "client_id": "1234567890",
    "token_uri": "https://oauth2.googleapis.com/token",
}  # fmt: skip
AUTHORIZED_USER = {  # google-auth's token.json
    "token": GOOGLE_ACCESS, "refresh_token": GOOGLE_REFRESH, "token_uri": "https://oauth2.googleapis.com/token",
    "client_id": "123.apps.googleusercontent.com", "client_secret": "plain-looking-secret",
    "scopes": ["https://www.googleapis.com/auth/gmail.readonly"], "expiry": "2026-12-01T12:00:00Z",
}  # fmt: skip
PLAIN_SECRETS = ["plain-looking-secret", "opaque-access-value-1", "opaque-refresh-value-2"]
GMAIL_LOOKALIKE = {"id": "18c2", "access_token": "opaque-access-value-1", "refresh_token": "opaque-refresh-value-2"}
CREDENTIAL_FILES = [SERVICE_ACCOUNT_KEY, AUTHORIZED_USER, GMAIL_LOOKALIKE]
SECRET_MARKERS = [PEM_KEY.split("\n")[1][:40], GOOGLE_ACCESS[-30:], GOOGLE_REFRESH[-30:], *PLAIN_SECRETS]


def _stored_bytes(value: object, store) -> bytes:
    """Every byte a recorded body leaves: the entry value as JSON, base64 decoded, blobs read back."""
    out = [orjson.dumps(value)]

    def walk(v: object) -> None:
        if isinstance(v, dict):
            if set(v) == {"base64"}:
                out.append(base64.b64decode(v["base64"]))
            elif {"sha256", "ref"} <= set(v):
                out.append(store.path_for(v["sha256"]).read_bytes())
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(value)
    return b"\n".join(out)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    doc=st.sampled_from(CREDENTIAL_FILES),
    content_type=st.sampled_from([None, "application/json", "application/json; charset=utf-8", "text/plain",
                                  "application/octet-stream", "binary/octet-stream", "image/png"]),
    encoding=st.sampled_from([None, "gzip"]),
    layout=st.sampled_from(["compact", "indented", "binary-prefix"]),
    threshold=st.sampled_from([1 << 20, 64]),
)  # fmt: skip
def test_credential_files_are_redacted_in_every_body_path(tmp_path_factory, doc, content_type, encoding, layout,
                                                          threshold) -> None:
    """A Drive download of token.json, a service-account key file, a Gmail GET that looks like a grant:
    JSON, text, octet-stream, gzip, spilled to a blob or not, base64 or not: no secret byte in clear."""
    from journal.blobstore import BlobStore
    from journal.bodies import record_body

    store = BlobStore(tmp_path_factory.mktemp("blobs"))
    raw = json.dumps(doc, indent=2 if layout == "indented" else None).encode()
    if layout == "binary-prefix":
        raw = b"\xff\xfe\x00" + raw  # not UTF-8: stored as base64 (or a blob)
    wire = gzip.compress(raw) if encoding else raw
    value, extra = record_body(wire, content_type, encoding, store, threshold)
    assert not extra
    stored = _stored_bytes(value, store)
    for marker in SECRET_MARKERS:
        assert marker.encode() not in stored, (marker, value)
    assert REDACTED.encode() in stored


def test_trigger_gates_are_a_superset_of_what_each_condition_can_start_with():
    """The gate `(?=[...])` before a trigger character's conditions must never reject a byte one of
    them accepts: `_next_chars` answers None (no gate) rather than guess."""
    from journal.redact import _next_chars

    assert _next_chars("(?=yJ)") == {ord("y")}
    assert _next_chars("(?=(?i:earer|asic))") == set(b"eEaA")
    assert _next_chars("(?<=postg)(?=res:)") == {ord("r")}
    assert _next_chars("(?:amp;)?(?=token=)") == set(b"at")
    assert _next_chars("(?<=:A)") is None  # any byte may follow
    assert _next_chars("(?=[^x])") is None  # a negated class is not read
    assert _next_chars("(?=a*)") is None  # may match empty
    assert _next_chars("(?=[ \\t]{0,4}[=:])") == set(b" \t=:")


def test_compile_for_capture_leaves_a_json_call_nothing_to_compile():
    """What a capture point compiles before it is ready is what a JSON call, its URL and headers and a binary
    body use: their first redaction compiles no rule set (no cache of a compiled set misses)."""
    import journal.redact as r

    caches = [r._kind_regex, r._kind_gate, r._kind_triggers, r._kind_rare_triggers, r._value_re, r._value_gate,
              r._value_trigger_re, r._url_name_re, r._body_name_re]
    for c in caches:  # as in a fresh process (they compile again when next used)
        c.cache_clear()
    r.compile_for_capture()
    misses = [c.cache_info().misses for c in caches]
    r.redact_url("https://gmail.googleapis.com/gmail/v1/users/me/messages?q=is%3Aunread&access_token=ya29.abc")
    r.redact_headers([("Authorization", "Bearer abcdefabcdefabcdefabcdef1"), ("X-Api-Key", "k")])
    r.redact_body(b'{"messages":[{"id":"1"}],"note":"line\\npassword: hunter2"}', "application/json")
    r.redact_body(b"\x89PNG\r\n\x1a\n....", "image/png")
    r.redact_body(b"plain text, token=abc", None)
    assert [c.cache_info().misses for c in caches] == misses
