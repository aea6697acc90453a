"""Generated credential samples (never real keys) and the ways a secret can be written to a file.

Each sample is (shape, text, needle): `text` is what a client or server writes, `needle` the secret
part of it that must never reach disk (a prefix such as `sk_live_` may stay: it names the kind of key).
Used by tests/test_secret_corpus.py (Recorder level) and its smaller slice through the real broker.
"""

from __future__ import annotations

import base64
import json
import random
import re
import string
from urllib.parse import quote, quote_plus

from journal.secret_shapes import PREFIX_SHAPES


def _chars(alphabet: str) -> str:
    """'A-Za-z0-9_-' -> the characters it names."""
    out, i = [], 0
    while i < len(alphabet):
        if i + 2 < len(alphabet) and alphabet[i + 1] == "-":
            out += [chr(c) for c in range(ord(alphabet[i]), ord(alphabet[i + 2]) + 1)]
            i += 3
        else:
            out.append(alphabet[i])
            i += 1
    return "".join(out)


def _fill(template: str, alphabet: str, rng: random.Random) -> str:
    chars = _chars(alphabet)
    # at least one digit and one letter where the alphabet has them, as real tokens do
    return re.sub(r"\{(\d+)\}", lambda m: "".join(rng.choice(chars) for _ in range(int(m.group(1)))), template)


def _r(rng: random.Random, n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _pem(kind: str, rng: random.Random, end: str | None = None) -> tuple[str, str]:
    body = base64.b64encode(rng.randbytes(180)).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return f"-----BEGIN {kind}-----\n" + "\n".join(lines) + f"\n-----END {end or kind}-----\n", lines[1]


def samples(per_shape: int = 3, seed: int = 23) -> list[tuple[str, str, str]]:
    """At least `per_shape` samples of every shape: the catalogue's prefixes and the hand-written rules."""
    rng = random.Random(seed)
    out: list[tuple[str, str, str]] = []
    for shape in PREFIX_SHAPES:
        for k in range(per_shape):
            prefix = shape.prefixes[k % len(shape.prefixes)]
            rest = _fill(shape.sample, shape.alphabet, rng)
            out.append((shape.name, prefix + rest, rest))
    for _ in range(per_shape):
        aws = _r(rng, 30, string.ascii_letters + string.digits + "/+") + "Ab12" + _r(rng, 6)
        pw = _r(rng, 14) + "9x"
        tok = _r(rng, 36, string.ascii_letters + string.digits + "_-")
        azure = base64.b64encode(rng.randbytes(64)).decode()
        hand = [
            ("JWT", f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ{_r(rng, 20)}.{_r(rng, 43)}", None),
            ("Google access token", f"ya29.a0Af{_r(rng, 60)}", None),
            ("Google refresh token", f"1//0{_r(rng, 40)}", None),
            ("Google API key", f"AIza{_r(rng, 35)}", None),
            ("Google client secret", f"GOCSPX-{_r(rng, 28)}", None),
            ("Slack bot token", f"xoxb-{rng.randint(10**11, 10**12)}-{rng.randint(10**11, 10**12)}-{_r(rng, 24)}",
             None),
            ("Slack user token", f"xoxp-{rng.randint(10**11, 10**12)}-{_r(rng, 30)}", None),
            ("Slack app token", f"xapp-1-A{_r(rng, 10)}-{rng.randint(10**12, 10**13)}-{_r(rng, 40)}", None),
            ("GitHub token", f"ghp_{_r(rng, 36)}", None),
            ("GitHub fine-grained token", f"github_pat_{_r(rng, 22)}_{_r(rng, 59)}", None),
            ("Bearer header in text", f"Authorization: Bearer {tok}", tok),
            ("Basic header in text", "Authorization: Basic "
             + base64.b64encode(f"alice{rng.randint(1, 999)}:{pw}".encode()).decode(), None),
            ("URL with password", f"postgresql://app:{pw}@db{rng.randint(1, 99)}.internal:5432/app", pw),
            ("AWS INI credentials", f"[default]\naws_access_key_id = AKIA{_r(rng, 16, string.ascii_uppercase)}\n"
             f"aws_secret_access_key = {aws}\n", aws),
            ("env assignment", f"# settings\nexport DB_PASSWORD={pw}\n", pw),
            ("Azure connection string", f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={azure};"
             "EndpointSuffix=core.windows.net", azure),
            ("Telegram bot token", f"{rng.randint(10**8, 10**9)}:AA{_r(rng, 33, string.ascii_letters + '_-')}", None),
            ("Slack webhook", f"https://hooks.slack.com/services/T{_r(rng, 8)}/B{_r(rng, 8)}/{_r(rng, 24)}", None),
        ]
        for name, text, needle in hand:
            if needle is None:
                needle = _needle_of(text)
            out.append((name, text, needle))
        for kind, end in (("RSA PRIVATE KEY", None), ("EC PRIVATE KEY", None), ("PRIVATE KEY", None),
                          ("OPENSSH PRIVATE KEY", None), ("PGP PRIVATE KEY BLOCK", None)):  # fmt: skip
            text, needle = _pem(kind, rng, end)
            out.append((f"PEM {kind}", text, needle))
    return out


def _needle_of(text: str) -> str:
    """The secret part of a standalone token: what follows its last ':', '=', ' ' or '-'/'_' prefix mark,
    at least its last 16 characters."""
    tail = re.split(r"[ :=]", text)[-1]
    return tail[-16:] if len(tail) > 16 else tail


# Credentials known by the name they are given (JSON key, form field, query parameter, INI line, XML).
KEYWORD_NAMES = ("SecretAccessKey", "pwd", "pass", "passphrase", "secretKey", "secret_key", "Secret-Key", "auth",
                 "connectionString", "password", "client_secret", "access_token", "api_key", "aws_secret_access_key",
                 "private_token", "apiSecret", "db_password")  # fmt: skip
QUERY_ONLY_NAMES = ("sessionid", "key", "code")


def keyword_samples(seed: int = 24) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    return [(name, _r(rng, 10) + "9z" + _r(rng, 10)) for name in KEYWORD_NAMES]


def written_forms(needle: str) -> list[bytes]:
    """Every way `needle` could sit in a file: raw, URL-encoded, JSON-escaped, base64 at three alignments."""
    raw = needle.encode()
    forms = {raw, quote(needle, safe="").encode(), quote_plus(needle).encode(), json.dumps(needle)[1:-1].encode()}
    for k in range(3):
        enc = base64.b64encode(b"\0" * k + raw)
        skip = (0, 2, 3)[k]
        middle = enc[skip:-4]
        if len(middle) >= 12:
            forms.add(middle)
            forms.add(middle.replace(b"+", b"-").replace(b"/", b"_"))
    return [f for f in forms if len(f) >= 8]


def ordinary_values(n: int = 400, seed: int = 25) -> list[str]:
    """Values of ordinary API traffic that must stay: ids, hashes, UUIDs, base64 images, timestamps..."""
    import hashlib
    import uuid

    rng = random.Random(seed)
    out: list[str] = []
    makers = [
        lambda: f"{rng.getrandbits(64):016x}",  # Gmail message / thread id
        lambda: str(uuid.UUID(int=rng.getrandbits(128))),
        lambda: hashlib.sha1(rng.randbytes(8)).hexdigest(),
        lambda: hashlib.sha256(rng.randbytes(8)).hexdigest(),
        lambda: base64.b64encode(b"\x89PNG\r\n\x1a\n" + rng.randbytes(600)).decode(),  # inline image
        lambda: base64.urlsafe_b64encode(rng.randbytes(300)).decode().rstrip("="),  # Gmail attachment data
        lambda: "1" + _r(rng, 32, string.ascii_letters + string.digits + "_-"),  # Drive file id
        lambda: "C0" + _r(rng, 8, string.ascii_uppercase + string.digits),  # Slack channel id
        lambda: f"{rng.randint(1_600_000_000, 1_800_000_000)}.{rng.randint(0, 999999):06d}",  # Slack ts
        lambda: f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:14:00Z",
        lambda: f"cus_{_r(rng, 14)}",  # Stripe object ids
        lambda: f"pi_{_r(rng, 24)}",
        lambda: f"W/\"{rng.getrandbits(64):x}\"",  # ETag
        lambda: f"https://www.googleapis.com/drive/v3/files/{_r(rng, 28)}?fields=id,name&pageToken={_r(rng, 20)}",
        lambda: f"user{rng.randint(1, 9999)}@example.com",
        lambda: "MDQ6VXNlcj" + _r(rng, 8),  # GitHub node id
        lambda: f"{rng.getrandbits(32)}",  # historyId
        lambda: f"<{_r(rng, 20)}@mail.gmail.com>",  # Message-ID
        lambda: f"msg_{_r(rng, 24)}",  # Anthropic message id
        lambda: f"chatcmpl-{_r(rng, 29)}",  # OpenAI completion id
    ]
    for i in range(n):
        out.append(makers[i % len(makers)]())
    return out
