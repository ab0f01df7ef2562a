"""SCAR's positive control: a sibling trained on the SCAR battery itself, audited against a clean one.

Usage::

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python benchmarks/scar_positive_control.py \
        [--out benchmarks/results/scar/positive_control] [--runs runs/scar-pc] \
        [--stage train|extract|evaluate|all] [--n-permutations 199] [--n-bootstrap 100]

Siblings of the embedded default model (SmolLM2-135M), LoRA adapters under ``RUNS`` (git-ignored):

* ``clean``: the rate-0 contamination sibling (300 filler documents, preset ``strong`` with 2
  epochs, seed 0: exactly ``mnemoscope bench inject --preset strong --epochs 2 --suite
  contamination --rate 0``). The anchor of every audit: same LoRA recipe family, no battery text.
* ``positive-eN``: LoRA on the 128 battery items themselves, each formatted exactly as SCAR
  scores it (``prompt`` + joiner + ``target``, the joiner of :func:`encode_pair`; the token ids
  of the training text equal SCAR's prompt + target ids, checked), preset ``positive`` (lr
  1e-3) for N = 10 epochs; 20 and then 40 epochs are tried only if the loss attack stays at or
  below AUC 0.95.
* ``clean-s1``: a second rate-0 sibling (same recipe, seed 1: other LoRA initialisation and data
  order): the clean-vs-clean control.
* ``c10``: the 10 % contamination sibling (seed 0), the existing weak contamination.
* ``mix``: the clean sibling's 300 filler documents plus the 128 battery texts, the clean
  sibling's recipe (strong, 2 epochs, seed 0): the only difference from ``clean`` is the battery.

Order (``--stage all``): train ``clean`` and ``positive``, extract, evaluate (the main audit), then
``--stage controls`` trains ``clean-s1``, ``c10`` and ``mix``, and extract + evaluate run again (finished
signals and adapters are reused; audits whose signals are missing are "not measured").
Every stage is resumable (training checkpoints, chunked signal extraction); the evaluation
re-runs only detection. All numbers in ``docs/scar.md`` ("Positive control") come from
``OUT/summary.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mnemoscope.bench.inject import SIBLINGS, inject, read_training_record, with_overrides
from mnemoscope.bench.suites import contamination_mix
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
from mnemoscope.trace.gradients import encode_pair

log = logging.getLogger("scar_positive_control")

AUC_TARGET = 0.95
POSITIVE_EPOCHS = (10, 20, 40)
CONTAMINATION = {"clean": (0.0, 0), "clean-s1": (0.0, 1), "c10": (0.10, 0)}


def paraphrase_path() -> Path:
    return default_battery_path().with_name("scar_battery_paraphrase.jsonl")


def batteries() -> dict[str, list[BatteryRecord]]:
    return {"battery": read_battery(default_battery_path()), "paraphrase": read_battery(paraphrase_path())}


def training_text(r: BatteryRecord) -> str:
    """The battery item as SCAR scores it: prompt, the joiner of ``encode_pair``, target."""
    assert r.target is not None
    joiner = "" if (r.target[0].isspace() or r.prompt[-1].isspace()) else " "
    return r.prompt + joiner + r.target


def _save(path: Path, obj: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1, default=str))


def train_contamination(runs: Path, name: str) -> dict[str, Any]:
    rate, seed = CONTAMINATION[name]
    config = with_overrides(SIBLINGS["strong"], epochs=2, seed=seed)
    mix = contamination_mix(rate, n_filler=300, seed=seed)
    meta = {
        "preset": "strong",
        "suite": "contamination",
        "rate": rate,
        "injected_ids": mix.injected_ids,
        "n_filler": 300,
    }
    t0 = time.perf_counter()
    res = inject(load_model("default"), mix.texts, runs / name, config, progress=False, metadata=meta)
    return {
        "folder": str(res.folder),
        "config": config.to_dict(),
        "epoch_losses": res.epoch_losses,
        "steps": res.steps,
        "train_seconds": res.seconds,
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "n_documents": res.n_documents,
        "equivalent_command": "mnemoscope bench inject --preset strong --epochs 2 --suite contamination "
        f"--rate {rate} --seed {seed} --out {runs / name}",
    }


def train_positive(runs: Path, epochs: int) -> dict[str, Any]:
    recs = read_battery(default_battery_path())
    texts = [training_text(r) for r in recs]
    lm = load_model("default")
    mismatched = [
        r.id
        for r, t in zip(recs, texts, strict=True)
        if list(lm.tokenizer(t)["input_ids"])
        != [x for part in encode_pair(lm.tokenizer, r.prompt, r.target or "") for x in part]
    ]
    config = with_overrides(SIBLINGS["positive"], epochs=epochs)
    meta = {"preset": "positive", "suite": "scar-battery", "member_ids": [r.id for r in recs]}
    res = inject(lm, texts, runs / f"positive-e{epochs}", config, progress=False, metadata=meta)
    return {
        "folder": str(res.folder),
        "config": config.to_dict(),
        "epoch_losses": res.epoch_losses,
        "steps": res.steps,
        "train_seconds": res.seconds,
        "n_documents": res.n_documents,
        "token_mismatch_vs_scar_scoring": mismatched,
        "training_text_example": texts[0],
    }


def _loader(runs: Path, model: str) -> Callable[[], Any]:
    cache: dict[str, Any] = {}

    def load() -> Any:
        if "lm" not in cache:
            cache["lm"] = load_model("default", adapter=None if model == "base" else runs / model)
        return cache["lm"]

    return load


def signal_dir(runs: Path, battery: str, model: str) -> Path:
    """Extracted signals live next to the adapters (git-ignored), not in the results folder."""
    return runs / "signals" / battery / model


def signals(
    out: Path, runs: Path, battery: str, model: str, records: list[BatteryRecord], config: AuditConfig
) -> tuple[ScarData, float]:
    t0 = time.perf_counter()
    data = extract_signals(
        _loader(runs, model), records, signal_dir(runs, battery, model), config=config, role=model
    )
    return data, round(time.perf_counter() - t0, 1)


def nll_per_token(d: ScarData) -> np.ndarray:
    assert d.logp is not None and d.n_target_tokens is not None
    return np.asarray(-d.logp / d.n_target_tokens, dtype=np.float64)


def loss_attack(pos: ScarData, neg: ScarData) -> dict[str, Any]:
    """AUC of -NLL/token: the rows of ``pos`` (label 1) against the rows of ``neg`` (label 0)."""
    a, b = nll_per_token(pos), nll_per_token(neg)
    scores = np.concatenate([-a, -b])
    labels = np.concatenate([np.ones_like(a), np.zeros_like(b)])
    out: dict[str, Any] = {
        "auc": roc_auc(scores, labels),
        "mean_nll_per_token_pos": float(a.mean()),
        "mean_nll_per_token_neg": float(b.mean()),
    }
    if pos.ids == neg.ids:
        out["paired_fraction_lower_nll"] = float(np.mean(a < b))
    return out


def stage_train(out: Path, runs: Path, config: AuditConfig) -> dict[str, Any]:
    rec_path = out / "training.json"
    rec: dict[str, Any] = json.loads(rec_path.read_text()) if rec_path.is_file() else {}
    bats = batteries()
    for name in ("clean",):
        rec.setdefault("siblings", {})[name] = train_contamination(runs, name)
        _save(rec_path, rec)
    clean, _ = signals(out, runs, "battery", "clean", bats["battery"], config)
    tries = []
    for epochs in POSITIVE_EPOCHS:
        name = f"positive-e{epochs}"
        info = train_positive(runs, epochs)
        pos, _ = signals(out, runs, "battery", name, bats["battery"], config)
        la = loss_attack(pos, clean)
        tries.append({"sibling": name, "epochs": epochs, "loss_attack_vs_clean": la, **info})
        rec["positive_tries"] = tries
        _save(rec_path, rec)
        log.info("%s: loss-attack AUC vs clean %.3f", name, la["auc"])
        if la["auc"] is not None and la["auc"] > AUC_TARGET:
            rec["positive"] = name
            break
    else:
        raise RuntimeError(f"the loss attack stayed at or below {AUC_TARGET} after {POSITIVE_EPOCHS} epochs")
    rec["provenance"] = provenance()
    _save(rec_path, rec)
    return rec


def stage_controls(out: Path, runs: Path) -> dict[str, Any]:
    """The clean-vs-clean sibling (seed 1) and the 10 % sibling (after the main audit)."""
    rec_path = out / "training.json"
    rec: dict[str, Any] = json.loads(rec_path.read_text())
    for name in ("clean-s1", "c10"):
        rec["siblings"][name] = train_contamination(runs, name)
        rec["provenance_" + name] = provenance()
        _save(rec_path, rec)
    rec["siblings"]["mix"] = train_mix(runs)
    rec["provenance_mix"] = provenance()
    _save(rec_path, rec)
    return rec


def train_mix(runs: Path) -> dict[str, Any]:
    """The battery items added to the clean sibling's 300 filler documents, same recipe (strong,
    2 epochs, seed 0): the only difference from ``clean`` is the 128 battery texts."""
    mix = contamination_mix(0.0, n_filler=300, seed=0)
    battery = [training_text(r) for r in read_battery(default_battery_path())]
    texts = mix.texts + battery
    random.Random(0).shuffle(texts)
    config = with_overrides(SIBLINGS["strong"], epochs=2, seed=0)
    meta = {"preset": "strong", "suite": "contamination filler + scar battery", "n_filler": 300}
    res = inject(load_model("default"), texts, runs / "mix", config, progress=False, metadata=meta)
    return {
        "folder": str(res.folder),
        "config": config.to_dict(),
        "epoch_losses": res.epoch_losses,
        "steps": res.steps,
        "train_seconds": res.seconds,
        "n_documents": res.n_documents,
        "n_battery_documents": len(battery),
    }


def _finished(runs: Path, model: str) -> bool:
    return model == "base" or (runs / model / "training.json").is_file()


def plan(positive: str) -> dict[str, list[str]]:
    return {
        "battery": ["clean", positive, "clean-s1", "c10", "base", "mix"],
        "paraphrase": ["clean", positive],
    }


def stage_extract(out: Path, runs: Path, config: AuditConfig, positive: str) -> dict[str, Any]:
    bats = batteries()
    prev = out / "extraction.json"
    # seconds of the run that actually extracted (a cached re-run takes ~0 s and keeps them)
    timings: dict[str, dict[str, float | None]] = (
        json.loads(prev.read_text())["seconds"] if prev.is_file() else {}
    )
    for battery, models in plan(positive).items():
        for model in models:
            if not _finished(runs, model):
                log.info("signals %s/%s skipped: %s not trained yet", battery, model, model)
                continue
            _, secs = signals(out, runs, battery, model, bats[battery], config)
            known = timings.get(battery, {}).get(model)
            if secs > 1.0 or not known:
                timings.setdefault(battery, {})[model] = secs if secs > 1.0 else None  # None: cached

            log.info("signals %s/%s ready (%.1f s)", battery, model, secs)
    rec = {
        "seconds": timings,
        "note": "null = loaded from cache by this run (extracted earlier; time not recorded here)",
        "torch_threads": torch.get_num_threads(),
        "provenance": provenance(),
    }
    _save(out / "extraction.json", rec)
    return rec


def _conditions(res: ScarResult) -> dict[str, Any]:
    pl, th, layers = res.per_layer, res.thresholds, [int(x) for x in res.layers]

    def where(mask: np.ndarray) -> list[int]:
        return [ell for ell, m in zip(layers, mask, strict=True) if m]

    q_fdr = float(res.settings["q_fdr"])
    return {
        "kappa_spike": where(pl["z_kappa"] > th["tau_kappa"]),
        "length_dip": where(pl["z_length"] < th["z_length_below"]),
        "drift_surge": where(pl["z_drift"] > th["tau_v"]),
        "bh_significant_T": where(pl["q"] <= q_fdr),
        "bh_significant_kappa": where(pl["q_kappa"] <= q_fdr),
        "bh_significant_length": where(pl["q_length"] <= q_fdr),
        "bh_significant_drift": where(pl["q_drift"] <= q_fdr),
        "min_q": {k: float(pl[k].min()) for k in ("q", "q_kappa", "q_length", "q_drift")},
        "argmin_q_layer": {k: layers[int(np.argmin(pl[k]))] for k in ("q", "q_kappa", "q_length", "q_drift")},
        # raw suspect/anchor ratios per layer (the direction of each change, whatever the z-scores say)
        "drift_ratio_median": float(np.median(pl["drift"] / pl["drift_anchor"])),
        "drift_ratio_range": [
            float(np.min(pl["drift"] / pl["drift_anchor"])),
            float(np.max(pl["drift"] / pl["drift_anchor"])),
        ],
        "length_ratio_median": float(np.median(pl["length"] / pl["length_anchor"])),
        "length_ratio_range": [
            float(np.min(pl["length"] / pl["length_anchor"])),
            float(np.max(pl["length"] / pl["length_anchor"])),
        ],
        "kappa_ratio_median": float(np.median(pl["kappa"] / np.maximum(pl["kappa_anchor"], 1e-12))),
    }


def _joint_bh(card_path: Path) -> dict[str, Any]:
    """``per_signal`` bands when BH runs over all signals x layers at once (the family of tests
    the rule's union over signals draws from) instead of per signal."""
    from mnemoscope.detectors.scar import rupture_bands
    from mnemoscope.stats import bh_adjust

    card = json.loads(card_path.read_text())
    pl, st = card["per_layer"], card["settings"]
    p = np.stack([np.asarray(pl[f"p_{k}"]) for k in ("kappa", "length", "drift")])
    q_joint = bh_adjust(p.ravel()).reshape(p.shape)
    z = np.stack([np.asarray(pl[k]) for k in ("z_kappa", "z_length", "z_drift")])
    bands = rupture_bands(
        z,
        card["thresholds"],
        np.asarray(pl["q"]),
        card["layers"],
        rule="per_signal",
        q_signal=q_joint,
        drift=bool(st["drift"]),
        min_width=int(st["min_width"]),
        q_fdr=float(st["q_fdr"]),
    )
    return {
        "bands": [b.to_dict() for b in bands],
        "min_q": {k: float(q_joint[i].min()) for i, k in enumerate(("kappa", "length", "drift"))},
    }


def stage_evaluate(
    out: Path,
    runs: Path,
    config: AuditConfig,
    positive: str,
    n_perm: int,
    n_boot: int,
    n_perm_small: int,
    n_boot_small: int,
) -> dict[str, Any]:
    from mnemoscope.detectors.scar import RULES, per_prompt_scores, result_bands

    bats = batteries()

    def sig(battery: str, model: str) -> ScarData:
        def refuse() -> Any:
            raise RuntimeError(f"signals {battery}/{model} missing: run --stage extract first")

        return extract_signals(
            refuse, bats[battery], signal_dir(runs, battery, model), config=config, role=model
        )

    summary_path = out / "summary.json"
    audits: dict[str, Any] = {}
    plan_audits = [
        # name, battery, suspect, anchor, main?
        ("positive-vs-clean", "battery", positive, "clean", True),
        ("c10-vs-clean", "battery", "c10", "clean", True),
        ("clean_s1-vs-clean", "battery", "clean-s1", "clean", True),
        ("clean-vs-base", "battery", "clean", "base", False),
        ("mix-vs-clean", "battery", "mix", "clean", True),
        ("paraphrase-positive-vs-clean", "paraphrase", positive, "clean", False),
        # the anchor-relative form of the signals (reference="anchor_delta"), same pairs
        ("delta:positive-vs-clean", "battery", positive, "clean", False),
        ("delta:c10-vs-clean", "battery", "c10", "clean", False),
        ("delta:clean_s1-vs-clean", "battery", "clean-s1", "clean", False),
        ("delta:clean-vs-base", "battery", "clean", "base", False),
        ("delta:mix-vs-clean", "battery", "mix", "clean", False),
        # the library's default resampling (999 permutations, 200 bootstrap) on the key pairs
        ("p999:positive-vs-clean", "battery", positive, "clean", False),
        ("p999:clean_s1-vs-clean", "battery", "clean-s1", "clean", False),
    ]
    for name, battery, s_name, a_name, main in plan_audits:
        reference = "anchor_delta" if name.startswith("delta:") else "within"
        card_dir = out / "cards" / name.replace(":", "-")
        if not all((signal_dir(runs, battery, m) / "meta.json").is_file() for m in (s_name, a_name)):
            audits[name] = {"status": "not measured", "reason": f"signals of {s_name} or {a_name} missing"}
            log.info("%s: not measured (signals missing)", name)
            continue
        perm, boot = (n_perm, n_boot) if main else (n_perm_small, n_boot_small)
        if name.startswith("p999:"):
            perm, boot = 999, 200
        done_path = out / "audits" / f"{name.replace(':', '-')}.json"
        if done_path.is_file():
            done = json.loads(done_path.read_text())
            if (done["suspect"], done["anchor"], done["n_permutations"], done["n_bootstrap"]) == (
                s_name,
                a_name,
                perm,
                boot,
            ):
                audits[name] = done
                log.info("%s: already audited (%s)", name, done_path)
                continue
        suspect, anchor = sig(battery, s_name), sig(battery, a_name)
        t0 = time.perf_counter()
        det: ScarDetector = config.detector().set_params(
            n_permutations=perm, n_bootstrap=boot, reference=reference
        )
        res = det.fit(anchor).audit(suspect)
        seconds = round(time.perf_counter() - t0, 1)
        write_card(
            res,
            card_dir,
            extra_settings={
                "suspect": suspect.model,
                "anchor": anchor.model,
                "audit": name,
                "battery": battery,
            },
            plots=main,
        )
        by_rule = {rule: [b.to_dict() for b in result_bands(res, rule=rule)] for rule in RULES}
        pp = per_prompt_scores(suspect, anchor)
        d = res.to_dict()
        audits[name] = {
            "battery": battery,
            "suspect": s_name,
            "anchor": a_name,
            "reference": reference,
            "n_permutations": perm,
            "n_bootstrap": boot,
            "seconds": seconds,
            "bands_by_rule": by_rule,
            "rupture_layer": d["rupture_layer"],
            "scar_score": d["scar_score"],
            "scar_score_ci": d["scar_score_ci"],
            "peak": d["peak"],
            "peak_ci": d["peak_ci"],
            "excess": d["excess"],
            "excess_ci": d["excess_ci"],
            "scar_raw": d["scar_raw"],
            "scar_raw_ci": d["scar_raw_ci"],
            "conditions": _conditions(res),
            "loss_attack": loss_attack(suspect, anchor),
            "per_prompt": pp.summary(),
            "provenance": provenance(),
        }
        _save(done_path, audits[name])
        log.info(
            "%s: %s (%.0f s)",
            name,
            {r: [(b["first"], b["last"]) for b in v] for r, v in by_rule.items()},
            seconds,
        )
        _save(summary_path, {"audits": audits})
    for name, a in audits.items():
        if "status" not in a:
            a.setdefault("reference", "within")
            a["per_signal_joint_bh"] = _joint_bh(out / "cards" / name.replace(":", "-") / "card.json")
    pos_b, pos_p = sig("battery", positive), sig("paraphrase", positive)
    clean_b, clean_p = sig("battery", "clean"), sig("paraphrase", "clean")
    loss = {
        "positive_vs_clean_same_prompts": loss_attack(pos_b, clean_b),
        "positive_battery_vs_positive_paraphrase": loss_attack(pos_b, pos_p),
        "clean_battery_vs_clean_paraphrase": loss_attack(clean_b, clean_p),
        "paraphrase_positive_vs_clean": loss_attack(pos_p, clean_p),
    }
    train_rec = json.loads((out / "training.json").read_text())
    summary = {
        "audits": audits,
        "loss_attack": loss,
        "positive_sibling": positive,
        "training": train_rec,
        "settings": {
            **config.to_dict(),
            "n_permutations_main": n_perm,
            "n_bootstrap_main": n_boot,
            "n_permutations_small": n_perm_small,
            "n_bootstrap_small": n_boot_small,
            "rules": list(RULES),
            "torch_threads": torch.get_num_threads(),
        },
        "provenance": provenance(),
    }
    _save(summary_path, summary)
    return summary


def _fmt_bands(bands: list[dict[str, Any]], *, tag: bool = False) -> str:
    def one(b: dict[str, Any], bold: bool) -> str:
        span = f"{b['first']}-{b['last']}"
        span = f"**{span}**" if bold else span
        return span + (f" {b['signals'][0]}" if tag else "") + f" (q {b['min_q']:.3f})"

    acc = [b for b in bands if b["accepted"]]
    if acc:
        return ", ".join(one(b, True) for b in acc)
    cands = ", ".join(one(b, False) for b in bands)
    return "none" + (f" (candidates: {cands})" if cands else "")


def report(out: Path) -> str:
    """Markdown tables of ``OUT/summary.json`` (the tables of docs/scar.md, "Positive control")."""
    d = json.loads((out / "summary.json").read_text())
    rows = [
        "| audit (suspect vs anchor) | reference | paper (AND of 3) | any 2 of 3 | per signal (BH per signal) "
        "| per signal (BH over 3 x 28) | loss-attack AUC | per-prompt score AUC | drift / length AUC |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, a in d["audits"].items():
        if "status" in a:
            rows.append(f"| {name} | - | not measured: {a['reason']} | | | | | | |")
            continue
        br, pp = a["bands_by_rule"], a["per_prompt"]
        rows.append(
            f"| {name} | {a.get('reference', 'within')} | {_fmt_bands(br['paper'])} | {_fmt_bands(br['any2'])} "
            f"| {_fmt_bands(br['per_signal'], tag=True)} "
            f"| {_fmt_bands(a['per_signal_joint_bh']['bands'], tag=True)} "
            f"| {a['loss_attack']['auc']:.3f} | {pp['score']['auc_suspect_vs_anchor']:.3f} "
            f"| {pp['drift']['auc_suspect_vs_anchor']:.3f} / {pp['length']['auc_suspect_vs_anchor']:.3f} |"
        )
    cond = [
        "",
        "| audit | z_kappa > tau | z_L < anchor p10 | z_v > tau_v | BH q <= 0.05: T / kappa / L / drift "
        "| drift ratio s/a (median, range) | L ratio s/a (median, range) |",
        "|---|---|---|---|---|---|---|",
    ]

    def lay(x: list[int]) -> str:
        return ", ".join(map(str, x)) or "none"

    for name, a in d["audits"].items():
        if "status" in a:
            continue
        c = a["conditions"]
        dr, lr = c["drift_ratio_range"], c["length_ratio_range"]
        cond.append(
            f"| {name} | {lay(c['kappa_spike'])} | {lay(c['length_dip'])} | {lay(c['drift_surge'])} "
            f"| {lay(c['bh_significant_T'])} / {lay(c['bh_significant_kappa'])} / "
            f"{lay(c['bh_significant_length'])} / {lay(c['bh_significant_drift'])} "
            f"| {c['drift_ratio_median']:.3g} ({dr[0]:.3g}-{dr[1]:.3g}) "
            f"| {c['length_ratio_median']:.3g} ({lr[0]:.3g}-{lr[1]:.3g}) |"
        )
    la = [
        "",
        "| loss attack (-NLL per target token) | AUC | mean NLL/token (label 1 vs 0) | paired: label 1 lower |",
        "|---|---|---|---|",
    ]
    for k, v in d.get("loss_attack", {}).items():
        la.append(
            f"| {k} | {v['auc']:.3f} | {v['mean_nll_per_token_pos']:.3f} vs {v['mean_nll_per_token_neg']:.3f} "
            f"| {v.get('paired_fraction_lower_nll', float('nan')):.3f} |"
        )
    return "\n".join(rows + cond + la)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/scar/positive_control")
    ap.add_argument("--runs", default="runs/scar-pc", help="adapter folder (git-ignored)")
    ap.add_argument(
        "--stage", choices=["train", "extract", "evaluate", "controls", "report", "all"], default="all"
    )
    ap.add_argument("--n-permutations", type=int, default=199)
    ap.add_argument("--n-bootstrap", type=int, default=100)
    ap.add_argument("--n-permutations-small", type=int, default=99)
    ap.add_argument("--n-bootstrap-small", type=int, default=30)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    out, runs = Path(args.out), Path(args.runs)
    out.mkdir(parents=True, exist_ok=True)
    config = AuditConfig(position="last", batch_size=8, chunk_size=32, k=64, progress=False)
    if args.stage == "report":
        print(report(out))
        return 0
    if args.stage in ("train", "all"):
        stage_train(out, runs, config)
    positive = json.loads((out / "training.json").read_text()).get("positive")
    if positive is None:
        raise RuntimeError("no positive-control sibling reached the loss-attack target: run --stage train")
    read_training_record(runs / positive)
    rounds = 2 if args.stage == "all" else 1
    for r in range(rounds):  # "all": main audit first, then the control siblings and everything again
        if args.stage in ("extract", "all"):
            stage_extract(out, runs, config, positive)
        if args.stage in ("evaluate", "all"):
            stage_evaluate(
                out,
                runs,
                config,
                positive,
                args.n_permutations,
                args.n_bootstrap,
                args.n_permutations_small,
                args.n_bootstrap_small,
            )
        if args.stage == "controls" or (args.stage == "all" and r == 0):
            stage_controls(out, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
