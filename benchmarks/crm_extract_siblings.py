"""Extract CRM folders for the membership siblings (heavy; resumable).

    python benchmarks/crm_extract_siblings.py --runs runs --out benchmarks/results/crm/cache \
        [--sibling weak strong positive] [--template A B C D] [--limit N]

Each (sibling, template) gets its own folder ``<out>/<sibling>-<template>``. Template A
computes every extra (attention flow, static state, logit lens); templates B-D only the
pairs and embeddings (the prompt-randomisation control needs nothing else).
"""

from __future__ import annotations

import argparse
import logging
import time

import torch

from mnemoscope.bench.suites import membership_documents
from mnemoscope.data.records import DEFAULT_QUERY_CHARS, Record
from mnemoscope.models import load_model
from mnemoscope.pipelines.crm.extract import CRMExtractConfig, extract


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", default="runs")
    ap.add_argument("--out", default="benchmarks/results/crm/cache")
    ap.add_argument("--model", default="default")
    ap.add_argument("--sibling", nargs="+", default=["weak", "strong", "positive"])
    ap.add_argument("--template", nargs="+", default=["A"])
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--per-class", type=int, default=None, help="first N members and first N non-members")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument(
        "--adapter-prefix", default="membership-", help="sibling adapter = RUNS/<prefix><sibling>"
    )
    ap.add_argument("--tag", default="", help="prefix of the output folders (e.g. gemma-)")
    ap.add_argument("--no-attention-flow", action="store_true")
    ap.add_argument("--no-gradient-norm", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    docs = membership_documents()[: args.limit]
    if args.per_class:
        docs = [d for d in docs if d.label == 1][: args.per_class] + [d for d in docs if d.label == 0][
            : args.per_class
        ]
    recs = [Record(d.id, d.text, d.text[:DEFAULT_QUERY_CHARS], d.label, query_defaulted=True) for d in docs]
    for sib in args.sibling:
        adapter = None if sib == "base" else f"{args.runs}/{args.adapter_prefix}{sib}"
        lm = load_model(args.model, adapter=adapter)
        for tmpl in args.template:
            full = tmpl == "A"
            cfg = CRMExtractConfig(
                template=tmpl,
                task="continuation",
                batch_size=args.batch_size,
                attention_flow=full and not args.no_attention_flow,
                static=full,
                logit_lens=full,
                gradient_norm=full and not args.no_gradient_norm,
            )
            t0 = time.perf_counter()
            info = extract(lm, recs, f"{args.out}/{args.tag}{sib}-{tmpl}", cfg)
            print(
                f"{sib}-{tmpl}: {info['n_traced']} traced, {info['n_errors']} errors, "
                f"{time.perf_counter() - t0:.0f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
