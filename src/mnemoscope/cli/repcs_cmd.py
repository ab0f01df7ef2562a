"""``mnemoscope repcs``: calibrate, score and evaluate retrieval-path KL (RePCS)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from mnemoscope.cli.endpoint_args import add_endpoint_args
from mnemoscope.cli.options import add_chat_arg, add_engine_args, add_model_args, chat_for, load_from_args


def _detector_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("score")
    g.add_argument("--aggregate", choices=["sum", "mean"], default="sum", help="over steps (paper: sum)")
    g.add_argument(
        "--direction",
        choices=["forward", "reverse", "symmetric"],
        default="forward",
        help="forward = KL(P_rag || P_para) (paper)",
    )
    g.add_argument(
        "--estimator",
        choices=["full", "topk"],
        default="full",
        help="full-vocabulary KL, or the truncated top-k estimator (what an API's logprobs allow)",
    )
    g.add_argument("--k", type=int, default=None, help="top-k for --estimator topk (default: all kept, 20)")
    g.add_argument("--alpha", type=float, default=0.05, help="target false-positive rate on clean queries")
    g.add_argument("--delta", type=float, default=0.05, help="confidence of the DKW guarantee")
    g.add_argument(
        "--quantile",
        choices=["conformal", "paper"],
        default="conformal",
        help="tau rule: conformal order statistic (default, finite-sample guarantee) or the paper's "
        "np.quantile 'alpha-percentile'",
    )


def _trace_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("tracing")
    g.add_argument("--input", required=True, metavar="FILE", help="JSONL of {id, context, query, label?}")
    g.add_argument("--traces", metavar="DIR", help="trace folder (resumable; default: next to --out)")
    g.add_argument("--template", default="A")
    add_chat_arg(g)
    g.add_argument("--max-new-tokens", "-T", type=int, default=32)
    g.add_argument("--batch-size", type=int, default=8)
    g.add_argument("--on-error", choices=["skip", "raise"], default="skip")
    g.add_argument(
        "--answer-without",
        action="store_true",
        help="also generate the closed-book answer (to reuse traces made by 'bench verify')",
    )


def register(sub: Any) -> None:
    p = sub.add_parser(
        "repcs",
        help="retrieval-path KL: did the retrieved context change the answer?",
        description="RePCS: Z = KL(P_rag || P_para) over the first T answer positions; "
        "flag 'memorized' when Z < tau (tau = alpha-quantile of Z on clean queries).",
    )
    rs = p.add_subparsers(dest="repcs_command", metavar="SUBCOMMAND")

    c = rs.add_parser("calibrate", help="set tau on clean (label 0 / unlabelled) queries -> calibration JSON")
    add_model_args(c)
    _trace_args(c)
    _detector_args(c)
    c.add_argument("--out", required=True, metavar="FILE", help="calibration JSON to write")
    add_endpoint_args(c, prompts=True)
    c.set_defaults(func=_calibrate)

    s = rs.add_parser("score", help="score queries against a calibration (JSONL in, JSONL out, resumable)")
    add_model_args(s)
    s.add_argument(
        "--calibration",
        required=True,
        metavar="FILE|DIR",
        help="a `repcs calibrate` JSON, or an audit profile folder (`mnemoscope calibrate`)",
    )
    s.add_argument("--input", required=True, metavar="FILE")
    s.add_argument("--out", required=True, metavar="FILE", help="scores JSONL (re-running resumes)")
    s.add_argument("--batch-size", type=int, default=8)
    s.add_argument("--on-error", choices=["skip", "raise"], default="skip")
    s.add_argument(
        "--force", action="store_true", help="score even if the model differs from the calibration's"
    )
    add_engine_args(s)
    add_endpoint_args(s)
    s.set_defaults(func=_score)

    e = rs.add_parser(
        "eval", help="AUC with CI, FPR@95%%TPR, precision@10, held-out FPR vs alpha -> DIR/report.json"
    )
    add_model_args(e)
    _trace_args(e)
    _detector_args(e)
    e.add_argument("--out", required=True, metavar="DIR")
    e.add_argument(
        "--calibration", metavar="FILE", help="use this tau (default: calibrate on half the clean records)"
    )
    e.add_argument("--calibration-fraction", type=float, default=0.5)
    e.add_argument(
        "--selfcheck",
        type=int,
        default=0,
        metavar="N",
        help="also run the SelfCheck-style baseline with N no-context samples (slow)",
    )
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--n-resamples", type=int, default=1000)
    add_endpoint_args(e, prompts=True)
    e.set_defaults(func=_eval)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _detector(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from mnemoscope.detectors.repcs import RePCS

    return RePCS(
        alpha=args.alpha,
        aggregate=args.aggregate,
        direction=args.direction,
        estimator=args.estimator,
        k=args.k,
        delta=args.delta,
        max_steps=None,
    )


def _pair_config(template: str, chat: bool, T: int, answer_without: bool = False):  # type: ignore[no-untyped-def]
    from mnemoscope.trace import PairConfig, PromptBuilder

    return PairConfig(
        builder=PromptBuilder(template=template, chat=chat), max_new_tokens=T, answer_without=answer_without
    )


def _traced(args: argparse.Namespace, lm: Any, config: Any, default_dir: Path) -> tuple[list[Any], list[Any]]:
    """Trace the input file (resumable) and return (records, traces) aligned by id."""
    from mnemoscope.data import read_records
    from mnemoscope.errors import InputError
    from mnemoscope.trace import load_traces
    from mnemoscope.trace.pipeline import run_pairs

    records, errors = read_records(args.input, on_error=args.on_error)
    for e in errors:
        print(f"mnemoscope: skipped {args.input}: {e}", file=sys.stderr)
    if not records:
        raise InputError(f"{args.input}: no valid records")
    folder = Path(args.traces) if getattr(args, "traces", None) else default_dir
    summary = run_pairs(
        lm,
        records,
        folder,
        config=config,
        batch_size=args.batch_size,
        input_errors=errors,
        on_error=args.on_error,
        progress=not args.quiet,
    )
    for err in summary.errors[len(errors) :]:
        print(f"mnemoscope: skipped line {err['line']} (id {err['id']}): {err['message']}", file=sys.stderr)
    by_id = {t.id: t for t in load_traces(folder)}
    kept = [r for r in records if r.id in by_id]
    return kept, [by_id[r.id] for r in kept]


def _calibrate(args: argparse.Namespace) -> int:
    """One calibrate body for both backends: the backend supplies the traces, the detector and the
    identity (:func:`_local_calibrate_inputs`, ``endpoint_args.repcs_calibrate_inputs``)."""
    import numpy as np

    from mnemoscope.pipelines.repcs import calibration_hash

    out = Path(args.out)
    if args.endpoint:
        from mnemoscope.cli.endpoint_args import repcs_calibrate_inputs

        inputs = repcs_calibrate_inputs(args)
    else:
        inputs = _local_calibrate_inputs(args, out)
    records, traces = inputs["records"], inputs["traces"]
    labels = np.array([0 if r.label is None else r.label for r in records])
    det = inputs["detector"].fit(traces, labels)
    clean = [t for t, y in zip(traces, labels, strict=True) if y == 0]
    record = det.calibration_record(
        model=inputs["model"],
        pair_config=inputs["pair_config"],
        **inputs["record_extra"],
        calibration_data_sha256=calibration_hash(clean),
        input=args.input,
        n_memorized=int((labels == 1).sum()),
        empty_context_records=int(sum(t.identical_prompts for t in clean)),
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1, default=float) + "\n")
    b = record["bound"]
    print(
        f"tau = {record['tau']:.4f} nats ({inputs['over']}alpha {args.alpha}, n = {record['n']} clean queries, "
        f"T = {record['T']})"
    )
    print(
        f"guarantee: expected FPR <= alpha (conformal quantile); with prob. {1 - args.delta:.2f} the true FPR <= "
        f"{b['fpr_upper_bound']:.3f} (empirical {b['empirical_fpr']:.3f} + DKW {b['dkw_epsilon']:.3f})"
    )
    if b["paper_required_n"] is not None:
        print(
            f"paper bound: n >= 8 gamma^2 T / Delta^2 log(2/eps) = {b['paper_required_n']:.0f} "
            f"(gamma {b['gamma']:.2f}, Delta {b['delta_gap']:.2f}) -> {'met' if b['paper_bound_satisfied'] else 'NOT met'}"
        )
    else:
        print(f"paper bound: not measured ({b['delta_gap_method']})")
    print(f"-> {out}")
    return 0


def _local_inputs(args: argparse.Namespace, traces_dir: Path) -> tuple[dict[str, Any], Any, Any]:
    """What ``repcs calibrate`` and ``repcs eval`` need in process: the traces (resumable, into
    ``traces_dir``), the detector and the identity; with the loaded model and the pair settings."""
    lm = load_from_args(args)
    config = _pair_config(args.template, chat_for(args, lm), args.max_new_tokens, args.answer_without)
    records, traces = _traced(args, lm, config, traces_dir)
    inputs = {
        "records": records,
        "traces": traces,
        "detector": _detector(args),
        "model": lm.info.to_dict(),
        "pair_config": config.to_dict(),
        "over": "",
    }
    return inputs, lm, config


def _local_calibrate_inputs(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """``repcs calibrate`` in process: the traces next to OUT."""
    inputs, _, _ = _local_inputs(args, out.with_suffix(".traces"))
    return {**inputs, "record_extra": {}}


def _ray_score(args: argparse.Namespace) -> dict[str, Any]:
    from mnemoscope.cli.options import ray_model_from_args, ray_options_from_args
    from mnemoscope.errors import InputError
    from mnemoscope.pipelines.ray import ray_score_file

    if args.force:
        raise InputError("--force is not supported with --engine ray (each actor checks the model)")
    return ray_score_file(
        args.calibration,
        args.input,
        args.out,
        model=ray_model_from_args(args),
        on_error=args.on_error,
        options=ray_options_from_args(args),
    )


def _score(args: argparse.Namespace) -> int:
    from mnemoscope.pipelines.repcs import score_file

    if args.endpoint:
        from mnemoscope.cli.endpoint_args import repcs_score_endpoint

        res = repcs_score_endpoint(args)
    elif args.engine == "ray":
        res = _ray_score(args)
    else:
        res = score_file(
            load_from_args(args),
            args.calibration,
            args.input,
            args.out,
            batch_size=args.batch_size,
            on_error=args.on_error,
            progress=not args.quiet,
            check_model=not args.force,
        )
    for e in res["errors"]:
        where = f"line {e.get('line')}" + (f" (id {e['id']})" if e.get("id") is not None else "")
        field = f"field '{e['field']}': " if e.get("field") else ""
        print(f"mnemoscope: skipped {where}: {field}{e['message']}", file=sys.stderr)
    print(
        f"{res['scored']} scored, {res['already_done']} already done, {len(res['errors'])} skipped -> {res['out']}"
    )
    return 0


def _local_eval_inputs(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """``repcs eval`` in process: trace (resumable, into ``--traces`` or OUT/traces), and with
    ``--selfcheck`` sample closed-book answers for the SelfCheck baseline."""
    inputs, lm, config = _local_inputs(args, out / "traces")
    traces = inputs["traces"]
    samples = None
    if args.selfcheck and traces:
        from mnemoscope.trace import Tracer

        tracer = Tracer(lm, batch_size=args.batch_size)
        ids = [tracer.encode(t.prompt_without, chat=config.builder.chat) for t in traces]
        sampled = tracer.sample(ids, args.selfcheck, args.max_new_tokens, seed=args.seed)
        samples = [[lm.tokenizer.decode(s, skip_special_tokens=True) for s in group] for group in sampled]
    return {**inputs, "samples": samples, "report_extra": {}, "row_extra": {}}


def _eval(args: argparse.Namespace) -> int:
    """One eval path for both backends: the backend supplies the traces, detector and identity;
    :func:`~mnemoscope.pipelines.repcs.run_eval` checks the labels, evaluates and writes the report
    (with provenance) and the scores."""
    from mnemoscope.errors import InputError
    from mnemoscope.pipelines.repcs import run_eval

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.endpoint:
        from mnemoscope.cli.endpoint_args import repcs_eval_inputs

        got = repcs_eval_inputs(args)
    else:
        got = _local_eval_inputs(args, out)
    calibration = json.loads(Path(args.calibration).read_text()) if args.calibration else None
    try:
        res = run_eval(
            got["traces"],
            got["records"],
            got["detector"],
            out,
            calibration=calibration,
            calibration_fraction=args.calibration_fraction,
            seed=args.seed,
            n_resamples=args.n_resamples,
            samples=got.get("samples"),
            report={
                "model": got["model"],
                "input": args.input,
                "pair_config": got["pair_config"],
                **got["report_extra"],
            },
            row_extra=got["row_extra"],
        )
    except InputError as e:
        raise InputError(f"{args.input}: {e.reason}", field=e.field) from e
    r = res.report
    ci = r["roc_auc_ci"]
    print(
        f"RePCS{got['over']} on {r['n']} records ({r['n_pos']} memorized / {r['n_neg']} clean): "
        f"ROC-AUC {r['roc_auc']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}], FPR@95%TPR {r['fpr_at_95_tpr']}, "
        f"precision@10 {r['precision_at_10']}"
    )
    h = r.get("held_out")
    if h:
        print(
            f"tau {r['threshold']['tau']:.4f}: held-out realised FPR {h['realised_fpr']} vs alpha "
            f"{h['target_alpha']} ({h['n_clean']} clean); top-k estimator AUC {r['topk_estimator']['roc_auc']}"
        )
    print(f"-> {out}/report.json, {out}/scores.jsonl")
    return 0
