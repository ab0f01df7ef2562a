"""Is a CRM AUC above 0.5 on a sibling a signal or the scatter of one CV split? (CRM investigation.)

    python benchmarks/crm_significance.py --folder benchmarks/results/crm/cache/weak-A \
        --out benchmarks/results/crm/significance-weak.json [--permutations 200] [--seeds 10]

For CRM-LR (L1+L2+L3) and CRM-L3 (LTS only), leakage-free protocol, on one extracted folder:

* **permutation p-value**: the AUC with the real labels against ``--permutations`` label
  shuffles (features unchanged, the whole pipeline - target layers, directions, scaler, LR -
  refitted inside the folds of every shuffle); p = (1 + #{AUC_perm >= AUC}) / (1 + N);
* **split-seed spread**: the same AUC under ``--seeds`` different 5-fold partitions (the
  report uses seed 42 only; a signal should not depend on which records share a fold).

The bootstrap CI of a report resamples the out-of-fold scores of one partition; it ignores
the variance of the partition itself and the fitting, so it is narrower than the spread of
a repeated CV. Both numbers here are cheap (no model call).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import numpy as np
from tqdm.auto import tqdm

from mnemoscope.detectors.crm import crm_pipeline
from mnemoscope.pipelines.crm.eval import CRMEvalConfig, lts_kwargs, permutation_control, run_method
from mnemoscope.pipelines.crm.extract import load_folder
from mnemoscope.provenance import provenance


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--folder", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--permutations", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=10)
    args = ap.parse_args()
    t0 = time.perf_counter()
    folder = load_folder(args.folder, keep_without=False)
    data = folder.data
    y = np.asarray(data.labels)
    c = replace(CRMEvalConfig(), n_resamples=200)
    has_l1 = "l1_embed_dist" in data.surface_names
    variants = {"crm_lr": ("l1", "l2", "l3") if has_l1 else ("l2", "l3"), "crm_l3_lr": ("l3",)}
    out: dict[str, object] = {"folder": args.folder, "n": int(y.size)}
    for name, levels in variants.items():

        def auc(cfg: CRMEvalConfig, levels: tuple[str, ...] = levels) -> float:
            est = run_method(crm_pipeline(levels=levels, **lts_kwargs(cfg)), data, y, cfg).auc.estimate
            return float("nan") if est is None else float(est)

        real = auc(c)
        print(f"{name}: {args.permutations} permutations ...", flush=True)
        perm = permutation_control(
            data, y, replace(c, n_permutations=args.permutations), None, levels=levels, seed=12345
        )["aucs"]
        seeds = [auc(replace(c, seed=s)) for s in tqdm(range(args.seeds), desc=f"{name} seeds", unit="seed")]
        perm_a = np.asarray(perm)
        out[name] = {
            "roc_auc_seed42": real,
            "permutation": {
                "n": args.permutations,
                "mean": float(np.nanmean(perm_a)),
                "std": float(np.nanstd(perm_a)),
                "q95": float(np.nanquantile(perm_a, 0.95)),
                "p_value": float((1 + np.sum(perm_a >= real)) / (1 + perm_a.size)),
            },
            "split_seeds": {
                "seeds": list(range(args.seeds)),
                "aucs": seeds,
                "mean": float(np.mean(seeds)),
                "min": float(np.min(seeds)),
                "max": float(np.max(seeds)),
            },
        }
        print(name, json.dumps(out[name]["permutation"]), f"seed mean {np.mean(seeds):.3f}", flush=True)
    out["seconds"] = time.perf_counter() - t0
    with open(args.out, "w") as fh:
        json.dump({**out, "provenance": provenance()}, fh, indent=1)


if __name__ == "__main__":
    main()
