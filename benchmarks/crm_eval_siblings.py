"""Evaluate CRM on extracted sibling folders (after benchmarks/crm_extract_siblings.py).

    python benchmarks/crm_eval_siblings.py --cache benchmarks/results/crm/cache \
        --out benchmarks/results/crm [--sibling weak strong positive] [--no-causal]

For each sibling: the leakage-free report (every method and analysis, the causal ones with
the sibling loaded), the paper-protocol methods, written to ``<out>/<sibling>/`` (and
``<out>/<sibling>/paper/``). Templates B-D may have been extracted on a subset
(``--per-class``): the prompt control then compares all templates on the common records.
``--templates-only`` adds the prompt control to an existing report when B-D were traced later.
Compare siblings with ``mnemoscope crm report <out>/weak <out>/strong --out <out>/comparison``.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from mnemoscope.models import load_model
from mnemoscope.models.embedder import load_embedder
from mnemoscope.pipelines.crm.causal import causal_analyses, default_blocks, vocab_back_projection
from mnemoscope.pipelines.crm.eval import CRMEvalConfig, evaluate, template_control
from mnemoscope.pipelines.crm.extract import load_folder
from mnemoscope.pipelines.crm.run import write_report


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default="benchmarks/results/crm/cache")
    ap.add_argument("--out", default="benchmarks/results/crm")
    ap.add_argument("--runs", default="runs")
    ap.add_argument("--model", default="default")
    ap.add_argument("--adapter-prefix", default="membership-")
    ap.add_argument("--sibling", nargs="+", default=["weak", "strong", "positive"])
    ap.add_argument("--no-causal", action="store_true")
    ap.add_argument("--causal-eps", default="0.1,0.5,1.0")
    ap.add_argument("--causal-blocks", default="", help="comma-separated subset of the default blocks")
    ap.add_argument(
        "--causal-per-class", type=int, default=None, help="stratified subset for the causal runs"
    )
    ap.add_argument("--tag", default="", help="prefix of the cache and output folders (e.g. gemma-)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--templates",
        default="ABCD",
        help="templates of the prompt control to load if extracted (e.g. AD while B and C are still being traced)",
    )
    ap.add_argument(
        "--templates-only",
        action="store_true",
        help="add the prompt control to an existing <out>/<sibling>/report.json (templates traced later)",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    cfg = CRMEvalConfig()
    emb = load_embedder("default")
    for sib in args.sibling:
        t0 = time.perf_counter()
        cache = Path(args.cache)
        folder = load_folder(cache / f"{args.tag}{sib}-A")
        templates = {"A": folder.data}
        for t in "BCD":
            if t in args.templates.upper() and (cache / f"{args.tag}{sib}-{t}" / "extract.json").is_file():
                templates[t] = load_folder(cache / f"{args.tag}{sib}-{t}", keep_without=False).data
        # templates B-D may cover a subset (--per-class): compare every template on the same records
        common = set.intersection(*(set(d.ids) for d in templates.values()))
        templates = {
            k: d.subset([i for i, r in enumerate(d.ids) if r in common]) for k, d in templates.items()
        }
        if args.templates_only:
            out_dir = Path(args.out) / f"{args.tag}{sib}"
            rep = json.loads((out_dir / "report.json").read_text())
            rep["analyses"]["templates"] = template_control(templates, cfg)
            write_report(rep, out_dir, title=f"CRM on {rep['model']['name']} + {sib} sibling")
            print(json.dumps({sib: rep["analyses"]["templates"]}, default=str), flush=True)
            continue
        ctx = emb.encode([p.context for p in folder.pairs])
        texts = [p.context for p in folder.pairs]
        rep = evaluate(
            folder.data,
            cfg,
            token_stats=folder.token_stats,
            texts=texts,
            template_data=templates if len(templates) > 1 else None,
            context_embeddings=ctx,
        )
        adapter = None if sib == "base" else f"{args.runs}/{args.adapter_prefix}{sib}"
        lm = load_model(args.model, adapter=adapter)
        rep["model"] = lm.info.to_dict()
        rep["extract"] = folder.meta
        out_dir = Path(args.out) / f"{args.tag}{sib}"
        title = f"CRM on {lm.info.name} + {sib} sibling"
        write_report(rep, out_dir, title=title)  # now, so the causal runs below cannot lose it
        if not args.no_causal:
            peak = max(1, min(int(rep["analyses"]["layer_sweep"]["best"][0]), lm.info.n_layers))
            chat = bool(folder.meta["settings"]["chat"])
            idx = np.arange(len(folder.pairs))
            if args.causal_per_class:
                y = np.asarray(folder.data.labels)
                idx = np.sort(
                    np.concatenate([np.flatnonzero(y == k)[: args.causal_per_class] for k in (0, 1)])
                )
            blocks = default_blocks(lm.info.n_layers, peak)
            if args.causal_blocks:
                blocks = {k: v for k, v in blocks.items() if k in args.causal_blocks.split(",")}
            rep["analyses"]["causal"] = causal_analyses(
                lm,
                [folder.pairs[i] for i in idx],
                folder.data.subset(idx),
                cfg,
                peak_layer=peak,
                chat=chat,
                eps=[float(e) for e in args.causal_eps.split(",")],
                blocks=blocks,
                patch_layers=[peak],
            )
            rep["analyses"]["causal"]["n"] = int(idx.size)
        rep["analyses"]["vocab"] = vocab_back_projection(lm, folder.data, cfg)
        rep["seconds"] = time.perf_counter() - t0
        write_report(rep, out_dir, title=title)
        paper = evaluate(
            folder.data,
            replace(cfg, protocol="paper"),
            token_stats=folder.token_stats,
            texts=texts,
            analyses=False,
        )
        paper["model"] = rep["model"]
        write_report(
            paper,
            Path(args.out) / f"{args.tag}{sib}" / "paper",
            title=f"CRM (paper protocol) on {sib} sibling",
        )
        print(
            json.dumps({sib: {m: rep[m]["roc_auc"] for m in ("crm_lr", "crm_xgb", "crm_l3_lr", "l1l2_lr")}}),
            flush=True,
        )


if __name__ == "__main__":
    main()
