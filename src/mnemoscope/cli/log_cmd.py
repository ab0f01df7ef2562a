"""``mnemoscope log verify | prove | consistency | check-proof | keygen``: the tamper-evident audit log.

``verify`` and ``prove`` open the database read-only (safe while a server writes to it);
``check-proof`` needs only the proof file and the log's public key, so a third party can
check that an audit is in the log without access to the database.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    lg = sub.add_parser(
        "log",
        help="the tamper-evident audit log: verify, proofs, signing keys",
        description="Check the audit log, give and check RFC 9162 proofs, make a checkpoint signing key.",
    )
    lsub = lg.add_subparsers(dest="log_command", metavar="ACTION", required=True)

    v = lsub.add_parser(
        "verify",
        help="check the hash chain and the signed Merkle checkpoints in one pass; report the first problem",
        description="Stream the log once (O(log n) memory). Exit 0 when it verifies, 3 at the first problem "
        "(its seq and id are printed).",
    )
    v.add_argument("--db", required=True, metavar="URL_OR_PATH")
    v.add_argument(
        "--since",
        metavar="CHECKPOINT",
        help="resume after a checkpoint: its tree size, or a checkpoint file saved by --save-checkpoint "
        "(only later records are read)",
    )
    _key_arg(v, "trusted public key(s) for the signed checkpoints (default: the keys recorded in the log)")
    v.add_argument("--require-signed", action="store_true", help="fail on an unsigned checkpoint")
    v.add_argument(
        "--save-checkpoint",
        metavar="FILE",
        help="write the last verified signed checkpoint here (for --since)",
    )
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=_verify)

    p = lsub.add_parser(
        "prove",
        help="write the inclusion proof of one audit (with its signed checkpoint) as JSON",
        description="An RFC 9162 inclusion proof of audit ID against the latest signed checkpoint that "
        "covers it. Check it anywhere with 'mnemoscope log check-proof FILE --key KEY'.",
    )
    p.add_argument("id", metavar="ID")
    p.add_argument("--db", required=True, metavar="URL_OR_PATH")
    p.add_argument("--out", metavar="FILE", help="write here instead of stdout")
    p.set_defaults(func=_prove)

    c = lsub.add_parser(
        "consistency",
        help="write an RFC 9162 consistency proof between two tree sizes as JSON",
    )
    c.add_argument("first", type=int, metavar="FIRST")
    c.add_argument("second", type=int, nargs="?", metavar="SECOND", help="default: the latest checkpoint")
    c.add_argument("--db", required=True, metavar="URL_OR_PATH")
    c.add_argument("--out", metavar="FILE")
    c.set_defaults(func=_consistency)

    k = lsub.add_parser(
        "check-proof",
        help="check a proof file offline with the log's public key (no database needed)",
        description="Checks the checkpoint's Ed25519 signature, the audit's leaf hash against its record, "
        "and the RFC 9162 inclusion (or consistency) proof. Exit 0 if it holds, 3 if not.",
    )
    k.add_argument("file", metavar="FILE", help="a proof written by 'log prove' or GET /v1/audits/{id}/proof")
    _key_arg(k, "the log's public (verifier) key: the text or a file holding it")
    k.add_argument("--json", action="store_true")
    k.set_defaults(func=_check_proof)

    g = lsub.add_parser(
        "keygen",
        help="make an Ed25519 checkpoint signing key (C2SP signed-note format)",
        description="Writes the private signer key to FILE (mode 0600; give it to every replica with "
        "--log-key / MNEMOSCOPE_LOG_KEY) and the public verifier key to FILE.pub (publish it).",
    )
    g.add_argument("name", metavar="NAME", help="key and log name, e.g. audits.example.com/log")
    g.add_argument("--out", required=True, metavar="FILE")
    g.add_argument("--force", action="store_true", help="overwrite an existing key file")
    g.set_defaults(func=_keygen)


def _key_arg(p: argparse.ArgumentParser, help: str) -> None:
    p.add_argument("--key", action="append", metavar="KEY_OR_FILE", help=help)


def _verifiers(keys: list[str] | None) -> Any:
    from mnemoscope.errors import InputError
    from mnemoscope.server.signing import NoteError, Verifier

    if not keys:
        return None
    out = []
    for k in keys:
        text = Path(k).read_text(encoding="utf-8") if Path(k).is_file() else k
        try:
            out.append(Verifier.parse(text))
        except NoteError as e:
            raise InputError(f"--key {k}: {e}") from e
    return out


def _emit(data: dict[str, Any], out: str | None) -> None:
    text = json.dumps(data, indent=1) + "\n"
    if out:
        Path(out).write_text(text, encoding="utf-8")
        print(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)


def _verify(args: argparse.Namespace) -> int:
    from mnemoscope.server.storage import open_store

    store = open_store(args.db, readonly=True)
    try:
        rep = store.verify(since=args.since, trusted=_verifiers(args.key), require_signed=args.require_signed)
        saved = None
        if rep.ok and args.save_checkpoint and rep.last_checkpoint:
            cp = next(iter(store.iter_checkpoints(after=rep.last_checkpoint - 1)), None)
            if cp is not None and cp.note:
                Path(args.save_checkpoint).write_text(cp.note, encoding="utf-8")
                saved = args.save_checkpoint
    finally:
        store.close()
    if args.json:
        print(json.dumps({**rep.to_dict(), "saved_checkpoint": saved}, indent=1))
    elif rep.ok:
        since = f" after checkpoint {rep.since}" if rep.since else ""
        signed = f", {rep.n_signed} signed by {', '.join(rep.signed_by)}" if rep.signed_by else ""
        print(
            f"ok: {rep.n_entries} records{since} ({rep.n_pruned} pruned), {rep.n_checkpoints} checkpoints"
            f"{signed}; last checkpoint {rep.last_checkpoint}; head {rep.head}"
        )
        if saved:
            print(f"saved checkpoint {rep.last_checkpoint} to {saved}: next time --since {saved}")
    else:
        print(f"FAILED at seq {rep.seq} (id {rep.record_id}): {rep.problem}")
    return 0 if rep.ok else 3


def _prove(args: argparse.Namespace) -> int:
    from mnemoscope.server.storage import open_store

    store = open_store(args.db, readonly=True)
    try:
        proof = store.prove(args.id)
    finally:
        store.close()
    _emit(proof, args.out)
    return 0


def _consistency(args: argparse.Namespace) -> int:
    from mnemoscope.server.storage import open_store

    store = open_store(args.db, readonly=True)
    try:
        proof = store.consistency(args.first, args.second)
    finally:
        store.close()
    _emit(proof, args.out)
    return 0


def _check_proof(args: argparse.Namespace) -> int:
    from mnemoscope.errors import InputError
    from mnemoscope.server.proofcheck import ProofCheckError, check_proof_document

    keys = _verifiers(args.key)
    if not keys:
        raise InputError(
            "pass the log's public key with --key (text or file): a proof is only as good as the key"
        )
    try:
        doc = json.loads(Path(args.file).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{args.file}: not a readable JSON proof ({e})") from e
    try:
        res = check_proof_document(doc, keys)
    except ProofCheckError as e:
        if args.json:
            print(json.dumps({"ok": False, "problem": str(e)}, indent=1))
        else:
            print(f"FAILED: {e}")
        return 3
    if args.json:
        print(json.dumps({"ok": True, **res}, indent=1))
    else:
        print(f"ok: {res['summary']}")
    return 0


def _keygen(args: argparse.Namespace) -> int:
    from mnemoscope.errors import InputError
    from mnemoscope.server.signing import NoteError, Signer

    out = Path(args.out)
    if out.exists() and not args.force:
        raise InputError(f"{out} exists: pass --force to replace the key (that is a key rotation)")
    try:
        signer = Signer.generate(args.name)
    except NoteError as e:
        raise InputError(str(e)) from e
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(str(signer) + "\n")
    Path(f"{out}.pub").write_text(str(signer.verifier) + "\n", encoding="utf-8")
    print(f"signer key: {out} (secret)\nverifier key: {out}.pub\n{signer.verifier}")
    return 0


__all__ = ["register"]
