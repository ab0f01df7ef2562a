"""Give the previous shipped default profile its drift reference: ``held_out.jsonl`` (issue 36).

The previous method, kept to reproduce the record of profile 7efd33085a2a (T = 32, CRM; built by
``build_default_profile.py``). The shipped profile is now the output of ``mnemoscope calibrate``,
which writes its own ``held_out.jsonl`` (calibrate's full rows); it is recorded under
``benchmarks/results/calibration/`` (``benchmarks/profile_validation.py`` SHIPPED_CARD) and
``python benchmarks/profile_validation.py --check`` ties the shipped rows to that card. This
script refuses (exit 2) when the shipped profile is not the one its record describes.

The shipped profile (``src/mnemoscope/data/profiles/smollm2-135m-instruct``) is calibrated with
``held_out_fraction=0`` on two thirds of the verified context-reliance items
(``benchmarks/build_default_profile.py``); the held-out third is the split's ``test_ids``
(``benchmarks/results/verdict/split.json``, StratifiedGroupKFold by fact, seed 42), audited by
``benchmarks/verdict_eval.py`` part B, whose figures ``benchmarks/profile_validation.py`` copies
into the profile's ``validation.json``. The profile had no ``held_out.jsonl``, so the service
(``serve``, the proxy) could not watch drift for the default model.

This script audits that held-out third again, for real (``Auditor.from_spec("default")``: the
default model, the shipped profile, lockstep decoding, as verdict_eval.py part B does), and
writes each audit as the row ``mnemoscope calibrate`` writes (one writer:
:func:`mnemoscope.audit.validation.held_out_row`), keeping only the fields the drift watch and
the validation figures read (the verified truth, p_memory, the memory flag, the three-way
source, ``identical_prompts`` and the evidence with every verdict signal; not the texts and the
per-token attribution, which make calibrate's rows ~4 kB each).

It refuses to write when the audits do not reproduce the profile's ``validation.json`` (the
same profile hash, the same n, false flags and memory answers caught) and the committed audits of
the same items (``results/verdict/regression/current.jsonl.gz``: the same flags and sources):
the rows must be the answers that card describes. The run's command, commit, threads, load, seconds and the file's
SHA-256 go to ``benchmarks/results/verdict/held_out_build.json``.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/default_profile_held_out.py
    python benchmarks/default_profile_held_out.py --check   # the committed file against the record
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from build_default_profile import RESULTS  # noqa: E402
from verdict_eval import held_out_items  # noqa: E402

PROFILE = ROOT / "src" / "mnemoscope" / "data" / "profiles" / "smollm2-135m-instruct"
RECORD = RESULTS / "held_out_build.json"
#: the fields of calibrate's held-out row kept in the shipped file (what drift and the card read)
KEEP = ("id", "kind", "label", "truth", "p_memory", "memory_flag", "source", "identical_prompts", "evidence")


def rows_of(items: list[dict[str, Any]], audits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """calibrate's held-out rows (:func:`held_out_row`) of the audited ``items``, trimmed to :data:`KEEP`."""
    from mnemoscope.audit.validation import held_out_row
    from mnemoscope.bench.label_check import LabelDecision, gold_answers

    out = []
    for it, a in zip(items, audits, strict=True):
        label = int(it["label"])
        dec = LabelDecision(
            it["id"],
            it["kind"],
            label,
            label,
            "verified (bench verify --chat)",
            it.get("closed_book_correct"),
            it.get("open_book_correct"),
        )
        row = held_out_row(dec, a, context=it["context"], query=it["query"], gold=gold_answers(it, label))
        out.append({k: row[k] for k in KEEP})
    return out


def serialise(rows: list[dict[str, Any]]) -> str:
    """One JSON line per row, as :func:`mnemoscope.audit.validation.write_validation` writes them."""
    return "".join(json.dumps(r, ensure_ascii=False, default=float) + "\n" for r in rows)


def agreement(rows: list[dict[str, Any]], validation: dict[str, Any]) -> dict[str, Any]:
    """The rows' counts next to the profile's validation card, which must be equal. The card's
    false flags and memory recall count the answers whose three-way source is ``memory``
    (verdict_eval.py part B's ``combined_rule``); the memory flag's counts are recorded too."""
    ctx = [r for r in rows if r["truth"] == "context"]
    mem = [r for r in rows if r["truth"] == "memory"]
    got = {
        "n": len(rows),
        "n_memory": len(mem),
        "n_context": len(ctx),
        "false_flags": sum(r["source"] == "memory" for r in ctx),
        "memory_caught": sum(r["source"] == "memory" for r in mem),
    }
    held = validation["held_out"]
    want = {
        "n": held["n"],
        "n_memory": held["n_memory"],
        "n_context": held["n_context"],
        "false_flags": validation["false_flags"],
        "memory_caught": round(validation["memory_recall"] * held["n_memory"]),
    }
    return {
        "rows": got,
        "validation_json": want,
        "equal": got == want,
        "memory_flag": {
            "context_flagged": sum(bool(r["memory_flag"]) for r in ctx),
            "memory_flagged": sum(bool(r["memory_flag"]) for r in mem),
        },
    }


def same_as_committed(rows: list[dict[str, Any]], threshold: float) -> dict[str, Any]:
    """The rows against the committed audits of the same items with the shipped profile
    (``results/verdict/regression/current.jsonl.gz``, ``benchmarks/verdict_regression.py``):
    the memory flag and the source must be equal, p_memory equal to float noise. Not compared
    (``equal`` None) when those audits used another profile (their conformal threshold is not
    ``threshold``, the shipped verdict's): after a rebuild they are re-made later."""
    import gzip

    committed = {}
    with gzip.open(RESULTS / "regression" / "current.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if d["rule"] == "combined":
                committed[d["id"]] = d
    src = "benchmarks/results/verdict/regression/current.jsonl.gz"
    if any((committed[r["id"]].get("guarantee") or {}).get("threshold") != threshold for r in rows):
        return {"file": src, "equal": None, "note": "not compared: those audits used another profile"}
    diff = [
        r["id"]
        for r in rows
        if r["memory_flag"] != committed[r["id"]]["memory_flag"]
        or r["source"] != committed[r["id"]]["source"]
    ]
    dp = max(abs(r["p_memory"] - committed[r["id"]]["p_memory"]) for r in rows)
    return {"file": src, "differing_ids": diff, "max_abs_p_memory_diff": dp, "equal": not diff and dp < 1e-6}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare the committed file with its record")
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    out = PROFILE / "held_out.jsonl"
    rec = json.loads(RECORD.read_text(encoding="utf-8"))
    shipped = json.loads((PROFILE / "profile.json").read_text(encoding="utf-8"))["profile_hash"]
    if shipped != rec["profile_hash"]:
        print(
            f"the shipped profile is {shipped[:12]}, not {rec['profile_hash'][:12]} ({RECORD.name}): its "
            "held_out.jsonl is calibrate's own; check it with python benchmarks/profile_validation.py --check",
            file=sys.stderr,
        )
        return 2
    if args.check:
        sha = hashlib.sha256(out.read_bytes()).hexdigest()
        ok = sha == rec["sha256"]
        print(f"{out}: {'matches' if ok else 'DIFFERS FROM'} {RECORD.name} (sha256 {sha[:16]})")
        return 0 if ok else 1

    from mnemoscope.audit.auditor import AuditFailure, Auditor, AuditRequest
    from mnemoscope.io import atomic_write
    from mnemoscope.provenance import provenance

    prov = provenance()  # at the start: the code that audits
    load_start = os.getloadavg()
    auditor = Auditor.from_spec("default")
    validation = json.loads((PROFILE / "validation.json").read_text(encoding="utf-8"))
    ph = auditor.profile.content_hash
    if validation["profile_hash"] != ph:
        raise SystemExit(
            f"validation.json is for profile {validation['profile_hash'][:12]}, the shipped one is {ph[:12]}"
        )
    verified = [json.loads(x) for x in (RESULTS / "verified.jsonl").read_text().splitlines() if x.strip()]
    items = held_out_items(verified)
    t0 = time.perf_counter()
    results: list[Any] = []
    for s in range(0, len(items), args.batch):
        chunk = items[s : s + args.batch]
        results += auditor.audit([AuditRequest(it["context"], it["query"], id=it["id"]) for it in chunk])
        print(f"audited {len(results)}/{len(items)}", flush=True)
    seconds = time.perf_counter() - t0
    failed = [it["id"] for it, r in zip(items, results, strict=True) if isinstance(r, AuditFailure)]
    if failed:
        raise SystemExit(f"{len(failed)} audits failed ({failed[:5]}): nothing written")
    rows = rows_of(items, [r.to_dict() for r in results])
    agree = agreement(rows, validation)
    assert auditor.profile.verdict is not None, "the shipped profile has a verdict model"
    same = same_as_committed(rows, auditor.profile.verdict.threshold_)
    if not agree["equal"] or same["equal"] is False:
        raise SystemExit(f"the audits do not reproduce validation.json: {json.dumps([agree, same])}")
    text = serialise(rows)
    atomic_write(out, text)
    import torch

    record = {
        "what": "the shipped default profile's held-out third audited with the shipped profile: its drift "
        "reference (held_out.jsonl, calibrate's rows trimmed to the fields kept)",
        **prov,
        "profile_hash": ph,
        "file": str(out.relative_to(ROOT)),
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "bytes": len(text.encode("utf-8")),
        "fields": list(KEEP),
        "split": "benchmarks/results/verdict/split.json test_ids (StratifiedGroupKFold by fact_id, seed 42)",
        "agreement_with_validation_json": agree,
        "agreement_with_committed_audits": same,
        "seconds": round(seconds, 1),
        "threads": {"torch": torch.get_num_threads(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")},
        "load_avg_start": [round(x, 2) for x in load_start],
        "load_avg_end": [round(x, 2) for x in os.getloadavg()],
        "uptime_end": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
    }
    RECORD.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(
        json.dumps({k: record[k] for k in ("sha256", "bytes", "seconds", "agreement_with_validation_json")})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
