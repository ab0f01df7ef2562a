"""``mnemoscope radar``: recall-vs-reasoning features, ensemble training, prediction and evaluation (RADAR)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from mnemoscope.cli.options import add_model_args, load_from_args


def _capture_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("features")
    g.add_argument(
        "--feature-set",
        choices=["paper", "measured"],
        default="paper",
        help="paper = Appendix D with its proxies; measured = causal features from real interventions "
        "(~2 extra batched forwards per prompt)",
    )
    g.add_argument(
        "--ablation", choices=["layer", "head"], default="layer", help="measured set: ablation unit"
    )
    g.add_argument(
        "--lens",
        choices=["final_norm", "raw"],
        default="final_norm",
        help="logit lens: apply the final norm before the LM head (default) or not",
    )
    g.add_argument(
        "--attention-entropy",
        choices=["row_mean", "sum"],
        default="row_mean",
        help="per-head entropy: mean over query rows (default) or the paper's literal double sum",
    )
    g.add_argument("--batch-size", type=int, default=8)
    g.add_argument("--seed", type=int, default=0)


def _configs(args: argparse.Namespace) -> tuple[Any, Any]:
    from mnemoscope.features.radar import RadarFeatureConfig
    from mnemoscope.trace.interventions import RadarCaptureConfig

    capture = RadarCaptureConfig(
        lens=args.lens, measured=args.feature_set == "measured", ablation=args.ablation, seed=args.seed
    )
    return capture, RadarFeatureConfig(attention_entropy=args.attention_entropy)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "radar",
        help="RADAR: is the model recalling or reasoning? (37 mechanistic features + ensemble)",
        description="RADAR (Kattamuri et al. 2025): logit-lens, attention and hidden-state features of one "
        "forward pass, classified by a 4-model ensemble (label 1 = recall, 0 = reasoning).",
    )
    rs = p.add_subparsers(dest="radar_command", metavar="SUBCOMMAND")

    f = rs.add_parser("features", help="prompts JSONL -> features JSONL (resumable)")
    add_model_args(f)
    _capture_args(f)
    f.add_argument("--input", required=True, metavar="FILE", help="JSONL of {id, prompt, label?, category?}")
    f.add_argument("--out", required=True, metavar="FILE", help="features JSONL (re-running resumes)")
    f.add_argument("--on-error", choices=["skip", "raise"], default="skip")
    f.set_defaults(func=_features)

    t = rs.add_parser("train", help="fit the ensemble on labelled prompts -> model file (joblib)")
    add_model_args(t)
    _capture_args(t)
    t.add_argument(
        "--input", metavar="FILE", help="labelled prompts JSONL (default: the shipped training set)"
    )
    t.add_argument("--features", metavar="FILE", help="features cache (default: OUT.features.jsonl)")
    t.add_argument(
        "--out", required=True, metavar="FILE", help="model file to write (pickle: keep it private)"
    )
    t.add_argument("--cv-folds", type=int, default=5)
    t.set_defaults(func=_train)

    pr = rs.add_parser("predict", help="classify prompts with a fitted model -> predictions JSONL")
    add_model_args(pr)
    pr.add_argument(
        "--radar", required=True, metavar="FILE", help="model file from 'radar train' (trusted only)"
    )
    pr.add_argument("--input", required=True, metavar="FILE")
    pr.add_argument("--out", required=True, metavar="FILE")
    pr.add_argument("--batch-size", type=int, default=8)
    pr.add_argument("--on-error", choices=["skip", "raise"], default="skip")
    pr.add_argument("--force", action="store_true", help="use the ensemble even on another model's features")
    pr.set_defaults(func=_predict)

    e = rs.add_parser("eval", help="train, test, CV, baselines, importance -> DIR/report.json")
    add_model_args(e)
    _capture_args(e)
    e.add_argument(
        "--train", metavar="FILE", help="labelled training prompts (default: the shipped training set)"
    )
    e.add_argument("--test", required=True, metavar="FILE", help="labelled test prompts")
    e.add_argument("--out", required=True, metavar="DIR")
    e.add_argument("--cv-folds", type=int, default=5)
    e.add_argument("--n-resamples", type=int, default=1000)
    e.add_argument("--no-importance", action="store_true", help="skip permutation importance")
    e.set_defaults(func=_eval)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _report_errors(errors: list[dict[str, Any]]) -> None:
    for err in errors:
        print(f"mnemoscope: skipped id {err['id']}: {err['message']}", file=sys.stderr)


def _features(args: argparse.Namespace) -> int:
    from mnemoscope.pipelines.radar import extract_features, read_prompts

    capture, fcfg = _configs(args)
    prompts = read_prompts(args.input)
    lm = load_from_args(args)
    rows, errors = extract_features(
        lm,
        prompts,
        args.out,
        capture=capture,
        features=fcfg,
        batch_size=args.batch_size,
        on_error=args.on_error,
        progress=not args.quiet,
    )
    _report_errors(errors)
    print(f"{len(rows)} prompts with features, {len(errors)} skipped -> {args.out}")
    return 0


def _train(args: argparse.Namespace) -> int:
    from mnemoscope.detectors.radar import RadarArtifact, RadarEnsemble, save_radar
    from mnemoscope.pipelines.radar import (
        cv_accuracy,
        extract_features,
        feature_matrix,
        read_prompts,
        settings_dict,
        shipped_path,
    )

    capture, fcfg = _configs(args)
    src = args.input or str(shipped_path("train"))
    prompts = read_prompts(src, require_label=True)
    lm = load_from_args(args)
    cache = args.features or f"{args.out}.features.jsonl"
    rows, errors = extract_features(
        lm,
        prompts,
        cache,
        capture=capture,
        features=fcfg,
        batch_size=args.batch_size,
        progress=not args.quiet,
    )
    _report_errors(errors)
    X, y = feature_matrix(rows, args.feature_set)
    ens = RadarEnsemble(random_state=args.seed).fit(X, y)
    cv = cv_accuracy(X, y, n_splits=args.cv_folds, seed=args.seed)
    settings = {**settings_dict(capture, fcfg), "feature_set": args.feature_set}
    art = RadarArtifact(
        ens,
        lm.info.to_dict(),
        settings,
        {
            "train": src,
            "n_train": len(rows),
            "cv_accuracy": cv["estimate"],
            "cv_ci": [cv["ci_low"], cv["ci_high"]],
        },
    )
    save_radar(art, args.out)
    print(
        f"fitted on {len(rows)} prompts; {args.cv_folds}-fold CV accuracy {cv['estimate']:.3f} "
        f"[{cv['ci_low']:.3f}, {cv['ci_high']:.3f}] -> {args.out}"
    )
    return 0


def _predict(args: argparse.Namespace) -> int:
    from mnemoscope.detectors.radar import load_radar
    from mnemoscope.features.radar import RadarFeatureConfig
    from mnemoscope.pipelines.radar import extract_features, feature_matrix, read_prompts
    from mnemoscope.trace.interventions import RadarCaptureConfig

    prompts = read_prompts(args.input)
    lm = load_from_args(args)
    art = load_radar(args.radar, fingerprint=lm.info.fingerprint, name=lm.info.name, force=args.force)
    s = art.settings
    capture = RadarCaptureConfig(**s["capture"])
    fcfg = RadarFeatureConfig(**s["features"])
    rows, errors = extract_features(
        lm,
        prompts,
        None,
        capture=capture,
        features=fcfg,
        batch_size=args.batch_size,
        on_error=args.on_error,
        progress=not args.quiet,
    )
    _report_errors(errors)
    if not rows:
        print("nothing to predict", file=sys.stderr)
        return 1
    X, _ = feature_matrix(rows, s["feature_set"], art.feature_names)
    ens = art.ensemble
    pred, p, conf, scores = ens.predict(X), ens.predict_proba(X)[:, 1], ens.confidence(X), ens.scores(X)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as fh:
        for i, r in enumerate(rows):
            fh.write(
                json.dumps(
                    {
                        "id": r.id,
                        "prediction": "recall" if pred[i] == 1 else "reasoning",
                        "label_pred": int(pred[i]),
                        "p_recall": float(p[i]),
                        "confidence": float(conf[i]),
                        **{k: float(v[i]) for k, v in scores.items()},
                        **({"label": r.label} if r.label is not None else {}),
                    }
                )
                + "\n"
            )
    print(f"{len(rows)} predictions ({int(pred.sum())} recall), {len(errors)} skipped -> {out}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    from mnemoscope.detectors.radar import RadarArtifact, save_radar
    from mnemoscope.pipelines.radar import (
        evaluate,
        extract_features,
        rds_rci_figure,
        read_prompts,
        settings_dict,
        shipped_path,
    )
    from mnemoscope.report import save_figure

    capture, fcfg = _configs(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    train_src = args.train or str(shipped_path("train"))
    train_p = read_prompts(train_src, require_label=True)
    test_p = read_prompts(args.test, require_label=True)
    lm = load_from_args(args)
    kw: dict[str, Any] = {
        "capture": capture,
        "features": fcfg,
        "batch_size": args.batch_size,
        "progress": not args.quiet,
    }
    train, e1 = extract_features(lm, train_p, out / "features_train.jsonl", **kw)
    test, e2 = extract_features(lm, test_p, out / "features_test.jsonl", **kw)
    report, ens, preds = evaluate(
        train,
        test,
        feature_set=args.feature_set,
        n_splits=args.cv_folds,
        seed=args.seed,
        n_resamples=args.n_resamples,
        importance=not args.no_importance,
    )
    from mnemoscope.provenance import provenance

    report.update(
        model=lm.info.to_dict(),
        train=train_src,
        test=args.test,
        settings=settings_dict(capture, fcfg),
        provenance=provenance(),
    )
    (out / "report.json").write_text(json.dumps(report, indent=1, default=float) + "\n")
    with (out / "predictions.jsonl").open("w") as fh:
        for row in preds:
            fh.write(json.dumps(row) + "\n")
    import numpy as np

    fig = rds_rci_figure(
        np.array([r["rds"] for r in preds]),
        np.array([r["rci"] for r in preds]),
        np.array([r["label"] for r in preds]),
        [r["category"] for r in preds],
    )
    save_figure(fig, out / "rds_rci.png")
    settings = {**settings_dict(capture, fcfg), "feature_set": args.feature_set}
    save_radar(RadarArtifact(ens, lm.info.to_dict(), settings, {"train": train_src}), out / "radar.joblib")
    print(
        f"RADAR ({args.feature_set}) on {report['n_test']} test prompts: accuracy {report['accuracy']:.3f}, "
        f"ROC-AUC {report['roc_auc']:.3f}; {args.cv_folds}-fold CV accuracy on {report['n_train']} training "
        f"prompts {report['cv_accuracy']:.3f} [{report['cv_accuracy_ci'][0]:.3f}, {report['cv_accuracy_ci'][1]:.3f}]"
    )
    for cat, acc in report["accuracy_by_category"].items():
        c, n = report["correct_by_category"][cat]
        print(f"  {cat}: {acc:.3f} ({c}/{n})")
    if e1 or e2:
        print(f"{len(e1) + len(e2)} prompts skipped", file=sys.stderr)
    print(f"-> {out}/report.json, {out}/predictions.jsonl, {out}/rds_rci.png, {out}/radar.joblib")
    return 0
