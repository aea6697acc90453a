"""Credential redaction: what the journal never writes (docs/contract.md, section 3).

Everything here is pure (stdlib only, no I/O, no logging) so it can run before any byte touches
disk. Redaction is byte-level: whatever is not a credential stays exactly as it was, so replay and
hashes of the surrounding content keep working.

Replacement forms (fixed, part of the journal's look):
- ``[never captured]`` (REDACTED) in header values, JSON string values, text and binary bodies,
  multipart part contents.
- ``[never%20captured]`` (REDACTED_URL, the same text with only the space percent-encoded) wherever
  the text sits in a URL-encoded context: URL query and fragment values, URL path segments,
  ``name=value`` parameters found inside text, and every replacement inside an
  application/x-www-form-urlencoded body.

Body rules run as one left-to-right scan (see ``StreamingRedactor``); ``redact_body`` is that scan
over the whole body as one final buffer, which gives what feeding it in chunks gives (the tests compare
the two for any chunking).
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote, unquote_plus

from journal.secret_shapes import KEYWORD_NAMES, PREFIX_SHAPES

# Python's own regex parser and its opcodes (no type stubs), read by _next_chars.
_sre_parser: Any = importlib.import_module("re._parser")
_sre_constants: Any = importlib.import_module("re._constants")

__all__ = [
    "HARMLESS_HEADER_NAMES",
    "REDACTED",
    "REDACTED_URL",
    "StreamingRedactor",
    "contains_credential",
    "is_token_exchange",
    "redact_body",
    "redact_escaped_json",
    "redact_headers",
    "redact_json_value",
    "redact_url",
]

REDACTED = "[never captured]"
REDACTED_URL = "[never%20captured]"
_R = REDACTED.encode()
_RU = REDACTED_URL.encode()

# ---------------------------------------------------------------------------------------------
# Credential names
# ---------------------------------------------------------------------------------------------

# Query / form parameter names (docs/contract.md section 3, plus OAuth token-exchange extras).
_URL_NAMES = (
    "key", "api_key", "access_token", "oauth_token", "token", "code", "client_secret",
    "refresh_token", "id_token", "assertion", "client_assertion", "code_verifier", "password",
    "sig", "signature", "x-amz-signature", "x-amz-credential", "x-amz-security-token",
    "x-goog-signature", "x-goog-credential", "tempauth", "ticket", "upload_id", "pub_secret",
    # extras: same meaning, other spellings / other grants
    "passwd", "secret", "auth_token", "session_token", "private_key", "subject_token",
    "actor_token", "device_code",
    # issue 23: more spellings of the same things (journal/secret_shapes.py lists where they come from)
    *KEYWORD_NAMES,
    "auth", "jwt", "session_id", "private_token",
    # branch redact30: the API key header's name as a parameter, and the servlet / PHP session ids (a
    # session id is a bearer capability for the session).
    "x_api_key", "jsessionid", "phpsessid",
)  # fmt: skip

# JSON keys and multipart field names. `key`, `code` and `ticket` are left out on purpose: in JSON
# they are mostly not credentials (Graph/GitHub error `code`, GitHub `license.key`, Calendar
# conference `key`, code-running tool params); an OAuth code never travels in a JSON body outside
# the token exchanges, which are dropped whole. Header names appear as JSON keys in Graph `$batch`.
_BODY_NAMES = tuple(n for n in _URL_NAMES if n not in ("key", "code", "ticket", "session_id", "jwt")) + (
    "authorization", "proxy_authorization", "cookie", "set_cookie", "x_api_key", "x_goog_api_key",
    "ocp_apim_subscription_key", "private_token", "x_auth_token", "x_access_token", "credential",
    "client_key", "upload_url", "response_url", "@microsoft.graph.downloadUrl", "@content.downloadUrl",
)  # fmt: skip


def _name_pattern(names: Iterable[str], escape: str | None = None) -> str:
    """Regex for a set of names: ASCII case-insensitive, `_`/`-` between words optional (accessToken,
    access_token and ACCESS-TOKEN are one name). Written as a trie of [xX] classes: an alternation under
    (?i) is tried name by name and was the slowest part of scanning JSON.

    With `escape` (the regex for the backslash of a JSON escape), any character may also be written as
    its `\\uXXXX` escape: a JSON key is compared as it reads once parsed, so `"pass\\u0077ord"` is
    `password`."""

    def esc(chars: str) -> str:
        codes = "|".join(
            "00" + "".join(f"[{h}{h.upper()}]" if h.isalpha() else h for h in f"{ord(c):02x}") for c in chars
        )
        return f"{escape}u(?:{codes})"

    @functools.cache  # a few dozen characters, at thousands of trie nodes
    def char(ch: str) -> str:
        plain = "[_-]" if ch == "_" else f"[{ch}{ch.upper()}]" if ch.isalpha() else re.escape(ch)
        if escape is not None:
            plain = f"(?:{plain}|{esc('_-' if ch == '_' else ch + ch.upper() if ch.isalpha() else ch)})"
        return plain + "?" if ch == "_" else plain

    def build(seqs: list[str]) -> str:
        groups: dict[str, list[str]] = {}
        ends = False
        for s in seqs:
            if s:
                groups.setdefault(s[0], []).append(s[1:])
            else:
                ends = True
        alts = [char(ch) + build(rest) for ch, rest in sorted(groups.items())]
        if not alts:
            return ""
        if ends:
            return "(?:" + "|".join(alts) + ")?"
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"

    keys = [re.sub(r"[_-]", "_", n.lower()) for n in names]
    first = sorted({c for k in keys for c in (k[0], k[0].upper())} | ({"\\"} if escape is not None else set()))
    return "(?=[" + re.escape("".join(first)) + "])" + build(keys)


_URL_ALT = _name_pattern(_URL_NAMES)
_BODY_ALT = _name_pattern(_BODY_NAMES)


@functools.cache
def _escaped_key_alts() -> tuple[str, str]:
    """JSON keys as written with \\uXXXX escapes: (as a key, as a key inside a JSON string holding JSON,
    where the escape's backslash may itself be escaped: \\\\u0077). The larger patterns, built on first use."""
    def words(escape: str) -> str:  # `_ID_WORDS` (as `_JSON_KEY_ALT` has it), any character maybe escaped
        char = rf"(?:[A-Za-z0-9]|{escape}u00(?:3[0-9]|[46][1-9a-fA-F]|[57][0-9aA]))"
        return rf"(?:{char}{{1,32}}+(?:[_.\-]|{escape}u00(?:5[fF]|2[dDeE]))){{0,3}}"

    return (words(r"\\") + "(?:" + _name_pattern(_BODY_NAMES, escape=r"\\") + ")",
            words(r"\\\\?") + "(?:" + _name_pattern(_BODY_NAMES, escape=r"\\\\?") + ")")


@functools.cache
def _url_name_re() -> re.Pattern[str]:
    """A URL parameter (or form field) name that holds a credential; compiled on first use, as every
    regex of this module: every command imports it, most never redact anything."""
    return re.compile(_URL_ALT)


@functools.cache
def _body_name_re() -> re.Pattern[str]:
    """A JSON key that holds a credential (compiled on first use)."""
    return re.compile(_BODY_ALT)

_HEADER_NAMES = frozenset(
    h.lower()
    for h in (
        "Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie", "X-Goog-Api-Key",
        "X-Goog-Iam-Authorization-Token", "X-Api-Key", "Api-Key", "X-Auth-Token", "X-Access-Token",
        "X-Refresh-Token", "X-CSRF-Token", "X-XSRF-Token", "X-GitHub-OTP", "X-Amz-Security-Token",
        "Ocp-Apim-Subscription-Key", "PRIVATE-TOKEN", "X-Hub-Signature", "X-Hub-Signature-256",
        "X-Slack-Signature",
        # Google echoes the resumable-upload session id (the upload_id capability) in this header.
        "X-GUploader-UploadID",
    )
)  # fmt: skip
# Catch-all name pattern (docs/contract.md section 3), widened by word: any name word ending in `key`
# (X-Access-Key, X-Private-Key, X-Client-Key, Subscription-Key), and the words sig, hmac, pwd,
# passphrase, bearer, jwt, assertion and private.
_HEADER_NAME_RE = re.compile(
    r"(?i)(auth|token|secret|api-?key|signature|session|cookie|passw|credential|otp"
    r"|(?:^|[-_.])(?:[a-z0-9]*key|sig|hmac|pwd|pass|passphrase|bearer|jwt|assertion|private)(?:$|[-_.]))"
)
# Known harmless names the pattern would catch: their values are nonces, ids or flags, useful to an
# auditor and never a credential (a credential value pattern in them is still redacted, as in any
# header). Sec-WebSocket-Key is a random handshake nonce (RFC 6455), Idempotency-Key a client-chosen
# request id, Public-Key-Pins holds hashes of public keys, Access-Control-Allow-Credentials is "true".
HARMLESS_HEADER_NAMES = frozenset(
    h.lower()
    for h in (
        "Sec-WebSocket-Key", "Idempotency-Key", "X-Idempotency-Key", "Cache-Key", "X-Cache-Key",
        "Public-Key-Pins", "Public-Key-Pins-Report-Only", "Access-Control-Allow-Credentials",
        # Private Network Access (Chrome): "true" flags, not secrets
        "Access-Control-Allow-Private-Network", "Access-Control-Request-Private-Network",
    )
)  # fmt: skip
# Header values that are URLs: redacted with redact_url (a capability URL loses its secret, a plain
# redirect or referrer stays byte for byte).
_URL_HEADERS = frozenset({
    "location", "content-location", "referer", "x-goog-upload-url", "x-goog-upload-control-url",
})  # fmt: skip
_LINK_URL_RE = re.compile(r"<([^>]*)>")

# ---------------------------------------------------------------------------------------------
# The scanner: rules = bounded head regex + optional streaming tail
# ---------------------------------------------------------------------------------------------

# Bytes a rule's head may need to look at, counted from where it starts. Every head regex below is
# bounded well under this (the longest: a JWT header segment of up to 2048 chars, a multipart part
# header block of about 1.7 KiB). It is also the most a StreamingRedactor holds back, plus a
# multipart boundary.
_HOLD = 4096
# Original bytes kept before the scan position, for lookbehinds (the widest, the guard before a catalogue
# prefix such as AGE-SECRET-KEY-1, looks back 11 bytes; office365.com\/web 18).
_CONTEXT = 24


class _Elements:
    """Tail made of a `(element)*` regex; an element (plus its lookahead) spans at most `width` bytes.

    Why: tails (the token's remaining characters, a JSON string up to its closing quote) have no length
    limit, so they are consumed as they stream instead of being held.

    What it reads before the end of the bytes received so far is kept, so an element must fail, not match,
    where it lacks the bytes it looks at; `at_end`, when given, is the pattern used once the body's end is
    known (an element that may end the body: a lookahead allowing the end of the text).
    """

    __slots__ = ("pattern", "width", "_regex", "at_end", "_end_regex")

    def __init__(self, pattern: bytes, width: int, at_end: bytes | None = None) -> None:
        self.pattern = pattern
        self.width = width
        self.at_end = at_end
        self._regex: re.Pattern[bytes] | None = None  # compiled at the first match, not at import
        self._end_regex: re.Pattern[bytes] | None = None

    @property
    def regex(self) -> re.Pattern[bytes]:
        if self._regex is None:
            self._regex = re.compile(self.pattern)
        return self._regex

    def step(self, buf: bytes, pos: int, final: bool) -> tuple[int, bool]:
        """Consume what surely belongs to the tail; done once the byte that ends it is known."""
        if final and self.at_end is not None:
            if self._end_regex is None:
                self._end_regex = re.compile(self.at_end)
            m = self._end_regex.match(buf, pos)
        else:
            m = (self._regex or self.regex).match(buf, pos)
        end = m.end() if m else pos
        return end, final or end + self.width <= len(buf)


class _Until:
    """Tail that runs up to (not including) a delimiter, e.g. the next multipart boundary."""

    __slots__ = ("delim", "strip_cr")

    def __init__(self, delim: bytes, strip_cr: bool) -> None:
        self.delim = delim
        self.strip_cr = strip_cr

    def step(self, buf: bytes, pos: int, final: bool) -> tuple[int, bool]:
        """Consume up to the delimiter; hold back enough bytes to see a delimiter split across chunks."""
        i = buf.find(self.delim, pos)
        if i >= 0:
            if self.strip_cr and i > pos and buf[i - 1] == 0x0D:
                i -= 1
            return i, True
        if final:
            return len(buf), True
        return max(pos, len(buf) - len(self.delim) - 1), False


_TOK = rb"A-Za-z0-9+/_\-"  # token / base64 alphabet
# A token glued to 8 or more base64 characters on its left is part of a base64 run (attachment data),
# not a credential standing on its own: the guard that keeps random base64 from matching AIza..., ghp_...
_LB = rb"(?<![" + _TOK + rb"]{8})"

_T_TOKEN = _Elements(rb"[" + _TOK + rb"]*", 1)
_T_DOTTED = _Elements(rb"[" + _TOK + rb"]*(?:\.[" + _TOK + rb"]+)*", 2)
_T_BEARER = _Elements(rb"[A-Za-z0-9._~+/=_\-]*", 1)
_T_XOXD = _Elements(rb"[A-Za-z0-9%+/=_\-]*", 1)
_T_HOOK = _Elements(rb"[A-Za-z0-9_/+\-]*(?:\\/[A-Za-z0-9_/+\-]*)*", 2)
_T_PCT_HOOK = _Elements(rb"(?:[A-Za-z0-9_+\-]|%2[Ff])*", 3)
_T_JSON_STRING = _Elements(rb'[^"\\]*(?:\\[\s\S][^"\\]*)*', 2)
_T_URL_VALUE = _Elements(rb"[^&\s\"'<>\\#)}]*", 1)
_T_FORM_VALUE = _Elements(rb"[^&]*", 1)
_T_PEM = _Until(b"-----END", strip_cr=False)
_T_NUMBER = _Elements(rb"[-+.0-9eE]*", 1)
_T_HOOK_PATH = _Elements(rb"[A-Za-z0-9_/+@%\-]*(?:\\/[A-Za-z0-9_/+@%\-]*)*", 2)
_MULTIPART = "multipart"  # tail built per redactor from the boundary


class _JsonValue:
    """Tail for a JSON array or object under a credential key: everything up to its closing bracket goes.

    Stateful (bracket depth, inside a string or not), so each match gets its own instance. `nested` is
    for JSON written inside a JSON string (strings delimited by \\", an unescaped " ends the outer
    string and so the value, whatever the depth: the tail never runs past the string that holds it).
    """

    __slots__ = ("depth", "in_string", "nested")

    _OUT = re.compile(rb'[^"\\\[\]{}]+|(?P<q>")|(?P<o>[\[{])|(?P<c>[\]}])|(?P<e>\\[\s\S])')
    _IN = re.compile(rb'[^"\\]+|(?P<q>")|(?P<e>\\[\s\S])')
    # nested: \" opens/closes an inner string; an inner escape is \\ plus one (escaped) character, and
    # \\ just before an unescaped " is an inner backslash at the end of the outer string. Every byte
    # sequence matches one token (given 4 bytes, which step() waits for), so the tail never skips ahead.
    _N_OUT = re.compile(rb'[^"\\\[\]{}]+|(?P<end>")|(?P<q>\\")|(?P<o>[\[{])|(?P<c>[\]}])|(?P<e>\\[^"])')
    _N_IN = re.compile(
        rb'[^"\\]+|(?P<end>")|(?P<q>\\")|(?P<e>\\\\(?:\\[\s\S]|[^"\\])|\\\\(?=")|\\[^"\\])'
    )

    def __init__(self, nested: bool = False) -> None:
        self.depth = 0
        self.in_string = False
        self.nested = nested

    def step(self, buf: bytes, pos: int, final: bool) -> tuple[int, bool]:
        n = len(buf)
        while pos < n:
            if buf[pos] == 0x5C and n - pos < 4 and not final:
                return pos, False  # an escape may continue in the next chunk
            if self.nested:
                m = (self._N_IN if self.in_string else self._N_OUT).match(buf, pos)
            else:
                m = (self._IN if self.in_string else self._OUT).match(buf, pos)
            if m is None:  # a backslash cut off by the end of the body (final: nothing follows)
                return n, True
            group = m.lastgroup
            if group == "end":
                return pos, True
            pos = m.end()
            if group == "q":
                self.in_string = not self.in_string
            elif group == "o":
                self.depth += 1
            elif group == "c":
                self.depth -= 1
                if self.depth <= 0:
                    return pos, True
        return pos, final


# (keep, rest, tail, replacement): head = (?P<k>keep)rest; the output is keep + the replacement, then
# the tail (if any) is dropped as it streams. Replacements: "text" [never captured] ("url" form in a
# form body), "url" [never%20captured], "json" "[never captured]" (a JSON string in place of any JSON
# value), "json-in-json" the same with escaped quotes.
_Tail = _Elements | _Until | str | type | None
_Rule = tuple[bytes, bytes, _Tail | tuple, str]

_SP = rb"(?:[ \t]|\+|%20)"  # a space as written in text or in a URL-encoded form
_PEM_BODY = rb"(?=(?:[ \t\r\n+]|\\{1,3}[nrt]|%0[AaDd9]|%20){0,8}(?:[A-Za-z0-9+/]|%2[BbFf]))"
_T_SSH2 = _Until(b"---- END", strip_cr=False)
_T_PUTTY = _Until(b"Private-MAC", strip_cr=False)
_T_BASIC = _Elements(rb"[A-Za-z0-9+/=]*(?:%(?:2[BbFf]|3[Dd])[A-Za-z0-9+/=]*)*", 3)
_UI_CHAR = rb"[A-Za-z0-9._~!$&()*+,;=%\-]"  # userinfo (RFC 3986) less ':' and quotes
_T_USERINFO = _Elements(rb"[A-Za-z0-9._~!$&()*+,;=%:\-]*", 1)
_PCT_CHAR = rb"(?:[A-Za-z0-9._~!$'()*+,;=\-]|%(?!2[Ff]|40|3[Aa])[0-9A-Fa-f]{2})"
_T_PCT_USERINFO = _Elements(rb"(?:[A-Za-z0-9._~!$'()*+,;=\-]|%(?!40)[0-9A-Fa-f]{2})*", 3)
_T_CONN = _Elements(rb"(?:[^;\"'\s&<>\\%]|%(?!3[Bb])[0-9A-Fa-f]{2})*", 3)


# First characters of the hand-written value rules' triggers, less 'e' (a tenth of all prose): a prefix
# starting with one of these adds no trigger character.
_CHEAP_FIRST = frozenset("1GxyABgbh")


def _prefix_rule(prefix: str, rest: str) -> tuple[_Rule, tuple[str, str]]:
    """A catalogue prefix as a rule, plus its trigger (character, condition).

    The rule starts where its trigger costs least (each character that can start a rule slows the scan
    of every body where it occurs): at the prefix's first character when other rules already start
    there, else at its first `_` or `-` (rare in prose), else at a rarely seen letter inside it that
    other rules already use; what comes before is a lookbehind, so the prefix stays whole. Like AIza or
    ghp_, a prefix glued to 8 or more base64 characters on its left is part of a base64 run, not a token
    standing alone.
    """
    i = 0 if prefix[0] in _CHEAP_FIRST else next((j for j, c in enumerate(prefix) if c in "_-"), -1)
    if i < 0:
        i = next((j for j, c in enumerate(prefix) if c in "1GxyAB"), -1)
    if i < 0:
        raise ValueError(f"catalogue prefix {prefix!r} needs a _ or -, or one of 1GxyAB, to start its rule")
    before, after = re.escape(prefix[:i]).encode(), re.escape(prefix[i:]).encode()
    keep = (rb"(?<=" + before + rb")" if before else b"") + rb"(?<![" + _TOK + rb"]{8}" + before + rb")" + after
    cond = f"(?<={re.escape(prefix[: i + 1])})" if i else f"(?={re.escape(prefix[1:])})"
    return (keep, rest.encode(), _T_TOKEN, "text"), (prefix[i], cond)


# Schemes whose URLs often carry a password (databases, git, web), each with a character the value
# rules' triggers already have (so no new trigger character); every other scheme is read from its `://`
# (`_ANY_SCHEME_USERINFO_RULES`), which these rules keep in step with.
_USERINFO_SCHEMES = ("http", "https", "postgres", "postgresql", "mysql", "mongodb", "mongodb+srv", "mariadb",
                     "git", "git+ssh", "jdbc:mysql", "jdbc:postgresql", "jdbc:mariadb")  # fmt: skip


def _userinfo_rules() -> list[tuple[_Rule, tuple[str, str]]]:
    """The rules for user:password@ after each scheme of `_USERINFO_SCHEMES` (raw and URL-encoded)."""
    out: list[tuple[_Rule, tuple[str, str]]] = []
    for scheme in _USERINFO_SCHEMES:
        i = 0 if scheme[0] in _CHEAP_FIRST else next(j for j, c in enumerate(scheme) if c in "1GxyABgb")
        before, after = re.escape(scheme[:i]).encode(), re.escape(scheme[i:]).encode()
        keep = (rb"(?<=" + before + rb")" if before else b"") + rb"(?<![A-Za-z0-9+.\-]" + before + rb")" + after
        raw_look = rb"(?=" + _UI_CHAR + rb"{0,128}+:(?:" + _UI_CHAR + rb"|:){1,128}+@)"
        pct_look = rb"(?=" + _PCT_CHAR + rb"{0,256}%3[Aa](?:" + _PCT_CHAR + rb"|%3[Aa]){1,256}%40)"
        raw = (keep + rb":\\?/\\?/", raw_look, _T_USERINFO, "text")
        pct = (keep + rb"%3[Aa]%2[Ff]%2[Ff]", pct_look, _T_PCT_USERINFO, "text")
        # The trigger reads on up to the '@' (a URL without a password, the common case, never gets as far
        # as trying the rules).
        look = (b"(?::\\\\?/\\\\?/" + raw_look + b"|%3[Aa]%2[Ff]%2[Ff]" + pct_look + b")").decode()
        after_i = re.escape(scheme[i + 1 :])
        cond = f"(?<={re.escape(scheme[: i + 1])})(?={after_i}{look})" if i else f"(?={after_i}{look})"
        out += [(raw, (scheme[i], cond)), (pct, (scheme[i], cond))]
    return out


_USERINFO_RULES = _userinfo_rules()
# Every other scheme (redis, rediss, amqp(s), ftp, smtp(s), ldap, ...: `[a-z][a-z0-9+.-]*://`), started at
# the first '/' of `://` (or of `:\/\/`), or at the A of an upper-case `%3A%2F%2F`: the scheme's last
# character is all the lookbehind reads (a trigger at every ':' would cost every JSON body's scan).
_UI_RAW_LOOK = rb"(?=" + _UI_CHAR + rb"{0,128}+:(?:" + _UI_CHAR + rb"|:){1,128}+@)"
_UI_PCT_LOOK = rb"(?=" + _PCT_CHAR + rb"{0,256}%3[Aa](?:" + _PCT_CHAR + rb"|%3[Aa]){1,256}%40)"
_ANY_SCHEME_USERINFO_RULES: tuple[_Rule, ...] = (
    (rb"(?:(?<=[A-Za-z0-9+.\-]:)|(?<=[A-Za-z0-9+.\-]:\\))/\\?/", _UI_RAW_LOOK, _T_USERINFO, "text"),
    (rb"(?<=[A-Za-z0-9+.\-]%3)A%2[Ff]%2[Ff]", _UI_PCT_LOOK, _T_PCT_USERINFO, "text"),
)
_PREFIX_RULES = tuple(_prefix_rule(p, shape.rest) for shape in PREFIX_SHAPES for p in shape.prefixes)

# Assignments at the start of a line: INI, .env, YAML, properties (`aws_secret_access_key = ...`,
# `export DB_PASSWORD=...`, `password: ...`), a credential name after up to three identifier words
# (DB_, AWS_, spring.datasource.). The line may sit in a JSON string (\n escaped) or in a URL-encoded
# form value (%0A, or the value's start); indented by blanks, or by tabs written `\t` inside a JSON
# string. true, false and null stay. Inside a JSON string every character may also be written as its
# `\uXXXX` escape (some encoders write every control character so): the line break `\u000a` (after
# `\u000d` or `\r`), a blank `\u0009` / `\u0020`, the `=` / `:` `\u003d` / `\u003a`, the value's
# opening quote `\"`, `\u0022` or `\u0027` (`password: \"hunter2\"` is a YAML line in a JSON string). A YAML
# list item (`- password: ...`, docker-compose's `- DB_PASSWORD=...`) is a line assignment too.
_ID_WORDS = rb"(?:[A-Za-z0-9]{1,32}+[_.\-]){0,3}"
# A JSON key holding a credential: a credential name after up to three identifier words, as line
# assignments and name/value pairs read a name (an MCP client's `env` dict, `{"GITHUB_TOKEN": ...}`, a
# docker-compose `environment` map: `OPENAI_API_KEY` is `api_key` after `OPENAI_`). camelCase prefixes are
# not words (`nextPageToken` is a cursor and stays).
_JSON_KEY_ALT = _ID_WORDS.decode() + "(?:" + _BODY_ALT + ")"
# A blank as written in text or inside a JSON string (in JSON inside a JSON string, the escape's backslash
# is escaped too: \\t).
_BLANK = rb"(?:[ \t]|\\\\?(?:t|u00(?:09|20)))"
_ASSIGN_SEP = _BLANK + rb"{0,8}(?:[=:]|\\\\?u003[AaDd])" + _BLANK + rb"{0,8}"
_ASSIGN_NAME = (
    _BLANK + rb"{0,16}(?:-" + _BLANK + rb"{1,4})?(?:export" + _BLANK + rb"{1,4})?" + _ID_WORDS
    + rb"(?:" + _BODY_ALT.encode() + rb")" + _ASSIGN_SEP
)
# A line break as written in text or inside a JSON string (the first alternative: the start of the body).
_LINE_START = rb"(?:(?<![\s\S])|\r?\n|\r|(?:\\r|\\u000[Dd])(?:\\n|\\u000[Aa])?|\\n|\\u000[Aa])"
# The same lines URL-encoded (a form value, a query parameter): the break `%0A` (`%0a`, after `%0D`),
# blanks `+`, `%20`, `%09`, the `=` / `:` encoded or as written.
_PCT_SP = rb"(?:\+|%20|%09)"
_PCT_ASSIGN_NAME = (
    _PCT_SP + rb"{0,16}(?:-" + _PCT_SP + rb"{1,4})?(?:export" + _PCT_SP + rb"{1,4})?" + _ID_WORDS
    + rb"(?:" + _BODY_ALT.encode() + rb")"
    + _PCT_SP + rb"{0,8}(?:%3[Dd]|%3[Aa]|[=:])"
    + _PCT_SP + rb"{0,8}"
)  # fmt: skip


def _pct_assign_rule(value_char: bytes, replacement: str) -> _Rule:
    """The URL-encoded line assignment, its value made of `value_char`s (wider in a form body, where only
    '&' ends a value, than in a URL written in text, which a quote or a bracket ends)."""
    return (
        rb"(?:%0[Aa]|%0[Dd](?:%0[Aa])?)" + _PCT_ASSIGN_NAME + rb"(?:%2[27])?",
        rb"(?!(?:true|false|null)(?![A-Za-z0-9_])|\[never)(?=" + value_char + rb")",
        _Elements(value_char + rb"*", 3), replacement,
    )


# Credentials that do not start a line (branch redact31): a command written in a body (a tool's shell
# argument, a JSON string holding a script), a header line quoted in text, a connection string in prose.
# Each starts at a character the rules above already trigger on ('-', 'e', 'h', 'A', '/'), or at '=' for
# the rules of `_EQ_RULES`, which a form body (whose fields have their own rule) does not try.
# A value as written after `=` or a blank: quoted (what follows, up to a quote, a backslash or the line's
# end, goes), or bare (up to a blank or a shell operator). A shell variable (`$TOKEN`, `${TOKEN}`), a
# placeholder (`<token>`) and a value already redacted stay.
_QUOTE = rb"(?:[\"']|\\(?:\\\\)?\"|\\\\?u002[27])"
_T_QUOTED = _Elements(rb"[^\"'\\\r\n]*", 1)
_T_ARG = _Elements(rb"[^\s\"'\\;&|<>`]*", 1)
_NOT_VAR = rb"(?!\[never|\$[A-Za-z_{(])"


class _ArgValue:
    """Tail of a value after a flag or an assignment (`_value_rule`): quoted when its head ended with the
    quote (`"`, `'`, `\\"`, `\\u0022`, `\\u0027`), else bare; decided at its first step from the byte before
    it. One rule for both spellings rather than two: the key names in each head are most of what a rule
    costs to compile, and every capture point compiles these before it is ready."""

    __slots__ = ("_tail",)

    def __init__(self) -> None:
        self._tail: _Elements | None = None

    def step(self, buf: bytes, pos: int, final: bool) -> tuple[int, bool]:
        if self._tail is None:
            self._tail = _T_QUOTED if pos and buf[pos - 1] in b"\"'27" else _T_ARG
        return self._tail.step(buf, pos, final)


def _value_rule(head: bytes) -> _Rule:
    """A head followed by a value, quoted (the quote stays) or bare."""
    value = rb"(?:" + _QUOTE + rb"(?=[^\"'\\\r\n])|(?=[^\s\"'\\;&|<>`]))"
    return (head + value, _NOT_VAR, _ArgValue, "text")


_ARG_START = rb"(?:(?<![A-Za-z0-9_\-])|(?<=\\[nrt]))"  # a word's start, also after a JSON-escaped blank
_CRED_NAME = _ID_WORDS + rb"(?:" + _BODY_ALT.encode() + rb")="  # DB_PASSWORD=, spring.datasource.password=
# A header line written in text: the credential after the scheme word (Token, Digest, Bot,
# AWS4-HMAC-SHA256, ...; none for a bare key), or the whole cookie list, up to the line's end, a quote (the
# end of a JSON string or of a quoted command) or a backslash (an escaped line break). Inside a JSON string
# an escaped quote (Digest's `username=\"...\"`) does not end it; as written, a quoted parameter
# (Digest's, OAuth 1.0's `name="..."`) followed by another, a quote or the line's end does not either.
# The tails read a quoted parameter whole from its `="` (its name is read as plain characters), and never
# take a `=` followed by a quote alone: cut by a chunk's end, the parameter is read again from its `=` once
# the rest has come (a tail keeps what it has read).
_QUOTED_PARAM = rb'="[^"\r\n\\]{0,256}"(?=[ \t]{0,4}(?:,[ \t]{0,4}[A-Za-z_]|[\'\\\r\n]%s))'


def _line_tail(more: bytes) -> _Elements:
    """A value to the line's end, a quote or a backslash (`more`: other elements), reading quoted parameters
    whole; a parameter that ends the body is only known to once its end is."""
    elements = rb'(?:[^\r\n"\'\\=]++|%s|=(?=[^"])' + more + rb")*"
    return _Elements(elements % (_QUOTED_PARAM % b""), 302, elements % (_QUOTED_PARAM % rb"|(?![\s\S])"))


# A line assignment's value: up to the line's end, a quote or a backslash; a header line's quoted parameters
# (`Authorization: Digest username="bob", response="..."`) do not end it.
_T_LINE_VALUE = _line_tail(b"")
_T_HEADER_LINE = _line_tail(rb'|\\"')
_HEADER_VALUE = rb"(?![$<{]|\[never)(?=[^\s\"'\\])"
_INLINE_RULES: tuple[_Rule, ...] = (
    # `--password=...`, `--token ...`, `--api-key=...`, `--client-secret ...`: a flag named like a credential
    # (the body name list); after a blank, a value that is no other flag.
    _value_rule(_ARG_START + rb"--(?:" + _BODY_ALT.encode() + rb")(?:=|[ \t]{1,8}(?!-))"),
    # `docker run -e DB_PASSWORD=...`, `--env`, `--build-arg`, helm `--set db.password=...`, `-Dspring...=`;
    # `env API_KEY=... cmd`, `cd x; export TOKEN=...` (after up to four other assignments).
    _value_rule(_ARG_START + rb"(?:(?:(?:-e|--env|--build-arg|--set(?:-string)?)(?:=|[ \t]{1,8})|-D)"
                + _QUOTE + rb"?|(?:export|env)[ \t]{1,8}(?:-[A-Za-z]{1,8}[ \t]{1,8}){0,2}"
                rb"(?:[A-Za-z_][A-Za-z0-9_]{0,64}=[^\s\"'\\;&|]{0,128}[ \t]{1,8}){0,4})" + _CRED_NAME),
    # `Authorization: Token ...` (any scheme), `Proxy-Authorization:`, `Cookie: ...`, `Set-Cookie: ...`.
    (rb"(?<=[Aa]ut)horization:[ \t]{0,8}(?:[A-Za-z][A-Za-z0-9._\-]{0,32}[ \t]{1,8})?+", _HEADER_VALUE,
     _T_HEADER_LINE, "text"),
    (rb"(?<=[Cc]ooki)e:[ \t]{0,8}", _HEADER_VALUE, _T_HEADER_LINE, "text"),
)  # fmt: skip
# `password=` after a word's start or a camelCase word (libpq `host=db password=...`, `;Password=...`,
# `Pwd=`, `dbPassword=`), started at the '=' (each name ends in d).
_EQ_NAMES = ("password", "passwd", "pwd")
_EQ_HEAD = (
    rb"(?:" + b"|".join(rb"(?<=(?i:%s))(?<![A-Za-z0-9](?i:%s))|(?<=[a-z0-9]%s)" % (n, n, n.capitalize())
                        for n in (x.encode() for x in _EQ_NAMES)) + rb")=(?!=)"  # base64 padding: `.../pwd==`
)
_EQ_RULES: tuple[_Rule, ...] = (_value_rule(_EQ_HEAD),)


_VALUE_RULES: tuple[_Rule, ...] = (
    # 'Bearer <token>': the token needs 20+ characters and a digit, so prose ("bearer of") stays.
    (rb"(?i:bearer)(?:[ \t]{1,8}|\+|%20)",
     rb"(?=[A-Za-z._~+/_\-]{0,63}[0-9])[A-Za-z0-9._~+/_\-]{20}", _T_BEARER, "text"),
    # JWT: two base64url segments starting eyJ joined by a dot (signature and later segments are tail).
    (b"", rb"eyJ[A-Za-z0-9_\-]{5,2048}+\.eyJ[A-Za-z0-9_\-]{5}", _T_DOTTED, "text"),
    # Google OAuth access token (ya29.a0Af..., ya29.c.b0...).
    (b"", rb"ya29\.(?=[A-Za-z0-9._\-]{20})[A-Za-z0-9_\-]", _T_DOTTED, "text"),
    # Google refresh token 1//0..., also percent-encoded.
    (b"", _LB + rb"1(?://|%2[Ff]%2[Ff])0[A-Za-z0-9_\-]{30}", _T_TOKEN, "text"),
    # Google API key.
    (b"", _LB + rb"AIza[0-9A-Za-z_\-]{35}", _T_TOKEN, "text"),
    # Google OAuth client secret.
    (b"", rb"GOCSPX-[A-Za-z0-9_\-]{24}", _T_TOKEN, "text"),
    # Slack tokens: xoxb/xoxp/xoxa/xoxo/xoxs/xoxr/xoxe/xoxc and rotating xoxe.xoxp; a digit is required
    # early so that words like 'xoxo-gossip-girl' stay.
    (b"", _LB + rb"(?:xox[abcposre]|xoxe\.xox[abcposre])-(?=[A-Za-z\-]{0,24}[0-9])[0-9A-Za-z\-]{10}",
     _T_TOKEN, "text"),
    # Slack browser session cookie value.
    (b"", _LB + rb"xoxd-[A-Za-z0-9%+/=_\-]{20}", _T_XOXD, "text"),
    # Slack app-level token.
    (b"", rb"xapp-[0-9]-[0-9A-Za-z\-]{10}", _T_TOKEN, "text"),
    # GitHub tokens.
    (b"", _LB + rb"gh[pousr]_[A-Za-z0-9]{36}", _T_TOKEN, "text"),
    (b"", rb"github_pat_[A-Za-z0-9_]{22}", _T_TOKEN, "text"),
    # Slack webhook / response_url capability URLs: everything after the first path segment goes.
    (rb"hooks\.slack\.com\\?/[A-Za-z0-9_\-]{1,32}\\?/", rb"(?=[A-Za-z0-9_\-])", _T_HOOK, "text"),
    # ... and URL-encoded (a form field holding the URL).
    (rb"hooks\.slack\.com%2[Ff][A-Za-z0-9_\-]{1,32}%2[Ff]", rb"(?=[A-Za-z0-9_\-])", _T_PCT_HOOK, "text"),
    # Other webhook capability URLs, keep in step with _WEBHOOK_PATHS (redact_url, which also knows
    # Telegram bot URLs by their host). All start at the "hook" of "webhook" (with a lookbehind for the
    # rest), so the "h" trigger the Slack rule has covers them with no new trigger character:
    # Discord .../webhooks/<snowflake id>/<token> (discord.com, discordapp.com, any API version),
    # Teams / Office 365 incoming webhooks, new host and legacy outlook.office(365).com/webhook/.
    (rb"(?<=/web)hooks\\?/", rb"(?=[0-9]{17,20}\\?/[A-Za-z0-9_\-]{20})", _T_HOOK_PATH, "text"),
    (rb"(?<=web)hook\.office\.com\\?/webhookb2\\?/", rb"(?=[0-9A-Za-z])", _T_HOOK_PATH, "text"),
    (rb"(?:(?<=office\.com/web)|(?<=office365\.com/web)|(?<=office\.com\\/web)|(?<=office365\.com\\/web))"
     rb"hook\\?/", rb"(?=[0-9A-Za-z])", _T_HOOK_PATH, "text"),
    # Zapier catch hooks: hooks.zapier.com/hooks/catch/<account>/<secret>/.
    (rb"hooks\.zapier\.com\\?/hooks\\?/", rb"(?=[0-9A-Za-z])", _T_HOOK_PATH, "text"),
    # PEM private keys (RSA, EC, DSA, PKCS#8, ENCRYPTED, OPENSSH, PGP ... BLOCK, SSH2): the armour stays, the
    # key material goes; also with its newlines escaped in JSON (\n, \\n) and as a URL-encoded form sends it.
    (b"-----BEGIN" + _SP + b"(?:[A-Z0-9]+" + _SP + b"){0,3}PRIVATE" + _SP + b"KEY(?:" + _SP + b"BLOCK)?-----",
     _PEM_BODY, _T_PEM, "text"),
    (rb"---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----", _PEM_BODY, _T_SSH2, "text"),
    # PuTTY key file: the private lines go, up to the MAC line.
    (rb"(?<=Private)-Lines:[ \t]{0,8}[0-9]{1,4}", rb"(?=\r?\n|\\r?\\n|%0[AaDd])", _T_PUTTY, "text"),
    # `Basic <base64 of user:password>` in any text; prose ("basic setup") has no base64 word after it.
    (rb"(?i:basic)(?:[ \t]{1,8}|\+|%20)",
     rb"(?=[A-Za-z0-9+/]{0,300}(?:[0-9+/=]|%2[BbFf]|%3[Dd]|[a-z][A-Z]))[A-Za-z0-9+/]{8}", _T_BASIC, "text"),
    # user:password@ in a URL written in a body (as written, JSON-escaped slashes, URL-encoded), for the
    # schemes of `_USERINFO_SCHEMES`.
    *(rule for rule, _t in _USERINFO_RULES),
    *_ANY_SCHEME_USERINFO_RULES,
    # Connection strings: Azure AccountKey= / SharedAccessKey= / SharedAccessSignature=.
    (rb"(?:AccountKey|(?<=Shared)Access(?:Key|Signature))(?:=|%3[Dd])",
     rb"(?!\[never)(?=[^;\"'\s&<>\\%])", _T_CONN, "text"),
    # .npmrc `//registry/:_authToken=...`
    (rb"(?<=:)_(?:authToken|auth|password)=", rb"(?!\[never)(?=[^\s\"'\\])", _T_CONN, "text"),
    # Telegram bot token (detect-secrets telegram_token.py): the bot id stays, the secret after ':' goes.
    # Bot secrets start AA; the rule starts there, so no trigger at every ':' of a JSON body is needed.
    (rb"(?:(?<=[0-9]{8}:)|(?<=[0-9]{8}%3[Aa]))", rb"AA[0-9A-Za-z_\-]{33}", _T_TOKEN, "text"),
    # Line assignments (see _ASSIGN_NAME).
    (_LINE_START + _ASSIGN_NAME + rb"(?:[\"']|\\(?:\\\\)?\"|\\\\?u002[27])?(?:(?i:bearer|basic|token)[ \t]{1,8})?+",
     rb"(?!(?:true|false|null)(?![A-Za-z0-9_])|\[never)(?=[^\s\"'\\])", _T_LINE_VALUE, "text"),
    # Flags, env assignments and header lines written in a body (see _INLINE_RULES).
    *_INLINE_RULES,
    # The catalogue (journal/secret_shapes.py): tokens known by their prefix, which stays.
    *(rule for rule, _t in _PREFIX_RULES),
)  # fmt: skip

# A credential key with a string value: the string's content goes. With any other value but true, false
# and null (a number, an array, an object: everything under the key), the value becomes a JSON string.
def _json_rules(key_alt: str, in_json_key_alt: str) -> tuple[_Rule, ...]:
    """The JSON key rules for a spelling of the key names (plain, or with \\uXXXX escapes)."""
    # A credential key with a string value: the string's content goes. With any other value but true,
    # false and null (a number, an array, an object: everything under the key), the value becomes a JSON
    # string.
    key = b'"(?:' + key_alt.encode() + rb')"[ \t\r\n]{0,32}:[ \t\r\n]{0,32}'
    # The same pair inside a JSON string holding JSON (MCP tool results, webhook payloads): \"token\": \"...\".
    # The tail walks the inner string: an inner escape is an escaped backslash plus one (escaped) character.
    esc_key = rb'\\"(?:' + in_json_key_alt.encode() + rb')\\"(?:[ \t]|\\[nrt]){0,32}:(?:[ \t]|\\[nrt]){0,32}'
    return (
        (key + b'"', b"", _T_JSON_STRING, "text"),
        (key, rb"(?=[-0-9])", _T_NUMBER, "json"),
        (key, rb"(?=[\[{])", _JsonValue, "json"),
        (esc_key + rb'\\"', b"", _T_JSON_IN_JSON, "text"),
        (esc_key, rb"(?=[-0-9])", _T_NUMBER, "json-in-json"),
        (esc_key, rb"(?=[\[{])", (_JsonValue, True), "json-in-json"),
        # A string value one level deeper (JSON in a JSON string held by a JSON string, a tool result that
        # quotes a payload): quotes there are written \\\", the line breaks between tokens \\n.
        (rb'\\\\\\"(?:' + _BODY_ALT.encode() + rb')\\\\\\"(?:[ \t]|\\\\[nrt]){0,32}:(?:[ \t]|\\\\[nrt]){0,32}\\\\\\"',
         b"", _T_JSON_IN_JSON_2, "text"),
        # A name/value pair whose name is a credential name: Kubernetes and ECS `env`
        # ({"name": "DB_PASSWORD", "value": "..."}), HAR headers ({"name": "Authorization", ...}), SSM. Its
        # value as a credential key's: a string's content goes, any other value but true, false and null
        # becomes a JSON string (as `redact_json_value` reads the pair).
        (_NAME_VALUE_HEAD + b'"', b"", _T_JSON_STRING, "text"),
        (_NAME_VALUE_HEAD, rb"(?=[-0-9])", _T_NUMBER, "json"),
        (_NAME_VALUE_HEAD, rb"(?=[\[{])", _JsonValue, "json"),
    )


_JSON_COLON = rb"[ \t\r\n]{0,32}:[ \t\r\n]{0,32}"
_NAME_VALUE_HEAD = (
    rb'"(?i:name|key)"' + _JSON_COLON + rb'"' + _ID_WORDS + rb"(?:" + _BODY_ALT.encode() + rb')"[ \t\r\n]{0,32},'
    + rb'[ \t\r\n]{0,32}"(?i:value)"' + _JSON_COLON
)


_T_JSON_IN_JSON = _Elements(rb'[^"\\]*(?:(?:\\[^"\\]|\\\\(?:\\[\s\S]|[^"\\]))[^"\\]*)*', 4)
# That string two levels down, as the outer JSON writes it: the string ends at \\\" (its quote written at
# the two levels above); a backslash in its content is 8 backslashes, a quote 7 and ", any other escape
# (\n, \u0041) 4 and the escape's letter.
_T_JSON_IN_JSON_2 = _Elements(rb'(?:[^"\\]|\\{8}|\\{7}"|\\{4}(?=[^"\\]))*+', 8)
# JSON keys as written: plain, or with \uXXXX escapes (inside a JSON string holding JSON the escape's
# backslash may itself be escaped: \\u0077). The escaped spelling is only needed where a name-character
# escape occurs (`_NAME_ESCAPE`); its regex is several times larger, so it is compiled only then.
@functools.cache
def _json_rules_by_esc(esc: bool) -> tuple[_Rule, ...]:
    """The JSON key rules for plain (False) or escaped (True) key names, built on first use."""
    return _json_rules(*_escaped_key_alts()) if esc else _json_rules(_JSON_KEY_ALT, _JSON_KEY_ALT)


# name=value after ?, &, &amp; or \u0026 (URLs inside text), and at the start of the body: form-encoded
# credentials whatever the declared content type (password=... sent as text/plain or octet-stream).
# Not after every newline: that trigger cost 15% of the scan of prose.
_URL_PARAM_RULE: _Rule = (
    rb"(?:(?<=[?&])|(?<![\s\S])|(?<=\\u0026)|(?<=&amp;))(?:" + _URL_ALT.encode() + rb")=",
    b"", _T_URL_VALUE, "url",
)  # fmt: skip
# A URL-encoded line assignment in a parameter's value (a URL in a JSON or text body, a form sent as
# text): the rule starts at the parameter, as the one above, and keeps what comes before the line. Started
# there, not at every '%' (a trigger character costs every body's scan some 8%: bench.redact_bench).
_PCT_PARAM_VALUE_CHAR = rb"(?:[^&\s%\"'<>\\#)}]|%(?!0[AaDd]|2[27])[0-9A-Fa-f]{2})"
# The parameter's name (a positive class: the trigger's gate can read it, and random bytes fail it fast), then
# its value up to the line: runs of plain characters (one fast repeat each) and escapes, at most 96 of them
# (3 KiB: a rule's head stays within what the streaming redactor holds back).
_PCT_LINE_BEFORE = (
    rb"[A-Za-z0-9_.~+%$:@!*,;|\[\]\-]{1,64}+=(?:[^&\s%\"'<>\\#)}]{1,32}+|%(?!0[AaDd])[0-9A-Fa-f]{2}|%0[AaDd](?!"
    + _PCT_ASSIGN_NAME + rb")){0,96}+%0[AaDd]"
)
_URL_PARAM_LINE_RULE: _Rule = (
    rb"(?:(?<=[?&])|(?<![\s\S])|(?<=\\u0026)|(?<=&amp;))" + _PCT_LINE_BEFORE + _PCT_ASSIGN_NAME + rb"(?:%2[27])?",
    rb"(?!(?:true|false|null)(?![A-Za-z0-9_])|\[never)(?=" + _PCT_PARAM_VALUE_CHAR + rb")",
    _Elements(_PCT_PARAM_VALUE_CHAR + rb"*", 3), "url",
)  # fmt: skip
_FORM_RULE: _Rule = (rb"(?<![^&])(?:" + _URL_ALT.encode() + rb")=", b"", _T_FORM_VALUE, "url")
_MULTIPART_RULE: _Rule = (
    rb"(?i:content-disposition)[ \t]{0,8}:[^\r\n]{0,256}?(?<=[;\s])(?i:name)[ \t]{0,8}=[ \t]{0,8}\"?(?:"
    + _BODY_ALT.encode()
    + rb")\"?(?=[;\s])[^\r\n]{0,256}\r?\n(?:[^\r\n]{1,256}\r?\n){0,4}\r?\n",
    b"", _MULTIPART, "text",
)  # fmt: skip

_PCT_VALUE_CHAR = rb"(?:[^&\s%]|%(?!0[AaDd]|2[27])[0-9A-Fa-f]{2})"
# Line assignments inside a URL-encoded form value (form bodies: the value runs to the next '&').
_FORM_ASSIGN_RULE: _Rule = _pct_assign_rule(_PCT_VALUE_CHAR, "text")
# XML elements named like a credential: <SecretAccessKey>...</SecretAccessKey> (AWS IAM answers); text
# kinds only (a declared binary type holds no XML worth a trigger at every '<').
_XML_RULE: _Rule = (rb"<(?:" + _BODY_ALT.encode() + rb")>", rb"(?!\[never)(?=[^<])", _Elements(rb"[^<]*", 1), "text")

# A Python dict as printed (`{'password': '...'}`, a tool's log line, a repr in an error): a credential key in
# single quotes, its string value (either quote) loses its content. Its trigger, `'`, is one of
# `_RARE_TRIGGERS` (a branch of the main trigger alternation cost every body's scan about 8%).
_T_SQ_STRING = _Elements(rb"[^'\\]*(?:\\[\s\S][^'\\]*)*", 2)
_SQ_KEY = rb"'(?:" + _BODY_ALT.encode() + rb")'[ \t]{0,32}:[ \t]{0,32}"
_REPR_RULES: tuple[_Rule, ...] = (
    (_SQ_KEY + rb"'", b"", _T_SQ_STRING, "text"),
    (_SQ_KEY + rb'"', b"", _T_JSON_STRING, "text"),
    (_SQ_KEY + rb'\\"', b"", _T_JSON_IN_JSON, "text"),  # the repr in a JSON string: its " escaped
)

_BINARY, _TEXT, _FORM, _MULTI = "binary", "text", "form", "multipart"


def _kind_rules(kind: str, esc: bool) -> tuple[_Rule, ...]:
    """The rules of a kind, in order; the same count and tails for both spellings of JSON keys, so a
    match's rule index means the same rule in both.

    A declared binary type gets the text rules too: octet-stream is often JSON or form text (a Drive
    download of token.json, a form posted with a wrong type), and what is stored as base64 must not hold
    a credential either. In real binary data the key and form heads practically never occur."""
    common = (*_json_rules_by_esc(esc), _URL_PARAM_RULE)
    if kind == _FORM:  # a form's own line rule reads a field's value as a form does (to the next '&')
        return (_FORM_RULE, *common, _FORM_ASSIGN_RULE, _XML_RULE, *_VALUE_RULES)
    if kind == _MULTI:
        return (_MULTIPART_RULE, *common, _URL_PARAM_LINE_RULE, _XML_RULE, *_EQ_RULES, *_REPR_RULES, *_VALUE_RULES)
    if kind == _TEXT:
        return (*common, _URL_PARAM_LINE_RULE, _XML_RULE, *_EQ_RULES, *_REPR_RULES, *_VALUE_RULES)
    return (*common, _URL_PARAM_LINE_RULE, *_EQ_RULES, *_REPR_RULES, *_VALUE_RULES)


_RULES_BY_KIND: dict[str, tuple[_Rule, ...]] = {
    kind: _kind_rules(kind, False) for kind in (_BINARY, _TEXT, _FORM, _MULTI)
}


def _compile(rules: tuple[_Rule, ...]) -> re.Pattern[bytes]:
    """One alternation, leftmost-first: group r<i> is rule i, k<i> the part of its head that is kept."""
    return re.compile(
        b"|".join(
            b"(?P<r%d>(?P<k%d>%s)%s)" % (i, i, keep, rest) for i, (keep, rest, _t, _u) in enumerate(rules)
        )
    )


@functools.cache
def _kind_regex(kind: str, esc: bool) -> re.Pattern[bytes]:
    """The rule alternation of a kind, compiled on first use (not at import: every command imports this
    module, and most never redact a body of every kind)."""
    return _compile(_kind_rules(kind, esc))


@functools.cache
def _value_re() -> re.Pattern[bytes]:
    """The value rules alone (small: no key names in it), compiled on first use."""
    return _compile(_VALUE_RULES)


def _gate(rules: tuple[_Rule, ...]) -> re.Pattern[bytes]:
    """The rules as one alternation without the groups that name them: it matches at exactly the
    positions where `_compile(rules)` does (an alternation matches where one of its branches does), and
    it is 30-50x faster to try where none does (about 3 against 100-150 us for a short string):
    with no named group in front of a branch, the engine drops the branch at its first literal or
    character class. Tried before the named alternation wherever most tries find nothing."""
    return re.compile(b"|".join(b"(?:%s%s)" % (keep, rest) for keep, rest, _t, _u in rules))


@functools.cache
def _kind_gate(kind: str, esc: bool) -> re.Pattern[bytes]:
    """`_gate` of a kind's rules (the same positions as `_kind_regex(kind, esc)`), compiled on first use."""
    return _gate(_kind_rules(kind, esc))


@functools.cache
def _value_gate() -> re.Pattern[bytes]:
    """`_gate` of the value rules (the same positions as `_value_re()`), compiled on first use."""
    return _gate(_VALUE_RULES)


_TEXT_TYPES = ("application/xml", "application/javascript", "application/graphql", "application/x-ndjson",
               "application/jsonl", "application/ld+json")  # fmt: skip


@functools.lru_cache(maxsize=256)  # content types hold no credentials
def _kind(content_type: str | None) -> tuple[str, bytes]:
    """Which rules apply to a content type, and the multipart boundary. Unknown/absent type is text."""
    if not content_type:
        return _TEXT, b""
    mtype = content_type.split(";", 1)[0].strip().lower()
    if mtype == "application/x-www-form-urlencoded":
        return _FORM, b""
    if mtype.startswith("multipart/"):
        m = re.search(r'(?i)boundary\s*=\s*(?:"([^"]{1,200})"|([^\s;,]{1,200}))', content_type)
        boundary = (m.group(1) or m.group(2)) if m else ""
        return _MULTI, boundary.encode("latin-1", "replace")
    if (
        mtype in ("", "application/json")
        or mtype.endswith(("+json", "+xml", "/json"))
        or mtype.startswith(("text/", "message/"))
        or mtype in _TEXT_TYPES
    ):
        return _TEXT, b""
    return _BINARY, b""


# Every byte where a rule of a kind can start: a cheap first pass, since Python's regex engine skips
# quickly to these bytes, whereas the rule alternation itself is tried at every byte (about 1.5 MB/s).
# One alternative per first character, each starting with a literal: sre then skips quickly to the
# bytes where one can start (a character class, or two alternatives for one byte, cost that). The rules
# after '?', '&', '&amp;' or '\\u0026' start at the trigger's end. Keep in step with the rules above;
# the tests compare against a trigger-less scan.
# A line that starts like an assignment (an identifier, then = or :): the rule checks the name. Reading
# the line's first word once costs less at every newline of prose than comparing it with the names.
# The indentation is taken possessively: what follows it (`export` or a name character) never starts
# with a blank, so giving blanks back could not make it match; trying to was most of the trigger scan's
# time on indented text (pretty-printed JSON: 18 -> 5 us for 80 lines).
# Blanks as the trigger reads them: a run of raw ones first (one fast repeat: the common case), then any
# escaped ones (\t, \u0009, \u0020 in a JSON string), each followed by raw ones; more than `_BLANK{0,n}`
# allows, which only widens the trigger.


def _look_blanks(n: int) -> str:
    return rf"[ \t]{{0,{n}}}+(?:\\\\?(?:t|u00(?:09|20))[ \t]{{0,{n}}}+){{0,{n}}}+"


_ASSIGN_LOOK = (
    _look_blanks(16) + r"(?:-" + _BLANK.decode() + r"{1,4}+)?(?:export" + _BLANK.decode() + r"{1,4})?"
    + r"[A-Za-z0-9_.\-]{1,100}+" + _look_blanks(8) + r"(?:[=:]|\\\\?u003[AaDd])"
)
_VALUE_TRIGGER_CONDS: dict[str, list[str]] = {
    # branch redact31 (_INLINE_RULES, _ANY_SCHEME_USERINFO_RULES): `export` / `env` and `Cookie:` at 'e',
    # `Authorization:` at 'h', flags at '-', `%3A%2F%2F` at 'A', `://` at '/'. A character's conditions are
    # one lookahead where they can be (a lookbehind inside it): a second alternative cost prose 10%.
    "e": ["(?=yJ|xport[ \t]|nv[ \t]|:(?<=[Cc]ookie:))"], "y": [r"(?=a29\.)"], "1": ["(?=//0|%2[Ff]%2[Ff]0)"],
    "A": [f"(?=Iza|ccountKey(?:=|%3[Dd])|(?<=%3A)%2[Ff]%2[Ff]{_UI_PCT_LOOK.decode()})", "(?<=:A)", "(?<=%3AA)",
          "(?<=%3aA)", "(?<=SharedA)"],
    "G": ["(?=OCSPX-)"], "x": ["(?=ox|app-)"],
    "g": ["(?=h[pousr]_|ithub_pat_)"],
    "h": [r"(?=ooks\.(?:slack|zapier)\.com|ook|orization:(?<=[Aa]uthorization:))"],
    "-": [rf"(?=----BEGIN(?:[ \t]|\+|%20)|--- BEGIN SSH2 |-(?:{_BODY_ALT})(?:=|[ \t])"
          r"""|e(?:=|[ \t]{1,8}+)[A-Za-z0-9"'\\]|-env|-build-arg|-set|D)""", "(?<=Private-)"],
    "B": ["(?=(?i:earer|asic))"], "b": ["(?=(?i:earer|asic))"], "_": ["(?<=:_)"],
    "\n": [f"(?={_ASSIGN_LOOK})"],
    "\r": [f"(?={_ASSIGN_LOOK})"],
    "\\": [f"(?=(?:(?:r|u000[Dd])(?:\\\\(?:n|u000[Aa]))?|n|u000[Aa]){_ASSIGN_LOOK})"],
    "/": [f"(?=\\\\?/{_UI_RAW_LOOK.decode()})(?:(?<=:/)|(?<=:\\\\/))"],
}  # fmt: skip


def _balanced(pattern: str) -> bool:
    """True when `pattern` is one regex (its parentheses pair up), so `(?=pattern)` is one lookahead."""
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


def _prefix_trigger_conds() -> dict[str, list[str]]:
    """The catalogue's (and the URL schemes') trigger conditions, by character: lookbehinds of one width
    joined into one, lookaheads into one (a character such as '_' is tried against a few assertions,
    not one per prefix)."""
    return _merged_conds((*_PREFIX_RULES, *_USERINFO_RULES))


def _merged_conds(rules: tuple) -> dict[str, list[str]]:
    by_char: dict[str, dict[int, set[str]]] = {}
    ahead: dict[str, set[str]] = {}
    out_whole: dict[str, list[str]] = {}
    for _rule, (char, cond) in rules:
        if cond.startswith("(?<=") and not _balanced(cond[4:-1]):  # a lookbehind and then more: kept whole
            out_whole.setdefault(char, []).append(cond)
        elif cond.startswith("(?<="):
            body = cond[4:-1]
            by_char.setdefault(char, {}).setdefault(len(re.sub(r"\\(.)", r"\1", body)), set()).add(body)
        else:
            ahead.setdefault(char, set()).add(cond[3:-1])
    out: dict[str, list[str]] = {}
    for char, widths in by_char.items():
        out[char] = [f"(?<={'|'.join(sorted(bodies))})" for _w, bodies in sorted(widths.items())]
    for char, bodies in ahead.items():
        out.setdefault(char, []).append(f"(?={'|'.join(sorted(bodies))})")
    for char, conds in out_whole.items():
        out.setdefault(char, []).extend(conds)
    return out


@functools.cache
def _value_trigger_conds() -> dict[str, list[str]]:
    """`_VALUE_TRIGGER_CONDS` with the catalogue's conditions added (built on first use; callers copy it)."""
    conds = {k: list(v) for k, v in _VALUE_TRIGGER_CONDS.items()}
    for char, cs in _prefix_trigger_conds().items():
        conds.setdefault(char, []).extend(cs)
    return conds


def _triggers(conds: dict[str, list[str]]) -> bytes:
    """One alternative per first character: the character, then any of its conditions. The plain
    lookaheads of a character are joined into one (its alternatives start with literals, which the
    engine rejects quickly), tried before the conditions with lookbehinds."""

    def one(char: str, cs: list[str]) -> str:
        cs = list(dict.fromkeys(cs))  # rules sharing a condition (two schemes' userinfo) test it once
        ahead = [c[3:-1] for c in cs if c.startswith("(?=") and _balanced(c[3:-1])]
        rest = [c for c in cs if not (c.startswith("(?=") and _balanced(c[3:-1]))]
        if len(rest) > 1:  # several lookbehinds: first one check of the character before this one
            before = _chars_before(char, rest)
            if before:
                rest = [f"(?<=[{re.escape(before)}]{re.escape(char)})(?:{'|'.join(rest)})"]
        parts = ([f"(?={'|'.join(ahead)})"] if ahead else []) + rest
        body = parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"
        after = [_next_chars(c) for c in cs]
        if len(body) > 12 and all(a is not None for a in after):  # one class check rejects most bytes
            gate = "".join(sorted({chr(b) for a in after if a is not None for b in a}))
            body = f"(?=[{re.escape(gate)}]){body}"
        return body

    return b"|".join(re.escape(char).encode() + one(char, cs).encode() for char, cs in conds.items())


def _next_chars(cond: str) -> frozenset[int] | None:
    """The bytes that can follow a trigger's character when `cond` holds, or None when any can (or
    when the condition is beyond what this reads). A superset is always safe: the gate built from it
    only spares the engine the conditions at bytes where none of them can hold."""
    try:
        parsed = _sre_parser.parse(cond)
    except re.error:
        return None
    found = _first_bytes(list(parsed))
    return frozenset(found) if found else None


def _first_bytes(items: list) -> set[int] | None:
    """First bytes a parsed regex can match, or None when it may match empty or is not understood."""
    c = _sre_constants
    for i, (op, av) in enumerate(items):
        if op is c.LITERAL:
            return {av}
        if op is c.IN:
            out: set[int] = set()
            for kind, arg in av:
                if kind is c.LITERAL:
                    out.add(arg)
                elif kind is c.RANGE:
                    out.update(range(arg[0], arg[1] + 1))
                else:  # NEGATE, CATEGORY: not worth reading
                    return None
            return out
        if op is c.BRANCH:
            out = set()
            for alt in av[1]:
                got = _first_bytes(list(alt))
                if got is None:
                    return None
                out |= got
            return out
        if op is c.SUBPATTERN:
            got = _first_bytes(list(av[3]))
            if got is not None and av[1] & re.IGNORECASE:
                got |= {ord(chr(b).swapcase()) for b in got if chr(b).isascii()}
            return got
        if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
            got = _first_bytes(list(av[2]))
            if av[0] > 0 or got is None:
                return got
            later = _first_bytes(items[i + 1:])  # may be absent: what follows may come first
            return None if later is None else got | later
        if op is c.ASSERT and av[0] == 1:  # a lookahead: the next byte starts what it asks for
            got = _first_bytes(list(av[1]))
            if got is not None:
                return got
            continue
        if op in (c.ASSERT, c.ASSERT_NOT, c.AT):  # zero width: the next byte is read by what follows
            continue
        return None
    return None


def _chars_before(char: str, conds: list[str]) -> str:
    """The characters just before `char` that the lookbehind conditions accept, or "" when a condition
    is not a plain lookbehind of literals ending with `char`."""
    out = set()
    for cond in conds:
        body = cond[4:].partition(")")[0] if cond.startswith("(?<=") else ""
        for alt in body.split("|") if body else [""]:
            plain = re.sub(r"\\(.)", r"\1", alt)
            if len(plain) < 2 or plain[-1] != char or any(c in plain for c in "[]()?*+{}"):
                return ""
            out.add(plain[-2])
    return "".join(sorted(out))




def _text_trigger_conds(key_alt: str, in_json_key_alt: str, kind: str) -> dict[str, list[str]]:
    url = _URL_ALT
    # a URL-encoded line in a parameter's value (`_URL_PARAM_LINE_RULE`; a form body has its own rule)
    line = "|" + (_PCT_LINE_BEFORE + _PCT_ASSIGN_NAME).decode() if kind != _FORM else ""
    conds = {k: list(v) for k, v in _value_trigger_conds().items()}
    extra = {
        '"': [f'(?=(?:{key_alt})")', f"(?={_NAME_VALUE_HEAD[1:].decode()})"],
        "\\": [f'(?="(?:{in_json_key_alt})\\\\")', f"u0026(?=(?:{url})={line})", rf'(?=\\\\"(?:{_BODY_ALT})\\\\\\")'],
        "?": [f"(?=(?:{url})={line})"], "&": [f"(?:amp;)?(?=(?:{url})={line})"],
    }  # fmt: skip
    if kind != _BINARY:
        extra["<"] = [f"(?=(?:{_BODY_ALT})>)"]
    if kind != _FORM:  # `_EQ_RULES`: the names of `_EQ_NAMES` end in ord, swd, pwd
        extra["="] = ["(?<=[OoSsPp][RrWw][Dd]=)"]
        extra["'"] = [f"(?=(?:{_BODY_ALT})'[ \t]{{0,32}}:)"]  # `_REPR_RULES`
    if kind == _FORM:
        extra["%"] = [f"(?=(?:0[Dd](?:%0[Aa])?|0[Aa]){_PCT_ASSIGN_NAME.decode()})"]
    if kind == _MULTI:
        extra["C"] = ["(?=(?i:ontent-disposition))"]
        extra["c"] = ["(?=(?i:ontent-disposition))"]
    for char, cs in extra.items():
        conds.setdefault(char, []).extend(cs)
    # The JSON key triggers first: they are the ones that fire in JSON, the commonest body.
    conds["\\"] = conds["\\"][1:] + conds["\\"][:1]  # the escaped-newline condition after the key ones
    order = ['"', "\\"]
    return {c: conds[c] for c in order} | {c: v for c, v in conds.items() if c not in order}



@functools.cache
def _value_trigger_re() -> re.Pattern[bytes]:
    """The value rules' triggers, compiled on first use."""
    return re.compile(_triggers(_value_trigger_conds()))


# Two trigger sets per kind: JSON keys as written plainly, and keys that may hold \uXXXX escapes. The
# second costs more at every quote, and is needed only where an escape of a name character (a letter,
# digit, _, -, @ or .) occurs: `_NAME_ESCAPE` finds one (in JSON inside JSON too: \\u0077 holds \u0077).
_NAME_ESCAPE = re.compile(rb"\\u00(?:[2-7][0-9a-fA-F])")


# Trigger characters rare in JSON and prose, scanned for by a regex of their own (`_kind_rare_triggers`):
# at every byte that can start a trigger the engine tries the alternation's branches one by one, so each
# branch costs every trigger byte of a body (a character no body holds added 3-5% to the JSON scan, three
# of them 20%); a second scan for these costs about 2 ns a byte, less than their branches did.
_RARE_TRIGGERS = "/=\r?&<%'"


@functools.cache
def _kind_triggers(kind: str, esc: bool) -> re.Pattern[bytes]:
    """Trigger regex of a kind for one spelling of JSON keys, less `_RARE_TRIGGERS`; compiled on first use."""
    conds = (_text_trigger_conds(*_escaped_key_alts(), kind) if esc
             else _text_trigger_conds(_JSON_KEY_ALT, _JSON_KEY_ALT, kind))
    return re.compile(_triggers({c: v for c, v in conds.items() if c not in _RARE_TRIGGERS}))


@functools.cache
def _kind_rare_triggers(kind: str) -> re.Pattern[bytes]:
    """The triggers of `_RARE_TRIGGERS` for a kind (no JSON key in them: one set for both spellings)."""
    conds = _text_trigger_conds(_JSON_KEY_ALT, _JSON_KEY_ALT, kind)
    return re.compile(_triggers({c: v for c, v in conds.items() if c in _RARE_TRIGGERS}))


class _TriggerScan:
    """The trigger matches of one buffer, of the main trigger regex and of `_kind_rare_triggers` merged in
    order of start as one regex's `finditer` would give them (the two hold disjoint first characters).

    Each regex's next match is remembered across the searches of the buffer (`_search` is called once per
    rule match): a regex is never asked again for what it already scanned. Two iterators started afresh at
    every rule match would each scan to their next match, a sparse one to the end of the buffer: quadratic
    in the matches of a body dense in one kind of trigger (`'password': ` repeated)."""

    __slots__ = ("_buf", "_found", "_regexes")

    def __init__(self, regexes: tuple[re.Pattern[bytes], ...], buf: bytes) -> None:
        self._regexes = regexes
        self._buf = buf
        # per regex: (searched from, up to, the first match there or None)
        self._found: list[tuple[int, int, re.Match[bytes] | None]] = [(-1, -1, None)] * len(regexes)

    def first(self, pos: int, end: int) -> re.Match[bytes] | None:
        """The leftmost trigger match starting in [pos, end), reading no further than `end`."""
        best = None
        for i, regex in enumerate(self._regexes):
            since, until, m = self._found[i]
            if not (until == end and 0 <= since <= pos and (m is None or m.start() >= pos)):
                m = regex.search(self._buf, pos, end)
                self._found[i] = (pos, end, m)
            if m is not None and (best is None or m.start() < best.start()):
                best = m
        return best


_TRIGGER_BACK = 6  # longest trigger ('\\u0026'): a trigger may start this far before the scan position


# Long runs of base64url characters (attachment and message data in Gmail JSON, `raw` mail) hold
# triggers at about one byte in six, and a rule can start at almost none of them. Inside a run
# [a, b) of these bytes, at any position p with a + _RUN_HEAD <= p < b - _RUN_TAIL, no rule can match
# except one starting with GOCSPX-, xapp- or github_pat_ (whose heads are all base64url characters):
# - the rules guarded by _LB (1//0, AIza, xox?-, xoxd-, gh?_) need fewer than 8 token characters
#   before them, and there are 8; so do the catalogue prefixes (sk_live_, glpat-, AKIA, ...), before the
#   prefix's first character, which is at most the prefix's length before the rule's start;
# - every other value rule needs a byte that is not base64url within 2052 bytes of its start: the
#   JWT's '.' (its first segment is at most 2048 characters, matched possessively), the '.' of ya29.,
#   the space, '+' or '%' after Bearer, the '.' or '/' of the webhook URLs, the space of the PEM armour;
# - the JSON key rules start at '"' or '\\', the multipart rule needs its ':' within 27 bytes, and
#   the URL parameter and form rules need '?', '&', ';', '\\' or the start of the body just before
#   them.
# Each needs no byte past b - 1 + 2052 - _RUN_TAIL < b, so it reads the same whether the run ends there
# or the buffer does (a run cut by a chunk boundary). Such interiors are skipped by the trigger scan;
# the tests compare it with a scan that tries every rule at every byte.
_RUN_TABLE = bytes(0x61 if chr(c).isascii() and (chr(c).isalnum() or chr(c) in "_-") else 0x2E for c in range(256))
_RUN_MIN = 4096  # runs shorter than this are scanned as they are
_RUN_HEAD = 8 + max(len(p) for shape in PREFIX_SHAPES for p in shape.prefixes)
_RUN_TAIL = 2112
_RUN_LITERALS = (b"GOCSPX-", b"xapp-", b"github_pat_")
# Bytes a trigger's lookahead reads past its start at most (the longest: a key of the body name list
# written with \\uXXXX escapes, about 250): a window of the trigger scan may end inside a run this
# far early without losing a trigger. One reads further: the URL-encoded line after '?' or '&'
# (`_PCT_LINE_BEFORE`, up to 3 KiB of the parameter's value); it needs the whole value before its `%0A`,
# and a window ends only inside a run of over 4 KiB, which that value cannot cross (96 runs of 32), so
# cutting it there loses nothing either.
_TRIGGER_REACH = 1024


_RUN_FLAG = bytes(1 if mark == 0x61 else 0 for mark in _RUN_TABLE)
_WINDOW = 16


def _may_hold_run(buf: bytes) -> bool:
    """False only when `buf` has no _RUN_MIN base64url bytes in a row (then finding its runs, a copy of
    the whole buffer, is saved: random binary data never has one).

    Such a run [a, b) holds the 16 bytes from k * _RUN_MIN / 2 on, for k the first multiple at or after
    a: they start before a + _RUN_MIN / 2 and end within b. So it is enough to look at those windows:
    the byte j of every window is one strided slice, and the windows made only of base64url bytes are
    the bits set in all 16 slices' flags ANDed together.
    """
    view, step, acc = memoryview(buf), _RUN_MIN // 2, -1
    for j in range(_WINDOW):
        acc &= int.from_bytes(view[j::step].tobytes().translate(_RUN_FLAG), "little")
        if not acc:
            return False
    return True


def _run_interiors(buf: bytes, start: int) -> list[tuple[int, int]]:
    """The [from, to) spans after `start` where no rule can match (interiors of long base64url runs)."""
    if len(buf) - start < _RUN_MIN or not _may_hold_run(buf):
        return []
    marks = buf.translate(_RUN_TABLE)  # 'a' for a base64url byte, '.' for any other
    needle = b"a" * _RUN_MIN
    out: list[tuple[int, int]] = []
    i = marks.find(needle, start)
    while i >= 0:
        end = marks.find(b".", i + _RUN_MIN)
        end = len(buf) if end < 0 else end
        lo, hi = i + _RUN_HEAD, end - _RUN_TAIL
        if hi - lo > _TRIGGER_REACH and not any(buf.find(lit, lo, end) >= 0 for lit in _RUN_LITERALS):
            out.append((lo, hi))
        i = marks.find(needle, end)
    return out


def _search(
    regex: re.Pattern[bytes], triggers: re.Pattern[bytes] | _TriggerScan | None, buf: bytes, pos: int, safe: int,
    skips: list[tuple[int, int]] | tuple = (), gate: re.Pattern[bytes] | None = None,
) -> re.Match[bytes] | None:
    """Leftmost match of `regex` starting in [pos, safe], or None; same result as a plain search.

    With `triggers`, only positions where some rule can start are tried, and none inside `skips`
    (from `_run_interiors` of the same buffer); with `gate` (`_gate` of the same rules), `regex` is
    tried only where the gate matches (the same positions, found faster where there is none). `triggers`
    is a regex, or a `_TriggerScan` of `buf` (the main and the rare triggers, kept across calls).
    """
    if triggers is None:
        m = regex.search(buf, pos)
        return m if m is not None and m.start() <= safe else None
    match = regex.match if gate is None else functools.partial(_gated_match, regex, gate)
    scan = triggers if isinstance(triggers, _TriggerScan) else _TriggerScan((triggers,), buf)
    if pos == 0:  # start of the body: a form field needs no '&' before it
        m = match(buf, 0)
        if m is not None:
            return m
    lo = max(0, pos - _TRIGGER_BACK)
    for w_start, w_end in _windows(lo, skips, len(buf)):
        if w_start > safe:
            return None
        end, at = min(len(buf), w_end + _TRIGGER_REACH), w_start
        while (t := scan.first(at, end)) is not None:
            at = max(t.end(), t.start() + 1)  # as finditer goes on
            if t.start() >= w_end:
                break
            first = buf[t.start()]
            start = t.end() if first in b"?&" or t.end() - t.start() == _TRIGGER_BACK else t.start()
            if start < pos:
                continue
            if start > safe:
                return None
            m = match(buf, start)
            if m is not None:
                return m
    return None


def _gated_match(regex: re.Pattern[bytes], gate: re.Pattern[bytes], buf: bytes, pos: int) -> re.Match[bytes] | None:
    """`regex.match(buf, pos)`, after `gate` (which matches at the same positions) said there is one."""
    return regex.match(buf, pos) if gate.match(buf, pos) is not None else None


def _windows(lo: int, skips: list[tuple[int, int]] | tuple, n: int) -> list[tuple[int, int]]:
    """[lo, n) without the spans of `skips`, as (start, end) windows."""
    out, at = [], lo
    for s, e in skips:
        if e <= at:
            continue
        if s > at:
            out.append((at, s))
        at = e
    out.append((at, n))
    return out


class StreamingRedactor:
    """Redacts a body that passes in chunks (it is spilled to disk as it streams; no secret may reach disk).

    Same rules as ``redact_body``, which is this class fed the whole body at once. ``feed`` returns the
    redacted bytes that are final now. Rule heads are bounded, so a head can only be undecided within
    the last 4 KiB: that much is held back, so a token split across chunks is still caught. The
    unbounded part of a match (the rest of a token, a JSON string value, a multipart part) is dropped
    as it arrives, so memory stays bounded whatever the body size.
    """

    _use_triggers = True  # tests switch this off to compare with the plain regex search

    def __init__(self, content_type: str | None) -> None:
        kind, boundary = _kind(content_type)
        self._kind = kind
        self._rules = _RULES_BY_KIND[kind]
        text = _RU if kind == _FORM else _R
        self._replacements = {
            "text": text, "url": _RU, "json": b'"' + text + b'"', "json-in-json": b'\\"' + text + b'\\"',
        }
        self._multipart_tail = _Until(b"\n--" + boundary, strip_cr=True)
        self._buf = b""
        self._pos = 0
        self._tail: _Elements | _Until | _JsonValue | None = None
        self._closed = False

    def feed(self, chunk: bytes) -> bytes:
        """Add a chunk; return the redacted bytes that are safe to emit now (possibly empty)."""
        if self._closed:
            raise ValueError("StreamingRedactor is closed")
        if not chunk:
            return b""
        self._buf += bytes(chunk)
        return self._run(final=False)

    def close(self) -> bytes:
        """End of body: return the rest of the redacted bytes."""
        if self._closed:
            return b""
        self._closed = True
        out = self._run(final=True)
        self._buf = b""
        self._pos = 0
        return out

    def _whole(self, body: bytes) -> bytes:
        """`redact_body`: the whole body scanned as one final buffer, which is what `feed(body)` and
        `close()` give (the streaming tests compare the two for any chunking). A body with nothing to
        redact comes back as the same object: its one slice is the whole buffer, and neither slicing
        nor joining copies that."""
        self._buf, self._closed = body, True
        out = self._run(final=True)
        self._buf, self._pos = b"", 0
        return out

    def _run(self, final: bool) -> bytes:
        """Scan from the current position; emit what is decided; keep the rest (and some context)."""
        buf, pos, n = self._buf, self._pos, len(self._buf)
        safe = n if final else n - _HOLD  # a head starting at or before `safe` is fully decidable
        # Escaped keys can only match where a name-character escape occurs in what is scanned now.
        esc = _NAME_ESCAPE.search(buf, max(0, pos - _TRIGGER_BACK)) is not None
        use_triggers = self._use_triggers
        # Without triggers (the tests' reference scan) every rule in its widest spelling.
        regex = _kind_regex(self._kind, esc or not use_triggers)
        triggers = (
            _TriggerScan((_kind_triggers(self._kind, esc), _kind_rare_triggers(self._kind)), buf)
            if use_triggers else None
        )
        gate = _kind_gate(self._kind, esc) if use_triggers else None
        skips: list[tuple[int, int]] | None = None
        out: list[bytes] = []
        while True:
            if self._tail is not None:
                pos, done = self._tail.step(buf, pos, final)
                if not done:
                    break
                self._tail = None
            if pos >= n or pos > safe:
                break
            if skips is None:  # once per buffer, when a scan reaches this far
                skips = _run_interiors(buf, pos) if use_triggers else []
            m = _search(regex, triggers, buf, pos, safe, skips, gate)
            if m is None:
                end = max(pos, min(n, safe + (0 if final else 1)))
                out.append(buf[pos:end])
                pos = end
                break
            out.append(buf[pos : m.start()])
            i = int((m.lastgroup or "r0")[1:])  # the outer group r<i> closes after k<i>: it is lastgroup
            _keep, _rest, tail, replacement = self._rules[i]
            out.append(m.group(f"k{i}") + self._replacements[replacement])
            pos = m.end()
            if isinstance(tail, str):
                self._tail = self._multipart_tail
            elif isinstance(tail, tuple):
                self._tail = tail[0](*tail[1:])
            elif isinstance(tail, type):
                self._tail = tail()
            else:
                self._tail = tail
        cut = max(0, pos - _CONTEXT)
        self._buf = buf[cut:]
        self._pos = pos - cut
        return b"".join(out)


def compile_for_capture() -> None:
    """Compile now the rule sets nearly every recorded call uses (text and binary bodies, values, URL names),
    which compile on first use otherwise: 0.2-0.5 s, paid by the first call's latency on a capture point's
    event loop. A long-running capture point calls this before it says it is ready; a reader never does
    (it compiles only what it uses). The variants for escaped key names, forms and multipart bodies
    still compile when first met: all of them here would add about 2 s (3-4 s on a loaded machine; branch
    redact31, docs/benchmarks.md) to every start of `broker run` and of the shim, the escaped-key text
    variant alone 0.8 s."""
    for kind in (_TEXT, _BINARY):
        _kind_regex(kind, False)
        _kind_gate(kind, False)
        _kind_triggers(kind, False)
        _kind_rare_triggers(kind)
    _value_re()
    _value_gate()
    _value_trigger_re()
    _url_name_re()
    _body_name_re()
    _assigned_name_re()


def redact_body(body: bytes, content_type: str | None) -> bytes:
    """Redact a decoded body byte-level; everything that is not a credential is returned unchanged.

    - form (application/x-www-form-urlencoded): values of credential fields (the query name list) become
      ``[never%20captured]``; every other replacement in a form body uses that URL form too.
    - text (JSON, *+json, text/*, XML, message/*, an absent content type) and every other type,
      binary included: ``"name": value`` pairs with a credential name (compared as the key reads once
      parsed: ``"pass\\u0077ord"`` is ``password``) lose their value: a string's content becomes
      ``[never captured]`` (escaped quotes handled); a number, an array or an object, everything under
      the key, becomes the string ``"[never captured]"``; only true, false and null stay. The same inside
      a JSON string holding JSON (``\\"token\\": ...``). ``name=value`` parameters with a credential
      name after ``?``, ``&``, ``&amp;``, ``\\u0026`` or at the start of the body (a form sent as
      text/plain or octet-stream) lose their value (``[never%20captured]``).
    - multipart/*: parts whose ``name=`` is a credential name get their content replaced (plus the text
      rules inside every part).
    - every body: credential value patterns (see ``contains_credential``).
    """
    body = bytes(body)
    if StreamingRedactor._use_triggers and _body_plainly_clean(body, _kind(content_type)[0]):
        return body  # the same object: nothing to redact, nothing copied
    return StreamingRedactor(content_type)._whole(body)


def _body_plainly_clean(body: bytes, kind: str) -> bool:
    """True when the rules of `kind` cannot change `body`: none matches at its start (a form field needs
    nothing before it there) and no trigger of the kind occurs anywhere, so `_search`, which only tries
    trigger positions, finds nothing either. Decided in two C-level searches, which saves setting up a
    StreamingRedactor for the many short clean bodies and strings (headers' JSON, MCP params). The
    match at the start is the gate's (`_kind_gate`: the same positions as the rules' alternation)."""
    esc = _NAME_ESCAPE.search(body) is not None
    return (
        _kind_triggers(kind, esc).search(body) is None and _kind_rare_triggers(kind).search(body) is None
        and _kind_gate(kind, esc).match(body, 0) is None
    )


def contains_credential(data: bytes | str) -> bool:
    """True if a credential value pattern occurs: Bearer token, JWT, ya29., 1//0, AIza, GOCSPX-, Slack
    xox?-/xoxe.xox?-/xoxd-/xapp-, GitHub gh?_/github_pat_, webhook capability URLs (Slack, Discord, Teams,
    Zapier, Telegram bot), PEM private key.
    """
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    # Every value rule starts at one of its triggers: with none in `data` (the usual case, decided in
    # one C-level search) `_search` could not match either.
    triggers = _value_trigger_re()
    if triggers.search(data) is None:
        return False
    return _search(_value_re(), triggers, data, 0, len(data), gate=_value_gate()) is not None


# ---------------------------------------------------------------------------------------------
# Headers and URLs
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _is_credential_header(name: str) -> bool:
    """Fixed list plus the catch-all name pattern (docs/contract.md section 3; cached: names hold no secrets)."""
    lname = name.strip().lower()
    if lname in _HEADER_NAMES:
        return True
    return lname not in HARMLESS_HEADER_NAMES and _HEADER_NAME_RE.search(lname) is not None


_H_PLAIN, _H_CREDENTIAL, _H_URL, _H_LINK = range(4)


@functools.lru_cache(maxsize=4096)
def _header_kind(name: str) -> int:
    """How redact_headers treats a header name (cached: names hold no secrets)."""
    if _is_credential_header(name):
        return _H_CREDENTIAL
    lname = name.strip().lower()
    return _H_URL if lname in _URL_HEADERS else _H_LINK if lname == "link" else _H_PLAIN


def redact_headers(headers: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Return [[name, value], ...] in the same order with credential values replaced by REDACTED.

    Credential headers (fixed list, name pattern minus ``HARMLESS_HEADER_NAMES``, or a value holding a
    credential value pattern) get REDACTED. Location, Content-Location, Referer, X-Goog-Upload-URL and
    Link URLs go through ``redact_url``, so a
    capability URL (upload_id=, sig=, X-Amz-Signature=, hooks.slack.com/...) keeps its shape and loses
    its secret; a plain redirect stays byte for byte.
    """
    headers = list(headers)
    kinds = [_header_kind(n) for n, _ in headers]
    # One value-pattern scan over all plain values; they are scanned one by one only if it hits.
    plain = [v for (_, v), kind in zip(headers, kinds, strict=True) if kind != _H_CREDENTIAL]
    suspect = contains_credential("\n".join(plain)) if plain else False
    out: list[list[str]] = []
    for (name, value), kind in zip(headers, kinds, strict=True):
        if kind == _H_CREDENTIAL:
            new = REDACTED
        elif kind == _H_PLAIN:
            new = REDACTED if suspect and contains_credential(value) else value
        else:
            new = redact_url(value) if kind == _H_URL else _LINK_URL_RE.sub(
                lambda m: "<" + redact_url(m.group(1)) + ">", value
            )
            if new != REDACTED and contains_credential(new):
                new = REDACTED
        out.append([name, new])
    return out


_AUTHORITY_RE = re.compile(r"(?P<pre>(?:[A-Za-z][A-Za-z0-9+.\-]*:)?//)(?P<auth>[^/?#]*)")

# Webhook hosts whose URL path holds the secret: (host pattern, path prefix kept); the rest of the path
# becomes [never%20captured]. Keep in step with the webhook value rules of the body scan.
_WEBHOOK_PATHS: tuple[tuple[re.Pattern[str], re.Pattern[str]], ...] = tuple(
    (re.compile(host), re.compile(path, re.IGNORECASE))
    for host, path in (
        (r"hooks\.slack\.com", r"/[^/]*/"),  # /services/T/B/SECRET, /actions/T/ID/SECRET (response_url)
        (r"(?:ptb\.|canary\.)?discord(?:app)?\.com", r"/api/(?:v\d+/)?webhooks/"),  # /ID/TOKEN
        (r"[a-z0-9-]+\.webhook\.office\.com", r"/webhookb2/"),  # Teams incoming webhooks
        (r"outlook\.office(?:365)?\.com", r"/webhook/"),  # Teams / Office 365 connectors, legacy host
        (r"hooks\.zapier\.com", r"/hooks/"),  # /hooks/catch/ACCOUNT/SECRET/
        (r"api\.telegram\.org", r"/(?:file/)?bot"),  # /bot<token>/method
    )
)
_WEBHOOK_MARK = re.compile(r"(?i)hooks\.slack|discord|webhook\.office|outlook\.office|hooks\.zapier|telegram\.org")


def _webhook_prefix(host: str, path: str) -> str | None:
    """The part of a webhook URL's path that stays, when the host is a known webhook host; else None."""
    for host_re, path_re in _WEBHOOK_PATHS:
        if host_re.fullmatch(host):
            m = path_re.match(path)
            return m.group() if m and len(path) > m.end() else None
    return None


def _has_credential_text(s: str) -> bool:
    """Value pattern check on a URL component as written and percent-decoded; and the text rules of a body
    on the decoded component (`_decoded_holds_secret`)."""
    return (
        contains_credential(s) or contains_credential(unquote(s)) or contains_credential(unquote_plus(s))
        or _decoded_holds_secret(s)
    )


_DECODED_MARK = re.compile(r'[="<]|%3[DdCc]|%22')


def _decoded_holds_secret(s: str) -> bool:
    """True when a percent-encoded URL component, decoded as a form decodes it, is text the body rules
    would change: a URL in a parameter (`next=https%3A%2F%2Fa%2F%3Faccess_token%3D...`), JSON
    (`q=%7B%22password%22%3A...`), a form (`state=a%3D1%26token%3D...`). Only the value patterns were
    read there, so a credential named by its key or parameter stayed."""
    # Only the rules that are no value pattern (contains_credential read the decoded text already) can
    # change it, and each needs one of these once decoded: a JSON key '"', a parameter '=', an XML
    # element '<' (decoding, 2 us, is saved for the many components without one).
    if "%" not in s or _DECODED_MARK.search(s) is None:
        return False
    raw = unquote_plus(s).encode("utf-8", "surrogatepass")
    return redact_body(raw, None) != raw


def _redact_params(params: str) -> str:
    """`a=1&token=x` -> `a=1&token=[never%20captured]`; unchanged parameters keep their exact bytes."""
    parts = params.split("&")
    for i, part in enumerate(parts):
        name, eq, value = part.partition("=")
        if eq:
            if _url_name_re().fullmatch(unquote_plus(name)) or _has_credential_text(value):
                parts[i] = name + "=" + REDACTED_URL
            elif _has_credential_text(name):
                parts[i] = REDACTED_URL + "=" + value
        elif _has_credential_text(part):
            parts[i] = REDACTED_URL
    return "&".join(parts)


def _forms(s: str) -> tuple[str, ...]:
    """A URL component as `_has_credential_text` reads it: as written, percent-decoded, and with `+`
    as a space (the decoded forms only where they can differ)."""
    if "%" in s:
        return s, unquote(s), unquote_plus(s)
    return (s, s.replace("+", " ")) if "+" in s else (s,)


def _params_clean(params: str, texts: list[str]) -> bool:
    """As `_redact_params` reads `params`: False when a parameter has a credential name (its value
    would be replaced); else every text it scans for value patterns is added to `texts`."""
    for part in params.split("&"):
        name, eq, value = part.partition("=")
        if eq:
            if _url_name_re().fullmatch(unquote_plus(name) if "%" in name or "+" in name else name):
                return False
            texts += _forms(value)
            texts += _forms(name)
        else:
            texts += _forms(part)
    return True


def _plainly_clean(url: str) -> bool:
    """True only when `_redact_url_full` would return `url` unchanged; decided with one value-pattern scan.

    It reads the URL as the full path does (no userinfo, no webhook host, no credential-named query or
    fragment parameter) and collects every text the full path scans (path segments, parameter names
    and values, parts without `=`, a bare fragment; each as written and decoded). Those texts joined by
    newlines hold a value pattern whenever one of them does: no value rule needs the start or the end
    of its text (a lookbehind at a text's start sees a newline, which no rule accepts where a start of
    text would fail, and lookaheads only widen). So no hit in the join means no hit in any of them.
    (The test suite compares this with the full path on random URLs with credentials in every part.)
    """
    if _WEBHOOK_MARK.search(url):
        return False
    rest, _, fragment = url.partition("#")
    rest, _, query = rest.partition("?")
    m = _AUTHORITY_RE.match(rest)
    if m and "@" in m["auth"]:
        return False
    texts: list[str] = []
    for segment in (rest[m.end() :] if m else rest).split("/"):
        texts += _forms(segment)
    if query and not _params_clean(query, texts):
        return False
    if fragment:
        if "=" in fragment:
            if not _params_clean(fragment, texts):
                return False
        else:
            texts += _forms(fragment)
    if contains_credential("\n".join(texts)):
        return False
    # The full path reads every component's decoded text with the body rules too; checking every text
    # that holds a '%' (decoded forms included) is a superset of that.
    return not any(_decoded_holds_secret(t) for t in texts if "%" in t)


def redact_url(url: str) -> str:
    """Remove credentials from a URL, leaving every other byte where it was.

    - userinfo (``user:pass@``) is removed;
    - query and fragment parameters whose (decoded, case-insensitive) name is a credential name keep the
      name, the value becomes ``[never%20captured]`` (REDACTED_URL: the literal text, only the space
      encoded); so does any parameter whose value holds a credential value pattern;
    - a path segment holding a credential value pattern becomes ``[never%20captured]``;
    - webhook URLs whose path is the secret keep only the path up to the webhook marker, the rest becomes
      ``[never%20captured]``: Slack ``hooks.slack.com/services/...`` (and response_url), Discord
      ``discord.com/api/webhooks/ID/TOKEN`` (and discordapp.com), Teams / Office 365
      ``*.webhook.office.com/webhookb2/...`` and ``outlook.office.com/webhook/...``, Zapier
      ``hooks.zapier.com/hooks/...``, Telegram ``api.telegram.org/bot<token>/...``.
    Pagination cursors (pageToken, nextPageToken, syncToken) are not credentials and stay.
    """
    return url if _plainly_clean(url) else _redact_url_full(url)


def _redact_url_full(url: str) -> str:
    """`redact_url` without its fast path: every component checked and rewritten one by one."""
    rest, hash_, fragment = url.partition("#")
    rest, qmark, query = rest.partition("?")
    m = _AUTHORITY_RE.match(rest)
    if m:
        pre, auth, path = m["pre"], m["auth"], rest[m.end() :]
        if "@" in auth:
            auth = auth.rpartition("@")[2]
        host = _host_of(auth)
    else:
        pre, auth, path, host = "", "", rest, ""
    keep = _webhook_prefix(host, path) if host else None
    if keep is not None:
        path = keep + REDACTED_URL
    else:
        path = "/".join(REDACTED_URL if _has_credential_text(s) else s for s in path.split("/"))
    if query:
        query = _redact_params(query)
    if fragment:
        fragment = _redact_params(fragment) if "=" in fragment else (
            REDACTED_URL if _has_credential_text(fragment) else fragment
        )
    return pre + auth + path + qmark + query + hash_ + fragment


# ---------------------------------------------------------------------------------------------
# Parsed JSON
# ---------------------------------------------------------------------------------------------


_CLEAN_TEXTS: dict[str, None] = {}
"""Short strings the text rules left unchanged (keys and names that recur in every MCP message: `jsonrpc`,
`params`, `tools/call`): the rules are fixed, so such a string is clean every time. Only strings with
nothing to redact are kept (no credential stays in memory); emptied when full."""
_CLEAN_TEXT_MAX_LEN = 64
_CLEAN_TEXTS_MAX = 4096


def _redact_text(s: str) -> str:
    """Text rules on a Python string; cuts fall on ASCII bytes only, so the result is valid again."""
    if type(s) is str and s in _CLEAN_TEXTS and StreamingRedactor._use_triggers:
        return s
    raw = s.encode("utf-8", "surrogatepass")
    red = redact_body(raw, "text/plain")
    if red != raw:
        return red.decode("utf-8", "surrogatepass")
    if len(s) <= _CLEAN_TEXT_MAX_LEN and type(s) is str and StreamingRedactor._use_triggers:
        if len(_CLEAN_TEXTS) >= _CLEAN_TEXTS_MAX:
            _CLEAN_TEXTS.clear()
        _CLEAN_TEXTS[s] = None
    return s


@functools.lru_cache(maxsize=4096)  # names of settings and headers, compared again in every message
def _is_assigned_name(name: str) -> bool:
    """A credential name after up to three identifier words (DB_PASSWORD, spring.datasource.password), as
    line assignments and name/value pairs read it."""
    return _assigned_name_re().fullmatch(name) is not None


@functools.cache
def _assigned_name_re() -> re.Pattern[str]:
    """`_is_assigned_name`'s regex, compiled on first use."""
    return re.compile(_ID_WORDS.decode() + "(?:" + _BODY_ALT + ")")


def _named_value_key(obj: dict) -> str | None:
    """The "value" key of a name/value pair naming a credential ({"name": "DB_PASSWORD", "value": ...}; name,
    Name or NAME, or key for name), else None: parsed JSON's spelling of the body rule `_NAME_VALUE_HEAD`."""
    value_key = "value" if "value" in obj else "Value" if "Value" in obj else "VALUE" if "VALUE" in obj else None
    if value_key is None:  # the usual case, in three dict lookups
        return None
    for name_key in ("name", "Name", "NAME", "key", "Key", "KEY"):
        name = obj.get(name_key)
        if type(name) is str:
            return value_key if _is_assigned_name(name) else None
    return None


def redact_json_value(value: object) -> object:
    """Copy of parsed JSON (e.g. MCP tool-call params) with credentials removed.

    Whatever sits under a credential key (the body name list: token, access_token, client_secret,
    password, authorization, ... in any of snake_case, camelCase, kebab-case) becomes REDACTED: a string,
    a number, a list or an object alike; only true, false and null stay (they hold no secret). Every
    other string (and every key) goes through the text rules of ``redact_body``, as in ``redact_body``.
    Tuples come back as lists.
    """
    if isinstance(value, dict):
        out: dict[object, object] = {}
        secret_key = _named_value_key(value)
        for k, v in value.items():
            if isinstance(k, str) and (k == secret_key or _is_assigned_name(k)) and (
                v is not None and not isinstance(v, bool)
            ):
                out[_redact_text(k)] = REDACTED
            else:
                out[_redact_text(k) if isinstance(k, str) else k] = redact_json_value(v)
        return out
    if isinstance(value, list | tuple):
        return [redact_json_value(v) for v in value]
    if isinstance(value, str):
        return _redact_text(value)
    return value


def _every_pair(pairs: list[tuple[str, object]]) -> object:
    """A JSON object as read for redaction: a dict, or, when a key repeats, each of its pairs as a one-key dict
    (`json.loads` keeps the last value of a duplicate key; a reader keeping the first, or the text, gets the
    others back)."""
    return dict(pairs) if len({k for k, _ in pairs}) == len(pairs) else [{k: v} for k, v in pairs]


def redact_escaped_json(body: bytes) -> bytes:
    """A JSON body, after `redact_body`, whose strings hold `\\uXXXX` escapes of ASCII characters: the
    byte rules read it as written, so `\\u0067hp_...` or `https\\u003a//user:pass@` hid a credential
    from them that a reader of the JSON gets back. Such a body is read, redacted as read
    (`redact_json_value`) and, when that removed anything (from the value, or from a duplicate key's values
    it does not keep), written again (the same JSON value less the credentials, no ASCII escaped); any
    other body comes back unchanged. Called on whole bodies held in
    memory (`record_body`, and `BodyCapture` when it held the body): one over the JSON parse limit, in a
    blob, is not read here; nor is a credential the byte rules cut short (`Bearer\\u0020<token>`:
    the byte rules take `Bearer` for the token)."""
    if _NAME_ESCAPE.search(body) is None:  # the usual case: no escape of an ASCII character
        return body
    import json

    try:
        value = json.loads(body)
        redacted = redact_json_value(value)
        if redacted == value and redact_json_value(every := json.loads(body, object_pairs_hook=_every_pair)) == every:
            return body  # nothing to redact, in the last value of a duplicate key nor in any other
        try:
            return json.dumps(redacted, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: written escaped
            return json.dumps(redacted, separators=(",", ":")).encode("ascii")
    except (ValueError, RecursionError):
        return body


# ---------------------------------------------------------------------------------------------
# Token exchanges: no entry at all
# ---------------------------------------------------------------------------------------------

_GENERIC_TOKEN_PATH = re.compile(
    r"(?i)/(oauth2?|o/oauth2|login/oauth|connect|protocol/openid-connect)((?:/[^/]+)?/v[\d.]+)?"
    r"/(token|access_token|device(/code)?|devicecode|revoke|introspect)$"
)
_HOST_PATHS: dict[str, re.Pattern[str]] = {
    # Google
    "oauth2.googleapis.com": re.compile(r"^/(?:v\d+/)?(?:token|revoke|tokeninfo|device/code)$"),
    "accounts.google.com": re.compile(r"^/o/oauth2/"),
    "www.googleapis.com": re.compile(r"^/oauth2/v\d+/(?:token|tokeninfo|revoke)$"),
    "sts.googleapis.com": re.compile(r"^/"),
    "iamcredentials.googleapis.com": re.compile(r"^/"),
    # Microsoft: login.live.com
    "login.live.com": re.compile(r"^/oauth20_token\.srf$"),
}
_MS_LOGIN_HOSTS = frozenset({
    "login.microsoftonline.com", "login.windows.net", "login.microsoftonline.us", "login.chinacloudapi.cn",
    "login.partner.microsoftonline.cn", "login.microsoftonline.de",
})  # fmt: skip
_MS_LOGIN_PATH = re.compile(r"^/[^/]+/oauth2/(?:v2\.0/)?(?:token|devicecode)$")
_METADATA_PATHS = re.compile(
    r"^/(?:computemetadata/v1/instance/service-accounts/[^/]+/(?:token|identity)"  # GCE
    r"|metadata/identity/oauth2/token"  # Azure IMDS
    r"|latest/api/token|latest/meta-data/iam/security-credentials(?:/.*)?)$"  # AWS IMDS
)
_METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata", "169.254.169.254", "fd00:ec2::254"})
_SLACK_TOKEN_METHODS = re.compile(
    r"^/api/(?:oauth\.access|oauth\.v2\.access|oauth\.v2\.exchange|oauth\.v2\.user\.access|oauth\.token"
    r"|openid\.connect\.token|tooling\.tokens\.rotate|auth\.revoke)$"
)
_GITHUB_TOKEN_PATHS = re.compile(
    r"^(?:/api/v3)?(?:/login/oauth/access_token|/login/device/code"
    r"|/app/installations/[^/]+/access_tokens"
    r"|/applications/[^/]+/(?:token(?:/scoped)?|grant)"
    r"|/(?:repos/[^/]+/[^/]+|orgs/[^/]+|enterprises/[^/]+)/actions/runners"
    r"/(?:registration-token|remove-token|generate-jitconfig))$"
)
_AWS_STS_HOST = re.compile(r"^sts(?:[.-][a-z0-9-]+)*\.amazonaws\.com(?:\.cn)?$")
_GRANT_TYPE = re.compile(rb'(?:^|&)grant_type=|"grant_type"\s*:')


_SLASHES = re.compile(r"/{2,}")
_PORT = re.compile(r":\d*$")


def _host_of(authority: str) -> str:
    """Lowercase host of an authority without userinfo: port and IPv6 brackets removed."""
    authority = authority.rpartition("@")[2].lower()
    if authority.startswith("["):
        return authority[1:].partition("]")[0]
    return _PORT.sub("", authority).rstrip(".")


def header_value(headers: Iterable[tuple[str, str]] | Iterable[list[str]], name: str) -> str | None:
    """First value of a header (case-insensitive), or None."""
    name = name.lower()
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


def is_token_exchange(method: str, url: str, headers: Iterable[tuple[str, str]], body: bytes | None) -> bool:
    """True for OAuth/credential endpoints whose calls leave no entry at all (docs/contract.md section 3).

    Matches the provider tables (Google, Slack, GitHub, Microsoft, cloud metadata services), the generic
    OAuth path regex, any path ending ``/token`` whose body holds ``grant_type``, and AWS STS. The path
    is percent-decoded and compared lowercase; the method does not matter (GET tokeninfo counts too).
    A path-only URL takes its host from the Host header. A WebSocket is never one, whatever its URL: not
    its upgrade (`Upgrade: websocket`), nor a message on it (method `WEBSOCKET`, docs/contract.md): it
    is a channel both ways, for as long as it stays open.
    """
    if method == "WEBSOCKET" or "websocket" in (header_value(headers, "upgrade") or "").lower():
        return False  # (every other method of these endpoints is dropped)
    rest = url.strip().partition("#")[0].partition("?")[0]
    m = _AUTHORITY_RE.match(rest)
    auth, raw_path = (m["auth"].rpartition("@")[2], rest[m.end() :]) if m else ("", rest)
    if not auth:
        auth = (header_value(headers, "host") or "").strip()
    host = _host_of(auth)
    path = raw_path or "/"
    path = _SLASHES.sub("/", unquote(path) if "%" in path else path).lower()
    if len(path) > 1:
        path = path.rstrip("/") or "/"

    host_rule = _HOST_PATHS.get(host)
    if host_rule is not None and host_rule.search(path):
        return True
    if host in _MS_LOGIN_HOSTS and _MS_LOGIN_PATH.match(path):
        return True
    if host in _METADATA_HOSTS and _METADATA_PATHS.match(path):
        return True
    if path.endswith("/oauth20_token.srf") or path == "/metadata/identity/oauth2/token":
        return True
    if (host.endswith((".slack.com", ".slack-gov.com")) or host in ("slack.com", "slack-gov.com")) and (
        _SLACK_TOKEN_METHODS.match(path)
    ):
        return True
    if _GITHUB_TOKEN_PATHS.match(path):
        return True
    if _AWS_STS_HOST.match(host):
        return True
    if _GENERIC_TOKEN_PATH.search(path):
        return True
    return bool(path.endswith("/token") and body and _GRANT_TYPE.search(body.strip()))
