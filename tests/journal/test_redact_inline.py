"""Credentials that do not start a line, and the spellings branch redact30 left (docs/secrets.md): userinfo
after any URL scheme, flags and environment assignments in a command written in a body, libpq and
connection-string passwords, header lines quoted in text, a line broken by a lone carriage return. Every
case is redacted in a JSON string and in a text body, streamed in any chunking and by the trigger scan as by
the plain scan; evidence around them (ids, hashes, base64, URLs without credentials, prose) stays."""

from __future__ import annotations

import json

import pytest

from journal.redact import StreamingRedactor, contains_credential, redact_body, redact_json_value

SECRET = "Hunter2Inline9"

# class -> text holding SECRET (as a shell command, a connection string, a header line, ...)
LEAKS = {
    # 1. user:password@ after any scheme
    "redis://": f"redis-cli -u redis://default:{SECRET}@cache:6379/0",
    "rediss://": f"rediss://:{SECRET}@cache.test:6380",
    "amqps://": f"AMQP_URL is amqps://guest:{SECRET}@mq.test/vhost",
    "ftp://": f"curl ftp://bob:{SECRET}@files.test/a.txt",
    "smtp://": f"smtp://mailer:{SECRET}@smtp.test:587",
    "ldap://": f"ldap://cn=admin:{SECRET}@ldap.test",
    "custom+scheme.v2://": f"custom+scheme.v2://u:{SECRET}@h.test",
    "URL-encoded scheme": f"u=amqp%3A%2F%2Fguest%3A{SECRET}%40mq.test",
    # 2. command lines
    "--password=": f"mysql -h db --password={SECRET} app",
    "--password VALUE": f"pg_dump --password {SECRET} -h db",
    "--token=": f"gh --token={SECRET} repo list",
    "--api-key quoted": f"tool --api-key '{SECRET} more' --verbose",
    "--secret=": f"vault write --secret={SECRET}",
    "--client-secret": f"az login --client-secret {SECRET}",
    "docker -e": f"docker run -e DB_PASSWORD={SECRET} -e MODE=x postgres",
    "docker --env quoted": f'docker run --env "API_KEY={SECRET}" img',
    "helm --set": f"helm install x --set db.password={SECRET}",
    "java -D": f"java -Dspring.datasource.password={SECRET} -jar app.jar",
    "env NAME=VALUE cmd": f"env A=1 GITHUB_TOKEN={SECRET} ./deploy.sh",
    "export after ;": f"cd /srv; export AWS_SECRET_ACCESS_KEY={SECRET}; make",
    "export after &&": f"cd /srv && export API_TOKEN='{SECRET}' && make",
    # 3. libpq DSN and connection strings
    "libpq DSN": f"host=db port=5432 dbname=app user=app password={SECRET} sslmode=require",
    "libpq DSN quoted": f"host=db password='{SECRET}' user=app",
    ";Password=": f"Server=tcp:db.test,1433;Database=app;User ID=sa;Password={SECRET};Encrypt=True",
    "Pwd=": f"Driver={{ODBC}};Server=db;Uid=sa;Pwd={SECRET};",
    "PWD=": f"DSN=x;UID=sa;PWD={SECRET}",
    "camelCase dbPassword=": f"const dbPassword={SECRET};",
    # 4. header lines in text
    "Authorization: Token": f"curl -H 'Authorization: Token {SECRET}' https://api.test/",
    "Authorization: Bot": f"Authorization: Bot {SECRET}",
    "Authorization: Digest": f'Authorization: Digest username="bob", response="{SECRET}"',
    "Digest in a quoted command": f"""curl -H 'Authorization: Digest realm="x", response="{SECRET}", qop=auth'""",
    "OAuth 1.0": f'Authorization: OAuth oauth_consumer_key="ck", oauth_signature="{SECRET}"',
    "Authorization: AWS4": f"Authorization: AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/x, Signature={SECRET}",
    "authorization: bare key": f"authorization: {SECRET}",
    "Proxy-Authorization": f"Proxy-Authorization: Negotiate {SECRET}",
    "Cookie:": f"GET / HTTP/1.1 Cookie: sid={SECRET}; theme=dark",
    "Set-Cookie:": f'curl -H "Set-Cookie: session={SECRET}; Path=/"',
    # 6. a Python dict as printed
    "Python dict repr": f"params={{'password': '{SECRET}', 'user': 'bob'}}",
    "repr, double-quoted value": f"""{{'id': 7, 'api_key': "{SECRET}"}}""",
    # 5. a lone carriage return before a line assignment
    "lone CR": f"cfg\rapi_key={SECRET}",
}
# JSON-escape spellings of a lone CR and its URL-encoded form (they only exist as written in a body)
RAW_LEAKS = {
    "JSON \\r": (f'{{"note": "cfg\\rAPI_KEY={SECRET}"}}', "application/json"),
    "JSON \\u000d": (f'{{"note": "cfg\\u000dtoken: {SECRET}"}}', "application/json"),
    "JSON in JSON \\\\r": (json.dumps({"a": json.dumps({"n": f"cfg\rsecret={SECRET}"})}), "application/json"),
    "form %0D": (f"x=cfg%0Dpassword%3D{SECRET}&y=1", "application/x-www-form-urlencoded"),
    "URL in JSON %0D": (f'{{"u": "https://h.test/?x=cfg%0Dpassword%3D{SECRET}&y=1"}}', "application/json"),
    "JSON-escaped slashes": (f'{{"u": "amqps:\\/\\/guest:{SECRET}@mq\\/"}}', "application/json"),
}

CONTENT_TYPES = ["application/json", "text/plain", None, "application/octet-stream"]


def _as_body(text: str, content_type: str | None) -> bytes:
    """The text as a JSON string value in a JSON body, else as it is."""
    if content_type == "application/json":
        return json.dumps({"command": text, "id": "1a2b3c"}).encode()
    return text.encode()


def _all_ways(body: bytes, content_type: str | None) -> list[bytes]:
    """redact_body, streamed 7 bytes at a time, and the plain scan that tries every rule at every byte."""
    outs = [redact_body(body, content_type)]
    for triggers in (True, False):
        r = StreamingRedactor(content_type)
        r._use_triggers = triggers
        outs.append(b"".join([*(r.feed(body[i : i + 7]) for i in range(0, len(body), 7)), r.close()]))
    return outs


@pytest.mark.parametrize("content_type", CONTENT_TYPES)
@pytest.mark.parametrize("name", list(LEAKS))
def test_inline_credential_is_redacted(name: str, content_type: str | None) -> None:
    body = _as_body(LEAKS[name], content_type)
    outs = _all_ways(body, content_type)
    assert all(SECRET.encode() not in out for out in outs), outs[0]
    assert outs[1:] == [outs[0]] * 2
    assert b"[never captured]" in outs[0] or b"[never%20captured]" in outs[0]


@pytest.mark.parametrize("name", list(RAW_LEAKS))
def test_escaped_spelling_is_redacted(name: str) -> None:
    body, content_type = RAW_LEAKS[name]
    outs = _all_ways(body.encode(), content_type)
    assert all(SECRET.encode() not in out for out in outs), outs[0]
    assert outs[1:] == [outs[0]] * 2


@pytest.mark.parametrize("name", list(LEAKS))
def test_inline_credential_in_parsed_mcp_arguments(name: str) -> None:
    got = json.dumps(redact_json_value({"command": LEAKS[name], "args": [LEAKS[name]]}))
    assert SECRET not in got


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("redis-cli -u redis://default:s3cret@cache:6379", "redis-cli -u redis://[never captured]@cache:6379"),
        ("mysql --password=s3cret -h db", "mysql --password=[never captured] -h db"),
        ("tool --token 's3 cret' -v", "tool --token '[never captured]' -v"),
        ("docker run -e DB_PASSWORD=s3cret img", "docker run -e DB_PASSWORD=[never captured] img"),
        ("env A=1 API_KEY=s3cret ./run", "env A=1 API_KEY=[never captured] ./run"),
        ("host=db password=s3cret user=x", "host=db password=[never captured] user=x"),
        ("Server=x;Password=s3cret;Encrypt=True", "Server=x;Password=[never captured];Encrypt=True"),
        ("-H 'Authorization: Token s3cret'", "-H 'Authorization: Token [never captured]'"),
        ("Cookie: sid=s3cret; a=b", "Cookie: [never captured]"),
    ],
)
def test_replacement_keeps_the_name_scheme_and_quotes(text: str, expected: str) -> None:
    assert redact_body(text.encode(), "text/plain") == expected.encode()
    # inside a JSON string the document stays JSON, only the value changed
    out = redact_body(json.dumps({"c": text}).encode(), "application/json")
    assert json.loads(out) == {"c": expected}


# Evidence the new rules must leave byte for byte.
KEPT = [
    "https://docs.example.com/d/1a2b3c/edit?usp=sharing",
    "redis://cache.test:6379/0",
    "ssh://git@github.com:22/org/repo.git",
    "ftp://files.test/pub/a.txt",
    "amqps://mq.test/vhost?heartbeat=30",
    "mailto:alice@example.com",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "id=1a2b3c4d5e6f threadId=17f0c2a9b",
    "data: iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
    "Forgot your password? Reset the password from the settings page.",
    "Read the password from stdin with --password-stdin.",
    "docker login --password-stdin < token.txt",
    "mysql --password=$MYSQL_PWD -h db",
    "gh --token ${GH_TOKEN} repo list",
    "curl -H 'Authorization: Bearer $TOKEN' https://api.test/",
    "send Authorization: {token} on every call",
    "set password= in the config file",
    "the environment variables and export formats",
    "env | grep PATH; export PATH=/usr/bin:$PATH",
    "docker run -e MODE=fast -e LOG_LEVEL=debug img",
    "host=db port=5432 dbname=app user=app sslmode=require",
    "Server=tcp:db.test;Database=app;Integrated Security=true",
    "cookies: none. Authorization header missing",
    "x-e API_KEY=1",
    "line one\rline two\r",
    "it's the user's 'password' field, don't log it",
    "{'user': 'bob', 'id': 7, 'scopes': ['read']}",
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB+Pwd==",
    "digest c2lnbmF0dXJlIGJ5dGVz/passwd= and +PWD==",
]


@pytest.mark.parametrize("content_type", CONTENT_TYPES)
@pytest.mark.parametrize("text", KEPT)
def test_evidence_is_left_alone(text: str, content_type: str | None) -> None:
    body = _as_body(text, content_type)
    assert _all_ways(body, content_type) == [body] * 3
    assert not contains_credential(text)


@pytest.mark.parametrize(
    ("head", "params"),
    [
        (b"Authorization: Digest ", b'username="bob", response="Hunter2Inline9", qop=auth\n'),
        (b"curl -H 'Authorization: Digest ", b'realm="x", response="Hunter2Inline9"\' https://a.test/\n'),
        (b"x Authorization: OAuth ", b'oauth_consumer_key="ck", oauth_signature="Hunter2Inline9"'),
    ],
)
def test_quoted_header_parameters_cut_by_a_chunk_end_are_read_whole(head: bytes, params: bytes) -> None:
    """A tail keeps what it has read: a `name="..."` parameter cut by the end of the bytes received so far
    must not be taken for a lone `=` (the value after it would then end the tail and stay). The header's
    value is long, so its rule starts before the parameters have arrived; the last case ends the body."""
    body = b"a\n" + head + b"a " * 3000 + params
    whole = redact_body(body, "text/plain")
    assert SECRET.encode() not in whole
    at = body.index(SECRET.encode())
    for cut in range(at - 24, at + 2):
        r = StreamingRedactor("text/plain")
        out = r.feed(body[:cut]) + b"".join(r.feed(body[i : i + 4200]) for i in range(cut, len(body), 4200))
        assert out + r.close() == whole, cut
