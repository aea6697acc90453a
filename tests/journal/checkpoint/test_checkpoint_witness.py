"""The tlog-witness rules (c2sp.org/tlog-witness), over HTTP on loopback and through the sealer."""

from __future__ import annotations

import base64

import pytest

from journal.checkpoint.checkpoint import Checkpoint
from journal.checkpoint.merkle import EMPTY_ROOT, MerkleTree
from journal.checkpoint.note import Signer, open_note, sign_note
from journal.checkpoint.witness import SIZE_CONTENT_TYPE, Witness, WitnessClient, request_body
from tests.support.checkpoint_harness import witness_server

ORIGIN = "log.example/vault-1/s1"


@pytest.fixture
def setup(tmp_path):
    log = Signer.generate("log.example/vault-1")
    wkey = Signer.generate("witness.example/w1")
    return log, wkey, Witness(wkey, tmp_path / "state", [log.verifier()])


def _tree(n: int) -> MerkleTree:
    return MerkleTree(i.to_bytes(32, "big") for i in range(n))


def _note(log: Signer, tree: MerkleTree, size: int, origin: str = ORIGIN) -> bytes:
    return sign_note(Checkpoint(origin, size, tree.root(size)).body(), log)


def _add(w: Witness, note: bytes, old: int, proof: list[bytes]) -> tuple[int, bytes]:
    a = w.add_checkpoint(request_body(old, proof, note), now=1700000000)
    return a.status, a.body


def test_happy_path_then_growth_with_a_proof(setup):
    log, wkey, w = setup
    tree = _tree(13)
    status, body = _add(w, _note(log, tree, 5), 0, [])
    assert status == 200
    note = _note(log, tree, 5) + body
    opened = open_note(note, [log.verifier(), wkey.cosigner_verifier()])
    assert [ts for _, _, ts in opened.verified] == [None, 1700000000]
    assert _add(w, _note(log, tree, 13), 5, tree.consistency_proof(5, 13))[0] == 200
    assert w.latest(ORIGIN)[0].size == 13
    assert _add(w, _note(log, tree, 13), 13, [])[0] == 200  # identical resubmission


def test_stale_old_size_is_409_with_the_witness_size(setup):
    log, _, w = setup
    tree = _tree(8)
    _add(w, _note(log, tree, 6), 0, [])
    a = w.add_checkpoint(request_body(0, [], _note(log, tree, 8)))
    assert (a.status, a.body, a.content_type) == (409, b"6\n", SIZE_CONTENT_TYPE)
    # a rollback (a smaller checkpoint) from the right old size: old > size is 400
    assert _add(w, _note(log, tree, 4), 6, [])[0] == 400


@pytest.mark.parametrize("case", ["bad_proof", "proof_from_zero", "same_size_other_root", "empty_root"])
def test_inconsistent_checkpoints_are_422(setup, case):
    log, _, w = setup
    tree = _tree(8)
    other = MerkleTree(bytes([9]) * 32 for _ in range(8))
    if case == "proof_from_zero":
        assert _add(w, _note(log, tree, 4), 0, [bytes(32)])[0] == 422
        return
    if case == "empty_root":
        bad = sign_note(Checkpoint(ORIGIN, 0, bytes(32)).body(), log)
        assert _add(w, bad, 0, [])[0] == 422
        assert _add(w, sign_note(Checkpoint(ORIGIN, 0, EMPTY_ROOT).body(), log), 0, [])[0] == 200
        return
    assert _add(w, _note(log, tree, 4), 0, [])[0] == 200
    if case == "bad_proof":
        proof = tree.consistency_proof(4, 8)
        proof[0] = bytes(32)
        assert _add(w, _note(log, tree, 8), 4, proof)[0] == 422
    else:
        assert _add(w, _note(log, other, 4), 4, [])[0] == 422
    assert w.latest(ORIGIN)[0].size == 4  # nothing changed


def test_unknown_origin_404_and_bad_signatures_403(setup):
    log, _, w = setup
    tree = _tree(3)
    assert _add(w, _note(log, tree, 3, origin="elsewhere.example/s1"), 0, [])[0] == 404
    assert _add(w, _note(Signer.generate("log.example/vault-1"), tree, 3), 0, [])[0] == 403  # same name, other key
    forged = bytearray(_note(log, tree, 3))
    forged[-10] ^= 1
    assert _add(w, bytes(forged), 0, [])[0] in (400, 403)  # a mangled base64 signature: malformed or bad
    sig = _note(log, tree, 3)
    text, _, line = sig.partition(b"\n\n")
    raw = bytearray(base64.b64decode(line.split(b" ")[-1]))
    raw[10] ^= 1
    bad = text + b"\n\n" + line.rsplit(b" ", 1)[0] + b" " + base64.b64encode(bytes(raw)) + b"\n"
    assert _add(w, bad, 0, [])[0] == 403
    assert w.latest(ORIGIN) is None
    assert w.add_checkpoint(b"nonsense").status == 400


def test_over_http_state_survives_a_restart(setup, tmp_path):
    log, wkey, _ = setup
    tree = _tree(10)
    state = tmp_path / "http-state"
    with witness_server(wkey, state, [log.verifier()]) as url:
        client = WitnessClient(url, wkey.cosigner_verifier())
        a = client.add_checkpoint(_note(log, tree, 7), 0, [])
        assert a.status == 200
        sigs = client.cosignatures(a.body, Checkpoint(ORIGIN, 7, tree.root(7)).body())
        assert sigs[0].name == "witness.example/w1"
        assert client.add_checkpoint(_note(log, tree, 10), 0, []).status == 409
    with witness_server(wkey, state, [log.verifier()]) as url:
        client = WitnessClient(url, wkey.cosigner_verifier())
        latest = client.latest(ORIGIN)
        cp = Checkpoint.parse(open_note(latest, [wkey.cosigner_verifier()]).text)
        assert cp.size == 7
        assert client.latest("log.example/vault-1/none") is None
        assert client.add_checkpoint(_note(log, tree, 10), 7, tree.consistency_proof(7, 10)).status == 200


def test_concurrent_submissions_from_the_same_old_size_cannot_roll_back(setup):
    """tlog-witness: check-and-update is atomic, so of two submissions from the same old size one
    wins and the other gets 409 (never: both cosigned and the smaller stored last)."""
    import threading

    log, _, w = setup
    tree = _tree(40)
    _add(w, _note(log, tree, 10), 0, [])
    answers: dict[int, int] = {}
    barrier = threading.Barrier(8)

    def submit(size: int) -> None:
        barrier.wait()
        answers[size] = _add(w, _note(log, tree, size), 10, tree.consistency_proof(10, size))[0]

    threads = [threading.Thread(target=submit, args=(s,)) for s in range(12, 40, 4)]
    threads.append(threading.Thread(target=submit, args=(11,)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [s for s, status in answers.items() if status == 200]
    assert len(winners) == 1 and sorted(set(answers.values())) == [200, 409]
    assert w.latest(ORIGIN)[0].size == winners[0]
