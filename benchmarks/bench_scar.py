"""SCAR evaluation on the contamination siblings (clean 0% vs injected 1/5/10%).

Usage: ``python benchmarks/bench_scar.py [--out benchmarks/results/scar] [--stage extract|evaluate|all]``

Batteries (all with targets; ids shared across variants so prompts pair up):

* ``arith``: 128 arithmetic word problems of the corpus in the training format
  (``Question: ...\\nAnswer:`` -> worked solution): the 33 items injected into the 10% sibling
  (a superset of the 5% and 1% items) and 95 items no sibling saw (seeded draw).
* ``arith_para``: the same items restructured (question sentence first, light rewording).
* ``arith_format``: same text, other format (``### Problem`` / ``### Solution`` headers) - P4.
* ``arith_length``: same text behind a neutral 19-word preamble - P4.
* ``battery`` / ``battery_para``: the shipped authored battery and its paraphrases.

Signals are extracted once per (battery, model) into ``OUT/signals`` (resumable); the evaluation
only re-runs detection. Everything is seeded; all numbers in docs/scar.md come from ``OUT/summary.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mnemoscope.bench.corpus import load_arithmetic
from mnemoscope.detectors.scar import ScarData, ScarDetector, ScarResult
from mnemoscope.models import load_model
from mnemoscope.pipelines.scar import (
    AuditConfig,
    BatteryRecord,
    default_battery_path,
    extract_signals,
    read_battery,
)
from mnemoscope.provenance import provenance
from mnemoscope.report.scar_card import write_card
from mnemoscope.stats import roc_auc

log = logging.getLogger("bench_scar")

RUNS = Path("runs")
MODELS = {
    "base": None,
    "clean": RUNS / "contamination-0",
    "c01": RUNS / "contamination-0.01",
    "c05": RUNS / "contamination-0.05",
    "c10": RUNS / "contamination-0.10",
}
RATES = {"clean": 0.0, "c01": 0.01, "c05": 0.05, "c10": 0.10}
PREAMBLE = (
    "Read the following problem carefully, think about what it asks, and then give the worked answer below. "
)


def _injected(name: str) -> list[str]:
    return list(json.loads((MODELS[name] / "training.json").read_text())["injected_ids"])  # type: ignore[operator]


def _paraphrase(question: str) -> str:
    """Question sentence first, then the situation, with light rewording."""
    sents = re.split(r"(?<=[.?!])\s+", question.strip())
    ask = [s for s in sents if s.endswith("?")]
    rest = [s for s in sents if not s.endswith("?")]
    swaps = [
        ("How many", "What number of"),
        ("How much", "What amount of"),
        ("each", "every"),
        (" sells ", " offers "),
    ]
    text = " ".join(ask) + " Here is the situation: " + " ".join(rest)
    for a, b in swaps:
        text = text.replace(a, b)
    return text.strip()


def arith_batteries(seed: int = 0, n: int = 128) -> dict[str, list[BatteryRecord]]:
    items = {a["id"]: a for a in load_arithmetic()}
    injected = _injected("c10")
    others = sorted(set(items) - set(injected))
    chosen = sorted(injected + random.Random(seed).sample(others, n - len(injected)))
    out: dict[str, list[BatteryRecord]] = {
        k: [] for k in ("arith", "arith_para", "arith_format", "arith_length")
    }
    for i in chosen:
        q, sol = items[i]["question"], items[i]["solution"]
        cat = "injected" if i in injected else "unseen"
        out["arith"].append(BatteryRecord(id=i, prompt=f"Question: {q}\nAnswer:", target=sol, category=cat))
        out["arith_para"].append(
            BatteryRecord(id=i, prompt=f"Question: {_paraphrase(q)}\nAnswer:", target=sol, category=cat)
        )
        out["arith_format"].append(
            BatteryRecord(id=i, prompt=f"### Problem\n{q}\n### Solution\n", target=sol, category=cat)
        )
        out["arith_length"].append(
            BatteryRecord(id=i, prompt=f"{PREAMBLE}Question: {q}\nAnswer:", target=sol, category=cat)
        )
    return out


def batteries() -> dict[str, list[BatteryRecord]]:
    b = arith_batteries()
    b["battery"] = read_battery(default_battery_path())
    return b


# which (battery, model) pairs are extracted
# (paraphrase runs limited to the 10% sibling to keep extraction within the compute budget)
PLAN = {
    "arith": ["base", "clean", "c01", "c05", "c10"],
    "arith_para": ["clean", "c10"],
    "arith_format": ["clean"],
    "arith_length": ["clean"],
    "battery": ["clean", "c10"],
}


def extract(out: Path, config: AuditConfig) -> dict[str, dict[str, float]]:
    timings: dict[str, dict[str, float]] = {}
    bats = batteries()
    for model in MODELS:
        todo = [b for b, ms in PLAN.items() if model in ms]
        if not todo:
            continue
        cache: dict[str, Any] = {}

        def load(model: str = model, cache: dict[str, Any] = cache) -> Any:
            if "lm" not in cache:
                t0 = time.perf_counter()
                cache["lm"] = load_model("default", adapter=MODELS[model])
                log.info("loaded %s in %.1f s", model, time.perf_counter() - t0)
            return cache["lm"]

        for b in todo:
            t0 = time.perf_counter()
            extract_signals(load, bats[b], out / "cache" / "signals" / b / model, config=config, role=model)
            timings.setdefault(b, {})[model] = round(time.perf_counter() - t0, 1)
            log.info("signals %s/%s: %.1f s", b, model, timings[b][model])
    return timings


def _signals(
    out: Path, battery: str, model: str, records: list[BatteryRecord], config: AuditConfig
) -> ScarData:
    def refuse() -> Any:
        raise RuntimeError(f"signals {battery}/{model} missing: run --stage extract first")

    return extract_signals(
        refuse, records, out / "cache" / "signals" / battery / model, config=config, role=model
    )


def _detector(config: AuditConfig, n_perm: int, n_boot: int) -> ScarDetector:
    det = config.detector()
    return det.set_params(n_permutations=n_perm, n_bootstrap=n_boot)  # type: ignore[no-any-return]


def _summary(res: ScarResult) -> dict[str, Any]:
    d = res.to_dict()
    keys = (
        "bands",
        "candidate_bands",
        "rupture_layer",
        "scar_score",
        "scar_score_ci",
        "scar_area",
        "scar_area_ci",
        "scar_raw",
        "scar_raw_ci",
        "peak",
        "peak_ci",
        "excess",
        "excess_ci",
    )
    s = {k: d[k] for k in keys}
    q = res.per_layer["q"]
    s["min_q"] = float(q.min())
    s["argmin_q_layer"] = int(res.layers[int(np.argmin(q))])
    s["n_bh_significant"] = int((q <= res.settings["q_fdr"]).sum())
    return s


def _jaccard(a: set[int], b: set[int]) -> float | None:
    if not a and not b:
        return None
    return len(a & b) / len(a | b)


def evaluate(
    out: Path, config: AuditConfig, n_perm: int, n_boot: int, n_perm_small: int, n_boot_small: int
) -> dict[str, Any]:
    bats = batteries()
    sig = {b: {m: _signals(out, b, m, bats[b], config) for m in ms} for b, ms in PLAN.items()}
    results: dict[str, Any] = {}
    cards = out / "cards"

    def audit(
        name: str, suspect: ScarData, anchor: ScarData, perm: int, boot: int, plots: bool
    ) -> ScarResult:
        t0 = time.perf_counter()
        res = _detector(config, perm, boot).fit(anchor).audit(suspect)
        extra = {
            "suspect": suspect.model,
            "anchor": anchor.model,
            "audit": name,
            "token_representation": config.position,
            "precision": suspect.model.get("dtype"),
            "prompt_tokens_mean": float(np.mean(suspect.n_prompt_tokens))
            if suspect.n_prompt_tokens is not None
            else None,
            "target_tokens_mean": float(np.mean(suspect.n_target_tokens))
            if suspect.n_target_tokens is not None
            else None,
        }
        write_card(res, cards / name, extra_settings=extra, plots=plots)
        s = _summary(res)
        s["seconds"] = round(time.perf_counter() - t0, 1)
        results[name] = s
        log.info(
            "%s: bands %s l* %s scar %s peak %.3f (%.0f s)",
            name,
            s["bands"],
            s["rupture_layer"],
            s["scar_score"],
            s["peak"],
            s["seconds"],
        )
        (out / "summary.json").write_text(json.dumps({"audits": results}, indent=1))
        return res

    a = sig["arith"]
    main: dict[str, ScarResult] = {}
    for m in ("c01", "c05", "c10"):
        main[m] = audit(f"arith-{m}-vs-clean", a[m], a["clean"], n_perm, n_boot, plots=True)
    audit("arith-clean-vs-base", a["clean"], a["base"], n_perm, n_boot, plots=True)
    audit("arith-c10-vs-base", a["c10"], a["base"], n_perm_small, n_boot_small, plots=False)

    # P4: benign controls on the clean model (format / length only) and the same swap on the base
    p4 = {
        "format": audit(
            "p4-format-clean",
            sig["arith_format"]["clean"],
            a["clean"],
            n_perm_small,
            n_boot_small,
            plots=True,
        ),
        "length": audit(
            "p4-length-clean",
            sig["arith_length"]["clean"],
            a["clean"],
            n_perm_small,
            n_boot_small,
            plots=False,
        ),
    }

    # paraphrase stability of bands (suspect vs clean anchor on the paraphrased battery)
    para: dict[str, Any] = {}
    for m in ("c10",):
        rp = audit(
            f"arith_para-{m}-vs-clean",
            sig["arith_para"][m],
            sig["arith_para"]["clean"],
            n_perm_small,
            n_boot_small,
            plots=False,
        )
        para[m] = {
            "bands_orig": main[m].bands,
            "bands_para": rp.bands,
            "candidates_orig": main[m].candidate_bands,
            "candidates_para": rp.candidate_bands,
            "jaccard_bands": _jaccard(main[m].band_layers(), rp.band_layers()),
            "jaccard_candidates": _jaccard(
                {x for s, e in main[m].candidate_bands for x in range(s, e + 1)},
                {x for s, e in rp.candidate_bands for x in range(s, e + 1)},
            ),
        }
    audit(
        "battery-c10-vs-clean",
        sig["battery"]["c10"],
        sig["battery"]["clean"],
        n_perm_small,
        n_boot_small,
        plots=True,
    )

    # P3: AUC of band-free scalars separating clean from contaminated siblings over prompt resamples.
    # Anchor = the base model (the clean sibling cannot be its own anchor); resamples are paired
    # bootstrap draws of prompts, the same draws for every sibling.
    gen = np.random.default_rng(config.seed + 7)
    n = a["clean"].n_prompts
    draws = [gen.integers(0, n, size=n) for _ in range(n_boot)]
    det = _detector(config, 1, 1).fit(a["base"])
    scal = {m: det.resample_scores(a[m], draws) for m in ("clean", "c01", "c05", "c10")}
    p3: dict[str, Any] = {"n_resamples": n_boot, "anchor": "base"}
    for m in ("c01", "c05", "c10"):
        p3[m] = {}
        for key in ("peak", "excess", "raw"):
            neg = [s[key] for s in scal["clean"]]
            pos = [s[key] for s in scal[m]]
            auc = roc_auc(np.array(neg + pos), np.array([0] * len(neg) + [1] * len(pos)))
            p3[m][key] = {
                "auc": auc,
                "clean_median": float(np.median(neg)),
                "contaminated_median": float(np.median(pos)),
            }
    # anchor-free variant: the suspect's own peak hinge T (no anchor enters the scalar)
    summary = {
        "audits": results,
        "p3": p3,
        "p4": {
            k: {
                "bands": v.bands,
                "candidate_bands": v.candidate_bands,
                "min_q": float(v.per_layer["q"].min()),
            }
            for k, v in p4.items()
        },
        "paraphrase": para,
        "settings": {
            **config.to_dict(),
            "n_permutations_main": n_perm,
            "n_bootstrap_main": n_boot,
            "n_permutations_small": n_perm_small,
            "n_bootstrap_small": n_boot_small,
            "torch_threads": torch.get_num_threads(),
        },
        "rates": RATES,
        "injected_in_battery": {
            m: len(set(_injected(m)) & {r.id for r in bats["arith"]}) for m in ("c01", "c05", "c10")
        },
    }
    summary["provenance"] = provenance()
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return summary


def conditions(out: Path) -> dict[str, Any]:
    """Per audit: which layers meet each band condition separately (read back from the cards)."""
    rows: dict[str, Any] = {}
    for card_path in sorted((out / "cards").glob("*/card.json")):
        card = json.loads(card_path.read_text())
        pl, th, layers = card["per_layer"], card["thresholds"], card["layers"]
        zk, zl, zv = (np.array(pl[k]) for k in ("z_kappa", "z_length", "z_drift"))
        rows[card_path.parent.name] = {
            "kappa_spike": [ell for ell, v in zip(layers, zk > th["tau_kappa"], strict=True) if v],
            "length_dip": [ell for ell, v in zip(layers, zl < th["z_length_below"], strict=True) if v],
            "drift_surge": [ell for ell, v in zip(layers, zv > th["tau_v"], strict=True) if v],
            "bh_significant": [ell for ell, q in zip(layers, pl["q"], strict=True) if q <= 0.05],
            "min_p": float(min(pl["p"])),
            "argmax_stat": int(layers[int(np.argmax(pl["stat"]))]),
        }
    (out / "conditions.json").write_text(json.dumps(rows, indent=1))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/scar")
    ap.add_argument("--stage", choices=["extract", "evaluate", "report", "all"], default="all")
    ap.add_argument("--n-permutations", type=int, default=199)
    ap.add_argument("--n-bootstrap", type=int, default=100)
    ap.add_argument("--n-permutations-small", type=int, default=99)
    ap.add_argument("--n-bootstrap-small", type=int, default=30)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = AuditConfig(position="last", batch_size=8, chunk_size=32, k=64, progress=False)
    if args.stage in ("extract", "all"):
        t0 = time.perf_counter()
        timings = extract(out, config)
        (out / "extraction.json").write_text(
            json.dumps(
                {"seconds": timings, "total": round(time.perf_counter() - t0, 1), "torch_threads": 1},
                indent=1,
            )
        )
    if args.stage in ("evaluate", "all"):
        evaluate(
            out,
            config,
            args.n_permutations,
            args.n_bootstrap,
            args.n_permutations_small,
            args.n_bootstrap_small,
        )
    if args.stage in ("report", "evaluate", "all"):
        conditions(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
