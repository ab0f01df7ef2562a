"""Checking a proof document offline: what ``mnemoscope log check-proof`` and a third party run.

A document is what ``GET /v1/audits/{id}/proof`` (or ``mnemoscope log prove``) returns: the
signed checkpoint note, the leaf index and tree size, the base64 inclusion path and the
record. Or what ``GET /v1/log/consistency`` returns: two sizes, two roots, the path and the
signed notes. Nothing here touches a database: the public key and the document are enough.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Sequence
from typing import Any

from mnemoscope.errors import MnemoscopeError
from mnemoscope.server.ledger import canonical
from mnemoscope.server.merkle import ProofError, verify_consistency, verify_inclusion
from mnemoscope.server.signing import NoteError, OpenedCheckpoint, Verifier, open_checkpoint

__all__ = ["ProofCheckError", "check_proof_document"]


class ProofCheckError(MnemoscopeError):
    """The proof does not hold (or the document is malformed)."""


def _hashes(doc: dict[str, Any], field: str) -> list[bytes]:
    v = doc.get(field)
    if not isinstance(v, list):
        raise ProofCheckError(f"field {field!r} must be a list of base64 hashes")
    return [_hash(doc, field, x) for x in v]


def _hash(doc: dict[str, Any], field: str, v: Any) -> bytes:
    try:
        h = base64.b64decode(str(v), validate=True)
    except (binascii.Error, ValueError) as e:
        raise ProofCheckError(f"field {field!r}: {v!r} is not base64") from e
    if len(h) != 32:
        raise ProofCheckError(f"field {field!r}: a hash is 32 bytes")
    return h


def _int(doc: dict[str, Any], field: str) -> int:
    v = doc.get(field)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ProofCheckError(f"field {field!r} must be a non-negative integer")
    return v


def _open(note: Any, keys: Sequence[Verifier], field: str) -> OpenedCheckpoint:
    if not isinstance(note, str):
        raise ProofCheckError(f"field {field!r}: no signed checkpoint (the log has no signing key)")
    try:
        return open_checkpoint(note, keys)
    except NoteError as e:
        raise ProofCheckError(f"{field}: {e}") from e


def check_proof_document(doc: dict[str, Any], keys: Sequence[Verifier]) -> dict[str, Any]:
    """Check an inclusion or consistency proof document; return what it proves.

    Raises:
        ProofCheckError: a signature, a hash or the proof does not hold.
    """
    if not isinstance(doc, dict):
        raise ProofCheckError("a proof document is a JSON object")
    if "inclusion_path" in doc:
        return _check_inclusion(doc, keys)
    if "consistency_path" in doc:
        return _check_consistency(doc, keys)
    raise ProofCheckError("not a proof: no 'inclusion_path' or 'consistency_path'")


def _check_inclusion(doc: dict[str, Any], keys: Sequence[Verifier]) -> dict[str, Any]:
    cp = _open(doc.get("checkpoint"), keys, "checkpoint")
    size, index = _int(doc, "tree_size"), _int(doc, "leaf_index")
    if size != cp.tree_size:
        raise ProofCheckError(f"the proof is for tree size {size} but the checkpoint is for {cp.tree_size}")
    leaf = _hash(doc, "leaf_hash", doc.get("leaf_hash"))
    record = doc.get("record")
    if record is not None and hashlib.sha256(b"\x00" + canonical(record)).digest() != leaf:
        raise ProofCheckError("the record does not match its leaf hash: it was changed")
    try:
        verify_inclusion(leaf, index, size, _hashes(doc, "inclusion_path"), cp.root)
    except ProofError as e:
        raise ProofCheckError(str(e)) from e
    rid = doc.get("id") or (record or {}).get("id")
    what = "its record" if record is not None else "its leaf hash (record pruned or not included)"
    return {
        "kind": "inclusion",
        "id": rid,
        "leaf_index": index,
        "tree_size": size,
        "log": cp.origin,
        "signed_by": cp.key_name,
        "record_checked": record is not None,
        "summary": f"audit {rid} is leaf {index} of {cp.origin} at tree size {size} (checkpoint signed by "
        f"{cp.key_name}); checked {what}",
    }


def _check_consistency(doc: dict[str, Any], keys: Sequence[Verifier]) -> dict[str, Any]:
    first, second = _int(doc, "first"), _int(doc, "second")
    r1 = _hash(doc, "first_root", doc.get("first_root"))
    r2 = _hash(doc, "second_root", doc.get("second_root"))
    signed = []
    for field, size, root in (("first_checkpoint", first, r1), ("second_checkpoint", second, r2)):
        if doc.get(field) is None:
            continue
        cp = _open(doc[field], keys, field)
        if cp.tree_size != size or cp.root != root:
            raise ProofCheckError(f"{field} is for another tree size or root than the proof")
        signed.append(size)
    if not signed:
        raise ProofCheckError("neither tree size comes with a signed checkpoint: nothing anchors the roots")
    try:
        verify_consistency(first, second, r1, r2, _hashes(doc, "consistency_path"))
    except ProofError as e:
        raise ProofCheckError(str(e)) from e
    return {
        "kind": "consistency",
        "first": first,
        "second": second,
        "signed_sizes": signed,
        "summary": f"the log at size {first} is a prefix of the log at size {second} "
        f"(signed checkpoint(s) at {', '.join(map(str, signed))})",
    }
