"""``mnemoscope crm``: extract paired traces, fit, evaluate and report CRM."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from mnemoscope.cli.options import add_chat_arg, add_model_args, load_from_args
from mnemoscope.cli.render import format_auc, render_crm_eval


def _chat(v: str) -> Any:
    return {"auto": "auto", "on": True, "off": False}[v]


def _extract_args(p: argparse.ArgumentParser, *, with_input: bool = True) -> None:
    g = p.add_argument_group("extraction")
    if with_input:
        g.add_argument(
            "--input",
            required=True,
            metavar="FILE",
            help="JSONL of {id, context, query?, label?} (1 = member); no query = continue the context's first 100 characters",
        )
    g.add_argument("--template", default="A", help="CRM prompt template A-D (default: A)")
    g.add_argument(
        "--task",
        default="auto",
        choices=["auto", "continuation", "plain", "summarization", "qa"],
        help="auto = continuation when records have no query, plain when they all have one",
    )
    add_chat_arg(g)
    g.add_argument("--max-new-tokens", "-T", type=int, default=32)
    g.add_argument("--batch-size", type=int, default=8)
    g.add_argument(
        "--embedder",
        default="default",
        help="Level-1 sentence encoder: default (packaged all-MiniLM-L6-v2), bge-m3 (hub), a folder, or none",
    )
    g.add_argument(
        "--no-attention-flow", action="store_true", help="skip the attention-flow baseline's forward"
    )
    g.add_argument(
        "--no-static", action="store_true", help="skip the document-alone pass (static MIA, likelihood)"
    )
    g.add_argument(
        "--no-gradient-norm",
        action="store_true",
        help="skip the forward+backward of the gradient-norm baseline",
    )
    g.add_argument("--overwrite", action="store_true", help="discard traces already extracted")


def _eval_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("evaluation")
    g.add_argument(
        "--protocol",
        choices=["leakage-free", "paper"],
        default="leakage-free",
        help="leakage-free (default): every fitted step inside the CV folds; paper: directions from a "
        "fixed calibration subset that is also in the folds (reproduces the paper, leaks)",
    )
    g.add_argument("--folds", type=int, default=5)
    g.add_argument("--seed", type=int, default=42)
    g.add_argument("--n-cal", type=int, default=100, help="calibration subset size (paper protocol)")
    g.add_argument(
        "--direction", choices=["pc", "mean_diff"], default="pc", help="LTS direction (paper: pc = PC1)"
    )
    g.add_argument(
        "--selection",
        choices=["variance_share", "pc1_ratio", "all"],
        default="variance_share",
        help="target-layer criterion (see docs/crm.md)",
    )
    g.add_argument("--variance-threshold", type=float, default=0.01)
    g.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the AUC CIs")
    g.add_argument("--permutations", type=int, default=10)
    g.add_argument("--no-xgb", action="store_true", help="skip the XGBoost classifiers")


def _eval_config(args: argparse.Namespace) -> Any:
    from mnemoscope.pipelines.crm.eval import CRMEvalConfig

    return CRMEvalConfig(
        protocol=args.protocol,
        n_splits=args.folds,
        seed=args.seed,
        n_cal=args.n_cal,
        n_resamples=args.bootstrap,
        direction=args.direction,
        selection=args.selection,
        variance_threshold=args.variance_threshold,
        n_permutations=args.permutations,
        xgb=not args.no_xgb,
    )


def _read(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    from mnemoscope.data.records import read_records
    from mnemoscope.errors import InputError
    from mnemoscope.pipelines.crm.extract import CRMExtractConfig, resolve_task

    records, errors = read_records(args.input, default_query=True)
    for e in errors:
        print(
            f"mnemoscope: skipping line {e.line} (id {e.id}, field {e.field}): {e.message}", file=sys.stderr
        )
    if not records:
        raise InputError(f"{args.input}: no valid record")
    cfg = CRMExtractConfig(
        template=args.template,
        task=resolve_task(records, args.task),  # type: ignore[arg-type]
        chat=_chat(args.chat),
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        attention_flow=not args.no_attention_flow,
        static=not args.no_static,
        gradient_norm=not args.no_gradient_norm,
        embedder=args.embedder,
    )
    return records, errors, cfg


def register(sub: Any) -> None:
    p = sub.add_parser(
        "crm",
        help="CRM: does the hidden-state displacement with vs without context reveal memory?",
        description="Computational Reality Monitoring. extract: trace records with and without their "
        "context (resumable). fit: fit CRM on an extracted folder -> one artefact file. eval: extract + "
        "every method, control and layer/causal analysis -> report.json/.md + figures. report: re-render "
        "and compare reports.",
    )
    cs = p.add_subparsers(dest="crm_command", metavar="SUBCOMMAND")

    e = cs.add_parser("extract", help="paired traces + CRM extras into a folder (resumable)")
    add_model_args(e)
    _extract_args(e)
    e.add_argument("--out", required=True, metavar="DIR")
    e.set_defaults(func=_extract)

    f = cs.add_parser(
        "fit", help="fit CRM on an extracted folder -> crm.npz (directions, calibration, classifier)"
    )
    f.add_argument("--traces", required=True, metavar="DIR", help="folder written by `crm extract`")
    f.add_argument("--out", required=True, metavar="FILE", help="artefact to write (.npz)")
    f.add_argument(
        "--classifier",
        choices=["lr", "xgb", "none"],
        default="lr",
        help="none = directions and calibration statistics only (unlabelled clean data)",
    )
    f.add_argument(
        "--levels", default=None, help="comma-separated subset of l1,l2,l3 (default: all available)"
    )
    f.add_argument("--no-cv", action="store_true", help="skip the cross-validated AUC stored in the artefact")
    _eval_args(f)
    f.set_defaults(func=_fit)

    v = cs.add_parser("eval", help="extract + evaluate every method and analysis -> DIR/report.json")
    add_model_args(v)
    _extract_args(v)
    _eval_args(v)
    v.add_argument("--out", required=True, metavar="DIR")
    v.add_argument(
        "--templates",
        default="",
        help="also trace these templates for the prompt-randomisation control, e.g. A,B,C,D",
    )
    v.add_argument("--no-causal", action="store_true", help="skip noise injection and activation patching")
    v.add_argument("--no-same-topic", action="store_true", help="skip the same-topic control")
    v.add_argument(
        "--no-blind",
        action="store_true",
        help="skip the blind baselines (TF-IDF, date, sentence embedding of the contexts, never the "
        "model) and with them the shift diagnostic",
    )
    v.add_argument("--title", default=None, help="report title (default: the model name)")
    v.set_defaults(func=_eval)

    r = cs.add_parser("report", help="re-render report.md/figures from report.json; compare several")
    r.add_argument("reports", nargs="+", metavar="REPORT", help="report.json files or folders holding one")
    r.add_argument("--out", required=True, metavar="DIR")
    r.set_defaults(func=_report)
    p.set_defaults(func=lambda args: p.print_help() or 2)


def _extract(args: argparse.Namespace) -> int:
    from mnemoscope.pipelines.crm.extract import extract

    records, errors, cfg = _read(args)
    lm = load_from_args(args)
    info = extract(
        lm, records, args.out, cfg, input_errors=errors, overwrite=args.overwrite, progress=not args.quiet
    )
    print(
        f"{info['n_traced']} records traced into {args.out} ({info['n_errors']} errors"
        f"{'; see ' + str(Path(args.out) / 'pairs' / 'errors.jsonl') if info['n_errors'] else ''})"
    )
    return 0


def _fit(args: argparse.Namespace) -> int:
    from mnemoscope.pipelines.crm.extract import load_folder
    from mnemoscope.pipelines.crm.run import fit_artifact

    folder = load_folder(args.traces)
    levels = [s.strip() for s in args.levels.split(",")] if args.levels else None
    art = fit_artifact(
        folder,
        args.out,
        classifier=args.classifier,
        eval_config=_eval_config(args),
        levels=levels,
        cv=not args.no_cv,
    )
    m = art.metrics
    auc = (
        f"; CV AUC {m['cv_roc_auc']:.3f} [{m['cv_roc_auc_ci'][0]:.3f}, {m['cv_roc_auc_ci'][1]:.3f}]"
        if "cv_roc_auc" in m
        else ""
    )
    print(
        f"wrote {args.out}: {len(art.layers)} target layers {art.layers.tolist()}, classifier {art.classifier}{auc}"
    )
    return 0


def _eval(args: argparse.Namespace) -> int:
    from mnemoscope.pipelines.crm.run import run_eval

    records, errors, cfg = _read(args)
    lm = load_from_args(args)
    templates = [t.strip() for t in args.templates.split(",") if t.strip()]
    report = run_eval(
        lm,
        records,
        args.out,
        extract_config=cfg,
        eval_config=_eval_config(args),
        input_errors=errors,
        templates=templates,
        causal=not args.no_causal,
        same_topic=not args.no_same_topic,
        blind=not args.no_blind,
        overwrite=args.overwrite,
        progress=not args.quiet,
        title=args.title
        or f"CRM on {lm.info.name}" + (f" + {Path(args.adapter).name}" if args.adapter else ""),
    )
    print(render_crm_eval(report))
    print(f"protocol {report['protocol']}; report: {Path(args.out) / 'report.json'}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from mnemoscope.pipelines.crm.run import load_reports, write_report
    from mnemoscope.report import save_figure
    from mnemoscope.report.crm import layer_auc_figure

    reports = load_reports(args.reports)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if len(reports) == 1:
        (label, rep) = next(iter(reports.items()))
        write_report(rep, out, title=label)
    else:
        sweeps = {
            k: r["analyses"]["layer_sweep"]
            for k, r in reports.items()
            if r.get("analyses", {}).get("layer_sweep")
        }
        if sweeps:
            save_figure(layer_auc_figure(sweeps), out / "layer_auc.png", dpi=130)
        rows = [
            "| report | protocol | CRM-LR | CRM-XGB | L3 only | L1+L2 | best likelihood |",
            "|---|---|---|---|---|---|---|",
        ]
        for k, r in reports.items():

            def f(m: str, r: dict[str, Any] = r) -> str:
                e = r.get(m) or {}
                if e.get("roc_auc") is None:
                    return "n/a"
                return format_auc(e)

            b = r.get("best_likelihood") or {}
            rows.append(
                f"| {k} | {r.get('protocol')} | {f('crm_lr')} | {f('crm_xgb')} | {f('crm_l3_lr')} | {f('l1l2_lr')} "
                f"| {b.get('method', 'n/a')} {b.get('roc_auc', float('nan')):.3f} |"
            )
        (out / "comparison.md").write_text("# CRM comparison\n\n" + "\n".join(rows) + "\n")
        (out / "comparison.json").write_text(
            json.dumps(
                {k: {m: r.get(m) for m in r.get("methods", [])} for k, r in reports.items()},
                indent=1,
                default=str,
            )
        )
    print(f"wrote {out}")
    return 0
