"""RFC 9162 Merkle trees for the audit log: hashing, a compact range, proofs and their checks.

A log of ``n`` leaves is summarised by its *compact range*: the roots of the perfect
subtrees that the binary form of ``n`` cuts it into (left to right, at most ``log2(n) + 1``
hashes). Appending a leaf touches only that list, so appending costs O(log n) whatever the
size, and the tree hash (RFC 9162 section 2.1.1 ``MTH``) folds from it in O(log n).

Every perfect subtree closed by an append (a *node*: ``level``, ``index``; leaves are
level 0) is returned by :meth:`CompactRange.append`, so a store can keep them and answer
inclusion (section 2.1.3) and consistency (section 2.1.4) proofs with O(log n) lookups:
:func:`inclusion_ranges` and :func:`consistency_ranges` name the subtrees a proof needs,
:func:`perfect_pieces` splits any subtree into stored nodes, and :func:`subtree_hash`
rebuilds it from them.

Example:
    >>> leaves = [leaf_hash_bytes(bytes([i])) for i in range(5)]
    >>> cr = CompactRange()
    >>> for lh in leaves:
    ...     _ = cr.append(lh)
    >>> cr.root() == mth(leaves)
    True
    >>> nodes = {(0, i): lh for i, lh in enumerate(leaves)}
    >>> nodes.update({(1, 0): node_hash(leaves[0], leaves[1]), (1, 1): node_hash(leaves[2], leaves[3])})
    >>> nodes[(2, 0)] = node_hash(nodes[(1, 0)], nodes[(1, 1)])
    >>> proof = inclusion_proof(2, 5, lambda want: {k: nodes[k] for k in want})
    >>> verify_inclusion(leaves[2], 2, 5, proof, cr.root())  # raises ProofError if it does not hold
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "EMPTY_ROOT",
    "CompactRange",
    "ProofError",
    "consistency_proof",
    "consistency_ranges",
    "inclusion_proof",
    "inclusion_ranges",
    "leaf_hash_bytes",
    "mth",
    "node_hash",
    "perfect_pieces",
    "root_from_range",
    "subtree_hash",
    "verify_consistency",
    "verify_inclusion",
]

EMPTY_ROOT = hashlib.sha256(b"").digest()
_sha256 = hashlib.sha256

Node = tuple[
    int, int
]  # (level, index): the perfect subtree over leaves [index << level, (index + 1) << level)


class ProofError(ValueError):
    """A proof does not verify, or cannot be built for these sizes."""


def leaf_hash_bytes(data: bytes) -> bytes:
    """RFC 9162 leaf hash ``SHA-256(0x00 || data)``."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 9162 interior node hash ``SHA-256(0x01 || left || right)``."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


def mth(leaves: Sequence[bytes]) -> bytes:
    """RFC 9162 section 2.1.1 tree hash of leaf hashes (recursive; for small trees and tests)."""
    n = len(leaves)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return leaves[0]
    k = _split(n)
    return node_hash(mth(leaves[:k]), mth(leaves[k:]))


def root_from_range(hashes: Sequence[bytes]) -> bytes:
    """Fold a compact range (perfect subtree roots, left to right) into the tree hash."""
    if not hashes:
        return EMPTY_ROOT
    acc = hashes[-1]
    for h in reversed(hashes[:-1]):
        acc = node_hash(h, acc)
    return acc


def range_levels(size: int) -> list[int]:
    """Levels of the compact range of a tree of ``size`` leaves, left to right."""
    return [b for b in range(size.bit_length() - 1, -1, -1) if size >> b & 1]


@dataclass
class CompactRange:
    """The right edge of a tree: ``size`` leaves summarised by ``len(hashes) == popcount(size)`` hashes."""

    size: int = 0
    hashes: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(self.hashes) != bin(self.size).count("1"):
            raise ValueError(
                f"a compact range of size {self.size} has {bin(self.size).count('1')} hashes, got {len(self.hashes)}"
            )

    @classmethod
    def from_bytes(cls, size: int, blob: bytes) -> CompactRange:
        if len(blob) % 32:
            raise ValueError("a compact range is a whole number of 32-byte hashes")
        return cls(size, [bytes(blob[i : i + 32]) for i in range(0, len(blob), 32)])

    def to_bytes(self) -> bytes:
        return b"".join(self.hashes)

    def append(self, leaf: bytes) -> list[tuple[int, int, bytes]]:
        """Add one leaf hash; return the perfect nodes it closed as ``(level, index, hash)`` (level >= 1)."""
        closed: list[tuple[int, int, bytes]] = []
        h = leaf
        idx = self.size
        level = 0
        while idx & 1:  # the range's last subtree has the same level: merge
            h = node_hash(self.hashes.pop(), h)
            level += 1
            idx >>= 1
            closed.append((level, idx, h))
        self.hashes.append(h)
        self.size += 1
        return closed

    def push(self, leaf: bytes) -> None:
        """:meth:`append` without reporting the closed nodes (a verifier's fast path)."""
        hashes, idx, h = self.hashes, self.size, leaf
        while idx & 1:
            h = _sha256(b"\x01" + hashes.pop() + h).digest()
            idx >>= 1
        hashes.append(h)
        self.size += 1

    def root(self) -> bytes:
        return root_from_range(self.hashes)

    def copy(self) -> CompactRange:
        return CompactRange(self.size, list(self.hashes))


# -- which subtrees a proof needs ------------------------------------------------------------------


def inclusion_ranges(m: int, n: int) -> list[tuple[int, int]]:
    """Leaf ranges ``[a, b)`` whose tree hashes form RFC 9162 ``PATH(m, D[n])``, bottom-up."""
    if not 0 <= m < n:
        raise ProofError(f"leaf index {m} is not in a tree of size {n}")
    out: list[tuple[int, int]] = []
    lo, hi = 0, n
    while hi - lo > 1:
        k = _split(hi - lo)
        if m - lo < k:
            out.append((lo + k, hi))
            hi = lo + k
        else:
            out.append((lo, lo + k))
            lo = lo + k
    return out[::-1]


def consistency_ranges(m: int, n: int) -> list[tuple[int, int]]:
    """Leaf ranges whose tree hashes form RFC 9162 ``PROOF(m, D[n])`` (section 2.1.4.1), in order."""
    if not 0 < m <= n:
        raise ProofError(f"no consistency proof from size {m} to size {n}")
    out: list[tuple[int, int]] = []
    lo, hi, complete = 0, n, True
    while True:
        size = hi - lo
        if m - lo == size:
            if not complete:
                out.append((lo, hi))
            break
        k = _split(size)
        if m - lo <= k:
            out.append((lo + k, hi))
            hi = lo + k
        else:
            out.append((lo, lo + k))
            lo, complete = lo + k, False
    return out[::-1]


def perfect_pieces(a: int, b: int) -> list[Node]:
    """The stored perfect nodes ``(level, index)`` whose hashes make ``MTH(D[a:b])``.

    ``[a, b)`` must be a subtree of an RFC 9162 tree: ``a`` aligned to the largest power of two
    not above ``b - a``. The pieces are the compact range of the subtree, left to right.
    """
    out: list[Node] = []
    lo = a
    for level in range_levels(b - a):
        if lo % (1 << level):
            raise ProofError(f"[{a}, {b}) is not a subtree of a Merkle tree")
        out.append((level, lo >> level))
        lo += 1 << level
    return out


def subtree_hash(a: int, b: int, nodes: Mapping[Node, bytes]) -> bytes:
    """``MTH(D[a:b])`` from its perfect pieces (see :func:`perfect_pieces`)."""
    return root_from_range([nodes[p] for p in perfect_pieces(a, b)])


def _prove(
    ranges: list[tuple[int, int]], fetch: Callable[[Iterable[Node]], Mapping[Node, bytes]]
) -> list[bytes]:
    need = {p for a, b in ranges for p in perfect_pieces(a, b)}
    nodes = fetch(sorted(need))
    missing = need - set(nodes)
    if missing:
        raise ProofError(f"{len(missing)} tree node(s) are missing from the store, e.g. {sorted(missing)[0]}")
    return [subtree_hash(a, b, nodes) for a, b in ranges]


def inclusion_proof(m: int, n: int, fetch: Callable[[Iterable[Node]], Mapping[Node, bytes]]) -> list[bytes]:
    """RFC 9162 inclusion proof of leaf ``m`` in the tree of size ``n``; ``fetch`` returns stored nodes."""
    return _prove(inclusion_ranges(m, n), fetch)


def consistency_proof(m: int, n: int, fetch: Callable[[Iterable[Node]], Mapping[Node, bytes]]) -> list[bytes]:
    """RFC 9162 consistency proof between tree sizes ``m <= n``."""
    if m == n:
        return []
    return _prove(consistency_ranges(m, n), fetch)


# -- checking proofs (what a third party runs) ------------------------------------------------------


def verify_inclusion(leaf: bytes, m: int, n: int, proof: Sequence[bytes], root: bytes) -> None:
    """RFC 9162 section 2.1.3.2; raises :class:`ProofError` unless ``proof`` puts ``leaf`` at ``m`` under ``root``."""
    if not 0 <= m < n:
        raise ProofError(f"leaf index {m} is not in a tree of size {n}")
    fn, sn, r = m, n - 1, leaf
    for p in proof:
        if sn == 0:
            raise ProofError("the inclusion proof is too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("the inclusion proof is too short")
    if r != root:
        raise ProofError("the inclusion proof does not lead to the checkpoint's root")


def verify_consistency(m: int, n: int, root1: bytes, root2: bytes, proof: Sequence[bytes]) -> None:
    """RFC 9162 section 2.1.4.2; raises :class:`ProofError` unless the tree of size ``m`` with
    ``root1`` is a prefix of the tree of size ``n`` with ``root2``."""
    if not 0 < m <= n:
        raise ProofError(f"no consistency proof from size {m} to size {n}")
    if m == n:
        if proof:
            raise ProofError("a proof between equal sizes must be empty")
        if root1 != root2:
            raise ProofError("equal sizes with different roots")
        return
    path = list(proof)
    if m & (m - 1) == 0:  # a power of two: the first tree is itself a node of the second
        path.insert(0, root1)
    if not path:
        raise ProofError("the consistency proof is empty")
    fn, sn = m - 1, n - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("the consistency proof is too long")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("the consistency proof is too short")
    if fr != root1:
        raise ProofError("the consistency proof does not lead to the older root")
    if sr != root2:
        raise ProofError("the consistency proof does not lead to the newer root")
