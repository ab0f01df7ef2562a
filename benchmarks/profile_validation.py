"""Keep the shipped default profile's ``validation.json`` and ``held_out.jsonl`` equal to its recorded card.

Usage: ``python benchmarks/profile_validation.py [--check]``

The shipped profile (``src/mnemoscope/data/profiles/smollm2-135m-instruct``) is the output of
``mnemoscope calibrate`` (the command is in its ``validation.json`` and in the card), which writes
``validation.json`` (the card) and ``held_out.jsonl`` (the held-out audits it is computed from)
itself. The run is recorded with ``python benchmarks/calibration_results.py record`` under
``benchmarks/results/calibration/<SHIPPED_CARD>/`` (``card.json``'s ``validation``, the same
``held_out.jsonl``). Nothing is measured here:

* ``--check`` exits 1 unless the shipped ``profile.json``, ``validation.json`` and the recorded card
  name one profile hash, the shipped ``validation.json`` equals the card's ``validation`` (after a
  ``calibration_results.py revalidate`` the card leads), the shipped ``held_out.jsonl`` is the
  card's byte for byte, and the held-out figures recomputed from the shipped rows under the current
  source decision (:func:`mnemoscope.audit.validation.validation_from_rows`) are the ones shown;
* without it, the card's ``validation`` is written to the shipped ``validation.json`` when they
  differ (a revalidated card), and it refuses when the card is of another profile.

Before the grounded calibration (profile 7efd33085a2a, T = 32, CRM) the shipped card was copied from
``benchmarks/results/verdict/eval.json`` part B (``verdict_eval.py``) by an earlier version of this
script; that evaluation is kept as the previous profile's record.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "src" / "mnemoscope" / "data" / "profiles" / "smollm2-135m-instruct"
#: the recorded calibration run the shipped profile is (``benchmarks/results/calibration/<name>/``)
SHIPPED_CARD = "smollm2-135m-instruct-grounded-t128"
CARD_DIR = ROOT / "benchmarks" / "results" / "calibration" / SHIPPED_CARD


def problems() -> list[str]:
    """Every disagreement between the shipped profile and its recorded card (empty: all agree)."""
    from mnemoscope.audit.validation import read_held_out, validation_from_rows

    out = []
    header = json.loads((PROFILE / "profile.json").read_text(encoding="utf-8"))
    val = json.loads((PROFILE / "validation.json").read_text(encoding="utf-8"))
    card = json.loads((CARD_DIR / "card.json").read_text(encoding="utf-8"))
    hashes = {
        "profile.json": header.get("profile_hash"),
        "validation.json": val.get("profile_hash"),
        f"{SHIPPED_CARD}/card.json profile": (card.get("profile") or {}).get("profile_hash"),
        f"{SHIPPED_CARD}/card.json validation": (card.get("validation") or {}).get("profile_hash"),
    }
    if len(set(hashes.values())) != 1:
        out.append(f"profile hashes differ: {hashes}")
    want = card["validation"]
    if val != want:
        diff = sorted(k for k in set(val) | set(want) if val.get(k) != want.get(k))
        out.append(f"validation.json differs from {SHIPPED_CARD}/card.json's validation in {diff}")
    shipped_rows = (PROFILE / "held_out.jsonl").read_bytes()
    card_rows = (CARD_DIR / "held_out.jsonl").read_bytes()
    if hashlib.sha256(shipped_rows).digest() != hashlib.sha256(card_rows).digest():
        out.append(f"held_out.jsonl differs from {SHIPPED_CARD}/held_out.jsonl")
    fresh = validation_from_rows(read_held_out(PROFILE / "held_out.jsonl"), alpha=val["alpha"])
    stale = sorted(k for k in fresh if k in val and fresh[k] != val[k])
    if stale:
        out.append(
            f"the shipped rows give other {stale} under the current source decision: run "
            "python benchmarks/calibration_results.py revalidate, then this script"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the shipped files differ from the card")
    args = ap.parse_args(argv)
    out = PROFILE / "validation.json"
    if args.check:
        found = problems()
        for p in found:
            print(p, file=sys.stderr)
        print(f"{out}: {'up to date' if not found else 'STALE'} (card {SHIPPED_CARD})")
        return 0 if not found else 1
    card: dict[str, Any] = json.loads((CARD_DIR / "card.json").read_text(encoding="utf-8"))
    header = json.loads((PROFILE / "profile.json").read_text(encoding="utf-8"))
    if card["validation"].get("profile_hash") != header.get("profile_hash"):
        raise SystemExit(
            f"{CARD_DIR / 'card.json'} is of profile {str(card['validation'].get('profile_hash'))[:12]}, the "
            f"shipped one is {str(header.get('profile_hash'))[:12]}: copy the recorded run's profile first"
        )
    want = card["validation"]
    if json.loads(out.read_text(encoding="utf-8")) == want:
        print(f"{out}: up to date")
        return 0
    out.write_text(json.dumps(want, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
