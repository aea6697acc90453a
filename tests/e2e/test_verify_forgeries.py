"""`broker verify` end to end against session files forged by whoever can write the vault.

Each forgery is a line the writer could never have produced but which a JSON parser reads, most of them with
the hash recomputed so that the chain holds: non-canonical bytes with the hash over the canonical form or over
the bytes as written, escapes JCS does not write, floats, duplicate keys, a key too many or too few, a seq jump
with the right prev, NUL bytes, CRLF, a BOM, invalid and overlong UTF-8, no final newline, an empty line.
One vault holds a session per forgery; `broker verify --json` must name each at its seq with its kind, and give
the very same report with the C accelerator of the canonical form and without it (BROKER_NO_SPEEDUPS=1). The
text output must keep one line per finding whatever the forged bytes hold (a line break or a carriage return in
them would let the vault's writer print "intact" lines).
tests/journal/test_verify.py holds the unit tests of the same checks; this is what an auditor runs.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from journal.canonical import canonical_bytes
from journal.chain import GENESIS, chain_entry
from journal.erasure import write_tombstone
from journal.vault import Vault
from tests.support.journal_factories import fields

ROOT = Path(__file__).resolve().parents[2]
N = 4  # entries per session; the forged line is seq 2 (a chain goes on after it) or seq 4 (the last)


def _broker(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_COLOR="1", **(env or {}))
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=300)


def _chain(session: str, n: int = N) -> list[bytes]:
    lines, prev = [], GENESIS
    for i in range(1, n + 1):
        entry, line = chain_entry(fields(session=session, n=i), i, prev)
        prev = entry["hash"]
        lines.append(line)
    return lines


def _hash_of(line: bytes) -> str:
    return orjson.loads(line)["hash"]


def _rehashed_as_written(line: bytes) -> bytes:
    """`line` with its hash recomputed over its own bytes (the `hash` member cut out, as the verifier does), found
    without parsing (the forged bytes need not be JSON)."""
    found = re.search(rb',"hash":"([0-9a-f]{64})"', line)
    assert found is not None
    body = line.rstrip(b"\r\n").replace(found.group(0), b"", 1)
    return line.replace(found.group(1), hashlib.sha256(body).hexdigest().encode(), 1)


def _rebuilt(line: bytes, **changes: object) -> bytes:
    """The line's entry with `changes` (None deletes a key), hash recomputed over its canonical form."""
    entry = orjson.loads(line)
    del entry["hash"]
    for key, value in changes.items():
        if value is None:
            del entry[key]
        else:
            entry[key] = value
    entry["hash"] = hashlib.sha256(canonical_bytes(entry)).hexdigest()
    return canonical_bytes(entry) + b"\n"


def _sub(old: bytes, new: bytes) -> Callable[[bytes], bytes]:
    def edit(line: bytes) -> bytes:
        assert old in line, old
        return line.replace(old, new, 1)
    return edit


def _then_rehash(edit: Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
    return lambda line: _rehashed_as_written(edit(line))


# name: (seq of the forged line, how it is forged, expected kind). The forged line's hash is recomputed (over the
# bytes as written, or over the canonical form of the entry) unless the name says it is kept.
FORGERIES: dict[str, tuple[int, Callable[[bytes], bytes], str]] = {
    "space-hash-kept": (2, _sub(b'{"agent"', b'{ "agent"'), "not_canonical"),  # hash over the canonical form
    "space-rehashed": (2, _then_rehash(_sub(b'"agent":', b'"agent": ')), "not_canonical"),
    "space-last-rehashed": (4, _then_rehash(_sub(b'"agent":', b'"agent": ')), "not_canonical"),
    "escape-u0047": (4, _then_rehash(_sub(b'"GET"', b'"\\u0047ET"')), "not_canonical"),
    "escape-solidus": (4, _then_rehash(_sub(b"https://", b"https:\\/\\/")), "not_canonical"),
    "escape-upper-hex": (4, _then_rehash(_sub("é".encode(), b"\\u00E9")), "not_canonical"),
    "escape-lower-hex": (4, _then_rehash(_sub("é".encode(), b"\\u00e9")), "not_canonical"),
    "escape-u2028": (4, _then_rehash(_sub(b"message 4", b"message\\u20284")), "not_canonical"),
    "escape-surrogate-pair": (4, _then_rehash(_sub("\U0001f600".encode(), b"\\ud83d\\ude00")), "not_canonical"),
    "escape-lone-surrogate": (4, _then_rehash(_sub(b"message", b"m\\ud800ssage")), "not_canonical"),
    "escape-swapped-surrogates": (4, _then_rehash(_sub(b"message", b"m\\udc00\\ud800ssage")), "not_canonical"),
    "escape-u001F-upper": (4, _then_rehash(_sub(b"message", b"m\\u001Fssage")), "not_canonical"),
    "escape-u0009-for-tab": (4, _then_rehash(_sub(b"message", b"m\\u0009ssage")), "not_canonical"),
    "raw-tab": (4, _then_rehash(_sub(b"message", b"m\tssage")), "not_canonical"),
    "raw-nul": (4, _then_rehash(_sub(b"message", b"m\x00ssage")), "not_canonical"),
    "raw-del-is-canonical": (4, lambda line: line, ""),  # control: DEL and U+2028 are written raw (see below)
    "utf8-invalid": (4, _then_rehash(_sub(b"message", b"m\xffssage")), "not_canonical"),
    "utf8-overlong": (4, _then_rehash(_sub(b"message", b"m\xc1\xa5ssage")), "not_canonical"),
    "utf8-surrogate-bytes": (4, _then_rehash(_sub("\U0001f600".encode(), b"\xed\xa0\xbd\xed\xb8\x80")),
                             "not_canonical"),
    "float-point": (4, _then_rehash(_sub(b'"status":200', b'"status":200.0')), "not_canonical"),
    "float-exponent": (4, _then_rehash(_sub(b'"status":200', b'"status":2e2')), "not_canonical"),
    "minus-zero": (4, _then_rehash(_sub(b'"labelIds":[', b'"labelIds":[-0,')), "not_canonical"),
    "leading-zero": (4, _then_rehash(_sub(b'"status":200', b'"status":0200')), "not_canonical"),
    "integer-2-53": (4, _then_rehash(_sub(b'"labelIds":[', b'"labelIds":[9007199254740992,')), "not_canonical"),
    "huge-exponent": (4, _then_rehash(_sub(b'"labelIds":[', b'"labelIds":[1e400,')), "not_canonical"),
    "duplicate-key": (4, _then_rehash(_sub(b'"agent":', b'"agent":"x","agent":')), "not_canonical"),
    "duplicate-key-same-value": (4, _then_rehash(_sub(b'"agent":"agent-a",', b'"agent":"agent-a","agent":"agent-a",')),
                                 "not_canonical"),
    "extra-key": (4, lambda line: _rebuilt(line, extra=1), "contract_violation"),
    "hash-key-renamed": (4, _sub(b',"hash":', b',"h":'), "contract_violation"),  # no hash member: it crashed verify
    "hash-key-renamed-mid": (2, _sub(b',"hash":', b',"h":'), "contract_violation"),
    "missing-key": (4, lambda line: _rebuilt(line, mcp=None), "contract_violation"),
    "seq-true": (4, lambda line: _rebuilt(line, seq=True), "contract_violation"),
    "seq-jump-right-prev": (4, lambda line: _rebuilt(line, seq=6), "edited"),
    "seq-jump-right-prev-mid": (2, lambda line: _rebuilt(line, seq=5), "edited"),
    "crlf": (4, lambda line: line[:-1] + b"\r\n", "not_canonical"),
    "crlf-rehashed": (4, _then_rehash(lambda line: line[:-1] + b"\r\n"), "not_canonical"),
    "bom": (4, _then_rehash(lambda line: b"\xef\xbb\xbf" + line), "not_canonical"),
    "trailing-garbage": (4, _then_rehash(lambda line: line[:-1] + b"x\n"), "not_canonical"),
    "no-final-newline": (4, lambda line: line[:-1], "torn_tail"),
    "nul-after-last-line": (5, lambda line: line + b"\x00", "torn_tail"),
    "empty-line-after": (5, lambda line: line + b"\n", "not_canonical"),
    "nul-line-after": (5, lambda line: line + b"\x00\n", "not_canonical"),
    "deep-nesting-after": (5, lambda line: line + b"[" * 100_000 + b"]" * 100_000 + b"\n", "not_canonical"),
}
FORGERIES["key-order"] = (4, _then_rehash(lambda line: line.replace(
    b'"labelIds":["INBOX","UNREAD"],"snippet":"message 4 \xc3\xa9\xf0\x9f\x98\x80"',
    b'"snippet":"message 4 \xc3\xa9\xf0\x9f\x98\x80","labelIds":["INBOX","UNREAD"]', 1)), "not_canonical")


def _forged_vault(root: Path) -> Vault:
    vault = Vault.create(root)
    for name, (seq, forge, _) in FORGERIES.items():
        lines = _chain(name)
        if name == "raw-del-is-canonical":  # the writer's own line with DEL and U+2028 in a string: intact
            f = fields(session=name, n=4)
            f["response"]["body"]["snippet"] = "\x7f\u2028"
            lines[3] = chain_entry(f, 4, _hash_of(lines[2]))[1]
            assert b"\x7f\xe2\x80\xa8" in lines[3]
        i = min(seq, N) - 1
        forged = forge(lines[i])
        assert forged != lines[i] or name == "raw-del-is-canonical", name
        lines[i] = forged
        vault.session_path(name).write_bytes(b"".join(lines))
    return vault


@pytest.fixture(scope="module")
def forged(tmp_path_factory) -> Vault:
    return _forged_vault(tmp_path_factory.mktemp("forged") / "v")


def _reports(vault: Vault, **env: str) -> dict[str, dict]:
    r = _broker("verify", "--vault", str(vault.root), "--json", "--no-blobs", env=env)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    reports = [orjson.loads(line) for line in r.stdout.splitlines()]
    return {d["session"]: d for d in reports}


@pytest.fixture(scope="module")
def reports(forged) -> dict[str, dict]:
    got = _reports(forged)
    assert sorted(got) == sorted(FORGERIES)
    return got


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_each_forgery_is_named_at_its_seq_with_its_kind(reports, name):
    seq, _, kind = FORGERIES[name]
    got = reports[name]
    if not kind:
        assert (got["intact"], got["entries"]) == (True, N), got
        return
    assert (got["intact"], got["broken_at_seq"], got["kind"], got["entries"], got["head"]) == (
        False, seq, kind, seq - 1, None), got


def test_the_reports_are_the_same_without_the_c_accelerator(forged, reports):
    """The C proof of the canonical form (journal/_canonical_speedups.c) changes the speed, never a verdict."""
    assert _reports(forged, BROKER_NO_SPEEDUPS="1") == reports


def test_the_text_output_keeps_one_line_per_finding(tmp_path):
    """What the vault's writer controls and verify prints (an entry's `seq` before its type is checked, an unsigned
    tombstone's fields, the name of a quarantined torn tail) is printed with its line breaks and control
    characters escaped: a forged `\\n<session>: intact` or `\\r` overwriting the BROKEN line is not shown as one."""
    vault = Vault.create(tmp_path / "v")
    lie = "\ns2: intact (4 entries)\r\x1b[2Ks1: intact (4 entries)\u2028\x85"
    lines = _chain("s1")  # a seq that is a string holding the lie, hash left stale: `edited`, naming the seq
    lines[3] = lines[3].replace(b'"seq":4', b'"seq":' + orjson.dumps("4" + lie), 1)
    vault.session_path("s1").write_bytes(b"".join(lines))
    (vault.journal_dir / f"s1.jsonl.torn-{lie.replace(chr(0x1b), '')}").write_bytes(b"x")
    digest = hashlib.sha256(b"erased").hexdigest()  # s2 names a missing blob; an unsigned tombstone "explains" it
    lines = _chain("s2")
    ref = {"sha256": digest, "size": 6, "ref": f"blobs/sha256/{digest[:2]}/{digest}"}
    lines[1] = _rebuilt(lines[1], response={"status": 200, "headers": [], "body": ref}, prev=_hash_of(lines[0]))
    lines[2:] = _relinked(lines[1:], "s2")[1:]
    vault.session_path("s2").write_bytes(b"".join(lines))
    write_tombstone(vault.root, {"sha256": digest, "erased_at": lie, "erased_by": lie, "reason": lie})
    r = _broker("verify", "--vault", str(vault.root))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    out = r.stdout.splitlines()
    assert [line.split(":")[0] for line in out if not line.startswith("  ")] == ["s1", "s2"], r.stdout
    assert out[0].startswith("s1: BROKEN at seq 4: edited") and "intact" not in out[0].split("edited")[0]
    assert not any(line.startswith(("s1: intact", "s2: intact")) for line in out), r.stdout
    assert not re.search("[\r\x1b\x85\u2028]", r.stdout), repr(r.stdout)
    s2 = next(line for line in out if line.startswith("s2:"))
    assert "BROKEN at seq 2: blob_missing" in s2 and "not honoured" in s2 and "\\n" in s2


def _relinked(lines: list[bytes], session: str) -> list[bytes]:
    """`lines` (the first kept as it is) with every later line's prev and hash recomputed to follow it."""
    out, prev = [lines[0]], _hash_of(lines[0])
    for line in lines[1:]:
        out.append(_rebuilt(line, prev=prev))
        prev = _hash_of(out[-1])
    return out
