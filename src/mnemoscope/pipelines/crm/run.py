"""CRM end to end: extract -> evaluate -> causal analyses -> report files; and fitting.

The CLI (``mnemoscope crm ...``) and the benchmark scripts call these functions.

Files written by :func:`run_eval` into ``out``::

    traces/            the CRM folder of template A (or the chosen template)
    traces-<T>/        the prompt-control folders of the other templates
    report.json        one entry per method (roc_auc, roc_auc_ci, ...), protocol, analyses
    report.md          the paper's Tables 1-6 analogues
    layer_auc.png, lts_trajectory.png, roc.png, noise.png
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from mnemoscope.data.records import Record, RecordError
from mnemoscope.detectors.crm import ClassifierKind, crm_pipeline
from mnemoscope.detectors.crm_artifact import FittedCRM, from_pipeline, save_crm
from mnemoscope.errors import InputError
from mnemoscope.io import atomic_write_json
from mnemoscope.models.loader import LoadedModel
from mnemoscope.pipelines.crm.eval import CRMEvalConfig, evaluate, input_l1, run_method
from mnemoscope.pipelines.crm.extract import CRMExtractConfig, CRMFolder, extract, load_folder
from mnemoscope.provenance import provenance
from mnemoscope.report.figures import save_figure

__all__ = ["evaluate_folder", "fit_artifact", "fit_crm", "run_eval", "write_report"]

log = logging.getLogger(__name__)


def write_report(report: dict[str, Any], out: str | Path, *, title: str = "CRM evaluation") -> None:
    """report.json, report.md and the figures of one evaluation."""
    from mnemoscope.report import roc_figure
    from mnemoscope.report.crm import crm_markdown, layer_auc_figure, lts_trajectory_figure, noise_figure

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if "provenance" not in report:
        report = {**report, "provenance": provenance()}
    atomic_write_json(out / "report.json", report)
    (out / "report.md").write_text(crm_markdown(report, title))
    a = report.get("analyses", {})
    if a.get("layer_sweep", {}).get("layers"):
        save_figure(layer_auc_figure({title: a["layer_sweep"]}), out / "layer_auc.png", dpi=130)
    if a.get("lts_trajectories", {}).get("layers"):
        save_figure(lts_trajectory_figure(a["lts_trajectories"]), out / "lts_trajectory.png", dpi=130)
    if a.get("causal", {}).get("noise"):
        save_figure(noise_figure(a["causal"]), out / "noise.png", dpi=130)
    sc = report.get("oof_scores", {})
    if sc:
        y = np.asarray(sc["labels"])
        best = (report.get("best_likelihood") or {}).get("method")
        panel = {
            m: (np.asarray(sc[m]), y)
            for m in ("crm_lr", "crm_xgb", "crm_l3_lr", "l1l2_lr", "raw_pca8_diff")
            if m in sc
        }
        if best and best in report and "oof_scores" in report:
            pass  # likelihood scores are not cross-validated; their AUC is in the table
        if panel:
            save_figure(roc_figure({title: panel}), out / "roc.png", dpi=130)


def run_eval(
    lm: LoadedModel,
    records: Sequence[Record],
    out: str | Path,
    *,
    extract_config: CRMExtractConfig | None = None,
    eval_config: CRMEvalConfig | None = None,
    input_errors: Sequence[RecordError] = (),
    templates: Sequence[str] = (),
    causal: bool = True,
    same_topic: bool = True,
    blind: bool = True,
    overwrite: bool = False,
    progress: bool = True,
    title: str = "CRM evaluation",
) -> dict[str, Any]:
    """Extract (resumable), evaluate every method and analysis, write the report files.

    ``blind=True`` (default) also runs the blind baselines on the contexts and writes the
    shift diagnostic (``shift_warning``, ``shift_reason``) at the top of report.json.
    """
    from mnemoscope.pipelines.crm.causal import causal_analyses, vocab_back_projection

    ec = (extract_config or CRMExtractConfig()).resolved(lm)
    c = eval_config or CRMEvalConfig()
    out = Path(out)
    info = extract(
        lm, records, out / "traces", ec, input_errors=input_errors, overwrite=overwrite, progress=progress
    )
    folder = load_folder(out / "traces")
    template_data = {ec.template: folder.data}
    for t in templates:
        if t == ec.template:
            continue
        tc = replace(
            ec, template=t, attention_flow=False, static=False, logit_lens=False, gradient_norm=False
        )
        extract(lm, records, out / f"traces-{t}", tc, overwrite=overwrite, progress=progress)
        template_data[t] = load_folder(out / f"traces-{t}", keep_without=False).data
    report = evaluate_folder(
        folder,
        c,
        embedder=ec.embedder,
        template_data=template_data if len(template_data) > 1 else None,
        same_topic=same_topic,
        blind=blind,
        progress=progress,
    )
    report["model"] = lm.info.to_dict()
    report["extract"] = {k: v for k, v in info.items() if k != "model"}
    write_report(report, out, title=title)  # the causal runs below are long: keep what is done
    best_layers = report["analyses"].get("layer_sweep", {}).get("best") or []
    if causal and not best_layers:
        report["analyses"]["causal"] = {"error": "no layer sweep, so no peak layer to perturb"}
    elif causal:
        peak = best_layers[0]
        peak = max(1, min(int(peak), lm.info.n_layers))
        report["analyses"]["causal"] = causal_analyses(
            lm,
            folder.pairs,
            folder.data,
            c,
            peak_layer=peak,
            batch_size=ec.batch_size,
            chat=bool(ec.chat),
            progress=progress,
        )
    try:
        report["analyses"]["vocab"] = vocab_back_projection(lm, folder.data, c)
    except InputError as e:
        report["analyses"]["vocab"] = {"error": e.reason}
    write_report(report, out, title=title)
    return report


def evaluate_folder(
    folder: CRMFolder,
    config: CRMEvalConfig | None = None,
    *,
    embedder: str = "default",
    template_data: dict[str, Any] | None = None,
    same_topic: bool = True,
    blind: bool = True,
    progress: bool = True,
) -> dict[str, Any]:
    """Every method, the feature families, the blind baselines and the non-causal analyses of
    one extracted CRM folder (no model needed): the report dict before the causal analyses.

    ``embedder`` (the Level-1 encoder spec; ``"none"`` = none) also embeds the contexts (the
    same-topic control) and the queries (the ``L1(input)`` family).
    """
    c = config or CRMEvalConfig()
    ctx_emb = l1_in = enc = None
    contexts = [p.context for p in folder.pairs]
    if embedder != "none":
        from mnemoscope.models.embedder import load_embedder

        enc = load_embedder(embedder)
        ctx_emb = enc.encode(contexts)
        l1_in = input_l1(ctx_emb, enc.encode([p.query for p in folder.pairs]))
    has_text = any(t.strip() for t in contexts)
    return evaluate(
        folder.data,
        c,
        token_stats=folder.token_stats,
        texts=contexts if has_text else None,
        template_data=template_data,
        context_embeddings=ctx_emb if same_topic else None,
        progress=progress,
        l1_input=l1_in,
        blind=blind,
        # blind_embedding uses the packaged MiniLM; reuse the loaded one when Level 1 does too
        embedder=enc if embedder == "default" else None,
    )


def fit_artifact(
    folder: CRMFolder,
    out: str | Path,
    *,
    classifier: ClassifierKind | str = "lr",
    eval_config: CRMEvalConfig | None = None,
    levels: Sequence[str] | None = None,
    cv: bool = True,
    progress: Callable[[str], None] | None = None,
) -> FittedCRM:
    """Fit CRM on every sample of a CRM folder (:func:`fit_crm`) and save the artefact."""
    art = fit_crm(folder, classifier=classifier, eval_config=eval_config, levels=levels, cv=cv)
    save_crm(art, out)
    return art


def fit_crm(
    folder: CRMFolder,
    *,
    classifier: ClassifierKind | str = "lr",
    eval_config: CRMEvalConfig | None = None,
    levels: Sequence[str] | None = None,
    cv: bool = True,
) -> FittedCRM:
    """Fit CRM on every sample of ``folder.data`` and return the (unsaved) artefact.

    With ``cv=True`` the leakage-free CV AUC of the same pipeline is measured first and
    stored in the artefact's ``metrics``. ``classifier="none"`` fits directions and
    calibration statistics only (unlabelled data; the audit's anomaly rule needs no labels).
    """
    c = eval_config or CRMEvalConfig()
    data = folder.data
    has_l1 = "l1_embed_dist" in data.surface_names
    lv = tuple(levels) if levels else (("l1", "l2", "l3") if has_l1 else ("l2", "l3"))
    kw = {"direction": c.direction, "selection": c.selection, "variance_threshold": c.variance_threshold}
    settings = {
        "levels": list(lv),
        **kw,
        "kl_split": None,
        "extract": folder.meta.get("settings", {}),
        "eval": asdict(c),
    }
    metrics: dict[str, Any] = {}
    if classifier == "none":
        from mnemoscope.detectors.crm import LTSProjector

        if c.direction == "mean_diff":
            raise InputError(
                "the mean-difference direction needs labels; use --direction pc with --classifier none"
            )
        proj = LTSProjector(**kw).fit(data)  # type: ignore[arg-type]
        art = FittedCRM(
            layers=proj.layers_,
            directions=proj.directions_,
            lts_mean=np.asarray(proj.lts_mean_),
            lts_std=np.asarray(proj.lts_std_),
            surface_names=(),
            scaler_mean=None,
            scaler_scale=None,
            classifier="none",
            model=folder.meta["model"],
            settings=settings,
            metrics={"n": len(data)},
        )
        return art
    if data.labels is None:
        raise InputError("fitting a classifier needs a label on every record", field="label")
    y = np.asarray(data.labels)
    pipe = crm_pipeline(classifier=classifier, levels=lv, **kw)  # type: ignore[arg-type]
    if cv:
        res = run_method(pipe, data, y, replace(c, protocol="leakage-free"))
        metrics = {
            "cv_roc_auc": res.auc.estimate,
            "cv_roc_auc_ci": [res.auc.ci_low, res.auc.ci_high],
            "protocol": res.protocol,
        }
    metrics["n"] = len(y)
    pipe.set_params(clf__random_state=c.seed)
    pipe.fit(data, y)
    return from_pipeline(pipe, model=folder.meta["model"], settings=settings, metrics=metrics)


def load_reports(paths: Sequence[str | Path]) -> dict[str, dict[str, Any]]:
    """``{label: report}`` from report.json files or folders holding one."""
    out = {}
    for p in paths:
        path = Path(p)
        if path.is_dir():
            path = path / "report.json"
        if not path.is_file():
            raise InputError(f"no report.json at {p}")
        out[path.parent.name] = json.loads(path.read_text())
    return out
