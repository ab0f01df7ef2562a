"""The tamper-evident audit log: canonical content, a hash chain and Merkle checkpoints.

Every stored audit is a *log entry* with a sequence number ``seq`` (1, 2, ...):

* ``leaf_hash = SHA-256(0x00 || canonical(content))``: the RFC 9162 (Certificate
  Transparency 2.0) leaf hash of the record's canonical JSON (sorted keys, no spaces, UTF-8);
* ``entry_hash = SHA-256(0x02 || prev_entry_hash || leaf_hash || seq)``: the chain, with
  ``prev_entry_hash`` = 32 zero bytes for ``seq = 1``;
* every ``checkpoint_every`` entries a *checkpoint* stores the RFC 9162 Merkle tree hash
  (``MTH``, interior nodes ``SHA-256(0x01 || left || right)``) of all leaf hashes so far,
  with the tree size and the head ``entry_hash``. A checkpoint can be published or signed
  elsewhere; it commits to every earlier record.

:func:`verify_log` walks the entries in ``seq`` order and reports the *first* problem:
an altered record (its leaf hash no longer matches its content), a deleted one (a gap in
``seq`` or a broken ``prev`` link), a reordered one (a broken link), a checkpoint that no
longer matches the leaves, or a tail cut below the last checkpoint. Deleting the newest
records *after* the last checkpoint cannot be detected from the database alone; publish
:func:`~mnemoscope.server.storage.AuditStore.head` outside it to close that gap.

Retention removes a record's *content* but keeps its hashes (``pruned``), so the chain and
the checkpoints still verify after old payloads are dropped.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "GENESIS",
    "Checkpoint",
    "LogEntry",
    "VerifyReport",
    "canonical",
    "entry_hash",
    "leaf_hash",
    "merkle_root",
    "verify_log",
]

GENESIS = bytes(32)


def canonical(content: Any) -> bytes:
    """Canonical JSON bytes (sorted keys, compact, UTF-8; floats as Python's shortest repr).

    Example:
        >>> canonical({"b": 1, "a": [1.5, "é"]})
        b'{"a":[1.5,"\\xc3\\xa9"],"b":1}'
    """
    return json.dumps(
        content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def leaf_hash(content: Any) -> bytes:
    return hashlib.sha256(b"\x00" + canonical(content)).digest()


def entry_hash(prev: bytes, leaf: bytes, seq: int) -> bytes:
    return hashlib.sha256(b"\x02" + prev + leaf + seq.to_bytes(8, "big")).digest()


def merkle_root(leaves: Sequence[bytes]) -> bytes:
    """RFC 9162 section 2.1.1 Merkle tree hash of a list of leaf hashes.

    Example:
        >>> merkle_root([]).hex()[:16]
        'e3b0c44298fc1c14'
        >>> a, b = leaf_hash(1), leaf_hash(2)
        >>> merkle_root([a, b]) == hashlib.sha256(b"\\x01" + a + b).digest()
        True
    """
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return leaves[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return hashlib.sha256(b"\x01" + merkle_root(leaves[:k]) + merkle_root(leaves[k:])).digest()


@dataclass(frozen=True)
class LogEntry:
    """One row of the log as stored (``content`` is ``None`` once pruned by retention)."""

    seq: int
    id: str
    content: dict[str, Any] | None
    leaf_hash: bytes
    prev_hash: bytes
    entry_hash: bytes


@dataclass(frozen=True)
class Checkpoint:
    tree_size: int
    root: bytes
    head: bytes
    created_at: float


@dataclass(frozen=True)
class VerifyReport:
    """Outcome of :func:`verify_log`; ``ok`` or the first problem with its ``seq`` and ``id``."""

    ok: bool
    n_entries: int
    n_checkpoints: int
    n_pruned: int
    problem: str | None = None
    seq: int | None = None
    record_id: str | None = None
    head: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "n_entries": self.n_entries,
            "n_checkpoints": self.n_checkpoints,
            "n_pruned": self.n_pruned,
            "problem": self.problem,
            "seq": self.seq,
            "id": self.record_id,
            "head": self.head,
        }


def verify_log(entries: Iterable[LogEntry], checkpoints: Sequence[Checkpoint]) -> VerifyReport:
    """Check the chain and the checkpoints; stop at the first problem (module doc)."""
    cps = sorted(checkpoints, key=lambda c: c.tree_size)
    cp_at = {c.tree_size: c for c in cps}
    leaves: list[bytes] = []
    prev = GENESIS
    expect = 1
    n_pruned = 0

    def fail(problem: str, seq: int | None, rid: str | None) -> VerifyReport:
        return VerifyReport(False, len(leaves), len(cps), n_pruned, problem, seq, rid, prev.hex())

    for e in entries:
        if e.seq != expect:
            if e.seq > expect:
                return fail(
                    f"record(s) {expect}..{e.seq - 1} are missing (deleted): the log jumps from "
                    f"seq {expect - 1} to {e.seq}",
                    expect,
                    e.id,
                )
            return fail(f"seq {e.seq} appears out of order (expected {expect})", e.seq, e.id)
        if e.content is None:
            n_pruned += 1
        elif leaf_hash(e.content) != e.leaf_hash:
            return fail(
                f"record seq {e.seq} (id {e.id}) was altered: its content no longer matches its hash",
                e.seq,
                e.id,
            )
        if e.prev_hash != prev:
            return fail(
                f"record seq {e.seq} (id {e.id}) does not link to seq {e.seq - 1}: a record was deleted, "
                "inserted or reordered before it",
                e.seq,
                e.id,
            )
        if entry_hash(prev, e.leaf_hash, e.seq) != e.entry_hash:
            return fail(f"record seq {e.seq} (id {e.id}) has a forged entry hash", e.seq, e.id)
        leaves.append(e.leaf_hash)
        prev = e.entry_hash
        cp = cp_at.get(e.seq)
        if cp is not None:
            if merkle_root(leaves) != cp.root:
                return fail(
                    f"checkpoint at tree size {cp.tree_size} does not match the records' Merkle root",
                    e.seq,
                    e.id,
                )
            if cp.head != e.entry_hash:
                return fail(
                    f"checkpoint at tree size {cp.tree_size} does not match the chain head", e.seq, e.id
                )
        expect += 1
    if cps and cps[-1].tree_size > len(leaves):
        return fail(
            f"the log ends at seq {len(leaves)} but a checkpoint covers {cps[-1].tree_size} records: "
            "the newest records were deleted",
            len(leaves) + 1,
            None,
        )
    return VerifyReport(True, len(leaves), len(cps), n_pruned, None, None, None, prev.hex())
