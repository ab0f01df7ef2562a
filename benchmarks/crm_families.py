"""CRM's signal by feature family, with the blind baselines, on one dataset (issue 19; heavy, resumable).

    # the shift-controlled pair (bench/shift.py) on the base model: no injection, no memory
    python benchmarks/crm_families.py --dataset shift --name shift-base --threads 1
    # a membership sibling (no shift; the adapter of `bench inject --preset positive`)
    python benchmarks/crm_families.py --dataset membership --adapter runs/membership-positive \
        --name membership-positive --threads 1

Extraction (template A, the paper's continuation probe, T = 32, chat template) goes to
``<cache>/families-<name>`` and resumes; it is the cheap setting: no attention flow, no
gradient norm (``crm extract --no-attention-flow --no-gradient-norm``), static pass and
logit lens kept. The evaluation is ``pipelines.crm.run.evaluate_folder`` (every CRM method,
the feature families, L1 on the input text, the blind baselines and the shift diagnostic,
the non-causal analyses; no causal analyses) -> ``<out>/<name>/report.json`` + ``report.md``
with the command, git commit, timings, threads and load average.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import torch

from mnemoscope.bench.shift import SHIFT_FILE
from mnemoscope.bench.suites import membership_documents
from mnemoscope.bench.tables import DATA_DIR
from mnemoscope.data.records import DEFAULT_QUERY_CHARS, Record, read_records
from mnemoscope.models import load_model
from mnemoscope.pipelines.crm.eval import CRMEvalConfig
from mnemoscope.pipelines.crm.extract import CRMExtractConfig, extract, load_folder
from mnemoscope.pipelines.crm.run import evaluate_folder, write_report


def records(dataset: str, per_class: int | None) -> list[Record]:
    if dataset == "shift":
        recs, errors = read_records(DATA_DIR / SHIFT_FILE, default_query=True)
        assert not errors
    else:
        docs = membership_documents()
        recs = [
            Record(d.id, d.text, d.text[:DEFAULT_QUERY_CHARS], d.label, query_defaulted=True) for d in docs
        ]
    if per_class:
        recs = [r for r in recs if r.label == 1][:per_class] + [r for r in recs if r.label == 0][:per_class]
    return recs


def _auc(e: dict[str, Any] | None) -> str:
    if not e or e.get("roc_auc") is None:
        return "n/a"
    lo, hi = e["roc_auc_ci"]
    return f"{e['roc_auc']:.3f} [{lo:.3f}, {hi:.3f}]"


def summary(out: Path, names: list[str]) -> str:
    """The docs tables: one column per report, rows = families, CRM methods, blind, likelihood."""
    reps = {n: json.loads((out / n / "report.json").read_text()) for n in names}
    head = "| | " + " | ".join(names) + " |"
    lines = [head, "|---|" + "---|" * len(names)]

    def row(label: str, get: Any) -> None:
        lines.append(f"| {label} | " + " | ".join(get(r) for r in reps.values()) + " |")

    fams = [f["family"] for f in next(iter(reps.values()))["families"]["rows"]]
    for fam in fams:
        row(
            f"family {fam}",
            lambda r, fam=fam: _auc(next(x for x in r["families"]["rows"] if x["family"] == fam)),
        )
    for m in ("crm_lr", "crm_xgb", "crm_sup_lr", "static_mia_lr", "raw_final_diff", "logit_lens_lr"):
        row(m, lambda r, m=m: _auc(r.get(m)))
    for b in ("blind_tfidf", "blind_date", "blind_embedding"):
        row(b, lambda r, b=b: _auc(next((e for e in r["blind"]["entries"] if e["method"] == b), None)))
    row(
        "best likelihood", lambda r: f"{r['best_likelihood']['method']} {r['best_likelihood']['roc_auc']:.3f}"
    )
    row("shift_warning", lambda r: str(r["shift_warning"]).lower())
    row(
        "same-topic CRM-LR (n)",
        lambda r: (
            f"{_auc(r['analyses']['same_topic'].get('crm_lr'))} (n={r['analyses']['same_topic'].get('n')})"
        ),
    )
    row(
        "permuted CRM-LR (10x)",
        lambda r: f"{r['analyses']['permutation']['mean']:.3f} +- {r['analyses']['permutation']['std']:.3f}",
    )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", choices=["shift", "membership"])
    ap.add_argument("--name", help="output folder name, e.g. shift-base")
    ap.add_argument(
        "--summary",
        nargs="*",
        metavar="NAME",
        default=None,
        help="print docs/crm.md's family tables from the committed reports of these names and exit",
    )
    ap.add_argument("--model", default="default")
    ap.add_argument("--adapter", default=None)
    ap.add_argument("--cache", default="benchmarks/results/crm/cache")
    ap.add_argument("--out", default="benchmarks/results/crm/families")
    ap.add_argument("--per-class", type=int, default=None, help="first N members and first N non-members")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--permutations", type=int, default=10)
    ap.add_argument(
        "--note", default="", help="free text stored in report.json (e.g. how the cache was extracted)"
    )
    args = ap.parse_args()
    if args.summary is not None:
        print(summary(Path(args.out), args.summary or ["membership-positive", "shift-base"]))
        return
    if not args.dataset or not args.name:
        ap.error("--dataset and --name are required (or --summary)")
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    load0 = os.getloadavg()
    recs = records(args.dataset, args.per_class)
    lm = load_model(args.model, adapter=args.adapter)
    cfg = CRMExtractConfig(
        template="A",
        task="continuation",
        batch_size=args.batch_size,
        attention_flow=False,
        gradient_norm=False,
        static=True,
        logit_lens=True,
    ).resolved(lm)
    cache = Path(args.cache) / f"families-{args.name}"
    t0 = time.perf_counter()
    info = extract(lm, recs, cache, cfg)
    t_extract = time.perf_counter() - t0
    folder = load_folder(cache)
    t1 = time.perf_counter()
    c = CRMEvalConfig(n_permutations=args.permutations)
    report = evaluate_folder(folder, c, embedder=cfg.embedder, blind=True)
    t_eval = time.perf_counter() - t1
    report["model"] = lm.info.to_dict()
    report["adapter"] = args.adapter
    report["dataset"] = {
        "name": args.dataset,
        "source": f"bench/data/{SHIFT_FILE} (mnemoscope.bench.shift, seed 0)"
        if args.dataset == "shift"
        else "bench/data/membership.jsonl (mnemoscope.bench.suites.membership_documents)",
        "per_class": args.per_class,
        "query": "none: the paper's continuation probe of the context's first 100 characters",
    }
    report["extract"] = {k: v for k, v in info.items() if k != "model"}
    report["extract_settings"] = {
        "template": cfg.template,
        "task": cfg.task,
        "chat": cfg.chat,
        "max_new_tokens": cfg.max_new_tokens,
        "attention_flow": cfg.attention_flow,
        "gradient_norm": cfg.gradient_norm,
        "static": cfg.static,
        "logit_lens": cfg.logit_lens,
        "embedder": cfg.embedder,
    }
    report["timing"] = {
        "extract_seconds": round(t_extract, 1),
        "eval_seconds": round(t_eval, 1),
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "loadavg_start": [round(x, 2) for x in load0],
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "note": "shared 2-core machine; extraction may have resumed from an earlier run (then "
        "extract_seconds covers only the remainder)",
        "run_note": args.note,
    }
    title = f"CRM by feature family: {args.name}"
    write_report(report, Path(args.out) / args.name, title=title)
    fam = {r["family"]: r["roc_auc"] for r in report["families"]["rows"]}
    print(f"{args.name}: shift_warning={report['shift_warning']} ({report['shift_reason']})")
    print(f"{args.name}: families {fam}; extract {t_extract:.0f} s, eval {t_eval:.0f} s", flush=True)


if __name__ == "__main__":
    main()
