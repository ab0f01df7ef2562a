"""How good is the audit verdict? Measured on the default model, leakage-free.

A. Cross-validation over every verified context-reliance item (``bench verify --chat``;
   5 folds grouped by fact): the verdict model (signal selection, logistic combination,
   conformal threshold, and the token-attribution margin) is refitted on each training part by
   the library's own ``mnemoscope.audit.calibrate.fit_verdict`` (what the profile build calls);
   reported: the combination's AUC with a bootstrap CI against each single signal's AUC, the
   realised false-flag rate on held-out clean items next to alpha, memory recall, accuracy.
B. The held-out third (``results/verdict/split.json``, never seen by the shipped profile),
   audited through the real pipeline (``Auditor``: lockstep decoding, shipped profile):
   AUC of p_memory and of every signal incl. CRM's LTS score and classifier probability,
   the realised false-flag rate vs alpha, the verdict's 3-way accuracy and confusion table,
   and the paper rules (RePCS Z < tau, CRM anomaly) as named alternatives.
C. The mixed token-level set (``results/mixed/verified.jsonl``): every answer token inside
   the known context-only part vs inside the known memory part; token-level AUC of the PMI
   and of the word PMI, the attribution's labels on those parts, and the item verdicts.

Usage: python benchmarks/verdict_eval.py [--parts ABC] [--out benchmarks/results/verdict/eval.json]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from build_default_profile import RESULTS, ROOT, provenance


def _auc(scores: Any, labels: Any, seed: int = 0) -> dict[str, Any]:
    from mnemoscope.stats import auc_ci

    e = auc_ci(np.asarray(scores, float), np.asarray(labels, int), n_resamples=1000, rng=seed)
    return {"auc": e.estimate, "ci": [e.ci_low, e.ci_high], "n_pos": e.n_pos, "n_neg": e.n_neg}


def part_a(verified: list[dict], traces_dir: Path, profile: Any) -> dict[str, Any]:
    from mnemoscope.audit.calibrate import fit_verdict, token_margin
    from mnemoscope.audit.profile import CalibrationConfig
    from mnemoscope.audit.signals import answer_pieces, trace_signals
    from mnemoscope.detectors.repcs import RePCS
    from mnemoscope.detectors.verdict import VerdictModel, evaluate_verdict
    from mnemoscope.features.crm import crm_data_from_pairs
    from mnemoscope.models import load_model
    from mnemoscope.pipelines.crm.eval import CRMEvalConfig
    from mnemoscope.pipelines.crm.extract import CRMFolder
    from mnemoscope.pipelines.crm.fitter import oof_crm_probability
    from mnemoscope.pipelines.crm.run import fit_crm
    from mnemoscope.trace import load_traces

    lm = load_model("default")
    by_id = {t.id: t for t in load_traces(traces_dir)}
    items = [it for it in verified if it["id"] in by_id]
    traces = [by_id[it["id"]] for it in items]
    labels = np.array([it["label"] for it in items])
    groups = [it.get("fact_id", it["id"]) for it in items]
    pieces = [answer_pieces(lm.tokenizer, t.answer_ids) for t in traces]
    repcs = RePCS.from_calibration(profile.header["repcs"])
    q = profile.header["config"]["token_margin_quantile"]
    # the library's default candidates (the black-box signals); CRM's classifier probability is
    # still computed (out of fold) and reported as a single signal, outside the combination
    cands = tuple(CalibrationConfig().verdict_candidates)
    with_crm = (*cands, "crm_probability") if "crm_probability" not in cands else cands
    cfg = CalibrationConfig(
        **{
            **profile.header["config"],
            "levels": tuple(profile.header["config"]["levels"]),
            "verdict_candidates": cands,
            "certify": "marginal",  # the folds carry no item kinds
            "verdict_alpha": 0.05,
        }
    )
    folder = CRMFolder(
        data=crm_data_from_pairs(traces), pairs=traces, token_stats=None, meta={"model": lm.info.to_dict()}
    )

    def signals_with_margin(margin: float, crm_prob: np.ndarray) -> dict[str, np.ndarray]:
        rows = [
            trace_signals(t, pc, margin=margin, repcs=repcs)[0] for t, pc in zip(traces, pieces, strict=True)
        ]
        out = {k: np.array([r[k] for r in rows]) for k in with_crm if k != "crm_probability"}
        return {**out, "crm_probability": crm_prob}

    def fit_fold(train: np.ndarray) -> tuple[Any, dict[str, np.ndarray]]:
        """The library's calibration on the training rows only: CRM's probability (out of fold inside
        the training part, from a CRM fitted on it for the test rows) and ``fit_verdict`` (token
        margin + verdict model); every row's signals with that fold's margin."""
        prob = np.zeros(len(traces))
        sub = replace(folder, data=folder.data.subset(train), pairs=[traces[i] for i in train])
        prob[train] = oof_crm_probability(sub, "lr", cfg)  # out of fold inside the training part
        test = np.setdiff1d(np.arange(len(traces)), train)
        crm = fit_crm(
            sub,
            classifier="lr",
            eval_config=CRMEvalConfig(
                direction=cfg.direction, variance_threshold=cfg.variance_threshold, seed=cfg.seed
            ),
            levels=cfg.levels,
            cv=False,
        )
        prob[test] = crm.predict_proba(folder.data.subset(test))
        margin, model = fit_verdict(
            lm,
            [traces[i] for i in train],
            labels[train],
            repcs,
            cfg,
            crm_oof=prob[train],
            pieces=[pieces[i] for i in train],
        )
        return model, signals_with_margin(margin, prob)

    full_margin = token_margin(traces, pieces, labels, q)
    # single-signal AUCs (no fitting): CRM's probability out of fold over all rows
    res = evaluate_verdict(
        signals_with_margin(full_margin, oof_crm_probability(folder, "lr", cfg)),
        labels,
        VerdictModel(candidates=with_crm, alpha=0.05, seed=42),  # every signal's own AUC reported
        n_splits=5,
        seed=0,
        groups=groups,
        fit_fold=fit_fold,
    )
    res.pop("oof_p_memory")
    res["candidates"] = list(cands)  # what each fold's verdict may combine (the library default)
    res["margin_on_all_items"] = full_margin
    res["by_kind"] = dict(Counter(it["kind"] for it in items))
    return res


def _audit_all(auditor: Any, reqs: list[Any], batch: int = 8) -> list[Any]:
    from tqdm.auto import tqdm

    out = []
    for s in tqdm(range(0, len(reqs), batch), desc="audit", unit="batch"):
        out += auditor.audit(reqs[s : s + batch])
    return out


def held_out_items(verified: list[dict]) -> list[dict]:
    """The held-out third of the verified items (``results/verdict/split.json``), in split order."""
    split = json.loads((RESULTS / "split.json").read_text())
    by_id = {it["id"]: it for it in verified}
    return [by_id[i] for i in split["test_ids"]]


def part_b(verified: list[dict], auditor: Any) -> dict[str, Any]:
    from mnemoscope.audit.auditor import AuditFailure, AuditRequest

    items = held_out_items(verified)
    t0 = time.perf_counter()
    results = _audit_all(auditor, [AuditRequest(it["context"], it["query"], id=it["id"]) for it in items])
    secs = time.perf_counter() - t0
    audits = [None if isinstance(r, AuditFailure) else r.to_dict() for r in results]
    return held_out_metrics(items, audits, secs)


def held_out_metrics(items: list[dict], audits: list[dict | None], secs: float) -> dict[str, Any]:
    """Part B's figures from the audits (``AuditResult.to_dict()``, ``None`` = failed) of ``items``."""
    rows = [(it, r) for it, r in zip(items, audits, strict=True) if r is not None]
    y = np.array([it["label"] for it, _ in rows])
    d = [r for _, r in rows]
    clean = y == 0
    src = np.array([x["source"] for x in d])
    sig = {
        "p_memory": [x["p_memory"] for x in d],
        "repcs_z (-)": [-x["evidence"]["repcs_z"] for x in d],
        "closed_book_logprob": [x["evidence"]["closed_book_logprob"] for x in d],
        "context_token_fraction (-)": [
            -(
                0.5
                if x["evidence"]["context_token_fraction"] is None
                else x["evidence"]["context_token_fraction"]
            )
            for x in d
        ],
        # CRM's numbers exist only when the audits traced hidden states (issue 35: not by default)
        "crm_lts_anomaly_score": [(x.get("crm") or {}).get("anomaly_score") for x in d],
        "crm_probability": [(x.get("crm") or {}).get("crm_probability") for x in d],
    }
    aucs = {k: _auc(v, y) for k, v in sig.items() if all(s is not None for s in v)}
    expected = np.where(y == 1, "memory", "context")
    repcs_flag = np.array([x["repcs"]["memorized"] for x in d])
    has_crm = all(x.get("crm") for x in d)
    crm_flag = np.array([x["crm"]["anomaly_flag"] for x in d]) if has_crm else None
    mem_flag = src == "memory"
    g = d[0]["guarantee"]
    return {
        "n": len(rows),
        "n_memory": int((y == 1).sum()),
        "n_context": int(clean.sum()),
        "failures": len(items) - len(rows),
        "seconds": round(secs, 1),
        "auc": aucs,
        "guarantee": {k: g[k] for k in ("alpha", "n_calibration", "certified", "threshold")},
        "combined_rule": {
            "false_flag_rate": float(mem_flag[clean].mean()),
            "false_flags": int(mem_flag[clean].sum()),
            "memory_recall": float(mem_flag[~clean].mean()),
            "accuracy_3way": float((src == expected).mean()),
            "confusion": {
                lab: dict(Counter(src[y == (1 if lab == "memory" else 0)].tolist()))
                for lab in ("memory", "context")
            },
        },
        "repcs_paper_rule": {
            "false_flag_rate": float(repcs_flag[clean].mean()),
            "memory_recall": float(repcs_flag[~clean].mean()),
            "accuracy": float((repcs_flag == (y == 1)).mean()),
        },
        "crm_anomaly_rule": {
            "false_flag_rate": float(crm_flag[clean].mean()),
            "memory_recall": float(crm_flag[~clean].mean()),
            "accuracy": float((crm_flag == (y == 1)).mean()),
        }
        if crm_flag is not None
        else "not measured: the audits traced no hidden states (the verdict does not read CRM)",
    }


def part_c(auditor: Any, path: Path) -> dict[str, Any]:
    from mnemoscope.audit.auditor import AuditFailure, AuditRequest
    from mnemoscope.bench.mixed import find_part

    items = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    results = _audit_all(auditor, [AuditRequest(it["context"], it["query"], id=it["id"]) for it in items])
    tok_lab, tok_pmi, tok_wpmi, tok_src = [], [], [], []
    sources: Counter[str] = Counter()
    both_found = 0
    for it, r in zip(items, results, strict=True):
        if isinstance(r, AuditFailure):
            continue
        d = r.to_dict()
        sources[d["source"]] += 1
        c = find_part(d["answer"], {"answer": it["answer_context"], "aliases": it.get("aliases_context", [])})
        m = find_part(d["answer"], {"answer": it["answer_memory"], "aliases": it.get("aliases_memory", [])})
        if c is None or m is None:
            continue
        both_found += 1
        for t in d["tokens"]:
            for lab, (s, e) in ((1, c), (0, m)):
                if t["start"] < e and t["end"] > s and t["text"].strip():
                    tok_lab.append(lab)
                    tok_pmi.append(t["pmi"])
                    tok_src.append(t["source"])
                    tok_wpmi.append(next(x.word_pmi for x in r.tokens if x.start == t["start"]))
    lab = np.array(tok_lab)
    srcs = np.array(tok_src)
    return {
        "n_items": len(items),
        "n_items_both_parts_in_answer": both_found,
        "item_sources": dict(sources),
        "item_accuracy_mixed": sources["mixed"] / max(1, sum(sources.values())),
        "n_tokens_context_part": int((lab == 1).sum()),
        "n_tokens_memory_part": int((lab == 0).sum()),
        "token_auc_pmi": _auc(tok_pmi, lab),
        "token_auc_word_pmi": _auc(tok_wpmi, lab),
        "context_part_labels": dict(Counter(srcs[lab == 1].tolist())),
        "memory_part_labels": dict(Counter(srcs[lab == 0].tolist())),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="ABC")
    ap.add_argument("--verified", default=str(RESULTS / "verified.jsonl"))
    ap.add_argument("--traces", default=str(ROOT / "runs" / "reliance-chat" / "traces"))
    ap.add_argument("--mixed", default=str(ROOT / "benchmarks" / "results" / "mixed" / "verified.jsonl"))
    ap.add_argument("--out", default=str(RESULTS / "eval.json"))
    args = ap.parse_args()

    from mnemoscope.audit.auditor import Auditor

    auditor = Auditor.from_spec("default")
    verified = [json.loads(line) for line in Path(args.verified).read_text().splitlines() if line.strip()]
    out_path = Path(args.out)
    report: dict[str, Any] = json.loads(out_path.read_text()) if out_path.is_file() else {}
    report.pop("time", None)  # an older provenance key: "created" is this run's
    report.update(provenance())
    report["profile_hash"] = auditor.profile.content_hash
    import torch

    report["machine"] = {
        "threads": torch.get_num_threads(),
        "load_avg_start": list(np.round(np.array(__import__("os").getloadavg()), 2)),
    }
    # which run measured which part (the top level is the last run's)
    runs = report.setdefault("runs", {})
    ran = [x for x in args.parts if x in "AB" or (x == "C" and Path(args.mixed).is_file())]
    for part in ran:
        runs[part] = {
            **{k: report[k] for k in ("command", "git_commit", "git_dirty", "created", "machine")},
            "profile_hash": report["profile_hash"],
        }
    if "A" in args.parts:
        report["A_cross_validation"] = part_a(verified, Path(args.traces), auditor.profile)
        print(json.dumps(report["A_cross_validation"], indent=1))
    if "B" in args.parts:
        report["B_held_out"] = part_b(verified, auditor)
        print(json.dumps(report["B_held_out"], indent=1))
    if "C" in args.parts and Path(args.mixed).is_file():
        report["C_mixed_tokens"] = part_c(auditor, Path(args.mixed))
        print(json.dumps(report["C_mixed_tokens"], indent=1))
    out_path.write_text(json.dumps(report, indent=1, default=float) + "\n")
    print(f"-> {out_path}")


if __name__ == "__main__":
    main()
