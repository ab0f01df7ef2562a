"""The tamper-evident audit log: canonical content, a hash chain and signed Merkle checkpoints.

Every stored audit is a *log entry* with a sequence number ``seq`` (1, 2, ...):

* ``leaf_hash = SHA-256(0x00 || canonical(content))``: the RFC 9162 (Certificate
  Transparency 2.0) leaf hash of the record's canonical JSON (sorted keys, no spaces, UTF-8);
  leaf ``seq`` is leaf index ``seq - 1`` of the log's Merkle tree;
* ``entry_hash = SHA-256(0x02 || prev_entry_hash || leaf_hash || seq)``: the chain, with
  ``prev_entry_hash`` = 32 zero bytes for ``seq = 1``;
* every ``checkpoint_every`` entries (and on demand) a *checkpoint* stores the RFC 9162
  tree hash of the first ``tree_size`` leaves, the head ``entry_hash``, the compact range
  (:mod:`mnemoscope.server.merkle`) and, when the log has a key, a signed C2SP note
  (:mod:`mnemoscope.server.signing`) that a third party can check with the public key alone.

:func:`verify_log` streams the entries once in ``seq`` order with O(log n) memory (a compact
range, never the list of leaves) and reports the *first* problem: an altered record (its
leaf hash no longer matches its content), a deleted one (a gap in ``seq`` or a broken
``prev`` link), a reordered one (a broken link), a checkpoint that no longer matches the
leaves or whose signature does not verify, or a tail cut below the last checkpoint. It can
resume from a trusted checkpoint (``start``), checking only what came after it. Deleting the
newest records *after* the last checkpoint cannot be detected from the database alone;
publish the signed checkpoints (``/v1/log/head``) outside it to close that gap.

Retention removes a record's *content* but keeps its hashes (``pruned``), so the chain and
the checkpoints still verify after old payloads are dropped.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from mnemoscope.server.merkle import CompactRange, mth
from mnemoscope.server.signing import NoteError, Verifier, open_checkpoint

__all__ = [
    "GENESIS",
    "Checkpoint",
    "LogEntry",
    "VerifyReport",
    "VerifyStart",
    "canonical",
    "entry_hash",
    "leaf_hash",
    "merkle_root",
    "new_audit_id",
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


def new_audit_id(*, ms: int | None = None, rand: bytes | None = None) -> str:
    """A new audit id: a UUIDv7 (RFC 9562) as 32 lowercase hex digits, the shape uuid4 hex had.

    The first 48 bits are the Unix time in milliseconds and the other 74 free bits are random,
    so ids stay unique without coordination between replicas but *sort by creation time*. That
    is what keeps the log's append cost flat: the unique index on ``audits.id`` is written at
    its right edge (a few hot pages) instead of at a random page, so a commit dirties, logs to
    the WAL and later checkpoints the same handful of index pages at 1k audits or at 1M. With
    uuid4 ids each of a batch's audits dirtied its own index page once the index outgrew a few
    pages (measured in docs/server.md, "Append cost at 1M").

    ``ms`` and ``rand`` (10 bytes) replace the clock and the random bits, for reproducible ids
    (benchmarks, tests).

    Example:
        >>> a, b = new_audit_id(), new_audit_id()
        >>> len(a), a[12], a != b
        (32, '7', True)
        >>> new_audit_id(ms=1, rand=bytes(10))
        '00000000000170008000000000000000'
    """
    if ms is None:
        ms = time.time_ns() // 1_000_000
    bits = int.from_bytes(os.urandom(10) if rand is None else rand, "big")  # 80 bits, 74 used
    value = (ms & (1 << 48) - 1) << 80 | 0x7 << 76 | (bits >> 68 & 0xFFF) << 64 | 0b10 << 62
    value |= bits & (1 << 62) - 1
    return uuid.UUID(int=value).hex


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
    return mth(leaves)


@dataclass(frozen=True)
class LogEntry:
    """One row of the log as stored (``content`` is ``None`` once pruned by retention).

    ``raw`` is the stored canonical text when the store has it: hashing it directly is what a
    streaming verify does (the same bytes ``canonical(content)`` gives for an untouched row).
    """

    seq: int
    id: str
    content: dict[str, Any] | None
    leaf_hash: bytes
    prev_hash: bytes
    entry_hash: bytes
    raw: bytes | None = None


@dataclass(frozen=True)
class Checkpoint:
    """A stored checkpoint; ``note`` is the signed C2SP note (``None`` in logs from before signing)."""

    tree_size: int
    root: bytes
    head: bytes
    created_at: float
    note: str | None = None
    compact: bytes | None = None


@dataclass(frozen=True)
class VerifyStart:
    """Where a resumed verify starts: after ``tree_size`` entries, with that checkpoint's state."""

    tree_size: int
    head: bytes
    range: CompactRange


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
    n_signed: int = 0
    since: int = 0
    last_checkpoint: int | None = None
    signed_by: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "n_entries": self.n_entries,
            "n_checkpoints": self.n_checkpoints,
            "n_signed_checkpoints": self.n_signed,
            "n_pruned": self.n_pruned,
            "since": self.since,
            "last_checkpoint": self.last_checkpoint,
            "signed_by": list(self.signed_by),
            "problem": self.problem,
            "seq": self.seq,
            "id": self.record_id,
            "head": self.head,
        }


def _check_note(cp: Checkpoint, trusted: Sequence[Verifier] | None, origin: str | None) -> str | None:
    """The signer's name; raises NoteError when the note is malformed, forged or says something else."""
    assert cp.note is not None
    opened = open_checkpoint(cp.note, trusted)
    if opened.tree_size != cp.tree_size or opened.root != cp.root:
        raise NoteError(f"its signed note is for tree size {opened.tree_size} with another root")
    if opened.head is not None and opened.head != cp.head:
        raise NoteError("its signed note names another chain head")
    if origin is not None and opened.origin != origin:
        raise NoteError(f"its signed note is for log {opened.origin!r}, not {origin!r}")
    return opened.key_name


def verify_log(
    entries: Iterable[LogEntry],
    checkpoints: Iterable[Checkpoint],
    *,
    trusted: Sequence[Verifier] | None = None,
    origin: str | None = None,
    start: VerifyStart | None = None,
    require_signed: bool = False,
) -> VerifyReport:
    """Check the chain and the checkpoints in one pass; stop at the first problem (module doc).

    ``entries`` must come in ``seq`` order (the store streams them) and ``checkpoints`` in
    ``tree_size`` order (a list is sorted here). ``trusted`` keys check every signed note
    (``None``: notes are parsed and matched to the row but their signatures are not checked).
    ``start`` resumes after a checkpoint the caller already trusts.
    """
    if isinstance(checkpoints, Sequence):
        checkpoints = sorted(checkpoints, key=lambda c: c.tree_size)
    cps: Iterator[Checkpoint] = iter(checkpoints)
    since = 0 if start is None else start.tree_size
    cr = CompactRange() if start is None else start.range.copy()
    prev = GENESIS if start is None else start.head
    expect = since + 1
    n = n_pruned = n_cps = n_signed = 0
    last_cp: int | None = since or None
    signers: set[str] = set()
    pending = next(cps, None)
    while pending is not None and pending.tree_size <= since:
        pending = next(cps, None)

    def fail(problem: str, seq: int | None, rid: str | None) -> VerifyReport:
        return VerifyReport(
            False,
            n,
            n_cps,
            n_pruned,
            problem,
            seq,
            rid,
            prev.hex(),
            n_signed,
            since,
            last_cp,
            tuple(sorted(signers)),
        )

    sha256 = hashlib.sha256  # the loop below runs once per entry: local names, no helper calls
    push = cr.push
    for e in entries:
        seq = e.seq
        if seq <= since:
            continue
        if seq != expect:
            if seq > expect:
                return fail(
                    f"record(s) {expect}..{seq - 1} are missing (deleted): the log jumps from "
                    f"seq {expect - 1} to {seq}",
                    expect,
                    e.id,
                )
            return fail(f"seq {seq} appears out of order (expected {expect})", seq, e.id)
        lh = e.leaf_hash
        data = e.raw
        if data is None and e.content is not None:
            data = canonical(e.content)
        if data is None:
            n_pruned += 1
        elif sha256(b"\x00" + data).digest() != lh:
            return fail(
                f"record seq {seq} (id {e.id}) was altered: its content no longer matches its hash",
                seq,
                e.id,
            )
        if e.prev_hash != prev:
            return fail(
                f"record seq {seq} (id {e.id}) does not link to seq {seq - 1}: a record was deleted, "
                "inserted or reordered before it",
                seq,
                e.id,
            )
        if sha256(b"\x02" + prev + lh + seq.to_bytes(8, "big")).digest() != e.entry_hash:
            return fail(f"record seq {seq} (id {e.id}) has a forged entry hash", seq, e.id)
        push(lh)
        n += 1
        prev = e.entry_hash
        if pending is not None and pending.tree_size <= seq:
            if pending.tree_size < seq:  # sizes repeat or go backwards
                return fail(
                    f"checkpoint at tree size {pending.tree_size} is out of order", pending.tree_size, None
                )
            cp = pending
            n_cps += 1
            if cr.root() != cp.root:
                return fail(
                    f"checkpoint at tree size {cp.tree_size} does not match the records' Merkle root",
                    e.seq,
                    e.id,
                )
            if cp.head != e.entry_hash:
                return fail(
                    f"checkpoint at tree size {cp.tree_size} does not match the chain head", e.seq, e.id
                )
            if cp.note is not None:
                try:
                    who = _check_note(cp, trusted, origin)
                except NoteError as err:
                    return fail(f"checkpoint at tree size {cp.tree_size}: {err}", e.seq, e.id)
                n_signed += 1
                if who:
                    signers.add(who)
            elif require_signed:
                return fail(f"checkpoint at tree size {cp.tree_size} is not signed", e.seq, e.id)
            last_cp = cp.tree_size
            pending = next(cps, None)
        expect += 1
    if pending is not None:
        return fail(
            f"the log ends at seq {expect - 1} but a checkpoint covers {pending.tree_size} records: "
            "the newest records were deleted",
            expect,
            None,
        )
    return VerifyReport(
        True,
        n,
        n_cps,
        n_pruned,
        None,
        None,
        None,
        prev.hex(),
        n_signed,
        since,
        last_cp,
        tuple(sorted(signers)),
    )
