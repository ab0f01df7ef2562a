"""Write the shipped default profile's ``validation.json`` from the committed held-out evaluation.

Usage: ``python benchmarks/profile_validation.py [--check]``

Reads ``benchmarks/results/verdict/eval.json`` (part B: the held-out fold audited through the
library's ``Auditor`` with the shipped profile, written by ``python benchmarks/verdict_eval.py``)
and ``profile_build.json`` (the calibration run, ``python benchmarks/build_default_profile.py``)
and writes ``src/mnemoscope/data/profiles/<name>/validation.json``
(:data:`mnemoscope.report.profile_card.VALIDATION_FORMAT`), which ``mnemoscope profile show``
and the dashboard's ``/profile`` page display. Nothing is re-measured here: every number is
copied from those files, with their command and commit. It refuses when the evaluation was
run on another profile (its ``profile_hash`` differs from the shipped profile's).

``--check`` exits 1 when the committed ``validation.json`` differs from what would be written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "verdict"
PROFILE = ROOT / "src" / "mnemoscope" / "data" / "profiles" / "smollm2-135m-instruct"


def build() -> dict[str, Any]:
    from mnemoscope.report.profile_card import VALIDATION_FORMAT

    ev = json.loads((RESULTS / "eval.json").read_text(encoding="utf-8"))
    build_rec = json.loads((RESULTS / "profile_build.json").read_text(encoding="utf-8"))
    header = json.loads((PROFILE / "profile.json").read_text(encoding="utf-8"))
    ph = header["profile_hash"]
    run_b = (ev.get("runs") or {}).get("B") or ev  # the run that measured part B
    for name, rec in (("eval.json", ev), ("eval.json part B", run_b), ("profile_build.json", build_rec)):
        if rec.get("profile_hash") != ph:
            raise SystemExit(
                f"{RESULTS / name} was measured on profile {str(rec.get('profile_hash'))[:12]}, the shipped "
                f"profile is {ph[:12]}: re-run benchmarks/verdict_eval.py first"
            )
    b = ev["B_held_out"]
    auc = b["auc"]["p_memory"]
    rule = b["combined_rule"]
    return {
        "format": VALIDATION_FORMAT,
        "profile_hash": ph,
        "held_out": {"n": b["n"], "n_memory": b["n_memory"], "n_context": b["n_context"]},
        "auc": {
            "score": "p_memory",
            "estimate": auc["auc"],
            "ci": auc["ci"],
            "method": "ROC-AUC of p_memory, memory (label 1) vs context-needed (label 0); 95% stratified-bootstrap percentile CI, 1000 resamples (stats.auc_ci)",
        },
        "alpha": b["guarantee"]["alpha"],
        "false_flag_rate": rule["false_flag_rate"],
        "false_flags": rule["false_flags"],
        "memory_recall": rule["memory_recall"],
        "accuracy_3way": rule["accuracy_3way"],
        "confusion": rule["confusion"],
        "audit_seconds": b["seconds"],
        "calibration_seconds": build_rec["seconds"],
        "provenance": {
            "source": "benchmarks/results/verdict/eval.json (B_held_out) + profile_build.json (seconds)",
            # the run that measured part B (eval.json's top level is its last run, any part)
            "command": run_b.get("command"),
            "git_commit": run_b.get("git_commit"),
            "time": run_b.get("created") or run_b.get("time"),
            "threads": (run_b.get("machine") or {}).get("threads"),
            "calibration_command": build_rec.get("command"),
            "written_by": "python benchmarks/profile_validation.py",
            "note": "calibration_seconds is calibrate_profile's wall time in build_default_profile.py "
            "(its calibration traces may have been cached); audit_seconds audits the held-out fold",
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the committed file is stale")
    args = ap.parse_args(argv)
    text = json.dumps(build(), indent=1) + "\n"
    out = PROFILE / "validation.json"
    if args.check:
        same = out.is_file() and out.read_text(encoding="utf-8") == text
        print(f"{out}: {'up to date' if same else 'STALE (run python benchmarks/profile_validation.py)'}")
        return 0 if same else 1
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
