"""Signed notes and key texts against golang.org/x/mod/sumdb/note's known answers, and C2SP's examples."""

from __future__ import annotations

import base64
import struct
from pathlib import Path

import pytest

from journal.checkpoint.note import (
    ALG_COSIGNATURE_V1,
    NoteError,
    Signer,
    Verifier,
    cosign,
    load_verifier,
    open_note,
    parse_note,
    sign_note,
)

# golang.org/x/mod sumdb/note/note_test.go
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
PETER_SIG = ("\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpR"
             "Zb6KE6RyyBwJnAM=\n")
ENOCH_SIG = ("\u2014 EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WW"
             "d1RvMc+QQ=\n")


def test_go_known_answer_sign() -> None:
    signer = Signer.from_text(PETER_SKEY)
    assert signer.key_id.hex() == "c74f20a3"
    assert signer.verifier().vkey() == PETER_VKEY
    assert signer.key_text() == PETER_SKEY
    assert sign_note(TEXT, signer) == (TEXT + "\n" + PETER_SIG).encode()


def test_go_known_answer_open() -> None:
    peter, enoch = Verifier.from_vkey(PETER_VKEY), Verifier.from_vkey(ENOCH_VKEY)
    msg = (TEXT + "\n" + PETER_SIG + ENOCH_SIG).encode()
    opened = open_note(msg, [peter])
    assert opened.text == TEXT
    assert [s.name for _, s, _ in opened.verified] == ["PeterNeumann"]
    assert [s.name for s in opened.unverified] == ["EnochRoot"]
    assert len(open_note(msg, [peter, enoch]).verified) == 2
    with pytest.raises(NoteError, match="no verifiable signatures"):
        open_note(msg, [])
    bad = (TEXT + "\n" + PETER_SIG[:60] + "ABCD" + PETER_SIG[60:]).encode()
    with pytest.raises(NoteError, match="invalid signature for key PeterNeumann\\+c74f20a3"):
        open_note(bad, [peter])


@pytest.mark.parametrize("msg", [
    TEXT,
    TEXT + "\n",
    TEXT + "\n" + PETER_SIG[:-1],
    "\x01" + TEXT + "\n" + PETER_SIG,
    TEXT + "\n" + PETER_SIG.replace("PeterNeumann", "Bad Name")[:-1],
    TEXT + "\n" + PETER_SIG + "Unexpected line.\n",
    TEXT + "\n" + PETER_SIG.replace("\u2014", "--"),
    TEXT + "\n" + PETER_SIG * 101,
])
def test_malformed_notes_are_rejected(msg: str) -> None:
    with pytest.raises(NoteError):
        open_note(msg.encode(), [Verifier.from_vkey(PETER_VKEY)])
    with pytest.raises(NoteError):
        open_note(b"\xff" + msg.encode(), [Verifier.from_vkey(PETER_VKEY)])


def test_text_with_blank_lines_splits_at_the_last_one() -> None:
    signer = Signer.generate("example.com/log")
    text = "line one\n\nline three\n"
    note = parse_note(sign_note(text, signer))
    assert note.text == text
    assert open_note(sign_note(text, signer), [signer.verifier()]).text == text


def _manglings(key: str) -> list[str]:
    out = {key[i:j] for i in range(len(key) + 1) for j in range(i + 1, len(key) + 1)} - {key}
    for i in range(len(key)):
        out.add(key[:i] + chr(ord(key[i]) + 1) + key[i + 1 :])
    return sorted(out)


def test_vkey_manglings_are_rejected() -> None:
    Verifier.from_vkey(PETER_VKEY)
    for bad in _manglings(PETER_VKEY) + [
        "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==",
        "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
    ]:
        with pytest.raises(NoteError):
            Verifier.from_vkey(bad)


def test_signer_key_manglings_are_rejected() -> None:
    for bad in _manglings(PETER_SKEY)[::7]:  # every 7th of ~3,400: the same classes as Go's test, faster
        with pytest.raises(NoteError):
            Signer.from_text(bad)


def test_cosignature_layout_matches_the_c2sp_example() -> None:
    """tlog-cosignature.md's example line: key ID, then the big-endian time of its signed message."""
    example = ("jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+"
               "qnA==")
    raw = base64.b64decode(example)
    assert len(raw) == 76
    assert struct.unpack(">Q", raw[4:12])[0] == 1679315147


def test_cosignature_round_trip_and_key_types() -> None:
    witness = Signer.generate("witness.example/w1")
    body = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
    log = Signer.generate("example.com/behind-the-sofa")
    msg = sign_note(body, log) + cosign(body, witness, 1679315147).line().encode()
    cos = witness.cosigner_verifier()
    assert cos.alg == ALG_COSIGNATURE_V1 and cos.key_id != witness.verifier().key_id
    opened = open_note(msg, [log.verifier(), Verifier.from_vkey(cos.vkey())])
    assert [ts for _, _, ts in opened.verified] == [None, 1679315147]
    # the witness's note key (type 0x01) does not verify a cosignature: the key IDs differ
    assert open_note(msg, [log.verifier(), witness.verifier()]).unverified[0].name == "witness.example/w1"
    tampered = msg.replace(b"20852163", b"20852164")
    with pytest.raises(NoteError):
        open_note(tampered, [cos])


def test_a_verifier_key_file_that_is_not_text_is_refused_with_its_name(tmp_path) -> None:
    path = tmp_path / "witness.vkey"
    path.write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(NoteError, match="witness.vkey is not a verifier key: the file is not text"):
        load_verifier(str(path))


@pytest.mark.parametrize("source", ["/dev/zero", "big"])
def test_a_key_option_reads_a_bounded_prefix_of_what_it_is_given(tmp_path, source):
    """`--seal-key /dev/zero` (or a huge file given by mistake) is one clear error, not an endless read."""
    from journal.checkpoint.note import load_signer

    path = source
    if source == "big":
        path = str(tmp_path / "big.vkey")
        Path(path).write_bytes(b"A" * (1 << 20))
    for load in (load_verifier, load_signer):
        with pytest.raises(NoteError, match="over 65536 bytes"):
            load(path)
