"""RFC 6962 / RFC 9162 Merkle tree over a session's entry hashes, with inclusion and consistency proofs.

Leaves are the entries' 32-byte `hash` values (raw bytes): leaf hash = SHA-256(0x00 || d), interior
node = SHA-256(0x01 || left || right), empty tree = SHA-256(""), the split point of n leaves is the
largest power of two below n (RFC 9162 §2.1.1). The tree's shape depends only on its size.

`MerkleTree` keeps every complete subtree hash, level by level, in flat byte arrays (64 bytes per
leaf in all): an append is O(1) amortised (O(log n) at worst), the root is a fold of the O(log n)
right-edge nodes, and any proof reads O(log n) stored nodes. Verification follows RFC 9162
§2.1.3.2 (inclusion) and §2.1.4.2 (consistency), written after transparency-dev/merkle's `proof`
package, whose test vectors the tests run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from journal.errors import BrokerError

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()


class ProofError(BrokerError, ValueError):
    """A proof that does not verify, or a request for a proof that cannot exist."""


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def root_of(leaf_hashes: Sequence[bytes]) -> bytes:
    """MTH by the recursive definition (RFC 9162 §2.1.1): the reference the incremental tree is tested against."""
    n = len(leaf_hashes)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return leaf_hashes[0]
    k = _split(n)
    return node_hash(root_of(leaf_hashes[:k]), root_of(leaf_hashes[k:]))


class MerkleTree:
    """An append-only tree that stores each complete subtree's hash (level 0 = leaf hashes)."""

    def __init__(self, leaves: Iterable[bytes] = ()) -> None:
        self._levels: list[bytearray] = [bytearray()]
        self.size = 0
        for d in leaves:
            self.append(d)

    def append(self, data: bytes) -> int:
        """Add a leaf (its data: the entry's 32-byte hash); return its 0-based index."""
        return self.append_hash(leaf_hash(data))

    def append_hash(self, h: bytes) -> int:
        index = self.size
        levels = self._levels
        levels[0] += h
        i, level = index, 0
        while i & 1:  # the new node completes a pair: store the parent, and so on up
            row = levels[level]
            h = node_hash(bytes(row[-2 * HASH_SIZE : -HASH_SIZE]), h)
            level += 1
            if level == len(levels):
                levels.append(bytearray())
            levels[level] += h
            i >>= 1
        self.size += 1
        return index

    def _node(self, level: int, index: int) -> bytes:
        row = self._levels[level]
        return bytes(row[index * HASH_SIZE : (index + 1) * HASH_SIZE])

    def leaf_hashes(self, size: int | None = None) -> bytes:
        """The first `size` leaf hashes, concatenated (32 bytes each)."""
        return bytes(self._levels[0][: HASH_SIZE * (self.size if size is None else size)])

    @classmethod
    def from_leaf_hashes(cls, data: bytes) -> MerkleTree:
        tree = cls()
        for i in range(0, len(data) - len(data) % HASH_SIZE, HASH_SIZE):
            tree.append_hash(data[i : i + HASH_SIZE])
        return tree

    def leaf_hash_at(self, index: int) -> bytes:
        if not 0 <= index < self.size:
            raise ProofError(f"leaf {index} is outside a tree of {self.size}")
        return self._node(0, index)

    def _range_hash(self, lo: int, hi: int) -> bytes:
        """MTH of leaves [lo, hi): a stored node when the range is a complete subtree, else split."""
        n = hi - lo
        if n == 0:
            return EMPTY_ROOT
        if n & (n - 1) == 0 and lo % n == 0:
            return self._node(n.bit_length() - 1, lo // n)
        k = _split(n)
        return node_hash(self._range_hash(lo, lo + k), self._range_hash(lo + k, hi))

    def root(self, size: int | None = None) -> bytes:
        """The root of the tree's first `size` leaves (default: all of them)."""
        size = self.size if size is None else size
        if not 0 <= size <= self.size:
            raise ProofError(f"no root for size {size}: the tree has {self.size} leaves")
        return self._range_hash(0, size)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """PATH(index, D[0:size]) of RFC 9162 §2.1.3.1."""
        size = self.size if size is None else size
        if not 0 <= index < size <= self.size:
            raise ProofError(f"no inclusion proof for leaf {index} in a tree of {size} (have {self.size})")
        proof: list[bytes] = []
        lo, hi = 0, size
        while hi - lo > 1:
            k = _split(hi - lo)
            if index < lo + k:
                proof.append(self._range_hash(lo + k, hi))
                hi = lo + k
            else:
                proof.append(self._range_hash(lo, lo + k))
                lo += k
        proof.reverse()
        return proof

    def consistency_proof(self, old: int, new: int | None = None) -> list[bytes]:
        """PROOF(old, D[0:new]) of RFC 9162 §2.1.4.1 (empty when old is 0 or old == new)."""
        new = self.size if new is None else new
        if not 0 <= old <= new <= self.size:
            raise ProofError(f"no consistency proof from {old} to {new} (the tree has {self.size})")
        if old == 0 or old == new:
            return []
        return self._subproof(old, 0, new, True)

    def _subproof(self, m: int, lo: int, hi: int, complete: bool) -> list[bytes]:
        n = hi - lo
        if m == n:
            return [] if complete else [self._range_hash(lo, hi)]
        k = _split(n)
        if m <= k:
            return self._subproof(m, lo, lo + k, complete) + [self._range_hash(lo + k, hi)]
        return self._subproof(m - k, lo + k, hi, False) + [self._range_hash(lo, lo + k)]


# -- verification (RFC 9162 §2.1.3.2 and §2.1.4.2) -------------------------------------------


def _inner_proof_size(index: int, size: int) -> int:
    return (index ^ (size - 1)).bit_length()


def _chain_inner(seed: bytes, proof: Sequence[bytes], index: int) -> bytes:
    for i, h in enumerate(proof):
        seed = node_hash(h, seed) if (index >> i) & 1 else node_hash(seed, h)
    return seed


def _chain_inner_right(seed: bytes, proof: Sequence[bytes], index: int) -> bytes:
    for i, h in enumerate(proof):
        if (index >> i) & 1:
            seed = node_hash(h, seed)
    return seed


def _chain_border_right(seed: bytes, proof: Sequence[bytes]) -> bytes:
    for h in proof:
        seed = node_hash(h, seed)
    return seed


def _check_hashes(proof: Sequence[bytes]) -> None:
    for h in proof:
        if len(h) != HASH_SIZE:
            raise ProofError(f"a proof element is {len(h)} bytes, not {HASH_SIZE}")


def root_from_inclusion_proof(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    """The root that `proof` leads to from leaf hash `leaf` at `index` in a tree of `size`."""
    if not 0 <= index < size:
        raise ProofError(f"index {index} is beyond a tree of size {size}")
    if len(leaf) != HASH_SIZE:
        raise ProofError(f"leaf hash is {len(leaf)} bytes, not {HASH_SIZE}")
    _check_hashes(proof)
    inner = _inner_proof_size(index, size)
    border = bin(index >> inner).count("1")
    if len(proof) != inner + border:
        raise ProofError(f"wrong proof size {len(proof)}, want {inner + border}")
    res = _chain_inner(leaf, proof[:inner], index)
    return _chain_border_right(res, proof[inner:])


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> None:
    """Raise ProofError unless leaf hash `leaf` is at `index` of the tree of `size` with `root`."""
    if root_from_inclusion_proof(index, size, leaf, proof) != root:
        raise ProofError("the inclusion proof leads to another root")


def verify_consistency(size1: int, size2: int, root1: bytes, root2: bytes, proof: Sequence[bytes]) -> None:
    """Raise ProofError unless the tree (size2, root2) extends the tree (size1, root1), size1 >= 1.
    (A witness treats `old 0` itself: nothing to prove.)"""
    if size2 < size1:
        raise ProofError(f"size2 ({size2}) < size1 ({size1})")
    _check_hashes(proof)
    if size1 == 0:  # as transparency-dev/merkle: the empty tree is consistent with every tree, so such a
        raise ProofError("a consistency proof from the empty tree is meaningless")  # "proof" proves nothing
    if size1 == size2:
        if proof:
            raise ProofError("a proof between equal sizes must be empty")
        if root1 != root2:
            raise ProofError("equal sizes with different roots")
        return
    if not proof:
        raise ProofError("empty consistency proof")
    inner = _inner_proof_size(size1 - 1, size2)
    shift = (size1 & -size1).bit_length() - 1  # trailing zeros of size1
    inner -= shift
    seed, start = (root1, 0) if size1 == 1 << shift else (proof[0], 1)
    if len(proof) != start + inner + bin((size1 - 1) >> shift >> inner).count("1"):
        raise ProofError(f"wrong proof size {len(proof)}")
    p = proof[start:]
    mask = (size1 - 1) >> shift
    hash1 = _chain_inner_right(seed, p[:inner], mask)
    hash1 = _chain_border_right(hash1, p[inner:])
    if hash1 != root1:
        raise ProofError("the consistency proof does not lead to root1")
    hash2 = _chain_inner(seed, p[:inner], mask)
    hash2 = _chain_border_right(hash2, p[inner:])
    if hash2 != root2:
        raise ProofError("the consistency proof does not lead to root2")
