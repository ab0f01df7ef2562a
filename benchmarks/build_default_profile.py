"""The previous method of building the audit profile shipped for the embedded default model.

The shipped profile (``src/mnemoscope/data/profiles/smollm2-135m-instruct``) is now made by the
product's own command, with the grounded verdict::

    mnemoscope calibrate --threads 1 --input shipped:calibration+public --max-new-tokens 128 \
        --per-class 400 --certify per-kind --out RUN_DIR/profile

recorded with ``python benchmarks/calibration_results.py record NAME RUN_DIR`` (the card under
``benchmarks/results/calibration/smollm2-135m-instruct-grounded-t128/``) and copied as written
(``profile.json``, ``validation.json``, ``held_out.jsonl``; not the traces);
``python benchmarks/profile_validation.py --check`` ties the shipped files to that card.

This script still runs and reproduces the previous shipped profile (7efd33085a2a: T = 32, CRM,
calibrated with ``held_out_fraction=0`` on the verified reliance items; its figures in
``benchmarks/results/verdict/``). It writes into the shipped folder by default (``--out``), as
``benchmarks/reliance_pipeline.sh``'s ``verdict_eval.py`` audits whatever is shipped there; to
reproduce the previous figures end to end (its validation card and drift reference), run the
pipeline on a checkout of 8b0a9c3, the last commit that shipped that profile.

1. Take the verified context-reliance items (``mnemoscope bench verify --chat --out runs/reliance-chat``):
   memorized/paraphrased items the model answers closed-book (label 1) and invented-entity
   items it answers only with the context (label 0).
2. Split them by fact (a fact and its paraphrase stay together), stratified by label, seed 42:
   2/3 calibration, 1/3 held out for ``benchmarks/verdict_eval.py``. The split is committed.
3. ``calibrate_profile`` on the calibration part (chat template, template A, T = 32, CRM L2+L3
   logistic classifier, RePCS tau, the token margin and the verdict model); traces go to
   ``runs/``, only ``profile.json`` and ``crm.npz`` are shipped.

Usage:
    python benchmarks/build_default_profile.py [--verified runs/reliance-chat/verified.jsonl]
    python benchmarks/build_default_profile.py --verified benchmarks/results/verdict/verified.jsonl   # the committed set
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from mnemoscope.provenance import provenance

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "verdict"


def split_by_fact(items: list[dict], seed: int, test_fraction: float) -> tuple[list[str], list[str]]:
    """Stratified group split: whole facts go to calibration or test."""
    import numpy as np
    from sklearn.model_selection import StratifiedGroupKFold

    labels = np.array([it["label"] for it in items])
    groups = np.array([it.get("fact_id", it["id"]) for it in items])
    n_splits = round(1 / test_fraction)
    tr, te = next(
        StratifiedGroupKFold(n_splits, shuffle=True, random_state=seed).split(items, labels, groups)
    )
    return [items[i]["id"] for i in tr], [items[i]["id"] for i in te]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--verified", default=str(ROOT / "runs" / "reliance-chat" / "verified.jsonl"))
    ap.add_argument(
        "--out", default=str(ROOT / "src" / "mnemoscope" / "data" / "profiles" / "smollm2-135m-instruct")
    )
    ap.add_argument("--traces", default=str(ROOT / "runs" / "default-profile-traces"))
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--test-fraction", type=float, default=1 / 3)
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args()

    from mnemoscope.audit.calibrate import calibrate_profile
    from mnemoscope.audit.profile import CalibrationConfig
    from mnemoscope.data.records import Record
    from mnemoscope.models import load_model
    from mnemoscope.pipelines.crm.fitter import CRMFitter

    items = [json.loads(line) for line in Path(args.verified).read_text().splitlines() if line.strip()]
    calib_ids, test_ids = split_by_fact(items, args.seed, args.test_fraction)
    RESULTS.mkdir(parents=True, exist_ok=True)
    if Path(args.verified).resolve() != (RESULTS / "verified.jsonl").resolve():
        shutil.copyfile(args.verified, RESULTS / "verified.jsonl")
    by_id = {it["id"]: it for it in items}
    (RESULTS / "split.json").write_text(
        json.dumps(
            {
                **provenance(),
                "seed": args.seed,
                "rule": "StratifiedGroupKFold by fact_id, first fold = test",
                "calibration_ids": calib_ids,
                "test_ids": test_ids,
                "n_calibration": {
                    "memory": sum(by_id[i]["label"] == 1 for i in calib_ids),
                    "context": sum(by_id[i]["label"] == 0 for i in calib_ids),
                },
                "n_test": {
                    "memory": sum(by_id[i]["label"] == 1 for i in test_ids),
                    "context": sum(by_id[i]["label"] == 0 for i in test_ids),
                },
            },
            indent=1,
        )
        + "\n"
    )
    records = [
        Record(id=i, context=by_id[i]["context"], query=by_id[i]["query"], label=int(by_id[i]["label"]))
        for i in calib_ids
    ]
    lm = load_model("default")
    t0 = time.perf_counter()
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    prof = calibrate_profile(
        lm,
        records,
        out,
        CalibrationConfig(
            chat="auto",
            template="A",
            max_new_tokens=32,
            batch_size=args.batch_size,
            classifier="lr",
            # the labels were verified by `bench verify` (step 1) and the held-out third is split off
            # above (step 2): calibrate on all of the calibration part, as before
            labels="given",
            held_out_fraction=0,
        ),
        traces_dir=args.traces,
        progress=True,
        fitter=CRMFitter(progress=True),
    )
    # no held-out part here (held_out_fraction=0): the validation card is written from
    # verdict_eval.py's part B by profile_validation.py, not from calibrate's empty held-out file;
    # the held-out rows the drift watch compares with by default_profile_held_out.py
    # (benchmarks/reliance_pipeline.sh runs both after verdict_eval.py)
    (out / "held_out.jsonl").unlink(missing_ok=True)
    v = prof.verdict
    summary = {
        **provenance(),
        "profile_hash": prof.content_hash,
        "seconds": round(time.perf_counter() - t0, 1),
        "n_records": len(records),
        "token_margin": prof.token_margin,
        "repcs_tau": prof.repcs_tau,
        "verdict": None if v is None else v.to_dict(),
    }
    (RESULTS / "profile_build.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(
        json.dumps(
            {k: summary[k] for k in ("profile_hash", "seconds", "n_records", "token_margin", "repcs_tau")}
        )
    )
    if v is not None:
        print(
            "selected signals:", v.selected_, "certified:", v.certified_, "threshold:", round(v.threshold_, 4)
        )


if __name__ == "__main__":
    main()
