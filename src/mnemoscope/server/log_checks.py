"""Checking the audit log and proving what is in it: the streaming verify (resumable from a
checkpoint) and RFC 9162 inclusion and consistency proofs from the stored tree nodes."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from mnemoscope.server.ledger import Checkpoint, VerifyReport, VerifyStart, verify_log
from mnemoscope.server.log_schema import NID_LEVEL, LogBase, ProofUnavailable, StorageError
from mnemoscope.server.merkle import (
    CompactRange,
    ProofError,
    consistency_proof,
    inclusion_proof,
    perfect_pieces,
    root_from_range,
)
from mnemoscope.server.signing import NoteError, Verifier, open_checkpoint

__all__ = ["LogChecks"]


class LogChecks(LogBase):
    """Verify and proofs of :class:`~mnemoscope.server.storage.AuditStore`."""

    def checkpoint(self) -> Checkpoint | None:  # the store writes checkpoints
        raise NotImplementedError

    def verify(
        self,
        *,
        since: int | str | Path | None = None,
        trusted: Sequence[Verifier] | None = None,
        require_signed: bool = False,
    ) -> VerifyReport:
        """Stream the log once and check it (:func:`~mnemoscope.server.ledger.verify_log`).

        ``since``: a checkpoint tree size (or a saved checkpoint note file, text) to resume
        after; only later entries are read. ``trusted``: verifier keys for the signed
        checkpoints; ``None`` uses the keys recorded in the log (which tamper-evidence then
        rests on: pass the operator's published key to rule out a rewritten key table).
        """
        keys = list(trusted) if trusted is not None else [Verifier.parse(k["verifier"]) for k in self.keys()]
        start = None if since is None else self._start(since, keys)
        return verify_log(
            self.entries(after=0 if start is None else start.tree_size),
            self.iter_checkpoints(after=0 if start is None else start.tree_size),
            trusted=keys,
            origin=self.origin or None,
            start=start,
            require_signed=require_signed,
        )

    def _start(self, since: int | str | Path, keys: Sequence[Verifier]) -> VerifyStart:
        note_text: str | None = None
        if isinstance(since, Path) or (isinstance(since, str) and not since.strip().isdigit()):
            try:
                note_text = Path(since).read_text(encoding="utf-8")
            except OSError as e:
                raise StorageError(
                    f"--since {since}: not a tree size and not a readable checkpoint file ({e})"
                ) from e
            try:
                size = open_checkpoint(note_text, keys).tree_size
            except NoteError as e:
                raise StorageError(f"--since {since}: {e}") from e
        else:
            size = int(since)
        cp = self._read(lambda: self._latest_checkpoint_at(size))
        if cp is None:
            raise StorageError(f"no checkpoint at tree size {size} in {self.url}")
        if note_text is not None:
            opened = open_checkpoint(note_text, None)
            if opened.root != cp.root:
                raise StorageError(
                    f"the log's checkpoint at tree size {size} differs from the saved one: the log was rewritten"
                )
        if cp.compact is None:
            raise StorageError(
                f"the checkpoint at tree size {size} predates resumable verify (no compact range)"
            )
        cr = CompactRange.from_bytes(size, cp.compact)
        if cr.root() != cp.root:
            raise StorageError(f"the checkpoint at tree size {size} does not match its own compact range")
        if cp.note is not None and keys:
            try:
                open_checkpoint(cp.note, keys)
            except NoteError as e:
                raise StorageError(f"the checkpoint at tree size {size}: {e}") from e
        return VerifyStart(size, cp.head, cr)

    def _fetch_nodes(self, want: Iterable[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        """The stored hashes of these tree nodes in one query: leaves (level 0) are the audits'
        ``leaf_hash``, inner nodes the ``nodes`` table (node id ``level * 2**48 + index``; a
        leaf's id is its index, so one id space covers both)."""
        want = list(want)
        leaves = [i + 1 for lvl, i in want if lvl == 0]
        inner = [lvl * NID_LEVEL + i for lvl, i in want if lvl > 0]
        parts, params = [], []
        if leaves:
            parts.append(
                f"SELECT seq - 1, leaf_hash FROM audits WHERE seq IN ({', '.join('?' * len(leaves))})"
            )
            params += leaves
        if inner:
            parts.append(f"SELECT nid, hash FROM nodes WHERE nid IN ({', '.join('?' * len(inner))})")
            params += inner
        if not parts:
            return {}
        rows = self._exec(" UNION ALL ".join(parts), params).fetchall()
        return {(int(nid) // NID_LEVEL, int(nid) % NID_LEVEL): self._b(h) for nid, h in rows}

    def _covering_checkpoint(self, seq: int) -> Checkpoint:
        cp = self._read(lambda: self._latest_checkpoint(seq))
        if cp is None and not self.readonly:
            self.checkpoint()
            cp = self._read(lambda: self._latest_checkpoint(seq))
        if cp is None:
            raise ProofUnavailable(
                f"no checkpoint covers seq {seq} yet; the next one is written on the next append"
            )
        return cp

    def prove(self, audit_id: str) -> dict[str, Any]:
        """RFC 9162 inclusion proof of an audit against the latest (signed) checkpoint.

        A read-write store writes a checkpoint first when none covers the audit yet.

        Raises:
            ProofUnavailable: unknown id, or (read-only) no checkpoint covers it yet.
        """
        self._need_v2("an inclusion proof")
        cols = self._cp_select("c.")
        # the audit and the latest checkpoint if it covers it, in one round trip
        row = self._read(
            lambda: self._exec(
                f"SELECT a.seq, a.leaf_hash, a.content, {cols} FROM audits a LEFT JOIN "
                "(SELECT * FROM checkpoints ORDER BY tree_size DESC LIMIT 1) c ON c.tree_size >= a.seq "
                "WHERE a.id = ?",
                (audit_id,),
            ).fetchone()
        )
        if row is None:
            raise ProofUnavailable(f"no audit with id {audit_id!r}")
        seq, lh, content = int(row[0]), self._b(row[1]), row[2]
        cp = self._cp(row[3:]) if row[3] is not None else self._covering_checkpoint(seq)
        try:
            path = self._read(lambda: inclusion_proof(seq - 1, cp.tree_size, self._fetch_nodes))
        except ProofError as e:
            raise StorageError(f"cannot build the proof: {e}") from e
        return {
            "kind": "inclusion",
            "log": self.origin,
            "id": audit_id,
            "seq": seq,
            "leaf_index": seq - 1,
            "tree_size": cp.tree_size,
            "leaf_hash": _b64(lh),
            "root": _b64(cp.root),
            "inclusion_path": [_b64(h) for h in path],
            "checkpoint": cp.note,
            "record": None if content is None else json.loads(content),
        }

    def root_at(self, size: int) -> bytes:
        """The tree hash of the first ``size`` leaves (from stored nodes, O(log n))."""
        pieces = perfect_pieces(0, size)
        nodes = self._read(lambda: self._fetch_nodes(pieces))
        try:
            return root_from_range([nodes[p] for p in pieces])
        except KeyError as e:
            raise ProofUnavailable(f"the log has fewer than {size} entries") from e

    def consistency(self, first: int, second: int | None = None) -> dict[str, Any]:
        """RFC 9162 consistency proof that the tree of size ``first`` is a prefix of that of ``second``
        (default: the latest checkpoint). Signed notes are included where the sizes are checkpoints."""
        self._need_v2("a consistency proof")
        latest = self._read(lambda: self._latest_checkpoint())
        if second is None:
            if latest is None:
                raise ProofUnavailable("the log has no checkpoint yet")
            second = latest.tree_size
        size = int(
            self._read(lambda: self._exec("SELECT tree_size FROM log_state WHERE id = 1").fetchone()[0])
        )
        if not 0 < first <= second or second > size:
            raise ProofUnavailable(
                f"no consistency proof from size {first} to size {second} (the log has {size})"
            )
        proof = self._read(lambda: consistency_proof(first, second, self._fetch_nodes))
        notes = {}
        for s in (first, second):
            cp = self._read(lambda s=s: self._latest_checkpoint_at(s))
            notes[s] = None if cp is None else cp.note
        return {
            "kind": "consistency",
            "log": self.origin,
            "first": first,
            "second": second,
            "first_root": _b64(self.root_at(first)),
            "second_root": _b64(self.root_at(second)),
            "consistency_path": [_b64(h) for h in proof],
            "first_checkpoint": notes[first],
            "second_checkpoint": notes[second],
        }


def _b64(h: bytes) -> str:
    return base64.b64encode(h).decode()
