"""The Merkle tree against the published RFC 6962 vectors of transparency-dev/merkle, and properties."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journal.checkpoint.merkle import (
    EMPTY_ROOT,
    MerkleTree,
    ProofError,
    leaf_hash,
    root_of,
    verify_consistency,
    verify_inclusion,
)

VECTORS = Path(__file__).resolve().parents[2] / "support" / "vectors" / "merkle"
# transparency-dev/merkle testonly/constants.go: LeafInputs() and RootHashes()
LEAVES = [bytes.fromhex(h) for h in (
    "", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f",
)]
ROOTS = [bytes.fromhex(h) for h in (
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
)]


def _b64(values: list[str] | None) -> list[bytes]:
    return [base64.b64decode(v) for v in values or []]


def _probes(kind: str) -> list[tuple[str, dict]]:
    return [(str(p.relative_to(VECTORS)), json.loads(p.read_text())) for p in sorted((VECTORS / kind).rglob("*.json"))]


def test_roots_of_every_size_match_rfc6962_vectors() -> None:
    tree = MerkleTree()
    assert tree.root() == EMPTY_ROOT == ROOTS[0]
    for n, d in enumerate(LEAVES, start=1):
        tree.append(d)
        assert tree.root() == ROOTS[n] == root_of([leaf_hash(x) for x in LEAVES[:n]])
    for n in range(9):
        assert tree.root(n) == ROOTS[n]


@pytest.mark.parametrize("name,probe", _probes("inclusion"), ids=lambda v: v if isinstance(v, str) else "")
def test_inclusion_probes(name: str, probe: dict) -> None:
    args = (probe["leafIdx"], probe["treeSize"], base64.b64decode(probe["leafHash"] or ""), _b64(probe["proof"]),
            base64.b64decode(probe["root"] or ""))
    if probe["wantErr"]:
        with pytest.raises(ProofError):
            verify_inclusion(*args)
    else:
        verify_inclusion(*args)


@pytest.mark.parametrize("name,probe", _probes("consistency"), ids=lambda v: v if isinstance(v, str) else "")
def test_consistency_probes(name: str, probe: dict) -> None:
    args = (probe["size1"], probe["size2"], base64.b64decode(probe["root1"] or ""),
            base64.b64decode(probe["root2"] or ""), _b64(probe["proof"]))
    if probe["wantErr"]:
        with pytest.raises(ProofError):
            verify_consistency(*args)
    else:
        verify_consistency(*args)


def test_generated_proofs_equal_the_published_happy_paths() -> None:
    """The vectors' happy paths are proofs over LeafInputs(): ours must be byte-identical."""
    tree = MerkleTree(LEAVES)
    for _, p in _probes("inclusion"):
        if p["desc"] == "happy path" and p["treeSize"] <= 8 and p["root"] == base64.b64encode(
            ROOTS[p["treeSize"]]
        ).decode():
            assert tree.inclusion_proof(p["leafIdx"], p["treeSize"]) == _b64(p["proof"])
    checked = 0
    for _, p in _probes("consistency"):
        if p["desc"] == "happy path" and p["size2"] <= 8:
            assert tree.consistency_proof(p["size1"], p["size2"]) == _b64(p["proof"])
            checked += 1
    assert checked == 5


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(min_size=32, max_size=32), min_size=1, max_size=70), st.data())
def test_every_generated_proof_verifies_and_any_mutation_fails(leaves: list[bytes], data: st.DataObject) -> None:
    tree = MerkleTree(leaves)
    n = tree.size
    assert tree.root() == root_of([leaf_hash(x) for x in leaves])
    size = data.draw(st.integers(1, n))
    index = data.draw(st.integers(0, size - 1))
    proof = tree.inclusion_proof(index, size)
    verify_inclusion(index, size, leaf_hash(leaves[index]), proof, tree.root(size))
    if proof:
        i = data.draw(st.integers(0, len(proof) - 1))
        bad = list(proof)
        bad[i] = bytes([bad[i][0] ^ 1]) + bad[i][1:]
        with pytest.raises(ProofError):
            verify_inclusion(index, size, leaf_hash(leaves[index]), bad, tree.root(size))
        with pytest.raises(ProofError):
            verify_inclusion(index, size, leaf_hash(leaves[index]), proof[:-1], tree.root(size))
    old = data.draw(st.integers(1, n))
    cproof = tree.consistency_proof(old, n)
    verify_consistency(old, n, tree.root(old), tree.root(), cproof)
    if cproof:
        bad = list(cproof)
        bad[-1] = bytes(32)
        with pytest.raises(ProofError):
            verify_consistency(old, n, tree.root(old), tree.root(), bad)
        with pytest.raises(ProofError):
            verify_consistency(old, n, tree.root(old), tree.root(), cproof + [bytes(32)])
    if 0 < old < n:
        with pytest.raises(ProofError):
            verify_consistency(old, n, tree.root(old), tree.root(old + 1) if old + 1 < n else bytes(32), cproof)


def test_proof_sizes_stay_logarithmic() -> None:
    tree = MerkleTree(i.to_bytes(32, "big") for i in range(1000))
    assert max(len(tree.inclusion_proof(i)) for i in range(0, 1000, 37)) <= 10
    assert max(len(tree.consistency_proof(m)) for m in range(1, 1000, 41)) <= 11


def test_out_of_range_requests_are_refused() -> None:
    tree = MerkleTree(LEAVES[:3])
    for call in (lambda: tree.inclusion_proof(3), lambda: tree.consistency_proof(2, 4), lambda: tree.root(4)):
        with pytest.raises(ProofError):
            call()
    with pytest.raises(ProofError):
        verify_consistency(3, 2, ROOTS[3], ROOTS[2], [])
