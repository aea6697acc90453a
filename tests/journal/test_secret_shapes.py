"""Issue 23: each credential shape redacted where it rides; the catalogue; encodings; keyed fingerprints."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import zlib
from pathlib import Path
from urllib.parse import quote_plus

import pytest

from journal import fingerprint_key as fk
from journal.blobstore import BlobStore
from journal.bodies import BodyCapture, record_body
from journal.redact import (
    REDACTED,
    REDACTED_URL,
    StreamingRedactor,
    contains_credential,
    redact_body,
    redact_headers,
    redact_json_value,
    redact_url,
)
from journal.secret_shapes import CATALOGUE_SOURCE, KEYWORD_NAMES, PREFIX_SHAPES
from tests.support.secret_samples import samples

R, RU = REDACTED, REDACTED_URL


# -- the catalogue ------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", PREFIX_SHAPES, ids=lambda s: s.name)
def test_every_catalogue_shape_is_redacted_and_keeps_its_prefix(shape) -> None:
    for name, text, needle in samples(per_shape=len(shape.prefixes), seed=5):
        if name != shape.name:
            continue
        prefix = text[: len(text) - len(needle)]
        for ctype, body in (("text/plain", f"key: {text} ok"), ("application/json", json.dumps({"v": text}))):
            got = redact_body(body.encode(), ctype).decode()
            assert needle not in got and prefix + R in got, (ctype, got)
        assert contains_credential(text)
        assert needle not in redact_url(f"https://h.example/x?q={text}&n=1")


def test_catalogue_names_its_source_and_every_shape_its_origin() -> None:
    assert CATALOGUE_SOURCE.startswith("detect-secrets ")
    assert all(s.source == "broker" or s.source.startswith(CATALOGUE_SOURCE) for s in PREFIX_SHAPES)
    assert {"password", "pwd", "secret", "api_key"} <= set(KEYWORD_NAMES)


def test_a_prefix_inside_base64_data_stays() -> None:
    # glued to a base64 run on its left it is part of the data, not a token standing alone
    body = b'{"data": "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo' + b"sk_live_" + b"a1" * 20 + b'"}'
    assert redact_body(body, "application/json") == body


# -- the shapes of the issue, each where it rides --------------------------------------------------


PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAzSECRETKEYMATERIAL0\nAbcdEF0123\n-----END RSA PRIVATE KEY-----\n"
)


def test_pem_in_json_with_escaped_newlines() -> None:
    body = json.dumps({"files": {"id_rsa": {"content": PEM}}}).encode()
    got = redact_body(body, "application/json")
    assert b"SECRETKEYMATERIAL" not in got and b"-----BEGIN RSA PRIVATE KEY-----" + R.encode() in got
    assert json.loads(got)  # still JSON


def test_pem_in_json_inside_a_json_string() -> None:
    body = json.dumps({"result": json.dumps({"key": "x", "pem": PEM})}).encode()
    assert b"SECRETKEYMATERIAL" not in redact_body(body, "application/json")


def test_openssh_key_in_a_form_body() -> None:
    key = PEM.replace("RSA", "OPENSSH")
    body = f"channel=C1&text={quote_plus(key)}".encode()
    got = redact_body(body, "application/x-www-form-urlencoded")
    assert b"SECRETKEYMATERIAL" not in got and RU.encode() in got


def test_pgp_private_key_block_in_text() -> None:
    key = "-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: x\n\nlQOYBGSECRETPGPKEY\n-----END PGP PRIVATE KEY BLOCK-----"
    assert b"SECRETPGPKEY" not in redact_body(key.encode(), "text/plain")


@pytest.mark.parametrize(
    ("ctype", "body", "secret"),
    [
        ("application/json", '{"AccessKeyId": "AKIAIOSFODNN7EXAMPLE", "SecretAccessKey": "wJalrXUtnFEMI/K7MDENG"}',
         "wJalrXUtnFEMI"),
        ("text/plain", "[default]\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG\n", "wJalrXUtnFEMI"),
        ("application/xml", "<r><SecretAccessKey>wJalrXUtnFEMI/K7MDENG</SecretAccessKey></r>", "wJalrXUtnFEMI"),
        ("text/plain", "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=c2VjcmV0S2V5==;EndpointSuffix=x",
         "c2VjcmV0S2V5"),
        # an ADO.NET string is caught by the key that holds it (a bare ;Password= in prose is not: docs/secrets.md)
        ("application/json", '{"connectionString": "Server=db;User Id=app;Password=Hunter2Pass;"}', "Hunter2Pass"),
        ("application/json", '{"db": "postgresql://app:Hunter2Pass@db.internal:5432/app"}', "Hunter2Pass"),
        ("application/json", '{"u": "https:\\/\\/bob:Hunter2Pass@h.example\\/x"}', "Hunter2Pass"),
        ("text/plain", "curl -H 'Authorization: Basic YWxpY2U6U3VtbWVyMjAyNCE='", "YWxpY2U6U3VtbWVy"),
        ("text/plain", "export DB_PASSWORD=Hunter2Pass\n", "Hunter2Pass"),
        ("text/plain", "//registry.npmjs.org/:_authToken=0b1c2d3e-aaaa-bbbb", "0b1c2d3e"),
        ("text/plain", "bot 123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1", "AAHdqTcvCH1vGWJx"),
        ("application/x-www-form-urlencoded", "x=%0Apassword%3DHunter2Pass&y=1", "Hunter2Pass"),
    ],
)  # fmt: skip
def test_issue_shapes_in_bodies(ctype: str, body: str, secret: str) -> None:
    got = redact_body(body.encode(), ctype)
    assert secret.encode() not in got, got
    assert not contains_credential(got)  # redacted output is not matched again


@pytest.mark.parametrize("key", ["pwd", "pass", "passphrase", "secretKey", "secret_key", "Secret-Key", "auth",
                                 "connectionString", "SecretAccessKey", "aws_secret_access_key", "db_password"])
def test_json_keys_match_after_normalising_case_and_separators(key: str) -> None:
    body = json.dumps({"a": [{key: "Hunter2Pass"}]}).encode()
    assert b"Hunter2Pass" not in redact_body(body, "application/json")
    assert redact_json_value({"a": [{key: "Hunter2Pass"}]}) == {"a": [{key: R}]}


@pytest.mark.parametrize("name", ["auth", "jwt", "sessionid", "session_id", "private_token", "pwd", "passphrase"])
def test_query_names(name: str) -> None:
    assert redact_url(f"https://h.example/x?{name}=Hunter2Pass&page=2") == f"https://h.example/x?{name}={RU}&page=2"


def test_header_x_api_pass_and_a_token_in_any_header() -> None:
    got = redact_headers([("X-Api-Pass", "p"), ("X-Note", "sk_live_" + "a1" * 12), ("Accept", "*/*")])
    assert got == [["X-Api-Pass", R], ["X-Note", R], ["Accept", "*/*"]]


def test_ordinary_text_stays() -> None:
    text = (b"The basic plan costs 5. Token count: 120. See https://example.com:8080/a@b and "
            b"id 18c2f3a4b5d6e7f8, uuid 123e4567-e89b-12d3-a456-426614174000.\npassword: true\n")
    assert redact_body(text, "text/plain") == text


def test_streaming_split_at_every_offset_gives_the_whole_body_result() -> None:
    body = (b'{"note": "' + json.dumps(PEM)[1:-1].encode() + b'", "k": "sk-ant-api03-' + b"Ab1" * 30
            + b'"}\n[default]\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG\n')
    whole = redact_body(body, "application/json")
    for cut in range(1, len(body)):
        r = StreamingRedactor("application/json")
        assert r.feed(body[:cut]) + r.feed(body[cut:]) + r.close() == whole


# -- encodings -------------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path)


def _raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def test_raw_deflate_is_decoded_and_redacted(store: BlobStore) -> None:
    body = b'{"access_token": "ya29.a0Afabcdefghijklmnopqrstuv", "n": 1}'
    value, extra = record_body(_raw_deflate(body), "application/json", "deflate", store)
    assert value == {"access_token": R, "n": 1} and extra == {}
    value, _ = record_body(zlib.compress(body), "application/json", "deflate", store)
    assert value == {"access_token": R, "n": 1}


def test_raw_deflate_streamed_byte_by_byte(store: BlobStore) -> None:
    data = _raw_deflate(b"password=hunter2&x=1")
    cap = BodyCapture(store, "application/x-www-form-urlencoded", "deflate")
    for i in range(len(data)):
        cap.feed(data[i : i + 1])
    assert cap.finish() == (f"password={RU}&x=1", {})


@pytest.mark.parametrize("coding", ["compress", "x-unknown", "gzip"])
def test_a_body_that_cannot_be_decoded_is_not_kept(store: BlobStore, coding: str, tmp_path: Path) -> None:
    raw = b"password=hunter2 not compressed at all"
    value, extra = record_body(raw, "text/plain", coding, store)
    assert value is None and "content_encoding_error" in extra
    assert not any(b"hunter2" in p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())


def test_a_body_that_breaks_midway_leaves_no_blob(store: BlobStore, tmp_path: Path) -> None:
    import gzip

    good = gzip.compress(b"x" * 100_000 + b" password=hunter2")
    cap = BodyCapture(store, "text/plain", "gzip", threshold=1024)
    cap.feed(good[:-20])
    cap.feed(b"\x00garbage" * 4)
    value, extra = cap.finish()
    assert value is None and "content_encoding_error" in extra
    assert not any(b"x" * 1024 in p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())  # no blob left


# -- keyed fingerprints --------------------------------------------------------------------------


@pytest.fixture
def key_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cfg" / "fingerprint.key"
    monkeypatch.setenv(fk.KEY_FILE_ENV, str(path))
    return path


def test_fingerprint_is_keyed_per_installation(key_file: Path, tmp_path: Path, monkeypatch) -> None:
    import hashlib

    from journal.record import principal_fingerprint

    headers = [("Authorization", "Basic YWxpY2U6U3VtbWVyMjAyNCE=")]
    fp = principal_fingerprint(headers, "")
    assert fp == principal_fingerprint(headers, "")  # stable within an installation
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    unkeyed = hashlib.sha256(b"connector-broker principal\0YWxpY2U6U3VtbWVyMjAyNCE=").hexdigest()[:16]
    assert fp != "fp:" + unkeyed  # a guess cannot be checked without the key
    other = tmp_path / "other.key"
    monkeypatch.setenv(fk.KEY_FILE_ENV, str(other))
    assert principal_fingerprint(headers, "") != fp  # another installation, another name
    monkeypatch.setenv(fk.KEY_FILE_ENV, str(key_file))
    assert principal_fingerprint(headers, "") == fp


def test_fingerprint_key_follows_the_config_variables(tmp_path: Path, monkeypatch) -> None:
    """The key's place is worked out once per set of variables (journal/fingerprint_key.py): a change
    of XDG_CONFIG_HOME or HOME still picks the key there."""
    from journal.record import principal_fingerprint

    headers = [("X-Api-Key", "abc123")]
    monkeypatch.delenv(fk.KEY_FILE_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "a"))
    fp_a = principal_fingerprint(headers, "")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "b"))
    fp_b = principal_fingerprint(headers, "")
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    fp_h = principal_fingerprint(headers, "")
    assert len({fp_a, fp_b, fp_h}) == 3
    for where in ("a", "b", "h/.config"):
        assert (tmp_path / where / "connector-broker" / "fingerprint.key").is_file()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "a"))
    assert principal_fingerprint(headers, "") == fp_a


@pytest.mark.e2e  # starts a fresh interpreter
def test_fingerprint_key_is_the_same_across_processes(key_file: Path) -> None:
    code = "from journal.record import principal_fingerprint as f; print(f([('X-Api-Key', 'abc123')], ''))"
    env = {**os.environ, fk.KEY_FILE_ENV: str(key_file)}
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            for _ in range(2)]  # fmt: skip
    assert runs[0].stdout == runs[1].stdout and runs[0].stdout.startswith("fp:")


def test_fingerprint_key_readable_by_others_is_refused(key_file: Path) -> None:
    key_file.parent.mkdir(parents=True)
    key_file.write_text("00" * 32)
    key_file.chmod(0o644)
    with pytest.raises(fk.FingerprintKeyError, match="chmod 600"):
        fk._load.__wrapped__(str(key_file))


@pytest.mark.parametrize("content", [b"not a key", b"\xff\xfe" + b"00" * 32, b"00" * 8])
def test_fingerprint_key_not_hex_is_refused(key_file: Path, content: bytes) -> None:
    key_file.parent.mkdir(parents=True)
    key_file.write_bytes(content)  # text, bytes that are not ASCII, a key too short: one clear error each
    key_file.chmod(0o600)
    with pytest.raises(fk.FingerprintKeyError, match="remove it"):
        fk._load.__wrapped__(str(key_file))


def test_fingerprint_key_that_is_a_fifo_is_refused_without_blocking(key_file: Path) -> None:
    key_file.parent.mkdir(parents=True)
    os.mkfifo(key_file, 0o600)  # reading it would wait for a writer forever
    with pytest.raises(fk.FingerprintKeyError, match="not a regular file"):
        fk._load.__wrapped__(str(key_file))


# -- start-up cost ----------------------------------------------------------------------------------


@pytest.mark.e2e  # starts a fresh interpreter
def test_import_compiles_no_rule_alternation() -> None:
    code = (
        "import journal.redact as r\n"
        "assert r._kind_regex.cache_info().currsize == 0 and r._kind_triggers.cache_info().currsize == 0\n"
        "assert r._kind_gate.cache_info().currsize == 0\n"
        "r.redact_body(b'{\"a\": 1}', 'application/json')\n"
        "assert r._kind_gate.cache_info().currsize == 1 and r._kind_triggers.cache_info().currsize == 1\n"
        "r.redact_body(b'{\"token\": 1}', 'application/json')\n"
        "assert r._kind_regex.cache_info().currsize == 1\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])
